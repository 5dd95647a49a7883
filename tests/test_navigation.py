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
