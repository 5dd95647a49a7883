"""Metadata pages loaded in batches: checksummed, decompressed and checked in one numba call.

The navigator reads the pages a query needs for many parts (of many artifacts)
at once and hands them here: each page's stored bytes are checked against its
reference's XXH64, then the pages are decompressed (libzstd, called from the
kernel after the decoder's structural Zstd frame check; without libzstd,
python-zstandard page by page first) and checked by the rules of
:mod:`gtsamples.format.pages` -- :func:`~gtsamples.format.pages.internal_page_rules`
for internal roots, :func:`~gtsamples.format.pages.leaf_page_rules` for leaves --
in one numba call per batch (:func:`_roots_kernel`, :func:`_leaves_kernel`).
Large leaf loads run on a helper thread, without the GIL, while the caller goes
on (:data:`HELPER_PAGE_BYTES`).  A page's result is its content or the error its
broken rule names (:func:`~gtsamples.format.rules.rule_error`).
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
from collections.abc import Sequence
from typing import Callable, NamedTuple

import numba
import numpy as np

from ..format import libzstd
from ..format.libzstd import zstd_decompress_into
from ..format.zstd_frames import check_one_frame
from ..errors import CorruptArtifactError, SamplesError
from ..threadpools import LazyThreadPool
from ..format import constants as C
from ..format import rules as R
from ..format import structs as S
from ..format.pages import (ALLOWED_ENCODINGS, LeafPage, PageRef, field_tables, internal_page_rules, leaf_page_rules,
                            page_refs, payload_checksum, w64)
from ..format.zstd import decompress_exact, zstd_page_error
from ..format.structs import BLOCK_PREFIX, COLUMN_DESC
from .selection import Selection, selects_range, split_hits
from ..jit import njit

#: A group's leaf pages decoding to fewer bytes load on the calling thread: the helper
#: thread overlaps their decompression with opening the next group, but the hand-off
#: and the second core's Zstd slowing this thread's interpreter work cost more than
#: small loads take (region benchmark, 2-core VM, 100 artifacts, interleaved: 16 KiB
#: leaves, ~256 KiB a group: 30.8 ms here vs 33.2 ms on the helper; 64 KiB leaves,
#: ~1 MiB a group: 34.0 vs 31.0 ms).
HELPER_PAGE_BYTES = 512 * 1024


class RootJob(NamedTuple):
    """An internal root page to load: its stored bytes and reference, the reference's
    72 bytes (the trailer's first), the metadata area's start, and its name (made
    only for an error)."""

    stored: bytes
    ref: PageRef
    ref_bytes: bytes
    lo: int
    what: Callable[[], str]

    @property
    def load_what(self) -> Callable[[], str]:
        return self.what


class LeafJob(NamedTuple):
    """A leaf page to load: its stored bytes and reference, the manifest, the part's
    column area, the identity ending the previous page or part (None: the first part's
    first page), and its names (made only for an error): as a leaf (its rules), and as
    a stored page (checksum, decompression: a depth-1 part's root page)."""

    stored: bytes
    ref: PageRef
    manifest: object
    area: tuple[int, int]
    prev_last: tuple[int, int] | None
    what: Callable[[], str]
    load_what: Callable[[], str]


#: The thread that loads leaf pages while the caller goes on.
_PAGE_LOADER = LazyThreadPool("gtsamples-pages")


_SCRATCH = threading.local()


def _page_scratch(nbytes: int) -> np.ndarray:
    """This thread's buffer for decompressed pages, grown to ``nbytes``.  The pages are
    scratch (the leaves keep copies of their descriptors), and a buffer reused across
    groups costs no page faults: fresh memory for a group's pages was half of the
    helper's page-loading time (100 leaves: 12.2 -> 6.7 ms)."""
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.shape[0] < nbytes:
        buf = _SCRATCH.buf = np.empty(max(nbytes, 2 * C.MAX_PAGE_DECODED), np.uint8)
    return buf[:nbytes]


def _sources(jobs, out: list):
    """The stored pages of ``jobs`` as the kernels take them: checksummed here (a page
    whose bytes do not hash to its reference's checksum gets that error in ``out``
    and is not decompressed), and without libzstd decompressed here.  Returns
    ``(live job indices, fn, src, src_off, src_len, comp, dst, dst_off)``, ``fn`` the
    address of ``ZSTD_decompressDCtx`` (0 without libzstd: see :func:`_zstd_of`)."""
    z = libzstd.get()
    live, pages, comp = [], [], []
    for k, job in enumerate(jobs):
        bad = payload_checksum(job.stored, job.ref)
        if bad is not None:
            out[k] = R.rule_error(R.PAGE_CHECKSUM, job.load_what(), 0, bad)
            continue
        data, c = job.stored, job.ref.compression
        if z is None and c == C.COMP_ZSTD:  # python-zstandard: decompressed here, page by page
            try:
                data, c = decompress_exact(data, job.ref.decoded_len, C.MAX_PAGE_DECODED, ""), C.COMP_RAW
            except CorruptArtifactError:
                out[k] = zstd_page_error(job.stored, job.ref.decoded_len, job.load_what())
                continue
        live.append(k)
        pages.append(data)
        comp.append(c)
    n = len(live)
    src = np.frombuffer(b"".join(pages), dtype=np.uint8)
    src_len = np.array([len(p) for p in pages], dtype=np.int64)
    src_off = np.zeros(n, dtype=np.int64)
    src_off[1:] = np.cumsum(src_len)[:-1]
    room = np.array([(jobs[k].ref.decoded_len + 7) // 8 * 8 for k in live], dtype=np.int64)  # 8-byte aligned pages
    dst_off = np.zeros(n, dtype=np.int64)
    dst_off[1:] = np.cumsum(room)[:-1]
    fn = z.decompress_addr if z is not None else 0
    return live, fn, src, src_off, src_len, np.array(comp, dtype=np.int64), room, dst_off


def _zstd_of(fn: int) -> tuple[int, int]:
    """``(fn, dctx)`` for a kernel call on this thread: its own ``ZSTD_DCtx``, taken
    where the kernel runs (a context used by two threads at once corrupts it, and
    the helper thread decompresses while the caller goes on to its next group)."""
    return (fn, libzstd.get().dctx()) if fn else (0, 0)


def _error(job, code: int, at: int, vals) -> SamplesError:
    if code == R.PAGE_ZSTD:
        return zstd_page_error(job.stored, job.ref.decoded_len, job.load_what())
    return R.rule_error(code, job.what(), at, vals)


# --- internal roots -------------------------------------------------------------------


class ChildRefs(Sequence):
    """An internal page's children (checked): a sequence of :class:`PageRef` each made
    from the page's bytes when first asked for.  A one-series query on a root of ~900
    children reads one or two of them (and bisects a few more when warm), so building
    every PageRef up front was most of a cold query (~0.5 ms of ~1.7 ms)."""

    __slots__ = ("raw", "_refs")

    def __init__(self, raw: bytes, count: int):
        #: The children's PAGE_REF records as the page holds them (read-only:
        #: :func:`pick_children` tests them in place, for many parts at once).
        self.raw = raw
        self._refs: list = [None] * count

    def __len__(self) -> int:
        return len(self._refs)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self._refs)))]
        ref = self._refs[k]
        if ref is None:  # (two threads may both make it: the same value)
            k = range(len(self._refs))[k]  # (a negative index, and IndexError past either end)
            ref = self._refs[k] = page_refs(self.raw, k * C.PAGE_REF_SIZE, 1)[0]
        return ref


def pick_children(children: Sequence[ChildRefs], sel: Selection) -> list[list[int]]:
    """The ordinals of the children of each internal page that ``sel`` selects, as
    :meth:`Selection.selected_refs <gtsamples.plan.selection.Selection.selected_refs>`
    gives them, for the roots of many parts in one numba pass over their records
    (a warm region query picks a few children of each of its artifacts' roots:
    ~1 us a root in Python, most of it making PageRefs)."""
    if len(children) < 2:  # one root (one artifact's read): a numba call costs more than a bisect
        return [sel.selected_refs(c) for c in children]
    w = np.frombuffer(b"".join([c.raw for c in children]), dtype="<u4")
    return split_hits(np.flatnonzero(_children_kernel(w, *sel.kernel_args)),
                      [len(c.raw) // C.PAGE_REF_SIZE for c in children])


def load_roots(jobs: list[RootJob], sel: Selection) -> list:
    """Each internal root page of ``jobs`` loaded and checked: ``(children, wanted)``
    (the children as :class:`ChildRefs`, the ordinals of those ``sel`` selects) or the error."""
    out: list = [None] * len(jobs)
    live, fn, src, src_off, src_len, comp, room, dst_off = _sources(jobs, out)
    fn, dctx = _zstd_of(fn)
    if not live:
        return out
    dst = _page_scratch(int(room.sum()))
    rw = np.frombuffer(b"".join([jobs[k].ref_bytes for k in live]), dtype="<u4")
    lo = np.array([jobs[k].lo for k in live], dtype=np.uint64)
    codes, ats, vals, count, wanted = _roots_kernel(fn, dctx, src, src_off, src_len, comp, rw, lo, dst, dst_off,
                                                    *sel.kernel_args)
    base = 0
    for n, (k, code, c) in enumerate(zip(live, codes.tolist(), count.tolist())):
        if code:
            out[k] = _error(jobs[k], code, int(ats[n]), vals[n])
            continue
        at = int(dst_off[n]) + C.PAGE_PREFIX_SIZE
        out[k] = (ChildRefs(dst[at: at + c * C.PAGE_REF_SIZE].tobytes(), c),
                  np.flatnonzero(wanted[base: base + c]).tolist())
        base += c
    return out


# --- leaves ---------------------------------------------------------------------------


def start_leaves(jobs: list[LeafJob]) -> Callable[[], list]:
    """Load the leaf pages of ``jobs``: those of each field layout in one
    :func:`_leaves_kernel` call, on the helper thread when they decode to
    :data:`HELPER_PAGE_BYTES` or more, else here.  Returns the function that waits
    for them: each job's LeafPage or error, in order."""
    out: list = [None] * len(jobs)
    live, fn, src, src_off, src_len, comp, room, dst_off = _sources(jobs, out)
    groups: dict = {}
    for n, k in enumerate(live):
        m = jobs[k].manifest
        groups.setdefault((id(m.fields), m.timestamp.column_id), []).append(n)
    pending = []
    for rows in groups.values():
        rows = np.array(rows, dtype=np.int64)
        args = (fn, [jobs[live[n]] for n in rows.tolist()], src, src_off[rows], src_len[rows], comp[rows],
                room[rows])
        if int(room[rows].sum()) >= HELPER_PAGE_BYTES:
            pending.append((rows, _PAGE_LOADER.get().submit(_run_leaves, *args)))
        else:
            pending.append((rows, _run_leaves(*args)))

    def finish() -> list:
        for rows, got in pending:
            got = got.result() if isinstance(got, cf.Future) else got
            for n, res in zip(rows.tolist(), got):
                k = live[n]
                out[k] = res if isinstance(res, LeafPage) else _error(jobs[k], *res)
        return out

    return finish


def _run_leaves(fn, jobs: list[LeafJob], src, src_off, src_len, comp, room) -> list:
    """(helper thread) The leaf pages of ``jobs`` (one field layout) decompressed and
    checked by :func:`_leaves_kernel`: a LeafPage per page, or ``(code, at, values)``.
    The leaves are views of three arrays shared by the group's pages: an evicted leaf's
    memory is freed with the group's last one (a group is a few MB at most)."""
    n = len(jobs)
    refs = [job.ref for job in jobs]
    m = jobs[0].manifest
    dst_off = np.zeros(n, dtype=np.int64)
    dst_off[1:] = np.cumsum(room)[:-1]
    dst = _page_scratch(int(room.sum()))
    area = np.array([job.area for job in jobs], dtype=np.uint64).reshape(n, 2)
    prev = np.array([job.prev_last or (0, 0) for job in jobs], dtype=np.uint64).reshape(n, 2)
    first_rule = np.array([1 if job.prev_last is None else 2 for job in jobs], dtype=np.int64)
    n_fields, cap, sorted_ids, order = field_tables(m.fields)
    bounds = np.array([(r.first[0], r.first[1], r.last[0], r.last[1]) for r in refs], dtype=np.uint64).reshape(n, 4)
    times = np.array([(r.min_timestamp, r.max_timestamp) for r in refs], dtype=np.int64).reshape(n, 2)
    codes, ats, vals, blocks, cols, starts, count, ncols, boff, coff = _leaves_kernel(
        *_zstd_of(fn), src, src_off, src_len, comp, np.array([r.decoded_len for r in refs], dtype=np.int64), dst, dst_off,
        n_fields, cap, m.timestamp.column_id, sorted_ids, order, area[:, 0].copy(), area[:, 1].copy(),
        bounds[:, 0].copy(), bounds[:, 1].copy(), bounds[:, 2].copy(), bounds[:, 3].copy(), times[:, 0].copy(),
        times[:, 1].copy(), ALLOWED_ENCODINGS, first_rule, prev[:, 0].copy(), prev[:, 1].copy())
    out: list = []
    bw, cw = S.BLOCK_PREFIX_WORDS, S.COLUMN_DESC_WORDS
    for k, (code, c, nc, b0, c0) in enumerate(zip(codes.tolist(), count.tolist(), ncols.tolist(), boff.tolist(),
                                                  coff.tolist())):
        if code:
            out.append((code, int(ats[k]), vals[k]))
        else:
            out.append(LeafPage(blocks[bw * b0: bw * (b0 + c)].view(BLOCK_PREFIX),
                                cols[cw * c0: cw * (c0 + nc)].view(COLUMN_DESC), starts[b0: b0 + c]))
    return out


# --- kernels --------------------------------------------------------------------------


@numba.njit(inline="always")
def _page_into(fn, dctx, src, so, sl, comp, d, dst, do):  # pragma: no cover - numba
    """A page's ``sl`` stored bytes at ``src[so:]`` into ``dst[do:do + d]``: Zstd (the
    decoder's structural frame check: one frame ending exactly at the stored length,
    content size = declared; then ``ZSTD_decompressDCtx`` at address ``fn``, capacity
    the declared length ``d``), or raw (equal lengths).  False: refused."""
    if comp == C.COMP_ZSTD:
        if check_one_frame(src, so, sl, d) != 0:
            return False
        return zstd_decompress_into(fn, dctx, np.int64(dst.ctypes.data) + do, d, np.int64(src.ctypes.data) + so,
                                    sl) == d
    if sl != d:
        return False
    dst[do: do + d] = src[so: so + d]
    return True


@njit(nogil=True)
def _roots_kernel(fn, dctx, src, src_off, src_len, comp, rw, lo, dst, dst_off, s_tid, s_tsid, mode, has_start,
                  start, has_end, end):  # pragma: no cover - numba
    """Internal root pages decompressed into ``dst`` and checked against their
    references ``rw`` (u32 words, one PAGE_REF each; children within ``[lo[k],
    reference offset)``).  Returns (code, child and values per page, child count per
    page, whether the selection selects each child (all pages', in order))."""
    n = src_off.shape[0]
    codes = np.zeros(n, np.int64)
    ats = np.zeros(n, np.int64)
    vals = np.zeros((n, R.N_VALS), np.uint64)
    count = np.zeros(n, np.int64)
    for k in range(n):
        r = S.PAGE_REF_WORDS * k
        d = np.int64(rw[r + S.PR_DECODED_LEN])
        if not _page_into(fn, dctx, src, src_off[k], src_len[k], comp[k], d, dst, dst_off[k]):
            codes[k] = R.PAGE_ZSTD
            continue
        w = dst[dst_off[k]: dst_off[k] + d // 4 * 4].view(np.uint32)
        code, at, c = internal_page_rules(w, d, rw, r, lo[k], vals[k])
        codes[k] = code
        ats[k] = at
        if code == R.OK:
            count[k] = c
    wanted = np.zeros(count.sum(), np.bool_)
    base = 0
    for k in range(n):
        if count[k] == 0:
            continue
        w = dst[dst_off[k]: dst_off[k] + count[k] * S.PAGE_REF_WORDS * 4 + C.PAGE_PREFIX_SIZE].view(np.uint32)
        for i in range(count[k]):
            wanted[base + i] = ref_selected(w, S.PAGE_PREFIX_WORDS + S.PAGE_REF_WORDS * i, s_tid, s_tsid, mode,
                                             has_start, start, has_end, end)
        base += count[k]
    return codes, ats, vals, count, wanted


@numba.njit(inline="always")
def ref_selected(w, p, s_tid, s_tsid, mode, has_start, start, has_end, end):  # pragma: no cover - numba
    """:func:`selects_range` of the PAGE_REF record at word ``p`` of ``w`` (numba: also
    :mod:`.warm`'s kernel)."""
    return selects_range(w[p + S.PR_FIRST_TABLE_ID], w64(w, p + S.PR_FIRST_TSID), w[p + S.PR_LAST_TABLE_ID],
                         w64(w, p + S.PR_LAST_TSID), np.int64(w64(w, p + S.PR_MIN_TIMESTAMP)),
                         np.int64(w64(w, p + S.PR_MAX_TIMESTAMP)), s_tid, s_tsid, mode, has_start, start, has_end,
                         end)


@njit(nogil=True)
def _children_kernel(w, s_tid, s_tsid, mode, has_start, start, has_end, end):  # pragma: no cover - numba
    """:func:`pick_children`: whether the selection selects each PAGE_REF record of ``w``."""
    n = w.shape[0] // S.PAGE_REF_WORDS
    out = np.zeros(n, np.bool_)
    for i in range(n):
        out[i] = ref_selected(w, S.PAGE_REF_WORDS * i, s_tid, s_tsid, mode, has_start, start, has_end, end)
    return out


@njit(nogil=True)
def _leaves_kernel(fn, dctx, src, src_off, src_len, comp, declared, dst, dst_off, n_fields, cap, ts_id, sorted_ids,
                   order, lo, hi, ft, fs, lt, ls, mn, mx, allowed, first_rule, prev_tid,
                   prev_tsid):  # pragma: no cover - numba
    """Leaf pages decompressed into ``dst`` and checked by ``leaf_page_rules``; the
    pages' block prefixes, column descriptors and column starts land in three arrays
    (page ``k`` at ``boff[k]`` / ``coff[k]``, in descriptors)."""
    n = src_off.shape[0]
    codes = np.zeros(n, np.int64)
    ats = np.zeros(n, np.int64)
    vals = np.zeros((n, R.N_VALS), np.uint64)
    count = np.zeros(n, np.int64)
    ncols = np.zeros(n, np.int64)
    boff = np.zeros(n, np.int64)
    coff = np.zeros(n, np.int64)
    nb = 0
    ncd = 0
    for k in range(n):  # pages decompressed; room for the descriptors of those whose prefix is a leaf's
        d = declared[k]
        if not _page_into(fn, dctx, src, src_off[k], src_len[k], comp[k], d, dst, dst_off[k]):
            codes[k] = R.PAGE_ZSTD
            continue
        if d < C.PAGE_PREFIX_SIZE:
            continue
        c = w64(dst[dst_off[k]: dst_off[k] + C.PAGE_PREFIX_SIZE].view(np.uint32), S.PP_ENTRY_COUNT)
        if c <= np.uint64((d - C.PAGE_PREFIX_SIZE) // C.MIN_BLOCK_DESC_SIZE):  # (exact for a valid leaf)
            nb += np.int64(c)
            ncd += (d - C.PAGE_PREFIX_SIZE - C.BLOCK_PREFIX_SIZE * np.int64(c)) // C.COLUMN_DESC_SIZE
    blocks = np.empty(nb * S.BLOCK_PREFIX_WORDS, np.uint32)
    cols = np.empty(ncd * S.COLUMN_DESC_WORDS, np.uint32)
    starts = np.empty(nb, np.int64)
    nb_room = nb
    ncd_room = ncd
    nb = 0
    ncd = 0
    for k in range(n):
        if codes[k] != R.OK:
            continue
        d = declared[k]
        w = dst[dst_off[k]: dst_off[k] + d // 4 * 4].view(np.uint32)
        code, at, v, b, cl, cs = leaf_page_rules(w, d, n_fields, cap, ts_id, sorted_ids, order, lo[k], hi[k], ft[k],
                                                 fs[k], lt[k], ls[k], mn[k], mx[k], allowed, first_rule[k],
                                                 prev_tid[k], prev_tsid[k])
        codes[k] = code
        ats[k] = at
        vals[k] = v
        if code != R.OK:
            continue
        c = cs.shape[0]
        nc = cl.shape[0] // S.COLUMN_DESC_WORDS
        assert nb + c <= nb_room and ncd + nc <= ncd_room  # (a valid leaf is exactly its prefix and descriptors)
        count[k] = c
        ncols[k] = nc
        boff[k] = nb
        coff[k] = ncd
        blocks[S.BLOCK_PREFIX_WORDS * nb: S.BLOCK_PREFIX_WORDS * (nb + c)] = b
        cols[S.COLUMN_DESC_WORDS * ncd: S.COLUMN_DESC_WORDS * (ncd + nc)] = cl
        starts[nb: nb + c] = cs
        nb += c
        ncd += nc
    return codes, ats, vals, blocks, cols, starts, count, ncols, boff, coff
