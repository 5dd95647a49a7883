"""Artifact.to_reader / Region.to_reader: a lazy, bounded, read-once RecordBatchReader."""

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import gtsamples as gs
from tests.conftest import assert_tables_equal


def test_artifact_reader_is_lazy_and_equals_read(art):
    stats = gs.ReadStats()
    reader = art.to_reader(columns=["__tsid", "ts", "cpu_usage"], tables=[1], max_bytes=4 << 10, stats=stats)
    want = art.read(columns=["__tsid", "ts", "cpu_usage"], tables=[1])
    assert reader.schema == want.schema  # known before any I/O
    assert stats.requests == 0 and stats.pages_loaded == 0
    batches = list(reader)
    assert stats.requests > 0
    assert len(batches) > 1 and max(b.num_rows for b in batches) < want.num_rows  # bounded: many small batches
    assert_tables_equal(pa.Table.from_batches(batches, schema=want.schema), want)


def test_reader_is_read_once(art):
    reader = art.to_reader(tables=[2])
    assert reader.read_all().num_rows == art.read(tables=[2]).num_rows > 0
    assert reader.read_all().num_rows == 0  # exhausted: a second read gets no rows


def test_empty_selection_keeps_the_schema(art):
    reader = art.to_reader(columns=["ts"], tables=[999])
    t = reader.read_all()
    assert t.num_rows == 0 and t.schema.names == ["ts"]


def test_duckdb_group_by_over_region_reader_equals_pyarrow(region):
    duckdb = pytest.importorskip("duckdb")  # the optional engines: skipped without their extras
    reader = region.to_reader(columns=["__table_id", "__tsid", "cpu_usage"], max_bytes=8 << 10)
    got = duckdb.sql("SELECT __table_id, __tsid, count(*) AS n, sum(cpu_usage) AS s, count(cpu_usage) AS c "
                     "FROM reader GROUP BY ALL ORDER BY ALL").arrow()
    if isinstance(got, pa.RecordBatchReader):
        got = got.read_all()
    want = (region.read(columns=["__table_id", "__tsid", "cpu_usage"])
            .group_by(["__table_id", "__tsid"])
            .aggregate([("__tsid", "count"), ("cpu_usage", "sum"), ("cpu_usage", "count")])
            .sort_by([("__table_id", "ascending"), ("__tsid", "ascending")]))
    assert got.num_rows == want.num_rows > 10
    assert got["__table_id"].to_pylist() == want["__table_id"].to_pylist()
    assert got["__tsid"].to_pylist() == want["__tsid"].to_pylist()
    assert got["n"].to_pylist() == want["__tsid_count"].to_pylist()
    assert got["c"].to_pylist() == want["cpu_usage_count"].to_pylist()
    assert got["s"].to_pylist() == pytest.approx(want["cpu_usage_sum"].to_pylist(), rel=1e-12, nan_ok=True)


def test_region_reader_polars_and_pandas(region):
    pl, pd = pytest.importorskip("polars"), pytest.importorskip("pandas")
    want = region.read(tables=[3])
    assert pl.from_arrow(region.to_reader(tables=[3], max_bytes=8 << 10)).equals(pl.from_arrow(want))
    got = pd.DataFrame.from_arrow(region.to_reader(tables=[3], columns=["ts", "cpu_usage"]))
    pd.testing.assert_frame_equal(got, want.select(["ts", "cpu_usage"]).to_pandas())


def test_region_reader_dedup_equals_read(region):
    assert_tables_equal(region.to_reader(dedup=True, max_bytes=8 << 10).read_all(), region.read(dedup=True))


def test_datafusion_sql_over_region_reader_equals_pyarrow(region):
    """DataFusion takes the reader through the Arrow C stream interface (``from_arrow``)
    and runs SQL over it: a group-by with a time filter equals pyarrow's over ``read``."""
    datafusion = pytest.importorskip("datafusion")

    ts = region.read(columns=["ts"])["ts"]
    mid = ts.cast(pa.int64()).to_numpy()
    lo = int(sorted(mid)[len(mid) // 3])
    cols = ["__table_id", "__tsid", "ts", "cpu_usage"]
    ctx = datafusion.SessionContext()
    ctx.from_arrow(region.to_reader(columns=cols, max_bytes=8 << 10), name="samples")
    got = ctx.sql("SELECT __table_id, __tsid, count(*) AS n, sum(cpu_usage) AS s FROM samples "
                  f"WHERE CAST(ts AS BIGINT) >= {lo} GROUP BY __table_id, __tsid "
                  "ORDER BY __table_id, __tsid").to_arrow_table()
    whole = region.read(columns=cols)
    kept = whole.filter(pc.greater_equal(whole["ts"].cast(pa.int64()), lo))
    want = (kept.group_by(["__table_id", "__tsid"]).aggregate([("__tsid", "count"), ("cpu_usage", "sum")])
            .sort_by([("__table_id", "ascending"), ("__tsid", "ascending")]))
    assert got.num_rows == want.num_rows > 10
    assert got["__table_id"].to_pylist() == want["__table_id"].to_pylist()
    assert got["__tsid"].to_pylist() == want["__tsid"].to_pylist()
    assert got["n"].to_pylist() == want["__tsid_count"].to_pylist()
    assert got["s"].to_pylist() == pytest.approx(want["cpu_usage_sum"].to_pylist(), rel=1e-12, nan_ok=True)
