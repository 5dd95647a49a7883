"""One warp per short chunk (kernels/gts_warp.cuh, the gts_decode_*_warp kernels), on the
kernel emulator: the driver's routing by rows, and parity with the CPU backend -- rows,
flags and error class -- on both sides of the routing limit and with every chunk sent to
the block kernels (``WARP_MAX_ROWS = 0``), so both kernels of each kind stay covered."""

from __future__ import annotations

import numpy as np
import pytest

from gtsamples.decode import gpu
from gtsamples.decode.gpu import nvcomp as nv
from tests.gpu import scenarios as S
from tests.gpu.batchgen import BlockSpec, build_batch

emu = pytest.importorskip("tests.kernels.emu_device")
if emu.compiler() is None:  # pragma: no cover
    pytest.skip("no C++ compiler for the kernel emulator", allow_module_level=True)

BLOCK_KERNELS = {"gts_decode_timestamps", "gts_decode_sequences", "gts_decode_optypes", "gts_decode_floats"}
WARP_KERNELS = {k + "_warp" for k in BLOCK_KERNELS}


@pytest.fixture(scope="module", autouse=True)
def library():
    emu.load_library()


def launched(dev) -> set[str]:
    return {e[0] for e in dev.launches}


def blocks_of(rows_list, seed=3, n_fields=2, nulls=True):
    """One series per block, the given row counts, awkward values (S.single_block's)."""
    out = []
    for k, rows in enumerate(rows_list):
        b = S.single_block(seed + k, rows, n_fields=n_fields, nulls=nulls)[0]
        seq = np.sort(b.seq)[::-1].copy()  # nonincreasing: the order rule holds on equal timestamps
        out.append(BlockSpec(1, 100 + k, b.ts, seq, b.ops, b.fields))
    return out


def test_short_chunks_go_one_per_warp():
    dev = emu.EmuDevice()
    S.check_parity(S.random_built(1, n_blocks=11, n_fields=2, max_rows=300), dev)  # 11: a partial last block
    assert launched(dev) & (BLOCK_KERNELS | WARP_KERNELS) == WARP_KERNELS


def test_long_chunks_go_one_per_block():
    dev = emu.EmuDevice()
    S.check_parity(build_batch(blocks_of([1025, 3000]), ("a", "b")), dev)
    assert launched(dev) & (BLOCK_KERNELS | WARP_KERNELS) == BLOCK_KERNELS


@pytest.mark.parametrize("nulls", [True, False])
def test_both_sides_of_the_limit_in_one_batch(nulls):
    """1,024 rows: 32 validity words, one per lane; 1,025: the block kernels."""
    dev = emu.EmuDevice()
    rows = [1, 31, 32, 33, 1024, 1025, 255, 256, 257, 1023, 64]
    S.check_parity(build_batch(blocks_of(rows, nulls=nulls), ("a", "b"), compression="raw"), dev)
    assert launched(dev) >= BLOCK_KERNELS | WARP_KERNELS


def test_host_plan_puts_warp_chunks_first_in_each_kind():
    b = build_batch(blocks_of([40, 2000, 7, 1024, 1025, 300]), ("a", "b")).batch
    plan = gpu.build_host_plan(b, nv.precheck(b.chunks, b.data))
    rows = b.blocks["rows"][plan.desc_block]
    for (a, z), m in zip(plan.kind_ranges, plan.warp_ends):
        assert a <= m <= z
        assert (rows[a:m] <= gpu.host_plan.WARP_MAX_ROWS).all() and (rows[m:z] > gpu.host_plan.WARP_MAX_ROWS).all()
        for lo, hi in ((a, m), (m, z)):  # file order within each
            key = plan.desc_block[lo:hi] * b.n_slots + plan.desc_slot[lo:hi]
            assert (np.diff(key) > 0).all()
    assert [m - a for (a, _), m in zip(plan.kind_ranges, plan.warp_ends)] == [4, 4, 4, 8]


@pytest.mark.parametrize("limit", [0, 64, gpu.GTS_WARP_MAX_ROWS])
@pytest.mark.parametrize("seed,compression", [(2, "mixed"), (3, "raw"), (4, "zstd")])
def test_parity_at_each_routing_limit(monkeypatch, limit, seed, compression):
    monkeypatch.setattr(gpu.host_plan, "WARP_MAX_ROWS", limit)
    dev = emu.EmuDevice()
    S.check_parity(S.random_built(seed, n_blocks=9, n_fields=2, max_rows=200, compression=compression), dev)
    assert bool(launched(dev) & WARP_KERNELS) == (limit > 0)


@pytest.mark.parametrize("limit", [0, gpu.GTS_WARP_MAX_ROWS], ids=["block", "warp"])
@pytest.mark.parametrize("name,mutate", S.corruption_cases(), ids=[c[0] for c in S.corruption_cases()])
def test_corruption_same_error_as_cpu_on_either_kernel(monkeypatch, limit, name, mutate):
    monkeypatch.setattr(gpu.host_plan, "WARP_MAX_ROWS", limit)
    S.check_same_error(S.corrupted_batch(name, mutate), emu.EmuDevice())


@pytest.mark.parametrize("limit", [0, gpu.GTS_WARP_MAX_ROWS], ids=["block", "warp"])
@pytest.mark.parametrize("name,corrupt", S.descriptor_cases(), ids=[c[0] for c in S.descriptor_cases()])
def test_descriptor_corruption_same_error_as_cpu_on_either_kernel(monkeypatch, limit, name, corrupt):
    monkeypatch.setattr(gpu.host_plan, "WARP_MAX_ROWS", limit)
    b = S.descriptor_batch()
    corrupt(b)
    S.check_same_error(b, emu.EmuDevice())


def test_fuzzed_chunk_bytes_same_result_as_cpu_on_the_block_kernels(monkeypatch):
    """test_emulated_backend's fuzz case (chunks of 1-40 rows: the warp kernels) with
    every chunk sent to the block kernels."""
    from tests.kernels import test_emulated_backend

    monkeypatch.setattr(gpu.host_plan, "WARP_MAX_ROWS", 0)
    test_emulated_backend.test_fuzzed_chunk_bytes_same_result_as_cpu(emu.EmuDevice())


def test_every_varint_length_in_one_group():
    """Values whose XOR deltas take 1 to 10 bytes, nulls between them, so a lane's varint
    starts in an earlier 32-byte window than it ends and groups span many windows."""
    rng = np.random.default_rng(7)
    n = 700
    bits = np.zeros(n, np.uint64)
    for i in range(1, n):
        width = int(rng.integers(0, 65))
        flip = np.uint64((1 << width) - 1 if width < 64 else (1 << 64) - 1) if width else np.uint64(0)
        bits[i] = bits[i - 1] ^ (flip & np.uint64(int(rng.integers(0, 1 << 63)) * 2 + 1))
    valid = rng.random(n) < 0.8
    ts = np.arange(n, dtype=np.int64) * 1000 + (rng.integers(0, 7, n) ** 9)  # 1- to 10-byte delta differences
    ts = np.maximum.accumulate(ts)
    seq = np.sort(rng.integers(0, 1 << 64, n, dtype=np.uint64, endpoint=False))[::-1].copy()
    blk = BlockSpec(3, 9, ts, seq, np.ones(n, np.uint8), [(bits.view(np.float64), valid)])
    dev = emu.EmuDevice()
    S.check_parity(build_batch([blk], ("v",), compression="raw"), dev)
    assert launched(dev) & (BLOCK_KERNELS | WARP_KERNELS) == WARP_KERNELS
