"""The :class:`Store` interface (an ABC, after zarr v3's ``Store``): coalesced and
batched ranged reads built on an implementation's few primitives, the scheme
registry, and range planning; the implementations are ``local.py`` and
``remote.py``.  See the package docstring."""

from __future__ import annotations

import abc
import dataclasses
import os
from collections.abc import Mapping
from typing import Sequence

import numpy as np

from ..buffers import pool_array
from ..errors import CorruptArtifactError, SamplesError, StorageError, UnsupportedError
from ..jit import njit

#: Ranges closer than this are fetched by one request (local / remote).
LOCAL_COALESCE_GAP = 64 * 1024
REMOTE_COALESCE_GAP = 1024 * 1024
#: No object can extend past the largest file offset (off_t).
MAX_OBJECT_END = (1 << 63) - 1
#: Reads of at most this many ranges coalesce in plain Python (numpy costs more for a few).
SMALL_RANGE_COUNT = 16
#: Single local reads up to this size are one ``os.pread`` into a new ``bytes``: one
#: buffer, touched once.  (Reading into numpy and then ``tobytes`` touched twice the
#: memory: a fresh process's first open of a 10,000-SST catalog, 3 MB, took ~6 ms more,
#: most of it page faults.)  Larger reads loop over ``preadv`` (Linux caps one read at
#: 0x7ffff000 bytes).
PREAD_MAX_BYTES = 1 << 30


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
        mine = self.__dict__  # every field is an int attribute: one dict pass, no getattr per field
        for name, v in other.__dict__.items():
            mine[name] += v

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


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


class _StoreMeta(abc.ABCMeta):
    """``Store(root, storage_options)`` opens the store registered for the root's
    scheme (:func:`register_store`); a subclass called by name is that class."""

    def __call__(cls, root, storage_options=None, *args, **kwargs):
        if storage_options is not None and not isinstance(storage_options, Mapping):
            raise TypeError(f"storage_options must be a dict (fsspec's options) or None, not "
                            f"{type(storage_options).__name__} {storage_options!r}")
        if cls is Store:
            cls = store_class(os.fspath(root))
        return abc.ABCMeta.__call__(cls, root, storage_options, *args, **kwargs)


#: URL scheme -> Store class ("file" also for plain paths; "*" for every other scheme).
_SCHEMES: dict[str, type] = {}


def register_store(scheme: str, cls: type) -> None:
    """Open roots whose URL scheme is ``scheme`` (``"file"``: plain paths too; ``"*"``:
    any scheme not registered) with the :class:`Store` subclass ``cls``."""
    if not (isinstance(cls, type) and issubclass(cls, Store)):
        raise TypeError(f"{cls!r} is not a Store subclass")
    _SCHEMES[scheme] = cls


def store_class(root: str) -> type:
    """The :class:`Store` subclass registered for ``root``'s scheme."""
    scheme = root.split("://", 1)[0] if "://" in root else "file"
    cls = _SCHEMES.get(scheme) or _SCHEMES.get("*")
    if cls is None:
        raise SamplesError(f"{root}: no store is registered for the scheme {scheme!r}")
    return cls


def root_arg(name: str, root) -> str:
    """A store root or artifact path argument as a string: ``str``, ``bytes`` (decoded as
    the file system does) or ``os.PathLike``; else a ``TypeError`` naming ``name``."""
    if isinstance(root, os.PathLike):
        root = os.fspath(root)
    if isinstance(root, bytes):
        root = os.fsdecode(root)
    if not isinstance(root, str):
        raise TypeError(f"{name}: expected a path or URL string, found {type(root).__name__}")
    return root


def is_local_root(root: str) -> bool:
    """Whether a store root names a local directory (its store class says so)."""
    return store_class(os.fspath(root)).is_local


class Store(abc.ABC, metaclass=_StoreMeta):
    """A store root: objects named by store-relative keys (after zarr v3's ``Store``).

    ``Store(root, storage_options)`` opens the implementation registered for the
    root's scheme: :class:`~gtsamples.storage.LocalStore` for paths and ``file://``,
    :class:`~gtsamples.storage.FsspecStore` for every other URL.  An implementation
    defines :meth:`path`, :meth:`getsize`, :meth:`exists`, :meth:`read_into` and
    :meth:`list`; the writes where it supports them (the defaults raise
    :class:`~gtsamples.errors.UnsupportedError`), and faster paths where it has them
    (:meth:`read`, :meth:`reader`, :meth:`read_many_into`).  Coalescing, buffers and
    the whole-object limit are this class's.  Stores hold no lock: every method is
    safe from many threads as long as the implementation's primitives are.

    Errors: a missing or short object is a
    :class:`~gtsamples.errors.CorruptArtifactError` (a manifest or catalog names
    it), any other failure a :class:`~gtsamples.errors.StorageError` naming the object.
    """

    #: A directory of this machine (region workers, store-relative paths use it).
    is_local: bool = False
    #: Ranges closer than this are fetched by one request.
    coalesce_gap: int = REMOTE_COALESCE_GAP
    #: :meth:`identity` costs about a ``stat`` (local files); else it is () and a listing's
    #: :meth:`names_with_identity` tells objects apart.
    has_cheap_identity: bool = False

    def __init__(self, root: str | os.PathLike, storage_options: dict | None = None):
        self.root = os.fspath(root)
        self.storage_options = dict(storage_options or {})

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.root!r})"

    # -- what an implementation defines --------------------------------------------
    @abc.abstractmethod
    def path(self, key: str) -> str:
        """The full path (or URL path) of ``key``, as messages name it."""

    @abc.abstractmethod
    def getsize(self, key: str) -> int:
        """The size of the object ``key``; ``FileNotFoundError`` when it is missing
        (:meth:`size` turns errors into the store's)."""

    @abc.abstractmethod
    def exists(self, key: str) -> bool:
        """Whether the object (or directory) ``key`` exists."""

    @abc.abstractmethod
    def read_into(self, key: str, ranges, out: np.ndarray, out_pos, stats: ReadStats | None) -> None:
        """Read the requests ``ranges`` (``(offset, length)`` pairs) of ``key`` into
        ``out`` at ``out_pos``, counting each request in ``stats``.  A missing object or
        a short body is :class:`CorruptArtifactError`, other failures
        :class:`StorageError`; use :func:`check_object_end` first."""

    @abc.abstractmethod
    def list(self, key: str) -> list[tuple[str, bool]]:
        """(name, is_dir) of the children of the directory ``key``; [] when it does not exist."""

    # -- writes: read-only unless an implementation supports them --------------------
    def _unsupported(self, what: str, key: str) -> UnsupportedError:
        return UnsupportedError(f"{self.path(key)}: {type(self).__name__} cannot {what}")

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create the object ``key`` holding ``data`` unless it exists; True when it
        then holds exactly ``data``, False when it holds something else.  So a retry
        that finds its own earlier attempt is not a conflict (callers make ``data``
        unique, as catalog commits do with a nonce)."""
        raise self._unsupported("create objects", key)

    def put(self, key: str, data) -> None:
        """Write (or replace) one whole object atomically: readers see the old or the new
        bytes, never a part."""
        raise self._unsupported("write objects", key)

    def publish(self, key: str):
        """Start writing the directory ``key`` (an artifact generation) as one unit:
        ``open`` its objects, the completing one (the manifest) last, then ``commit``
        (or ``abort``).  A crash leaves nothing under ``key`` that looks complete.
        ``open(name)`` returns a writer with ``write(pieces)`` (buffers written in
        order), ``close()``, ``discard()`` and ``size``.  Raises ``FileExistsError``
        when ``key`` exists: it is never replaced."""
        raise self._unsupported("publish", key)

    def remove(self, key: str, recursive: bool = False) -> None:
        """Remove an object (or, ``recursive``, a directory and everything in it); a
        missing one is not an error."""
        raise self._unsupported("remove objects", key)

    def rmdir_if_empty(self, key: str) -> None:
        """Remove the directory ``key`` if it is empty (object stores have no empty directories)."""

    def newest_mtime(self, key: str, is_dir: bool) -> float | None:
        """Newest modification time (POSIX seconds) of an object, or of a directory and
        everything in it; None when it does not exist or the store keeps no times."""
        return None

    # -- metadata --------------------------------------------------------------------
    def size(self, key: str) -> int:
        """Stat an object (only used when no size is recorded)."""
        p = self.path(key)
        try:
            return self.getsize(key)
        except FileNotFoundError:
            raise CorruptArtifactError(f"{p}: object is missing") from None
        except StorageError:
            raise
        except OSError as e:
            raise StorageError(f"{p}: cannot stat: {e}") from None

    def names(self, key: str) -> list[str]:
        """The names of the children of the directory ``key`` ([] when it does not exist)."""
        return [n for n, _ in self.list(key)]

    def identity(self, key: str) -> tuple:
        """What tells this object from another later written under the same key (local:
        inode, size, mtime); () when the store cannot tell cheaply."""
        return ()

    def names_with_identity(self, key: str) -> list[tuple[str, tuple]]:
        """:meth:`names` with what the same listing tells of each child's identity, as
        :meth:`identity` does (an object store's ETag, size and modification time); ()
        where the listing tells nothing."""
        return [(n, ()) for n in self.names(key)]

    # -- reads -----------------------------------------------------------------------
    def read(self, key: str, offset: int, length: int, stats: ReadStats | None = None) -> bytes:
        """Exactly ``length`` bytes at ``offset``; a short object is corruption."""
        out = np.empty(length, dtype=np.uint8)
        self.read_into(key, [(offset, length)], out, [0], stats)
        return out.tobytes()

    def read_many_into(self, plans, out: np.ndarray, stats: ReadStats | None) -> None:
        """:meth:`read_into` for several objects' plans ``(key, ranges, out_pos)``
        (an implementation may issue them concurrently).  The objects are artifact parts
        (:meth:`read_ranges`, :meth:`read_ranges_many`, :meth:`read_coalesced`): immutable while their name
        exists, so an implementation may keep them open between calls (the local store
        does, and notices an object removed or replaced: see :mod:`gtsamples.storage.fds`)."""
        for key, ranges, bases in plans:
            self.read_into(key, ranges, out, bases, stats)

    def reader(self, key: str, stats: ReadStats | None = None) -> "ObjectReader":
        """Several dependent reads of one object (a part's header, trailer, then root
        page).  Use as a context manager; every read is counted in ``stats`` as by
        :meth:`read`.  The object is immutable, as for :meth:`read_many_into`."""
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
        buffer, so no byte is copied twice.  The object is an artifact part, read as
        :meth:`read_many_into` reads (immutable while named).
        """
        ranges, bases, pos, total = _plan_ranges(offsets, lengths, self.coalesce_gap if gap is None else gap, 0)
        buf = pool_array(total, np.uint8)  # large fetches reuse Arrow-pool pages
        self.read_many_into([(key, ranges, bases)], buf, stats)
        return buf, pos

    def read_ranges_many(
        self, items: Sequence[tuple[str, Sequence[int], Sequence[int]]], stats: ReadStats | None = None,
        gap: int | None = None,
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """:meth:`read_ranges` for several objects ``(key, offsets, lengths)`` into ONE
        buffer: (buffer, positions of each item's ranges), read by :meth:`read_many_into`."""
        gap = self.coalesce_gap if gap is None else gap
        plans, out_pos, base = [], [], 0
        for key, offsets, lengths in items:
            ranges, bases, pos, total = _plan_ranges(offsets, lengths, gap, base)
            plans.append((key, ranges, bases))
            out_pos.append(pos)
            base += total
        buf = pool_array(base, np.uint8)
        self.read_many_into(plans, buf, stats)
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
        self.read_requests_into(keys, req_obj.tolist(), starts.tolist(), sizes.tolist(), bases.tolist(), buf, stats)
        return buf, pos

    def read_requests_into(self, keys: Sequence[str], req_obj: list[int], starts: list[int], sizes: list[int],
                           bases: list[int], out: np.ndarray, stats: ReadStats | None) -> None:
        """Planned requests of several objects into ``out`` (:meth:`read_coalesced`'s):
        request ``r`` is ``sizes[r]`` bytes at ``starts[r]`` of object
        ``keys[req_obj[r]]``, into ``out`` at ``bases[r]``; an object's requests are
        consecutive.  Here: one :meth:`read_many_into` plan per object."""
        self.read_many_into(request_plans(keys, req_obj, starts, sizes, bases), out, stats)


def request_plans(keys, req_obj: list[int], starts: list[int], sizes: list[int], bases: list[int]) -> list:
    """:meth:`Store.read_requests_into`'s requests as :meth:`Store.read_many_into`'s plans
    ``(key, [(start, size)], [buffer position])``, one per run of an object's requests."""
    plans, lo, n = [], 0, len(req_obj)
    for k in range(1, n + 1):
        if k == n or req_obj[k] != req_obj[lo]:
            plans.append((keys[req_obj[lo]], list(zip(starts[lo:k], sizes[lo:k])), bases[lo:k]))
            lo = k
    return plans


class ObjectReader:
    """Reads of one object (see :meth:`Store.reader`): through the store here; a store
    with a faster path (the local one keeps the file open) returns a subclass."""

    __slots__ = ("store", "key", "stats")

    def __init__(self, store: Store, key: str, stats: ReadStats | None):
        self.store = store
        self.key = key
        self.stats = stats

    def __enter__(self) -> "ObjectReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Release what the reader holds (nothing here)."""

    def read(self, offset: int, length: int) -> bytes:
        """Exactly ``length`` bytes at ``offset`` (:meth:`Store.read`)."""
        return self.store.read(self.key, offset, length, self.stats)

    def read_ranges(self, offsets: Sequence[int], lengths: Sequence[int], gap: int | None = None) -> list[bytes]:
        """The bytes of each range (sorted by offset), ranges closer than ``gap``
        fetched by one request, as :meth:`Store.read_ranges` plans them."""
        buf, pos = self.store.read_ranges(self.key, offsets, lengths, self.stats, gap=gap)
        return [buf[p: p + int(n)].tobytes() for p, n in zip(pos.tolist(), lengths)]


def check_object_end(path: str, ranges) -> None:
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
        reqs, pos = coalesce_small(offs, lens, int(gap))
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


def coalesce_small(offsets: list[int], lengths: list[int], gap: int):
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
