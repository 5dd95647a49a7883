"""One decode pass over a range of chunks: each active chunk goes to its encoding's decoder.

Spec ("Encodings and compression"): column encodings 1 and 2 are timestamps
(:mod:`.timestamp`), 3 and 4 sequences (:mod:`.sequence`), 5 nullable
Float64 (:mod:`.floats`), 6 and 7 operation types (:mod:`.optype`); any other
encoding is ``UNSUPPORTED_ENCODING``.  Role/encoding agreement is the
planner's check; here the encoding chooses the output column.  Every read
is bounds-checked against the chunk's decoded bytes and every write stays
inside ``[out_row, out_row + rows)`` of an output array, whatever the bytes
say: a chunk whose bytes or rows lie outside its buffer or output is
``BAD_LENGTH`` and is not decoded.

The host describes the chunks to the kernel in one int64 table, a row per
chunk and a column per ``M_*`` constant below.
"""

from __future__ import annotations

import numba
import numpy as np

from .flags import BAD_LENGTH, UNSUPPORTED_ENCODING
from .floats import dec_f64_xor
from .optype import dec_op_constant, dec_op_raw
from .sequence import dec_seq_constant, dec_seq_delta
from .timestamp import dec_ts_constant, dec_ts_dod
from ...jit import njit


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


@njit(nogil=True)
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
        elif enc == 5:
            fi = meta[i, M_FIELD]
            if not _f64_fits(meta, i, buf, vals, bitmaps):
                f = BAD_LENGTH
            else:
                f = dec_f64_xor(buf, p, ln, rows, meta[i, M_NULLS], vals[fi], bitmaps[fi], want_bm[fi], o, edges, i)
        elif enc < 1 or enc > 7:
            f = UNSUPPORTED_ENCODING
        elif o + rows > (ts.shape[0] if enc <= 2 else seq.shape[0] if enc <= 4 else op.shape[0]):
            f = BAD_LENGTH  # rows past the encoding's output column
        elif enc == 1:
            f = dec_ts_constant(buf, p, ln, rows, ts, o, meta[i, M_MIN_TS], meta[i, M_MAX_TS])
        elif enc == 2:
            f = dec_ts_dod(buf, p, ln, rows, ts, o, meta[i, M_MIN_TS], meta[i, M_MAX_TS])
        elif enc == 3:
            f = dec_seq_constant(buf, p, ln, rows, seq, o)
        elif enc == 4:
            t = meta[i, M_TS_CHUNK]
            check = (first <= t < i and meta[t, M_ACTIVE] != 0 and flags[t] == 0
                     and o + rows <= ts.shape[0])
            f = dec_seq_delta(buf, p, ln, rows, seq, o, ts, check)
        elif enc == 6:
            f = dec_op_constant(buf, p, ln, rows, op, o)
        else:
            f = dec_op_raw(buf, p, ln, rows, op, o)
        if f != 0:
            flags[i] |= np.uint32(f)


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
