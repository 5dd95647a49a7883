"""The fsspec backend of a :class:`~gtsamples.storage.Store`: reads and writes
through an fsspec filesystem, damaged bodies read again, failures as
:class:`~gtsamples.errors.StorageError` naming the object."""

from __future__ import annotations

import datetime as _dt
from typing import Sequence

from ..errors import StorageError
from .local import exists_error

#: Re-reads of a remote range whose body arrived short or failed its checksum.
REMOTE_REREADS = 2


def cause(e: BaseException) -> str:
    """An exception for a message: its own text, with its type when that is not an OSError's."""
    return str(e) if isinstance(e, OSError) and str(e) else f"{type(e).__name__}: {e}"


def storage_error(path: str, action: str, e: BaseException) -> StorageError:
    """A StorageError naming the object, what failed and why (the cause's errno kept)."""
    err = StorageError(f"{path}: cannot {action}: {cause(e)}")
    if isinstance(e, OSError):
        err.errno = e.errno
    return err


class _FsspecObject:
    """One object of an fsspec publication: buffered by the filesystem, stored on close."""

    def __init__(self, fs, path: str):
        self.path = path
        self.size = 0
        try:
            self.f = fs.open(path, "wb")
        except Exception as e:  # noqa: BLE001 - the filesystem's own exception types
            raise storage_error(path, "write", e) from None

    def write(self, pieces: Sequence) -> None:
        try:
            for p in pieces:
                b = p if isinstance(p, bytes) else bytes(memoryview(p).cast("B"))
                self.f.write(b)
                self.size += len(b)
        except Exception as e:  # noqa: BLE001
            raise storage_error(self.path, "write", e) from None

    def close(self) -> None:
        try:
            self.f.close()
        except Exception as e:  # noqa: BLE001
            raise storage_error(self.path, "write", e) from None

    def discard(self) -> None:
        try:
            self.f.close()
        except Exception:  # noqa: BLE001 - best effort
            pass


class FsspecPublication:
    """fsspec stores: the objects in order, the completing one last (object stores
    cannot rename).  A crash leaves no manifest, so nothing at the final path looks
    complete; on an exception the objects written so far are removed.  The catalog
    commit is what publishes an artifact."""

    def __init__(self, backend: "FsspecBackend", path: str):
        self.backend = backend
        self.dir = path
        if backend.exists(path):
            raise exists_error(path)
        self.written: list[str] = []

    def open(self, name: str) -> _FsspecObject:
        path = f"{self.dir}/{name}"
        self.written.append(path)
        return _FsspecObject(self.backend.fs, path)

    def commit(self) -> None:
        pass

    def abort(self) -> None:
        for p in reversed(self.written):
            try:
                self.backend.fs.rm(p)
            except Exception:  # noqa: BLE001 - best effort cleanup; gc removes what is left
                pass


#: Modification-time keys of fsspec ``info`` records, in order of preference.
_MTIME_KEYS = ("mtime", "LastModified", "last_modified", "updated", "created")


_DAMAGED = None


def _damaged_body_errors() -> tuple:
    """Exceptions of a response whose body arrived damaged (botocore: a checksum
    mismatch, fewer bytes than its Content-Length), where botocore is installed."""
    global _DAMAGED
    if _DAMAGED is None:
        try:
            from botocore.exceptions import FlexibleChecksumError, IncompleteReadError
            _DAMAGED = (FlexibleChecksumError, IncompleteReadError)
        except ImportError:  # pragma: no cover - fsspec without botocore
            _DAMAGED = ()
    return _DAMAGED


class FsspecBackend:
    """Reads and writes through an fsspec filesystem.  Retries are the filesystem's;
    what still fails is a :class:`StorageError` naming the object."""

    def __init__(self, fs):
        self.fs = fs

    def _invalidate(self, path: str) -> None:
        try:
            self.fs.invalidate_cache(path)  # listings and infos may be cached by the filesystem
        except Exception:  # pragma: no cover - best effort
            pass

    # -- reads ------------------------------------------------------------------
    def size(self, path: str) -> int:
        try:
            return int(self.fs.size(path))
        except FileNotFoundError:
            raise
        except Exception as e:  # noqa: BLE001
            raise storage_error(path, "stat", e) from None

    def exists(self, path: str) -> bool:
        try:
            return bool(self.fs.exists(path))
        except Exception as e:  # noqa: BLE001
            raise storage_error(path, "stat", e) from None

    def cat_ranges(self, paths: list, starts: list, ends: list) -> list:
        """Bytes (or the exception) of each range.  A range whose bytes arrived damaged
        (short, or failing the client's checksum) is read again, up to
        ``REMOTE_REREADS`` times: a body cut short in transit is then whole, while an
        object that really is short stays short (and is corruption for the caller).
        Other failures were retried by the libraries already."""
        datas = self.fs.cat_ranges(paths, starts, ends)
        damaged = _damaged_body_errors()
        for _ in range(REMOTE_REREADS):
            bad = [i for i, d in enumerate(datas)
                   if (isinstance(d, damaged) if isinstance(d, BaseException) else len(d) != ends[i] - starts[i])]
            if not bad:
                break
            again = self.fs.cat_ranges([paths[i] for i in bad], [starts[i] for i in bad], [ends[i] for i in bad])
            for i, d in zip(bad, again):
                datas[i] = d
        return datas

    def _holds(self, path: str, data: bytes, stat_first: bool = True) -> bool:
        """Whether the object holds exactly ``data`` (False when it is missing); with
        ``stat_first`` an object of another size is not fetched."""
        self._invalidate(path)
        try:
            if stat_first and int(self.fs.size(path)) != len(data):
                return False
            return self.fs.cat_file(path) == data
        except FileNotFoundError:
            return False

    # -- writes -----------------------------------------------------------------
    def put_if_absent(self, path: str, data: bytes) -> bool:
        fs = self.fs
        try:
            self._invalidate(path)
            if fs.exists(path):
                return self._holds(path, data)
            try:
                fs.pipe_file(path, data, mode="create")  # conditional put where the backend supports it
            except FileExistsError:
                # another writer's object, or our own first attempt that landed before the
                # library retried it (its response lost): the bytes decide
                return self._holds(path, data)
            except (TypeError, NotImplementedError, ValueError):  # no conditional put: check, then put
                if fs.exists(path):
                    return self._holds(path, data)
                fs.pipe_file(path, data)
            except Exception as e:  # noqa: BLE001
                if "412" in str(e) or "PreconditionFailed" in str(e):
                    return self._holds(path, data)
                # the put failed after the library's retries, yet it may have landed
                try:
                    if self._holds(path, data):
                        return True
                    if fs.exists(path):
                        return False
                except Exception:  # noqa: BLE001 - cannot tell: report the put's own failure
                    pass
                raise
            return self._holds(path, data, stat_first=False)  # read back: backends may ignore "create"
        except Exception as e:  # noqa: BLE001
            raise storage_error(path, "create (whether it was written is unknown)", e) from None

    def put(self, path: str, data) -> None:
        try:
            self.fs.pipe_file(path, data if isinstance(data, bytes) else bytes(memoryview(data).cast("B")))
        except Exception as e:  # noqa: BLE001
            raise storage_error(path, "write", e) from None

    def publish(self, path: str) -> FsspecPublication:
        return FsspecPublication(self, path)

    def list(self, path: str) -> list[tuple[str, bool]]:
        self._invalidate(path)
        try:
            return [(d["name"].rstrip("/").rsplit("/", 1)[-1], d.get("type") == "directory")
                    for d in self.fs.ls(path, detail=True)]
        except FileNotFoundError:
            return []
        except Exception as e:  # noqa: BLE001
            raise storage_error(path, "list", e) from None

    def remove(self, path: str, recursive: bool) -> None:
        try:
            self.fs.rm(path, recursive=recursive)
        except FileNotFoundError:
            pass
        except Exception as e:  # noqa: BLE001
            raise storage_error(path, "remove", e) from None
        self._invalidate(path)

    def rmdir_if_empty(self, path: str) -> None:
        pass  # object stores have no empty directories

    def newest_mtime(self, path: str, is_dir: bool) -> float | None:
        try:
            infos = self.fs.find(path, detail=True).values() if is_dir else [self.fs.info(path)]
        except FileNotFoundError:
            return None
        except Exception as e:  # noqa: BLE001
            raise storage_error(path, "stat", e) from None
        best = None
        for info in infos:
            for k in _MTIME_KEYS:
                v = info.get(k)
                if v is None:
                    continue
                if isinstance(v, str):
                    try:
                        v = _dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
                    except ValueError:
                        continue
                if isinstance(v, _dt.datetime):
                    if v.tzinfo is None:
                        v = v.replace(tzinfo=_dt.timezone.utc)
                    v = v.timestamp()
                best = float(v) if best is None else max(best, float(v))
                break
        return best

