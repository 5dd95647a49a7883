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

import concurrent.futures as cf
import threading
from typing import Sequence

import numba
import numpy as np
import xxhash

from .artifact import Artifact, _Part
from .errors import SamplesError
from .format import constants as C
from .decode.cpu import _xxh64 as _xxh64_kernel
from .decode import libzstd
from .decode.libzstd import zstd_decompress_into
from .decode.zstd_frames import _check_one
from .format.pages import (
    _ALLOWED_ENCODINGS,
    LeafPage,
    PageRef,
    Trailer,
    _field_tables,
    _leaf_kernel,
    _new_ref,
    decompress_exact,
    parse_leaf_page,
)
from .format import structs as S
from .format.structs import BLOCK_PREFIX, COLUMN_DESC
from .plan import SelectedLeaf, Selection
from .plan.selection import selects_range as _range_selected  # (its name in the kernels-as-Python tests)
from .storage import LOCAL_COALESCE_GAP, ObjectReader, ReadStats

__all__ = ["navigate_many"]

_xxh64 = xxhash.xxh64_intdigest


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
            self._install(jobs, pending.result() if isinstance(pending, cf.Future) else pending)
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
            depth, version, file_length, payload_end, _magic, _ck = S.TRAILER_TAIL_STRUCT.unpack_from(t, S.TRAILER_TAIL_OFFSET)
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
                roots.append((j, i, trailer, stored, t))
        if roots:
            self._internal_roots(roots)

    def _internal_roots(self, roots) -> None:
        children, wanted = _load_roots([r[3] for r in roots], [r[2] for r in roots], [r[4] for r in roots], self.sel)
        for (j, i, trailer, _stored, _t), kids, want in zip(roots, children, wanted):
            if kids is None:
                self.failed[j] = True
            if self.failed[j]:
                continue
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
        """Checksum each leaf page here, then decompress and check the pages of each
        field layout in one :func:`_load_pages` call: on the helper thread when they
        decode to :data:`HELPER_PAGE_BYTES` or more, else here (without libzstd: here,
        page by page)."""
        live = []
        for job in jobs:
            j, _i, _k, ref, stored, _t = job
            if self.failed[j]:
                continue
            if _xxh64(stored) != ref.checksum:
                self.failed[j] = True
                continue
            live.append(job)
        if not live:
            return
        from .decode import libzstd  # the library the CPU decoder calls without the GIL

        z = libzstd.get()
        if z is None:
            self.loads.append((live, [_leaf_now(job, self.arts[job[0]].manifest) for job in live]))
            return
        groups: dict = {}
        for job in live:
            m = self.arts[job[0]].manifest
            groups.setdefault((id(m.fields), m.timestamp.column_id), (m, []))[1].append(job)
        for m, group in groups.values():
            if sum(job[3].decoded_len for job in group) >= HELPER_PAGE_BYTES:
                self.loads.append((group, _executor().submit(_run_pages, z, group, m)))
            else:
                self.loads.append((group, _run_pages(z, group, m)))

    def _install(self, jobs, leaves) -> None:
        """Each job's checked leaf (None: refused) put in place: first-ordinal rule, cache."""
        for (j, i, k, ref, _stored, trailer), leaf in zip(jobs, leaves):
            if leaf is None:
                self.failed[j] = True
            if self.failed[j]:
                continue
            art = self.arts[j]
            state = self.state.get((j, i))
            try:
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


#: A group's leaf pages decoding to fewer bytes load on the calling thread: the helper
#: thread overlaps their decompression with opening the next group, but the hand-off
#: and the second core's Zstd slowing this thread's interpreter work cost more than
#: small loads take (region benchmark, 2-core VM, 100 artifacts, interleaved: 16 KiB
#: leaves, ~256 KiB a group: 30.8 ms here vs 33.2 ms on the helper; 64 KiB leaves,
#: ~1 MiB a group: 34.0 vs 31.0 ms).
HELPER_PAGE_BYTES = 512 * 1024

_EXECUTOR: cf.ThreadPoolExecutor | None = None
_EXECUTOR_LOCK = threading.Lock()


def _executor() -> cf.ThreadPoolExecutor:
    global _EXECUTOR
    with _EXECUTOR_LOCK:
        if _EXECUTOR is None:
            _EXECUTOR = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="gtsamples-pages")
        return _EXECUTOR


def _leaf_now(job, manifest):
    """One leaf page decompressed and parsed here (None: refused)."""
    _j, _i, _k, ref, stored, trailer = job
    try:
        data = stored if ref.compression == C.COMP_RAW else decompress_exact(stored, ref.decoded_len,
                                                                             C.MAX_PAGE_DECODED, "")
        return parse_leaf_page(data, ref, manifest, trailer.column_area, "")
    except SamplesError:
        return None


_SCRATCH = threading.local()


def _page_scratch(nbytes: int) -> np.ndarray:
    """This thread's buffer for decompressed leaf pages, grown to ``nbytes``.  The
    pages are scratch (the leaves keep copies of their descriptors), and a buffer
    reused across groups costs no page faults: fresh memory for a group's pages
    was half of the helper's page-loading time (100 leaves: 12.2 -> 6.7 ms)."""
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.shape[0] < nbytes:
        buf = _SCRATCH.buf = np.empty(max(nbytes, 2 * C.MAX_PAGE_DECODED), np.uint8)
    return buf[:nbytes]


def _run_pages(z, jobs, manifest) -> list:
    """(helper thread) The leaf pages of ``jobs`` (one field layout) decompressed and
    checked by :func:`_load_pages`: a LeafPage per page, None where refused.  The
    leaves are views of three arrays shared by the group's pages: an evicted leaf's
    memory is freed with the group's last one (a group is a few MB at most)."""
    n = len(jobs)
    refs = [job[3] for job in jobs]
    src = np.frombuffer(b"".join(job[4] for job in jobs), dtype=np.uint8)
    src_len = np.array([len(job[4]) for job in jobs], dtype=np.int64)
    src_off = np.zeros(n, dtype=np.int64)
    src_off[1:] = np.cumsum(src_len)[:-1]
    declared = np.array([r.decoded_len for r in refs], dtype=np.int64)
    comp = np.array([r.compression for r in refs], dtype=np.int64)
    room = (declared + 7) // 8 * 8  # each page 8-byte aligned: read as u32 words
    dst_off = np.zeros(n, dtype=np.int64)
    dst_off[1:] = np.cumsum(room)[:-1]
    dst = _page_scratch(int(room.sum()))
    area = np.array([job[5].column_area for job in jobs], dtype=np.uint64).reshape(n, 2)
    n_fields, cap, sorted_ids, order = _field_tables(manifest.fields)
    status, blocks, cols, starts, count, ncols, boff, coff = _load_pages(
        z.decompress_addr, z.dctx(), src, src_off, src_len, comp, declared, dst, dst_off,
        n_fields, cap, manifest.timestamp.column_id, sorted_ids, order, area[:, 0].copy(), area[:, 1].copy(),
        np.array([r.first[0] for r in refs], dtype=np.int64), np.array([r.first[1] for r in refs], dtype=np.uint64),
        np.array([r.last[0] for r in refs], dtype=np.int64), np.array([r.last[1] for r in refs], dtype=np.uint64),
        np.array([r.min_timestamp for r in refs], dtype=np.int64),
        np.array([r.max_timestamp for r in refs], dtype=np.int64), _ALLOWED_ENCODINGS)
    out: list = []
    for k, (st, c, nc, b0, c0) in enumerate(zip(status.tolist(), count.tolist(), ncols.tolist(), boff.tolist(),
                                                coff.tolist())):
        if st:
            out.append(None)
            continue
        bw, cw = S.BLOCK_PREFIX_WORDS, S.COLUMN_DESC_WORDS
        out.append(LeafPage(blocks[bw * b0: bw * (b0 + c)].view(BLOCK_PREFIX), cols[cw * c0: cw * (c0 + nc)].view(COLUMN_DESC),
                            starts[b0: b0 + c]))
    return out


@numba.njit(inline="always")
def _page_into(fn, dctx, src, so, sl, comp, d, dst, do):  # pragma: no cover - numba
    """A page's ``sl`` stored bytes at ``src[so:]`` into ``dst[do:do + d]``: Zstd (the
    decoder's structural frame check: one frame ending exactly at the stored length,
    content size = declared; then ``ZSTD_decompressDCtx`` at address ``fn``, capacity
    the declared length ``d``), or raw (equal lengths).  False: refused."""
    if comp == C.COMP_ZSTD:
        if _check_one(src, so, sl, d) != 0:
            return False
        return zstd_decompress_into(fn, dctx, np.int64(dst.ctypes.data) + do, d, np.int64(src.ctypes.data) + so,
                                    sl) == d
    if sl != d:
        return False
    dst[do: do + d] = src[so: so + d]
    return True


@numba.njit(nogil=True, cache=True)
def _load_pages(fn, dctx, src, src_off, src_len, comp, declared, dst, dst_off, n_fields, cap, ts_id, sorted_ids,
                order, lo, hi, ft, fs, lt, ls, mn, mx, allowed):  # pragma: no cover - numba
    """Leaf pages decompressed (libzstd's ``ZSTD_decompressDCtx`` at address ``fn``)
    after the decoder's structural Zstd frame check, then checked by the leaf kernel of
    :func:`~gtsamples.format.pages.parse_leaf_page`: what ``load_payload`` followed by
    ``parse_leaf_page``'s fast path accept, no more (status nonzero: refused).  The
    pages' block prefixes, column descriptors and column starts land in three arrays
    (page ``k`` at ``boff[k]`` / ``coff[k]``, in descriptors)."""
    n = src_off.shape[0]
    status = np.zeros(n, np.int64)
    count = np.zeros(n, np.int64)
    for k in range(n):
        d = declared[k]
        if not _page_into(fn, dctx, src, src_off[k], src_len[k], comp[k], d, dst, dst_off[k]):
            status[k] = 1
            continue
        if d < 12 or d % 4 != 0:
            status[k] = 2
            continue
        w = dst[dst_off[k]: dst_off[k] + d].view(np.uint32)
        c = _w64(w, S.PP_ENTRY_COUNT)
        if w[S.PP_KIND] != C.PAGE_KIND_LEAF or c == 0 or c > np.uint64((d - C.PAGE_PREFIX_SIZE) // C.MIN_BLOCK_DESC_SIZE):
            status[k] = 2
            continue
        count[k] = np.int64(c)
    boff = np.zeros(n, np.int64)
    coff = np.zeros(n, np.int64)
    ncols = np.zeros(n, np.int64)
    nb = 0
    ncd = 0
    for k in range(n):
        boff[k] = nb
        coff[k] = ncd
        if status[k] == 0:
            nb += count[k]
            ncd += (declared[k] // 4 - S.PAGE_PREFIX_WORDS - S.BLOCK_PREFIX_WORDS * count[k]) // S.COLUMN_DESC_WORDS
    blocks = np.empty(nb * S.BLOCK_PREFIX_WORDS, np.uint32)
    cols = np.empty(ncd * S.COLUMN_DESC_WORDS, np.uint32)
    starts = np.empty(nb, np.int64)
    for k in range(n):
        if status[k] != 0:
            continue
        w = dst[dst_off[k]: dst_off[k] + declared[k]].view(np.uint32)
        st, b, cl, cs = _leaf_kernel(w, count[k], n_fields, cap, ts_id, sorted_ids, order, lo[k], hi[k], ft[k], fs[k],
                                     lt[k], ls[k], mn[k], mx[k], allowed)
        nc = cl.shape[0] // S.COLUMN_DESC_WORDS
        if st != 0 or b.shape[0] != S.BLOCK_PREFIX_WORDS * count[k] or coff[k] + nc > ncd:
            status[k] = 3
            continue
        ncols[k] = nc
        blocks[S.BLOCK_PREFIX_WORDS * boff[k]: S.BLOCK_PREFIX_WORDS * (boff[k] + count[k])] = b
        cols[S.COLUMN_DESC_WORDS * coff[k]: S.COLUMN_DESC_WORDS * (coff[k] + nc)] = cl
        starts[boff[k]: boff[k] + count[k]] = cs
    return status, blocks, cols, starts, count, ncols, boff, coff


def _payload(stored, ref: PageRef):
    """:func:`gtsamples.format.pages.load_payload` without a message."""
    if _xxh64(stored) != ref.checksum:
        raise SamplesError("checksum")
    if ref.compression == C.COMP_RAW:
        return stored
    return decompress_exact(stored, ref.decoded_len, C.MAX_PAGE_DECODED, "")


def _heads_ok(heads, arts) -> np.ndarray:
    """Every rule of ``parse_trailer`` and ``parse_header`` for each part ``(j, i,
    header bytes, trailer bytes)`` (one row per part; :func:`_heads_kernel`)."""
    tb = [h[3] for h in heads]
    hb = [h[2] for h in heads]
    if any(len(t) != C.TRAILER_SIZE for t in tb) or any(len(h) != C.HEADER_SIZE for h in hb):
        return np.zeros(len(heads), dtype=bool)  # (reads return exactly what they ask for)
    desc = np.empty(len(heads), dtype=arts[0].manifest.files.array.dtype)
    sizes = np.empty(len(heads), dtype=np.uint64)
    for n, (j, i, _h, _t) in enumerate(heads):
        a = arts[j]
        desc[n] = a.manifest.files.array[i]
        sizes[n] = a._part_sizes[i]
    return _heads_kernel(np.frombuffer(b"".join(tb), dtype="<u4").copy(), np.frombuffer(b"".join(hb), dtype="<u4").copy(),
                         sizes,
                         desc["first_table_id"].astype(np.uint64), desc["first_tsid"].astype(np.uint64),
                         desc["last_table_id"].astype(np.uint64), desc["last_tsid"].astype(np.uint64),
                         desc["min_timestamp"].astype(np.int64), desc["max_timestamp"].astype(np.int64), _MAGIC_U64)


def _load_roots(stored: list, trailers: list, trailer_bytes: list, sel: Selection) -> tuple[list, list]:
    """Every rule of ``load_payload`` then ``parse_internal_page`` for each internal
    root page (its stored bytes, its part's Trailer and the trailer's bytes, whose
    first 72 are the root reference), by :func:`_roots_kernel`:
    ``(children, wanted)`` per page: the children as PageRefs (None: refused) and the
    ordinals of those the selection needs."""
    n = len(stored)
    refs = [t.root for t in trailers]
    z = libzstd.get()
    if z is None:  # python-zstandard: checked and decompressed here, page by page
        pages = []
        for data, ref in zip(stored, refs):
            try:
                pages.append(_payload(data, ref))
            except SamplesError:
                pages.append(b"")
        fn = dctx = 0
        src_list = pages
        check = False
    else:
        fn, dctx = z.decompress_addr, z.dctx()
        src_list = stored
        check = True
    src = np.frombuffer(b"".join(src_list), dtype=np.uint8)
    src_len = np.array([len(x) for x in src_list], dtype=np.int64)
    src_off = np.zeros(n, dtype=np.int64)
    src_off[1:] = np.cumsum(src_len)[:-1]
    room = np.array([(r.decoded_len + 7) // 8 * 8 for r in refs], dtype=np.int64)  # 8-byte aligned pages
    dst_off = np.zeros(n, dtype=np.int64)
    dst_off[1:] = np.cumsum(room)[:-1]
    dst = _page_scratch(int(room.sum()))
    rw = np.frombuffer(b"".join([t[:C.PAGE_REF_SIZE] for t in trailer_bytes]), dtype="<u4").copy()
    lo = np.array([t.payload_end for t in trailers], dtype=np.uint64)
    status, count, wanted = _roots_kernel(fn, dctx, src, src_off, src_len, check, rw, lo, dst, dst_off,
                                          *sel.kernel_args)
    children: list = []
    chosen: list = []
    base = 0
    for k, (st, c) in enumerate(zip(status.tolist(), count.tolist())):
        if st:
            children.append(None)
            chosen.append(None)
        else:
            o = int(dst_off[k]) + C.PAGE_PREFIX_SIZE
            children.append([_new_ref(PageRef, ((a, b), (cc, d), mn, mx, off, sl, dl, ck, enc, comp, res))
                             for a, b, cc, d, mn, mx, off, sl, dl, ck, enc, comp, res
                             in S.PAGE_REF_STRUCT.iter_unpack(dst[o: o + C.PAGE_REF_SIZE * c])])
            chosen.append(np.flatnonzero(wanted[base: base + c]).tolist())
        base += c
    return children, chosen


# --- kernels: a group's trailers and internal roots in one call each --------------------
#
# numpy's fixed cost per call (~5-10 us) times the ~40 column operations of a
# table check was most of a group's navigation (16 parts: 125 us for the heads,
# 270 us for the roots); one numba pass per group does the same checks.

_MAGIC_U64 = np.uint64(int.from_bytes(C.MAGIC, "little"))  # the 8-byte magic as one little-endian u64


@numba.njit(inline="always")
def _w64(w, p):  # pragma: no cover - numba
    return np.uint64(w[p]) | (np.uint64(w[p + 1]) << np.uint64(32))


@numba.njit(inline="always")
def _ref_ok(w, p, lo, hi):  # pragma: no cover - numba
    """:func:`gtsamples.format.pages.check_page_ref` for the PAGE_REF at u32 word ``p``,
    page bytes within ``[lo, hi)``."""
    ft = np.uint64(w[p + S.PR_FIRST_TABLE_ID])
    fs = _w64(w, p + S.PR_FIRST_TSID)
    lt = np.uint64(w[p + S.PR_LAST_TABLE_ID])
    ls = _w64(w, p + S.PR_LAST_TSID)
    if ft > lt or (ft == lt and fs > ls):
        return False
    if np.int64(_w64(w, p + S.PR_MIN_TIMESTAMP)) > np.int64(_w64(w, p + S.PR_MAX_TIMESTAMP)):
        return False
    off = _w64(w, p + S.PR_OFFSET)
    stored = np.uint64(w[p + S.PR_STORED_LEN])
    dec = np.uint64(w[p + S.PR_DECODED_LEN])
    enc = w[p + S.PR_CODECS] & np.uint32(0xFFFF)
    comp = w[p + S.PR_CODECS] >> np.uint32(16)
    if w[p + S.PR_RESERVED] != 0 or stored == 0 or dec == 0:
        return False
    if off > np.uint64(C.U64_MAX) - stored or off < lo or off + stored > hi:
        return False
    if enc != C.META_ENC_PAGE or (comp != C.COMP_RAW and comp != C.COMP_ZSTD):
        return False
    if dec > np.uint64(C.MAX_PAGE_DECODED) or stored > np.uint64(C.MAX_PAGE_STORED):
        return False
    return comp != C.COMP_RAW or stored == dec


@numba.njit(nogil=True, cache=True)
def _heads_kernel(tw, hw, sizes, dft, dfs, dlt, dls, dmn, dmx, magic):  # pragma: no cover - numba
    """Every rule of ``parse_trailer`` and ``parse_header`` for each part: ``tw`` the
    trailers as u32 words (:data:`~gtsamples.format.structs.TRAILER_WORDS` per part),
    ``hw`` the headers (:data:`~gtsamples.format.structs.HEADER_WORDS` per part), ``d*``
    the manifest part descriptors' bounds."""
    n = sizes.shape[0]
    ok = np.zeros(n, np.bool_)
    tb = tw.view(np.uint8)
    for k in range(n):
        t = S.TRAILER_WORDS * k
        h = S.HEADER_WORDS * k
        size = sizes[k]
        if _xxh64_kernel(tb, C.TRAILER_SIZE * k, C.TRAILER_CHECKSUMMED) != _w64(tw, t + S.TR_CHECKSUM):
            continue
        if (_w64(tw, t + S.TR_MAGIC) != magic or tw[t + S.TR_VERSION] != C.FILE_VERSION
                or _w64(tw, t + S.TR_FILE_LENGTH) != size):
            continue
        depth = tw[t + S.TR_DEPTH]
        if depth != 1 and depth != 2:  # C.SUPPORTED_DEPTHS
            continue
        meta_end = size - np.uint64(C.TRAILER_SIZE)  # sizes >= header + trailer (a manifest rule)
        pe = _w64(tw, t + S.TR_PAYLOAD_END)
        if pe < np.uint64(C.HEADER_SIZE) or pe > meta_end or not _ref_ok(tw, t, pe, meta_end):
            continue
        if (np.uint64(tw[t + S.PR_FIRST_TABLE_ID]) != dft[k] or _w64(tw, t + S.PR_FIRST_TSID) != dfs[k]
                or np.uint64(tw[t + S.PR_LAST_TABLE_ID]) != dlt[k] or _w64(tw, t + S.PR_LAST_TSID) != dls[k]
                or np.int64(_w64(tw, t + S.PR_MIN_TIMESTAMP)) != dmn[k]
                or np.int64(_w64(tw, t + S.PR_MAX_TIMESTAMP)) != dmx[k]):
            continue  # root bounds are the manifest part descriptor's
        if _w64(tw, t + S.PR_OFFSET) + np.uint64(tw[t + S.PR_STORED_LEN]) != meta_end:  # the root ends at the trailer
            continue
        if _w64(hw, h + S.HD_MAGIC) != magic or hw[h + S.HD_VERSION] != C.FILE_VERSION or hw[h + S.HD_RESERVED] != 0:
            continue
        ok[k] = True
    return ok


@numba.njit(nogil=True, cache=True)
def _roots_kernel(fn, dctx, src, src_off, src_len, check, rw, lo, dst, dst_off, s_tid, s_tsid, mode, has_start,
                  start, has_end, end):  # pragma: no cover - numba
    """Internal root pages: with ``check``, the stored bytes' XXH64 and (Zstd) the
    decoder's frame check then ``ZSTD_decompressDCtx`` at address ``fn`` into ``dst``
    (else ``src`` holds decoded pages, copied); then every rule of
    ``parse_internal_page`` against the root references ``rw`` (u32 words, 18 per
    page; children within ``[lo[k], root offset)``).  Returns (status per page,
    child count per page, whether each child (all pages', in order) is selected)."""
    n = src_off.shape[0]
    status = np.zeros(n, np.int64)
    count = np.zeros(n, np.int64)
    for k in range(n):
        r = S.PAGE_REF_WORDS * k
        d = np.int64(rw[r + S.PR_DECODED_LEN])
        comp = rw[r + S.PR_CODECS] >> np.uint32(16) if check else np.uint32(C.COMP_RAW)  # (unchecked: decoded already)
        if check and _xxh64_kernel(src, src_off[k], src_len[k]) != _w64(rw, r + S.PR_CHECKSUM):
            status[k] = 1
            continue
        if not _page_into(fn, dctx, src, src_off[k], src_len[k], comp, d, dst, dst_off[k]):
            status[k] = 1
            continue
        if d < C.PAGE_PREFIX_SIZE or (d - C.PAGE_PREFIX_SIZE) % C.PAGE_REF_SIZE != 0:
            status[k] = 2
            continue
        w = dst[dst_off[k]: dst_off[k] + d].view(np.uint32)  # (d = 12 + 72 c: whole words)
        c = _w64(w, S.PP_ENTRY_COUNT)
        if w[S.PP_KIND] != C.PAGE_KIND_INTERNAL or c == 0 or c > np.uint64(C.MAX_INTERNAL_ENTRIES) \
                or np.int64(c) != (d - C.PAGE_PREFIX_SIZE) // C.PAGE_REF_SIZE:
            status[k] = 2
            continue
        count[k] = np.int64(c)
    wanted = np.zeros(count.sum(), np.bool_)
    base = 0
    for k in range(n):
        c = count[k]
        if status[k] != 0:
            continue
        r = S.PAGE_REF_WORDS * k
        d = np.int64(rw[r + S.PR_DECODED_LEN])
        w = dst[dst_off[k]: dst_off[k] + d].view(np.uint32)
        hi = _w64(rw, r + S.PR_OFFSET)  # children precede the parent
        mn = np.int64(0)
        mx = np.int64(0)
        good = True
        for i in range(c):
            p = S.PAGE_PREFIX_WORDS + S.PAGE_REF_WORDS * i
            if not _ref_ok(w, p, lo[k], hi):
                good = False
                break
            if i > 0:
                q = p - S.PAGE_REF_WORDS
                if _w64(w, p + S.PR_OFFSET) < _w64(w, q + S.PR_OFFSET) + np.uint64(w[q + S.PR_STORED_LEN]):
                    good = False  # child byte ranges ordered and disjoint
                    break
                plt = np.uint64(w[q + S.PR_LAST_TABLE_ID])
                pls = _w64(w, q + S.PR_LAST_TSID)
                cft = np.uint64(w[p + S.PR_FIRST_TABLE_ID])
                if plt > cft or (plt == cft and pls > _w64(w, p + S.PR_FIRST_TSID)):
                    good = False  # children follow block order
                    break
            cmn = np.int64(_w64(w, p + S.PR_MIN_TIMESTAMP))
            cmx = np.int64(_w64(w, p + S.PR_MAX_TIMESTAMP))
            if i == 0 or cmn < mn:
                mn = cmn
            if i == 0 or cmx > mx:
                mx = cmx
            wanted[base + i] = _range_selected(np.uint64(w[p + S.PR_FIRST_TABLE_ID]), _w64(w, p + S.PR_FIRST_TSID),
                                               np.uint64(w[p + S.PR_LAST_TABLE_ID]), _w64(w, p + S.PR_LAST_TSID),
                                               cmn, cmx, s_tid, s_tsid, mode, has_start, start, has_end, end)
        if good:  # derived bounds are the root reference's
            f0 = S.PAGE_PREFIX_WORDS
            last = f0 + S.PAGE_REF_WORDS * (c - 1)
            good = (w[f0 + S.PR_FIRST_TABLE_ID] == rw[r + S.PR_FIRST_TABLE_ID]
                    and _w64(w, f0 + S.PR_FIRST_TSID) == _w64(rw, r + S.PR_FIRST_TSID)
                    and w[last + S.PR_LAST_TABLE_ID] == rw[r + S.PR_LAST_TABLE_ID]
                    and _w64(w, last + S.PR_LAST_TSID) == _w64(rw, r + S.PR_LAST_TSID)
                    and mn == np.int64(_w64(rw, r + S.PR_MIN_TIMESTAMP))
                    and mx == np.int64(_w64(rw, r + S.PR_MAX_TIMESTAMP)))
        if not good:
            status[k] = 3
        base += c
    return status, count, wanted
