"""benchmarks/bench_compression.py on tiny regions: every choice built and read alike."""

from __future__ import annotations

import re

from benchmarks import bench_compression


def test_tiny_regions(tmp_path, capsys):
    argv = ["--dir", str(tmp_path / "r"), "--ssts", "3", "--series", "8", "--rows", "300", "--rounds", "1",
            "--repeat", "1"]
    assert bench_compression.main(argv) == 0
    out = capsys.readouterr().out
    levels = re.findall(r"level +(-?\d+): ([\d.]+) of the encoded bytes", out)
    assert [int(lv) for lv, _ in levels] == [3, 1, -1, -3, -5]
    ratios = {int(lv): float(r) for lv, r in levels}
    assert 0 < ratios[3] <= ratios[-5] < 1  # faster levels store more
    rows = {m.group(1).strip(): float(m.group(2)) for m in re.finditer(r"^(.{18}) +([\d.]+) +[\d.]+ +[\d.]+x", out, re.M)}
    assert set(rows) == {"zstd 3 (default)", "zstd -3", "none"}
    assert rows["zstd 3 (default)"] < rows["none"]  # raw artifacts hold more bytes
    assert (tmp_path / "r-none").is_dir() and (tmp_path / "r-zstd-3").is_dir() and (tmp_path / "r-zstd3").is_dir()
