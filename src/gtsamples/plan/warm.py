"""Warm navigation: a region query whose pages are all cached, navigated in one numba pass.

A narrow region query (one series, a day) visits a part, a root and a leaf of each of
many artifacts.  Warm, every step is a cache hit, yet :class:`~.navigator.Navigation`
still takes a dozen Python steps per artifact (its part, its state, its root's children,
its leaf, each looked up and kept), and after a pause between queries -- when the
host has evicted the CPU caches -- each step costs several times more.

A :class:`WarmIndex` holds, for one catalog version, the columns a query needs and one
page cache, what navigating its artifacts found there, as flat tables: per covered SST
(its position in the region) the part's bounds and the root's children (their PAGE_REF
records, joined), and per child the leaf loaded under it (its block prefix table, read
in place).  :meth:`WarmIndex.navigate` picks a query's parts, children and leaves for
all its artifacts, and masks the selected leaves' blocks, in one pass
(:func:`_pick_kernel`); then it looks every entry it used up in the page cache at once,
as navigating would (the same hits counted, the same entries made recent), which also
proves them still cached.  What it cannot answer --
an artifact it does not hold, a child whose leaf it does not hold, a part with two
selected leaves (they are checked against each other), an entry no longer cached --
it leaves to :class:`~.navigator.Navigation` (``None``), whose outcome the caller then
registers (:meth:`WarmIndex.register`).  Its answers are exactly Navigation's: the same leaves,
masks, selected rows and cache hits (tests/region/test_warm.py compares them).

The index only holds values the page cache held when they were registered, and it
is emptied as soon as the cache has removed any entry since
(:attr:`~gtsamples.cache.PageCache.removals`): it never keeps alive more than the
cache's bound.  Readers use an immutable snapshot; registrations (under a lock)
publish a new one.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from ..format import constants as C
from ..format import structs as S
from ..format.manifest import PART_DTYPE
from ..jit import njit
from ..runtime import ForkSafeLock
from .leaves import SelectedLeaf
from .loading import ref_selected
from .navigator import cache_key
from .selection import Selection, block_masks_kernel, bound_columns, selects_range

__all__ = ["WarmIndex"]

class _Snapshot(NamedTuple):
    removals: int  # the cache's removals when the index was (re)started
    slot_of: np.ndarray  # int64 per covered SST position: its artifact's slot, -1: not held
    ids: np.ndarray  # uint64 (slots, 4) per slot: its part's first and last identities
    times: np.ndarray  # int64 (slots, 2) per slot: its part's time bounds
    child_lo: np.ndarray  # int64 per slot: its root's first child in ``words`` / ``child_leaf``
    child_n: np.ndarray  # int64 per slot: its root's children (0: the root is its only leaf, one child entry)
    words: np.ndarray  # uint32: the roots' PAGE_REF records, joined
    child_leaf: np.ndarray  # int64 per child: the leaf held under it, -1: none
    leaf_addr: np.ndarray  # int64 per leaf: its block prefix table's address (held alive by ``held``)
    leaf_blocks: np.ndarray  # int64 per leaf: its blocks
    arts: list  # per slot: the opened artifact
    kids: list  # per slot: its root's children (ChildRefs; None: the root is its only leaf)
    art_keys: list  # per slot: the page cache key of the opened artifact
    state_keys: list  # per slot: the page cache key of its part's state
    pages: list  # per leaf: its LeafPage
    leaf_keys: list  # per leaf: its page cache key (None: a root leaf, cached in its part's state)
    held: list  # per leaf: the tables its address points into


class WarmIndex:
    """The warm navigation of one catalog version's artifacts for one set of needed
    columns, in one page cache (see the module's docstring).  ``n_sources``: the
    version's SSTs; ``artifact_key(source)``: the page cache key under which the
    region keeps a planned source's opened artifact."""

    def __init__(self, cache, n_sources: int, artifact_key: Callable):
        self.cache = cache
        self.n_sources = int(n_sources)
        self._artifact_key = artifact_key
        self._lock = ForkSafeLock()
        self._snap = _empty(cache.removals, self.n_sources)

    @property
    def artifacts(self) -> int:
        """Artifacts held (for tests and benchmarks)."""
        return len(self._snap.arts)

    # -- answering ----------------------------------------------------------------------
    def navigate(self, ordinals: list[int], sel: Selection):
        """The navigation of the artifacts covering the SSTs at region positions
        ``ordinals``, as :meth:`Navigation.finish <.navigator.Navigation.finish>` and
        :attr:`~.navigator.Navigation.selected_rows` give it, when this index can
        answer: ``(artifacts, leaves, rows, hits)``, per artifact its opened artifact,
        its :class:`~.leaves.SelectedLeaf` list, its selected rows and the cache hits
        navigating it counts (its artifact, part state and leaf).  Else None."""
        snap = self._snap
        if not snap.arts or sel.is_empty or not ordinals or self.cache.removals != snap.removals:
            return None
        ok, table, mask = _pick_kernel(
            np.array(ordinals, dtype=np.int64), snap.slot_of, snap.ids, snap.times, snap.child_lo, snap.child_n,
            snap.words, snap.child_leaf, snap.leaf_addr, snap.leaf_blocks, *sel.kernel_args)
        if not ok:
            return None
        sl, child, lf, hits, rows, at = table.tolist()
        n = len(ordinals)  # (the rows' last column: at's end only)
        sl, child, lf, hits, rows = sl[:n], child[:n], lf[:n], hits[:n], rows[:n]
        keys = [snap.art_keys[s] for s in sl]
        keys += [snap.state_keys[s] for s, h in zip(sl, hits) if h > 1]
        keys += [snap.leaf_keys[k] for k in lf if k >= 0 and snap.leaf_keys[k] is not None]
        if self.cache.get_all(keys) is None:  # evicted since (then removals moved: a race)
            return None
        pages = snap.pages
        leaves = [[] if k < 0 else [SelectedLeaf(0, c, pages[k], mask[at[j]: at[j + 1]])]
                  for j, (k, c) in enumerate(zip(lf, child))]
        return [snap.arts[s] for s in sl], leaves, rows, hits

    # -- registering --------------------------------------------------------------------
    def register(self, found) -> None:
        """Hold what navigating found: ``found`` is ``[(source, artifact, its SelectedLeaf
        list)]`` for artifacts navigated without error (their parts' states as the page
        cache holds them).  Only artifacts of one part are held (a region's SST
        artifacts; their root an internal page, or their only leaf), only while the page
        cache holds those very values, and only leaves whose block prefixes can be read
        in place.  A new snapshot extends the last one (its arrays copied: readers keep
        theirs)."""
        cache = self.cache
        with self._lock:
            snap = self._snap
            if cache.removals != snap.removals:  # something was evicted: start again
                snap = _empty(cache.removals, self.n_sources)
            slot_of = snap.slot_of
            new: dict[int, int] = {}  # position -> new slot
            slots = []  # new slots: (artifact, its key, state key, children, its part's record as bytes)
            leaves_at: dict[int, tuple] = {}  # child -> (page, key, tables), new leaves
            kids = snap.kids
            n_slots, n_children = len(snap.arts), snap.child_leaf.shape[0]
            lo_of: list = []  # new slots: their first child
            next_child = n_children
            for src, art, leaves in found:
                o = src.ordinal
                if not 0 <= o < self.n_sources:
                    continue
                s = int(slot_of[o])
                if s < 0:
                    s = new.get(o, -1)
                if s < 0:
                    if art.cache is not cache or len(art.manifest.files) != 1:
                        continue
                    state_key, art_key = cache_key(art, 0, -1), self._artifact_key(src)
                    state = cache.peek(state_key)
                    if state is None or cache.peek(art_key) is not art:
                        continue  # (held only while the cache holds it: a cache of 0 bytes holds nothing)
                    s = new[o] = n_slots + len(slots)
                    lo_of.append(next_child)
                    next_child += 1 if state.children is None else len(state.children)
                    slots.append((art, art_key, state_key, state.children,
                                  art.manifest.files.raw[:PART_DTYPE.itemsize]))
                if s < n_slots:
                    a, ch, lo, sk = snap.arts[s], kids[s], int(snap.child_lo[s]), snap.state_keys[s]
                else:
                    a, _k, sk, ch, _r = slots[s - n_slots]
                    lo = lo_of[s - n_slots]
                if a is not art:  # opened again (after an eviction: started again soon)
                    continue
                for leaf in leaves:
                    c = lo + leaf.leaf
                    if leaf.part != 0 or (c < n_children and snap.child_leaf[c] >= 0) or c in leaves_at:
                        continue
                    at = leaf.page.tables_at
                    if at[0] is None:
                        continue
                    if ch is None:  # a root that is the only leaf: cached in its part's state
                        key, cached = None, getattr(cache.peek(sk), "root_leaf", None)
                    else:
                        key = cache_key(art, 0, ch[leaf.leaf].offset)
                        cached = cache.peek(key)
                    if cached is leaf.page:
                        leaves_at[c] = (leaf.page, key, at)
            if not new and not leaves_at and snap is self._snap:
                return
            self._snap = _extend(snap, new, slots, leaves_at)


def _empty(removals: int, n_sources: int) -> _Snapshot:
    """An index holding nothing, as of the cache's ``removals``."""
    z = np.zeros(0, np.int64)
    return _Snapshot(removals, np.full(n_sources, -1, np.int64), np.zeros((0, 4), np.uint64),
                     np.zeros((0, 2), np.int64), z, z, np.zeros(0, np.uint32), z, z, z, [], [], [], [], [], [], [])


def _extend(snap: _Snapshot, new: dict, slots: list, leaves_at: dict) -> _Snapshot:
    """``snap`` with the slots ``slots`` (``new``: their positions) and the leaves
    ``leaves_at`` (child -> (page, key, tables)) added: new arrays, new lists."""
    slot_of = snap.slot_of
    if new:
        slot_of = slot_of.copy()
        slot_of[np.fromiter(new.keys(), np.int64, len(new))] = np.fromiter(new.values(), np.int64, len(new))
    ids, times = snap.ids, snap.times
    child_lo, child_n, words, child_leaf = snap.child_lo, snap.child_n, snap.words, snap.child_leaf
    if slots:
        # (the rows as bytes: numpy joins structured arrays field by field, in Python)
        b_ids, b_times = bound_columns(np.frombuffer(b"".join([x[4] for x in slots]), PART_DTYPE))
        ids, times = np.concatenate([ids, b_ids]), np.concatenate([times, b_times])
        # a root that is the part's only leaf: one child entry (a placeholder record), no children
        counts = np.array([1 if x[3] is None else len(x[3]) for x in slots], np.int64)
        child_lo = np.concatenate([child_lo, child_leaf.shape[0] + np.cumsum(counts) - counts])
        child_n = np.concatenate([child_n, [0 if x[3] is None else len(x[3]) for x in slots]]).astype(np.int64)
        words = np.concatenate([words, np.frombuffer(b"".join([bytes(C.PAGE_REF_SIZE) if x[3] is None else x[3].raw
                                                               for x in slots]), dtype="<u4")])
        child_leaf = np.concatenate([child_leaf, np.full(int(counts.sum()), -1, np.int64)])
    leaf_addr, leaf_blocks = snap.leaf_addr, snap.leaf_blocks
    pages, leaf_keys, held = snap.pages, snap.leaf_keys, snap.held
    if leaves_at:
        if not slots:
            child_leaf = child_leaf.copy()
        base = len(pages)
        got = list(leaves_at.items())
        child_leaf[np.array([c for c, _ in got], np.int64)] = base + np.arange(len(got))
        leaf_addr = np.concatenate([leaf_addr, np.array([v[2][0] for _, v in got], np.int64)])
        leaf_blocks = np.concatenate([leaf_blocks, np.array([v[2][1] for _, v in got], np.int64)])
        pages = pages + [v[0] for _, v in got]
        leaf_keys = leaf_keys + [v[1] for _, v in got]
        held = held + [v[2][4] for _, v in got]
    return _Snapshot(snap.removals, slot_of, ids, times, child_lo, child_n, words, child_leaf, leaf_addr, leaf_blocks,
                     snap.arts + [x[0] for x in slots], snap.kids + [x[3] for x in slots],
                     snap.art_keys + [x[1] for x in slots], snap.state_keys + [x[2] for x in slots],
                     pages, leaf_keys, held)


@njit(nogil=True)
def _pick_kernel(ordinals, slot_of, ids, times, child_lo, child_n, words, child_leaf, leaf_addr, leaf_blocks, s_tid,
                 s_tsid, mode, has_start, start, has_end, end):  # pragma: no cover - numba
    """Per artifact (the SST positions ``ordinals``): its slot, is its part selected,
    which one child of its root is (a root's children are its leaves), the leaf held
    under it and that leaf's selected blocks.  Returns ``(ok, table, mask)``: ``ok`` False
    when some artifact needs the navigator (not held, two or more children selected, or
    the selected child's leaf not held); ``table``'s rows, per artifact (and one more):
    its slot, its child and leaf (-1 where none is selected), the cache hits navigating
    it counts (artifact, part state, and leaf unless the root is the only leaf), its
    selected rows, and where its blocks start in ``mask``, the selected leaves' block
    masks joined (artifact ``j``'s at ``[at[j], at[j + 1])``)."""
    n = ordinals.shape[0]
    out = np.zeros((6, n + 1), np.int64)  # (one array: numba boxes each returned array at a cost)
    slots, child, leaf, hits, rows, at = out[0], out[1], out[2], out[3], out[4], out[5]
    child[:] = -1
    leaf[:] = -1
    hits[:] = 1
    nothing = np.zeros(0, np.bool_)
    for j in range(n):
        o = ordinals[j]
        if o < 0 or o >= slot_of.shape[0] or slot_of[o] < 0:
            return False, out, nothing
        s = slot_of[o]
        slots[j] = s
        at[j + 1] = at[j]
        if not selects_range(ids[s, 0], ids[s, 1], ids[s, 2], ids[s, 3], times[s, 0],
                             times[s, 1], s_tid, s_tsid, mode, has_start, start, has_end, end):
            continue
        hits[j] = 2
        lo = child_lo[s]
        if child_n[s] == 0:  # the root is the part's only leaf, held in the part's state
            k = child_leaf[lo]
            if k < 0:
                return False, out, nothing
            child[j] = 0
            leaf[j] = k
            at[j + 1] = at[j] + leaf_blocks[k]
            continue
        found = -1
        for c in range(child_n[s]):
            if ref_selected(words, S.PAGE_REF_WORDS * (lo + c), s_tid, s_tsid, mode, has_start, start, has_end, end):
                if found >= 0:  # two leaves of a part: checked against each other by the navigator
                    return False, out, nothing
                found = c
        if found < 0:
            continue
        k = child_leaf[lo + found]
        if k < 0:
            return False, out, nothing
        child[j] = found
        leaf[j] = k
        hits[j] = 3
        at[j + 1] = at[j] + leaf_blocks[k]
    m = 0
    for j in range(n):
        if leaf[j] >= 0:
            m += 1
    addrs = np.empty(m, np.int64)
    counts = np.empty(m, np.int64)
    m = 0
    for j in range(n):
        if leaf[j] >= 0:
            addrs[m] = leaf_addr[leaf[j]]
            counts[m] = leaf_blocks[leaf[j]]
            m += 1
    mask, leaf_rows = block_masks_kernel(addrs, counts, s_tid, s_tsid, mode, has_start, start, has_end, end)
    m = 0
    for j in range(n):
        if leaf[j] >= 0:
            rows[j] = np.int64(leaf_rows[m])
            m += 1
    return True, out, mask
