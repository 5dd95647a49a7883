"""The thread driver (gtsamples.decode.cpu.parallel): thresholds and run_ranges."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from gtsamples.decode.cpu import parallel

#: Bound on every wait here: a test that would hang fails instead.
WAIT_S = 30


def _recorder(fail_at: int | None = None):
    """A ``run(lo, hi)`` that records (lo, hi, thread) and raises at range ``fail_at``."""
    seen: list[tuple[int, int, int]] = []
    lock = threading.Lock()

    def run(lo: int, hi: int) -> None:
        with lock:
            seen.append((lo, hi, threading.get_ident()))
        if lo == fail_at:
            raise RuntimeError(f"range {lo} failed")

    return run, seen


@pytest.mark.parametrize("n_threads", [1, 2, 3, 4])
def test_every_range_runs_once(n_threads):
    cost = np.ones(64)
    block = np.arange(64) // 2  # two items per block: cuts fall between blocks
    run, seen = _recorder()
    parallel.run_ranges(run, cost, block, n_threads)
    spans = sorted((lo, hi) for lo, hi, _ in seen)
    assert spans == parallel.split_ranges(cost, n_threads * parallel.TASKS_PER_THREAD if n_threads > 1 else 1,
                                          block)
    assert spans[0][0] == 0 and spans[-1][1] == 64
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert all(lo % 2 == 0 for lo, _ in spans)


def _hold(k: int) -> threading.Event:
    """Occupy ``k`` threads of the pool (as busy cores or other calls would) until the
    returned event is set."""
    pool = parallel.POOL.get(1)
    release = threading.Event()
    started = threading.Barrier(k + 1, timeout=WAIT_S)

    def hold():
        started.wait()
        release.wait(WAIT_S)

    for _ in range(k):
        pool.submit(hold)
    started.wait()
    return release


def test_the_caller_never_waits_for_a_helper_that_has_not_started():
    parallel.POOL.get(1)
    release = _hold(parallel.POOL.size)  # no pool thread free: the call runs every range itself
    try:
        run, seen = _recorder()
        parallel.run_ranges(run, np.ones(40), np.arange(40), 2)
        assert {t for _, _, t in seen} == {threading.get_ident()}
        assert sorted(lo for lo, _, _ in seen) == [lo for lo, _ in parallel.split_ranges(np.ones(40), 8)]
    finally:
        release.set()


def test_a_call_from_a_pool_thread_does_not_deadlock():
    pool = parallel.POOL.get(2)
    release = _hold(parallel.POOL.size - 1)  # the call below takes the last free thread
    try:
        run, seen = _recorder()
        fut = pool.submit(parallel.run_ranges, run, np.ones(16), np.arange(16), parallel.POOL.size)
        fut.result(timeout=WAIT_S)
        assert sorted(seen)[0][0] == 0 and max(hi for _, hi, _ in seen) == 16
        assert len({t for _, _, t in seen}) == 1
    finally:
        release.set()


@pytest.mark.parametrize("fail_at_first", [True, False])
def test_an_exception_in_a_range_is_raised_after_the_started_ranges(fail_at_first):
    cost = np.ones(32)
    ranges = parallel.split_ranges(cost, 8)
    fail = ranges[0][0] if fail_at_first else ranges[-1][0]
    ended = []
    run0, seen = _recorder(fail)

    def run(lo, hi):
        try:
            run0(lo, hi)
        finally:
            ended.append(lo)

    with pytest.raises(RuntimeError, match=f"range {fail} failed"):
        parallel.run_ranges(run, cost, np.arange(32), 2)
    # every range that began has ended when the call returns: none writes to the caller's arrays later
    assert sorted(ended) == sorted(lo for lo, _, _ in seen)
    assert fail in ended


def test_decompression_goes_parallel_at_its_threshold(monkeypatch):
    monkeypatch.setattr(parallel, "thread_count", lambda threads: 4)
    limit = parallel.PARALLEL_ZSTD_MIN_BYTES
    assert parallel.stage_threads(None, zstd_bytes=limit - 1) == 1
    assert parallel.stage_threads(None, zstd_bytes=limit) == 4
    assert parallel.stage_threads(None, values=parallel.PARALLEL_MIN_VALUES - 1, zstd_bytes=limit - 1) == 1
