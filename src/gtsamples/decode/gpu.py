"""GPU backend: ChunkBatch -> DeviceTable (CuPy columns), bit-identical to the CPU backend.

Pipeline for one batch (on CuPy's current stream; staged copies on a copy stream)::

    host   check_layout, precheck (XXH64 + Zstd frame structure, before nvCOMP)
           nvCOMP sub-batches (temp budget) and the H2D plan (plan_transfers)
    H2D    stored bytes (unless already on the device: ``device_data``): one
           pageable copy for small batches; else staged through a bounded,
           reused ring of pinned host slots on a copy stream, in segments
           that follow the nvCOMP sub-batches, with an event per segment
    host   build every device table (pure numpy) and upload it in ONE copy
    [hash] gts_xxh64 on the device when ``hash_on="device"`` (then one sync, so
           that no chunk with a bad checksum reaches nvCOMP)
    nvCOMP batched Zstd into one decoded buffer, sub-batched to a temp budget;
           sub-batch k waits only for the segment holding its frames, so the
           copy of sub-batch k+1's frames overlaps the decompression of k
           (large batches); gts_fold_nvcomp_status folds statuses / actual
           sizes into the per-chunk status words on the device
    decode one launch per column kind for the whole batch, one CUDA block per
           chunk: timestamps, sequences, op types, fields (+ omitted all-null
           fields as synthesized null-fill descriptors)
    trim   [start, end): gts_trim_ranges + gts_scan_blocks
    sync   ONE 16-byte copy: batch flag word + kept row count.  Flags set ->
           per-chunk status words come back and gtsamples.batch.raise_for_flags
           raises exactly what the CPU backend raises.
    trim   gts_compact_columns / gts_compact_masks when rows were dropped
    ident  gts_broadcast_identity (__table_id, __tsid) at the final placement

Everything before the first CuPy call is a pure function over numpy arrays so it
can be tested without a GPU.  Importing this module does not import CuPy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from typing import Any

import numpy as np

from ..batch import (
    FIRST_FIELD_SLOT,
    SLOT_OP_TYPE,
    SLOT_SEQUENCE,
    SLOT_TIMESTAMP,
    ChunkBatch,
    add_sequence_order_detail,
    block_chunks,
    raise_for_flags,
    sequence_continuations,
)
from ..errors import DecodeErrorFlag
from ..format.constants import COMP_ZSTD, MAX_BLOCK_ROWS
from ..frames_gpu import DeviceColumn, DeviceTable, mask_words
from . import nvcomp as _nv

__all__ = [
    "CHUNK_DESC_DTYPE",
    "BLOCK_DESC_DTYPE",
    "COPY_COL_DTYPE",
    "MASK_COL_DTYPE",
    "HASH_JOB_DTYPE",
    "SEQ_ORDER_DTYPE",
    "BatchLayoutError",
    "HostPlan",
    "check_layout",
    "build_host_plan",
    "fill_chunk_descs",
    "block_descs",
    "hash_jobs",
    "sequence_order_jobs",
    "pack_sections",
    "host_null_counts",
    "TransferPlan",
    "plan_transfers",
    "pinned_slot_size",
    "is_gpu_available",
    "decode_batch_gpu",
]

# ----------------------------------------------------------------------------- mirrors of kernels/gts_types.cuh

#: struct GtsChunk (72 bytes)
CHUNK_DESC_DTYPE = np.dtype(
    {
        "names": ["src", "dst", "mask", "out_row", "min_ts", "max_ts", "len", "rows", "null_count", "chunk",
                  "encoding", "pad0", "pad1"],
        "formats": ["<u8", "<u8", "<u8", "<u8", "<i8", "<i8", "<u4", "<u4", "<u4", "<u4", "<u2", "<u2", "<u4"],
        "offsets": [0, 8, 16, 24, 32, 40, 48, 52, 56, 60, 64, 66, 68],
        "itemsize": 72,
    }
)  # fmt: skip
#: struct GtsBlock (24 bytes)
BLOCK_DESC_DTYPE = np.dtype(
    {"names": ["out_row", "tsid", "table_id", "rows"], "formats": ["<u8", "<u8", "<u4", "<u4"],
     "offsets": [0, 8, 16, 20], "itemsize": 24}
)  # fmt: skip
#: struct GtsCopyCol (24 bytes)
COPY_COL_DTYPE = np.dtype(
    {"names": ["src", "dst", "elem_size", "pad"], "formats": ["<u8", "<u8", "<u4", "<u4"],
     "offsets": [0, 8, 16, 20], "itemsize": 24}
)  # fmt: skip
#: struct GtsMaskCol (16 bytes)
MASK_COL_DTYPE = np.dtype({"names": ["src", "dst"], "formats": ["<u8", "<u8"], "offsets": [0, 8], "itemsize": 16})
#: struct GtsHashJob (32 bytes)
HASH_JOB_DTYPE = np.dtype(
    {"names": ["src", "expected", "len", "chunk", "on_mismatch", "pad"],
     "formats": ["<u8", "<u8", "<u4", "<u4", "<u4", "<u4"], "offsets": [0, 8, 16, 20, 24, 28], "itemsize": 32}
)  # fmt: skip

#: struct GtsSeqOrder (32 bytes)
SEQ_ORDER_DTYPE = np.dtype(
    {"names": ["out_row", "rows", "seq_chunk", "ts_chunk", "prev_seq", "prev_ts", "pad"],
     "formats": ["<u8", "<u4", "<u4", "<u4", "<u4", "<u4", "<u4"], "offsets": [0, 8, 12, 16, 20, 24, 28],
     "itemsize": 32}
)  # fmt: skip

GTS_BLOCK = 256  # threads per CUDA block (GTS_BLOCK)
ENC_NULL_FILL = 0xFFFF  # GTS_ENC_NULL_FILL
NO_CHUNK = 0xFFFFFFFF  # GTS_NO_CHUNK
HASH_PAD = 16  # GTS_HASH_PAD: slack after the stored bytes for aligned 8-byte loads
DECODED_ALIGN = 16  # start of every decompressed chunk in the decoded buffer
SECTION_ALIGN = 16
GRID_CAP = 1 << 20  # grid-stride kernels never launch more blocks than this

#: Kernel kinds in launch order: (name, .cu file, kernel, slots predicate)
KIND_TIMESTAMP, KIND_SEQUENCE, KIND_OP_TYPE, KIND_FIELD = range(4)
_KIND_KERNELS = {
    KIND_TIMESTAMP: ("gts_timestamp.cu", "gts_decode_timestamps"),
    KIND_SEQUENCE: ("gts_sequence.cu", "gts_decode_sequences"),
    KIND_OP_TYPE: ("gts_optype.cu", "gts_decode_optypes"),
    KIND_FIELD: ("gts_float.cu", "gts_decode_floats"),
}


class BatchLayoutError(RuntimeError):
    """A ChunkBatch breaks the planner contract (a bug, not bad input)."""


# ----------------------------------------------------------------------------- host side (pure numpy)


def check_layout(batch: ChunkBatch) -> None:
    """The output placement the kernels rely on: blocks tile ``[0, n_rows)`` in
    order, every chunk belongs to a block and agrees with it, each block has
    exactly one timestamp chunk (and sequence / op chunks when wanted), at most
    one chunk per field slot."""
    ch, bl = batch.chunks, batch.blocks
    nb = len(bl)
    rows = bl["rows"].astype(np.uint64)
    if nb:
        start = np.zeros(nb, dtype=np.uint64)
        np.cumsum(rows[:-1], out=start[1:])
        if not np.array_equal(bl["out_row"].astype(np.uint64), start):
            raise BatchLayoutError("blocks do not tile the output rows in order")
        if (rows == 0).any() or (rows > MAX_BLOCK_ROWS).any():
            raise BatchLayoutError("block row count outside 1..8192")
    total = int(rows.sum()) if nb else 0
    if total != batch.n_rows:
        raise BatchLayoutError(f"n_rows {batch.n_rows} != sum of block rows {total}")
    if len(ch) == 0:
        if nb:
            raise BatchLayoutError("blocks without chunks")
        return
    b = ch["block"].astype(np.int64)
    if (b >= nb).any():
        raise BatchLayoutError("chunk refers to a missing block")
    if not np.array_equal(ch["out_row"], bl["out_row"][b]) or not np.array_equal(ch["rows"], bl["rows"][b]):
        raise BatchLayoutError("chunk placement disagrees with its block")
    slot = ch["slot"].astype(np.int64)
    if (slot >= batch.n_slots).any():
        raise BatchLayoutError("chunk slot outside the projection")
    key = b * batch.n_slots + slot
    if np.unique(key).size != key.size:
        raise BatchLayoutError("two chunks for one (block, slot)")
    need = [SLOT_TIMESTAMP]
    if batch.want_sequence:
        need.append(SLOT_SEQUENCE)
    if batch.want_op_type:
        need.append(SLOT_OP_TYPE)
    for s in need:
        if np.count_nonzero(slot == s) != nb:
            raise BatchLayoutError(f"not every block has a chunk for slot {s}")
    for s in (SLOT_SEQUENCE, SLOT_OP_TYPE):
        if s not in need and (slot == s).any():
            raise BatchLayoutError(f"chunk for unprojected slot {s}")
    # stored bytes outside batch.data are BAD_LENGTH (nvcomp.limit_and_codec_flags), as on the CPU


def _kind_of_slot(slot: np.ndarray) -> np.ndarray:
    return np.minimum(slot.astype(np.int64), KIND_FIELD)


@dataclasses.dataclass
class HostPlan:
    """Everything the device needs, computed on the host from the batch."""

    pre_flags: np.ndarray  # uint32 per chunk
    zstd: np.ndarray  # chunk indices handed to nvCOMP (compression 1, no pre-flag)
    dec_offset: np.ndarray  # uint64 per zstd entry: start in the decoded buffer
    decoded_bytes: int  # size of the decoded buffer
    # descriptor rows, grouped by kernel kind (ranges into the arrays below)
    desc_chunk: np.ndarray  # int64 chunk index, -1 = synthesized null fill
    desc_block: np.ndarray  # int64 block index
    desc_slot: np.ndarray  # int64 output slot
    kind_ranges: list[tuple[int, int]]  # per kind, [a, b) into desc_*
    null_counts: np.ndarray  # uint64 per projected field (before trimming)


def missing_field_slots(batch: ChunkBatch) -> tuple[np.ndarray, np.ndarray]:
    """(block, slot) pairs of projected fields without a chunk: all null."""
    nf = len(batch.field_names)
    nb = len(batch.blocks)
    have = np.zeros((nb, nf), dtype=bool)
    ch = batch.chunks
    f = ch["slot"].astype(np.int64) >= FIRST_FIELD_SLOT
    have[ch["block"][f].astype(np.int64), ch["slot"][f].astype(np.int64) - FIRST_FIELD_SLOT] = True
    blk, fld = np.nonzero(~have)
    return blk.astype(np.int64), fld.astype(np.int64) + FIRST_FIELD_SLOT


def host_null_counts(batch: ChunkBatch) -> np.ndarray:
    """Nulls per projected field before trimming: present chunks' null counts
    (checked against the bitmaps on the device) plus omitted chunks' rows."""
    nf = len(batch.field_names)
    out = np.zeros(nf, dtype=np.uint64)
    ch = batch.chunks
    f = ch["slot"].astype(np.int64) >= FIRST_FIELD_SLOT
    np.add.at(out, ch["slot"][f].astype(np.int64) - FIRST_FIELD_SLOT, ch["null_count"][f].astype(np.uint64))
    blk, slot = missing_field_slots(batch)
    np.add.at(out, slot - FIRST_FIELD_SLOT, batch.blocks["rows"][blk].astype(np.uint64))
    return out


def build_host_plan(batch: ChunkBatch, pre_flags: np.ndarray) -> HostPlan:
    ch = batch.chunks
    n = len(ch)
    zstd = np.flatnonzero((ch["compression"] == COMP_ZSTD) & (pre_flags == 0)) if n else np.zeros(0, np.int64)
    dec_offset, decoded_bytes = _nv.aligned_offsets(ch["decoded_len"][zstd].astype(np.uint64), DECODED_ALIGN)
    mblk, mslot = missing_field_slots(batch)
    idx = np.concatenate([np.arange(n, dtype=np.int64), np.full(mblk.size, -1, dtype=np.int64)])
    blk = np.concatenate([ch["block"].astype(np.int64), mblk])
    slot = np.concatenate([ch["slot"].astype(np.int64), mslot])
    kind = _kind_of_slot(slot)
    # kind-major; within a kind, file order (block, then slot): nearby chunks run together
    order = np.lexsort((slot, blk, kind))
    kinds_sorted = kind[order]
    bounds = np.searchsorted(kinds_sorted, np.arange(5))
    ranges = [(int(bounds[k]), int(bounds[k + 1])) for k in range(4)]
    return HostPlan(
        pre_flags=pre_flags.astype(np.uint32),
        zstd=zstd.astype(np.int64),
        dec_offset=dec_offset,
        decoded_bytes=decoded_bytes,
        desc_chunk=idx[order],
        desc_block=blk[order],
        desc_slot=slot[order],
        kind_ranges=ranges,
        null_counts=host_null_counts(batch),
    )


def chunk_source_addresses(batch: ChunkBatch, plan: HostPlan, stored_base: int, decoded_base: int) -> np.ndarray:
    """Device address of every chunk's decoded bytes: the decoded buffer for
    chunks nvCOMP decompresses, the stored bytes themselves otherwise (raw
    chunks; chunks that failed a pre-check point there too and are skipped)."""
    ch = batch.chunks
    src = np.uint64(stored_base) + ch["src_offset"].astype(np.uint64)
    src[plan.zstd] = np.uint64(decoded_base) + plan.dec_offset
    return src


def fill_chunk_descs(
    batch: ChunkBatch,
    plan: HostPlan,
    chunk_src: np.ndarray,
    column_addr: dict[int, int],
    mask_addr: dict[int, int],
) -> np.ndarray:
    """The GtsChunk table, rows in ``plan.desc_*`` order.

    ``chunk_src``: device address of each chunk's decoded bytes;
    ``column_addr[slot]``: device address of the slot's output row 0;
    ``mask_addr[slot]``: validity words of a field slot.
    """
    ch, bl = batch.chunks, batch.blocks
    nd = plan.desc_chunk.size
    d = np.zeros(nd, dtype=CHUNK_DESC_DTYPE)
    if nd == 0:
        return d
    real = plan.desc_chunk >= 0
    ci = plan.desc_chunk[real]
    blk = plan.desc_block
    slot = plan.desc_slot
    d["out_row"] = bl["out_row"][blk]
    d["rows"] = bl["rows"][blk]
    col = np.array([column_addr.get(s, 0) for s in range(batch.n_slots)], dtype=np.uint64)
    msk = np.array([mask_addr.get(s, 0) for s in range(batch.n_slots)], dtype=np.uint64)
    d["dst"] = col[slot]
    d["mask"] = msk[slot]
    d["src"][real] = chunk_src[ci]
    d["min_ts"][real] = ch["min_timestamp"][ci]  # the chunk's copy, as the CPU backend checks
    d["max_ts"][real] = ch["max_timestamp"][ci]
    d["len"][real] = ch["decoded_len"][ci]
    d["null_count"][real] = ch["null_count"][ci]
    d["null_count"][~real] = d["rows"][~real]
    d["encoding"][real] = ch["encoding"][ci]
    d["encoding"][~real] = ENC_NULL_FILL
    d["chunk"][real] = ci.astype(np.uint32)
    d["chunk"][~real] = NO_CHUNK
    return d


def block_descs(batch: ChunkBatch) -> np.ndarray:
    bl = batch.blocks
    d = np.zeros(len(bl), dtype=BLOCK_DESC_DTYPE)
    d["out_row"] = bl["out_row"]
    d["tsid"] = bl["tsid"]
    d["table_id"] = bl["table_id"]
    d["rows"] = bl["rows"]
    return d


def sequence_order_jobs(batch: ChunkBatch) -> np.ndarray:
    """GtsSeqOrder rows, one per block, for ``gts_check_sequence_order`` (none when
    sequences are not decoded): the rule and the chunks compared are those of the
    CPU backend (:func:`gtsamples.batch.flag_sequence_boundaries` across blocks)."""
    bl = batch.blocks
    if not batch.want_sequence or len(bl) == 0:
        return np.zeros(0, dtype=SEQ_ORDER_DTYPE)
    j = np.zeros(len(bl), dtype=SEQ_ORDER_DTYPE)
    j["out_row"] = bl["out_row"]
    j["rows"] = bl["rows"]
    seq_of, ts_of = block_chunks(batch, SLOT_SEQUENCE), block_chunks(batch, SLOT_TIMESTAMP)
    j["seq_chunk"] = seq_of.astype(np.uint32)
    j["ts_chunk"] = ts_of.astype(np.uint32)
    j["prev_seq"] = NO_CHUNK
    j["prev_ts"] = NO_CHUNK
    k, _sc, psc, _tc, ptc = sequence_continuations(batch)
    j["prev_seq"][k] = psc.astype(np.uint32)
    j["prev_ts"][k] = ptc.astype(np.uint32)
    return j[(seq_of >= 0) & (ts_of >= 0)]  # every block has both; never index status with -1


def hash_jobs(batch: ChunkBatch, stored_base: int) -> np.ndarray:
    """GtsHashJob rows for the chunks the CPU backend hashes (see
    :func:`gtsamples.decode.nvcomp.hash_mismatch_words`)."""
    ch = batch.chunks
    idx, on_mismatch = _nv.hash_mismatch_words(ch, len(batch.data))
    j = np.zeros(idx.size, dtype=HASH_JOB_DTYPE)
    j["src"] = np.uint64(stored_base) + ch["src_offset"][idx].astype(np.uint64)
    j["expected"] = ch["checksum"][idx]
    j["len"] = ch["stored_len"][idx]
    j["chunk"] = idx.astype(np.uint32)
    j["on_mismatch"] = on_mismatch
    return j


def nvcomp_jobs(batch: ChunkBatch, plan: HostPlan, chunk_src: np.ndarray, stored_base: int,
                subset: np.ndarray | None = None) -> _nv.ZstdJobs:  # fmt: skip
    z = plan.zstd if subset is None else subset
    ch = batch.chunks
    return _nv.ZstdJobs(
        src_ptr=np.uint64(stored_base) + ch["src_offset"][z].astype(np.uint64),
        src_bytes=ch["stored_len"][z].astype(np.uint64),
        dst_ptr=chunk_src[z].astype(np.uint64),
        declared=ch["decoded_len"][z].astype(np.uint64),
        chunk=z.astype(np.uint64),
    )


def pack_sections(sections: dict[str, np.ndarray], align: int = SECTION_ALIGN) -> tuple[np.ndarray, dict[str, tuple[int, int]]]:
    """Concatenate arrays into one aligned byte buffer for a single upload;
    returns the buffer and ``name -> (offset, nbytes)``."""
    layout: dict[str, tuple[int, int]] = {}
    off = 0
    for name, arr in sections.items():
        nbytes = int(arr.nbytes)
        layout[name] = (off, nbytes)
        off += (nbytes + align - 1) // align * align
    buf = np.zeros(max(off, align), dtype=np.uint8)
    for name, arr in sections.items():
        o, nbytes = layout[name]
        if nbytes:
            buf[o : o + nbytes] = np.ascontiguousarray(arr).view(np.uint8).reshape(-1)
    return buf, layout


def field_slot_names(batch: ChunkBatch) -> list[tuple[int, str]]:
    return [(FIRST_FIELD_SLOT + k, name) for k, name in enumerate(batch.field_names)]


# ----------------------------------------------------------------------------- H2D planning (pure numpy)

#: Largest piece copied through one pinned staging slot (and the slot size cap).
PINNED_SLOT_BYTES = 32 << 20
#: Pinned slots per device, reused across calls: at most
#: ``PINNED_MAX_SLOTS * PINNED_SLOT_BYTES`` (128 MiB) of page-locked host memory.
PINNED_MAX_SLOTS = 4
#: Stored bytes below which one plain (pageable) copy is used: pinning does not pay.
PINNED_MIN_BYTES = 4 << 20
#: Stored bytes below which H2D is not overlapped with nvCOMP (one wait before it).
OVERLAP_MIN_BYTES = 64 << 20
#: Smallest copy segment when overlapping (smaller ones merge with the next).
MIN_SEGMENT_BYTES = 8 << 20
_MIB = 1 << 20

#: ``decode_batch_gpu(h2d=...)`` choices
H2D_MODES = ("auto", "pageable", "pinned", "overlap")


@dataclasses.dataclass
class TransferPlan:
    """How ``batch.data`` reaches the device.

    The bytes are cut into ``segments`` (contiguous, in order, covering
    ``[0, data_len)``); each segment is copied as one or more ``pieces`` (at
    most one pinned slot each) on a copy stream, and an event is recorded after
    its last piece.  nvCOMP sub-batch ``k`` waits for segment ``wait[k]``
    (every frame it reads lies below that segment's end); everything after
    nvCOMP waits for the last segment.
    """

    segments: np.ndarray  # int64 (m, 2) [lo, hi); m >= 1
    pieces: np.ndarray  # int64 (p, 2) [lo, hi), copy order
    piece_segment: np.ndarray  # int64 (p,) segment of each piece
    wait: np.ndarray  # int64 per nvCOMP sub-batch: the segment it waits for
    pinned: bool  # staged through pinned slots (else one pageable copy)
    overlap: bool  # more than one segment, sub-batches wait for their own
    slot_bytes: int  # size of the pinned slots this plan uses (0: not pinned)
    n_slots: int  # pinned slots used in rotation (0: not pinned)

    @property
    def nbytes(self) -> int:
        return int(self.segments[-1, 1]) if len(self.segments) else 0


def subbatch_byte_needs(job_hi: np.ndarray, subbatches: list[tuple[int, int]]) -> np.ndarray:
    """For each nvCOMP sub-batch, the end of the stored bytes it reads: every
    earlier segment must have arrived too (copies are in order), so this is the
    running maximum of each sub-batch's largest frame end."""
    if not subbatches:
        return np.zeros(0, dtype=np.int64)
    job_hi = np.asarray(job_hi, dtype=np.int64)
    starts = np.array([a for a, _ in subbatches], dtype=np.int64)
    need = np.maximum.reduceat(job_hi, starts)
    return np.maximum.accumulate(need)


def pinned_slot_size(max_piece: int, slot_bytes: int | None = None) -> int:
    """Pinned slot size for pieces of at most ``max_piece`` bytes: rounded up to
    1 MiB (slots are reused by later, slightly larger batches), capped at
    ``slot_bytes``."""
    cap = PINNED_SLOT_BYTES if slot_bytes is None else int(slot_bytes)
    if max_piece <= 0:
        return 0
    return int(max(max_piece, min(cap, -(-max_piece // _MIB) * _MIB)))


def plan_transfers(
    data_len: int,
    job_lo: np.ndarray,
    job_hi: np.ndarray,
    subbatches: list[tuple[int, int]],
    mode: str = "auto",
    *,
    slot_bytes: int | None = None,
    max_slots: int | None = None,
    pinned_min: int | None = None,
    overlap_min: int | None = None,
    min_segment: int | None = None,
) -> TransferPlan:
    """Plan the H2D copy of ``batch.data`` (``data_len`` bytes).

    ``job_lo`` / ``job_hi``: stored byte range of each nvCOMP job, in job
    order; ``subbatches``: the nvCOMP sub-batches ``[a, b)`` over the jobs.
    ``mode``: ``"auto"`` (pinned from :data:`PINNED_MIN_BYTES`, overlapped
    from :data:`OVERLAP_MIN_BYTES` with at least two sub-batches),
    ``"pageable"`` (one plain copy), ``"pinned"`` (staged, no overlap),
    ``"overlap"`` (staged, overlapped whenever there are two sub-batches).
    Module constants are the defaults of the keyword limits.
    """
    if mode not in H2D_MODES:
        raise ValueError(f"h2d must be one of {H2D_MODES}, not {mode!r}")
    slot_bytes = PINNED_SLOT_BYTES if slot_bytes is None else int(slot_bytes)
    max_slots = PINNED_MAX_SLOTS if max_slots is None else int(max_slots)
    pinned_min = PINNED_MIN_BYTES if pinned_min is None else int(pinned_min)
    overlap_min = OVERLAP_MIN_BYTES if overlap_min is None else int(overlap_min)
    min_segment = MIN_SEGMENT_BYTES if min_segment is None else int(min_segment)
    if slot_bytes < 1 or max_slots < 1:
        raise ValueError("slot_bytes and max_slots must be positive")
    data_len = int(data_len)
    n_sub = len(subbatches)
    if mode == "auto":
        pinned = data_len >= pinned_min
        overlap = pinned and data_len >= overlap_min
    else:
        pinned = mode in ("pinned", "overlap")
        overlap = mode == "overlap"
    pinned = pinned and data_len > 0
    overlap = overlap and pinned and n_sub >= 2

    ends: list[int] = []
    if overlap:
        cut = np.minimum(subbatch_byte_needs(job_hi, subbatches), data_len)
        start = 0
        for c in np.unique(cut).tolist():
            if c - start >= max(min_segment, 1):
                ends.append(int(c))
                start = int(c)
        if data_len > start:
            if ends and data_len - start < min_segment:
                ends[-1] = data_len  # a small tail joins the last segment: one transfer fewer
            else:
                ends.append(data_len)
    if not ends:
        ends = [data_len]
    e = np.array(ends, dtype=np.int64)
    segments = np.stack([np.concatenate([[0], e[:-1]]), e], axis=1)
    if n_sub and len(segments) > 1:
        cut = subbatch_byte_needs(job_hi, subbatches)
        wait = np.minimum(np.searchsorted(e, cut, side="left"), len(e) - 1).astype(np.int64)
    else:
        wait = np.full(n_sub, len(segments) - 1, dtype=np.int64)

    pieces, owner = [], []
    for k, (lo, hi) in enumerate(segments.tolist()):
        if hi <= lo:
            continue
        n = -(-(hi - lo) // slot_bytes) if pinned else 1
        cuts = lo + ((hi - lo) * np.arange(n + 1, dtype=np.int64)) // n
        pieces.append(np.stack([cuts[:-1], cuts[1:]], axis=1))
        owner.append(np.full(n, k, dtype=np.int64))
    pieces_a = np.concatenate(pieces) if pieces else np.zeros((0, 2), dtype=np.int64)
    owner_a = np.concatenate(owner) if owner else np.zeros(0, dtype=np.int64)
    max_piece = int((pieces_a[:, 1] - pieces_a[:, 0]).max()) if len(pieces_a) else 0
    return TransferPlan(
        segments=segments,
        pieces=pieces_a,
        piece_segment=owner_a,
        wait=wait,
        pinned=pinned,
        overlap=len(segments) > 1,
        slot_bytes=pinned_slot_size(max_piece, slot_bytes) if pinned else 0,
        n_slots=min(max_slots, len(pieces_a)) if pinned else 0,
    )


# ----------------------------------------------------------------------------- availability


def is_gpu_available(require_nvcomp: bool = True) -> bool:
    """True when CuPy sees a CUDA device (and libnvcomp loads, by default)."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return False
    except Exception:
        return False
    if require_nvcomp:
        try:
            _nv.load_nvcomp()
        except Exception:
            return False
    return True


# ----------------------------------------------------------------------------- device driver


class _Timer:
    """CUDA events between stages (only when timings are requested)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.marks: list[tuple[str, Any]] = []
        self.host: dict[str, float] = {}
        self.spans: list[tuple[str, Any, Any]] = []
        if enabled:
            self.mark("start")

    def mark(self, name: str) -> None:
        if self.enabled:
            import cupy as cp

            ev = cp.cuda.Event()
            ev.record()
            self.marks.append((name, ev))

    def span(self, name: str, start, end) -> None:
        """A stage timed by two events recorded elsewhere (e.g. on the copy stream)."""
        if self.enabled and start is not None and end is not None:
            self.spans.append((name, start, end))

    @contextlib.contextmanager
    def host_stage(self, name: str):
        t = time.perf_counter()
        yield
        if self.enabled:
            self.host[name] = self.host.get(name, 0.0) + (time.perf_counter() - t) * 1e3

    def result(self) -> dict[str, float]:
        if not self.enabled:
            return {}
        import cupy as cp

        self.marks[-1][1].synchronize()
        out = dict(("host_" + k, v) for k, v in self.host.items())
        for (_, a), (name, b) in zip(self.marks, self.marks[1:]):
            out[name] = out.get(name, 0.0) + cp.cuda.get_elapsed_time(a, b)
        out["total_device"] = cp.cuda.get_elapsed_time(self.marks[0][1], self.marks[-1][1])
        for name, a, b in self.spans:
            b.synchronize()
            out[name] = out.get(name, 0.0) + cp.cuda.get_elapsed_time(a, b)
        return out


def _launch_grid(n: int) -> int:
    return max(1, min(n, GRID_CAP))


class CupyDevice:
    """What the driver needs from a device: CuPy on the current CUDA device.

    (A test double with the same methods runs the driver and the kernels on
    the host: tests/kernels/emu.)"""

    def __init__(self):
        import cupy

        self.cp = cupy

    def empty(self, n: int, dtype):
        return self.cp.empty(n, dtype=dtype)

    def zeros(self, n: int, dtype):
        return self.cp.zeros(n, dtype=dtype)

    def filled(self, n: int, dtype, byte: int):
        return self.cp.full(n * np.dtype(dtype).itemsize, byte & 0xFF, dtype=np.uint8).view(dtype)

    def upload(self, host: np.ndarray):
        return self.cp.asarray(host)

    def copy_in(self, dev, host: np.ndarray) -> None:
        dev.set(host)

    def to_host(self, dev) -> np.ndarray:
        return dev.get()

    @staticmethod
    def ptr(dev) -> int:
        return int(dev.data.ptr)

    def kernel(self, file: str, name: str):
        from .kernels import get_kernel

        return get_kernel(file, name)

    def zstd_input_alignment(self) -> int:
        return _nv.load_nvcomp().alignment[0]

    def zstd_plan(self, declared: np.ndarray, temp_budget: int) -> list[tuple[int, int]]:
        """nvCOMP sub-batches for these declared sizes (host only)."""
        return _nv.BatchedZstdDecompressor(temp_budget=temp_budget).plan(declared)

    def zstd(self, jobs: _nv.ZstdJobs, table, temp_budget: int, plan=None, before=None):
        """Enqueue nvCOMP over ``jobs``; ``(statuses, actual sizes)`` stay on the device.
        ``before(k)`` runs before sub-batch ``k`` of ``plan`` is enqueued."""
        return _nv.BatchedZstdDecompressor(temp_budget=temp_budget).run(jobs, device_table=table, plan=plan,
                                                                         before=before)  # fmt: skip

    def stage_h2d(self, dst, host: np.ndarray, tp: TransferPlan, timing: bool = False):
        """Copy ``host`` into ``dst`` as ``tp`` says, through the pooled pinned
        slots, on this device's copy stream.  Returns ``(events, span)``: one
        event per segment (the current stream waits on them with :meth:`wait`)
        and the timed ``(start, end)`` events of all copies when ``timing``."""
        return _staging(self.cp).copy(self.ptr(dst), host, tp, timing)

    def wait(self, event) -> None:
        """The current stream waits for ``event`` (a staged copy); no-op for None."""
        if event is not None:
            self.cp.cuda.get_current_stream().wait_event(event)

    def timer(self, enabled: bool) -> "_Timer":
        return _Timer(enabled)


class _Slot:
    __slots__ = ("mem", "arr", "event")

    def __init__(self, mem, arr):
        self.mem, self.arr, self.event = mem, arr, None


class PinnedStaging:
    """Page-locked staging for host -> device copies, one per device.

    A bounded ring of pinned slots (``TransferPlan.n_slots`` of
    ``TransferPlan.slot_bytes``, at most :data:`PINNED_MAX_SLOTS` x
    :data:`PINNED_SLOT_BYTES`), reused across calls and threads.  Piece ``i``
    goes through slot ``i % n_slots``: the host waits for the event of the copy
    that last read that slot, copies the bytes in (numpy memcpy) and enqueues
    ``cudaMemcpyAsync`` on a non-blocking copy stream, so filling one slot
    overlaps the DMA of the previous one, and both overlap kernels on the
    compute stream.  Before its first copy the copy stream waits for the
    compute stream (the destination may be memory that stream just freed).
    """

    def __init__(self, cp):
        self.cp = cp
        self.lock = threading.Lock()
        self.slots: list[_Slot | None] = []
        self.stream = cp.cuda.Stream(non_blocking=True)

    def _slot(self, k: int, nbytes: int) -> _Slot:
        while len(self.slots) <= k:
            self.slots.append(None)
        s = self.slots[k]
        if s is None or s.arr.size < nbytes:
            if s is not None and s.event is not None:
                s.event.synchronize()
            mem = self.cp.cuda.alloc_pinned_memory(nbytes)
            s = _Slot(mem, np.frombuffer(mem, np.uint8, nbytes))
            self.slots[k] = s
        return s

    def copy(self, dst_ptr: int, host: np.ndarray, tp: TransferPlan, timing: bool = False):
        cp = self.cp
        rt = cp.cuda.runtime
        host = np.ascontiguousarray(host, dtype=np.uint8).reshape(-1)
        events: list[Any] = [None] * len(tp.segments)
        span = None
        with self.lock:
            ready = cp.cuda.Event(disable_timing=True)
            ready.record(cp.cuda.get_current_stream())
            self.stream.wait_event(ready)
            if timing:
                t0 = cp.cuda.Event()
                t0.record(self.stream)
            last_of = {int(seg): i for i, seg in enumerate(tp.piece_segment.tolist())}
            for i, (lo, hi) in enumerate(tp.pieces.tolist()):
                s = self._slot(i % tp.n_slots, tp.slot_bytes)
                if s.event is not None:
                    s.event.synchronize()  # the DMA that last read this slot is done
                n = hi - lo
                s.arr[:n] = host[lo:hi]
                rt.memcpyAsync(dst_ptr + lo, s.arr.ctypes.data, n, rt.memcpyHostToDevice, self.stream.ptr)
                ev = cp.cuda.Event(disable_timing=True)
                ev.record(self.stream)
                s.event = ev
                seg = int(tp.piece_segment[i])
                if last_of[seg] == i:
                    events[seg] = ev
            if timing:
                t1 = cp.cuda.Event()
                t1.record(self.stream)
                span = (t0, t1)
        return events, span


_STAGING: dict[int, PinnedStaging] = {}
_STAGING_LOCK = threading.Lock()


def _staging(cp) -> PinnedStaging:
    dev = cp.cuda.Device().id
    with _STAGING_LOCK:
        st = _STAGING.get(dev)
        if st is None:
            st = _STAGING[dev] = PinnedStaging(cp)
        return st


def _allocate(dev, n: int, dtype, poison: int | None):
    return dev.empty(n, dtype) if poison is None else dev.filled(n, dtype, poison)


def reclassify_zstd_failures(batch: ChunkBatch, jobs: _nv.ZstdJobs, st: np.ndarray, actual: np.ndarray,
                             flags: np.ndarray) -> dict[int, str]:  # fmt: skip
    """Error path only: a chunk nvCOMP failed on (bad status or wrong size) gets
    the flag the CPU backend's decompressor gives it (zstandard decides
    ``ZSTD_DECOMPRESS_FAILED`` vs ``DECODED_LENGTH_MISMATCH``), so both backends
    raise alike.  Updates ``flags`` in place; returns message details."""
    failed = np.flatnonzero((st != _nv.NVCOMP_SUCCESS) | (actual != jobs.declared))
    detail: dict[int, str] = {}
    if failed.size == 0:
        return detail
    import zstandard

    from .cpu import decompress_chunk  # the CPU backend's exact classification

    dctx = zstandard.ZstdDecompressor()
    mv = memoryview(np.ascontiguousarray(batch.data, dtype=np.uint8))
    ch = batch.chunks
    for k in failed.tolist():
        i = int(jobs.chunk[k])
        o, n = int(ch["src_offset"][i]), int(ch["stored_len"][i])
        _, f, msg = decompress_chunk(mv[o : o + n], int(ch["decoded_len"][i]), dctx=dctx, detail=True)
        nv = f"nvCOMP status {int(st[k])} ({_nv.NVCOMP_STATUS_NAMES.get(int(st[k]), '?')}), {int(actual[k])} bytes"
        if f:
            flags[i] = f
            detail[i] = f"{msg}; {nv}"
        else:  # zstandard decodes it: nvCOMP cannot; keep nvCOMP's verdict
            detail[i] = f"{nv}; the CPU decompressor accepts this frame"
    return detail


def decode_batch_gpu(
    batch: ChunkBatch,
    *,
    timestamp_name: str | None = None,
    timestamp_unit: str | None = None,
    hash_on: str = "host",
    temp_budget: int = _nv.DEFAULT_TEMP_BUDGET,
    device_data: Any = None,
    poison: int | None = None,
    timings: bool = False,
    h2d: str = "auto",
    _device: Any = None,
) -> DeviceTable:
    """Decode every chunk of ``batch`` on the current CUDA device; trim to
    ``[start, end)`` when the batch says so.

    ``timestamp_name`` / ``timestamp_unit`` name the timestamp column (default
    ``"timestamp"`` / ``"nanosecond"``; ``DeviceTable.to_cudf(manifest, ...)``
    renames it from the manifest).  ``hash_on``: ``"host"`` (xxhash on the
    CPU) or ``"device"`` (the gts_xxh64 kernel).  ``device_data``: the batch's
    stored bytes already on the device (CuPy uint8, ``len(data) + 16`` bytes at
    least).  ``poison``: fill byte of every output buffer (tests prove every
    element is written).  ``timings``: record stage times (ms) in
    ``DeviceTable.timings`` (``h2d_copy``: the staged copies on the copy
    stream).  ``h2d``: how the stored bytes reach the device
    (:func:`plan_transfers`): ``"auto"`` stages them through pooled pinned
    memory from :data:`PINNED_MIN_BYTES` and, from :data:`OVERLAP_MIN_BYTES`
    with more than one nvCOMP sub-batch, overlaps the copy of sub-batch
    ``k + 1``'s frames with the decompression of sub-batch ``k``.

    Raises what the CPU backend raises for the same batch
    (:func:`gtsamples.batch.raise_for_flags`, same class and flags).
    """
    if hash_on not in ("host", "device"):
        raise ValueError("hash_on must be 'host' or 'device'")
    if h2d not in H2D_MODES:
        raise ValueError(f"h2d must be one of {H2D_MODES}, not {h2d!r}")
    dev = _device if _device is not None else CupyDevice()
    timer = dev.timer(timings)
    ts_name = timestamp_name or getattr(batch, "timestamp_name", None) or "timestamp"
    unit = timestamp_unit or getattr(batch, "timestamp_unit", None) or "nanosecond"
    unit = {"second": "s", "millisecond": "ms", "microsecond": "us", "nanosecond": "ns"}.get(unit, unit)

    with timer.host_stage("layout"):
        check_layout(batch)
    ch = batch.chunks
    n_chunks, n_blocks, n_rows = len(ch), len(batch.blocks), int(batch.n_rows)
    with timer.host_stage("precheck"):
        pre = _nv.precheck(ch, batch.data, checksums=(hash_on == "host"))
        plan = build_host_plan(batch, pre)

    # ---- nvCOMP sub-batches and the H2D plan (host only)
    data_len = len(batch.data)
    with timer.host_stage("transfer_plan"):
        z_lo = ch["src_offset"][plan.zstd].astype(np.int64)
        z_hi = z_lo + ch["stored_len"][plan.zstd].astype(np.int64)
        z_align = dev.zstd_input_alignment() if plan.zstd.size else 1
        repack = bool(plan.zstd.size) and _nv.stored_chunks_need_repack(z_lo.astype(np.uint64), z_align)
        z_declared = ch["decoded_len"][plan.zstd].astype(np.uint64)
        subbatches = dev.zstd_plan(z_declared, temp_budget) if plan.zstd.size else []
        # overlap only when nvCOMP reads the staged bytes sub-batch by sub-batch
        # (device hashing and repacked frames need every byte first)
        can_overlap = hash_on == "host" and not repack and device_data is None
        tplan = plan_transfers(data_len, z_lo, z_hi, subbatches if can_overlap else [], h2d)
    events: list[Any] = [None]

    # ---- device buffers
    if device_data is None:
        d_stored = dev.empty(data_len + HASH_PAD, np.uint8)
        d_stored[data_len:] = 0
        if data_len and tplan.pinned:
            events, span = dev.stage_h2d(d_stored, batch.data, tplan, timing=bool(getattr(timer, "enabled", False)))
            if span is not None:
                timer.span("h2d_copy", *span)
        elif data_len:
            dev.copy_in(d_stored[:data_len], np.ascontiguousarray(batch.data, dtype=np.uint8))
    else:
        d_stored = device_data
        if d_stored.size < len(batch.data) + HASH_PAD:
            raise ValueError("device_data must hold the stored bytes plus 16 bytes of padding")
    timer.mark("h2d")
    d_decoded = dev.empty(max(plan.decoded_bytes, 16), np.uint8)
    cols: dict[int, Any] = {SLOT_TIMESTAMP: _allocate(dev, n_rows, np.int64, poison)}
    if batch.want_sequence:
        cols[SLOT_SEQUENCE] = _allocate(dev, n_rows, np.uint64, poison)
    if batch.want_op_type:
        cols[SLOT_OP_TYPE] = _allocate(dev, n_rows, np.uint8, poison)
    masks: dict[int, Any] = {}
    for slot, _ in field_slot_names(batch):
        cols[slot] = _allocate(dev, n_rows, np.float64, poison)
        masks[slot] = dev.zeros(mask_words(n_rows), np.uint32)

    # ---- every table, one upload
    stored_base = dev.ptr(d_stored)
    with timer.host_stage("tables"):
        chunk_src = chunk_source_addresses(batch, plan, stored_base, dev.ptr(d_decoded))
        descs = fill_chunk_descs(
            batch, plan, chunk_src,
            {s: dev.ptr(a) for s, a in cols.items()}, {s: dev.ptr(m) for s, m in masks.items()},
        )  # fmt: skip
        jobs = nvcomp_jobs(batch, plan, chunk_src, stored_base)
        sections = {
            "descs": descs,
            "blocks": block_descs(batch),
            "status": plan.pre_flags,
            "summary": np.array([int(np.bitwise_or.reduce(plan.pre_flags)) if n_chunks else 0, n_rows], np.uint64),
            "nvcomp": _nv.pointer_table(jobs.src_ptr, jobs.src_bytes, jobs.dst_ptr, jobs.declared, jobs.chunk),
        }
        if hash_on == "device":
            sections["hash"] = hash_jobs(batch, stored_base)
        order_jobs = sequence_order_jobs(batch)
        if len(order_jobs):
            sections["seqorder"] = order_jobs
        host_buf, layout = pack_sections(sections)
    d_tables = dev.upload(host_buf)  # every table, one copy

    def section(name: str, dtype) -> Any:
        o, nbytes = layout[name]
        return d_tables[o : o + nbytes].view(dtype)

    d_status = section("status", np.uint32)
    d_summary = section("summary", np.uint64)
    d_blocks = section("blocks", np.uint8)
    d_nv = section("nvcomp", np.uint64)
    timer.mark("upload")

    # ---- checksums on the device (then one sync: no bad checksum reaches nvCOMP)
    n_hash = len(sections.get("hash", ()))
    if n_hash:
        dev.wait(events[-1])  # every stored byte
        k = dev.kernel("gts_xxh64.cu", "gts_xxh64")
        k(((4 * n_hash + GTS_BLOCK - 1) // GTS_BLOCK,), (GTS_BLOCK,),
          (section("hash", np.uint8), np.uint32(n_hash), d_status, d_summary))  # fmt: skip
        bad = dev.to_host(d_status) != 0
        if len(jobs) and bad[plan.zstd].any():
            jobs = nvcomp_jobs(batch, plan, chunk_src, stored_base, subset=plan.zstd[~bad[plan.zstd]])
            d_nv = dev.upload(_nv.pointer_table(jobs.src_ptr, jobs.src_bytes, jobs.dst_ptr, jobs.declared, jobs.chunk))
            subbatches = dev.zstd_plan(jobs.declared, temp_budget) if len(jobs) else []
        timer.mark("hash")

    # ---- nvCOMP, statuses folded into the status words on the device
    nv_out = None
    if len(jobs):
        n_jobs = len(jobs)
        src_off = jobs.src_ptr - np.uint64(stored_base)
        if repack:
            # this libnvcomp wants aligned inputs: repack the frames (host copy, one upload)
            offs, total = _nv.aligned_offsets(jobs.src_bytes, z_align)
            packed = np.zeros(max(total, 1), np.uint8)
            for o, so, nb in zip(offs.tolist(), src_off.tolist(), jobs.src_bytes.tolist()):
                packed[o : o + nb] = batch.data[so : so + nb]
            d_packed = dev.upload(packed)
            jobs = dataclasses.replace(jobs, src_ptr=np.uint64(dev.ptr(d_packed)) + offs)
            d_nv = dev.upload(_nv.pointer_table(jobs.src_ptr, jobs.src_bytes, jobs.dst_ptr, jobs.declared, jobs.chunk))
        if tplan.overlap:
            # sub-batch k starts once the segment holding its frames has arrived;
            # the copies of later segments continue on the copy stream meanwhile
            def before(k: int) -> None:
                dev.wait(events[int(tplan.wait[k])])

            nv_out = dev.zstd(jobs, d_nv, temp_budget, plan=subbatches, before=before)
        else:
            dev.wait(events[-1])
            nv_out = dev.zstd(jobs, d_nv, temp_budget, plan=subbatches)
        tab = d_nv.reshape(len(_nv.TABLE_ROWS), n_jobs)
        dev.kernel("gts_status.cu", "gts_fold_nvcomp_status")(
            (_launch_grid((n_jobs + GTS_BLOCK - 1) // GTS_BLOCK),), (GTS_BLOCK,),
            (tab[_nv.TABLE_ROWS.index("chunk")], tab[_nv.TABLE_ROWS.index("dst_capacity")], nv_out[1], nv_out[0],
             np.uint32(n_jobs), d_status, d_summary),
        )  # fmt: skip
    dev.wait(events[-1])  # the column kernels read raw chunks from the stored bytes
    timer.mark("nvcomp")

    # ---- decode kernels, one launch per column kind for the whole batch
    d_descs = section("descs", np.uint8)
    for kind, (a, b) in enumerate(plan.kind_ranges):
        if b > a:
            fname, kname = _KIND_KERNELS[kind]
            dev.kernel(fname, kname)((b - a,), (GTS_BLOCK,),
                                     (d_descs[a * CHUNK_DESC_DTYPE.itemsize :], d_status, d_summary))  # fmt: skip
    if len(order_jobs):  # after every sequence chunk is written
        dev.kernel("gts_sequence.cu", "gts_check_sequence_order")(
            (_launch_grid(len(order_jobs)),), (GTS_BLOCK,),
            (section("seqorder", np.uint8), np.uint32(len(order_jobs)), cols[SLOT_TIMESTAMP], cols[SLOT_SEQUENCE],
             d_status, d_summary),
        )  # fmt: skip
    timer.mark("decode")

    # ---- trimming, part 1: each block's kept range, placement, kept total -> summary[1]
    trimming = batch.needs_trim and n_blocks > 0
    if trimming:
        keep_lo = dev.empty(n_blocks, np.uint32)
        keep_n = dev.empty(n_blocks, np.uint64)
        new_out = dev.empty(n_blocks, np.uint64)
        dev.kernel("gts_trim.cu", "gts_trim_ranges")(
            (_launch_grid((n_blocks + GTS_BLOCK - 1) // GTS_BLOCK),), (GTS_BLOCK,),
            (d_blocks, np.uint32(n_blocks), cols[SLOT_TIMESTAMP],
             np.uint32(batch.start is not None), np.int64(0 if batch.start is None else batch.start),
             np.uint32(batch.end is not None), np.int64(0 if batch.end is None else batch.end),
             keep_lo, keep_n),
        )  # fmt: skip
        dev.kernel("gts_trim.cu", "gts_scan_blocks")((1,), (GTS_BLOCK,), (keep_n, np.uint32(n_blocks), new_out, d_summary))
        timer.mark("trim")
    ident = dev.kernel("gts_identity.cu", "gts_broadcast_identity")
    null = np.uint64(0)

    def identity(n_out: int, placement: tuple) -> tuple[Any, Any]:
        tid = _allocate(dev, n_out, np.uint32, poison)
        tsid = _allocate(dev, n_out, np.uint64, poison)
        if n_blocks and n_out:
            ident((_launch_grid(n_blocks),), (GTS_BLOCK,), (d_blocks, np.uint32(n_blocks), *placement, tid, tsid))
        return tid, tsid

    if not trimming:
        table_id, tsid = identity(n_rows, (null, null))

    # ---- the one check per batch: flag word + kept rows in one 16-byte copy
    summary = dev.to_host(d_summary)
    if summary[0]:
        flags = dev.to_host(d_status).copy()
        detail = None
        if nv_out is not None:
            detail = reclassify_zstd_failures(batch, jobs, dev.to_host(nv_out[0]), dev.to_host(nv_out[1]), flags)
        if (flags & np.uint32(DecodeErrorFlag.SEQUENCE_ORDER)).any():
            detail = dict(detail or {})
            add_sequence_order_detail(batch, flags, detail, cols[SLOT_TIMESTAMP], cols[SLOT_SEQUENCE])
        raise_for_flags(batch, flags, detail or None)
    null_counts = plan.null_counts

    # ---- trimming, part 2: compaction (only when rows were dropped)
    if trimming:
        kept = int(summary[1])
        if kept == n_rows:
            table_id, tsid = identity(n_rows, (null, null))
        else:
            n_rows = kept
            new_cols = {s: _allocate(dev, n_rows, a.dtype, poison) for s, a in cols.items()}
            new_masks = {s: dev.zeros(mask_words(n_rows), np.uint32) for s in masks}
            table_id, tsid = identity(n_rows, (new_out, keep_n))
            null_counts = np.zeros(len(masks), dtype=np.uint64)
            if n_rows:
                cc = np.zeros(len(cols), dtype=COPY_COL_DTYPE)
                for i, s in enumerate(cols):
                    cc[i] = (dev.ptr(cols[s]), dev.ptr(new_cols[s]), cols[s].dtype.itemsize, 0)
                grid_x = _launch_grid(n_blocks)
                d_cc = dev.upload(cc.view(np.uint8))
                dev.kernel("gts_trim.cu", "gts_compact_columns")(
                    (grid_x, len(cols)), (GTS_BLOCK,), (d_blocks, np.uint32(n_blocks), keep_lo, keep_n, new_out, d_cc)
                )
                if masks:
                    mc = np.zeros(len(masks), dtype=MASK_COL_DTYPE)
                    for i, s in enumerate(masks):
                        mc[i] = (dev.ptr(masks[s]), dev.ptr(new_masks[s]))
                    valid = dev.zeros(len(masks), np.uint64)
                    d_mc = dev.upload(mc.view(np.uint8))
                    dev.kernel("gts_trim.cu", "gts_compact_masks")(
                        (grid_x, len(masks)), (GTS_BLOCK,),
                        (d_blocks, np.uint32(n_blocks), keep_lo, keep_n, new_out, d_mc, valid),
                    )  # fmt: skip
                    null_counts = np.uint64(n_rows) - dev.to_host(valid)
            cols, masks = new_cols, new_masks
        timer.mark("compact")

    # ---- assembly
    out = [
        DeviceColumn("__table_id", "uint32", table_id),
        DeviceColumn("__tsid", "uint64", tsid),
        DeviceColumn(ts_name, f"timestamp[{unit}]", cols[SLOT_TIMESTAMP]),
    ]
    if batch.want_sequence:
        out.append(DeviceColumn("__sequence", "uint64", cols[SLOT_SEQUENCE]))
    if batch.want_op_type:
        out.append(DeviceColumn("__op_type", "uint8", cols[SLOT_OP_TYPE]))
    for k, (slot, name) in enumerate(field_slot_names(batch)):
        out.append(DeviceColumn(name, "float64", cols[slot], mask=masks[slot], null_count=int(null_counts[k]),
                                nullable=True))  # fmt: skip
    timer.mark("assembly")
    return DeviceTable(out, n_rows, timings=timer.result())
