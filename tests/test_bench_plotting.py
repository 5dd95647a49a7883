"""benchmarks/plotting.py draws every benchmark's JSON; the scripts write what it reads.

The plots run on small synthetic records shaped like each script's output (a
real GPU run's and a ``--dry-run``'s for bench_gpu).  Two tiny runs of
bench_cpu and bench_region check the scripts' ``--json`` against the plotter,
and the region benchmark's stage timers against the region read they wrap.
"""

from __future__ import annotations

import json
import math

import pytest

from benchmarks import plotting

pytest.importorskip("matplotlib", reason="the plots extra")

PNG = b"\x89PNG\r\n\x1a\n"
INFO = {"machine": "x86_64", "cpus": 2, "python": "3.11.7", "commit": "abc1234", "dirty": False,
        "load_avg_start": [0.5, 0.4, 0.3], "load_avg_end": [0.6, 0.4, 0.3]}


def cpu_run(rows: int, scale: float) -> dict:
    stages = {"prepare": 1e-4 * scale, "checksum": 3e-4 * scale, "frame_check": 2e-4 * scale, "decode": 0.012 * scale,
              "decompress": 0.008 * scale, "kernel": 0.012 * scale, "finish": 5e-4 * scale, "total": 0.0131 * scale}
    return {"rows": rows, "series": rows // 1000, "rows_per_series": 1000, "fields": 4, "repeat": 3,
            "full_scan": {"gtsamples_best_s": 0.015 * scale, "gtsamples_median_s": 0.017 * scale,
                          "pyarrow_best_s": 0.018 * scale, "pyarrow_median_s": 0.02 * scale},
            "one_series": {"gtsamples_best_s": 8e-4, "gtsamples_median_s": 9e-4, "pyarrow_best_s": 0.02 * scale,
                           "pyarrow_median_s": 0.021 * scale, "rows": 56, "requests": 1, "bytes_read": 43_548,
                           "pages_loaded": 0, "blocks_decoded": 1},
            "file_bytes": {"gtsamples": 9 * rows, "parquet": 9 * rows},
            "stages_s": dict(stages, read_wall=0.015 * scale)}


REGION = {"ssts": 100, "rows": 40_000_000, "rows_out": 200_000,
          "cold": {"bytes_read": 3_467_882, "requests": 600, "chunk_bytes": 2_791_392, "metadata_bytes": 676_490,
                   "bytes_ratio": 1.0, "seconds": 0.026},
          "warm": {"bytes_read": 2_791_392, "requests": 100, "metadata_bytes": 0, "cache_hits": 400, "seconds": 0.013},
          "pyarrow_scan_seconds": 0.62, "region_scan_no_artifacts_seconds": 1.33, "speedup_cold": 23.5,
          "speedup_warm": 46.0, "speedup_cold_range": [13.6, 26.3], "speedups_cold": [23.5],
          "stages_ms": {"cold": {"open artifacts": 7.0, "navigate": 9.0, "fetch chunks": 2.0, "decode chunks": 6.0,
                                 "Arrow tables": 1.0, "other": 1.0, "wall": 26.0, "n": 5},
                        "warm": {"open artifacts": 0.1, "navigate": 2.0, "fetch chunks": 2.0, "decode chunks": 6.0,
                                 "Arrow tables": 1.0, "other": 1.9, "wall": 13.0, "n": 5}},
          "info": INFO, "command": "--repeat 15"}


def gpu_records(dry: bool) -> list[dict]:
    """bench_gpu's JSON lines: "files" records and scan/series batches, at two sizes."""
    out = []
    for rows in (1_000_000, 10_000_000):
        f = {"fields": 4, "rows": rows, "query": "files", "batch_rows": rows, "stored_MB": rows / 8e4,
             "output_MB": rows * 6.1e-5, "write_s": 1.0, "dry_run": dry, "cpu_files_s": rows / 6e6,
             "cpu_files_GBps": 0.4}
        host = {"host_layout": 0.3, "host_plan": 3.0, "host_tables": 0.7, "host_fetch_wait": 3.7,
                "host_precheck": 0.5, "host_device_wait": 0.01 if dry else 2.5, "navigate": 1.3}
        if dry:
            f.update(host_path_wall_s=0.01, host_path_stages_ms=dict(host, wall=9.2), host_path_GBps=5.9)
        else:
            dev = {"h2d": 1.0, "upload": 0.1, "hash": 0.2, "nvcomp": 0.8, "decode": 0.5, "trim": 0.0,
                   "compact": 0.0, "assembly": 0.1, "h2d_copy": 0.9, "total_device": 2.7}
            f.update(files_wall_s=0.012, files_GBps=5.0, stages_ms=dict(host, **dev, wall=11.0), host_share=0.8,
                     device_ms=1.7, device_GBps=36.0)
        out.append(f)
        for query in ("scan", "series"):
            r = {"fields": 4, "rows": rows, "query": query, "batch_rows": rows if query == "scan" else 10_590,
                 "chunks": 1344, "stored_MB": 13.3, "output_MB": 62.5, "build_s": 0.04, "encode_s": 1.3,
                 "cpu_s": 0.16, "cpu_rows": rows, "cpu_GBps": 0.38, "cpu_stages": {"decode": 0.16}}
            if not dry:
                r.update(gpu_wall_s=0.003, stages_ms={"nvcomp": 0.8, "decode": 0.5, "total_device": 1.5},
                         device_ms=1.4, device_GBps=44.0, kernels_GBps=120.0, copy_GBps=3000.0, copy_out_GBps=1500.0,
                         speedup=114.0)
            out.append(r)
    return out


def assert_pngs(paths, names):
    assert sorted(p.name for p in paths) == sorted(names)
    for p in paths:
        data = p.read_bytes()
        assert data[:8] == PNG and len(data) > 10_000, p


def test_cpu_plots(tmp_path):
    doc = {"bench": "cpu", "command": "--sizes 1e5,1e6", "info": INFO, "runs": [cpu_run(10**6, 10), cpu_run(10**5, 1)]}
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(doc))
    assert plotting.main(["cpu", str(path), "-o", str(tmp_path / "out")]) == 0
    assert_pngs((tmp_path / "out").iterdir(), ["cpu_throughput.png", "cpu_stages.png"])


def test_cpu_stage_bar_adds_up_to_the_read():
    run = cpu_run(10**6, 10)
    bar = plotting.cpu_stage_bar(run)
    assert math.isclose(sum(bar.values()), run["stages_s"]["read_wall"] * 1e9 / run["rows"], rel_tol=1e-9)
    # the decode stage split as the threads' CPU time splits: 8 ms Zstd, 12 ms kernels
    assert math.isclose(bar["decode: Zstd"] / bar["decode: kernels"], 8 / 12, rel_tol=1e-9)


def test_region_plots(tmp_path):
    paths = plotting.render("region", REGION, tmp_path)
    assert_pngs(paths, ["region_times.png", "region_stages.png"])
    without = {k: v for k, v in REGION.items() if k != "stages_ms"}  # JSON of an older run: times only
    assert [p.name for p in plotting.render("region", without, tmp_path / "old")] == ["region_times.png"]


@pytest.mark.parametrize("dry", [False, True], ids=["gpu", "dry-run"])
def test_gpu_plots(tmp_path, dry):
    path = tmp_path / "gpu.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in gpu_records(dry)))  # as --json appends them
    records = plotting.load(path)
    assert len(records) == 6
    assert_pngs(plotting.render("gpu", records, tmp_path / "out"), ["gpu_throughput.png", "gpu_stages.png"])


def test_bench_cpu_json_draws(tmp_path, monkeypatch):
    from benchmarks import bench_cpu

    monkeypatch.setenv("GTSAMPLES_SHARED", str(tmp_path / "no-shared"))  # no NAB part: small and quick
    out = tmp_path / "cpu.json"
    bench_cpu.main(["--sizes", "2000,4000", "--rows-per-series", "1000", "--repeat", "1", "--no-memory",
                    "--json", str(out), "--plot", str(tmp_path / "plots")])
    doc = json.loads(out.read_text())
    assert [r["rows"] for r in doc["runs"]] == [2000, 4000]
    assert {"decode", "decompress", "kernel", "total", "read_wall"} <= set(doc["runs"][0]["stages_s"])
    assert doc["info"]["cpus"] and len(doc["info"]["load_avg_start"]) == 3
    assert_pngs((tmp_path / "plots").iterdir(), ["cpu_throughput.png", "cpu_stages.png"])


def test_bench_region_json_draws(tmp_path):
    from benchmarks import bench_region

    out = tmp_path / "region.json"
    assert bench_region.main(["--dir", str(tmp_path / "region"), "--ssts", "3", "--series", "8", "--rows", "200",
                              "--tables", "2", "--repeat", "1", "--workers", "1", "--json", str(out),
                              "--plot", str(tmp_path / "plots")]) == 0
    doc = json.loads(out.read_text())
    for kind in ("cold", "warm"):
        stages = doc["stages_ms"][kind]
        assert set(stages) == {*bench_region.STAGES, "other", "wall", "n"}, "a stage's function moved: update STAGES"
        assert math.isclose(sum(v for k, v in stages.items() if k not in ("wall", "n")), stages["wall"], rel_tol=1e-6)
    assert doc["stages_ms"]["cold"]["open artifacts"] > 0 and doc["stages_ms"]["cold"]["decode chunks"] > 0
    assert_pngs((tmp_path / "plots").iterdir(), ["region_times.png", "region_stages.png"])


def test_stage_timers_restore_the_region_read():
    from benchmarks import bench_region
    import gtsamples.plan as plan_mod
    from gtsamples.backends import CpuBackend
    from gtsamples.plan.navigator import Navigation
    from gtsamples.region import region as region_mod

    before = (region_mod.Region._artifact, Navigation.add, plan_mod.fetch_batch, CpuBackend.decode)
    with bench_region.stage_timers() as (totals, missing):
        assert missing == []
        assert region_mod.Region._artifact is not before[0] and CpuBackend.decode is not before[3]
    assert (region_mod.Region._artifact, Navigation.add, plan_mod.fetch_batch, CpuBackend.decode) == before
