"""The region layer's helper threads: a long-lived pool, and :func:`pmap` (a map over
threads whose first fan-out of a function runs its first item alone, see :func:`warm_alone`)."""

from __future__ import annotations

import threading

from ..threadpools import LazyThreadPool

#: Long-lived helper threads (a query does not pay for starting threads).
_HELPERS = LazyThreadPool("gtsamples-region", 16)


_WARMED: set = set()
_WARMED_LOCK = threading.Lock()


def warm_alone(fn) -> bool:
    """True the first time this process fans ``fn`` out to threads: that first call
    then runs alone, so numba loads (or compiles) the kernels it needs before other
    threads run any.  LLVM adding code while another thread ran JIT code crashed the
    process (SIGSEGV in a nogil page kernel while another thread loaded one from
    numba's cache: seen once in ten cold region builds on 2 threads)."""
    # by name, not by object: a nested function is a new object at every call (a callable
    # without a name, e.g. a partial, shares its type's key)
    key = (getattr(fn, "__module__", None), getattr(fn, "__qualname__", type(fn).__qualname__))
    with _WARMED_LOCK:
        if key in _WARMED:
            return False
        _WARMED.add(key)
        return True


def pmap(fn, items: list, workers: int) -> list:
    """``[fn(x) for x in items]`` on up to ``workers`` threads (this one included),
    each taking the next item.  If calls raise, the exception of the first such
    item (in ``items`` order) is raised once all calls are done, as a sequential
    loop would raise it; items after it are then skipped."""
    n = len(items)
    workers = min(workers, n)
    if workers <= 1:
        return [fn(x) for x in items]
    if warm_alone(fn):  # the first call runs alone: see warm_alone
        return [fn(items[0]), *pmap(fn, items[1:], workers)]
    out: list = [None] * n
    failed: list = []  # (index, exception)
    indices = iter(range(n))  # next() is atomic under the GIL: each index is taken once

    def work():
        for k in indices:
            if failed and k > min(failed, key=lambda f: f[0])[0]:
                continue
            try:
                out[k] = fn(items[k])
            except BaseException as e:  # noqa: BLE001 - re-raised below, in order
                failed.append((k, e))

    futs = [_HELPERS.get().submit(work) for _ in range(workers - 1)]
    work()
    for f in futs:
        f.result()
    if failed:
        raise min(failed, key=lambda f: f[0])[1]
    return out
