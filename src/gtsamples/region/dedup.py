"""The last-write-wins view (vectorised; pyarrow/numpy on the CPU, cuDF on the GPU).

Per ``(table_id, tsid, timestamp)`` keep the row with the highest ``__sequence``;
among equal sequences keep the first in region order (``order`` keys, else row
position); drop the kept row when it is a delete (``__op_type == 0``).  The
result is sorted by ``(table_id, tsid, timestamp)``: after dedup that key is
unique, so the order is total and equal on every backend.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

KEY_COLUMNS = ("__table_id", "__tsid", "__sequence", "__op_type")  # + the timestamp


def _np(col) -> np.ndarray:
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    return np.asarray(col.to_numpy(zero_copy_only=False))


def dedup_indices(table_id, tsid, ts, seq, op, order_keys=()) -> np.ndarray:
    """Indices of the surviving rows, sorted by identity and timestamp.

    ``order_keys``: extra tie-break keys (most significant first) giving region
    order; the row position is always the final tie-break.
    """
    n = table_id.shape[0]
    if n == 0:
        return np.zeros(0, np.int64)
    seq = np.asarray(seq, np.uint64)
    pos = np.arange(n, dtype=np.int64)
    # np.lexsort: the last key is the primary one
    keys = [pos] + [np.asarray(k) for k in reversed(list(order_keys))] + [~seq, ts, tsid, table_id]
    order = np.lexsort(keys)
    t, s, x = table_id[order], tsid[order], ts[order]
    first = np.ones(n, bool)
    first[1:] = (t[1:] != t[:-1]) | (s[1:] != s[:-1]) | (x[1:] != x[:-1])
    keep = first & (np.asarray(op)[order] != 0)
    return order[keep]


def dedup_frame(frame, ts_name: str, order_columns=()):
    """The last-write-wins view of a frame of any backend: a ``pyarrow.Table``,
    a pandas or a cuDF DataFrame (told apart by their type, not by a device name)."""
    if isinstance(frame, pa.Table):
        return dedup_arrow(frame, ts_name, order_columns)
    if type(frame).__module__.partition(".")[0] == "pandas":
        return dedup_pandas(frame, ts_name, order_columns)
    return dedup_cudf(frame, ts_name, order_columns)  # pragma: no cover - needs a GPU


def dedup_arrow(table: pa.Table, ts_name: str, order_columns=()) -> pa.Table:
    """The last-write-wins view of ``table`` (which holds the key columns)."""
    ts = _np(table.column(ts_name).cast(pa.int64()))
    idx = dedup_indices(
        _np(table.column("__table_id")),
        _np(table.column("__tsid")),
        ts,
        _np(table.column("__sequence")),
        _np(table.column("__op_type")),
        [_np(table.column(c)) for c in order_columns],
    )
    return table.take(pa.array(idx))


def dedup_pandas(df, ts_name: str, order_columns=()):
    """Same on a pandas DataFrame (numpy-backed key columns)."""
    n = len(df)
    if n == 0:
        return df
    ts = df[ts_name].to_numpy().view(np.int64) if df[ts_name].dtype.kind == "M" else np.asarray(df[ts_name], np.int64)
    idx = dedup_indices(
        df["__table_id"].to_numpy(np.uint32),
        df["__tsid"].to_numpy(np.uint64),
        ts,
        df["__sequence"].to_numpy(np.uint64),
        df["__op_type"].to_numpy(np.uint8),
        [df[c].to_numpy() for c in order_columns],
    )
    return df.iloc[idx].reset_index(drop=True)


def dedup_cudf(df, ts_name: str, order_columns=()):  # pragma: no cover - needs a GPU
    """Same on a cudf.DataFrame, on the device (sort + neighbour comparison)."""
    import cupy as cp

    n = len(df)
    if n == 0:
        return df
    work = df.copy(deep=False)
    work["__gts_pos"] = cp.arange(n, dtype=cp.int64)
    by = ["__table_id", "__tsid", ts_name, "__sequence"] + list(order_columns) + ["__gts_pos"]
    asc = [True, True, True, False] + [True] * len(order_columns) + [True]
    work = work.sort_values(by=by, ascending=asc)
    t = work["__table_id"].values
    s = work["__tsid"].values
    x = work[ts_name].values.view(cp.int64)
    first = cp.ones(n, dtype=cp.bool_)
    first[1:] = (t[1:] != t[:-1]) | (s[1:] != s[:-1]) | (x[1:] != x[:-1])
    keep = first & (work["__op_type"].values != 0)
    out = work[keep].drop(columns=["__gts_pos"])
    return out.reset_index(drop=True)
