"""Navigation of many artifacts at once: the covered plan of a region query.

:meth:`Artifact.navigate` walks one artifact part by part.  A region query
navigates one artifact per covered SST, and for a narrow query (one series)
the work per artifact is small and fixed -- a header, a trailer, a root page
and a leaf or two -- so its cost is mostly per-call overhead.
:func:`navigate_many` (and :class:`Navigation`, group by group) runs each step
for all the artifacts at once: the headers and trailers of all parts to open
are read, then checked together (numpy, one row per part); all internal root
pages are checked together (:func:`_heads_kernel`, then :func:`_roots_kernel`,
which also picks the leaves the selection needs); the leaf pages are
checksummed, then decompressed (libzstd, after the decoder's Zstd frame check)
and checked by the leaf kernel of :func:`~gtsamples.format.pages.parse_leaf_page`
in one numba call (for large loads on a helper thread, without the GIL, while
the caller opens the next group); the same page cache entries are filled as by
:meth:`Artifact.navigate`.

An artifact is accepted only when every rule holds.  For anything else -- a
broken rule, a read error, a page the batch does not take -- that artifact is
navigated again by itself with :meth:`Artifact._select_leaves`, which raises
the error a plain read raises (messages here are never shown, so none are
built).  The result for every artifact is thus exactly what
``art.navigate(sel)`` returns or raises (``tests/test_navigate_many.py``).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .artifact import Artifact, _Part
from .errors import SamplesError
from .format import constants as C
from .format.pages import Trailer, check_heads
from .plan import SelectedLeaf, Selection
from .plan import loading
from .plan.loading import LeafJob, RootJob
from .storage import LOCAL_COALESCE_GAP, ObjectReader, ReadStats

__all__ = ["navigate_many"]


def navigate_many(arts: Sequence[Artifact], sel: Selection,
                  stats: Sequence[ReadStats]) -> list[list[SelectedLeaf] | SamplesError]:
    """``[art.navigate(sel, st)]`` for all artifacts, each entry the leaves or the
    :class:`~gtsamples.SamplesError` that call raises; ``stats[j]`` counts artifact
    ``j``'s reads (as its own navigation would)."""
    nav = Navigation(sel)
    nav.add(arts, stats)
    return nav.finish()


class Navigation:
    """:func:`navigate_many` in steps, for artifacts opened one group at a time:
    :meth:`add` reads and checks the parts and reads the leaf pages of a group,
    then hands the group's pages to a helper thread, which decompresses and checks
    them in one numba call without the GIL (:func:`_load_pages`) while this
    thread opens the next group (when there are enough of them:
    :data:`HELPER_PAGE_BYTES`); :meth:`finish` collects every artifact's leaves."""

    def __init__(self, sel: Selection):
        self.sel = sel
        self.arts: list = []
        self.stats: list = []
        self.failed: list = []
        self.result: list = []
        self.parts: list = []  # part indices each artifact needs
        self.state: dict = {}  # (j, i) -> _Part
        self.pages: dict = {}  # (j, i) -> [[leaf ordinal, LeafPage or None until loaded]]
        self.n_leaves: dict = {}  # (j, i) -> leaves in the part
        self.readers: dict = {}  # (j, i) -> ObjectReader, while a group is added
        self.wanted: dict = {}  # (j, i) -> selected leaf ordinals of a root loaded by this add call
        self.loads: list = []  # (jobs, future or decoded pages), in order

    def reader(self, j: int, i: int) -> ObjectReader:
        rd = self.readers.get((j, i))
        if rd is None:
            art = self.arts[j]
            rd = self.readers[(j, i)] = art.store.reader(art.part_key(i), self.stats[j])
        return rd

    def add(self, arts: Sequence[Artifact], stats: Sequence[ReadStats]) -> None:
        """Navigate these artifacts (up to their leaf pages, which load in the background)."""
        base = len(self.arts)
        n = len(arts)
        self.arts += arts
        self.stats += stats
        self.failed += [False] * n
        self.result += [None] * n
        self.parts += [()] * n
        if self.sel.is_empty:
            for j in range(base, base + n):
                self.result[j] = []
            return
        todo = []
        for j in range(base, base + n):
            art = self.arts[j]
            idx = self.sel.part_indices(art.manifest.files)
            self.parts[j] = idx
            cache, st = art.cache, self.stats[j]
            for i in idx:
                state = cache.get(art._cache_key(i, -1))
                if state is None:
                    st.cache_misses += 1
                    todo.append((j, i))
                else:
                    st.cache_hits += 1
                    self.state[(j, i)] = state
        jobs: list = []  # leaf pages to load: (j, i, leaf ordinal, PageRef, stored bytes, Trailer)
        try:
            if todo:
                self._open_parts(todo, jobs)
            self._wanted_leaves(range(base, base + n), jobs)
        finally:
            for rd in self.readers.values():
                rd.close()
            self.readers.clear()
        if jobs:
            self._start_loads(jobs)

    def finish(self) -> list:
        """Every added artifact's leaves, or the error its own navigation raises."""
        for jobs, pending in self.loads:
            self._install(jobs, pending())
        self.loads = []
        self._assemble()
        out: list = []
        for j, art in enumerate(self.arts):
            if self.failed[j]:  # again alone: its error, or its leaves should a page have been refused here
                try:
                    out.append(art._select_leaves(self.sel, self.stats[j]))
                except SamplesError as e:
                    out.append(e)
            else:
                out.append(self.result[j])
        return out

    # -- parts: header, trailer and root page --------------------------------------------
    def _open_parts(self, todo, jobs) -> None:
        heads = []
        for j, i in todo:
            if self.failed[j]:
                continue
            size = self.arts[j].part_sizes[i]
            try:  # one request when the part is small, as Artifact._load_part reads them
                h, t = self.reader(j, i).read_ranges([0, size - C.TRAILER_SIZE], [C.HEADER_SIZE, C.TRAILER_SIZE],
                                                     LOCAL_COALESCE_GAP)
            except SamplesError:
                self.failed[j] = True
                continue
            self.stats[j].metadata_bytes += C.HEADER_SIZE + C.TRAILER_SIZE
            heads.append((j, i, h, t))
        if not heads:
            return
        if any(len(t) != C.TRAILER_SIZE or len(h) != C.HEADER_SIZE for _j, _i, h, t in heads):
            ok = np.zeros(len(heads), dtype=bool)  # (reads return exactly what they ask for)
        else:
            desc = np.concatenate([self.arts[j].manifest.files.array[i: i + 1] for j, i, _h, _t in heads])
            ok = check_heads([h[2] for h in heads], [h[3] for h in heads],
                             [self.arts[j].part_sizes[i] for j, i, _h, _t in heads], desc)[0] == 0
        roots = []
        for (j, i, _h, t), good in zip(heads, ok.tolist()):
            if not good:
                self.failed[j] = True
            if self.failed[j]:
                continue
            trailer = Trailer.from_bytes(t)
            root, depth = trailer.root, trailer.depth
            try:
                stored = self.reader(j, i).read(root.offset, root.stored_len)
            except SamplesError:
                self.failed[j] = True
                continue
            st = self.stats[j]
            st.metadata_bytes += root.stored_len
            st.pages_loaded += 1
            if depth == 1:  # the root is the only leaf: loaded with the other leaves
                self.pages[(j, i)] = [[0, None]]
                self.n_leaves[(j, i)] = 1
                jobs.append((j, i, 0, root, stored, trailer))
            else:
                roots.append((j, i, trailer, RootJob(stored, root, t[:C.PAGE_REF_SIZE], trailer.payload_end, str)))
        if roots:
            self._internal_roots(roots)

    def _internal_roots(self, roots) -> None:
        for (j, i, trailer, _job), res in zip(roots, loading.load_roots([r[3] for r in roots], self.sel)):
            if isinstance(res, SamplesError):
                self.failed[j] = True
            if self.failed[j]:
                continue
            kids, want = res
            art = self.arts[j]
            state = _Part(trailer, None, kids)
            art.cache.put(art._cache_key(i, -1), state, 200 * len(kids) + 512)  # as Artifact._load_part
            self.state[(j, i)] = state
            self.wanted[(j, i)] = want

    # -- leaves -------------------------------------------------------------------------
    def _wanted_leaves(self, indices, jobs) -> None:
        sel = self.sel
        for j in indices:
            art = self.arts[j]
            if self.failed[j]:
                continue
            cache, st = art.cache, self.stats[j]
            for i in self.parts[j]:
                state = self.state.get((j, i))
                if state is None:  # a depth-1 part being opened: its root is a job already
                    continue
                if state.root_leaf is not None:
                    self.pages[(j, i)] = [[0, state.root_leaf]]
                    self.n_leaves[(j, i)] = 1
                    continue
                kids = state.children
                self.n_leaves[(j, i)] = len(kids)
                pages, missing = [], []
                want = self.wanted.pop((j, i), None)  # chosen by _roots_kernel when the root was loaded here
                if want is None:
                    want = [k for k, c in enumerate(kids) if sel.selects(c.first, c.last, c.min_timestamp, c.max_timestamp)]
                for k in want:
                    c = kids[k]
                    leaf = cache.get(art._cache_key(i, c.offset))
                    if leaf is None:
                        st.cache_misses += 1
                        missing.append(k)
                    else:
                        st.cache_hits += 1
                    pages.append([k, leaf])
                self.pages[(j, i)] = pages
                if not missing:
                    continue
                refs = [kids[k] for k in missing]
                try:
                    datas = self.reader(j, i).read_ranges([r.offset for r in refs], [r.stored_len for r in refs])
                except SamplesError:
                    self.failed[j] = True
                    break
                for k, r, stored in zip(missing, refs, datas):
                    st.metadata_bytes += r.stored_len
                    st.pages_loaded += 1
                    jobs.append((j, i, k, r, stored, state.trailer))

    def _start_loads(self, jobs) -> None:
        """The leaf pages' loads started (:func:`gtsamples.plan.loading.start_leaves`)."""
        live = [job for job in jobs if not self.failed[job[0]]]
        if not live:
            return
        leaf_jobs = []
        for j, i, k, ref, stored, trailer in live:
            art = self.arts[j]
            prev = art._prev_part_last(i) if k == 0 else self.state[(j, i)].children[k - 1].last
            leaf_jobs.append(LeafJob(stored, ref, art.manifest, trailer.column_area, prev, str, str))
        self.loads.append((live, loading.start_leaves(leaf_jobs)))

    def _install(self, jobs, leaves) -> None:
        """Each job's checked leaf (None: refused) put in place: first-ordinal rule, cache."""
        for (j, i, k, ref, _stored, trailer), leaf in zip(jobs, leaves):
            if isinstance(leaf, SamplesError):
                self.failed[j] = True
            if self.failed[j]:
                continue
            art = self.arts[j]
            state = self.state.get((j, i))
            nbytes = leaf.blocks.nbytes + leaf.columns.nbytes * 2 + 512
            if state is None:  # a depth-1 root: the part's state, as Artifact._load_part caches it
                state = self.state[(j, i)] = _Part(trailer, leaf, None)
                art.cache.put(art._cache_key(i, -1), state, nbytes)
            else:
                art.cache.put(art._cache_key(i, ref.offset), leaf, nbytes)
            for p in self.pages[(j, i)]:
                if p[0] == k:
                    p[1] = leaf

    # -- results -----------------------------------------------------------------------
    def _assemble(self) -> None:
        sel = self.sel
        for j, art in enumerate(self.arts):
            if self.failed[j] or self.result[j] is not None:
                continue
            out: list = []
            n_leaves: dict = {}
            try:
                for i in self.parts[j]:
                    n_leaves[i] = self.n_leaves[(j, i)]
                    art._add_pages(out, i, self.pages[(j, i)], n_leaves, sel)
                art._check_full_parts(out, n_leaves)
            except SamplesError:
                self.failed[j] = True
                continue
            self.result[j] = out
