"""Navigation of many artifacts at once: the covered plan of a region query.

:meth:`Artifact.navigate` walks one artifact part by part.  A region query
navigates one artifact per covered SST, and for a narrow query (one series)
the work per artifact is small and fixed -- a header, a trailer, a root page
and a leaf or two -- so its cost is mostly per-call overhead.
:func:`navigate_many` runs each step for all the artifacts at once: the headers
and trailers of all parts to open are read, then checked together (numpy, one
row per part); all internal root pages are checked together; each leaf page
is then checksummed, decompressed and parsed as :meth:`Artifact.navigate`
does, and the same page cache entries are filled.  (python-zstandard's
threaded batch decompression was slower here than one call per page: on the
2-core VM its threads compete with the decoder's.)

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
import xxhash

from .artifact import Artifact, _Part
from .errors import SamplesError
from .format import constants as C
from .format.pages import (
    _PAGE_REF_STRUCT,
    _TRAILER_TAIL,
    PageRef,
    Trailer,
    _new_ref,
    decompress_exact,
    parse_leaf_page,
)
from .format.structs import HEADER, PAGE_PREFIX, PAGE_REF, TRAILER
from .plan import SelectedLeaf, Selection
from .storage import LOCAL_COALESCE_GAP, ObjectReader, ReadStats

__all__ = ["navigate_many"]

_U64_MAX = np.uint64(C.U64_MAX)
_xxh64 = xxhash.xxh64_intdigest


def navigate_many(arts: Sequence[Artifact], sel: Selection,
                  stats: Sequence[ReadStats]) -> list[list[SelectedLeaf] | SamplesError]:
    """``[art.navigate(sel, st)]`` for all artifacts, each entry the leaves or the
    :class:`~gtsamples.SamplesError` that call raises; ``stats[j]`` counts artifact
    ``j``'s reads (as its own navigation would)."""
    if sel.is_empty:
        return [[] for _ in arts]
    nav = _Batch(arts, sel, stats)
    try:
        nav.run()
    finally:
        nav.close()
    out: list = []
    for j, art in enumerate(arts):
        if nav.failed[j]:  # again alone: its error, or its leaves should the batch have refused a valid page
            try:
                out.append(art._select_leaves(sel, stats[j]))
            except SamplesError as e:
                out.append(e)
        else:
            out.append(nav.result[j])
    return out


class _Batch:
    """The state of one :func:`navigate_many` call."""

    def __init__(self, arts, sel: Selection, stats):
        self.arts = arts
        self.sel = sel
        self.stats = stats
        n = len(arts)
        self.failed = [False] * n
        self.result: list = [None] * n
        self.parts: list = [()] * n  # part indices each artifact needs
        self.state: dict = {}  # (j, i) -> _Part
        self.pages: dict = {}  # (j, i) -> [[leaf ordinal, LeafPage or None until loaded]]
        self.n_leaves: dict = {}  # (j, i) -> leaves in the part
        self.readers: dict = {}  # (j, i) -> ObjectReader

    def reader(self, j: int, i: int) -> ObjectReader:
        rd = self.readers.get((j, i))
        if rd is None:
            art = self.arts[j]
            rd = self.readers[(j, i)] = art.store.reader(art.part_key(i), self.stats[j])
        return rd

    def close(self) -> None:
        for rd in self.readers.values():
            rd.close()

    def run(self) -> None:
        todo = []
        for j, art in enumerate(self.arts):
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
        if todo:
            self._open_parts(todo, jobs)
        self._wanted_leaves(jobs)
        if jobs:
            self._load_leaves(jobs)
        self._assemble()

    # -- parts: header, trailer and root page --------------------------------------------
    def _open_parts(self, todo, jobs) -> None:
        heads = []
        for j, i in todo:
            if self.failed[j]:
                continue
            size = self.arts[j]._part_sizes[i]
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
        ok = _heads_ok(heads, self.arts)
        roots = []
        for (j, i, _h, t), good in zip(heads, ok.tolist()):
            if not good:
                self.failed[j] = True
            if self.failed[j]:
                continue
            root = PageRef.from_bytes(t)
            depth, version, file_length, payload_end, _magic, _ck = _TRAILER_TAIL.unpack_from(t, C.PAGE_REF_SIZE)
            trailer = Trailer(root, depth, version, file_length, payload_end)
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
                roots.append((j, i, trailer, stored))
        if roots:
            self._internal_roots(roots)

    def _internal_roots(self, roots) -> None:
        datas = []
        for j, i, trailer, stored in roots:
            try:
                datas.append(_payload(stored, trailer.root))
            except SamplesError:
                self.failed[j] = True
                datas.append(None)
        children = _internal_children(datas, [r[2] for r in roots])
        for (j, i, trailer, _stored), kids in zip(roots, children):
            if kids is None:
                self.failed[j] = True
            if self.failed[j]:
                continue
            art = self.arts[j]
            state = _Part(trailer, None, kids)
            art.cache.put(art._cache_key(i, -1), state, 200 * len(kids) + 512)  # as Artifact._load_part
            self.state[(j, i)] = state

    # -- leaves -------------------------------------------------------------------------
    def _wanted_leaves(self, jobs) -> None:
        sel = self.sel
        for j, art in enumerate(self.arts):
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
                for k, c in enumerate(kids):
                    if not sel.selects(c.first, c.last, c.min_timestamp, c.max_timestamp):
                        continue
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

    def _load_leaves(self, jobs) -> None:
        datas = self._payloads(jobs)
        for (j, i, k, ref, _stored, trailer), data in zip(jobs, datas):
            if data is None:
                self.failed[j] = True
            if self.failed[j]:
                continue
            art = self.arts[j]
            try:
                leaf = parse_leaf_page(data, ref, art.manifest, trailer.column_area, "")
                state = self.state.get((j, i))
                prev_last = art._prev_part_last(i) if k == 0 else state.children[k - 1].last
                art._check_first_ordinal(leaf, prev_last, "")
            except SamplesError:
                self.failed[j] = True
                continue
            nbytes = leaf.blocks.nbytes + leaf.columns.nbytes * 2 + 512
            if state is None:  # a depth-1 root: the part's state, as Artifact._load_part caches it
                state = self.state[(j, i)] = _Part(trailer, leaf, None)
                art.cache.put(art._cache_key(i, -1), state, nbytes)
            else:
                art.cache.put(art._cache_key(i, ref.offset), leaf, nbytes)
            for p in self.pages[(j, i)]:
                if p[0] == k:
                    p[1] = leaf

    def _payloads(self, jobs) -> list:
        """Each job's decoded page (None: a checksum, frame or length rule is broken)."""
        out: list = [None] * len(jobs)
        for x, (j, _i, _k, ref, stored, _t) in enumerate(jobs):
            if self.failed[j] or _xxh64(stored) != ref.checksum:
                continue
            if ref.compression == C.COMP_RAW:  # lengths equal: a checked reference
                out[x] = stored
                continue
            try:
                out[x] = decompress_exact(stored, ref.decoded_len, C.MAX_PAGE_DECODED, "")
            except SamplesError:
                pass
        return out

    # -- results -----------------------------------------------------------------------
    def _assemble(self) -> None:
        sel = self.sel
        for j, art in enumerate(self.arts):
            if self.failed[j]:
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


def _payload(stored, ref: PageRef):
    """:func:`gtsamples.format.pages.load_payload` without a message."""
    if _xxh64(stored) != ref.checksum:
        raise SamplesError("checksum")
    if ref.compression == C.COMP_RAW:
        return stored
    return decompress_exact(stored, ref.decoded_len, C.MAX_PAGE_DECODED, "")


def _refs_ok(r: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """:func:`gtsamples.format.pages.check_page_ref` for a PAGE_REF table, page bytes
    within ``[lo, hi)`` (per row)."""
    ft, fs, lt, ls = r["first_table_id"], r["first_tsid"], r["last_table_id"], r["last_tsid"]
    p = r["ref"]
    off = p["offset"]
    stored = p["stored_len"].astype(np.uint64)
    dec = p["decoded_len"]
    ok = (ft < lt) | ((ft == lt) & (fs <= ls))
    ok &= r["min_timestamp"] <= r["max_timestamp"]
    ok &= (p["reserved"] == 0) & (stored != 0) & (dec != 0)
    ok &= off <= _U64_MAX - stored
    ok &= (off >= lo) & (off + stored <= hi)  # wraps only where the line above is False
    ok &= p["encoding"] == C.META_ENC_PAGE
    comp = p["compression"]
    ok &= (comp == C.COMP_RAW) | (comp == C.COMP_ZSTD)
    ok &= (dec <= C.MAX_PAGE_DECODED) & (p["stored_len"] <= C.MAX_PAGE_STORED)
    ok &= (comp != C.COMP_RAW) | (p["stored_len"] == dec)
    return ok


def _heads_ok(heads, arts) -> np.ndarray:
    """Every rule of ``parse_trailer`` and ``parse_header`` for each part ``(j, i,
    header bytes, trailer bytes)`` (one row per part)."""
    tb = [h[3] for h in heads]
    hb = [h[2] for h in heads]
    if any(len(t) != C.TRAILER_SIZE for t in tb) or any(len(h) != C.HEADER_SIZE for h in hb):
        return np.zeros(len(heads), dtype=bool)  # (reads return exactly what they ask for)
    t = np.frombuffer(b"".join(tb), dtype=TRAILER)
    h = np.frombuffer(b"".join(hb), dtype=HEADER)
    desc = np.empty(len(heads), dtype=arts[0].manifest.files.array.dtype)
    sizes = np.empty(len(heads), dtype=np.uint64)
    for n, (j, i, _h, _t) in enumerate(heads):
        a = arts[j]
        desc[n] = a.manifest.files.array[i]
        sizes[n] = a._part_sizes[i]
    ok = np.array([_xxh64(x[:C.TRAILER_CHECKSUMMED]) for x in tb], dtype=np.uint64) == t["checksum"]
    ok &= (t["magic"] == C.MAGIC) & (t["version"] == C.FILE_VERSION) & (t["file_length"] == sizes)
    ok &= np.isin(t["depth"], C.SUPPORTED_DEPTHS)
    meta_end = sizes - np.uint64(C.TRAILER_SIZE)  # sizes >= header + trailer (a manifest rule)
    pe = t["payload_end"]
    ok &= (pe >= C.HEADER_SIZE) & (pe <= meta_end)
    root = t["root"]
    ok &= _refs_ok(root, pe, meta_end)
    for rk, dk in (("first_table_id", "first_table_id"), ("first_tsid", "first_tsid"), ("last_table_id", "last_table_id"),
                   ("last_tsid", "last_tsid"), ("min_timestamp", "min_timestamp"), ("max_timestamp", "max_timestamp")):
        ok &= root[rk] == desc[dk]  # root bounds are the manifest part descriptor's
    ok &= root["ref"]["offset"] + root["ref"]["stored_len"].astype(np.uint64) == meta_end  # root ends at the trailer
    ok &= (h["magic"] == C.MAGIC) & (h["version"] == C.FILE_VERSION) & (h["reserved"] == 0)
    return ok


def _internal_children(datas, trailers) -> list:
    """Every rule of ``parse_internal_page`` for each decoded internal root page
    (None entries are skipped): its children as PageRefs, or None."""
    out: list = [None] * len(datas)
    live = [n for n, d in enumerate(datas) if d is not None and len(d) >= C.PAGE_PREFIX_SIZE]
    if not live:
        return out
    pre = np.frombuffer(b"".join(bytes(datas[n][:C.PAGE_PREFIX_SIZE]) for n in live), dtype=PAGE_PREFIX)
    lens = np.array([len(datas[n]) for n in live], dtype=np.uint64)
    count = pre["entry_count"]
    ok = (pre["kind"] == C.PAGE_KIND_INTERNAL) & (count > 0) & (count <= C.MAX_INTERNAL_ENTRIES)
    ok &= lens == C.PAGE_PREFIX_SIZE + C.PAGE_REF_SIZE * np.minimum(count, C.MAX_INTERNAL_ENTRIES)
    live = [n for n, g in zip(live, ok.tolist()) if g]
    if not live:
        return out
    counts = np.array([(len(datas[n]) - C.PAGE_PREFIX_SIZE) // C.PAGE_REF_SIZE for n in live], dtype=np.int64)
    kids = np.frombuffer(b"".join(bytes(datas[n][C.PAGE_PREFIX_SIZE:]) for n in live), dtype=PAGE_REF)
    owner = np.repeat(np.arange(len(live)), counts)
    first = np.zeros(len(live), dtype=np.int64)
    first[1:] = np.cumsum(counts)[:-1]
    last = first + counts - 1
    roots = [trailers[n].root for n in live]
    lo = np.array([trailers[n].payload_end for n in live], dtype=np.uint64)  # metadata area start
    hi = np.array([r.offset for r in roots], dtype=np.uint64)  # children precede the parent
    good = _refs_ok(kids, lo[owner], hi[owner])
    r = kids["ref"]
    end = r["offset"] + r["stored_len"].astype(np.uint64)
    nxt = np.ones(kids.shape[0], dtype=bool)  # child c against child c - 1 of its page
    same = owner[1:] == owner[:-1]
    ft, fs, lt, ls = kids["first_table_id"], kids["first_tsid"], kids["last_table_id"], kids["last_tsid"]
    nxt[1:] = ~same | ((r["offset"][1:] >= end[:-1])
                       & ((lt[:-1] < ft[1:]) | ((lt[:-1] == ft[1:]) & (ls[:-1] <= fs[1:]))))
    page_ok = np.logical_and.reduceat(good & nxt, first)
    # derived bounds are the root reference's
    page_ok &= ft[first] == np.array([x.first[0] for x in roots], dtype=np.uint64)
    page_ok &= fs[first] == np.array([x.first[1] for x in roots], dtype=np.uint64)
    page_ok &= lt[last] == np.array([x.last[0] for x in roots], dtype=np.uint64)
    page_ok &= ls[last] == np.array([x.last[1] for x in roots], dtype=np.uint64)
    page_ok &= np.minimum.reduceat(kids["min_timestamp"], first) == np.array([x.min_timestamp for x in roots],
                                                                            dtype=np.int64)
    page_ok &= np.maximum.reduceat(kids["max_timestamp"], first) == np.array([x.max_timestamp for x in roots],
                                                                            dtype=np.int64)
    for n, g in zip(live, page_ok.tolist()):
        if g:
            out[n] = [_new_ref(PageRef, ((a, b), (c, d), mn, mx, off, sl, dl, ck, enc, comp, res))
                      for a, b, c, d, mn, mx, off, sl, dl, ck, enc, comp, res
                      in _PAGE_REF_STRUCT.iter_unpack(memoryview(datas[n])[C.PAGE_PREFIX_SIZE:])]
    return out
