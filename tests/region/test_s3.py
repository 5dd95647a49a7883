"""A region on a real S3-compatible server (moto's server mode on 127.0.0.1) through s3fs."""

from __future__ import annotations

import numpy as np
import pytest

import gtsamples as gs
from gtsamples import cache as gcache
from gtsamples.region import create_region, open_region

from ..conftest import assert_tables_equal
from .conftest import REGION_ID, make_sst_table, oracle

pytest.importorskip("moto.server")
pytest.importorskip("s3fs")

from .faultproxy import Moto  # noqa: E402


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    import logging

    import s3fs

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    moto = Moto()
    moto.start()
    opts = {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{moto.port}",
                                                                     "region_name": "us-east-1"}}
    fs = s3fs.S3FileSystem(**opts)
    fs.call_s3("create_bucket", Bucket="gtsamples-test")
    try:
        yield opts
    finally:
        moto.stop()


def test_region_on_s3(s3, capsys):
    rng = np.random.default_rng(31)
    root = "s3://gtsamples-test/store"
    r = create_region(root, REGION_ID, storage_options=s3)
    ids = [(t, s) for t in (1, 2) for s in range(100, 120)]  # every SST holds every series
    tables = [make_sst_table(rng, rows=3000, ts_range=400, ids=ids) for _ in range(3)]
    for t in tables:
        r.add_sst(t, row_group_size=1000)
    r.build(workers=2)
    gcache.default_cache().clear()
    r = open_region(root, REGION_ID, storage_options=s3)
    assert len(r.artifacts) == 3 and r.version == 5
    series = [(int(tables[0]["__table_id"][0].as_py()), int(tables[0]["__tsid"][0].as_py()))]
    one, st = r.read_with_stats(series=series)  # cold: nothing cached
    assert st.metadata_bytes > 0
    for a in r.artifacts:
        gs.open_artifact(root, entry=a, storage_options=s3).validate()
    got = r.read()
    assert_tables_equal(got, oracle(tables).cast(got.schema))
    assert_tables_equal(one, oracle(tables, None, series).cast(one.schema))
    _, st2 = r.read_with_stats(series=series)
    assert st2.metadata_bytes == 0 and st2.cache_hits > 0
    fb, st3 = r.read_with_stats(series=series, use_artifacts=False)
    assert_tables_equal(fb, one)
    with capsys.disabled():
        print(f"\nS3 one-series query ({one.num_rows} rows from 3 artifacts): cold {st.requests} requests, "
              f"{st.bytes_read} B ({st.chunk_bytes} B chunks, {st.metadata_bytes} B metadata); warm {st2.requests} "
              f"requests, {st2.bytes_read} B; SST scan instead: {st3.requests} requests, {st3.bytes_read} B")
    # compaction and gc work remotely too
    (new,) = r.replace_ssts(remove=[r.ssts[0].file_id], add=[tables[0]])
    assert r.coverage()[new.file_id] is None
    got = r.read()
    assert_tables_equal(got, oracle([tables[0], tables[1], tables[2]]).cast(got.schema))
    out = r.gc(grace_seconds=0, expire_versions=True)
    assert len(out["removed_generations"]) == 1 and r.versions() == [r.version]
    got = open_region(root, REGION_ID, storage_options=s3).read()
    assert_tables_equal(got, oracle(tables).cast(got.schema))


def test_s3_concurrent_commits(s3):
    import threading

    rng = np.random.default_rng(32)
    root = "s3://gtsamples-test/race"
    create_region(root, REGION_ID, storage_options=s3)
    tables = [make_sst_table(rng, rows=20) for _ in range(4)]
    errs = []

    def add(t):
        try:
            open_region(root, REGION_ID, storage_options=s3).add_sst(t)
        except Exception as e:  # pragma: no cover
            errs.append(e)

    ths = [threading.Thread(target=add, args=(t,)) for t in tables]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    assert not errs
    r = open_region(root, REGION_ID, storage_options=s3)
    assert len(r.ssts) == 4 and r.version == 5


def test_streamed_region_read_on_s3(s3):
    """``Region.iter_batches`` over S3: artifacts fetched batch by batch, SSTs read
    through Parquet's batched reader, with and without dedup."""
    import pyarrow as pa

    rng = np.random.default_rng(37)
    root = "s3://gtsamples-test/streamed"
    r = create_region(root, REGION_ID, storage_options=s3)
    ids = [(1, s) for s in range(10)]
    tables = [make_sst_table(rng, rows=2000, ts_range=300, ids=ids, seq_base=k) for k in range(3)]
    for t in tables:
        r.add_sst(t, row_group_size=500)
    r.build(file_ids=[r.ssts[0].file_id, r.ssts[2].file_id], row_limit=64)
    gcache.default_cache().clear()
    r = open_region(root, REGION_ID, storage_options=s3)
    for dedup in (False, True):
        batches = list(r.iter_batches(dedup=dedup, max_bytes=16 << 10))
        assert len(batches) > 3 and r.last_stats.requests > 0
        got = pa.Table.from_batches(batches)
        assert_tables_equal(got, r.read(dedup=dedup))


def test_region_recreated_at_the_same_s3_root_is_not_served_from_the_cache(s3):
    """A region deleted and created again on S3 numbers its versions from 1 again: the
    version cache tells the new version 1 from the old by the ETag of the listing every
    open makes, so no ``catalog.clear()`` is needed (a stale hit would read the old
    region's SSTs, now deleted)."""
    import s3fs

    from gtsamples.region import catalog

    root = "s3://gtsamples-test/recreated"
    rng = np.random.default_rng(41)
    r = create_region(root, REGION_ID, storage_options=s3)
    r.add_sst(make_sst_table(rng, rows=20))
    first = open_region(root, REGION_ID, storage_options=s3)
    assert first.read().num_rows == 20 and catalog.cached_versions() >= 1
    s3fs.S3FileSystem(**s3).rm(root.removeprefix("s3://"), recursive=True)
    r = create_region(root, REGION_ID, storage_options=s3)
    again_table = make_sst_table(rng, rows=30)
    r.add_sst(again_table)
    again = open_region(root, REGION_ID, storage_options=s3)
    assert again.version == first.version
    got = again.read()
    assert got.num_rows == 30
    assert_tables_equal(got, oracle([again_table]).cast(got.schema))

