"""The spec's "Navigation and equal-timestamp example", visit by visit.

Part 0 (depth 2): root R -> leaf A [(7,42) ord 0, times 0..100],
leaf B [(7,42) ord 1, 100..200; (7,43) ord 0, 0..50].  Part 1: leaf/root C
[(7,43) ord 1, 50..80].
"""

import json

import numpy as np
import pytest

import gtsamples as gs
from gtsamples.cache import PageCache

from .conftest import DATA

VEC = DATA / "vectors" / "v23_navigation_example"


def _open():
    entry = json.loads((VEC / "entry.json").read_text())
    # a private cache so every query's page loads are visible
    return gs.open_artifact(VEC / "store", entry=entry, cache=PageCache(0))


def _visit(series, start, end):
    art = _open()
    stats = gs.ReadStats()
    batch, _ = art.fetch_batch(series=series, start=start, end=end, stats=stats)
    blocks = [(int(b["part"]), int(b["leaf"]), int(b["table_id"]), int(b["tsid"]), int(b["ordinal"]))
              for b in batch.blocks]
    table = art.read(series=series, start=start, end=end)
    return stats, blocks, table


def test_42_at_100_visits_a_and_b_keeps_both_rows_at_100():
    stats, blocks, t = _visit([(7, 42)], 100, 101)
    # pages: part 0 root, A, B (part 1 is never opened: its ids are (7,43) only)
    assert stats.pages_loaded == 3
    assert blocks == [(0, 0, 7, 42, 0), (0, 1, 7, 42, 1)]  # (7,43) payloads not decoded
    ts = t.column("ts").cast("int64").to_numpy()
    assert len(ts) >= 2 and (ts == 100).all()


def test_43_at_50_visits_b_and_c():
    stats, blocks, t = _visit([(7, 43)], 50, 51)
    assert stats.pages_loaded == 3  # R, B and C; A's ids are (7,42) only
    assert blocks == [(0, 1, 7, 43, 0), (1, 0, 7, 43, 1)]
    assert (t.column("ts").cast("int64").to_numpy() == 50).all() and t.num_rows >= 2


def test_43_from_51_skips_bs_block_despite_envelope():
    stats, blocks, t = _visit([(7, 43)], 51, 60)
    assert blocks == [(1, 0, 7, 43, 1)]


def test_42_before_100_still_visits_a():
    stats, blocks, t = _visit([(7, 42)], 90, 95)
    assert blocks == [(0, 0, 7, 42, 0)]


def test_root_envelope_is_over_all_blocks():
    art = _open()
    s = art.inspect()
    p0 = s["parts"][0]
    assert (p0["min_timestamp"], p0["max_timestamp"]) == (0, 200)  # not [100, 50]


# --- a manifest of many parts: their states looked up a chunk at a time ------------------


def test_a_read_failing_at_the_first_part_looks_no_further(tmp_path, monkeypatch):
    """As a reader going part by part: the first part is missing, so the read looks up no
    more than the first chunk of part states (a 400,000-part manifest: not 400,000)."""
    from gtsamples.plan import navigator

    from .test_bad_files import many_parts_manifest

    (tmp_path / "manifest.json").write_bytes(many_parts_manifest(1000))
    monkeypatch.setattr(navigator, "OPEN_CHUNK", 8)
    keys = []
    real = navigator.cache_key
    monkeypatch.setattr(navigator, "cache_key", lambda *a: keys.append(a) or real(*a))
    art = gs.open_artifact(tmp_path)
    with pytest.raises(gs.CorruptArtifactError, match=r"part-0\.samples: object is missing"):
        art.read()
    assert len(keys) == 8  # the first chunk's parts, none after


@pytest.mark.parametrize("chunk", [1, 2, 3, 4096])
def test_many_parts_read_alike_whatever_the_chunk(tmp_path, monkeypatch, chunk):
    from gtsamples.plan import navigator

    from .write.helpers import series_table, write

    t = series_table(9, 40, 2, null_frac=0.1, seed=6)
    _, d = write(tmp_path, t, row_limit=8, max_page_bytes=12 + 44 * 6, max_leaves_per_root=2)
    n_parts = len(json.loads((tmp_path / d / "manifest.json").read_text())["files"])
    assert n_parts > 8
    monkeypatch.setattr(navigator, "OPEN_CHUNK", chunk)
    art = gs.open_artifact(d)
    for kw in ({}, {"series": [(3, 5 + 11 * 6)]}, {"start": 100, "end": 250}):
        got = art.read(**kw)
        monkeypatch.setattr(navigator, "OPEN_CHUNK", 4096)
        want = gs.open_artifact(d, cache=PageCache(1 << 20)).read(**kw)
        monkeypatch.setattr(navigator, "OPEN_CHUNK", chunk)
        assert got.equals(want) and got.num_rows > 0, kw
    assert art.read().num_rows == t.num_rows
