"""The ChunkBatch: the one object the planner hands to a backend.

A ChunkBatch is a set of flat numpy tables describing every chunk a query must
decode, for the whole query at once, plus one buffer holding the chunks'
stored bytes.  Both backends (``decode/cpu/``, ``decode/gpu.py``) consume
exactly this and nothing else from the format layer.

Output layout: the decoded rows of the selected blocks are laid end to end in
file order (part, block, row).  ``BLOCK_DTYPE['out_row']`` is a block's first
output row; every chunk of the block writes rows ``[out_row, out_row + rows)``
of its column slot.  Slots: 0 timestamp, 1 sequence, 2 operation type,
``3 + k`` the k-th projected field.  A projected field whose chunk is omitted
in a block (all null) has no chunk row: its rows stay null (validity zero).
After decoding, rows of blocks flagged ``trim`` are filtered to
``[start, end)`` exactly.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numba
import numpy as np

from .errors import (
    FLAG_RULES,
    UNSUPPORTED_FLAGS,
    CorruptArtifactError,
    DecodeErrorFlag,
    UnsupportedError,
)
from .format.constants import ROLE_NAMES
from .jit import njit

SLOT_TIMESTAMP = 0
SLOT_SEQUENCE = 1
SLOT_OP_TYPE = 2
FIRST_FIELD_SLOT = 3

#: One row per chunk to decode, in physical order.
CHUNK_DTYPE = np.dtype(
    [
        ("part", "<u4"),  # part ID
        ("block", "<u4"),  # row in the batch's block table
        ("file_offset", "<u8"),  # absolute offset in the part
        ("stored_len", "<u4"),
        ("decoded_len", "<u4"),
        ("checksum", "<u8"),  # XXH64, seed 0, of the stored bytes
        ("encoding", "<u2"),
        ("compression", "<u2"),
        ("role", "<u1"),
        ("slot", "<u2"),  # output column slot (see module doc)
        ("column_id", "<u4"),
        ("rows", "<u4"),  # the block's row count
        ("null_count", "<u4"),
        ("out_row", "<u8"),  # first output row (the block's)
        ("src_offset", "<u8"),  # where the stored bytes start in ChunkBatch.data
        ("min_timestamp", "<i8"),  # the block descriptor's bounds (timestamp checks)
        ("max_timestamp", "<i8"),
    ]
)

#: One row per selected block, in file order.
BLOCK_DTYPE = np.dtype(
    [
        ("part", "<u4"),
        ("leaf", "<u4"),  # leaf ordinal within the part
        ("index", "<u4"),  # block index within the leaf
        ("table_id", "<u4"),
        ("tsid", "<u8"),
        ("min_timestamp", "<i8"),
        ("max_timestamp", "<i8"),
        ("ordinal", "<u8"),
        ("rows", "<u4"),
        ("out_row", "<u8"),
        ("trim", "<u1"),  # 1 when the block is not entirely inside [start, end)
    ]
)


@dataclasses.dataclass
class ChunkBatch:
    """Every chunk one query decodes, plus the fetched stored bytes."""

    chunks: np.ndarray  # CHUNK_DTYPE
    blocks: np.ndarray  # BLOCK_DTYPE
    data: np.ndarray  # uint8: the stored bytes of all chunks
    n_rows: int  # output rows before trimming
    field_names: tuple[str, ...]  # projected fields, slot 3 + k
    want_sequence: bool = True
    want_op_type: bool = True
    start: int | None = None
    end: int | None = None
    source: str = ""  # the artifact's location, for messages
    part_names: Sequence[str] = ()
    #: Per batch part, which artifact it belongs to, when one batch merges several
    #: (a region read); None: every part is one artifact's.  Rules across blocks
    #: (the sequence order) apply only between blocks of one artifact.
    part_artifact: np.ndarray | None = None

    @property
    def n_slots(self) -> int:
        return FIRST_FIELD_SLOT + len(self.field_names)

    @property
    def needs_trim(self) -> bool:
        return bool(len(self.blocks) and np.count_nonzero(self.blocks["trim"]))


@dataclasses.dataclass
class DecodedColumns:
    """Host (numpy) columns of a decoded batch, before trimming.

    ``bitmaps[k]`` is field k's Arrow validity bitmap (uint8, bit ``i % 8`` of
    byte ``i // 8`` set for a present row; ``ceil(rows / 8)`` bytes) or None
    when the field has no null; ``null_counts[k]`` its null rows.  Null rows
    hold 0.0 in ``values[k]``.
    """

    timestamp: np.ndarray  # int64
    sequence: np.ndarray | None  # uint64
    op_type: np.ndarray | None  # uint8
    values: list[np.ndarray]  # float64 per projected field
    bitmaps: list[np.ndarray | None]
    null_counts: list[int]

    @property
    def validity(self) -> list[np.ndarray]:
        """Per field, a bool array (True = present), unpacked from the bitmaps."""
        n = self.timestamp.shape[0]
        return [np.ones(n, dtype=bool) if bm is None else
                np.unpackbits(bm, count=n, bitorder="little").view(bool) for bm in self.bitmaps]


def row_mask(timestamp: np.ndarray, start: int | None, end: int | None) -> np.ndarray:
    """Exact half-open ``[start, end)`` filter over decoded timestamps."""
    return kept_rows(timestamp, start, end)[0]


def kept_rows(timestamp: np.ndarray, start: int | None, end: int | None) -> tuple[np.ndarray, int, int, int]:
    """:func:`row_mask`, with the first kept row, one past the last, and how many rows are
    kept (``(mask, 0, 0, 0)`` when none is): the kept rows are one run when the last two
    differ by the count."""
    mask = np.empty(timestamp.shape[0], np.bool_)
    first, stop, kept = _keep_rows(np.ascontiguousarray(timestamp, dtype=np.int64), start is not None,
                                   0 if start is None else start, end is not None, 0 if end is None else end, mask)
    return mask, int(first), int(stop), int(kept)


@njit(nogil=True)
def _keep_rows(ts, has_start, start, has_end, end, mask):  # pragma: no cover - numba
    """:func:`kept_rows` into ``mask``: ``(first, stop, kept)``."""
    first = -1
    last = -1
    kept = 0
    for r in range(ts.shape[0]):
        t = ts[r]
        keep = not ((has_start and t < start) or (has_end and t >= end))
        mask[r] = keep
        if keep:
            if first < 0:
                first = r
            last = r
            kept += 1
    if first < 0:
        return 0, 0, 0
    return first, last + 1, kept


def block_chunks(batch: ChunkBatch, slot: int) -> np.ndarray:
    """int64 per block: the index of its chunk for output ``slot``, -1 where it has none."""
    out = np.empty(len(batch.blocks), np.int64)
    _block_chunks(batch.chunks, np.int64(slot), out)
    return out


@njit(nogil=True)
def _block_chunks(ch, slot, out):  # pragma: no cover - numba
    """:func:`block_chunks` into ``out`` (one row per block; a chunk naming no block of
    the table is left out: never written past ``out``)."""
    out[:] = -1
    for i in range(ch.shape[0]):
        if np.int64(ch[i]["slot"]) == slot and ch[i]["block"] < out.shape[0]:
            out[ch[i]["block"]] = i


@numba.njit(inline="always")
def _continues(b, owner, k):  # pragma: no cover - numba
    """Block ``k`` continues block ``k - 1`` in its series: same identity, ordinal + 1
    (adjacent in the file, across leaves and parts too), and, where the batch merges
    artifacts (``owner``: each part's artifact, else empty), the same artifact."""
    cur, prev = b[k], b[k - 1]
    if cur["table_id"] != prev["table_id"] or cur["tsid"] != prev["tsid"]:
        return False
    if prev["ordinal"] == np.uint64(2**64 - 1) or cur["ordinal"] != prev["ordinal"] + np.uint64(1):
        return False
    if owner.shape[0] == 0:
        return True
    return cur["part"] < owner.shape[0] and prev["part"] < owner.shape[0] and owner[cur["part"]] == owner[prev["part"]]


@njit(nogil=True)
def _continuations(b, ch, owner, seq_of, ts_of, out):  # pragma: no cover - numba
    """The rows of :func:`sequence_continuations` into ``out`` (5 x blocks), with
    each block's sequence and timestamp chunk in ``seq_of``/``ts_of``; returns
    how many."""
    _block_chunks(ch, np.int64(SLOT_SEQUENCE), seq_of)
    _block_chunks(ch, np.int64(SLOT_TIMESTAMP), ts_of)
    n = 0
    for k in range(1, b.shape[0]):
        if seq_of[k] < 0 or seq_of[k - 1] < 0 or ts_of[k] < 0 or ts_of[k - 1] < 0:
            continue
        if not _continues(b, owner, k):
            continue
        out[0, n] = k
        out[1, n] = seq_of[k]
        out[2, n] = seq_of[k - 1]
        out[3, n] = ts_of[k]
        out[4, n] = ts_of[k - 1]
        n += 1
    return n


def _owners(batch: ChunkBatch) -> np.ndarray:
    """Each part's artifact (int64), or an empty array when the batch is one artifact's."""
    if batch.part_artifact is None:
        return _NO_OWNERS
    return np.ascontiguousarray(batch.part_artifact, dtype=np.int64)


_NO_OWNERS = np.zeros(0, np.int64)


def sequence_continuations(batch: ChunkBatch) -> tuple[np.ndarray, ...]:
    """Blocks that continue the previous block of the batch in their series (same
    artifact and identity, ordinal + 1: adjacent in the file, across leaves and
    parts too), for the order rule across blocks: ``(block, its sequence chunk,
    the previous block's sequence chunk, its timestamp chunk, the previous block's
    timestamp chunk)``, int64 arrays; empty when the batch has no sequence chunks."""
    nb = len(batch.blocks)
    if nb < 2 or len(batch.chunks) == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, empty, empty
    out = np.empty((5, nb), np.int64)
    n = _continuations(np.ascontiguousarray(batch.blocks), np.ascontiguousarray(batch.chunks), _owners(batch),
                       np.empty(nb, np.int64), np.empty(nb, np.int64), out)
    return tuple(out[:, :n])


_OTHER_THAN_ORDER = np.uint32(~int(DecodeErrorFlag.SEQUENCE_ORDER) & 0xFFFFFFFF)
_SEQUENCE_ORDER = np.uint32(DecodeErrorFlag.SEQUENCE_ORDER)


@njit(nogil=True)
def _flag_boundaries(b, ch, owner, flags, ts, seq, seq_of, ts_of, cont):  # pragma: no cover - numba
    """:func:`flag_sequence_boundaries` (``cont``: scratch for the continuations)."""
    n = _continuations(b, ch, owner, seq_of, ts_of, cont)
    for j in range(n):
        k, sc, psc, tc, ptc = cont[0, j], cont[1, j], cont[2, j], cont[3, j], cont[4, j]
        if ((flags[sc] | flags[psc] | flags[tc] | flags[ptc]) & _OTHER_THAN_ORDER) != 0:
            continue
        r = np.int64(b[k]["out_row"])
        if r < 1 or r >= ts.shape[0] or r >= seq.shape[0]:  # (a block of no row)
            continue
        if ts[r] == ts[r - 1] and seq[r] > seq[r - 1]:
            flags[sc] |= _SEQUENCE_ORDER


def flag_sequence_boundaries(batch: ChunkBatch, flags: np.ndarray, ts: np.ndarray, seq: np.ndarray) -> None:
    """The sequence order rule across blocks, on host columns: where a block continues
    its series (:func:`sequence_continuations`) and the four chunks involved decoded
    cleanly (order flags aside), its first row must not have the previous row's
    timestamp with a greater sequence; ``SEQUENCE_ORDER`` goes on its sequence chunk.
    The GPU kernel ``gts_check_sequence_order`` applies the same rule on the device."""
    nb = len(batch.blocks)
    if nb < 2 or len(batch.chunks) == 0:
        return
    _flag_boundaries(np.ascontiguousarray(batch.blocks), np.ascontiguousarray(batch.chunks), _owners(batch), flags,
                     ts, seq, np.empty(nb, np.int64), np.empty(nb, np.int64), np.empty((5, nb), np.int64))


def _host(col, lo: int, hi: int) -> np.ndarray:
    part = col[lo:hi]
    return np.asarray(part.get() if hasattr(part, "get") else part)  # CuPy: copy just these rows


def add_sequence_order_detail(batch: ChunkBatch, flags: np.ndarray, detail: dict, ts, seq) -> None:
    """Observed values for the first chunk flagged ``SEQUENCE_ORDER`` (error path).
    ``ts``/``seq``: the decoded columns, numpy or CuPy (only the block's rows are read)."""
    bad = np.flatnonzero(flags & np.uint32(DecodeErrorFlag.SEQUENCE_ORDER))
    if bad.size == 0:
        return
    i = int(bad[0])
    o, n = int(batch.chunks["out_row"][i]), int(batch.chunks["rows"][i])
    t, s = _host(ts, o, o + n), _host(seq, o, o + n)
    hit = np.flatnonzero((t[1:] == t[:-1]) & (s[1:] > s[:-1]))
    if hit.size:
        j = int(hit[0]) + 1
        where, before = f"row {j} of the block", int(s[j - 1])
    elif o > 0:  # across blocks
        j = 0
        where, before = "its first row after the previous block's last row", int(_host(seq, o - 1, o)[0])
    else:
        return
    detail[i] = f"{where}, at timestamp {int(t[j])}: sequence {before} then {int(s[j])}"


def describe_chunk(batch: ChunkBatch, i: int, field_names: Sequence[str] | None = None) -> str:
    """``part-0.samples block 3 (table 7, tsid 42, ordinal 1) field 'v' (id 5)``."""
    c = batch.chunks[i]
    b = batch.blocks[int(c["block"])]
    part = int(c["part"])
    names = batch.part_names
    part_name = names[part] if part < len(names) else f"part-{part}.samples"
    role = int(c["role"])
    slot = int(c["slot"])
    if slot >= FIRST_FIELD_SLOT:
        fname = batch.field_names[slot - FIRST_FIELD_SLOT]
        col = f"field {fname!r} (id {int(c['column_id'])})"
    else:
        col = f"{ROLE_NAMES.get(role, role)} column"
    return (
        f"{batch.source}/{part_name} leaf {int(b['leaf'])} block {int(b['index'])} "
        f"(table {int(b['table_id'])}, tsid {int(b['tsid'])}, ordinal {int(b['ordinal'])}) {col}"
    )


def raise_for_flags(batch: ChunkBatch, flags: np.ndarray, detail: dict[int, str] | None = None) -> None:
    """Check the per-chunk flag words once; raise the error for the first bad chunk.

    ``detail`` may carry extra observed-vs-expected text keyed by chunk index.
    """
    if not np.count_nonzero(flags):  # (the common case: a count costs a fifth of a search)
        return
    bad = np.flatnonzero(flags)
    i = int(bad[0])
    f = DecodeErrorFlag(int(flags[i]))
    c = batch.chunks[i]
    rules = "; ".join(FLAG_RULES[x] for x in DecodeErrorFlag if x and x in f and x in FLAG_RULES)
    msg = (
        f"{describe_chunk(batch, i)}: decode failed [{f.describe()}]: {rules} "
        f"(encoding {int(c['encoding'])}, compression {int(c['compression'])}, "
        f"stored {int(c['stored_len'])} B, decoded {int(c['decoded_len'])} B, rows {int(c['rows'])}, "
        f"null_count {int(c['null_count'])})"
    )
    if detail and i in detail:
        msg += f": {detail[i]}"
    if bad.size > 1:
        msg += f"; {bad.size} chunks failed in this batch"
    err_cls = UnsupportedError if (f & ~UNSUPPORTED_FLAGS) == 0 else CorruptArtifactError
    err = err_cls(msg)
    err.flags = f  # type: ignore[attr-defined]
    err.chunk_flags = flags  # type: ignore[attr-defined]
    raise err
