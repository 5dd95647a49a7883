"""Query engines over a region: filtered queries through Polars and DuckDB vs whole reads.

    python benchmarks/bench_integrations.py [--rows 3e6] [--rounds 3] [--json [PATH]]

Builds a region of one SST of ``--rows`` rows (``gtsamples.demo.synthetic_metrics``,
series of ``--rows-per-series`` rows) covered by its artifact, then times, in
interleaved rounds (median reported), on warm caches:

* ``read(series=, start=, end=, columns=)`` of one series and one hour (the reference);
* ``gs.scan_polars(region)`` with that series/time filter and projection, collected,
  vs the whole LazyFrame collected;
* DuckDB over ``gs.arrow_dataset(region)`` with the same ``WHERE`` (pushed), vs
  DuckDB over ``region.to_reader(columns=...)`` (projection only: DuckDB filters
  every row itself), vs ``SELECT *`` over the dataset.

Checks every filtered result equals the reference read.  Target (issue 25): the
filtered Polars collect takes at most 1/10 of the whole collect.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import tempfile
import time

SERIES_COLS = ["__tsid", "ts", "cpu_usage"]


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=float, default=3e6)
    ap.add_argument("--rows-per-series", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", nargs="?", const="-", metavar="PATH")
    args = ap.parse_args(argv)

    import duckdb
    import polars as pl
    import pyarrow as pa

    import gtsamples as gs
    from gtsamples.demo import synthetic_metrics

    rows = int(args.rows)
    with tempfile.TemporaryDirectory() as tmp:
        table = synthetic_metrics(n_series=max(1, rows // args.rows_per_series), rows_per_series=args.rows_per_series)
        region = gs.create_region(tmp, 4398046511111)
        region.add_sst(table)
        region.build()
        tid, tsid = int(table["__table_id"][rows // 2].as_py()), int(table["__tsid"][rows // 2].as_py())
        t0 = table["ts"][rows // 2].value
        start, end = t0 - 1_800_000, t0 + 1_800_000  # one hour around a row of the series (ms)
        del table
        lo = pa.scalar(start, pa.timestamp("ms")).as_py()
        hi = pa.scalar(end, pa.timestamp("ms")).as_py()
        ref = region.read(series=[(tid, tsid)], start=start, end=end, columns=SERIES_COLS)
        lf = gs.scan_polars(region)
        pred = (pl.col("__table_id") == tid) & (pl.col("__tsid") == tsid) & (pl.col("ts") >= lo) & (pl.col("ts") < hi)
        dset = gs.arrow_dataset(region)
        where = (f"__table_id = {tid} AND __tsid = {tsid} AND ts >= epoch_ms({start})::TIMESTAMP_MS "
                 f"AND ts < epoch_ms({end})::TIMESTAMP_MS")
        sql = "SELECT __tsid, ts, cpu_usage FROM {t} WHERE " + where + " ORDER BY ts"

        con = duckdb.connect()  # one connection (opening one costs ~15 ms here)

        def duck(query, **objs):
            for k, v in objs.items():
                con.register(k, v)  # a reader is read once: registered afresh for each query
            r = con.sql(query).arrow()
            return r.read_all() if isinstance(r, pa.RecordBatchReader) else r

        cases = {
            "read(series, start, end, columns)": lambda: region.read(series=[(tid, tsid)], start=start, end=end,
                                                                      columns=SERIES_COLS),
            "polars filtered (pushed)": lambda: lf.filter(pred).select(SERIES_COLS).collect(),
            "polars whole LazyFrame": lambda: lf.collect(),
            "duckdb filtered over arrow_dataset (pushed)": lambda: duck(sql.format(t="d"), d=dset),
            "duckdb filtered over to_reader (projection only)": lambda: duck(
                sql.format(t="r"), r=region.to_reader(columns=["__table_id", *SERIES_COLS])),
            "duckdb SELECT * over arrow_dataset": lambda: duck("SELECT * FROM d", d=dset),
            "read() whole": lambda: region.read(),
        }
        times: dict[str, list[float]] = {k: [] for k in cases}
        results = {}
        for _ in range(args.rounds):
            for name, fn in cases.items():
                s, out = _timed(fn)
                times[name].append(s)
                results[name] = out
                del out
        want = pl.from_arrow(ref)
        equal = {
            "polars": results["polars filtered (pushed)"].equals(want),
            "duckdb dataset": pl.from_arrow(results["duckdb filtered over arrow_dataset (pushed)"]).equals(want),
            "duckdb reader": pl.from_arrow(results["duckdb filtered over to_reader (projection only)"]).equals(want),
        }
        med = {k: statistics.median(v) for k, v in times.items()}
        res = {"rows": rows, "series_rows": ref.num_rows, "rounds": args.rounds, "median_seconds": med,
               "equal_to_read": equal,
               "polars_filtered_over_whole": med["polars filtered (pushed)"] / med["polars whole LazyFrame"],
               "duckdb_filtered_over_whole": med["duckdb filtered over arrow_dataset (pushed)"]
               / med["duckdb SELECT * over arrow_dataset"]}
        res["targets"] = {"polars_filtered_le_tenth_of_whole": res["polars_filtered_over_whole"] <= 0.1,
                          "equal": all(equal.values())}
    if args.json == "-":
        print(json.dumps(res, indent=1))
    else:
        print(f"region: {rows:,} rows, one SST covered by its artifact; query: one series, one hour "
              f"({res['series_rows']} rows), columns {SERIES_COLS}; median of {args.rounds} interleaved rounds")
        for k, v in med.items():
            print(f"  {k:52s} {v * 1000:9.1f} ms")
        print(f"  polars filtered / whole: {res['polars_filtered_over_whole']:.4f} (target <= 0.1); "
              f"duckdb filtered / whole: {res['duckdb_filtered_over_whole']:.4f}; equal to read: {equal}")
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps(res, indent=1))
    return 0 if all(equal.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
