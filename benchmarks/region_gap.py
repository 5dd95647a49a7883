"""The one-series, one-day region query of ``bench_region.py --ssts ...`` (its 100-SST
region), back to back and after something else between queries: 100 ms of a sleep, a
Python busy-wait or a sweep over 64 MB, or the same query's ``pyarrow.dataset`` scan
(as ``bench_region.py`` interleaves them).  Shows how much of the "afresh" time in
``bench_region.py`` is the gap itself, and where it goes: each query's time is split
into the decoder's (``decode.cpu.last_stats()["total"]``: checksums, Zstd, column
kernels) and everything else (opening, planning, navigating, fetching, Arrow tables).

``--reuse-navigation`` measures an upper bound: the first query's navigation and
batch (``region.execute._navigate_together`` and ``build_batch``) are reused by every
later one, as if both cost nothing, which is the most a compiled navigation path could
save.

Run (after ``bench_region.py --dir DIR --ssts 100,...`` built ``DIR-scale``)::

    .venv/bin/python benchmarks/region_gap.py --dir /tmp/r29/region
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

import bench_region as B  # noqa: E402
from gtsamples.decode.cpu import last_stats  # noqa: E402
from gtsamples.region import open_region  # noqa: E402


def gap(mode: str, seconds: float, sweep: np.ndarray, scan) -> None:
    if mode == "pyarrow scan":
        scan()
    elif mode == "sleep":
        time.sleep(seconds)
    elif mode == "busy-wait":
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
    elif mode == "sweep 64 MB":
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            sweep += 1


def reuse_navigation() -> None:
    """Replace the region read's navigation and batch building (internals) by their first
    results: same query every time, so the same leaves and batch (its table copied
    shallowly: the fetch sets the buffer on it)."""
    import copy

    import gtsamples.region.execute as ex

    navigate, build = ex._navigate_together, ex.build_batch
    memo: dict = {}

    def navigate_once(*a, **kw):
        if "nav" not in memo:
            memo["nav"] = navigate(*a, **kw)
        return memo["nav"]

    def build_once(*a, **kw):
        if "batch" not in memo:
            memo["batch"] = build(*a, **kw)
        return copy.copy(memo["batch"])

    ex._navigate_together, ex.build_batch = navigate_once, build_once
    print("upper bound: navigation and batch building reused from the first query")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="benchmarks/out/region", help="bench_region.py's --dir")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reuse-navigation", action="store_true",
                    help="upper bound: navigation and batch building done once, reused by every query")
    args = ap.parse_args(argv)
    if args.reuse_navigation:
        reuse_navigation()
    root = args.dir.rstrip("/") + "-scale"

    with open(os.path.join(root, "params.json")) as f:  # the region bench_region.py built
        params = json.load(f)
    series, queries = B.scale_queries(params["series"], params["tables"])  # its query, its filter
    (start, end), flt = queries["one day"]

    def query():
        return open_region(root, B.REGION_ID).read(series=[series], start=start, end=end)

    import pyarrow.dataset as ds

    r0 = open_region(root, B.REGION_ID)
    paths = [os.path.join(root, s.path) for s in r0.ssts]

    def scan():
        return ds.dataset(paths, format="parquet").to_table(filter=flt)

    rows = query().num_rows
    for _ in range(20):
        query()
    sweep = np.ones(8 << 20)
    print(f"one series, one day ({rows:,} rows), ms, best / median of {args.repeat}: the query, "
          "its decoder, the rest")
    for _ in range(args.rounds):
        for mode in ("back to back", "sleep", "busy-wait", "sweep 64 MB", "pyarrow scan"):
            ts, dec = [], []
            for _ in range(args.repeat):
                gap(mode, 0.1, sweep, scan)
                t = time.perf_counter()
                query()
                ts.append(time.perf_counter() - t)
                dec.append(last_stats()["total"])
            rest = sorted(t - d for t, d in zip(ts, dec))
            ts.sort()
            dec.sort()
            what = {"back to back": mode, "pyarrow scan": "after its pyarrow.dataset scan"}.get(
                mode, f"{mode}, 100 ms before each")
            print(f"  {what:>32}: {ts[0] * 1e3:.2f} / {ts[len(ts) // 2] * 1e3:.2f}   decoder "
                  f"{dec[0] * 1e3:.2f} / {dec[len(dec) // 2] * 1e3:.2f}   rest {rest[0] * 1e3:.2f} / "
                  f"{rest[len(rest) // 2] * 1e3:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
