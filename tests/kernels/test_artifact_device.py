"""``Artifact.read_device`` and ``read(device="gpu")`` without a GPU.

* The cuDF check: ``device="gpu"`` without cuDF raises a
  :class:`gtsamples.SamplesError` naming ``Artifact.read_device()`` and
  ``DeviceTable.to_arrow()`` before any I/O or CUDA work; ``device="auto"``
  falls back to the CPU; ``read_device`` without a GPU says so.
* The artifact-level parity cases of tests/gpu/test_gpu_artifacts.py run
  through the kernel emulator (tests/kernels/emu_device.py): a quick subset
  here; every case with ``GTS_EMU_FULL=1`` (about a minute).
"""

from __future__ import annotations

import os
import sys

import pytest

import gtsamples as gs
from gtsamples.decode.gpu import table as gpu_table
from gtsamples.decode import gpu
from gtsamples.decode.gpu import transfers
from tests.corruption.test_rules import written  # noqa: F401  (module fixture)
from tests.gpu import artifact_cases as A

FULL = os.environ.get("GTS_EMU_FULL") == "1"


# ----------------------------------------------------------------------------- no cuDF, no GPU


@pytest.fixture
def no_cudf(monkeypatch):
    monkeypatch.setitem(sys.modules, "cudf", None)  # import cudf -> ImportError
    monkeypatch.setitem(sys.modules, "pylibcudf", None)


def _forbid_gpu_work(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("GPU work started before the cuDF check")

    monkeypatch.setattr(gpu, "decode_batch_gpu", boom)
    monkeypatch.setattr(gs.Artifact, "plan", boom)


def test_device_gpu_without_cudf_raises_a_samples_error_first(no_cudf, monkeypatch):
    art = A.open_case(A.VECTORS[0])
    _forbid_gpu_work(monkeypatch)
    for available in (False, True):
        monkeypatch.setattr(gpu, "is_gpu_available", lambda require_nvcomp=True, _a=available: _a)
        with pytest.raises(gs.SamplesError) as info:
            art.read(device="gpu")
        err = info.value
        assert isinstance(err, gs.UnsupportedError) and isinstance(err, gpu_table.CudfUnavailableError)
        assert isinstance(err, ImportError)  # still catchable as before
        msg = str(err)
        assert "cuDF is not installed" in msg
        assert "Artifact.read_device(" in msg and "DeviceTable.to_arrow()" in msg
    with pytest.raises(gpu_table.CudfUnavailableError):
        art.read_with_stats(device="gpu")


def test_device_auto_without_cudf_reads_on_the_cpu(no_cudf, monkeypatch):
    art = A.open_case(A.VECTORS[0])
    monkeypatch.setattr(gpu, "is_gpu_available", lambda require_nvcomp=True: True)
    monkeypatch.setattr(gpu, "decode_batch_gpu", lambda *a, **k: pytest.fail("auto chose the GPU without cuDF"))
    A.assert_tables_equal(art.read(device="auto"), art.read())


def test_device_table_to_cudf_without_cudf_names_the_alternatives(no_cudf):
    with pytest.raises(gpu_table.CudfUnavailableError, match=r"read_device.*DeviceTable\.to_arrow\(\)"):
        gpu_table.DeviceTable([], 0).to_cudf()


def test_read_device_without_a_gpu_says_so(monkeypatch):
    art = A.open_case(A.VECTORS[0])
    monkeypatch.setattr(gpu, "is_gpu_available", lambda require_nvcomp=True: False)
    monkeypatch.setattr(gs.Artifact, "plan", lambda *a, **k: pytest.fail("read before the GPU check"))
    with pytest.raises(gs.UnsupportedError, match="CUDA device"):
        art.read_device()


# ----------------------------------------------------------------------------- emulated device

emu = pytest.importorskip("tests.kernels.emu_device")


@pytest.fixture
def emu_read(monkeypatch):
    """``read_device`` over the kernel emulator (poisoned outputs, staged and
    overlapped copies forced so that the ordering is exercised too)."""
    if emu.compiler() is None:  # pragma: no cover
        pytest.skip("no C++ compiler for the kernel emulator")
    emu.load_library()
    real = gpu.decode_batch_gpu
    devices = []

    def decode(batch, **kw):
        dev = emu.EmuDevice()
        devices.append(dev)
        kw.setdefault("h2d", "overlap")
        kw.setdefault("temp_budget", 300_000)  # several nvCOMP sub-batches
        out = real(batch, _device=dev, poison=0xA5, **kw)
        assert dev.unwaited() == 0, "a staged copy was never waited for"
        return out

    monkeypatch.setattr(gpu, "is_gpu_available", lambda require_nvcomp=True: True)
    monkeypatch.setattr(gpu, "decode_batch_gpu", decode)
    monkeypatch.setattr(transfers, "PINNED_SLOT_BYTES", 512)
    monkeypatch.setattr(transfers, "MIN_SEGMENT_BYTES", 1)

    def read(art, **kw):
        dt = art.read_device(**kw)
        assert isinstance(dt, gpu_table.DeviceTable)
        return dt.to_arrow()

    read.devices = devices
    return read


def _vector_params():
    vecs = A.VECTORS if FULL else [v for v in A.VECTORS if v.name.startswith("v02")]
    for vec in vecs:
        for qid, kw in A.vector_queries(vec):
            yield pytest.param(vec, kw, id=f"{vec.name}-{qid}")


@pytest.mark.parametrize("vec,kw", list(_vector_params()))
def test_vectors_read_device_equals_cpu(emu_read, vec, kw):
    A.assert_same_read(A.open_case(vec), emu_read, kw, vec.name)


@pytest.mark.parametrize("d", A.GOLDEN if FULL else A.GOLDEN[1:2], ids=lambda p: p.name)
def test_golden_read_device_equals_cpu(emu_read, d):
    art = A.open_case(d)
    for qid, kw in A.golden_queries(d, quick=not FULL):
        A.assert_same_read(art, emu_read, kw, f"{d.name}:{qid}")
    assert any(e[0] == "wait" for dev in emu_read.devices for e in dev.log)


_QUICK_CORRUPTION = {
    "decode-varint-truncated-ts", "decode-validity-kind1-count-mismatch", "decode-unknown-encoding-field",
    "decode-zstd-no-content-size-less-output", "decode-unknown-encoding-unprojected-ok",
}  # fmt: skip


def _corruption_params():
    for c in A.decode_stage_cases():
        if FULL or c.id in _QUICK_CORRUPTION:
            yield pytest.param(c, id=c.id)


def test_quick_corruption_subset_exists():
    ids = {c.id for c in A.decode_stage_cases()}
    assert _QUICK_CORRUPTION <= ids, _QUICK_CORRUPTION - ids


@pytest.mark.parametrize("case", list(_corruption_params()))
def test_corruption_read_device_same_error_as_cpu(emu_read, case, written, tmp_path):  # noqa: F811
    A.check_corruption_case(case, written, tmp_path, emu_read)


@pytest.mark.skipif(not FULL, reason="GTS_EMU_FULL=1: the NAB data through the emulator (slow)")
def test_nab_read_device_equals_cpu(emu_read, shared_dir, tmp_path):
    art, table = A.nab_artifact(shared_dir, tmp_path)
    for qid, kw in A.nab_queries(table):
        A.assert_same_read(art, emu_read, kw, f"nab:{qid}")


@pytest.mark.parametrize("opts", [{"compression": None}, {"compression_level": -5}], ids=["raw", "level-5"])
def test_writer_compression_choices_read_device_equals_cpu(emu_read, tmp_path, opts):
    """Artifacts of the writer's other compression choices: every chunk raw (no
    nvCOMP work at all), or fast-level frames."""
    from tests.write.helpers import series_table, write

    table = series_table(12, 700, 3, null_frac=0.1, seed=4)
    _, d = write(tmp_path, table, row_limit=256, **opts)
    art = gs.open_artifact(d)
    for kw in ({}, {"series": [(1, 5)]}, {"columns": ["ts", "f1"], "start": 1000, "end": 5000}):
        A.assert_same_read(art, emu_read, kw, str(opts))
    assert art.read().num_rows == table.num_rows and art.read(series=[(1, 5)]).num_rows == 700
