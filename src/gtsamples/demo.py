"""`gtsamples demo`: build a realistic artifact, read it back, print what it costs.

Runs with no network and no GPU: synthetic metrics (jittered scrape intervals,
repeated values, NaNs, gaps, sparse fields, delete markers, duplicate
timestamps) for many series, written with the default writer and read back
with the best available backend.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid

import numpy as np
import pyarrow as pa

FIELDS = ("cpu_usage", "mem_bytes", "requests", "latency_p99")


def synthetic_metrics(n_series: int = 500, rows_per_series: int = 4000, seed: int = 7,
                      unit: str = "ms", fields=FIELDS) -> pa.Table:
    """Rows in spec order: identity, then timestamp, then sequence descending on ties."""
    rng = np.random.default_rng(seed)
    n = n_series * rows_per_series
    table_id = np.repeat(rng.integers(1, 4, n_series).astype(np.uint32), rows_per_series)
    # TSIDs are 64-bit hashes in Mito: spread them over the whole u64 range
    tsid = np.repeat(np.arange(1, n_series + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15), rows_per_series)
    # timestamps: 15 s scrape interval with jitter, occasional gaps and duplicates
    step = 15_000
    base = 1_700_000_000_000
    jitter = rng.integers(-40, 41, n)
    gaps = (rng.random(n) < 0.002) * rng.integers(1, 200, n) * step
    inc = step + jitter + gaps
    inc[rng.random(n) < 0.003] = 0  # duplicate timestamps
    inc = inc.reshape(n_series, rows_per_series)
    inc[:, 0] = 0
    ts = (base + np.cumsum(inc, axis=1)).reshape(n)
    seq = np.arange(n, 0, -1, dtype=np.uint64)  # decreasing: satisfies the tie rule
    op = np.ones(n, np.uint8)
    op[rng.random(n) < 0.001] = 0  # delete markers
    cols = {}
    t = np.arange(rows_per_series)
    for k, name in enumerate(fields):
        if k == 0:
            v = np.round(50 + 30 * np.sin(t / 300.0)[None, :] + rng.normal(0, 2, (n_series, rows_per_series)), 1)
        elif k == 1:
            v = np.repeat(rng.integers(1, 64, (n_series, rows_per_series // 20 + 1)) * 2.0**20, 20, axis=1)[:, :rows_per_series]
        elif k == 2:
            v = np.cumsum(rng.poisson(20, (n_series, rows_per_series)), axis=1).astype(np.float64)
        else:
            v = np.round(rng.lognormal(3, 0.5, (n_series, rows_per_series)), 3)
        v = v.reshape(n)
        mask = rng.random(n) < (0.002 if k < 3 else 0.3)  # the last field is sparse
        v[rng.random(n) < 0.001] = np.nan
        cols[name] = pa.array(v, mask=mask)
    data = {
        "__table_id": pa.array(table_id),
        "__tsid": pa.array(tsid),
        "ts": pa.array(ts.astype(f"datetime64[{unit}]")),
        "__sequence": pa.array(seq),
        "__op_type": pa.array(op),
    }
    data.update(cols)
    tbl = pa.table(data)
    return tbl.take(pa.array(_stable_series_order(table_id, tsid, rows_per_series)))


def _stable_series_order(table_id, tsid, rows_per_series):
    n_series = table_id.shape[0] // rows_per_series
    first = np.arange(n_series) * rows_per_series
    order = np.lexsort((tsid[first], table_id[first]))
    return (first[order][:, None] + np.arange(rows_per_series)[None, :]).reshape(-1)


def format_rows(t: pa.Table, indent: str = "") -> str:
    """A small fixed-width text rendering of a few rows (no pandas needed)."""
    names = t.schema.names
    rows = [["null" if v is None else str(v) for v in r.values()] for r in t.to_pylist()]
    widths = [max(len(n), *(len(r[i]) for r in rows)) if rows else len(n) for i, n in enumerate(names)]
    lines = ["  ".join(n.rjust(w) for n, w in zip(names, widths))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in rows]
    return "\n".join(indent + line for line in lines)


def bit_equal(a: pa.Table, b: pa.Table) -> bool:
    """Same names, rows, validity and value bits (NaN payloads and -0.0 included)."""
    if a.schema.names != b.schema.names or a.num_rows != b.num_rows:
        return False
    for name in a.schema.names:
        x, y = a.column(name).combine_chunks(), b.column(name).combine_chunks()
        if pa.types.is_floating(x.type):
            vx, vy = x.is_valid(), y.is_valid()
            if not vx.equals(vy):
                return False
            bx = np.asarray(x.fill_null(0.0).to_numpy(zero_copy_only=False)).view(np.uint64)
            by = np.asarray(y.fill_null(0.0).to_numpy(zero_copy_only=False)).view(np.uint64)
            m = np.asarray(vx.to_numpy(zero_copy_only=False), dtype=bool)
            if not np.array_equal(bx[m], by[m]):
                return False
        elif not x.cast(y.type).equals(y):
            return False
    return True


def run(n_series: int = 500, rows_per_series: int = 4000, workdir: str | None = None, device: str = "auto", out=print) -> dict:
    import gtsamples as gs

    tmp = workdir or tempfile.mkdtemp(prefix="gtsamples-demo-")
    try:
        tbl = synthetic_metrics(n_series, rows_per_series)
        n = tbl.num_rows
        t0 = time.perf_counter()
        entry = gs.write_artifact(
            tbl, tmp, region_id=4398046511104, source_file_id=str(uuid.uuid4()),
            timestamp_column_id=0, field_column_ids=list(range(1, len(FIELDS) + 1)),
        )
        t_write = time.perf_counter() - t0
        art = gs.open_artifact(tmp, entry=entry)
        art.read(series=[(int(tbl["__table_id"][0].as_py()), int(tbl["__tsid"][0].as_py()))])  # warm the JIT
        t0 = time.perf_counter()
        full, stats = art.read_with_stats(device=device)
        t_read = time.perf_counter() - t0
        backend = "gpu" if not isinstance(full, pa.Table) else "cpu"
        full_arrow = full if isinstance(full, pa.Table) else full.to_arrow()
        if not bit_equal(full_arrow, tbl):
            raise AssertionError("round trip differs from the input rows")
        first = (int(tbl["__table_id"][0].as_py()), int(tbl["__tsid"][0].as_py()))
        t0 = time.perf_counter()
        one, ostats = art.read_with_stats(series=[first], device=device)
        t_one = time.perf_counter() - t0
        size = entry.file_size
        decoded = full_arrow.nbytes
        out(f"gtsamples demo  ({backend} backend)")
        out(f"  rows            {n:,}  in {n_series} series, {len(FIELDS)} fields")
        out(f"  artifact        {size:,} bytes in {len(art.manifest.files)} part(s): {size / n:.2f} bytes/sample "
            f"(raw columns: {decoded / n:.1f} bytes/row)")
        out(f"  write           {t_write:.2f} s  ({n / t_write / 1e6:.2f} M rows/s)")
        out(f"  full read       {t_read:.3f} s  ({n / t_read / 1e6:.1f} M rows/s, {decoded / t_read / 1e9:.2f} GB/s decoded); "
            f"{stats.requests} requests, {stats.bytes_read:,} bytes")
        out(f"  one series      {one.num_rows if hasattr(one, 'num_rows') else len(one):,} rows in {t_one * 1e3:.1f} ms; "
            f"{ostats.requests} requests, {ostats.bytes_read:,} bytes read, {ostats.blocks_decoded} blocks decoded")
        out("  first rows:")
        out(format_rows(full_arrow.slice(0, 5), indent="    "))
        return {"rows": n, "bytes": size, "read_s": t_read, "backend": backend}
    finally:
        if workdir is None:
            shutil.rmtree(tmp, ignore_errors=True)
