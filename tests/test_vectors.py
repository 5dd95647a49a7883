"""Interop: artifacts from an independent writer read to their expected tables."""

import json

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

import gtsamples as gs

from .conftest import DATA, assert_tables_equal

VECTORS = sorted(p for p in (DATA / "vectors").iterdir() if p.is_dir())
FIXED = ["__table_id", "__tsid", "__sequence", "__op_type"]


def _load(path):
    with pa.memory_map(str(path)) as f:
        return ipc.open_file(f).read_all()


def _open(vec):
    entry = json.loads((vec / "entry.json").read_text())
    return gs.open_artifact(vec / "store", entry=entry)


@pytest.mark.parametrize("vec", VECTORS, ids=lambda p: p.name)
def test_full_read(vec):
    art = _open(vec)
    assert_tables_equal(art.read(), _load(vec / "expected.arrow"))


@pytest.mark.parametrize("vec", VECTORS, ids=lambda p: p.name)
def test_validate_and_inspect(vec):
    art = _open(vec)
    assert art.validate()["valid"]
    s = art.inspect()
    assert s["rows"] == _load(vec / "expected.arrow").num_rows


def _queries():
    for vec in VECTORS:
        case = json.loads((vec / "case.json").read_text())
        for i, q in enumerate(case["queries"]):
            yield pytest.param(vec, q, id=f"{vec.name}-q{i}")


@pytest.mark.parametrize("vec,q", list(_queries()))
def test_query(vec, q):
    art = _open(vec)
    columns = None
    if q["columns"] is not None:
        columns = FIXED + [art.manifest.timestamp.name] + q["columns"]
    series = [tuple(s) for s in q["series"]] if q["series"] is not None else None
    got = art.read(columns=columns, series=series, tables=q["tables"], start=q["start"], end=q["end"])
    assert_tables_equal(got, _load(vec / q["expected"]))


@pytest.mark.parametrize("vec", VECTORS, ids=lambda p: p.name)
def test_open_generation_directory(vec):
    """Opening the generation directory itself (no entry) reads the same rows."""
    entry = json.loads((vec / "entry.json").read_text())
    gen_dir = vec / "store" / entry["objects"][0]["path"].rsplit("/", 1)[0]
    assert_tables_equal(gs.read_artifact(gen_dir), _load(vec / "expected.arrow"))


def test_sequence_ties_validate_and_writer_rejects_increase(tmp_path):
    """Nonincreasing sequences on equal timestamps validate; the writer refuses an increase."""
    import numpy as np

    from gtsamples.write import writer as W

    t = pa.table({
        "__table_id": pa.array([1, 1, 1], pa.uint32()), "__tsid": pa.array([5, 5, 5], pa.uint64()),
        "ts": pa.array(np.array([10, 20, 20], "datetime64[ms]")),
        "__sequence": pa.array([9, 3, 4], pa.uint64()), "__op_type": pa.array([1, 1, 1], pa.uint8()),
        "v": pa.array([1.0, 2.0, 3.0]),
    })
    ok = t.set_column(3, "__sequence", pa.array([9, 4, 3], pa.uint64()))
    e = gs.write_artifact(ok, tmp_path, region_id=1, source_file_id="5a3c0000-0000-4000-8000-000000000001",
                          generation="5a3c0000-0000-4000-8000-000000000002", timestamp_column_id=0,
                          field_column_ids=[1], row_limit=2)
    assert gs.open_artifact(tmp_path, entry=e).validate()["valid"]
    with pytest.raises(ValueError, match="sequence"):
        gs.write_artifact(t, tmp_path / "x", region_id=1, source_file_id="5a3c0000-0000-4000-8000-000000000001",
                          timestamp_column_id=0, field_column_ids=[1])
