"""Source SSTs: Parquet files with the samples logical schema, rows in spec order.

* :func:`write_sst` writes a pyarrow Table as one SST (column IDs in the Arrow
  field metadata), after checking its schema and row order;
* :func:`describe_sst` checks an existing Parquet file and returns its catalog
  record (file_id, path, size, rows, schema, stats);
* :func:`scan_sst` is the uncovered plan for one SST: row groups pruned by
  their statistics on ``__table_id``, ``__tsid`` and the timestamp, then an
  exact vectorised filter; ranged reads through the gtsamples ``Store`` (so
  they are counted in ``ReadStats``); the footer is cached like artifact pages.

An SST that cannot be read (not Parquet, damaged, missing, shorter than the catalog
records) raises the base :class:`~gtsamples.SamplesError` naming the file and what
failed (:func:`sst_error`), wherever it is read: described, scanned, streamed, built
into an artifact or read by Dask.  It is not a
:class:`~gtsamples.CorruptArtifactError`, which is for artifacts (the spec's rules),
and pyarrow's own exceptions never reach the caller.  A failing store keeps its
:class:`~gtsamples.StorageError` (an ``OSError``: worth a retry).
"""

from __future__ import annotations

import contextlib
import io
import os
import posixpath
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import SamplesError, StorageError
from ..runtime import ForkSafeLock, at_fork_child
from ..plan import IDENTITY, Selection
from ..storage import ReadStats, Store
from .catalog import RegionSchema, is_file_id

#: Rows per Parquet row group for SSTs written by gtsamples (pruning granularity).
DEFAULT_ROW_GROUP_SIZE = 65_536
_STORES: dict = {}
_STORES_LOCK = ForkSafeLock()


@at_fork_child
def _forget_stores() -> None:
    """A forked child opens its own stores (a remote one's connections are the parent's)."""
    _STORES.clear()


# --- locations -----------------------------------------------------------------------------


def is_absolute(path: str) -> bool:
    return "://" in path or os.path.isabs(path)


def store_for(path: str, region_store: Store) -> tuple[Store, str]:
    """(store, key) of an SST path: store-relative keys use the region's store."""
    if not is_absolute(path):
        return region_store, path
    if "://" in path and not path.startswith("file://"):
        parent, name = path.rstrip("/").rsplit("/", 1)
        opts = region_store.storage_options if not region_store.is_local else {}
    else:
        local = path[len("file://"):] if path.startswith("file://") else path
        parent, name = os.path.split(local)
        opts = {}
    key = (parent, tuple(sorted((k, repr(v)) for k, v in opts.items())))
    with _STORES_LOCK:
        st = _STORES.get(key)
        if st is None:
            st = _STORES[key] = Store(parent, opts or None)
    return st, name


def relative_key(path: str, region_store: Store) -> str:
    """Record ``path`` store-relative when it lies under the region store root."""
    if not is_absolute(path):
        return path
    if region_store.is_local and "://" not in path:
        root = os.path.abspath(region_store.path(""))
        ap = os.path.abspath(path)
        if ap.startswith(root.rstrip(os.sep) + os.sep):
            return os.path.relpath(ap, root).replace(os.sep, "/")
    elif not region_store.is_local and "://" in path:
        base = region_store.root.rstrip("/") + "/"
        if path.startswith(base):
            return path[len(base):]
    return path


class StoreFile(io.RawIOBase):
    """A read-only, seekable file over one object of a Store (ranged, counted reads)."""

    def __init__(self, store: Store, key: str, size: int, stats: ReadStats | None):
        super().__init__()
        self.store, self.key, self._size, self.stats = store, key, int(size), stats
        self._pos = 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def size(self):
        return self._size

    def tell(self):
        return self._pos

    def seek(self, offset, whence=io.SEEK_SET):
        if whence == io.SEEK_SET:
            self._pos = int(offset)
        elif whence == io.SEEK_CUR:
            self._pos += int(offset)
        else:
            self._pos = self._size + int(offset)
        return self._pos

    def read(self, n=-1):
        if n is None or n < 0:
            n = self._size - self._pos
        n = max(0, min(int(n), self._size - self._pos))
        if n == 0:
            return b""
        with store_checks(self.store.path(self.key)):
            data = self.store.read(self.key, self._pos, n, self.stats)
        self._pos += n
        return data

    def readinto(self, b):
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def readall(self):
        return self.read(-1)


# --- row-order checks and stats ------------------------------------------------------------------


def _np(col) -> np.ndarray:
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if col.null_count:
        raise SamplesError("null in a non-null column")
    return col.to_numpy(zero_copy_only=False)


def check_order(table_id: np.ndarray, tsid: np.ndarray, ts: np.ndarray, seq: np.ndarray, op: np.ndarray,
                what: str, prev: tuple | None = None) -> tuple | None:
    """Spec order: identities nondecreasing, timestamps nondecreasing within an
    identity, sequences nonincreasing within equal timestamps; op types 0/1.

    ``prev`` is the last row of the previous batch (for chunked checks); returns
    this batch's last row.
    """
    n = table_id.shape[0]
    if n == 0:
        return prev
    bad_op = np.flatnonzero(op > 1)
    if bad_op.size:
        i = int(bad_op[0])
        raise SamplesError(f"{what}: row {i}: __op_type must be 0 (delete) or 1 (put), found {int(op[i])}")
    if prev is not None:
        table_id = np.concatenate([[prev[0]], table_id]).astype(np.uint32)
        tsid = np.concatenate([np.array([prev[1]], np.uint64), tsid])
        ts = np.concatenate([np.array([prev[2]], np.int64), ts])
        seq = np.concatenate([np.array([prev[3]], np.uint64), seq])
    a, b = slice(None, -1), slice(1, None)
    id_lt = (table_id[a] < table_id[b]) | ((table_id[a] == table_id[b]) & (tsid[a] < tsid[b]))
    id_eq = (table_id[a] == table_id[b]) & (tsid[a] == tsid[b])
    ok = id_lt | (id_eq & ((ts[a] < ts[b]) | ((ts[a] == ts[b]) & (seq[a] >= seq[b]))))
    bad = np.flatnonzero(~ok)
    if bad.size:
        i = int(bad[0]) + (0 if prev is None else -1)
        j = int(bad[0])
        raise SamplesError(
            f"{what}: rows are not in spec order at row {i + 1}: (table {int(table_id[j])}, tsid {int(tsid[j])}, "
            f"ts {int(ts[j])}, seq {int(seq[j])}) is followed by (table {int(table_id[j + 1])}, tsid "
            f"{int(tsid[j + 1])}, ts {int(ts[j + 1])}, seq {int(seq[j + 1])}); identities must be nondecreasing, "
            f"timestamps nondecreasing within an identity and sequences nonincreasing within equal timestamps"
        )
    return (int(table_id[-1]), int(tsid[-1]), int(ts[-1]), int(seq[-1]))


def _fixed_arrays(t: pa.Table, ts_name: str):
    return (
        _np(t.column("__table_id")).astype(np.uint32, copy=False),
        _np(t.column("__tsid")).astype(np.uint64, copy=False),
        _np(t.column(ts_name).cast(pa.int64())).astype(np.int64, copy=False),
        _np(t.column("__sequence")).astype(np.uint64, copy=False),
        _np(t.column("__op_type")).astype(np.uint8, copy=False),
    )


class _Stats:
    def __init__(self):
        self.first = self.last = None
        self.min_ts = self.max_ts = None
        self.rows = 0

    def update(self, tid, tsid, ts):
        if tid.shape[0] == 0:
            return
        if self.first is None:
            self.first = [int(tid[0]), int(tsid[0])]
        self.last = [int(tid[-1]), int(tsid[-1])]
        mn, mx = int(ts.min()), int(ts.max())
        self.min_ts = mn if self.min_ts is None else min(self.min_ts, mn)
        self.max_ts = mx if self.max_ts is None else max(self.max_ts, mx)
        self.rows += tid.shape[0]

    def to_json(self):
        if self.first is None:
            return None
        return {"first": self.first, "last": self.last, "min_timestamp": self.min_ts, "max_timestamp": self.max_ts}


def check_table(table: pa.Table, schema: RegionSchema, what: str) -> dict | None:
    """Row order of an in-memory table (its schema already derived); returns its stats."""
    st = _Stats()
    prev = None
    for batch in table.to_batches(max_chunksize=1 << 20):
        try:
            arrs = _fixed_arrays(pa.Table.from_batches([batch]), schema.ts_name)
        except SamplesError as e:
            raise SamplesError(f"{what}: {e}") from None
        prev = check_order(*arrs, what, prev=prev)
        st.update(*arrs[:3])
    return st.to_json()


# --- writing and describing ------------------------------------------------------------------


def sst_arrow_schema(schema: RegionSchema) -> pa.Schema:
    """The region schema with ``column_id`` field metadata (what gtsamples writes)."""
    s = schema.arrow_schema()
    ids = {schema.ts_name: schema.ts_column_id, **dict(schema.fields)}
    return pa.schema([f.with_metadata({b"column_id": str(ids[f.name]).encode()}) if f.name in ids else f for f in s])


def write_sst(table: pa.Table, region_store: Store, region_id: int, schema: RegionSchema, file_id: str | None = None,
              row_group_size: int = DEFAULT_ROW_GROUP_SIZE) -> dict:
    """Write ``table`` as ``<region_id>/sst/<file_id>.parquet``; returns the SST record."""
    file_id = file_id or str(uuid.uuid4())
    if not is_file_id(file_id):
        raise SamplesError(f"file_id {file_id!r} is not a FileId (lowercase hyphenated UUID)")
    what = f"SST {file_id}"
    stats = check_table(table, schema, what)
    target = sst_arrow_schema(schema)
    table = pa.Table.from_arrays([table.column(n) for n in target.names], schema=target)
    key = f"{region_id}/sst/{file_id}.parquet"
    buf = pa.BufferOutputStream()
    pq.write_table(table, buf, row_group_size=row_group_size, compression="zstd", write_statistics=True)
    data = buf.getvalue()
    region_store.put(key, data)
    size = data.size
    return {"file_id": file_id, "path": key, "size": size, "rows": table.num_rows,
            "schema": schema.to_json_obj(), "stats": stats}


def sst_error(what: str, doing: str, e: BaseException) -> SamplesError:
    """The error for SST ``what`` that failed ``doing`` with ``e`` (a pyarrow error, or the
    store's own check, whose message already starts with the path)."""
    detail = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)  # (str of a KeyError is its repr)
    if detail.startswith(what + ": "):
        detail = detail[len(what) + 2:]
    return SamplesError(f"{what}: {doing}: {detail}")


@contextlib.contextmanager
def sst_errors(what: str, doing: str, foreign: tuple = (pa.ArrowException, OSError)):
    """Inside, pyarrow's (and the OS's) ``foreign`` errors become :func:`sst_error`'s for
    SST ``what``; gtsamples' own errors (a ``StorageError`` too) pass unchanged."""
    try:
        yield
    except SamplesError:
        raise
    except foreign as e:
        raise sst_error(what, doing, e) from None


@contextlib.contextmanager
def store_checks(what: str):
    """Inside, the store's object checks (missing, shorter than recorded: artifact errors
    for the store) become :func:`sst_error`'s for SST ``what``; a ``StorageError`` passes."""
    try:
        yield
    except StorageError:
        raise
    except SamplesError as e:
        raise sst_error(what, "cannot read the SST", e) from None


def sst_size(store: Store, key: str) -> int:
    """The size of SST ``key`` in ``store`` (a missing object is :func:`sst_error`'s)."""
    with store_checks(store.path(key)):
        return store.size(key)


def open_parquet(store: Store, key: str, size: int, stats: ReadStats | None, cache=None) -> pq.ParquetFile:
    """A ParquetFile over ranged reads; the footer (immutable) is cached in ``cache``."""
    ckey = ("gtsamples.region.sst-footer", store.root, key, int(size))
    md = cache.get(ckey) if cache is not None else None
    f = StoreFile(store, key, size, stats)
    if md is not None:
        if stats is not None:
            stats.cache_hits += 1
        return pq.ParquetFile(f, metadata=md)
    if stats is not None:
        stats.cache_misses += 1
        before = stats.bytes_read
    with sst_errors(store.path(key), "not a readable Parquet file"):  # (a bad footer: pyarrow's OSError)
        pf = pq.ParquetFile(f)
    if stats is not None:
        stats.metadata_bytes += stats.bytes_read - before
    if cache is not None:
        cache.put(ckey, pf.metadata, int(pf.metadata.serialized_size) + 1024)
    return pf


def describe_sst(path: str, region_store: Store, schema: RegionSchema | None, file_id: str | None = None) -> tuple[dict, RegionSchema]:
    """Check an existing Parquet SST (schema, row order) and build its catalog record."""
    store, key = store_for(path, region_store)
    size = sst_size(store, key)
    if file_id is None:
        stem = posixpath.basename(key.replace("\\", "/"))
        stem = stem[: -len(".parquet")] if stem.endswith(".parquet") else stem
        file_id = stem if is_file_id(stem) else str(uuid.uuid4())
    if not is_file_id(file_id):
        raise SamplesError(f"file_id {file_id!r} is not a FileId (lowercase hyphenated UUID)")
    what = store.path(key)
    pf = open_parquet(store, key, size, None)
    sch = RegionSchema.from_arrow(pf.schema_arrow, like=schema, what=what)
    if schema is not None and sch != schema:
        raise SamplesError(f"{what}: schema {sch.to_json_obj()} differs from the region schema {schema.to_json_obj()}")
    st = _Stats()
    prev = None
    fixed = ["__table_id", "__tsid", sch.ts_name, "__sequence", "__op_type"]
    with sst_errors(what, "cannot read the SST"):
        for batch in pf.iter_batches(batch_size=1 << 20, columns=fixed, use_threads=False):
            arrs = _fixed_arrays(pa.Table.from_batches([batch]), sch.ts_name)
            prev = check_order(*arrs, what, prev=prev)
            st.update(*arrs[:3])
    rec = {"file_id": file_id, "path": relative_key(path, region_store), "size": int(size), "rows": st.rows,
           "schema": sch.to_json_obj(), "stats": st.to_json()}
    return rec, sch


# --- scanning ------------------------------------------------------------------------------


def sst_selects(rec: dict, sel: Selection) -> bool:
    """Can the SST hold selected rows (catalog stats; no I/O)?"""
    if sel.is_empty:
        return False
    if "stats" not in rec:  # a record without stats cannot be pruned
        return True
    st = rec["stats"]
    if st is None:  # an empty SST
        return False
    return sel.selects(tuple(st["first"]), tuple(st["last"]), st["min_timestamp"], st["max_timestamp"])


def _rg_minmax(rg, idx: int):
    if idx < 0:
        return None
    s = rg.column(idx).statistics
    if s is None or not s.has_min_max:
        return None
    mn, mx = s.min, s.max
    if hasattr(mn, "timestamp") or not isinstance(mn, (int, np.integer)):
        # timestamps: compare raw integers
        mn, mx = getattr(s, "min_raw", mn), getattr(s, "max_raw", mx)
    return int(mn), int(mx)


def _row_groups(pf: pq.ParquetFile, sel: Selection, ts_name: str, row_range: tuple[int, int] | None):
    md = pf.metadata
    leaf_index = {md.schema.column(i).path: i for i in range(md.num_columns)}
    it, ist, its = leaf_index.get("__table_id", -1), leaf_index.get("__tsid", -1), leaf_index.get(ts_name, -1)
    out = []
    row0 = 0
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        n = rg.num_rows
        lo, hi = row0, row0 + n
        row0 = hi
        if n == 0:
            continue
        if row_range is not None and (hi <= row_range[0] or lo >= row_range[1]):
            continue
        t = _rg_minmax(rg, it)
        s = _rg_minmax(rg, ist)
        ts = _rg_minmax(rg, its)
        if ts is not None and not sel.time_overlaps(ts[0], ts[1]):
            continue
        if t is not None:
            if sel.series is not None:
                if not any(t[0] <= a <= t[1] and (s is None or s[0] <= b <= s[1]) for a, b in sel.series):
                    continue
            elif sel.tables is not None:
                if not any(t[0] <= a <= t[1] for a in sel.tables):
                    continue
        out.append((g, lo, hi))
    return out


def row_filter(tid: np.ndarray, tsid: np.ndarray, ts: np.ndarray | None, sel: Selection) -> np.ndarray | None:
    """Exact selection mask over rows (None: everything selected)."""
    mask = None
    if sel.series is not None:
        want = np.array(list(sel.series), dtype=IDENTITY)
        have = np.empty(tid.shape[0], dtype=IDENTITY)
        have["table_id"] = tid
        have["tsid"] = tsid
        mask = np.isin(have.view("V12"), want.view("V12"))
    elif sel.tables is not None:
        mask = np.isin(tid, np.array(sel.tables, dtype=np.uint32))
    if sel.start is not None or sel.end is not None:
        m = np.ones(ts.shape[0], bool)
        if sel.start is not None:
            m &= ts >= sel.start
        if sel.end is not None:
            m &= ts < sel.end
        mask = m if mask is None else (mask & m)
    return mask


def scan_sst(rec: dict, region_store: Store, schema: RegionSchema, sel: Selection, names, stats: ReadStats,
             cache=None, row_range: tuple[int, int] | None = None) -> pa.Table:
    """Rows of one SST matching ``sel``, columns ``names`` (region schema order), file order.

    ``row_range`` restricts the scan to rows ``[lo, hi)`` of the file (the rows an
    artifact part covers).
    """
    pieces = list(iter_sst(rec, region_store, schema, sel, names, stats, cache, row_range))
    if not pieces:
        return schema.arrow_schema(names).empty_table()
    return pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]


def iter_sst(rec: dict, region_store: Store, schema: RegionSchema, sel: Selection, names, stats: ReadStats,
             cache=None, row_range: tuple[int, int] | None = None, max_rows: int | None = None):
    """:func:`scan_sst` as a stream of non-empty tables (file order): one per selected
    row group, or, with ``max_rows``, pieces of at most ``max_rows`` file rows each
    (Parquet's own batched reader: memory bounded by the piece, not the row group)."""
    out_schema = schema.arrow_schema(names)
    if sel.is_empty:
        return
    store, key = store_for(rec["path"], region_store)
    what = store.path(key)
    filt = ["__table_id", "__tsid"] if (sel.series is not None or sel.tables is not None) else []
    if sel.has_time:
        filt.append(schema.ts_name)
    cols = list(out_schema.names)
    read_cols = cols + [c for c in filt if c not in cols]
    with sst_errors(what, "cannot scan the SST"):
        pf = open_parquet(store, key, int(rec["size"]), stats, cache)
        groups = _row_groups(pf, sel, schema.ts_name, row_range)
    for g, lo, hi in groups:
        with sst_errors(what, "cannot scan the SST"):
            if max_rows is None:
                raw = [(lo, pf.read_row_group(g, columns=read_cols, use_threads=False))]
            else:
                raw = _row_group_pieces(pf, g, lo, read_cols, max_rows)
            for at, t in raw:
                n = t.num_rows
                if row_range is not None and (at < row_range[0] or at + n > row_range[1]):
                    a = min(max(row_range[0], at) - at, n)
                    b = max(min(row_range[1], at + n) - at, a)
                    t = t.slice(a, b - a)
                piece = _filter_piece(t, schema, sel, filt, out_schema)
                if piece.num_rows:
                    yield piece


def _row_group_pieces(pf: pq.ParquetFile, g: int, lo: int, read_cols, max_rows: int):
    """(first file row, table) of each piece of row group ``g`` read ``max_rows`` rows at a time."""
    at = lo
    for b in pf.iter_batches(batch_size=max(1, int(max_rows)), row_groups=[g], columns=read_cols, use_threads=False):
        yield at, pa.Table.from_batches([b])
        at += b.num_rows


def _filter_piece(t: pa.Table, schema: RegionSchema, sel: Selection, filt, out_schema: pa.Schema) -> pa.Table:
    """The selected rows of a scanned piece, cast to the region schema's columns."""
    if filt:
        tid = _np(t.column("__table_id")) if "__table_id" in filt else None
        tsid = _np(t.column("__tsid")) if "__tsid" in filt else None
        ts = _np(t.column(schema.ts_name).cast(pa.int64())) if sel.has_time else None
        mask = row_filter(tid, tsid, ts, sel)
        if mask is not None and not mask.all():
            t = t.filter(pa.array(mask))
    arrays = []
    for f in out_schema:
        c = t.column(f.name)
        if c.type != f.type:
            c = c.cast(f.type)
        arrays.append(c)
    return pa.Table.from_arrays(arrays, schema=out_schema)
