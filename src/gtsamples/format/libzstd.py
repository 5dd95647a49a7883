"""libzstd's one-shot decompression, called from numba kernels without the GIL.

python-zstandard's ``ZstdDecompressor.decompress`` costs about 6.5 us of
interpreter work per call, returns a fresh ``bytes`` object that the CPU
backend then copies into its window, and holds the GIL between calls.  A full
scan decompresses ~14,000 chunks, so that was ~20% of the backend's CPU time
(measured: 462 ms -> 370 ms for 243 MB on one thread).  Here the same library
is called directly: ``ZSTD_decompressDCtx`` writes straight into the window
and a numba loop issues one call per chunk.

Which libzstd: the one python-zstandard ships (its cffi extension module
exports the ``ZSTD_*`` symbols, so this is the very library the fallback path
uses), else the system's ``libzstd``.  ``GTSAMPLES_LIBZSTD`` overrides the
search: a path to a shared library, or ``off`` to force python-zstandard.
When nothing loads, :func:`get` returns None and the CPU backend keeps its
python-zstandard loop; both paths classify failures identically (see
:func:`classify`), which the tests check.

Safety is unchanged: every frame passed the structural check of
:mod:`.zstd_frames` (one frame ending exactly at the stored length, content
size equal to the declared length when present) and its XXH64, and the
destination capacity is the declared length, so output stays bounded whatever
a frame claims.

Lifetimes: a loaded library is created once per search (under a lock, see
:func:`_load`) and kept for the process's life in a module dict: kernels hold its
function address and contexts without a reference Python could count.  Each thread
borrows one ``ZSTD_DCtx`` (:meth:`LibZstd.dctx`) and gives it back to the library's
free list when the thread ends; contexts are never freed while the library lives, so
no kernel can decompress into a freed context.  A forked child keeps them (its copy
of the memory is valid; a context is reset at every frame).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import importlib.machinery
import os
import threading
import time

import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic, overload

from ..errors import DecodeErrorFlag
from ..runtime import ForkSafeLock

__all__ = ["LibZstd", "get", "zstd_decompress_into", "classify", "monotonic_ns", "thread_cpu_ns",
           "CLOCK_GETTIME_ADDR"]

ENV_VAR = "GTSAMPLES_LIBZSTD"
#: Oldest libzstd accepted (ZSTD_getErrorCode and stable error enums).
MIN_VERSION = 10400

#: A Zstd frame of 64 zero bytes (level 1, content size present): the self-test input.
_ZEROS_64_FRAME = bytes.fromhex("28b52ffd20404500001000000100930016")

_DECOMPRESS_T = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                 ctypes.c_void_p, ctypes.c_size_t)


class LibZstd:
    """A loaded libzstd: the raw address of ``ZSTD_decompressDCtx`` for kernels,
    ctypes wrappers for the host, and per-thread decompression contexts (owned by the
    library: lent to a thread, returned to :attr:`free` when the thread ends)."""

    def __init__(self, lib: ctypes.CDLL, path: str):
        self.path = path
        self._lib = lib
        lib.ZSTD_versionNumber.restype = ctypes.c_uint
        lib.ZSTD_createDCtx.restype = ctypes.c_void_p
        lib.ZSTD_freeDCtx.argtypes = [ctypes.c_void_p]
        lib.ZSTD_freeDCtx.restype = ctypes.c_size_t
        lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
        lib.ZSTD_isError.restype = ctypes.c_uint
        lib.ZSTD_getErrorCode.argtypes = [ctypes.c_size_t]
        lib.ZSTD_getErrorCode.restype = ctypes.c_int
        lib.ZSTD_getErrorName.argtypes = [ctypes.c_size_t]
        lib.ZSTD_getErrorName.restype = ctypes.c_char_p
        self.version = int(lib.ZSTD_versionNumber())
        #: Address of ``size_t ZSTD_decompressDCtx(ZSTD_DCtx*, void* dst, size_t cap, const void* src, size_t n)``.
        self.decompress_addr = ctypes.cast(lib.ZSTD_decompressDCtx, ctypes.c_void_p).value
        self.decompress = _DECOMPRESS_T(self.decompress_addr)
        self._tls = threading.local()
        #: Contexts no thread holds (returned by ended threads), reused before creating one.
        #: ``list.append`` / ``list.pop`` are atomic: a lease's ``__del__`` may run anywhere.
        self.free: list[int] = []
        #: Every context this library created (never freed: kernels may still use a lent one).
        self.created = 0
        self.dst_too_small = self._calibrate()

    def _calibrate(self) -> int:
        """The error code of output exceeding the capacity, taken from the library itself."""
        src = np.frombuffer(_ZEROS_64_FRAME, np.uint8)
        dst = np.empty(64, np.uint8)
        r = self.decompress(self.dctx(), dst.ctypes.data, 63, src.ctypes.data, src.size)
        if not self._lib.ZSTD_isError(r):  # pragma: no cover - a broken library
            raise OSError(f"{self.path}: ZSTD_decompressDCtx ignored its capacity")
        ok = self.decompress(self.dctx(), dst.ctypes.data, 64, src.ctypes.data, src.size)
        if ok != 64 or dst.any():  # pragma: no cover - a broken library
            raise OSError(f"{self.path}: ZSTD_decompressDCtx failed its self-test")
        return int(self._lib.ZSTD_getErrorCode(r))

    def dctx(self) -> int:
        """This thread's ``ZSTD_DCtx*`` (lent on first use, returned when the thread ends)."""
        holder = getattr(self._tls, "holder", None)
        if holder is None:
            holder = self._tls.holder = _Lease(self)
        return holder.ptr

    def take(self) -> int:
        """A context no thread uses: a returned one, else a new one."""
        try:
            return self.free.pop()
        except IndexError:
            ptr = self._lib.ZSTD_createDCtx()
            if not ptr:  # pragma: no cover - out of memory
                raise MemoryError("ZSTD_createDCtx failed") from None
            self.created += 1
            return ptr

    def is_error(self, code: int) -> bool:
        return bool(self._lib.ZSTD_isError(code))

    def error_name(self, code: int) -> str:
        return self._lib.ZSTD_getErrorName(code).decode("ascii", "replace")

    def error_code(self, code: int) -> int:
        return int(self._lib.ZSTD_getErrorCode(code))


class _Lease:
    """One thread's loan of a context of ``lib``, given back when its thread's locals go
    (the context itself lives as long as the library: never freed under a kernel)."""

    __slots__ = ("lib", "ptr")

    def __init__(self, lib: LibZstd):
        self.lib = lib
        self.ptr = lib.take()

    def __del__(self):
        ptr, self.ptr = self.ptr, 0
        if ptr:
            self.lib.free.append(ptr)


def _candidates(env: str):
    """Library paths to try, best first (lazily: the system search runs a subprocess)."""
    if env.lower() in ("off", "0", "none", "python"):
        return
    if env:
        yield env
        return
    try:
        import zstandard
    except ImportError:  # pragma: no cover - zstandard is a dependency; the system library may still load
        pass
    else:
        here = os.path.dirname(zstandard.__file__)
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            yield from sorted(glob.glob(os.path.join(here, "_cffi" + suffix)))
    system = ctypes.util.find_library("zstd")
    if system:
        yield system


#: The library each search found (None: none loads), kept for the process's life.
_LIBS: dict[str, LibZstd | None] = {}
_LIBS_LOCK = ForkSafeLock()


def _load(env: str) -> LibZstd | None:
    """The library of search ``env``, found once: concurrent first calls wait for one search
    (each building its own, the losers' contexts were freed under running kernels)."""
    try:
        return _LIBS[env]
    except KeyError:
        pass
    with _LIBS_LOCK:
        if env not in _LIBS:
            _LIBS[env] = _find(env)
        return _LIBS[env]


def _find(env: str) -> LibZstd | None:
    if ctypes.sizeof(ctypes.c_void_p) != 8:  # pragma: no cover - the kernel call assumes 64-bit arguments
        return None
    for path in _candidates(env):
        try:
            lib = ctypes.CDLL(path)
            for sym in ("ZSTD_decompressDCtx", "ZSTD_createDCtx", "ZSTD_freeDCtx", "ZSTD_isError",
                        "ZSTD_getErrorCode", "ZSTD_getErrorName", "ZSTD_versionNumber"):
                getattr(lib, sym)
            z = LibZstd(lib, path)
        except (OSError, AttributeError):
            continue
        if z.version >= MIN_VERSION:
            return z
    return None


def get() -> LibZstd | None:
    """The libzstd the CPU backend calls, or None (python-zstandard is used then)."""
    return _load(os.environ.get(ENV_VAR, "").strip())


def classify(z: LibZstd, result: int, declared: int) -> tuple[int, str]:
    """``(flag, message)`` for a ``ZSTD_decompressDCtx`` result that is not ``declared``.

    The same split as the python-zstandard path: output that does not fit the
    declared capacity, or falls short of it, is a length mismatch; any other
    libzstd error a decompression failure.
    """
    result &= (1 << 64) - 1
    if z.is_error(result):
        name = z.error_name(result)
        if z.error_code(result) == z.dst_too_small:
            return int(DecodeErrorFlag.DECODED_LENGTH_MISMATCH), f"zstd: {name} (more than the declared {declared} bytes)"
        return int(DecodeErrorFlag.ZSTD_DECOMPRESS_FAILED), f"zstd: {name}"
    return int(DecodeErrorFlag.DECODED_LENGTH_MISMATCH), f"zstd produced {result} bytes, declared {declared}"


# --- the call from numba -----------------------------------------------------------------
def zstd_decompress_into(fn, dctx, dst, cap, src, n):
    """``ZSTD_decompressDCtx(dctx, dst, cap, src, n)`` through the function address ``fn``
    (all arguments integers: addresses and sizes).  Returns the raw ``size_t`` result as int64.

    Compiled code calls the address directly (:func:`_call_addr`); this body is
    what runs when the kernels run as Python (tests)."""
    r = _DECOMPRESS_T(int(fn))(int(dctx), int(dst), int(cap), int(src), int(n))
    return np.int64(np.uint64(r).view(np.int64) if r >= 1 << 63 else r)


@intrinsic
def _call_addr(typingctx, fn, args):
    """Call the C function at address ``fn`` with the integers of the tuple ``args``,
    each passed as a 64-bit argument, returning the 64-bit result register.

    On x86-64 and AArch64 pointers, ``size_t`` and ``int`` travel in the same 64-bit
    integer registers, so ``(i64 x5) -> i64`` is ABI-identical to
    ``ZSTD_decompressDCtx``'s prototype, and ``(i64 x2) -> i64`` calls
    ``clock_gettime`` (whose ``int`` result the caller ignores).  The address is a
    run-time argument, so the calling kernels stay cacheable."""
    if not (isinstance(fn, types.Integer) and isinstance(args, types.BaseTuple)
            and all(isinstance(t, types.Integer) for t in args)):
        return None
    sig = types.int64(fn, args)

    def codegen(context, builder, signature, llargs):
        i64 = ir.IntType(64)
        addr = context.cast(builder, llargs[0], signature.args[0], types.int64)
        vals = [context.cast(builder, builder.extract_value(llargs[1], k), t, types.int64)
                for k, t in enumerate(signature.args[1])]
        fnty = ir.FunctionType(i64, [i64] * len(vals))
        return builder.call(builder.inttoptr(addr, fnty.as_pointer()), vals)

    return sig, codegen


@overload(zstd_decompress_into, inline="always")
def _zstd_decompress_into_ol(fn, dctx, dst, cap, src, n):
    return lambda fn, dctx, dst, cap, src, n: _call_addr(fn, (dctx, dst, cap, src, n))


# --- a monotonic clock for kernels ------------------------------------------------------
def _clock_gettime_addr() -> int:
    """Address of libc's ``clock_gettime`` (0 where there is none: kernels then time nothing)."""
    try:
        return int(ctypes.cast(ctypes.CDLL(None).clock_gettime, ctypes.c_void_p).value or 0)
    except (OSError, AttributeError):  # pragma: no cover - not a POSIX libc
        return 0


#: ``int clock_gettime(clockid_t, struct timespec *)``, for :func:`monotonic_ns` in kernels.
CLOCK_GETTIME_ADDR = _clock_gettime_addr()
CLOCK_MONOTONIC = getattr(time, "CLOCK_MONOTONIC", 1)  # this platform's id (1 on Linux, 6 on macOS)
#: This thread's CPU time (3 on Linux, 16 on macOS); -1 where the platform has none.
CLOCK_THREAD_CPUTIME = getattr(time, "CLOCK_THREAD_CPUTIME_ID", -1)


def monotonic_ns(fn, buf):
    """``CLOCK_MONOTONIC`` in nanoseconds through ``clock_gettime`` at address ``fn``
    (0: returns 0), ``buf`` an int64[2] ``struct timespec``: a kernel running several
    steps without the GIL times each one.  This body runs when kernels run as Python."""
    return time.monotonic_ns() if fn else 0


@overload(monotonic_ns, inline="always")
def _monotonic_ns_ol(fn, buf):
    def impl(fn, buf):
        if fn == 0:
            return np.int64(0)
        _call_addr(fn, (CLOCK_MONOTONIC, buf.ctypes.data))
        return np.int64(buf[0] * 1_000_000_000 + buf[1])

    return impl


def thread_cpu_ns(fn, buf):
    """This thread's CPU time in nanoseconds (``CLOCK_THREAD_CPUTIME_ID``) through
    ``clock_gettime`` at address ``fn`` (0, or no such clock: returns 0), ``buf`` an
    int64[2] ``struct timespec``.  Unlike :func:`monotonic_ns` it does not count the
    time the thread waits for a core, so a stage's cost reads the same on a busy
    machine.  This body runs when kernels run as Python."""
    return time.thread_time_ns() if fn and CLOCK_THREAD_CPUTIME >= 0 else 0


@overload(thread_cpu_ns, inline="always")
def _thread_cpu_ns_ol(fn, buf):
    def impl(fn, buf):
        if fn == 0 or CLOCK_THREAD_CPUTIME < 0:
            return np.int64(0)
        _call_addr(fn, (CLOCK_THREAD_CPUTIME, buf.ctypes.data))
        return np.int64(buf[0] * 1_000_000_000 + buf[1])

    return impl
