"""CPU decode backend: XXH64 -> batched Zstd -> numba column kernels.

:func:`decode_batch` decodes a whole :class:`~gtsamples.batch.ChunkBatch` at
once.  Every step is batch-wide and computes a per-chunk
:class:`~gtsamples.errors.DecodeErrorFlag` word; the host raises once, through
:func:`gtsamples.batch.raise_for_flags`, for the first bad chunk.

Steps
-----
1. XXH64 (seed 0) of each chunk's stored bytes must equal the reference checksum
   (``CHECKSUM_MISMATCH``).  Chunks below :data:`SMALL_CHUNK_BYTES` are hashed by
   a numba kernel, larger ones by ``xxhash`` (faster per byte, ~150 ns per call).
2. Compression 0 (raw) requires stored length == decoded length
   (``DECODED_LENGTH_MISMATCH``); the stored bytes are decoded in place.
   Compression 1 (Zstd) frames pass :mod:`.zstd_frames`' structural check,
   then decompress with capacity = declared length into one scratch buffer
   (per-chunk decoded-offset table): a thread pool runs
   ``ZstdDecompressor.decompress(max_output_size=declared,
   allow_extra_data=False)`` over one contiguous range of chunks per thread
   (:data:`ZSTD_STRATEGY`; ``multi_decompress_to_buffer`` is the measured-slower
   alternative and falls back to the pool to pin a failing chunk).  Every
   zstandard exception becomes ``ZSTD_DECOMPRESS_FAILED`` or
   ``DECODED_LENGTH_MISMATCH`` for its chunk.  Other compression IDs set
   ``UNSUPPORTED_COMPRESSION`` and are not decoded.  A flagged chunk is never
   decompressed or decoded further.
3. :func:`decode_chunks_kernel` (``prange`` over chunks) decodes each chunk into
   rows ``[out_row, out_row + rows)`` of its output column.

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

from ..batch import FIRST_FIELD_SLOT, SLOT_OP_TYPE, SLOT_SEQUENCE, ChunkBatch, DecodedColumns, raise_for_flags
from ..errors import DecodeErrorFlag
from ..format.constants import (
    COMP_RAW,
    COMP_ZSTD,
    KNOWN_COLUMN_ENCODINGS,
    MAX_CHUNK_DECODED,
    MAX_CHUNK_STORED,
    ROLE_OP_TYPE,
    ROLE_SEQUENCE,
)
from .zstd_frames import check_zstd_frames

__all__ = [
    "decode_batch",
    "decode_batch_flags",
    "decode_chunk_bytes",
    "decode_chunks_kernel",
    "decompress_chunk",
    "last_stats",
]

# --- flag values (numba cannot use IntFlag) -----------------------------------
CHECKSUM_MISMATCH = int(DecodeErrorFlag.CHECKSUM_MISMATCH)
DECODED_LENGTH_MISMATCH = int(DecodeErrorFlag.DECODED_LENGTH_MISMATCH)
ZSTD_DECOMPRESS_FAILED = int(DecodeErrorFlag.ZSTD_DECOMPRESS_FAILED)
UNSUPPORTED_COMPRESSION = int(DecodeErrorFlag.UNSUPPORTED_COMPRESSION)
UNSUPPORTED_ENCODING = int(DecodeErrorFlag.UNSUPPORTED_ENCODING)
VARINT_TRUNCATED = int(DecodeErrorFlag.VARINT_TRUNCATED)
VARINT_OVERFLOW = int(DecodeErrorFlag.VARINT_OVERFLOW)
TRAILING_BYTES = int(DecodeErrorFlag.TRAILING_BYTES)
BAD_LENGTH = int(DecodeErrorFlag.BAD_LENGTH)
TIMESTAMP_OVERFLOW = int(DecodeErrorFlag.TIMESTAMP_OVERFLOW)
TIMESTAMP_DECREASING = int(DecodeErrorFlag.TIMESTAMP_DECREASING)
TIMESTAMP_BOUNDS = int(DecodeErrorFlag.TIMESTAMP_BOUNDS)
VALIDITY_KIND = int(DecodeErrorFlag.VALIDITY_KIND)
NULL_COUNT_MISMATCH = int(DecodeErrorFlag.NULL_COUNT_MISMATCH)
VALIDITY_PADDING = int(DecodeErrorFlag.VALIDITY_PADDING)
OP_TYPE_INVALID = int(DecodeErrorFlag.OP_TYPE_INVALID)
NEGATIVE_STEP = int(DecodeErrorFlag.NEGATIVE_STEP)

#: Chunks with fewer stored bytes are hashed in numba (per-call cost of the
#: ``xxhash`` module dominates below ~700 bytes; see benchmarks/bench_zstd_batch.py).
SMALL_CHUNK_BYTES = 512
#: Below these amounts of work a stage runs on the calling thread only.  A
#: fork-join region costs microseconds on an idle machine but can stall for a
#: scheduler slice (~10 ms measured) when the cores are busy, far more than the
#: serial cost of small work (frame check ~10 ns/frame, kernel ~3-7 ns/value).
PARALLEL_ZSTD_MIN_BYTES = 1 << 20  # decoded Zstd bytes
PARALLEL_MIN_ITEMS = 32_768  # frames to check / small chunks to hash
PARALLEL_MIN_VALUES = 262_144  # rows of active chunks to decode

# --- kernel metadata columns (one int64 row per chunk) -------------------------
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
N_META = 11

_U64_0 = np.uint64(0)
_U64_1 = np.uint64(1)
_I64_MAX = np.iinfo(np.int64).max


# ==============================================================================
# XXH64 (small chunks)
# ==============================================================================
_P1 = np.uint64(11400714785074694791)
_P2 = np.uint64(14029467366897019727)
_P3 = np.uint64(1609587929392839161)
_P4 = np.uint64(9650029242287828579)
_P5 = np.uint64(2870177450012600261)


@numba.njit(inline="always")
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@numba.njit(inline="always")
def _ld_u64(b, p):
    """Little-endian u64 at ``b[p:p+8]`` (caller checked the bounds)."""
    return (
        np.uint64(b[p])
        | (np.uint64(b[p + 1]) << np.uint64(8))
        | (np.uint64(b[p + 2]) << np.uint64(16))
        | (np.uint64(b[p + 3]) << np.uint64(24))
        | (np.uint64(b[p + 4]) << np.uint64(32))
        | (np.uint64(b[p + 5]) << np.uint64(40))
        | (np.uint64(b[p + 6]) << np.uint64(48))
        | (np.uint64(b[p + 7]) << np.uint64(56))
    )


@numba.njit(inline="always")
def _ld_u32(b, p):
    return (
        np.uint64(b[p])
        | (np.uint64(b[p + 1]) << np.uint64(8))
        | (np.uint64(b[p + 2]) << np.uint64(16))
        | (np.uint64(b[p + 3]) << np.uint64(24))
    )


@numba.njit(inline="always")
def _xxh_round(acc, inp):
    acc = acc + inp * _P2
    acc = _rotl(acc, 31)
    return acc * _P1


@numba.njit(inline="always")
def _xxh_merge(acc, v):
    acc = acc ^ _xxh_round(_U64_0, v)
    return acc * _P1 + _P4


@numba.njit(nogil=True, cache=True)
def _xxh64(b, start, n):
    """XXH64, seed 0, of ``b[start:start+n]``."""
    p = start
    end = start + n
    if n >= 32:
        v1 = _P1 + _P2
        v2 = _P2
        v3 = _U64_0
        v4 = _U64_0 - _P1
        lim = end - 32
        while p <= lim:
            v1 = _xxh_round(v1, _ld_u64(b, p))
            v2 = _xxh_round(v2, _ld_u64(b, p + 8))
            v3 = _xxh_round(v3, _ld_u64(b, p + 16))
            v4 = _xxh_round(v4, _ld_u64(b, p + 24))
            p += 32
        h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
        h = _xxh_merge(h, v1)
        h = _xxh_merge(h, v2)
        h = _xxh_merge(h, v3)
        h = _xxh_merge(h, v4)
    else:
        h = _P5
    h = h + np.uint64(n)
    while p + 8 <= end:
        h = h ^ _xxh_round(_U64_0, _ld_u64(b, p))
        h = _rotl(h, 27) * _P1 + _P4
        p += 8
    if p + 4 <= end:
        h = h ^ (_ld_u32(b, p) * _P1)
        h = _rotl(h, 23) * _P2 + _P3
        p += 4
    while p < end:
        h = h ^ (np.uint64(b[p]) * _P5)
        h = _rotl(h, 11) * _P1
        p += 1
    h = h ^ (h >> np.uint64(33))
    h = h * _P2
    h = h ^ (h >> np.uint64(29))
    h = h * _P3
    h = h ^ (h >> np.uint64(32))
    return h


@numba.njit(parallel=True, nogil=True, cache=True)
def _xxh64_chunks(data, src_offset, stored_len, idx, out):
    """``out[k] = xxh64(data[src_offset[i]:+stored_len[i]])`` for ``i = idx[k]`` (ranges pre-checked)."""
    for k in numba.prange(idx.shape[0]):
        i = idx[k]
        out[k] = _xxh64(data, np.int64(src_offset[i]), np.int64(stored_len[i]))


# ==============================================================================
# Column decoders
# ==============================================================================
_MSB_MASK = np.uint64(0x8080808080808080)
_NBYTES_MUL = np.uint64(0x0102030405060708)
_SEVEN = np.uint64(0x7F)


@numba.njit(inline="always")
def _varint8(x):
    """Decode the varint starting at the low byte of ``x`` (8 little-endian bytes),
    which must contain a terminating byte (``~x & _MSB_MASK != 0``).

    Branch-free: the first clear continuation bit ends the varint, and the
    7-bit groups are compacted with shifts and masks.  Returns (value, bytes).
    """
    stop = ~x & _MSB_MASK
    low = stop & (_U64_0 - stop)  # the terminating byte's high bit
    # low >> 7 is 2**(8k) for terminator byte k: the multiply picks k + 1
    nbytes = np.int64(((low >> np.uint64(7)) * _NBYTES_MUL) >> np.uint64(56))
    x &= (low << _U64_1) - _U64_1  # wraps to all ones when k == 7
    v = (
        (x & _SEVEN)
        | ((x >> np.uint64(1)) & (_SEVEN << np.uint64(7)))
        | ((x >> np.uint64(2)) & (_SEVEN << np.uint64(14)))
        | ((x >> np.uint64(3)) & (_SEVEN << np.uint64(21)))
        | ((x >> np.uint64(4)) & (_SEVEN << np.uint64(28)))
        | ((x >> np.uint64(5)) & (_SEVEN << np.uint64(35)))
        | ((x >> np.uint64(6)) & (_SEVEN << np.uint64(42)))
        | ((x >> np.uint64(7)) & (_SEVEN << np.uint64(49)))
    )
    return v, nbytes


@numba.njit(nogil=True, cache=True)
def _uvarint(b, p, end):
    """``(value, new_pos, flag)``; ``flag`` is 0, VARINT_TRUNCATED or VARINT_OVERFLOW.

    Reads at most ``b[p:min(end, p + 10)]``.  Not inlined: the hot loops take
    the :func:`_varint8` fast path themselves (see ``_FAST`` below) and call
    this only near the end of a chunk or for 9- and 10-byte varints.
    """
    if end - p >= 8:
        x = _ld_u64(b, p)
        if (~x & _MSB_MASK) != _U64_0:
            v, nb = _varint8(x)
            return v, p + nb, 0
    if end - p >= 10:  # 9- and 10-byte varints: no per-byte bounds checks needed
        v = _U64_0
        shift = np.uint64(0)
        for i in range(9):
            y = b[p + i]
            v |= np.uint64(y & 0x7F) << shift
            if y < 0x80:
                return v, p + i + 1, 0
            shift += np.uint64(7)
        y = b[p + 9]
        if y > 1:
            return v, p + 10, VARINT_OVERFLOW
        return v | (np.uint64(y) << np.uint64(63)), p + 10, 0
    return _uvarint_tail(b, p, end)


# _FAST: each hot loop inlines the 8-byte fast path and calls _uvarint only
# otherwise; this keeps the loop small (measured 2x faster than calling an
# inlined tuple-returning decoder with its fallback paths for every value).


@numba.njit(nogil=True, cache=True)
def _uvarint_tail(b, p, end):
    """:func:`_uvarint` within the last ten bytes of a chunk (bounds-checked per byte)."""
    v = _U64_0
    shift = np.uint64(0)
    for i in range(10):
        if p >= end:
            return v, p, VARINT_TRUNCATED
        x = b[p]
        p += 1
        if i == 9 and x > 1:
            return v, p, VARINT_OVERFLOW
        v |= np.uint64(x & 0x7F) << shift
        if x < 0x80:
            return v, p, 0
        shift += np.uint64(7)
    return v, p, VARINT_OVERFLOW  # unreachable: a tenth byte <= 1 ends the varint


@numba.njit(inline="always")
def _unzigzag(u):
    return (u >> _U64_1) ^ (_U64_0 - (u & _U64_1))


@numba.njit(nogil=True, cache=True)
def _dec_ts_constant(b, p, n, rows, ts, o, min_ts, max_ts):
    if n != 16:
        return BAD_LENGTH
    first = np.int64(_ld_u64(b, p))
    step = np.int64(_ld_u64(b, p + 8))
    if step < 0:
        return NEGATIVE_STEP
    if rows > 1:
        room = np.uint64(_I64_MAX) - np.uint64(first)  # exact: first <= I64_MAX
        if np.uint64(step) > room // np.uint64(rows - 1):
            return TIMESTAMP_OVERFLOW
    cur = np.uint64(first)
    ustep = np.uint64(step)
    for i in range(rows):
        ts[o + i] = np.int64(cur)
        cur += ustep
    f = 0
    if ts[o] != min_ts or ts[o + rows - 1] != max_ts:
        f |= TIMESTAMP_BOUNDS
    return f


@numba.njit(nogil=True, cache=True)
def _dec_ts_dod(b, p, n, rows, ts, o, min_ts, max_ts):
    if n < 8:
        return BAD_LENGTH
    end = p + n
    cur = _ld_u64(b, p)
    p += 8
    prev = np.int64(cur)
    ts[o] = prev
    delta = _U64_0
    f = 0
    safe = end - 8
    for i in range(1, rows):
        if p <= safe:
            x = _ld_u64(b, p)
            fast = (~x & _MSB_MASK) != _U64_0
        else:
            x = _U64_0
            fast = False
        if fast:
            u, vlen = _varint8(x)
            p += vlen
        else:
            u, p, err = _uvarint(b, p, end)
            if err != 0:
                return err
        delta += _unzigzag(u)
        cur += delta
        t = np.int64(cur)
        if t < prev:
            f |= TIMESTAMP_DECREASING
        prev = t
        ts[o + i] = t
    if p != end:
        f |= TRAILING_BYTES
    if ts[o] != min_ts or ts[o + rows - 1] != max_ts:
        f |= TIMESTAMP_BOUNDS
    return f


@numba.njit(nogil=True, cache=True)
def _dec_seq_constant(b, p, n, rows, seq, o):
    if n != 8:
        return BAD_LENGTH
    v = _ld_u64(b, p)
    for i in range(rows):
        seq[o + i] = v
    return 0


@numba.njit(nogil=True, cache=True)
def _dec_seq_delta(b, p, n, rows, seq, o):
    if n < 8:
        return BAD_LENGTH
    end = p + n
    cur = _ld_u64(b, p)
    p += 8
    seq[o] = cur
    safe = end - 8
    for i in range(1, rows):
        if p <= safe:
            x = _ld_u64(b, p)
            fast = (~x & _MSB_MASK) != _U64_0
        else:
            x = _U64_0
            fast = False
        if fast:
            u, vlen = _varint8(x)
            p += vlen
        else:
            u, p, err = _uvarint(b, p, end)
            if err != 0:
                return err
        cur += _unzigzag(u)
        seq[o + i] = cur
    if p != end:
        return TRAILING_BYTES
    return 0


@numba.njit(nogil=True, cache=True)
def _dec_op_constant(b, p, n, rows, op, o):
    if n != 1:
        return BAD_LENGTH
    v = b[p]
    if v > 1:
        return OP_TYPE_INVALID
    for i in range(rows):
        op[o + i] = v
    return 0


@numba.njit(nogil=True, cache=True)
def _dec_op_raw(b, p, n, rows, op, o):
    if n != rows:
        return BAD_LENGTH
    bad = 0
    for i in range(rows):
        v = b[p + i]
        bad |= v > 1
        op[o + i] = v
    if bad:
        return OP_TYPE_INVALID
    return 0


@numba.njit(nogil=True, cache=True)
def _dec_f64_xor(b, p, n, rows, nulls, vals, valid, o):
    if n < 1:
        return BAD_LENGTH
    end = p + n
    kind = b[p]
    p += 1
    if kind == 0:
        if nulls != 0:
            return NULL_COUNT_MISMATCH
        if end - p < 8:
            return BAD_LENGTH
        prev = _ld_u64(b, p)
        p += 8
        vals[o] = prev
        valid[o] = 1
        safe = end - 8
        for i in range(1, rows):
            if p <= safe:
                x = _ld_u64(b, p)
                fast = (~x & _MSB_MASK) != _U64_0
            else:
                x = _U64_0
                fast = False
            if fast:
                u, vlen = _varint8(x)
                p += vlen
            else:
                u, p, err = _uvarint(b, p, end)
                if err != 0:
                    return err
            prev ^= u
            vals[o + i] = prev
            valid[o + i] = 1
    elif kind == 1:
        if nulls <= 0 or nulls >= rows:
            return NULL_COUNT_MISMATCH
        nb = (rows + 7) >> 3
        if end - p < nb + 8:
            return BAD_LENGTH
        bm = p
        p += nb
        rem = rows & 7
        if rem != 0 and (b[bm + nb - 1] >> rem) != 0:
            return VALIDITY_PADDING
        present = 0
        for k in range(nb):
            c = np.int64(b[bm + k])
            c = c - ((c >> 1) & 0x55)
            c = (c & 0x33) + ((c >> 2) & 0x33)
            present += (c + (c >> 4)) & 0x0F
        if present != rows - nulls:
            return NULL_COUNT_MISMATCH
        prev = _ld_u64(b, p)
        p += 8
        safe = end - 8
        first = True
        for i in range(rows):
            if (b[bm + (i >> 3)] >> (i & 7)) & 1:
                if first:
                    first = False
                else:
                    if p <= safe:
                        x = _ld_u64(b, p)
                        fast = (~x & _MSB_MASK) != _U64_0
                    else:
                        x = _U64_0
                        fast = False
                    if fast:
                        u, vlen = _varint8(x)
                        p += vlen
                    else:
                        u, p, err = _uvarint(b, p, end)
                        if err != 0:
                            return err
                    prev ^= u
                vals[o + i] = prev
                valid[o + i] = 1
            else:
                vals[o + i] = _U64_0
                valid[o + i] = 0
    else:
        return VALIDITY_KIND
    if p != end:
        return TRAILING_BYTES
    return 0


@numba.njit(parallel=True, nogil=True, cache=True)
def decode_chunks_kernel(data, scratch, meta, ts, seq, op, vals, valid, flags):
    """Decode every active chunk; OR failures into ``flags``.

    ``data``/``scratch`` uint8[::1] (stored bytes / decompressed bytes),
    ``meta`` int64[n_chunks, N_META] (see the ``M_*`` columns), outputs
    ``ts`` int64[::1], ``seq`` uint64[::1], ``op`` uint8[::1] (may be empty when
    not wanted), ``vals`` uint64[n_fields, n_rows] (float64 bits), ``valid``
    uint8[n_fields, n_rows], ``flags`` uint32[n_chunks].
    """
    n = meta.shape[0]
    for i in numba.prange(n):
        if meta[i, M_ACTIVE] == 0:
            continue
        buf = scratch if meta[i, M_IN_SCRATCH] != 0 else data
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
                f = _dec_ts_constant(buf, p, ln, rows, ts, o, meta[i, M_MIN_TS], meta[i, M_MAX_TS])
            else:
                f = _dec_ts_dod(buf, p, ln, rows, ts, o, meta[i, M_MIN_TS], meta[i, M_MAX_TS])
        elif enc == 3 or enc == 4:
            if o + rows > seq.shape[0]:
                f = BAD_LENGTH
            elif enc == 3:
                f = _dec_seq_constant(buf, p, ln, rows, seq, o)
            else:
                f = _dec_seq_delta(buf, p, ln, rows, seq, o)
        elif enc == 5:
            fi = meta[i, M_FIELD]
            if fi < 0 or fi >= vals.shape[0] or o + rows > vals.shape[1]:
                f = BAD_LENGTH
            else:
                f = _dec_f64_xor(buf, p, ln, rows, meta[i, M_NULLS], vals[fi], valid[fi], o)
        elif enc == 6 or enc == 7:
            if o + rows > op.shape[0]:
                f = BAD_LENGTH
            elif enc == 6:
                f = _dec_op_constant(buf, p, ln, rows, op, o)
            else:
                f = _dec_op_raw(buf, p, ln, rows, op, o)
        else:
            f = UNSUPPORTED_ENCODING
        if f != 0:
            flags[i] |= np.uint32(f)


# ==============================================================================
# Host side
# ==============================================================================
_STATS: dict[str, float] = {}
_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0
_POOL_LOCK = threading.Lock()
_TLS = threading.local()
#: Largest decompression scratch buffer kept for reuse by a thread.
SCRATCH_KEEP_BYTES = 64 << 20

#: ``"pool"``: a thread pool of ``ZstdDecompressor.decompress(max_output_size=
#: declared)`` calls, one contiguous range of chunks per thread (measured 1.7x
#: faster than ``"multi"``, ``multi_decompress_to_buffer``, on 2 cores; see
#: benchmarks/bench_zstd_batch.py).  A failing ``"multi"`` call falls back to the
#: pool path, which pins each bad chunk.
ZSTD_STRATEGY = "pool"


def last_stats() -> dict[str, float]:
    """Stage times (seconds) of the last :func:`decode_batch` call in this process."""
    return dict(_STATS)


def _threads(threads: int | None) -> int:
    if threads is None or threads <= 0:
        return max(1, numba.get_num_threads())
    return max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS))


def _checksums_ok(batch: ChunkBatch, flags: np.ndarray, todo: np.ndarray | None = None, data=None,
                  n_threads: int = 1) -> None:
    """OR ``CHECKSUM_MISMATCH`` into ``flags`` for chunks ``todo`` (default: all)."""
    ch = batch.chunks
    if data is None:
        data = np.ascontiguousarray(batch.data)
    if todo is None:
        todo = np.arange(len(ch), dtype=np.int64)
    if todo.size == 0:
        return
    stored = ch["stored_len"][todo]
    small = todo[stored < SMALL_CHUNK_BYTES]
    large = todo[stored >= SMALL_CHUNK_BYTES]
    if small.size:
        src = np.ascontiguousarray(ch["src_offset"], dtype=np.uint64)
        ln = np.ascontiguousarray(ch["stored_len"], dtype=np.uint32)
        got = np.empty(small.size, dtype=np.uint64)
        with _threads_set(n_threads if small.size >= PARALLEL_MIN_ITEMS else 1):
            _xxh64_chunks(data, src, ln, small.astype(np.int64), got)
        bad = small[got != ch["checksum"][small]]
        flags[bad] |= CHECKSUM_MISMATCH
    if large.size:
        mv = memoryview(data)
        h = xxhash.xxh64_intdigest
        starts = ch["src_offset"][large].tolist()
        ends = (ch["src_offset"][large] + ch["stored_len"][large]).tolist()
        got = np.fromiter((h(mv[a:b]) for a, b in zip(starts, ends)), dtype=np.uint64, count=large.size)
        bad = large[got != ch["checksum"][large]]
        flags[bad] |= CHECKSUM_MISMATCH


def _classify_zstd_error(exc: BaseException) -> int:
    """Flag for a zstandard exception from ``decompress(max_output_size=declared)``.

    Output that does not fit the declared capacity is a length mismatch;
    everything else (corrupt blocks, content checksum, ...) a decompression failure.
    """
    msg = str(exc)
    if "did not decompress full frame" in msg or "too small" in msg:
        return DECODED_LENGTH_MISMATCH
    return ZSTD_DECOMPRESS_FAILED


def _decompress_one(dctx, mv, start: int, stored: int, declared: int):
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
    to the error (``""`` on success).  ``dctx``: a reusable
    ``zstandard.ZstdDecompressor`` (one per thread); a new one otherwise.

    This is only the decompression step: callers verify the XXH64 checksum and
    the frame structure (:func:`gtsamples.decode.zstd_frames.check_zstd_frame`)
    first, as the backends do, because python-zstandard ignores the capacity
    when the frame declares a content size.  The GPU backend uses it to give a
    chunk nvCOMP could not decompress the CPU backend's exact flag.
    """
    mv = memoryview(stored)
    if mv.ndim != 1 or mv.format not in ("B", "b", "c"):
        mv = mv.cast("B")
    out, flag, msg = _decompress_one(dctx if dctx is not None else zstandard.ZstdDecompressor(), mv, 0, mv.nbytes,
                                     int(declared))  # fmt: skip
    return (out, flag, msg) if detail else (out, flag)


def _scratch(size: int) -> np.ndarray:
    """A uint8 scratch buffer of ``size`` bytes, reused per thread up to :data:`SCRATCH_KEEP_BYTES`.

    The kernel copies everything out of it, so reuse across calls is safe;
    reuse saves the page faults of a fresh allocation.
    """
    if size > SCRATCH_KEEP_BYTES:
        return np.empty(size, dtype=np.uint8)
    buf = getattr(_TLS, "scratch", None)
    if buf is None or buf.size < size:
        buf = np.empty(max(size, 1 << 16), dtype=np.uint8)
        _TLS.scratch = buf
    return buf[:size]


def _get_pool(n: int) -> ThreadPoolExecutor:
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        if _POOL is None or _POOL_SIZE < n:
            if _POOL is not None:
                _POOL.shutdown(wait=False)
            _POOL = ThreadPoolExecutor(max_workers=n, thread_name_prefix="gtsamples-zstd")
            _POOL_SIZE = n
        return _POOL


def _decompress(batch: ChunkBatch, zidx: np.ndarray, flags: np.ndarray, n_threads: int, detail: dict,
                strategy: str | None = None, data=None):
    """Decompress chunks ``zidx`` (structurally checked frames) into one scratch buffer.

    Returns ``(scratch, offsets)``: chunk ``zidx[k]``'s decoded bytes are
    ``scratch[offsets[k]:offsets[k] + decoded_len]``.  Failures are ORed into
    ``flags`` (with a message in ``detail``); their scratch bytes are undefined.
    Every call has capacity = declared length, and the frame check already
    guaranteed that a present content size equals it, so no output is larger.
    """
    ch = batch.chunks
    if data is None:
        data = np.ascontiguousarray(batch.data)
    declared = ch["decoded_len"][zidx].astype(np.int64)
    offsets = np.zeros(zidx.size + 1, dtype=np.int64)
    np.cumsum(declared, out=offsets[1:])
    total = int(offsets[-1])
    scratch = _scratch(total)
    if zidx.size == 0:
        return scratch, offsets[:-1]
    threads = n_threads if (n_threads > 1 and total >= PARALLEL_ZSTD_MIN_BYTES and zidx.size > 1) else 1
    strategy = strategy or ZSTD_STRATEGY
    src = ch["src_offset"][zidx]
    stored = ch["stored_len"][zidx]
    if strategy == "multi" and _decompress_multi(data, src, stored, declared, offsets, scratch, threads):
        return scratch, offsets[:-1]
    # One contiguous range of chunks per thread (balanced by decoded bytes).
    mv = memoryview(data)
    smv = memoryview(scratch)
    s = src.tolist()
    n = stored.tolist()
    d = declared.tolist()
    o = offsets.tolist()
    failures: list[tuple[int, int, str]] = []

    def work(lo: int, hi: int) -> None:
        dctx = zstandard.ZstdDecompressor()
        for k in range(lo, hi):
            out, f, msg = _decompress_one(dctx, mv, s[k], n[k], d[k])
            if f:
                failures.append((k, f, msg))  # list.append is atomic
            else:
                smv[o[k] : o[k + 1]] = out

    if threads == 1:
        work(0, zidx.size)
    else:
        cuts = np.searchsorted(offsets, np.linspace(0, total, threads + 1)[1:-1]).tolist()
        bounds = [0, *cuts, zidx.size]
        pool = _get_pool(threads)
        futures = [pool.submit(work, bounds[t], bounds[t + 1]) for t in range(threads) if bounds[t] < bounds[t + 1]]
        for fut in futures:
            fut.result()
    for k, f, msg in failures:
        i = int(zidx[k])
        flags[i] |= f
        detail[i] = msg
    return scratch, offsets[:-1]


def _decompress_multi(data, src, stored, declared, offsets, scratch, threads) -> bool:
    """``multi_decompress_to_buffer`` into ``scratch``; False (nothing pinned) if the call fails."""
    segments = np.empty((src.size, 2), dtype=np.uint64)
    segments[:, 0] = src
    segments[:, 1] = stored
    o = offsets.tolist()
    try:
        res = zstandard.ZstdDecompressor().multi_decompress_to_buffer(
            zstandard.BufferWithSegments(data, segments.tobytes()),
            decompressed_sizes=declared.astype(np.uint64).tobytes(),
            threads=threads,
        )
        if len(res) != src.size:
            return False
        smv = memoryview(scratch)
        for k in range(src.size):
            seg = res[k]
            if len(seg) != o[k + 1] - o[k]:
                return False
            smv[o[k] : o[k + 1]] = seg
        return True
    except Exception:  # any zstandard error: pin the failing chunk one by one
        return False


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


def decode_batch_flags(batch: ChunkBatch, threads: int | None = None):
    """Like :func:`decode_batch` but never raises for bad chunks.

    Returns ``(columns, flags, detail)``: per-chunk uint32 flag words and extra
    message text keyed by chunk index.  Columns of flagged chunks are undefined.
    """
    t0 = time.perf_counter()
    ch = batch.chunks
    n = len(ch)
    n_rows = int(batch.n_rows)
    n_fields = len(batch.field_names)
    _check_batch(batch, n_fields)
    n_threads = _threads(threads)
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
    _checksums_ok(batch, flags, prevalid, data, n_threads)
    t2 = time.perf_counter()
    comp = ch["compression"]
    flags[~skip & (comp != COMP_RAW) & (comp != COMP_ZSTD)] |= UNSUPPORTED_COMPRESSION
    known_enc = np.isin(ch["encoding"], np.array(KNOWN_COLUMN_ENCODINGS, dtype=ch["encoding"].dtype))
    flags[~skip & ~known_enc] |= UNSUPPORTED_ENCODING
    flags[~skip & (comp == COMP_RAW) & (ch["stored_len"] != ch["decoded_len"])] |= DECODED_LENGTH_MISMATCH

    # Zstd: structural check, then decompression with bounded output.
    zidx = np.flatnonzero(~skip & (comp == COMP_ZSTD) & (flags == 0))
    zflags = np.zeros(zidx.size, dtype=np.uint32)
    if zidx.size:
        with _threads_set(n_threads if zidx.size >= PARALLEL_MIN_ITEMS else 1):
            check_zstd_frames(
                data,
                np.ascontiguousarray(ch["src_offset"][zidx], dtype=np.uint64),
                np.ascontiguousarray(ch["stored_len"][zidx], dtype=np.uint32),
                np.ascontiguousarray(ch["decoded_len"][zidx], dtype=np.uint32),
                zflags,
            )
        flags[zidx] |= zflags
    t3 = time.perf_counter()
    zok_all = zidx[zflags == 0]

    # Kernel metadata.
    meta = np.empty((n, N_META), dtype=np.int64)
    meta[:, M_ACTIVE] = ~skip & (flags == 0)
    meta[:, M_IN_SCRATCH] = 0
    meta[:, M_OFFSET] = ch["src_offset"].astype(np.int64)
    meta[:, M_LENGTH] = ch["decoded_len"]
    meta[:, M_ENCODING] = ch["encoding"]
    meta[:, M_ROWS] = ch["rows"]
    meta[:, M_NULLS] = ch["null_count"]
    meta[:, M_OUT_ROW] = ch["out_row"].astype(np.int64)
    meta[:, M_FIELD] = slot.astype(np.int64) - FIRST_FIELD_SLOT
    meta[:, M_MIN_TS] = ch["min_timestamp"]
    meta[:, M_MAX_TS] = ch["max_timestamp"]

    # Zeroed outputs (calloc: fresh zero pages, no memset for large arrays), so
    # rows of omitted or rejected chunks never expose uninitialised memory.
    ts = np.zeros(n_rows, dtype=np.int64)
    seq = np.zeros(n_rows if batch.want_sequence else 0, dtype=np.uint64)
    op = np.zeros(n_rows if batch.want_op_type else 0, dtype=np.uint8)
    vals = np.zeros((n_fields, n_rows), dtype=np.float64)
    valid = np.zeros((n_fields, n_rows), dtype=np.uint8)

    # Decompress and decode in windows of at most SCRATCH_KEEP_BYTES decoded
    # bytes, so the scratch buffer is reused and peak memory stays bounded.
    t_dec = t_kernel = 0.0
    if n:
        zsize = np.zeros(n, dtype=np.int64)
        zsize[zok_all] = ch["decoded_len"][zok_all]
        cum = np.cumsum(zsize)
        lo = 0
        while lo < n:
            base = int(cum[lo - 1]) if lo else 0
            hi = int(np.searchsorted(cum, base + SCRATCH_KEEP_BYTES, side="right"))
            hi = min(max(hi, lo + 1), n)
            ta = time.perf_counter()
            zok = zok_all[(zok_all >= lo) & (zok_all < hi)]
            scratch, zoff = _decompress(batch, zok, flags, n_threads, detail, data=data)
            if zok.size:
                meta[zok, M_IN_SCRATCH] = 1
                meta[zok, M_OFFSET] = zoff
                meta[zok, M_ACTIVE] = flags[zok] == 0
            tb = time.perf_counter()
            m = meta[lo:hi]
            work = int(m[m[:, M_ACTIVE] != 0, M_ROWS].sum(dtype=np.int64))
            with _threads_set(n_threads if work >= PARALLEL_MIN_VALUES else 1):
                decode_chunks_kernel(data, scratch, m, ts, seq, op, vals.view(np.uint64), valid, flags[lo:hi])
            t_dec += tb - ta
            t_kernel += time.perf_counter() - tb
            lo = hi
    t5 = time.perf_counter()

    _STATS.clear()
    _STATS.update(prepare=t1 - t0, checksum=t2 - t1, frame_check=t3 - t2, decompress=t_dec, kernel=t_kernel,
                  total=t5 - t0)
    vb = valid.view(np.bool_)
    cols = DecodedColumns(
        timestamp=ts,
        sequence=seq if batch.want_sequence else None,
        op_type=op if batch.want_op_type else None,
        values=[vals[k] for k in range(n_fields)],
        validity=[vb[k] for k in range(n_fields)],
    )
    return cols, flags, detail


class _threads_set:
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
    from ..batch import BLOCK_DTYPE, CHUNK_DTYPE

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
