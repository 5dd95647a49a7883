"""Streaming benchmark: peak memory of ``Artifact.iter_batches`` vs a full read.

    python benchmarks/bench_stream.py [--rows 1e7] [--max-bytes 64M] [--json [PATH]]

Writes a synthetic artifact of ``--rows`` rows (``gtsamples.demo.synthetic_metrics``),
then, each in a fresh process, measures the peak RSS growth over the process's
baseline (``VmHWM`` reset through ``/proc/self/clear_refs`` right before, as
``bench_cpu.py`` does) of (1) one full ``read()`` and (2) consuming
``iter_batches(max_bytes=...)`` batch by batch, dropping each.  Then checks that
the batches equal the full read (schema, rows, values), and times both.
Targets (issue 16 item 1): streamed growth <= 256 MiB at 64 MiB batches on
10M rows, where a full read grows ~700 MiB.  ``--json`` prints the results as
JSON (to PATH when given).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = pathlib.Path(__file__).resolve().parents[1]

_MEASURE = """
import json, sys, time, gtsamples as gs
entry = json.loads(sys.argv[2])
art = gs.open_artifact(sys.argv[1], entry=entry)
mode, max_bytes = sys.argv[3], int(sys.argv[4])
if sys.argv[5] != "cold":  # numba kernels loaded first (--cold: they load inside the measure)
    art.read(series=[(0, 0)])
    list(art.iter_batches(series=[(0, 0)]))
import gc; gc.collect()
def status(key):
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
before = status('VmRSS')
with open('/proc/self/clear_refs', 'w') as f:
    f.write('5')  # reset VmHWM to the current RSS
t0 = time.perf_counter()
rows = batches = biggest = 0
if mode == 'read':
    t = art.read()
    rows, batches, biggest = t.num_rows, 1, t.nbytes
    del t
else:
    for b in art.iter_batches(max_bytes=max_bytes):
        rows += b.num_rows
        batches += 1
        biggest = max(biggest, b.nbytes)
        del b
seconds = time.perf_counter() - t0
print(json.dumps({"before": before, "peak": status('VmHWM'), "rows": rows, "batches": batches,
                  "largest_batch_bytes": biggest, "seconds": seconds}))
"""


def measure(store, entry: dict, mode: str, max_bytes: int, cold: bool = False) -> dict:
    """Peak RSS growth of a full read (``mode`` "read") or of iterating the batches in a
    fresh process.  ``ru_maxrss`` survives ``execve`` on Linux (it would report the
    parent's peak), so the high-water mark is reset through ``/proc/self/clear_refs``
    right before the read and read back from ``VmHWM`` after it."""
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(store), json.dumps(entry), mode, str(max_bytes),
                          "cold" if cold else "warm"],
                         capture_output=True, text=True, check=True)
    m = json.loads(out.stdout.strip().splitlines()[-1])
    m["growth_bytes"] = m["peak"] - m["before"]
    return m


def batches_equal_read(store, entry: dict, max_bytes: int) -> bool:
    """The batches, compared one by one with the matching slice of a full read."""
    import gtsamples as gs

    art = gs.open_artifact(store, entry=entry)
    full = art.read()
    at = 0
    for b in art.iter_batches(max_bytes=max_bytes):
        if b.schema != full.schema:
            return False
        want = full.slice(at, b.num_rows)
        for name in full.schema.names:  # floats compared by bits (NaN payloads, -0.0)
            w, g = want.column(name).combine_chunks(), b.column(name)
            if w.type == g.type and str(w.type) == "double":
                import numpy as np

                wv = np.asarray(w.fill_null(0).to_numpy()).view(np.uint64)
                gv = np.asarray(g.fill_null(0).to_numpy()).view(np.uint64)
                if not (np.array_equal(wv, gv) and w.is_valid().equals(g.is_valid())):
                    return False
            elif not w.equals(g):
                return False
        at += b.num_rows
    return at == full.num_rows


def with_nulls(table, rate: float, seed: int = 11):
    """``table`` with ``rate`` of each field's values made null (uniformly at random)."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    for k, f in enumerate(table.schema):
        if pa.types.is_floating(f.type):
            vals = table.column(k).combine_chunks().fill_null(0.0).to_numpy()
            table = table.set_column(k, f, pa.array(vals, mask=rng.random(len(vals)) < rate))
    return table


def parse_bytes(text: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    k = mult.get(t[-1:], 1)
    return int(float(t[:-1] if k > 1 else t) * k)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=float, default=1e7)
    ap.add_argument("--rows-per-series", type=int, default=10_000)
    ap.add_argument("--max-bytes", type=parse_bytes, default=64 << 20)
    ap.add_argument("--null-rate", type=float, default=None,
                    help="make this fraction of every field's values null (uniformly; default: the demo's own)")
    ap.add_argument("--cold", action="store_true",
                    help="also measure the stream in a process whose kernels load inside the measure")
    ap.add_argument("--json", nargs="?", const="-", metavar="PATH", help="print JSON (to PATH when given)")
    args = ap.parse_args(argv)
    import gtsamples as gs
    from gtsamples.demo import synthetic_metrics

    rows = int(args.rows)
    n_series = max(1, rows // args.rows_per_series)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        table = synthetic_metrics(n_series=n_series, rows_per_series=args.rows_per_series)
        if args.null_rate is not None:
            table = with_nulls(table, args.null_rate)
        entry = gs.write_artifact(table, tmp, region_id=1, source_file_id=str(uuid.uuid4()), timestamp_column_id=0,
                                  field_column_ids=list(range(1, table.num_columns - 4))).to_dict()
        table_bytes = table.nbytes
        del table
        write_s = time.perf_counter() - t0
        full = measure(tmp, entry, "read", args.max_bytes)
        streamed = measure(tmp, entry, "stream", args.max_bytes)
        cold = measure(tmp, entry, "stream", args.max_bytes, cold=True) if args.cold else None
        equal = batches_equal_read(tmp, entry, args.max_bytes)
    res = {
        "rows": full["rows"], "table_bytes": table_bytes, "max_bytes": args.max_bytes, "write_seconds": write_s,
        "full_read": full, "streamed": streamed, "streamed_cold": cold, "batches_equal_read": equal,
        "targets": {"streamed_growth_le_256MiB": streamed["growth_bytes"] <= 256 << 20,
                    "batches_equal_read": equal},
    }
    mib = 1 << 20
    lines = [
        f"artifact: {res['rows']:,} rows ({table_bytes / mib:,.0f} MiB as a table); max_bytes {args.max_bytes / mib:g} MiB",
        f"full read       peak RSS growth {full['growth_bytes'] / mib:8.1f} MiB  {full['seconds']:6.2f} s",
        f"iter_batches    peak RSS growth {streamed['growth_bytes'] / mib:8.1f} MiB  {streamed['seconds']:6.2f} s  "
        f"{streamed['batches']} batches (largest {streamed['largest_batch_bytes'] / mib:.1f} MiB)",
        *([f"iter_batches, kernels loading inside the measure: peak RSS growth "
           f"{cold['growth_bytes'] / mib:8.1f} MiB  {cold['seconds']:6.2f} s"] if cold else []),
        f"batches equal the full read: {equal}",
        f"target streamed growth <= 256 MiB: {'met' if res['targets']['streamed_growth_le_256MiB'] else 'MISSED'}",
    ]
    if args.json == "-":
        print(json.dumps(res, indent=1))
    else:
        print("\n".join(lines))
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps(res, indent=1))
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
