"""Process-wide thread pools, each made on first use (importing gtsamples starts no thread)."""

from __future__ import annotations

import concurrent.futures as cf
import threading

__all__ = ["LazyThreadPool"]


class LazyThreadPool:
    """A ``ThreadPoolExecutor`` of ``workers`` threads named ``prefix``, created on the
    first :meth:`get`; ``get(n)`` with more threads than it has replaces it by one of
    ``n`` (the old pool finishes the work it was given)."""

    def __init__(self, prefix: str, workers: int = 1):
        self.prefix = prefix
        self.workers = workers
        self.executor: cf.ThreadPoolExecutor | None = None
        self.size = 0
        self._lock = threading.Lock()

    def get(self, n: int | None = None) -> cf.ThreadPoolExecutor:
        need = self.workers if n is None else n
        with self._lock:
            if self.executor is None or self.size < need:
                if self.executor is not None:
                    self.executor.shutdown(wait=False)
                self.executor = cf.ThreadPoolExecutor(max_workers=need, thread_name_prefix=self.prefix)
                self.size = need
            return self.executor
