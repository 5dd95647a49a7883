"""Decoded columns -> frames with the exact logical schema.

Schema: ``__table_id uint32``, ``__tsid uint64``, ``<ts> timestamp[unit]``,
``__sequence uint64``, ``__op_type uint8`` (non-null), then the manifest's
fields as nullable float64.  Buffers are wrapped, not copied.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa

from .batch import ChunkBatch, DecodedColumns, kept_rows


def arrow_schema(manifest, names=None) -> pa.Schema:
    ts = manifest.timestamp
    return _schema(ts.name, ts.arrow_unit, tuple(f.name for f in manifest.fields),
                   None if names is None else tuple(names))


@functools.lru_cache(maxsize=256)
def _schema(ts_name: str, unit: str, field_names: tuple[str, ...], names: tuple[str, ...] | None) -> pa.Schema:
    """The schema of :func:`arrow_schema`, built once per shape (a small read would
    otherwise spend ~15 us building it)."""
    fixed = [
        pa.field("__table_id", pa.uint32(), nullable=False),
        pa.field("__tsid", pa.uint64(), nullable=False),
        pa.field(ts_name, pa.timestamp(unit), nullable=False),
        pa.field("__sequence", pa.uint64(), nullable=False),
        pa.field("__op_type", pa.uint8(), nullable=False),
    ]
    fields = fixed + [pa.field(name, pa.float64(), nullable=True) for name in field_names]
    if names is not None:
        keep = set(names)
        fields = [f for f in fields if f.name in keep]
    return pa.schema(fields)


@functools.lru_cache(maxsize=256)
def _layout(ts_name: str, unit: str, field_names: tuple[str, ...], names: tuple[str, ...],
            batch_fields: tuple[str, ...]) -> tuple[pa.Schema, tuple]:
    """The table's schema and, per column, where its data comes from: ``(plain, field,
    type)``, ``plain`` the position in ``(table_id, tsid, ts, seq, op)`` or -1 for
    field ``field`` of the batch (built once per shape)."""
    schema = _schema(ts_name, unit, field_names, names)
    plain = {"__table_id": 0, "__tsid": 1, ts_name: 2, "__sequence": 3, "__op_type": 4}
    pos = {name: k for k, name in enumerate(batch_fields)}
    return schema, tuple((plain[f.name], -1, f.type) if f.name in plain else (-1, pos[f.name], f.type)
                         for f in schema)


def _float_array(values: np.ndarray, bitmap: np.ndarray | None, null_count: int) -> pa.Array:
    n = values.shape[0]
    validity = None if bitmap is None else pa.py_buffer(bitmap)
    return pa.Array.from_buffers(pa.float64(), n, [validity, pa.py_buffer(values)], null_count=null_count)


def _plain(arr: np.ndarray, typ: pa.DataType) -> pa.Array:
    arr = np.ascontiguousarray(arr)
    return pa.Array.from_buffers(typ, arr.shape[0], [None, pa.py_buffer(arr)], null_count=0)


def to_arrow(manifest, projection, batch: ChunkBatch, cols: DecodedColumns) -> pa.Table:
    """Assemble (and trim to ``[start, end)``) a pyarrow Table over the decoded buffers (no copy).

    A trim that keeps one run of rows (a series' window) slices the table; any other
    gathers the kept rows."""
    from .decode.cpu import identity_columns

    need = set(projection.names)
    table_id, tsid = identity_columns(batch.blocks, batch.n_rows, "__table_id" in need, "__tsid" in need)
    ts, seq, op = cols.timestamp, cols.sequence, cols.op_type
    values, bitmaps, null_counts = cols.values, cols.bitmaps, cols.null_counts
    run = None
    trim = batch.needs_trim
    if trim:
        mask, first, stop, kept = kept_rows(ts, batch.start, batch.end)
        if stop - first == kept:  # one run of rows (a series' window): a slice
            run = (first, stop)
    if run is None and trim:
        n = ts.shape[0]
        table_id, tsid, ts, seq, op = (None if a is None else a[mask] for a in (table_id, tsid, ts, seq, op))
        values = [v[mask] for v in values]
        valid = [None if bm is None else np.unpackbits(bm, count=n, bitorder="little").view(bool)[mask]
                 for bm in bitmaps]
        null_counts = [0 if v is None else int(v.shape[0] - np.count_nonzero(v)) for v in valid]
        bitmaps = [None if v is None or c == 0 else np.packbits(v, bitorder="little")
                   for v, c in zip(valid, null_counts)]
    t = manifest.timestamp
    schema, layout = _layout(t.name, t.arrow_unit, tuple(f.name for f in manifest.fields), tuple(projection.names),
                             tuple(batch.field_names))
    plain = (table_id, tsid, ts, seq, op)
    arrays = [_plain(plain[src], typ) if src >= 0 else _float_array(values[k], bitmaps[k], null_counts[k])
              for src, k, typ in layout]
    table = pa.Table.from_arrays(arrays, schema=schema)
    return table if run is None else table.slice(run[0], run[1] - run[0])


def empty_table(manifest, names=None) -> pa.Table:
    return arrow_schema(manifest, names).empty_table()


def one_batch(table: pa.Table) -> pa.RecordBatch:
    """``table`` as one ``pyarrow.RecordBatch`` (a streamed read's unit): its chunks
    combined, or a zero-row batch with its schema."""
    batches = table.combine_chunks().to_batches() if table.num_rows else []
    return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=table.schema)


def batch_reader(schema: pa.Schema, batches) -> pa.RecordBatchReader:
    """A read-once ``pyarrow.RecordBatchReader`` of ``schema`` over the iterable
    ``batches`` (pulled one at a time, as the consumer asks)."""
    return pa.RecordBatchReader.from_batches(schema, batches)
