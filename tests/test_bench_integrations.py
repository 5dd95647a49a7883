"""benchmarks/bench_integrations.py runs (tiny sizes) and checks what it times."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_bench_integrations_small_run(tmp_path):
    out = tmp_path / "integrations.json"
    r = subprocess.run([sys.executable, "benchmarks/bench_integrations.py", "--rows", "40000", "--rows-per-series",
                        "2000", "--rounds", "1", "--json", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert res["rows"] == 40000 and res["series_rows"] > 0
    assert res["equal_to_read"] == {"polars": True, "duckdb dataset": True, "duckdb reader": True}
    assert set(res["median_seconds"]) >= {"polars filtered (pushed)", "polars whole LazyFrame",
                                          "duckdb filtered over arrow_dataset (pushed)"}
    assert "polars filtered / whole" in r.stdout
