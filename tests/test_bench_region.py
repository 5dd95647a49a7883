"""benchmarks/bench_region.py's fresh-process first open, on a tiny region; region_gap.py's frame capture and arguments."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import bench_region
from gtsamples.region import create_region

from .region.conftest import make_sst_table


def test_fresh_process_open_times_a_first_open(tmp_path):
    rng = np.random.default_rng(5)
    r = create_region(tmp_path, bench_region.REGION_ID)
    for _ in range(3):
        r.add_sst(make_sst_table(rng, rows=50))
    ms, faults = bench_region.fresh_process_open(str(tmp_path), str(tmp_path))  # warmed on its empty version 1
    assert 0 < ms < 60_000 and faults >= 0


def test_region_gap_captures_the_zstd_frames_a_query_decompresses(tmp_path, capsys):
    import zstandard

    from benchmarks import region_gap
    from gtsamples.decode.cpu import last_stats
    from gtsamples.region import open_region

    rng = np.random.default_rng(6)
    r = create_region(tmp_path, bench_region.REGION_ID)
    for _ in range(3):
        r.add_sst(make_sst_table(rng, rows=400))
    r.build()

    def query():
        return open_region(tmp_path, bench_region.REGION_ID).read()

    frames = region_gap.capture_frames(query)
    assert len(frames) == last_stats()["zstd_chunks"] > 0
    assert sum(n for _, n in frames) == last_stats()["zstd_bytes"]
    dctx = zstandard.ZstdDecompressor()
    assert all(len(dctx.decompress(s, max_output_size=n)) == n for s, n in frames)
    region_gap.zstd_floor(frames, 2)
    assert f"its {len(frames)} Zstd frames" in capsys.readouterr().out


@pytest.mark.parametrize("gaps", ["x", "5,,20", "-1", "nan"])
def test_region_gap_refuses_bad_gap_lengths(gaps, capsys):
    from benchmarks import region_gap

    with pytest.raises(SystemExit) as ei:
        region_gap.main(["--dir", "/nonexistent", "--gaps", gaps])
    assert ei.value.code == 2 and "--gaps" in capsys.readouterr().err
