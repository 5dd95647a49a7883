"""LEB128 varints and ZigZag, as the column decoders' hot loops read them.

Spec ("Encodings and compression"): unsigned varints are base-128 LEB128,
seven data bits per byte, high bit = continuation.  Readers reject
truncation (``VARINT_TRUNCATED``), more than ten bytes or a tenth byte
greater than 1 (``VARINT_OVERFLOW``), and trailing bytes after the expected
values (``TRAILING_BYTES``, each decoder's final check).  Non-shortest forms
are accepted (docs/format.md, "Our readings of the open points").  ZigZag maps signed ``x`` to
``((x as u64) << 1) ^ ((x >> 63) as u64)``; decoding is
``(u >> 1) ^ -(u & 1)``.  Arithmetic marked "wrapping" is mod 2**64.

A varint ends at its first byte whose high bit is clear.  One 8-byte load
finds it (:func:`varint8`, branch-free); the 7-bit groups are packed by
shifts and masks (:func:`compact7`) or one ``pext`` where the CPU has a fast
one (:func:`varint_bits`); 9- and 10-byte varints take :func:`long_varint`,
and the last ten bytes of a chunk the bounds-checked :func:`uvarint`.
Timestamps, sequences and all-valid or dense float values decode through one
loop, :func:`varint_loop`; the float decoder's long-varint path finds the
varint ends of 64 bytes at once (:func:`terminators`), and its mixed-validity
path reads varints itself.  Mirrors ``kernels/gts_varint.cuh``.
"""

from __future__ import annotations

import numba
import numpy as np
from numba.extending import overload

from .flags import VARINT_OVERFLOW, VARINT_TRUNCATED
from .intrinsics import FAST_PEXT, U64_0, U64_1, ld_u64, pext, tz64
from ...jit import njit


MSB_MASK = np.uint64(0x8080808080808080)
SEVEN = np.uint64(0x7F)


@numba.njit(inline="always")
def varint8(x):
    """Decode the varint starting at the low byte of ``x`` (8 little-endian bytes),
    which must contain a terminating byte (``~x & MSB_MASK != 0``).

    Branch-free: the first clear continuation bit ends the varint, and the
    7-bit groups are compacted with shifts and masks.  Returns (value, bytes).
    The loop-carried cost is load -> andn -> tzcnt -> add.
    """
    stop = ~x & MSB_MASK
    nbytes = (tz64(stop) >> 3) + 1
    low = stop & (U64_0 - stop)  # the terminating byte's high bit
    x &= (low << U64_1) - U64_1  # wraps to all ones when the terminator is byte 7
    return compact7(x), nbytes


_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_PAIR_LO = np.uint64(0x007F007F007F007F)
_QUAD_LO = np.uint64(0x00003FFF00003FFF)
_OCT_LO = np.uint64(0x000000000FFFFFFF)


@numba.njit(inline="always")
def compact7(x):
    """The 7-bit groups of the 8 bytes of ``x`` (continuation bits dropped), packed into 56 bits.

    SWAR in three steps (pairs, quads, halves): 13 operations instead of 24
    for eight separate shift-and-mask terms.
    """
    x &= _LOW7
    x = (x & _PAIR_LO) | ((x >> np.uint64(1)) & ~_PAIR_LO & np.uint64(0x3FFF3FFF3FFF3FFF))
    x = (x & _QUAD_LO) | ((x >> np.uint64(2)) & ~_QUAD_LO & np.uint64(0x0FFFFFFF0FFFFFFF))
    return (x & _OCT_LO) | ((x >> np.uint64(4)) & ~_OCT_LO)


def varint_bits(x, nbytes):
    """The 7-bit groups of the first ``nbytes`` (1..8) bytes of ``x``, packed: the
    value of a varint of that length whose bytes ``x`` starts with."""
    mask = _LOW7 >> np.uint64(64 - 8 * nbytes)
    return pext(x, mask) if FAST_PEXT else compact7(x & mask)


@overload(varint_bits, inline="always")
def _varint_bits_ol(x, nbytes):
    if FAST_PEXT:
        return lambda x, nbytes: pext(x, _LOW7 >> np.uint64(64 - 8 * nbytes))
    return lambda x, nbytes: compact7(x & (_LOW7 >> np.uint64(64 - 8 * nbytes)))  # pragma: no cover - host without fast pext


@numba.njit(inline="always")
def long_varint(b, p, x):
    """The 9- or 10-byte varint at ``p`` whose first 8 bytes, ``x``, hold no terminator.

    Needs ``p + 10 <= end``.  Returns ``(value, new_pos, flag)``; a tenth byte
    above 1 is ``VARINT_OVERFLOW`` (a tenth byte always terminates).  Inlined
    in the hot loops: XOR deltas of floats whose sign or exponent differ are
    9 or 10 bytes long, and a call per value cost 3x (measured).
    """
    v = compact7(x)
    y = np.uint64(b[p + 8])
    v |= (y & SEVEN) << np.uint64(56)
    if y < 0x80:
        return v, p + 9, 0
    z = b[p + 9]
    if z > 1:
        return v, p + 10, VARINT_OVERFLOW
    return v | (np.uint64(z) << np.uint64(63)), p + 10, 0


@njit(nogil=True)
def uvarint(b, p, end):
    """``(value, new_pos, flag)``; ``flag`` is 0, VARINT_TRUNCATED or VARINT_OVERFLOW.

    Reads at most ``b[p:min(end, p + 10)]``.  Not inlined: the hot loops
    (:func:`varint_loop`) take the :func:`varint8` and :func:`long_varint`
    paths themselves and call this only within ten bytes of a chunk's end.
    """
    if end - p >= 8:
        x = ld_u64(b, p)
        if (~x & MSB_MASK) != U64_0:
            v, nb = varint8(x)
            return v, p + nb, 0
    if end - p >= 10:  # 9- and 10-byte varints: no per-byte bounds checks needed
        v = U64_0
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


@njit(nogil=True)
def _uvarint_tail(b, p, end):
    """:func:`uvarint` when fewer than ten bytes remain (``end - p < 10``, so no
    tenth byte can exist): a terminated varint or ``VARINT_TRUNCATED``."""
    v = U64_0
    shift = np.uint64(0)
    while p < end:
        x = b[p]
        p += 1
        v |= np.uint64(x & 0x7F) << shift
        if x < 0x80:
            return v, p, 0
        shift += np.uint64(7)
    return v, p, VARINT_TRUNCATED


def varint_loop(step):
    """A loop feeding a chunk's varints ``i..n-1``, from byte ``p`` on, to ``step``, inlined where called.

    ``loop(b, p, end, i, n, state, out, o)`` returns ``(new_pos, flag, state)``.
    For varint ``i``, of value ``u``: ``state, v = step(u, state)`` and
    ``out[o + i] = v``; ``step`` is an ``inline="always"`` kernel, ``state`` a
    scalar or a tuple of scalars (an array passed to the inlined step is
    reference-counted per value: 4x slower).  A bad varint stops the loop with
    its flag.  Eight 1-byte varints in one 8-byte word (no continuation bit
    set: sequences, repeated values) take one load; a varint of at most 8 bytes
    :func:`varint8`, of 9 or 10 :func:`long_varint`; only within ten bytes of
    ``end`` the bounds-checked :func:`uvarint` runs.  (One loop with each
    encoding's step inlined: a shared step returning ``(value, pos, flag)`` per
    varint, called from each encoding's own loop, measured 1.3-2x slower.)

    The loop returned is plain Python calling ``step``'s Python body -- what a
    kernel run as Python calls -- and compiled callers inline the same source
    calling the compiled ``step``.
    """

    def make(step):
        def loop(b, p, end, i, n, state, out, o):
            safe = end - 10  # a full 10-byte varint fits: no per-byte bounds checks
            while i < n:
                if p <= safe:
                    x = ld_u64(b, p)
                    if (x & MSB_MASK) == U64_0 and i + 8 <= n:  # eight 1-byte varints
                        for j in range(8):
                            state, v = step((x >> np.uint64(8 * j)) & SEVEN, state)
                            out[o + i + j] = v
                        i += 8
                        p += 8
                        continue
                    if (~x & MSB_MASK) != U64_0:
                        u, vlen = varint8(x)
                        p += vlen
                    else:
                        u, p, err = long_varint(b, p, x)
                        if err != 0:
                            return p, err, state
                else:
                    u, p, err = uvarint(b, p, end)
                    if err != 0:
                        return p, err, state
                state, v = step(u, state)
                out[o + i] = v
                i += 1
            return p, 0, state

        return loop

    compiled = make(step)
    loop = make(getattr(step, "py_func", step))  # (NUMBA_DISABLE_JIT: step is the plain function)
    overload(loop, inline="always")(lambda b, p, end, i, n, state, out, o: compiled)
    return loop


@numba.njit(inline="always")
def unzigzag(u):
    return (u >> U64_1) ^ (U64_0 - (u & U64_1))


_GATHER_MSB = np.uint64(0x0002040810204081)


@numba.njit(inline="always")
def terminators(b, base):
    """Bit ``j`` set where byte ``base + j`` (``0 <= j < 64``) ends a varint (high bit clear).

    Per 8-byte word the high bits are gathered by one multiply: byte ``j``'s
    bit 7 lands in bit ``56 + j``.
    """
    m = U64_0
    for w in range(8):
        x = ~ld_u64(b, base + 8 * w) & MSB_MASK
        m |= ((x * _GATHER_MSB) >> np.uint64(56)) << np.uint64(8 * w)
    return m
