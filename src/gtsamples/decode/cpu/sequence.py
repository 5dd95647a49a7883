"""Sequence column, encodings 3 and 4.

Spec ("Sequence encodings 3 and 4"): encoding 3 contains one u64, repeated
for all rows (exactly 8 bytes, else ``BAD_LENGTH``).  Encoding 4 contains the
first u64 (8 fixed bytes LE, docs/format.md "Our readings"; fewer bytes are
``BAD_LENGTH``) followed by ``rows - 1`` ZigZag varints (:mod:`.varint`) of
each wrapping u64 difference from its predecessor, reinterpreted as i64.
Decode with wrapping addition; preserve all u64 bit patterns.  Bytes after
the last varint are ``TRAILING_BYTES``.

Order ("Column payloads and row semantics"): sequences are nonincreasing
within equal timestamps, including across blocks and parts.  Within a block
:func:`dec_seq_delta` checks it against the block's timestamps, decoded just
before on the same thread (chunk ranges are split at block boundaries) when
that chunk decoded cleanly: a greater sequence (u64) is ``SEQUENCE_ORDER``
(encoding 3 cannot break it).  Across blocks,
:func:`gtsamples.batch.flag_sequence_boundaries` compares the first row of a
block continuing its series (same artifact and identity, ordinal + 1) with
the previous block's last row.  Mirrors ``kernels/gts_sequence.cuh``.
"""

from __future__ import annotations

import numba

from .flags import BAD_LENGTH, SEQUENCE_ORDER, TRAILING_BYTES
from .intrinsics import ld_u64
from .varint import unzigzag, varint_loop
from ...jit import njit


@njit(nogil=True)
def dec_seq_constant(b, p, n, rows, seq, o):
    if n != 8:
        return BAD_LENGTH
    v = ld_u64(b, p)
    for i in range(rows):
        seq[o + i] = v
    return 0


@numba.njit(inline="always")
def _delta_step(u, cur):
    """The sequence after ``cur`` for ZigZag varint ``u``."""
    nxt = cur + unzigzag(u)
    return nxt, nxt


_delta_loop = varint_loop(_delta_step)


@njit(nogil=True)
def dec_seq_delta(b, p, n, rows, seq, o, ts, check):
    """Encoding 4; with ``check``, also the order rule against ``ts[o:o + rows]``
    (the block's decoded timestamps): ``SEQUENCE_ORDER`` when the chunk decodes
    cleanly otherwise."""
    if n < 8:
        return BAD_LENGTH
    end = p + n
    cur = ld_u64(b, p)
    seq[o] = cur
    p, f, _ = _delta_loop(b, p + 8, end, 1, rows, cur, seq, o)
    if f != 0:
        return f
    if p != end:
        return TRAILING_BYTES
    unordered = False
    if check:  # a separate pass: reading ts inside the varint loop measured 4x slower
        s = seq[o:o + rows]
        t = ts[o:o + rows]
        for r in range(1, rows):
            unordered |= (s[r] > s[r - 1]) & (t[r] == t[r - 1])
    return SEQUENCE_ORDER if unordered else 0
