"""The device the driver runs on: CuPy on the current CUDA device
(:class:`CupyDevice`: allocation, copies, kernels, nvCOMP, stage timers), and
whether one is usable here (:func:`is_gpu_available`)."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import numpy as np

from ... import runtime
from . import nvcomp as _nv
from .staging import HostBuffer, host_pool_for, staging_for
from .transfers import TransferPlan

# ----------------------------------------------------------------------------- availability


def is_gpu_available(require_nvcomp: bool = True) -> bool:
    """True when CuPy sees a CUDA device (and libnvcomp loads, by default).  False,
    without touching CUDA, in a child forked after this process's parent initialised it."""
    if runtime.cuda_forked():
        return False
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()  # initialises CUDA when a driver is there
        runtime.note_cuda()
        if count < 1:
            return False
    except Exception:
        return False
    if require_nvcomp:
        try:
            _nv.load_nvcomp()
        except Exception:
            return False
    return True


# ----------------------------------------------------------------------------- device driver


class _Timer:
    """CUDA events between stages (only when timings are requested), host stage
    times, and the time the calling thread spends blocked on the device."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.marks: list[tuple[str, Any]] = []
        self.host: dict[str, float] = {}
        self.spans: list[tuple[str, Any]] = []
        self.t0 = time.perf_counter()
        if enabled:
            self.mark("start")

    def mark(self, name: str) -> None:
        if self.enabled:
            import cupy as cp

            ev = cp.cuda.Event()
            ev.record()
            self.marks.append((name, ev))

    def span(self, name: str, start, end=None) -> None:
        """A stage timed by two events recorded elsewhere (e.g. on the copy
        stream); ``start`` may be a callable returning ``(start, end)`` or None
        once that work is done (a background copy)."""
        if self.enabled and start is not None:
            self.spans.append((name, start if callable(start) else (lambda: (start, end))))

    @contextlib.contextmanager
    def host_stage(self, name: str):
        t = time.perf_counter()
        try:
            yield
        finally:
            self.host[name] = self.host.get(name, 0.0) + (time.perf_counter() - t) * 1e3

    def result(self) -> dict[str, float]:
        if not self.enabled:
            return {}
        import cupy as cp

        self.marks[-1][1].synchronize()
        out = dict(("host_" + k, v) for k, v in self.host.items())
        out["wall"] = (time.perf_counter() - self.t0) * 1e3
        for (_, a), (name, b) in zip(self.marks, self.marks[1:]):
            out[name] = out.get(name, 0.0) + cp.cuda.get_elapsed_time(a, b)
        out["total_device"] = cp.cuda.get_elapsed_time(self.marks[0][1], self.marks[-1][1])
        for name, get in self.spans:
            ab = get()
            if ab is None or ab[0] is None or ab[1] is None:
                continue
            ab[1].synchronize()
            out[name] = out.get(name, 0.0) + cp.cuda.get_elapsed_time(*ab)
        return out


class _InFlight:
    """Objects kept alive until the device has passed an event (stream-ordered
    lifetimes for buffers an enqueued call still reads: nvCOMP's temp memory
    and tables).  Completed entries are dropped on every :meth:`add`."""

    def __init__(self):
        self.lock = threading.Lock()
        self.entries: list[tuple[Any, Any]] = []

    def add(self, event, objs) -> None:
        with self.lock:
            self.entries = [e for e in self.entries if not e[0].done]
            self.entries.append((event, objs))

    def __len__(self) -> int:
        with self.lock:
            return len(self.entries)


_IN_FLIGHT = _InFlight()


class CupyDevice:
    """What the driver needs from a device: CuPy on the current CUDA device.

    (A test double with the same methods runs the driver and the kernels on
    the host: tests/kernels/emu.)"""

    def __init__(self):
        runtime.check_cuda()
        import cupy

        runtime.note_cuda()
        self.cp = cupy

    def empty(self, n: int, dtype):
        return self.cp.empty(n, dtype=dtype)

    def zeros(self, n: int, dtype):
        return self.cp.zeros(n, dtype=dtype)

    def filled(self, n: int, dtype, byte: int):
        return self.cp.full(n * np.dtype(dtype).itemsize, byte & 0xFF, dtype=np.uint8).view(dtype)

    def upload(self, host: np.ndarray):
        return self.cp.asarray(host)

    def copy_in(self, dev, host: np.ndarray) -> None:
        dev.set(host)

    def to_host(self, dev) -> np.ndarray:
        return dev.get()

    @staticmethod
    def ptr(dev) -> int:
        return int(dev.data.ptr)

    def stream_ptr(self) -> int:
        return int(self.cp.cuda.get_current_stream().ptr)

    def keep_until_done(self, objs) -> None:
        """Hold ``objs`` until the current stream has completed the work enqueued so far."""
        ev = self.cp.cuda.Event(disable_timing=True)
        ev.record()
        _IN_FLIGHT.add(ev, objs)

    def kernel(self, file: str, name: str):
        from .nvrtc import get_kernel

        return get_kernel(file, name)

    def nvcomp(self) -> _nv.NvcompLib:
        """The loaded libnvcomp (:class:`gtsamples.decode.gpu.nvcomp.NvcompUnavailableError` without one)."""
        return _nv.load_nvcomp()

    def zstd_input_alignment(self) -> int:
        return self.nvcomp().alignment[0]

    def zstd_plan(self, declared: np.ndarray, temp_budget: int) -> list[tuple[int, int]]:
        """nvCOMP sub-batches for these declared sizes (host only)."""
        return _nv.BatchedZstdDecompressor(temp_budget=temp_budget, dev=self).plan(declared)

    def zstd(self, jobs: _nv.ZstdJobs, table, temp_budget: int, plan=None, before=None):
        """Enqueue nvCOMP over ``jobs``; ``(statuses, actual sizes)`` stay on the device.
        ``before(k)`` runs before sub-batch ``k`` of ``plan`` is enqueued."""
        return _nv.BatchedZstdDecompressor(temp_budget=temp_budget, dev=self).run(jobs, device_table=table, plan=plan,
                                                                                  before=before)  # fmt: skip

    def host_staging(self, nbytes: int) -> "HostBuffer | None":
        """A pooled page-locked host buffer of ``nbytes`` (a fetch lands there and
        is copied to the device without staging slots), or None when the batch is
        too large for the pool (:data:`PINNED_BATCH_MAX_BYTES`)."""
        return host_pool_for(self.cp).acquire(nbytes)

    def stage_h2d(self, dst, host: np.ndarray, tp: TransferPlan, timing: bool = False, arrivals=None):
        """Copy ``host`` into ``dst`` as ``tp`` says, on this device's copy
        stream, from a background thread: the call returns at once, while the
        host goes on planning.  Pinned slots are filled by several threads
        (``tp.direct``: straight from page-locked ``host``).  ``arrivals``
        (``wait(lo, hi)``): bytes still being fetched; each piece is copied once
        it has arrived.  Returns ``(events, span)``: :class:`SegmentEvents`
        (``events[k]`` blocks until segment ``k``'s copies are enqueued; the
        current stream then waits on it with :meth:`wait`) and, with
        ``timing``, a callable giving the ``(start, end)`` events of all copies."""
        events = staging_for(self.cp).copy(self.ptr(dst), host, tp, timing, arrivals=arrivals, background=True)
        return events, (events.timing_span if timing else None)

    def wait(self, event) -> None:
        """The current stream waits for ``event`` (a staged copy); no-op for None."""
        if event is not None:
            self.cp.cuda.get_current_stream().wait_event(event)

    def timer(self, enabled: bool) -> "_Timer":
        return _Timer(enabled)
