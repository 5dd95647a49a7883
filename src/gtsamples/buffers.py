"""Host buffers taken from pyarrow's memory pool, and reused once their users release them.

Fetched chunk bytes and decoded columns are large (hundreds of MiB for a full
scan) and short-lived.  Pages the process has not written yet cost a page
fault and a kernel zeroing pass on their first write: on the 2-core VM about
1 ns per byte (a 10M-row full scan writes ~0.7 GB of buffers: 0.3-0.7 s, as
much as its decode).  pyarrow's allocator does not keep blocks this large
once freed (mimalloc gives a freed huge block back to the OS within
milliseconds), so each read's buffers were fresh pages again, and a read's
cost grew faster than its rows.

So a block of at least :data:`POOL_MIN_BYTES` stays registered here after it
is handed out; once nothing refers to it any more (its arrays, the Arrow
buffers over them and every view are gone: its reference count is back to
ours) it serves the next request it fits, its pages already mapped.  Released
blocks are kept up to :data:`RETAIN_MAX_BYTES` in all and for
:data:`RETAIN_SECONDS` after their last use (checked on each request; no
background thread); :func:`trim` drops them all.  Decoded columns become
Arrow buffers without a copy.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import pyarrow as pa

from .runtime import ForkSafeLock, at_fork_child

__all__ = ["pool_array", "trim", "retained_bytes"]

#: Smaller arrays come from numpy (fresh pages matter only for large buffers).
POOL_MIN_BYTES = 1 << 20


def _default_retain_bytes() -> int:
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - no sysconf
        ram = 8 << 30
    return int(min(ram // 4, 4 << 30))


#: Released blocks kept for reuse, in bytes (a quarter of RAM, at most 4 GiB: a
#: 30M-row full scan's fetch and output buffers).
RETAIN_MAX_BYTES = _default_retain_bytes()
#: A released block not reused within this many seconds is dropped.
RETAIN_SECONDS = 10.0
#: A request takes a released block at most this many times its size.
MAX_WASTE = 2


class _Block:
    __slots__ = ("buf", "nbytes", "used")

    def __init__(self, buf: pa.Buffer, now: float):
        self.buf = buf
        self.nbytes = buf.size
        self.used = now

    def released(self) -> bool:
        """Nothing but this object refers to the buffer (the other count is getrefcount's argument)."""
        return sys.getrefcount(self.buf) <= 2


class _Recycler:
    def __init__(self) -> None:
        self._lock = ForkSafeLock()
        self._blocks: list[_Block] = []

    def take(self, nbytes: int) -> pa.Buffer:
        now = time.monotonic()
        with self._lock:
            free = self._release_stale(now)
            fits = [b for b in free if nbytes <= b.nbytes <= MAX_WASTE * nbytes]
            if fits:
                block = min(fits, key=lambda b: b.nbytes)
                block.used = now
                return block.buf
            block = _Block(pa.allocate_buffer(nbytes), now)
            self._blocks.append(block)
            return block.buf

    def _release_stale(self, now: float) -> list[_Block]:
        """Drops released blocks past their time or beyond the byte budget; returns the rest."""
        free = [b for b in self._blocks if b.released()]
        drop = {id(b) for b in free if now - b.used > RETAIN_SECONDS}
        kept = sorted((b for b in free if id(b) not in drop), key=lambda b: b.used, reverse=True)
        total = 0
        for b in kept:  # most recently used first
            total += b.nbytes
            if total > RETAIN_MAX_BYTES:
                drop.add(id(b))
        if drop:
            self._blocks = [b for b in self._blocks if id(b) not in drop]
        return [b for b in kept if id(b) not in drop]

    def forget(self) -> None:
        self._blocks = []

    def trim(self) -> None:
        with self._lock:
            self._blocks = [b for b in self._blocks if not b.released()]

    def retained_bytes(self) -> int:
        with self._lock:
            return sum(b.nbytes for b in self._blocks if b.released())


_RECYCLER = _Recycler()


@at_fork_child
def _forget_blocks() -> None:
    """A forked child starts with no retained block (those lent to the parent's other threads
    would look free there, and be reused under the copies those threads' objects hold)."""
    _RECYCLER.forget()


def pool_array(shape, dtype) -> np.ndarray:
    """An uninitialised, writeable, C-contiguous numpy array; from :data:`POOL_MIN_BYTES` up
    in pyarrow's default memory pool, on a released block's pages when one fits."""
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
    buf = _RECYCLER.take(count * dtype.itemsize)
    return np.frombuffer(buf, dtype=dtype, count=count).reshape(shape)


def trim() -> None:
    """Give every released block back to pyarrow's pool now."""
    _RECYCLER.trim()


def retained_bytes() -> int:
    """Bytes of released blocks kept for reuse."""
    return _RECYCLER.retained_bytes()
