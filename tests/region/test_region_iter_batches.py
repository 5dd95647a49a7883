"""``Region.iter_batches``: the rows of ``Region.read`` (and of ``read(dedup=True)``,
through a k-way merge of the sources) as bounded batches; the region plan."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gtsamples as gs
from gtsamples import cache as gcache
from gtsamples.cache import PageCache
from gtsamples.plan import Selection
from gtsamples.region import create_region, open_region
from gtsamples.region.plan import PlannedSource, RegionPlan, SstFile

from ..conftest import assert_tables_equal
from .conftest import REGION_ID, corrupt_artifact, flip_byte, make_sst_table

SETTINGS = settings(max_examples=15, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _streamed(region, **kw) -> tuple[pa.Table, list]:
    batches = list(region.iter_batches(**kw))
    assert batches and all(isinstance(b, pa.RecordBatch) for b in batches)
    return pa.Table.from_batches(batches), batches


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    """Five overlapping SSTs (every series in each, duplicates, ties, deletes),
    the 1st, 3rd and 4th covered by artifacts of small blocks."""
    root = tmp_path_factory.mktemp("stream-region")
    rng = np.random.default_rng(5)
    ids = [(t, s) for t in (1, 2) for s in (10, 20, 30, 40)]
    r = create_region(root, REGION_ID)
    for k in range(5):
        r.add_sst(make_sst_table(rng, rows=1500, ts_range=300, ids=ids, seq_base=k % 3, dup_p=0.3, delete_p=0.2),
                  row_group_size=200)
    ssts = r.ssts
    r.build(file_ids=[ssts[0].file_id, ssts[2].file_id, ssts[3].file_id], row_limit=48)
    return r, ids


@SETTINGS
@given(data=st.data())
def test_streamed_region_is_the_read(layout, data):
    r, ids = layout
    names = list(r.schema.column_names)
    dedup = data.draw(st.booleans(), "dedup")
    kw = dict(
        columns=data.draw(st.none() | st.lists(st.sampled_from(names), min_size=1, unique=True), "columns"),
        series=data.draw(st.none() | st.lists(st.sampled_from(ids + [(3, 3)]), min_size=1, max_size=3), "series"),
        tables=data.draw(st.none() | st.lists(st.sampled_from([1, 2]), min_size=1), "tables"),
        start=data.draw(st.none() | st.integers(-10, 310_000), "start"),
        end=data.draw(st.none() | st.integers(-10, 310_000), "end"),
        use_artifacts=data.draw(st.sampled_from([True, False, [r.ssts[2].file_id]]), "use_artifacts"),
    )
    max_bytes = data.draw(st.integers(1, 100_000), "max_bytes")
    want = r.read(dedup=dedup, **kw)
    got, _ = _streamed(r, dedup=dedup, max_bytes=max_bytes, **kw)
    assert_tables_equal(got, want)


@settings(max_examples=10, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n_ssts=st.integers(1, 4), covered=st.lists(st.booleans(), min_size=4,
       max_size=4), row_limit=st.sampled_from([1, 7, 64, 8192]), rows=st.integers(0, 400),
       max_bytes=st.integers(1, 30_000), dedup=st.booleans())
def test_random_layouts_stream_as_they_read(seed, n_ssts, covered, row_limit, rows, max_bytes, dedup):
    """Random regions: overlapping SSTs (shared series and timestamps, equal-sequence
    ties, deletes), empty ones, any coverage and block size."""
    rng = np.random.default_rng(seed)
    ids = [(1, 1), (1, 2), (2, 1)]
    with tempfile.TemporaryDirectory() as tmp:
        r = create_region(tmp, REGION_ID)
        for k in range(n_ssts):
            r.add_sst(make_sst_table(rng, rows=int(rng.integers(0, rows + 1)), ts_range=40, ids=ids,
                                     seq_base=int(rng.integers(0, 3)), dup_p=0.3, delete_p=0.3),
                      row_group_size=int(rng.integers(1, 100)))
        fids = [s.file_id for s, c in zip(r.ssts, covered) if c]
        if fids:
            r.build(file_ids=fids, row_limit=row_limit)
        want = r.read(dedup=dedup)
        got, _ = _streamed(r, dedup=dedup, max_bytes=max_bytes)
        assert_tables_equal(got, want)
        gcache.default_cache().clear()


@pytest.mark.parametrize("dedup", [False, True])
@pytest.mark.parametrize("max_bytes", [1, 48 * 47, 1 << 50])
def test_boundary_sizes(layout, dedup, max_bytes):
    r, _ = layout
    got, batches = _streamed(r, dedup=dedup, max_bytes=max_bytes)
    assert_tables_equal(got, r.read(dedup=dedup))
    if max_bytes == 1 and not dedup:  # one block (artifacts) or one row (SST pieces) per batch
        assert len(batches) > r.num_rows // 48


def test_dedup_at_256_kib_gives_several_batches(tmp_path):
    rng = np.random.default_rng(8)
    ids = [(1, s) for s in range(50)]
    r = create_region(tmp_path, REGION_ID)
    for k in range(4):
        r.add_sst(make_sst_table(rng, rows=12_000, ts_range=2_000, ids=ids, seq_base=k, delete_p=0.1),
                  row_group_size=2_000)
    r.build(file_ids=[r.ssts[1].file_id, r.ssts[2].file_id])
    want = r.read(dedup=True)
    got, batches = _streamed(r, dedup=True, max_bytes=256 << 10)
    assert len(batches) >= 4 and want.num_rows > 20_000
    assert_tables_equal(got, want)
    ops = got.column("__op_type").to_numpy()
    assert (ops == 1).all()  # the kept deletes were dropped
    assert all(b.num_rows * 47 <= 256 << 10 for b in batches)


def test_no_dedup_order_is_region_order(layout):
    """Without dedup, every SST's rows come whole and in catalog order."""
    r, _ = layout
    _, batches = _streamed(r, max_bytes=10_000)
    sizes = [s.rows for s in r.ssts]
    ends = np.cumsum([b.num_rows for b in batches])
    assert set(np.cumsum(sizes).tolist()) <= set(ends.tolist())


def test_artifact_failing_mid_stream_falls_back_to_its_sst(tmp_path):
    rng = np.random.default_rng(3)
    r = create_region(tmp_path, REGION_ID)
    tables = [make_sst_table(rng, rows=2000, ts_range=500) for _ in range(2)]
    for t in tables:
        r.add_sst(t)
    r.build(row_limit=32)
    entry = r.coverage()[r.ssts[0].file_id]
    art = gs.open_artifact(tmp_path, entry=entry, cache=PageCache())
    last = [sl for sl in art.navigate(Selection()) if sl.part == 0][-1]
    ref = last.page.columns["ref"][-1]  # a chunk of part 0's last block
    flip_byte(os.path.join(tmp_path, entry["region_id"].__str__(), "samples", entry["file_id"], entry["generation"],
                           "part-0.samples"), int(ref["offset"]) + 1)
    gcache.default_cache().clear()
    r = open_region(tmp_path, REGION_ID)
    with pytest.warns(gs.ArtifactSkippedWarning) as want_w:
        want = r.read()
    with pytest.warns(gs.ArtifactSkippedWarning) as got_w:
        got, batches = _streamed(r, max_bytes=1)
    assert_tables_equal(got, want)
    msg = [str(w.message) for w in got_w if issubclass(w.category, gs.ArtifactSkippedWarning)]
    assert msg == [str(w.message) for w in want_w if issubclass(w.category, gs.ArtifactSkippedWarning)]
    assert "CorruptArtifactError" in msg[0] and "XXH64" in msg[0]
    with pytest.raises(gs.CorruptArtifactError) as want_e:
        r.read(strict=True)
    seen = []
    with pytest.raises(gs.CorruptArtifactError) as got_e:
        for b in r.iter_batches(max_bytes=1, strict=True):
            seen.append(b)
    assert str(got_e.value) == str(want_e.value)
    assert len(seen) > 10  # the earlier batches came, and are the SST's first rows
    prefix = pa.Table.from_batches(seen)
    assert_tables_equal(prefix, want.slice(0, prefix.num_rows))
    with pytest.warns(gs.ArtifactSkippedWarning):  # dedup: the merge reads the fallback too
        got = pa.Table.from_batches(list(r.iter_batches(dedup=True, max_bytes=2000)))
    with pytest.warns(gs.ArtifactSkippedWarning):
        assert_tables_equal(got, r.read(dedup=True))


@pytest.mark.parametrize("how", ["chunk", "manifest"])
def test_unusable_artifact_is_skipped_as_read_skips_it(tmp_path, how):
    rng = np.random.default_rng(4)
    r = create_region(tmp_path, REGION_ID)
    r.add_sst(make_sst_table(rng, rows=500))
    r.build()
    corrupt_artifact(str(tmp_path), r.coverage()[r.ssts[0].file_id], how)
    gcache.default_cache().clear()
    r = open_region(tmp_path, REGION_ID)
    with pytest.warns(gs.ArtifactSkippedWarning):
        want = r.read()
    with pytest.warns(gs.ArtifactSkippedWarning):
        got, _ = _streamed(r, max_bytes=1000)
    assert_tables_equal(got, want)
    with pytest.raises(gs.SamplesError) as want_e:
        r.read(strict=True)
    with pytest.raises(gs.SamplesError) as got_e:
        list(r.iter_batches(strict=True))
    assert (type(got_e.value), str(got_e.value)) == (type(want_e.value), str(want_e.value))


def test_empty_results(tmp_path, layout):
    r = create_region(tmp_path, REGION_ID)
    (b,) = list(r.iter_batches())
    assert b.num_rows == 0 and b.schema == r.read().schema
    r, _ = layout
    for dedup in (False, True):
        (b,) = list(r.iter_batches(columns=["v"], start=10**9, dedup=dedup))
        assert b.num_rows == 0 and b.schema == r.read(columns=["v"], start=10**9, dedup=dedup).schema


def test_argument_errors(layout):
    r, _ = layout
    for bad in (0, -5, 2.0, None, True):
        with pytest.raises(ValueError, match="max_bytes must be a positive integer"):
            r.iter_batches(max_bytes=bad)
    with pytest.raises(ValueError, match="device must be one of"):
        r.iter_batches(device="npu")
    with pytest.raises(ValueError, match="unknown column"):
        r.iter_batches(columns=["nope"])


def test_time_bounds_as_strings_and_datetimes(layout):
    r, _ = layout
    want = r.read(start=50_000, end=120_000, dedup=True)
    for s, e in (("1970-01-01T00:00:50Z", "1970-01-01T00:02:00Z"),
                 (np.datetime64(50, "s"), np.datetime64(120, "s"))):
        got, _ = _streamed(r, start=s, end=e, dedup=True, max_bytes=3000)
        assert_tables_equal(got, want)


def test_stats_after_the_stream(layout):
    r, _ = layout
    list(r.iter_batches(max_bytes=5000))
    assert r.last_stats.chunks_decoded > 0 and r.last_stats.bytes_read > 0


# --- the plan -------------------------------------------------------------------------------------


def test_plan_is_a_typed_object(layout):
    r, _ = layout
    p = r.plan(columns=["v"], start=1000, dedup=True)
    assert isinstance(p, RegionPlan) and p.columns == ("v",)
    assert p.need == ("__table_id", "__tsid", "ts", "__sequence", "__op_type", "v")
    assert all(isinstance(s, PlannedSource) and isinstance(s.sst, SstFile) for s in p.sources)
    assert [s.ordinal for s in p.sources] == list(range(5))
    assert p.covered == tuple(r.ssts[k].file_id for k in (0, 2, 3))
    assert p.uncovered == tuple(r.ssts[k].file_id for k in (1, 4))
    assert [s.artifact.generation for s in p.sources if s.covered] == [
        r.coverage()[r.ssts[k].file_id]["generation"] for k in (0, 2, 3)]
    assert p["covered"] == list(p.covered) and p["selection"] == p.selection == Selection(start=1000)
    with pytest.raises(KeyError):
        p["sources?"]
    with pytest.raises(AttributeError):
        p.dedup = False  # frozen


def test_execute_runs_a_plan(layout):
    r, _ = layout
    p = r.plan(series=[(1, 10)], end=200_000, dedup=True, use_artifacts=[r.ssts[3].file_id])
    got, stats = r.execute(p)
    assert_tables_equal(got, r.read(series=[(1, 10)], end=200_000, dedup=True))
    assert stats.chunks_decoded > 0  # the one allowed artifact served


def test_usable_artifact(layout):
    r, _ = layout
    p = r.plan()
    src = p.sources[0]
    art = r.usable_artifact(src, p.need)
    assert art.manifest.source_file_id == src.sst.file_id
    with pytest.raises(ValueError, match="not covered"):
        r.usable_artifact(p.sources[1], p.need)
