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

import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
import xxhash
import zstandard
from llvmlite import ir
from numba.core import cgutils, types
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic, overload

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
from ...errors import DecodeErrorFlag
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

if sys.byteorder != "little":  # pragma: no cover - the kernels load little-endian words directly
    raise ImportError("gtsamples.decode.cpu needs a little-endian host")

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
SEQUENCE_ORDER = int(DecodeErrorFlag.SEQUENCE_ORDER)
#: Flags the timestamp and sequence decoders raise only after writing every row of the chunk.
ROWS_WRITTEN_FLAGS = TIMESTAMP_BOUNDS | TIMESTAMP_DECREASING | SEQUENCE_ORDER

#: Below these amounts of work a stage runs on the calling thread only.  A
#: fork-join region costs microseconds on an idle machine but can stall for a
#: scheduler slice (~10 ms measured) when the cores are busy, far more than the
#: serial cost of small work (frame check ~10 ns/frame, kernel ~3-7 ns/value).
PARALLEL_ZSTD_MIN_BYTES = 1 << 20  # decoded Zstd bytes
PARALLEL_MIN_ITEMS = 32_768  # frames to check / small chunks to hash
PARALLEL_MIN_VALUES = 262_144  # rows of active chunks to decode (or identity rows to fill)
PARALLEL_HASH_MIN_BYTES = 4 << 20  # stored bytes to hash

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
M_TS_CHUNK = 11  # sequence chunks: the block's timestamp chunk (order check), else -1
N_META = 12

_U64_0 = np.uint64(0)
_U64_1 = np.uint64(1)
_I64_MAX = np.iinfo(np.int64).max



# ==============================================================================
# Unaligned little-endian loads
# ==============================================================================
def _ld_u64(b, p):
    """Little-endian u64 at ``b[p:p+8]`` (caller checked the bounds).

    Compiled code uses one unaligned 8-byte load (:func:`_ld_u64_impl`); this
    Python body is what runs when the kernels run as Python (tests).
    """
    return np.uint64(int.from_bytes(bytes(b[p : p + 8]), "little"))


def _ld_u32(b, p):
    """Little-endian u32 at ``b[p:p+4]``, widened to u64 (caller checked the bounds)."""
    return np.uint64(int.from_bytes(bytes(b[p : p + 4]), "little"))


def _tz64(x):
    """Trailing zero bits of a nonzero u64."""
    x = int(x)
    return np.int64((x & -x).bit_length() - 1)


def _unaligned_load_intrinsic(bits):
    """An intrinsic loading ``bits`` little-endian bits at byte ``p`` of a uint8 array.

    Byte-wise loads with numba's negative-index wraparound were the largest
    cost of the varint loops (about 2x); one ``align 1`` load is what C would
    emit.  Hosts are little-endian (checked at import).
    """

    @intrinsic
    def load(typingctx, arr, pos):
        if not isinstance(arr, types.Array) or arr.dtype != types.uint8 or not isinstance(pos, types.Integer):
            return None
        sig = types.uint64(arr, pos)

        def codegen(context, builder, signature, args):
            ary = context.make_array(signature.args[0])(context, builder, args[0])
            idx = context.cast(builder, args[1], signature.args[1], types.intp)
            ptr = builder.bitcast(builder.gep(ary.data, [idx]), ir.IntType(bits).as_pointer())
            v = builder.load(ptr, align=1)
            return builder.zext(v, ir.IntType(64)) if bits < 64 else v

        return sig, codegen

    return load


_ld_u64_impl = _unaligned_load_intrinsic(64)
_ld_u32_impl = _unaligned_load_intrinsic(32)


@overload(_ld_u64, inline="always")
def _ld_u64_ol(b, p):
    return lambda b, p: _ld_u64_impl(b, p)


@overload(_ld_u32, inline="always")
def _ld_u32_ol(b, p):
    return lambda b, p: _ld_u32_impl(b, p)


@overload(_tz64, inline="always")
def _tz64_ol(x):
    return lambda x: np.int64(trailing_zeros(x))


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
_SEVEN = np.uint64(0x7F)
_BYTE = np.uint64(0xFF)


@numba.njit(inline="always")
def _varint8(x):
    """Decode the varint starting at the low byte of ``x`` (8 little-endian bytes),
    which must contain a terminating byte (``~x & _MSB_MASK != 0``).

    Branch-free: the first clear continuation bit ends the varint, and the
    7-bit groups are compacted with shifts and masks.  Returns (value, bytes).
    The loop-carried cost is load -> andn -> tzcnt -> add.
    """
    stop = ~x & _MSB_MASK
    nbytes = (_tz64(stop) >> 3) + 1
    low = stop & (_U64_0 - stop)  # the terminating byte's high bit
    x &= (low << _U64_1) - _U64_1  # wraps to all ones when the terminator is byte 7
    return _compact7(x), nbytes


_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_PAIR_LO = np.uint64(0x007F007F007F007F)
_QUAD_LO = np.uint64(0x00003FFF00003FFF)
_OCT_LO = np.uint64(0x000000000FFFFFFF)


@numba.njit(inline="always")
def _compact7(x):
    """The 7-bit groups of the 8 bytes of ``x`` (continuation bits dropped), packed into 56 bits.

    SWAR in three steps (pairs, quads, halves): 13 operations instead of 24
    for eight separate shift-and-mask terms.
    """
    x &= _LOW7
    x = (x & _PAIR_LO) | ((x >> np.uint64(1)) & ~_PAIR_LO & np.uint64(0x3FFF3FFF3FFF3FFF))
    x = (x & _QUAD_LO) | ((x >> np.uint64(2)) & ~_QUAD_LO & np.uint64(0x0FFFFFFF0FFFFFFF))
    return (x & _OCT_LO) | ((x >> np.uint64(4)) & ~_OCT_LO)


def _host_pext() -> tuple[bool, bool]:
    """``(has_bmi2, fast_pext)`` of the CPU numba compiles for.

    ``pext`` packs the 7-bit groups of a varint in one instruction.  It is
    one cycle of throughput on Intel since Haswell and AMD since Zen 3, but
    microcoded (tens to hundreds of cycles) on Zen 1/2, where the shift-and-mask
    :func:`_compact7` is faster.  Numba's cache is keyed by the host CPU name
    and features, so a kernel compiled with either choice is only reused on a
    CPU of the same kind.
    """
    import platform

    import llvmlite.binding as ll

    if platform.machine().lower() not in ("x86_64", "amd64"):  # pragma: no cover - other hosts
        return False, False
    try:
        has = bool(ll.get_host_cpu_features().get("bmi2", False))
        name = ll.get_host_cpu_name()
    except Exception:  # pragma: no cover - llvmlite without host introspection
        return False, False
    slow = name in ("znver1", "znver2") or name.startswith(("bdver", "btver"))
    return has, has and not slow


HAS_BMI2, FAST_PEXT = _host_pext()


def _pext(x, m):
    """``pext(x, m)``: the bits of ``x`` at the set bits of ``m``, packed low.

    Compiled code emits the BMI2 instruction (only where :data:`FAST_PEXT`
    selects it); this body runs when the kernels run as Python (tests).
    """
    x, m = int(x), int(m)
    out = k = 0
    while m:
        low = m & -m
        if x & low:
            out |= 1 << k
        k += 1
        m ^= low
    return np.uint64(out)


@intrinsic
def _pext_impl(typingctx, x, m):
    if not (isinstance(x, types.Integer) and isinstance(m, types.Integer)):
        return None
    sig = types.uint64(types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, [i64, i64]), "llvm.x86.bmi.pext.64")
        return builder.call(fn, list(args))

    return sig, codegen


@overload(_pext, inline="always")
def _pext_ol(x, m):
    return lambda x, m: _pext_impl(x, m)


def _varint_bits(x, nbytes):
    """The 7-bit groups of the first ``nbytes`` (1..8) bytes of ``x``, packed: the
    value of a varint of that length whose bytes ``x`` starts with."""
    mask = _LOW7 >> np.uint64(64 - 8 * nbytes)
    return _pext(x, mask) if FAST_PEXT else _compact7(x & mask)


@overload(_varint_bits, inline="always")
def _varint_bits_ol(x, nbytes):
    if FAST_PEXT:
        return lambda x, nbytes: _pext(x, _LOW7 >> np.uint64(64 - 8 * nbytes))
    return lambda x, nbytes: _compact7(x & (_LOW7 >> np.uint64(64 - 8 * nbytes)))  # pragma: no cover - host without fast pext


@numba.njit(inline="always")
def _long_varint(b, p, x):
    """The 9- or 10-byte varint at ``p`` whose first 8 bytes, ``x``, hold no terminator.

    Needs ``p + 10 <= end``.  Returns ``(value, new_pos, flag)``; a tenth byte
    above 1 is ``VARINT_OVERFLOW`` (a tenth byte always terminates).  Inlined
    in the hot loops: XOR deltas of floats whose sign or exponent differ are
    9 or 10 bytes long, and a call per value cost 3x (measured).
    """
    v = _compact7(x)
    y = np.uint64(b[p + 8])
    v |= (y & _SEVEN) << np.uint64(56)
    if y < 0x80:
        return v, p + 9, 0
    z = b[p + 9]
    if z > 1:
        return v, p + 10, VARINT_OVERFLOW
    return v | (np.uint64(z) << np.uint64(63)), p + 10, 0


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


# _FAST: each hot loop inlines its varint step and calls _uvarint only within
# ten bytes of the chunk's end: eight one-byte varints in one 8-byte word (no
# continuation bit set: sequences, repeated values), one varint of at most 8
# bytes (_varint8), or of 9-10 bytes (_long_varint).  Written out in each loop:
# one shared inline step returning (value, pos, flag) measured 1.3-2x slower.


@numba.njit(nogil=True, cache=True)
def _uvarint_tail(b, p, end):
    """:func:`_uvarint` when fewer than ten bytes remain (``end - p < 10``, so no
    tenth byte can exist): a terminated varint or ``VARINT_TRUNCATED``."""
    v = _U64_0
    shift = np.uint64(0)
    while p < end:
        x = b[p]
        p += 1
        v |= np.uint64(x & 0x7F) << shift
        if x < 0x80:
            return v, p, 0
        shift += np.uint64(7)
    return v, p, VARINT_TRUNCATED


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
    safe = end - 10  # a full 10-byte varint fits: no per-byte bounds checks
    i = 1
    while i < rows:
        if p <= safe:
            x = _ld_u64(b, p)
            if (x & _MSB_MASK) == _U64_0 and i + 8 <= rows:  # eight 1-byte varints
                for j in range(8):
                    delta += _unzigzag((x >> np.uint64(8 * j)) & _SEVEN)
                    cur += delta
                    t = np.int64(cur)
                    if t < prev:
                        f |= TIMESTAMP_DECREASING
                    prev = t
                    ts[o + i + j] = t
                i += 8
                p += 8
                continue
            if (~x & _MSB_MASK) != _U64_0:
                u, vlen = _varint8(x)
                p += vlen
            else:
                u, p, err = _long_varint(b, p, x)
                if err != 0:
                    return err
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
        i += 1
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
def _dec_seq_delta(b, p, n, rows, seq, o, ts, check):
    """Encoding 4; with ``check``, also the order rule against ``ts[o:o + rows]``
    (the block's decoded timestamps): ``SEQUENCE_ORDER`` when the chunk decodes
    cleanly otherwise."""
    if n < 8:
        return BAD_LENGTH
    end = p + n
    cur = _ld_u64(b, p)
    p += 8
    seq[o] = cur
    unordered = False
    safe = end - 10  # a full 10-byte varint fits: no per-byte bounds checks
    i = 1
    while i < rows:
        if p <= safe:
            x = _ld_u64(b, p)
            if (x & _MSB_MASK) == _U64_0 and i + 8 <= rows:  # eight 1-byte varints
                for j in range(8):
                    nxt = cur + _unzigzag((x >> np.uint64(8 * j)) & _SEVEN)
                    if check and nxt > cur and ts[o + i + j] == ts[o + i + j - 1]:
                        unordered = True
                    cur = nxt
                    seq[o + i + j] = cur
                i += 8
                p += 8
                continue
            if (~x & _MSB_MASK) != _U64_0:
                u, vlen = _varint8(x)
                p += vlen
            else:
                u, p, err = _long_varint(b, p, x)
                if err != 0:
                    return err
        else:
            u, p, err = _uvarint(b, p, end)
            if err != 0:
                return err
        nxt = cur + _unzigzag(u)
        if check and nxt > cur and ts[o + i] == ts[o + i - 1]:
            unordered = True
        cur = nxt
        seq[o + i] = cur
        i += 1
    if p != end:
        return TRAILING_BYTES
    return SEQUENCE_ORDER if unordered else 0


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
    # Slices indexed from a range are known nonnegative (no wraparound code), and
    # the OR of all values exceeds 1 iff some value does: the loop vectorises (6x).
    src = b[p:p + rows]
    dst = op[o:o + rows]
    seen = 0
    for i in range(rows):
        v = src[i]
        seen |= v
        dst[i] = v
    if seen > 1:
        return OP_TYPE_INVALID
    return 0


@numba.njit(inline="always")
def _all_valid_byte(u, nb, tail_bits):
    """Byte ``u`` of an all-valid chunk bitmap of ``nb`` bytes (0 outside it)."""
    if u < 0 or u >= nb:
        return 0
    if u < nb - 1 or tail_bits == 0:
        return 0xFF
    return (1 << tail_bits) - 1


@numba.njit(nogil=True, cache=True)
def _emit_validity(bm, o, rows, src, sp, edges, ci):
    """Write validity bits ``[o, o + rows)`` of the Arrow bitmap ``bm`` (LSB first).

    ``sp < 0``: every row is valid; else the chunk's bitmap is ``src[sp:]``
    (bit ``i`` for chunk row ``i``, padding bits already checked zero).  Bytes
    wholly inside the range are written here; the at most two bytes this
    range shares with its neighbours go to ``edges[ci]`` (head, tail) and are
    ORed in by :func:`_finish_bitmap`, so chunks decoded concurrently never
    write the same byte.
    """
    nb = (rows + 7) >> 3
    s = o & 7
    q = o >> 3
    end = o + rows
    last = (end - 1) >> 3
    tail_bits = rows & 7
    for j in range(q, last + 1):
        u = j - q
        if sp < 0:
            hi = _all_valid_byte(u, nb, tail_bits)
            lo = _all_valid_byte(u - 1, nb, tail_bits)
        else:
            hi = np.int64(src[sp + u]) if u < nb else 0
            lo = np.int64(src[sp + u - 1]) if u >= 1 else 0
        if s == 0:
            v = hi
        else:
            v = ((hi << s) | (lo >> (8 - s))) & 0xFF
        if 8 * j >= o and 8 * j + 8 <= end:
            bm[j] = v
        elif j == q:
            edges[ci, 0] = v
        else:
            edges[ci, 1] = v


@numba.njit(nogil=True, cache=True)
def _f64_header(b, p, n, rows, nulls):
    """Check an encoding-5 chunk's validity prefix: ``(flag, first_value_pos, bitmap_pos, n_values)``.

    ``bitmap_pos`` is -1 for kind 0 (all valid).  After this, the chunk's
    values are ``n_values`` XOR-chained words starting at ``first_value_pos``.
    """
    if n < 1:
        return BAD_LENGTH, 0, -1, 0
    end = p + n
    kind = b[p]
    p += 1
    if kind == 0:
        if nulls != 0:
            return NULL_COUNT_MISMATCH, 0, -1, 0
        if end - p < 8:
            return BAD_LENGTH, 0, -1, 0
        return 0, p, -1, rows
    if kind != 1:
        return VALIDITY_KIND, 0, -1, 0
    if nulls <= 0 or nulls >= rows:
        return NULL_COUNT_MISMATCH, 0, -1, 0
    nb = (rows + 7) >> 3
    if end - p < nb + 8:
        return BAD_LENGTH, 0, -1, 0
    rem = rows & 7
    if rem != 0 and (b[p + nb - 1] >> rem) != 0:
        return VALIDITY_PADDING, 0, -1, 0
    present = 0
    for k in range(nb):
        c = np.int64(b[p + k])
        c = c - ((c >> 1) & 0x55)
        c = (c & 0x33) + ((c >> 2) & 0x33)
        present += (c + (c >> 4)) & 0x0F
    if present != rows - nulls:
        return NULL_COUNT_MISMATCH, 0, -1, 0
    return 0, p + nb, p, present


@numba.njit(nogil=True, cache=True)
def _xor_continue(b, p, end, n, out, o, i, prev):
    """Values ``i..n-1`` of an XOR chain into ``out[o + i]`` (``prev``: value ``i - 1``); ``(pos, flag)``."""
    safe = end - 10  # a full 10-byte varint fits: no per-byte bounds checks
    while i < n:
        if p <= safe:
            x = _ld_u64(b, p)
            if (x & _MSB_MASK) == _U64_0 and i + 8 <= n:  # eight 1-byte varints
                for j in range(8):
                    prev ^= (x >> np.uint64(8 * j)) & _SEVEN
                    out[o + i + j] = prev
                i += 8
                p += 8
                continue
            if (~x & _MSB_MASK) != _U64_0:
                u, vlen = _varint8(x)
                p += vlen
            else:
                u, p, err = _long_varint(b, p, x)
                if err != 0:
                    return p, err
        else:
            u, p, err = _uvarint(b, p, end)
            if err != 0:
                return p, err
        prev ^= u
        out[o + i] = prev
        i += 1
    return p, 0


_GATHER_MSB = np.uint64(0x0002040810204081)
#: Float chunks averaging at least this many bytes per varint find their varint
#: ends 64 bytes at a time (:func:`_dec_f64_long`); shorter ones take the
#: varint-by-varint loop, whose eight-1-byte-varints step is faster there.
MASKED_MIN_BYTES_PER_VALUE = 3
#: A 64-byte terminator window plus the 8-byte load of a varint starting in it.
_MASK_SPAN = 72


@numba.njit(inline="always")
def _terminators(b, base):
    """Bit ``j`` set where byte ``base + j`` (``0 <= j < 64``) ends a varint (high bit clear).

    Per 8-byte word the high bits are gathered by one multiply: byte ``j``'s
    bit 7 lands in bit ``56 + j``.
    """
    m = _U64_0
    for w in range(8):
        x = ~_ld_u64(b, base + 8 * w) & _MSB_MASK
        m |= ((x * _GATHER_MSB) >> np.uint64(56)) << np.uint64(8 * w)
    return m


@numba.njit(inline="always")
def _validity_word(b, bmp, w, rows, vals, o):
    """Validity of rows ``[64 w, 64 w + 64)`` as one word (rows past ``rows`` clear;
    ``bmp < 0``: all valid), after zeroing those rows' values where null.

    ``b[bmp + 8 w: +8]`` may run past the bitmap into the first value (the
    header guarantees 8 bytes follow it); those bits are past ``rows``.
    """
    if bmp < 0:
        word = ~_U64_0
    else:
        word = _ld_u64(b, bmp + 8 * w)
    left = rows - 64 * w
    if left < 64:
        word &= (_U64_1 << np.uint64(left)) - _U64_1
        nulls = ~word & ((_U64_1 << np.uint64(left)) - _U64_1)
    else:
        nulls = ~word
    while nulls != _U64_0:
        vals[o + 64 * w + _tz64(nulls)] = _U64_0
        nulls &= nulls - _U64_1
    return word


@numba.njit(nogil=True, cache=True)
def _dec_f64_long(b, vp, end, rows, nv, vals, o, bmp):
    """Scatter the ``nv`` values of an XOR chain of long varints (the first a fixed
    8-byte word at ``vp``) to their rows; null rows get 0.  Returns ``(pos, flag)``.

    A varint-by-varint loop is latency-bound: the next position waits for the
    load, terminator search and length of the current varint (~11 cycles).
    Here the varint ends of 64 bytes are found at once (:func:`_terminators`),
    so each value's start and length come from that mask alone and the loads
    run ahead; the 7-bit groups are packed by :func:`_varint_bits`.  Rows come
    the same way from 64 validity bits at a time.  Within :data:`_MASK_SPAN`
    bytes of ``end`` the varints are read one by one with bounds checks.  A
    varint longer than ten bytes, or with a tenth byte above 1, is
    ``VARINT_OVERFLOW``; running out of bytes ``VARINT_TRUNCATED``.
    """
    w = 0
    vbits = _validity_word(b, bmp, 0, rows, vals, o)
    while vbits == _U64_0:
        w += 1
        vbits = _validity_word(b, bmp, w, rows, vals, o)
    prev = _ld_u64(b, vp)
    vals[o + 64 * w + _tz64(vbits)] = prev
    vbits &= vbits - _U64_1
    s = vp + 8
    i = 1
    base = s
    mask = _terminators(b, base) if base + _MASK_SPAN <= end else _U64_0
    while i < nv:
        if mask == _U64_0:
            if base + 64 + _MASK_SPAN > end:
                break
            base += 64
            mask = _terminators(b, base)
            continue
        e = base + _tz64(mask)
        mask &= mask - _U64_1
        ln = e - s + 1
        x = _ld_u64(b, s)
        if ln <= 8:
            v = _varint_bits(x, ln)
        elif ln == 9:
            v = _compact7(x) | ((np.uint64(b[s + 8]) & _SEVEN) << np.uint64(56))
        else:
            z = b[s + 9]
            if ln > 10 or z > 1:
                return s, VARINT_OVERFLOW
            v = _compact7(x) | ((np.uint64(b[s + 8]) & _SEVEN) << np.uint64(56)) | (np.uint64(z) << np.uint64(63))
        s = e + 1
        prev ^= v
        while vbits == _U64_0:
            w += 1
            vbits = _validity_word(b, bmp, w, rows, vals, o)
        vals[o + 64 * w + _tz64(vbits)] = prev
        vbits &= vbits - _U64_1
        i += 1
    while i < nv:  # the last bytes
        u, s, err = _uvarint(b, s, end)
        if err != 0:
            return s, err
        prev ^= u
        while vbits == _U64_0:
            w += 1
            vbits = _validity_word(b, bmp, w, rows, vals, o)
        vals[o + 64 * w + _tz64(vbits)] = prev
        vbits &= vbits - _U64_1
        i += 1
    for w2 in range(w + 1, (rows + 63) >> 6):  # zero the null rows of words no value reached
        _validity_word(b, bmp, w2, rows, vals, o)
    return s, 0


@numba.njit(nogil=True, cache=True)
def _dec_f64_xor(b, p, n, rows, nulls, vals, bm, want_bm, o, edges, ci):
    f, vp, bmp, nv = _f64_header(b, p, n, rows, nulls)
    if f != 0:
        return f
    end = p + n
    if nv > 1 and end - vp - 8 >= MASKED_MIN_BYTES_PER_VALUE * (nv - 1):
        q, f = _dec_f64_long(b, vp, end, rows, nv, vals, o, bmp)
        if f != 0:
            return f
        if q != end:
            return TRAILING_BYTES
        if want_bm:
            _emit_validity(bm, o, rows, b, bmp, edges, ci)
        return 0
    prev = _ld_u64(b, vp)
    p = vp + 8
    if bmp < 0:  # all valid: the values are the rows
        vals[o] = prev
        p, f = _xor_continue(b, p, end, rows, vals, o, 1, prev)
        if f != 0:
            return f
    else:
        # Scatter while decoding, 8 rows per validity byte: a dense byte takes
        # the plain loop (and eight 1-byte varints at once), a mixed byte a
        # branch-free loop (sparse fields: unpredictable bits) where a null
        # row peeks at the next value's varint and keeps p.  (Decoding densely
        # first and scattering after measured 1.2x slower.)
        safe = end - 10
        f0 = 0  # the first present row holds the fixed-width first value
        while (b[bmp + (f0 >> 3)] >> (f0 & 7)) & 1 == 0:  # ends: some bit is set
            vals[o + f0] = _U64_0
            f0 += 1
        vals[o + f0] = prev
        for k in range(f0 >> 3, (rows + 7) >> 3):
            byte = np.int64(b[bmp + k])
            base = o + (k << 3)
            j0 = f0 + 1 - (k << 3) if k == (f0 >> 3) else 0
            if byte == 0xFF and j0 == 0:
                if p <= safe:
                    x = _ld_u64(b, p)
                    if (x & _MSB_MASK) == _U64_0:  # eight 1-byte varints
                        for j in range(8):
                            prev ^= (x >> np.uint64(8 * j)) & _SEVEN
                            vals[base + j] = prev
                        p += 8
                        continue
                for j in range(8):
                    if p <= safe:
                        x = _ld_u64(b, p)
                        if (~x & _MSB_MASK) != _U64_0:
                            u, vlen = _varint8(x)
                            p += vlen
                        else:
                            u, p, err = _long_varint(b, p, x)
                            if err != 0:
                                return err
                    else:
                        u, p, err = _uvarint(b, p, end)
                        if err != 0:
                            return err
                    prev ^= u
                    vals[base + j] = prev
                continue
            for j in range(j0, min(8, rows - (k << 3))):
                bit = (byte >> j) & 1
                if p <= safe:
                    x = _ld_u64(b, p)
                    if (~x & _MSB_MASK) != _U64_0:
                        u, vlen = _varint8(x)
                        keep = _U64_0 - np.uint64(bit)
                        prev ^= u & keep
                        vals[base + j] = prev & keep
                        p += vlen * bit
                        continue
                if bit:
                    if p <= safe:
                        u, p, err = _long_varint(b, p, _ld_u64(b, p))
                    else:
                        u, p, err = _uvarint(b, p, end)
                    if err != 0:
                        return err
                    prev ^= u
                    vals[base + j] = prev
                else:
                    vals[base + j] = _U64_0
    if p != end:
        return TRAILING_BYTES
    if want_bm:
        _emit_validity(bm, o, rows, b, bmp, edges, ci)
    return 0


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
                f = _dec_ts_constant(buf, p, ln, rows, ts, o, meta[i, M_MIN_TS], meta[i, M_MAX_TS])
            else:
                f = _dec_ts_dod(buf, p, ln, rows, ts, o, meta[i, M_MIN_TS], meta[i, M_MAX_TS])
        elif enc == 3 or enc == 4:
            if o + rows > seq.shape[0]:
                f = BAD_LENGTH
            elif enc == 3:
                f = _dec_seq_constant(buf, p, ln, rows, seq, o)
            else:
                t = meta[i, M_TS_CHUNK]
                check = (first <= t < i and meta[t, M_ACTIVE] != 0 and flags[t] == 0
                         and o + rows <= ts.shape[0])
                f = _dec_seq_delta(buf, p, ln, rows, seq, o, ts, check)
        elif enc == 5:
            fi = meta[i, M_FIELD]
            if not _f64_fits(meta, i, buf, vals, bitmaps):
                f = BAD_LENGTH
            else:
                f = _dec_f64_xor(buf, p, ln, rows, meta[i, M_NULLS], vals[fi], bitmaps[fi], want_bm[fi], o, edges, i)
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


@numba.njit(nogil=True, cache=True)
def _finish_bitmap(bm, starts, ends, chunk_idx, edges, block_rows, n_rows):
    """Complete one field's validity bitmap after :func:`decode_chunks_range`.

    ``starts``/``ends``/``chunk_idx``: the field's decoded chunks (sorted by
    row); ``block_rows``: every block's first output row.  Bytes a range
    shares with a neighbour are zeroed, then the decoded chunks' edge bits are
    ORed in; rows no decoded chunk covers (omitted all-null chunks, failed
    chunks) end up null.
    """
    for k in range(block_rows.shape[0]):
        r = block_rows[k]
        if r & 7:
            bm[r >> 3] = 0
    if n_rows & 7:
        bm[n_rows >> 3] = 0
    for k in range(starts.shape[0]):
        o = starts[k]
        end = ends[k]
        q = o >> 3
        last = (end - 1) >> 3
        if not (8 * q >= o and 8 * q + 8 <= end):
            bm[q] |= edges[chunk_idx[k], 0]
        if last != q and not (8 * last + 8 <= end):
            bm[last] |= edges[chunk_idx[k], 1]
    pos = 0
    for k in range(starts.shape[0] + 1):
        gap_end = starts[k] if k < starts.shape[0] else n_rows
        # clear bits [pos, gap_end): partial bytes bit by bit, whole bytes at once
        r = pos
        while r < gap_end:
            if (r & 7) == 0 and r + 8 <= gap_end:
                bm[r >> 3] = 0
                r += 8
            else:
                bm[r >> 3] &= np.uint8(0xFF ^ (1 << (r & 7)))
                r += 1
        if k < starts.shape[0]:
            pos = ends[k]


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


# ==============================================================================
# Host side
# ==============================================================================
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


def _threads(threads: int | None) -> int:
    if threads is None or threads <= 0:
        return max(1, numba.get_num_threads())
    return max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS))


def _checksums_ok(batch: ChunkBatch, flags: np.ndarray, todo: np.ndarray | None = None, data=None,
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
    with _threads_set(n_threads if big else 1):
        _xxh64_chunks(data, src, ln, todo.astype(np.int64), got)
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
        out, flag, msg = _decompress_one(dctx if dctx is not None else zstandard.ZstdDecompressor(), mv, 0,
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

def _thread_state():
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


class _RangeDecoder:
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
        st = _thread_state()
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
                out, f, msg = _decompress_one(dctx, self.mv, src[j], stored[j], d)
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


def _split_ranges(cost: np.ndarray, parts: int, block: np.ndarray | None = None) -> list[tuple[int, int]]:
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

    # Zstd: structural check first (one frame, ending at the stored length).
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

    dec = _RangeDecoder(data, meta, active & (comp == COMP_ZSTD), ch,
                        (ts, seq, op, vals, bitmaps, want_bm), flags, edges)
    if n:
        cost = np.where(active, ch["decoded_len"].astype(np.float64), 0.0)
        work = int(meta[active, M_ROWS].sum())
        zbytes = int(ch["decoded_len"][active & (comp == COMP_ZSTD)].sum(dtype=np.int64))
        parallel = n_threads > 1 and n > 1 and (work >= PARALLEL_MIN_VALUES or zbytes >= PARALLEL_ZSTD_MIN_BYTES)
        ranges = _split_ranges(cost, n_threads * TASKS_PER_THREAD if parallel else 1, ch["block"])
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
            _fill_valid(bitmaps[k], s, e)
        elif nulls:
            _finish_bitmap(bitmaps[k], s, e, idx, edges, block_rows, n_rows)
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
        with _threads_set(_threads(None) if n_rows >= PARALLEL_MIN_VALUES else 1):
            _fill_identity(out_row, rows, np.ascontiguousarray(blocks["table_id"], dtype=np.uint32),
                           np.ascontiguousarray(blocks["tsid"], dtype=np.uint64), tid, tsid)
    return (tid if want_table_id else None), (tsid if want_tsid else None)


def _fill_valid(bm: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
    """Set the bits of rows ``[starts[k], ends[k])`` in a zeroed bitmap (rare path)."""
    valid = np.zeros(bm.shape[0] * 8, dtype=bool)
    for a, b in zip(starts.tolist(), ends.tolist()):
        valid[a:b] = True
    bm[:] = np.packbits(valid, bitorder="little")


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
