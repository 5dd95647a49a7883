"""gtsamples.runtime: what a forked child inherits, and native resources created once.

Forking tests fork this (pytest) process with ``os.fork`` and check the child through its
exit status (the child never returns into pytest: ``os._exit``); a child that would hang
is killed after a timeout and fails the test.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import types

import numba
import numpy as np
import pytest

from gtsamples import buffers, runtime, threadpools
from gtsamples.errors import UnsupportedError
from gtsamples.format import libzstd

from .concurrency.threads import barrier_threads, held_by_a_thread, in_child

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX only")


# ----------------------------------------------------------------------------- fork hooks
def test_thread_pool_used_before_fork_works_in_the_child():
    """The parent's pool threads do not exist in a child: it makes its own pool."""
    pool = threadpools.LazyThreadPool("test-fork", 2)
    assert pool.get().submit(lambda: 1).result() == 1
    in_child(lambda: pool.executor is None and pool.get().submit(lambda: 41 + 1).result(timeout=20) == 42)
    assert pool.get().submit(lambda: 2).result() == 2  # the parent's pool is untouched


def test_lock_held_by_another_thread_at_fork_is_free_in_the_child():
    lock = runtime.ForkSafeLock()
    with held_by_a_thread(lock):
        in_child(lambda: lock.acquire(timeout=10))


def test_numba_compiler_lock_is_not_inherited_held():
    """A thread compiling at the fork holds numba's compiler lock; the fork waits for it, so
    the child can compile (without the hook it would wait forever on a lock of a dead thread)."""
    from numba.core.compiler_lock import global_compiler_lock

    def child():
        f = numba.njit(lambda x: x + 1)
        return f(1) == 2

    with held_by_a_thread(global_compiler_lock, hold_s=0.3):
        in_child(child)


def test_recycled_buffers_are_forgotten_in_the_child():
    a = buffers.pool_array(1 << 20, np.uint8)
    del a
    in_child(lambda: buffers.retained_bytes() == 0)


def test_forked_flag():
    assert not runtime.forked()
    in_child(runtime.forked)


# ----------------------------------------------------------------------------- prange gate
def _sum(a):
    s = 0.0
    for i in numba.prange(a.shape[0]):
        s += a[i]
    return s


_psum = numba.njit(parallel=True)(_sum)


def test_gate_after_fork_from_gnu_openmp_runs_serial_twins():
    g = runtime.PrangeGate()
    g.after_fork_in_child("omp")
    if runtime._omp_vendor() == "Intel":  # pragma: no cover - Intel's OpenMP is fork-safe
        assert g.allowed
        return
    assert not g.allowed
    assert g.call(_psum, np.arange(10.0)) == 45.0  # the serial twin
    assert g.serial(_psum) is g.serial(_psum)  # compiled once
    for layer in ("tbb", "workqueue"):
        g = runtime.PrangeGate()
        g.after_fork_in_child(layer)
        assert g.allowed


def test_process_gate_in_a_child_forked_after_a_parallel_kernel():
    """This process ran a parallel kernel (whatever its layer): the child's gate says whether
    it may run one, and the call works either way (GNU OpenMP would kill the child)."""
    _psum(np.ones(4))
    layer = numba.threading_layer()

    def child():
        if layer == "omp" and runtime._omp_vendor() != "Intel":
            assert not runtime.PRANGE.allowed
        return runtime.PRANGE.call(_psum, np.ones(8)) == 8.0

    in_child(child)


@pytest.mark.parametrize("layer,alone", [("workqueue", True), (None, True), ("tbb", False), ("omp", False)])
def test_gate_turns(layer, alone):
    """One parallel kernel at a time under workqueue (or before numba picked a layer)."""
    g = runtime.PrangeGate()
    g.layer = layer
    g.learn = lambda: layer  # as numba would say
    active, peak, lock = [0], [0], threading.Lock()
    barrier = threading.Barrier(4)

    def work():
        barrier.wait()
        with g.turn():
            with lock:
                active[0] += 1
                peak[0] = max(peak[0], active[0])
            time.sleep(0.05)
            with lock:
                active[0] -= 1

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert (peak[0] == 1) == alone


# ----------------------------------------------------------------------------- CUDA across fork
def test_gpu_in_a_child_forked_after_cuda_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(runtime, "_CUDA_PID", os.getpid())  # as if this process had initialised CUDA
    assert not runtime.cuda_forked()
    runtime.check_cuda()  # the parent itself may use it

    def child():
        from gtsamples import backends

        assert runtime.cuda_forked()
        for check in (runtime.check_cuda, lambda: backends.GPU.require(cudf=False),
                      lambda: backends.GPU.require(cudf=True)):
            with pytest.raises(UnsupportedError, match="spawn"):
                check()
        try:
            from gtsamples.decode.gpu import device
        except ImportError:  # pragma: no cover - without the gpu module
            return True
        return device.is_gpu_available() is False  # and device="auto" falls back to the CPU

    in_child(child)


# ----------------------------------------------------------------------------- created once
def _race(n: int, fn) -> list:
    return barrier_threads(n, lambda k: fn())


def test_libzstd_concurrent_first_calls_load_one_library(monkeypatch):
    """Concurrent first calls got one library each (an lru_cache does not lock); the losers
    were collected, freeing contexts kernels still used (SIGSEGV, glibc aborts)."""
    made = []
    init = libzstd.LibZstd.__init__

    def slow_init(self, lib, path):
        made.append(self)
        time.sleep(0.05)  # widen the window a racing first call would fall into
        init(self, lib, path)

    monkeypatch.setattr(libzstd.LibZstd, "__init__", slow_init)
    monkeypatch.setattr(libzstd, "_LIBS", {})  # a fresh search (the process's library stays in the old dict)
    libs = _race(8, libzstd.get)
    if libs[0] is None:
        pytest.skip("no libzstd loads here")
    assert len(made) == 1, f"{len(made)} libraries loaded by 8 concurrent first calls"
    assert all(z is libs[0] for z in libs)


def test_nvcomp_library_is_loaded_once(monkeypatch):
    from gtsamples.decode.gpu import nvcomp

    made = []

    class FakeLib:
        def __init__(self):
            made.append(self)
            time.sleep(0.05)

    monkeypatch.setattr(nvcomp, "NvcompLib", FakeLib)
    monkeypatch.setattr(nvcomp, "_LIB", None)
    libs = _race(8, nvcomp.load_nvcomp)
    assert len(made) == 1 and all(x is made[0] for x in libs)


def test_kernel_modules_are_compiled_once_per_key(monkeypatch):
    """NVRTC modules (CuPy RawModules) live in one dict, made once under a lock: a second
    module of the same key would be dropped (unloaded) while its kernels may run."""
    from gtsamples.decode.gpu import nvrtc as kernels

    made = []

    class RawModule:
        def __init__(self, code, options):
            made.append(self)
            time.sleep(0.05)

    fake = types.SimpleNamespace(RawModule=RawModule,
                                 cuda=types.SimpleNamespace(Device=lambda: types.SimpleNamespace(id=0)))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(kernels, "_modules", {})
    name = sorted(p.name for p in kernels.kernel_dir().glob("*.cu"))[0]
    mods = _race(8, lambda: kernels.get_module(name))
    assert len(made) == 1 and all(m is made[0] for m in mods)
