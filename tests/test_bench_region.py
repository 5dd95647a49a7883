"""benchmarks/bench_region.py's fresh-process first open, on a tiny region."""

from __future__ import annotations

import numpy as np

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
