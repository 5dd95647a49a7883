"""Threads and JIT code: what each thread may share.

* A leaf-page load on the helper thread decompresses with the helper's own
  ``ZSTD_DCtx``: the caller's context may be decompressing its next group meanwhile
  (one context used by two threads at once corrupts it).
* (A region's first fan-out no longer runs alone: the crash it hid is fixed at its
  cause, see tests/test_first_calls.py.)
"""

from __future__ import annotations

import json
import threading

import pytest

import gtsamples as gs
from gtsamples.cache import PageCache
from gtsamples.format import libzstd
from gtsamples.plan import loading

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
