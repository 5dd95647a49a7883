""":class:`LocalStore`, the :class:`~gtsamples.storage.Store` of a local directory:
reads with ``os.pread``, fsynced files, objects created only if absent (``os.link``),
directories published by a rename that never replaces (renameat2 RENAME_NOREPLACE)."""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import uuid
from typing import Sequence

import numpy as np

from ..errors import CorruptArtifactError, SamplesError, StorageError
from . import fds
from . import store as tuning  # tuning constants, read at run time
from .store import (
    LOCAL_COALESCE_GAP, MAX_OBJECT_END, ObjectReader, ReadStats, Store, check_object_end, coalesce_small, request_plans,
)

#: Buffers per ``writev`` call (the POSIX minimum of IOV_MAX).
_IOV_MAX = 1024


def _writev_all(fd: int, pieces: Sequence) -> int:
    """Write every buffer (bytes, memoryviews of uint8, zstd segments) in order."""
    bufs = [p for p in pieces if len(p)]
    total = 0
    i = 0
    while i < len(bufs):
        n = os.writev(fd, bufs[i: i + _IOV_MAX])
        total += n
        while n > 0:
            ln = len(bufs[i])
            if n >= ln:
                n -= ln
                i += 1
            else:  # partial write: continue inside this buffer
                bufs[i] = memoryview(bufs[i]).cast("B")[n:]
                n = 0
    return total


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


_renameat2 = None


def exists_error(path: str) -> FileExistsError:
    return FileExistsError(errno.EEXIST, "artifact generation already exists; refusing to overwrite it", path)


def _rename_noreplace(src: str, dst: str) -> None:
    """rename(2) that refuses to replace ``dst`` (renameat2 RENAME_NOREPLACE when available)."""
    global _renameat2
    if _renameat2 is None:
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            f = libc.renameat2
            f.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
            f.restype = ctypes.c_int
            _renameat2 = f
        except (AttributeError, OSError):
            _renameat2 = False
    if _renameat2:
        import ctypes

        at_fdcwd, rename_noreplace = -100, 1
        rc = _renameat2(at_fdcwd, os.fsencode(src), at_fdcwd, os.fsencode(dst), rename_noreplace)
        if rc == 0:
            return
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            raise exists_error(dst)
        if err not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(err, os.strerror(err), dst)
    # fallback: check, then rename (rename(2) refuses a non-empty target)
    if os.path.lexists(dst):
        raise exists_error(dst)
    try:
        os.rename(src, dst)
    except OSError as e:
        if e.errno in (errno.EEXIST, errno.ENOTEMPTY):
            raise exists_error(dst) from None
        raise


def _write_file(path: str, data, flags: int) -> None:
    """Create ``path`` (``flags``) holding ``data``, fsynced."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | flags | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        view = memoryview(data).cast("B")
        while view:
            k = os.write(fd, view)
            view = view[k:]
        os.fsync(fd)
    finally:
        os.close(fd)


def _file_holds(path: str, data: bytes) -> bool:
    """Whether the file holds exactly ``data`` (False when it is missing)."""
    try:
        if os.stat(path).st_size != len(data):
            return False
        with open(path, "rb") as f:
            return f.read() == data
    except FileNotFoundError:
        return False


class _LocalObject:
    """One object of a local publication: written with ``writev``, fsynced on close."""

    def __init__(self, path: str):
        self.path = path
        self.size = 0
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)

    def write(self, pieces: Sequence) -> None:
        self.size += _writev_all(self.fd, pieces)

    def close(self) -> None:
        try:
            os.fsync(self.fd)
        finally:
            os.close(self.fd)
            self.fd = -1

    def discard(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class LocalPublication:
    """Objects go into ``<parent>/.tmp-<name>-<random>``, renamed to ``<name>`` on commit."""

    def __init__(self, final: str):
        self.parent, name = os.path.split(final)
        self.final = final
        if os.path.lexists(final):
            raise exists_error(final)
        os.makedirs(self.parent, exist_ok=True)
        self.tmp = os.path.join(self.parent, f".tmp-{name}-{secrets.token_hex(8)}")
        os.mkdir(self.tmp)

    def open(self, name: str) -> _LocalObject:
        return _LocalObject(os.path.join(self.tmp, name))

    def commit(self) -> None:
        _fsync_dir(self.tmp)
        _rename_noreplace(self.tmp, self.final)
        _fsync_dir(self.parent)

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


class LocalStore(Store):
    """A local directory (a path or a ``file://`` URL): reads with ``os.pread``/``os.preadv``,
    fsynced writes, objects created only if absent (``os.link``), directories published
    by a rename that never replaces.  OS errors of writes propagate."""

    is_local = True
    coalesce_gap = LOCAL_COALESCE_GAP
    has_cheap_identity = True

    def __init__(self, root: str | os.PathLike, storage_options: dict | None = None):
        super().__init__(root, storage_options)
        if self.storage_options:
            raise ValueError("storage_options apply only to fsspec URLs, not to local paths")
        root = self.root
        base = root[len("file://"):] if root.startswith("file://") else root
        if len(base) > 1:  # "gen/" and "gen" name the same objects (and messages)
            base = base.rstrip("/") or "/"
        self.base = base
        self.prefix = base if base.endswith("/") else base + "/"

    def path(self, key: str) -> str:
        if key and key[0] != "/" and self.base:
            return self.prefix + key  # os.path.join for a relative key
        return os.path.join(self.base, key) if key else self.base

    def fd_path(self, key: str) -> str:
        """The absolute path of ``key``: the :mod:`~gtsamples.storage.fds` cache's key (a
        relative root is taken against the current directory now, as ``open`` would)."""
        p = self.path(key)
        return p if p[:1] == "/" else os.path.join(os.getcwd(), p)

    def fd_paths(self, keys) -> list[str]:
        """:meth:`fd_path` of each key (the common case, relative keys under an absolute
        root, without a call per key)."""
        pre = self.prefix
        if not self.base or pre[:1] != "/":
            return [self.fd_path(k) for k in keys]
        return [pre + k if k and k[0] != "/" else self.fd_path(k) for k in keys]

    # -- metadata ----------------------------------------------------------------
    def getsize(self, key: str) -> int:
        try:
            return os.stat(self.path(key)).st_size
        except NotADirectoryError as e:  # a file where a directory of the path belongs: no such object
            raise FileNotFoundError(e.errno, e.strerror, e.filename) from None

    def exists(self, key: str) -> bool:
        return os.path.exists(self.path(key))

    def names(self, key: str) -> list[str]:
        """Names only (no is_dir per entry): the catalog's reopen path."""
        try:
            return os.listdir(self.path(key.rstrip("/")))
        except (FileNotFoundError, NotADirectoryError):  # (a file there, or on the path: nothing under it,
            return []  # as an object store lists nothing under an object's name)

    def identity(self, key: str) -> tuple:
        """The file's inode, size and mtime (one ``stat``, ~1 us); () when it cannot be stat-ed."""
        try:
            st = os.stat(self.path(key))
        except OSError:
            return ()  # the read reports it
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    # -- reads -------------------------------------------------------------------
    def read(self, key: str, offset: int, length: int, stats: ReadStats | None = None) -> bytes:
        if one_pread(offset, length):
            p = self.path(key)
            try:
                fd = os.open(p, os.O_RDONLY)
                try:
                    data = os.pread(fd, length, offset)
                finally:
                    os.close(fd)
            except (OSError, OverflowError) as e:
                raise read_error(p, e) from None
            if len(data) == length:
                if stats is not None:
                    stats.requests += 1
                    stats.bytes_read += length
                return data
            # a short read: the general path retries, or names the object as too short
        return super().read(key, offset, length, stats)

    def reader(self, key: str, stats: ReadStats | None = None) -> "LocalObjectReader":
        """:meth:`Store.reader`, the object opened once, on the first read."""
        return LocalObjectReader(self, key, stats)

    def read_into(self, key: str, ranges, out: np.ndarray, out_pos, stats: ReadStats | None) -> None:
        """Reads of one object, opened and closed here: catalogs and manifests come this
        way, and they may be replaced under their name (parts come through
        :meth:`read_many_into`, from the descriptor cache)."""
        p = self.path(key)
        check_object_end(p, ranges)
        total = 0
        try:
            fd = os.open(p, os.O_RDONLY)
            try:
                mv = memoryview(out)
                for (off, n), pos in zip(ranges, out_pos):
                    total += n
                    got = os.preadv(fd, [mv[pos: pos + n]], off) if n else 0
                    while got < n:  # short reads: continue, or the object is too short
                        k = os.preadv(fd, [mv[pos + got: pos + n]], off + got)
                        if k == 0:
                            raise CorruptArtifactError(
                                f"{p}: object is shorter than its recorded size: read of [{off}, {off + n}) ended at {off + got}"
                            )
                        got += k
            finally:
                os.close(fd)
        except (OSError, OverflowError) as e:
            raise read_error(p, e) from None
        if stats is not None:
            stats.requests += len(ranges)
            stats.bytes_read += int(total)

    def read_many_into(self, plans, out: np.ndarray, stats: ReadStats | None) -> None:
        """Artifact parts (immutable: see :meth:`Store.read_many_into`): as
        :meth:`read_requests_into` reads them (one object: without its lists)."""
        if len(plans) == 1:  # read_ranges: a part's chunks, or a leaf's pages
            key, ranges, pos = plans[0]
            if not self.read_one_cached(key, ranges, pos, out, stats):
                self.read_into(key, ranges, out, pos, stats)
            return
        keys, req_obj, starts, sizes, bases = [], [], [], [], []
        for j, (key, ranges, pos) in enumerate(plans):
            keys.append(key)
            req_obj += [j] * len(ranges)
            starts += [off for off, _ in ranges]
            sizes += [n for _, n in ranges]
            bases += pos
        self.read_requests_into(keys, req_obj, starts, sizes, bases, out, stats)

    def read_one_cached(self, key: str, ranges, out_pos, out: np.ndarray, stats: ReadStats | None) -> bool:
        """:meth:`read_into` of a part through the descriptor cache; False, with nothing
        counted, when it could not complete (the caller reads it again by
        :meth:`read_into`, which raises the store's error)."""
        cache = fds.default_fd_cache()
        try:
            lease = cache.lease(self.fd_path(key))
        except (OSError, OverflowError):
            return False
        total = 0
        try:
            fd, preadv, mv = lease.fd, os.preadv, memoryview(out)
            for (off, n), pos in zip(ranges, out_pos):
                if n and preadv(fd, [mv[pos: pos + n]], off) != n:
                    return False
                total += n
        except (OSError, OverflowError, ValueError):
            return False
        finally:
            cache.release(lease)
        if stats is not None:
            stats.requests += len(ranges)
            stats.bytes_read += int(total)
        return True

    def read_requests_into(self, keys, req_obj, starts, sizes, bases, out: np.ndarray,
                           stats: ReadStats | None) -> None:
        """Artifact parts through the process's descriptor cache
        (:mod:`~gtsamples.storage.fds`): every object's descriptor leased under one turn of
        the lock, then one ``preadv`` per request in one loop (no plan per object).
        Anything this cannot complete (a missing or short object, an error) is redone
        object by object by :meth:`read_into`, which raises the store's error."""
        n = len(req_obj)
        if n == 0:
            return
        cache = fds.default_fd_cache()
        runs = [r for r in range(n) if r == 0 or req_obj[r] != req_obj[r - 1]]  # each run's first request
        try:
            leases = cache.lease_many(self.fd_paths([keys[req_obj[r]] for r in runs]))
        except (OSError, OverflowError):
            leases = None
        if leases is not None:
            fd_of = []
            for k, lease in enumerate(leases):
                fd_of += [lease.fd] * ((runs[k + 1] if k + 1 < len(runs) else n) - runs[k])
            preadv = os.preadv
            mv = memoryview(out)
            ok = True
            try:
                for fd, off, size, pos in zip(fd_of, starts, sizes, bases):
                    if size and preadv(fd, [mv[pos: pos + size]], off) != size:
                        ok = False  # short: the plain path continues it, or names the object
                        break
            except (OSError, OverflowError, ValueError):
                ok = False
            finally:
                cache.release_many(leases)
            if ok:
                if stats is not None:
                    stats.requests += n
                    stats.bytes_read += int(sum(sizes))
                return
        for key, ranges, pos in request_plans(keys, req_obj, starts, sizes, bases):
            self.read_into(key, ranges, out, pos, stats)

    # -- writes ------------------------------------------------------------------
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """A fsynced temporary file in the same directory, ``os.link``-ed to the name
        (atomic; fails if the name exists)."""
        final = self.path(key)
        d, name = os.path.split(final)
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(d, f".tmp-{uuid.uuid4().hex}{os.path.splitext(name)[1]}")
        _write_file(tmp, data, os.O_EXCL)
        try:
            os.link(tmp, final)
        except FileExistsError:
            return _file_holds(final, data)
        finally:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        _fsync_dir(d)
        return True

    def put(self, key: str, data) -> None:
        """A fsynced ``<name>.tmp-<hex>`` file renamed over the object."""
        path = self.path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        try:
            _write_file(tmp, data, os.O_EXCL)
            os.replace(tmp, path)
            fds.default_fd_cache().forget(self.fd_path(key))  # the replaced file closes now
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def publish(self, key: str) -> LocalPublication:
        return LocalPublication(self.path(key.rstrip("/")))

    def list(self, key: str) -> list[tuple[str, bool]]:
        path = self.path(key.rstrip("/"))
        try:
            with os.scandir(path) as it:
                return [(e.name, e.is_dir()) for e in it]
        except (FileNotFoundError, NotADirectoryError):  # (as names)
            return []

    def remove(self, key: str, recursive: bool = False) -> None:
        path = self.path(key.rstrip("/"))
        fds.default_fd_cache().forget(self.fd_path(key.rstrip("/")), under=recursive)  # closed now, not on eviction
        if recursive:
            shutil.rmtree(path, ignore_errors=True)
            return
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def rmdir_if_empty(self, key: str) -> None:
        try:
            os.rmdir(self.path(key.rstrip("/")))
        except OSError:
            pass

    def newest_mtime(self, key: str, is_dir: bool) -> float | None:
        path = self.path(key.rstrip("/"))
        try:
            t = os.stat(path).st_mtime
        except FileNotFoundError:
            return None
        if is_dir:
            for dp, dns, fns in os.walk(path):
                for n in fns + dns:
                    try:
                        t = max(t, os.stat(os.path.join(dp, n)).st_mtime)
                    except FileNotFoundError:
                        pass
        return t


class LocalObjectReader(ObjectReader):
    """Reads of one local object (an artifact part: immutable) through one descriptor,
    leased from the process's cache (:mod:`~gtsamples.storage.fds`) on the first read
    and given back by :meth:`close`.  Any read the fast path cannot complete (a
    missing or short object, an error) is redone by :meth:`LocalStore.read`, which
    raises the store's error for it."""

    __slots__ = ("lease", "fds")

    def __init__(self, store: LocalStore, key: str, stats: ReadStats | None):
        super().__init__(store, key, stats)
        self.lease = None
        self.fds = None

    def close(self) -> None:
        lease, self.lease = self.lease, None
        if lease is not None:
            self.fds.release(lease)

    def read(self, offset: int, length: int) -> bytes:
        if one_pread(offset, length):
            try:
                lease = self.lease
                if lease is None:
                    self.fds = fds.default_fd_cache()
                    lease = self.lease = self.fds.lease(self.store.fd_path(self.key))
                data = os.pread(lease.fd, length, offset)
            except (OSError, OverflowError):
                data = None
            if data is not None and len(data) == length:
                st = self.stats
                if st is not None:
                    st.requests += 1
                    st.bytes_read += length
                return data
        return self.store.read(self.key, offset, length, self.stats)

    def read_ranges(self, offsets: Sequence[int], lengths: Sequence[int], gap: int | None = None) -> list[bytes]:
        gap = self.store.coalesce_gap if gap is None else gap
        if len(offsets) > tuning.SMALL_RANGE_COUNT:
            return super().read_ranges(offsets, lengths, gap)
        if len(offsets) == 1:
            return [self.read(int(offsets[0]), int(lengths[0])) if lengths[0] else b""]
        if len(offsets) == 2:  # a part's header and trailer: far apart unless the part is small
            (o0, o1), (n0, n1) = (int(o) for o in offsets), (int(n) for n in lengths)
            if 0 <= o0 <= o1 and n0 > 0 and n1 > 0 and o1 > o0 + n0 + gap:
                return [self.read(o0, n0), self.read(o1, n1)]
        reqs, pos = coalesce_small([int(o) for o in offsets], [int(n) for n in lengths], int(gap))
        if len(reqs) == len(pos):  # one request per range
            return [self.read(o, n) if n else b"" for o, n, _ in reqs]
        whole = b"".join([self.read(o, n) if n else b"" for o, n, _ in reqs])
        return [whole[p: p + int(n)] for p, n in zip(pos, lengths)]


def one_pread(offset: int, length: int) -> bool:
    """A read the local fast path takes: one ``os.pread`` into a new ``bytes``."""
    return 0 <= offset and 0 < length <= tuning.PREAD_MAX_BYTES and offset + length <= MAX_OBJECT_END


def read_error(path: str, e: BaseException) -> SamplesError:
    """The store's error for a failed local read: a missing object is corruption (the
    manifest or catalog names it), anything else a storage failure.  A file where a
    directory of the path belongs (``ENOTDIR``) leaves no such object, as an object store
    answers for a key under another object's name."""
    if isinstance(e, (FileNotFoundError, NotADirectoryError)):
        return CorruptArtifactError(f"{path}: object is missing")
    return StorageError(f"{path}: cannot read: {e}")
