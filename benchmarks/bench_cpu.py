"""CPU benchmark: this format vs Parquet (pyarrow, zstd) on the same rows, in one run.

    python benchmarks/bench_cpu.py [--series 1000] [--rows-per-series 10000] [--repeat 3]
    python benchmarks/bench_cpu.py --sizes 1e5,1e6,1e7 --json cpu.json --plot benchmarks/plots

Measures a full scan and a one-series / 1%-of-time query on both, prints rows/s,
the ratio to pyarrow, bytes per sample of both files (also on the NAB data when
../shared is present), and the peak memory of a full read (separate process).
``--sizes`` (rows, comma separated) repeats the measures at each size, with
``--rows-per-series`` rows per series (the memory figure: largest size only).
``--json`` writes what it prints, with the decoder's stage times of the fastest
full read (``cpu.last_stats()``); ``--plot DIR`` draws it (benchmarks/plotting.py).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import shutil
import sys
import tarfile
import tempfile
import time
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

import gtsamples as gs
from gtsamples.demo import FIELDS, synthetic_metrics

ROOT = pathlib.Path(__file__).resolve().parents[1]


def best(fn, repeat, after=None):
    """(best s, median s, last output), and ``after()`` called right after the
    fastest run when given (the decoder's stage times of that run)."""
    times = []
    out = extra = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
        if after is not None and times[-1] == min(times):
            extra = after()
    if after is not None:
        return min(times), float(np.median(times)), out, extra
    return min(times), float(np.median(times)), out


def write_both(tbl, tmp, name):
    entry = gs.write_artifact(tbl, tmp / name, region_id=1, source_file_id=str(uuid.uuid4()),
                              timestamp_column_id=0, field_column_ids=list(range(1, tbl.num_columns - 4)))
    pq_path = tmp / f"{name}.parquet"
    pq.write_table(tbl, pq_path, compression="zstd")
    return entry, pq_path


def peak_rss_of_full_read(store, entry) -> dict:
    """Peak RSS growth of one full read in a fresh process (bench_stream.py's measure:
    the high-water mark reset right before the read): ``before``, ``peak``, ``table``."""
    sys.path.insert(0, str(ROOT))
    from benchmarks import bench_stream

    m = bench_stream.measure(store, entry.to_dict(), "read", 0)
    return {"before": m["before"], "peak": m["peak"], "table": m["largest_batch_bytes"]}


def nab_table():
    shared = pathlib.Path(os.environ.get("GTSAMPLES_SHARED", ROOT.parent / "shared"))
    tarball = shared / "data" / "nab-real.tar.xz"
    if not tarball.exists():
        return None
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="nab-"))
    with tarfile.open(tarball) as tf:
        tf.extractall(tmp, filter="data")
    import pyarrow.csv as pcsv

    parts = []
    for i, f in enumerate(sorted(tmp.rglob("*.csv"))):
        t = pcsv.read_csv(f)
        col = t["timestamp"]
        if not pa.types.is_timestamp(col.type):  # pyarrow's CSV reader usually infers timestamp[s]
            col = pc.strptime(col, format="%Y-%m-%d %H:%M:%S", unit="s")
        ts = pc.cast(col, pa.timestamp("ms"))
        n = t.num_rows
        parts.append(pa.table({
            "__table_id": pa.array(np.full(n, 1, np.uint32)),
            "__tsid": pa.array(np.full(n, i, np.uint64)),
            "ts": ts,
            "__sequence": pa.array(np.arange(n, 0, -1, dtype=np.uint64)),
            "__op_type": pa.array(np.ones(n, np.uint8)),
            "value": pc.cast(t["value"], pa.float64()),
        }))
    shutil.rmtree(tmp)
    tbl = pa.concat_tables(parts)
    # stable sort by (tsid, ts): keeps input order (and descending sequence) on ties
    idx = np.lexsort((tbl["ts"].to_numpy().astype(np.int64), tbl["__tsid"].to_numpy()))
    return tbl.take(pa.array(idx))


def measure(args, n_series: int, tmp: pathlib.Path, memory: bool) -> dict:
    """One size: the data built and written both ways, measured, printed; its record."""
    from gtsamples.decode import cpu

    t0 = time.perf_counter()
    tbl = synthetic_metrics(n_series, args.rows_per_series)
    n = tbl.num_rows
    print(f"data: {n:,} rows, {n_series} series, {len(FIELDS)} fields ({time.perf_counter() - t0:.1f} s to generate)")
    t0 = time.perf_counter()
    entry, pq_path = write_both(tbl, tmp, "synthetic")
    print(f"write both: {time.perf_counter() - t0:.1f} s")
    art = gs.open_artifact(tmp / "synthetic", entry=entry)
    art_bytes = entry.file_size
    pq_bytes = pq_path.stat().st_size
    n_values = n * len(FIELDS)

    # warm-up (numba JIT / cache load, page cache)
    art.read(series=[(int(tbl["__table_id"][0].as_py()), int(tbl["__tsid"][0].as_py()))])
    pq.read_table(pq_path)

    full_g, full_g_med, got, stages = best(lambda: art.read(), args.repeat, cpu.last_stats)
    stages["read_wall"] = full_g
    full_p, full_p_med, want = best(lambda: pq.read_table(pq_path), args.repeat)
    assert got.num_rows == want.num_rows == n

    # one series, 1% of its time range
    k = n_series // 2
    row0 = k * args.rows_per_series
    t_id = int(tbl["__table_id"][row0].as_py())
    tsid = int(tbl["__tsid"][row0].as_py())
    ts_all = tbl["ts"].to_numpy().astype(np.int64)
    lo, hi = int(ts_all.min()), int(ts_all.max())
    start = lo + (hi - lo) // 2
    end = start + (hi - lo) // 100
    q_g, q_g_med, qg = best(lambda: art.read(series=[(t_id, tsid)], start=start, end=end), args.repeat)
    tsname = "ts"
    flt = ((pc.field("__table_id") == t_id) & (pc.field("__tsid") == pa.scalar(tsid, pa.uint64()))
           & (pc.field(tsname) >= pa.scalar(start, pa.timestamp("ms"))) & (pc.field(tsname) < pa.scalar(end, pa.timestamp("ms"))))
    dset = ds.dataset(pq_path)
    q_p, q_p_med, qp = best(lambda: dset.to_table(filter=flt), args.repeat)
    assert qg.num_rows == qp.num_rows, (qg.num_rows, qp.num_rows)
    _, qstats = art.read_with_stats(series=[(t_id, tsid)], start=start, end=end)

    print()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"numba threads {__import__('numba').config.NUMBA_NUM_THREADS}")
    print(f"{'query':34s} {'gtsamples':>14s} {'pyarrow':>14s} {'ratio':>8s}")
    print(f"{'full scan (rows/s, best of ' + str(args.repeat) + ')':34s} {n / full_g / 1e6:11.1f} M/s {n / full_p / 1e6:11.1f} M/s {full_p / full_g:7.2f}x")
    print(f"{'full scan (median s)':34s} {full_g_med:13.3f}s {full_p_med:13.3f}s {full_p_med / full_g_med:7.2f}x")
    print(f"{'one series, 1% of time (s)':34s} {q_g * 1e3:11.2f} ms {q_p * 1e3:11.2f} ms {q_p / q_g:7.1f}x  ({qg.num_rows} rows)")
    print(f"{'  its reads':34s} {qstats.requests} requests, {qstats.bytes_read:,} bytes, {qstats.pages_loaded} pages, {qstats.blocks_decoded} blocks")
    print(f"{'bytes per row (all columns)':34s} {art_bytes / n:14.3f} {pq_bytes / n:14.3f}")
    print(f"{'bytes per field value':34s} {art_bytes / n_values:14.3f} {pq_bytes / n_values:14.3f}")
    print(f"{'file size':34s} {art_bytes:14,d} {pq_bytes:14,d}")
    rec = {"rows": n, "series": n_series, "rows_per_series": args.rows_per_series, "fields": len(FIELDS),
           "repeat": args.repeat,
           "full_scan": {"gtsamples_best_s": full_g, "gtsamples_median_s": full_g_med,
                         "pyarrow_best_s": full_p, "pyarrow_median_s": full_p_med},
           "one_series": {"gtsamples_best_s": q_g, "gtsamples_median_s": q_g_med, "pyarrow_best_s": q_p,
                          "pyarrow_median_s": q_p_med, "rows": qg.num_rows, "requests": qstats.requests,
                          "bytes_read": qstats.bytes_read, "pages_loaded": qstats.pages_loaded,
                          "blocks_decoded": qstats.blocks_decoded},
           "file_bytes": {"gtsamples": art_bytes, "parquet": pq_bytes},
           "stages_s": stages}  # fmt: skip

    if memory:
        m = peak_rss_of_full_read(tmp / "synthetic", entry)
        used = m["peak"] - m["before"]
        budget = 1.5 * m["table"] + 64 * 2**20
        print(f"{'full read peak memory':34s} {used / 2**20:11.1f} MiB over baseline; output table {m['table'] / 2**20:.1f} MiB; "
              f"budget 1.5x+64 MiB = {budget / 2**20:.1f} MiB -> {'OK' if used <= budget else 'OVER'}")
        rec["memory"] = dict(m, used=used, budget=budget)
    return rec


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--series", type=int, default=1000)
    ap.add_argument("--rows-per-series", type=int, default=10_000)
    ap.add_argument("--sizes", help="rows, comma separated (e.g. 1e5,1e6,1e7): one measure per size, "
                                    "--rows-per-series rows per series; instead of --series")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--json", help="also write the results (and stage times) to this JSON file")
    ap.add_argument("--plot", metavar="DIR", help="also draw cpu_throughput.png and cpu_stages.png in DIR")
    args = ap.parse_args(argv)
    if args.sizes:
        series = [max(1, int(float(s)) // args.rows_per_series) for s in args.sizes.split(",")]
    else:
        series = [args.series]
    doc = {"bench": "cpu", "command": " ".join(sys.argv[1:] if argv is None else argv), "info": _run_info(), "runs": []}

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="gtsamples-bench-"))
    try:
        for i, n_series in enumerate(series):
            if i:
                print()
                shutil.rmtree(tmp / "synthetic")
            memory = not args.no_memory and n_series == max(series)
            doc["runs"].append(measure(args, n_series, tmp, memory))

        nab = nab_table()
        if nab is not None:
            e2, p2 = write_both(nab, tmp, "nab")
            print(f"{'NAB bytes per sample':34s} {e2.file_size / nab.num_rows:14.3f} {p2.stat().st_size / nab.num_rows:14.3f}   ({nab.num_rows:,} samples, 47 series)")
            doc["nab"] = {"samples": nab.num_rows, "gtsamples_bytes": e2.file_size, "parquet_bytes": p2.stat().st_size}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    doc["info"]["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    if args.plot:
        for path in _plotting().render("cpu", doc, args.plot):
            print(f"plot: {path}")


def _plotting():
    sys.path.insert(0, str(ROOT))
    from benchmarks import plotting

    return plotting


def _run_info() -> dict:
    info = _plotting().run_info()
    info["load_avg_start"] = info.pop("load_avg")
    info["numba_threads"] = __import__("numba").config.NUMBA_NUM_THREADS
    return info


if __name__ == "__main__":
    main()
