"""The local backend of a :class:`~gtsamples.storage.Store`: fsynced files, objects
created only if absent (``os.link``), directories published by a rename that never
replaces (renameat2 RENAME_NOREPLACE)."""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import uuid
from typing import Sequence

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


class LocalBackend:
    """Writes, listings and removals of a local directory tree (OS errors propagate)."""

    def put_if_absent(self, final: str, data: bytes) -> bool:
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

    def put(self, path: str, data) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        try:
            _write_file(tmp, data, os.O_EXCL)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def publish(self, final: str) -> LocalPublication:
        return LocalPublication(final)

    def list(self, path: str) -> list[tuple[str, bool]]:
        try:
            with os.scandir(path) as it:
                return [(e.name, e.is_dir()) for e in it]
        except FileNotFoundError:
            return []

    def remove(self, path: str, recursive: bool) -> None:
        if recursive:
            shutil.rmtree(path, ignore_errors=True)
            return
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def rmdir_if_empty(self, path: str) -> None:
        try:
            os.rmdir(path)
        except OSError:
            pass

    def newest_mtime(self, path: str, is_dir: bool) -> float | None:
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

