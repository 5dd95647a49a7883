"""The query's selection ("Navigation and equal-timestamp example").

A :class:`Selection` is the normalised query: an ordered identity set and/or a
table set, and a half-open time interval.  It answers the spec's overlap test
for parts, pages and blocks with one predicate, :func:`selects_range`: numba
kernels (block masks, part masks, the navigator's root pages) compile it in,
and :meth:`Selection.selects` runs the same source as Python.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import operator
from typing import Sequence

import numba
import numpy as np

from ..argcheck import is_integer, is_items
from ..format import constants as C
from ..format.manifest import PART_DTYPE
from ..format import structs as S
from ..format.pages import w64, words_at
from ..format.structs import BLOCK_PREFIX
from ..timebounds import to_unit
from ..jit import njit

IDENTITY = np.dtype([("table_id", "<u4"), ("tsid", "<u8")])

#: Manifests of up to this many parts are matched part by part in Python.
FEW_PARTS = 8
_PART_ROWS = 256  # part rows made into Python values at a time
#: An internal page's children are searched (bisected) per selected identity or table,
#: not tested one by one, when they outnumber the selected items this many times over.
BISECT_REFS_PER_ITEM = 8
_MAX_TSID = (1 << 64) - 1
_last_id = operator.itemgetter(1)  # PageRef.last


def _integer(name: str, v, item) -> int:
    """An identity value of ``name`` (``item``: what the caller passed, for the message): an
    integer (numpy's too), not a bool, float or string, which ``int()`` would truncate or parse, nor
    a ``numpy.timedelta64`` (an integer type to numpy)."""
    if not is_integer(v):
        raise TypeError(f"{name}: IDs must be integers, got {type(v).__name__} {v!r} in {item!r}")
    return int(v)


@dataclasses.dataclass(frozen=True)
class Selection:
    """The normalised query selection; :meth:`build` takes the readers' arguments
    (bounds as :func:`~gtsamples.timebounds.to_unit` accepts them)."""

    series: tuple[tuple[int, int], ...] | None = None  # sorted, unique
    tables: tuple[int, ...] | None = None  # sorted, unique
    start: int | None = None
    end: int | None = None

    @classmethod
    def build(cls, series=None, tables=None, start=None, end=None, unit: str = "millisecond") -> "Selection":
        s = None
        if series is not None:
            if not is_items(series):
                raise TypeError(f"series must be an iterable of (table_id, tsid) pairs, got "
                                f"{type(series).__name__} {series!r}")
            pairs = set()
            for item in series:
                try:
                    t, ts = item
                except (TypeError, ValueError):
                    one = isinstance(series, tuple) and len(series) == 2 and not isinstance(item, (tuple, list))
                    raise TypeError(f"series must be (table_id, tsid) pairs, got {item!r}"
                                    + (f" (one series is [{series!r}])" if one else "")) from None
                t, ts = _integer("series", t, item), _integer("series", ts, item)
                if not (0 <= t <= C.U32_MAX and 0 <= ts <= C.U64_MAX):
                    raise ValueError(f"series {(t, ts)} is outside (u32, u64)")
                pairs.add((t, ts))
            s = tuple(sorted(pairs))
        tb = None
        if tables is not None:
            if is_integer(tables):
                tables = [tables]
            if not is_items(tables):
                raise TypeError(f"tables must be a table ID or an iterable of them (u32 integers), got "
                                f"{type(tables).__name__} {tables!r}")
            tables = list(tables)
            tb = tuple(sorted({_integer("tables", t, tables) for t in tables}))
            bad = [t for t in tb if not 0 <= t <= C.U32_MAX]
            if bad:
                raise ValueError(f"tables: table ID {bad[0]} is outside u32 (0..={C.U32_MAX})")
        if s is not None and tb is not None:  # a table restriction intersects the identity set
            allowed = set(tb)
            s = tuple(p for p in s if p[0] in allowed)
            tb = None
        return cls(s, tb, to_unit(start, unit, "start"), to_unit(end, unit, "end"))

    @functools.cached_property
    def is_empty(self) -> bool:
        return (self.series is not None and not self.series) or (self.tables is not None and not self.tables) or (
            self.start is not None and self.end is not None and self.start >= self.end
        )

    @property
    def has_time(self) -> bool:
        return self.start is not None or self.end is not None

    def selects(self, first, last, mn, mx) -> bool:
        """Does the identifier interval ``[first, last]`` hold a selected identity, and
        the time interval ``[mn, mx]`` overlap ``[start, end)``? (:func:`selects_range`)"""
        return _selects_py(first[0], first[1], last[0], last[1], mn, mx, *self._py_args)

    def selected_refs(self, refs) -> list[int]:
        """The positions of the page references (``PageRef``: an internal page's
        children) that :meth:`selects`.  Children follow block order (checked when the
        page loaded: each one's first identity is at least the previous one's last), so
        with a few identities or tables selected, only the children whose identifier
        interval can hold each are tested (a warm one-series query on a root of 870
        children: ~10 us instead of ~580 us)."""
        args = self._py_args
        s_tid, s_tsid, mode = args[:3]
        if mode and len(refs) > BISECT_REFS_PER_ITEM * len(s_tid):
            found: set[int] = set()
            n = len(refs)
            for k_item, t in enumerate(s_tid):
                lo, hi = ((t, s_tsid[k_item]),) * 2 if mode == 1 else ((t, 0), (t, _MAX_TSID))
                k = bisect.bisect_left(refs, lo, key=_last_id)  # the first child whose last >= lo
                while k < n and refs[k][0] <= hi:
                    first, last, mn, mx = refs[k][:4]
                    if _selects_py(first[0], first[1], last[0], last[1], mn, mx, *args):
                        found.add(k)
                    k += 1
            return sorted(found)
        return [k for k, (first, last, mn, mx, *_r) in enumerate(refs)
                if _selects_py(first[0], first[1], last[0], last[1], mn, mx, *args)]

    def ids_overlap(self, first: tuple[int, int], last: tuple[int, int]) -> bool:
        """Does the inclusive identifier interval contain a selected identity?"""
        s_tid, s_tsid, mode = self._py_args[:3]
        return _selects_py(first[0], first[1], last[0], last[1], 0, 0, s_tid, s_tsid, mode, False, 0, False, 0)

    def time_overlaps(self, mn: int, mx: int) -> bool:
        _s, _t, _m, has_start, start, has_end, end = self._py_args
        return _selects_py(0, 0, 0, 0, mn, mx, (), (), 0, has_start, start, has_end, end)

    def part_mask(self, parts) -> np.ndarray:
        """:meth:`selects` for every part of a manifest's
        :class:`~gtsamples.format.manifest.PartTable` at once."""
        return _parts_mask(parts.array, self.kernel_args)

    def keep_sources(self, ids: np.ndarray, times: np.ndarray, no_stats: np.ndarray,
                     has_stats: np.ndarray) -> tuple[np.ndarray, int]:
        """Which of many sources (a region's SSTs) may hold selected rows, from their
        statistics, in one numba pass: ``ids`` (n, 4) uint64, each one's first and last
        identities (table ID, tsid); ``times`` (n, 2) int64, its time bounds; a source
        whose ``no_stats`` is set is kept, one whose ``has_stats`` is set is kept when
        :meth:`selects` its bounds, any other is not.  Returns ``(order, k)``: the kept
        positions (ascending) in ``order[:k]``, the others in ``order[k:]``."""
        return _keep_sources_kernel(ids, times, no_stats, has_stats, *self.kernel_args)

    @staticmethod
    def kernels_loaded() -> bool:
        """Has this process run a selection kernel (every read's navigation does)?  Then
        numba is up, and a first :meth:`part_mask` costs a few milliseconds (loaded from
        the cache), not a first numba call's fraction of a second."""
        return bool(_block_mask_kernel.overloads or _block_masks_kernel.overloads)

    def part_indices(self, parts) -> list[int]:
        """The indices of the parts (a :class:`~gtsamples.format.manifest.PartTable`)
        that :meth:`selects`, in order.  A manifest of a few parts is checked in
        plain Python (numpy's fixed cost per call is larger than the work)."""
        a = parts.array
        n = a.shape[0]
        if n > FEW_PARTS:
            return np.flatnonzero(self.part_mask(parts)).tolist()
        return list(self.iter_parts(parts))

    def parts_of(self, tables: Sequence) -> list:
        """:meth:`part_indices` of each of many manifests' part tables
        (:class:`~gtsamples.format.manifest.PartTable`), in one numba pass over all
        their rows: a region query opens many artifacts of a part or a few each.  One
        table's come from :meth:`iter_parts` (a large manifest's as an iterator: a read
        failing at a part evaluates no more of it)."""
        if len(tables) < 2:
            return [self.iter_parts(t) for t in tables]
        raws = [t.raw for t in tables]
        hit = np.flatnonzero(_parts_mask(np.frombuffer(b"".join(raws), PART_DTYPE), self.kernel_args))
        return split_hits(hit, [len(r) // PART_DTYPE.itemsize for r in raws])

    def iter_parts(self, parts):
        """:meth:`part_indices` as a reader opens the parts: a large manifest's one by
        one, so that a read failing at a part evaluates no more of it (and needs no
        numba, whose first call in a process costs more than a large manifest's parse)."""
        a = parts.array
        if a.shape[0] > _PART_ROWS:
            return self._iter_many_parts(a)
        args = self._py_args
        return [i for i, r in enumerate(a.tolist())  # PART_COLUMNS order
                if _selects_py(r[4], r[5], r[6], r[7], r[8], r[9], *args)]

    def _iter_many_parts(self, a):
        args = self._py_args
        for lo in range(0, a.shape[0], _PART_ROWS):  # rows made a few at a time
            for i, r in enumerate(a[lo: lo + _PART_ROWS].tolist(), lo):
                if _selects_py(r[4], r[5], r[6], r[7], r[8], r[9], *args):
                    yield i

    @functools.cached_property
    def kernel_args(self) -> tuple:
        """The selection as the trailing arguments of :func:`selects_range` in numba
        kernels: ``(s_tid, s_tsid, mode, has_start, start, has_end, end)``; mode 0: no
        identity restriction, 1: the sorted identities ``(s_tid[k], s_tsid[k])``, 2:
        the sorted table IDs ``s_tid`` (made once)."""
        s_tid, s_tsid, mode, has_start, start, has_end, end = self._py_args
        return (np.array(s_tid, dtype=np.uint32), np.array(s_tsid, dtype=np.uint64), mode, has_start, np.int64(start),
                has_end, np.int64(end))

    @functools.cached_property
    def _py_args(self) -> tuple:
        """:attr:`kernel_args` as Python values, for :func:`selects_range` run as Python."""
        if self.series is not None:
            mode = 1
            s_tid = tuple(p[0] for p in self.series)
            s_tsid = tuple(p[1] for p in self.series)
        else:
            mode = 0 if self.tables is None else 2
            s_tid = tuple(self.tables or ())
            s_tsid = ()
        return (s_tid, s_tsid, mode, self.start is not None, self.start or 0, self.end is not None, self.end or 0)

    def block_mask(self, blocks: np.ndarray) -> np.ndarray:
        """:meth:`selects` for each block of a table of block prefixes (a block holds one
        identity: first = last): one numba pass over a leaf's prefixes
        (:data:`~gtsamples.format.structs.BLOCK_PREFIX`), or over the prefix fields of
        any other structured array."""
        if blocks.dtype == BLOCK_PREFIX and blocks.ndim == 1 and blocks.flags.c_contiguous:
            return _block_mask_kernel(blocks, *self.kernel_args)
        tid, tsid = blocks["table_id"], blocks["tsid"]
        return _range_mask(tid, tsid, tid, tsid, blocks["min_timestamp"], blocks["max_timestamp"], *self.kernel_args)

    def block_masks(self, pages) -> tuple[list[np.ndarray], list[int]]:
        """:meth:`block_mask` of the blocks of each leaf page (``LeafPage``, as loaded:
        blocks sorted by identity), with the rows of each leaf's selected blocks: in one
        numba pass over all of them (a region query selects from a leaf or two of each
        of its many artifacts), which reads each leaf's prefixes in place
        (``LeafPage.tables_at``).  (Joining them first cost a 200 KB copy a query
        for 100 leaves, whose allocation and release made glibc return the heap's top
        to the system: the decoder's buffers then faulted in ~370 pages each query,
        ~1.5 ms.)  The masks are views of one array."""
        if len(pages) > 1:
            held = [p.tables_at for p in pages]  # (the tables stay alive while the kernel reads them)
            addrs = [t[0] for t in held]
            if None not in addrs:
                counts = np.array([t[1] for t in held], dtype=np.int64)
                mask, rows = _block_masks_kernel(np.array(addrs, dtype=np.int64), counts, *self.kernel_args)
                e = np.cumsum(counts).tolist()
                return [mask[a: b] for a, b in zip([0] + e, e)], rows.tolist()
        masks = [self.block_mask(p.blocks) for p in pages]
        return masks, [int(p.blocks["row_count"][m].sum(dtype=np.uint64)) for p, m in zip(pages, masks)]

    def trim_mask(self, blocks: np.ndarray) -> np.ndarray:
        """Blocks not entirely inside ``[start, end)`` need exact row filtering."""
        trim = np.zeros(blocks.shape[0], dtype=bool)
        if self.start is not None:
            trim |= blocks["min_timestamp"] < self.start
        if self.end is not None:
            trim |= blocks["max_timestamp"] >= self.end
        return trim


def bound_columns(parts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A part table's records (:data:`~gtsamples.format.manifest.PART_DTYPE`: parts, or a
    region's SST statistics) as the plain bounds arrays the kernels take: ``(ids, times)``,
    (n, 4) uint64 first and last identities and (n, 2) int64 time bounds (numba types a
    structured array anew on every call; plain arrays it types at once)."""
    ids = np.stack([parts[n] for n in ("first_table_id", "first_tsid", "last_table_id", "last_tsid")], axis=1)
    times = np.stack([parts["min_timestamp"], parts["max_timestamp"]], axis=1)
    return np.ascontiguousarray(ids, np.uint64).reshape(-1, 4), np.ascontiguousarray(times, np.int64).reshape(-1, 2)


def split_hits(hit: np.ndarray, counts: Sequence[int]) -> list[list[int]]:
    """The positions ``hit`` (sorted) in a concatenation of sequences of ``counts``
    items, as each sequence's own positions: one merge of the two sorted lists (a
    region query has a hit or two in each of its many sequences, where numpy's
    per-call cost exceeds the work)."""
    out: list[list[int]] = [[] for _ in counts]
    if hit.size:
        k, lo = 0, 0
        hi = counts[0] if counts else 0
        for h in hit.tolist():
            while h >= hi:  # (a hit past the last sequence: IndexError, as any bad index)
                k += 1
                lo = hi
                hi += counts[k]
            out[k].append(h - lo)
    return out


@numba.njit(inline="always")
def selects_range(ft, fs, lt, ls, mn, mx, s_tid, s_tsid, mode, has_start, start, has_end, end):
    """The spec's overlap test, the one definition of a selection's predicate: some
    selected identity (mode 1: ``(s_tid[k], s_tsid[k])``, sorted) or table (mode 2:
    ``s_tid``, sorted) lies in the identifier interval ``[(ft, fs), (lt, ls)]`` (mode
    0: any), and ``[mn, mx]`` overlaps ``[start, end)`` (each bound when given).
    Identities are compared as unsigned and times as signed integers only: callers
    pass unsigned table IDs and tsids (numba compares a signed with an unsigned
    64-bit integer as floats)."""
    if has_start and mx < start:
        return False
    if has_end and mn >= end:
        return False
    if mode == 0:
        return True
    m = len(s_tid)
    lo = 0
    hi = m
    if mode == 1:  # the first selected identity >= first, then is it <= last?
        while lo < hi:
            k = (lo + hi) >> 1
            if s_tid[k] < ft or (s_tid[k] == ft and s_tsid[k] < fs):
                lo = k + 1
            else:
                hi = k
        return lo < m and (s_tid[lo] < lt or (s_tid[lo] == lt and s_tsid[lo] <= ls))
    while lo < hi:  # the first selected table >= first table, then is it <= last table?
        k = (lo + hi) >> 1
        if s_tid[k] < ft:
            lo = k + 1
        else:
            hi = k
    return lo < m and s_tid[lo] <= lt


_selects_py = selects_range.py_func  # the same source, as Python (Python ints: exact)


@njit(nogil=True)
def _block_mask_kernel(blocks, s_tid, s_tsid, mode, has_start, start, has_end, end):  # pragma: no cover - numba
    """:meth:`Selection.block_mask` over BLOCK_PREFIX records."""
    n = blocks.shape[0]
    out = np.zeros(n, np.bool_)
    for i in range(n):
        b = blocks[i]
        out[i] = selects_range(b["table_id"], b["tsid"], b["table_id"], b["tsid"], b["min_timestamp"],
                               b["max_timestamp"], s_tid, s_tsid, mode, has_start, start, has_end, end)
    return out


@numba.njit(inline="always")
def _block_selected(w, p, s_tid, s_tsid, mode, has_start, start, has_end, end):  # pragma: no cover - numba
    """:func:`selects_range` of the BLOCK_PREFIX record at word ``p`` of ``w`` (first = last)."""
    t = w[p + S.BP_TABLE_ID]
    ts = w64(w, p + S.BP_TSID)
    return selects_range(t, ts, t, ts, np.int64(w64(w, p + S.BP_MIN_TIMESTAMP)),
                         np.int64(w64(w, p + S.BP_MAX_TIMESTAMP)), s_tid, s_tsid, mode, has_start, start, has_end,
                         end)


@njit(nogil=True)
def _block_masks_kernel(addrs, counts, s_tid, s_tsid, mode, has_start, start, has_end, end):  # pragma: no cover
    """:meth:`Selection.block_masks` over the BLOCK_PREFIX tables at ``addrs`` (of
    ``counts`` records): the mask of all their blocks, and each table's selected rows.
    A leaf's blocks sort by identity (a loaded leaf's rule), so with identities or
    tables selected, a leaf of many blocks per selected item is bisected to each
    item's blocks, which alone are tested."""
    nw = S.BLOCK_PREFIX_WORDS
    out = np.zeros(counts.sum(), np.bool_)
    rows = np.zeros(counts.shape[0], np.uint64)
    m = s_tid.shape[0]
    lo = 0
    for k in range(counts.shape[0]):
        n = counts[k]
        w = words_at(addrs[k], n * nw)
        r = np.uint64(0)
        if mode == 0 or n <= BISECT_REFS_PER_ITEM * m:
            for i in range(n):
                if _block_selected(w, nw * i, s_tid, s_tsid, mode, has_start, start, has_end, end):
                    out[lo + i] = True
                    r += np.uint64(w[nw * i + S.BP_ROW_COUNT])
        else:
            for q in range(m):
                t = s_tid[q]
                ts = s_tsid[q] if mode == 1 else np.uint64(0)
                a = 0
                b = n
                while a < b:  # the first block whose identity (mode 2: table) is at least the item
                    c = (a + b) >> 1
                    bt = w[nw * c + S.BP_TABLE_ID]
                    if bt < t or (mode == 1 and bt == t and w64(w, nw * c + S.BP_TSID) < ts):
                        a = c + 1
                    else:
                        b = c
                for i in range(a, n):  # the item's blocks
                    p = nw * i
                    if w[p + S.BP_TABLE_ID] != t or (mode == 1 and w64(w, p + S.BP_TSID) != ts):
                        break
                    if _block_selected(w, p, s_tid, s_tsid, mode, has_start, start, has_end, end):
                        out[lo + i] = True
                        r += np.uint64(w[p + S.BP_ROW_COUNT])
        rows[k] = r
        lo += n
    return out, rows


@njit(nogil=True)
def _keep_sources_kernel(ids, times, no_stats, has_stats, s_tid, s_tsid, mode, has_start, start, has_end,
                         end):  # pragma: no cover - numba
    """:meth:`Selection.keep_sources`."""
    n = ids.shape[0]
    keep = np.empty(n, np.bool_)
    k = 0
    for i in range(n):
        keep[i] = no_stats[i] or (has_stats[i] and selects_range(ids[i, 0], ids[i, 1], ids[i, 2], ids[i, 3],
                                                                 times[i, 0], times[i, 1], s_tid, s_tsid, mode,
                                                                 has_start, start, has_end, end))
        k += keep[i]
    order = np.empty(n, np.int64)
    a, b = 0, k
    for i in range(n):
        if keep[i]:
            order[a] = i
            a += 1
        else:
            order[b] = i
            b += 1
    return order, k


#: :func:`_block_masks_kernel` for other modules' kernels (numba calls it from theirs: :mod:`.warm`).
block_masks_kernel = _block_masks_kernel


def _parts_mask(a: np.ndarray, kernel_args: tuple) -> np.ndarray:
    """:func:`_range_mask` over the bound columns of a part table's records (``PART_DTYPE``)."""
    return _range_mask(a["first_table_id"], a["first_tsid"], a["last_table_id"], a["last_tsid"], a["min_timestamp"],
                       a["max_timestamp"], *kernel_args)


@njit(nogil=True)
def _range_mask(ft, fs, lt, ls, mn, mx, s_tid, s_tsid, mode, has_start, start, has_end, end):  # pragma: no cover
    """:func:`selects_range` for each row of bound columns (parts, blocks)."""
    n = ft.shape[0]
    out = np.zeros(n, np.bool_)
    for i in range(n):
        out[i] = selects_range(ft[i], fs[i], lt[i], ls[i], mn[i], mx[i], s_tid, s_tsid, mode, has_start, start,
                               has_end, end)
    return out
