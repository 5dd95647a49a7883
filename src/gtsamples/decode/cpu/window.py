"""The Zstd window driver: a thread's chunks decompressed one window at a time, each window decoded at once.

Spec ("Payload reference", "Encodings and compression"): compression 1 is one
Zstd frame per chunk.  Require exactly the declared decoded length, with
bounded output even if a frame claims more: the declared length is the
output capacity, a frame that yields more or fewer bytes is
``DECODED_LENGTH_MISMATCH`` and any other failure ``ZSTD_DECOMPRESS_FAILED``
(:func:`gtsamples.format.libzstd.classify`).  Each chunk's checksum
(:mod:`.xxh64`) and, for Zstd, its frame structure (:mod:`..zstd_frames`) are
checked just before it is decompressed (:func:`check_stored`), on the thread
that decompresses it, while its stored bytes are in that core's cache;
compression 0 chunks are decoded in place.

Each thread decompresses its chunks into a window of :data:`WINDOW_BYTES`
(widened for a single larger chunk) and decodes the window
(:func:`.chunks.decode_chunks_range`) before the next, so decoded bytes are
read back from the core's cache and no batch-sized scratch buffer exists.
With libzstd a numba loop calls ``ZSTD_decompressDCtx`` for a whole range
without the GIL (:func:`decode_range`); where no libzstd loads,
python-zstandard decompresses chunk by chunk (:class:`RangeDecoder`).
"""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import zstandard

from ...format import libzstd
from ...format.constants import COMP_ZSTD
from ...format.libzstd import thread_cpu_ns, zstd_decompress_into
from ...format.zstd_frames import check_one_frame
from .chunks import M_ACTIVE, M_IN_SCRATCH, M_LENGTH, M_OFFSET, M_ROWS, decode_chunks_range
from .flags import CHECKSUM_MISMATCH, DECODED_LENGTH_MISMATCH, ZSTD_DECOMPRESS_FAILED
from .xxh64 import xxh64
from ...jit import njit


#: Decompressed bytes one thread holds at a time: chunks are decompressed into
#: this window and decoded before the next window, so the decoded bytes are
#: read back from the core's L2 cache instead of memory (and no batch-sized
#: scratch buffer exists).  A single larger chunk (at most 1 MiB) widens it.
WINDOW_BYTES = 512 << 10


@njit(nogil=True, inline="always")
def check_stored(data, meta, is_z, stored, hash_me, checksum, flags, j):
    """The checks before decompression, for chunk ``j`` (its stored bytes at
    ``data[meta[j, M_OFFSET]:+stored[j]]``, a range the host checked): XXH64 of the
    stored bytes against ``checksum[j]`` when ``hash_me[j]`` (``CHECKSUM_MISMATCH``),
    then, for an active Zstd chunk, the frame structure against the declared length
    (:func:`gtsamples.format.zstd_frames.check_one_frame`).  A chunk that fails either
    is deactivated: never decompressed or decoded."""
    if hash_me[j]:
        if xxh64(data, meta[j, M_OFFSET], stored[j]) != checksum[j]:
            flags[j] |= CHECKSUM_MISMATCH
            meta[j, M_ACTIVE] = 0
    if meta[j, M_ACTIVE] != 0 and is_z[j] != 0:
        f = check_one_frame(data, meta[j, M_OFFSET], stored[j], meta[j, M_LENGTH])
        if f != 0:
            flags[j] |= np.uint32(f)
            meta[j, M_ACTIVE] = 0


@njit(nogil=True)
def check_stored_range(data, meta, is_z, stored, hash_me, checksum, flags, lo, hi):
    """:func:`check_stored` for chunks ``lo <= j < hi`` (the python-zstandard path)."""
    for j in range(lo, hi):
        check_stored(data, meta, is_z, stored, hash_me, checksum, flags, j)


@njit(nogil=True)
def decompress_window(fn, dctx, data, window, cap, meta, is_z, stored, hash_me, checksum, flags, zresult, zfailed,
                      lo, hi):
    """Check (:func:`check_stored`) and decompress the chunks from ``lo`` on, the active
    Zstd ones into ``window`` with libzstd (``ZSTD_decompressDCtx`` at address ``fn``,
    context ``dctx``), until the next one would pass ``cap`` bytes; returns where it
    stopped (``> lo``).  Every chunk before that point was checked exactly once.

    A chunk alone in the window may pass ``cap`` (the host sizes ``window`` for
    the largest declared length).  The capacity given to libzstd is the
    declared length, so output stays bounded.  A chunk whose result is not
    exactly its declared length is deactivated, with the raw result in
    ``zresult`` and ``zfailed`` set, for the host to classify
    (:func:`gtsamples.format.libzstd.classify`).  Decoded chunks get
    ``M_IN_SCRATCH`` and their window offset in ``M_OFFSET``.
    """
    dbase = np.int64(data.ctypes.data)
    wbase = np.int64(window.ctypes.data)
    woff = 0
    j = lo
    while j < hi:
        if woff > 0 and meta[j, M_ACTIVE] != 0 and is_z[j] != 0 and woff + meta[j, M_LENGTH] > cap:
            break
        check_stored(data, meta, is_z, stored, hash_me, checksum, flags, j)
        if meta[j, M_ACTIVE] != 0 and is_z[j] != 0:
            d = meta[j, M_LENGTH]
            if woff + d > window.shape[0]:  # the host sized the window: unreachable
                r = np.int64(-1)  # ZSTD_error_GENERIC
            else:
                r = zstd_decompress_into(fn, dctx, wbase + woff, d, dbase + meta[j, M_OFFSET], stored[j])
            if r != d:
                zresult[j] = r
                zfailed[j] = 1
                meta[j, M_ACTIVE] = 0
            else:
                meta[j, M_IN_SCRATCH] = 1
                meta[j, M_OFFSET] = woff
                woff += d
        j += 1
    return j


@njit(nogil=True)
def decode_range(fn, dctx, clock, data, window, cap, meta, is_z, stored, hash_me, checksum, zresult, zfailed, lo, hi,
                 ts, seq, op, vals, bitmaps, want_bm, edges, flags, ns):
    """Chunks ``lo <= i < hi`` window by window (:func:`decompress_window`, then
    :func:`decode_chunks_range`) in one call: the thread takes the GIL once per range,
    not twice per window (a GIL hand-off stalls it while another thread runs Python).
    Adds the thread's CPU nanoseconds spent decompressing and decoding to ``ns[0]`` and
    ``ns[1]`` (``clock``: :data:`~gtsamples.format.libzstd.CLOCK_GETTIME_ADDR`; the checks
    count as decompressing): CPU time,
    because on a busy machine a step's wall time also counts the time its thread waited
    for a core."""
    tbuf = np.zeros(2, np.int64)
    k = lo
    while k < hi:
        ta = thread_cpu_ns(clock, tbuf)
        j = decompress_window(fn, dctx, data, window, cap, meta, is_z, stored, hash_me, checksum, flags, zresult,
                              zfailed, k, hi)
        tb = thread_cpu_ns(clock, tbuf)
        decode_chunks_range(data, window, meta, lo, k, j, ts, seq, op, vals, bitmaps, want_bm, edges, flags)
        ns[0] += tb - ta
        ns[1] += thread_cpu_ns(clock, tbuf) - tb
        k = j


@njit(nogil=True)
def _range_inputs(ch, meta, is_z, stored, checksum, cost):
    """:class:`RangeDecoder`'s per-chunk inputs from the chunk table ``ch`` in one pass:
    ``is_z`` (active Zstd), ``stored``, ``checksum`` and ``cost`` (decoded bytes of an
    active chunk, else 0).  Returns ``(rows of the active chunks, active Zstd chunks,
    their decoded bytes, the largest of those)``."""
    work = 0
    zn = 0
    zbytes = 0
    zmax = 0
    for i in range(ch.shape[0]):
        c = ch[i]
        active = meta[i, M_ACTIVE] != 0
        z = active and c["compression"] == COMP_ZSTD
        is_z[i] = 1 if z else 0
        stored[i] = c["stored_len"]
        checksum[i] = c["checksum"]
        d = np.int64(c["decoded_len"])
        cost[i] = d if active else 0.0
        if active:
            work += meta[i, M_ROWS]
        if z:
            zn += 1
            zbytes += d
            zmax = max(zmax, d)
    return work, zn, zbytes, zmax


def _classify_zstd_error(exc: BaseException) -> int:
    """Flag for a zstandard exception from ``decompress(max_output_size=declared)``.

    Output that does not fit the declared capacity is a length mismatch;
    everything else (corrupt blocks, content checksum, ...) a decompression failure.
    """
    msg = str(exc)
    if "did not decompress full frame" in msg or "too small" in msg:
        return DECODED_LENGTH_MISMATCH
    return ZSTD_DECOMPRESS_FAILED


def decompress_one(dctx, mv, start: int, stored: int, declared: int):
    """``(bytes | None, flag, detail)`` for one frame, never raising."""
    try:
        out = dctx.decompress(mv[start : start + stored], max_output_size=declared, allow_extra_data=False)
    except Exception as exc:  # zstandard.ZstdError, MemoryError, ... -> a flag
        return None, _classify_zstd_error(exc), f"zstd: {exc}"
    if len(out) != declared:
        return None, DECODED_LENGTH_MISMATCH, f"zstd produced {len(out)} bytes, declared {declared}"
    return out, 0, ""


def decompress_chunk(stored, declared: int, *, dctx=None, detail: bool = False):
    """Decompress one compression-1 chunk exactly as :func:`~.pipeline.decode_batch` does.

    ``stored``: the chunk's stored bytes (``bytes``, ``memoryview`` or any
    buffer of bytes); ``declared``: its declared decoded length, used as the
    output capacity.  Never raises on bad input; returns ``(decoded, flags)``:

    * ``(bytes, 0)``: exactly ``declared`` bytes;
    * ``(None, DECODED_LENGTH_MISMATCH)``: the frame yields more or fewer
      bytes than declared;
    * ``(None, ZSTD_DECOMPRESS_FAILED)``: zstandard rejects the frame.

    With ``detail=True`` a third element is the message the backend attaches
    to the error (``""`` on success).  It uses the libzstd that
    :func:`~.pipeline.decode_batch` calls (:mod:`..libzstd`) when there is one; otherwise
    python-zstandard with ``dctx``, a reusable ``zstandard.ZstdDecompressor``
    (one per thread), or a new one.

    This is only the decompression step: callers verify the XXH64 checksum and
    the frame structure (:func:`gtsamples.format.zstd_frames.check_zstd_frame`)
    first, as the backends do, because python-zstandard ignores the capacity
    when the frame declares a content size.  The GPU backend uses it to give a
    chunk nvCOMP could not decompress the CPU backend's exact flag.
    """
    mv = memoryview(stored)
    if mv.ndim != 1 or mv.format not in ("B", "b", "c"):
        mv = mv.cast("B")
    declared = int(declared)
    z = libzstd.get()
    if z is not None:  # the library decode_batch calls: the same result and classification
        src = np.frombuffer(mv, dtype=np.uint8)
        dst = np.empty(declared, dtype=np.uint8)
        r = z.decompress(z.dctx(), dst.ctypes.data, declared, src.ctypes.data, src.size)
        if r == declared:
            out, flag, msg = dst.tobytes(), 0, ""
        else:
            out = None
            flag, msg = libzstd.classify(z, r, declared)
    else:
        out, flag, msg = decompress_one(dctx if dctx is not None else zstandard.ZstdDecompressor(), mv, 0,
                                        mv.nbytes, declared)
    return (out, flag, msg) if detail else (out, flag)


_TLS = threading.local()


def thread_state():
    """This thread's python-zstandard context and decompression window."""
    st = getattr(_TLS, "state", None)
    if st is None:
        st = [zstandard.ZstdDecompressor(), np.empty(WINDOW_BYTES, dtype=np.uint8)]
        _TLS.state = st
    return st


def _window(st, need: int) -> np.ndarray:
    """This thread's window, grown to at least ``need`` bytes."""
    if st[1].shape[0] < need:
        st[1] = np.empty(need, dtype=np.uint8)
    return st[1]


@dataclasses.dataclass(eq=False)
class RangeDecoder:
    """Decompress and decode contiguous chunk ranges of one batch, window by window.

    One instance per :func:`~.pipeline.decode_batch_flags` call; :meth:`run` may execute
    on several threads at once for disjoint ranges: each writes only its own
    chunks' ``meta``/``flags``/``edges``/``zresult`` rows and output rows.
    Decompression goes through libzstd from a numba loop when
    :func:`gtsamples.format.libzstd.get` finds one (no GIL, no per-chunk
    Python), else through python-zstandard one chunk at a time.
    """

    data: np.ndarray  # the stored bytes
    meta: np.ndarray  # the chunk table (M_* columns)
    ch: np.ndarray  # ChunkBatch.chunks
    outputs: tuple  # (ts, seq, op, vals, bitmaps, want_bm)
    flags: np.ndarray  # per-chunk uint32 flag words
    edges: np.ndarray  # per chunk, the two bitmap bytes it shares with its neighbours
    hash_me: np.ndarray  # bool: the chunks whose checksum is checked (:func:`check_stored`)

    def __post_init__(self):
        ch, data = self.ch, self.data
        self.lib = libzstd.get()
        n = len(ch)
        self.is_z = np.empty(n, np.uint8)  # active Zstd chunks
        self.stored = np.empty(n, np.int64)
        self.checksum = np.empty(n, np.uint64)
        self.cost = np.empty(n, np.float64)  # decoded bytes of the active chunks (splits the work)
        #: rows of the active chunks, their Zstd chunks and decoded Zstd bytes, the largest of these
        self.work, self.zstd_chunks, self.zstd_bytes, self.max_declared = (
            int(x) for x in _range_inputs(ch, self.meta, self.is_z, self.stored, self.checksum, self.cost))
        if self.lib is not None:
            self.zresult = np.zeros(n, dtype=np.int64)
            self.zfailed = np.zeros(n, dtype=np.uint8)
        else:
            self.mv = memoryview(data)
            self.src = ch["src_offset"].tolist()
            self.declared = ch["decoded_len"].tolist()
        self.failures: list[tuple[int, int, str]] = []
        self.t_decompress = 0.0
        self.t_kernel = 0.0

    def run(self, lo: int, hi: int) -> None:
        st = thread_state()
        cap = WINDOW_BYTES
        window = _window(st, max(cap, self.max_declared))
        meta = self.meta
        ts, seq, op, vals, bitmaps, want_bm = self.outputs
        z = self.lib
        if z is not None:
            ns = np.zeros(2, np.int64)
            decode_range(z.decompress_addr, z.dctx(), libzstd.CLOCK_GETTIME_ADDR, self.data, window, cap, meta,
                         self.is_z, self.stored, self.hash_me, self.checksum, self.zresult, self.zfailed, lo, hi,
                         ts, seq, op, vals, bitmaps, want_bm, self.edges, self.flags, ns)
            self.t_decompress += float(ns[0]) * 1e-9  # summed over threads: CPU seconds, not wall
            self.t_kernel += float(ns[1]) * 1e-9
            return
        t_z = time.thread_time()
        check_stored_range(self.data, meta, self.is_z, self.stored, self.hash_me, self.checksum, self.flags, lo, hi)
        t_z = time.thread_time() - t_z
        t_k = 0.0
        k = lo
        while k < hi:
            ta = time.thread_time()
            j = self._decompress_window_py(st[0], window, cap, k, hi)
            tb = time.thread_time()
            decode_chunks_range(self.data, window, meta, lo, k, j, ts, seq, op, vals, bitmaps, want_bm, self.edges,
                                self.flags)
            t_z += tb - ta
            t_k += time.thread_time() - tb
            k = j
        self.t_decompress += t_z  # summed over threads: CPU seconds, not wall
        self.t_kernel += t_k

    def _decompress_window_py(self, dctx, window, cap: int, k: int, hi: int) -> int:
        """:func:`decompress_window` with python-zstandard (no libzstd found)."""
        meta, src, stored, declared = self.meta, self.src, self.stored, self.declared
        active = meta[:, M_ACTIVE]
        wmv = memoryview(window)
        placed: list[int] = []
        offs: list[int] = []
        woff = 0
        j = k
        while j < hi:
            if active[j] and self.is_z[j]:
                d = declared[j]
                if woff and woff + d > cap:
                    break
                out, f, msg = decompress_one(dctx, self.mv, src[j], stored[j], d)
                if f:
                    self.failures.append((j, f, msg))  # list.append is atomic
                    meta[j, M_ACTIVE] = 0
                else:
                    wmv[woff: woff + d] = out
                    placed.append(j)
                    offs.append(woff)
                    woff += d
            j += 1
        if placed:
            meta[placed, M_IN_SCRATCH] = 1
            meta[placed, M_OFFSET] = offs
        return j

    def collect_failures(self, flags: np.ndarray, detail: dict) -> None:
        """OR every decompression failure's flag into ``flags`` and its message into ``detail``."""
        if self.lib is not None and np.count_nonzero(self.zfailed):
            for i in np.flatnonzero(self.zfailed).tolist():
                f, msg = libzstd.classify(self.lib, int(self.zresult[i]), int(self.ch["decoded_len"][i]))
                flags[i] |= f
                detail[i] = msg
        for i, f, msg in self.failures:
            flags[i] |= f
            detail[i] = msg
