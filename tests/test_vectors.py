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
