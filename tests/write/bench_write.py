"""Write-throughput benchmark (not collected by pytest).

    .venv/bin/python tests/write/bench_write.py [rows] [series] [fields] [random|walk]

Builds a table in spec order (``series`` identities, regular 10 s timestamps in
ms, nullable float64 fields) and times ``write_artifact`` into a temp dir.
"""

from __future__ import annotations

import os
import resource
import shutil
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src"))
from gtsamples.write import write_artifact  # noqa: E402


def make_table(rows: int, series: int, fields: int, kind: str, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    per = rows // series
    sid = np.repeat(np.arange(series, dtype=np.uint64), per)
    n = len(sid)
    tid = (sid // 100 + 1).astype(np.uint32)
    tsid = sid * np.uint64(7919) + np.uint64(13)
    ts = np.tile(np.arange(per, dtype=np.int64) * 10_000, series) + 1_700_000_000_000
    seq = np.arange(n, dtype=np.uint64)[::-1].copy()  # nonincreasing: valid order for ties
    op = np.ones(n, np.uint8)
    cols = {
        "__table_id": pa.array(tid),
        "__tsid": pa.array(tsid),
        "ts": pa.array(ts, pa.timestamp("ms")),
        "__sequence": pa.array(seq),
        "__op_type": pa.array(op),
    }
    for f in range(fields):
        if kind == "random":
            v = rng.standard_normal(n)
        else:  # gauge-like random walk rounded to 2 decimals
            v = np.round(np.cumsum(rng.standard_normal(n)) , 2)
        mask = rng.random(n) < 0.01 if f == fields - 1 else None
        cols[f"f{f}"] = pa.array(v, mask=mask)
    return pa.table(cols)


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_000
    series = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    fields = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    kind = sys.argv[4] if len(sys.argv) > 4 else "walk"
    t = make_table(rows, series, fields, kind)
    small = make_table(10_000, 10, fields, kind)
    d = tempfile.mkdtemp()
    try:
        write_artifact(small, d, region_id=1, source_file_id=str(__import__("uuid").uuid4()),
                       timestamp_column_id=0, field_column_ids=list(range(1, fields + 1)))  # JIT warm-up
        best = None
        for _ in range(int(os.environ.get("REPS", "3"))):
            r0 = resource.getrusage(resource.RUSAGE_SELF)
            t0 = time.perf_counter()
            e = write_artifact(t, d, region_id=1, source_file_id=str(__import__("uuid").uuid4()),
                               timestamp_column_id=0, field_column_ids=list(range(1, fields + 1)))
            dt = time.perf_counter() - t0
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
            best = dt if best is None else min(best, dt)
            print(f"{t.num_rows} rows x {fields} fields, {series} series ({kind}): {dt:.3f} s, "
                  f"{t.num_rows / dt / 1e6:.2f} M rows/s, {e.file_size / 1e6:.1f} MB, "
                  f"{len(e.objects) - 1} part(s), {os.cpu_count()} CPUs; CPU time {cpu:.2f} s "
                  f"(user {r1.ru_utime - r0.ru_utime:.2f}, sys {r1.ru_stime - r0.ru_stime:.2f})")
        print(f"best: {t.num_rows / best / 1e6:.2f} M rows/s")
    finally:
        shutil.rmtree(d)


if __name__ == "__main__":
    main()
