"""CPU decode backend: XXH64 -> batched Zstd -> numba column kernels.

:func:`decode_batch` decodes a whole :class:`~gtsamples.batch.ChunkBatch` at
once.  Every step is batch-wide and computes a per-chunk
:class:`~gtsamples.errors.DecodeErrorFlag` word; the host raises once, through
:func:`gtsamples.batch.raise_for_flags`, for the first bad chunk.

Steps
-----
1. XXH64 (seed 0) of each chunk's stored bytes must equal the reference checksum
   (``CHECKSUM_MISMATCH``), hashed by a numba kernel over all chunks.
2. Compression 0 (raw) requires stored length == decoded length
   (``DECODED_LENGTH_MISMATCH``); the stored bytes are decoded in place.
   Compression 1 (Zstd) frames pass :mod:`.zstd_frames`' structural check
   (one frame ending at the stored length; a content size, when present,
   equal to the declared length).  Other compression IDs set
   ``UNSUPPORTED_COMPRESSION`` and are not decoded.  A flagged chunk is never
   decompressed or decoded further.
3. The chunks are split into contiguous ranges balanced by decoded bytes; a
   thread pool works through them.  Each thread decompresses its chunks one
   window (:data:`WINDOW_BYTES`) at a time -- with libzstd's
   ``ZSTD_decompressDCtx`` called from a numba loop (:func:`decompress_window`,
   :mod:`.libzstd`), or python-zstandard's
   ``decompress(max_output_size=declared, allow_extra_data=False)`` where no
   libzstd loads -- with the declared length as capacity (output stays
   bounded whatever a frame claims), and decodes the window at once with
   :func:`decode_chunks_range` (numba, GIL-free), so decoded bytes are read
   back from cache.  Every failure becomes ``ZSTD_DECOMPRESS_FAILED`` or
   ``DECODED_LENGTH_MISMATCH`` for its chunk (:func:`.libzstd.classify`).
4. Outputs live in pyarrow's memory pool (:func:`pool_array`) and become the
   Arrow table's buffers; fields get Arrow validity bitmaps written by the
   kernel (none when a field has no null).  Rows no decoded chunk wrote
   (omitted all-null chunks, failed chunks) are zeroed, and null.

Column encodings ("Encodings and compression"; all fixed-width numbers LE)
-------------------------------------------------------------------------
Varints are LEB128; truncation -> ``VARINT_TRUNCATED``; more than ten bytes or a
tenth byte > 1 -> ``VARINT_OVERFLOW``; non-shortest forms are accepted.  ZigZag
decode is ``(u >> 1) ^ -(u & 1)``.  Arithmetic marked "wrapping" is mod 2**64.
A fixed layout of the wrong length, or a chunk too short for its fixed prefix,
is ``BAD_LENGTH``; bytes after the expected values are ``TRAILING_BYTES``.

1 timestamp constant step
    Exactly 16 bytes: ``first: i64``, ``step: i64``.  ``step < 0`` ->
    ``NEGATIVE_STEP``; ``first + step * (rows - 1)`` must not overflow i64
    (checked) -> ``TIMESTAMP_OVERFLOW``.  Singletons use step 0.
2 timestamp delta-of-delta
    ``first: i64`` (8 fixed bytes), then for ``rows >= 2`` the first delta as a
    ZigZag varint and ``rows - 2`` ZigZag varints of delta differences; deltas
    and timestamps are reconstructed with wrapping addition.
    After 1 or 2: timestamps are nondecreasing (signed) else
    ``TIMESTAMP_DECREASING``; first == block min_timestamp and last ==
    max_timestamp else ``TIMESTAMP_BOUNDS``.
3 constant sequence
    Exactly 8 bytes: one u64 repeated for every row.
4 sequence delta
    ``first: u64`` (8 fixed bytes), then ``rows - 1`` ZigZag varints of the
    wrapping u64 difference from the predecessor reinterpreted as i64; wrapping
    addition.
After 3 or 4 ("Column payloads and row semantics": sequences are nonincreasing
within equal timestamps, including across parts): where two rows of a series
have equal timestamps, the later sequence is not greater (u64) else
``SEQUENCE_ORDER``.  Within a block the encoding-4 decoder checks it against
the block's timestamps, decoded just before on the same thread (chunk ranges
are split at block boundaries) when that chunk decoded cleanly (encoding 3
cannot break it); across blocks, :func:`gtsamples.batch.flag_sequence_boundaries`
compares the first row of a block continuing its series (same artifact and
identity, ordinal + 1) with the previous block's last row.
5 nullable Float64 XOR
    ``validity_kind: u8``: 0 all valid (requires null_count 0), 1 bitmap
    (requires ``0 < null_count < rows``); other kinds -> ``VALIDITY_KIND``.
    Kind 1 continues with ``ceil(rows / 8)`` bitmap bytes, bit ``i % 8`` of byte
    ``i / 8`` set for a present row, unused high bits of the last byte zero
    (``VALIDITY_PADDING``), unset in-range bits == null_count
    (``NULL_COUNT_MISMATCH``).  Then the first non-null value's IEEE-754 bits as
    u64, and one uvarint per further non-null value: its bits XOR the previous
    *non-null* bits.  Exactly ``rows - null_count`` values are decoded and
    scattered; null rows get value bits 0 and validity 0.  Bits are written
    through a uint64 view (NaN payloads, -0.0, subnormals preserved).
6 constant operation type
    Exactly 1 byte, repeated.  7 raw operation types: exactly ``rows`` bytes.
    Every value must be 0 (delete) or 1 (put) -> ``OP_TYPE_INVALID``.
Other encodings -> ``UNSUPPORTED_ENCODING``.

Role/encoding agreement is the planner's check; here the encoding chooses the
output column.  Every read is bounds-checked against the chunk's decoded bytes
and every write stays inside ``[out_row, out_row + rows)`` of an output array,
whatever the bytes say.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
import xxhash
import zstandard

from ...batch import (
    FIRST_FIELD_SLOT,
    SLOT_OP_TYPE,
    SLOT_SEQUENCE,
    SLOT_TIMESTAMP,
    ChunkBatch,
    DecodedColumns,
    add_sequence_order_detail,
    block_chunks,
    flag_sequence_boundaries,
    raise_for_flags,
)
from ...buffers import pool_array
from ...format.constants import (
    COMP_RAW,
    COMP_ZSTD,
    KNOWN_COLUMN_ENCODINGS,
    MAX_CHUNK_DECODED,
    MAX_CHUNK_STORED,
    ROLE_OP_TYPE,
    ROLE_SEQUENCE,
)
from .. import libzstd
from ..libzstd import monotonic_ns, zstd_decompress_into
from ..zstd_frames import check_zstd_frames
from .flags import (
    BAD_LENGTH,
    CHECKSUM_MISMATCH,
    DECODED_LENGTH_MISMATCH,
    ROWS_WRITTEN_FLAGS,
    SEQUENCE_ORDER,
    TIMESTAMP_BOUNDS,
    UNSUPPORTED_COMPRESSION,
    UNSUPPORTED_ENCODING,
    ZSTD_DECOMPRESS_FAILED,
)
from .floats import dec_f64_xor, finish_bitmap
from .optype import dec_op_constant, dec_op_raw
from .sequence import dec_seq_constant, dec_seq_delta
from .timestamp import dec_ts_constant, dec_ts_dod
from .xxh64 import xxh64_chunks


__all__ = [
    "decode_batch",
    "decode_batch_flags",
    "decode_chunk_bytes",
    "decode_chunks_range",
    "identity_columns",
    "decompress_chunk",
    "last_stats",
    "pool_array",
]


#: Below these amounts of work a stage runs on the calling thread only.  A
#: fork-join region costs microseconds on an idle machine but can stall for a
#: scheduler slice (~10 ms measured) when the cores are busy, far more than the
#: serial cost of small work (frame check ~10 ns/frame, kernel ~3-7 ns/value).
PARALLEL_ZSTD_MIN_BYTES = 1 << 20  # decoded Zstd bytes
PARALLEL_MIN_ITEMS = 32_768  # frames to check / small chunks to hash
PARALLEL_MIN_VALUES = 262_144  # rows of active chunks to decode (or identity rows to fill)
PARALLEL_HASH_MIN_BYTES = 4 << 20  # stored bytes to hash

#: Kernel metadata columns (one int64 row per chunk).
M_ACTIVE = 0  # 1: decode this chunk
M_IN_SCRATCH = 1  # 1: decoded bytes live in the scratch buffer, 0: in batch.data
M_OFFSET = 2  # start of the decoded bytes in that buffer
M_LENGTH = 3  # decoded length
M_ENCODING = 4
M_ROWS = 5
M_NULLS = 6
M_OUT_ROW = 7
M_FIELD = 8  # slot - FIRST_FIELD_SLOT (field index), -1 for non-field slots
M_MIN_TS = 9
M_MAX_TS = 10
M_TS_CHUNK = 11  # sequence chunks: the block's timestamp chunk (order check), else -1
N_META = 12


@numba.njit(nogil=True, cache=True)
def decode_chunks_range(data, window, meta, first, lo, hi, ts, seq, op, vals, bitmaps, want_bm, edges, flags):
    """Decode the active chunks ``lo <= i < hi``; OR failures into ``flags[i]``.

    Serial and GIL-free: the host runs one call per window of decompressed
    chunks, on several threads at once over disjoint chunk ranges; ``first`` is
    where this thread's range starts (a sequence chunk is checked against its
    block's timestamps only when this thread decoded them: ``first <= t < i``).
    ``data``/``window`` uint8[::1] (stored bytes / decompressed bytes),
    ``meta`` int64[n_chunks, N_META] (see the ``M_*`` columns), outputs
    ``ts`` int64[::1], ``seq`` uint64[::1], ``op`` uint8[::1] (may be empty when
    not wanted), ``vals`` uint64[n_fields, n_rows] (float64 bits),
    ``bitmaps`` uint8[n_fields, stride] (Arrow validity, written only where
    ``want_bm[field]``), ``edges`` uint8[n_chunks, 2], ``flags`` uint32[n_chunks].
    """
    for i in range(lo, hi):
        if meta[i, M_ACTIVE] == 0:
            continue
        buf = window if meta[i, M_IN_SCRATCH] != 0 else data
        p = meta[i, M_OFFSET]
        ln = meta[i, M_LENGTH]
        enc = meta[i, M_ENCODING]
        rows = meta[i, M_ROWS]
        o = meta[i, M_OUT_ROW]
        f = 0
        if p < 0 or ln < 0 or p + ln > buf.shape[0] or rows <= 0 or o < 0:
            f = BAD_LENGTH
        elif enc == 1 or enc == 2:
            if o + rows > ts.shape[0]:
                f = BAD_LENGTH
            elif enc == 1:
                f = dec_ts_constant(buf, p, ln, rows, ts, o, meta[i, M_MIN_TS], meta[i, M_MAX_TS])
            else:
                f = dec_ts_dod(buf, p, ln, rows, ts, o, meta[i, M_MIN_TS], meta[i, M_MAX_TS])
        elif enc == 3 or enc == 4:
            if o + rows > seq.shape[0]:
                f = BAD_LENGTH
            elif enc == 3:
                f = dec_seq_constant(buf, p, ln, rows, seq, o)
            else:
                t = meta[i, M_TS_CHUNK]
                check = (first <= t < i and meta[t, M_ACTIVE] != 0 and flags[t] == 0
                         and o + rows <= ts.shape[0])
                f = dec_seq_delta(buf, p, ln, rows, seq, o, ts, check)
        elif enc == 5:
            fi = meta[i, M_FIELD]
            if not _f64_fits(meta, i, buf, vals, bitmaps):
                f = BAD_LENGTH
            else:
                f = dec_f64_xor(buf, p, ln, rows, meta[i, M_NULLS], vals[fi], bitmaps[fi], want_bm[fi], o, edges, i)
        elif enc == 6 or enc == 7:
            if o + rows > op.shape[0]:
                f = BAD_LENGTH
            elif enc == 6:
                f = dec_op_constant(buf, p, ln, rows, op, o)
            else:
                f = dec_op_raw(buf, p, ln, rows, op, o)
        else:
            f = UNSUPPORTED_ENCODING
        if f != 0:
            flags[i] |= np.uint32(f)


@numba.njit(nogil=True, cache=True)
def decompress_window(fn, dctx, data, window, cap, meta, is_z, stored, zresult, zfailed, lo, hi):
    """Decompress the active Zstd chunks from ``lo`` on into ``window`` with libzstd
    (``ZSTD_decompressDCtx`` at address ``fn``, context ``dctx``) until the next
    one would pass ``cap`` bytes; returns where it stopped (``> lo``).

    A chunk alone in the window may pass ``cap`` (the host sizes ``window`` for
    the largest declared length).  The capacity given to libzstd is the
    declared length, so output stays bounded.  A chunk whose result is not
    exactly its declared length is deactivated, with the raw result in
    ``zresult`` and ``zfailed`` set, for the host to classify
    (:func:`gtsamples.decode.libzstd.classify`).  Decoded chunks get
    ``M_IN_SCRATCH`` and their window offset in ``M_OFFSET``.
    """
    dbase = np.int64(data.ctypes.data)
    wbase = np.int64(window.ctypes.data)
    woff = 0
    j = lo
    while j < hi:
        if meta[j, M_ACTIVE] != 0 and is_z[j] != 0:
            d = meta[j, M_LENGTH]
            if woff > 0 and woff + d > cap:
                break
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


@numba.njit(nogil=True, cache=True)
def decode_range(fn, dctx, clock, data, window, cap, meta, is_z, stored, zresult, zfailed, lo, hi, ts, seq, op, vals,
                 bitmaps, want_bm, edges, flags, ns):
    """Chunks ``lo <= i < hi`` window by window (:func:`decompress_window`, then
    :func:`decode_chunks_range`) in one call: the thread takes the GIL once per range,
    not twice per window (a GIL hand-off stalls it while another thread runs Python).
    Adds the nanoseconds spent decompressing and decoding to ``ns[0]`` and ``ns[1]``
    (``clock``: :data:`~gtsamples.decode.libzstd.CLOCK_GETTIME_ADDR`)."""
    tbuf = np.zeros(2, np.int64)
    k = lo
    while k < hi:
        ta = monotonic_ns(clock, tbuf)
        j = decompress_window(fn, dctx, data, window, cap, meta, is_z, stored, zresult, zfailed, k, hi)
        tb = monotonic_ns(clock, tbuf)
        decode_chunks_range(data, window, meta, lo, k, j, ts, seq, op, vals, bitmaps, want_bm, edges, flags)
        ns[0] += tb - ta
        ns[1] += monotonic_ns(clock, tbuf) - tb
        k = j


@numba.njit(inline="always")
def _f64_fits(meta, i, buf, vals, bitmaps):
    """Chunk ``i``'s stored range and rows lie inside its buffer and its field's outputs."""
    p = meta[i, M_OFFSET]
    ln = meta[i, M_LENGTH]
    rows = meta[i, M_ROWS]
    o = meta[i, M_OUT_ROW]
    fi = meta[i, M_FIELD]
    return (p >= 0 and ln >= 0 and p + ln <= buf.shape[0] and rows > 0 and o >= 0 and 0 <= fi < vals.shape[0]
            and o + rows <= vals.shape[1] and o + rows <= 8 * bitmaps.shape[1])


@numba.njit(nogil=True, cache=True)
def _zero_gaps(col, starts, ends, n_rows):
    """Zero the rows of ``col`` outside the decoded ranges ``[starts[k], ends[k])`` (sorted, disjoint)."""
    pos = 0
    for k in range(starts.shape[0]):
        for r in range(pos, starts[k]):
            col[r] = 0
        pos = ends[k]
    for r in range(pos, n_rows):
        col[r] = 0


@numba.njit(parallel=True, nogil=True, cache=True)
def _fill_identity(block_out_row, block_rows, block_table_id, block_tsid, table_id, tsid):
    """``__table_id``/``__tsid`` of every output row from its block (either output may be empty)."""
    for k in numba.prange(block_out_row.shape[0]):
        o = block_out_row[k]
        n = block_rows[k]
        if table_id.shape[0]:
            t = block_table_id[k]
            for r in range(o, o + n):
                table_id[r] = t
        if tsid.shape[0]:
            s = block_tsid[k]
            for r in range(o, o + n):
                tsid[r] = s


_STATS: dict[str, float] = {}
_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0
_POOL_LOCK = threading.Lock()
_TLS = threading.local()


#: Decompressed bytes one thread holds at a time: chunks are decompressed into
#: this window and decoded before the next window, so the decoded bytes are
#: read back from the core's L2 cache instead of memory (and no batch-sized
#: scratch buffer exists).  A single larger chunk (at most 1 MiB) widens it.
WINDOW_BYTES = 512 << 10


#: Work items per thread: contiguous chunk ranges, balanced by decoded bytes.
TASKS_PER_THREAD = 4


def last_stats() -> dict[str, float]:
    """Stage times (seconds) of the last :func:`decode_batch` call in this process."""
    return dict(_STATS)


def thread_count(threads: int | None) -> int:
    if threads is None or threads <= 0:
        return max(1, numba.get_num_threads())
    return max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS))


def checksums_ok(batch: ChunkBatch, flags: np.ndarray, todo: np.ndarray | None = None, data=None,
                  n_threads: int = 1) -> None:
    """OR ``CHECKSUM_MISMATCH`` into ``flags`` for chunks ``todo`` (default: all).

    numba's XXH64 (unaligned 8-byte loads) hashes 95 MB in 15 ms on one
    thread, faster than one ``xxhash`` call per chunk (23 ms; measured on the
    2-core VM), and runs on all threads for large batches.
    """
    ch = batch.chunks
    if data is None:
        data = np.ascontiguousarray(batch.data)
    if todo is None:
        todo = np.arange(len(ch), dtype=np.int64)
    if todo.size == 0:
        return
    src = np.ascontiguousarray(ch["src_offset"], dtype=np.uint64)
    ln = np.ascontiguousarray(ch["stored_len"], dtype=np.uint32)
    got = np.empty(todo.size, dtype=np.uint64)
    big = todo.size >= PARALLEL_MIN_ITEMS or int(ln[todo].sum(dtype=np.int64)) >= PARALLEL_HASH_MIN_BYTES
    with numba_threads(n_threads if big else 1):
        xxh64_chunks(data, src, ln, todo.astype(np.int64), got)
    flags[todo[got != ch["checksum"][todo]]] |= CHECKSUM_MISMATCH


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
    """Decompress one compression-1 chunk exactly as :func:`decode_batch` does.

    ``stored``: the chunk's stored bytes (``bytes``, ``memoryview`` or any
    buffer of bytes); ``declared``: its declared decoded length, used as the
    output capacity.  Never raises on bad input; returns ``(decoded, flags)``:

    * ``(bytes, 0)``: exactly ``declared`` bytes;
    * ``(None, DECODED_LENGTH_MISMATCH)``: the frame yields more or fewer
      bytes than declared;
    * ``(None, ZSTD_DECOMPRESS_FAILED)``: zstandard rejects the frame.

    With ``detail=True`` a third element is the message the backend attaches
    to the error (``""`` on success).  It uses the libzstd that
    :func:`decode_batch` calls (:mod:`.libzstd`) when there is one; otherwise
    python-zstandard with ``dctx``, a reusable ``zstandard.ZstdDecompressor``
    (one per thread), or a new one.

    This is only the decompression step: callers verify the XXH64 checksum and
    the frame structure (:func:`gtsamples.decode.zstd_frames.check_zstd_frame`)
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


def _get_pool(n: int) -> ThreadPoolExecutor:
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        if _POOL is None or _POOL_SIZE < n:
            if _POOL is not None:
                _POOL.shutdown(wait=False)
            _POOL = ThreadPoolExecutor(max_workers=n, thread_name_prefix="gtsamples-zstd")
            _POOL_SIZE = n
        return _POOL


def _check_batch(batch: ChunkBatch, n_fields: int) -> None:
    """Planner invariants the kernel relies on; a violation is a bug, not bad input."""
    ch = batch.chunks
    if batch.data.dtype != np.uint8 or batch.data.ndim != 1:
        raise ValueError("ChunkBatch.data must be a 1-D uint8 array")
    if len(ch) == 0:
        return
    end = ch["out_row"].astype(np.uint64) + ch["rows"].astype(np.uint64)
    if (end > np.uint64(batch.n_rows)).any():
        i = int(np.flatnonzero(end > np.uint64(batch.n_rows))[0])
        raise ValueError(f"ChunkBatch chunk {i}: rows [{int(ch['out_row'][i])}, {int(end[i])}) exceed n_rows "
                         f"{batch.n_rows}")
    field = ch["slot"].astype(np.int64) - FIRST_FIELD_SLOT
    if (field >= n_fields).any():
        i = int(np.flatnonzero(field >= n_fields)[0])
        raise ValueError(f"ChunkBatch chunk {i}: slot {int(ch['slot'][i])} beyond {n_fields} projected fields")


def decode_batch(batch: ChunkBatch, threads: int | None = None) -> DecodedColumns:
    """Decode every chunk of ``batch`` into untrimmed host columns.

    Raises :class:`~gtsamples.errors.CorruptArtifactError` or
    :class:`~gtsamples.errors.UnsupportedError` (via
    :func:`gtsamples.batch.raise_for_flags`) naming the first bad chunk.
    ``threads`` bounds the numba and Zstd threads (default: numba's setting).
    """
    cols, flags, detail = decode_batch_flags(batch, threads)
    raise_for_flags(batch, flags, detail or None)
    return cols


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


class RangeDecoder:
    """Decompress and decode contiguous chunk ranges of one batch, window by window.

    One instance per :func:`decode_batch_flags` call; :meth:`run` may execute
    on several threads at once for disjoint ranges: each writes only its own
    chunks' ``meta``/``flags``/``edges``/``zresult`` rows and output rows.
    Decompression goes through libzstd from a numba loop when
    :func:`gtsamples.decode.libzstd.get` finds one (no GIL, no per-chunk
    Python), else through python-zstandard one chunk at a time.
    """

    def __init__(self, data, meta, zstd_mask, ch, outputs, flags, edges):
        self.data = data
        self.meta = meta
        self.zstd_mask = zstd_mask
        self.ch = ch
        self.outputs = outputs
        self.flags = flags
        self.edges = edges
        self.lib = libzstd.get()
        n = len(ch)
        declared = ch["decoded_len"][zstd_mask]
        self.max_declared = int(declared.max()) if declared.size else 0
        if self.lib is not None:
            self.is_z = zstd_mask.astype(np.uint8)
            self.stored = ch["stored_len"].astype(np.int64)
            self.zresult = np.zeros(n, dtype=np.int64)
            self.zfailed = np.zeros(n, dtype=np.uint8)
        else:
            self.mv = memoryview(data)
            self.is_z = zstd_mask.tolist()
            self.src = ch["src_offset"].tolist()
            self.stored = ch["stored_len"].tolist()
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
                         self.is_z, self.stored, self.zresult, self.zfailed, lo, hi, ts, seq, op, vals, bitmaps,
                         want_bm, self.edges, self.flags, ns)
            self.t_decompress += float(ns[0]) * 1e-9  # summed over threads: CPU seconds, not wall
            self.t_kernel += float(ns[1]) * 1e-9
            return
        t_z = t_k = 0.0
        k = lo
        while k < hi:
            ta = time.perf_counter()
            j = self._decompress_window_py(st[0], window, cap, k, hi)
            tb = time.perf_counter()
            decode_chunks_range(self.data, window, meta, lo, k, j, ts, seq, op, vals, bitmaps, want_bm, self.edges,
                                self.flags)
            t_z += tb - ta
            t_k += time.perf_counter() - tb
            k = j
        self.t_decompress += t_z  # summed over threads: CPU seconds, not wall
        self.t_kernel += t_k

    def _decompress_window_py(self, dctx, window, cap: int, k: int, hi: int) -> int:
        """:func:`decompress_window` with python-zstandard (no libzstd found)."""
        meta, is_z, src, stored, declared = self.meta, self.is_z, self.src, self.stored, self.declared
        wmv = memoryview(window)
        placed: list[int] = []
        offs: list[int] = []
        woff = 0
        j = k
        while j < hi:
            if is_z[j]:
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
        if self.lib is not None:
            for i in np.flatnonzero(self.zfailed).tolist():
                f, msg = libzstd.classify(self.lib, int(self.zresult[i]), int(self.ch["decoded_len"][i]))
                flags[i] |= f
                detail[i] = msg
        for i, f, msg in self.failures:
            flags[i] |= f
            detail[i] = msg


def split_ranges(cost: np.ndarray, parts: int, block: np.ndarray | None = None) -> list[tuple[int, int]]:
    """Up to ``parts`` contiguous, nonempty index ranges of about equal total ``cost``;
    with ``block`` (each item's block), cut only where the block changes, so a
    block's chunks decode in order on one thread (the sequence order check reads
    the block's timestamps)."""
    n = cost.shape[0]
    if parts <= 1 or n <= 1:
        return [(0, n)]
    cum = np.cumsum(cost, dtype=np.float64)
    cuts = np.searchsorted(cum, np.linspace(0, cum[-1], parts + 1)[1:-1], side="right")
    if block is not None:
        starts = np.r_[np.flatnonzero(block[1:] != block[:-1]) + 1, n]  # first item of each block after the first
        cuts = starts[np.searchsorted(starts, cuts, side="left")]
    bounds = np.unique(np.r_[0, cuts, n])
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def _decoded_ranges(meta: np.ndarray, ok: np.ndarray, which: np.ndarray):
    """Sorted row ranges ``(starts, ends, chunk index)`` of the decoded chunks ``ok & which``."""
    idx = np.flatnonzero(ok & which)
    starts = meta[idx, M_OUT_ROW]
    order = np.argsort(starts, kind="stable")
    idx = idx[order]
    starts = starts[order]
    return starts, starts + meta[idx, M_ROWS], idx


def decode_batch_flags(batch: ChunkBatch, threads: int | None = None):
    """Like :func:`decode_batch` but never raises for bad chunks.

    Returns ``(columns, flags, detail)``: per-chunk uint32 flag words and extra
    message text keyed by chunk index.  Rows of flagged (and of omitted)
    chunks read as zero and, for fields, null; timestamps that fail only
    their bounds or order check keep their decoded values.
    """
    t0 = time.perf_counter()
    ch = batch.chunks
    n = len(ch)
    n_rows = int(batch.n_rows)
    n_fields = len(batch.field_names)
    _check_batch(batch, n_fields)
    n_threads = thread_count(threads)
    data = np.ascontiguousarray(batch.data)
    if not data.flags.writeable:  # one numba specialization: writeable uint8[::1]
        data = data.copy()

    flags = np.zeros(n, dtype=np.uint32)
    detail: dict[int, str] = {}

    role = ch["role"]
    slot = ch["slot"]
    skip = np.zeros(n, dtype=bool)
    if not batch.want_sequence:
        skip |= (role == ROLE_SEQUENCE) | (slot == SLOT_SEQUENCE)
    if not batch.want_op_type:
        skip |= (role == ROLE_OP_TYPE) | (slot == SLOT_OP_TYPE)

    # Stored ranges inside the fetched buffer, lengths within the spec's limits.
    src_end = ch["src_offset"].astype(np.uint64) + ch["stored_len"].astype(np.uint64)
    out_of_range = (src_end > np.uint64(data.shape[0])) | (src_end < ch["src_offset"])
    too_big = (ch["decoded_len"] > MAX_CHUNK_DECODED) | (ch["stored_len"] > MAX_CHUNK_STORED)
    for i in np.flatnonzero(~skip & (out_of_range | too_big))[:16].tolist():
        detail[i] = ("stored bytes lie outside the fetched buffer" if out_of_range[i] else
                     f"chunk exceeds {MAX_CHUNK_STORED} stored / {MAX_CHUNK_DECODED} decoded bytes")
    flags[~skip & (out_of_range | too_big)] |= BAD_LENGTH

    prevalid = np.flatnonzero(~skip & (flags == 0))
    t1 = time.perf_counter()
    checksums_ok(batch, flags, prevalid, data, n_threads)
    t2 = time.perf_counter()
    comp = ch["compression"]
    flags[~skip & (comp != COMP_RAW) & (comp != COMP_ZSTD)] |= UNSUPPORTED_COMPRESSION
    known_enc = np.isin(ch["encoding"], np.array(KNOWN_COLUMN_ENCODINGS, dtype=ch["encoding"].dtype))
    flags[~skip & ~known_enc] |= UNSUPPORTED_ENCODING
    flags[~skip & (comp == COMP_RAW) & (ch["stored_len"] != ch["decoded_len"])] |= DECODED_LENGTH_MISMATCH

    # Zstd: structural check first (one frame, ending at the stored length).
    zidx = np.flatnonzero(~skip & (comp == COMP_ZSTD) & (flags == 0))
    zflags = np.zeros(zidx.size, dtype=np.uint32)
    if zidx.size:
        with numba_threads(n_threads if zidx.size >= PARALLEL_MIN_ITEMS else 1):
            check_zstd_frames(
                data,
                np.ascontiguousarray(ch["src_offset"][zidx], dtype=np.uint64),
                np.ascontiguousarray(ch["stored_len"][zidx], dtype=np.uint32),
                np.ascontiguousarray(ch["decoded_len"][zidx], dtype=np.uint32),
                zflags,
            )
        flags[zidx] |= zflags
    t3 = time.perf_counter()

    # Kernel metadata.
    enc = ch["encoding"]
    meta = np.empty((n, N_META), dtype=np.int64)
    meta[:, M_ACTIVE] = ~skip & (flags == 0)
    meta[:, M_IN_SCRATCH] = 0
    meta[:, M_OFFSET] = ch["src_offset"].astype(np.int64)
    meta[:, M_LENGTH] = ch["decoded_len"]
    meta[:, M_ENCODING] = enc
    meta[:, M_ROWS] = ch["rows"]
    meta[:, M_NULLS] = ch["null_count"]
    meta[:, M_OUT_ROW] = ch["out_row"].astype(np.int64)
    meta[:, M_FIELD] = slot.astype(np.int64) - FIRST_FIELD_SLOT
    meta[:, M_MIN_TS] = ch["min_timestamp"]
    meta[:, M_MAX_TS] = ch["max_timestamp"]
    meta[:, M_TS_CHUNK] = -1
    is_seq_slot = slot == SLOT_SEQUENCE
    if is_seq_slot.any():
        meta[is_seq_slot, M_TS_CHUNK] = block_chunks(batch, SLOT_TIMESTAMP)[ch["block"][is_seq_slot].astype(np.int64)]
    active = meta[:, M_ACTIVE] != 0

    # Which column each chunk writes: the encoding chooses (the planner checked roles).
    is_ts = (enc == 1) | (enc == 2)
    is_seq = (enc == 3) | (enc == 4)
    is_op = (enc == 6) | (enc == 7)
    is_f = enc == 5
    field = meta[:, M_FIELD]
    # A field needs a validity bitmap unless active chunks without nulls cover all its rows.
    want_bm = np.ones(max(n_fields, 1), dtype=np.uint8)[:n_fields]
    for k in range(n_fields):
        m = active & is_f & (field == k)
        want_bm[k] = int(ch["null_count"][m].any() or int(meta[m, M_ROWS].sum()) != n_rows)

    # Outputs in Arrow's memory pool, uninitialised: decoded rows overwrite them
    # and the rest is zeroed after decoding.
    stride = -(-((n_rows + 7) >> 3) // 64) * 64  # 64-byte aligned bitmap per field
    ts = pool_array(n_rows, np.int64)
    seq = pool_array(n_rows if batch.want_sequence else 0, np.uint64)
    op = pool_array(n_rows if batch.want_op_type else 0, np.uint8)
    vals = pool_array((n_fields, n_rows), np.uint64)
    bitmaps = pool_array((n_fields, stride), np.uint8)
    edges = np.zeros((n, 2), dtype=np.uint8)

    dec = RangeDecoder(data, meta, active & (comp == COMP_ZSTD), ch,
                        (ts, seq, op, vals, bitmaps, want_bm), flags, edges)
    if n:
        cost = np.where(active, ch["decoded_len"].astype(np.float64), 0.0)
        work = int(meta[active, M_ROWS].sum())
        zbytes = int(ch["decoded_len"][active & (comp == COMP_ZSTD)].sum(dtype=np.int64))
        parallel = n_threads > 1 and n > 1 and (work >= PARALLEL_MIN_VALUES or zbytes >= PARALLEL_ZSTD_MIN_BYTES)
        ranges = split_ranges(cost, n_threads * TASKS_PER_THREAD if parallel else 1, ch["block"])
        if len(ranges) == 1:
            dec.run(*ranges[0])
        else:
            pool = _get_pool(n_threads)
            for fut in [pool.submit(dec.run, a, b) for a, b in ranges]:
                fut.result()
    dec.collect_failures(flags, detail)
    if batch.want_sequence and n:
        flag_sequence_boundaries(batch, flags, ts, seq)
        if (flags & np.uint32(SEQUENCE_ORDER)).any():
            add_sequence_order_detail(batch, flags, detail, ts, seq)
    t4 = time.perf_counter()

    # Rows no decoded chunk wrote: zero (and null).  Timestamp and sequence checks
    # that fail after every row was written (bounds, order) keep the rows.
    ok = active & (flags == 0)
    written = active & ((flags & ~np.uint32(ROWS_WRITTEN_FLAGS)) == 0)
    # Output column of each chunk (0 ts, 1 seq, 2 op, 3 + k field k) and rows decoded per column:
    # a column whose decoded rows add up to n_rows has no gap (one chunk per block and column).
    col_of = np.select([is_ts, is_seq, is_op, is_f], [0, 1, 2, 3 + field], -1)
    n_cols = FIRST_FIELD_SLOT + n_fields
    rows_written = np.bincount(col_of[written & (col_of >= 0)], weights=meta[written & (col_of >= 0), M_ROWS],
                               minlength=n_cols)
    rows_ok = np.bincount(col_of[ok & (col_of >= 0)], weights=meta[ok & (col_of >= 0), M_ROWS], minlength=n_cols)
    nulls_ok = np.bincount(col_of[ok & (col_of >= 0)], weights=meta[ok & (col_of >= 0), M_NULLS], minlength=n_cols)
    block_rows = np.ascontiguousarray(batch.blocks["out_row"], dtype=np.int64)
    for c, (col, which) in enumerate(((ts, is_ts), (seq, is_seq), (op, is_op))):
        if col.shape[0] and rows_written[c] != n_rows:
            s, e, _ = _decoded_ranges(meta, written, which)
            _zero_gaps(col, s, e, n_rows)
    bitmap_list: list[np.ndarray | None] = []
    null_counts: list[int] = []
    for k in range(n_fields):
        nulls = n_rows - int(rows_ok[3 + k]) + int(nulls_ok[3 + k])
        if rows_ok[3 + k] == n_rows and not nulls:
            bitmap_list.append(None)
            null_counts.append(0)
            continue
        s, e, idx = _decoded_ranges(meta, ok, is_f & (field == k))
        _zero_gaps(vals[k], s, e, n_rows)
        if nulls and not want_bm[k]:  # a chunk failed where no bitmap was planned
            bitmaps[k, :] = 0
            fill_valid(bitmaps[k], s, e)
        elif nulls:
            finish_bitmap(bitmaps[k], s, e, idx, edges, block_rows, n_rows)
        bitmap_list.append(bitmaps[k, : (n_rows + 7) >> 3] if nulls else None)
        null_counts.append(nulls)
    t5 = time.perf_counter()

    _STATS.clear()
    _STATS.update(prepare=t1 - t0, checksum=t2 - t1, frame_check=t3 - t2, decode=t4 - t3,
                  decompress=dec.t_decompress, kernel=dec.t_kernel, finish=t5 - t4, total=t5 - t0)
    cols = DecodedColumns(
        timestamp=ts,
        sequence=seq if batch.want_sequence else None,
        op_type=op if batch.want_op_type else None,
        values=[vals[k].view(np.float64) for k in range(n_fields)],
        bitmaps=bitmap_list,
        null_counts=null_counts,
    )
    return cols, flags, detail


def identity_columns(blocks: np.ndarray, n_rows: int, want_table_id: bool, want_tsid: bool):
    """``(__table_id, __tsid)`` of every output row from the batch's block table, in
    pool memory (:func:`pool_array`); None for a column not wanted."""
    out_row = np.ascontiguousarray(blocks["out_row"], dtype=np.int64)
    rows = np.ascontiguousarray(blocks["rows"], dtype=np.int64)
    if rows.size and (out_row.min() < 0 or int((out_row + rows).max()) > n_rows):
        raise ValueError(f"block rows exceed the batch's {n_rows} output rows")  # a planner bug, not bad input
    tid = pool_array(n_rows if want_table_id else 0, np.uint32)
    tsid = pool_array(n_rows if want_tsid else 0, np.uint64)
    if want_table_id or want_tsid:
        with numba_threads(thread_count(None) if n_rows >= PARALLEL_MIN_VALUES else 1):
            _fill_identity(out_row, rows, np.ascontiguousarray(blocks["table_id"], dtype=np.uint32),
                           np.ascontiguousarray(blocks["tsid"], dtype=np.uint64), tid, tsid)
    return (tid if want_table_id else None), (tsid if want_tsid else None)


def fill_valid(bm: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
    """Set the bits of rows ``[starts[k], ends[k])`` in a zeroed bitmap (rare path)."""
    valid = np.zeros(bm.shape[0] * 8, dtype=bool)
    for a, b in zip(starts.tolist(), ends.tolist()):
        valid[a:b] = True
    bm[:] = np.packbits(valid, bitorder="little")


class numba_threads:
    """Temporarily set numba's thread count for this (Python) thread."""

    def __init__(self, n: int):
        self.n = n
        self.old = None

    def __enter__(self):
        self.old = numba.get_num_threads()
        if self.n != self.old:
            numba.set_num_threads(self.n)
        return self

    def __exit__(self, *exc):
        if self.old is not None and self.old != self.n:
            numba.set_num_threads(self.old)
        return False


def decode_chunk_bytes(encoding: int, data: bytes, rows: int, null_count: int = 0, min_ts: int | None = None,
                       max_ts: int | None = None, compression: int = COMP_RAW, decoded_len: int | None = None):
    """Decode one chunk's stored bytes (convenience for tests and tools).

    Returns the column (int64 timestamps, uint64 sequences, uint8 operation
    types) or ``(float64 values, bool validity)`` for encoding 5.  Unknown
    encodings decode as a field.  Timestamp bound checks are skipped when
    ``min_ts``/``max_ts`` are None.  Raises like :func:`decode_batch`.
    """
    from ...batch import BLOCK_DTYPE, CHUNK_DTYPE

    raw = bytes(data)
    if encoding in (1, 2):
        slot, role = 0, 1
    elif encoding in (3, 4):
        slot, role = 1, 2
    elif encoding in (6, 7):
        slot, role = 2, 3
    else:
        slot, role = FIRST_FIELD_SLOT, 4
    chunks = np.zeros(1, dtype=CHUNK_DTYPE)
    blocks = np.zeros(1, dtype=BLOCK_DTYPE)
    blocks[0]["rows"] = rows
    c = chunks[0]
    c["stored_len"] = len(raw)
    c["decoded_len"] = len(raw) if decoded_len is None else decoded_len
    c["checksum"] = xxhash.xxh64_intdigest(raw)
    c["encoding"] = encoding
    c["compression"] = compression
    c["role"] = role
    c["slot"] = slot
    c["rows"] = rows
    c["null_count"] = null_count
    chunks[0] = c
    batch = ChunkBatch(chunks, blocks, np.frombuffer(raw, dtype=np.uint8).copy(), rows,
                       ("value",) if slot >= FIRST_FIELD_SLOT else (), source="<bytes>")
    check_bounds = min_ts is not None and max_ts is not None
    if check_bounds:
        chunks["min_timestamp"] = min_ts
        chunks["max_timestamp"] = max_ts
    cols, flags, detail = decode_batch_flags(batch, threads=1)
    if not check_bounds:
        flags &= np.uint32(~TIMESTAMP_BOUNDS & 0xFFFFFFFF)
    raise_for_flags(batch, flags, detail or None)
    if encoding in (1, 2):
        return cols.timestamp
    if encoding in (3, 4):
        return cols.sequence
    if encoding in (6, 7):
        return cols.op_type
    return cols.values[0], cols.validity[0]
