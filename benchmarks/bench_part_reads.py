"""Micro-benchmark: one small range of each of many part files through ``LocalStore``.

What a one-series region read's fetch does (``Store.read_coalesced`` over one part of
each artifact), what a single-part fetch does (``Store.read_ranges``, once per part),
and the same ranges read object by object with ``read_into`` (each file opened and
closed: how catalogs and manifests are read), so the descriptor cache
(``gtsamples.storage.fds``) can be compared with plain opens in one process, and
across checkouts (``PYTHONPATH=<checkout>/src``).

Run::

    .venv/bin/python benchmarks/bench_part_reads.py --dir /tmp/r29/region-scale
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import time

import numpy as np

from gtsamples.storage import ReadStats, Store


def _time(fn, repeat: int, loops: int) -> tuple[float, float]:
    """(best, median) microseconds per call."""
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(loops):
            fn()
        ts.append((time.perf_counter() - t) / loops * 1e6)
    return min(ts), statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/tmp/r29/region-scale", help="a directory holding part files")
    ap.add_argument("--parts", type=int, default=100)
    ap.add_argument("--bytes", type=int, default=4096, help="bytes read from each part")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--loops", type=int, default=50)
    a = ap.parse_args()
    store = Store(a.dir)
    keys = sorted(os.path.relpath(p, a.dir) for p in glob.glob(os.path.join(a.dir, "**", "part-*"), recursive=True))
    keys = keys[: a.parts]
    n = len(keys)
    obj = np.arange(n, dtype=np.int64)
    off = np.full(n, 64, np.uint64)
    ln = np.full(n, a.bytes, np.uint64)
    out = np.empty(n * a.bytes, np.uint8)
    st = ReadStats()

    def coalesced():
        store.read_coalesced(keys, obj, off, ln, st)

    def ranges_each():
        for key in keys:
            store.read_ranges(key, [64], [a.bytes], st)

    def read_into_each():
        for k, key in enumerate(keys):
            store.read_into(key, [(64, a.bytes)], out, [k * a.bytes], st)

    coalesced()
    for name, fn in (("read_coalesced (parts)", coalesced), ("read_ranges each part", ranges_each),
                     ("read_into each part", read_into_each)):
        best, med = _time(fn, a.repeat, a.loops)
        print(f"{name:24s} {n} parts x {a.bytes} B: best {best:8.1f} us  median {med:8.1f} us  "
              f"({best / n:.2f} us/part best)")


if __name__ == "__main__":
    main()
