"""A whole :class:`~gtsamples.batch.ChunkBatch` decoded on the CPU, step by step, batch-wide.

Every step computes a per-chunk :class:`~gtsamples.errors.DecodeErrorFlag`
word; :func:`decode_batch` raises once, through
:func:`gtsamples.batch.raise_for_flags`, for the first bad chunk.

1. Stored ranges lie inside the fetched buffer and within the spec's limits
   ("Limits and evolution": at most 1 MiB decoded, 1 MiB + 64 KiB stored per
   chunk), else ``BAD_LENGTH``.
2. XXH64 (seed 0) of each chunk's stored bytes must equal the reference
   checksum (``CHECKSUM_MISMATCH``, :mod:`.xxh64`), checked on the decode thread
   just before the chunk is decompressed (:func:`.window.check_stored`).
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
from .parallel import run_ranges, stage_threads, threads_arg
from .window import RangeDecoder
from ...jit import njit


_STATS: dict[str, float] = {}


def last_stats() -> dict[str, float]:
    """Stage costs of the last :func:`decode_batch` call in this process.

    Wall seconds of the host stages: ``prepare`` (the chunk table), ``decode`` (checks,
    decompression and decoding, on the threads) and ``finish`` (gaps and bitmaps), and
    ``total``; CPU seconds summed over the decode threads of ``decompress`` (checksums,
    frame checks and Zstd) and ``kernel`` (the column decoders), and ``cpu``,
    the process's CPU seconds during the call (every thread; system time included).
    Counts: ``chunks`` (in the batch), ``rows`` (output rows), ``zstd_chunks`` and
    ``zstd_bytes`` (decompressed).  Per chunk or per row costs are these divided.
    """
    return dict(_STATS)


@njit(nogil=True)
def _prepare(ch, n_blocks, n_bytes, n_rows, n_fields, want_seq, want_op, known_enc, skip, hash_me, flags, meta):
    """One pass over the chunk table (``ch``: ``CHUNK_DTYPE``, C-contiguous): which chunks the
    batch does not want (sequence and operation type chunks when not wanted: ``skip``),
    ``BAD_LENGTH`` for stored ranges outside the ``n_bytes`` fetched or beyond the spec's
    limits, which chunks get their checksum checked (``hash_me``: wanted, lengths fine),
    then the compression and encoding IDs (``UNSUPPORTED_COMPRESSION``,
    ``UNSUPPORTED_ENCODING``, raw lengths ``DECODED_LENGTH_MISMATCH``), and the kernels'
    table ``meta`` (``M_ACTIVE``: wanted and unflagged so far).  Returns ``(kind, chunk)`` of
    the first planner invariant broken (1: rows past ``n_rows``, 2: a field slot past
    ``n_fields``), ``(0, -1)`` when none."""
    for i in range(ch.shape[0]):
        if np.uint64(ch[i]["out_row"]) + np.uint64(ch[i]["rows"]) > np.uint64(n_rows):
            return 1, i
    for i in range(ch.shape[0]):
        if np.int64(ch[i]["slot"]) - FIRST_FIELD_SLOT >= n_fields:
            return 2, i
    ts_of_block = np.full(n_blocks, -1, np.int64)
    for i in range(ch.shape[0]):
        if ch[i]["slot"] == SLOT_TIMESTAMP and ch[i]["block"] < n_blocks:
            ts_of_block[ch[i]["block"]] = i
    for i in range(ch.shape[0]):
        c = ch[i]
        slot = np.int64(c["slot"])
        role = c["role"]
        sk = ((not want_seq and (role == ROLE_SEQUENCE or slot == SLOT_SEQUENCE))
              or (not want_op and (role == ROLE_OP_TYPE or slot == SLOT_OP_TYPE)))
        skip[i] = sk
        f = 0
        src = np.uint64(c["src_offset"])
        stored = c["stored_len"]
        decoded = c["decoded_len"]
        end = src + np.uint64(stored)
        if not sk and (end > np.uint64(n_bytes) or end < src or decoded > MAX_CHUNK_DECODED
                       or stored > MAX_CHUNK_STORED):
            f = BAD_LENGTH
        hash_me[i] = not sk and f == 0
        comp = c["compression"]
        enc = np.int64(c["encoding"])
        if not sk:
            if comp != COMP_RAW and comp != COMP_ZSTD:
                f |= UNSUPPORTED_COMPRESSION
            if enc >= known_enc.shape[0] or not known_enc[enc]:
                f |= UNSUPPORTED_ENCODING
            if comp == COMP_RAW and stored != decoded:
                f |= DECODED_LENGTH_MISMATCH
        flags[i] = f
        meta[i, M_ACTIVE] = 1 if not sk and f == 0 else 0
        meta[i, M_IN_SCRATCH] = 0
        meta[i, M_OFFSET] = np.int64(src)
        meta[i, M_LENGTH] = decoded
        meta[i, M_ENCODING] = enc
        meta[i, M_ROWS] = c["rows"]
        meta[i, M_NULLS] = c["null_count"]
        meta[i, M_OUT_ROW] = np.int64(c["out_row"])
        meta[i, M_FIELD] = slot - FIRST_FIELD_SLOT
        meta[i, M_MIN_TS] = c["min_timestamp"]
        meta[i, M_MAX_TS] = c["max_timestamp"]
        meta[i, M_TS_CHUNK] = ts_of_block[c["block"]] if slot == SLOT_SEQUENCE and c["block"] < n_blocks else -1
    return 0, -1


#: ``_KNOWN_ENCODING[e]``: column encoding ``e`` is one the spec assigns.
_KNOWN_ENCODING = np.zeros(max(KNOWN_COLUMN_ENCODINGS) + 1, np.bool_)
_KNOWN_ENCODING[list(KNOWN_COLUMN_ENCODINGS)] = True


def _prepare_batch(batch: ChunkBatch, data: np.ndarray, n_fields: int):
    """:func:`_prepare` on ``batch``: ``(chunks, hash_me, flags, meta, detail)``, the chunk
    table C-contiguous; ``detail`` says why the first ``BAD_LENGTH`` chunks are.  A broken
    planner invariant is a ValueError (a bug, not bad input)."""
    ch = np.ascontiguousarray(batch.chunks)
    n = len(ch)
    skip = np.empty(n, np.bool_)
    hash_me = np.empty(n, np.bool_)
    flags = np.empty(n, dtype=np.uint32)
    meta = pool_array((n, N_META), np.int64)  # (27 MB at 280k chunks: reused pages)
    kind, i = _prepare(ch, len(batch.blocks), data.shape[0], int(batch.n_rows), n_fields, bool(batch.want_sequence),
                       bool(batch.want_op_type), _KNOWN_ENCODING, skip, hash_me, flags, meta)
    if kind == 1:
        end = int(ch["out_row"][i]) + int(ch["rows"][i])
        raise ValueError(f"ChunkBatch chunk {i}: rows [{int(ch['out_row'][i])}, {end}) exceed n_rows {batch.n_rows}")
    if kind == 2:
        raise ValueError(f"ChunkBatch chunk {i}: slot {int(ch['slot'][i])} beyond {n_fields} projected fields")
    detail: dict[int, str] = {}
    bad_length = flags & np.uint32(BAD_LENGTH) if np.count_nonzero(flags) else None
    for i in (np.flatnonzero(bad_length)[:16].tolist() if bad_length is not None else ()):
        end = int(ch["src_offset"][i]) + int(ch["stored_len"][i])
        detail[i] = ("stored bytes lie outside the fetched buffer" if end > data.shape[0] else
                     f"chunk exceeds {MAX_CHUNK_STORED} stored / {MAX_CHUNK_DECODED} decoded bytes")
    return ch, hash_me, flags, meta, detail


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
    threads = threads_arg(threads)
    t0 = time.perf_counter()
    c0 = time.process_time()
    if batch.data.dtype != np.uint8 or batch.data.ndim != 1:
        raise ValueError("ChunkBatch.data must be a 1-D uint8 array")
    n_fields = len(batch.field_names)
    data = np.ascontiguousarray(batch.data)
    if not data.flags.writeable:  # one numba specialization: writeable uint8[::1]
        data = data.copy()
    ch, hash_me, flags, meta, detail = _prepare_batch(batch, data, n_fields)
    t1 = time.perf_counter()
    # (the checksum and frame checks, and decompression failures, clear M_ACTIVE later)
    outputs, totals = _outputs(batch, ch, meta[:, M_ACTIVE] != 0)
    edges = np.zeros((len(ch), 2), dtype=np.uint8)
    dec = _decode(batch, data, meta, hash_me, flags, detail, outputs, edges, threads)
    t2 = time.perf_counter()
    active = meta[:, M_ACTIVE] != 0
    bitmap_list, null_counts = _finish(batch, ch, meta, active, flags, outputs, edges, totals)
    t3 = time.perf_counter()

    _STATS.clear()
    _STATS.update(prepare=t1 - t0, decode=t2 - t1,
                  decompress=dec.t_decompress, kernel=dec.t_kernel, finish=t3 - t2, total=t3 - t0,
                  cpu=time.process_time() - c0, chunks=float(len(ch)), rows=float(batch.n_rows),
                  zstd_chunks=float(dec.zstd_chunks), zstd_bytes=float(dec.zstd_bytes))
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


@njit(nogil=True)
def _column_totals(ch, take, n_cols):
    """Per output column (0 timestamp, 1 sequence, 2 operation type, ``3 + k`` field k; the
    encoding chooses, as in the kernels), the rows and null rows of the chunks ``take``."""
    rows = np.zeros(n_cols, np.int64)
    nulls = np.zeros(n_cols, np.int64)
    for i in range(ch.shape[0]):
        if not take[i]:
            continue
        enc = ch[i]["encoding"]
        col = -1
        if enc == 1 or enc == 2:
            col = 0
        elif enc == 3 or enc == 4:
            col = 1
        elif enc == 6 or enc == 7:
            col = 2
        elif enc == 5:
            col = np.int64(ch[i]["slot"])
        if 0 <= col < n_cols:
            rows[col] += ch[i]["rows"]
            nulls[col] += ch[i]["null_count"]
    return rows, nulls


def _outputs(batch: ChunkBatch, ch: np.ndarray, active: np.ndarray):
    """``((ts, seq, op, vals, bitmaps, want_bm), (rows, nulls))``: the output columns in
    Arrow's memory pool, uninitialised (decoded rows overwrite them and the rest is zeroed
    after decoding), and which fields get a validity bitmap: all but those whose active
    chunks have no null and cover every row; then the rows and nulls of the ``active``
    chunks per output column (:func:`_column_totals`)."""
    n_rows = int(batch.n_rows)
    n_fields = len(batch.field_names)
    rows, nulls = _column_totals(ch, active, FIRST_FIELD_SLOT + n_fields)
    want_bm = ((nulls[FIRST_FIELD_SLOT:] > 0) | (rows[FIRST_FIELD_SLOT:] != n_rows)).astype(np.uint8)
    stride = -(-((n_rows + 7) >> 3) // 64) * 64  # 64-byte aligned bitmap per field
    ts = pool_array(n_rows, np.int64)
    seq = pool_array(n_rows if batch.want_sequence else 0, np.uint64)
    op = pool_array(n_rows if batch.want_op_type else 0, np.uint8)
    vals = pool_array((n_fields, n_rows), np.uint64)
    bitmaps = pool_array((n_fields, stride), np.uint8)
    return (ts, seq, op, vals, bitmaps, want_bm), (rows, nulls)


def _decode(batch: ChunkBatch, data, meta, hash_me, flags, detail, outputs, edges, threads: int | None) -> RangeDecoder:
    """Check, decompress and decode the active chunks (:mod:`.window`) on the threads the
    work deserves (:mod:`.parallel`); then the sequence order rule across blocks."""
    ch = batch.chunks
    n = len(ch)
    dec = RangeDecoder(data, meta, ch, outputs, flags, edges, hash_me)
    if n:
        n_threads = stage_threads(threads, values=dec.work, zstd_bytes=dec.zstd_bytes) if n > 1 else 1
        run_ranges(dec.run, dec.cost, ch["block"], n_threads)
    dec.collect_failures(flags, detail)
    ts, seq = outputs[:2]
    if batch.want_sequence and n:
        flag_sequence_boundaries(batch, flags, ts, seq)
        if np.count_nonzero(flags) and np.count_nonzero(flags & np.uint32(SEQUENCE_ORDER)):
            add_sequence_order_detail(batch, flags, detail, ts, seq)
    return dec


def _finish(batch: ChunkBatch, ch: np.ndarray, meta, active, flags, outputs, edges, totals):
    """Zero (and null) the rows no decoded chunk wrote; returns the fields' ``(bitmaps, null counts)``
    (bitmap None for a field without nulls).  Timestamp and sequence checks that fail after every
    row was written (bounds, order) keep the rows.  ``totals``: :func:`_outputs`' rows and nulls
    of the chunks active before decoding, which are those decoded when no chunk is flagged."""
    ts, seq, op, vals, bitmaps, want_bm = outputs
    n_rows = int(batch.n_rows)
    n_fields = len(batch.field_names)
    # Rows decoded per output column (the encoding chooses, as in the kernels): a column
    # whose decoded rows add up to n_rows has no gap (one chunk per block and column).
    if np.count_nonzero(flags):
        ok = active & (flags == 0)
        written = active & ((flags & ~np.uint32(ROWS_WRITTEN_FLAGS)) == 0)
        n_cols = FIRST_FIELD_SLOT + n_fields
        rows_written, _ = _column_totals(ch, written, n_cols)
        rows_ok, nulls_ok = _column_totals(ch, ok, n_cols)
    else:  # every active chunk decoded cleanly (a failure clears M_ACTIVE only with a flag)
        ok = written = active
        rows_written = rows_ok = totals[0]
        nulls_ok = totals[1]
    enc = ch["encoding"]
    block_rows = None
    for c, (col, encs) in enumerate(((ts, (1, 2)), (seq, (3, 4)), (op, (6, 7)))):
        if col.shape[0] and rows_written[c] != n_rows:
            s, e, _ = _decoded_ranges(meta, written, (enc == encs[0]) | (enc == encs[1]))
            _zero_gaps(col, s, e, n_rows)
    bitmap_list: list[np.ndarray | None] = []
    null_counts: list[int] = []
    for k in range(n_fields):
        nulls = n_rows - int(rows_ok[3 + k]) + int(nulls_ok[3 + k])
        if rows_ok[3 + k] == n_rows and not nulls:
            bitmap_list.append(None)
            null_counts.append(0)
            continue
        s, e, idx = _decoded_ranges(meta, ok, (enc == 5) & (meta[:, M_FIELD] == k))
        _zero_gaps(vals[k], s, e, n_rows)
        if nulls and not want_bm[k]:  # a chunk failed where no bitmap was planned
            bitmaps[k, :] = 0
            fill_valid(bitmaps[k], s, e)
        elif nulls:
            if block_rows is None:
                block_rows = np.ascontiguousarray(batch.blocks["out_row"], dtype=np.int64)
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


@njit(nogil=True)
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
