"""Navigation ("Navigation and equal-timestamp example") and ChunkBatch building.

A :class:`Selection` is the normalised query: an ordered identity set and/or a
table set, and a half-open time interval.  It answers the spec's overlap test
for parts, pages and blocks.  :func:`build_batch` turns the selected blocks of
loaded leaves into a :class:`~gtsamples.batch.ChunkBatch`; :func:`fetch_batch`
fills its data buffer with coalesced ranged reads of exactly those chunks.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as _dt
from typing import Iterable, Sequence

import numpy as np

from .batch import BLOCK_DTYPE, CHUNK_DTYPE, FIRST_FIELD_SLOT, SLOT_OP_TYPE, SLOT_SEQUENCE, SLOT_TIMESTAMP, ChunkBatch
from .format import constants as C

IDENTITY = np.dtype([("table_id", "<u4"), ("tsid", "<u8")])
_UNIT_NS = {"second": 1_000_000_000, "millisecond": 1_000_000, "microsecond": 1_000, "nanosecond": 1}


def to_unit(value, unit: str, name: str) -> int | None:
    """A bound as an integer in the manifest unit (datetimes are rounded up, so
    ``[start, end)`` keeps exactly the rows at or after start and before end)."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer or a datetime, not bool")
    if isinstance(value, (int, np.integer)):
        v = int(value)
        if not C.I64_MIN <= v <= C.I64_MAX:
            raise ValueError(f"{name}={v} is outside the i64 range")
        return v
    if hasattr(value, "to_datetime64"):  # pandas.Timestamp
        value = value.to_datetime64()
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.timezone.utc).replace(tzinfo=None)
        value = np.datetime64(value)
    if isinstance(value, np.datetime64):
        if np.isnat(value):
            raise ValueError(f"{name} is NaT")
        ns = int(value.astype("datetime64[ns]").astype(np.int64))
        q = _UNIT_NS[unit]
        return -((-ns) // q)  # ceil division
    raise TypeError(f"{name} must be an integer in the manifest unit or a datetime, not {type(value).__name__}")


@dataclasses.dataclass(frozen=True)
class Selection:
    """The normalised query selection."""

    series: tuple[tuple[int, int], ...] | None = None  # sorted, unique
    tables: tuple[int, ...] | None = None  # sorted, unique
    start: int | None = None
    end: int | None = None

    @classmethod
    def build(cls, series=None, tables=None, start=None, end=None, unit: str = "millisecond") -> "Selection":
        s = None
        if series is not None:
            pairs = set()
            for item in series:
                try:
                    t, ts = item
                except (TypeError, ValueError):
                    raise TypeError(f"series must be (table_id, tsid) pairs, got {item!r}") from None
                t, ts = int(t), int(ts)
                if not (0 <= t <= C.U32_MAX and 0 <= ts <= C.U64_MAX):
                    raise ValueError(f"series {(t, ts)} is outside (u32, u64)")
                pairs.add((t, ts))
            s = tuple(sorted(pairs))
        tb = None
        if tables is not None:
            if isinstance(tables, (int, np.integer)):
                tables = [tables]
            tb = tuple(sorted({int(t) for t in tables}))
            if any(not 0 <= t <= C.U32_MAX for t in tb):
                raise ValueError("table IDs are u32")
        if s is not None and tb is not None:  # a table restriction intersects the identity set
            allowed = set(tb)
            s = tuple(p for p in s if p[0] in allowed)
            tb = None
        return cls(s, tb, to_unit(start, unit, "start"), to_unit(end, unit, "end"))

    @property
    def is_empty(self) -> bool:
        return (self.series is not None and not self.series) or (self.tables is not None and not self.tables) or (
            self.start is not None and self.end is not None and self.start >= self.end
        )

    @property
    def has_time(self) -> bool:
        return self.start is not None or self.end is not None

    def time_overlaps(self, mn: int, mx: int) -> bool:
        return (self.start is None or mx >= self.start) and (self.end is None or mn < self.end)

    def ids_overlap(self, first: tuple[int, int], last: tuple[int, int]) -> bool:
        """Does the inclusive identifier interval contain a selected identity?"""
        if self.series is not None:
            i = bisect.bisect_left(self.series, first)
            return i < len(self.series) and self.series[i] <= last
        if self.tables is not None:
            i = bisect.bisect_left(self.tables, first[0])
            return i < len(self.tables) and self.tables[i] <= last[0]
        return True

    def selects(self, first, last, mn, mx) -> bool:
        return self.ids_overlap(first, last) and self.time_overlaps(mn, mx)

    def block_mask(self, blocks: np.ndarray) -> np.ndarray:
        """Identity and time overlap for a table of block prefixes (vectorised)."""
        mask = np.ones(blocks.shape[0], dtype=bool)
        if self.series is not None:
            want = np.array(list(self.series), dtype=IDENTITY)
            have = np.empty(blocks.shape[0], dtype=IDENTITY)
            have["table_id"] = blocks["table_id"]
            have["tsid"] = blocks["tsid"]
            mask &= np.isin(have.view("V12"), want.view("V12"))
        elif self.tables is not None:
            mask &= np.isin(blocks["table_id"], np.array(self.tables, dtype=np.uint32))
        if self.start is not None:
            mask &= blocks["max_timestamp"] >= self.start
        if self.end is not None:
            mask &= blocks["min_timestamp"] < self.end
        return mask

    def trim_mask(self, blocks: np.ndarray) -> np.ndarray:
        """Blocks not entirely inside ``[start, end)`` need exact row filtering."""
        trim = np.zeros(blocks.shape[0], dtype=bool)
        if self.start is not None:
            trim |= blocks["min_timestamp"] < self.start
        if self.end is not None:
            trim |= blocks["max_timestamp"] >= self.end
        return trim


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
) -> ChunkBatch:
    """ChunkBatch rows for every selected block's needed chunks (data not yet fetched).

    ``all_fields`` fetches every chunk, including unprojected fields (deep validation).
    """
    n_manifest_fields = len(manifest.fields)
    field_ids = np.array([f.column_id for f in manifest.fields], dtype=np.int64)
    if all_fields:
        proj_fields = list(range(n_manifest_fields))
    else:
        proj_fields = list(projection.field_indices)
    slot_of_field = np.full(n_manifest_fields, -1, np.int64)
    slot_of_field[proj_fields] = FIRST_FIELD_SLOT + np.arange(len(proj_fields))
    want_seq = projection.want_sequence or all_fields
    want_op = projection.want_op_type or all_fields

    block_parts, chunk_parts = [], []
    out_row = 0
    for sl in leaves:
        page = sl.page
        sel = np.flatnonzero(sl.mask)
        if sel.size == 0:
            continue
        pb = page.blocks[sel]
        nb = sel.size
        b = np.zeros(nb, dtype=BLOCK_DTYPE)
        b["part"] = sl.part
        b["leaf"] = sl.leaf
        b["index"] = sel
        for k in ("table_id", "tsid", "min_timestamp", "max_timestamp", "ordinal"):
            b[k] = pb[k]
        b["rows"] = pb["row_count"]
        rows = pb["row_count"].astype(np.int64)
        starts = np.zeros(nb, np.int64)
        starts[1:] = np.cumsum(rows)[:-1]
        b["out_row"] = out_row + starts
        b["trim"] = selection.trim_mask(pb)
        block_base = sum(len(x) for x in block_parts)
        block_parts.append(b)

        # columns of the selected blocks
        colmask = np.isin(page.col_block, sel)
        cols = page.columns[colmask]
        cblock = page.col_block[colmask]
        role = cols["role"].astype(np.int64)
        cid = cols["column_id"].astype(np.int64)
        slot = np.full(cols.shape[0], -1, np.int64)
        slot[role == C.ROLE_TIMESTAMP] = SLOT_TIMESTAMP
        if want_seq:
            slot[role == C.ROLE_SEQUENCE] = SLOT_SEQUENCE
        if want_op:
            slot[role == C.ROLE_OP_TYPE] = SLOT_OP_TYPE
        is_field = role == C.ROLE_FIELD
        if is_field.any() and proj_fields:
            fidx = np.searchsorted(field_ids[np.argsort(field_ids)], cid[is_field])
            fidx = np.argsort(field_ids)[np.minimum(fidx, n_manifest_fields - 1)]
            slot[is_field] = slot_of_field[fidx]
        keep = slot >= 0
        cols, cblock, slot, role = cols[keep], cblock[keep], slot[keep], role[keep]
        # map leaf block index -> batch block index
        local = np.searchsorted(sel, cblock)
        c = np.zeros(cols.shape[0], dtype=CHUNK_DTYPE)
        c["part"] = sl.part
        c["block"] = block_base + local
        r = cols["ref"]
        c["file_offset"] = r["offset"]
        c["stored_len"] = r["stored_len"]
        c["decoded_len"] = r["decoded_len"]
        c["checksum"] = r["checksum"]
        c["encoding"] = r["encoding"]
        c["compression"] = r["compression"]
        c["role"] = role
        c["slot"] = slot
        c["column_id"] = cols["column_id"]
        c["rows"] = pb["row_count"][local]
        c["null_count"] = cols["null_count"]
        c["out_row"] = b["out_row"][local]
        c["min_timestamp"] = pb["min_timestamp"][local]
        c["max_timestamp"] = pb["max_timestamp"][local]
        chunk_parts.append(c)
        out_row += int(rows.sum())

    blocks = np.concatenate(block_parts) if block_parts else np.zeros(0, BLOCK_DTYPE)
    chunks = np.concatenate(chunk_parts) if chunk_parts else np.zeros(0, CHUNK_DTYPE)
    field_names = tuple(manifest.fields[i].name for i in proj_fields)
    return ChunkBatch(
        chunks=chunks,
        blocks=blocks,
        data=np.zeros(0, np.uint8),
        n_rows=out_row,
        field_names=field_names,
        want_sequence=want_seq,
        want_op_type=want_op,
        start=selection.start,
        end=selection.end,
        source=source,
        part_names=[p.name for p in manifest.files],
    )


def fetch_batch(store, part_keys: Sequence[str], batch: ChunkBatch, stats) -> None:
    """Read exactly the batch's chunks: coalesced ranged reads, one buffer."""
    chunks = batch.chunks
    if chunks.shape[0] == 0:
        return
    bufs = []
    base = 0
    parts = chunks["part"]
    # chunks of a part are contiguous and physically ordered in a batch
    bounds = np.flatnonzero(np.diff(parts.astype(np.int64))) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, chunks.shape[0]]):
        sub = chunks[lo:hi]
        p = int(sub["part"][0])
        buf, pos = store.read_ranges(part_keys[p], sub["file_offset"], sub["stored_len"], stats)
        chunks["src_offset"][lo:hi] = pos + base
        bufs.append(buf)
        base += buf.shape[0]
        stats.chunk_bytes += int(sub["stored_len"].sum(dtype=np.uint64))
    batch.data = bufs[0] if len(bufs) == 1 else np.concatenate(bufs)
