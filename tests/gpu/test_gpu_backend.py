"""GPU backend on a real device (skipped without one; see conftest.py).

Parity with the CPU backend bit for bit (random batches, long blocks,
trimming, device hashing, tiny nvCOMP temp budgets), poisoned outputs, the same
error class and flags for every corruption case, the kernels compiled through
CuPy's RawModule, XXH64 on the device, nvCOMP on awkward frames, and the cuDF
view when cuDF is installed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gtsamples.decode import gpu
from gtsamples.decode.gpu import nvrtc as kernels
from gtsamples.decode.gpu import nvcomp as nv
from tests.gpu import scenarios as S
from tests.gpu.batchgen import build_batch, compress, xxh64


@pytest.fixture(scope="module")
def device():
    return gpu.CupyDevice()


@pytest.fixture(scope="module")
def nvcomp_lib():
    try:
        return nv.load_nvcomp()
    except nv.NvcompError as e:
        pytest.skip(f"libnvcomp not loadable: {e}")


@pytest.mark.parametrize("name", sorted(kernels.KERNEL_SOURCES))
def test_rawmodule_compiles_every_kernel(name):
    for fn in kernels.KERNEL_SOURCES[name]:
        assert kernels.get_kernel(name, fn) is not None


@pytest.mark.parametrize("seed", range(6))
def test_parity_random_batches(device, nvcomp_lib, seed):
    S.check_parity(S.random_built(seed, n_blocks=12, n_fields=3, max_rows=2000), device)


def test_parity_raw_only_needs_no_nvcomp(device):
    S.check_parity(S.random_built(7, n_blocks=6, n_fields=2, compression="raw"), device)


def test_parity_max_rows_blocks(device, nvcomp_lib):
    S.check_parity(S.random_built(8, n_blocks=3, n_fields=2, max_rows=8192), device)


def test_parity_many_fields(device, nvcomp_lib):
    S.check_parity(S.random_built(9, n_blocks=20, n_fields=64, max_rows=200), device)


@pytest.mark.parametrize("hash_on", ["host", "device"])
def test_parity_hashing(device, nvcomp_lib, hash_on):
    S.check_parity(S.random_built(10, n_blocks=10, n_fields=2, compression="zstd"), device, hash_on=hash_on)


def test_parity_tiny_temp_budget_splits_nvcomp_calls(device, nvcomp_lib):
    S.check_parity(S.random_built(11, n_blocks=30, n_fields=2, compression="zstd"), device, temp_budget=1 << 18)


@pytest.mark.parametrize("where", ["inside", "start_only", "end_only", "nothing", "everything"])
def test_trimming(device, nvcomp_lib, where):
    S.check_parity(S.trimmed_built(12, where), device)


def test_device_data_and_timings(cp, device, nvcomp_lib):
    built = S.random_built(13, n_blocks=5, n_fields=2)
    d = cp.zeros(len(built.batch.data) + gpu.HASH_PAD, dtype=cp.uint8)
    d[: len(built.batch.data)].set(built.batch.data)
    dt = gpu.decode_batch_gpu(built.batch, device_data=d, timings=True, hash_on="device")
    S.assert_same(S.host_columns(dt), built.expected_trimmed)
    assert {"decode", "nvcomp", "total_device"} <= set(dt.timings)


@pytest.mark.parametrize("name,mutate", S.corruption_cases(), ids=[c[0] for c in S.corruption_cases()])
@pytest.mark.parametrize("compression", ["raw", "zstd"])
def test_corruption_same_error_as_cpu(device, nvcomp_lib, name, mutate, compression):
    S.check_same_error(S.corrupted_batch(name, mutate, compression=compression), device)


@pytest.mark.parametrize("name,corrupt", S.descriptor_cases(), ids=[c[0] for c in S.descriptor_cases()])
@pytest.mark.parametrize("hash_on", ["host", "device"])
def test_descriptor_corruption_same_error_as_cpu(device, nvcomp_lib, name, corrupt, hash_on):
    b = S.descriptor_batch()
    corrupt(b)
    S.check_same_error(b, device, hash_on=hash_on)


@pytest.mark.parametrize("name,make,must", S.sequence_order_cases(), ids=[c[0] for c in S.sequence_order_cases()])
def test_sequence_order_same_flags_as_cpu(device, nvcomp_lib, name, make, must):
    batch = make()
    S.check_sequence_order_flags(batch, must)
    S.check_same_error(batch, device)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    slot=st.sampled_from([0, 1, 2, 3]),
    payload=st.binary(min_size=0, max_size=200),
    tail=st.sampled_from([b"", b"\x80", b"\xff" * 10, b"\x01\x00"]),
    rows=st.integers(1, 300),
    keep=st.integers(0, 16),
    comp=st.sampled_from(["raw", "zstd"]),
)
def test_fuzzed_chunk_bytes_same_result_as_cpu(device, nvcomp_lib, slot, payload, tail, rows, keep, comp):
    blocks = S.single_block(rows, rows, n_fields=1, nulls=True)

    def mutate(ci, s, raw):
        return (raw[:keep] + payload + tail) or b"\0" if s == slot else raw

    S.check_same_error(build_batch(blocks, ("f",), mutate=mutate, compression=comp).batch, device)


def test_xxh64_kernel_matches_xxhash(cp, device):
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, 300_000, dtype=np.uint8)
    lens = rng.integers(0, 5000, 200)
    offs = rng.integers(0, len(data) - 5000, 200)
    jobs = np.zeros(len(lens), gpu.HASH_JOB_DTYPE)
    d = cp.zeros(len(data) + gpu.HASH_PAD, cp.uint8)
    d[: len(data)].set(data)
    good = np.array([xxh64(data[o : o + n].tobytes()) for o, n in zip(offs, lens)], np.uint64)
    jobs["src"] = int(d.data.ptr) + offs.astype(np.uint64)
    jobs["len"] = lens
    jobs["chunk"] = np.arange(len(lens))
    jobs["on_mismatch"] = 1
    jobs["expected"] = good
    jobs["expected"][::7] ^= 1
    status = cp.zeros(len(lens), cp.uint32)
    summary = cp.zeros(2, cp.uint64)
    k = kernels.get_kernel("gts_xxh64.cu", "gts_xxh64")
    k(((4 * len(lens) + 255) // 256,), (256,), (cp.asarray(jobs.view(np.uint8)), np.uint32(len(lens)), status, summary))
    want = np.zeros(len(lens), np.uint32)
    want[::7] = 1
    np.testing.assert_array_equal(status.get(), want)


def test_nvcomp_awkward_frames_and_status_folding(cp, device, nvcomp_lib):
    raw = [bytes(range(256)) * 40, b"x" * 70000, np.random.default_rng(1).bytes(5000), b"\0"]
    frames = [compress(raw[0]), compress(raw[1], write_checksum=True), compress(raw[2], write_content_size=False),
              compress(raw[3], level=19)]  # fmt: skip
    blob = b"".join(frames)
    offs = np.cumsum([0] + [len(f) for f in frames[:-1]]).astype(np.uint64)
    d_in = cp.asarray(np.frombuffer(blob, np.uint8))
    caps = np.array([len(r) for r in raw], np.uint64)
    dst_off, total = nv.aligned_offsets(caps, 16)
    d_out = cp.zeros(total, cp.uint8)
    jobs = nv.ZstdJobs(int(d_in.data.ptr) + offs, np.array([len(f) for f in frames], np.uint64),
                       int(d_out.data.ptr) + dst_off, caps, np.arange(4, dtype=np.uint64))  # fmt: skip
    st_, actual = nv.BatchedZstdDecompressor(nvcomp_lib, dev=device).run(jobs)
    cp.cuda.get_current_stream().synchronize()
    assert nv.result_flags(st_.get(), actual.get(), caps).tolist() == [0, 0, 0, 0]
    out = d_out.get()
    for r, o in zip(raw, dst_off):
        assert out[int(o) : int(o) + len(r)].tobytes() == r


def test_cudf_view_without_copy(device, nvcomp_lib):
    cudf = pytest.importorskip("cudf")
    built = S.random_built(14, n_blocks=4, n_fields=2)
    dt = gpu.decode_batch_gpu(built.batch)
    df = dt.to_cudf()
    assert list(df.columns) == dt.names and len(df) == dt.num_rows
    assert int(df["f0"].null_count) == dt["f0"].null_count
    assert df["__tsid"].values.data.ptr == dt["__tsid"].data.data.ptr  # same buffer
    t = dt.to_arrow()
    assert df.to_arrow().equals(t) or df.to_pandas().equals(t.to_pandas())
    del cudf
