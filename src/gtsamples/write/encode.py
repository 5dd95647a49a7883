"""Column encoders of columnar-samples v1 ("Encodings and compression").

Two layers:

* numba kernels (module level, ``nogil=True``, cached by :mod:`gtsamples.jit`) that encode the
  chunks of *many blocks at once* (``prange`` over blocks): the caller reserves
  a worst-case region per chunk in one buffer (``worst_sizes``), one pass per
  column kind chooses each chunk's encoding, writes it in place and reports
  its actual size;
* small pure-Python reference encoders (``encode_timestamps`` ...) over whole
  arrays, one block each, used by tests and for cross-checking the kernels.

All integer arithmetic on timestamps and sequences is wrapping u64 (timestamps
are handled through their uint64 view), exactly as the spec defines the
deltas; float64 values are handled as their uint64 bit patterns so that every
bit (signed zero, NaN payloads) is preserved.
"""

from __future__ import annotations

import numpy as np
from numba import carray, prange, types
from numba.extending import intrinsic

from ..format import constants as C
from ..format.varint import encode_uvarint
from ..jit import njit

__all__ = [
    "zigzag",
    "uvarint",
    "encode_timestamps",
    "encode_sequences",
    "encode_op_types",
    "encode_f64",
    "check_rows",
    "split_blocks",
    "worst_sizes",
    "null_counts",
    "null_counts_all",
    "encode_fixed",
    "encode_field",
    "encode_fields",
    "pack_leaves",
    "ORDER_OK",
    "ORDER_IDENTITY",
    "ORDER_TIMESTAMP",
    "ORDER_SEQUENCE",
    "ORDER_OP_TYPE",
]

_U0 = np.uint64(0)
_U1 = np.uint64(1)
_U7 = np.uint64(7)
_U8 = np.uint64(8)
_U63 = np.uint64(63)
_U7F = np.uint64(0x7F)
_U80 = np.uint64(0x80)
_UFF = np.uint64(0xFF)

_M64 = (1 << 64) - 1

# ---------------------------------------------------------------------------
# Reference (pure Python) encoders: one block, straight from the spec text.
# ---------------------------------------------------------------------------


def zigzag(x: int) -> int:
    """ZigZag of a signed i64 (given as a Python int in i64 range or its u64 bits)."""
    x &= _M64
    return ((x << 1) & _M64) ^ (_M64 if x >> 63 else 0)


#: Shortest unsigned LEB128 of a u64 (the format layer's reference codec).
uvarint = encode_uvarint


def _i64(x: int) -> bytes:
    return (x & _M64).to_bytes(8, "little")


def encode_timestamps(ts) -> tuple[int, bytes]:
    """(encoding ID, bytes) of one block's timestamps: 1 when applicable, else 2."""
    ts = [int(v) for v in ts]
    if not ts:
        raise ValueError("a block has at least one row")
    if len(ts) == 1:
        return C.ENC_TS_CONSTANT_STEP, _i64(ts[0]) + _i64(0)
    diffs = [b - a for a, b in zip(ts, ts[1:])]  # exact (unbounded) differences
    if len(set(diffs)) == 1 and 0 <= diffs[0] <= C.I64_MAX:
        return C.ENC_TS_CONSTANT_STEP, _i64(ts[0]) + _i64(diffs[0])
    out = bytearray(_i64(ts[0]))
    prev = (ts[1] - ts[0]) & _M64
    out += uvarint(zigzag(prev))
    for a, b in zip(ts[1:], ts[2:]):
        d = (b - a) & _M64
        out += uvarint(zigzag((d - prev) & _M64))
        prev = d
    return C.ENC_TS_DELTA_OF_DELTA, bytes(out)


def encode_sequences(seq) -> tuple[int, bytes]:
    """(encoding ID, bytes): 3 when all equal, else 4."""
    seq = [int(v) for v in seq]
    if not seq:
        raise ValueError("a block has at least one row")
    if all(v == seq[0] for v in seq):
        return C.ENC_SEQ_CONSTANT, seq[0].to_bytes(8, "little")
    out = bytearray(seq[0].to_bytes(8, "little"))
    for a, b in zip(seq, seq[1:]):
        out += uvarint(zigzag((b - a) & _M64))
    return C.ENC_SEQ_DELTA, bytes(out)


def encode_op_types(ops) -> tuple[int, bytes]:
    """(encoding ID, bytes): 6 when all equal, else 7."""
    ops = [int(v) for v in ops]
    if not ops:
        raise ValueError("a block has at least one row")
    if all(v == ops[0] for v in ops):
        return C.ENC_OP_CONSTANT, bytes([ops[0]])
    return C.ENC_OP_RAW, bytes(ops)


def encode_f64(values) -> tuple[bytes | None, int]:
    """Encoding 5 of one block's nullable Float64 values.

    ``values``: a sequence of floats, uint64 bit patterns (``np.uint64`` /
    ``int`` — ints are taken as bit patterns) or ``None`` for null.
    Returns ``(bytes, null_count)``; bytes is ``None`` when every row is null
    (the chunk is omitted).
    """
    bits: list[int | None] = []
    for v in values:
        if v is None:
            bits.append(None)
        elif isinstance(v, (float, np.floating)):
            bits.append(int(np.array(v, dtype="<f8").view("<u8")))
        else:
            bits.append(int(v))
    n = len(bits)
    nulls = sum(b is None for b in bits)
    if nulls == n:
        return None, nulls
    out = bytearray()
    if nulls:
        out.append(C.VALIDITY_BITMAP)
        bm = bytearray((n + 7) // 8)
        for i, b in enumerate(bits):
            if b is not None:
                bm[i // 8] |= 1 << (i % 8)
        out += bm
    else:
        out.append(C.VALIDITY_ALL_VALID)
    present = [b for b in bits if b is not None]
    out += present[0].to_bytes(8, "little")
    for a, b in zip(present, present[1:]):
        out += uvarint(a ^ b)
    return bytes(out), nulls


# ---------------------------------------------------------------------------
# numba primitives
# ---------------------------------------------------------------------------


@njit(inline="always")
def _zz(x):
    """ZigZag of the i64 whose bits are the uint64 ``x``."""
    return (x << _U1) ^ (_U0 - (x >> _U63))


@njit(inline="always")
def _put_u64(out, p, x):
    for k in range(8):
        out[p + k] = np.uint8(x & _UFF)
        x >>= _U8
    return p + 8


# ---------------------------------------------------------------------------
# Row checks and block boundaries (one sequential pass each)
# ---------------------------------------------------------------------------

ORDER_OK = 0
ORDER_IDENTITY = 1  # (table_id, tsid) decreased
ORDER_TIMESTAMP = 2  # timestamp decreased within an identity
ORDER_SEQUENCE = 3  # sequence increased within equal timestamps
ORDER_OP_TYPE = 4  # operation type not 0/1


@njit(nogil=True)
def check_rows(tid, tsid, ts, seq, op):
    """First row breaking the spec order or the op-type rule: ``(row, code)``.

    ``(-1, ORDER_OK)`` when all rows are fine.  Op types are checked for every
    row before order (a row may break both; the lowest row wins, op first).
    """
    n = tid.shape[0]
    for i in range(n):
        if op[i] > 1:
            return i, ORDER_OP_TYPE
        if i == 0:
            continue
        a = tid[i - 1]
        b = tid[i]
        if b < a or (b == a and tsid[i] < tsid[i - 1]):
            return i, ORDER_IDENTITY
        if b == a and tsid[i] == tsid[i - 1]:
            if ts[i] < ts[i - 1]:
                return i, ORDER_TIMESTAMP
            if ts[i] == ts[i - 1] and seq[i] > seq[i - 1]:
                return i, ORDER_SEQUENCE
    return -1, ORDER_OK


@njit(nogil=True)
def split_blocks(tid, tsid, cap):
    """Greedy split: a new block on identity change or when ``cap`` rows are full.

    Returns ``(starts, counts, ordinals)``; ordinals count blocks per identity
    from zero (identities are contiguous in spec order, so this is the
    per-identity ordinal across the whole artifact).
    """
    n = tid.shape[0]
    # upper bound on blocks: identity runs + n // cap
    runs = 0
    for i in range(n):
        if i == 0 or tid[i] != tid[i - 1] or tsid[i] != tsid[i - 1]:
            runs += 1
    bound = runs + n // cap + 1
    starts = np.empty(bound, np.int64)
    counts = np.empty(bound, np.int64)
    ordinals = np.empty(bound, np.int64)
    nb = 0
    cur = 0
    ordinal = 0
    for i in range(n):
        new_id = i == 0 or tid[i] != tid[i - 1] or tsid[i] != tsid[i - 1]
        if new_id or cur == cap:
            if new_id:
                ordinal = 0
            else:
                ordinal += 1
            if nb > 0:
                counts[nb - 1] = cur
            starts[nb] = i
            ordinals[nb] = ordinal
            nb += 1
            cur = 0
        cur += 1
    if nb > 0:
        counts[nb - 1] = cur
    return starts[:nb].copy(), counts[:nb].copy(), ordinals[:nb].copy()


# ---------------------------------------------------------------------------
# Chunk encoding (fused: choose the encoding and write in one pass per block)
#
# Every chunk is written at the start of a reserved region of its worst-case
# size (``worst_sizes``); the kernels report the actual sizes and encodings,
# so no separate sizing pass over the data is needed.  (A branch-free 8-byte
# varint store was measured: no faster than this loop on XOR deltas.)
# ---------------------------------------------------------------------------

VARINT_MAX = C.MAX_VARINT_BYTES


def worst_sizes(counts: np.ndarray, nulls: np.ndarray) -> np.ndarray:
    """Worst-case encoded bytes per chunk: shape ``(blocks, 3 + F)``; 0 = omitted.

    ``nulls``: ``(blocks, F)`` null counts.  Timestamp: max(16, 8 + 10 (n-1));
    sequence: 8 + 10 (n-1); operation: n; field: 1 [+ bitmap] + 8 + 10 (valid-1).
    """
    n = counts.astype(np.int64)
    nb, nf = nulls.shape
    w = np.empty((nb, 3 + nf), np.int64)
    w[:, 0] = np.maximum(16, 8 + VARINT_MAX * (n - 1))
    w[:, 1] = 8 + VARINT_MAX * (n - 1)
    w[:, 2] = n
    nn = n[:, None]
    valid = nn - nulls
    f = 9 + np.where(nulls > 0, (nn + 7) // 8, 0) + VARINT_MAX * (valid - 1)
    w[:, 3:] = np.where(valid > 0, f, 0)
    return w


@njit(inline="always")
def _put_varint(out, p, x):
    """Shortest LEB128 of the uint64 ``x`` at ``out[p]``; returns the next position."""
    while x >= _U80:
        out[p] = np.uint8((x & _U7F) | _U80)
        x >>= _U7
        p += 1
    out[p] = np.uint8(x)
    return p + 1


@njit(inline="always")
def _valid(bm, bo, i):
    j = bo + i
    return (bm[j >> 3] >> (j & 7)) & 1


@njit(nogil=True, parallel=True)
def null_counts(bm, bo, starts, counts, out):
    """Null rows per block of one field from its Arrow validity bitmap (bit offset ``bo``)."""
    for b in prange(starts.shape[0]):
        s = starts[b]
        n = counts[b]
        valid = 0
        for i in range(n):
            valid += _valid(bm, bo, s + i)
        out[b] = n - valid


@njit(nogil=True, parallel=True)
def encode_fixed(ts_i, ts_u, seq, op, starts, counts, offs, out, enc, size):
    """Choose and write the time/sequence/op chunks of every block.

    Chunk ``c`` of block ``b`` is written at ``offs[b, c]`` (a region of its
    worst-case size); ``enc[b, c]`` and ``size[b, c]`` receive the encoding ID and
    encoded length (c = 0 timestamp, 1 sequence, 2 operation).
    """
    for b in prange(starts.shape[0]):
        s = starts[b]
        n = counts[b]
        # timestamp: encoding 1 iff all differences equal one nonnegative i64
        p0 = offs[b, 0]
        step = _U0
        const = True
        if n > 1:
            step = ts_u[s + 1] - ts_u[s]
            const = ts_i[s + 1] >= ts_i[s] and (step >> _U63) == _U0
            for i in range(s + 2, s + n):
                if ts_u[i] - ts_u[i - 1] != step or ts_i[i] < ts_i[i - 1]:
                    const = False
                    break
        p = _put_u64(out, p0, ts_u[s])
        if const:
            p = _put_u64(out, p, step)
            enc[b, 0] = C.ENC_TS_CONSTANT_STEP
        else:
            prev = ts_u[s + 1] - ts_u[s]
            p = _put_varint(out, p, _zz(prev))
            for i in range(s + 2, s + n):
                d = ts_u[i] - ts_u[i - 1]
                p = _put_varint(out, p, _zz(d - prev))
                prev = d
            enc[b, 0] = C.ENC_TS_DELTA_OF_DELTA
        size[b, 0] = p - p0
        # sequence: encoding 3 iff all equal
        p0 = offs[b, 1]
        first = seq[s]
        const = True
        for i in range(s + 1, s + n):
            if seq[i] != first:
                const = False
                break
        p = _put_u64(out, p0, first)
        if const:
            enc[b, 1] = C.ENC_SEQ_CONSTANT
        else:
            for i in range(s + 1, s + n):
                p = _put_varint(out, p, _zz(seq[i] - seq[i - 1]))
            enc[b, 1] = C.ENC_SEQ_DELTA
        size[b, 1] = p - p0
        # operation type: encoding 6 iff all equal
        p0 = offs[b, 2]
        first8 = op[s]
        const = True
        for i in range(s + 1, s + n):
            if op[i] != first8:
                const = False
                break
        if const:
            out[p0] = first8
            enc[b, 2] = C.ENC_OP_CONSTANT
            size[b, 2] = 1
        else:
            for i in range(n):
                out[p0 + i] = op[s + i]
            enc[b, 2] = C.ENC_OP_RAW
            size[b, 2] = n


# ---------------------------------------------------------------------------
# Nullable Float64 (encoding 5)
# ---------------------------------------------------------------------------


@njit(inline="always")
def _field_block(vals, bm, bo, s, n, nulls, out, p0):
    """Write one block's encoding-5 chunk at ``out[p0]``; returns its size (0: omitted)."""
    if nulls == n:
        return 0
    p = p0
    if nulls == 0:
        out[p] = C.VALIDITY_ALL_VALID
        p = _put_u64(out, p + 1, vals[s])
        for i in range(s + 1, s + n):
            p = _put_varint(out, p, vals[i] ^ vals[i - 1])
        return p - p0
    out[p] = C.VALIDITY_BITMAP
    p += 1
    nbm = (n + 7) // 8
    for k in range(nbm):
        out[p + k] = 0
    for i in range(n):
        if _valid(bm, bo, s + i):
            out[p + (i >> 3)] |= np.uint8(1 << (i & 7))
    p += nbm
    first = True
    prev = _U0
    for i in range(n):
        if _valid(bm, bo, s + i):
            v = vals[s + i]
            if first:
                p = _put_u64(out, p, v)
                first = False
            else:
                p = _put_varint(out, p, v ^ prev)
            prev = v
    return p - p0


@njit(nogil=True, parallel=True)
def encode_field(vals, bm, bo, has_bm, starts, counts, nulls, offs, out, size):
    """Write one field's chunk of every block at ``offs[b]``; ``size[b]`` = its length.

    ``vals``: uint64 bit patterns of all rows; ``bm``/``bo``: the Arrow validity
    bitmap and its bit offset (ignored when ``has_bm`` is False); ``nulls``:
    per-block null counts.  A block whose rows are all null gets size 0 and
    nothing is written (the chunk is omitted).
    """
    for b in prange(starts.shape[0]):
        size[b] = _field_block(vals, bm, bo, starts[b], counts[b], nulls[b], out, offs[b])


# --- all fields in one launch (wide tables): columns passed by address ----------


@intrinsic
def _u64_ptr(typingctx, addr):
    sig = types.CPointer(types.uint64)(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

    return sig, codegen


@intrinsic
def _u8_ptr(typingctx, addr):
    sig = types.CPointer(types.uint8)(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

    return sig, codegen


@njit(nogil=True, parallel=True)
def null_counts_all(bptrs, bos, nrows, starts, counts, out):
    """``out[b, k]``: null rows of field ``k`` in block ``b`` (0 where ``bptrs[k] == 0``).

    ``bptrs[k]``: address of field ``k``'s Arrow validity bitmap (0: no nulls),
    ``bos[k]`` its bit offset; the caller keeps the buffers alive.
    """
    nf = bptrs.shape[0]
    nb = starts.shape[0]
    for j in prange(nb * nf):
        b = j // nf
        k = j - b * nf
        if bptrs[k] == 0:
            out[b, k] = 0
            continue
        bm = carray(_u8_ptr(bptrs[k]), (bos[k] + nrows + 7) // 8)
        s = starts[b]
        n = counts[b]
        valid = 0
        for i in range(n):
            valid += _valid(bm, bos[k], s + i)
        out[b, k] = n - valid


@njit(nogil=True, parallel=True)
def encode_fields(vptrs, bptrs, bos, nrows, starts, counts, nulls, offs, out, size):
    """All fields of blocks ``starts``/``counts`` in one launch (``prange`` over block x field).

    ``vptrs[k]``: address of field ``k``'s uint64 bit patterns (row 0 of the
    table); ``bptrs``/``bos`` as in :func:`null_counts_all`; ``nulls``,
    ``offs``, ``size``: ``(blocks, F)``.
    """
    nf = vptrs.shape[0]
    nb = starts.shape[0]
    dummy = np.zeros(1, np.uint8)
    for j in prange(nb * nf):
        b = j // nf
        k = j - b * nf
        vals = carray(_u64_ptr(vptrs[k]), nrows)
        if bptrs[k] != 0:
            bm = carray(_u8_ptr(bptrs[k]), (bos[k] + nrows + 7) // 8)
        else:
            bm = dummy
        size[b, k] = _field_block(vals, bm, bos[k], starts[b], counts[b], nulls[b, k], out, offs[b, k])


# ---------------------------------------------------------------------------
# Leaf packing and part rolling
# ---------------------------------------------------------------------------


@njit(nogil=True)
def pack_leaves(desc_size, max_page_bytes, max_leaves):
    """Greedy placement of block descriptors into leaves and parts.

    A leaf holds whole descriptors up to ``max_page_bytes`` decoded bytes,
    12-byte prefix included.  When the next descriptor needs a new leaf and the
    part already has ``max_leaves`` leaves, the part is finished and the block
    starts a new part.  Returns ``(leaf_of_block, part_of_block)`` with leaves
    numbered globally.
    """
    nb = desc_size.shape[0]
    leaf_of = np.empty(nb, np.int64)
    part_of = np.empty(nb, np.int64)
    leaf = 0
    part = 0
    used = C.PAGE_PREFIX_SIZE
    leaves_in_part = 1
    for b in range(nb):
        d = desc_size[b]
        if used > C.PAGE_PREFIX_SIZE and used + d > max_page_bytes:
            leaf += 1
            used = C.PAGE_PREFIX_SIZE
            if leaves_in_part == max_leaves:
                part += 1
                leaves_in_part = 1
            else:
                leaves_in_part += 1
        used += d
        leaf_of[b] = leaf
        part_of[b] = part
    return leaf_of, part_of
