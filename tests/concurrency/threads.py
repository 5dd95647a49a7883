"""Thread set-ups shared by the concurrency tests and scenarios."""

from __future__ import annotations

import contextlib
import threading
import traceback


def barrier_threads(n: int, work) -> list:
    """``work(k)`` on ``n`` threads released together by a barrier: their results in order,
    an exception as its text (``"error: ..."``)."""
    barrier = threading.Barrier(n)
    out: list = [None] * n

    def run(k):
        try:
            barrier.wait()
            out[k] = work(k)
        except BaseException:  # noqa: BLE001 - reported
            out[k] = "error: " + traceback.format_exc(limit=3)

    ts = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


@contextlib.contextmanager
def held_by_a_thread(lock, hold_s: float = 30.0):
    """``lock`` held by another thread for the body (released at its end, or after ``hold_s``)."""
    held, release = threading.Event(), threading.Event()

    def hold():
        with lock:
            held.set()
            release.wait(hold_s)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(30)
    try:
        yield
    finally:
        release.set()
        t.join()
