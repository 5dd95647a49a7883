"""Table builders shared by the writer tests."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from gtsamples.write import write_artifact

SRC = "5a3c0000-0000-4000-8000-000000000001"
GEN = "5a3c0000-0000-4000-8000-000000000002"
REGION = 4398046511111
TS_ID = 10


def table(tid, tsid, ts, seq=None, op=None, fields=None, unit="ms", ts_name="ts") -> pa.Table:
    """Build an input table; ``fields``: {name: list of float|None} (default one field 'v')."""
    n = len(ts)
    tid = [tid] * n if isinstance(tid, int) else tid
    tsid = [tsid] * n if isinstance(tsid, int) else tsid
    seq = [1] * n if seq is None else seq
    op = [1] * n if op is None else op
    if fields is None:
        fields = {"v": [float(i) for i in range(n)]}
    cols = {
        "__table_id": pa.array(tid, pa.uint32()),
        "__tsid": pa.array(tsid, pa.uint64()),
        ts_name: pa.array(ts, pa.timestamp(unit)),
        "__sequence": pa.array(seq, pa.uint64()),
        "__op_type": pa.array(op, pa.uint8()),
    }
    for k, v in fields.items():
        cols[k] = v if isinstance(v, (pa.Array, pa.ChunkedArray)) else pa.array(v, pa.float64())
    return pa.table(cols)


def series_table(n_series: int, rows_per: int, n_fields: int = 1, seed: int = 0, null_frac: float = 0.0) -> pa.Table:
    rng = np.random.default_rng(seed)
    sid = np.repeat(np.arange(n_series, dtype=np.uint64), rows_per)
    n = len(sid)
    ts = np.tile(np.arange(rows_per, dtype=np.int64) * 10, n_series)
    cols = {
        "__table_id": pa.array((sid // 3 + 1).astype(np.uint32)),
        "__tsid": pa.array(sid * np.uint64(11) + np.uint64(5)),
        "ts": pa.array(ts, pa.timestamp("ms")),
        "__sequence": pa.array(np.arange(n, dtype=np.uint64)[::-1].copy()),
        "__op_type": pa.array(rng.integers(0, 2, n).astype(np.uint8)),
    }
    for f in range(n_fields):
        v = np.round(np.cumsum(rng.standard_normal(n)), 1)
        mask = rng.random(n) < null_frac if null_frac else None
        cols[f"f{f}"] = pa.array(v, mask=mask)
    return pa.table(cols)


def write(root, t: pa.Table, gen: str = GEN, field_ids=None, **kw):
    """Write ``t`` under ``root``; returns (entry, generation directory)."""
    nf = t.num_columns - 5
    kw.setdefault("region_id", REGION)
    kw.setdefault("source_file_id", SRC)
    kw.setdefault("timestamp_column_id", TS_ID)
    e = write_artifact(
        t, root, generation=gen, field_column_ids=list(range(1, nf + 1)) if field_ids is None else field_ids, **kw
    )
    return e, os.path.join(str(root), e.prefix)
