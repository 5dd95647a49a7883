"""Threads and JIT code: what each thread may share.

* A leaf-page load on the helper thread decompresses with the helper's own
  ``ZSTD_DCtx``: the caller's context may be decompressing its next group meanwhile
  (one context used by two threads at once corrupts it).
* A region's first fan-out of a function to threads runs its first item alone, so
  numba loads the kernels it needs before other threads run any (LLVM adding code
  while another thread ran JIT code crashed a cold ``Region.build(workers=2)`` with
  SIGSEGV, about once in ten runs).
"""

from __future__ import annotations

import json
import threading
import time

import pytest

import gtsamples as gs
from gtsamples.cache import PageCache
from gtsamples.format import libzstd
from gtsamples.plan import loading
from gtsamples.region import threads

from .conftest import DATA


def test_helper_thread_leaf_loads_use_the_helpers_own_zstd_context(monkeypatch, tmp_path):
    if libzstd.get() is None:
        pytest.skip("no libzstd: pages are decompressed by python-zstandard, without a shared context")
    seen = []
    kernel = loading._leaves_kernel

    def spy(fn, dctx, *args):
        seen.append((threading.get_ident(), dctx))
        return kernel(fn, dctx, *args)

    monkeypatch.setattr(loading, "_leaves_kernel", spy)
    monkeypatch.setattr(loading, "HELPER_PAGE_BYTES", 0)  # every group to the helper thread
    d = DATA / "golden" / "g2_depth2"
    art = gs.open_artifact(d / "store", entry=json.loads((d / "entry.json").read_text()), cache=PageCache())
    art.read()
    caller = (threading.get_ident(), libzstd.get().dctx())
    assert seen and all(t != caller[0] for t, _ in seen), "the loads did not run on the helper thread"
    assert all(d != caller[1] and d != 0 for _, d in seen), "the helper used the caller's ZSTD_DCtx"


def test_a_functions_first_fan_out_runs_its_first_item_alone():
    active, overlaps, lock = [0], [], threading.Lock()

    def work(x):  # a fresh function: never fanned out before in this process
        with lock:
            active[0] += 1
            overlaps.append((x, active[0]))
        time.sleep(0.02)
        with lock:
            active[0] -= 1
        return x * 2

    assert threads.pmap(work, list(range(6)), 3) == [0, 2, 4, 6, 8, 10]
    assert overlaps[0] == (0, 1), "the first item ran beside others"
    assert max(n for _, n in overlaps) > 1, "the rest did not run in parallel"
    overlaps.clear()
    threads.pmap(work, list(range(6)), 3)  # warm now: all at once
    assert max(n for _, n in overlaps[:3]) > 1


def test_warm_alone_is_true_once_per_function():
    def f():
        pass

    assert threads.warm_alone(f) is True
    assert threads.warm_alone(f) is False
