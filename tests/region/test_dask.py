"""Region reads as Dask partitions, on a 2-worker distributed.LocalCluster."""

from __future__ import annotations

import os
import re
import warnings

import numpy as np
import pyarrow as pa
import pytest

import gtsamples as gs
from gtsamples import cache as gcache
from gtsamples.region import create_region, to_dask

from ..conftest import assert_tables_equal
from .conftest import REGION_ID, corrupt_artifact, make_sst_table, oracle, rows_of

dd = pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None,
                                  silence_logs=40) as cluster, distributed.Client(cluster) as c:
        yield c


@pytest.fixture
def region(tmp_path):
    rng = np.random.default_rng(41)
    r = create_region(tmp_path, REGION_ID)
    ids = [(t, s) for t in (1, 2) for s in range(10, 16)]
    tables = [make_sst_table(rng, rows=400, ids=ids, ts_range=40) for _ in range(4)]
    for t in tables:
        r.add_sst(t)
    # small parts: several partitions per artifact
    for s in r.ssts[:3]:
        t = tables[[x.file_id for x in r.ssts].index(s.file_id)]
        e = gs.write_artifact(t, tmp_path, region_id=REGION_ID, source_file_id=s.file_id, timestamp_column_id=0,
                              field_column_ids=[1, 2], row_limit=16, max_page_bytes=600, max_leaves_per_root=2)
        r.publish([e])
    return r, tables


def _arrow(df, schema):
    return pa.Table.from_pandas(df, preserve_index=False).cast(schema)


def test_to_dask_equals_direct_read(client, region):
    r, tables = region
    queries = [{}, {"columns": ["v"], "tables": [2]}, {"series": [(1, 10), (2, 15)], "start": 5000, "end": 30000}]
    for q in queries:
        ddf = to_dask(r, **q)
        n_parts = sum(len(gs.open_artifact(r.root, entry=a).manifest.files) for a in r.artifacts)
        if not q:
            assert ddf.npartitions == n_parts + 1  # one per artifact part + the uncovered SST
        want = r.read(**q)
        got = _arrow(ddf.compute(), want.schema)
        assert_tables_equal(got, want)  # same rows, same (region) order
        dd_want = r.read(**q, dedup=True)
        got = _arrow(to_dask(r, **q, dedup=True).compute(), dd_want.schema)
        assert sorted(rows_of(got), key=repr) == sorted(rows_of(dd_want), key=repr)  # exact across partitions
        assert got.num_rows == dd_want.num_rows


def test_to_dask_paths_and_fallback(client, region, tmp_path):
    r, tables = region
    a0 = r.coverage()[r.ssts[0].file_id]
    gen_dir = os.path.join(r.root, f"{REGION_ID}/samples/{a0['file_id']}/{a0['generation']}")
    sst1 = os.path.join(r.root, r.ssts[1].path)
    ddf = to_dask([gen_dir, sst1], columns=["ts", "w"], tables=[1])
    files = gs.open_artifact(gen_dir).manifest.files
    assert ddf.npartitions == sum(1 for p in files if p.first[0] <= 1 <= p.last[0]) + 1  # parts of table 1 + SST
    want = oracle(tables[:2], ["ts", "w"], None, [1])
    got = _arrow(ddf.compute(), r.arrow_schema(["ts", "w"]))
    assert_tables_equal(got, want.cast(got.schema))
    # an artifact corrupted after planning falls back, part by part, to the SST rows it covers
    want = r.read()
    ddf = to_dask(r)
    corrupt_artifact(r.root, r.coverage()[r.ssts[1].file_id], "chunk")
    gcache.default_cache().clear()
    client.run(lambda: __import__("gtsamples").cache.default_cache().clear())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = ddf.compute()
    assert_tables_equal(_arrow(got, want.schema), want)


@pytest.mark.slow
def test_to_dask_on_worker_processes(region, request):
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("worker processes: run with -m slow")
    r, tables = region
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster, distributed.Client(cluster):
        for q in ({}, {"columns": ["w"], "series": [(2, 12)]}):
            want = r.read(**q)
            assert_tables_equal(_arrow(to_dask(r, **q).compute(), want.schema), want)
            dd_want = r.read(**q, dedup=True)
            got = _arrow(to_dask(r, **q, dedup=True).compute(), dd_want.schema)
            assert sorted(rows_of(got), key=repr) == sorted(rows_of(dd_want), key=repr)


@pytest.mark.parametrize("n,cls,shown", [(0, ValueError, "0"), (-1, ValueError, "-1"), (1.5, TypeError, "float 1.5"),
                                         ("4", TypeError, "str '4'"), (True, TypeError, "bool True")])
def test_to_dask_refuses_a_shuffle_size_that_is_not_a_positive_integer(region, n, cls, shown):
    """Before: 0 shuffled into the read's partitions, -1 raised pandas' 'Length of values (1)
    does not match length of index (0)', 1.5 'can't multiply sequence by non-int'."""
    r, _tables = region
    with pytest.raises(cls, match=f"shuffle_npartitions must be a positive integer or None \\(partitions after "
                                  f"the shuffle; None: the read's\\), not {re.escape(shown)}$"):
        to_dask(r, dedup=True, shuffle_npartitions=n)


def test_to_dask_shuffles_into_the_partitions_asked(client, region):
    r, tables = region
    for n in (1, np.int64(3)):
        ddf = to_dask(r, dedup=True, shuffle_npartitions=n)
        assert ddf.npartitions == n
        want = r.read(dedup=True)
        got = _arrow(ddf.compute(), want.schema)
        assert sorted(rows_of(got), key=repr) == sorted(rows_of(want), key=repr) and got.num_rows == want.num_rows
