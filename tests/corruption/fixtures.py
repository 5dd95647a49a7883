"""Small valid artifacts written by our writer, the starting point of every corruption case."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

import gtsamples as gs

REGION = 4398046511111
FILE_ID = "5a3c0000-0000-4000-8000-00000000c001"
GENERATION = "5a3c0000-0000-4000-8000-00000000c002"
TS_ID = 3


def _table(rows, n_fields: int, unit: str = "ms") -> pa.Table:
    cols = list(zip(*rows))
    t = {
        "__table_id": pa.array(cols[0], pa.uint32()),
        "__tsid": pa.array(cols[1], pa.uint64()),
        "ts": pa.array(cols[2], pa.timestamp(unit)),
        "__sequence": pa.array(cols[3], pa.uint64()),
        "__op_type": pa.array(cols[4], pa.uint8()),
    }
    names = ["a", "b"] if n_fields == 2 else [f"f{i}" for i in range(n_fields)]
    for k in range(n_fields):
        t[names[k]] = pa.array(cols[5 + k], pa.float64())
    return pa.table(t)


def multi_table() -> pa.Table:
    """Two fields, five series; every encoding, raw and Zstd chunks, nulls, an all-null field."""
    rows = []

    def series(tid, tsid, n, t0, ts, seq, op, a, b):
        for i in range(n):
            rows.append((tid, tsid, t0 + ts(i), seq(i), op(i), a(i), b(i)))

    series(1, 5, 150, 1_000_000,
           lambda i: 1000 * i if i < 64 else 64_000 + 1000 * (i - 64) + (i * i % 7) * 10,
           lambda i: 500 if i < 32 else 10_000 - i,
           lambda i: 1 if i < 64 else (0 if i % 9 == 0 else 1),
           lambda i: [1.5, 2.5][i % 2] if i < 96 else i * 0.1,
           lambda i: None if (i % 5 or 32 <= i < 64) else float(i))
    series(1, 6, 40, 0, lambda i: 10 * i, lambda i: 7, lambda i: 1, lambda i: -float(i), lambda i: float(i))
    series(2, 5, 70, 5_000, lambda i: 3 * i, lambda i: 100 - i, lambda i: 1, lambda i: float(i % 4), lambda i: None)
    series(3, 1, 5, 0, lambda i: i, lambda i: 1, lambda i: 0, lambda i: 0.5, lambda i: 0.25)
    series(4, 1, 40, 9_000, lambda i: 2 * i, lambda i: 3, lambda i: 1, lambda i: float(i), lambda i: float(-i))
    return _table(rows, 2)


MULTI_KW = dict(timestamp_column_id=TS_ID, field_column_ids=[7, 9], row_limit=32,
                max_page_bytes=12 + 264 * 2, max_leaves_per_root=3)


def flat_table() -> pa.Table:
    """One field, six blocks in one leaf (depth 1, one part)."""
    rows = []
    for tid, tsid, n in ((1, 1, 3), (1, 2, 5), (2, 1, 3), (2, 2, 2), (3, 1, 4)):
        for i in range(n):
            v = None if (tid == 2 and tsid == 1 and i == 1) else float(tid * 100 + tsid * 10 + i)
            rows.append((tid, tsid, 100 + 7 * i, 50 - i, 1, v))
    return _table(rows, 1)


FLAT_KW = dict(timestamp_column_id=TS_ID, field_column_ids=[7], row_limit=4)


def wide_table() -> pa.Table:
    """1,024 fields (two present), one 31-row block: the row cap for 1,024 fields."""
    n = 31
    t = {
        "__table_id": pa.array([1] * n, pa.uint32()),
        "__tsid": pa.array([1] * n, pa.uint64()),
        "ts": pa.array(np.arange(n, dtype=np.int64) * 10, pa.timestamp("ms")),
        "__sequence": pa.array([1] * n, pa.uint64()),
        "__op_type": pa.array([1] * n, pa.uint8()),
    }
    null = pa.nulls(n, pa.float64())
    for k in range(1024):
        t[f"f{k}"] = pa.array(np.arange(n) * 0.5 + k) if k in (0, 1023) else null
    return pa.table(t)


WIDE_KW = dict(timestamp_column_id=0, field_column_ids=list(range(1, 1025)))

FIXTURES = {
    "multi": (multi_table, MULTI_KW),
    "flat": (flat_table, FLAT_KW),
    "wide": (wide_table, WIDE_KW),
}


def write_fixture(name: str, store_root) -> tuple[pa.Table, dict]:
    make, kw = FIXTURES[name]
    table = make()
    entry = gs.write_artifact(table, store_root, region_id=REGION, source_file_id=FILE_ID,
                              generation=GENERATION, **kw)
    return table, entry.to_dict()
