"""A byte-bounded LRU cache for immutable metadata (trailers and pages).

Parts, trailers and pages of a generation never change once written, so
parsed metadata can be shared across queries, artifacts and threads.  The
navigator decides what goes in, under which key and at what size
(:func:`gtsamples.plan.navigator.cache_key`, :func:`~gtsamples.plan.navigator.cache_bytes`).
"""

from __future__ import annotations

import collections
from typing import Any, Callable, Hashable, Sequence

from .argcheck import is_integer
from .runtime import ForkSafeLock

DEFAULT_CACHE_BYTES = 256 * 1024 * 1024


def cache_arg(cache) -> "PageCache | None":
    """A reader's ``cache`` argument: a :class:`PageCache`, or None (the process's); else
    a ``TypeError`` (a wrong object would fail only at the first lookup)."""
    if cache is not None and not isinstance(cache, PageCache):
        raise TypeError(f"cache must be a gtsamples.cache.PageCache or None, not {type(cache).__name__} {cache!r}")
    return cache


class PageCache:
    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES):
        if not is_integer(max_bytes):  # (numpy's too; not a bool or a duration)
            raise TypeError(f"max_bytes must be an integer number of bytes, not {type(max_bytes).__name__} "
                            f"{max_bytes!r}")
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0 (0 disables caching), not {max_bytes}")
        self.max_bytes = int(max_bytes)
        self._items: "collections.OrderedDict[Hashable, tuple[Any, int]]" = collections.OrderedDict()
        self._bytes = 0
        self._lock = ForkSafeLock()  # renewed in a forked child: the pages stay valid there
        self.hits = 0
        self.misses = 0
        #: Entries removed or replaced so far (evicted, put again, cleared): whoever holds
        #: cached values knows they are all still cached while this has not moved.
        self.removals = 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self.removals += len(self._items)
            self._items.clear()
            self._bytes = 0

    def peek(self, key: Hashable) -> Any | None:
        """The cached value of ``key`` (None when absent), neither counted nor moved in
        the eviction order: a look that is not a use."""
        item = self._items.get(key)
        return None if item is None else item[0]

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item[0]

    def get_many(self, keys: Sequence[Hashable], count_misses: bool = True) -> list:
        """:meth:`get` of each key (None where absent), under one lock: a region query
        looks up a few entries for each of its many artifacts.  ``count_misses=False``
        leaves the misses to be counted by the lookups that load them
        (:meth:`get_or_load`)."""
        items, out = self._items, []
        hits = 0
        with self._lock:
            for key in keys:
                item = items.get(key)
                if item is None:
                    out.append(None)
                else:
                    items.move_to_end(key)
                    out.append(item[0])
                    hits += 1  # (not out.count(None): that compares every value with None)
            self.hits += hits
            if count_misses:
                self.misses += len(out) - hits
        return out

    def get_all(self, keys: Sequence[Hashable]) -> list | None:
        """:meth:`get_many` of keys that are all expected cached: their values, or None
        when some key is absent, and then nothing is counted or moved (the caller looks
        them up another way, and counts there)."""
        items = self._items
        with self._lock:
            got = [items.get(key) for key in keys]
            if None in got:  # (entries are tuples: no value's __eq__ runs)
                return None
            for key in keys:
                items.move_to_end(key)
            self.hits += len(got)
        return [item[0] for item in got]

    def put(self, key: Hashable, value: Any, nbytes: int) -> None:
        if nbytes > self.max_bytes:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
                self.removals += 1
            self._items[key] = (value, nbytes)
            self._bytes += nbytes
            while self._bytes > self.max_bytes and self._items:
                _, (_, n) = self._items.popitem(last=False)
                self._bytes -= n
                self.removals += 1

    def get_or_load(self, key: Hashable, load: Callable[[], tuple[Any, int]], stats=None) -> Any:
        v = self.get(key)
        if v is not None:
            if stats is not None:
                stats.cache_hits += 1
            return v
        if stats is not None:
            stats.cache_misses += 1
        value, nbytes = load()
        self.put(key, value, nbytes)
        return value


_default = PageCache()


def default_cache() -> PageCache:
    return _default


def set_cache_size(max_bytes: int) -> None:
    """Resize the process-wide metadata cache (0 disables caching)."""
    global _default
    _default = PageCache(max_bytes)
