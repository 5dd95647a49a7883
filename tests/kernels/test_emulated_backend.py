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


# ----------------------------------------------------------------------------- staged / overlapped H2D
# The emulator defers staged copies until the driver waits for them (the bytes
# read as 0xCC until then), so these fail if nvCOMP or a kernel could read
# stored bytes before their copy was waited for.

from gtsamples.decode.gpu import transfers  # noqa: E402

_SMALL_BUDGET = 300_000  # a few chunks per emulated nvCOMP sub-batch


@pytest.fixture
def tiny_slots(monkeypatch):
    monkeypatch.setattr(transfers, "PINNED_SLOT_BYTES", 700)
    monkeypatch.setattr(transfers, "PINNED_MAX_SLOTS", 2)
    monkeypatch.setattr(transfers, "MIN_SEGMENT_BYTES", 1)


def _zstd_built(seed=41):
    return S.random_built(seed, n_blocks=10, n_fields=2, max_rows=200, compression="zstd")


def test_overlapped_h2d_parity_and_order(tiny_slots):
    dev = emu.EmuDevice()
    S.check_parity(_zstd_built(), dev, h2d="overlap", hash_on="host", temp_budget=_SMALL_BUDGET)
    zstd = [e for e in dev.log if e[0] == "zstd"]
    copies = [e for e in dev.log if e[0] == "copy"]
    assert len(zstd) >= 2 and len(copies) >= 2, dev.log
    # every copy is enqueued before nvCOMP starts; sub-batch 0 runs before the last segment is waited for
    assert dev.log.index(copies[-1]) < dev.log.index(zstd[0])
    last_wait = max(i for i, e in enumerate(dev.log) if e[0] == "wait")
    assert dev.log.index(zstd[0]) < last_wait
    assert dev.unwaited() == 0


@pytest.mark.parametrize("mode", ["pinned", "pageable"])
def test_h2d_modes_parity(tiny_slots, mode):
    dev = emu.EmuDevice()
    S.check_parity(_zstd_built(42), dev, h2d=mode, temp_budget=_SMALL_BUDGET)
    assert dev.unwaited() == 0
    if mode == "pageable":
        assert not any(e[0] == "copy" for e in dev.log)
    else:
        assert [e[0] for e in dev.log].count("copy") == 1  # one segment, several pieces


def test_overlap_is_off_with_device_hashing(tiny_slots):
    dev = emu.EmuDevice()
    S.check_parity(_zstd_built(43), dev, h2d="overlap", hash_on="device", temp_budget=_SMALL_BUDGET)
    kinds = [e[0] for e in dev.log]
    assert kinds.count("copy") == 1 and kinds.index("wait") < kinds.index("zstd")


def test_overlapped_h2d_corruption_same_error(tiny_slots):
    b = _zstd_built(44).batch
    i = int(np.flatnonzero(b.chunks["compression"] == 1)[-1])
    b.chunks["decoded_len"][i] += 1  # a frame whose content size disagrees, in the last sub-batch
    S.check_same_error(b, emu.EmuDevice(), h2d="overlap", hash_on="host", temp_budget=_SMALL_BUDGET)


class _NoWaitDevice(emu.EmuDevice):
    def wait(self, event):  # a driver that never waits: the copies never land
        pass


def test_staged_bytes_are_missing_until_waited_for(tiny_slots):
    """Control: without the waits the emulated decode cannot succeed."""
    with pytest.raises(Exception):
        S.check_parity(_zstd_built(45), _NoWaitDevice(), h2d="overlap", hash_on="host", temp_budget=_SMALL_BUDGET)


@pytest.mark.parametrize("name,make,must", S.sequence_order_cases(), ids=[c[0] for c in S.sequence_order_cases()])
def test_sequence_order_same_flags_as_cpu(device, name, make, must):
    batch = make()
    S.check_sequence_order_flags(batch, must)
    S.check_same_error(batch, device)
