"""The navigator: the leaves (and blocks) a selection needs, for one artifact or many at once.

Navigation ("Navigation and equal-timestamp example") walks parts -> pages ->
blocks: a part's header and trailer are checked before anything else of it is
read, then its root page, then the leaf pages the selection needs; each leaf
then gets the selection's blocks, and adjacent leaves are checked against each
other.  Reading one artifact is navigating a batch of one; a region query
navigates its covered artifacts together, and for a narrow query (one series)
the work per artifact is small and fixed -- a header, a trailer, a root page and
a leaf or two -- so each step runs for all parts of all artifacts at once: the
headers and trailers are checked by one numba call
(:func:`~gtsamples.format.pages.check_heads`), the internal root pages by one
more, which also picks the children the selection needs, and the leaf pages of
each field layout by a third (:mod:`.loading`: on a helper thread for large
loads, while the caller opens the next group of artifacts).  A warm query (every
state and leaf cached) costs a few Python steps per artifact: the parts of all
artifacts are picked in one numba pass (:meth:`~.selection.Selection.parts_of`),
their states looked up in one cache call (``PageCache.get_many``), the children
of all cached roots picked in another pass (:func:`.loading.pick_children`, over
the roots' records as loaded), the leaves looked up in one more cache call, and
the blocks of all leaves masked in a last pass
(:meth:`~.selection.Selection.block_masks`), which also counts each artifact's
selected rows (:attr:`Navigation.selected_rows`).

Every rule is checked once (:mod:`gtsamples.format.pages`); an artifact's
outcome is the one a reader going part by part and page by page would reach:
its leaves, or the error of the first rule it breaks in that order (each error
is kept with its position -- part, step, page -- and the earliest wins; work on
later parts of a failed artifact is skipped where it is not already done).

The navigator owns the page cache's keys and size accounting: a part's checked
state (:class:`PartState`) and each checked leaf are cached, keyed by
:func:`cache_key` and sized by :func:`cache_bytes`.
"""

from __future__ import annotations

import functools
import itertools
from typing import NamedTuple, Sequence

import numpy as np

from ..errors import SamplesError
from ..format import constants as C
from ..format import rules as R
from ..format.pages import LeafPage, PageRef, Trailer, check_boundary, check_heads
from ..storage import LOCAL_COALESCE_GAP, ObjectReader, ReadStats
from . import loading
from .leaves import SelectedLeaf
from .selection import Selection

__all__ = ["Navigation", "PartState", "cache_bytes", "cache_key", "navigate_many"]


class PartState(NamedTuple):
    """A part's checked header, trailer and root page (cached as one entry)."""

    trailer: Trailer
    root_leaf: LeafPage | None  # depth 1
    children: list[PageRef] | None  # depth 2


def cache_key(art, part: int, offset: int) -> tuple:
    """The page cache key of part ``part``'s state (``offset`` -1) or of its leaf at
    ``offset``: parts and pages of a generation never change once written."""
    return (art.store.root, art.prefix, art.manifest.generation, part, offset)


def cache_bytes(value) -> int:
    """What a cache entry is charged: a leaf's descriptor tables (the column table
    twice: the views a read makes of it) and a fixed overhead; a part's root leaf, or
    its children's references."""
    if isinstance(value, PartState):
        return cache_bytes(value.root_leaf) if value.root_leaf is not None else 200 * len(value.children) + 512
    return value.blocks.nbytes + value.columns.nbytes * 2 + 512


def navigate_many(arts: Sequence, sel: Selection, stats: Sequence[ReadStats],
                  parts: Sequence | None = None) -> list[list[SelectedLeaf] | SamplesError]:
    """Each artifact's selected leaves, or the :class:`~gtsamples.SamplesError` its
    first broken rule raises; ``stats[j]`` counts artifact ``j``'s reads.  ``parts``:
    for each artifact, the part indices to visit (None: every part)."""
    nav = Navigation(sel)
    nav.add(arts, stats, parts)
    return nav.finish()


#: Parts of one artifact whose cached states are looked up at once (:meth:`Navigation._open`).
OPEN_CHUNK = 4096
# Steps of a part, in the order a reader takes them (an error's position: part, step, page).
_HEAD_READ, _HEAD, _ROOT_READ, _ROOT, _LEAF_READ, _LEAF, _BOUNDARY = range(7)
_new = tuple.__new__  # a named tuple from its values without its keyword-argument __new__ (made per page)


class Navigation:
    """:func:`navigate_many` in steps, for artifacts opened one group at a time:
    :meth:`add` reads and checks the parts and reads the leaf pages of a group,
    whose loads then run (on a helper thread when large) while this thread opens
    the next group; :meth:`finish` collects every artifact's outcome."""

    def __init__(self, sel: Selection):
        self.sel = sel
        self.arts: list = []
        self.stats: list = []
        self.errors: list = []  # per artifact: (part, step, page, error) of its first broken rule, or None;
        # a part at or after an error's part is not live: a reader going part by part never gets there
        self.visited: list = []  # per artifact: the part indices visited, in order
        self.states: dict = {}  # (j, i) -> PartState
        self.pages: dict = {}  # (j, i) -> [[leaf ordinal, LeafPage or None until loaded]]
        self.wanted: dict = {}  # (j, i) -> leaf ordinals the roots kernel selected in this add call
        self.readers: dict = {}  # (j, i) -> ObjectReader, while a group is added
        self.loads: list = []  # (leaf jobs' (j, i, k, ref, trailer), their results' getter), in order
        self.caches: list = []  # per artifact: its page cache
        self.shared_cache = None  # the page cache of every artifact, when they share one
        self.selected_rows: list = []  # per artifact, after finish: the rows of its leaves' selected blocks

    # -- bookkeeping ------------------------------------------------------------------
    def fail(self, j: int, i: int, step: int, page: int, error: SamplesError) -> None:
        """Keep ``error`` as artifact ``j``'s when a reader would meet it first."""
        cur = self.errors[j]
        if cur is None or (i, step, page) < cur[:3]:
            self.errors[j] = (i, step, page, error)

    def reader(self, j: int, i: int) -> ObjectReader:
        rd = self.readers.get((j, i))
        if rd is None:
            art = self.arts[j]
            rd = self.readers[(j, i)] = art.store.reader(art.part_key(i), self.stats[j])
        return rd

    def part_name(self, j: int, i: int) -> str:
        art = self.arts[j]
        return art.store.path(art.part_key(i))

    def part_states(self, j: int) -> dict[int, PartState]:
        """Artifact ``j``'s visited parts' states (after :meth:`finish`)."""
        return {i: self.states[(j, i)] for i in self.visited[j] if (j, i) in self.states}

    # -- steps ------------------------------------------------------------------------
    def add(self, arts: Sequence, stats: Sequence[ReadStats], parts: Sequence | None = None) -> None:
        """Navigate these artifacts up to their leaf pages, whose loads are started."""
        base = len(self.arts)
        self.arts += arts
        self.stats += stats
        self.errors += [None] * len(arts)
        self.visited += [[] for _ in arts]
        caches = [a.cache for a in arts]
        if caches:
            first = self.caches[0] if self.caches else caches[0]
            if self.shared_cache is not None or not self.caches:
                self.shared_cache = first if all([c is first for c in caches]) else None
            self.caches += caches
        heads = []  # (j, i, header bytes, trailer bytes)
        try:
            if not self.sel.is_empty:
                self._open(range(base, base + len(arts)), parts, heads)
            jobs: list = []  # leaf pages to load: ((j, i, k, ref, trailer), LeafJob)
            if heads:
                self._check_heads(heads, jobs)
            self._wanted_leaves(range(base, base + len(arts)), jobs)
        finally:
            for rd in self.readers.values():
                rd.close()
            self.readers.clear()
        if jobs:
            self.loads.append(([job[0] for job in jobs], loading.start_leaves([job[1] for job in jobs])))

    def _cached(self, owners: list, keys: list) -> list:
        """The cached values of ``keys`` (None where absent), ``keys[n]`` in the cache
        of artifact ``owners[n]``: one lookup per cache (a region's artifacts share one)."""
        if not keys:
            return []
        if self.shared_cache is not None:
            return self.shared_cache.get_many(keys)
        return [self.caches[j].get(key) for j, key in zip(owners, keys)]

    def _open(self, indices, parts, heads: list) -> None:
        """The parts of artifacts ``indices`` as the selection yields them: a part's
        state from the cache, else its header and trailer read (one request when the
        part is small); an artifact whose read fails opens no later part.  The first
        :data:`OPEN_CHUNK` parts of every artifact are looked up at once (a region's
        artifacts have a part or a few each); a larger manifest's further parts a chunk
        at a time, so that a read failing at a part looks no further, as a reader going
        part by part (a 400,000-part manifest whose first part is missing: no 400,000
        lookups)."""
        arts = self.arts
        todo = []  # (j, its selected parts not yet looked up)
        for n, (j, vis) in enumerate(zip(indices, self.sel.parts_of([arts[j].manifest.files for j in indices]))):
            if parts is not None and parts[n] is not None:
                keep = set(parts[n])
                vis = [i for i in vis if i in keep]
            self.visited[j] = []
            todo.append((j, iter(vis)))
        while todo:
            owners, keys, chunks = [], [], []
            for j, it in todo:
                chunk = list(itertools.islice(it, OPEN_CHUNK))
                chunks.append(chunk)
                art = arts[j]
                for i in chunk:
                    owners.append(j)
                    keys.append(cache_key(art, i, -1))
            got = self._cached(owners, keys)
            at, more = 0, []
            for (j, it), chunk in zip(todo, chunks):
                vis = self.visited[j]
                st = self.stats[j]
                at, base = at + len(chunk), at
                for t, i in enumerate(chunk):
                    vis.append(i)
                    state = got[base + t]
                    if state is not None:
                        st.cache_hits += 1
                        self.states[(j, i)] = state
                        continue
                    st.cache_misses += 1
                    size = self.arts[j].part_sizes[i]
                    try:
                        h, tr = self.reader(j, i).read_ranges([0, size - C.TRAILER_SIZE],
                                                              [C.HEADER_SIZE, C.TRAILER_SIZE], LOCAL_COALESCE_GAP)
                    except SamplesError as e:
                        self.fail(j, i, _HEAD_READ, 0, e)
                        break  # a reader stops here: no later part is opened
                    st.metadata_bytes += C.HEADER_SIZE + C.TRAILER_SIZE
                    heads.append((j, i, h, tr))
                else:
                    if len(chunk) == OPEN_CHUNK:
                        more.append((j, it))
            todo = more

    def _check_heads(self, heads: list, jobs: list) -> None:
        """Every part's header and trailer checked (one numba call), then its root page
        read: a depth-1 root is the part's only leaf (loaded with the leaves), an
        internal root is loaded and checked here (:func:`.loading.load_roots`)."""
        desc = np.empty(len(heads), self.arts[heads[0][0]].manifest.files.array.dtype)
        for n, (j, i, _h, _t) in enumerate(heads):  # (row by row: numpy joins structured arrays field by field)
            desc[n] = self.arts[j].manifest.files.array[i]
        codes, vals = check_heads([h for _j, _i, h, _t in heads], [t for _j, _i, _h, t in heads],
                                  [self.arts[j].part_sizes[i] for j, i, _h, _t in heads], desc)
        roots = []  # ((j, i, trailer), RootJob)
        for n, (j, i, _h, t) in enumerate(heads):
            if codes[n]:
                self.fail(j, i, _HEAD, 0, R.rule_error(int(codes[n]), self.part_name(j, i), -1, vals[n]))
                continue
            if self.errors[j] is not None and i >= self.errors[j][0]:  # (not live)
                continue
            trailer = Trailer.from_bytes(t)
            root = trailer.root
            try:
                stored = self.reader(j, i).read(root.offset, root.stored_len)
            except SamplesError as e:
                self.fail(j, i, _ROOT_READ, 0, e)
                continue
            st = self.stats[j]
            st.metadata_bytes += root.stored_len
            st.pages_loaded += 1
            root_name = functools.partial(self.page_name, j, i, " root page")
            if trailer.depth == 1:  # the root is the only leaf
                self.pages[(j, i)] = [[0, None]]
                jobs.append(((j, i, 0, root, trailer), _new(loading.LeafJob, (
                    stored, root, self.arts[j].manifest, trailer.column_area, self._prev_part_last(j, i),
                    functools.partial(self.page_name, j, i, " leaf 0 (root)"), root_name))))
            else:
                roots.append(((j, i, trailer), _new(loading.RootJob, (stored, root, t[:C.PAGE_REF_SIZE],
                                                                     trailer.payload_end, root_name))))
        if roots:
            for ((j, i, trailer), _job), res in zip(roots, loading.load_roots([r[1] for r in roots], self.sel)):
                if isinstance(res, SamplesError):
                    self.fail(j, i, _ROOT, 0, res)
                    continue
                art = self.arts[j]
                state = self.states[(j, i)] = _new(PartState, (trailer, None, res[0]))
                art.cache.put(cache_key(art, i, -1), state, cache_bytes(state))
                self.wanted[(j, i)] = res[1]

    def _wanted_leaves(self, indices, jobs: list) -> None:
        """The leaves the parts of artifacts ``indices`` need: the children each internal
        root selects (picked for all parts at once by :func:`.loading.pick_children`,
        unless the roots kernel picked them as the root loaded here), from the cache
        (all looked up at once), else read (one coalesced request per part) and queued
        for loading; an artifact whose read fails reads no later part."""
        states, errors, wanted = self.states, self.errors, self.wanted
        live = []  # (j, i, state, the ordinals wanted, or None: to pick)
        for j in indices:
            err = errors[j]
            for i in self.visited[j]:
                state = states.get((j, i))
                if state is None or (err is not None and i >= err[0]):  # (a depth-1 root being loaded is
                    continue  # a job already; a part after the first error is not read)
                if state.root_leaf is not None:
                    self.pages[(j, i)] = [[0, state.root_leaf]]
                    continue
                live.append((j, i, state, wanted.pop((j, i), None) if wanted else None))
        if not live:
            return
        to_pick = [n for n, x in enumerate(live) if x[3] is None]
        wants = [x[3] for x in live]
        for n, want in zip(to_pick, loading.pick_children([live[n][2].children for n in to_pick], self.sel)):
            wants[n] = want
        owners, keys = [], []
        for (j, i, state, _w), want in zip(live, wants):
            art, kids = self.arts[j], state.children
            for k in want:
                owners.append(j)
                keys.append(cache_key(art, i, kids[k].offset))
        got = self._cached(owners, keys)
        at, stopped = 0, None
        for (j, i, state, _w), want in zip(live, wants):
            base, at = at, at + len(want)
            if j == stopped:
                continue
            st = self.stats[j]
            pages, missing = [], []
            for t, k in enumerate(want):
                leaf = got[base + t]
                if leaf is None:
                    st.cache_misses += 1
                    missing.append(k)
                else:
                    st.cache_hits += 1
                pages.append([k, leaf])
            self.pages[(j, i)] = pages
            if missing and not self._read_leaves(j, i, state, missing, jobs):
                stopped = j

    def _read_leaves(self, j: int, i: int, state: PartState, missing: list, jobs: list) -> bool:
        """Read the leaves ``missing`` of part ``i`` (one coalesced request) and queue
        them for loading; False when the read fails (the artifact's error)."""
        art, st, kids = self.arts[j], self.stats[j], state.children
        refs = [kids[k] for k in missing]
        try:
            datas = self.reader(j, i).read_ranges([r.offset for r in refs], [r.stored_len for r in refs])
        except SamplesError as e:
            self.fail(j, i, _LEAF_READ, 0, e)
            return False
        area = state.trailer.column_area
        for k, r, stored in zip(missing, refs, datas):
            st.metadata_bytes += r.stored_len
            st.pages_loaded += 1
            prev = self._prev_part_last(j, i) if k == 0 else kids[k - 1].last
            what = functools.partial(self.page_name, j, i, f" leaf {k}")
            jobs.append(((j, i, k, r, state.trailer), _new(loading.LeafJob, (stored, r, art.manifest, area, prev,
                                                                             what, what))))
        return True

    def page_name(self, j: int, i: int, suffix: str) -> str:
        """A page's name in messages: its part's path and ``suffix`` (made only for an error)."""
        return self.part_name(j, i) + suffix

    def _prev_part_last(self, j: int, i: int):
        """The last identity of part ``i - 1`` (None for the first part): a part's first
        block continues that identity's ordinals or starts its own at zero."""
        if i == 0:
            return None
        r = self.arts[j].manifest.files.array[i - 1]
        return (int(r["last_table_id"]), int(r["last_tsid"]))

    # -- outcomes -----------------------------------------------------------------------
    def finish(self) -> list:
        """Every added artifact's leaves, or the error of the first rule it breaks."""
        for metas, results in self.loads:
            for (j, i, k, ref, trailer), leaf in zip(metas, results()):
                if isinstance(leaf, SamplesError):
                    self.fail(j, i, _ROOT if (j, i) not in self.states else _LEAF, k, leaf)
                    continue
                art = self.arts[j]
                if (j, i) not in self.states:  # a depth-1 root: the part's state
                    state = self.states[(j, i)] = _new(PartState, (trailer, leaf, None))
                    art.cache.put(cache_key(art, i, -1), state, cache_bytes(state))
                else:
                    art.cache.put(cache_key(art, i, ref.offset), leaf, cache_bytes(leaf))
                for p in self.pages[(j, i)]:
                    if p[0] == k:
                        p[1] = leaf
        self.loads = []
        errors, visited, states, pages = self.errors, self.visited, self.states, self.pages
        found: list = []  # every artifact's loaded leaves (part, ordinal, LeafPage), in reading order
        spans = []  # per artifact: (its first and end positions in found, {part: its leaf count})
        for j in range(len(self.arts)):  # (up to its first error's part)
            err, at, n_leaves = errors[j], len(found), {}
            for i in visited[j]:
                if err is not None and i >= err[0]:
                    break
                state = states[(j, i)]
                n_leaves[i] = 1 if state.root_leaf is not None else len(state.children)
                found += [(i, k, leaf) for k, leaf in pages[(j, i)]]
            spans.append((at, len(found), n_leaves))
        masks, rows = self.sel.block_masks([leaf for _i, _k, leaf in found])
        out, self.selected_rows = [], []
        for j, (a, b, n_leaves) in enumerate(spans):
            if b == a + 1 and errors[j] is None and n_leaves[found[a][0]] > 1:  # one leaf of a part: nothing to
                i, k, leaf = found[a]  # check against it (the common narrow query)
                out.append([SelectedLeaf(i, k, leaf, masks[a])])
                self.selected_rows.append(rows[a])
            else:
                out.append(self._outcome(j, found[a: b], n_leaves, masks[a: b]))
                self.selected_rows.append(sum(rows[a: b]))
        return out

    def _outcome(self, j: int, found: list, n_leaves: dict, masks: list):
        """Artifact ``j``'s loaded leaves ``found`` (part, ordinal, LeafPage: up to its
        first error's part, whose leaf counts are ``n_leaves``) with their selected
        blocks (``masks``), each checked against the previous leaf when adjacent; then,
        for every part whose leaves were all loaded, its totals against the manifest.
        Or its first error."""
        out = [SelectedLeaf(i, k, leaf, mask) for (i, k, leaf), mask in zip(found, masks)]
        for n in range(1, len(out)):
            prev, (i, k, leaf) = out[n - 1], found[n]
            same = prev.part == i and prev.leaf == k - 1
            if same or (prev.part == i - 1 and k == 0 and prev.leaf == n_leaves[prev.part] - 1):
                try:
                    check_boundary(prev.page, leaf, f"{self.part_name(j, i)} leaf {k}", same)
                except SamplesError as e:
                    self.fail(j, i, _BOUNDARY, k, e)
                    return e
        if self.errors[j] is not None:
            return self.errors[j][3]
        loaded: dict = {}
        for i, _k, leaf in found:
            loaded.setdefault(i, []).append(leaf)
        for i, leaves in loaded.items():
            if len(leaves) != n_leaves[i]:
                continue
            desc = self.arts[j].manifest.files[i]  # every leaf of the part loaded: its totals are the manifest's
            nblocks = sum(leaf.blocks.shape[0] for leaf in leaves)
            rows = sum(leaf.num_rows for leaf in leaves)
            if rows != desc.num_rows or nblocks != desc.num_blocks:
                return R.rule_error(R.PART_TOTALS, self.part_name(j, i), 0, (nblocks, rows, desc.num_blocks,
                                                                             desc.num_rows))
        return out
