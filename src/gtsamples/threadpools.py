"""Process-wide thread pools, each made on first use (importing gtsamples starts no thread).

A forked child forgets every pool's executor (its threads stayed in the parent: a task
submitted to it would wait forever) and makes its own on first use."""

from __future__ import annotations

import concurrent.futures as cf
import weakref

from .runtime import ForkSafeLock, at_fork_child

__all__ = ["LazyThreadPool"]

_POOLS: weakref.WeakSet = weakref.WeakSet()


class LazyThreadPool:
    """A ``ThreadPoolExecutor`` of ``workers`` threads named ``prefix``, created on the
    first :meth:`get`; ``get(n)`` with more threads than it has replaces it by one of
    ``n`` (the old pool finishes the work it was given).  Owned by its module for the
    process's life; a forked child starts without one (:meth:`forget`)."""

    def __init__(self, prefix: str, workers: int = 1):
        self.prefix = prefix
        self.workers = workers
        self.executor: cf.ThreadPoolExecutor | None = None
        self.size = 0
        self._lock = ForkSafeLock()
        _POOLS.add(self)

    def get(self, n: int | None = None) -> cf.ThreadPoolExecutor:
        need = self.workers if n is None else n
        with self._lock:
            if self.executor is None or self.size < need:
                if self.executor is not None:
                    self.executor.shutdown(wait=False)
                self.executor = cf.ThreadPoolExecutor(max_workers=need, thread_name_prefix=self.prefix)
                self.size = need
            return self.executor

    def forget(self) -> None:
        """Drop the executor without shutting it down (in a forked child: its threads are the parent's)."""
        self.executor = None
        self.size = 0


@at_fork_child
def _forget_all() -> None:
    for pool in list(_POOLS):
        pool.forget()
