"""Thread set-ups (and a forked child) shared by the concurrency tests and scenarios."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import traceback

import pytest


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


def in_child(fn, timeout: float = 60.0) -> None:
    """Run ``fn()`` in a forked child; fail unless it returns truthy in time."""
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            code = 0 if fn() else 2
        except BaseException:  # noqa: BLE001 - reported through the exit status
            traceback.print_exc()
            code = 3
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the forked child hung (killed after {timeout} s)")
        time.sleep(0.01)
    assert os.WIFEXITED(status), f"the child died of signal {os.WTERMSIG(status)}"
    assert os.WEXITSTATUS(status) == 0, f"the child's check failed (exit {os.WEXITSTATUS(status)})"
