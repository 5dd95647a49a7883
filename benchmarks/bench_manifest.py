"""Manifest parse benchmark: ``parse_manifest``'s time and memory, this tree's
against another revision's, and msgspec's typed decode of the same documents
(the library considered for it in issue 15: benchmarks/json_libraries.py
shows the rules it cannot keep; here is what it would cost or save).

Cases (valid manifests; parts with varied values):

* ``small``: 1 part, the writer's layout (2-space indent), ~0.7 KB;
* ``typical``: 100 parts, the writer's layout, ~40 KB;
* ``large``: 100,000 parts, the writer's layout, ~40 MB;
* ``f4``: 400,000 one-block parts, compact, 62 MiB (benchmarks/FUZZING.md F4);
* ``f4-reordered``: the same with the keys of every part after the first in
  another order (the column-wise reader's slow case: part by part).

Every (implementation, case) runs in a fresh child process: first one parse
measured for RSS high-water growth (VmHWM over VmRSS before, the mark reset
through /proc/self/clear_refs), then ``--repeat`` timed
parses (min and median), then one under tracemalloc (peak).  The children of
the implementations alternate, round by round: the machine's speed drifts.

Run::

    .venv/bin/python benchmarks/bench_manifest.py                     # this tree
    .venv/bin/python benchmarks/bench_manifest.py --against f7dabf4   # and a revision's src/
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = ("small", "typical", "large", "f4", "f4-reordered")
U32_MAX, I64_MIN, I64_MAX = 2**32 - 1, -2**63, 2**63 - 1


def make_manifest(case: str) -> bytes:
    head = {"format": "columnar-samples", "version": 1, "region_id": 4398046511111,
            "source_file_id": "5a3c0000-0000-4000-8000-000000000001",
            "generation": "5a3c0000-0000-4000-8000-000000000002",
            "timestamp": {"column_id": 0, "name": "ts", "unit": "millisecond"},
            "fields": [{"column_id": i, "name": f"f{i}", "type": "float64", "nullable": True} for i in range(1, 5)]}
    if case.startswith("f4"):
        head["fields"] = head["fields"][:1]
        part = ('{"part_id":%d,"file_size":128,"num_rows":1,"num_blocks":1,"first":{"table_id":1,"tsid":1},'
                '"last":{"table_id":1,"tsid":1},"min_timestamp":0,"max_timestamp":0}')
        parts = [part % i for i in range(400_000)]
        if case == "f4-reordered":
            parts[1:] = [p.replace('"min_timestamp":0,"max_timestamp":0}', '"max_timestamp":0,"min_timestamp":0}')
                         for p in parts[1:]]
        return (json.dumps(head, separators=(",", ":"))[:-1] + ',"files":[' + ",".join(parts) + "]}").encode()
    n = {"small": 1, "typical": 100, "large": 100_000}[case]
    files = []
    for i in range(n):
        t0 = 1_700_000_000_000 + i * 3_600_000
        files.append({"part_id": i, "file_size": 1_000_000 + 7 * i, "num_rows": 40_000, "num_blocks": 5,
                      "first": {"table_id": 1 + i // 50_000, "tsid": 11 + 7919 * (2 * i % 100_000)},
                      "last": {"table_id": 1 + i // 50_000, "tsid": 11 + 7919 * ((2 * i + 1) % 100_000)},
                      "min_timestamp": t0, "max_timestamp": t0 + 3_599_999})
    return json.dumps(dict(head, files=files), indent=2).encode()


def _msgspec_parser():
    """A typed msgspec decoder for the manifest (unknown fields forbidden, integer
    ranges as far as msgspec allows: none past int64, so u64 is unbounded)."""
    from typing import Annotated

    import msgspec

    u32 = Annotated[int, msgspec.Meta(ge=0, le=U32_MAX)]
    u64 = Annotated[int, msgspec.Meta(ge=0)]
    i64 = Annotated[int, msgspec.Meta(ge=I64_MIN, le=I64_MAX)]
    strict = dict(forbid_unknown_fields=True)
    ident = msgspec.defstruct("Identity", [("table_id", u32), ("tsid", u64)], **strict)
    part = msgspec.defstruct("Part", [("part_id", u32), ("file_size", u64), ("num_rows", u64), ("num_blocks", u64),
                                      ("first", ident), ("last", ident), ("min_timestamp", i64),
                                      ("max_timestamp", i64)], **strict)
    ts = msgspec.defstruct("Timestamp", [("column_id", u32), ("name", str), ("unit", str)], **strict)
    field = msgspec.defstruct("Field", [("column_id", u32), ("name", str), ("type", str), ("nullable", bool)], **strict)
    doc = msgspec.defstruct("Document", [("format", str), ("version", int), ("region_id", u64),
                                         ("source_file_id", str), ("generation", str), ("timestamp", ts),
                                         ("fields", list[field]), ("files", list[part])], **strict)
    return msgspec.json.Decoder(doc).decode


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def _reset_peak_rss() -> int:
    """Start a new RSS high-water mark (Linux: clear_refs 5 resets VmHWM); the RSS now, KiB."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _status_kib("VmRSS")
    except OSError:  # elsewhere: the process's high-water mark so far
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _peak_rss() -> int:
    try:
        return _status_kib("VmHWM")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child(impl: str, path: str, repeat: int) -> dict:
    with open(path, "rb") as f:
        data = f.read()
    if impl == "msgspec":
        parse = _msgspec_parser()
    else:
        sys.path.insert(0, impl)
        from gtsamples.format.manifest import parse_manifest as parse
    parse(make_manifest("small"))  # imports and first-call costs out of the way
    rss0 = _reset_peak_rss()
    parse(data)
    rss = (_peak_rss() - rss0) / 1024
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        parse(data)
        times.append(time.perf_counter() - t0)
    tracemalloc.start()
    parse(data)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return {"min_s": min(times), "median_s": statistics.median(times), "rss_mib": rss, "tracemalloc_mib": peak}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--against", help="a git revision whose src/ is measured too")
    ap.add_argument("--no-msgspec", action="store_true", help="leave msgspec out")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--rounds", type=int, default=3, help="child processes per (implementation, case)")
    ap.add_argument("--child", nargs=3, metavar=("IMPL", "FILE", "REPEAT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], int(args.child[2]))))
        return
    with tempfile.TemporaryDirectory(prefix="bench-manifest-") as tmp:
        impls = {"this tree": os.path.join(ROOT, "src")}
        if args.against:
            old = os.path.join(tmp, "against")
            os.makedirs(old)
            archive = subprocess.run(["git", "-C", ROOT, "archive", args.against, "src"], check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", old], input=archive, check=True)
            impls[args.against] = os.path.join(old, "src")
        if not args.no_msgspec:
            impls["msgspec (typed decode only)"] = "msgspec"
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; "
              f"{args.rounds} rounds")
        for case in args.cases.split(","):
            path = os.path.join(tmp, case + ".json")
            data = make_manifest(case)
            with open(path, "wb") as f:
                f.write(data)
            repeat = {"small": 2000, "typical": 100, "large": 3}.get(case, 2)
            results = {name: [] for name in impls}
            for _ in range(args.rounds):
                for name, impl in impls.items():
                    out = subprocess.run([sys.executable, __file__, "--child", impl, path, str(repeat)],
                                         capture_output=True, text=True)
                    if out.returncode:
                        raise SystemExit(f"{name} / {case}: {out.stderr[-2000:]}")
                    results[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"\n{case}: {len(data):,} bytes")
            for name, rs in results.items():
                best = min(r["min_s"] for r in rs)
                med = statistics.median(r["median_s"] for r in rs)
                unit, k = ("us", 1e6) if best < 0.01 else ("ms", 1e3)
                print(f"  {name:30s} min {best * k:9.1f} {unit}  median {med * k:9.1f} {unit}  "
                      f"RSS +{max(r['rss_mib'] for r in rs):6.1f} MiB  tracemalloc peak "
                      f"{max(r['tracemalloc_mib'] for r in rs):6.1f} MiB")


if __name__ == "__main__":
    main()
