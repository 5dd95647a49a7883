""":class:`FsspecStore`, the :class:`~gtsamples.storage.Store` of an fsspec URL: reads
and writes through an fsspec filesystem, several objects' ranges in one concurrent
``cat_ranges``, damaged bodies read again, failures as
:class:`~gtsamples.errors.StorageError` naming the object."""

from __future__ import annotations

import datetime as _dt
import functools
import inspect
import os
from typing import Sequence

import numpy as np

from ..errors import CorruptArtifactError, SamplesError, StorageError
from .local import exists_error
from .store import REMOTE_COALESCE_GAP, ReadStats, Store, check_object_end

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


def precondition_failed(e: BaseException) -> bool:
    """Whether ``e`` (or an exception it was raised from) is a conditional write's HTTP 412,
    told by the error's status (botocore's ``response``, an ``HttpError``'s ``code`` or
    ``status``) or its name for it, never by "412" anywhere in its text: the text holds the
    object's URL, whose keys and ports may contain those digits."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        response = getattr(e, "response", None)
        if isinstance(response, dict):
            error = response.get("Error") or {}
            meta = response.get("ResponseMetadata") or {}
            if error.get("Code") == "PreconditionFailed" or meta.get("HTTPStatusCode") == 412:
                return True
        if any(getattr(e, attr, None) == 412 for attr in ("code", "status", "status_code")):
            return True
        text = str(e)
        if "PreconditionFailed" in text or "Precondition Failed" in text:
            return True
        e = e.__cause__ or e.__context__
    return False


def _http_status(e: BaseException) -> int | None:
    """The HTTP status an exception carries (aiohttp's ``status``, botocore's ``response``), or None."""
    for attr in ("status", "status_code"):
        v = getattr(e, attr, None)
        if isinstance(v, int):
            return v
    response = getattr(e, "response", None)
    if isinstance(response, dict):
        v = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        if isinstance(v, int):
            return v
    return None


def not_found(e: FileNotFoundError) -> bool:
    """Whether a filesystem's ``FileNotFoundError`` means the store answered "no such
    object".  fsspec's HTTP filesystem raises one from *any* failure of its HEAD and GET
    (a refused connection, a 403, a 500), with that failure as its cause: a cause that is
    a connection or client error (an ``OSError``, an aiohttp error) or an HTTP status
    other than 404 or 410 is a failure to reach or read the store, not a missing object."""
    c, seen = e.__cause__, set()
    while c is not None and id(c) not in seen:
        seen.add(id(c))
        status = _http_status(c)
        if status is not None:
            return status in (404, 410)
        if isinstance(c, FileNotFoundError):
            c = c.__cause__
            continue
        return not (isinstance(c, OSError) or type(c).__module__.split(".", 1)[0] == "aiohttp")
    return True


def _entry_name(entry: dict) -> str:
    """A listing entry's own name (the last part of its path)."""
    return entry["name"].rstrip("/").rsplit("/", 1)[-1]


def listed_identity(entry: dict) -> tuple:
    """What a listing entry (fsspec's ``ls(detail=True)``) tells of its object's identity:
    the ETag (S3, GCS, Azure: changes with the content) or else the modification time,
    with the size; () for a directory or when the filesystem reports neither, since a
    size alone cannot tell two catalog versions apart."""
    if entry.get("type") == "directory":
        return ()
    tag = entry.get("ETag") or entry.get("etag") or entry.get("md5Hash")
    when = next((entry[k] for k in ("LastModified", "mtime", "last_modified", "updated", "created")
                 if entry.get(k) is not None), None)
    if not tag and when is None:
        return ()
    return (str(tag or ""), str(when or ""), entry.get("size"))


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

    def __init__(self, store: "FsspecStore", path: str):
        self.store = store
        self.dir = path
        if store.path_exists(path):
            raise exists_error(path)
        self.written: list[str] = []

    def open(self, name: str) -> _FsspecObject:
        path = f"{self.dir}/{name}"
        self.written.append(path)
        return _FsspecObject(self.store.fs, path)

    def commit(self) -> None:
        pass

    def abort(self) -> None:
        for p in reversed(self.written):
            try:
                self.store.fs.rm(p)
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


class FsspecStore(Store):
    """An fsspec URL (``s3://``, ``gs://``, ``memory://``...; ``storage_options`` are the
    filesystem's).  Retries are the filesystem's; what still fails is a
    :class:`StorageError` naming the object."""

    coalesce_gap = REMOTE_COALESCE_GAP

    def __init__(self, root: str | os.PathLike, storage_options: dict | None = None):
        super().__init__(root, storage_options)
        try:
            import fsspec
        except ImportError as e:  # pragma: no cover - fsspec is a dependency
            raise SamplesError(f"reading {self.root} needs fsspec: pip install fsspec") from e
        try:
            self.fs, base = fsspec.core.url_to_fs(self.root, **self.storage_options)
        except ImportError as e:  # the scheme's filesystem package (gcsfs for gcs://...) is not installed
            raise StorageError(f"{self.root}: cannot open: {e}") from None
        except ValueError as e:  # a scheme fsspec has no filesystem for
            if not str(e).startswith("Protocol not known"):
                raise
            raise StorageError(f"{self.root}: cannot open: {e} (fsspec has no filesystem for it)") from None
        self.base = base.rstrip("/")

    def path(self, key: str) -> str:
        return f"{self.base}/{key}" if key else self.base

    def _invalidate(self, path: str) -> None:
        try:
            self.fs.invalidate_cache(path)  # listings and infos may be cached by the filesystem
        except Exception:  # pragma: no cover - best effort
            pass

    # -- metadata ----------------------------------------------------------------
    def getsize(self, key: str) -> int:
        path = self.path(key)
        try:
            return int(self.fs.size(path))
        except FileNotFoundError as e:
            if not_found(e):
                raise
            raise storage_error(path, "stat", e.__cause__) from None
        except Exception as e:  # noqa: BLE001
            raise storage_error(path, "stat", e) from None

    def exists(self, key: str) -> bool:
        return self.path_exists(self.path(key))

    def path_exists(self, path: str) -> bool:
        try:
            if self._strict_exists:  # HTTP: a failed request is False unless strict
                return bool(self.fs.exists(path, strict=True))
            return bool(self.fs.exists(path))
        except FileNotFoundError as e:
            if not_found(e):
                return False
            raise storage_error(path, "stat", e.__cause__) from None
        except Exception as e:  # noqa: BLE001
            raise storage_error(path, "stat", e) from None

    @functools.cached_property
    def _strict_exists(self) -> bool:
        """Whether the filesystem's ``exists`` takes ``strict`` (fsspec's HTTP one: without
        it an unreachable server, a 403 or a 500 is "does not exist")."""
        try:
            return "strict" in inspect.signature(self.fs.exists).parameters
        except (TypeError, ValueError):  # pragma: no cover - no signature
            return False

    # -- reads -------------------------------------------------------------------
    def read_into(self, key: str, ranges, out: np.ndarray, out_pos, stats: ReadStats | None) -> None:
        self.read_many_into([(key, ranges, out_pos)], out, stats)

    def read_many_into(self, plans, out: np.ndarray, stats: ReadStats | None) -> None:
        """All the plans' requests in one concurrent ``cat_ranges`` call."""
        paths, starts, ends = [], [], []
        for key, ranges, _ in plans:
            p = self.path(key)
            check_object_end(p, ranges)
            for off, n in ranges:
                if n:  # no request for an empty range (s3fs reads a whole object for [a, a))
                    paths.append(p)
                    starts.append(int(off))
                    ends.append(int(off) + int(n))
        try:
            datas = self.cat_ranges(paths, starts, ends) if paths else []
        except FileNotFoundError as e:  # an error the filesystem raised instead of returning
            if not not_found(e):
                what = paths[0] if len(plans) == 1 else f"{self.root} ({len(plans)} objects)"
                raise StorageError(f"{what}: cannot read: {cause(e.__cause__)}") from None
            for key, _, _ in plans:
                if not self.exists(key):
                    raise CorruptArtifactError(f"{self.path(key)}: object is missing") from None
            raise StorageError(f"{self.root}: cannot read: object missing") from None
        except Exception as e:  # noqa: BLE001 - the remote stack's own exception types
            what = paths[0] if len(plans) == 1 else f"{self.root} ({len(plans)} objects)"
            raise StorageError(f"{what}: cannot read: {cause(e)}") from None
        k = 0
        for key, ranges, bases in plans:
            p = self.path(key)
            for (off, n), pos in zip(ranges, bases):
                if not n:
                    continue
                d = datas[k]
                k += 1
                if isinstance(d, FileNotFoundError) and not_found(d):
                    raise CorruptArtifactError(f"{p}: object is missing")
                if isinstance(d, FileNotFoundError):
                    raise StorageError(f"{p}: cannot read [{off}, {off + n}): {cause(d.__cause__)}")
                if isinstance(d, BaseException):
                    raise StorageError(f"{p}: cannot read [{off}, {off + n}): {cause(d)}")
                if len(d) > n:  # the store ignored the range (a server answering 200 with the whole object)
                    raise StorageError(
                        f"{p}: cannot read [{off}, {off + n}): the store returned {len(d)} bytes for a ranged "
                        f"read of {n} (does it ignore Range requests?)"
                    )
                if len(d) != n:  # never decode a short body as if it were whole
                    raise CorruptArtifactError(
                        f"{p}: object is shorter than its recorded size: read of [{off}, {off + n}) returned {len(d)} bytes"
                    )
                out[pos: pos + n] = np.frombuffer(d, dtype=np.uint8)
            if stats is not None:
                stats.requests += len(ranges)
                stats.bytes_read += sum(int(n) for _, n in ranges)

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
        ``stat_first`` an object of another size is not fetched.  A failure to reach or
        read the store (even one the filesystem reports as ``FileNotFoundError``, see
        :func:`not_found`) is raised: "not ours" would make a writer that won its
        conditional put commit its change again."""
        self._invalidate(path)
        try:
            if stat_first and int(self.fs.size(path)) != len(data):
                return False
            return self.fs.cat_file(path) == data
        except FileNotFoundError as e:
            if not_found(e):
                return False
            raise

    # -- writes -----------------------------------------------------------------
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """A conditional put (``mode="create"``; a plain put after an ``exists`` check
        where the filesystem has none), then the object is read back and compared."""
        path = self.path(key)
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
                if precondition_failed(e):
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

    def put(self, key: str, data) -> None:
        path = self.path(key)
        try:
            self.fs.pipe_file(path, data if isinstance(data, bytes) else bytes(memoryview(data).cast("B")))
        except Exception as e:  # noqa: BLE001
            raise storage_error(path, "write", e) from None

    def publish(self, key: str) -> FsspecPublication:
        return FsspecPublication(self, self.path(key.rstrip("/")))

    def _listing(self, key: str) -> list[dict]:
        """The directory ``key``'s entries (fsspec's ``ls(detail=True)``), fresh; [] when absent."""
        path = self.path(key.rstrip("/"))
        self._invalidate(path)
        try:
            return self.fs.ls(path, detail=True)
        except FileNotFoundError as e:
            if not_found(e):
                return []
            raise storage_error(path, "list", e.__cause__) from None
        except Exception as e:  # noqa: BLE001
            raise storage_error(path, "list", e) from None

    def list(self, key: str) -> list[tuple[str, bool]]:
        return [(_entry_name(d), d.get("type") == "directory") for d in self._listing(key)]

    def names_with_identity(self, key: str) -> list[tuple[str, tuple]]:
        """One listing's names, each with the object's ETag (or modification time) and size
        (S3's listing carries them: no request per object); () for a directory or where
        the filesystem reports neither."""
        return [(_entry_name(d), listed_identity(d)) for d in self._listing(key)]

    def remove(self, key: str, recursive: bool = False) -> None:
        path = self.path(key.rstrip("/"))
        try:
            self.fs.rm(path, recursive=recursive)
        except FileNotFoundError:
            pass
        except Exception as e:  # noqa: BLE001
            raise storage_error(path, "remove", e) from None
        self._invalidate(path)

    def newest_mtime(self, key: str, is_dir: bool) -> float | None:
        path = self.path(key.rstrip("/"))
        try:
            infos = self.fs.find(path, detail=True).values() if is_dir else [self.fs.info(path)]
        except FileNotFoundError as e:
            if not_found(e):
                return None
            raise storage_error(path, "stat", e.__cause__) from None
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

