"""The region layer's helper threads: a long-lived pool, and :func:`pmap` (a map over threads).

A function's first fan-out no longer runs its first item alone: the crash that did hide
(SIGSEGV in a nogil kernel while numba loaded another) was libzstd's loader racing, each
loser's decompression contexts freed under running kernels; the library and its
contexts are now created once (:mod:`gtsamples.format.libzstd`)."""

from __future__ import annotations

from ..threadpools import LazyThreadPool

#: Long-lived helper threads (a query does not pay for starting threads).
_HELPERS = LazyThreadPool("gtsamples-region", 16)


def pmap(fn, items: list, workers: int) -> list:
    """``[fn(x) for x in items]`` on up to ``workers`` threads (this one included),
    each taking the next item.  If calls raise, the exception of the first such
    item (in ``items`` order) is raised once all calls are done, as a sequential
    loop would raise it; items after it are then skipped."""
    n = len(items)
    workers = min(workers, n)
    if workers <= 1:
        return [fn(x) for x in items]
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
