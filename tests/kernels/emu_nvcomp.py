"""nvCOMP's batched Zstd on the host, with the dangers a GPU would not report.

``EmuDevice.zstd`` (tests/kernels/emu_device.py) and :class:`EmuNvcompLib`
decompress with zstandard under nvCOMP's contract (capacity = declared length,
per-chunk status and actual size).  Two things are checked that a GPU leaves
undefined or silent:

* **overrun**: a frame whose real decoded size exceeds its output capacity.
  nvCOMP's header says errors for insufficient output "cannot be guaranteed",
  and decoded chunks sit back to back: handing it such a frame is an error of
  the caller (:class:`NvcompOverrun`), whatever status the emulation would give;
* **lifetimes** (:class:`TrackedEmuDevice`): ``nvcompBatchedZstdDecompressAsync``
  is *queued* and runs at the next operation on the stream (a kernel, a copy,
  a sync), as on a GPU; every buffer it uses (tables, temp memory, statuses,
  sizes) must still be allocated then (:class:`LifetimeViolation`), e.g. kept
  by ``keep_until_done``.  Device allocations are tracked: freeing one (its
  last view dropped) marks it dead.

:class:`TrackedEmuDevice` runs the real binding code
(``gtsamples.decode.gpu.nvcomp.BatchedZstdDecompressor``: temp sizing, pointer
arithmetic of sub-batches, lifetimes) over :class:`EmuNvcompLib`.
"""

from __future__ import annotations

import ctypes
import weakref

import numpy as np
import zstandard

from gtsamples.decode.gpu import nvcomp as nv
from tests.kernels.emu_device import EmuDevice, EmuKernel

CANNOT_DECOMPRESS = 12  # nvcompErrorCannotDecompress


class NvcompOverrun(AssertionError):
    """nvCOMP was handed a frame that decodes to more than its output capacity."""


class LifetimeViolation(AssertionError):
    """A buffer an enqueued nvCOMP call uses was freed before the stream ran it."""


def decoded_size(frame: bytes, limit: int) -> int:
    """Bytes the frame's blocks produce (libzstd, streaming, no capacity), counted
    up to ``limit + 1``; what it produced before an error when it fails."""
    total = 0
    try:
        with zstandard.ZstdDecompressor().stream_reader(frame, read_across_frames=False) as r:
            while total <= limit:
                got = r.read(min(1 << 20, limit + 1 - total))
                if not got:
                    break
                total += len(got)
    except zstandard.ZstdError:
        pass
    return total


def check_fits(frame: bytes, capacity: int, chunk: int, log: list | None = None) -> None:
    """:class:`NvcompOverrun` when ``frame`` decodes to more than ``capacity`` bytes."""
    real = decoded_size(frame, capacity)
    if real > capacity:
        if log is not None:
            log.append((chunk, capacity))
        raise NvcompOverrun(
            f"nvCOMP was handed chunk {chunk} with capacity {capacity} B, but its frame decodes to more "
            f"(at least {real} B): undefined behaviour on a GPU (the output buffers sit back to back)"
        )


def decompress_like_nvcomp(frame: bytes, capacity: int) -> tuple[int, bytes]:
    """``(status, output)`` under nvCOMP's contract for a frame that fits its capacity."""
    try:
        out = zstandard.ZstdDecompressor().decompress(frame, max_output_size=capacity, allow_extra_data=False)
    except Exception:
        return CANNOT_DECOMPRESS, b""
    if len(out) > capacity:
        return CANNOT_DECOMPRESS, b""
    return 0, out


def _words(ptr: int, n: int, ctype) -> list[int]:
    return list((ctype * n).from_address(ptr))


class EmuNvcompLib:
    """The :class:`gtsamples.decode.gpu.nvcomp.NvcompLib` methods the binding uses,
    on the host: temp sizes from the measured model, ``decompress_async``
    queued on ``dev``'s stream (:meth:`TrackedEmuDevice.enqueue`)."""

    version, cudart_version, major = 6000, 13040, 6
    alignment = (1, 1, 8)

    def __init__(self, dev: "TrackedEmuDevice"):
        self.dev = dev
        self.calls: list[int] = []  # chunks per call

    def temp_size(self, num_chunks: int, max_chunk: int, total: int, stream: int = 0) -> int:
        return nv.estimate_temp_bytes(num_chunks, max_chunk, total)

    def status_string(self, status: int) -> str:
        return nv.NVCOMP_STATUS_NAMES.get(status, f"nvcompStatus {status}")

    def decompress_async(self, src_ptrs, src_bytes, dst_capacity, dst_actual, num_chunks, temp_ptr, temp_bytes,
                         dst_ptrs, statuses, stream) -> None:  # fmt: skip
        n = int(num_chunks)
        assert n > 0, "nvCOMP rejects empty batches (status 10)"
        assert stream == self.dev.stream_ptr(), "nvCOMP call on another stream"
        assert temp_ptr % self.alignment[2] == 0, "temp memory misaligned"
        uses = [(src_ptrs, 8 * n, "source pointers"), (src_bytes, 8 * n, "source sizes"),
                (dst_capacity, 8 * n, "capacities"), (dst_ptrs, 8 * n, "destination pointers"),
                (dst_actual, 8 * n, "actual sizes"), (statuses, 4 * n, "statuses"),
                (temp_ptr, temp_bytes, "temp memory")]  # fmt: skip
        # the frames it reads and the outputs it writes (the tables are valid now)
        for k, (s, nb, c, d) in enumerate(zip(_words(src_ptrs, n, ctypes.c_uint64), _words(src_bytes, n, ctypes.c_uint64),
                                              _words(dst_capacity, n, ctypes.c_uint64),
                                              _words(dst_ptrs, n, ctypes.c_uint64))):  # fmt: skip
            uses += [(s, nb, f"frame {k}"), (d, c, f"output {k}")]
        self.calls.append(n)

        def run() -> None:
            src = _words(src_ptrs, n, ctypes.c_uint64)
            nbytes = _words(src_bytes, n, ctypes.c_uint64)
            cap = _words(dst_capacity, n, ctypes.c_uint64)
            dst = _words(dst_ptrs, n, ctypes.c_uint64)
            cap_total, cap_max = sum(cap), max(cap)
            assert temp_bytes >= self.temp_size(n, cap_max, cap_total), "temp memory smaller than nvCOMP asks"
            st = (ctypes.c_int32 * n).from_address(statuses)
            actual = (ctypes.c_uint64 * n).from_address(dst_actual)
            for k in range(n):
                frame = ctypes.string_at(src[k], nbytes[k])
                check_fits(frame, cap[k], k, self.dev.overruns)
                st[k], out = decompress_like_nvcomp(frame, cap[k])
                actual[k] = len(out)
                if out:
                    ctypes.memmove(dst[k], out, len(out))
                    self.dev.host_wrote(dst[k], len(out))
            self.dev.host_wrote(statuses, 4 * n)
            self.dev.host_wrote(dst_actual, 8 * n)

        self.dev.enqueue(run, uses)


class _Allocation:
    """Owner of one tracked device allocation: every array over it is a view
    whose ``base`` is this object, so it dies with the last view."""

    def __init__(self, raw: np.ndarray):
        self.__array_interface__ = {"data": (raw.ctypes.data, False), "shape": (raw.size,), "typestr": "|u1",
                                    "version": 3}  # fmt: skip


class TrackedEmuDevice(EmuDevice):
    """:class:`EmuDevice` with tracked allocations, a queued nvCOMP (the real
    ``BatchedZstdDecompressor`` over :class:`EmuNvcompLib`), ``keep_until_done``
    honoured in stream order, and page-locked host buffers for the fetch path
    (``host_staging``).  ``violations`` / ``overruns`` record what failed."""

    STREAM = 0x5EED

    def __init__(self):
        super().__init__()
        self.lib = EmuNvcompLib(self)
        self._allocs: dict[int, list] = {}  # id -> [start, end, alive]
        self._next_id = 0
        self._graveyard: list[np.ndarray] = []  # freed memory, kept until no queued call can touch it
        self._queue: list[tuple[object, list]] = []
        self._enqueued = 0
        self._executed = 0
        self._kept: list[tuple[int, object]] = []
        self.overruns: list = []
        self.violations: list[str] = []
        self.host_buffers: list = []

    # ---- tracked allocations
    def _alloc(self, nbytes: int) -> np.ndarray:
        raw = self.guarded_block(int(nbytes), "tracked")  # EmuDevice's guard zones and launch checks
        owner = _Allocation(raw)
        aid = self._next_id
        self._next_id += 1
        self._allocs[aid] = [raw.ctypes.data, raw.ctypes.data + raw.size, True]
        weakref.finalize(owner, self._freed, aid, raw)
        return np.asarray(owner).view(type(raw))  # (initcheck: HostWrites)

    def _freed(self, aid: int, raw: np.ndarray) -> None:
        self._allocs[aid][2] = False
        self._graveyard.append(raw)

    def empty(self, n, dtype):
        dtype = np.dtype(dtype)
        return self._alloc(n * dtype.itemsize)[: n * dtype.itemsize].view(dtype)

    def zeros(self, n, dtype):
        a = self.empty(n, dtype)
        a[...] = 0
        self._host_wrote(a)
        return a

    def filled(self, n, dtype, byte):
        a = self.empty(n, dtype)
        a.view(np.uint8)[...] = byte & 0xFF
        self._host_wrote(a)
        return a

    def upload(self, host):
        self._flush()
        host = np.ascontiguousarray(host)
        a = self._alloc(host.nbytes)[: host.nbytes].view(host.dtype).reshape(host.shape)
        a[...] = host
        self._host_wrote(a)
        return a

    def alive(self, ptr: int, nbytes: int) -> bool | None:
        """True/False: ``[ptr, ptr + nbytes)`` lies in a live/freed tracked
        allocation; None: in none."""
        found = None
        for start, end, live in self._allocs.values():
            if start <= ptr and ptr + nbytes <= end:
                if live:
                    return True
                found = False
        return found

    # ---- the stream
    def stream_ptr(self) -> int:
        return self.STREAM

    def enqueue(self, fn, uses: list) -> None:
        self._queue.append((fn, uses))
        self._enqueued += 1

    def _flush(self) -> None:
        while self._queue:
            fn, uses = self._queue.pop(0)
            for ptr, nbytes, what in uses:
                state = self.alive(int(ptr), int(nbytes))
                if state is not True:
                    msg = (f"nvCOMP's {what} ({nbytes} B at {int(ptr):#x}) "
                           f"{'were freed' if state is False else 'are no tracked allocation'} "
                           "before the stream ran the call")  # fmt: skip
                    self.violations.append(msg)
                    self._queue.clear()
                    raise LifetimeViolation(msg)
            fn()
            self._executed += 1
        self._kept = [(mark, objs) for mark, objs in self._kept if mark > self._executed]
        self._graveyard.clear()

    def keep_until_done(self, objs) -> None:
        self._kept.append((self._enqueued, objs))

    def finish(self) -> None:
        """The end of the stream: run what is queued."""
        self._flush()

    # ---- every stream operation runs the queued calls first
    def kernel(self, file, name):
        k = super().kernel(file, name)
        dev = self

        class _Ordered(EmuKernel):
            def __call__(self, grid, block, args):
                dev._flush()
                return k(grid, block, args)

        return _Ordered(name, self.launches)

    def copy_in(self, dev, host):
        self._flush()
        super().copy_in(dev, host)

    def to_host(self, dev):
        self._flush()
        return super().to_host(dev)

    def wait(self, event):
        self._flush()
        super().wait(event)

    # ---- nvCOMP through the real binding
    def nvcomp(self):
        return self.lib

    def zstd_plan(self, declared, temp_budget):
        return nv.BatchedZstdDecompressor(self.lib, temp_budget=temp_budget, dev=self).plan(declared)

    def zstd(self, jobs, table, temp_budget, plan=None, before=None):
        self.zstd_calls.append(len(jobs))
        return nv.BatchedZstdDecompressor(self.lib, temp_budget=temp_budget, dev=self).run(
            jobs, device_table=table, plan=plan, before=before)

    # ---- page-locked host buffers (the fetch lands there; copied without slots)
    def host_staging(self, nbytes: int):
        buf = _EmuHostBuffer(nbytes)
        self.host_buffers.append(buf)
        return buf


class _EmuHostBuffer:
    def __init__(self, nbytes: int):
        self.array = np.full(int(nbytes), 0xEE, np.uint8)  # garbage until the fetch fills it
        self.released = False
        self.released_after = None

    def release(self, after=None) -> None:
        assert not self.released, "host buffer given back twice"
        self.released, self.released_after = True, after
