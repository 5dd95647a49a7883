"""Host buffers taken from pyarrow's memory pool.

Fetched chunk bytes and decoded columns are large (hundreds of MiB for a full
scan) and short-lived.  Arrow's allocator (mimalloc or jemalloc) keeps freed
pages, so a read reuses the pages of an earlier read's released buffers;
fresh numpy arrays are new pages that the first write must fault in, which on
the 2-core VM cost more than decoding (first touch of 530 MiB: 0.08-1.0 s; a
reused pool buffer: 3 ms).  Decoded columns become Arrow buffers without a copy.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["pool_array"]

#: Smaller arrays come from numpy (fresh pages matter only for large buffers).
POOL_MIN_BYTES = 1 << 20


def pool_array(shape, dtype) -> np.ndarray:
    """An uninitialised, writeable, C-contiguous numpy array; in pyarrow's default memory pool
    from :data:`POOL_MIN_BYTES` up."""
    dtype = np.dtype(dtype)
    if isinstance(shape, tuple):
        shape = tuple(int(s) for s in shape)
        count = 1
        for s in shape:
            count *= s
    else:  # one dimension (most calls): no per-call numpy reduction
        count = int(shape)
        shape = (count,)
    if count * dtype.itemsize < POOL_MIN_BYTES:  # small: numpy's allocator is cheaper per call
        return np.empty(shape, dtype=dtype)
    buf = pa.allocate_buffer(count * dtype.itemsize)
    return np.frombuffer(buf, dtype=dtype, count=count).reshape(shape)
