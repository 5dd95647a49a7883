"""The warm index (gtsamples.plan.warm): a region query whose pages are all cached is
navigated from the version's flat tables, with exactly the navigator's outcome.

Each query is read twice with the index and twice without it: the second reads must
agree on rows, on every statistic (cache hits included) and on the page cache's own
counters, and the narrow ones must have come from the index.  What it cannot answer
(two leaves of a part, an artifact it does not hold, an entry evicted since) goes to the
navigator, with the same result.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import gtsamples as gs
from gtsamples import plan as P
from gtsamples.plan import warm as W
from gtsamples.plan.navigator import cache_key
from gtsamples.region import create_region, open_region
from gtsamples.region.region import Region

from ..conftest import assert_tables_equal
from .conftest import REGION_ID, make_sst_table, oracle

IDS = [(1, 5), (1, 9), (1, 40), (2, 5), (2, 700), (3, 1)]


@pytest.fixture(params=["internal roots", "root leaves"])
def region(tmp_path, request):
    """Eight SSTs, seven covered by artifacts, shifted in time like flushed SSTs; the
    artifacts' roots are internal pages (small pages: several leaves per part), or each
    part's only leaf."""
    rng = np.random.default_rng(29)
    r = create_region(tmp_path, REGION_ID)
    tables = []
    for k in range(8):
        t = make_sst_table(rng, rows=int(rng.integers(150, 400)), ids=IDS, ts_range=40)
        ts = t["ts"].cast("int64").to_numpy() + k * 30_000
        t = t.set_column(t.schema.get_field_index("ts"), "ts", gs_ts(ts))
        tables.append(t)
        r.add_sst(t, row_group_size=64)
    small = {"max_page_bytes": 700} if request.param == "internal roots" else {}
    r.build(file_ids=[s.file_id for k, s in enumerate(r.ssts) if k != 5], verify=None, row_limit=128, **small)
    depths = set()
    for e in r.artifacts:
        art = gs.open_artifact(tmp_path, entry=e)
        art.navigate(P.Selection.build(None, None, None, None, "millisecond"))
        depths |= {art.cache.peek(cache_key(art, 0, -1)).root_leaf is None}
    assert depths == {request.param == "internal roots"}
    gs.cache.default_cache().clear()
    return tmp_path, tables


def gs_ts(values):
    import pyarrow as pa

    return pa.array(values, pa.timestamp("ms"))


QUERIES = [
    {"series": [(1, 9)]},
    {"series": [(2, 700)], "start": 45_000, "end": 160_000},
    {"series": [(3, 1)], "columns": ["ts", "v"]},
    {"series": [(1, 6)]},  # between two series: no block (or no child) selected
    {"series": [(1, 41)], "end": 100_000},
    {"series": [(1, 5), (3, 1)]},  # two leaves of a part: the navigator
    {"tables": [2], "start": 20_000, "end": 90_000},
    {},
]


def _read(root, q, warm: bool, monkeypatch):
    if not warm:
        monkeypatch.setattr(Region, "_warm_index", lambda self, need: None)
    try:
        cache = gs.cache.default_cache()
        h, m = cache.hits, cache.misses
        t, st = open_region(root, REGION_ID).read_with_stats(**q)
        return t, st.as_dict(), (cache.hits - h, cache.misses - m)
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("q", QUERIES)
def test_warm_reads_equal_navigated_reads(region, q, monkeypatch, request):
    root, tables = region
    answered = []
    real = W.WarmIndex.navigate
    monkeypatch.setattr(W.WarmIndex, "navigate", lambda self, *a: answered.append(real(self, *a)) or answered[-1])
    want = oracle(tables, q.get("columns"), q.get("series"), q.get("tables"), q.get("start"), q.get("end"))
    cold = [_read(root, q, False, monkeypatch) for _ in range(2)]
    gs.cache.default_cache().clear()
    monkeypatch.setattr(W.WarmIndex, "navigate", lambda self, *a: answered.append(real(self, *a)) or answered[-1])
    warm = [_read(root, q, True, monkeypatch)]
    answered.clear()
    monkeypatch.setattr(W.WarmIndex, "navigate", lambda self, *a: answered.append(real(self, *a)) or answered[-1])
    warm.append(_read(root, q, True, monkeypatch))
    for t, _st, _c in cold + warm:
        assert_tables_equal(t, want.select(t.schema.names).cast(t.schema))
    assert warm[0][1] == cold[0][1] and warm[0][2] == cold[0][2]  # the first read navigates, and registers
    assert warm[1][1] == cold[1][1], "a warm read's statistics differ from the navigator's"
    assert warm[1][2] == cold[1][2], "a warm read's page cache hits differ from the navigator's"
    assert len(answered) == 1  # (every query here keeps a covered SST)
    if "series" in q and len(q["series"]) == 1:
        assert answered[0] is not None, "a warm one-series read was navigated"
    elif "series" not in q and request.node.callspec.params["region"] == "internal roots":
        assert answered[0] is None, "many leaves of a part were not left to the navigator"
    elif "series" not in q:  # a root that is the part's only leaf: one leaf whatever the query
        assert answered[0] is not None


def test_a_part_the_selection_skips_counts_its_artifact_alone(region):
    """An artifact whose part the selection skips: no leaves, no rows, one cache hit (its
    artifact), as the navigator gives it."""
    from gtsamples.plan.navigator import navigate_many
    from gtsamples.storage import ReadStats

    root, _ = region
    r = open_region(root, REGION_ID)
    r.read(series=[(1, 9)])
    r.read(series=[(1, 9)])
    plan = r.plan(series=[(1, 9)], start=10**9)  # after every part
    idx = r._warm_index(plan.need)
    ordinals = [s.ordinal for s in r.plan(series=[(1, 9)]).sources if s.covered]
    got = idx.navigate(ordinals, plan.selection)
    assert got is not None
    arts, leaves, rows, hits = got
    assert leaves == [[]] * len(ordinals) and rows == [0] * len(ordinals) and hits == [1] * len(ordinals)
    stats = [ReadStats() for _ in arts]
    assert navigate_many(arts, plan.selection, stats) == leaves
    assert [s.cache_hits for s in stats] == [0] * len(arts)  # (+1 each: the artifact's own lookup)


@pytest.mark.parametrize("q", [{"series": [(1, 9)]}, {"series": [(3, 1)], "start": 40_000}])
def test_reads_on_many_threads_fill_and_use_the_index_too(region, q, monkeypatch):
    """``max_workers`` > 1 (a remote store's default) navigates artifact by artifact on
    threads, registers what it found, and then reads from the index, with the same rows
    and statistics as the navigator's."""
    root, tables = region
    want = oracle(tables, series=q["series"], start=q.get("start"))
    answered = []
    real = W.WarmIndex.navigate
    monkeypatch.setattr(W.WarmIndex, "navigate", lambda self, *a: answered.append(real(self, *a)) or answered[-1])
    got = [open_region(root, REGION_ID).read_with_stats(**q, max_workers=4) for _ in range(3)]
    assert answered[0] is None and answered[1] is not None and answered[2] is not None
    for t, _st in got:
        assert_tables_equal(t, want.cast(t.schema))
    monkeypatch.undo()
    gs.cache.default_cache().clear()
    monkeypatch.setattr(Region, "_warm_index", lambda self, need: None)
    nav = [open_region(root, REGION_ID).read_with_stats(**q, max_workers=4)[1] for _ in range(2)]
    assert got[1][1].as_dict() == nav[1].as_dict() and got[0][1].as_dict() == nav[0].as_dict()


def test_the_index_holds_each_covered_sst_once(region, monkeypatch):
    root, _ = region
    for s in IDS:
        open_region(root, REGION_ID).read(series=[s])
    r = open_region(root, REGION_ID)
    idx = r._warm_index(r.plan().need)
    assert idx.artifacts == 7  # the uncovered SST has no artifact
    assert idx.cache is gs.cache.default_cache()


def test_an_eviction_restarts_the_index_and_reads_stay_right(region, monkeypatch):
    root, tables = region
    q = {"series": [(1, 9)]}
    want = oracle(tables, series=q["series"])
    for _ in range(2):
        open_region(root, REGION_ID).read(**q)
    r = open_region(root, REGION_ID)
    idx = r._warm_index(r.plan().need)
    assert idx.artifacts == 7
    cache = gs.cache.default_cache()
    key = next(iter(cache._items))
    cache.put(key, cache.peek(key), 1)  # one entry put again: a removal
    assert idx.navigate([0], r.plan(series=q["series"]).selection) is None
    got = r.read(**q)  # navigated, registered afresh
    assert_tables_equal(got, want.cast(got.schema))
    assert idx.artifacts == 7 and idx.navigate([0], r.plan(series=q["series"]).selection) is not None


def test_an_entry_evicted_by_a_smaller_cache_is_navigated_again(region, monkeypatch):
    root, tables = region
    q = {"series": [(2, 700)]}
    want = oracle(tables, series=q["series"])
    small = gs.cache.PageCache(1 << 30)
    for _ in range(2):
        got = open_region(root, REGION_ID, cache=small).read(**q)
    small.max_bytes = 0  # every later put evicts
    small.clear()
    got = open_region(root, REGION_ID, cache=small).read(**q)
    assert_tables_equal(got, want.cast(got.schema))


def test_a_cache_that_holds_nothing_gives_an_index_that_holds_nothing(region):
    """The index holds only what the page cache holds: with a 0-byte cache (caching
    disabled) it stays empty, and every read navigates."""
    root, tables = region
    none = gs.cache.PageCache(0)
    for _ in range(3):
        got = open_region(root, REGION_ID, cache=none).read(series=[(1, 9)])
    assert_tables_equal(got, oracle(tables, series=[(1, 9)]).cast(got.schema))
    r = open_region(root, REGION_ID, cache=none)
    assert r._warm_index(r.plan().need).artifacts == 0


def test_a_new_process_cache_gets_a_new_index(region):
    root, _ = region
    q = {"series": [(1, 9)]}
    open_region(root, REGION_ID).read(**q)
    r = open_region(root, REGION_ID)
    first = r._warm_index(r.plan().need)
    old = gs.cache.default_cache()
    try:
        gs.cache.set_cache_size(64 << 20)
        second = r._warm_index(r.plan().need)
        assert second is not first and second.cache is gs.cache.default_cache() and second.artifacts == 0
    finally:
        gs.cache._default = old


def test_warm_reads_from_many_threads_agree(region):
    root, tables = region
    queries = [{"series": [s]} for s in IDS] + [{"series": [s], "start": 30_000, "end": 120_000} for s in IDS]
    wants = [oracle(tables, series=q["series"], start=q.get("start"), end=q.get("end")) for q in queries]
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for k in rng.integers(0, len(queries), 40).tolist():
                got = open_region(root, REGION_ID).read(**queries[k])
                assert_tables_equal(got, wants[k].cast(got.schema))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(f"query {queries[k]}: {e!r}")

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]


def _child_reads(root: str, series: tuple) -> list:
    """(In a child process.)  A one-series query read three times (navigated, then
    twice from the warm index), each as Arrow IPC bytes, and the artifacts its warm
    index holds."""
    import pyarrow as pa

    from gtsamples.region import open_region as open_

    out = []
    for _ in range(3):
        t = open_(root, REGION_ID).read(series=[series])
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, t.schema) as w:
            w.write_table(t)
        out.append(sink.getvalue().to_pybytes())
    r = open_(root, REGION_ID)
    return out, r._warm_index(r.plan(series=[series]).need).artifacts


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_warm_reads_in_child_processes(region, method):
    """A child started each way reads what the parent reads (a forked child inherits the
    parent's warm caches; its version cache starts empty, and so its warm index)."""
    import multiprocessing as mp
    import pyarrow as pa

    if method not in mp.get_all_start_methods():  # pragma: no cover
        pytest.skip(f"no {method}")
    root, tables = region
    series = (2, 700)
    for _ in range(2):
        want = open_region(root, REGION_ID).read(series=[series])
    with mp.get_context(method).Pool(1) as pool:
        got, held = pool.apply(_child_reads, (str(root), series))
    assert held == 7  # (the child's reads went through its warm index)
    for data in got:
        assert_tables_equal(pa.ipc.open_stream(data).read_all(), want)
