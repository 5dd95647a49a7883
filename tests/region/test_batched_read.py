"""Region reads build, fetch and decode the covered artifacts as one batch per group.

The batched path must return exactly what reading each artifact on its own
returns (and what scanning the SSTs returns), split its table correctly around
SSTs read another way, and when one artifact's chunks fail mid-read, fall back
to that artifact's SST alone, with the warning naming it, while the others are
still served by their artifacts.
"""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pytest

import gtsamples as gs
from gtsamples.plan import leaves as P
from gtsamples.region import create_region, open_region
from gtsamples.region import execute as region_execute
from gtsamples.region import sst as _sst
from gtsamples.storage import ReadStats

from ..conftest import assert_tables_equal
from .conftest import REGION_ID, corrupt_artifact, make_sst_table, oracle


@pytest.fixture
def region6(tmp_path):
    """Six SSTs, all but the fourth covered by artifacts (small blocks: many per leaf)."""
    rng = np.random.default_rng(23)
    r = create_region(tmp_path, REGION_ID)
    ids = [(1, 5), (1, 9), (2, 5), (2, 700)]
    tables = [make_sst_table(rng, rows=int(rng.integers(50, 400)), ids=ids, ts_range=60) for _ in range(6)]
    for t in tables:
        r.add_sst(t, row_group_size=64)
    r.build(file_ids=[s.file_id for k, s in enumerate(r.ssts) if k != 3], verify=None, row_limit=16)
    gs.cache.default_cache().clear()
    return r, tables, tmp_path


def _per_artifact(r, q):
    """The covered SSTs' rows read artifact by artifact (public API), the others scanned."""
    pieces = []
    cov = r.coverage()
    for s, t in zip(r.ssts, r._tables):
        e = cov[s.file_id]
        if e is None:
            pieces.append(oracle([t], q.get("columns"), q.get("series"), q.get("tables"), q.get("start"), q.get("end")))
        else:
            art = gs.open_artifact(r.root, entry=e)
            pieces.append(art.read(columns=q.get("columns"), series=q.get("series"), tables=q.get("tables"),
                                   start=q.get("start"), end=q.get("end")))
    want = pa.concat_tables([p.cast(pieces[0].schema) for p in pieces])
    return want


QUERIES = [
    {},
    {"series": [(1, 9)]},
    {"series": [(1, 5), (2, 700)], "columns": ["ts", "v", "__sequence"]},
    {"tables": [2], "start": 7_000, "end": 41_000},  # trims rows inside blocks
    {"start": 20_500, "end": 20_501},
    {"columns": ["w"], "end": 30_000},
]


@pytest.mark.parametrize("q", QUERIES)
@pytest.mark.parametrize("budget", [None, 1])  # one group, or one group per artifact
def test_batched_read_equals_per_artifact_reads(region6, q, budget, monkeypatch):
    r, tables, _ = region6
    r._tables = tables
    if budget is not None:
        monkeypatch.setattr(region_execute, "GROUP_BUDGET_BYTES", budget)
    calls = []
    orig_group = region_execute._decode_group
    monkeypatch.setattr(region_execute, "_decode_group", lambda region, group, *a: calls.append(len(group))
                        or orig_group(region, group, *a))
    with warnings.catch_warnings():
        warnings.simplefilter("error", gs.ArtifactSkippedWarning)
        got, st = r.read_with_stats(**q)
    # the fourth SST is scanned: the covered ones come as runs around it
    assert sum(calls) == 5 and (calls == [5] if budget is None else calls == [1] * 5)
    want = _per_artifact(r, q)
    assert_tables_equal(got, want.cast(got.schema))
    ref = oracle(tables, q.get("columns"), q.get("series"), q.get("tables"), q.get("start"), q.get("end"))
    assert_tables_equal(got, ref.cast(got.schema))
    assert_tables_equal(r.read(**q, use_artifacts=False), ref.cast(got.schema))
    if got.num_rows:
        assert st.chunk_bytes > 0 and st.blocks_decoded > 0 and st.chunks_decoded > 0


def test_artifact_failing_mid_read_falls_back_alone(region6, monkeypatch):
    """A corrupt chunk in the third artifact fails the merged decode: that artifact is
    decoded alone (its error names it) and its SST scanned; the other four artifacts
    are still read from their artifacts."""
    r, tables, root = region6
    bad_sst = r.ssts[2]
    bad = r.coverage()[bad_sst.file_id]
    corrupt_artifact(str(root), bad, "chunk")  # first payload byte: a checksum mismatch when decoded
    gs.cache.default_cache().clear()
    r2 = open_region(root, REGION_ID)
    scanned = []
    orig_scan = _sst.scan_sst
    monkeypatch.setattr(_sst, "scan_sst", lambda rec, *a, **k: scanned.append(rec["file_id"]) or orig_scan(rec, *a, **k))
    results = []
    orig_group = region_execute._decode_group
    monkeypatch.setattr(region_execute, "_decode_group", lambda region, group, *a: results.append(orig_group(region, group, *a))
                        or results[-1])
    with pytest.warns(gs.ArtifactSkippedWarning) as rec:
        got, st = r2.read_with_stats()
    assert len(results) == 1 and results[0] is None  # the merged batch failed: one by one
    msgs = [str(w.message) for w in rec if issubclass(w.category, gs.ArtifactSkippedWarning)]
    assert len(msgs) == 1 and bad["generation"] in msgs[0] and bad_sst.file_id in msgs[0]
    # the error of the artifact's own decode: its location and the broken rule
    assert "CorruptArtifactError" in msgs[0] and "CHECKSUM_MISMATCH" in msgs[0], msgs[0]
    assert f"{bad['generation']}/part-0.samples leaf 0 block 0" in msgs[0]  # not a merged batch's name
    assert sorted(scanned) == sorted([bad_sst.file_id, r2.ssts[3].file_id])  # the bad one and the uncovered one
    # each covered artifact's chunks counted once (the failed merged fetch only as I/O)
    own = 0
    for s in r2.ssts:
        e = r2.coverage()[s.file_id]
        if e is not None:
            one = ReadStats()
            gs.open_artifact(root, entry=e, cache=gs.cache.PageCache()).fetch_batch(stats=one)
            own += one.chunk_bytes
    assert st.chunk_bytes == own and st.bytes_read > st.chunk_bytes + st.metadata_bytes
    assert_tables_equal(got, oracle(tables).cast(got.schema))
    with pytest.raises(gs.CorruptArtifactError, match=bad["generation"]):
        r2.read(strict=True)


def test_groups_split_on_different_fields(tmp_path):
    """Artifacts with different manifest fields go to different batches (slots differ)."""
    rng = np.random.default_rng(5)
    r = create_region(tmp_path, REGION_ID)
    tables = [make_sst_table(rng, rows=120) for _ in range(3)]
    for t in tables:
        r.add_sst(t)
    r.build(file_ids=[r.ssts[0].file_id, r.ssts[2].file_id], verify=None)
    s = r.ssts[1]
    e = gs.write_artifact(tables[1].drop(["w"]), tmp_path, region_id=REGION_ID, source_file_id=s.file_id,
                          timestamp_column_id=r.schema.ts_column_id, field_column_ids=[dict(r.schema.fields)["v"]])
    r.publish([e])
    with warnings.catch_warnings():
        warnings.simplefilter("error", gs.ArtifactSkippedWarning)
        got, st = r.read_with_stats(columns=["ts", "v", "__op_type"], end=35_000)
    assert st.chunk_bytes > 0
    want = oracle(tables, ["ts", "v", "__op_type"], end=35_000)
    assert_tables_equal(got, want.cast(got.schema))


def test_build_batch_over_several_artifacts(region6):
    """One build over several artifacts' leaves (parts renumbered) equals the
    artifacts' own batches end to end."""
    r, tables, _ = region6
    arts = [r._artifact(e, ReadStats()) for e in r._doc["artifacts"]]
    m0 = arts[0].manifest
    sel = P.Selection.build(None, [1], 3_000, 50_000, m0.timestamp.unit)
    proj = P.Projection.build(m0, ["ts", "w", "__op_type"])
    leaves, names, own = [], [], []
    for art in arts:
        for sl in art.navigate(sel):
            if not names or names[-1] != f"{art.location}/part-{sl.part}.samples":
                names.append(f"{art.location}/part-{sl.part}.samples")
            leaves.append(P.SelectedLeaf(len(names) - 1, sl.leaf, sl.page, sl.mask))
        own.append(P.build_batch(art.navigate(sel), art.manifest, sel, proj, source=art.location))
    merged = P.build_batch(leaves, m0, sel, proj, source="region", part_names=names)
    assert merged.part_names == names and merged.n_rows == sum(b.n_rows for b in own)
    row = blk = part = 0
    chunks, blocks = [], []
    for b in own:
        c = b.chunks.copy()
        k = b.blocks.copy()
        c["block"] += blk
        c["out_row"] += row
        k["out_row"] += row
        c["part"] += part
        k["part"] += part
        chunks.append(c)
        blocks.append(k)
        row += b.n_rows
        blk += b.blocks.shape[0]
        part += len(set(b.chunks["part"].tolist()) | set(b.blocks["part"].tolist()))
    assert merged.chunks.tobytes() == np.concatenate(chunks).tobytes()
    assert merged.blocks.tobytes() == np.concatenate(blocks).tobytes()


def test_fill_batch_kernel_as_python(region6, monkeypatch):
    """plan._fill_batch run as Python gives the compiled kernel's tables."""
    r, _, _ = region6
    for e in r._doc["artifacts"][:3]:
        art = r._artifact(e, ReadStats())
        m = art.manifest
        for q in ({}, {"series": [(2, 5)], "start": 4_000}, {"columns": ["v"]}):
            sel = P.Selection.build(q.get("series"), None, q.get("start"), None, m.timestamp.unit)
            proj = P.Projection.build(m, q.get("columns"))
            leaves = art.navigate(sel)
            jit = P.build_batch(leaves, m, sel, proj, all_fields=not q)
            with monkeypatch.context() as mp:
                mp.setattr(P, "_fill_batch", getattr(P._fill_batch, "py_func", P._fill_batch))
                py = P.build_batch(leaves, m, sel, proj, all_fields=not q)
            assert jit.chunks.tobytes() == py.chunks.tobytes() and jit.blocks.tobytes() == py.blocks.tobytes()
            assert jit.n_rows == py.n_rows


def test_open_parsed_entry_matches_open_artifact(region6):
    r, _, root = region6
    e = r._doc["artifacts"][0]
    a = gs.open_artifact(root, entry=e)
    b = gs.artifact.open_parsed_entry(r.store, gs.format.manifest.parse_catalog_entry(e))
    assert a.manifest == b.manifest and a.part_keys == b.part_keys and a.part_sizes == b.part_sizes
    assert_tables_equal(a.read(), b.read())
    with pytest.raises(TypeError):
        gs.artifact.open_parsed_entry(r.store, e)


def test_a_region_read_in_another_output_type(region6):
    """The region executors take any backend: its frames, its conform, slice and concat
    (tests/test_backends.py's pandas one), the same rows as the pyarrow read."""
    import pandas as pd

    from tests.test_backends import PANDAS

    r, _tables, _ = region6
    for q in QUERIES:
        got = r.read(device=PANDAS, **q)
        assert isinstance(got, pd.DataFrame)
        pd.testing.assert_frame_equal(got, r.read(**q).to_pandas())
    got = r.read(device=PANDAS, dedup=True, columns=["ts", "v"])
    pd.testing.assert_frame_equal(got.reset_index(drop=True), r.read(dedup=True, columns=["ts", "v"]).to_pandas())


def test_build_batch_leaf_parts_and_random_masks(region6):
    """``build_batch`` of many leaves with any selected blocks (runs and gaps, all, none)
    takes each selected block's prefix and column descriptors from its own leaf, and
    ``leaf_parts`` numbers the parts as renumbered leaves would."""
    r, _, _ = region6
    rng = np.random.default_rng(29)
    arts = [r._artifact(e, ReadStats()) for e in r._doc["artifacts"]]
    m0 = arts[0].manifest
    sel = P.Selection.build()
    proj = P.Projection.build(m0, None)
    pages = [sl for art in arts for sl in art.navigate(sel)]
    for trial in range(30):
        leaves = [P.SelectedLeaf(sl.part, sl.leaf, sl.page, rng.random(sl.mask.shape[0]) < (trial % 5) / 4)
                  for sl in pages]
        parts = rng.integers(0, 9, len(leaves)).tolist()
        got = P.build_batch(leaves, m0, sel, proj, all_fields=True, leaf_parts=parts)
        renumbered = [P.SelectedLeaf(p, sl.leaf, sl.page, sl.mask) for p, sl in zip(parts, leaves)]
        same = P.build_batch(renumbered, m0, sel, proj, all_fields=True)
        assert got.chunks.tobytes() == same.chunks.tobytes() and got.blocks.tobytes() == same.blocks.tobytes()
        want = [(p, sl, int(b)) for p, sl in zip(parts, leaves) for b in np.flatnonzero(sl.mask)]
        assert got.blocks.shape[0] == len(want)
        assert got.blocks["part"].tolist() == [p for p, _, _ in want]
        assert got.blocks["leaf"].tolist() == [sl.leaf for _, sl, _ in want]
        assert got.blocks["index"].tolist() == [b for _, _, b in want]
        for k, (_p, sl, b) in enumerate(want):
            blk = sl.page.blocks[b]
            assert (int(got.blocks["tsid"][k]), int(got.blocks["rows"][k])) == (int(blk["tsid"]), int(blk["row_count"]))
            descs = sl.page.columns[sl.page.col_start[b]: sl.page.col_start[b] + blk["column_count"]]
            mine = got.chunks[got.chunks["block"] == k]
            assert mine["file_offset"].tolist() == descs["ref"]["offset"].tolist()
            assert mine["column_id"].tolist() == descs["column_id"].tolist()


def test_build_batch_of_leaves_whose_prefixes_are_strided(region6):
    """A leaf whose prefix table is not one contiguous BLOCK_PREFIX array (made
    otherwise than by loading) is read from a contiguous copy: the same batch."""
    from gtsamples.format.pages import LeafPage

    r, _, _ = region6
    art = r._artifact(r._doc["artifacts"][0], ReadStats())
    m = art.manifest
    sel = P.Selection.build(None, [1], 3_000, None, m.timestamp.unit)
    proj = P.Projection.build(m, None)
    leaves = art.navigate(sel)
    strided = [P.SelectedLeaf(sl.part, sl.leaf, LeafPage(np.repeat(sl.page.blocks, 2)[::2], sl.page.columns,
                                                        sl.page.col_start), sl.mask) for sl in leaves]
    assert all(sl.page.prefix_address is None for sl in strided)
    want = P.build_batch(leaves, m, sel, proj)
    got = P.build_batch(strided, m, sel, proj)
    assert got.chunks.tobytes() == want.chunks.tobytes() and got.blocks.tobytes() == want.blocks.tobytes()


def test_build_batch_of_leaves_whose_descriptors_are_strided(region6):
    """A leaf whose column descriptor table is strided is gathered from a contiguous
    copy of it, made once per table: the same batch."""
    from gtsamples.format.pages import LeafPage

    r, _, _ = region6
    art = r._artifact(r._doc["artifacts"][0], ReadStats())
    m = art.manifest
    sel = P.Selection.build()
    proj = P.Projection.build(m, None)
    leaves = art.navigate(sel)
    strided = [P.SelectedLeaf(sl.part, sl.leaf, LeafPage(sl.page.blocks, np.repeat(sl.page.columns, 2)[::2],
                                                        sl.page.col_start), sl.mask) for sl in leaves]
    assert not strided[0].page.columns.flags.c_contiguous
    want = P.build_batch(leaves, m, sel, proj)
    got = P.build_batch(strided, m, sel, proj)
    assert got.chunks.tobytes() == want.chunks.tobytes() and got.blocks.tobytes() == want.blocks.tobytes()
    assert strided[0].page.tables_at is strided[0].page.tables_at  # (made once per table)


def test_build_batch_never_reads_past_a_leafs_descriptors(region6):
    """A leaf whose blocks count more column descriptors than its table holds (never
    one loaded from a file: the leaf rules check the counts) is a planner error,
    not a read past the table."""
    from gtsamples.format.pages import LeafPage

    r, _, _ = region6
    art = r._artifact(r._doc["artifacts"][0], ReadStats())
    m = art.manifest
    sel = P.Selection.build()
    leaves = art.navigate(sel)
    page = leaves[-1].page
    short = LeafPage(page.blocks, page.columns[:-1], page.col_start)
    bad = leaves[:-1] + [P.SelectedLeaf(leaves[-1].part, leaves[-1].leaf, short, leaves[-1].mask)]
    with pytest.raises(ValueError, match=f"leaf {leaves[-1].leaf} of part {leaves[-1].part}: its blocks count "
                                         f"more column descriptors than its {page.columns.shape[0] - 1}"):
        P.build_batch(bad, m, sel, P.Projection.build(m, None))


def test_cached_artifacts_are_found_at_once_and_counted_as_hits(region6):
    """A region read looks up its covered sources' artifacts in the page cache in one
    call (:meth:`Region.cached_artifacts`): None for those not opened yet, which
    ``usable_artifact`` then opens; each source counts one miss when opened and one
    hit when found, as one by one."""
    r, _, _ = region6
    plan = r.plan()
    covered = [s for s in plan.sources if s.covered]
    assert r.cached_artifacts(covered) == [None] * len(covered)
    _, cold = r.read_with_stats()
    found = r.cached_artifacts(covered)
    assert all(a is not None for a in found)
    assert [a.location for a in found] == [r.usable_artifact(s, plan.need).location for s in covered]
    _, warm = r.read_with_stats()
    st = ReadStats()
    assert r.usable_artifact(covered[0], plan.need, st, found[0]) is found[0] and st.cache_hits == 1
    assert warm.cache_misses == 0 and warm.cache_hits > cold.cache_hits >= 0
    assert cold.cache_misses >= len(covered)
