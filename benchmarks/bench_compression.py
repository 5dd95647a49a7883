"""The writer's compression choices, side by side: bytes stored against read time.

Builds (once each, in ``--dir``-<choice>) bench_region.py's many-SST region (100
SSTs x 200 series x 500 rows, 4 fields) with the artifacts written at each choice:
the spec's default writer (Zstd level 3), a fast Zstd level (-3) and no compression
(``compression=None``).  Then, round after round with the choices in turn (this
machine's speed drifts), it measures for each:

* the issue-29 query: one series over one day, the region opened afresh right after
  ``pyarrow.dataset`` scanned the same SSTs with the same filter (the scan's time is
  the ratio's numerator);
* the same series over all time;
* a full scan of the region (every row and column), beside ``pyarrow.dataset``
  reading every SST whole.

First it prints libzstd's decode time per frame of such field chunks at several
levels (:func:`frame_probe`; ``--frames-only`` stops there).

Times are the best of ``--rounds``; ratios are pyarrow's best over ours.  The
artifacts' bytes come from the catalog.

Run::

    .venv/bin/python benchmarks/bench_compression.py              # ~2 min after the builds
    .venv/bin/python benchmarks/bench_compression.py --rounds 3 --repeat 3   # shorter
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import pyarrow.dataset as ds

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

import bench_region as B  # noqa: E402
from gtsamples.region import open_region  # noqa: E402

#: Tables the region's series are spread over (bench_region.py's default).
TABLES = 4
#: name -> (compression, compression_level)
CHOICES = {"zstd 3 (default)": ("zstd", 3), "zstd -3": ("zstd", -3), "none": ("none", 3)}


def build(base: str, choice: tuple, ssts: int, series: int, rows: int) -> str:
    comp, level = choice
    d = f"{base}-{comp}{level if comp == 'zstd' else ''}"
    a = argparse.Namespace(ssts=ssts, series=series, rows=rows, fields=4, tables=TABLES, row_group_size=102_400,
                           seed=1, workers=2, compression=comp, compression_level=level)
    B.ensure_region(d, a)
    return d


def frame_probe(levels=(3, 1, -1, -3, -5), n: int = 600, reps: int = 5) -> None:
    """libzstd's decode time per frame of the bench's field chunks (500 values of a
    rounded random walk, XOR-encoded) at each level, through python-zstandard (its
    per-call cost is measured on a 16-byte frame and subtracted)."""
    import numpy as np
    import zstandard

    from gtsamples.write.encode import encode_f64

    rng = np.random.default_rng(1)
    chunks = []
    for k in range(n):
        enc = encode_f64(np.cumsum(rng.normal(0, 1, 500)).round(2) + 100 * (k % 4))
        chunks.append(enc[0] if isinstance(enc, tuple) else enc)
    raw = sum(len(c) for c in chunks)
    dctx = zstandard.ZstdDecompressor()

    def per_frame(frames):
        best = float("inf")
        for _ in range(reps):
            t = time.perf_counter()
            for f in frames:
                dctx.decompress(f)
            best = min(best, time.perf_counter() - t)
        return best / len(frames) * 1e6

    call = per_frame([zstandard.ZstdCompressor(level=3).compress(b"x" * 16)] * n)
    print(f"field chunks: {raw / n:.0f} B each encoded; libzstd decode per frame, best of {reps} over {n} "
          f"(python-zstandard's {call:.2f} us per call subtracted)")
    for lvl in levels:
        frames = [zstandard.ZstdCompressor(level=lvl).compress(c) for c in chunks]
        us = per_frame(frames) - call
        print(f"   level {lvl:>3}: {sum(map(len, frames)) / raw:.2f} of the encoded bytes, {us:5.2f} us a frame, "
              f"{raw / n / us:.0f} MB/s decoded")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=os.path.join(HERE, "out", "compression"), help="regions go in DIR-<choice>")
    ap.add_argument("--rounds", type=int, default=5, help="rounds over the choices (best of these)")
    ap.add_argument("--repeat", type=int, default=5, help="one-series queries per choice and round")
    ap.add_argument("--ssts", type=int, default=B.SCALE_REAL_SSTS)
    ap.add_argument("--series", type=int, default=200)
    ap.add_argument("--rows", type=int, default=500, help="samples per series per SST")
    ap.add_argument("--frames-only", action="store_true", help="only the per-frame decode times (no regions)")
    args = ap.parse_args(argv)
    frame_probe()
    if args.frames_only:
        return 0
    dirs = {name: build(args.dir, c, args.ssts, args.series, args.rows) for name, c in CHOICES.items()}
    rid = B.REGION_ID
    first = next(iter(dirs.values()))
    paths = [os.path.join(first, s.path) for s in open_region(first, rid).ssts]  # the same SSTs in each
    series, queries = B.scale_queries(args.series, TABLES)
    day, day_flt = queries["one day"]
    flt = queries["all time"][1]

    def timed(fn):
        t = time.perf_counter()
        out = fn()
        return time.perf_counter() - t, out

    best: dict = {}

    def note(key, s):
        best[key] = min(best.get(key, float("inf")), s)

    for name, d in dirs.items():  # warm up: kernels loaded, pages cached, the same rows everywhere
        full = open_region(d, rid).read()
        assert full.num_rows == args.ssts * args.series * args.rows
        one = open_region(d, rid).read(series=[series], start=day[0], end=day[1])
        assert one.equals(open_region(first, rid).read(series=[series], start=day[0], end=day[1]))
    for _ in range(args.rounds):
        for name, d in dirs.items():
            for _ in range(args.repeat):
                s, _ = timed(lambda: ds.dataset(paths, format="parquet").to_table(filter=day_flt))
                note(("pyarrow", "one day"), s)
                note((name, "one day"), timed(lambda: open_region(d, rid).read(series=[series], start=day[0],
                                                                                end=day[1]))[0])
                s, _ = timed(lambda: ds.dataset(paths, format="parquet").to_table(filter=flt))
                note(("pyarrow", "all time"), s)
                note((name, "all time"), timed(lambda: open_region(d, rid).read(series=[series]))[0])
            note(("pyarrow", "full scan"), timed(lambda: ds.dataset(paths, format="parquet").to_table())[0])
            note((name, "full scan"), timed(lambda: open_region(d, rid).read())[0])
    print(f"{len(paths)} SSTs ({sum(os.path.getsize(p) for p in paths) / 1e6:.1f} MB of Parquet), best of "
          f"{args.rounds} rounds x {args.repeat}; ms, and pyarrow.dataset's time over ours")
    print(f"{'artifacts':>18} {'MB':>7}   {'one day':>15}   {'all time':>15}   {'full scan':>16}")
    for name, d in dirs.items():
        mb = open_region(d, rid).info()["artifact_bytes"] / 1e6
        cells = [f"{best[(name, q)] * 1e3:7.2f} {best[('pyarrow', q)] / best[(name, q)]:5.1f}x"
                 for q in ("one day", "all time", "full scan")]
        print(f"{name:>18} {mb:7.1f}   " + "   ".join(cells))
    print(f"{'pyarrow.dataset':>18} {'':>7}   " + "   ".join(
        f"{best[('pyarrow', q)] * 1e3:7.2f} {'':>6}" for q in ("one day", "all time", "full scan")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
