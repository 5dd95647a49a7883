"""A whole :class:`~gtsamples.batch.ChunkBatch` decoded on the CPU, step by step, batch-wide.

Every step computes a per-chunk :class:`~gtsamples.errors.DecodeErrorFlag`
word; :func:`decode_batch` raises once, through
:func:`gtsamples.batch.raise_for_flags`, for the first bad chunk.

1. Stored ranges lie inside the fetched buffer and within the spec's limits
   ("Limits and evolution": at most 1 MiB decoded, 1 MiB + 64 KiB stored per
   chunk), else ``BAD_LENGTH``.
2. XXH64 (seed 0) of each chunk's stored bytes must equal the reference
   checksum (``CHECKSUM_MISMATCH``, :mod:`.xxh64`).
3. Compression 0 (raw) requires stored length == decoded length
   (``DECODED_LENGTH_MISMATCH``); the stored bytes are decoded in place.
   Compression 1 (Zstd) frames pass :mod:`..zstd_frames`' structural check
   (one frame ending at the stored length; a content size, when present,
   equal to the declared length).  Other compression IDs set
   ``UNSUPPORTED_COMPRESSION``, unknown encodings ``UNSUPPORTED_ENCODING``;
   a flagged chunk is never decompressed or decoded further.
4. The chunks are split into ranges (:mod:`.parallel`) that threads
   decompress and decode window by window (:mod:`.window`, :mod:`.chunks`).
5. Outputs live in pyarrow's memory pool (:func:`~gtsamples.buffers.pool_array`)
   and become the Arrow table's buffers; fields get Arrow validity bitmaps
   (none when a field has no null).  Rows no decoded chunk wrote (omitted
   all-null chunks, failed chunks) are zeroed, and null.
"""

from __future__ import annotations

import time

import numba
import numpy as np
import xxhash

from ...batch import (
    FIRST_FIELD_SLOT,
    SLOT_OP_TYPE,
    SLOT_SEQUENCE,
    SLOT_TIMESTAMP,
    ChunkBatch,
    DecodedColumns,
    add_sequence_order_detail,
    block_chunks,
    flag_sequence_boundaries,
    raise_for_flags,
)
from ...buffers import pool_array
from ...format.constants import (
    COMP_RAW,
    COMP_ZSTD,
    KNOWN_COLUMN_ENCODINGS,
    MAX_CHUNK_DECODED,
    MAX_CHUNK_STORED,
    ROLE_OP_TYPE,
    ROLE_SEQUENCE,
)
from ...format.zstd_frames import check_zstd_frames
from .chunks import (
    M_ACTIVE,
    M_ENCODING,
    M_FIELD,
    M_IN_SCRATCH,
    M_LENGTH,
    M_MAX_TS,
    M_MIN_TS,
    M_NULLS,
    M_OFFSET,
    M_OUT_ROW,
    M_ROWS,
    M_TS_CHUNK,
    N_META,
)
from .flags import (
    BAD_LENGTH,
    DECODED_LENGTH_MISMATCH,
    ROWS_WRITTEN_FLAGS,
    SEQUENCE_ORDER,
    TIMESTAMP_BOUNDS,
    UNSUPPORTED_COMPRESSION,
    UNSUPPORTED_ENCODING,
)
from .floats import fill_valid, finish_bitmap
from .parallel import numba_threads, run_ranges, stage_threads, thread_count
from .window import RangeDecoder
from .xxh64 import checksums_ok


_STATS: dict[str, float] = {}


def last_stats() -> dict[str, float]:
    """Stage times (seconds) of the last :func:`decode_batch` call in this process."""
    return dict(_STATS)


def _check_batch(batch: ChunkBatch, n_fields: int) -> None:
    """Planner invariants the kernel relies on; a violation is a bug, not bad input."""
    ch = batch.chunks
    if batch.data.dtype != np.uint8 or batch.data.ndim != 1:
        raise ValueError("ChunkBatch.data must be a 1-D uint8 array")
    if len(ch) == 0:
        return
    end = ch["out_row"].astype(np.uint64) + ch["rows"].astype(np.uint64)
    if (end > np.uint64(batch.n_rows)).any():
        i = int(np.flatnonzero(end > np.uint64(batch.n_rows))[0])
        raise ValueError(f"ChunkBatch chunk {i}: rows [{int(ch['out_row'][i])}, {int(end[i])}) exceed n_rows "
                         f"{batch.n_rows}")
    field = ch["slot"].astype(np.int64) - FIRST_FIELD_SLOT
    if (field >= n_fields).any():
        i = int(np.flatnonzero(field >= n_fields)[0])
        raise ValueError(f"ChunkBatch chunk {i}: slot {int(ch['slot'][i])} beyond {n_fields} projected fields")


def decode_batch(batch: ChunkBatch, threads: int | None = None) -> DecodedColumns:
    """Decode every chunk of ``batch`` into untrimmed host columns.

    Raises :class:`~gtsamples.errors.CorruptArtifactError` or
    :class:`~gtsamples.errors.UnsupportedError` (via
    :func:`gtsamples.batch.raise_for_flags`) naming the first bad chunk.
    ``threads`` bounds the numba and Zstd threads (default: numba's setting).
    """
    cols, flags, detail = decode_batch_flags(batch, threads)
    raise_for_flags(batch, flags, detail or None)
    return cols


def decode_batch_flags(batch: ChunkBatch, threads: int | None = None):
    """Like :func:`decode_batch` but never raises for bad chunks.

    Returns ``(columns, flags, detail)``: per-chunk uint32 flag words and extra
    message text keyed by chunk index.  Rows of flagged (and of omitted)
    chunks read as zero and, for fields, null; timestamps that fail only
    their bounds or order check keep their decoded values.
    """
    t0 = time.perf_counter()
    ch = batch.chunks
    n_fields = len(batch.field_names)
    _check_batch(batch, n_fields)
    n_threads = thread_count(threads)
    data = np.ascontiguousarray(batch.data)
    if not data.flags.writeable:  # one numba specialization: writeable uint8[::1]
        data = data.copy()
    flags = np.zeros(len(ch), dtype=np.uint32)
    detail: dict[int, str] = {}
    skip = _unwanted(batch)
    _flag_bad_ranges(ch, data.shape[0], skip, flags, detail)
    prevalid = np.flatnonzero(~skip & (flags == 0))
    t1 = time.perf_counter()
    checksums_ok(batch, flags, prevalid, data, n_threads)
    t2 = time.perf_counter()
    _flag_codecs(ch, data, skip, flags, n_threads)
    t3 = time.perf_counter()
    meta = _kernel_meta(batch, skip, flags)
    active = meta[:, M_ACTIVE] != 0  # (decompression failures clear M_ACTIVE later)
    outputs = _outputs(batch, meta, active)
    edges = np.zeros((len(ch), 2), dtype=np.uint8)
    dec = _decode(batch, data, meta, active, flags, detail, outputs, edges, n_threads)
    t4 = time.perf_counter()
    bitmap_list, null_counts = _finish(batch, meta, active, flags, outputs, edges)
    t5 = time.perf_counter()

    _STATS.clear()
    _STATS.update(prepare=t1 - t0, checksum=t2 - t1, frame_check=t3 - t2, decode=t4 - t3,
                  decompress=dec.t_decompress, kernel=dec.t_kernel, finish=t5 - t4, total=t5 - t0)
    ts, seq, op, vals = outputs[:4]
    cols = DecodedColumns(
        timestamp=ts,
        sequence=seq if batch.want_sequence else None,
        op_type=op if batch.want_op_type else None,
        values=[vals[k].view(np.float64) for k in range(n_fields)],
        bitmaps=bitmap_list,
        null_counts=null_counts,
    )
    return cols, flags, detail


def _unwanted(batch: ChunkBatch) -> np.ndarray:
    """Chunks of the sequence and operation type columns when the batch does not want them."""
    ch = batch.chunks
    role = ch["role"]
    slot = ch["slot"]
    skip = np.zeros(len(ch), dtype=bool)
    if not batch.want_sequence:
        skip |= (role == ROLE_SEQUENCE) | (slot == SLOT_SEQUENCE)
    if not batch.want_op_type:
        skip |= (role == ROLE_OP_TYPE) | (slot == SLOT_OP_TYPE)
    return skip


def _flag_bad_ranges(ch: np.ndarray, n_bytes: int, skip: np.ndarray, flags: np.ndarray, detail: dict) -> None:
    """``BAD_LENGTH`` for stored ranges outside the fetched buffer or lengths beyond the spec's limits."""
    src_end = ch["src_offset"].astype(np.uint64) + ch["stored_len"].astype(np.uint64)
    out_of_range = (src_end > np.uint64(n_bytes)) | (src_end < ch["src_offset"])
    too_big = (ch["decoded_len"] > MAX_CHUNK_DECODED) | (ch["stored_len"] > MAX_CHUNK_STORED)
    for i in np.flatnonzero(~skip & (out_of_range | too_big))[:16].tolist():
        detail[i] = ("stored bytes lie outside the fetched buffer" if out_of_range[i] else
                     f"chunk exceeds {MAX_CHUNK_STORED} stored / {MAX_CHUNK_DECODED} decoded bytes")
    flags[~skip & (out_of_range | too_big)] |= BAD_LENGTH


def _flag_codecs(ch: np.ndarray, data: np.ndarray, skip: np.ndarray, flags: np.ndarray, n_threads: int) -> None:
    """Compression and encoding IDs, raw lengths, then the structure of the Zstd frames
    still unflagged (one frame, ending at the stored length)."""
    comp = ch["compression"]
    flags[~skip & (comp != COMP_RAW) & (comp != COMP_ZSTD)] |= UNSUPPORTED_COMPRESSION
    known_enc = np.isin(ch["encoding"], np.array(KNOWN_COLUMN_ENCODINGS, dtype=ch["encoding"].dtype))
    flags[~skip & ~known_enc] |= UNSUPPORTED_ENCODING
    flags[~skip & (comp == COMP_RAW) & (ch["stored_len"] != ch["decoded_len"])] |= DECODED_LENGTH_MISMATCH
    zidx = np.flatnonzero(~skip & (comp == COMP_ZSTD) & (flags == 0))
    zflags = np.zeros(zidx.size, dtype=np.uint32)
    if zidx.size:
        with numba_threads(stage_threads(n_threads, items=zidx.size)):
            check_zstd_frames(
                data,
                np.ascontiguousarray(ch["src_offset"][zidx], dtype=np.uint64),
                np.ascontiguousarray(ch["stored_len"][zidx], dtype=np.uint32),
                np.ascontiguousarray(ch["decoded_len"][zidx], dtype=np.uint32),
                zflags,
            )
        flags[zidx] |= zflags


def _kernel_meta(batch: ChunkBatch, skip: np.ndarray, flags: np.ndarray) -> np.ndarray:
    """The kernels' chunk table (:mod:`.chunks`' ``M_*`` columns); chunks still unflagged are active."""
    ch = batch.chunks
    slot = ch["slot"]
    meta = np.empty((len(ch), N_META), dtype=np.int64)
    meta[:, M_ACTIVE] = ~skip & (flags == 0)
    meta[:, M_IN_SCRATCH] = 0
    meta[:, M_OFFSET] = ch["src_offset"].astype(np.int64)
    meta[:, M_LENGTH] = ch["decoded_len"]
    meta[:, M_ENCODING] = ch["encoding"]
    meta[:, M_ROWS] = ch["rows"]
    meta[:, M_NULLS] = ch["null_count"]
    meta[:, M_OUT_ROW] = ch["out_row"].astype(np.int64)
    meta[:, M_FIELD] = slot.astype(np.int64) - FIRST_FIELD_SLOT
    meta[:, M_MIN_TS] = ch["min_timestamp"]
    meta[:, M_MAX_TS] = ch["max_timestamp"]
    meta[:, M_TS_CHUNK] = -1
    is_seq_slot = slot == SLOT_SEQUENCE
    if is_seq_slot.any():
        meta[is_seq_slot, M_TS_CHUNK] = block_chunks(batch, SLOT_TIMESTAMP)[ch["block"][is_seq_slot].astype(np.int64)]
    return meta


def _outputs(batch: ChunkBatch, meta: np.ndarray, active: np.ndarray):
    """``(ts, seq, op, vals, bitmaps, want_bm)``: the output columns in Arrow's memory pool,
    uninitialised (decoded rows overwrite them and the rest is zeroed after decoding), and
    which fields get a validity bitmap: all but those whose active chunks have no null and
    cover every row."""
    ch = batch.chunks
    n_rows = int(batch.n_rows)
    n_fields = len(batch.field_names)
    is_f = ch["encoding"] == 5
    field = meta[:, M_FIELD]
    want_bm = np.ones(max(n_fields, 1), dtype=np.uint8)[:n_fields]
    for k in range(n_fields):
        m = active & is_f & (field == k)
        want_bm[k] = int(ch["null_count"][m].any() or int(meta[m, M_ROWS].sum()) != n_rows)
    stride = -(-((n_rows + 7) >> 3) // 64) * 64  # 64-byte aligned bitmap per field
    ts = pool_array(n_rows, np.int64)
    seq = pool_array(n_rows if batch.want_sequence else 0, np.uint64)
    op = pool_array(n_rows if batch.want_op_type else 0, np.uint8)
    vals = pool_array((n_fields, n_rows), np.uint64)
    bitmaps = pool_array((n_fields, stride), np.uint8)
    return ts, seq, op, vals, bitmaps, want_bm


def _decode(batch: ChunkBatch, data, meta, active, flags, detail, outputs, edges, n_threads: int) -> RangeDecoder:
    """Decompress and decode the active chunks (:mod:`.window`) on the threads the work
    deserves (:mod:`.parallel`); then the sequence order rule across blocks."""
    ch = batch.chunks
    n = len(ch)
    zstd = active & (ch["compression"] == COMP_ZSTD)
    dec = RangeDecoder(data, meta, zstd, ch, outputs, flags, edges)
    if n:
        cost = np.where(active, ch["decoded_len"].astype(np.float64), 0.0)
        work = int(meta[active, M_ROWS].sum())
        zbytes = int(ch["decoded_len"][zstd].sum(dtype=np.int64))
        threads = stage_threads(n_threads, values=work, zstd_bytes=zbytes) if n > 1 else 1
        run_ranges(dec.run, cost, ch["block"], threads)
    dec.collect_failures(flags, detail)
    ts, seq = outputs[:2]
    if batch.want_sequence and n:
        flag_sequence_boundaries(batch, flags, ts, seq)
        if (flags & np.uint32(SEQUENCE_ORDER)).any():
            add_sequence_order_detail(batch, flags, detail, ts, seq)
    return dec


def _finish(batch: ChunkBatch, meta, active, flags, outputs, edges):
    """Zero (and null) the rows no decoded chunk wrote; returns the fields' ``(bitmaps, null counts)``
    (bitmap None for a field without nulls).  Timestamp and sequence checks that fail after every
    row was written (bounds, order) keep the rows."""
    ts, seq, op, vals, bitmaps, want_bm = outputs
    n_rows = int(batch.n_rows)
    n_fields = len(batch.field_names)
    # Which column each chunk writes: the encoding chooses (the planner checked roles).
    enc = batch.chunks["encoding"]
    is_ts, is_seq, is_op, is_f = (enc == 1) | (enc == 2), (enc == 3) | (enc == 4), (enc == 6) | (enc == 7), enc == 5
    field = meta[:, M_FIELD]
    ok = active & (flags == 0)
    written = active & ((flags & ~np.uint32(ROWS_WRITTEN_FLAGS)) == 0)
    # Output column of each chunk (0 ts, 1 seq, 2 op, 3 + k field k) and rows decoded per column:
    # a column whose decoded rows add up to n_rows has no gap (one chunk per block and column).
    col_of = np.select([is_ts, is_seq, is_op, is_f], [0, 1, 2, 3 + field], -1)
    n_cols = FIRST_FIELD_SLOT + n_fields
    rows_written = np.bincount(col_of[written & (col_of >= 0)], weights=meta[written & (col_of >= 0), M_ROWS],
                               minlength=n_cols)
    rows_ok = np.bincount(col_of[ok & (col_of >= 0)], weights=meta[ok & (col_of >= 0), M_ROWS], minlength=n_cols)
    nulls_ok = np.bincount(col_of[ok & (col_of >= 0)], weights=meta[ok & (col_of >= 0), M_NULLS], minlength=n_cols)
    block_rows = np.ascontiguousarray(batch.blocks["out_row"], dtype=np.int64)
    for c, (col, which) in enumerate(((ts, is_ts), (seq, is_seq), (op, is_op))):
        if col.shape[0] and rows_written[c] != n_rows:
            s, e, _ = _decoded_ranges(meta, written, which)
            _zero_gaps(col, s, e, n_rows)
    bitmap_list: list[np.ndarray | None] = []
    null_counts: list[int] = []
    for k in range(n_fields):
        nulls = n_rows - int(rows_ok[3 + k]) + int(nulls_ok[3 + k])
        if rows_ok[3 + k] == n_rows and not nulls:
            bitmap_list.append(None)
            null_counts.append(0)
            continue
        s, e, idx = _decoded_ranges(meta, ok, is_f & (field == k))
        _zero_gaps(vals[k], s, e, n_rows)
        if nulls and not want_bm[k]:  # a chunk failed where no bitmap was planned
            bitmaps[k, :] = 0
            fill_valid(bitmaps[k], s, e)
        elif nulls:
            finish_bitmap(bitmaps[k], s, e, idx, edges, block_rows, n_rows)
        bitmap_list.append(bitmaps[k, : (n_rows + 7) >> 3] if nulls else None)
        null_counts.append(nulls)
    return bitmap_list, null_counts


def _decoded_ranges(meta: np.ndarray, ok: np.ndarray, which: np.ndarray):
    """Sorted row ranges ``(starts, ends, chunk index)`` of the decoded chunks ``ok & which``."""
    idx = np.flatnonzero(ok & which)
    starts = meta[idx, M_OUT_ROW]
    order = np.argsort(starts, kind="stable")
    idx = idx[order]
    starts = starts[order]
    return starts, starts + meta[idx, M_ROWS], idx


@numba.njit(nogil=True, cache=True)
def _zero_gaps(col, starts, ends, n_rows):
    """Zero the rows of ``col`` outside the decoded ranges ``[starts[k], ends[k])`` (sorted, disjoint)."""
    pos = 0
    for k in range(starts.shape[0]):
        for r in range(pos, starts[k]):
            col[r] = 0
        pos = ends[k]
    for r in range(pos, n_rows):
        col[r] = 0


def decode_chunk_bytes(encoding: int, data: bytes, rows: int, null_count: int = 0, min_ts: int | None = None,
                       max_ts: int | None = None, compression: int = COMP_RAW, decoded_len: int | None = None):
    """Decode one chunk's stored bytes (convenience for tests and tools).

    Returns the column (int64 timestamps, uint64 sequences, uint8 operation
    types) or ``(float64 values, bool validity)`` for encoding 5.  Unknown
    encodings decode as a field.  Timestamp bound checks are skipped when
    ``min_ts``/``max_ts`` are None.  Raises like :func:`decode_batch`.
    """
    from ...batch import BLOCK_DTYPE, CHUNK_DTYPE

    raw = bytes(data)
    if encoding in (1, 2):
        slot, role = 0, 1
    elif encoding in (3, 4):
        slot, role = 1, 2
    elif encoding in (6, 7):
        slot, role = 2, 3
    else:
        slot, role = FIRST_FIELD_SLOT, 4
    fields = dict(stored_len=len(raw), decoded_len=len(raw) if decoded_len is None else decoded_len,
                  checksum=xxhash.xxh64_intdigest(raw), encoding=encoding, compression=compression, role=role,
                  slot=slot, rows=rows, null_count=null_count)
    chunks = np.zeros(1, dtype=CHUNK_DTYPE)
    for name, value in fields.items():
        chunks[name] = value
    blocks = np.zeros(1, dtype=BLOCK_DTYPE)
    blocks[0]["rows"] = rows
    batch = ChunkBatch(chunks, blocks, np.frombuffer(raw, dtype=np.uint8).copy(), rows,
                       ("value",) if slot >= FIRST_FIELD_SLOT else (), source="<bytes>")
    check_bounds = min_ts is not None and max_ts is not None
    if check_bounds:
        chunks["min_timestamp"] = min_ts
        chunks["max_timestamp"] = max_ts
    cols, flags, detail = decode_batch_flags(batch, threads=1)
    if not check_bounds:
        flags &= np.uint32(~TIMESTAMP_BOUNDS & 0xFFFFFFFF)
    raise_for_flags(batch, flags, detail or None)
    if encoding in (1, 2):
        return cols.timestamp
    if encoding in (3, 4):
        return cols.sequence
    if encoding in (6, 7):
        return cols.op_type
    return cols.values[0], cols.validity[0]
