"""Artifact-level parity on a real device (skipped without one; see conftest.py).

``Artifact.read_device(...).to_arrow()`` (and ``read(device="gpu")`` when
cuDF imports) equals the CPU read bit for bit on every artifact in
tests/data/vectors and tests/data/golden (full reads, every case.json query,
test_golden.py's selections), on the NAB data when ../shared is present, and
fails like the CPU read (class, ``err.flags``, per-chunk flags, the rule's
message) for every case of tests/corruption/test_rules.py that reaches
decoding.  The vectors and golden reads run twice: with the default H2D path
and with pinned, overlapped staging forced (tiny slots, tiny nvCOMP temp
budget: many sub-batches).

The same cases run through the kernel emulator in
tests/kernels/test_artifact_device.py (a subset; all with GTS_EMU_FULL=1).
"""

from __future__ import annotations

import pytest

from gtsamples.decode import gpu
from gtsamples.decode.gpu import transfers
from gtsamples.decode.gpu import nvcomp as nv
from gtsamples.decode.gpu.table import DeviceTable
from tests.conftest import assert_tables_equal
from tests.corruption.test_rules import written  # noqa: F401  (module fixture)
from tests.gpu import artifact_cases as A
from tests.gpu import scenarios as S


@pytest.fixture(scope="module")
def gpu_ready():
    if not gpu.is_gpu_available(require_nvcomp=False):
        pytest.skip("no usable CUDA device")
    try:
        nv.load_nvcomp()  # the artifacts hold Zstd chunks
    except nv.NvcompError as e:
        pytest.skip(f"libnvcomp not loadable: {e}")


def _cudf_available() -> bool:
    try:
        import cudf  # noqa: F401

        return True
    except Exception:
        return False


@pytest.fixture(params=["default", "overlap"])
def read_device(request, gpu_ready, monkeypatch):
    """``read_device(art, **kw) -> pyarrow.Table`` through the GPU; with cuDF,
    ``read(device="gpu")`` is compared with it too."""
    if request.param == "overlap":
        real = gpu.decode_batch_gpu

        def decode(batch, **kw):
            kw.setdefault("h2d", "overlap")
            kw.setdefault("temp_budget", 1 << 18)
            kw.setdefault("poison", S.POISON)
            return real(batch, **kw)

        monkeypatch.setattr(gpu, "decode_batch_gpu", decode)
        monkeypatch.setattr(transfers, "PINNED_SLOT_BYTES", 4096)
        monkeypatch.setattr(transfers, "MIN_SEGMENT_BYTES", 1)
    with_cudf = _cudf_available()

    def read(art, **kw):
        dt = art.read_device(**kw)
        assert isinstance(dt, DeviceTable)
        t = dt.to_arrow()
        if with_cudf:
            df = art.read(device="gpu", **kw)
            assert_tables_equal(df.to_arrow(), t)
        return t

    return read


def _vector_params():
    for vec in A.VECTORS:
        for qid, kw in A.vector_queries(vec):
            yield pytest.param(vec, kw, id=f"{vec.name}-{qid}")


@pytest.mark.parametrize("vec,kw", list(_vector_params()))
def test_vectors_equal_cpu(read_device, vec, kw):
    A.assert_same_read(A.open_case(vec), read_device, kw, vec.name)


@pytest.mark.parametrize("d", A.GOLDEN, ids=lambda p: p.name)
def test_golden_equal_cpu(read_device, d):
    art = A.open_case(d)
    for qid, kw in A.golden_queries(d):
        A.assert_same_read(art, read_device, kw, f"{d.name}:{qid}")


def test_nab_equals_cpu(gpu_ready, shared_dir, tmp_path):
    art, table = A.nab_artifact(shared_dir, tmp_path)
    read = lambda a, **kw: a.read_device(**kw).to_arrow()  # noqa: E731
    assert_tables_equal(read(art), table)
    for qid, kw in A.nab_queries(table):
        A.assert_same_read(art, read, kw, f"nab:{qid}")


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in A.decode_stage_cases()])
def test_corruption_same_error_as_cpu(gpu_ready, case, written, tmp_path):  # noqa: F811
    A.check_corruption_case(case, written, tmp_path, lambda a, **kw: a.read_device(**kw).to_arrow())


def test_overlapped_staging_on_device(gpu_ready, monkeypatch):
    """Pinned, overlapped H2D of a larger batch: many pieces through a small
    slot ring, many nvCOMP sub-batches, poisoned outputs, staged-copy timing."""
    monkeypatch.setattr(transfers, "PINNED_SLOT_BYTES", 64 << 10)
    monkeypatch.setattr(transfers, "PINNED_MAX_SLOTS", 3)
    monkeypatch.setattr(transfers, "MIN_SEGMENT_BYTES", 1)
    built = S.random_built(51, n_blocks=60, n_fields=4, max_rows=4000, compression="zstd")
    # host hashing: the copy overlaps nvCOMP (device hashing must see every byte before any frame goes to nvCOMP)
    dt = gpu.decode_batch_gpu(built.batch, h2d="overlap", hash_on="host", temp_budget=1 << 18, poison=S.POISON,
                              timings=True)
    S.assert_same(S.host_columns(dt), built.expected_trimmed)
    S.assert_same(S.host_columns(dt), S.cpu_columns(built.batch), "vs CPU backend:")
    assert "h2d_copy" in dt.timings
    for mode in ("pinned", "pageable"):
        S.check_parity(built, gpu.CupyDevice(), h2d=mode)
