"""Sequence column, encodings 3 and 4.

Spec ("Sequence encodings 3 and 4"): encoding 3 contains one u64, repeated
for all rows (exactly 8 bytes, else ``BAD_LENGTH``).  Encoding 4 contains the
first u64 (8 fixed bytes LE, DESIGN.md "Spec readings"; fewer bytes are
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
import numpy as np

from .flags import BAD_LENGTH, SEQUENCE_ORDER, TRAILING_BYTES
from .intrinsics import U64_0, ld_u64
from .varint import MSB_MASK, SEVEN, long_varint, unzigzag, uvarint, varint8


@numba.njit(nogil=True, cache=True)
def dec_seq_constant(b, p, n, rows, seq, o):
    if n != 8:
        return BAD_LENGTH
    v = ld_u64(b, p)
    for i in range(rows):
        seq[o + i] = v
    return 0


@numba.njit(nogil=True, cache=True)
def dec_seq_delta(b, p, n, rows, seq, o, ts, check):
    """Encoding 4; with ``check``, also the order rule against ``ts[o:o + rows]``
    (the block's decoded timestamps): ``SEQUENCE_ORDER`` when the chunk decodes
    cleanly otherwise."""
    if n < 8:
        return BAD_LENGTH
    end = p + n
    cur = ld_u64(b, p)
    p += 8
    seq[o] = cur
    unordered = False
    safe = end - 10  # a full 10-byte varint fits: no per-byte bounds checks
    i = 1
    while i < rows:
        if p <= safe:
            x = ld_u64(b, p)
            if (x & MSB_MASK) == U64_0 and i + 8 <= rows:  # eight 1-byte varints
                for j in range(8):
                    nxt = cur + unzigzag((x >> np.uint64(8 * j)) & SEVEN)
                    if check and nxt > cur and ts[o + i + j] == ts[o + i + j - 1]:
                        unordered = True
                    cur = nxt
                    seq[o + i + j] = cur
                i += 8
                p += 8
                continue
            if (~x & MSB_MASK) != U64_0:
                u, vlen = varint8(x)
                p += vlen
            else:
                u, p, err = long_varint(b, p, x)
                if err != 0:
                    return err
        else:
            u, p, err = uvarint(b, p, end)
            if err != 0:
                return err
        nxt = cur + unzigzag(u)
        if check and nxt > cur and ts[o + i] == ts[o + i - 1]:
            unordered = True
        cur = nxt
        seq[o + i] = cur
        i += 1
    if p != end:
        return TRAILING_BYTES
    return SEQUENCE_ORDER if unordered else 0
