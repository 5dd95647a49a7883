"""ChunkBatch building: the selected blocks of navigated leaves as one batch.

:func:`build_batch` turns the selected blocks of loaded leaves
(:class:`SelectedLeaf`, the navigator's output) into a
:class:`~gtsamples.batch.ChunkBatch`; :func:`fetch_batch` fills its data buffer
with coalesced ranged reads of exactly those chunks.  :class:`Projection` says
which columns a read outputs, and so which chunks it fetches.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

import numpy as np

from ..batch import BLOCK_DTYPE, CHUNK_DTYPE, FIRST_FIELD_SLOT, ChunkBatch, describe_chunk
from ..format import structs as S
from ..format.pages import words_at
from ..format.structs import BLOCK_PREFIX, COLUMN_DESC
from ..errors import CorruptArtifactError
from ..format import constants as C
from .selection import Selection, locate
from ..jit import njit


@dataclasses.dataclass(frozen=True)
class Projection:
    """Which columns a read outputs and so which chunks it fetches."""

    names: tuple[str, ...]  # output column names in schema order
    field_indices: tuple[int, ...]  # manifest field indices, in manifest order
    want_sequence: bool
    want_op_type: bool

    @classmethod
    def build(cls, manifest, columns: Iterable[str] | None) -> "Projection":
        all_names = manifest.column_names
        if columns is None:
            wanted = set(all_names)
        else:
            if isinstance(columns, str):
                columns = [columns]
            wanted = set()
            for c in columns:
                if c not in all_names:
                    raise ValueError(
                        f"unknown column {c!r}; the artifact's columns are {', '.join(all_names)}"
                    )
                wanted.add(c)
        names = tuple(n for n in all_names if n in wanted)
        fields = tuple(i for i, f in enumerate(manifest.fields) if f.name in wanted)
        return cls(names, fields, "__sequence" in wanted, "__op_type" in wanted)


class PartNames(Sequence):
    """The names of a batch's parts (only error messages use them), each made
    on demand by ``name(k)``: building them per part for every batch would cost
    more than a small query's navigation."""

    __slots__ = ("_n", "_name")

    def __init__(self, n: int, name):
        self._n = int(n)
        self._name = name

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(self._n))]
        k = int(k)
        if k < 0:
            k += self._n
        if not 0 <= k < self._n:
            raise IndexError(f"part {k} out of range ({self._n} parts)")
        return self._name(k)

    def __eq__(self, other):
        if isinstance(other, (Sequence, PartNames)) and not isinstance(other, str):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return f"PartNames({list(self)!r})" if self._n <= 4 else f"PartNames(<{self._n} parts>)"


@dataclasses.dataclass
class SelectedLeaf:
    """A loaded leaf and which of its blocks a query selected."""

    part: int
    leaf: int
    page: object  # format.pages.LeafPage
    mask: np.ndarray


def build_batch(
    leaves: Sequence[SelectedLeaf],
    manifest,
    selection: Selection,
    projection: Projection,
    source: str = "",
    all_fields: bool = False,
    part_names: Sequence[str] | None = None,
    leaf_parts: Sequence[int] | None = None,
) -> ChunkBatch:
    """ChunkBatch rows for every selected block's needed chunks (data not yet fetched).

    ``all_fields`` fetches every chunk, including unprojected fields (deep validation).
    ``part_names``: the name of each part number the leaves carry (default: the
    manifest's part files); a region numbers the parts of several artifacts whose
    manifests have the same fields and timestamp column, and builds one batch.
    ``leaf_parts``: the part number of each leaf in the batch (default: each leaf's
    own ``part``; a region renumbers its artifacts' parts without new leaves).
    The selected blocks of all leaves are found at once, their prefixes gathered
    from all the leaves' prefixes joined, and their column descriptors joined run
    by run (consecutive selected blocks of a leaf); the batch tables are then filled
    once for all of them (:func:`_fill_batch`).
    """
    n_manifest_fields = len(manifest.fields)
    if all_fields:
        proj_fields = list(range(n_manifest_fields))
    else:
        proj_fields = list(projection.field_indices)
    want_seq = projection.want_sequence or all_fields
    want_op = projection.want_op_type or all_fields
    field_names = tuple(manifest.fields[i].name for i in proj_fields)
    if part_names is None:  # part IDs are the part indices (manifest rule)
        part_names = PartNames(len(manifest.files), C.part_file_name)

    if len(leaves) <= FEW_LEAVES:
        got = _selected_blocks_of_few(leaves, leaf_parts)
    else:
        got = _selected_blocks(leaves, leaf_parts)
    if got is None:
        return ChunkBatch(chunks=np.zeros(0, CHUNK_DTYPE), blocks=np.zeros(0, BLOCK_DTYPE), data=np.zeros(0, np.uint8),
                          n_rows=0, field_names=field_names, want_sequence=want_seq, want_op_type=want_op,
                          start=selection.start, end=selection.end, source=source, part_names=part_names)
    pb, cols, part_of, leaf_of, index_of = got
    nb = pb.shape[0]
    # slot of each manifest field column ID (sorted), -1 when unprojected
    field_ids = np.array([f.column_id for f in manifest.fields], dtype=np.int64)
    order = np.argsort(field_ids)
    slot_of_field = np.full(n_manifest_fields, -1, np.int64)
    slot_of_field[proj_fields] = FIRST_FIELD_SLOT + np.arange(len(proj_fields))
    b = np.empty(nb, dtype=BLOCK_DTYPE)
    c = np.empty(cols.shape[0], dtype=CHUNK_DTYPE)
    st, en = selection.start, selection.end
    n_chunks, n_rows = _fill_batch(pb, cols, part_of, leaf_of, index_of,
                                   field_ids[order], slot_of_field[order], want_seq, want_op,
                                   st is not None, 0 if st is None else st, en is not None, 0 if en is None else en,
                                   b, c)
    return ChunkBatch(
        chunks=c[:n_chunks] if n_chunks < c.shape[0] else c,
        blocks=b,
        data=np.zeros(0, np.uint8),
        n_rows=int(n_rows),
        field_names=field_names,
        want_sequence=want_seq,
        want_op_type=want_op,
        start=selection.start,
        end=selection.end,
        source=source,
        part_names=part_names,
    )


#: Up to this many leaves, :func:`build_batch` gathers their selected blocks leaf by leaf
#: (:func:`_selected_blocks_of_few`: a one-series read of one artifact, ~30 us less than
#: the many-leaf pass's fixed cost); more, in one pass (:func:`_selected_blocks`).
FEW_LEAVES = 2


def _selected_blocks_of_few(leaves: Sequence[SelectedLeaf], leaf_parts):
    """:func:`_selected_blocks` leaf by leaf, with numpy's indexing of each leaf's tables."""
    prefixes, descs, block_part, block_leaf, block_index = [], [], [], [], []
    for n, sl in enumerate(leaves):
        sel = np.flatnonzero(sl.mask)
        k = sel.size
        if k == 0:
            continue
        page = sl.page
        cs = page.col_start
        if k == page.blocks.shape[0]:  # every block: the page's tables as they are
            prefixes.append(page.blocks)
            descs.append(page.columns[: int(cs[-1]) + int(page.blocks["column_count"][-1])])
        elif k == 1:
            j = int(sel[0])
            prefixes.append(page.blocks[j: j + 1])
            c0 = int(cs[j])
            descs.append(page.columns[c0: c0 + int(page.blocks["column_count"][j])])
        else:
            prefixes.append(page.blocks[sel])
            lo = cs[sel]
            cnt = page.blocks["column_count"][sel].astype(np.int64)
            ends = np.cumsum(cnt)
            descs.append(page.columns[np.repeat(lo - (ends - cnt), cnt) + np.arange(int(ends[-1]), dtype=np.int64)])
        block_part.append((sl.part if leaf_parts is None else leaf_parts[n], k))
        block_leaf.append(sl.leaf)
        block_index.append(sel)
    if not prefixes:
        return None
    pb = np.ascontiguousarray(concat_records(prefixes))
    if pb.dtype != BLOCK_PREFIX:  # (the prefix fields of a wider table)
        pb = pb.astype(BLOCK_PREFIX)
    cols = np.ascontiguousarray(concat_records(descs))
    per_leaf = np.array([k for _, k in block_part], dtype=np.int64)
    part_of = np.repeat(np.array([p for p, _ in block_part], dtype=np.int64), per_leaf)
    leaf_of = np.repeat(np.array(block_leaf, dtype=np.int64), per_leaf)
    index_of = np.concatenate(block_index) if len(block_index) > 1 else block_index[0]
    return pb, cols, part_of, leaf_of, index_of


def _selected_blocks(leaves: Sequence[SelectedLeaf], leaf_parts):
    """The selected blocks of ``leaves`` in order: ``(prefixes, their column
    descriptors, and per block its part, leaf ordinal and index in its leaf)``, or
    None when no block is selected.  The prefixes are read in place from each leaf
    (:func:`_gather_prefixes`), the descriptors joined run by run (consecutive
    selected blocks of a leaf): a leaf's descriptors are its blocks', in block order
    (a loaded leaf's rule: ``col_start`` counts them from 0)."""
    if not leaves:
        return None
    pages = [sl.page for sl in leaves]
    addrs = [p.prefix_address for p in pages]
    keep = None
    if None in addrs:  # (a leaf made otherwise: its prefixes copied into a table first, kept alive here)
        keep = [np.ascontiguousarray(p.blocks).astype(BLOCK_PREFIX, copy=False) for p in pages]
        addrs = [b.ctypes.data for b in keep]
    masks = [sl.mask for sl in leaves]
    sel = np.flatnonzero(np.concatenate(masks) if len(masks) != 1 else masks[0])
    if sel.size == 0:
        return None
    counts = np.array([p.blocks.shape[0] for p in pages], dtype=np.int64)
    leaf, index = locate(sel, counts)  # each selected block's leaf (position in ``leaves``), its index there
    pb = np.empty(sel.size, BLOCK_PREFIX)
    lo = np.empty(sel.size, np.int64)
    n = np.empty(sel.size, np.int64)
    _gather_prefixes(np.array(addrs, dtype=np.int64), counts, leaf, index, pb.view(np.uint32), lo, n)
    del keep
    # runs of consecutive selected blocks of a leaf: one slice of its descriptors each
    cut = np.flatnonzero((np.diff(sel) != 1) | (np.diff(leaf) != 0)) + 1
    r0 = np.concatenate([[0], cut])
    r1 = np.concatenate([cut, [sel.size]]) - 1
    cw = COLUMN_DESC.itemsize
    runs = zip(leaf[r0].tolist(), (lo[r0] * cw).tolist(), ((lo[r1] + n[r1]) * cw).tolist())
    cols = np.frombuffer(b"".join([pages[k].columns_bytes[a: b] for k, a, b in runs]), COLUMN_DESC)
    parts = np.array([sl.part for sl in leaves] if leaf_parts is None else leaf_parts, dtype=np.int64)
    ords = np.array([sl.leaf for sl in leaves], dtype=np.int64)
    return pb, cols, parts[leaf], ords[leaf], index


@njit(nogil=True)
def _gather_prefixes(addrs, counts, leaf, index, out, desc_lo, desc_n):  # pragma: no cover - numba
    """The BLOCK_PREFIX records ``index[s]`` of the tables at ``addrs[leaf[s]]`` (of
    ``counts`` records; ``(leaf, index)`` in order) into ``out`` (u32 words), with
    each one's first column descriptor in its leaf (the column counts of the blocks
    before it) and its descriptor count."""
    nw = S.BLOCK_PREFIX_WORDS
    prev = -1
    acc = 0
    pos = 0
    for s in range(leaf.shape[0]):
        k = leaf[s]
        i = index[s]
        w = words_at(addrs[k], counts[k] * nw)
        if k != prev:
            prev = k
            acc = 0
            pos = 0
        while pos < i:
            acc += np.int64(w[nw * pos + S.BP_COLUMN_COUNT])
            pos += 1
        for q in range(nw):
            out[nw * s + q] = w[nw * i + q]
        desc_lo[s] = acc
        desc_n[s] = np.int64(w[nw * i + S.BP_COLUMN_COUNT])


@njit(nogil=True)
def _fill_batch(pb, cols, part_of, leaf_of, index_of, sorted_ids, sorted_slots, want_seq, want_op,
                has_start, start, has_end, end, b, c):  # pragma: no cover - numba
    """Fill the block table ``b`` and chunk table ``c`` from the selected block prefixes
    ``pb`` and their column descriptors ``cols`` (block by block, in page order).
    Returns (chunks kept, output rows): unprojected columns get no chunk row."""
    nb = pb.shape[0]
    n_ids = sorted_ids.shape[0]
    out_row = np.uint64(0)
    j = 0  # next column descriptor
    k = 0  # next chunk row
    for i in range(nb):
        p = pb[i]
        bi = b[i]
        bi["part"] = part_of[i]
        bi["leaf"] = leaf_of[i]
        bi["index"] = index_of[i]
        bi["table_id"] = p["table_id"]
        bi["tsid"] = p["tsid"]
        bi["min_timestamp"] = p["min_timestamp"]
        bi["max_timestamp"] = p["max_timestamp"]
        bi["ordinal"] = p["ordinal"]
        bi["rows"] = p["row_count"]
        bi["out_row"] = out_row
        trim = (has_start and p["min_timestamp"] < start) or (has_end and p["max_timestamp"] >= end)
        bi["trim"] = 1 if trim else 0
        for _q in range(p["column_count"]):
            d = cols[j]
            j += 1
            role = d["role"]
            slot = -1
            if role == 1:
                slot = 0
            elif role == 2:
                if want_seq:
                    slot = 1
            elif role == 3:
                if want_op:
                    slot = 2
            elif role == 4 and n_ids > 0:
                cid = np.int64(d["column_id"])
                lo = 0
                hi = n_ids
                while lo < hi:  # searchsorted(sorted_ids, cid, "left"), clamped
                    m = (lo + hi) >> 1
                    if sorted_ids[m] < cid:
                        lo = m + 1
                    else:
                        hi = m
                slot = sorted_slots[min(lo, n_ids - 1)]
            if slot < 0:
                continue
            ck = c[k]
            k += 1
            ck["part"] = part_of[i]
            ck["block"] = i
            r = d["ref"]
            ck["file_offset"] = r["offset"]
            ck["stored_len"] = r["stored_len"]
            ck["decoded_len"] = r["decoded_len"]
            ck["checksum"] = r["checksum"]
            ck["encoding"] = r["encoding"]
            ck["compression"] = r["compression"]
            ck["role"] = role
            ck["slot"] = slot
            ck["column_id"] = d["column_id"]
            ck["rows"] = p["row_count"]
            ck["null_count"] = d["null_count"]
            ck["out_row"] = out_row
            ck["src_offset"] = 0
            ck["min_timestamp"] = p["min_timestamp"]
            ck["max_timestamp"] = p["max_timestamp"]
        out_row += np.uint64(p["row_count"])
    return k, out_row


def concat_records(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """``np.concatenate`` of same-dtype structured arrays, as bytes (numpy promotes
    structured dtypes field by field per input, which costs more than the copy)."""
    if len(arrays) == 1:
        return arrays[0]
    dt = arrays[0].dtype
    return np.concatenate([np.ascontiguousarray(a).view(np.uint8) for a in arrays]).view(dt)


def fetch_batch(store, part_keys: Sequence[str], batch: ChunkBatch, stats) -> None:
    """Read exactly the batch's chunks: coalesced ranged reads, one buffer."""
    chunks = batch.chunks
    n = chunks.shape[0]
    if n == 0:
        return
    part = np.empty(n, np.int64)
    off = np.empty(n, np.uint64)
    length = np.empty(n, np.uint64)
    # a part's chunks are physically ordered and disjoint, also across leaves not loaded together
    j, one_part, total = _chunk_ranges(chunks, part, off, length)
    if j >= 0:
        raise CorruptArtifactError(
            f"{describe_chunk(batch, j)}: chunks must be physically ordered and disjoint: starts at "
            f"{int(off[j])}, the part's previous chunk ends at {int(off[j - 1] + length[j - 1])}")
    if one_part:  # chunks of a part are contiguous in a batch
        buf, pos = store.read_ranges(part_keys[int(part[0])], off, length, stats)
    else:  # one buffer for all parts (remote stores: one concurrent request batch)
        buf, pos = store.read_coalesced(part_keys, part, off, length, stats)
    chunks["src_offset"] = pos
    stats.chunk_bytes += int(total)
    batch.data = buf


@njit(nogil=True)
def _chunk_ranges(chunks, part, off, length):  # pragma: no cover - numba
    """Each chunk's part, file offset and stored length as contiguous arrays, in one
    pass over the chunk table.  Returns ``(j, one part, stored bytes)``: ``j`` the first
    chunk that starts before the end of its part's previous chunk (-1: none)."""
    bad = -1
    one = True
    total = 0
    for i in range(chunks.shape[0]):
        c = chunks[i]
        part[i] = c["part"]
        off[i] = c["file_offset"]
        length[i] = c["stored_len"]
        total += np.int64(c["stored_len"])
        if i > 0:
            if part[i] != part[0]:
                one = False
            if bad < 0 and part[i] == part[i - 1] and off[i] < off[i - 1] + length[i - 1]:
                bad = i
    return bad, one, total
