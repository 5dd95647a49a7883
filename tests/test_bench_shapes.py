"""benchmarks/bench_shapes.py on a tiny grid: the data it generates, its JSON and its plot."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import bench_shapes


def test_generate_is_the_shape_asked_for_in_spec_order():
    tbl = bench_shapes.generate(n_series=7, per_series=5, seed=3)
    assert tbl.num_rows == 35
    table_id, tsid = tbl["__table_id"].to_numpy(), tbl["__tsid"].to_numpy()
    order = np.lexsort((tsid, table_id))
    assert np.array_equal(order, np.arange(35)) and len(np.unique(tsid)) == 7  # series in (table, tsid) order
    ts = tbl["ts"].to_numpy().astype(np.int64).reshape(7, 5)
    assert (np.diff(ts, axis=1) >= bench_shapes.STEP_MS - 40).all()  # ascending per series
    vals = tbl["f0"].to_numpy()
    assert np.array_equal(vals, np.round(vals, 2))  # two decimals


def test_tiny_grid_json_and_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the plots extra")
    out = tmp_path / "shapes.json"
    argv = ["--dir", str(tmp_path / "data"), "--rows", "3000", "--per-series", "50,1000", "--repeat", "1",
            "--window", "0.5", "--json", str(out), "--plot", str(tmp_path / "plots")]
    assert bench_shapes.main(argv) == 0
    doc = json.loads(out.read_text())
    assert [(r["rows"], r["per_series"], r["series"]) for r in doc["results"]] == [(3000, 50, 60), (3000, 1000, 3)]
    for r in doc["results"]:
        assert r["full_scan"]["ratio"] > 0 and r["query"]["rows_out"] > 0
        assert r["query"]["ratio_steady"] > 0 and len(r["query"]["ours_steady_s"]) == doc["repeat"]
        assert r["bytes_per_row"]["ours"] > 0 and r["stages"]["chunks"] > 0
        fs = r["full_scan"]  # the Zstd floor: every Zstd frame of the scan, decompressed without a failure
        assert fs["zstd_frames"] == r["stages"]["zstd_chunks"] > 0 and len(fs["zstd_floor_s"]) == doc["repeat"]
        assert fs["floor_ratio"] > 0
        assert set(r["read_phases_s"]) == {"navigate", "tables", "fetch", "decode", "assemble"} and min(r["read_phases_s"].values()) > 0
    assert doc["info"]["cpus"] and len(doc["info"]["load_avg_start"]) == 3
    printed = capsys.readouterr().out
    assert "stages:" in printed and "Zstd floor:" in printed and "full read, wall ns/row: navigate" in printed
    png = tmp_path / "plots" / "shapes_throughput.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the data sets are cached: a second run reuses them (same build time recorded)
    built = json.loads((tmp_path / "data" / "3000x50" / "meta.json").read_text())["build_s"]
    bench_shapes.main(argv[:6] + ["--prepare"])
    assert json.loads((tmp_path / "data" / "3000x50" / "meta.json").read_text())["build_s"] == built
