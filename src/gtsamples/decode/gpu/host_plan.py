"""The host side of a GPU decode (pure numpy, no CuPy): the batch layout check,
the per-chunk plan (kinds, decoded offsets, null counts) and the descriptor
tables uploaded to the kernels."""

from __future__ import annotations

import dataclasses

import numpy as np

from ...batch import (
    FIRST_FIELD_SLOT,
    SLOT_OP_TYPE,
    SLOT_SEQUENCE,
    SLOT_TIMESTAMP,
    ChunkBatch,
    block_chunks,
    sequence_continuations,
)
from ...format.constants import COMP_ZSTD, MAX_BLOCK_ROWS
from . import nvcomp as _nv
from .layout import (
    BLOCK_DESC_DTYPE,
    CHUNK_DESC_DTYPE,
    DECODED_ALIGN,
    ENC_NULL_FILL,
    GTS_WARP_MAX_ROWS,
    HASH_JOB_DTYPE,
    KIND_FIELD,
    NO_CHUNK,
    SECTION_ALIGN,
    SEQ_ORDER_DTYPE,
)


#: Chunks of at most this many rows decode one per warp (gts_decode_*_warp, kernels/gts_warp.cuh),
#: longer ones one per CUDA block.  A block kernel keeps 256 threads and 32 KiB of shared memory
#: for a chunk: a few hundred rows (real SSTs: tens of thousands of ~250-row series) leave most of
#: it idle, and the shared memory bounds an SM to 7 chunks in flight; a warp kernel has none.
#: (Chosen by design, not yet measured on a GPU: at most GTS_WARP_MAX_ROWS; 0 sends every chunk
#: to the block kernels.)  A tunable: patch it here, not on the package.
WARP_MAX_ROWS = GTS_WARP_MAX_ROWS


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
    :func:`gtsamples.decode.gpu.nvcomp.hash_mismatch_words`)."""
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
