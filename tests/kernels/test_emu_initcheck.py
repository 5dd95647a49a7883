"""The initcheck build of the emulator (tests/kernels/emu/emu_initcheck.h):
loads of shared memory no thread of the block wrote, and of `empty` device
memory that neither a kernel nor the host wrote, are faults.  ``make
kernels-sanitize`` runs this file in that build (GTS_EMU_SANITIZER=initcheck);
other builds skip it.  Row ownership is proven by plant 11
(tests/kernels/plants/)."""

from __future__ import annotations

import numpy as np
import pytest

emu = pytest.importorskip("tests.kernels.emu_device")
pytestmark = pytest.mark.skipif(emu.build_kind() != "initcheck", reason="needs GTS_EMU_SANITIZER=initcheck")

u = np.uint32


def fault_of(name, grid, block, *args) -> str:
    with pytest.raises(emu.EmuFault) as info:
        emu.launch(name, grid, block, args)
    return str(info.value)


def test_shared_word_no_thread_wrote_faults_in_every_launch():
    out = np.zeros(4 * 64, u)
    emu.launch("emu_test_shared_uninit", (4,), (64,), (out, u(64)))  # control: every word written
    assert (out.reshape(4, 64) == np.arange(1, 65)).all()
    # the word thread 5 skips holds the last block's value: stale, not written by this block
    for _ in range(2):
        msg = fault_of("emu_test_shared_uninit", (4,), (64,), out, u(5))
        assert "thread 5: uninitialised shared memory: load of 4 bytes" in msg, msg
        assert "[emu_test_kernels.cuh:" in msg, msg  # the load's source line (addr2line)


def test_empty_device_memory_read_before_written_faults():
    dev = emu.EmuDevice()
    a = dev.empty(16, u)
    out = np.zeros(1, u)
    msg = fault_of("emu_test_read_past", (1,), (32,), a, u(3), out)
    assert "uninitialised global memory: load of 4 bytes" in msg and "(offset 12)" in msg, msg
    a[8:] = 7  # an assignment (a device fill on a GPU) writes
    emu.launch("emu_test_read_past", (1,), (32,), (a, u(8), out))
    assert out[0] == 7
    assert "uninitialised global memory" in fault_of("emu_test_read_past", (1,), (32,), a, u(7), out)
    dev.copy_in(a[:8], np.arange(8, dtype=u))  # and so does a copy
    emu.launch("emu_test_read_past", (1,), (32,), (a, u(7), out))
    assert out[0] == 7


def test_zeros_and_uploads_count_as_written():
    dev = emu.EmuDevice()
    out = np.zeros(1, u)
    for a in (dev.zeros(4, u), dev.upload(np.arange(4, dtype=u)), dev.filled(4, u, 0xAB)):
        emu.launch("emu_test_read_past", (1,), (32,), (a, u(3), out))
