"""benchmarks/bench_stream.py runs (tiny sizes) and reports what it measures."""

from __future__ import annotations

import json
import subprocess
import sys

from benchmarks import bench_stream


def test_bench_stream_small_run(tmp_path):
    out = tmp_path / "stream.json"
    r = subprocess.run([sys.executable, "benchmarks/bench_stream.py", "--rows", "20000", "--rows-per-series", "1000",
                        "--max-bytes", "64K", "--json", str(out)], capture_output=True, text=True,
                       cwd=bench_stream.ROOT)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert res["rows"] == 20000 and res["batches_equal_read"] is True
    assert res["streamed"]["rows"] == 20000 and res["streamed"]["batches"] > 5
    assert res["streamed"]["largest_batch_bytes"] <= 64 << 10
    assert "iter_batches    peak RSS growth" in r.stdout


def test_parse_bytes():
    assert bench_stream.parse_bytes("64M") == 64 << 20 and bench_stream.parse_bytes("256KiB") == 256 << 10
    assert bench_stream.parse_bytes("1000") == 1000


def test_bench_stream_nulls_and_cold(tmp_path):
    out = tmp_path / "stream.json"
    r = subprocess.run([sys.executable, "benchmarks/bench_stream.py", "--rows", "10000", "--rows-per-series", "1000",
                        "--max-bytes", "64K", "--null-rate", "0.02", "--cold", "--json", str(out)],
                       capture_output=True, text=True, cwd=bench_stream.ROOT)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert res["batches_equal_read"] is True and res["streamed_cold"]["rows"] == 10000
    assert "kernels loading inside the measure" in r.stdout


def test_with_nulls_rate():
    import pyarrow as pa

    t = pa.table({"ts": pa.array(range(10000), pa.int64()), "v": pa.array([1.0] * 10000)})
    v = bench_stream.with_nulls(t, 0.02).column("v")
    assert 100 < v.null_count < 300 and t.column("ts").null_count == 0
