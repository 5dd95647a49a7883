"""Navigation of many artifacts at once: the covered plan of a region query.

:meth:`Artifact.navigate` walks one artifact part by part.  A region query
navigates one artifact per covered SST, and for a narrow query (one series)
the work per artifact is small and fixed -- a header, a trailer, a root page
and a leaf or two -- so its cost is mostly per-call overhead.
:func:`navigate_many` (and :class:`Navigation`, group by group) runs each step
for all the artifacts at once: the headers and trailers of all parts to open
are read, then checked together (numpy, one row per part); all internal root
pages are checked together; the leaf pages are checksummed, then decompressed
(libzstd, after the decoder's Zstd frame check) and checked by the leaf kernel
of :func:`~gtsamples.format.pages.parse_leaf_page` in one numba call on a
helper thread, without the GIL, while the caller opens the next group; the
same page cache entries are filled as by :meth:`Artifact.navigate`.

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
from .decode.libzstd import zstd_decompress_into
from .decode.zstd_frames import _check_one
from .format.pages import (
    _ALLOWED_ENCODINGS,
    _PAGE_REF_STRUCT,
    _TRAILER_TAIL,
    LeafPage,
    PageRef,
    Trailer,
    _field_tables,
    _leaf_kernel,
    _new_ref,
    decompress_exact,
    parse_leaf_page,
)
from .format.structs import BLOCK_PREFIX, COLUMN_DESC, HEADER, PAGE_PREFIX, PAGE_REF, TRAILER
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
    nav = Navigation(sel)
    nav.add(arts, stats)
    return nav.finish()


class Navigation:
    """:func:`navigate_many` in steps, for artifacts opened one group at a time:
    :meth:`add` reads and checks the parts and reads the leaf pages of a group,
    then hands the group's pages to a helper thread, which decompresses and checks
    them in one numba call without the GIL (:func:`_load_pages`) while this
    thread opens the next group; :meth:`finish` collects every artifact's leaves."""

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

    def _start_loads(self, jobs) -> None:
        """Checksum each leaf page here, then decompress and check the pages of each
        field layout in one :func:`_load_pages` call on the helper thread (without
        libzstd: here, page by page)."""
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
            self.loads.append((group, _executor().submit(_run_pages, z, group, m)))

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
        out.append(LeafPage(blocks[11 * b0: 11 * (b0 + c)].view(BLOCK_PREFIX), cols[11 * c0: 11 * (c0 + nc)].view(COLUMN_DESC),
                            starts[b0: b0 + c]))
    return out


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
    sbase = np.int64(src.ctypes.data)
    dbase = np.int64(dst.ctypes.data)
    for k in range(n):
        d = declared[k]
        if comp[k] == 1:  # one frame ending exactly at the stored length, content size = declared
            if _check_one(src, src_off[k], src_len[k], d) != 0:
                status[k] = 1
                continue
            if zstd_decompress_into(fn, dctx, dbase + dst_off[k], d, sbase + src_off[k], src_len[k]) != d:
                status[k] = 1
                continue
        else:
            if src_len[k] != d:
                status[k] = 1
                continue
            dst[dst_off[k]: dst_off[k] + d] = src[src_off[k]: src_off[k] + d]
        if d < 12 or d % 4 != 0:
            status[k] = 2
            continue
        w = dst[dst_off[k]: dst_off[k] + d].view(np.uint32)
        c = np.uint64(w[1]) | (np.uint64(w[2]) << np.uint64(32))
        if w[0] != 0 or c == 0 or c > np.uint64((d - 12) // 176):
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
            ncd += (declared[k] // 4 - 3 - 11 * count[k]) // 11
    blocks = np.empty(nb * 11, np.uint32)
    cols = np.empty(ncd * 11, np.uint32)
    starts = np.empty(nb, np.int64)
    for k in range(n):
        if status[k] != 0:
            continue
        w = dst[dst_off[k]: dst_off[k] + declared[k]].view(np.uint32)
        st, b, cl, cs = _leaf_kernel(w, count[k], n_fields, cap, ts_id, sorted_ids, order, lo[k], hi[k], ft[k], fs[k],
                                     lt[k], ls[k], mn[k], mx[k], allowed)
        nc = cl.shape[0] // 11
        if st != 0 or b.shape[0] != 11 * count[k] or coff[k] + nc > ncd:
            status[k] = 3
            continue
        ncols[k] = nc
        blocks[11 * boff[k]: 11 * (boff[k] + count[k])] = b
        cols[11 * coff[k]: 11 * (coff[k] + nc)] = cl
        starts[boff[k]: boff[k] + count[k]] = cs
    return status, blocks, cols, starts, count, ncols, boff, coff


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
