"""Region reads: covered/uncovered plans, fallback, dedup, cache, projection."""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pytest

import gtsamples as gs
from gtsamples import cache as gcache
from gtsamples.region import create_region, open_region
from gtsamples.region import execute as region_execute

from ..conftest import assert_tables_equal
from .conftest import REGION_ID, corrupt_artifact, dedup_oracle, make_sst_table, oracle, rows_of


@pytest.fixture
def region3(tmp_path):
    """A region of three SSTs (the first two covered by artifacts) and its source tables."""
    rng = np.random.default_rng(11)
    r = create_region(tmp_path, REGION_ID)
    tables = [make_sst_table(rng, rows=300, seq_base=0, fields=("v", "w", "x")) for _ in range(3)]
    for t in tables:
        r.add_sst(t, row_group_size=64)
    r.build(file_ids=[s.file_id for s in r.ssts[:2]], workers=2)
    return r, tables, tmp_path


def _series_of(tables):
    return sorted({(int(a), int(b)) for t in tables
                   for a, b in zip(t["__table_id"].to_numpy(), t["__tsid"].to_numpy())})


QUERIES = [
    {},
    {"columns": ["v"]},
    {"columns": ["ts", "x", "__op_type"], "start": 10_000, "end": 30_000},
    {"tables": [2]},
    {"start": 0, "end": 1},
    {"end": -5},
]


@pytest.mark.parametrize("q", QUERIES)
def test_covered_equals_uncovered_equals_oracle(region3, q):
    r, tables, _ = region3
    with warnings.catch_warnings():
        warnings.simplefilter("error", gs.ArtifactSkippedWarning)
        got = r.read(**q)
    none = r.read(**q, use_artifacts=False)
    want = oracle(tables, q.get("columns"), None, q.get("tables"), q.get("start"), q.get("end"))
    assert_tables_equal(got, want.cast(got.schema))
    assert_tables_equal(none, want.cast(got.schema))


def test_series_queries(region3):
    r, tables, _ = region3
    ids = _series_of(tables)
    for pick in (ids[:1], ids[3:6], ids[::2], [(9, 9)]):
        got = r.read(series=pick, columns=["ts", "v", "__sequence"])
        want = oracle(tables, ["ts", "v", "__sequence"], pick)
        assert_tables_equal(got, want.cast(got.schema))
        # datetime bounds
        got = r.read(series=pick, start=np.datetime64("1970-01-01T00:00:10"), end=np.datetime64("1970-01-01T00:00:20"))
        want = oracle(tables, None, pick, None, 10_000, 20_000)
        assert_tables_equal(got, want.cast(got.schema))


def test_plan_splits_and_prunes(region3):
    r, tables, _ = region3
    p = r.plan()
    assert p["covered"] == [s.file_id for s in r.ssts[:2]] and p["uncovered"] == [r.ssts[2].file_id]
    p = r.plan(end=-1)
    assert p["pruned"] == [s.file_id for s in r.ssts] and not p["covered"] and not p["uncovered"]
    assert r.plan(use_artifacts=[r.ssts[1].file_id])["covered"] == [r.ssts[1].file_id]
    assert r.plan(use_artifacts=False)["covered"] == []


@pytest.mark.parametrize("how,err", [("chunk", gs.CorruptArtifactError), ("truncate", gs.CorruptArtifactError),
                                     ("manifest", gs.UnsupportedError), ("missing", gs.CorruptArtifactError)])
def test_unusable_artifact_is_skipped_with_a_warning(region3, how, err):
    r, tables, root = region3
    bad = r.coverage()[r.ssts[0].file_id]
    corrupt_artifact(str(root), bad, how)
    gcache.default_cache().clear()  # the build's verification cached the (then intact) pages
    want = oracle(tables)
    r2 = open_region(root, REGION_ID)
    with pytest.warns(gs.ArtifactSkippedWarning) as rec:
        got = r2.read()
    msgs = [str(w.message) for w in rec if issubclass(w.category, gs.ArtifactSkippedWarning)]
    assert len(msgs) == 1 and bad["generation"] in msgs[0] and r.ssts[0].file_id in msgs[0]
    assert err.__name__ in msgs[0]
    assert_tables_equal(got, want.cast(got.schema))
    with pytest.raises(err):
        r2.read(strict=True)


def test_catalog_mismatch_is_skipped(region3):
    r, tables, root = region3
    fid = r.ssts[1].file_id
    e = dict(r.coverage()[fid])
    objs = [dict(o) for o in e["objects"]]
    objs[-1]["file_size"] += 1
    e["objects"] = objs
    e["file_size"] += 1
    r.publish([e])
    with pytest.warns(gs.ArtifactSkippedWarning, match="CatalogMismatchError"):
        got = r.read()
    assert_tables_equal(got, oracle(tables).cast(got.schema))
    with pytest.raises(gs.CatalogMismatchError):
        r.read(strict=True)


def test_artifact_lacking_a_field_serves_only_what_it_carries(tmp_path):
    rng = np.random.default_rng(12)
    r = create_region(tmp_path, REGION_ID)
    t = make_sst_table(rng, rows=200)
    s = r.add_sst(t)
    e = gs.write_artifact(t.drop(["w"]), tmp_path, region_id=REGION_ID, source_file_id=s.file_id,
                          timestamp_column_id=r.schema.ts_column_id, field_column_ids=[dict(r.schema.fields)["v"]])
    r.publish([e])
    with warnings.catch_warnings():
        warnings.simplefilter("error", gs.ArtifactSkippedWarning)
        got, st = r.read_with_stats(columns=["ts", "v"])
    assert st.chunk_bytes > 0  # served by the artifact
    assert_tables_equal(got, t.select(["ts", "v"]).cast(got.schema))
    with pytest.warns(gs.ArtifactSkippedWarning, match="does not carry field.*'w'"):
        got = r.read(columns=["w"])
    assert_tables_equal(got, t.select(["w"]).cast(got.schema))
    with pytest.raises(gs.SamplesError, match="does not carry"):
        r.read(strict=True)


def test_dedup_matches_brute_force(region3):
    r, tables, _ = region3
    want = dedup_oracle(pa.concat_tables(tables))
    for use in (True, False, [r.ssts[1].file_id]):
        got = r.read(dedup=True, use_artifacts=use)
        assert rows_of(got) == want
    # projection and filters compose with dedup
    got = r.read(dedup=True, columns=["v"], tables=[1], start=0, end=20_000)
    sub = oracle(tables, None, None, [1], 0, 20_000)
    assert [x[5:6] for x in dedup_oracle(sub)] == rows_of(got)
    assert got.schema.names == ["v"]
    # default reads keep everything: deletes, duplicates and ties
    assert r.read().num_rows == sum(t.num_rows for t in tables)


def test_dedup_ties_prefer_region_order(tmp_path):
    r = create_region(tmp_path, REGION_ID)
    base = {"__table_id": pa.array([1], pa.uint32()), "__tsid": pa.array([7], pa.uint64()),
            "ts": pa.array([5], pa.timestamp("ms")), "__sequence": pa.array([3], pa.uint64())}
    a = pa.table({**base, "__op_type": pa.array([1], pa.uint8()), "v": [1.0]})
    b = pa.table({**base, "__op_type": pa.array([0], pa.uint8()), "v": [2.0]})
    r.add_sst(a)
    r.add_sst(b)
    assert r.read(dedup=True)["v"].to_pylist() == [1.0]  # equal sequence: the first in region order wins
    r2 = create_region(tmp_path / "2", REGION_ID)
    r2.add_sst(b)
    r2.add_sst(a)
    assert r2.read(dedup=True).num_rows == 0  # the winner is a delete: dropped
    r2.build()
    assert r2.read(dedup=True).num_rows == 0


def test_second_query_reads_no_metadata(region3):
    r, tables, root = region3
    q = {"series": _series_of(tables)[:2], "columns": ["ts", "v"]}
    _, st1 = r.read_with_stats(**q)
    assert st1.metadata_bytes > 0 and st1.chunk_bytes > 0
    _, st2 = r.read_with_stats(**q)
    assert st2.metadata_bytes == 0 and st2.cache_hits > 0 and st2.cache_misses == 0
    assert st2.chunk_bytes == st1.chunk_bytes
    # another Region object over the same store shares the cache
    _, st3 = open_region(root, REGION_ID).read_with_stats(**q)
    assert st3.metadata_bytes == 0 and st3.cache_hits > 0


def test_read_argument_errors(region3):
    r, _, _ = region3
    with pytest.raises(ValueError, match="unknown column"):
        r.read(columns=["nope"])
    with pytest.raises(ValueError, match="device"):
        r.read(device="tpu")
    with pytest.raises(ValueError):
        r.read(columns=[])


@pytest.mark.parametrize("bad", [b"ts", bytearray(b"v"), 3, np.array("v")])
def test_columns_that_are_no_names_are_type_errors(region3, bad):
    """Before: bytes were read as their byte values ('unknown column 116'), an int raised
    'int' object is not iterable, a 0-d array numpy's 'iteration over a 0-d array'."""
    r, _, _ = region3
    for call in (r.read, r.plan, r.iter_batches, r.to_reader):
        with pytest.raises(TypeError, match="columns must be a column name or an iterable of names"):
            call(columns=bad)


def test_to_reader_reads_a_generator_of_columns_once(region3):
    """Before: the generator was read by the batches, then found empty for the schema
    ('columns must name at least one column')."""
    r, _, _ = region3
    got = r.to_reader(columns=(c for c in ("ts", "v"))).read_all()
    assert_tables_equal(got, r.read(columns=["ts", "v"]))


@pytest.mark.gpu
def test_gpu_read_equals_cpu(region3):
    from gtsamples.backends import get_backend

    try:
        if get_backend("auto").name != "gpu":
            pytest.skip("no usable GPU")
    except gs.SamplesError:
        pytest.skip("no usable GPU")
    pytest.importorskip("cudf")
    r, tables, _ = region3
    for q in ({}, {"columns": ["v"], "tables": [1]}, {"dedup": True}):
        got = r.read(device="gpu", **q).to_arrow()
        want = r.read(**q)
        assert_tables_equal(got.cast(want.schema), want)


def test_sequence_order_is_checked_within_an_artifact_only(tmp_path, monkeypatch):
    """A newer SST rewriting a timestamp with a higher sequence is valid: in a group's
    merged batch, artifact A's block ordinal k followed by artifact B's ordinal k + 1 of
    the same series is not a continuation (the order rule holds per artifact)."""
    def sst(ts, seq):
        n = len(ts)
        return pa.table({"__table_id": pa.array([1] * n, pa.uint32()), "__tsid": pa.array([7] * n, pa.uint64()),
                         "ts": pa.array(ts, pa.timestamp("ms")), "__sequence": pa.array([seq] * n, pa.uint64()),
                         "__op_type": pa.array([1] * n, pa.uint8()), "v": np.arange(n, dtype=np.float64)})
    a = sst(list(range(50)) + list(range(100, 150)), 1)  # blocks [0, 49], [100, 149]
    b = sst([k // 5 for k in range(50)] + list(range(49, 99)), 2)  # blocks [0, 9], [49, 98]: 49 rewritten
    r = create_region(tmp_path, REGION_ID)
    r.add_sst(a)
    r.add_sst(b)
    r.build(row_limit=50)

    def no_fallback(*args, **kw):
        raise AssertionError("the merged group failed to decode")
    monkeypatch.setattr(region_execute, "_decode_one_by_one", no_fallback)
    got, st = r.read_with_stats(start=20, end=50)  # A's ordinal 0 then B's ordinal 1
    assert st.blocks_decoded == 2
    assert_tables_equal(got, oracle([a, b], start=20, end=50).cast(got.schema))


def test_vector_pruning_plans_as_each_sst_alone(tmp_path, monkeypatch):
    """Many SSTs are pruned in one numba pass over the version's bounds table: the same
    plan as each record tested alone (sst_selects), records without stats (kept) and
    with null stats (empty: pruned) included."""
    import json as _json

    from gtsamples.region import Region

    rng = np.random.default_rng(40)
    r = create_region(tmp_path, REGION_ID)
    r.replace_ssts(add=[make_sst_table(rng, rows=12, series=2, tables=(1 + k % 3,), ts_range=5 + 3 * k)
                        for k in range(40)])
    doc = _json.loads(_json.dumps(r._doc))
    del doc["ssts"][3]["stats"]
    doc["ssts"][5]["stats"] = None
    doc["ssts"][7]["stats"]["first"] = [-1, 0]  # does not fit the bounds table: each SST alone
    ids = [(int(t), int(s)) for t, s in zip(r.read()["__table_id"].to_pylist(), r.read()["__tsid"].to_pylist())]
    queries = [dict(), dict(series=[ids[0]]), dict(series=[ids[-1], ids[7]]), dict(tables=[2]),
               dict(start=20_000, end=31_000), dict(tables=[1], start=0, end=4_000), dict(series=[(9, 9)]),
               dict(start=5, end=5)]
    for d in (r._doc, doc, {**doc, "ssts": [s for s in doc["ssts"] if s is not doc["ssts"][7]]}):
        reg = Region(tmp_path, REGION_ID, _version=r.version, _doc=d)
        for q in queries:
            monkeypatch.setattr(Region, "VECTOR_PRUNE_SSTS", 10**9)
            monkeypatch.setattr(Region, "VECTOR_PRUNE_SSTS_WARM", 10**9)
            want = reg.plan(**q)
            monkeypatch.setattr(Region, "VECTOR_PRUNE_SSTS", 0)
            monkeypatch.setattr(Region, "VECTOR_PRUNE_SSTS_WARM", 0)
            got = reg.plan(**q)
            assert [s.ordinal for s in got.sources] == [s.ordinal for s in want.sources], q
            assert got.pruned == want.pruned, q
            if d is not r._doc and not q:
                assert 3 in [s.ordinal for s in got.sources] and 5 not in [s.ordinal for s in got.sources]
        bounds = reg._state.derived("sst_bounds", lambda: "unset")
        assert (bounds is None) == (d is doc)  # built, except where a value does not fit


def test_small_region_plans_without_numba_until_a_read_loaded_it(tmp_path):
    """A plan-only process never pays numba's first call for a small region (SSTs
    pruned in Python); once a read has run a selection kernel, plans prune with the
    bounds table (in a fresh process, as a user starts one)."""
    import subprocess
    import sys
    import textwrap

    rng = np.random.default_rng(41)
    r = create_region(tmp_path, REGION_ID)
    r.replace_ssts(add=[make_sst_table(rng, rows=12, series=2, tables=(1 + k % 3,), ts_range=5 + 3 * k)
                        for k in range(6)])
    r.build()
    code = textwrap.dedent(f"""
        from gtsamples.plan.selection import Selection
        from gtsamples.region import open_region
        reg = open_region({str(tmp_path)!r}, {REGION_ID})
        before = reg.plan(tables=[2])
        assert not Selection.kernels_loaded()
        assert "sst_bounds" not in reg._state.memo, "a plan-only process pruned with numba"
        reg.read(tables=[2])
        assert Selection.kernels_loaded()
        after = reg.plan(tables=[2])
        assert isinstance(reg._state.memo.get("sst_bounds"), tuple)
        assert [s.ordinal for s in after.sources] == [s.ordinal for s in before.sources]
        assert after.pruned == before.pruned and len(after.pruned) > 0
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


@pytest.mark.parametrize("workers,cls,match", [
    (0, ValueError, r"max_workers must be a positive integer or None \(threads\), not 0"),  # before: read on one thread
    (-2, ValueError, "not -2"),
    (2.0, TypeError, "not float 2.0"),
    (np.timedelta64(2, "ns"), TypeError, "not timedelta64 "),  # before: two threads
])
def test_max_workers_must_be_a_positive_integer(region3, workers, cls, match):
    r, _tables, _root = region3
    with pytest.raises(cls, match=match):
        r.read(max_workers=workers)
    with pytest.raises(cls, match=match):
        r.execute(r.plan(), max_workers=workers)


def test_max_workers_one_and_many_read_alike(region3):
    r, tables, _root = region3
    want = oracle(tables)
    for w in (1, np.int32(3), None):
        assert_tables_equal(r.read(max_workers=w), want)


def test_use_artifacts_refuses_one_string(region3):
    """Before: one file id was read as its characters, so no artifact was allowed and every
    SST was scanned (right rows, silently slow)."""
    r, _tables, _root = region3
    with pytest.raises(TypeError, match="use_artifacts must be an iterable of file ids, not one str"):
        r.plan(use_artifacts=r.ssts[1].file_id)
    with pytest.raises(TypeError, match="use_artifacts must be an iterable of file ids"):
        r.read(use_artifacts=r.ssts[1].file_id)
    assert r.plan(use_artifacts=(s.file_id for s in r.ssts[1:2]))["covered"] == [r.ssts[1].file_id]
