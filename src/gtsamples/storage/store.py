"""The store: ranged and coalesced reads of objects, and writes through its backend
(``local.py`` or ``remote.py``); see the package docstring."""

from __future__ import annotations

import dataclasses
import os
from typing import Sequence

import numpy as np

from ..buffers import pool_array
from ..errors import CorruptArtifactError, SamplesError, StorageError
from ..runtime import ForkSafeLock
from .local import LocalBackend, LocalPublication
from .remote import FsspecBackend, FsspecPublication, cause
from ..jit import njit

#: Ranges closer than this are fetched by one request (local / remote).
LOCAL_COALESCE_GAP = 64 * 1024
REMOTE_COALESCE_GAP = 1024 * 1024
#: No object can extend past the largest file offset (off_t).
MAX_OBJECT_END = (1 << 63) - 1
#: Reads of at most this many ranges coalesce in plain Python (numpy costs more for a few).
SMALL_RANGE_COUNT = 16
#: Single reads below this size go straight to ``os.pread`` (the buffer size rule is buffers.POOL_MIN_BYTES).
SMALL_BUFFER_BYTES = 1 << 20


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
            self._backend = LocalBackend()
        else:
            try:
                import fsspec
            except ImportError as e:  # pragma: no cover - fsspec is a dependency
                raise SamplesError(f"reading {root} needs fsspec: pip install fsspec") from e
            fs, base = fsspec.core.url_to_fs(root, **self.storage_options)
            self._backend = FsspecBackend(fs)
            self._base = base.rstrip("/")
        self.coalesce_gap = LOCAL_COALESCE_GAP if self._local else REMOTE_COALESCE_GAP
        self._prefix = self._base if self._base.endswith("/") else self._base + "/"
        self._lock = ForkSafeLock()

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

    def publish(self, key: str) -> "LocalPublication | FsspecPublication":
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
        if self._local and _small_read(offset, length):
            p = self.path(key)
            try:
                fd = os.open(p, os.O_RDONLY)
                try:
                    data = os.pread(fd, length, offset)
                finally:
                    os.close(fd)
            except (OSError, OverflowError) as e:
                raise _local_read_error(p, e) from None
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
        planned in one pass (:func:`_plan_coalesced`) rather than object by object."""
        gap = self.coalesce_gap if gap is None else gap
        n = offsets.shape[0]
        obj = np.ascontiguousarray(obj, dtype=np.int64)
        off = np.ascontiguousarray(offsets, dtype=np.uint64)
        ln = np.ascontiguousarray(lengths, dtype=np.uint64)
        pos = np.empty(n, np.int64)
        ok, req_obj, starts, sizes, bases, total = _plan_coalesced(obj, off, ln, np.uint64(gap), pos)
        if not ok:  # not sorted and disjoint: object by object
            runs = np.flatnonzero(np.r_[True, obj[1:] != obj[:-1]])
            items = [(keys[int(obj[lo])], offsets[lo:hi], lengths[lo:hi])
                     for lo, hi in zip(runs.tolist(), np.r_[runs[1:], n].tolist())]
            buf, poss = self.read_ranges_many(items, stats, gap)
            return buf, np.concatenate(poss)
        buf = pool_array(int(total), np.uint8)
        req_obj = req_obj.tolist()
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
        _check_object_end(p, ranges)
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
        except (OSError, OverflowError) as e:
            raise _local_read_error(p, e) from None
        if stats is not None:
            stats.requests += len(ranges)
            stats.bytes_read += sum(int(n) for _, n in ranges)

    def _cat_into(self, plans, out: np.ndarray, stats: ReadStats | None) -> None:
        """Remote reads of several objects' requests in one ``cat_ranges`` call."""
        paths, starts, ends = [], [], []
        for key, ranges, _ in plans:
            p = self.path(key)
            _check_object_end(p, ranges)
            for off, n in ranges:
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
            raise StorageError(f"{what}: cannot read: {cause(e)}") from None
        k = 0
        for key, ranges, bases in plans:
            p = self.path(key)
            for (off, n), pos in zip(ranges, bases):
                d = datas[k]
                k += 1
                if isinstance(d, FileNotFoundError):
                    raise CorruptArtifactError(f"{p}: object is missing")
                if isinstance(d, BaseException):
                    raise StorageError(f"{p}: cannot read [{off}, {off + n}): {cause(d)}")
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
        if store._local and _small_read(offset, length):
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


def _small_read(offset: int, length: int) -> bool:
    """A read the local fast path takes: one ``os.pread`` into a new ``bytes``."""
    return 0 <= offset and 0 < length < SMALL_BUFFER_BYTES and offset + length <= MAX_OBJECT_END


def _local_read_error(path: str, e: BaseException) -> SamplesError:
    """The store's error for a failed local read: a missing object is corruption (the
    manifest or catalog names it), anything else a storage failure."""
    if isinstance(e, FileNotFoundError):
        return CorruptArtifactError(f"{path}: object is missing")
    return StorageError(f"{path}: cannot read: {e}")


def _check_object_end(path: str, ranges) -> None:
    """No range ``(offset, length)`` may pass the largest possible object end."""
    for off, n in ranges:
        if int(off) + int(n) > MAX_OBJECT_END:
            raise CorruptArtifactError(
                f"{path}: object is shorter than its recorded size: a read of [{off}, {int(off) + int(n)}) "
                f"lies past the largest possible object end ({MAX_OBJECT_END})"
            )


@njit(nogil=True)
def _plan_coalesced(obj, off, length, gap, pos):
    """:meth:`Store.read_coalesced`'s requests in one pass: range ``r`` is ``length[r]``
    bytes at ``off[r]`` of object ``obj[r]`` (an object's ranges consecutive); ranges of
    an object closer than ``gap`` share a request.  Fills ``pos`` (each range's buffer
    position) and returns ``(ok, request object, start, size, buffer position, total
    bytes)``; ``ok`` is False, and nothing planned, when an object's ranges are not
    sorted and disjoint."""
    n = off.shape[0]
    empty_i = np.zeros(0, np.int64)
    if n == 0:
        return True, empty_i, np.zeros(0, np.uint64), empty_i, empty_i, 0
    n_req = 1
    for r in range(1, n):
        prev_end = off[r - 1] + length[r - 1]
        if obj[r] != obj[r - 1]:
            n_req += 1
        elif off[r] < prev_end:
            return False, empty_i, np.zeros(0, np.uint64), empty_i, empty_i, 0
        elif off[r] > prev_end + gap:
            n_req += 1
    req_obj = np.empty(n_req, np.int64)
    start = np.empty(n_req, np.uint64)
    size = np.empty(n_req, np.int64)
    base = np.empty(n_req, np.int64)
    k = 0
    req_obj[0] = obj[0]
    start[0] = off[0]
    base[0] = 0
    for r in range(n):
        if r > 0:
            prev_end = off[r - 1] + length[r - 1]
            if obj[r] != obj[r - 1] or off[r] > prev_end + gap:
                size[k] = np.int64(prev_end - start[k])  # disjoint: the request's last range ends it
                k += 1
                req_obj[k] = obj[r]
                start[k] = off[r]
                base[k] = base[k - 1] + size[k - 1]
        pos[r] = base[k] + np.int64(off[r] - start[k])
    size[k] = np.int64(off[n - 1] + length[n - 1] - start[k])
    return True, req_obj, start, size, base, base[k] + size[k]


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
