"""``Region.iter_batches`` / ``to_reader`` with a ``max_bytes`` beyond int64: one batch per unit, as unbounded."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from gtsamples.region import create_region

from ..conftest import assert_tables_equal
from .conftest import REGION_ID, make_sst_table


@pytest.fixture(scope="module")
def region(tmp_path_factory):
    """Two SSTs, the first covered by an artifact (its path overflowed), the second scanned."""
    rng = np.random.default_rng(11)
    r = create_region(tmp_path_factory.mktemp("huge-max-bytes"), REGION_ID)
    r.add_sst(make_sst_table(rng, rows=400))
    r.build()
    r.add_sst(make_sst_table(rng, rows=300, seq_base=7))
    return r


@pytest.mark.parametrize("max_bytes", [1 << 62, 1 << 63, 1 << 64, 10**30])
@pytest.mark.parametrize("dedup", [False, True])
def test_huge_max_bytes_streams_the_read(region, max_bytes, dedup):
    # 2**63 and more raised OverflowError ('Python int too large to convert to C long') from the
    # artifact's batch sizing; such a size now means "unbounded"
    want = region.read(dedup=dedup)
    got = pa.Table.from_batches(list(region.iter_batches(max_bytes=max_bytes, dedup=dedup)))
    assert_tables_equal(got, want)
    assert_tables_equal(region.to_reader(max_bytes=max_bytes, dedup=dedup).read_all(), want)
