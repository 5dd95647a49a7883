"""Process lifetime: what threads share, and what a forked child must not inherit.

gtsamples owns some native and thread resources (thread pools, libzstd and its
decompression contexts, numba's parallel kernels, CUDA).  This module is the one
place that knows how each behaves across threads and ``fork``:

* :func:`at_fork_child` registers a function run in a forked child, before any other
  code: thread pools forget their executors (their threads do not exist there), locks
  are made anew (another thread of the parent may have held one at the fork).
* :class:`ForkSafeLock` is a ``threading.Lock`` that is replaced in a forked child.
* :data:`PRANGE` decides how numba's ``prange`` kernels may run: never two at once
  under the ``workqueue`` layer (it aborts the process), and not at all in a child
  forked after GNU OpenMP ran a parallel region (``libgomp`` kills it): the callers
  use their serial twins then.
* numba's compiler lock is held across ``fork``, so no child inherits it held by a
  thread that does not exist there.
* :func:`note_cuda` / :func:`check_cuda`: a child forked from a process that
  initialised CUDA gets an :class:`~gtsamples.errors.UnsupportedError` instead of a
  hang or a crash (CUDA cannot be used across ``fork``; ``spawn`` and ``forkserver``
  children can use it).

``spawn`` and ``forkserver`` children start from a fresh interpreter (forkserver's
server imports nothing of gtsamples before forking): nothing here concerns them.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import weakref
from typing import Callable

from .errors import UnsupportedError

__all__ = ["at_fork_child", "ForkSafeLock", "PrangeGate", "PRANGE", "note_cuda", "check_cuda", "cuda_forked",
           "forked"]

_CHILD_HOOKS: list[Callable[[], None]] = []
_LOCKS: weakref.WeakSet = weakref.WeakSet()
#: True in a process forked (directly or not) from one that imported gtsamples.
_FORKED = False


def at_fork_child(fn: Callable[[], None]) -> Callable[[], None]:
    """Run ``fn()`` in every forked child, after the locks are renewed (usable as a decorator)."""
    _CHILD_HOOKS.append(fn)
    return fn


def forked() -> bool:
    """True in a child forked from a process that had imported gtsamples."""
    return _FORKED


class ForkSafeLock:
    """A ``threading.Lock`` made anew in a forked child: a lock that another thread of
    the parent held at the fork would stay locked forever in the child."""

    __slots__ = ("lock", "__weakref__")

    def __init__(self):
        self.lock = threading.Lock()
        _LOCKS.add(self)

    def renew(self) -> None:
        self.lock = threading.Lock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self.lock.acquire(blocking, timeout)

    def release(self) -> None:
        self.lock.release()

    def locked(self) -> bool:
        return self.lock.locked()

    def __enter__(self):
        self.lock.acquire()
        return self

    def __exit__(self, *exc):
        self.lock.release()
        return False


# ----------------------------------------------------------------------------- numba's prange kernels
#: Layers that run several parallel kernels at once and survive fork; anything else
#: (``workqueue``, or a layer not known yet: numba picks it at the first parallel call)
#: runs one parallel kernel at a time.
_CONCURRENT_LAYERS = ("tbb", "omp")


def _current_layer() -> str | None:
    """numba's threading layer, None before its first parallel kernel (or without numba)."""
    if "numba" not in sys.modules:
        return None
    try:
        import numba

        return numba.threading_layer()
    except (ValueError, ImportError, AttributeError):
        return None


def _omp_vendor() -> str | None:
    try:
        from numba.np.ufunc import omppool

        return getattr(omppool, "openmp_vendor", None)
    except ImportError:  # pragma: no cover - numba without its OpenMP layer
        return None


class PrangeGate:
    """How ``prange`` kernels may run in this process.

    * :attr:`allowed`: False in a child forked after GNU OpenMP ran a parallel region
      (``libgomp`` is not fork-safe: numba terminates such a child at its first parallel
      kernel); callers then run the serial twins.
    * :meth:`turn`: the context a parallel kernel runs in: a lock under ``workqueue``
      (which aborts on concurrent use) and before numba has picked its layer, nothing
      under ``omp`` and ``tbb``.
    """

    def __init__(self):
        self.layer: str | None = None
        self.allowed = True
        self.lock = ForkSafeLock()
        self.twins: dict = {}

    def learn(self) -> str | None:
        """Record numba's layer once a parallel kernel has run (and return it)."""
        if self.layer is None:
            self.layer = _current_layer()
        return self.layer

    @property
    def serialised(self) -> bool:
        return self.layer not in _CONCURRENT_LAYERS

    @contextlib.contextmanager
    def turn(self):
        if self.layer in _CONCURRENT_LAYERS:
            yield
            return
        with self.lock:
            yield
            self.learn()

    def call(self, kernel, *args):
        """``kernel(*args)``, a ``prange`` kernel without a serial twin of its own: in
        this gate's turn, or where parallel kernels may not run, as :meth:`serial`."""
        if not self.allowed:
            return self.serial(kernel)(*args)
        with self.turn():
            return kernel(*args)

    def serial(self, kernel):
        """The serial twin of numba dispatcher ``kernel`` (its Python function compiled
        without ``parallel``: ``prange`` is ``range`` there), compiled once on first use."""
        twin = self.twins.get(kernel)
        if twin is None:
            with self.lock:
                twin = self.twins.get(kernel)
                if twin is None:
                    import numba

                    twin = self.twins[kernel] = numba.njit(nogil=True)(kernel.py_func)
        return twin

    def after_fork_in_child(self, parent_layer: str | None) -> None:
        self.layer = parent_layer or self.layer
        if self.layer == "omp" and _omp_vendor() != "Intel":  # GNU OpenMP (Intel's is fork-safe)
            self.allowed = False


#: The process's gate for numba's parallel kernels.
PRANGE = PrangeGate()


# ----------------------------------------------------------------------------- CUDA
_CUDA_PID: int | None = None


def note_cuda() -> None:
    """Record that this process is about to initialise CUDA (called before the first CUDA call)."""
    global _CUDA_PID
    if _CUDA_PID is None:
        _CUDA_PID = os.getpid()


def cuda_forked() -> bool:
    """True when this process was forked from one that had initialised CUDA."""
    return _CUDA_PID is not None and _CUDA_PID != os.getpid()


def check_cuda() -> None:
    """Raise :class:`UnsupportedError` in a child forked after its parent initialised CUDA."""
    if cuda_forked():
        raise UnsupportedError(
            f"the GPU cannot be used in this process: it was forked from process {_CUDA_PID}, which had "
            "initialised CUDA, and CUDA does not survive fork; start worker processes with multiprocessing's "
            "'spawn' or 'forkserver' context (multiprocessing.get_context('spawn')), or read with device='cpu'")


# ----------------------------------------------------------------------------- fork hooks
_LAYER_AT_FORK: list = [None]
_COMPILER_LOCK_HELD: list = [False]


def _compiler_lock():
    if "numba" not in sys.modules:
        return None
    try:
        from numba.core.compiler_lock import global_compiler_lock
    except ImportError:  # pragma: no cover - numba moved it
        return None
    return global_compiler_lock


def _before_fork() -> None:
    _LAYER_AT_FORK[0] = _current_layer()
    lock = _compiler_lock()
    if lock is not None:
        lock.acquire()
        _COMPILER_LOCK_HELD[0] = True


def _release_compiler_lock() -> None:
    if _COMPILER_LOCK_HELD[0]:
        _COMPILER_LOCK_HELD[0] = False
        _compiler_lock().release()


def _after_fork_in_parent() -> None:
    _release_compiler_lock()


def _after_fork_in_child() -> None:
    global _FORKED
    _release_compiler_lock()
    _FORKED = True
    for lock in list(_LOCKS):
        lock.renew()
    PRANGE.after_fork_in_child(_LAYER_AT_FORK[0])
    for fn in _CHILD_HOOKS:
        fn()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)
