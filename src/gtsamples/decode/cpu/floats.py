"""Nullable Float64 fields, encoding 5, and their Arrow validity bitmaps.

Spec ("Nullable Float64 encoding 5")::

    validity_kind <u8>                   0 = all valid, 1 = bitmap
    validity <ceil(row_count/8) bytes>   only for kind 1
    first_non_null_bits <u64>
    xor_deltas <one uvarint per remaining non-null value>

Kind 0 requires null_count 0 and kind 1 ``0 < null_count < rows`` (else
``NULL_COUNT_MISMATCH``); other kinds are ``VALIDITY_KIND``.  Bitmap bit
``i % 8`` of byte ``i / 8`` is set for a present row; unused high bits of the
last byte are zero (``VALIDITY_PADDING``), and the unset in-range bits number
exactly null_count (``NULL_COUNT_MISMATCH``).  Non-null values are processed
in row order: the first IEEE-754 bit pattern as u64, then one uvarint
(:mod:`.varint`) per further non-null value, its bits XOR the previous
*non-null* bits (nulls do not reset it).  Exactly ``rows - null_count``
values are decoded and scattered; null rows get value bits 0 and validity 0.
Bits are written through a uint64 view (NaN payloads, -0.0, subnormals
preserved).  A chunk too short for its fixed parts is ``BAD_LENGTH``, bytes
after the last value ``TRAILING_BYTES``.

Output (Arrow layout): values as u64 bit patterns; validity bits LSB first
at the chunk's output rows, the bytes a chunk shares with its neighbours
completed after decoding (:func:`finish_bitmap`).  Mirrors
``kernels/gts_float.cuh``.
"""

from __future__ import annotations

import numba
import numpy as np

from .flags import BAD_LENGTH, NULL_COUNT_MISMATCH, TRAILING_BYTES, VALIDITY_KIND, VALIDITY_PADDING, VARINT_OVERFLOW
from .intrinsics import U64_0, U64_1, ld_u64, tz64
from .varint import MSB_MASK, SEVEN, compact7, long_varint, terminators, uvarint, varint8, varint_bits, varint_loop
from ...jit import njit


@numba.njit(inline="always")
def _all_valid_byte(u, nb, tail_bits):
    """Byte ``u`` of an all-valid chunk bitmap of ``nb`` bytes (0 outside it)."""
    if u < 0 or u >= nb:
        return 0
    if u < nb - 1 or tail_bits == 0:
        return 0xFF
    return (1 << tail_bits) - 1


@njit(nogil=True)
def _emit_validity(bm, o, rows, src, sp, edges, ci):
    """Write validity bits ``[o, o + rows)`` of the Arrow bitmap ``bm`` (LSB first).

    ``sp < 0``: every row is valid; else the chunk's bitmap is ``src[sp:]``
    (bit ``i`` for chunk row ``i``, padding bits already checked zero).  Bytes
    wholly inside the range are written here; the at most two bytes this
    range shares with its neighbours go to ``edges[ci]`` (head, tail) and are
    ORed in by :func:`finish_bitmap`, so chunks decoded concurrently never
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


@njit(nogil=True)
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


@numba.njit(inline="always")
def _xor_step(u, prev):
    """The value after ``prev`` for XOR varint ``u``."""
    prev ^= u
    return prev, prev


_xor_loop = varint_loop(_xor_step)


@njit(nogil=True)
def _xor_continue(b, p, end, n, out, o, i, prev):
    """Values ``i..n-1`` of an XOR chain into ``out[o + i]`` (``prev``: value ``i - 1``); ``(pos, flag)``."""
    p, f, _ = _xor_loop(b, p, end, i, n, prev, out, o)
    return p, f


#: Float chunks averaging at least this many bytes per varint find their varint
#: ends 64 bytes at a time (:func:`_dec_f64_long`); shorter ones take the
#: varint-by-varint loop, whose eight-1-byte-varints step is faster there.
MASKED_MIN_BYTES_PER_VALUE = 3


#: A 64-byte terminator window plus the 8-byte load of a varint starting in it.
_MASK_SPAN = 72


@numba.njit(inline="always")
def _validity_word(b, bmp, w, rows, vals, o):
    """Validity of rows ``[64 w, 64 w + 64)`` as one word (rows past ``rows`` clear;
    ``bmp < 0``: all valid), after zeroing those rows' values where null.

    ``b[bmp + 8 w: +8]`` may run past the bitmap into the first value (the
    header guarantees 8 bytes follow it); those bits are past ``rows``.
    """
    if bmp < 0:
        word = ~U64_0
    else:
        word = ld_u64(b, bmp + 8 * w)
    left = rows - 64 * w
    if left < 64:
        word &= (U64_1 << np.uint64(left)) - U64_1
        nulls = ~word & ((U64_1 << np.uint64(left)) - U64_1)
    else:
        nulls = ~word
    while nulls != U64_0:
        vals[o + 64 * w + tz64(nulls)] = U64_0
        nulls &= nulls - U64_1
    return word


@numba.njit(inline="always")
def _scatter(b, bmp, rows, vals, o, w, vbits, v):
    """``v`` into the next present row: the lowest set bit of ``vbits`` (validity word ``w``)
    or of a later word (:func:`_validity_word`); returns ``(w, vbits)`` past that row."""
    while vbits == U64_0:
        w += 1
        vbits = _validity_word(b, bmp, w, rows, vals, o)
    vals[o + 64 * w + tz64(vbits)] = v
    return w, vbits & (vbits - U64_1)


@njit(nogil=True)
def _dec_f64_long(b, vp, end, rows, nv, vals, o, bmp):
    """Scatter the ``nv`` values of an XOR chain of long varints (the first a fixed
    8-byte word at ``vp``) to their rows; null rows get 0.  Returns ``(pos, flag)``.

    A varint-by-varint loop is latency-bound: the next position waits for the
    load, terminator search and length of the current varint (~11 cycles).
    Here the varint ends of 64 bytes are found at once (:func:`terminators`),
    so each value's start and length come from that mask alone and the loads
    run ahead; the 7-bit groups are packed by :func:`varint_bits`.  Rows come
    the same way from 64 validity bits at a time.  Within :data:`_MASK_SPAN`
    bytes of ``end`` the varints are read one by one with bounds checks.  A
    varint longer than ten bytes, or with a tenth byte above 1, is
    ``VARINT_OVERFLOW``; running out of bytes ``VARINT_TRUNCATED``.
    """
    prev = ld_u64(b, vp)
    w, vbits = _scatter(b, bmp, rows, vals, o, 0, _validity_word(b, bmp, 0, rows, vals, o), prev)
    s = vp + 8
    i = 1
    base = s
    mask = terminators(b, base) if base + _MASK_SPAN <= end else U64_0
    while i < nv:
        if mask == U64_0:
            if base + 64 + _MASK_SPAN > end:
                break
            base += 64
            mask = terminators(b, base)
            continue
        e = base + tz64(mask)
        mask &= mask - U64_1
        ln = e - s + 1
        x = ld_u64(b, s)
        if ln <= 8:
            v = varint_bits(x, ln)
        elif ln == 9:
            v = compact7(x) | ((np.uint64(b[s + 8]) & SEVEN) << np.uint64(56))
        else:
            z = b[s + 9]
            if ln > 10 or z > 1:
                return s, VARINT_OVERFLOW
            v = compact7(x) | ((np.uint64(b[s + 8]) & SEVEN) << np.uint64(56)) | (np.uint64(z) << np.uint64(63))
        s = e + 1
        prev ^= v
        w, vbits = _scatter(b, bmp, rows, vals, o, w, vbits, prev)
        i += 1
    while i < nv:  # the last bytes
        u, s, err = uvarint(b, s, end)
        if err != 0:
            return s, err
        prev ^= u
        w, vbits = _scatter(b, bmp, rows, vals, o, w, vbits, prev)
        i += 1
    for w2 in range(w + 1, (rows + 63) >> 6):  # zero the null rows of words no value reached
        _validity_word(b, bmp, w2, rows, vals, o)
    return s, 0


@njit(nogil=True)
def dec_f64_xor(b, p, n, rows, nulls, vals, bm, want_bm, o, edges, ci):
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
    prev = ld_u64(b, vp)
    p = vp + 8
    if bmp < 0:  # all valid: the values are the rows
        vals[o] = prev
        p, f = _xor_continue(b, p, end, rows, vals, o, 1, prev)
        if f != 0:
            return f
    else:
        # Scatter while decoding, 8 rows per validity byte: a dense byte takes
        # the varint loop (and eight 1-byte varints at once), a mixed byte a
        # branch-free loop (sparse fields: unpredictable bits) where a null
        # row peeks at the next value's varint and keeps p.  (Decoding densely
        # first and scattering after measured 1.2x slower.)
        safe = end - 10
        f0 = 0  # the first present row holds the fixed-width first value
        while (b[bmp + (f0 >> 3)] >> (f0 & 7)) & 1 == 0:  # ends: some bit is set
            vals[o + f0] = U64_0
            f0 += 1
        vals[o + f0] = prev
        for k in range(f0 >> 3, (rows + 7) >> 3):
            byte = np.int64(b[bmp + k])
            base = o + (k << 3)
            j0 = f0 + 1 - (k << 3) if k == (f0 >> 3) else 0
            if byte == 0xFF and j0 == 0:
                p, err, prev = _xor_loop(b, p, end, 0, 8, prev, vals, base)
                if err != 0:
                    return err
                continue
            for j in range(j0, min(8, rows - (k << 3))):
                bit = (byte >> j) & 1
                if p <= safe:
                    x = ld_u64(b, p)
                    if (~x & MSB_MASK) != U64_0:
                        u, vlen = varint8(x)
                        keep = U64_0 - np.uint64(bit)
                        prev ^= u & keep
                        vals[base + j] = prev & keep
                        p += vlen * bit
                        continue
                if bit:
                    if p <= safe:
                        u, p, err = long_varint(b, p, ld_u64(b, p))
                    else:
                        u, p, err = uvarint(b, p, end)
                    if err != 0:
                        return err
                    prev ^= u
                    vals[base + j] = prev
                else:
                    vals[base + j] = U64_0
    if p != end:
        return TRAILING_BYTES
    if want_bm:
        _emit_validity(bm, o, rows, b, bmp, edges, ci)
    return 0


@njit(nogil=True)
def finish_bitmap(bm, starts, ends, chunk_idx, edges, block_rows, n_rows):
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


def fill_valid(bm: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
    """Set the bits of rows ``[starts[k], ends[k])`` in a zeroed bitmap (rare path)."""
    valid = np.zeros(bm.shape[0] * 8, dtype=bool)
    for a, b in zip(starts.tolist(), ends.tolist()):
        valid[a:b] = True
    bm[:] = np.packbits(valid, bitorder="little")
