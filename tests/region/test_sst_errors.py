"""A damaged SST raises the base SamplesError naming the file and what failed, on every
path that reads one (region/sst.py, sst_error): never pyarrow's exceptions, and never
CorruptArtifactError (an SST is not an artifact).  Before, a truncated SST raised
CorruptArtifactError (the store's short-read check), a damaged one read by
Region.build or to_dask raised pyarrow's ArrowInvalid or OSError."""

from __future__ import annotations

import os

import numpy as np
import pyarrow.parquet as pq
import pytest

import gtsamples as gs
from gtsamples import cache as gcache
from gtsamples.region import create_region, open_region
from gtsamples.region.dask import to_dask

from .conftest import REGION_ID, make_sst_table


def _damage(path: str, how: str) -> None:
    data = open(path, "rb").read()
    if how == "missing":
        os.remove(path)
        return
    bad = {
        "truncated": data[: len(data) // 2],  # shorter than the catalog records
        "empty": b"",
        "not parquet": (b"not a parquet file " * (len(data) // 19 + 1))[: len(data)],  # same size
        "zeroed pages": data[:4] + bytes(len(data) - 12) + data[-8:],  # footer length and magic kept
        "zeroed footer": data[:-200] + bytes(192) + data[-8:],
    }[how]
    with open(path, "wb") as f:
        f.write(bad)


DAMAGE = ["truncated", "empty", "not parquet", "zeroed pages", "zeroed footer", "missing"]


def _region(root):
    r = create_region(str(root), REGION_ID)
    rng = np.random.default_rng(7)
    for _ in range(2):
        r.add_sst(make_sst_table(rng, rows=300))
    return r


def _check(exc_info, path: str, doing: tuple[str, ...]):
    e = exc_info.value
    assert type(e) is gs.SamplesError, f"{type(e).__name__}: {e}"
    msg = str(e)
    assert msg.startswith(path + ": "), msg
    assert any(d in msg for d in doing), msg
    assert msg.count(path) == 1, msg  # the store's own message is not repeated after it


READING = ("cannot read the SST", "not a readable Parquet file", "cannot scan the SST")


@pytest.mark.parametrize("how", DAMAGE)
def test_read_of_a_damaged_sst(tmp_path, how):
    r = _region(tmp_path)
    path = os.path.join(str(tmp_path), r.ssts[0].path)
    _damage(path, how)
    gcache.default_cache().clear()  # the footer cached when the SST was added
    with pytest.raises(gs.SamplesError) as ei:
        open_region(str(tmp_path), REGION_ID).read()
    _check(ei, path, READING)
    with pytest.raises(gs.SamplesError) as ei:  # streamed: the SST's batched reader
        for _ in open_region(str(tmp_path), REGION_ID).iter_batches():
            pass
    _check(ei, path, READING)


@pytest.mark.parametrize("how", DAMAGE)
@pytest.mark.parametrize("workers", [1, 2])
def test_build_over_a_damaged_sst(tmp_path, how, workers):
    r = _region(tmp_path)
    path = os.path.join(str(tmp_path), r.ssts[0].path)
    _damage(path, how)
    with pytest.raises(gs.SamplesError) as ei:
        r.build(workers=workers)
    _check(ei, path, READING)


@pytest.mark.parametrize("how", DAMAGE)
def test_add_of_a_damaged_parquet_file(tmp_path, how):
    src = tmp_path / "in.parquet"
    pq.write_table(make_sst_table(np.random.default_rng(3), rows=300), src)
    _damage(str(src), how)
    r = create_region(str(tmp_path / "region"), REGION_ID)
    with pytest.raises(gs.SamplesError) as ei:
        r.add_sst(str(src))
    _check(ei, str(src), READING)


@pytest.mark.parametrize("how", DAMAGE)
def test_to_dask_over_a_damaged_parquet_path(tmp_path, how):
    r = _region(tmp_path)
    paths = [os.path.join(str(tmp_path), s.path) for s in r.ssts]
    _damage(paths[0], how)
    with pytest.raises(gs.SamplesError) as ei:
        to_dask(paths).compute(scheduler="sync")
    _check(ei, paths[0], READING)


def test_build_of_an_sst_without_a_region_column(tmp_path):
    """An SST replaced by a Parquet file that lacks one of the region's columns: building
    its artifact names the SST (before: pyarrow's KeyError)."""
    from gtsamples.region.build import build_one

    r = _region(tmp_path)
    path = os.path.join(str(tmp_path), r.ssts[0].path)
    pq.write_table(pq.read_table(path).drop_columns(["w"]), path)
    rec = dict(r.ssts[0].to_dict(), size=os.path.getsize(path))  # as a catalog recording this file would
    with pytest.raises(gs.SamplesError) as ei:
        build_one(str(tmp_path), None, REGION_ID, rec, r.schema.to_json_obj(), None, False, {})
    _check(ei, path, ("cannot read the SST",))
    assert str(ei.value).endswith(': Field "w" does not exist in schema'), str(ei.value)


def test_a_storage_error_keeps_its_class(tmp_path, monkeypatch):
    """A store that fails (an OSError worth a retry) is not turned into a damaged SST."""
    from gtsamples.storage import local

    r = _region(tmp_path)
    gcache.default_cache().clear()

    def offline(self, key, *a, **kw):
        raise gs.StorageError(f"{self.path(key)}: cannot read: offline")

    monkeypatch.setattr(local.LocalStore, "read", offline)
    with pytest.raises(gs.StorageError, match="offline"):
        open_region(str(tmp_path), REGION_ID).read(use_artifacts=False)
