"""nvCOMP batched Zstd through ctypes, and the host checks that guard it.

Spec ("Payload reference", "Encodings and compression"): verify the XXH64
checksum of the stored bytes before decompression; compression 1 is exactly one
Zstd frame per chunk ending at the stored length; require exactly the declared
decoded length, with bounded output even if a frame claims more.

nvCOMP's Zstd decoder only promises correct behaviour on valid input (corrupt
input is undefined behaviour and can poison the CUDA context), so no frame
reaches it before :func:`precheck` has verified its checksum and structure.
Its output bound is not guaranteed either ("cannot be guaranteed" for
insufficient output), so it only gets frames whose decoded size the headers
prove (:func:`frame_verdicts`: a content size equal to the declared length, or
raw/RLE blocks only); the GPU backend decompresses the others on the host.

Layout of this module:

* pure functions over numpy arrays, testable without CuPy or a GPU:
  :func:`verify_checksums`, :func:`check_frames`, :func:`frame_verdicts`, :func:`precheck`,
  :func:`pointer_table`, :func:`plan_subbatches`, :func:`aligned_offsets`,
  :func:`result_flags`, :func:`estimate_temp_bytes`;
* :class:`NvcompLib`: the ctypes binding (works with libnvcomp 6.x and 5.x,
  picked at run time from ``nvcompGetProperties().version // 1000``);
* :class:`BatchedZstdDecompressor`: device tables in one upload, one
  ``nvcompBatchedZstdDecompressAsync`` per sub-batch sized to a temp budget,
  temp memory and tables kept alive until the stream has run the calls,
  statuses and actual sizes folded into the per-chunk status words on the
  device (``gts_fold_nvcomp_status``) or checked on the host
  (:func:`result_flags`).

Importing this module imports neither CuPy nor libnvcomp.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
from typing import Callable, Sequence

import numpy as np

from ...errors import DecodeErrorFlag, UnsupportedError
from ...runtime import PRANGE, ForkSafeLock
from ...format.constants import (
    COMP_RAW,
    COMP_ZSTD,
    KNOWN_COLUMN_ENCODINGS,
    KNOWN_COMPRESSIONS,
    MAX_CHUNK_DECODED,
    MAX_CHUNK_STORED,
)

__all__ = [
    "NVCOMP_SUCCESS",
    "NVCOMP_STATUS_NAMES",
    "TABLE_ROWS",
    "DEFAULT_TEMP_BUDGET",
    "verify_checksums",
    "check_frames",
    "frame_verdicts",
    "bad_length_detail",
    "limit_and_codec_flags",
    "precheck",
    "hash_mismatch_words",
    "pointer_table",
    "plan_subbatches",
    "aligned_offsets",
    "result_flags",
    "estimate_temp_bytes",
    "NvcompError",
    "NvcompUnavailableError",
    "GPU_EXTRA_HINT",
    "NvcompLib",
    "load_nvcomp",
    "BatchedZstdDecompressor",
]

F = DecodeErrorFlag

NVCOMP_SUCCESS = 0
#: nvcompStatus_t of nvCOMP 6.0 (nvcomp/shared_types.h; 5.x has a subset).
NVCOMP_STATUS_NAMES = {
    0: "nvcompSuccess",
    10: "nvcompErrorInvalidValue",
    11: "nvcompErrorNotSupported",
    12: "nvcompErrorCannotDecompress",
    13: "nvcompErrorBadChecksum",
    14: "nvcompErrorCannotVerifyChecksums",
    15: "nvcompErrorOutputBufferTooSmall",
    16: "nvcompErrorWrongHeaderLength",
    17: "nvcompErrorAlignment",
    18: "nvcompErrorChunkSizeTooLarge",
    19: "nvcompErrorCannotCompress",
    20: "nvcompErrorWrongInputLength",
    21: "nvcompErrorBatchSizeTooLarge",
    22: "nvcompErrorSubChunkCountTooLarge",
    23: "nvcompErrorSubChunkCountTooSmall",
    24: "nvcompErrorOutputBufferAlignmentTooSmall",
    1000: "nvcompErrorCudaError",
    10000: "nvcompErrorInternal",
}

#: Rows of the device pointer table, in this order, one uint64 column per chunk.
TABLE_ROWS = ("src_ptr", "src_bytes", "dst_capacity", "dst_ptr", "chunk")

#: Default temp-memory budget per nvCOMP call (bytes).
DEFAULT_TEMP_BUDGET = 512 << 20


# --------------------------------------------------------------------------- host checks


def verify_checksums(data: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Boolean array: XXH64 (seed 0) of each ``data[offset:offset+length]`` equals
    ``expected`` (the CPU backend's hashing, :func:`gtsamples.decode.cpu.xxh64.xxh64_matches`)."""
    from ..cpu.xxh64 import xxh64_matches

    return xxh64_matches(np.ascontiguousarray(data, dtype=np.uint8), offsets, lengths, expected)


def check_frames(data: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, declared: np.ndarray,
                 exact: bool = False):  # fmt: skip
    """Structural Zstd frame check (one frame, content size == declared, ends at
    the stored length, ...): uint32 flags per chunk.  Reuses the CPU backend's
    numba check, ``gtsamples.format.zstd_frames.check_zstd_frames``.

    ``exact=True`` returns ``(flags, exact)``: ``exact[i]`` when frame ``i``
    passes and its headers prove it decodes to exactly ``declared[i]`` bytes
    (:func:`gtsamples.format.zstd_frames.check_zstd_frames_exact`); only such
    frames may reach nvCOMP, whose output bound is not guaranteed."""
    from ...format.zstd_frames import check_zstd_frames, check_zstd_frames_exact

    n = len(offsets)
    flags = np.zeros(n, dtype=np.uint32)
    proven = np.zeros(n, dtype=np.uint8)
    if n:
        # exactly the types the CPU backend passes (writeable uint8[::1], uint64,
        # uint32, uint32, uint32): one cached numba specialization
        data = np.ascontiguousarray(data, dtype=np.uint8).reshape(-1)
        if not data.flags.writeable:
            data = data.copy()
        args = (
            data,
            np.ascontiguousarray(offsets, dtype=np.uint64),
            np.ascontiguousarray(lengths, dtype=np.uint32),
            np.ascontiguousarray(declared, dtype=np.uint32),
            flags,
        )
        if exact:
            PRANGE.call(check_zstd_frames_exact, *args, proven)
        else:
            PRANGE.call(check_zstd_frames, *args)
    return (flags, proven.astype(bool)) if exact else flags


def limit_and_codec_flags(chunks: np.ndarray, data_len: int) -> tuple[np.ndarray, np.ndarray]:
    """The CPU backend's pre-decompression rules that need no payload bytes.

    Returns ``(limits, codec)`` uint32 flag words per chunk:

    * ``limits``: ``BAD_LENGTH`` when the stored bytes lie outside the fetched
      buffer or the chunk exceeds the spec's limits (1 MiB decoded, 1 MiB +
      64 KiB stored).  Such a chunk is not even hashed.
    * ``codec``: ``UNSUPPORTED_COMPRESSION`` (unknown compression ID),
      ``UNSUPPORTED_ENCODING`` (unknown column encoding) and, for compression 0,
      ``DECODED_LENGTH_MISMATCH`` unless stored == decoded.  These are ORed in
      whatever the checksum says.
    """
    n = len(chunks)
    limits = np.zeros(n, dtype=np.uint32)
    codec = np.zeros(n, dtype=np.uint32)
    if n == 0:
        return limits, codec
    off = chunks["src_offset"].astype(np.uint64)
    end = off + chunks["stored_len"].astype(np.uint64)
    outside = (end > np.uint64(data_len)) | (end < off)
    too_big = (chunks["decoded_len"] > MAX_CHUNK_DECODED) | (chunks["stored_len"] > MAX_CHUNK_STORED)
    limits[outside | too_big] = F.BAD_LENGTH
    comp = chunks["compression"]
    codec[~np.isin(comp, np.array(KNOWN_COMPRESSIONS, dtype=comp.dtype))] |= np.uint32(F.UNSUPPORTED_COMPRESSION)
    enc = chunks["encoding"]
    codec[~np.isin(enc, np.array(KNOWN_COLUMN_ENCODINGS, dtype=enc.dtype))] |= np.uint32(F.UNSUPPORTED_ENCODING)
    raw_bad = (comp == COMP_RAW) & (chunks["stored_len"] != chunks["decoded_len"])
    codec[raw_bad] |= np.uint32(F.DECODED_LENGTH_MISMATCH)
    return limits, codec


def bad_length_detail(chunks: np.ndarray, data_len: int, limits: np.ndarray) -> dict[int, str]:
    """The message text the CPU backend attaches to ``BAD_LENGTH`` chunks (the
    first 16), keyed by chunk index, so both backends' errors read alike."""
    bad = np.flatnonzero(limits & np.uint32(F.BAD_LENGTH))[:16]
    if bad.size == 0:
        return {}
    off = chunks["src_offset"][bad].astype(np.uint64)
    end = off + chunks["stored_len"][bad].astype(np.uint64)
    outside = (end > np.uint64(data_len)) | (end < off)
    return {
        int(i): "stored bytes lie outside the fetched buffer" if o
        else f"chunk exceeds {MAX_CHUNK_STORED} stored / {MAX_CHUNK_DECODED} decoded bytes"
        for i, o in zip(bad.tolist(), outside.tolist())
    }  # fmt: skip


def frame_verdicts(chunks: np.ndarray, data: np.ndarray, flags: np.ndarray, *, checksums: bool) -> np.ndarray:
    """The payload half of :func:`precheck`, in place: ORs ``CHECKSUM_MISMATCH``
    (``checksums=True``; chunks without ``BAD_LENGTH``) and the frame flags
    (compression-1 chunks still without a flag) into ``flags``, which holds the
    descriptor flags (:func:`limit_and_codec_flags`: ``limits | codec``).
    Returns ``proven`` (bool per chunk): a compression-1 chunk without a flag
    whose frame headers prove its decoded size (see :func:`check_frames`)."""
    n = len(chunks)
    proven = np.zeros(n, dtype=bool)
    if n == 0:
        return proven
    off = chunks["src_offset"].astype(np.uint64)
    stored = chunks["stored_len"].astype(np.uint64)
    if checksums:
        todo = np.flatnonzero((flags & np.uint32(F.BAD_LENGTH)) == 0)
        ok = verify_checksums(data, off[todo], stored[todo], chunks["checksum"][todo])
        flags[todo[~ok]] |= np.uint32(F.CHECKSUM_MISMATCH)
    z = np.flatnonzero((chunks["compression"] == COMP_ZSTD) & (flags == 0))
    if z.size:
        f, exact = check_frames(data, off[z], stored[z], chunks["decoded_len"][z].astype(np.uint64), exact=True)
        flags[z] |= f
        proven[z] = exact
    return proven


def precheck(chunks: np.ndarray, data: np.ndarray, *, checksums: bool = True) -> np.ndarray:
    """Per-chunk flags found before decompression, exactly as the CPU backend
    (``gtsamples.decode.cpu.decode_batch_flags``) computes them:

    1. ``BAD_LENGTH`` for chunks outside the buffer or over the limits;
    2. ``CHECKSUM_MISMATCH`` for the other chunks (skipped with
       ``checksums=False``: the device hashes, see :func:`hash_mismatch_words`);
    3. ORed in for every chunk: unknown compression / encoding, raw length
       mismatch (:func:`limit_and_codec_flags`);
    4. the structural Zstd frame check (:func:`check_frames`) for compression-1
       chunks without any flag so far.

    ``chunks`` is a ``CHUNK_DTYPE`` array (``src_offset`` indexes ``data``).
    """
    if len(chunks) == 0:
        return np.zeros(0, dtype=np.uint32)
    limits, codec = limit_and_codec_flags(chunks, len(data))
    flags = limits | codec  # the codec flags are ORed in whatever the checksum says
    frame_verdicts(chunks, data, flags, checksums=checksums)
    return flags


def hash_mismatch_words(chunks: np.ndarray, data_len: int) -> tuple[np.ndarray, np.ndarray]:
    """For device hashing: ``(hashed, on_mismatch)``.  ``hashed`` are the chunk
    indices the CPU backend hashes (no ``BAD_LENGTH``); ``on_mismatch`` is the
    whole status word such a chunk ends with when its checksum differs
    (``CHECKSUM_MISMATCH`` plus the codec flags; no frame flags, since the
    frame of a chunk with a bad checksum is never examined)."""
    limits, codec = limit_and_codec_flags(chunks, data_len)
    hashed = np.flatnonzero(limits == 0)
    return hashed, codec[hashed] | np.uint32(F.CHECKSUM_MISMATCH)


# --------------------------------------------------------------------------- tables and planning


def aligned_offsets(sizes: np.ndarray, align: int) -> tuple[np.ndarray, int]:
    """Offsets placing ``sizes`` end to end, each start a multiple of ``align``;
    and the total size."""
    sizes = np.asarray(sizes, dtype=np.uint64)
    if sizes.size == 0:
        return np.zeros(0, dtype=np.uint64), 0
    a = np.uint64(align)
    padded = (sizes + a - np.uint64(1)) // a * a
    offsets = np.zeros(sizes.size, dtype=np.uint64)
    np.cumsum(padded[:-1], out=offsets[1:])
    return offsets, int(offsets[-1] + padded[-1])


def pointer_table(
    src_ptr: np.ndarray, src_bytes: np.ndarray, dst_ptr: np.ndarray, dst_capacity: np.ndarray, chunk: np.ndarray
) -> np.ndarray:
    """The uint64 table nvCOMP reads, rows in :data:`TABLE_ROWS` order: shape
    ``(5, n)``, C order, so every row is a contiguous ``size_t``/pointer array
    and a sub-batch ``[a, b)`` is ``table[:, a:b]`` of each row."""
    n = len(src_ptr)
    t = np.empty((len(TABLE_ROWS), n), dtype=np.uint64)
    t[0] = src_ptr
    t[1] = src_bytes
    t[2] = dst_capacity
    t[3] = dst_ptr
    t[4] = chunk
    return t


def estimate_temp_bytes(num_chunks: int, max_chunk: int, total: int) -> int:
    """Measured model of nvCOMP 5.3/6.0 Zstd temp size (measured):
    about 3 x total + 6,936 B x max(chunks, total / 128 KiB)."""
    return 3 * total + 6936 * max(num_chunks, -(-total // (128 << 10))) + (256 << 10)


def plan_subbatches(
    declared: np.ndarray, budget: int, temp_fn: Callable[[int, int, int], int]
) -> list[tuple[int, int]]:
    """Split chunks (in order) into ``[a, b)`` runs whose nvCOMP temp size,
    ``temp_fn(num_chunks, max_chunk_bytes, total_bytes)``, fits ``budget``.

    Each run is the longest prefix of the rest that fits (binary search: temp
    size grows with every argument), and at least one chunk.  O(log n) calls of
    ``temp_fn`` per run.
    """
    declared = np.asarray(declared, dtype=np.uint64)
    n = declared.size
    out: list[tuple[int, int]] = []
    if n == 0:
        return out
    csum = np.concatenate([[0], np.cumsum(declared, dtype=np.uint64)])
    a = 0
    while a < n:
        runmax = np.maximum.accumulate(declared[a:])

        def fits(b: int) -> bool:
            return temp_fn(b - a, int(runmax[b - a - 1]), int(csum[b] - csum[a])) <= budget

        lo, hi = a + 1, n  # a+1 always taken
        if fits(hi):
            lo = hi
        else:
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if fits(mid):
                    lo = mid
                else:
                    hi = mid
        out.append((a, lo))
        a = lo
    return out


def result_flags(statuses: np.ndarray, actual: np.ndarray, declared: np.ndarray) -> np.ndarray:
    """Flags from nvCOMP's per-chunk results (host mirror of gts_status.cuh):
    a failed status is ``ZSTD_DECOMPRESS_FAILED``; success with a size other
    than the declared one is ``DECODED_LENGTH_MISMATCH``."""
    statuses = np.asarray(statuses)
    flags = np.zeros(statuses.shape, dtype=np.uint32)
    flags[statuses != NVCOMP_SUCCESS] = F.ZSTD_DECOMPRESS_FAILED
    flags[(statuses == NVCOMP_SUCCESS) & (np.asarray(actual, np.uint64) != np.asarray(declared, np.uint64))] = (
        F.DECODED_LENGTH_MISMATCH
    )
    return flags


# --------------------------------------------------------------------------- ctypes binding


class NvcompError(RuntimeError):
    """libnvcomp could not be loaded or a call failed to launch."""


#: How to get libnvcomp: what the errors about it say.
GPU_EXTRA_HINT = "pip install 'gtsamples[gpu]'"


class NvcompUnavailableError(UnsupportedError, NvcompError):
    """No usable libnvcomp, and Zstd chunks need it on the GPU: a
    :class:`gtsamples.UnsupportedError` (and still an :class:`NvcompError`)."""


class _Properties(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("cudart_version", ctypes.c_uint32)]


class _DecompressOpts(ctypes.Structure):
    # nvcompBatchedZstdDecompressOpts_t: 64 bytes, passed by value (5.x and 6.x)
    _fields_ = [("backend", ctypes.c_int), ("reserved", ctypes.c_char * 60)]


class _Alignments(ctypes.Structure):
    _fields_ = [("input", ctypes.c_size_t), ("output", ctypes.c_size_t), ("temp", ctypes.c_size_t)]


_sz = ctypes.c_size_t
_vp = ctypes.c_void_p
_st = ctypes.c_int  # nvcompStatus_t


def _open_library() -> ctypes.CDLL:
    errors = []
    path = os.environ.get("GTSAMPLES_NVCOMP_LIBRARY")
    if path:
        try:
            return ctypes.CDLL(path, ctypes.RTLD_LOCAL)
        except OSError as e:  # pragma: no cover - environment specific
            errors.append(f"{path}: {e}")
    try:
        from nvidia.libnvcomp import load as _load  # nvidia-libnvcomp-cu13 wheel (6.x)

        lib = _load.load_library()
        if lib is not None:
            return lib
    except Exception as e:  # pragma: no cover - environment specific
        errors.append(f"nvidia.libnvcomp: {e}")
    for name in ("libnvcomp.so.6", "libnvcomp.so.5", "libnvcomp.so"):
        try:
            return ctypes.CDLL(name, ctypes.RTLD_LOCAL)
        except OSError as e:
            errors.append(f"{name}: {e}")
    # a 5.x wheel (as pinned by libcudf) ships libnvcomp.so.5 in the same folder
    try:
        import nvidia.libnvcomp as pkg

        for d in pkg.__path__:
            for sub in ("lib64", "lib"):
                for so in ("libnvcomp.so.6", "libnvcomp.so.5"):
                    p = os.path.join(d, sub, so)
                    if os.path.isfile(p):
                        return ctypes.CDLL(p, ctypes.RTLD_LOCAL)
    except Exception as e:
        errors.append(f"nvidia.libnvcomp package: {e}")
    raise NvcompUnavailableError(
        f"Zstd chunks on the GPU need nvCOMP, and libnvcomp could not be loaded ({GPU_EXTRA_HINT} "
        "installs nvidia-libnvcomp-cu13): " + "; ".join(errors))


class NvcompLib:
    """The few libnvcomp entry points gtsamples uses, bound with exact argtypes."""

    def __init__(self, lib: ctypes.CDLL | None = None):
        self.lib = lib if lib is not None else _open_library()
        L = self.lib
        L.nvcompGetProperties.argtypes = [ctypes.POINTER(_Properties)]
        L.nvcompGetProperties.restype = _st
        props = _Properties()
        self._check(L.nvcompGetProperties(ctypes.byref(props)), "nvcompGetProperties")
        self.version = int(props.version)
        self.cudart_version = int(props.cudart_version)
        self.major = self.version // 1000
        if self.major not in (5, 6):
            raise NvcompUnavailableError(f"libnvcomp {self.version}: only 5.x and 6.x are supported "
                                         f"({GPU_EXTRA_HINT} installs a supported one)")
        if self.major >= 6:
            f = L.nvcompBatchedZstdDecompressGetTempSize
            f.argtypes = [_sz, _sz, _DecompressOpts, ctypes.POINTER(_sz), _sz, _vp]
        else:
            f = L.nvcompBatchedZstdDecompressGetTempSizeAsync
            f.argtypes = [_sz, _sz, _DecompressOpts, ctypes.POINTER(_sz), _sz]
        f.restype = _st
        self._temp = f
        d = L.nvcompBatchedZstdDecompressAsync
        d.argtypes = [_vp, _vp, _vp, _vp, _sz, _vp, _sz, _vp, _DecompressOpts, _vp, _vp]
        d.restype = _st
        self._decompress = d
        a = L.nvcompBatchedZstdDecompressGetRequiredAlignments
        a.argtypes = [_DecompressOpts, ctypes.POINTER(_Alignments)]
        a.restype = _st
        al = _Alignments()
        self._check(a(self.opts(), ctypes.byref(al)), "nvcompBatchedZstdDecompressGetRequiredAlignments")
        self.alignment = (int(al.input), int(al.output), int(al.temp))
        try:
            L.nvcompGetStatusString.argtypes = [_st]
            L.nvcompGetStatusString.restype = ctypes.c_char_p
        except AttributeError:  # pragma: no cover
            pass

    @staticmethod
    def opts() -> _DecompressOpts:
        return _DecompressOpts(0, b"")  # NVCOMP_DECOMPRESS_BACKEND_DEFAULT, reserved zero

    def status_string(self, status: int) -> str:
        try:
            s = self.lib.nvcompGetStatusString(status)
            if s:
                return s.decode()
        except Exception:  # pragma: no cover
            pass
        return NVCOMP_STATUS_NAMES.get(status, f"nvcompStatus {status}")

    def _check(self, status: int, what: str) -> None:
        if status != NVCOMP_SUCCESS:
            raise NvcompError(f"{what} failed: {NVCOMP_STATUS_NAMES.get(status, status)}")

    def temp_size(self, num_chunks: int, max_chunk: int, total: int, stream: int = 0) -> int:
        """Temp bytes for one DecompressAsync call (enqueues nothing)."""
        out = _sz(0)
        if self.major >= 6:
            st = self._temp(num_chunks, max_chunk, self.opts(), ctypes.byref(out), total, _vp(stream or None))
        else:
            st = self._temp(num_chunks, max_chunk, self.opts(), ctypes.byref(out), total)
        self._check(st, "nvcompBatchedZstdDecompressGetTempSize")
        return int(out.value)

    def decompress_async(
        self,
        src_ptrs: int,
        src_bytes: int,
        dst_capacity: int,
        dst_actual: int,
        num_chunks: int,
        temp_ptr: int,
        temp_bytes: int,
        dst_ptrs: int,
        statuses: int,
        stream: int,
    ) -> None:
        """nvcompBatchedZstdDecompressAsync; every pointer is a device address."""
        st = self._decompress(
            _vp(src_ptrs), _vp(src_bytes), _vp(dst_capacity), _vp(dst_actual), num_chunks,
            _vp(temp_ptr or None), temp_bytes, _vp(dst_ptrs), self.opts(), _vp(statuses), _vp(stream or None),
        )  # fmt: skip
        self._check(st, "nvcompBatchedZstdDecompressAsync")


#: The process's library, loaded once under :data:`_LIB_LOCK` and kept for the process's life.
_LIB: NvcompLib | None = None
_LIB_LOCK = ForkSafeLock()


def load_nvcomp() -> NvcompLib:
    """The process-wide :class:`NvcompLib`.  Raises :class:`NvcompUnavailableError`
    (an ``UnsupportedError`` naming the ``gpu`` extra) when no supported
    libnvcomp loads, :class:`NvcompError` when a call into it fails.  Concurrent
    first calls load it once (a second library object would be dropped)."""
    global _LIB
    if _LIB is None:
        with _LIB_LOCK:
            if _LIB is None:
                _LIB = NvcompLib()
    return _LIB


# --------------------------------------------------------------------------- device driver


@dataclasses.dataclass
class ZstdJobs:
    """Chunks to decompress: device addresses and sizes (host numpy arrays)."""

    src_ptr: np.ndarray  # uint64
    src_bytes: np.ndarray  # uint64
    dst_ptr: np.ndarray  # uint64
    declared: np.ndarray  # uint64 (= output capacity)
    chunk: np.ndarray  # uint64, index into the per-chunk status words

    def __len__(self) -> int:
        return len(self.src_ptr)


class BatchedZstdDecompressor:
    """Runs nvCOMP over many chunks on the device's current stream.

    ``run`` uploads the pointer table in one copy (unless given one already on
    the device), plans sub-batches that fit ``temp_budget``, enqueues one
    DecompressAsync per sub-batch reusing one temp buffer, and leaves nvCOMP's
    statuses and actual sizes on the device: the GPU backend folds them into
    the status words with the ``gts_fold_nvcomp_status`` kernel (no host round
    trip); ``host_flags`` brings them back and applies :func:`result_flags`.

    Device memory and the stream come from ``dev`` (default: CuPy's, through
    ``gtsamples.decode.gpu.CupyDevice``; the tests' emulated device runs this
    very code): ``empty``, ``upload``, ``ptr``, ``stream_ptr`` and
    ``keep_until_done``.  The temp buffer and the device tables nvCOMP reads
    are handed to ``keep_until_done`` after the last call: they stay alive
    until the stream has completed that work, whatever stream later reuses
    their memory (not only while all work shares one stream).
    """

    def __init__(self, lib: NvcompLib | None = None, temp_budget: int = DEFAULT_TEMP_BUDGET, dev=None):
        self.lib = lib or load_nvcomp()
        self.temp_budget = int(temp_budget)
        self.dev = dev
        self.last_plan: list[tuple[int, int]] = []
        self.last_temp_bytes = 0

    def _device(self):
        if self.dev is None:  # the device owns the decompressor, not the other way round (no import cycle)
            raise ValueError("BatchedZstdDecompressor needs its device (dev=gtsamples.decode.gpu.CupyDevice())")
        return self.dev

    def plan(self, declared: np.ndarray, stream: int | None = None) -> list[tuple[int, int]]:
        """Sub-batches ``[a, b)`` of chunks (in order) whose temp size fits the
        budget (:func:`plan_subbatches` with the library's own temp sizing).
        Host only: enqueues nothing."""
        if stream is None:
            stream = self._device().stream_ptr()
        return plan_subbatches(declared, self.temp_budget, lambda c, m, t: self.lib.temp_size(c, m, t, stream))

    def run(self, jobs: ZstdJobs, device_table=None, plan: list[tuple[int, int]] | None = None,
            before: Callable[[int], None] | None = None):  # fmt: skip
        """Enqueue decompression of ``jobs``.  Returns ``(statuses, actual)``
        device arrays (int32, uint64).  ``device_table`` may be a device uint64
        array already holding :func:`pointer_table` (e.g. part of a larger
        upload).  ``plan``: the sub-batches (default :meth:`plan`);
        ``before(k)`` is called before sub-batch ``k`` is enqueued (the GPU
        backend makes the stream wait there for the H2D copy of its frames)."""
        dev = self._device()
        n = len(jobs)
        d_st = dev.empty(n, np.int32)
        d_actual = dev.empty(n, np.uint64)
        if n == 0:
            return d_st, d_actual
        if device_table is None:
            device_table = dev.upload(pointer_table(jobs.src_ptr, jobs.src_bytes, jobs.dst_ptr, jobs.declared,
                                                    jobs.chunk))  # one H2D copy; fmt: skip
        if device_table.size < len(TABLE_ROWS) * n:
            raise ValueError(f"device table of {device_table.size} words for {n} jobs")
        stream = dev.stream_ptr()
        if plan is None:
            plan = self.plan(jobs.declared, stream)
        if not plan or plan[0][0] != 0 or plan[-1][1] != n or any(p[1] != q[0] for p, q in zip(plan, plan[1:])):
            raise ValueError(f"sub-batch plan {plan[:4]}... does not tile the {n} jobs")
        temps = []
        for a, b in plan:
            dec = jobs.declared[a:b]
            temps.append(self.lib.temp_size(b - a, int(dec.max()), int(dec.sum()), stream))
        temp_bytes = max(temps)
        d_temp = dev.empty(max(temp_bytes, 8), np.uint8)
        self.last_plan, self.last_temp_bytes = list(plan), temp_bytes
        # row r of the (5, n) table starts at word r * n; sub-batch [a, b) at word a of each row
        row = {name: dev.ptr(device_table) + 8 * i * n for i, name in enumerate(TABLE_ROWS)}
        st_ptr, actual_ptr, temp_ptr = dev.ptr(d_st), dev.ptr(d_actual), dev.ptr(d_temp)
        try:
            for k, ((a, b), t) in enumerate(zip(plan, temps)):
                if before is not None:
                    before(k)
                self.lib.decompress_async(
                    row["src_ptr"] + 8 * a,
                    row["src_bytes"] + 8 * a,
                    row["dst_capacity"] + 8 * a,
                    actual_ptr + 8 * a,
                    b - a,
                    temp_ptr,
                    t,
                    row["dst_ptr"] + 8 * a,
                    st_ptr + 4 * a,
                    stream,
                )
        finally:
            # alive until the stream has passed every call enqueued above
            dev.keep_until_done((device_table, d_temp, d_st, d_actual))
        return d_st, d_actual

    def host_flags(self, jobs: ZstdJobs, d_st, d_actual) -> np.ndarray:
        dev = self._device()
        return result_flags(dev.to_host(d_st), dev.to_host(d_actual), jobs.declared)


def stored_chunks_need_repack(src_offsets: Sequence[int] | np.ndarray, align: int) -> bool:
    """True when nvCOMP's input alignment is not met by the chunks' offsets
    (6.0 requires 1; older builds may require more)."""
    if align <= 1:
        return False
    return bool((np.asarray(src_offsets, dtype=np.uint64) % np.uint64(align)).any())
