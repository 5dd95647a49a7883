"""GPU backend: ChunkBatch -> DeviceTable (CuPy columns), bit-identical to the CPU backend.

Pipeline for one batch (on CuPy's current stream; staged copies on a copy stream)::

    host   check_layout; the checks that need no payload byte (lengths, codecs);
           nvCOMP sub-batches and the H2D plan (plan_transfers)
    H2D    stored bytes (unless already on the device: ``device_data``), from a
           background thread: one pageable copy for small batches; else through
           a bounded, reused ring of pinned host slots filled by several threads
           (or straight from a pooled page-locked buffer the fetch landed in:
           gpu_fetch), in segments with an event each; a fetch in groups
           (``fetch``) is copied group by group as it arrives
    host   meanwhile: every device table that needs no payload byte, one upload;
           then (the bytes on the host) the Zstd frame check (and XXH64 with
           ``hash_on="host"``); frames whose decoded size the headers do not
           prove are decompressed here as the CPU backend does, never by nvCOMP;
           status words and the nvCOMP table, one upload
    [hash] gts_xxh64 on the device (the default ``hash_on="device"``; then one
           sync, so that no chunk with a bad checksum reaches nvCOMP)
    nvCOMP batched Zstd into one decoded buffer (with slack at its end),
           sub-batched to a temp budget; with host hashing, sub-batch k waits
           only for the segment holding its frames, so the copy of sub-batch
           k+1's frames overlaps the decompression of k (large batches);
           gts_fold_nvcomp_status folds statuses / actual sizes into the
           per-chunk status words on the device; temp memory and tables stay
           alive until the stream has run the calls (``keep_until_done``)
    decode per column kind for the whole batch, one launch for the chunks of at
           most WARP_MAX_ROWS rows (one per warp) and one for the rest (one
           CUDA block per chunk): timestamps, sequences, op types, fields (+
           omitted all-null fields as synthesized null-fill descriptors)
    trim   [start, end): gts_trim_ranges + gts_scan_blocks
    sync   ONE 16-byte copy: batch flag word + kept row count.  Flags set ->
           per-chunk status words come back and gtsamples.batch.raise_for_flags
           raises exactly what the CPU backend raises (class, flags, message).
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
from concurrent.futures import ThreadPoolExecutor
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
GTS_WARPS = GTS_BLOCK // 32  # chunks per CUDA block of a *_warp kernel (GTS_WARPS)
GTS_WARP_MAX_ROWS = 1024  # most rows a *_warp kernel takes (GTS_WARP_MAX_ROWS)
#: Chunks of at most this many rows decode one per warp (gts_decode_*_warp, kernels/gts_warp.cuh),
#: longer ones one per CUDA block.  A block kernel keeps 256 threads and 32 KiB of shared memory
#: for a chunk: a few hundred rows (real SSTs: tens of thousands of ~250-row series) leave most of
#: it idle, and the shared memory bounds an SM to 7 chunks in flight; a warp kernel has none.
#: (Chosen by design, not yet measured on a GPU: at most GTS_WARP_MAX_ROWS; 0 sends every chunk
#: to the block kernels.)
WARP_MAX_ROWS = GTS_WARP_MAX_ROWS
ENC_NULL_FILL = 0xFFFF  # GTS_ENC_NULL_FILL
NO_CHUNK = 0xFFFFFFFF  # GTS_NO_CHUNK
HASH_PAD = 16  # GTS_HASH_PAD: slack after the stored bytes for aligned 8-byte loads
DECODED_ALIGN = 16  # start of every decompressed chunk in the decoded buffer
SECTION_ALIGN = 16
GRID_CAP = 1 << 20  # grid-stride kernels never launch more blocks than this

#: Kernel kinds in launch order: (.cu file, block kernel, warp kernel)
KIND_TIMESTAMP, KIND_SEQUENCE, KIND_OP_TYPE, KIND_FIELD = range(4)
_KIND_KERNELS = {
    KIND_TIMESTAMP: ("gts_timestamp.cu", "gts_decode_timestamps", "gts_decode_timestamps_warp"),
    KIND_SEQUENCE: ("gts_sequence.cu", "gts_decode_sequences", "gts_decode_sequences_warp"),
    KIND_OP_TYPE: ("gts_optype.cu", "gts_decode_optypes", "gts_decode_optypes_warp"),
    KIND_FIELD: ("gts_float.cu", "gts_decode_floats", "gts_decode_floats_warp"),
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
    warp_ends: list[int]  # per kind: [a, warp_ends[k]) decode one per warp, the rest one per CUDA block
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
    long = batch.blocks["rows"][blk] > min(WARP_MAX_ROWS, GTS_WARP_MAX_ROWS) if blk.size else np.zeros(0, bool)
    # kind-major, then the chunks a warp decodes before the others; within those, file
    # order (block, then slot): nearby chunks run together
    order = np.lexsort((slot, blk, long, kind))
    kinds_sorted = kind[order]
    bounds = np.searchsorted(kinds_sorted, np.arange(5))
    ranges = [(int(bounds[k]), int(bounds[k + 1])) for k in range(4)]
    warp_ends = [a + int(np.count_nonzero(~long[order[a:b]])) for a, b in ranges]
    return HostPlan(
        pre_flags=pre_flags.astype(np.uint32),
        zstd=zstd.astype(np.int64),
        dec_offset=dec_offset,
        decoded_bytes=decoded_bytes,
        desc_chunk=idx[order],
        desc_block=blk[order],
        desc_slot=slot[order],
        kind_ranges=ranges,
        warp_ends=warp_ends,
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
PINNED_SLOT_BYTES = 8 << 20
#: Pinned slots per device, reused across calls: at most
#: ``PINNED_MAX_SLOTS * PINNED_SLOT_BYTES`` (64 MiB) of page-locked host memory.
#: Slots are filled by as many threads, so host copies run in parallel.
PINNED_MAX_SLOTS = 8
#: Largest batch (stored bytes) fetched straight into one pooled page-locked
#: buffer (:class:`PinnedHostPool`) and copied to the device from there, without
#: the staging slots; larger batches go through the slots.
PINNED_BATCH_MAX_BYTES = 1 << 30
#: Page-locked bytes the pool of whole-batch buffers may hold per device.
PINNED_POOL_MAX_BYTES = 2 << 30
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
    direct: bool = False  # the host bytes are page-locked already: copied from there, no slots

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
    segment_ends: np.ndarray | None = None,
    direct: bool = False,
) -> TransferPlan:
    """Plan the H2D copy of ``batch.data`` (``data_len`` bytes).

    ``job_lo`` / ``job_hi``: stored byte range of each nvCOMP job, in job
    order; ``subbatches``: the nvCOMP sub-batches ``[a, b)`` over the jobs.
    ``mode``: ``"auto"`` (pinned from :data:`PINNED_MIN_BYTES`, overlapped
    from :data:`OVERLAP_MIN_BYTES` with at least two sub-batches),
    ``"pageable"`` (one plain copy), ``"pinned"`` (staged, no overlap),
    ``"overlap"`` (staged, overlapped whenever there are two sub-batches).
    Module constants are the defaults of the keyword limits.

    ``segment_ends``: the segments when the bytes arrive on the host piece by
    piece (a fetch in groups, :mod:`gtsamples.decode.gpu_fetch`): one event per
    arriving range, so its copy starts while later ones are still read;
    staged (pinned) whatever the size unless ``mode`` is ``"pageable"``.
    ``direct``: the host bytes are page-locked (copied without slots).
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
        pinned = data_len >= pinned_min or segment_ends is not None
        overlap = pinned and data_len >= overlap_min
    else:
        pinned = mode in ("pinned", "overlap")
        overlap = mode == "overlap"
    pinned = pinned and data_len > 0
    overlap = overlap and pinned and n_sub >= 2

    ends: list[int] = []
    if pinned and segment_ends is not None:
        ends = [int(e) for e in np.unique(np.asarray(segment_ends, dtype=np.int64)) if 0 < e < data_len]
        ends.append(data_len)
    elif overlap:
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
        overlap=len(segments) > 1 and n_sub >= 2,
        slot_bytes=pinned_slot_size(max_piece, slot_bytes) if pinned else 0,
        n_slots=min(max_slots, len(pieces_a)) if pinned else 0,
        direct=bool(direct and pinned),
    )


def segment_waits(tp: TransferPlan, job_hi: np.ndarray, subbatches: list[tuple[int, int]]) -> np.ndarray:
    """The segment of ``tp`` each nvCOMP sub-batch waits for, for sub-batches
    planned after ``tp`` (the jobs left once the frames were checked)."""
    if not subbatches:
        return np.zeros(0, dtype=np.int64)
    ends = tp.segments[:, 1]
    need = subbatch_byte_needs(job_hi, subbatches)
    return np.minimum(np.searchsorted(ends, need, side="left"), len(ends) - 1).astype(np.int64)


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
    """CUDA events between stages (only when timings are requested), host stage
    times, and the time the calling thread spends blocked on the device."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.marks: list[tuple[str, Any]] = []
        self.host: dict[str, float] = {}
        self.spans: list[tuple[str, Any]] = []
        self.t0 = time.perf_counter()
        if enabled:
            self.mark("start")

    def mark(self, name: str) -> None:
        if self.enabled:
            import cupy as cp

            ev = cp.cuda.Event()
            ev.record()
            self.marks.append((name, ev))

    def span(self, name: str, start, end=None) -> None:
        """A stage timed by two events recorded elsewhere (e.g. on the copy
        stream); ``start`` may be a callable returning ``(start, end)`` or None
        once that work is done (a background copy)."""
        if self.enabled and start is not None:
            self.spans.append((name, start if callable(start) else (lambda: (start, end))))

    @contextlib.contextmanager
    def host_stage(self, name: str):
        t = time.perf_counter()
        try:
            yield
        finally:
            self.host[name] = self.host.get(name, 0.0) + (time.perf_counter() - t) * 1e3

    def result(self) -> dict[str, float]:
        if not self.enabled:
            return {}
        import cupy as cp

        self.marks[-1][1].synchronize()
        out = dict(("host_" + k, v) for k, v in self.host.items())
        out["wall"] = (time.perf_counter() - self.t0) * 1e3
        for (_, a), (name, b) in zip(self.marks, self.marks[1:]):
            out[name] = out.get(name, 0.0) + cp.cuda.get_elapsed_time(a, b)
        out["total_device"] = cp.cuda.get_elapsed_time(self.marks[0][1], self.marks[-1][1])
        for name, get in self.spans:
            ab = get()
            if ab is None or ab[0] is None or ab[1] is None:
                continue
            ab[1].synchronize()
            out[name] = out.get(name, 0.0) + cp.cuda.get_elapsed_time(*ab)
        return out


def _launch_grid(n: int) -> int:
    return max(1, min(n, GRID_CAP))


class _InFlight:
    """Objects kept alive until the device has passed an event (stream-ordered
    lifetimes for buffers an enqueued call still reads: nvCOMP's temp memory
    and tables).  Completed entries are dropped on every :meth:`add`."""

    def __init__(self):
        self.lock = threading.Lock()
        self.entries: list[tuple[Any, Any]] = []

    def add(self, event, objs) -> None:
        with self.lock:
            self.entries = [e for e in self.entries if not e[0].done]
            self.entries.append((event, objs))

    def __len__(self) -> int:
        with self.lock:
            return len(self.entries)


_IN_FLIGHT = _InFlight()


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

    def stream_ptr(self) -> int:
        return int(self.cp.cuda.get_current_stream().ptr)

    def keep_until_done(self, objs) -> None:
        """Hold ``objs`` until the current stream has completed the work enqueued so far."""
        ev = self.cp.cuda.Event(disable_timing=True)
        ev.record()
        _IN_FLIGHT.add(ev, objs)

    def kernel(self, file: str, name: str):
        from .kernels import get_kernel

        return get_kernel(file, name)

    def nvcomp(self) -> _nv.NvcompLib:
        """The loaded libnvcomp (:class:`gtsamples.decode.nvcomp.NvcompUnavailableError` without one)."""
        return _nv.load_nvcomp()

    def zstd_input_alignment(self) -> int:
        return self.nvcomp().alignment[0]

    def zstd_plan(self, declared: np.ndarray, temp_budget: int) -> list[tuple[int, int]]:
        """nvCOMP sub-batches for these declared sizes (host only)."""
        return _nv.BatchedZstdDecompressor(temp_budget=temp_budget, dev=self).plan(declared)

    def zstd(self, jobs: _nv.ZstdJobs, table, temp_budget: int, plan=None, before=None):
        """Enqueue nvCOMP over ``jobs``; ``(statuses, actual sizes)`` stay on the device.
        ``before(k)`` runs before sub-batch ``k`` of ``plan`` is enqueued."""
        return _nv.BatchedZstdDecompressor(temp_budget=temp_budget, dev=self).run(jobs, device_table=table, plan=plan,
                                                                                  before=before)  # fmt: skip

    def host_staging(self, nbytes: int) -> "_HostBuffer | None":
        """A pooled page-locked host buffer of ``nbytes`` (a fetch lands there and
        is copied to the device without staging slots), or None when the batch is
        too large for the pool (:data:`PINNED_BATCH_MAX_BYTES`)."""
        return _host_pool(self.cp).acquire(nbytes)

    def stage_h2d(self, dst, host: np.ndarray, tp: TransferPlan, timing: bool = False, arrivals=None):
        """Copy ``host`` into ``dst`` as ``tp`` says, on this device's copy
        stream, from a background thread: the call returns at once, while the
        host goes on planning.  Pinned slots are filled by several threads
        (``tp.direct``: straight from page-locked ``host``).  ``arrivals``
        (``wait(lo, hi)``): bytes still being fetched; each piece is copied once
        it has arrived.  Returns ``(events, span)``: :class:`SegmentEvents`
        (``events[k]`` blocks until segment ``k``'s copies are enqueued; the
        current stream then waits on it with :meth:`wait`) and, with
        ``timing``, a callable giving the ``(start, end)`` events of all copies."""
        events = _staging(self.cp).copy(self.ptr(dst), host, tp, timing, arrivals=arrivals, background=True)
        return events, (events.timing_span if timing else None)

    def wait(self, event) -> None:
        """The current stream waits for ``event`` (a staged copy); no-op for None."""
        if event is not None:
            self.cp.cuda.get_current_stream().wait_event(event)

    def timer(self, enabled: bool) -> "_Timer":
        return _Timer(enabled)


class SegmentEvents:
    """The per-segment events of one staged copy, recorded as the copy
    proceeds (on a background thread): ``events[k]`` blocks until segment
    ``k``'s last piece has been enqueued and returns its event; it raises what
    stopped the copy (e.g. a failed fetch).  ``join`` waits for the copy's host
    work to end; ``last_recorded`` is the event of the last piece enqueued."""

    def __init__(self, n: int):
        self._events: list[Any] = [None] * n
        self._set = [False] * n
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self._finished = False
        self.last_recorded = None
        self.span: tuple[Any, Any] | None = None

    def __len__(self) -> int:
        return len(self._events)

    def set(self, k: int, event) -> None:
        with self._cond:
            self._events[k] = event
            self._set[k] = True
            self._cond.notify_all()

    def recorded(self, event) -> None:
        self.last_recorded = event

    def finish(self, error: BaseException | None = None) -> None:
        with self._cond:
            if error is not None and self._error is None:
                self._error = error
            self._finished = True
            self._cond.notify_all()

    def __getitem__(self, k: int):
        k = k + len(self._events) if k < 0 else k
        with self._cond:
            while not self._set[k] and self._error is None and not self._finished:
                self._cond.wait()
            if not self._set[k]:
                raise self._error if self._error is not None else RuntimeError(f"segment {k} was never copied")
            return self._events[k]

    def join(self) -> None:
        with self._cond:
            while not self._finished:
                self._cond.wait()

    def timing_span(self):
        self.join()
        return self.span


class _Slot:
    __slots__ = ("mem", "arr", "event")

    def __init__(self, mem, arr):
        self.mem, self.arr, self.event = mem, arr, None


class PinnedStaging:
    """Page-locked staging for host -> device copies, one per device.

    A bounded ring of pinned slots (``TransferPlan.n_slots`` of
    ``TransferPlan.slot_bytes``, at most :data:`PINNED_MAX_SLOTS` x
    :data:`PINNED_SLOT_BYTES`), reused across calls and threads.  Piece ``i``
    goes through slot ``i % n_slots``: a filler thread waits for the piece's
    bytes (``arrivals``) and for the event of the copy that last read that slot,
    and copies the bytes in (numpy memcpy, without the GIL); up to ``n_slots``
    slots fill at once on as many threads.  The coordinating thread enqueues
    ``cudaMemcpyAsync`` of the filled slots in order on a non-blocking copy
    stream, so filling overlaps the DMA of earlier pieces, and both overlap
    kernels on the compute stream.  Plans with ``direct`` copy straight from
    the (page-locked) host bytes.  Before its first copy the copy stream waits
    for the compute stream (the destination may be memory that stream just
    freed).
    """

    def __init__(self, cp):
        self.cp = cp
        self.lock = threading.Lock()
        self.slots: list[_Slot | None] = []
        self.stream = cp.cuda.Stream(non_blocking=True)
        self._fillers: ThreadPoolExecutor | None = None
        self._filler_count = 0
        self._device_id = _device_id(cp)

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

    def _pool(self, n: int) -> ThreadPoolExecutor:
        if self._fillers is None or self._filler_count < n:
            self._filler_count = max(n, 2)
            self._fillers = ThreadPoolExecutor(max_workers=self._filler_count, thread_name_prefix="gts-pinned-fill")
        return self._fillers

    @staticmethod
    def _fill(arr: np.ndarray, host: np.ndarray, lo: int, hi: int, prev_event, arrivals) -> None:
        if arrivals is not None:
            arrivals.wait(lo, hi)
        if prev_event is not None:
            prev_event.synchronize()  # the DMA that last read this slot is done
        arr[: hi - lo] = host[lo:hi]

    def copy(self, dst_ptr: int, host: np.ndarray, tp: TransferPlan, timing: bool = False, *, arrivals=None,
             background: bool = False) -> "SegmentEvents | tuple[list, Any]":  # fmt: skip
        """Enqueue the copies of ``tp``.  ``background``: on a helper thread,
        returning :class:`SegmentEvents` at once; else when every copy is
        enqueued, returning ``(events, span)`` (lists of CUDA events)."""
        cp = self.cp
        host = np.ascontiguousarray(host, dtype=np.uint8).reshape(-1)
        events = SegmentEvents(len(tp.segments))
        ready = cp.cuda.Event(disable_timing=True)
        ready.record(cp.cuda.get_current_stream())  # on the caller's (compute) stream
        if background:
            t = threading.Thread(target=self._run, args=(dst_ptr, host, tp, timing, arrivals, ready, events),
                                 name="gts-h2d", daemon=True)  # fmt: skip
            t.start()
            return events
        self._run(dst_ptr, host, tp, timing, arrivals, ready, events)
        return [events[k] for k in range(len(events))], events.span

    def _run(self, dst_ptr, host, tp, timing, arrivals, ready, events: SegmentEvents) -> None:
        cp = self.cp
        rt = cp.cuda.runtime
        error = None
        with self.lock, _on_device(cp, self._device_id):
            pending: dict[int, Any] = {}
            try:
                self.stream.wait_event(ready)
                t0 = None
                if timing:
                    t0 = cp.cuda.Event()
                    t0.record(self.stream)
                pieces = tp.pieces.tolist()
                seg_of = tp.piece_segment.tolist()
                last_of = {seg: i for i, seg in enumerate(seg_of)}
                n_slots = max(tp.n_slots, 1)
                pool = None if tp.direct else self._pool(n_slots)

                def submit(i: int) -> None:
                    lo, hi = pieces[i]
                    s = self._slot(i % n_slots, tp.slot_bytes)
                    pending[i] = pool.submit(self._fill, s.arr, host, lo, hi, s.event, arrivals)

                if pool is not None:
                    for i in range(min(n_slots, len(pieces))):
                        submit(i)
                for i, (lo, hi) in enumerate(pieces):
                    n = hi - lo
                    if tp.direct:
                        if arrivals is not None:
                            arrivals.wait(lo, hi)
                        src = host.ctypes.data + lo
                    else:
                        pending.pop(i).result()  # filled (raises what stopped the filler)
                        s = self.slots[i % n_slots]
                        src = s.arr.ctypes.data
                    rt.memcpyAsync(dst_ptr + lo, src, n, rt.memcpyHostToDevice, self.stream.ptr)
                    ev = cp.cuda.Event(disable_timing=True)
                    ev.record(self.stream)
                    events.recorded(ev)
                    if not tp.direct:
                        s.event = ev
                        if i + n_slots < len(pieces):
                            submit(i + n_slots)
                    if last_of[seg_of[i]] == i:
                        events.set(seg_of[i], ev)
                if timing:
                    t1 = cp.cuda.Event()
                    t1.record(self.stream)
                    events.span = (t0, t1)
            except BaseException as e:  # a failed fetch or copy: stop, report to the waiters
                error = e
                for f in pending.values():  # no filler may still write into a slot
                    try:
                        f.result()
                    except BaseException:
                        pass
            finally:
                events.finish(error)  # waiters raise it (SegmentEvents.__getitem__)


def _device_id(cp) -> int | None:
    dev = getattr(cp.cuda, "Device", None)
    return int(dev().id) if dev is not None else None


def _on_device(cp, device_id):
    """The CUDA device of a helper thread: the caller's (threads start on device 0)."""
    if device_id is None:
        return contextlib.nullcontext()
    return cp.cuda.Device(device_id)


_PER_DEVICE: dict[tuple[type, int], Any] = {}
_PER_DEVICE_LOCK = threading.Lock()


def _per_device(cls, cp):
    """The one ``cls(cp)`` of the current device (staging ring, host buffer pool)."""
    key = (cls, _device_id(cp) or 0)
    with _PER_DEVICE_LOCK:
        obj = _PER_DEVICE.get(key)
        if obj is None:
            obj = _PER_DEVICE[key] = cls(cp)
        return obj


def _staging(cp) -> PinnedStaging:
    return _per_device(PinnedStaging, cp)


class _HostBuffer:
    """A page-locked host buffer lent by a :class:`PinnedHostPool`: ``array``
    (exactly the bytes asked for), given back with :meth:`release`."""

    def __init__(self, pool: "PinnedHostPool", mem, full: np.ndarray, nbytes: int):
        self.pool, self.mem, self.full = pool, mem, full
        self.array = full[:nbytes]
        self.released = False

    def release(self, after=None) -> None:
        """Back to the pool; ``after``: an event the device must pass before the
        buffer is reused (copies from it still in flight)."""
        if not self.released:
            self.released = True
            self.pool._give_back(self, after)


class PinnedHostPool:
    """Whole-batch page-locked host buffers, per device, reused across calls.

    A fetch lands in one (:mod:`gtsamples.decode.gpu_fetch`), the host checks
    read it, and it is copied to the device from there: no staging slots, no
    copy of the bytes on the host.  At most :data:`PINNED_POOL_MAX_BYTES` are
    held; batches over :data:`PINNED_BATCH_MAX_BYTES` get None (staging slots)."""

    ROUND = 64 << 20  # sizes are rounded up: slightly larger batches reuse a buffer

    def __init__(self, cp):
        self.cp = cp
        self.lock = threading.Lock()
        self.free: list[tuple[Any, np.ndarray, Any]] = []  # (mem, full array, event to pass first)
        self.held = 0  # bytes allocated, free or lent

    def acquire(self, nbytes: int) -> _HostBuffer | None:
        nbytes = int(nbytes)
        if nbytes <= 0 or nbytes > PINNED_BATCH_MAX_BYTES:
            return None
        with self.lock:
            fits = [k for k, (_, a, _) in enumerate(self.free) if a.size >= nbytes]
            if fits:
                k = min(fits, key=lambda j: self.free[j][1].size)
                mem, full, ev = self.free.pop(k)
            else:
                size = -(-nbytes // self.ROUND) * self.ROUND
                while self.free and self.held + size > PINNED_POOL_MAX_BYTES:  # drop the smallest free ones
                    k = min(range(len(self.free)), key=lambda j: self.free[j][1].size)
                    _, old, old_ev = self.free.pop(k)
                    if old_ev is not None:
                        old_ev.synchronize()
                    self.held -= old.size
                if self.held + size > PINNED_POOL_MAX_BYTES:
                    return None
                mem = self.cp.cuda.alloc_pinned_memory(size)
                full, ev = np.frombuffer(mem, np.uint8, size), None
                self.held += size
        if ev is not None:
            ev.synchronize()
        return _HostBuffer(self, mem, full, nbytes)

    def _give_back(self, buf: _HostBuffer, after) -> None:
        with self.lock:
            self.free.append((buf.mem, buf.full, after))


def _host_pool(cp) -> PinnedHostPool:
    return _per_device(PinnedHostPool, cp)


def _allocate(dev, n: int, dtype, poison: int | None):
    return dev.empty(n, dtype) if poison is None else dev.filled(n, dtype, poison)


def reclassify_zstd_failures(batch: ChunkBatch, jobs: _nv.ZstdJobs, st: np.ndarray, actual: np.ndarray,
                             flags: np.ndarray, notes: dict[int, str] | None = None) -> dict[int, str]:  # fmt: skip
    """Error path only: a chunk nvCOMP failed on (bad status or wrong size) gets
    the flag and message the CPU backend's decompressor gives it (libzstd
    decides ``ZSTD_DECOMPRESS_FAILED`` vs ``DECODED_LENGTH_MISMATCH``), so both
    backends raise alike.  Updates ``flags`` in place; returns message details.
    nvCOMP's own status goes to ``notes`` (the error's ``device_detail``), and
    into the message only for a frame the CPU decompressor accepts."""
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
        if notes is not None:
            notes[i] = nv
        if f:
            flags[i] = f
            if msg:
                detail[i] = msg
        else:  # the CPU decodes it, nvCOMP cannot: keep nvCOMP's verdict
            detail[i] = f"{nv}; the CPU decompressor accepts this frame"
    return detail


def decode_unproven_frames(batch: ChunkBatch, idx: np.ndarray, flags: np.ndarray, detail: dict[int, str],
                           verify_checksums: bool) -> dict[int, bytes]:  # fmt: skip
    """Chunks ``idx`` passed the frame check, but their headers do not prove
    their decoded size (no content size, compressed blocks): nvCOMP, whose
    output bound is not guaranteed, must not get them.  They are decompressed
    here exactly as the CPU backend does (its decompressor, capacity = the
    declared length), after their checksum when the device would hash them
    (``verify_checksums``): the CPU order.  Failures are ORed into ``flags``
    with the CPU's messages in ``detail``; returns ``{chunk: decoded bytes}``
    for the device's decoded buffer."""
    out: dict[int, bytes] = {}
    if idx.size == 0:
        return out
    ch = batch.chunks
    off = ch["src_offset"].astype(np.uint64)
    stored = ch["stored_len"].astype(np.uint64)
    if verify_checksums:
        ok = _nv.verify_checksums(batch.data, off[idx], stored[idx], ch["checksum"][idx])
        flags[idx[~ok]] |= np.uint32(DecodeErrorFlag.CHECKSUM_MISMATCH)
        idx = idx[ok]
    import zstandard

    from .cpu import decompress_chunk

    dctx = zstandard.ZstdDecompressor()
    mv = memoryview(np.ascontiguousarray(batch.data, dtype=np.uint8))
    for i in idx.tolist():
        o, n = int(off[i]), int(stored[i])
        data, f, msg = decompress_chunk(mv[o : o + n], int(ch["decoded_len"][i]), dctx=dctx, detail=True)
        if f:
            flags[i] |= np.uint32(f)
            if msg:
                detail[i] = msg
        else:
            out[i] = data
    return out


#: Slack after the decoded buffer's last chunk (one Zstd block), in case a
#: decompressor writes past its capacity despite the checks.
DECODED_SLACK = 128 << 10


def _require_nvcomp(dev) -> None:
    """Zstd chunks need libnvcomp: :class:`gtsamples.decode.nvcomp.NvcompUnavailableError`
    (an ``UnsupportedError`` naming the ``gpu`` extra) before any device work."""
    get = getattr(dev, "nvcomp", None)
    if get is not None:
        get()


def decode_batch_gpu(
    batch: ChunkBatch,
    *,
    timestamp_name: str | None = None,
    timestamp_unit: str | None = None,
    hash_on: str = "device",
    temp_budget: int = _nv.DEFAULT_TEMP_BUDGET,
    device_data: Any = None,
    poison: int | None = None,
    timings: bool = False,
    h2d: str = "auto",
    fetch: Any = None,
    _device: Any = None,
) -> DeviceTable:
    """Decode every chunk of ``batch`` on the current CUDA device; trim to
    ``[start, end)`` when the batch says so.

    ``timestamp_name`` / ``timestamp_unit`` name the timestamp column (default
    ``"timestamp"`` / ``"nanosecond"``; ``DeviceTable.to_cudf(manifest, ...)``
    renames it from the manifest).  ``hash_on``: ``"device"`` (the gts_xxh64
    kernel; then one sync, so that no chunk with a bad checksum reaches
    nvCOMP) or ``"host"`` (xxhash on the CPU before any copy: lets the copy of
    the stored bytes overlap nvCOMP on large batches).  ``device_data``: the
    batch's stored bytes already on the device (CuPy uint8, ``len(data) + 16``
    bytes at least).  ``fetch``: a :class:`gtsamples.decode.gpu_fetch.GroupedFetch`
    whose stored bytes are still being read (``batch.data`` is set here): each
    range is copied to the device once it has arrived, while the host plans
    (when the device lends a page-locked buffer for them, ``batch.data`` is
    emptied on return: the buffer goes back to its pool).
    ``poison``: fill byte of every output buffer (tests prove every element is
    written).  ``timings``: record stage times (ms) in
    ``DeviceTable.timings`` (``h2d_copy``: the staged copies on the copy
    stream; ``host_*``: host stages, ``host_device_wait`` the time this thread
    was blocked on the device; ``wall``).  ``h2d``: how the stored bytes reach the device
    (:func:`plan_transfers`): ``"auto"`` stages them through pooled pinned
    memory from :data:`PINNED_MIN_BYTES` and, from :data:`OVERLAP_MIN_BYTES`
    with more than one nvCOMP sub-batch (host hashing), overlaps the copy of
    sub-batch ``k + 1``'s frames with the decompression of sub-batch ``k``.

    Only frames whose decoded size the headers prove go to nvCOMP; the others
    are decompressed on the host as the CPU backend does
    (:func:`decode_unproven_frames`).  Raises what the CPU backend raises for
    the same batch (:func:`gtsamples.batch.raise_for_flags`: same class, flags
    and message); nvCOMP's statuses of failed chunks are in the error's
    ``device_detail``.
    """
    if hash_on not in ("host", "device"):
        raise ValueError("hash_on must be 'host' or 'device'")
    if h2d not in H2D_MODES:
        raise ValueError(f"h2d must be one of {H2D_MODES}, not {h2d!r}")
    if fetch is not None and device_data is not None:
        raise ValueError("fetch and device_data exclude each other")
    dev = _device if _device is not None else CupyDevice()
    timer = dev.timer(timings)
    ts_name = timestamp_name or getattr(batch, "timestamp_name", None) or "timestamp"
    unit = timestamp_unit or getattr(batch, "timestamp_unit", None) or "nanosecond"
    unit = {"second": "s", "millisecond": "ms", "microsecond": "us", "nanosecond": "ns"}.get(unit, unit)

    with timer.host_stage("layout"):
        check_layout(batch)
    ch = batch.chunks
    n_chunks, n_blocks, n_rows = len(ch), len(batch.blocks), int(batch.n_rows)
    host_buf = None
    staging = None
    keep: list[Any] = []  # device buffers an enqueued copy or call may still use
    try:
        # ---- descriptor checks and plans: no payload byte needed yet
        with timer.host_stage("plan"):
            if fetch is not None:
                host_buf = getattr(dev, "host_staging", lambda n: None)(fetch.nbytes)
                fetch.start(host_buf.array if host_buf is not None else None)  # sets batch.data
            data_len = len(batch.data)
            limits, codec = _nv.limit_and_codec_flags(ch, data_len)
            desc_flags = limits | codec
            detail = _nv.bad_length_detail(ch, data_len, limits)
            plan = build_host_plan(batch, desc_flags)  # plan.zstd: every Zstd chunk that may decode
            if plan.zstd.size:
                _require_nvcomp(dev)
            z_lo = ch["src_offset"][plan.zstd].astype(np.int64)
            z_hi = z_lo + ch["stored_len"][plan.zstd].astype(np.int64)
            z_align = dev.zstd_input_alignment() if plan.zstd.size else 1
            repack = bool(plan.zstd.size) and _nv.stored_chunks_need_repack(z_lo.astype(np.uint64), z_align)
            # overlap only when nvCOMP reads the staged bytes sub-batch by sub-batch
            # (device hashing and repacked frames need every byte first)
            can_overlap = hash_on == "host" and not repack and device_data is None
            subbatches = dev.zstd_plan(ch["decoded_len"][plan.zstd].astype(np.uint64), temp_budget) \
                if plan.zstd.size and can_overlap else []  # fmt: skip
            tplan = plan_transfers(data_len, z_lo, z_hi, subbatches, h2d,
                                   segment_ends=None if fetch is None else fetch.segment_ends,
                                   direct=host_buf is not None)  # fmt: skip
        events: Any = [None]

        # ---- device buffers; the copy of the stored bytes starts (in the background)
        if device_data is None:
            d_stored = dev.empty(data_len + HASH_PAD, np.uint8)
            keep.append(d_stored)
            d_stored[data_len:] = 0
            if data_len and tplan.pinned:
                kw = {} if fetch is None else {"arrivals": fetch}
                events, span = dev.stage_h2d(d_stored, batch.data, tplan, timing=bool(getattr(timer, "enabled", False)),
                                             **kw)  # fmt: skip
                staging = events
                if span is not None:
                    timer.span("h2d_copy", span)
            elif data_len:
                if fetch is not None:
                    with timer.host_stage("fetch_wait"):
                        fetch.wait_all()
                dev.copy_in(d_stored[:data_len], np.ascontiguousarray(batch.data, dtype=np.uint8))
        else:
            d_stored = device_data
            if d_stored.size < len(batch.data) + HASH_PAD:
                raise ValueError("device_data must hold the stored bytes plus 16 bytes of padding")
        timer.mark("h2d")
        d_decoded = dev.empty(max(plan.decoded_bytes, 16) + DECODED_SLACK, np.uint8)
        keep.append(d_decoded)
        cols: dict[int, Any] = {SLOT_TIMESTAMP: _allocate(dev, n_rows, np.int64, poison)}
        if batch.want_sequence:
            cols[SLOT_SEQUENCE] = _allocate(dev, n_rows, np.uint64, poison)
        if batch.want_op_type:
            cols[SLOT_OP_TYPE] = _allocate(dev, n_rows, np.uint8, poison)
        masks: dict[int, Any] = {}
        for slot, _ in field_slot_names(batch):
            cols[slot] = _allocate(dev, n_rows, np.float64, poison)
            masks[slot] = dev.zeros(mask_words(n_rows), np.uint32)

        # ---- the tables that need no payload byte: one upload, while the bytes travel
        stored_base = dev.ptr(d_stored)
        with timer.host_stage("tables"):
            chunk_src = chunk_source_addresses(batch, plan, stored_base, dev.ptr(d_decoded))
            descs = fill_chunk_descs(
                batch, plan, chunk_src,
                {s: dev.ptr(a) for s, a in cols.items()}, {s: dev.ptr(m) for s, m in masks.items()},
            )  # fmt: skip
            sections = {"descs": descs, "blocks": block_descs(batch)}
            if hash_on == "device":
                sections["hash"] = hash_jobs(batch, stored_base)
            order_jobs = sequence_order_jobs(batch)
            if len(order_jobs):
                sections["seqorder"] = order_jobs
            table_buf, layout = pack_sections(sections)
        d_tables = dev.upload(table_buf)
        keep.append(d_tables)

        def section(name: str, dtype) -> Any:
            o, nbytes = layout[name]
            return d_tables[o : o + nbytes].view(dtype)

        d_blocks = section("blocks", np.uint8)
        timer.mark("upload")

        # ---- payload checks on the host: checksums (host hashing), frames, sizes
        if fetch is not None:
            with timer.host_stage("fetch_wait"):
                fetch.wait_all()
        with timer.host_stage("precheck"):
            flags0 = desc_flags.copy()
            proven = _nv.frame_verdicts(ch, batch.data, flags0, checksums=(hash_on == "host"))
            ok_z = plan.zstd[flags0[plan.zstd] == 0]
            unproven = ok_z[~proven[ok_z]]
            host_decoded = decode_unproven_frames(batch, unproven, flags0, detail, verify_checksums=(hash_on == "device"))
            to_nvcomp = ok_z[proven[ok_z]]
            jobs = nvcomp_jobs(batch, plan, chunk_src, stored_base, subset=to_nvcomp)
            status_buf, slayout = pack_sections({
                "status": flags0,
                "summary": np.array([int(np.bitwise_or.reduce(flags0)) if n_chunks else 0, n_rows], np.uint64),
                "nvcomp": _nv.pointer_table(jobs.src_ptr, jobs.src_bytes, jobs.dst_ptr, jobs.declared, jobs.chunk),
            })  # fmt: skip
        d_words = dev.upload(status_buf)
        keep.append(d_words)
        d_status = d_words[slayout["status"][0] : sum(slayout["status"])].view(np.uint32)
        d_summary = d_words[slayout["summary"][0] : sum(slayout["summary"])].view(np.uint64)
        d_nv = d_words[slayout["nvcomp"][0] : sum(slayout["nvcomp"])].view(np.uint64)
        dec_at = dict(zip(plan.zstd.tolist(), plan.dec_offset.tolist()))
        for i, data in host_decoded.items():  # rare: frames only the host may decompress
            o = dec_at[i]
            dev.copy_in(d_decoded[o : o + len(data)], np.frombuffer(data, np.uint8))

        # ---- checksums on the device (then one sync: no bad checksum reaches nvCOMP)
        n_hash = len(sections.get("hash", ()))
        if n_hash:
            dev.wait(events[-1])  # every stored byte
            k = dev.kernel("gts_xxh64.cu", "gts_xxh64")
            k(((4 * n_hash + GTS_BLOCK - 1) // GTS_BLOCK,), (GTS_BLOCK,),
              (section("hash", np.uint8), np.uint32(n_hash), d_status, d_summary))  # fmt: skip
            if len(jobs):
                with timer.host_stage("device_wait"):
                    bad = dev.to_host(d_status) != 0
                keep_jobs = ~bad[jobs.chunk.astype(np.int64)]
                if not keep_jobs.all():
                    jobs = nvcomp_jobs(batch, plan, chunk_src, stored_base, subset=to_nvcomp[keep_jobs])
                    d_nv = dev.upload(_nv.pointer_table(jobs.src_ptr, jobs.src_bytes, jobs.dst_ptr, jobs.declared,
                                                        jobs.chunk))  # fmt: skip
                    keep.append(d_nv)
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
                keep.append(d_packed)
                jobs = dataclasses.replace(jobs, src_ptr=np.uint64(dev.ptr(d_packed)) + offs)
                d_nv = dev.upload(_nv.pointer_table(jobs.src_ptr, jobs.src_bytes, jobs.dst_ptr, jobs.declared,
                                                    jobs.chunk))  # fmt: skip
                keep.append(d_nv)
            if tplan.overlap and not repack:
                # sub-batch k starts once the segment holding its frames has arrived;
                # the copies of later segments continue on the copy stream meanwhile
                subbatches = dev.zstd_plan(jobs.declared, temp_budget)
                waits = segment_waits(tplan, (src_off + jobs.src_bytes).astype(np.int64), subbatches)

                def before(k: int) -> None:
                    dev.wait(events[int(waits[k])])

                nv_out = dev.zstd(jobs, d_nv, temp_budget, plan=subbatches, before=before)
            else:
                dev.wait(events[-1])
                nv_out = dev.zstd(jobs, d_nv, temp_budget)
            tab = d_nv.reshape(len(_nv.TABLE_ROWS), n_jobs)
            dev.kernel("gts_status.cu", "gts_fold_nvcomp_status")(
                (_launch_grid((n_jobs + GTS_BLOCK - 1) // GTS_BLOCK),), (GTS_BLOCK,),
                (tab[_nv.TABLE_ROWS.index("chunk")], tab[_nv.TABLE_ROWS.index("dst_capacity")], nv_out[1],
                 nv_out[0], np.uint32(n_jobs), d_status, d_summary),
            )  # fmt: skip
        dev.wait(events[-1])  # the column kernels read raw chunks from the stored bytes
        timer.mark("nvcomp")

        # ---- decode kernels, one launch per column kind for the whole batch
        d_descs = section("descs", np.uint8)
        for kind, (a, b) in enumerate(plan.kind_ranges):
            fname, block_kernel, warp_kernel = _KIND_KERNELS[kind]
            m = plan.warp_ends[kind]
            if m > a:  # short chunks, one per warp
                dev.kernel(fname, warp_kernel)((-(-(m - a) // GTS_WARPS),), (GTS_BLOCK,),
                                               (d_descs[a * CHUNK_DESC_DTYPE.itemsize :], np.uint32(m - a), d_status,
                                                d_summary))  # fmt: skip
            if b > m:
                dev.kernel(fname, block_kernel)((b - m,), (GTS_BLOCK,),
                                                (d_descs[m * CHUNK_DESC_DTYPE.itemsize :], d_status, d_summary))  # fmt: skip
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
            dev.kernel("gts_trim.cu", "gts_scan_blocks")((1,), (GTS_BLOCK,),
                                                         (keep_n, np.uint32(n_blocks), new_out, d_summary))  # fmt: skip
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
        with timer.host_stage("device_wait"):
            summary = dev.to_host(d_summary)
        # the device has passed every copy and call so far; what follows reads the block table
        keep[:] = [d_tables] + ([keep_lo, keep_n, new_out] if trimming else [])
        if summary[0]:
            with timer.host_stage("device_wait"):
                flags = dev.to_host(d_status).copy()
            notes: dict[int, str] = {}
            if nv_out is not None:
                with timer.host_stage("device_wait"):
                    st_h, actual_h = dev.to_host(nv_out[0]), dev.to_host(nv_out[1])
                detail.update(reclassify_zstd_failures(batch, jobs, st_h, actual_h, flags, notes))
            if (flags & np.uint32(DecodeErrorFlag.SEQUENCE_ORDER)).any():
                add_sequence_order_detail(batch, flags, detail, cols[SLOT_TIMESTAMP], cols[SLOT_SEQUENCE])
            try:
                raise_for_flags(batch, flags, {i: m for i, m in detail.items() if flags[i]} or None)
            except Exception as e:
                e.device_detail = notes  # type: ignore[attr-defined]
                raise
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
                    keep.append(d_cc)
                    dev.kernel("gts_trim.cu", "gts_compact_columns")(
                        (grid_x, len(cols)), (GTS_BLOCK,),
                        (d_blocks, np.uint32(n_blocks), keep_lo, keep_n, new_out, d_cc),
                    )  # fmt: skip
                    if masks:
                        mc = np.zeros(len(masks), dtype=MASK_COL_DTYPE)
                        for i, s in enumerate(masks):
                            mc[i] = (dev.ptr(masks[s]), dev.ptr(new_masks[s]))
                        valid = dev.zeros(len(masks), np.uint64)
                        d_mc = dev.upload(mc.view(np.uint8))
                        keep.append(d_mc)
                        dev.kernel("gts_trim.cu", "gts_compact_masks")(
                            (grid_x, len(masks)), (GTS_BLOCK,),
                            (d_blocks, np.uint32(n_blocks), keep_lo, keep_n, new_out, d_mc, valid),
                        )  # fmt: skip
                        with timer.host_stage("device_wait"):
                            null_counts = np.uint64(n_rows) - dev.to_host(valid)
                cols, masks = new_cols, new_masks
            timer.mark("compact")
    finally:
        _settle(dev, staging, keep, host_buf, fetch)
        if host_buf is not None:  # lent by the pool: the batch no longer holds it
            batch.data = np.zeros(0, np.uint8)

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


def _settle(dev, staging, keep: list, host_buf, fetch=None) -> None:
    """On every way out: the fetch threads and the background copy have
    stopped, the compute stream is ordered after the copies enqueued (their
    destination may be reused by it), buffers an enqueued copy or call may still
    use stay alive until the device has passed them, and the page-locked host
    buffer goes back to its pool once nothing reads or writes it."""
    if fetch is not None:
        fetch.join()
    last = None
    join = getattr(staging, "join", None)
    if join is not None:
        join()
        last = staging.last_recorded
        if last is not None:
            dev.wait(last)
    if keep:
        dev.keep_until_done(tuple(keep))
    if host_buf is not None:
        host_buf.release(last)
