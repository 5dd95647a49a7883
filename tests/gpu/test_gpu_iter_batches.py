"""``iter_batches(device="gpu")`` on a real device (skipped without one; see
conftest.py): the batches (cudf.DataFrame with cuDF, else DeviceTable) equal the
CPU read; a region streams on the GPU too.  The host emulator runs the
artifact case in tests/kernels/test_gpu_iter_batches.py."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import gtsamples as gs
from gtsamples.cache import PageCache
from gtsamples.decode import gpu
from tests.conftest import assert_tables_equal
from tests.region.conftest import REGION_ID, make_sst_table


@pytest.fixture(scope="module")
def device():
    pytest.importorskip("cupy")
    if not gpu.is_gpu_available(require_nvcomp=False):
        pytest.skip("no usable CUDA device")


def _host(b, schema) -> pa.Table:
    t = b.to_arrow()
    return pa.Table.from_arrays([t.column(n).cast(schema.field(n).type) for n in schema.names], schema=schema)


def test_artifact_batches_on_the_gpu(device, tmp_path):
    table = make_sst_table(np.random.default_rng(3), rows=20_000, series=8, ts_range=5000)
    entry = gs.write_artifact(table, tmp_path, region_id=7, source_file_id="00000000-0000-4000-8000-0000000000d1",
                              timestamp_column_id=0, field_column_ids=[1, 2], row_limit=256)
    art = gs.open_artifact(tmp_path, entry=entry, cache=PageCache())
    for kw in ({}, {"columns": ["ts", "v"], "start": 1_000_000}, {"series": [(1, int(table["__tsid"][0].as_py()))]}):
        want = art.read(**kw)
        got = [_host(b, want.schema) for b in art.iter_batches(device="gpu", max_bytes=64 << 10, **kw)]
        assert len(got) > 1 or want.num_rows < 2000
        assert_tables_equal(pa.concat_tables(got), want)


def test_region_batches_on_the_gpu(device, tmp_path):
    pytest.importorskip("cudf")
    rng = np.random.default_rng(4)
    r = gs.create_region(tmp_path, REGION_ID)
    for k in range(3):
        r.add_sst(make_sst_table(rng, rows=3000, seq_base=k))
    r.build(file_ids=[r.ssts[0].file_id])
    for dedup in (False, True):
        want = r.read(dedup=dedup)
        got = [_host(b, want.schema) for b in r.iter_batches(device="gpu", dedup=dedup, max_bytes=16 << 10)]
        assert_tables_equal(pa.concat_tables(got), want)
