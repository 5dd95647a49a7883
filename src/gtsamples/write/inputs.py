"""The writer's inputs: its arguments checked, and the Arrow table's schema, order and
columns (viewed as numpy, zero-copy for single-chunk columns) checked against the spec
(steps 1 and 2 of :mod:`gtsamples.write.writer`'s pipeline)."""

from __future__ import annotations

import collections.abc
import dataclasses
import uuid
from typing import Any

import numpy as np
import pyarrow as pa

from ..argcheck import is_integer
from ..format import constants as C
from ..format.manifest import is_file_id
from . import encode as E

_UNIT_FROM_ARROW = {v: k for k, v in C.ARROW_UNITS.items()}
#: (position, name, Arrow type) of the four fixed integer columns
FIXED_COLUMNS = (
    (0, "__table_id", pa.uint32()),
    (1, "__tsid", pa.uint64()),
    (3, "__sequence", pa.uint64()),
    (4, "__op_type", pa.uint8()),
)


def int_arg(name: str, v: Any, lo: int, hi: int, what: str = "") -> int:
    if not is_integer(v):  # (not a bool, nor numpy's timedelta64: a duration is not a count)
        raise TypeError(f"{name}: expected an integer{what}, found {type(v).__name__} {v!r}")
    v = int(v)
    if not lo <= v <= hi:
        raise ValueError(f"{name}: {v} is out of range{what}; expected {lo}..={hi}")
    return v


#: ``write_artifact``'s ``compression`` values: the codec of chunks and pages, or None (raw)
COMPRESSIONS = ("zstd", None)


def compression_arg(compression: Any, level: Any) -> int | None:
    """The Zstd level the writer uses (None: store every chunk and page raw), from
    ``compression`` and ``compression_level`` (checked even when unused)."""
    level = int_arg("compression_level", level, C.WRITER_ZSTD_MIN_LEVEL, C.WRITER_ZSTD_MAX_LEVEL)
    if level == 0:  # libzstd reads 0 as "its default": say which level is meant
        raise ValueError(f"compression_level: 0 is not a level; expected {C.WRITER_ZSTD_MIN_LEVEL}..=-1 "
                         f"(fast) or 1..={C.WRITER_ZSTD_MAX_LEVEL} (the default is {C.WRITER_ZSTD_LEVEL})")
    if compression is not None and not isinstance(compression, str):
        raise TypeError(f"compression: expected 'zstd' or None, found {type(compression).__name__} {compression!r}")
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression: {compression!r} is not a compression this writer knows; expected 'zstd' "
                         "or None (raw)")
    return None if compression is None else level


def file_id_arg(name: str, v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"{name}: expected a FileId string (lowercase hyphenated UUID), found {type(v).__name__} {v!r}")
    if not is_file_id(v):
        raise ValueError(f"{name}: {v!r} is not a FileId (lowercase hyphenated UUID such as {uuid.UUID(int=0)})")
    return str(v)  # (a str subclass such as numpy.str_ would go on into the catalog entry)


def as_table(table: Any) -> pa.Table:
    if isinstance(table, pa.Table):
        return table
    if isinstance(table, pa.RecordBatch):
        return pa.Table.from_batches([table])
    raise TypeError(f"table: expected a pyarrow.Table or pyarrow.RecordBatch, found {type(table).__name__}")


@dataclasses.dataclass
class _Schema:
    ts_name: str
    unit: str
    field_names: list[str]


def check_schema(table: pa.Table) -> _Schema:
    names = table.schema.names
    types = table.schema.types
    ncols = len(names)
    if ncols < 6:
        raise ValueError(
            f"table has {ncols} column(s); expected __table_id, __tsid, <timestamp>, __sequence, __op_type "
            f"and 1..={C.MAX_FIELDS} float64 fields (found {names})"
        )
    nfields = ncols - 5
    if nfields > C.MAX_FIELDS:
        raise ValueError(f"table has {nfields} field columns; at most {C.MAX_FIELDS} are allowed")
    for pos, name, typ in FIXED_COLUMNS:
        if names[pos] != name:
            raise ValueError(f"column {pos} must be named {name!r}, found {names[pos]!r}")
        if types[pos] != typ:
            raise TypeError(f"column {pos} {name!r}: expected type {typ}, found {types[pos]}")
    ts_name, ts_type = names[2], types[2]
    if not pa.types.is_timestamp(ts_type) or ts_type.tz is not None:
        raise TypeError(
            f"column 2 {ts_name!r} (the timestamp): expected timestamp[s|ms|us|ns] without a timezone, found {ts_type}"
        )
    if not ts_name:
        raise ValueError("column 2 (the timestamp): the name must be nonempty")
    if ts_name in C.INTERNAL_COLUMN_NAMES:
        raise ValueError(f"column 2 (the timestamp): name {ts_name!r} is reserved for an internal column")
    fields = names[5:]
    seen = {ts_name: 2}
    for i, (name, typ) in enumerate(zip(fields, types[5:]), start=5):
        if not name:
            raise ValueError(f"column {i} (a field): the name must be nonempty")
        if name in C.INTERNAL_COLUMN_NAMES:
            raise ValueError(f"column {i} (a field): name {name!r} is reserved for an internal column")
        if name in seen:
            raise ValueError(f"column {i} (a field): duplicate name {name!r} (also column {seen[name]}); names must be unique")
        seen[name] = i
        if typ != pa.float64():
            raise TypeError(f"column {i} {name!r} (a field): expected type double (float64), found {typ}")
    return _Schema(ts_name, _UNIT_FROM_ARROW[ts_type.unit], list(fields))


def field_ids_arg(field_column_ids: Any, nfields: int, ts_id: int) -> list[int]:
    # a sequence, in field order: a set or a mapping has none of its own (a set's order is its
    # hashes', so {7, 3} gave the first field ID 3), and a 0-d array has no items
    if (isinstance(field_column_ids, (str, bytes, collections.abc.Set, collections.abc.Mapping))
            or not hasattr(field_column_ids, "__len__") or getattr(field_column_ids, "ndim", 1) != 1):
        raise TypeError(f"field_column_ids: expected a sequence of integers (one per field, in field order), "
                        f"found {type(field_column_ids).__name__}")
    ids = [int_arg(f"field_column_ids[{i}]", v, 0, C.U32_MAX, " (u32)") for i, v in enumerate(field_column_ids)]
    if len(ids) != nfields:
        raise ValueError(f"field_column_ids: {len(ids)} IDs for {nfields} field column(s); expected one per field")
    seen: dict[int, str] = {ts_id: "timestamp_column_id"}
    for i, v in enumerate(ids):
        if v in seen:
            raise ValueError(
                f"field_column_ids[{i}]: ID {v} repeats {seen[v]}; timestamp and field column IDs must be distinct"
            )
        seen[v] = f"field_column_ids[{i}]"
    return ids


def _array(table: pa.Table, i: int) -> pa.Array:
    col = table.column(i)
    if col.num_chunks == 1:
        return col.chunk(0)
    if col.num_chunks == 0:
        return pa.array([], type=col.type)
    return col.combine_chunks()


def _values(arr: pa.Array, dtype) -> np.ndarray:
    n = len(arr)
    if n == 0:
        return np.empty(0, dtype)
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=arr.offset + n)[arr.offset :]


def _first_null(arr: pa.Array) -> int:
    return int(np.flatnonzero(~arr.is_valid().to_numpy(zero_copy_only=False))[0])


@dataclasses.dataclass
class Columns:
    tid: np.ndarray
    tsid: np.ndarray
    ts: np.ndarray  # int64
    seq: np.ndarray
    op: np.ndarray
    # per field: (uint64 values, validity bitmap uint8 or None, bit offset)
    fields: list[tuple[np.ndarray, np.ndarray | None, int]]
    keep: list[pa.Array]  # keeps the Arrow buffers alive

    def field_pointers(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(value addresses, bitmap addresses or 0, bitmap bit offsets) for the kernels."""
        vptrs = np.array([v.ctypes.data for v, _, _ in self.fields], np.uint64)
        bptrs = np.array([0 if bm is None else bm.ctypes.data for _, bm, _ in self.fields], np.uint64)
        bos = np.array([bo for _, _, bo in self.fields], np.int64)
        return vptrs, bptrs, bos


def extract(table: pa.Table, schema: _Schema) -> Columns:
    keep = []
    fixed = []
    for pos, name, dtype in (
        (0, "__table_id", "<u4"),
        (1, "__tsid", "<u8"),
        (2, schema.ts_name, "<i8"),
        (3, "__sequence", "<u8"),
        (4, "__op_type", "u1"),
    ):
        arr = _array(table, pos)
        if arr.null_count:
            row = _first_null(arr)
            raise ValueError(
                f"column {pos} {name!r} row {row}: null value; the first five columns are non-null "
                f"({arr.null_count} null row(s))"
            )
        keep.append(arr)
        fixed.append(_values(arr, dtype))
    fields = []
    for i in range(5, table.num_columns):
        arr = _array(table, i)
        keep.append(arr)
        vals = _values(arr, "<u8")
        if arr.null_count and len(arr):
            bm = np.frombuffer(arr.buffers()[0], dtype=np.uint8)
            fields.append((vals, bm, arr.offset))
        else:
            fields.append((vals, None, 0))
    return Columns(*fixed, fields=fields, keep=keep)


def check_order(cols: Columns, ts_name: str) -> None:
    row, code = E.check_rows(cols.tid, cols.tsid, cols.ts, cols.seq, cols.op)
    if code == E.ORDER_OK:
        return
    i = int(row)
    if code == E.ORDER_OP_TYPE:
        raise ValueError(
            f"column 4 '__op_type' row {i}: operation type {int(cols.op[i])} is not 0 (delete) or 1 (put)"
        )
    cur = (int(cols.tid[i]), int(cols.tsid[i]))
    prev = (int(cols.tid[i - 1]), int(cols.tsid[i - 1]))
    if code == E.ORDER_IDENTITY:
        raise ValueError(
            f"rows are not in spec order at row {i}: identity (table_id, tsid) {cur} follows {prev} at row {i - 1}; "
            "identities must be nondecreasing"
        )
    if code == E.ORDER_TIMESTAMP:
        raise ValueError(
            f"rows are not in spec order at row {i}: column {ts_name!r} value {int(cols.ts[i])} follows "
            f"{int(cols.ts[i - 1])} at row {i - 1} within identity {cur}; timestamps must be nondecreasing "
            "within an identity"
        )
    raise ValueError(
        f"rows are not in spec order at row {i}: column '__sequence' value {int(cols.seq[i])} follows "
        f"{int(cols.seq[i - 1])} at row {i - 1} at equal timestamp {int(cols.ts[i])} within identity {cur}; "
        "sequences must be nonincreasing within equal timestamps"
    )
