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
from ..format.pages import field_tables, words_at
from ..format.structs import BLOCK_PREFIX, COLUMN_DESC
from ..errors import CorruptArtifactError
from ..format import constants as C
from .selection import Selection
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

    got = _selected_blocks(leaves, leaf_parts)
    if got is None:
        return ChunkBatch(chunks=np.zeros(0, CHUNK_DTYPE), blocks=np.zeros(0, BLOCK_DTYPE), data=np.zeros(0, np.uint8),
                          n_rows=0, field_names=field_names, want_sequence=want_seq, want_op_type=want_op,
                          start=selection.start, end=selection.end, source=source, part_names=part_names)
    pb, cols, part_of, leaf_of, index_of = got
    nb = pb.shape[0]
    sorted_ids, sorted_slots = _field_slots(manifest.fields, tuple(proj_fields))
    b = np.empty(nb, dtype=BLOCK_DTYPE)
    c = np.empty(cols.shape[0], dtype=CHUNK_DTYPE)
    st, en = selection.start, selection.end
    n_chunks, n_rows = _fill_batch(pb, cols, part_of, leaf_of, index_of, sorted_ids, sorted_slots, want_seq, want_op,
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


_FIELD_SLOTS: dict = {}


def _field_slots(fields, proj_fields: tuple) -> tuple[np.ndarray, np.ndarray]:
    """The manifest's field column IDs sorted, and the output slot of each (-1 when not
    projected): :func:`_fill_batch`'s lookup, made once per field list and projection
    (keyed by the list's identity: each entry keeps its list alive, so an id is never
    reused while cached; a few entries per manifest, bounded)."""
    hit = _FIELD_SLOTS.get((id(fields), proj_fields))
    if hit is not None and hit[0] is fields:
        return hit[1]
    _n, _cap, sorted_ids, order = field_tables(fields)  # (the leaf kernel's sort of the same IDs)
    slot_of_field = np.full(len(fields), -1, np.int64)
    slot_of_field[list(proj_fields)] = FIRST_FIELD_SLOT + np.arange(len(proj_fields))
    got = (sorted_ids, slot_of_field[order])  # (shared: never written; writeable, as numba typed them)
    if len(_FIELD_SLOTS) >= 4096:
        _FIELD_SLOTS.clear()
    _FIELD_SLOTS[(id(fields), proj_fields)] = (fields, got)
    return got


def _selected_blocks(leaves: Sequence[SelectedLeaf], leaf_parts):
    """The selected blocks of ``leaves`` in order: ``(prefixes, their column
    descriptors, and per block its part, leaf ordinal and index in its leaf)``, or
    None when no block is selected.  One pass (:func:`_gather_selected`) reads every
    leaf's tables in place (``LeafPage.tables_at``): a leaf's descriptors are its
    blocks', in block order (a loaded leaf's rule: ``col_start`` counts them from 0)."""
    if not leaves:
        return None
    rows = []
    keep = []  # the tables read in place (and contiguous copies), alive until gathered
    for n, sl in enumerate(leaves):
        at, nb, cat, nc, held = sl.page.tables_at
        keep.append(held)
        if at is None:
            b = np.ascontiguousarray(sl.page.blocks).astype(BLOCK_PREFIX, copy=False)
            keep.append(b)
            at = b.ctypes.data
        rows.append((at, nb, cat, nc, sl.part if leaf_parts is None else leaf_parts[n], sl.leaf))
    tab = np.array(rows, dtype=np.int64)
    mask = np.concatenate([sl.mask for sl in leaves]) if len(leaves) > 1 else np.ascontiguousarray(leaves[0].mask)
    if mask.shape[0] != int(tab[:, 1].sum()):  # a planner bug: never read past the masks
        raise ValueError(f"the leaves' masks cover {mask.shape[0]} blocks, the leaves hold {int(tab[:, 1].sum())}")
    n_sel = int(np.count_nonzero(mask))
    if n_sel == 0:
        return None
    pb = np.empty(n_sel, BLOCK_PREFIX)
    cols = np.empty(int(tab[:, 3].sum()), COLUMN_DESC)
    part_of = np.empty(n_sel, np.int64)
    leaf_of = np.empty(n_sel, np.int64)
    index_of = np.empty(n_sel, np.int64)
    nc = _gather_selected(tab, mask, pb.view(np.uint32), cols.view(np.uint32), part_of, leaf_of, index_of)
    del keep
    if nc < 0:  # a planner bug (leaves are validated when loaded), never read past a table
        raise ValueError(f"leaf {leaves[-1 - nc].leaf} of part {leaves[-1 - nc].part}: its blocks count more "
                         f"column descriptors than its {int(tab[-1 - nc, 3])}")
    return pb, cols[:nc], part_of, leaf_of, index_of


#: u32 words of a column descriptor
COLUMN_DESC_WORDS = COLUMN_DESC.itemsize // 4


@njit(nogil=True)
def _gather_selected(tab, mask, pb, cols, part_of, leaf_of, index_of):  # pragma: no cover - numba
    """The selected blocks' prefixes (u32 words, into ``pb``) and column descriptors
    (into ``cols``), leaf after leaf: ``tab`` holds per leaf its prefix table's address,
    block count, descriptor table's address, descriptor count, part and leaf ordinal;
    ``mask`` the leaves' masks joined.  A block's descriptors start after those of the
    blocks before it in its leaf.  Returns the descriptors gathered."""
    nw = S.BLOCK_PREFIX_WORDS
    cw = COLUMN_DESC_WORDS
    s = 0
    nc = 0
    base = 0
    for k in range(tab.shape[0]):
        nb = tab[k, 1]
        w = words_at(tab[k, 0], nb * nw)
        cd = words_at(tab[k, 2], tab[k, 3] * cw)
        acc = 0
        for i in range(nb):
            cnt = np.int64(w[nw * i + S.BP_COLUMN_COUNT])
            if acc + cnt > tab[k, 3]:  # (a loaded leaf has every block's descriptors)
                return -1 - k
            if mask[base + i]:
                for q in range(nw):
                    pb[nw * s + q] = w[nw * i + q]
                for q in range(cnt * cw):
                    cols[nc * cw + q] = cd[acc * cw + q]
                part_of[s] = tab[k, 4]
                leaf_of[s] = tab[k, 5]
                index_of[s] = i
                s += 1
                nc += cnt
            acc += cnt
        base += nb
    return nc


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
