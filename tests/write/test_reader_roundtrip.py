"""Round trips through the real reader (gtsamples.open_artifact)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

gs = pytest.importorskip("gtsamples")
if not hasattr(gs, "open_artifact"):  # pragma: no cover
    pytest.skip("the reader is not available", allow_module_level=True)

from ..conftest import assert_tables_equal  # noqa: E402
from .helpers import SRC, series_table, table, write  # noqa: E402


CASES = {
    "one_field": (lambda: table(1, 1, list(range(10))), {}),
    "many_blocks_parts": (
        lambda: series_table(7, 40, 3, null_frac=0.25, seed=2),
        {"row_limit": 5, "max_page_bytes": 12 + 44 * 7 * 3, "max_leaves_per_root": 3},
    ),
    "all_null_field": (
        lambda: table(1, [1, 1, 2], [0, 0, 1], seq=[3, 2, 1], op=[1, 0, 1],
                      fields={"a": [None, None, 1.5], "b": [None, None, None]}),
        {"row_limit": 2},
    ),
    "extremes": (
        lambda: table([0, 2**32 - 1], [2**64 - 1, 0], [-(2**63), 2**63 - 1], seq=[2**64 - 1, 0], op=[0, 1],
                      fields={"v": [-0.0, float("nan")]}, unit="ns"),
        {},
    ),
    "depth2_default_pages": (lambda: table(1, 1, list(range(400))), {"row_limit": 1}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_read_back(tmp_path, name):
    make, kw = CASES[name]
    t = make()
    e, d = write(tmp_path, t, **kw)
    art = gs.open_artifact(tmp_path, entry=e)
    assert_tables_equal(art.read(), t)
    assert art.validate()["valid"]
    art2 = gs.open_artifact(d)
    assert_tables_equal(art2.read(), t)


def test_read_back_selection(tmp_path):
    t = series_table(5, 30, 2, null_frac=0.1, seed=9)
    e, _ = write(tmp_path, t, row_limit=4, max_page_bytes=12 + 44 * 6 * 2, max_leaves_per_root=2)
    art = gs.open_artifact(tmp_path, entry=e)
    tid = t.column(0).to_numpy()
    tsid = t.column(1).to_numpy()
    ts = t.column(2).cast(pa.int64()).to_numpy()
    key = (int(tid[40]), int(tsid[40]))
    got = art.read(series=[key], start=50, end=170)
    mask = (tid == key[0]) & (tsid == key[1]) & (ts >= 50) & (ts < 170)
    assert_tables_equal(got, t.filter(pa.array(mask)))
    assert got.num_rows == np.count_nonzero(mask) > 0


def test_read_back_empty(tmp_path):
    t = table(1, 1, [], fields={"a": []})
    e, _ = write(tmp_path, t)
    got = gs.open_artifact(tmp_path, entry=e).read()
    assert got.num_rows == 0 and got.schema.names == t.schema.names


def test_public_wrapper_and_concurrent_writes(tmp_path):
    import concurrent.futures

    tables = [series_table(4, 50, 2, null_frac=0.2, seed=s) for s in range(4)]

    def job(i):
        return gs.write_artifact(tables[i], tmp_path, region_id=i, source_file_id=SRC,
                                 timestamp_column_id=0, field_column_ids=[1, 2], row_limit=16)

    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        entries = list(ex.map(job, range(4)))
    for t, e in zip(tables, entries):
        assert_tables_equal(gs.open_artifact(tmp_path, entry=e).read(), t)
