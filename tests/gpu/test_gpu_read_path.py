"""The default GPU read path on a real device (skipped without one; see conftest.py):
files -> DeviceTable with the fetch in groups and XXH64 on the device, frames
without a proven size kept from nvCOMP, host hashing overlapping the copy with
nvCOMP, stream-ordered lifetimes, nvCOMP 6.0's status strings.  The same rules
run on the host emulator in tests/kernels/test_gpu_safety.py and
tests/kernels/test_gpu_read_path.py.  CuPy is imported inside the fixtures, so
this module collects without it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import gtsamples as gs
from gtsamples.cache import PageCache
from gtsamples.decode import gpu
from gtsamples.decode.gpu import fetch as gpu_fetch
from gtsamples.decode.gpu import device as gpu_device
from gtsamples.decode.gpu import transfers
from gtsamples.decode.gpu import nvcomp as nv
from tests.conftest import assert_tables_equal
from tests.gpu import frame_cases as FC
from tests.gpu import scenarios as S


@pytest.fixture(scope="module")
def cupy_device():
    cp = pytest.importorskip("cupy")
    if not gpu.is_gpu_available(require_nvcomp=False):
        pytest.skip("no usable CUDA device")
    try:
        nv.load_nvcomp()
    except nv.NvcompError as e:
        pytest.skip(f"libnvcomp not loadable: {e}")
    return cp, gpu.CupyDevice()


@pytest.mark.parametrize("hash_on", ["device", "host"])
@pytest.mark.parametrize("name", FC.UNPROVEN)
def test_unproven_frames_on_device(cupy_device, name, hash_on):
    b, _ = FC.unproven_case(name)
    FC.check_same_as_cpu(b, cupy_device[1], hash_on=hash_on)


def test_overlap_with_host_hashing_on_device(cupy_device, monkeypatch):
    """With host hashing, nvCOMP sub-batch k starts once its segment arrived (the
    copy of later segments continues): many pieces, many sub-batches."""
    monkeypatch.setattr(transfers, "PINNED_SLOT_BYTES", 64 << 10)
    monkeypatch.setattr(transfers, "PINNED_MAX_SLOTS", 3)
    monkeypatch.setattr(transfers, "MIN_SEGMENT_BYTES", 1)
    built = S.random_built(52, n_blocks=60, n_fields=4, max_rows=4000, compression="zstd")
    dt = gpu.decode_batch_gpu(built.batch, h2d="overlap", hash_on="host", temp_budget=1 << 18, poison=S.POISON,
                              timings=True)  # fmt: skip
    S.assert_same(S.host_columns(dt), S.cpu_columns(built.batch), "vs CPU backend:")
    assert "h2d_copy" in dt.timings and "host_device_wait" in dt.timings


def test_nvcomp_buffers_are_held_until_the_stream_passed(cupy_device):
    cp, dev = cupy_device
    built = S.random_built(53, n_blocks=20, n_fields=2, max_rows=2000, compression="zstd")
    S.check_parity(built, dev, temp_budget=1 << 18)
    assert len(gpu_device._IN_FLIGHT) >= 1  # the last call's temp memory and tables
    cp.cuda.Device().synchronize()
    dev.keep_until_done(())  # prunes what the device has passed
    assert len(gpu_device._IN_FLIGHT) == 1


def test_status_strings_of_nvcomp_6(cupy_device):
    lib = nv.load_nvcomp()
    for status in (22, 23, 24):
        assert lib.status_string(status)


def _table(rows=200_000, fields=4) -> pa.Table:
    rng = np.random.default_rng(1)
    series = 8
    per = rows // series
    sid = np.repeat(np.arange(series, dtype=np.uint64), per)
    n = sid.size
    cols = {
        "__table_id": pa.array((sid // 4 + 1).astype(np.uint32)),
        "__tsid": pa.array(sid * np.uint64(11) + np.uint64(3)),
        "ts": pa.array(np.tile(np.arange(per, dtype=np.int64) * 1000, series), pa.timestamp("ms")),
        "__sequence": pa.array(np.arange(n, dtype=np.uint64)[::-1].copy()),
        "__op_type": pa.array(np.ones(n, np.uint8)),
    }
    for f in range(fields):
        cols[f"f{f}"] = pa.array(np.round(np.cumsum(rng.normal(size=n)), 2), mask=rng.random(n) < 0.05)
    return pa.table(cols)


@pytest.mark.parametrize("group_bytes", [64 << 10, 1 << 30])
def test_read_device_from_files_fetched_in_groups(cupy_device, tmp_path, monkeypatch, group_bytes):
    monkeypatch.setattr(gpu_fetch, "FETCH_PROGRESSIVE_MIN_BYTES", 1)
    monkeypatch.setattr(gpu_fetch, "FETCH_GROUP_BYTES", group_bytes)
    entry = gs.write_artifact(_table(), tmp_path, region_id=5, source_file_id="00000000-0000-4000-8000-0000000000e1",
                              generation="00000000-0000-4000-8000-0000000000e2", timestamp_column_id=0,
                              field_column_ids=[1, 2, 3, 4])  # fmt: skip
    art = gs.open_artifact(tmp_path, entry=entry, cache=PageCache())
    for kw in ({}, {"columns": ["ts", "f2"], "start": 5_000_000}, {"series": [(1, 3), (2, 47)]}):
        assert_tables_equal(art.read_device(**kw).to_arrow(), art.read(**kw))
    dt, _ = gpu_fetch.read_artifact(art, timings=True)
    assert dt.timings["wall"] > 0 and "host_precheck" in dt.timings
