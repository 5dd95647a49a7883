"""The thread driver: threads per stage, the shared pool, and the split of chunks into ranges.

Below a size threshold (the ``PARALLEL_*`` constants, read at call time so
tests can lower them) a stage runs on the calling thread alone; above it
numba's parallel kernels use the requested threads (:class:`numba_threads`),
and the decode stage splits the chunks into contiguous ranges of about equal
decoded bytes, cut only where the block changes (:func:`split_ranges`: the
sequence order rule reads a block's timestamps on the thread that decoded
them), which the calling thread and helpers from a thread pool (:data:`POOL`) take
in turn (:func:`run_ranges`: the caller never waits for a helper to start).

numba's ``prange`` kernels run through :func:`run_kernel`, which asks
:data:`gtsamples.runtime.PRANGE`: one at a time under the ``workqueue`` layer, and
the serial twin in a child forked after GNU OpenMP ran (see :mod:`gtsamples.runtime`).
"""

from __future__ import annotations

import collections
import concurrent.futures as cf

import numba
import numpy as np

from ...argcheck import is_integer
from ...runtime import PRANGE
from ...threadpools import LazyThreadPool

#: Below these amounts of work a stage runs on the calling thread only.  A
#: fork-join region costs microseconds on an idle machine but can stall for a
#: scheduler slice (~10 ms measured) when the cores are busy, far more than the
#: serial cost of small work (frame check ~10 ns/frame, kernel ~3-7 ns/value).
#: (Decompression too: the one-series one-day region query's 271 KB of frames decoded in
#: 0.97 ms on one thread and 0.96 ms on two, median of 200 back to back, 2-vCPU VM.)
PARALLEL_ZSTD_MIN_BYTES = 1 << 20  # decoded Zstd bytes
PARALLEL_MIN_ITEMS = 32_768  # frames to check / small chunks to hash
PARALLEL_MIN_VALUES = 262_144  # rows of active chunks to decode (or identity rows to fill)
PARALLEL_HASH_MIN_BYTES = 4 << 20  # stored bytes to hash
#: Work items per thread: contiguous chunk ranges, balanced by decoded bytes.
TASKS_PER_THREAD = 4


def threads_arg(threads):
    """A call's ``threads`` checked: None or an integer (see :func:`thread_count`).
    ``TypeError`` for anything else (``int()`` would take ``'2'``, truncate ``1.5``
    and read ``True`` as one thread)."""
    if threads is not None and not is_integer(threads):
        raise TypeError(f"threads must be a number of threads (an integer; None or <= 0: numba's setting), "
                        f"not {type(threads).__name__} {threads!r}")
    return threads


def thread_count(threads: int | None) -> int:
    """Threads a call may use: ``threads`` bounded by numba's pool, or numba's setting when None or <= 0."""
    if threads is None or threads <= 0:
        return max(1, numba.get_num_threads())
    return max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS))


def stage_threads(threads: int | None, *, items: int | None = None, values: int | None = None,
                  hash_bytes: int | None = None, zstd_bytes: int | None = None) -> int:
    """:func:`thread_count` of ``threads`` if any amount of work given reaches its
    ``PARALLEL_*`` threshold, else 1 (without asking numba: that costs ~10 us, a
    noticeable share of a small read)."""
    big = ((items is not None and items >= PARALLEL_MIN_ITEMS)
           or (values is not None and values >= PARALLEL_MIN_VALUES)
           or (hash_bytes is not None and hash_bytes >= PARALLEL_HASH_MIN_BYTES)
           or (zstd_bytes is not None and zstd_bytes >= PARALLEL_ZSTD_MIN_BYTES))
    return thread_count(threads) if big else 1


#: The backend's decode threads, replaced by a larger pool when a call wants more threads.
POOL = LazyThreadPool("gtsamples-zstd")


def split_ranges(cost: np.ndarray, parts: int, block: np.ndarray | None = None) -> list[tuple[int, int]]:
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


def run_ranges(run, cost: np.ndarray, block: np.ndarray, n_threads: int) -> None:
    """``run(lo, hi)`` over ranges of about equal ``cost`` (:func:`split_ranges`, cut at ``block``
    changes): on this thread when ``n_threads`` is 1, else ``TASKS_PER_THREAD`` ranges per
    thread, taken in turn by this thread and ``n_threads - 1`` helpers on :data:`POOL`.

    The caller works too and, once no range is left to take, withdraws the helpers that
    have not started (busy cores may not schedule them for a time slice, or the pool may be
    busy with other calls' ranges) and waits only for ranges already running: a call never
    waits on a thread that has not begun, so it cannot stall, nor deadlock when called from
    a pool thread.  An exception in any range is raised after every started range ended
    (they write the caller's arrays)."""
    ranges = split_ranges(cost, n_threads * TASKS_PER_THREAD if n_threads > 1 else 1, block)
    if len(ranges) == 1:
        run(*ranges[0])
        return
    todo = collections.deque(ranges)  # popleft is atomic: each range is taken once

    def take_ranges() -> None:
        while True:
            try:
                lo, hi = todo.popleft()
            except IndexError:
                return
            run(lo, hi)

    pool = POOL.get(n_threads - 1)
    helpers = [pool.submit(take_ranges) for _ in range(min(n_threads, len(ranges)) - 1)]
    try:
        take_ranges()
    finally:
        todo.clear()  # (after an exception here: the helpers stop after their current range)
        started = [f for f in helpers if not f.cancel()]
        cf.wait(started)
    for f in started:
        f.result()  # a helper's exception


def run_kernel(n_threads: int, parallel, serial, *args):
    """``parallel(*args)`` (a ``prange`` kernel) on ``n_threads`` of numba's threads, or its
    twin ``serial(*args)`` on the calling thread when ``n_threads`` is 1: neither numba's
    thread count is touched nor its pool woken, which costs tens of microseconds per
    kernel, more than a small read's checks themselves.  The parallel kernel runs in
    :data:`~gtsamples.runtime.PRANGE`'s turn (alone under ``workqueue``), and never where
    the gate forbids it (the serial twin runs then)."""
    if n_threads <= 1 or not PRANGE.allowed:
        return serial(*args)
    with PRANGE.turn(), numba_threads(n_threads):
        return parallel(*args)


class numba_threads:
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
