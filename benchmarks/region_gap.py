"""The one-series, one-day region query of ``bench_region.py --ssts ...`` (its 100-SST
region), back to back and after something else between queries: 100 ms of a sleep, a
Python busy-wait or a sweep over 64 MB, or the same query's ``pyarrow.dataset`` scan
(as ``bench_region.py`` interleaves them).  Shows how much of the "afresh" time in
``bench_region.py`` is the gap itself, and where it goes: each query's time is split
into the decoder's (``decode.cpu.last_stats()["total"]``: checksums, Zstd, column
kernels) and everything else (opening, planning, navigating, fetching, Arrow tables).

``--zstd`` then shows where the decoder's Zstd time goes: the query's frames, captured
from its batch, decompressed one by one (python-zstandard, the same libzstd the decoder
calls) against the same decoded bytes as one level-3 frame (the per-frame cost: table
builds), and two threads decompressing them at once against one (what a second core of
this machine adds).

``--gaps 0.5,2,5,20,100`` runs the sleep, busy-wait and sweep gaps at each of these
lengths (milliseconds; default 100): how long a pause must be before the next query pays.

``--reuse-navigation`` measures an upper bound: the first query's navigation and
batch (``region.execute._navigate_together`` and ``build_batch``) are reused by every
later one, as if both cost nothing, which is the most a compiled navigation path could
save.

Run (after ``bench_region.py --dir DIR --ssts 100,...`` built ``DIR-scale``)::

    .venv/bin/python benchmarks/region_gap.py --dir /tmp/r29/region [--zstd]
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


def capture_frames(query) -> list[tuple[bytes, int]]:
    """The Zstd frames ``query()``'s batch decompresses: ``[(stored bytes, decoded length)]``
    (taken from the batch as the CPU backend receives it)."""
    from gtsamples import backends
    from gtsamples.format import constants as C

    frames: list = []
    decode = backends.CpuBackend.decode

    def capture(self, batch, **kw):
        ch = batch.chunks[batch.chunks["compression"] == C.COMP_ZSTD]
        data = batch.data
        frames.extend((bytes(data[o: o + n]), d) for o, n, d in zip(
            ch["src_offset"].tolist(), ch["stored_len"].tolist(), ch["decoded_len"].tolist()))
        return decode(self, batch, **kw)

    backends.CpuBackend.decode = capture
    try:
        query()
    finally:
        backends.CpuBackend.decode = decode
    return frames


def zstd_floor(frames: list[tuple[bytes, int]], repeat: int) -> None:
    """Print the frames' decompression one by one, as one frame, and on two threads."""
    import threading

    import zstandard

    from gtsamples.format import constants as C

    def one_by_one(dctx=None):
        dctx = dctx or zstandard.ZstdDecompressor()
        for stored, n in frames:
            dctx.decompress(stored, max_output_size=n)

    decoded = b"".join(zstandard.ZstdDecompressor().decompress(s, max_output_size=n) for s, n in frames)
    whole = zstandard.ZstdCompressor(level=C.WRITER_ZSTD_LEVEL).compress(decoded)
    big = zstandard.ZstdDecompressor()

    def best(fn) -> float:
        ts = []
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        return min(ts)

    rounds = 20

    def many():
        d = zstandard.ZstdDecompressor()
        for _ in range(rounds):
            one_by_one(d)

    def two_threads():
        ths = [threading.Thread(target=many) for _ in range(2)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()

    t_frames, t_whole = best(one_by_one), best(lambda: big.decompress(whole, max_output_size=len(decoded)))
    t_one, t_two = best(lambda: (many(), many())), best(two_threads)
    stored = sum(len(s) for s, _ in frames)
    print(f"its {len(frames)} Zstd frames ({stored:,} B stored, {len(decoded):,} B decoded), best of {repeat}: "
          f"one by one {t_frames * 1e3:.3f} ms; the same bytes as one level-{C.WRITER_ZSTD_LEVEL} frame "
          f"({len(whole):,} B) {t_whole * 1e3:.3f} ms; {2 * rounds} passes on one thread {t_one * 1e3:.1f} ms, "
          f"on two {t_two * 1e3:.1f} ms ({t_one / t_two:.2f}x)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="benchmarks/out/region", help="bench_region.py's --dir")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--zstd", action="store_true",
                    help="also time the query's Zstd frames: one by one, as one frame, on two threads")
    ap.add_argument("--gaps", default="100", metavar="MS[,MS...]",
                    help="gap lengths in milliseconds for the sleep, busy-wait and sweep gaps (default 100)")
    ap.add_argument("--reuse-navigation", action="store_true",
                    help="upper bound: navigation and batch building done once, reused by every query")
    args = ap.parse_args(argv)
    try:
        gaps = [float(g) / 1e3 for g in args.gaps.split(",")]
    except ValueError:
        ap.error(f"--gaps: expected milliseconds separated by commas, not {args.gaps!r}")
    if any(not g >= 0 for g in gaps):
        ap.error(f"--gaps: gap lengths must be >= 0 ms, not {args.gaps!r}")
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
        runs = [("back to back", 0.0)] + [(m, g) for g in gaps for m in ("sleep", "busy-wait", "sweep 64 MB")]
        for mode, seconds in runs + [("pyarrow scan", 0.0)]:
            ts, dec = [], []
            for _ in range(args.repeat):
                gap(mode, seconds, sweep, scan)
                t = time.perf_counter()
                query()
                ts.append(time.perf_counter() - t)
                dec.append(last_stats()["total"])
            rest = sorted(t - d for t, d in zip(ts, dec))
            ts.sort()
            dec.sort()
            what = {"back to back": mode, "pyarrow scan": "after its pyarrow.dataset scan"}.get(
                mode, f"{mode}, {seconds * 1e3:g} ms before each")
            print(f"  {what:>32}: {ts[0] * 1e3:.2f} / {ts[len(ts) // 2] * 1e3:.2f}   decoder "
                  f"{dec[0] * 1e3:.2f} / {dec[len(dec) // 2] * 1e3:.2f}   rest {rest[0] * 1e3:.2f} / "
                  f"{rest[len(rest) // 2] * 1e3:.2f}")
    if args.zstd:
        zstd_floor(capture_frames(query), max(args.repeat, 15))
    return 0


if __name__ == "__main__":
    sys.exit(main())
