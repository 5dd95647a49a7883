"""Host emulation of the GPU backend's device, for machines without a GPU.

``EmuDevice`` has the methods of ``gtsamples.decode.gpu.CupyDevice`` over
numpy arrays: the real driver (``decode_batch_gpu(..., _device=EmuDevice())``)
runs unchanged, every kernel in kernels/*.cu runs compiled by g++ over
tests/kernels/emu/cuda_emu.h (blocks on worker threads, every CUDA thread a
fiber; see that header), and nvCOMP is replaced by zstandard with the same
contract (capacity = declared length, per-chunk status and actual size).

It checks as a GPU and compute-sanitizer would: a fault in a kernel
(misaligned access, a barrier some threads exited before, a warp intrinsic
naming exited or waiting lanes, a deadlock, any UBSan finding) raises
:class:`EmuFault`.  Every allocation sits between guard zones and ``empty``
memory is filled with :data:`UNINIT`; around every launch of a gts kernel the
device poisons the outputs the launch must write, then checks that it wrote
all of them (for decode kernels: every row of every chunk that decoded
cleanly), that it changed nothing outside its outputs, and that no guard zone
changed -- any miss is an :class:`EmuFault` too.

Builds (``GTS_EMU_SANITIZER``): ``plain`` (default), ``address`` (ASan +
UBSan; the process must have libasan preloaded), ``thread`` (TSan + UBSan;
libtsan preloaded) and ``initcheck`` (a shadow of written shared and `empty`
global memory and ownership of decode output rows; emu/emu_initcheck.h).  The
kernels compiled are those of this tree (:func:`kernel_dir`).  ``make kernels-sanitize`` (tests/kernels/emu/sanitize.py)
runs them.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import weakref
from pathlib import Path

import numpy as np

from gtsamples.decode.gpu import nvrtc as _k
from gtsamples.decode.gpu import (
    BLOCK_DESC_DTYPE,
    CHUNK_DESC_DTYPE,
    COPY_COL_DTYPE,
    GTS_WARP_MAX_ROWS,
    MASK_COL_DTYPE,
    NO_CHUNK,
)

HERE = Path(__file__).parent / "emu"
TREE = Path(__file__).resolve().parents[2]  # the checkout these tests belong to
BUILDS = ("plain", "address", "thread", "initcheck")
RUNTIME = {"address": "libasan.so", "thread": "libtsan.so"}

GUARD = 256  # guard zone bytes on each side of an allocation (at least)
ALIGN = 256  # allocations start here, as cudaMalloc's do
GUARD_BYTE = 0xFD
UNINIT = 0xEB  # fill of ``empty`` allocations
MUST_WRITE = (0xE7, 0x5B)  # fill of a launch's outputs before it runs (second: its re-run)

_LIBS: dict[str, ctypes.CDLL] = {}


class EmuFault(RuntimeError):
    """A fault of the emulated GPU: the message names the kernel, the block and
    thread, what happened and where."""


def compiler() -> str | None:
    return shutil.which(os.environ.get("CXX", "g++"))


def build_kind() -> str:
    kind = os.environ.get("GTS_EMU_SANITIZER") or "plain"
    if kind not in BUILDS:
        raise ValueError(f"GTS_EMU_SANITIZER must be one of {BUILDS}, not {kind!r}")
    return kind


def runtime_library(kind: str) -> str:
    """Path of the sanitizer runtime a ``kind`` build needs preloaded."""
    out = subprocess.run([compiler(), f"-print-file-name={RUNTIME[kind]}"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _flags(kind: str) -> tuple[list[str], list[str]]:
    """(compile flags, link flags).  UBSan's callbacks are cuda_emu.h's own, so
    no build links libubsan."""
    # -O0: no inlining or tail duplication, so a barrier's call path (the
    # return addresses on its fiber's stack) is its source call path
    cflags = ["-std=c++20", "-O0", "-g", "-fPIC", "-pthread", "-fvisibility=hidden", "-fno-omit-frame-pointer",
              "-Wno-unknown-pragmas", "-fsanitize=undefined", "-fno-sanitize=vptr"]  # fmt: skip
    cflags += os.environ.get("GTS_EMU_CXXFLAGS", "").split()  # e.g. -DEMU_UCONTEXT (the portable context switch)
    if kind == "address":
        return cflags + ["-fsanitize=address", "-fsanitize-recover=address"], ["-fsanitize=address"]
    if kind == "thread":
        return cflags + ["-fsanitize=thread"], ["-fsanitize=thread"]
    if kind == "initcheck":  # TSan's instrumentation calling emu_initcheck.h's hooks; no TSan runtime
        return cflags + ["-fsanitize=thread", "-DEMU_INITCHECK=1"], []
    return cflags, []


def kernel_dir() -> Path:
    """The kernels the emulator compiles: ``$GTSAMPLES_KERNEL_DIR`` when set,
    else those of the tree these tests live in -- never another checkout's
    (an editable install of the main checkout would give its kernels to a
    clone's tests, which would then silently test the wrong sources)."""
    env = os.environ.get("GTSAMPLES_KERNEL_DIR")
    if env:
        return Path(env)
    own = TREE / "kernels"
    return own if (own / "gts_types.cuh").is_file() else _k.kernel_dir()


def build_library(kind: str = "plain") -> Path:
    """Compiles the emulator library of build ``kind`` (cached by content)."""
    cxx = compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler (g++) for the kernel emulator")
    kdir = kernel_dir()
    cflags, lflags = _flags(kind)
    srcs = sorted(kdir.glob("*.cu*")) + sorted(HERE.glob("*.h")) + sorted(HERE.glob("*.c*"))
    key = b"".join(p.read_bytes() for p in srcs) + " ".join([cxx, *cflags, *lflags]).encode()
    out = Path(tempfile.gettempdir()) / f"gtsamples-emu-{kind}-{hashlib.sha256(key).hexdigest()[:16]}.so"
    if not out.exists():
        obj = out.with_suffix(f".{os.getpid()}.o")
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        try:
            for cmd in ([cxx, *cflags, f"-I{kdir}", f"-I{HERE}", "-c", str(HERE / "emu_kernels.cpp"), "-o", str(obj)],
                        [cxx, "-shared", "-pthread", "-Wl,-z,defs", *lflags, str(obj), "-o", str(tmp)]):  # fmt: skip
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode:
                    raise RuntimeError(f"building the kernel emulator failed:\n{' '.join(cmd)}\n{r.stderr}")
            os.replace(tmp, out)
        finally:
            for p in (obj, tmp):
                p.unlink(missing_ok=True)
    return out


def load_library(kind: str | None = None) -> ctypes.CDLL:
    """The emulator library of build ``kind`` (default: ``GTS_EMU_SANITIZER``)."""
    kind = kind or build_kind()
    if kind in _LIBS:
        return _LIBS[kind]
    if kind in RUNTIME:
        probe = {"address": "__asan_init", "thread": "__tsan_init"}[kind]
        if not hasattr(_process_symbols(), probe):
            raise RuntimeError(f"the {kind} build needs its runtime preloaded: LD_PRELOAD={runtime_library(kind)}")
    lib = ctypes.CDLL(str(build_library(kind)))
    lib.emu_launch.argtypes = [ctypes.c_char_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                               ctypes.POINTER(ctypes.c_void_p)]  # fmt: skip
    lib.emu_launch.restype = ctypes.c_int
    lib.emu_last_fault.restype = ctypes.c_char_p
    lib.emu_build.restype = ctypes.c_char_p
    lib.emu_sanitizer_reports.restype = ctypes.c_ulonglong
    lib.emu_set_workers.argtypes = [ctypes.c_uint]
    for fn in (lib.emu_ic_track, lib.emu_ic_mark):
        fn.argtypes, fn.restype = [ctypes.c_ulonglong, ctypes.c_ulonglong], None
    lib.emu_ic_forget.argtypes, lib.emu_ic_forget.restype = [ctypes.c_ulonglong], None
    lib.emu_ic_own.argtypes = [ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint,
                               ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]  # fmt: skip
    lib.emu_ic_own.restype = None
    assert lib.emu_build().decode() == kind
    _LIBS[kind] = lib
    return lib


def sanitizer_log_reports() -> int | None:
    """Reports this process's sanitizer runtime has written to its log so far
    (``log_path`` of ``ASAN_OPTIONS`` / ``TSAN_OPTIONS``), None without one."""
    for var, mark in (("ASAN_OPTIONS", "ERROR: AddressSanitizer"), ("TSAN_OPTIONS", "WARNING: ThreadSanitizer")):
        opts = dict(o.split("=", 1) for o in os.environ.get(var, "").split(":") if "=" in o)
        if "log_path" in opts and hasattr(_process_symbols(), "__" + var[:4].lower() + "_init"):
            path = Path(f"{opts['log_path']}.{os.getpid()}")
            return path.read_text(errors="replace").count(mark) if path.exists() else 0
    return None


def _log_fault(msg: str) -> None:
    """Faults are also appended to $GTS_EMU_FAULT_LOG (the sanitizer run counts them)."""
    path = os.environ.get("GTS_EMU_FAULT_LOG")
    if path:
        with open(path, "a") as f:
            f.write(msg.replace("\n", " ") + "\n")


def fault(msg: str) -> EmuFault:
    _log_fault(msg)
    return EmuFault(msg)


_SCALARS = {
    np.dtype(np.uint32): ctypes.c_uint32,
    np.dtype(np.int32): ctypes.c_int32,
    np.dtype(np.uint64): ctypes.c_uint64,
    np.dtype(np.int64): ctypes.c_int64,
}


def launch(name: str, grid, block, args, lib: ctypes.CDLL | None = None) -> None:
    """Runs kernel ``name`` (a gts kernel or a test kernel of
    emu/emu_test_kernels.cuh) over numpy arrays and scalars; raises
    :class:`EmuFault` when it faults."""
    lib = lib or load_library()
    gx, gy = (tuple(grid) + (1,))[:2]
    (bx,) = tuple(block)[:1]
    vals = []
    for a in args:
        if isinstance(a, np.ndarray):
            vals.append(ctypes.c_void_p(a.ctypes.data))
        elif isinstance(a, np.generic):
            vals.append(_SCALARS[a.dtype](a))
        else:
            raise TypeError(f"{name}: argument {a!r} must be a numpy array or scalar")
    ptrs = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in vals])
    reports = lib.emu_sanitizer_reports()
    rc = lib.emu_launch(name.encode(), gx, gy, bx, ptrs)
    if rc == 1:
        raise KeyError(name)
    if rc != 0:
        raise fault(_symbolize(lib.emu_last_fault().decode(errors="replace")))
    if lib.emu_sanitizer_reports() != reports:  # UBSan / ASan in the emulator's own code (printed on stderr)
        raise fault(f"{name}: {lib.emu_sanitizer_reports() - reports} sanitizer report(s) outside the kernel's "
                    "threads during the launch")  # fmt: skip


def _symbolize(msg: str) -> str:
    """The initcheck build names the faulting access by ``[pc +0x...]`` (an
    offset in the library): replaced by its source lines (inlined calls too)."""
    import re

    m = re.search(r"\[pc \+(0x[0-9a-f]+)\]", msg)
    tool = shutil.which("addr2line")
    if not m or tool is None:
        return msg
    r = subprocess.run([tool, "-e", str(build_library(build_kind())), "-i", m.group(1)], capture_output=True,
                       text=True)  # fmt: skip
    lines = [Path(x.split(" ")[0]).name for x in r.stdout.split("\n") if x and not x.startswith("??")]
    return msg.replace(m.group(0), "[" + " <- ".join(lines) + "]") if lines else msg


# ----------------------------------------------------------------------------- device memory


class HostWrites(np.ndarray):
    """An `empty` allocation in the initcheck build: an assignment through it
    (``d[k:] = 0``, a CuPy fill or copy on a GPU) writes device memory, so the
    bytes it covers count as initialised."""

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        lib = _LIBS.get("initcheck")
        if lib is None:
            return
        v = np.ndarray.__getitem__(self, key)
        if isinstance(v, np.ndarray) and v.flags.c_contiguous and np.may_share_memory(v, self):
            lib.emu_ic_mark(v.ctypes.data, v.nbytes)
        else:  # an element or a strided view: the whole array, conservatively
            lib.emu_ic_mark(self.ctypes.data, self.nbytes)


class _Alloc:
    """One live device allocation: ``raw`` holds [front guard | data | back guard]."""

    __slots__ = ("raw", "off", "nbytes", "lo", "serial", "what")

    def __init__(self, raw, off, nbytes, serial, what):
        self.raw, self.off, self.nbytes, self.serial, self.what = raw, off, nbytes, serial, what
        self.lo = raw.ctypes.data + off

    @property
    def data(self) -> np.ndarray:
        return self.raw[self.off : self.off + self.nbytes]

    def guard_damage(self) -> tuple[int, int]:
        """Changed bytes in the (front, back) guard zones."""
        r, end = self.raw, self.off + self.nbytes
        return int(np.count_nonzero(r[: self.off] != GUARD_BYTE)), int(np.count_nonzero(r[end:] != GUARD_BYTE))

    def name(self) -> str:
        return f"allocation #{self.serial} ({self.what}, {self.nbytes} bytes at {self.lo:#x})"


@functools.lru_cache(maxsize=None)
def _process_symbols() -> ctypes.CDLL:
    """The process's global symbols (the sanitizer runtime's among them),
    looked up once: some tests stub ctypes.CDLL."""
    return ctypes.CDLL(None)


def _asan_region_calls():
    lib = _process_symbols()
    fns = lib.__asan_poison_memory_region, lib.__asan_unpoison_memory_region
    for fn in fns:
        fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_size_t], None
    return fns


class EmuDevice:
    """``CupyDevice``'s interface over host memory (see module doc).

    Staged H2D copies (``stage_h2d``) are *deferred*: the destination bytes
    read as :data:`NOT_ARRIVED` until the driver waits for the segment's event
    (``wait``), as a copy stream still in flight would leave them.  A driver
    that lets nvCOMP or a kernel read stored bytes before waiting for their
    copy therefore decodes garbage and fails the parity checks.  ``log``
    records ``("copy", segment)``, ``("wait", segment)`` and
    ``("zstd", sub-batch, jobs)`` in order.

    Memory is freed when the driver drops its last reference (as CuPy's
    is), so a table still naming a dropped buffer is caught (ASan: a
    use-after-free; else a descriptor naming no live allocation).
    """

    NOT_ARRIVED = 0xCC

    def __init__(self, temp_budget_check=None):
        self.emu_lib = load_library()
        self.launches: list = []
        self.zstd_calls: list = []
        self.log: list = []
        self._pending: dict[int, list] = {}  # segment event id -> [(dst, lo, bytes)]
        self._next_event = 0
        self._regions: dict[int, tuple] = {}  # data address -> (weakref to raw, offset, bytes, serial, what)
        self._serial = 0
        self._asan = _asan_region_calls() if self.emu_lib.emu_build() == b"address" else None
        self._ic = self.emu_lib if self.emu_lib.emu_build() == b"initcheck" else None

    # ---- allocations
    def guarded_block(self, nbytes: int, what: str, fill: int | None = UNINIT) -> np.ndarray:
        """``nbytes`` of device memory (uint8, ALIGN-aligned) between guard
        zones, filled with ``fill`` (None: left as is), checked around every
        launch while the returned array (or a view of it) lives."""
        raw = np.empty(nbytes + 2 * GUARD + ALIGN, np.uint8)
        off = GUARD + (-(raw.ctypes.data + GUARD)) % ALIGN
        raw[:off] = GUARD_BYTE
        raw[off + nbytes :] = GUARD_BYTE
        if fill is not None:
            raw[off : off + nbytes] = fill
        self._serial += 1
        lo = raw.ctypes.data + off
        # the registry holds no reference: memory is freed with the driver's last view of it
        self._regions[lo] = (weakref.ref(raw), off, nbytes, self._serial, what)
        weakref.finalize(raw, self._regions.pop, lo, None)
        if self._asan is not None:  # ASan: any access to a guard zone is a report
            poison, unpoison = self._asan
            poison(raw.ctypes.data, off)
            poison(lo + nbytes, len(raw) - off - nbytes)
            weakref.finalize(raw, unpoison, raw.ctypes.data, len(raw))  # runs before numpy frees it
        if self._ic is not None and fill == UNINIT:  # initcheck: unwritten until a kernel or the host writes it
            self._ic.emu_ic_track(lo, nbytes)
            weakref.finalize(raw, self._ic.emu_ic_forget, lo)
            return raw[off : off + nbytes].view(HostWrites)
        return raw[off : off + nbytes]

    def host_wrote(self, addr: int, nbytes: int) -> None:
        """The host (an upload, a copy, nvCOMP) wrote ``[addr, addr + nbytes)``:
        initialised for the initcheck build."""
        if self._ic is not None and nbytes:
            self._ic.emu_ic_mark(int(addr), int(nbytes))

    def _host_wrote(self, arr) -> None:
        self.host_wrote(arr.ctypes.data, arr.nbytes)

    def _live(self) -> list[_Alloc]:
        out = []
        for ref, off, nbytes, serial, what in list(self._regions.values()):
            raw = ref()
            if raw is not None:
                out.append(_Alloc(raw, off, nbytes, serial, what))
        return sorted(out, key=lambda a: a.lo)

    def _find(self, addr: int, nbytes: int, live: list[_Alloc] | None = None) -> _Alloc | None:
        live = self._live() if live is None else live
        i = bisect.bisect_right([a.lo for a in live], addr) - 1
        if i >= 0 and addr + nbytes <= live[i].lo + live[i].nbytes:
            return live[i]
        return None

    def empty(self, n, dtype):
        return self.guarded_block(n * np.dtype(dtype).itemsize, f"empty {n} x {np.dtype(dtype)}", UNINIT).view(dtype)

    def zeros(self, n, dtype):
        return self.guarded_block(n * np.dtype(dtype).itemsize, f"zeros {n} x {np.dtype(dtype)}", 0).view(dtype)

    def filled(self, n, dtype, byte):
        return self.guarded_block(n * np.dtype(dtype).itemsize, f"{n} x {np.dtype(dtype)}", byte & 0xFF).view(dtype)

    def upload(self, host):
        host = np.ascontiguousarray(host)
        a = self.guarded_block(host.nbytes, f"upload {host.shape} {host.dtype}", None)
        a = a.view(host.dtype).reshape(host.shape)
        a[...] = host
        return a

    def copy_in(self, dev, host):
        dev[...] = host
        self._host_wrote(dev)

    def to_host(self, dev):
        return np.array(dev, copy=True)

    @staticmethod
    def ptr(dev) -> int:
        return int(dev.ctypes.data)

    def kernel(self, file, name):
        assert name in _k.KERNEL_SOURCES[file]
        return EmuKernel(name, self.launches, self)

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
                self.host_wrote(dst.ctypes.data + lo, len(data))
        self.log.append(("wait", event))

    def zstd_plan(self, declared, temp_budget):
        from gtsamples.decode.gpu import nvcomp as nv

        return nv.plan_subbatches(declared, temp_budget, nv.estimate_temp_bytes)

    def zstd(self, jobs, table, temp_budget, plan=None, before=None):
        """zstandard with nvCOMP's contract: capacity = declared, per-chunk
        status (0 or 12 CannotDecompress) and actual size; sub-batch ``k`` of
        ``plan`` runs after ``before(k)``.  Every input and output range must
        lie inside one live allocation."""
        import zstandard

        from tests.kernels.emu_nvcomp import check_fits

        n = len(jobs)
        tab = table.reshape(5, n)
        st = self.zeros(n, np.int32)
        actual = self.zeros(n, np.uint64)
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
            for what, p, size in (("input", src, nbytes), ("output", dst, cap)):
                if self._find(p, size) is None:
                    raise fault(f"nvCOMP job {k}: {what} [{p:#x}, +{size}) lies in no live allocation")
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
            self.host_wrote(dst, len(out))
            actual[k] = len(out)
        self.zstd_calls.append(n)
        return st, actual

    def timer(self, enabled):
        return _NoTimer()

    def keep_until_done(self, objs):
        """Every call ran when it was made: nothing is in flight to keep ``objs`` for."""

    def unwaited(self) -> int:
        """Staged segments never waited for (the driver must wait for all)."""
        return len(self._pending)

    # ---- launch checks
    def check_guards(self, after: str) -> None:
        for a in self._live():
            front, back = a.guard_damage()
            if front or back:
                raise fault(f"{after}: {front + back} guard-zone bytes around {a.name()} changed "
                            f"({front} before it, {back} after it): an out-of-range write")  # fmt: skip

    def _launch(self, name, grid, block, args) -> None:
        if self._ic is not None:
            own = _ownership(name, grid, block, args)
            if own is not None:
                lo, hi, owner, warps = own
                live = self._live()
                allocs = {a.lo: a for a in (self._find(int(x), 1, live) for x in lo.tolist()) if a is not None}
                flo = np.array([a.lo for a in allocs.values()], np.uint64)
                fhi = np.array([a.lo + a.nbytes for a in allocs.values()], np.uint64)
                self._ic.emu_ic_own(len(lo), lo.ctypes.data, hi.ctypes.data, owner.ctypes.data, warps, len(flo),
                                    flo.ctypes.data, fhi.ctypes.data)  # fmt: skip
        launch(name, grid, block, args, self.emu_lib)

    def run_checked(self, name, grid, block, args, spec=None) -> None:
        """One launch with its output contract checked (module doc).  ``spec``:
        ``(must, may)`` as :func:`_contract` makes them (default: the gts
        kernel's own; none for a test kernel: guards only)."""
        grid = (tuple(grid) + (1,))[:2]
        spec = spec if spec is not None else _contract(name, grid, args)
        if spec is None:
            self._launch(name, grid, block, args)
            self.check_guards(name)
            return
        must, may = spec
        live = self._live()
        for addr, nbytes in [(m[0], m[1]) for m in must] + list(may):
            if nbytes and self._find(addr, nbytes, live) is None:
                raise fault(f"{name}: its tables name [{addr:#x}, +{nbytes}), which lies in no live allocation")
        for addr, nbytes, _, _ in must:
            ctypes.memset(addr, MUST_WRITE[0], nbytes)
        before = [a.data.copy() for a in live]
        self._launch(name, grid, block, args)
        self.check_guards(name)
        allowed = [(addr, nbytes) for addr, nbytes, _, _ in must] + list(may)
        for a, old in zip(live, before):
            changed = old != a.data
            for addr, nbytes in allowed:
                lo, hi = max(addr - a.lo, 0), min(addr + nbytes - a.lo, a.nbytes)
                if lo < hi:
                    changed[lo:hi] = False
            if changed.any():
                at = int(np.flatnonzero(changed)[0])
                raise fault(f"{name} wrote {int(changed.sum())} bytes outside its outputs, first at offset {at} "
                            f"of {a.name()}")  # fmt: skip
        self._check_written(name, grid, block, args, must)

    def _check_written(self, name, grid, block, args, must) -> None:
        """Every element ``must`` names was written: none still reads as the
        fill; a suspect (a written value may equal it) is filled with the
        second pattern and the launch, idempotent, runs again."""

        def elements(addr, count, es):
            return np.ctypeslib.as_array((ctypes.c_uint8 * (count * es)).from_address(addr)).reshape(-1, es)

        suspects = []
        for addr, nbytes, es, applies in must:
            if nbytes and applies():
                idx = np.flatnonzero((elements(addr, nbytes // es, es) == MUST_WRITE[0]).all(axis=1))
                if idx.size:
                    suspects.append((addr, es, idx))
        if not suspects:
            return
        for addr, es, idx in suspects:
            elements(addr, int(idx[-1]) + 1, es)[idx] = MUST_WRITE[1]
        self._launch(name, grid, block, args)
        for addr, es, idx in suspects:
            left = idx[(elements(addr, int(idx[-1]) + 1, es)[idx] == MUST_WRITE[1]).all(axis=1)]
            if left.size:
                a = self._find(addr, es)
                where = f"element {(addr - a.lo) // es + int(left[0])} of {a.name()}" if a else f"{addr:#x}"
                raise fault(f"{name} left {left.size} output elements of {es} bytes unwritten, first {where}")


class EmuKernel:
    def __init__(self, name: str, log: list, device: EmuDevice | None = None):
        self.name = name
        self.log = log
        self.device = device

    def __call__(self, grid, block, args):
        gx, gy = (tuple(grid) + (1,))[:2]
        (bx,) = tuple(block)[:1]
        self.log.append((self.name, (gx, gy), bx))
        if self.device is None:
            launch(self.name, grid, block, args)
        else:
            self.device.run_checked(self.name, (gx, gy), (bx,), args)


class _NoTimer:
    def mark(self, name):
        pass

    def host_stage(self, name):
        return contextlib.nullcontext()

    def result(self):
        return {}


# ----------------------------------------------------------------------------- output contracts

_DECODE_ELEM = {"gts_decode_timestamps": 8, "gts_decode_sequences": 8, "gts_decode_optypes": 1, "gts_decode_floats": 8}
# the one-chunk-per-warp kernels: (chunks, n_chunks, status, summary), chunks of 1..GTS_WARP_MAX_ROWS rows
_WARP_DECODE_ELEM = {f"{name}_warp": es for name, es in _DECODE_ELEM.items()}


def _table(arr, dtype, n: int) -> np.ndarray:
    return np.array(arr.view(np.uint8)[: n * dtype.itemsize]).view(dtype)


def _span(arr) -> tuple[int, int]:
    return int(arr.ctypes.data), int(arr.nbytes)


def _words(mask_addr: int, row0: int, rows: int) -> tuple[int, int]:
    """Byte span of the uint32 validity words holding bits [row0, row0 + rows)."""
    w0, w1 = row0 // 32, (row0 + rows + 31) // 32
    return mask_addr + 4 * w0, 4 * (w1 - w0)


def _always() -> bool:
    return True


def _ownership(name: str, grid, block, args):
    """The initcheck build's ownership of a decode launch: chunk ``i``'s output
    rows belong to block ``i`` (the per-chunk kernels) or to warp ``i`` (the
    *_warp kernels, GTS_WARPS chunks per block); ``(lo, hi, owner, warps)``
    arrays, None for other kernels."""
    if name not in _DECODE_ELEM and name not in _WARP_DECODE_ELEM:
        return None
    warp = name in _WARP_DECODE_ELEM
    es = _WARP_DECODE_ELEM[name] if warp else _DECODE_ELEM[name]
    descs = _table(args[0], CHUNK_DESC_DTYPE, int(args[1]) if warp else grid[0])
    rows = descs["rows"].astype(np.uint64)
    lo = descs["dst"].astype(np.uint64) + descs["out_row"].astype(np.uint64) * np.uint64(es)
    hi = lo + rows * np.uint64(es)
    ok = (rows > 0) & (rows <= (GTS_WARP_MAX_ROWS if warp else 8192))
    owner = np.arange(len(descs), dtype=np.uint32)
    lo, hi, owner = (np.ascontiguousarray(x[ok]) for x in (lo, hi, owner))
    return lo, hi, owner, (int(tuple(block)[0]) // 32 if warp else 0)


def _contract(name: str, grid, args):
    """What one launch of a gts kernel must write and may change:
    ``(must, may)`` with ``must`` = [(address, bytes, element size,
    applies())] (``applies`` is asked after the launch) and ``may`` =
    [(address, bytes)]; ``None`` for a kernel without one."""
    gx, gy = grid
    if name in _DECODE_ELEM or name in _WARP_DECODE_ELEM:
        warp = name in _WARP_DECODE_ELEM
        es = _WARP_DECODE_ELEM[name] if warp else _DECODE_ELEM[name]
        if warp:
            descs, status, summary, max_rows = _table(args[0], CHUNK_DESC_DTYPE, int(args[1])), args[2], args[3], GTS_WARP_MAX_ROWS
        else:
            descs, status, summary, max_rows = _table(args[0], CHUNK_DESC_DTYPE, gx), args[1], args[2], 8192
        must, may = [], [_span(status), _span(summary)]
        for c in descs:
            rows, chunk = int(c["rows"]), int(c["chunk"])
            if not 0 < rows <= max_rows:
                continue  # the kernel flags it (the planner never makes one)
            must.append((int(c["dst"]) + int(c["out_row"]) * es, rows * es, es,
                         lambda chunk=chunk: chunk == NO_CHUNK or int(status[chunk]) == 0))  # fmt: skip
            if name.startswith("gts_decode_floats") and int(c["mask"]):
                may.append(_words(int(c["mask"]), int(c["out_row"]), rows))
        return must, may
    if name == "gts_check_sequence_order":
        return [], [_span(args[4]), _span(args[5])]
    if name == "gts_fold_nvcomp_status":
        return [], [_span(args[5]), _span(args[6])]
    if name == "gts_xxh64":
        return [], [_span(args[2]), _span(args[3])]
    if name == "gts_trim_ranges":
        n = int(args[1])
        return [(args[7].ctypes.data, 4 * n, 4, _always), (args[8].ctypes.data, 8 * n, 8, _always)], []
    if name == "gts_scan_blocks":
        n = int(args[1])
        return [(args[2].ctypes.data, 8 * n, 8, _always), (args[3].ctypes.data + 8, 8, 8, _always)], []
    if name == "gts_broadcast_identity":
        n = int(args[1])
        blocks = _table(args[0], BLOCK_DESC_DTYPE, n)
        placed = isinstance(args[2], np.ndarray)
        out = blocks["out_row"].astype(np.int64) if not placed else args[2][:n].astype(np.int64)
        cnt = blocks["rows"].astype(np.int64) if not placed else args[3][:n].astype(np.int64)
        must = []
        for o, k in zip(out.tolist(), cnt.tolist()):
            must += [(args[4].ctypes.data + 4 * o, 4 * k, 4, _always), (args[5].ctypes.data + 8 * o, 8 * k, 8, _always)]
        return must, []
    if name == "gts_compact_columns":
        n = int(args[1])
        cols = _table(args[5], COPY_COL_DTYPE, gy)
        new_out, keep_n = args[4][:n].astype(np.int64), args[3][:n].astype(np.int64)
        must = []
        for c in cols:
            es, dst = int(c["elem_size"]), int(c["dst"])
            must += [(dst + es * o, es * k, es, _always) for o, k in zip(new_out.tolist(), keep_n.tolist())]
        return must, []
    if name == "gts_compact_masks":
        n = int(args[1])
        kept = int(args[3][:n].sum())
        masks = _table(args[5], MASK_COL_DTYPE, gy)
        return [], [_words(int(m["dst"]), 0, kept) for m in masks] + [_span(args[6])]
    return None

