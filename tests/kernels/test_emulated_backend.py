"""The GPU backend's driver and every CUDA kernel, run on the host through the
kernel emulator (tests/kernels/emu_device.py): bit-for-bit parity with the
rows built and with the CPU backend, poisoned outputs, trimming, and the same
errors and flags as the CPU backend for every corruption case.

This is no substitute for tests/gpu on a device (timing, the memory model,
NVRTC and nvCOMP are not exercised), but it runs the kernels' real code."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gpu import scenarios as S
from tests.gpu.batchgen import build_batch

emu = pytest.importorskip("tests.kernels.emu_device")
if emu.compiler() is None:  # pragma: no cover
    pytest.skip("no C++ compiler for the kernel emulator", allow_module_level=True)


@pytest.fixture(scope="module")
def device():
    emu.load_library()
    return emu.EmuDevice()


@pytest.mark.parametrize("seed,compression", [(1, "mixed"), (2, "raw"), (3, "zstd")])
def test_parity_random_batches(device, seed, compression):
    S.check_parity(S.random_built(seed, n_blocks=4, n_fields=2, max_rows=300, compression=compression), device)


def test_parity_long_blocks_cross_tiles(device):
    # 8192-row blocks: many row tiles and several varint sweeps per chunk
    built = S.random_built(21, n_blocks=1, n_fields=1, max_rows=8192)
    S.check_parity(built, device)


def test_parity_when_nvcomp_wants_aligned_inputs():
    dev = emu.EmuDevice()
    dev.input_alignment = 8  # as an older libnvcomp might: frames get repacked
    S.check_parity(S.random_built(31, n_blocks=3, n_fields=1, compression="zstd"), dev)


def test_parity_without_sequence_and_op_type(device):
    S.check_parity(S.random_built(4, n_blocks=3, n_fields=1, want_sequence=False, want_op_type=False), device)


def test_device_hashing_equals_host_hashing(device):
    S.check_parity(S.random_built(5, n_blocks=3, n_fields=1), device, hash_on="device")


@pytest.mark.parametrize("where", ["inside", "start_only", "end_only", "nothing", "everything"])
def test_trimming(device, where):
    S.check_parity(S.trimmed_built(6, where), device)


def test_empty_batch(device):
    built = build_batch([], ("a",))
    dt = S.decode(built.batch, device)
    assert dt.num_rows == 0 and dt.names[-1] == "a"


@pytest.mark.parametrize("name,mutate", S.corruption_cases(), ids=[c[0] for c in S.corruption_cases()])
def test_corruption_same_error_as_cpu(device, name, mutate):
    S.check_same_error(S.corrupted_batch(name, mutate), device)


@pytest.mark.parametrize("name,corrupt", S.descriptor_cases(), ids=[c[0] for c in S.descriptor_cases()])
@pytest.mark.parametrize("hash_on", ["host", "device"])
def test_descriptor_corruption_same_error_as_cpu(device, name, corrupt, hash_on):
    b = S.descriptor_batch()
    corrupt(b)
    S.check_same_error(b, device, hash_on=hash_on)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    slot=st.sampled_from([0, 1, 2, 3]),
    payload=st.binary(min_size=0, max_size=60),
    tail=st.sampled_from([b"", b"\x80", b"\xff" * 10, b"\x01\x00"]),
    rows=st.integers(1, 40),
    enc_delta=st.integers(0, 1),
)
def test_fuzzed_chunk_bytes_same_result_as_cpu(device, slot, payload, tail, rows, enc_delta):
    """Arbitrary bytes in one chunk (checksum valid): both backends agree on
    rows or on error class and flags."""
    blocks = S.single_block(rows, rows, n_fields=1, nulls=True)

    def mutate(ci, s, raw):
        if s != slot:
            return raw
        head = raw[: [16, 8, 1, 1][slot] if enc_delta == 0 else [8, 8, 0, 1][slot]]
        return (head + payload + tail) or b"\0"

    S.check_same_error(build_batch(blocks, ("f",), mutate=mutate, compression="raw").batch, device)
