"""Page-locked host memory per device: the ring of pinned staging slots that
copies the stored bytes to the device in segments (:class:`PinnedStaging`), and
the pool of whole-batch buffers a fetch lands in (:class:`PinnedHostPool`)."""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ...runtime import ForkSafeLock
from ...threadpools import LazyThreadPool
from .transfers import PINNED_BATCH_MAX_BYTES, PINNED_POOL_MAX_BYTES, TransferPlan


class SegmentEvents:
    """The per-segment events of one staged copy, recorded as the copy
    proceeds (on a background thread): ``events[k]`` blocks until segment
    ``k``'s last piece has been enqueued and returns its event; it raises what
    stopped the copy (e.g. a failed fetch).  ``join`` waits for the copy's host
    work to end; ``last_recorded`` is the event of the last piece enqueued."""

    def __init__(self, n: int):
        self._events: list[Any] = [None] * n
        self._set = [False] * n
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self._finished = False
        self.last_recorded = None
        self.span: tuple[Any, Any] | None = None

    def __len__(self) -> int:
        return len(self._events)

    def set(self, k: int, event) -> None:
        with self._cond:
            self._events[k] = event
            self._set[k] = True
            self._cond.notify_all()

    def recorded(self, event) -> None:
        self.last_recorded = event

    def finish(self, error: BaseException | None = None) -> None:
        with self._cond:
            if error is not None and self._error is None:
                self._error = error
            self._finished = True
            self._cond.notify_all()

    def __getitem__(self, k: int):
        k = k + len(self._events) if k < 0 else k
        with self._cond:
            while not self._set[k] and self._error is None and not self._finished:
                self._cond.wait()
            if not self._set[k]:
                raise self._error if self._error is not None else RuntimeError(f"segment {k} was never copied")
            return self._events[k]

    def join(self) -> None:
        with self._cond:
            while not self._finished:
                self._cond.wait()

    def timing_span(self):
        self.join()
        return self.span


class _Slot:
    __slots__ = ("mem", "arr", "event")

    def __init__(self, mem, arr):
        self.mem, self.arr, self.event = mem, arr, None


class PinnedStaging:
    """Page-locked staging for host -> device copies, one per device.

    A bounded ring of pinned slots (``TransferPlan.n_slots`` of
    ``TransferPlan.slot_bytes``, at most :data:`PINNED_MAX_SLOTS` x
    :data:`PINNED_SLOT_BYTES`), reused across calls and threads.  Piece ``i``
    goes through slot ``i % n_slots``: a filler thread waits for the piece's
    bytes (``arrivals``) and for the event of the copy that last read that slot,
    and copies the bytes in (numpy memcpy, without the GIL); up to ``n_slots``
    slots fill at once on as many threads.  The coordinating thread enqueues
    ``cudaMemcpyAsync`` of the filled slots in order on a non-blocking copy
    stream, so filling overlaps the DMA of earlier pieces, and both overlap
    kernels on the compute stream.  Plans with ``direct`` copy straight from
    the (page-locked) host bytes.  Before its first copy the copy stream waits
    for the compute stream (the destination may be memory that stream just
    freed).
    """

    def __init__(self, cp):
        self.cp = cp
        self.lock = threading.Lock()
        self.slots: list[_Slot | None] = []
        self.stream = cp.cuda.Stream(non_blocking=True)
        #: Threads filling the slots, owned by this staging ring (one per device, for the process).
        self._fillers = LazyThreadPool("gts-pinned-fill", 2)
        self._device_id = _device_id(cp)

    def _slot(self, k: int, nbytes: int) -> _Slot:
        while len(self.slots) <= k:
            self.slots.append(None)
        s = self.slots[k]
        if s is None or s.arr.size < nbytes:
            if s is not None and s.event is not None:
                s.event.synchronize()
            mem = self.cp.cuda.alloc_pinned_memory(nbytes)
            s = _Slot(mem, np.frombuffer(mem, np.uint8, nbytes))
            self.slots[k] = s
        return s

    def _pool(self, n: int) -> ThreadPoolExecutor:
        return self._fillers.get(max(n, 2))

    @staticmethod
    def _fill(arr: np.ndarray, host: np.ndarray, lo: int, hi: int, prev_event, arrivals) -> None:
        if arrivals is not None:
            arrivals.wait(lo, hi)
        if prev_event is not None:
            prev_event.synchronize()  # the DMA that last read this slot is done
        arr[: hi - lo] = host[lo:hi]

    def copy(self, dst_ptr: int, host: np.ndarray, tp: TransferPlan, timing: bool = False, *, arrivals=None,
             background: bool = False) -> "SegmentEvents | tuple[list, Any]":  # fmt: skip
        """Enqueue the copies of ``tp``.  ``background``: on a helper thread,
        returning :class:`SegmentEvents` at once; else when every copy is
        enqueued, returning ``(events, span)`` (lists of CUDA events)."""
        cp = self.cp
        host = np.ascontiguousarray(host, dtype=np.uint8).reshape(-1)
        events = SegmentEvents(len(tp.segments))
        ready = cp.cuda.Event(disable_timing=True)
        ready.record(cp.cuda.get_current_stream())  # on the caller's (compute) stream
        if background:
            t = threading.Thread(target=self._run, args=(dst_ptr, host, tp, timing, arrivals, ready, events),
                                 name="gts-h2d", daemon=True)  # fmt: skip
            t.start()
            return events
        self._run(dst_ptr, host, tp, timing, arrivals, ready, events)
        return [events[k] for k in range(len(events))], events.span

    def _run(self, dst_ptr, host, tp, timing, arrivals, ready, events: SegmentEvents) -> None:
        cp = self.cp
        rt = cp.cuda.runtime
        error = None
        with self.lock, _on_device(cp, self._device_id):
            pending: dict[int, Any] = {}
            try:
                self.stream.wait_event(ready)
                t0 = None
                if timing:
                    t0 = cp.cuda.Event()
                    t0.record(self.stream)
                pieces = tp.pieces.tolist()
                seg_of = tp.piece_segment.tolist()
                last_of = {seg: i for i, seg in enumerate(seg_of)}
                n_slots = max(tp.n_slots, 1)
                pool = None if tp.direct else self._pool(n_slots)

                def submit(i: int) -> None:
                    lo, hi = pieces[i]
                    s = self._slot(i % n_slots, tp.slot_bytes)
                    pending[i] = pool.submit(self._fill, s.arr, host, lo, hi, s.event, arrivals)

                if pool is not None:
                    for i in range(min(n_slots, len(pieces))):
                        submit(i)
                for i, (lo, hi) in enumerate(pieces):
                    n = hi - lo
                    if tp.direct:
                        if arrivals is not None:
                            arrivals.wait(lo, hi)
                        src = host.ctypes.data + lo
                    else:
                        pending.pop(i).result()  # filled (raises what stopped the filler)
                        s = self.slots[i % n_slots]
                        src = s.arr.ctypes.data
                    rt.memcpyAsync(dst_ptr + lo, src, n, rt.memcpyHostToDevice, self.stream.ptr)
                    ev = cp.cuda.Event(disable_timing=True)
                    ev.record(self.stream)
                    events.recorded(ev)
                    if not tp.direct:
                        s.event = ev
                        if i + n_slots < len(pieces):
                            submit(i + n_slots)
                    if last_of[seg_of[i]] == i:
                        events.set(seg_of[i], ev)
                if timing:
                    t1 = cp.cuda.Event()
                    t1.record(self.stream)
                    events.span = (t0, t1)
            except BaseException as e:  # a failed fetch or copy: stop, report to the waiters
                error = e
                for f in pending.values():  # no filler may still write into a slot
                    try:
                        f.result()
                    except BaseException:
                        pass
            finally:
                events.finish(error)  # waiters raise it (SegmentEvents.__getitem__)


def _device_id(cp) -> int | None:
    dev = getattr(cp.cuda, "Device", None)
    return int(dev().id) if dev is not None else None


def _on_device(cp, device_id):
    """The CUDA device of a helper thread: the caller's (threads start on device 0)."""
    if device_id is None:
        return contextlib.nullcontext()
    return cp.cuda.Device(device_id)


_PER_DEVICE: dict[tuple[type, int], Any] = {}
_PER_DEVICE_LOCK = ForkSafeLock()


def _per_device(cls, cp):
    """The one ``cls(cp)`` of the current device (staging ring, host buffer pool)."""
    key = (cls, _device_id(cp) or 0)
    with _PER_DEVICE_LOCK:
        obj = _PER_DEVICE.get(key)
        if obj is None:
            obj = _PER_DEVICE[key] = cls(cp)
        return obj


def staging_for(cp) -> PinnedStaging:
    return _per_device(PinnedStaging, cp)


class HostBuffer:
    """A page-locked host buffer lent by a :class:`PinnedHostPool`: ``array``
    (exactly the bytes asked for), given back with :meth:`release`."""

    def __init__(self, pool: "PinnedHostPool", mem, full: np.ndarray, nbytes: int):
        self.pool, self.mem, self.full = pool, mem, full
        self.array = full[:nbytes]
        self.released = False

    def release(self, after=None) -> None:
        """Back to the pool; ``after``: an event the device must pass before the
        buffer is reused (copies from it still in flight)."""
        if not self.released:
            self.released = True
            self.pool._give_back(self, after)


class PinnedHostPool:
    """Whole-batch page-locked host buffers, per device, reused across calls.

    A fetch lands in one (:mod:`gtsamples.decode.gpu.fetch`), the host checks
    read it, and it is copied to the device from there: no staging slots, no
    copy of the bytes on the host.  At most :data:`PINNED_POOL_MAX_BYTES` are
    held; batches over :data:`PINNED_BATCH_MAX_BYTES` get None (staging slots)."""

    ROUND = 64 << 20  # sizes are rounded up: slightly larger batches reuse a buffer

    def __init__(self, cp):
        self.cp = cp
        self.lock = threading.Lock()
        self.free: list[tuple[Any, np.ndarray, Any]] = []  # (mem, full array, event to pass first)
        self.held = 0  # bytes allocated, free or lent

    def acquire(self, nbytes: int) -> HostBuffer | None:
        nbytes = int(nbytes)
        if nbytes <= 0 or nbytes > PINNED_BATCH_MAX_BYTES:
            return None
        with self.lock:
            fits = [k for k, (_, a, _) in enumerate(self.free) if a.size >= nbytes]
            if fits:
                k = min(fits, key=lambda j: self.free[j][1].size)
                mem, full, ev = self.free.pop(k)
            else:
                size = -(-nbytes // self.ROUND) * self.ROUND
                while self.free and self.held + size > PINNED_POOL_MAX_BYTES:  # drop the smallest free ones
                    k = min(range(len(self.free)), key=lambda j: self.free[j][1].size)
                    _, old, old_ev = self.free.pop(k)
                    if old_ev is not None:
                        old_ev.synchronize()
                    self.held -= old.size
                if self.held + size > PINNED_POOL_MAX_BYTES:
                    return None
                mem = self.cp.cuda.alloc_pinned_memory(size)
                full, ev = np.frombuffer(mem, np.uint8, size), None
                self.held += size
        if ev is not None:
            ev.synchronize()
        return HostBuffer(self, mem, full, nbytes)

    def _give_back(self, buf: HostBuffer, after) -> None:
        with self.lock:
            self.free.append((buf.mem, buf.full, after))


def host_pool_for(cp) -> PinnedHostPool:
    return _per_device(PinnedHostPool, cp)
