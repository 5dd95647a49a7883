"""Object storage: local files and fsspec URLs; ranged and coalesced reads; writes.

A ``Store`` reads byte ranges of objects named by store-relative keys.  Sizes
recorded in a catalog entry or manifest are passed in, so locating a trailer
never needs a stat.  Every read is counted in a :class:`ReadStats`.

Writes go through the same ``Store`` (one local and one fsspec backend):

* :meth:`Store.put_if_absent`: create an object only if it does not exist
  (catalog commits); local: a fsynced temporary file ``os.link``-ed to its name;
  fsspec: a conditional put (``If-None-Match: *`` on S3), read back and compared;
* :meth:`Store.publish`: write a directory of objects so that a crash never
  leaves anything that looks complete (local: a temporary sibling directory
  renamed into place; fsspec: the objects, the completing one -- the manifest --
  last);
* :meth:`Store.put` (one whole object), :meth:`Store.list`,
  :meth:`Store.remove`, :meth:`Store.rmdir_if_empty`, :meth:`Store.newest_mtime`.

Remote faults: the libraries retry what is safe to retry (botocore: 5xx,
throttling and connection errors; s3fs: bodies cut short; their settings are
the ``storage_options``).  A ranged read whose body still comes back short (or
fails botocore's checksum) is read again, twice at most, then is corruption;
what keeps failing is a :class:`~gtsamples.errors.StorageError` naming the
object.  A conditional put whose outcome the client cannot see (a retried
request that finds its own first attempt) is decided by reading the object back.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import errno
import os
import secrets
import shutil
import threading
import uuid
from typing import Sequence

import numpy as np

from .buffers import pool_array
from .errors import CorruptArtifactError, SamplesError, StorageError

#: Ranges closer than this are fetched by one request (local / remote).
LOCAL_COALESCE_GAP = 64 * 1024
REMOTE_COALESCE_GAP = 1024 * 1024
#: No object can extend past the largest file offset (off_t).
MAX_OBJECT_END = (1 << 63) - 1
#: Reads of at most this many ranges coalesce in plain Python (numpy costs more for a few).
SMALL_RANGE_COUNT = 16
#: Single reads below this size go straight to ``os.pread`` (the buffer size rule is buffers.POOL_MIN_BYTES).
SMALL_BUFFER_BYTES = 1 << 20
#: Re-reads of a remote range whose body arrived short or failed its checksum.
REMOTE_REREADS = 2
#: Buffers per ``writev`` call (the POSIX minimum of IOV_MAX).
_IOV_MAX = 1024


@dataclasses.dataclass
class ReadStats:
    """What one read (or open) cost."""

    bytes_read: int = 0
    requests: int = 0
    metadata_bytes: int = 0
    chunk_bytes: int = 0
    pages_loaded: int = 0
    blocks_decoded: int = 0
    chunks_decoded: int = 0
    cache_hits: int = 0
    cache_misses: int = 0

    def add(self, other: "ReadStats") -> None:
        for name in _STAT_FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


_STAT_FIELDS = tuple(f.name for f in dataclasses.fields(ReadStats))


def coalesce(offsets: np.ndarray, lengths: np.ndarray, gap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge ranges (sorted by offset) whose gap is at most ``gap``.

    Returns (merged_starts, merged_ends, group_of_each_range).
    """
    offsets = np.asarray(offsets, dtype=np.uint64)
    ends = offsets + np.asarray(lengths, dtype=np.uint64)
    if offsets.size == 0:
        e = np.zeros(0, np.uint64)
        return e, e, np.zeros(0, np.int64)
    order_ok = offsets.size < 2 or bool(np.all(offsets[1:] >= offsets[:-1]))
    if not order_ok:
        raise ValueError("coalesce expects ranges sorted by offset")
    run_end = np.maximum.accumulate(ends)
    new_group = np.ones(offsets.size, dtype=bool)
    new_group[1:] = offsets[1:] > run_end[:-1] + np.uint64(gap)
    group = np.cumsum(new_group) - 1
    starts = offsets[new_group]
    last_idx = np.append(np.flatnonzero(new_group)[1:] - 1, offsets.size - 1)
    merged_ends = run_end[last_idx]
    return starts, merged_ends, group


class Store:
    """A store root: a local directory or an fsspec URL."""

    def __init__(self, root: str | os.PathLike, storage_options: dict | None = None):
        root = os.fspath(root)
        self.root = root
        self.storage_options = dict(storage_options or {})
        self._local = is_local_root(root)
        if self._local:
            self._base = root[len("file://"):] if root.startswith("file://") else root
            if len(self._base) > 1:  # "gen/" and "gen" name the same objects (and messages)
                self._base = self._base.rstrip("/") or "/"
            if self.storage_options:
                raise ValueError("storage_options apply only to fsspec URLs, not to local paths")
            self._backend = _LocalBackend()
        else:
            try:
                import fsspec
            except ImportError as e:  # pragma: no cover - fsspec is a dependency
                raise SamplesError(f"reading {root} needs fsspec: pip install fsspec") from e
            fs, base = fsspec.core.url_to_fs(root, **self.storage_options)
            self._backend = _FsspecBackend(fs)
            self._base = base.rstrip("/")
        self.coalesce_gap = LOCAL_COALESCE_GAP if self._local else REMOTE_COALESCE_GAP
        self._prefix = self._base if self._base.endswith("/") else self._base + "/"
        self._lock = threading.Lock()

    @property
    def is_local(self) -> bool:
        return self._local

    def path(self, key: str) -> str:
        if self._local:
            if key and key[0] != "/" and self._base:
                return self._prefix + key  # os.path.join for a relative key
            return os.path.join(self._base, key) if key else self._base
        return f"{self._base}/{key}" if key else self._base

    def __repr__(self) -> str:
        return f"Store({self.root!r})"

    # -- sizes ------------------------------------------------------------------
    def size(self, key: str) -> int:
        """Stat an object (only used when no size is recorded)."""
        p = self.path(key)
        try:
            if self._local:
                return os.stat(p).st_size
            return self._backend.size(p)
        except FileNotFoundError:
            raise CorruptArtifactError(f"{p}: object is missing") from None
        except StorageError:
            raise
        except OSError as e:
            raise StorageError(f"{p}: cannot stat: {e}") from None

    def exists(self, key: str) -> bool:
        p = self.path(key)
        return os.path.exists(p) if self._local else self._backend.exists(p)

    # -- writes -----------------------------------------------------------------
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create the object ``key`` holding ``data`` unless it exists; True when it
        then holds exactly ``data``, False when it holds something else.  So a retry
        that finds its own earlier attempt is not a conflict (callers make ``data``
        unique, as catalog commits do with a nonce).

        Local: a fsynced temporary file in the same directory, ``os.link``-ed to the
        name (atomic; fails if the name exists).  fsspec: a conditional put
        (``mode="create"``; a plain put after an ``exists`` check where the backend
        has none), then the object is read back and compared."""
        return self._backend.put_if_absent(self.path(key), data)

    def put(self, key: str, data) -> None:
        """Write (or replace) one whole object atomically: readers see the old or the new
        bytes, never a part (local: a fsynced ``<name>.tmp-<hex>`` file renamed over it)."""
        self._backend.put(self.path(key), data)

    def publish(self, key: str) -> "_LocalPublication | _FsspecPublication":
        """Start writing the directory ``key`` (an artifact generation) as one unit:
        ``open`` its objects, the completing one (the manifest) last, then ``commit``
        (or ``abort``).  A crash leaves nothing under ``key`` that looks complete.
        ``open(name)`` returns a writer with ``write(pieces)`` (buffers written in
        order), ``close()``, ``discard()`` and ``size``.  Raises ``FileExistsError``
        when ``key`` exists: it is never replaced."""
        return self._backend.publish(self.path(key.rstrip("/")))

    def list(self, key: str) -> list[tuple[str, bool]]:
        """(name, is_dir) of the children of the directory ``key``; [] when it does not exist."""
        return self._backend.list(self.path(key.rstrip("/")))

    def remove(self, key: str, recursive: bool = False) -> None:
        """Remove an object (or, ``recursive``, a directory and everything in it); a
        missing one is not an error."""
        self._backend.remove(self.path(key.rstrip("/")), recursive)

    def rmdir_if_empty(self, key: str) -> None:
        """Remove the directory ``key`` if it is empty (object stores have no empty directories)."""
        self._backend.rmdir_if_empty(self.path(key.rstrip("/")))

    def newest_mtime(self, key: str, is_dir: bool) -> float | None:
        """Newest modification time (POSIX seconds) of an object, or of a directory and
        everything in it; None when it does not exist."""
        return self._backend.newest_mtime(self.path(key.rstrip("/")), is_dir)

    # -- reads ------------------------------------------------------------------
    def read(self, key: str, offset: int, length: int, stats: ReadStats | None = None) -> bytes:
        """Exactly ``length`` bytes at ``offset``; a short object is corruption."""
        if self._local and 0 <= offset and 0 < length < SMALL_BUFFER_BYTES and offset + length <= MAX_OBJECT_END:
            p = self.path(key)
            try:
                fd = os.open(p, os.O_RDONLY)
                try:
                    data = os.pread(fd, length, offset)
                finally:
                    os.close(fd)
            except FileNotFoundError:
                raise CorruptArtifactError(f"{p}: object is missing") from None
            except (OSError, OverflowError) as e:
                raise StorageError(f"{p}: cannot read: {e}") from None
            if len(data) == length:
                if stats is not None:
                    stats.requests += 1
                    stats.bytes_read += length
                return data
            # a short read: the general path retries, or names the object as too short
        out = np.empty(length, dtype=np.uint8)
        self._read_into(key, [(offset, length)], out, [0], stats)
        return out.tobytes()

    def reader(self, key: str, stats: ReadStats | None = None) -> "ObjectReader":
        """Several dependent reads of one object (a part's header, trailer, then root
        page): a local object is opened once, on the first read.  Use as a context
        manager; every read is counted in ``stats`` as by :meth:`read`."""
        return ObjectReader(self, key, stats)

    def read_whole(self, key: str, size: int | None, limit: int, stats: ReadStats | None = None) -> bytes:
        """Read a whole object of recorded ``size`` (stat it when unknown), refusing more than ``limit`` bytes."""
        p = self.path(key)
        if size is None:
            size = self.size(key)  # no size recorded: one stat, never a limit-sized buffer
            if stats is not None:
                stats.requests += 1
        if size > limit:
            raise CorruptArtifactError(f"{p}: size {size} exceeds the limit of {limit} bytes")
        return self.read(key, 0, size, stats)

    def read_ranges(
        self, key: str, offsets: Sequence[int], lengths: Sequence[int], stats: ReadStats | None = None,
        gap: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Fetch several ranges of one object with coalesced requests.

        Returns (buffer, position of each range in the buffer).  Ranges must be
        sorted by offset; ``gap`` overrides the store's coalescing distance.  Gaps inside a coalesced request are kept in the
        buffer, so no byte is copied twice.
        """
        ranges, bases, pos, total = _plan_ranges(offsets, lengths, self.coalesce_gap if gap is None else gap, 0)
        buf = pool_array(total, np.uint8)  # large fetches reuse Arrow-pool pages
        self._read_into(key, ranges, buf, bases, stats)
        return buf, pos

    def read_ranges_many(
        self, items: Sequence[tuple[str, Sequence[int], Sequence[int]]], stats: ReadStats | None = None,
        gap: int | None = None,
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """:meth:`read_ranges` for several objects ``(key, offsets, lengths)`` into ONE
        buffer: (buffer, positions of each item's ranges).  Remote stores issue all
        requests in one concurrent ``cat_ranges`` call."""
        gap = self.coalesce_gap if gap is None else gap
        plans, out_pos, base = [], [], 0
        for key, offsets, lengths in items:
            ranges, bases, pos, total = _plan_ranges(offsets, lengths, gap, base)
            plans.append((key, ranges, bases))
            out_pos.append(pos)
            base += total
        buf = pool_array(base, np.uint8)
        if self._local or len(plans) < 2:
            for key, ranges, bases in plans:
                self._read_into(key, ranges, buf, bases, stats)
        else:
            self._cat_into(plans, buf, stats)
        return buf, out_pos

    def read_coalesced(self, keys: Sequence[str], obj: np.ndarray, offsets: np.ndarray, lengths: np.ndarray,
                       stats: ReadStats | None = None, gap: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Ranges of several objects into ONE buffer: range ``r`` is ``lengths[r]`` bytes
        at ``offsets[r]`` of object ``keys[obj[r]]``.  The ranges of an object are
        consecutive, sorted by offset and disjoint (a batch's chunks); ranges of one
        object closer than ``gap`` are fetched by one request.  Returns (buffer,
        position of each range) as :meth:`read_ranges_many` does, with the requests
        planned by numpy at once rather than object by object."""
        gap = self.coalesce_gap if gap is None else gap
        n = offsets.shape[0]
        off = offsets.astype(np.uint64)
        end = off + lengths.astype(np.uint64)
        obj = obj.astype(np.int64)
        new = np.ones(n, dtype=bool)
        if n > 1:
            same = obj[1:] == obj[:-1]
            if np.any(same & (off[1:] < end[:-1])):  # not sorted and disjoint: object by object
                runs = np.flatnonzero(np.r_[True, ~same])
                items = [(keys[int(obj[lo])], offsets[lo:hi], lengths[lo:hi])
                         for lo, hi in zip(runs.tolist(), np.r_[runs[1:], n].tolist())]
                buf, poss = self.read_ranges_many(items, stats, gap)
                return buf, np.concatenate(poss)
            new[1:] = ~same | (off[1:] > end[:-1] + np.uint64(gap))
        first = np.flatnonzero(new)
        group = np.cumsum(new) - 1
        starts = off[first]
        sizes = (end[np.r_[first[1:] - 1, n - 1]] - starts).astype(np.int64)  # disjoint: the last range ends it
        bases = np.zeros(sizes.shape[0], dtype=np.int64)
        bases[1:] = np.cumsum(sizes)[:-1]
        pos = bases[group] + (off - starts[group]).astype(np.int64)
        buf = pool_array(int(sizes.sum()), np.uint8)
        req_obj = obj[first].tolist()
        plans, lo = [], 0
        starts_l, sizes_l, bases_l = starts.tolist(), sizes.tolist(), bases.tolist()
        for k in range(1, len(req_obj) + 1):  # consecutive requests of one object: one plan
            if k == len(req_obj) or req_obj[k] != req_obj[lo]:
                plans.append((keys[req_obj[lo]], list(zip(starts_l[lo:k], sizes_l[lo:k])), bases_l[lo:k]))
                lo = k
        if self._local or len(plans) < 2:
            for key, ranges, rbases in plans:
                self._read_into(key, ranges, buf, rbases, stats)
        else:
            self._cat_into(plans, buf, stats)
        return buf, pos

    def _read_into(self, key: str, ranges, out: np.ndarray, out_pos, stats: ReadStats | None) -> None:
        p = self.path(key)
        for off, n in ranges:
            if int(off) + int(n) > MAX_OBJECT_END:
                raise CorruptArtifactError(
                    f"{p}: object is shorter than its recorded size: a read of [{off}, {int(off) + int(n)}) "
                    f"lies past the largest possible object end ({MAX_OBJECT_END})"
                )
        if not self._local:
            self._cat_into([(key, ranges, out_pos)], out, stats)
            return
        try:
            fd = os.open(p, os.O_RDONLY)
            try:
                mv = memoryview(out)
                for (off, n), pos in zip(ranges, out_pos):
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
        except FileNotFoundError:
            raise CorruptArtifactError(f"{p}: object is missing") from None
        except (OSError, OverflowError) as e:
            raise StorageError(f"{p}: cannot read: {e}") from None
        if stats is not None:
            stats.requests += len(ranges)
            stats.bytes_read += sum(int(n) for _, n in ranges)

    def _cat_into(self, plans, out: np.ndarray, stats: ReadStats | None) -> None:
        """Remote reads of several objects' requests in one ``cat_ranges`` call."""
        paths, starts, ends = [], [], []
        for key, ranges, _ in plans:
            p = self.path(key)
            for off, n in ranges:
                if int(off) + int(n) > MAX_OBJECT_END:
                    raise CorruptArtifactError(
                        f"{p}: object is shorter than its recorded size: a read of [{off}, {int(off) + int(n)}) "
                        f"lies past the largest possible object end ({MAX_OBJECT_END})"
                    )
                paths.append(p)
                starts.append(int(off))
                ends.append(int(off) + int(n))
        if not paths:
            return
        try:
            datas = self._backend.cat_ranges(paths, starts, ends)
        except FileNotFoundError:  # an error the filesystem raised instead of returning
            for key, _, _ in plans:
                if not self.exists(key):
                    raise CorruptArtifactError(f"{self.path(key)}: object is missing") from None
            raise StorageError(f"{self.root}: cannot read: object missing") from None
        except Exception as e:  # noqa: BLE001 - the remote stack's own exception types
            what = paths[0] if len(plans) == 1 else f"{self.root} ({len(plans)} objects)"
            raise StorageError(f"{what}: cannot read: {_cause(e)}") from None
        k = 0
        for key, ranges, bases in plans:
            p = self.path(key)
            for (off, n), pos in zip(ranges, bases):
                d = datas[k]
                k += 1
                if isinstance(d, FileNotFoundError):
                    raise CorruptArtifactError(f"{p}: object is missing")
                if isinstance(d, BaseException):
                    raise StorageError(f"{p}: cannot read [{off}, {off + n}): {_cause(d)}")
                if len(d) != n:  # never decode a short body as if it were whole
                    raise CorruptArtifactError(
                        f"{p}: object is shorter than its recorded size: read of [{off}, {off + n}) returned {len(d)} bytes"
                    )
                out[pos: pos + n] = np.frombuffer(d, dtype=np.uint8)
            if stats is not None:
                stats.requests += len(ranges)
                stats.bytes_read += sum(int(n) for _, n in ranges)


class ObjectReader:
    """Reads of one object through one open file (local) or the store (remote);
    see :meth:`Store.reader`.  Any read the local fast path cannot complete (a
    missing or short object, an error) is redone by :meth:`Store.read`, which
    raises the store's error for it."""

    __slots__ = ("store", "key", "stats", "_fd")

    def __init__(self, store: Store, key: str, stats: ReadStats | None):
        self.store = store
        self.key = key
        self.stats = stats
        self._fd = None

    def __enter__(self) -> "ObjectReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def read(self, offset: int, length: int) -> bytes:
        """Exactly ``length`` bytes at ``offset`` (:meth:`Store.read`)."""
        store = self.store
        if store._local and 0 <= offset and 0 < length < SMALL_BUFFER_BYTES and offset + length <= MAX_OBJECT_END:
            try:
                fd = self._fd
                if fd is None:
                    fd = self._fd = os.open(store.path(self.key), os.O_RDONLY)
                data = os.pread(fd, length, offset)
            except (OSError, OverflowError):
                data = None
            if data is not None and len(data) == length:
                st = self.stats
                if st is not None:
                    st.requests += 1
                    st.bytes_read += length
                return data
        return store.read(self.key, offset, length, self.stats)

    def read_ranges(self, offsets: Sequence[int], lengths: Sequence[int], gap: int | None = None) -> list[bytes]:
        """The bytes of each range (sorted by offset), ranges closer than ``gap``
        fetched by one request, as :meth:`Store.read_ranges` plans them."""
        store = self.store
        gap = store.coalesce_gap if gap is None else gap
        if not store._local or len(offsets) > SMALL_RANGE_COUNT:
            buf, pos = store.read_ranges(self.key, offsets, lengths, self.stats, gap=gap)
            return [buf[p: p + int(n)].tobytes() for p, n in zip(pos.tolist(), lengths)]
        if len(offsets) == 1:
            return [self.read(int(offsets[0]), int(lengths[0])) if lengths[0] else b""]
        if len(offsets) == 2:  # a part's header and trailer: far apart unless the part is small
            (o0, o1), (n0, n1) = (int(o) for o in offsets), (int(n) for n in lengths)
            if 0 <= o0 <= o1 and n0 > 0 and n1 > 0 and o1 > o0 + n0 + gap:
                return [self.read(o0, n0), self.read(o1, n1)]
        reqs, pos = _coalesce_small([int(o) for o in offsets], [int(n) for n in lengths], int(gap))
        if len(reqs) == len(pos):  # one request per range
            return [self.read(o, n) if n else b"" for o, n, _ in reqs]
        whole = b"".join([self.read(o, n) if n else b"" for o, n, _ in reqs])
        return [whole[p: p + int(n)] for p, n in zip(pos, lengths)]


def _plan_ranges(offsets, lengths, gap: int, base: int):
    """Coalesced requests of sorted ranges: ([(start, size)], [buffer position of each
    request], [buffer position of each range] (int64 array), buffer bytes), positions from ``base``."""
    if len(offsets) <= SMALL_RANGE_COUNT:
        offs = offsets.tolist() if isinstance(offsets, np.ndarray) else [int(o) for o in offsets]
        lens = lengths.tolist() if isinstance(lengths, np.ndarray) else [int(n) for n in lengths]
        reqs, pos = _coalesce_small(offs, lens, int(gap))
        total = reqs[-1][2] + reqs[-1][1] if reqs else 0
        return ([(o, n) for o, n, _ in reqs], [b + base for _, _, b in reqs],
                np.array(pos, dtype=np.int64) + base, total)
    offsets = np.asarray(offsets, dtype=np.uint64)
    lengths = np.asarray(lengths, dtype=np.uint64)
    starts, ends, group = coalesce(offsets, lengths, gap)
    sizes = (ends - starts).astype(np.int64)
    bases = np.zeros(sizes.size, dtype=np.int64)
    if sizes.size:
        bases[1:] = np.cumsum(sizes)[:-1]
    bases += base
    pos = bases[group] + (offsets - starts[group]).astype(np.int64)
    return list(zip(starts.tolist(), sizes.tolist())), bases.tolist(), pos, int(sizes.sum())


def _coalesce_small(offsets: list[int], lengths: list[int], gap: int):
    """:func:`coalesce` for a few ranges, in plain Python (no per-call numpy cost).

    Returns ([(start, size, buffer position)] per request, [buffer position] per range).
    """
    ranges: list[list[int]] = []  # [start, run end, buffer base]
    pos = []
    prev = None
    base = 0
    for off, n in zip(offsets, lengths):
        if off < 0 or n < 0:
            raise ValueError("ranges must have nonnegative offsets and lengths")
        if prev is not None and off < prev:
            raise ValueError("coalesce expects ranges sorted by offset")
        prev = off
        end = off + n
        if ranges and off <= ranges[-1][1] + gap:
            r = ranges[-1]
            if end > r[1]:
                r[1] = end
        else:
            if ranges:
                base += ranges[-1][1] - ranges[-1][0]
            ranges.append([off, end, base])
        r = ranges[-1]
        pos.append(r[2] + off - r[0])
    return [(a, e - a, b) for a, e, b in ranges], pos


def is_local_root(root: str) -> bool:
    """Whether a store root names a local directory (a path or a ``file://`` URL)."""
    return "://" not in root or root.startswith("file://")


def _cause(e: BaseException) -> str:
    """An exception for a message: its own text, with its type when that is not an OSError's."""
    return str(e) if isinstance(e, OSError) and str(e) else f"{type(e).__name__}: {e}"


def _storage_error(path: str, action: str, e: BaseException) -> StorageError:
    """A StorageError naming the object, what failed and why (the cause's errno kept)."""
    err = StorageError(f"{path}: cannot {action}: {_cause(e)}")
    if isinstance(e, OSError):
        err.errno = e.errno
    return err


# =============================================================================
# local backend
# =============================================================================


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


def _exists_error(path: str) -> FileExistsError:
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
            raise _exists_error(dst)
        if err not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(err, os.strerror(err), dst)
    # fallback: check, then rename (rename(2) refuses a non-empty target)
    if os.path.lexists(dst):
        raise _exists_error(dst)
    try:
        os.rename(src, dst)
    except OSError as e:
        if e.errno in (errno.EEXIST, errno.ENOTEMPTY):
            raise _exists_error(dst) from None
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


class _LocalPublication:
    """Objects go into ``<parent>/.tmp-<name>-<random>``, renamed to ``<name>`` on commit."""

    def __init__(self, final: str):
        self.parent, name = os.path.split(final)
        self.final = final
        if os.path.lexists(final):
            raise _exists_error(final)
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


class _LocalBackend:
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

    def publish(self, final: str) -> _LocalPublication:
        return _LocalPublication(final)

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


# =============================================================================
# fsspec backend
# =============================================================================


class _FsspecObject:
    """One object of an fsspec publication: buffered by the filesystem, stored on close."""

    def __init__(self, fs, path: str):
        self.path = path
        self.size = 0
        try:
            self.f = fs.open(path, "wb")
        except Exception as e:  # noqa: BLE001 - the filesystem's own exception types
            raise _storage_error(path, "write", e) from None

    def write(self, pieces: Sequence) -> None:
        try:
            for p in pieces:
                b = p if isinstance(p, bytes) else bytes(memoryview(p).cast("B"))
                self.f.write(b)
                self.size += len(b)
        except Exception as e:  # noqa: BLE001
            raise _storage_error(self.path, "write", e) from None

    def close(self) -> None:
        try:
            self.f.close()
        except Exception as e:  # noqa: BLE001
            raise _storage_error(self.path, "write", e) from None

    def discard(self) -> None:
        try:
            self.f.close()
        except Exception:  # noqa: BLE001 - best effort
            pass


class _FsspecPublication:
    """fsspec stores: the objects in order, the completing one last (object stores
    cannot rename).  A crash leaves no manifest, so nothing at the final path looks
    complete; on an exception the objects written so far are removed.  The catalog
    commit is what publishes an artifact."""

    def __init__(self, backend: "_FsspecBackend", path: str):
        self.backend = backend
        self.dir = path
        if backend.exists(path):
            raise _exists_error(path)
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


class _FsspecBackend:
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
            raise _storage_error(path, "stat", e) from None

    def exists(self, path: str) -> bool:
        try:
            return bool(self.fs.exists(path))
        except Exception as e:  # noqa: BLE001
            raise _storage_error(path, "stat", e) from None

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
            raise _storage_error(path, "create (whether it was written is unknown)", e) from None

    def put(self, path: str, data) -> None:
        try:
            self.fs.pipe_file(path, data if isinstance(data, bytes) else bytes(memoryview(data).cast("B")))
        except Exception as e:  # noqa: BLE001
            raise _storage_error(path, "write", e) from None

    def publish(self, path: str) -> _FsspecPublication:
        return _FsspecPublication(self, path)

    def list(self, path: str) -> list[tuple[str, bool]]:
        self._invalidate(path)
        try:
            return [(d["name"].rstrip("/").rsplit("/", 1)[-1], d.get("type") == "directory")
                    for d in self.fs.ls(path, detail=True)]
        except FileNotFoundError:
            return []
        except Exception as e:  # noqa: BLE001
            raise _storage_error(path, "list", e) from None

    def remove(self, path: str, recursive: bool) -> None:
        try:
            self.fs.rm(path, recursive=recursive)
        except FileNotFoundError:
            pass
        except Exception as e:  # noqa: BLE001
            raise _storage_error(path, "remove", e) from None
        self._invalidate(path)

    def rmdir_if_empty(self, path: str) -> None:
        pass  # object stores have no empty directories

    def newest_mtime(self, path: str, is_dir: bool) -> float | None:
        try:
            infos = self.fs.find(path, detail=True).values() if is_dir else [self.fs.info(path)]
        except FileNotFoundError:
            return None
        except Exception as e:  # noqa: BLE001
            raise _storage_error(path, "stat", e) from None
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

