"""Replay a fuzz corpus through the targets: every input, tracemalloc on each.

    python -m tests.fuzz.replay [--out .fuzz] [--target T] [--no-tracemalloc] [--limit N]

Reads ``<out>/seeds``, ``<out>/corpus/<target>`` and ``<out>/crashes/<target>``
and runs each input through its target (seeds and corpus inputs through all
targets), measuring the tracemalloc peak and the wall time of every
input.  Prints a JSON summary: inputs, outcomes, max/median peak and time,
and every input over the limits or escaping with a non-SamplesError (findings
are listed, not raised).

Run under ``coverage run`` (with and without ``NUMBA_DISABLE_JIT=1``) to
measure the coverage the corpus reaches: see benchmarks/FUZZING.md.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time
import tracemalloc
import traceback

from . import targets as T
from .run import MEM_LIMIT_MB, ROOT, TARGET_NAMES, TIME_LIMIT_S, signature


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / ".fuzz"))
    ap.add_argument("--target", choices=TARGET_NAMES, action="append")
    ap.add_argument("--no-tracemalloc", action="store_true")
    ap.add_argument("--limit", type=int, default=0, help="at most N inputs per target (0: all)")
    args = ap.parse_args(argv)
    out = pathlib.Path(args.out)
    names = args.target or list(TARGET_NAMES)
    common = sorted((out / "seeds").glob("*"))
    for t in TARGET_NAMES:
        common += sorted((out / "corpus" / t).glob("*"))
    report = {}
    for t in names:
        fn = T.TARGETS[t]
        inputs = common + sorted(p for p in (out / "crashes" / t).glob("crash-*") if p.suffix != ".txt")
        if args.limit:
            inputs = inputs[: args.limit]
        peaks, times, outcomes, findings = [], [], {}, {}
        for p in sorted((out / "seeds").glob("*")):  # warm-up (numba, imports): not measured
            fn(p.read_bytes())
        for p in inputs:
            data = p.read_bytes()
            if not args.no_tracemalloc:
                tracemalloc.start()
            t0 = time.perf_counter()
            try:
                res = fn(data)
            except Exception as e:  # noqa: BLE001 - a finding
                res = "finding"
                sig = signature(e)
                findings.setdefault(sig, {"input": str(p), "trace": traceback.format_exception(e)[-3:]})
            dt = time.perf_counter() - t0
            if not args.no_tracemalloc:
                peaks.append(tracemalloc.get_traced_memory()[1] / 2**20)
                tracemalloc.stop()
            times.append(dt)
            outcomes[res] = outcomes.get(res, 0) + 1
            if dt > TIME_LIMIT_S:
                findings.setdefault(f"slow@{p.name}", {"input": str(p), "seconds": dt})
            if peaks and peaks[-1] > MEM_LIMIT_MB:
                findings.setdefault(f"memory@{p.name}", {"input": str(p), "peak_mb": peaks[-1]})
        report[t] = {
            "inputs": len(inputs),
            "outcomes": outcomes,
            "max_seconds": round(max(times), 4) if times else 0,
            "median_seconds": round(statistics.median(times), 5) if times else 0,
            "max_tracemalloc_mb": round(max(peaks), 3) if peaks else None,
            "median_tracemalloc_mb": round(statistics.median(peaks), 3) if peaks else None,
            "findings": findings,
        }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
