"""Committed golden artifacts (tests/data/golden): their bytes never change.

Each case was written once by ``tests/data/golden/make_golden.py``.  These tests
never regenerate anything: they (a) read the committed artifacts back to the
committed expected table, and (b) write the same input again with the same
IDs and knobs and require byte-identical objects.  A failure of (b) means the
writer's output changed; that is a format/compatibility decision, never a
reason to overwrite the committed files.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

import gtsamples as gs
from gtsamples.cache import PageCache

from .conftest import DATA, assert_tables_equal

GOLDEN = DATA / "golden"
CASES = sorted(p.name for p in GOLDEN.iterdir() if p.is_dir() and (p / "case.json").exists())


def _load(name):
    d = GOLDEN / name
    case = json.loads((d / "case.json").read_text())
    entry = json.loads((d / "entry.json").read_text())
    with pa.memory_map(str(d / "expected.arrow")) as f:
        expected = ipc.open_file(f).read_all()
    return d, case, entry, expected


def test_cases_present():
    assert CASES == ["g1_depth1", "g2_depth2", "g3_multipart"]


@pytest.mark.parametrize("name", CASES)
def test_committed_bytes_match_recorded_hashes(name):
    d, case, entry, _ = _load(name)
    store = d / "store"
    names = {o["path"].rsplit("/", 1)[1]: o for o in entry["objects"]}
    assert set(names) == set(case["sha256"])
    for base, o in names.items():
        data = (store / o["path"]).read_bytes()
        assert len(data) == o["file_size"]
        assert hashlib.sha256(data).hexdigest() == case["sha256"][base], base


@pytest.mark.parametrize("name", CASES)
def test_golden_reads(name):
    d, case, entry, expected = _load(name)
    art = gs.open_artifact(d / "store", entry=entry, cache=PageCache())
    assert_tables_equal(art.read(), expected)
    assert art.validate()["valid"]
    gen_dir = d / "store" / entry["objects"][0]["path"].rsplit("/", 1)[0]
    assert_tables_equal(gs.open_artifact(gen_dir, cache=PageCache()).read(), expected)
    m = art.manifest
    assert (m.region_id, m.source_file_id, m.generation) == (case["region_id"], case["source_file_id"], case["generation"])


def _brute(t: pa.Table, ts_name, series=None, start=None, end=None) -> pa.Table:
    mask = np.ones(t.num_rows, dtype=bool)
    if series is not None:
        tid = t.column("__table_id").to_numpy()
        tsid = t.column("__tsid").to_numpy()
        want = set(series)
        mask &= np.array([(int(a), int(b)) in want for a, b in zip(tid, tsid)], dtype=bool)
    ts = t.column(ts_name).cast(pa.int64()).to_numpy()
    if start is not None:
        mask &= ts >= start
    if end is not None:
        mask &= ts < end
    return t.filter(pa.array(mask))


@pytest.mark.parametrize("name", CASES)
def test_golden_selections(name):
    d, case, entry, expected = _load(name)
    art = gs.open_artifact(d / "store", entry=entry, cache=PageCache())
    ts = expected.column("ts").cast(pa.int64()).to_numpy()
    ids = sorted({(int(a), int(b)) for a, b in zip(expected.column("__table_id").to_numpy(),
                                                     expected.column("__tsid").to_numpy())})
    lo, hi = int(ts.min()), int(ts.max())
    mid = (lo + hi) // 2
    for series in (None, ids[:1], ids[-1:], ids[::2]):
        for start, end in ((None, None), (mid, None), (None, mid), (mid, mid + 1), (lo, hi + 1), (hi, lo)):
            got = art.read(series=series, start=start, end=end)
            assert_tables_equal(got, _brute(expected, "ts", series, start, end))


@pytest.mark.parametrize("name", CASES)
def test_rewrite_is_byte_identical(name, tmp_path):
    d, case, entry, expected = _load(name)
    new = gs.write_artifact(expected, tmp_path, region_id=case["region_id"], source_file_id=case["source_file_id"],
                            generation=case["generation"], **case["writer_kwargs"])
    nd = new.to_dict()
    assert nd.pop("created_at", None)  # created_at lives only in the entry ...
    assert nd == entry
    for o in entry["objects"]:
        old_bytes = (d / "store" / o["path"]).read_bytes()
        new_bytes = (tmp_path / o["path"]).read_bytes()
        assert new_bytes == old_bytes, f"{name}: {o['path']} differs from the committed golden bytes"
        assert new.created_at.encode() not in new_bytes  # ... never in the files
    gen = tmp_path / entry["objects"][0]["path"].rsplit("/", 1)[0]
    assert sorted(os.listdir(gen)) == sorted(o["path"].rsplit("/", 1)[1] for o in entry["objects"])
