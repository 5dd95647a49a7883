"""The numba kernels' compile cache: compiled once per installation, not once per process.

Every CPU kernel is declared with :func:`njit` (numba.njit's options, always cached).
numba's own cache lives beside the sources (``__pycache__``) when that is writable and
in the user's cache directory otherwise, so a cache warmed at install time is never read
where ``site-packages`` is read-only (a Docker image run as another user, a shared
environment), and every fresh environment compiles every kernel on its first read.

Here each kernel looks in two places, in this order:

1. the package's cache, ``gtsamples/_jitcache/`` beside this file, filled by
   ``gtsamples warmup`` (run by the Docker images and ``make setup`` at install time);
   read even where the package is read-only;
2. the user's cache: ``$GTSAMPLES_CACHE_DIR``, else ``$NUMBA_CACHE_DIR/gtsamples``, else
   the platform's user cache directory (``~/.cache/gtsamples`` on Linux); one folder
   per hash of the sources in it.

A kernel compiled in a process is saved in the first of the two that is writable (so a
read-only install with a writable home compiles each kernel once, not in every process);
where neither is, it is only kept in memory.  Entries are keyed as numba keys them (the
signature, the CPU the code was compiled for, the kernel's bytecode, numba's version) and
stamped with the package version and a hash of all the package's sources (not their
mtimes, and not only the kernel's own file: kernels inline code from other modules), so
that the package's cache stays valid when the package is copied (a wheel, an image layer)
and no entry survives an edit.  Its paths name the module, not where it is installed.

:func:`compiled` lists the kernels this process compiled (cache misses): the warm-up
command and the tests use it to show that a warmed install compiles nothing.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import tempfile
import threading

import numba
from numba.core.caching import Cache, CompileResultCacheImpl, IndexDataCacheFile
from numba.misc.appdirs import AppDirs

#: the package's own cache directory (filled by ``gtsamples warmup``)
PACKAGE_CACHE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_jitcache")

_PACKAGE = __name__.rpartition(".")[0]
_KERNELS: list = []  # every dispatcher made by njit, in definition order
_WRITABLE: dict[str, bool] = {}
_LOCK = threading.Lock()


def _renew_lock() -> None:
    """In a forked child: another thread of the parent may have held the lock at the fork."""
    global _LOCK
    _LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_lock)


def package_version() -> str:
    """``gtsamples.__version__`` (also inside the hashed sources; read from the imported
    package, not the distribution's metadata, which costs tens of milliseconds)."""
    return str(getattr(sys.modules.get(_PACKAGE), "__version__", "unknown"))


def user_cache_dir() -> str:
    """Where kernels compiled at run time are saved when the package's cache is read-only."""
    own = os.environ.get("GTSAMPLES_CACHE_DIR")
    if own:
        return own
    if numba.config.CACHE_DIR:
        return os.path.join(numba.config.CACHE_DIR, _PACKAGE)
    return AppDirs(appname=_PACKAGE, appauthor=False).user_cache_dir


@functools.lru_cache(maxsize=1)
def sources_hash() -> str:
    """SHA-256 of every ``.py`` file of the package (paths and contents): a kernel inlines
    code from other modules (intrinsics, decoders, page rules), so an edit anywhere in the
    package retires every entry, where numba's own stamp only follows the kernel's file."""
    root = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", "_jitcache"))
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                h.update(os.path.relpath(path, root).encode())
                with open(path, "rb") as f:
                    h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def writable(path: str) -> bool:
    """Whether ``path`` exists or can be made, and takes a file (checked once per process)."""
    with _LOCK:
        ok = _WRITABLE.get(path)
        if ok is None:
            try:
                os.makedirs(path, exist_ok=True)
                tempfile.TemporaryFile(dir=path).close()
                ok = True
            except OSError:
                ok = False
            _WRITABLE[path] = ok
        return ok


_X86_64_V3 = ("cmov,cx8,fxsr,mmx,sse,sse2,cx16,sahf,popcnt,sse3,sse4.1,sse4.2,ssse3,"
              "avx,avx2,bmi,bmi2,f16c,fma,lzcnt,movbe,xsave")
#: the portable targets, best first, as ``(NUMBA_CPU_NAME, NUMBA_CPU_FEATURES)``: x86-64-v3
#: (Haswell, Zen and later: AVX2, BMI2), then the architecture's baseline (``generic``)
PORTABLE_TARGETS = (("x86-64-v3", ",".join("+" + f for f in _X86_64_V3.split(","))), ("generic", ""))


def slow_pext(cpu_name: str) -> bool:
    """Whether BMI2's ``pext`` is microcoded (tens to hundreds of cycles) on ``cpu_name``:
    AMD before Zen 3."""
    return cpu_name in ("znver1", "znver2") or cpu_name.startswith(("bdver", "btver"))


@functools.lru_cache(maxsize=1)
def host_portable_targets() -> tuple[tuple[str, str], ...]:
    """The portable targets this CPU runs (and runs well: no x86-64-v3 where ``pext`` is
    slow), best first; ``generic`` always."""
    import platform

    import llvmlite.binding as ll

    out = []
    for name, features in PORTABLE_TARGETS:
        if name == "generic":
            out.append((name, features))
            continue
        if platform.machine().lower() not in ("x86_64", "amd64"):
            continue
        try:
            host = ll.get_host_cpu_features()
            ok = all(host.get(f[1:], False) for f in features.split(",")) and not slow_pext(ll.get_host_cpu_name())
        except Exception:  # pragma: no cover - llvmlite without host introspection
            ok = False
        if ok:
            out.append((name, features))
    return tuple(out)


def portable_keys(key) -> list:
    """``key`` (numba's: signature, (triple, CPU, features), hashes) for each portable
    target this CPU runs, best first; none where the process compiles for a target of
    its own choosing (``NUMBA_CPU_NAME``), which only its own entries serve."""
    if numba.config.CPU_NAME is not None:
        return []
    sig, magic, hashes = key
    return [(sig, (magic[0], name, features), hashes) for name, features in host_portable_targets()]


class _Locator:
    """What numba's cache implementation asks of a locator (the file, the disambiguator)."""

    def __init__(self, py_func):
        self._py_file = py_func.__code__.co_filename
        self._lineno = py_func.__code__.co_firstlineno

    def get_disambiguator(self) -> str:
        return str(self._lineno)


class _Impl(CompileResultCacheImpl):
    """numba's CompileResult (de)serialisation, with our locator (none of numba's)."""

    def __init__(self, py_func):
        self._lineno = py_func.__code__.co_firstlineno
        self._locator = _Locator(py_func)
        module = py_func.__module__
        fullname = f"{module.rpartition('.')[2]}.{py_func.__qualname__}"
        self._filename_base = self.get_filename_base(fullname, getattr(sys, "abiflags", ""))


class TwoLevelCache(Cache):
    """A kernel's cache: loaded from the package's cache, then the user's; saved in the
    first writable one.  Index and data files are numba's (``IndexDataCacheFile``)."""

    _impl_class = _Impl

    def __init__(self, py_func):
        self._name = repr(py_func)
        self._py_func = py_func
        self._impl = _Impl(py_func)
        self._enabled = True
        self._subdir = py_func.__module__
        self._files = None
        self._cache_path = os.path.join(PACKAGE_CACHE, self._subdir)

    def _index_files(self):
        # made on first use: the stamp hashes the sources, which an import need not do
        if self._files is None:
            stamp = (package_version(), sources_hash())
            base = self._impl.filename_base
            # the user's cache is shared by every install of the package (two virtualenvs
            # of two versions): one folder per sources' hash, so that they do not evict
            # each other's entries
            roots = (PACKAGE_CACHE, os.path.join(user_cache_dir(), sources_hash()[:16]))
            self._files = [(root, IndexDataCacheFile(os.path.join(root, self._subdir), base, stamp))
                           for root in roots]
        return self._files

    def _index_key(self, sig, codegen):
        # numba's key: the signature, the codegen's (triple, CPU name, features), the
        # bytecode's and closure's hashes
        return super()._index_key(sig, codegen)

    def flush(self):
        pass  # entries are only added; a stale index is replaced by its stamp

    def _load_overload(self, sig, target_context):
        if not self._enabled:
            return None
        codegen = target_context.codegen()
        key = self._index_key(sig, codegen)
        # this CPU's entries first (either cache), then the package's portable ones
        tries = [(f, key) for _, f in self._index_files()]
        tries += [(self._index_files()[0][1], k) for k in portable_keys(key) if k != key]
        for f, k in tries:
            try:
                data = f.load(k)
            except Exception:  # an unreadable or truncated entry: compile instead
                data = None
            if data is not None:
                return self._impl.rebuild(target_context, data)
        return None

    def _save_overload(self, sig, data):
        if not self._enabled or not self._impl.check_cachable(data):
            return
        for root, f in self._index_files():
            if writable(os.path.join(root, self._subdir)):
                self._cache_path = os.path.join(root, self._subdir)
                try:
                    f.save(self._index_key(sig, data.codegen), self._impl.reduce(data))
                except OSError:
                    pass  # a full disk or a racing writer: the kernel still runs
                return


def njit(*args, **options):
    """``numba.njit`` with this module's cache (``cache=`` is ignored: always cached)."""
    options.pop("cache", None)

    def wrap(fn):
        disp = numba.njit(**options)(fn)
        disp._cache = TwoLevelCache(disp.py_func)
        _KERNELS.append(disp)
        return disp

    if args and callable(args[0]):
        return wrap(args[0])
    return wrap


def kernels() -> list:
    """Every kernel declared with :func:`njit` in the modules imported so far."""
    return list(_KERNELS)


def compiled() -> list[tuple[str, str]]:
    """``(kernel, signature)`` of each kernel this process compiled (found in no cache)."""
    return [(f"{d.py_func.__module__}.{d.py_func.__qualname__}", str(sig))
            for d in _KERNELS for sig, n in d.stats.cache_misses.items() if n]
