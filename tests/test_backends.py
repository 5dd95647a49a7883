"""gtsamples.backends: get_backend(device) for "cpu", "gpu", "auto" and anything else."""

from __future__ import annotations

import sys

import pytest

import gtsamples as gs
from gtsamples import backends, frames_gpu
from gtsamples.decode import gpu
from gtsamples.storage import ReadStats
from tests.conftest import assert_tables_equal
from tests.gpu import artifact_cases as A


def test_cpu_backend_reads_what_artifact_read_returns():
    b = backends.get_backend("cpu")
    assert b.name == "cpu" and b is backends.CPU
    b.require()  # the CPU backend runs anywhere
    art = A.open_case(A.VECTORS[0])
    stats = ReadStats()
    got = b.read(art, ["value"], None, None, None, None, stats)
    assert_tables_equal(got, art.read(columns=["value"]))
    assert stats.chunks_decoded > 0


def test_cpu_backend_decode_then_frame_is_its_read():
    b = backends.get_backend("cpu")
    art = A.open_case(A.VECTORS[0])
    batch, projection = art.plan(None, None, None, None, None, ReadStats())
    assert_tables_equal(b.to_frame(art.manifest, projection, batch, b.decode_batch(batch)), art.read())


@pytest.mark.parametrize("device", ["GPU", "cuda", "", None, "cpu "])
def test_unknown_devices_are_a_value_error(device):
    with pytest.raises(ValueError, match=r"device must be one of \('cpu', 'gpu', 'auto'\), not "):
        backends.get_backend(device)


def test_gpu_backend_is_named_without_device_work(monkeypatch):
    monkeypatch.setattr(gpu, "is_gpu_available", lambda require_nvcomp=True: pytest.fail("probed the device"))
    assert backends.get_backend("gpu") is backends.GPU and backends.GPU.name == "gpu"


def test_gpu_without_cudf_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "cudf", None)  # import cudf -> ImportError
    monkeypatch.setitem(sys.modules, "pylibcudf", None)
    with pytest.raises(frames_gpu.CudfUnavailableError, match="cuDF is not installed") as info:
        backends.get_backend("gpu").require()
    assert isinstance(info.value, gs.UnsupportedError)


def test_gpu_without_a_device_says_so(monkeypatch):
    monkeypatch.setattr(gpu, "is_gpu_available", lambda require_nvcomp=True: False)
    with pytest.raises(gs.UnsupportedError, match=r"needs CuPy and a CUDA device.*use device='cpu'") as info:
        backends.get_backend("gpu").require(cudf=False)
    assert "pip install 'gtsamples[gpu]'" in str(info.value)  # what to install


@pytest.mark.parametrize("available", [False, True])
def test_auto_picks_the_gpu_only_when_it_can_return_a_cudf_frame(monkeypatch, available):
    monkeypatch.setattr(gpu, "is_gpu_available", lambda require_nvcomp=True: available)
    monkeypatch.setattr(backends.importlib.util, "find_spec", lambda name: object() if name == "cudf" else None)
    assert backends.get_backend("auto").name == ("gpu" if available else "cpu")
    monkeypatch.setattr(backends.importlib.util, "find_spec", lambda name: None)  # no cuDF
    assert backends.get_backend("auto").name == "cpu"
