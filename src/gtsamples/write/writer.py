"""The spec's default writer: a pyarrow Table in spec order -> a published artifact.

Pipeline (no per-row Python):

1. validate arguments and the Arrow schema; view every column as numpy
   (zero-copy for single-chunk columns);
2. one numba pass checks op types and the spec order (first offending row);
3. one numba pass splits blocks (identity change or the row cap);
4. per-block null counts (numba) decide which field chunks exist, hence the
   descriptor sizes; descriptors are packed greedily into leaves
   (``max_page_bytes``) and leaves into parts (``max_leaves_per_root``) before
   anything is encoded;
5. per part, in batches of about ``BATCH_BYTES`` reserved bytes: numba kernels
   (``prange`` over blocks) choose each chunk's encoding and write it into a
   worst-case region of a reused buffer; Zstd level 3 compresses every chunk
   of the batch on all cores (``multi_compress_to_buffer``), the frame is kept
   only when strictly smaller, XXH64 of the stored bytes; a writer thread
   writes the batch while the next one is encoded;
6. descriptors, page references and trailers are numpy structured arrays
   serialised with ``tobytes()``;
7. parts and then the manifest are published through the store
   (:meth:`gtsamples.storage.Store.publish`): locally into a temporary sibling
   directory, fsynced, renamed to ``<generation>`` (atomic; an existing
   generation is never replaced); on object stores the manifest last.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import os
import threading
import uuid
from typing import Any, NamedTuple, Sequence

import numpy as np
import pyarrow as pa
import xxhash
import zstandard

from ..errors import SamplesError
from ..format import constants as C
from ..format import structs as S
from ..format.manifest import (
    CatalogEntry,
    FieldColumn,
    Manifest,
    ObjectRef,
    PartDescriptor,
    TimestampColumn,
    artifact_prefix,
)
from ..runtime import PRANGE
from ..storage import Store, is_local_root, root_arg
from . import encode as E
from .inputs import (
    FIXED_COLUMNS,
    Columns,
    as_table,
    check_order,
    check_schema,
    compression_arg,
    extract,
    field_ids_arg,
    file_id_arg,
    int_arg,
)

__all__ = ["write_artifact", "write_artifact_from_parquet", "parse_write_options", "WriteOptions",
           "FIXED_COLUMNS"]



# =============================================================================
# encoding, compression, layout
# =============================================================================


def _threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover
        return max(1, os.cpu_count() or 1)


class _Compressor:
    """Zstd at one level; a chunk/page is stored compressed only if strictly smaller.
    Level None: nothing is compressed (``compression=None``)."""

    #: use python-zstandard's multi-threaded batch API when the backend has it
    USE_MULTI = True

    def __init__(self, level: int | None):
        self.level = level
        self.cctx = None if level is None else zstandard.ZstdCompressor(level=level)

    def one(self, data: bytes) -> tuple[bytes, int]:
        if self.cctx is None:
            return data, C.COMP_RAW
        z = self.cctx.compress(data)
        if len(z) < len(data):
            return z, C.COMP_ZSTD
        return data, C.COMP_RAW

    def chosen(self, raw: np.ndarray, offs: np.ndarray, lens: np.ndarray) -> tuple[list, np.ndarray, np.ndarray]:
        """:meth:`one` for the chunks ``raw[offs[i]:offs[i]+lens[i]]``: ``(frames, use,
        stored)``, the frames used where ``use`` (strictly smaller), the stored lengths."""
        n = len(offs)
        if self.cctx is None:
            return [None] * n, np.zeros(n, bool), lens
        frames = self.many(raw, offs, lens)
        fl = [frames[i] for i in range(n)]
        zl = np.fromiter(map(len, fl), np.int64, count=n)
        use = zl < lens  # Zstd only when strictly smaller
        return fl, use, np.where(use, zl, lens)

    def many(self, raw: np.ndarray, offs: np.ndarray, lens: np.ndarray) -> Sequence:
        """Compressed frames of ``raw[offs[i]:offs[i]+lens[i]]``, in order."""
        n = len(offs)
        if n == 0:
            return []
        threads = _threads()
        if self.USE_MULTI and hasattr(self.cctx, "multi_compress_to_buffer"):
            segs = np.empty((n, 2), dtype="<u8")
            segs[:, 0] = offs
            segs[:, 1] = lens
            buf = zstandard.BufferWithSegments(raw, segs.tobytes())
            return self.cctx.multi_compress_to_buffer(buf, threads=threads if threads > 1 else 0)
        # fallback (e.g. the cffi backend): a thread pool; compress releases the GIL
        mv = memoryview(raw)
        local = threading.local()

        def job(i):
            c = getattr(local, "cctx", None)
            if c is None:
                c = local.cctx = zstandard.ZstdCompressor(level=self.level)
            o = int(offs[i])
            return c.compress(mv[o : o + int(lens[i])])

        with concurrent.futures.ThreadPoolExecutor(threads) as ex:
            return list(ex.map(job, range(n), chunksize=64))


#: Chunks are encoded, compressed and written in batches of about this many
#: encoded bytes (bounded memory; the raw buffers are reused; writing a batch
#: overlaps encoding and compressing the next).
BATCH_BYTES = 32 << 20


def _page_refs(first_tid, first_tsid, last_tid, last_tsid, mins, maxs) -> np.ndarray:
    mins = np.atleast_1d(mins)
    r = np.zeros(len(mins), dtype=S.PAGE_REF)
    r["first_table_id"] = first_tid
    r["first_tsid"] = first_tsid
    r["last_table_id"] = last_tid
    r["last_tsid"] = last_tsid
    r["min_timestamp"] = mins
    r["max_timestamp"] = maxs
    return r


def _set_ref(ref: np.ndarray, offset, stored, decoded, data_list, encoding, compression) -> None:
    ref["offset"] = offset
    ref["stored_len"] = stored
    ref["decoded_len"] = decoded
    ref["checksum"] = np.array([xxhash.xxh64_intdigest(d) for d in data_list], dtype=np.uint64)
    ref["encoding"] = encoding
    ref["compression"] = compression
    ref["reserved"] = 0


class _Layout:
    """Everything decided before any chunk is encoded: blocks, null counts,
    present chunks (file order), worst-case chunk regions, leaves and parts.

    Encodings and encoded sizes are filled in batch by batch (``encode``).
    """

    def __init__(self, cols: Columns, ts_id: int, field_ids: list[int], row_limit: int,
                 max_page_bytes: int, max_leaves: int):
        self.cols = cols
        nfields = len(field_ids)
        self.ncol = ncol = 3 + nfields
        cap = min(row_limit, C.max_block_rows(nfields))

        # blocks
        self.starts, self.counts, self.ordinals = E.split_blocks(cols.tid, cols.tsid, cap)
        self.nb = nb = len(self.starts)
        self.ts_u = cols.ts.view(np.uint64)

        # null counts decide which field chunks exist (and so descriptor sizes)
        # (fields are passed to the kernels by address: one launch for all fields)
        self.vptrs, self.bptrs, self.bos = cols.field_pointers()
        self.nrows = len(cols.tid)
        nulls = np.zeros((nb, nfields), np.int64)
        if self.bptrs.any():
            PRANGE.call(E.null_counts_all, self.bptrs, self.bos, self.nrows, self.starts, self.counts, nulls)
        self.nulls = nulls

        # worst-case regions, laid out in file order; batches use windows of it
        wsize = E.worst_sizes(self.counts, nulls)
        flat_size = wsize.ravel()
        flat_off = np.empty_like(flat_size)
        flat_off[0] = 0
        np.cumsum(flat_size[:-1], out=flat_off[1:])
        self.offs = flat_off.reshape(nb, ncol)
        self.block_raw0 = np.r_[self.offs[:, 0], flat_off[-1] + flat_size[-1]]  # region start of block b; sentinel

        # chunk table (present chunks in file order)
        present = flat_size > 0
        self.cidx = cidx = np.flatnonzero(present)
        self.nc = nc = len(cidx)
        self.c_block = cidx // ncol
        self.c_col = cidx % ncol
        self.c_raw_off = flat_off[cidx]
        col_role = np.array([C.ROLE_TIMESTAMP, C.ROLE_SEQUENCE, C.ROLE_OP_TYPE] + [C.ROLE_FIELD] * nfields, np.uint32)
        col_id = np.array([ts_id, 0, 0] + list(field_ids), np.uint32)
        self.c_role = col_role[self.c_col]
        self.c_id = col_id[self.c_col]
        self.c_nulls = np.concatenate([np.zeros((nb, 3), np.int64), nulls], axis=1).ravel()[cidx]
        self.chunks_per_block = present.reshape(nb, ncol).sum(axis=1)
        self.block_chunk0 = np.zeros(nb + 1, np.int64)
        np.cumsum(self.chunks_per_block, out=self.block_chunk0[1:])

        # block metadata
        self.tid_b = cols.tid[self.starts]
        self.tsid_b = cols.tsid[self.starts]
        self.min_b = cols.ts[self.starts]
        self.max_b = cols.ts[self.starts + self.counts - 1]

        # leaves and parts
        desc_size = C.BLOCK_PREFIX_SIZE + C.COLUMN_DESC_SIZE * self.chunks_per_block
        self.leaf_of, part_of = E.pack_leaves(desc_size, max_page_bytes, max_leaves)
        pf = np.flatnonzero(np.r_[True, part_of[1:] != part_of[:-1]])
        self.part_blocks = list(zip(pf.tolist(), np.r_[pf[1:], nb].tolist()))

        # filled while encoding / writing
        self.c_len = np.zeros(nc, np.int64)
        self.c_enc = np.full(nc, C.ENC_F64_XOR, np.uint16)
        self.stored = np.zeros(nc, np.int64)
        self.comp = np.zeros(nc, np.uint16)
        self.checks = np.zeros(nc, np.uint64)

    # -- batches -----------------------------------------------------------
    def batches(self, b0: int, b1: int, batch_bytes: int) -> list[tuple[int, int]]:
        """Split blocks ``[b0, b1)`` into runs of about ``batch_bytes`` reserved bytes."""
        raw0 = self.block_raw0[b0:b1 + 1]
        key = (raw0[:-1] - raw0[0]) // batch_bytes
        cut = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) + b0
        return list(zip(cut.tolist(), np.r_[cut[1:], b1].tolist()))

    def max_batch_raw(self, batch_bytes: int) -> int:
        per_block = np.diff(self.block_raw0)
        return int(min(self.block_raw0[-1], batch_bytes + per_block.max()))

    def encode(self, a: int, b: int, out: np.ndarray) -> None:
        """Encode the chunks of blocks ``[a, b)`` into their regions of ``out``
        (relative to block ``a``); fills ``c_len`` and ``c_enc`` of their chunks."""
        cols = self.cols
        m = b - a
        base = int(self.block_raw0[a])
        offs = self.offs[a:b] - base
        st, ct = self.starts[a:b], self.counts[a:b]
        enc = np.empty((m, 3), np.uint16)
        size = np.zeros((m, self.ncol), np.int64)
        fsize = np.empty((m, 3), np.int64)
        fld = np.empty((m, self.ncol - 3), np.int64)
        # numba's parallel kernels, through the process's gate (one at a time under the
        # "workqueue" layer, serial in a child forked after GNU OpenMP ran)
        PRANGE.call(E.encode_fixed, cols.ts, self.ts_u, cols.seq, cols.op, st, ct, np.ascontiguousarray(offs[:, :3]),
                    out, enc, fsize)
        PRANGE.call(E.encode_fields, self.vptrs, self.bptrs, self.bos, self.nrows, st, ct, self.nulls[a:b],
                    np.ascontiguousarray(offs[:, 3:]), out, fld)
        size[:, :3] = fsize
        size[:, 3:] = fld
        k0, k1 = int(self.block_chunk0[a]), int(self.block_chunk0[b])
        local = self.cidx[k0:k1] - a * self.ncol
        self.c_len[k0:k1] = size.ravel()[local]
        col = self.c_col[k0:k1]
        fixed = col < 3
        self.c_enc[k0:k1][fixed] = enc[(self.c_block[k0:k1] - a)[fixed], col[fixed]]


def _descriptor_records(layout: _Layout, b0: int, b1: int, chunk_offset: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Serialised descriptors of blocks ``[b0, b1)`` as 44-byte records.

    Returns ``(records, rec_start)`` where block ``b0 + i`` occupies records
    ``rec_start[i]:rec_start[i + 1]`` (its prefix, then its column descriptors).
    """
    nb = b1 - b0
    k0, k1 = int(layout.block_chunk0[b0]), int(layout.block_chunk0[b1])
    nc = k1 - k0
    recs = np.empty((nb + nc, C.BLOCK_PREFIX_SIZE), np.uint8)
    bp = np.zeros(nb, S.BLOCK_PREFIX)
    bp["table_id"] = layout.tid_b[b0:b1]
    bp["tsid"] = layout.tsid_b[b0:b1]
    bp["min_timestamp"] = layout.min_b[b0:b1]
    bp["max_timestamp"] = layout.max_b[b0:b1]
    bp["ordinal"] = layout.ordinals[b0:b1]
    bp["row_count"] = layout.counts[b0:b1]
    bp["column_count"] = layout.chunks_per_block[b0:b1]
    rec_of_block = np.arange(nb) + (layout.block_chunk0[b0:b1] - k0)
    recs[rec_of_block] = bp.view(np.uint8).reshape(nb, C.BLOCK_PREFIX_SIZE)
    cd = np.zeros(nc, S.COLUMN_DESC)
    cd["role"] = layout.c_role[k0:k1]
    cd["column_id"] = layout.c_id[k0:k1]
    ref = cd["ref"]
    ref["offset"] = chunk_offset
    ref["stored_len"] = layout.stored[k0:k1]
    ref["decoded_len"] = layout.c_len[k0:k1]
    ref["checksum"] = layout.checks[k0:k1]
    ref["encoding"] = layout.c_enc[k0:k1]
    ref["compression"] = layout.comp[k0:k1]
    cd["null_count"] = layout.c_nulls[k0:k1]
    recs[(layout.c_block[k0:k1] - b0) + np.arange(nc) + 1] = cd.view(np.uint8).reshape(nc, C.COLUMN_DESC_SIZE)
    return recs, np.r_[rec_of_block, nb + nc]


def _metadata(layout: _Layout, comp: _Compressor, b0: int, b1: int, payload_end: int,
              chunk_offset: np.ndarray, max_page_bytes: int) -> tuple[list, int, np.ndarray, int, int]:
    """Leaf pages, optional internal root and the trailer of the part of blocks ``[b0, b1)``.

    Returns ``(pieces, depth, root_ref, file_length, n_leaves)``.
    """
    recs, rec_start = _descriptor_records(layout, b0, b1, chunk_offset)
    leaf_of = layout.leaf_of[b0:b1]
    lf = np.flatnonzero(np.r_[True, leaf_of[1:] != leaf_of[:-1]])  # relative to b0
    le = np.r_[lf[1:], b1 - b0]
    nl = len(lf)
    pages, comps, decs = [], [], []
    for a, b in zip(lf.tolist(), le.tolist()):
        pre = np.zeros(1, S.PAGE_PREFIX)
        pre["kind"] = C.PAGE_KIND_LEAF
        pre["entry_count"] = b - a
        page = pre.tobytes() + recs[rec_start[a] : rec_start[b]].tobytes()
        if len(page) > max_page_bytes:  # pragma: no cover - pack_leaves guarantees it
            raise AssertionError(f"leaf of {len(page)} bytes exceeds {max_page_bytes}")
        st, cp = comp.one(page)
        pages.append(st)
        comps.append(cp)
        decs.append(len(page))
    tid, tsid = layout.tid_b[b0:b1], layout.tsid_b[b0:b1]
    mins = np.minimum.reduceat(layout.min_b[b0:b1], lf)
    maxs = np.maximum.reduceat(layout.max_b[b0:b1], lf)
    leaf_refs = _page_refs(tid[lf], tsid[lf], tid[le - 1], tsid[le - 1], mins, maxs)
    lens = np.array([len(x) for x in pages], np.int64)
    loffs = payload_end + np.r_[0, np.cumsum(lens)[:-1]]
    _set_ref(leaf_refs["ref"], loffs, lens, decs, pages, C.META_ENC_PAGE, comps)
    pieces = list(pages)
    meta_end = int(payload_end + lens.sum())
    if nl == 1:
        depth, root = 1, leaf_refs
    else:
        depth = 2
        root = _page_refs(tid[0], tsid[0], tid[-1], tsid[-1], mins.min(), maxs.max())
        pre = np.zeros(1, S.PAGE_PREFIX)
        pre["kind"] = C.PAGE_KIND_INTERNAL
        pre["entry_count"] = nl
        page = pre.tobytes() + leaf_refs.tobytes()
        st, cp = comp.one(page)
        _set_ref(root["ref"], meta_end, len(st), len(page), [st], C.META_ENC_PAGE, cp)
        pieces.append(st)
        meta_end += len(st)
    file_length = meta_end + C.TRAILER_SIZE
    tr = np.zeros(1, S.TRAILER)
    tr["root"] = root
    tr["depth"] = depth
    tr["version"] = C.FILE_VERSION
    tr["file_length"] = file_length
    tr["payload_end"] = payload_end
    tr["magic"] = C.MAGIC
    tr["checksum"] = xxhash.xxh64_intdigest(tr.tobytes()[: C.TRAILER_CHECKSUMMED])
    pieces.append(tr.tobytes())
    return pieces, depth, root, file_length, nl


def _header_bytes() -> bytes:
    h = np.zeros(1, S.HEADER)
    h["magic"] = C.MAGIC
    h["version"] = C.FILE_VERSION
    return h.tobytes()


def _write_part(sink, layout: _Layout, part_id: int, comp: _Compressor, bufs: list, io: concurrent.futures.Executor,
                max_page_bytes: int, batch_bytes: int) -> PartDescriptor:
    """Encode, compress and write one part: header, chunks (in batches), metadata, trailer."""
    b0, b1 = layout.part_blocks[part_id]
    k_first = int(layout.block_chunk0[b0])
    obj = sink.open(C.part_file_name(part_id))
    pending: list[concurrent.futures.Future] = []
    try:
        pending.append(io.submit(obj.write, [_header_bytes()]))
        for bi, (a, b) in enumerate(layout.batches(b0, b1, batch_bytes)):
            buf = bufs[bi % len(bufs)]
            # the write that last used this buffer must be done before reuse
            while len(pending) >= len(bufs):
                pending.pop(0).result()
            layout.encode(a, b, buf)
            k0, k1 = int(layout.block_chunk0[a]), int(layout.block_chunk0[b])
            base = int(layout.block_raw0[a])
            roffs = layout.c_raw_off[k0:k1] - base
            lens = layout.c_len[k0:k1]
            nk = k1 - k0
            fl, use, stored = comp.chosen(buf, roffs, lens)
            layout.stored[k0:k1] = stored
            layout.comp[k0:k1] = np.where(use, C.COMP_ZSTD, C.COMP_RAW)
            mv = memoryview(buf)
            pieces = [
                z if u else mv[o : o + ln]
                for z, u, o, ln in zip(fl, use.tolist(), roffs.tolist(), lens.tolist())
            ]
            del fl
            layout.checks[k0:k1] = np.fromiter(map(xxhash.xxh64_intdigest, pieces), np.uint64, count=nk)
            pending.append(io.submit(obj.write, pieces))
        k_end = int(layout.block_chunk0[b1])
        st = layout.stored[k_first:k_end]
        chunk_offset = C.HEADER_SIZE + np.r_[0, np.cumsum(st)[:-1]]
        payload_end = C.HEADER_SIZE + int(st.sum())
        meta, depth, root, file_length, _ = _metadata(layout, comp, b0, b1, payload_end, chunk_offset, max_page_bytes)
        pending.append(io.submit(obj.write, meta))
        for f in pending:
            f.result()
        pending.clear()
        obj.close()
    except BaseException:
        for f in pending:  # never leave a writer running on a buffer we free
            try:
                f.result()
            except BaseException:  # noqa: BLE001
                pass
        obj.discard()
        raise
    if obj.size != file_length:  # pragma: no cover - internal invariant
        raise AssertionError(f"{C.part_file_name(part_id)}: wrote {obj.size} bytes, planned {file_length}")
    r = root[0]
    return PartDescriptor(
        part_id=part_id,
        file_size=file_length,
        num_rows=int(layout.counts[b0:b1].sum()),
        num_blocks=b1 - b0,
        first=(int(r["first_table_id"]), int(r["first_tsid"])),
        last=(int(r["last_table_id"]), int(r["last_tsid"])),
        min_timestamp=int(r["min_timestamp"]),
        max_timestamp=int(r["max_timestamp"]),
    )


def _write_parts(sink, cols: Columns, ts_id: int, field_ids: list[int], row_limit: int,
                 max_page_bytes: int, max_leaves: int, level: int | None,
                 batch_bytes: int | None = None) -> list[PartDescriptor]:
    batch_bytes = batch_bytes or BATCH_BYTES
    layout = _Layout(cols, ts_id, field_ids, row_limit, max_page_bytes, max_leaves)
    comp = _Compressor(level)
    cap = layout.max_batch_raw(batch_bytes)
    nbatches = sum(len(layout.batches(a, b, batch_bytes)) for a, b in layout.part_blocks)
    bufs = [np.empty(cap, np.uint8) for _ in range(2 if nbatches > 1 else 1)]
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gtsamples-write") as io:
        return [
            _write_part(sink, layout, p, comp, bufs, io, max_page_bytes, batch_bytes)
            for p in range(len(layout.part_blocks))
        ]


# =============================================================================
# publishing
# =============================================================================


def _publication(store_root: Any, prefix: str, storage_options: dict | None):
    """Start publishing the generation directory ``prefix`` of ``store_root`` (see
    :meth:`~gtsamples.storage.Store.publish`)."""
    store_root = root_arg("store_root", store_root)
    local = is_local_root(store_root)
    return Store(store_root, None if local else storage_options).publish(prefix)


# =============================================================================
# public API
# =============================================================================


class WriteOptions(NamedTuple):
    """:func:`write_artifact`'s layout and compression knobs, checked
    (:func:`parse_write_options`)."""

    row_limit: int
    max_page_bytes: int
    max_leaves_per_root: int
    zstd_level: int | None  # None: every chunk and page stored raw


def parse_write_options(n_fields: int, *, row_limit: int = C.MAX_BLOCK_ROWS, max_page_bytes: int | None = None,
                        max_leaves_per_root: int = C.MAX_INTERNAL_ENTRIES, compression: str | None = "zstd",
                        compression_level: int = C.WRITER_ZSTD_LEVEL) -> WriteOptions:
    """:func:`write_artifact`'s knobs for a table of ``n_fields`` fields, checked as it
    checks them (TypeError or ValueError naming the knob); an unknown knob is a
    TypeError.  ``Region.build`` checks its options here before it reads any SST."""
    row_limit = int_arg("row_limit", row_limit, 1, C.MAX_BLOCK_ROWS)
    min_page = C.PAGE_PREFIX_SIZE + C.block_desc_size(n_fields)
    if max_page_bytes is None:
        max_page_bytes = max(C.WRITER_PAGE_BYTES, min_page)
    max_page_bytes = int_arg(
        "max_page_bytes", max_page_bytes, min_page, C.MAX_PAGE_DECODED,
        f" (a leaf must hold the widest descriptor of {n_fields} field(s))",
    )
    max_leaves = int_arg("max_leaves_per_root", max_leaves_per_root, 2, C.MAX_INTERNAL_ENTRIES)
    return WriteOptions(row_limit, max_page_bytes, max_leaves, compression_arg(compression, compression_level))


def write_artifact(
    table: pa.Table | pa.RecordBatch,
    store_root: str | os.PathLike,
    *,
    region_id: int,
    source_file_id: str,
    generation: str | None = None,
    timestamp_column_id: int,
    field_column_ids: Sequence[int],
    row_limit: int = C.MAX_BLOCK_ROWS,
    max_page_bytes: int | None = None,
    max_leaves_per_root: int = C.MAX_INTERNAL_ENTRIES,
    compression: str | None = "zstd",
    compression_level: int = C.WRITER_ZSTD_LEVEL,
    storage_options: dict | None = None,
) -> CatalogEntry:
    """Write one columnar-samples artifact and return its catalog entry.

    ``table``: ``__table_id`` uint32, ``__tsid`` uint64, the timestamp column
    (``timestamp[s|ms|us|ns]``, no timezone; its name and unit go to the
    manifest), ``__sequence`` uint64, ``__op_type`` uint8, then 1..=1,024
    nullable float64 fields in manifest order; rows in spec order.

    Writes ``<store_root>/<region_id>/samples/<source_file_id>/<generation>/``
    (``generation``: a new UUID when ``None``) atomically: everything goes into
    a temporary sibling directory which is renamed into place; an existing
    generation is never overwritten (``FileExistsError``).  ``store_root`` may
    also be an fsspec URL (``storage_options`` are passed to fsspec); there the
    parts are written first and the manifest last.

    Knobs may only lower the spec's maxima: ``row_limit`` 1..=8192,
    ``max_page_bytes`` from ``12 + 44 * (4 + F)`` (a leaf holding the widest
    descriptor of this table) to 65,536 (default: 16,384, or that minimum when
    it is larger; small leaves are cheaper for selective queries, see
    ``C.WRITER_PAGE_BYTES``), ``max_leaves_per_root`` 2..=910.

    ``compression``: ``"zstd"`` (the default) stores each chunk and page as a Zstd
    frame of level ``compression_level`` where that is strictly smaller than its
    encoded bytes, else raw; ``None`` stores everything raw (compression 0).
    Levels are libzstd's, -131,072..=22 without 0; the default 3 is the spec's
    default writer.  Negative levels and ``None`` trade bytes for decode time
    (measured in ``benchmarks/RESULTS.md``, "Compression choices").

    Raises ``TypeError`` for wrong column or argument types and ``ValueError``
    for bad values or rows (the message names the column, the first offending
    row and the observed and expected values).
    """
    table = as_table(table)
    region_id = int_arg("region_id", region_id, 0, C.U64_MAX, " (u64)")
    source_file_id = file_id_arg("source_file_id", source_file_id)
    generation = str(uuid.uuid4()) if generation is None else file_id_arg("generation", generation)
    ts_id = int_arg("timestamp_column_id", timestamp_column_id, 0, C.U32_MAX, " (u32)")
    schema = check_schema(table)
    nfields = len(schema.field_names)
    field_ids = field_ids_arg(field_column_ids, nfields, ts_id)
    row_limit, max_page_bytes, max_leaves, level = parse_write_options(
        nfields, row_limit=row_limit, max_page_bytes=max_page_bytes, max_leaves_per_root=max_leaves_per_root,
        compression=compression, compression_level=compression_level)
    if storage_options is not None and not isinstance(storage_options, dict):
        raise TypeError(f"storage_options: expected a dict, found {type(storage_options).__name__}")

    cols = extract(table, schema)
    check_order(cols, schema.ts_name)
    prefix = artifact_prefix(region_id, source_file_id, generation)
    sink = _publication(store_root, prefix, storage_options)
    try:
        if table.num_rows:
            parts = _write_parts(sink, cols, ts_id, field_ids, row_limit, max_page_bytes, max_leaves, level)
        else:
            parts = []
        manifest = Manifest(
            region_id=region_id,
            source_file_id=source_file_id,
            generation=generation,
            timestamp=TimestampColumn(ts_id, schema.ts_name, schema.unit),
            fields=tuple(FieldColumn(i, n) for i, n in zip(field_ids, schema.field_names)),
            files=tuple(parts),
        )
        manifest_bytes = manifest.to_json_bytes()
        if len(manifest_bytes) > C.MAX_MANIFEST_BYTES:  # pragma: no cover - needs ~300k parts
            raise ValueError(
                f"manifest would be {len(manifest_bytes)} bytes ({len(parts)} parts); "
                f"the limit is {C.MAX_MANIFEST_BYTES}"
            )
        obj = sink.open(C.MANIFEST_NAME)
        try:
            obj.write([manifest_bytes])
            obj.close()
        except BaseException:
            obj.discard()
            raise
        sink.commit()
    except BaseException:
        sink.abort()
        raise

    objects = (ObjectRef(prefix + C.MANIFEST_NAME, len(manifest_bytes)),) + tuple(
        ObjectRef(prefix + p.name, p.file_size) for p in parts
    )
    now = datetime.datetime.now(datetime.timezone.utc)
    return CatalogEntry(
        region_id=region_id,
        file_id=source_file_id,
        generation=generation,
        objects=objects,
        file_size=sum(o.file_size for o in objects),
        created_at=now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
    )


def write_artifact_from_parquet(
    src_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    region_id: int,
    file_id: str,
    generation: str | None = None,
    *,
    timestamp_column_id: int = 0,
    field_column_ids: Sequence[int] | None = None,
    storage_options: dict | None = None,
    **kwargs: Any,
) -> CatalogEntry:
    """Build an artifact from a Parquet file holding the stored logical schema.

    The Parquet file must contain ``__table_id``, ``__tsid``, exactly one
    timestamp column, ``__sequence``, ``__op_type`` and float64 fields (any
    column order; fields keep their file order and become the manifest's
    fields).  Other columns are an error.  Rows must be in spec order.

    Column IDs default to ``timestamp_column_id = 0`` and fields ``1..=F`` in
    field order (the spec only requires them to be distinct; pass the region's
    real IDs when known).  ``out_dir`` is the store root; remaining keyword
    arguments go to :func:`write_artifact`.  A file that is not readable Parquet is a
    :class:`~gtsamples.SamplesError` naming it; the OS's errors (a missing file) pass.
    """
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(src_path)
    except (pa.ArrowException, OSError) as e:
        # pyarrow's parser fails with ArrowInvalid (no Parquet magic) or a bare OSError (a damaged
        # footer's thrift); the OS's own errors, OSError's subclasses (a missing file), pass
        if type(e) is not OSError and not isinstance(e, pa.ArrowException):
            raise
        raise SamplesError(f"{os.fspath(src_path)}: not a readable Parquet file ({e})") from None
    names = table.schema.names
    internal = set(C.INTERNAL_COLUMN_NAMES)
    missing = [n for n in C.INTERNAL_COLUMN_NAMES if n not in names]
    if missing:
        raise ValueError(f"{os.fspath(src_path)}: missing column(s) {missing}")
    ts_cols = [f.name for f in table.schema if pa.types.is_timestamp(f.type) and f.name not in internal]
    if len(ts_cols) != 1:
        raise ValueError(f"{os.fspath(src_path)}: expected exactly one timestamp column, found {ts_cols}")
    rest = [n for n in names if n not in internal and n != ts_cols[0]]
    bad = [n for n in rest if not pa.types.is_floating(table.schema.field(n).type)]
    if bad:
        raise ValueError(
            f"{os.fspath(src_path)}: column(s) {bad} are neither internal, the timestamp, nor float fields"
        )
    order = ["__table_id", "__tsid", ts_cols[0], "__sequence", "__op_type"] + rest
    if len(set(order)) != len(order):
        raise ValueError(f"{os.fspath(src_path)}: duplicate column names in {names}")
    table = table.select(order)
    if field_column_ids is None:
        field_column_ids = [i for i in range(1, len(rest) + 2) if i != timestamp_column_id][: len(rest)]
    return write_artifact(
        table,
        out_dir,
        region_id=region_id,
        source_file_id=file_id,
        generation=generation,
        timestamp_column_id=timestamp_column_id,
        field_column_ids=field_column_ids,
        storage_options=storage_options,
        **kwargs,
    )
