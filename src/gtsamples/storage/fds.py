"""A bounded, process-wide cache of open read-only file descriptors.

A region read touches one part file per artifact; opening and closing each on
every read costs more than the ``pread`` itself (the path walk through the
generation directories).  :class:`LocalStore` keeps the parts it reads through
:meth:`~gtsamples.storage.Store.read_many_into` and
:meth:`~gtsamples.storage.Store.reader` open here, keyed by absolute path.

Safety (why a cached descriptor never reads another object's bytes):

* **Leases.** A reader holds a lease (a reference count) for as long as it uses a
  descriptor.  Eviction, :meth:`FdCache.clear` and a replaced cache only mark a
  leased entry dead; its descriptor is closed by the last release, so a number
  another thread is reading through is never closed (and reused for another file).
* **Deleted or replaced objects.** Every lease checks the open file's link count
  (one ``fstat``): an object removed (region GC, ``shutil.rmtree``) or replaced by a
  rename over it (:meth:`LocalStore.put`) has none left, so its descriptor is dropped
  and the path opened again.  While the descriptor is open its inode cannot be
  reused, so no later object can look like it.  What the check cannot see is a file
  renamed *away* (it keeps its link) with a new object written at its old path:
  the objects read through this cache are artifact parts, whose generation
  directories are published by one rename and never renamed again (in a region,
  named by a random UUID, never reused); :func:`clear_fd_cache` forgets everything
  for code that moves artifacts.  :class:`LocalStore`'s own ``put`` and ``remove``
  forget what they replace or remove (:meth:`FdCache.forget`).
* **EMFILE/ENFILE.** When an ``open`` finds no descriptor free, the idle cached
  ones are closed and the open retried once, uncached (closed by its release).

Lifetime: entries live until evicted (least recently used first, beyond
``max_fds`` entries), forgotten, or the cache is cleared or replaced; at most
``max_fds`` idle descriptors, plus those leased at the time.  A descriptor has one
owner: its table entry while idle, its leases while leased; one out of the table
and still leased (evicted, forgotten, cleared, or never cached) is kept in the
cache's ``held`` set until its last release closes it.  Threads: one
:class:`~gtsamples.runtime.ForkSafeLock`; system calls are made outside it.

Fork: the child renews the lock and keeps the inherited descriptors (``pread`` has
no file position to share).  Each lease records the thread that took it, so the
child knows which leases are its own: only the forking thread exists there, and the
leases of the parent's other threads would never be given back.  Those are dropped
in the child: a table entry becomes idle (a usable cached descriptor), and a held
one no lease of the forking thread still uses is closed (the parent's stays open).
Descriptors are opened ``O_CLOEXEC`` (Python's default): an ``exec`` drops them.
"""

from __future__ import annotations

import collections
import errno
import os
import threading
import weakref

from ..runtime import ForkSafeLock, at_fork_child

__all__ = ["DEFAULT_MAX_FDS", "FdCache", "FdLease", "clear_fd_cache", "default_fd_cache", "set_fd_cache_size"]

#: Open descriptors the process-wide cache keeps (idle ones; leased ones come on top),
#: lowered to a quarter of the process's soft ``RLIMIT_NOFILE`` when that is smaller.
DEFAULT_MAX_FDS = 256

_NO_FDS = (errno.EMFILE, errno.ENFILE)
_O_RDONLY = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)


class FdLease:
    """One open descriptor of ``path`` and its leases.  ``fd`` is valid while the
    caller's lease is held (from :meth:`FdCache.lease` to :meth:`FdCache.release`)."""

    __slots__ = ("path", "fd", "refs", "dead", "cached", "holders")

    def __init__(self, path: str, fd: int, cached: bool, holder: int):
        self.path = path
        self.fd = fd
        self.refs = 1
        self.dead = not cached  # an uncached lease closes on its release
        self.cached = cached
        #: the thread of each lease held (``refs`` entries): a forked child keeps only its own
        self.holders = [holder]


def _soft_fd_limit() -> int | None:
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):  # pragma: no cover - platforms without it
        return None
    return None if soft == resource.RLIM_INFINITY else int(soft)


class FdCache:
    """An LRU of at most ``max_fds`` open read-only descriptors, keyed by absolute
    path (0: nothing kept, every lease opens and its release closes).  See the module
    docstring for what makes a cached descriptor safe to read."""

    def __init__(self, max_fds: int = DEFAULT_MAX_FDS):
        if max_fds < 0:
            raise ValueError("max_fds must be >= 0")
        self.max_fds = int(max_fds)
        self._items: "collections.OrderedDict[str, FdLease]" = collections.OrderedDict()
        self._lock = ForkSafeLock()  # renewed in a forked child (runtime)
        #: entries out of the table and still leased: closed by their last release
        self._held: set[FdLease] = set()
        self.hits = 0
        self.misses = 0
        _CACHES.add(self)

    def __len__(self) -> int:
        return len(self._items)

    def __del__(self, _close=os.close):
        # a cache dropped with idle entries (a caller's own; a replaced default is cleared;
        # a leased one keeps its cache alive through the lease's release); os.close bound
        # now: at interpreter exit module globals may be gone
        for e in list(getattr(self, "_items", {}).values()):
            if e.refs == 0 and not e.dead:
                e.dead = True
                try:
                    _close(e.fd)
                except OSError:
                    pass

    # -- leases -------------------------------------------------------------------------
    def lease(self, path: str) -> FdLease:
        """A lease of an open descriptor of ``path`` (an absolute path): the cached one,
        else a new one (cached unless the cache is off or no descriptor was free).
        ``OSError`` when the file cannot be opened.  Release it with :meth:`release`."""
        e = None
        if self.max_fds:
            me = _get_ident()
            with self._lock.lock:  # the raw lock: no Python-level __enter__ on the hot path
                e = self._items.get(path)
                if e is not None:
                    e.refs += 1
                    e.holders.append(me)
                    self._items.move_to_end(path)
                    self.hits += 1
            if e is not None:
                if os.fstat(e.fd).st_nlink:  # still linked: still the object at the path
                    return e
                return self._reopen(e)
        return self._open(path)

    def _reopen(self, stale: FdLease) -> FdLease:
        """A new lease of ``stale``'s path, whose object was removed or replaced (the
        stale lease given back)."""
        with self._lock.lock:
            self._drop(stale)
        try:
            return self._open(stale.path)
        finally:
            self.release(stale)

    def lease_many(self, paths: list[str]) -> list[FdLease]:
        """:meth:`lease` for each path, under one turn of the lock.  On an error no lease
        is held (those taken are released) and the ``OSError`` of the first path that
        cannot be opened is raised."""
        out: list = [None] * len(paths)
        if self.max_fds:
            me = _get_ident()
            with self._lock.lock:
                get, items = self._items.get, self._items
                hits = 0
                for i, p in enumerate(paths):
                    e = get(p)
                    if e is not None:
                        e.refs += 1
                        e.holders.append(me)
                        items.move_to_end(p)
                        out[i] = e
                        hits += 1
                self.hits += hits
        fstat = os.fstat
        try:
            for i, e in enumerate(out):
                if e is None:
                    out[i] = self._open(paths[i])
                elif not fstat(e.fd).st_nlink:  # removed or replaced: open the path again
                    out[i] = None
                    out[i] = self._reopen(e)
        except BaseException as exc:
            self.release_many([e for e in out if e is not None])
            if isinstance(exc, OSError) and exc.errno in _NO_FDS:
                self.clear_idle()  # more paths than free descriptors: the caller's fallback opens one at a time
            raise
        return out

    def release(self, lease: FdLease) -> None:
        """Give a lease back (its descriptor may be closed from now on)."""
        me = _get_ident()
        with self._lock.lock:
            close = self._give_back(lease, me)
        if close:
            _close_all([lease.fd])

    def release_many(self, leases: list[FdLease]) -> None:
        """:meth:`release` for each lease."""
        me = _get_ident()
        to_close = None
        with self._lock.lock:
            for e in leases:
                h = e.holders
                if e.refs > 1 or e.dead or not h or h[-1] != me:
                    if self._give_back(e, me):
                        to_close = [e.fd] if to_close is None else to_close + [e.fd]
                else:  # (inline: the usual case, a live entry's only lease given back by its thread)
                    e.refs = 0
                    h.pop()
        if to_close:
            _close_all(to_close)

    def _give_back(self, e: FdLease, me: int) -> bool:
        """One lease of ``e`` given back by thread ``me`` (under the lock); True when its
        descriptor is to be closed now."""
        e.refs -= 1
        h = e.holders
        if h and h[-1] == me:  # (the usual case: the last lease taken, by this thread)
            h.pop()
        elif me in h:
            h.remove(me)
        elif h:  # a lease handed to another thread: its count stays right
            h.pop()
        if e.refs == 0 and e.dead:
            self._held.discard(e)
            return True
        return False

    # -- table --------------------------------------------------------------------------
    def _open(self, path: str) -> FdLease:
        """A new leased entry of ``path``, in the table unless the cache is off (another
        thread's entry when it opened the path first)."""
        me = _get_ident()
        try:
            fd = os.open(path, _O_RDONLY)
        except OSError as e:
            if e.errno not in _NO_FDS:
                raise
            self.clear_idle()  # give the process its descriptors back, then once more uncached
            return self._uncached(FdLease(path, os.open(path, _O_RDONLY), False, me))
        if not self.max_fds:
            return self._uncached(FdLease(path, fd, False, me))
        mine = FdLease(path, fd, True, me)
        to_close = []
        with self._lock.lock:
            self.misses += 1
            other = self._items.get(path)
            if other is not None:  # another thread opened it meanwhile: share that one
                other.refs += 1
                other.holders.append(me)
                self._items.move_to_end(path)
                to_close.append(fd)
                mine = other
            else:
                self._items[path] = mine
                while len(self._items) > self.max_fds:
                    _, old = self._items.popitem(last=False)
                    self._retire(old, to_close)
        _close_all(to_close)
        return mine

    def _uncached(self, lease: FdLease) -> FdLease:
        """``lease`` (out of the table from the start) kept in :attr:`_held` until released."""
        with self._lock.lock:
            self._held.add(lease)
        return lease

    def _retire(self, e: FdLease, to_close: list) -> None:
        """``e``, just taken out of the table (under the lock), marked dead: its descriptor
        to close now when idle, else held until its last release."""
        e.dead = True
        if e.refs == 0:
            to_close.append(e.fd)
        else:
            self._held.add(e)

    def _drop(self, e: FdLease) -> None:
        """Take ``e`` (leased by the caller) out of the table (under the lock); it closes
        when its leases end."""
        if self._items.get(e.path) is e:
            del self._items[e.path]
        if not e.dead:
            e.dead = True
            self._held.add(e)

    def _drop_where(self, keep) -> None:
        to_close = []
        with self._lock:
            for p in [p for p, e in self._items.items() if not keep(p, e)]:
                self._retire(self._items.pop(p), to_close)
        _close_all(to_close)

    def forget(self, path: str, under: bool = False) -> None:
        """Forget ``path`` (``under``: and every path below the directory ``path``): an
        object replaced or removed."""
        if not self._items:
            return
        if not under:
            to_close: list = []
            with self._lock.lock:  # whether to close is decided under the lock, as a release does
                e = self._items.pop(path, None)
                if e is not None:
                    self._retire(e, to_close)
            _close_all(to_close)
            return
        below = path.rstrip("/") + "/"
        self._drop_where(lambda p, e: p != path and not p.startswith(below))

    def clear_idle(self) -> None:
        """Close every descriptor no reader holds."""
        self._drop_where(lambda p, e: e.refs > 0)

    def clear(self) -> None:
        """Forget every entry: idle descriptors close now, leased ones on their release."""
        self._drop_where(lambda p, e: False)

    def held_count(self) -> int:
        """Descriptors out of the table and still leased (closed by their last release)."""
        return len(self._held)

    def after_fork_in_child(self) -> None:
        """Only the forking thread exists in the child: the leases of the parent's other
        threads are dropped (they would never be given back).  A table entry they held
        becomes idle; a held descriptor no lease of this thread uses is closed."""
        me = _get_ident()
        for e in [*self._items.values(), *self._held]:
            e.holders = [t for t in e.holders if t == me]
            e.refs = len(e.holders)
        to_close = [e.fd for e in self._held if not e.refs]
        self._held = {e for e in self._held if e.refs}
        _close_all(to_close)


_get_ident = threading.get_ident


def _close_all(numbers: list[int]) -> None:
    for fd in numbers:
        try:
            os.close(fd)
        except OSError:  # pragma: no cover - already closed by someone else's mistake
            pass


#: Every cache alive (the default, replaced ones still leased, a caller's own): the fork hook's.
_CACHES: "weakref.WeakSet[FdCache]" = weakref.WeakSet()


def _default_size() -> int:
    soft = _soft_fd_limit()
    return DEFAULT_MAX_FDS if soft is None else max(0, min(DEFAULT_MAX_FDS, soft // 4))


_default = FdCache(_default_size())


def default_fd_cache() -> FdCache:
    """The process-wide cache :class:`~gtsamples.storage.LocalStore` reads parts through."""
    return _default


def set_fd_cache_size(max_fds: int) -> None:
    """Replace the process-wide descriptor cache by one of ``max_fds`` entries (0: keep
    none open between reads); the old one's descriptors close (leased ones on release)."""
    global _default
    old, _default = _default, FdCache(max_fds)
    old.clear()


def clear_fd_cache() -> None:
    """Close every idle descriptor the process-wide cache keeps (leased ones on release)."""
    _default.clear()


@at_fork_child
def _fd_caches_in_child() -> None:
    for c in list(_CACHES):
        c.after_fork_in_child()
