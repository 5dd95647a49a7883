"""Host emulation of the GPU backend's device, for machines without a GPU.

``EmuDevice`` has the methods of ``gtsamples.decode.gpu.CupyDevice`` over
numpy arrays: the real driver (``decode_batch_gpu(..., _device=EmuDevice())``)
runs unchanged, every kernel in kernels/*.cu runs compiled by g++ over
tests/kernels/emu/cuda_emu.h (one std::thread per CUDA thread, barriers for
__syncthreads and warp intrinsics), and nvCOMP is replaced by zstandard with
the same contract (capacity = declared length, per-chunk status and actual
size).  It checks the kernels' and the driver's logic, not CUDA timing,
occupancy or the memory model.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from gtsamples.decode import kernels as _k

HERE = Path(__file__).parent / "emu"
_LIB = None


def compiler() -> str | None:
    return shutil.which(os.environ.get("CXX", "g++"))


def load_library() -> ctypes.CDLL:
    global _LIB
    if _LIB is not None:
        return _LIB
    cxx = compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler (g++) for the kernel emulator")
    kdir = _k.kernel_dir()
    srcs = sorted(kdir.glob("*.cu*")) + sorted(HERE.glob("*"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in srcs if p.is_file())).hexdigest()[:16]
    out = Path(tempfile.gettempdir()) / f"gtsamples-emu-{digest}.so"
    if not out.exists():
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run(
            [cxx, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", f"-I{kdir}", f"-I{HERE}",
             str(HERE / "emu_kernels.cpp"), "-o", str(tmp)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        os.replace(tmp, out)
    lib = ctypes.CDLL(str(out))
    lib.emu_launch.argtypes = [ctypes.c_char_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                               ctypes.POINTER(ctypes.c_void_p)]  # fmt: skip
    lib.emu_launch.restype = ctypes.c_int
    _LIB = lib
    return lib


_SCALARS = {
    np.dtype(np.uint32): ctypes.c_uint32,
    np.dtype(np.int32): ctypes.c_int32,
    np.dtype(np.uint64): ctypes.c_uint64,
    np.dtype(np.int64): ctypes.c_int64,
}


class EmuKernel:
    def __init__(self, name: str, log: list):
        self.name = name
        self.log = log

    def __call__(self, grid, block, args):
        lib = load_library()
        gx, gy = (tuple(grid) + (1,))[:2]
        (bx,) = tuple(block)[:1]
        vals = []
        for a in args:
            if isinstance(a, np.ndarray):
                vals.append(ctypes.c_void_p(a.ctypes.data))
            elif isinstance(a, np.generic):
                vals.append(_SCALARS[a.dtype](a))
            else:
                raise TypeError(f"{self.name}: argument {a!r} must be a numpy array or scalar")
        ptrs = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in vals])
        self.log.append((self.name, (gx, gy), bx))
        if lib.emu_launch(self.name.encode(), gx, gy, bx, ptrs) != 0:
            raise KeyError(self.name)


class _NoTimer:
    def mark(self, name):
        pass

    def host_stage(self, name):
        import contextlib

        return contextlib.nullcontext()

    def result(self):
        return {}


class EmuDevice:
    """``CupyDevice``'s interface over host memory (see module doc).

    Staged H2D copies (``stage_h2d``) are *deferred*: the destination bytes
    read as :data:`NOT_ARRIVED` until the driver waits for the segment's event
    (``wait``), as a copy stream still in flight would leave them.  A driver
    that lets nvCOMP or a kernel read stored bytes before waiting for their
    copy therefore decodes garbage and fails the parity checks.  ``log``
    records ``("copy", segment)``, ``("wait", segment)`` and
    ``("zstd", sub-batch, jobs)`` in order.
    """

    NOT_ARRIVED = 0xCC

    def __init__(self, temp_budget_check=None):
        self.launches: list = []
        self.zstd_calls: list = []
        self.log: list = []
        self._keep: list = []
        self._pending: dict[int, list] = {}  # segment event id -> [(dst, lo, bytes)]
        self._next_event = 0

    def empty(self, n, dtype):
        a = np.empty(n + 0, dtype=dtype)
        self._keep.append(a)
        return a

    def zeros(self, n, dtype):
        a = np.zeros(n, dtype=dtype)
        self._keep.append(a)
        return a

    def filled(self, n, dtype, byte):
        a = np.full(n * np.dtype(dtype).itemsize, byte & 0xFF, dtype=np.uint8).view(dtype)
        self._keep.append(a)
        return a

    def upload(self, host):
        a = np.array(host, copy=True)
        self._keep.append(a)
        return a

    def copy_in(self, dev, host):
        dev[...] = host

    def to_host(self, dev):
        return np.array(dev, copy=True)

    @staticmethod
    def ptr(dev) -> int:
        return int(dev.ctypes.data)

    def kernel(self, file, name):
        assert name in _k.KERNEL_SOURCES[file]
        return EmuKernel(name, self.launches)

    input_alignment = 1

    def zstd_input_alignment(self):
        return self.input_alignment

    # ---- staged H2D (deferred until waited for)
    def stage_h2d(self, dst, host, tp, timing=False, arrivals=None):
        if arrivals is not None:  # bytes still being fetched: all of them first
            arrivals.wait(0, len(host))
        host = np.ascontiguousarray(host, dtype=np.uint8).reshape(-1)
        assert tp.pinned and tp.n_slots >= 1 and tp.slot_bytes >= 1
        events = []
        for seg in range(len(tp.segments)):
            ev = self._next_event
            self._next_event += 1
            parts = []
            for lo, hi in tp.pieces[tp.piece_segment == seg].tolist():
                assert hi - lo <= tp.slot_bytes, "piece larger than its pinned slot"
                parts.append((dst, lo, host[lo:hi].copy()))
                dst[lo:hi] = self.NOT_ARRIVED  # not there yet
            self._pending[ev] = parts
            self.log.append(("copy", seg))
            events.append(ev)
        return events, None

    def wait(self, event):
        if event is None:
            return
        # the copy stream is in order: every earlier segment has arrived too
        for ev in sorted(e for e in self._pending if e <= event):
            for dst, lo, data in self._pending.pop(ev):
                dst[lo : lo + len(data)] = data
        self.log.append(("wait", event))

    def zstd_plan(self, declared, temp_budget):
        from gtsamples.decode import nvcomp as nv

        return nv.plan_subbatches(declared, temp_budget, nv.estimate_temp_bytes)

    def zstd(self, jobs, table, temp_budget, plan=None, before=None):
        """zstandard with nvCOMP's contract: capacity = declared, per-chunk
        status (0 or 12 CannotDecompress) and actual size; sub-batch ``k`` of
        ``plan`` runs after ``before(k)``."""
        import zstandard

        from tests.kernels.emu_nvcomp import check_fits

        n = len(jobs)
        tab = table.reshape(5, n)
        st = np.zeros(n, np.int32)
        actual = np.zeros(n, np.uint64)
        dctx = zstandard.ZstdDecompressor()
        if plan is None:
            plan = self.zstd_plan(jobs.declared, temp_budget)
        assert plan and plan[0][0] == 0 and plan[-1][1] == n
        sub_of = np.zeros(n, np.int64)
        for j, (a, b) in enumerate(plan):
            sub_of[a:b] = j
        for k in range(n):
            if k == 0 or sub_of[k] != sub_of[k - 1]:
                if before is not None:
                    before(int(sub_of[k]))
                a, b = plan[int(sub_of[k])]
                self.log.append(("zstd", int(sub_of[k]), b - a))
            src, nbytes, cap, dst = (int(tab[r][k]) for r in range(4))
            assert src % self.input_alignment == 0, "nvCOMP input alignment violated"
            frame = ctypes.string_at(src, nbytes)
            check_fits(frame, cap, int(tab[4][k]))  # a frame that decodes past its capacity: an error
            try:
                out = dctx.decompress(frame, max_output_size=cap, allow_extra_data=False)
            except Exception:
                st[k] = 12
                continue
            if len(out) > cap:
                st[k] = 12
                continue
            ctypes.memmove(dst, out, len(out))
            actual[k] = len(out)
        self.zstd_calls.append(n)
        self._keep += [st, actual]
        return st, actual

    def timer(self, enabled):
        return _NoTimer()

    def keep_until_done(self, objs):
        """Every allocation here lives as long as the device (``_keep``)."""

    def unwaited(self) -> int:
        """Staged segments never waited for (the driver must wait for all)."""
        return len(self._pending)
