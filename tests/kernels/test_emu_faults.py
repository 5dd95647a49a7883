"""The kernel emulator faults as a GPU (and compute-sanitizer) would.

Each fault is committed by a test-only kernel (tests/kernels/emu/
emu_test_kernels.cuh) or by a gts kernel given bad tables, and must be
reported with what happened and where; controls that keep the rules must run
clean.  The emulated device's own checks (guard zones, outputs a launch must
write, writes outside them, tables naming freed memory) are proven with
sabotaged devices.  These run in every emulator build (``make
kernels-sanitize`` runs them under ASan and TSan too)."""

from __future__ import annotations

import ctypes
import gc
import struct

import numpy as np
import pytest

from gtsamples.decode import gpu
from tests.gpu import scenarios as S

emu = pytest.importorskip("tests.kernels.emu_device")
if emu.compiler() is None:  # pragma: no cover
    pytest.skip("no C++ compiler for the kernel emulator", allow_module_level=True)

u = np.uint32
FULL = 0xFFFFFFFF
OPS = ["__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync", "__ballot_sync", "__any_sync",
       "__all_sync", "__syncwarp"]  # fmt: skip


def fault_of(name, grid, block, *args) -> str:
    with pytest.raises(emu.EmuFault) as info:
        emu.launch(name, grid, block, args)
    return str(info.value)


def build() -> str:
    return emu.load_library().emu_build().decode()


# ----------------------------------------------------------------------------- misaligned accesses


@pytest.mark.parametrize("width", [2, 4, 8, 16])
@pytest.mark.parametrize("store", [0, 1], ids=["load", "store"])
def test_misaligned_typed_access_faults(width, store):
    buf = np.zeros(64, np.uint8)
    base = (-buf.ctypes.data) % 16  # a 16-byte-aligned start inside buf
    p = buf[base:]
    out = np.zeros(2, np.uint64)
    msg = fault_of("emu_test_access", (1,), (32,), p, p, u(width), u(store), u(1), out)
    assert msg.startswith("emu_test_access, block (0, 0), thread 0: misaligned address: "), msg
    assert ("store to" if store else "load of" if width < 16 else "member access within") in msg, msg
    assert f"needs {width}-byte alignment" in msg and "[emu_test_kernels.cuh:" in msg, msg
    # control: the same access aligned
    emu.launch("emu_test_access", (1,), (32,), (p, p, u(width), u(store), u(width), out))
    if store:
        want = {2: struct.pack("<H", 0x1234), 4: struct.pack("<I", 0x12345678),
                8: struct.pack("<Q", 0x1234567890ABCDEF), 16: struct.pack("<4I", 1, 2, 3, 4)}[width]  # fmt: skip
        assert p[width : 2 * width].tobytes() == want


def test_misaligned_atomic_faults():
    buf = np.zeros(32, np.uint8)
    p = buf[(-buf.ctypes.data) % 8 :]
    msg = fault_of("emu_test_atomic", (1,), (1,), p, u(2))
    assert "misaligned address: atomicOr of 4 bytes" in msg and "emu_test_kernels.cuh:" in msg, msg
    emu.launch("emu_test_atomic", (1,), (1,), (p, u(4)))
    assert p[4] == 1


def _ts_chunk(dst_addr: int, src: np.ndarray) -> np.ndarray:
    """One constant-step timestamp chunk (first 1000, step 3, 10 rows)."""
    d = np.zeros(1, gpu.CHUNK_DESC_DTYPE)
    d[0] = (src.ctypes.data, dst_addr, 0, 0, 1000, 1027, 16, 10, 0, 0, 1, 0, 0)
    return d


def test_gts_kernel_faults_on_a_misaligned_descriptor_table():
    src = np.frombuffer(struct.pack("<qq", 1000, 3), np.uint8).copy()
    col = np.zeros(10, np.int64)
    raw = np.zeros(2 * 72 + 16, np.uint8)
    at = (-raw.ctypes.data) % 8 + 4  # 4 bytes off an 8-byte boundary
    raw[at : at + 72] = _ts_chunk(col.ctypes.data, src).view(np.uint8)
    status, summary = np.zeros(1, np.uint32), np.zeros(2, np.uint64)
    msg = fault_of("gts_decode_timestamps", (1,), (256,), raw[at:], status, summary)
    assert "misaligned address" in msg and "GtsChunk" in msg and "needs 8-byte alignment" in msg, msg
    # control: the same table aligned decodes
    ok = (-raw.ctypes.data) % 8
    raw[ok : ok + 72] = _ts_chunk(col.ctypes.data, src).view(np.uint8)
    emu.launch("gts_decode_timestamps", (1,), (256,), (raw[ok:], status, summary))
    assert col.tolist() == list(range(1000, 1030, 3)) and status[0] == 0


def test_gts_kernel_faults_on_a_misaligned_output_column():
    src = np.frombuffer(struct.pack("<qq", 1000, 3), np.uint8).copy()
    col = np.zeros(12, np.int64)
    descs = _ts_chunk(col.ctypes.data + 4, src)
    msg = fault_of("gts_decode_timestamps", (1,), (256,), descs.view(np.uint8), np.zeros(1, u), np.zeros(2, np.uint64))
    assert "misaligned address: store to" in msg and "needs 8-byte alignment" in msg, msg
    assert "gts_timestamp.cuh:" in msg, msg


# ----------------------------------------------------------------------------- barriers


def test_barrier_some_threads_exited_before_faults():
    out = np.zeros(1, u)
    msg = fault_of("emu_test_partial_barrier", (1,), (256,), out, u(128))
    assert msg.startswith("emu_test_partial_barrier, block (0, 0), thread 0: __syncthreads() at emu_test_kernels.cuh:")
    assert "reached by 128 of 256 threads; threads 128-255 exited without reaching it" in msg, msg


def test_barrier_every_thread_reaches_runs_clean():
    out = np.zeros(1, u)
    emu.launch("emu_test_partial_barrier", (3,), (256,), (out, u(256)))
    assert out[0] == 3 * 256


@pytest.mark.parametrize("mode,what", [(0, "divergent __syncthreads()"), (1, "divergent __syncthreads()"),
                                       (2, "divergent __shfl_xor_sync")], ids=["if_else", "helper", "shuffle"])  # fmt: skip
def test_barrier_reached_at_different_calls_faults(mode, what):
    """Every live thread waits at *a* barrier, but not the same one: undefined
    on a GPU (synccheck), so a fault however the counts add up."""
    msg = fault_of("emu_test_divergent_barrier", (1,), (64,), np.zeros(1, u), u(mode))
    assert what in msg and "another call site or call path" in msg, msg


def test_same_barrier_in_a_loop_runs_clean():
    out = np.zeros(1, u)
    emu.launch("emu_test_divergent_barrier", (2,), (64,), (out, u(3)))
    assert out[0] == 2 * 64


# ----------------------------------------------------------------------------- warp intrinsics


@pytest.mark.parametrize("op", range(8), ids=OPS)
def test_warp_intrinsic_naming_exited_lanes_faults(op):
    out = np.zeros(64, u)
    msg = fault_of("emu_test_warp", (1,), (64,), out, u(op), u(FULL), u(16), u(0))
    assert f"{OPS[op]}(mask 0xffffffff) at emu_test_kernels.cuh:" in msg, msg
    assert "the mask names lanes 16-31, which exited" in msg, msg


@pytest.mark.parametrize("op", range(8), ids=OPS)
def test_warp_intrinsic_naming_inactive_lanes_faults(op):
    """Lanes 16-31 wait at __syncthreads while 0-15 wait at the intrinsic for them."""
    out = np.zeros(64, u)
    msg = fault_of("emu_test_warp", (1,), (64,), out, u(op), u(FULL), u(16), u(1))
    assert "deadlock: lane 0's " + OPS[op] + "(mask 0xffffffff)" in msg, msg
    assert "waits for lanes 16-31; lane 16 waits at __syncthreads() at emu_test_kernels.cuh:" in msg, msg


LANES = np.arange(32)
FULL_RESULTS = {
    0: np.full(32, 100),  # from lane 0
    1: np.where(LANES >= 1, 100 + LANES - 1, 100),  # up by 1
    2: np.where(LANES <= 30, 100 + LANES + 1, 131),  # down by 1
    3: 100 + (LANES ^ 1),  # xor 1
    4: np.full(32, 0xAAAAAAAA),  # ballot(lane odd)
    5: np.ones(32),  # any(lane == 1)
    6: np.ones(32),  # all(lane < 32)
    7: np.ones(32),  # __syncwarp
}


@pytest.mark.parametrize("op", range(8), ids=OPS)
def test_warp_intrinsic_full_warp_control(op):
    out = np.zeros(128, u)
    emu.launch("emu_test_warp", (2,), (64,), (out, u(op), u(FULL), u(32), u(0)))
    np.testing.assert_array_equal(out.reshape(4, 32), np.tile(FULL_RESULTS[op], (4, 1)))


@pytest.mark.parametrize("op", [0, 1, 3, 4, 5, 6, 7], ids=[OPS[i] for i in (0, 1, 3, 4, 5, 6, 7)])
def test_warp_intrinsic_mask_of_the_live_lanes_runs_clean(op):
    """Lanes 16-31 exited, lanes 0-15 name exactly themselves: legal."""
    out = np.zeros(64, u)
    emu.launch("emu_test_warp", (1,), (64,), (out, u(op), u(0xFFFF), u(16), u(0)))
    want = {4: np.full(16, 0xAAAA)}.get(op, FULL_RESULTS[op][:16])
    np.testing.assert_array_equal(out[:16], want)


def test_shuffle_from_a_lane_outside_the_mask_faults():
    out = np.zeros(64, u)
    msg = fault_of("emu_test_warp", (1,), (64,), out, u(2), u(0xFFFF), u(16), u(0))
    assert "__shfl_down_sync(mask 0x0000ffff)" in msg and "lane 15 reads lane 16, which is not in the mask" in msg


def test_mask_without_the_calling_lane_faults():
    out = np.zeros(64, u)
    msg = fault_of("emu_test_warp", (1,), (32,), out, u(0), u(0xFFFFFFFE), u(32), u(0))
    assert "thread 0: __shfl_sync(mask 0xfffffffe)" in msg and "does not name the calling lane 0" in msg, msg


def test_mask_naming_lanes_past_the_block_faults():
    out = np.zeros(64, u)
    msg = fault_of("emu_test_warp", (1,), (40,), out, u(4), u(FULL), u(32), u(0))
    assert "the mask names lanes 8-31, which do not exist (a block of 40 threads)" in msg, msg


def test_launch_after_a_fault_runs_clean():
    out = np.zeros(1, u)
    fault_of("emu_test_partial_barrier", (4,), (256,), out, u(100))
    out[0] = 0
    emu.launch("emu_test_partial_barrier", (4,), (256,), (out, u(256)))
    assert out[0] == 4 * 256


def test_invalid_launch_configuration_faults():
    assert "invalid launch configuration" in fault_of("emu_test_partial_barrier", (1,), (2048,), np.zeros(1, u), u(1))


def test_fault_is_logged_for_the_sanitizer_run(tmp_path, monkeypatch):
    log = tmp_path / "faults.log"
    monkeypatch.setenv("GTS_EMU_FAULT_LOG", str(log))
    fault_of("emu_test_partial_barrier", (1,), (64,), np.zeros(1, u), u(10))
    lines = log.read_text().splitlines()
    assert len(lines) == 1 and "exited without reaching it" in lines[0]


# ----------------------------------------------------------------------------- the device's own checks


def test_empty_device_memory_reads_as_uninitialized():
    dev = emu.EmuDevice()
    assert (dev.empty(33, np.uint64).view(np.uint8) == emu.UNINIT).all()
    assert dev.zeros(5, np.uint32).tolist() == [0] * 5
    a = dev.empty(3, np.uint8)
    assert a.ctypes.data % emu.ALIGN == 0


def test_write_past_an_allocation_is_reported():
    dev = emu.EmuDevice()
    src, dst, out = dev.zeros(8, np.uint8), dev.zeros(12, np.uint8), dev.zeros(2, np.uint64)
    with pytest.raises(emu.EmuFault) as info:  # 4 bytes at offset 12: just past the end
        dev.run_checked("emu_test_access", (1,), (32,), (src, dst, u(4), u(1), u(12), out))
    msg = str(info.value)
    if build() == "address":
        assert "AddressSanitizer: use-after-poison" in msg, msg
    else:
        assert "4 guard-zone bytes around allocation" in msg and "0 before it, 4 after it" in msg, msg


def test_tables_naming_freed_memory_are_reported():
    dev = emu.EmuDevice()
    gone = dev.empty(64, np.uint8)
    addr = gone.ctypes.data
    del gone
    gc.collect()
    src, dst, out = dev.zeros(8, np.uint8), dev.zeros(8, np.uint8), dev.zeros(2, np.uint64)
    with pytest.raises(emu.EmuFault, match="lies in no live allocation"):
        dev.run_checked("emu_test_access", (1,), (32,), (src, dst, u(4), u(1), u(0), out),
                        spec=([(addr, 8, 8, lambda: True)], []))  # fmt: skip


def test_launch_writing_outside_its_outputs_is_reported():
    dev = emu.EmuDevice()
    src, dst, out = dev.zeros(8, np.uint8), dev.zeros(16, np.uint8), dev.zeros(2, np.uint64)
    spec = ([(dst.ctypes.data + 8, 8, 8, lambda: True)], [(out.ctypes.data, 16)])
    with pytest.raises(emu.EmuFault) as info:  # writes dst[0:8], may write only dst[8:16]
        dev.run_checked("emu_test_access", (1,), (32,), (src, dst, u(8), u(1), u(0), out), spec=spec)
    assert "emu_test_access wrote 8 bytes outside its outputs, first at offset 0 of allocation" in str(info.value)


def test_launch_leaving_outputs_unwritten_is_reported():
    dev = emu.EmuDevice()
    src, dst, out = dev.zeros(8, np.uint8), dev.zeros(32, np.uint8), dev.zeros(2, np.uint64)
    spec = ([(dst.ctypes.data, 32, 8, lambda: True)], [(out.ctypes.data, 16)])
    with pytest.raises(emu.EmuFault) as info:  # writes element 1 of 4
        dev.run_checked("emu_test_access", (1,), (32,), (src, dst, u(8), u(1), u(8), out), spec=spec)
    assert "left 3 output elements of 8 bytes unwritten, first element 0 of allocation" in str(info.value)
    # an element whose written value happens to equal the fill is not a miss
    src[:] = emu.MUST_WRITE[0]
    spec = ([(out.ctypes.data, 8, 8, lambda: True)], [])
    dev.run_checked("emu_test_access", (1,), (32,), (src, dst, u(8), u(0), u(0), out), spec=spec)
    assert out[0] == int.from_bytes(bytes([emu.MUST_WRITE[0]]) * 8, "little")


def _decode(dev):
    # 12 blocks: a *_warp launch of 12 chunks has 2 CUDA blocks (GTS_WARPS chunks each), so one can be dropped
    built = S.random_built(7, n_blocks=12, n_fields=2, max_rows=200)
    return gpu.decode_batch_gpu(built.batch, _device=dev)


class _DropsLastBlock(emu.EmuDevice):
    """A timestamp launch that never runs its last block."""

    def _launch(self, name, grid, block, args):
        if name.startswith("gts_decode_timestamps"):
            grid = (grid[0] - 1, grid[1])
        super()._launch(name, grid, block, args)


class _StrayWrite(emu.EmuDevice):
    """Every sequence launch also flips a byte of the chunk descriptors."""

    def _launch(self, name, grid, block, args):
        super()._launch(name, grid, block, args)
        if name.startswith("gts_decode_sequences"):
            args[0][3] ^= 1


class _WritesPastAnAllocation(emu.EmuDevice):
    """The op-type launch also writes a byte past its column."""

    def _launch(self, name, grid, block, args):
        super()._launch(name, grid, block, args)
        if name.startswith("gts_decode_optypes"):
            col = max((a for a in self._live() if a.what.endswith("uint8") and a.nbytes), key=lambda a: a.nbytes)
            ctypes.memset(col.lo + col.nbytes, 0, 1)


# The batch's chunks (at most 200 rows) go to the warp kernels ("_warp") by default;
# WARP_MAX_ROWS 0 sends them to the block kernels ("").


@pytest.fixture
def kernel(request, monkeypatch):
    if request.param == "":
        monkeypatch.setattr(gpu.host_tables, "WARP_MAX_ROWS", 0)
    return request.param


@pytest.mark.parametrize("kernel", ["", "_warp"], indirect=True)
def test_decode_runs_clean_on_the_checked_device(kernel):
    dev = emu.EmuDevice()
    dt = _decode(dev)
    assert dt.num_rows > 0 and {e[0] for e in dev.launches} >= {"gts_decode_timestamps" + kernel,
                                                                "gts_decode_floats" + kernel}


@pytest.mark.parametrize("kernel", ["", "_warp"], indirect=True)
@pytest.mark.parametrize("device,message", [
    (_DropsLastBlock, "gts_decode_timestamps{} left"),
    (_StrayWrite, "gts_decode_sequences{} wrote 1 bytes outside its outputs"),
    (_WritesPastAnAllocation, "gts_decode_optypes{}: 1 guard-zone bytes around allocation"),
])  # fmt: skip
def test_sabotaged_decode_is_reported(device, message, kernel):
    if build() == "address" and device is _WritesPastAnAllocation:
        pytest.skip("ASan poisons the guard zones: the host's own stray write would be its report")
    with pytest.raises(emu.EmuFault, match=message.format(kernel)):
        _decode(device())
