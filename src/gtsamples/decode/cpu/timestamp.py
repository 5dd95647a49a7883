"""Timestamp column, encodings 1 and 2.

Spec ("Timestamp encodings 1 and 2"):

* Encoding 1 contains ``first: i64`` and ``step: i64``, exactly 16 bytes
  (else ``BAD_LENGTH``).  A singleton uses step zero; zero step is valid for
  repeated timestamps.  Reconstruct by checked addition: ``first + step *
  (rows - 1)`` beyond i64 is ``TIMESTAMP_OVERFLOW``.  A negative step is
  ``NEGATIVE_STEP`` (encoding 1 is only used for a nonnegative step).
* Encoding 2 contains the first i64 (8 fixed bytes LE, docs/format.md "Our
  readings"; fewer bytes are ``BAD_LENGTH``), followed for two or more rows
  by the first delta as a ZigZag varint, then ``rows - 2`` ZigZag varints of
  differences between deltas (:mod:`.varint`).  Deltas and timestamps are
  reconstructed with wrapping addition.  Bytes after the last varint are
  ``TRAILING_BYTES``.

After either decoding, timestamps are nondecreasing (signed) else
``TIMESTAMP_DECREASING``, and the first and last equal the block's
min_timestamp and max_timestamp else ``TIMESTAMP_BOUNDS``; both are found
after every row was written (:data:`.flags.ROWS_WRITTEN_FLAGS`).  A bad
varint stops the reader with that flag alone.  Mirrors
``kernels/gts_timestamp.cuh``.
"""

from __future__ import annotations

import numba
import numpy as np

from .flags import BAD_LENGTH, NEGATIVE_STEP, TIMESTAMP_BOUNDS, TIMESTAMP_DECREASING, TIMESTAMP_OVERFLOW, TRAILING_BYTES
from .intrinsics import U64_0, ld_u64
from .varint import unzigzag, varint_loop
from ...jit import njit


_I64_MAX = np.iinfo(np.int64).max


@njit(nogil=True)
def dec_ts_constant(b, p, n, rows, ts, o, min_ts, max_ts):
    if n != 16:
        return BAD_LENGTH
    first = np.int64(ld_u64(b, p))
    step = np.int64(ld_u64(b, p + 8))
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


@numba.njit(inline="always")
def _dod_step(u, state):
    """The timestamp after ``state = (delta, cur, prev, flag)`` for delta difference varint ``u``."""
    delta, cur, prev, f = state
    delta += unzigzag(u)
    cur += delta
    t = np.int64(cur)
    if t < prev:
        f |= TIMESTAMP_DECREASING
    return (delta, cur, t, f), t


_dod_loop = varint_loop(_dod_step)


@njit(nogil=True)
def dec_ts_dod(b, p, n, rows, ts, o, min_ts, max_ts):
    if n < 8:
        return BAD_LENGTH
    end = p + n
    cur = ld_u64(b, p)
    ts[o] = np.int64(cur)
    p, f, state = _dod_loop(b, p + 8, end, 1, rows, (U64_0, cur, np.int64(cur), 0), ts, o)
    if f != 0:
        return f
    f = state[3]
    if p != end:
        f |= TRAILING_BYTES
    if ts[o] != min_ts or ts[o + rows - 1] != max_ts:
        f |= TIMESTAMP_BOUNDS
    return f
