"""gs.scan_polars: equal to read() and to Polars' own filtering, with the filters reaching the read."""

import datetime as dt

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gtsamples as gs

pl = pytest.importorskip("polars")  # the polars extra

from gtsamples.integrations.polars import predicate_selection  # noqa: E402

T0 = 1_700_000_000_000  # the demo's first timestamp (ms)


@pytest.fixture(scope="module")
def full(art):
    return pl.from_arrow(art.read())


@pytest.fixture(scope="module")
def lf(art):
    return gs.scan_polars(art, max_bytes=16 << 10)


def test_artifact_scan_equals_read_with_projections(art, full, lf):
    assert lf.collect().equals(full)
    for cols in (["ts"], ["__tsid", "cpu_usage"], ["latency_p99", "__op_type", "__table_id"]):
        assert lf.select(cols).collect().equals(full.select(cols))
    assert lf.collect_schema() == full.schema
    assert lf.select(pl.len()).collect().item() == full.height  # no column projected
    assert lf.filter(pl.col("__table_id") == 1).select(pl.len()).collect().item() == (full["__table_id"] == 1).sum()


def test_generation_path_and_store_with_entry(art, art_dir, full):
    root, entry = art_dir
    assert gs.scan_polars(art.location).collect().equals(full)
    assert gs.scan_polars(root, entry=entry).select("ts", "requests").collect().equals(full.select("ts", "requests"))


def test_region_scan_equals_read(region):
    want = pl.from_arrow(region.read())
    assert gs.scan_polars(region, max_bytes=8 << 10).collect().equals(want)
    dedup = pl.from_arrow(region.read(dedup=True, columns=["__tsid", "ts", "cpu_usage"]))
    got = gs.scan_polars(region, dedup=True).select("__tsid", "ts", "cpu_usage").collect()
    assert got.equals(dedup)


def test_series_and_time_filter_reaches_the_read(art, full, lf):
    tid, tsid = full["__table_id"][500], full["__tsid"][500]
    start, end = dt.datetime(2023, 11, 14, 22, 16), dt.datetime(2023, 11, 14, 22, 19)
    pred = (pl.col("__table_id") == tid) & (pl.col("__tsid") == tsid) & pl.col("ts").is_between(start, end, "left")
    assert predicate_selection(pred, "ts", "ms") == {"series": [(tid, tsid)], "start": T0 + 160_000,
                                                   "end": T0 + 340_000}
    got = lf.filter(pred).select("ts", "cpu_usage").collect()
    want = art.read(series=[(tid, tsid)], start=start, end=end, columns=["ts", "cpu_usage"])
    assert got.height > 0 and got.equals(pl.from_arrow(want))
    narrow = art.last_stats.chunk_bytes  # the scan's own stream
    lf.select("ts", "cpu_usage").collect()
    assert narrow * 10 < art.last_stats.chunk_bytes


def test_head_reads_about_its_rows(art, full):
    lf = gs.scan_polars(art)  # default max_bytes (64 MiB): head(n) still reads only the first blocks
    assert lf.head(3).collect().equals(full.head(3))
    assert art.last_stats.blocks_decoded * 5 < art.manifest.num_blocks  # 64 KiB of blocks, not all


def test_n_rows_stops_the_read(art, full, lf):
    assert lf.head(5).collect().equals(full.head(5))
    head = art.last_stats.chunk_bytes
    lf.collect()
    assert head * 5 < art.last_stats.chunk_bytes
    assert lf.filter(pl.col("__table_id") == 2).head(3).collect().equals(full.filter(pl.col("__table_id") == 2).head(3))


def test_batch_size_bounds_the_frames(art):
    from gtsamples.integrations.polars import _frames
    from gtsamples.integrations.source import open_source

    frames = list(_frames(open_source(art), ["ts"], None, None, 100))
    assert max(f.height for f in frames) <= 100 and sum(f.height for f in frames) == art.manifest.num_rows


def test_arguments_are_checked(art):
    with pytest.raises(TypeError, match="Artifact, a Region or a path"):
        gs.scan_polars(42)
    with pytest.raises(TypeError, match="series cannot be fixed"):
        gs.scan_polars(art, series=[(1, 2)])
    with pytest.raises(TypeError, match="already open"):
        gs.scan_polars(art, entry={})


def test_unpushable_predicates_push_nothing():
    assert predicate_selection(~(pl.col("__table_id") == 1), "ts", "ms") == {}
    assert predicate_selection(pl.col("__tsid") == 1, "ts", "ms") == {}  # a tsid alone is no series
    assert predicate_selection((pl.col("__table_id") + 1) == 2, "ts", "ms") == {}
    assert predicate_selection(pl.col("ts").dt.hour() == 3, "ts", "ms") == {}
    assert predicate_selection((pl.col("__table_id") == 1) | (pl.col("cpu_usage") > 3), "ts", "ms") == {}
    assert predicate_selection((pl.col("__table_id") == 1) & (pl.col("cpu_usage") > 3), "ts", "ms") == {"tables": [1]}


def test_literal_forms():
    sel = predicate_selection(pl.col("ts") >= dt.date(2023, 11, 15), "ts", "ms")
    assert sel == {"start": 1_700_006_400_000}
    sel = predicate_selection(pl.col("ts") < pl.lit(T0).cast(pl.Datetime("ms")), "ts", "ms")
    assert sel == {"end": T0}
    sel = predicate_selection(pl.col("ts").is_in([dt.datetime(2023, 11, 14, 22, 13, 20)]), "ts", "ms")
    assert sel == {"start": T0, "end": T0 + 1}
    assert predicate_selection(pl.col("__table_id").is_in([3, 1]), "ts", "ms") == {"tables": [1, 3]}
    assert predicate_selection(pl.lit(False), "ts", "ms") == {"tables": []}
    assert predicate_selection(pl.col("__table_id") == pl.lit(3).cast(pl.UInt32), "ts", "ms") == {"tables": [3]}
    wrapped = pl.col("__table_id") == pl.lit(-1).cast(pl.UInt32, wrap_numerical=True)  # 4294967295, not -1
    assert predicate_selection(wrapped, "ts", "ms") == {}


# -- property: any predicate of these atoms collects what Polars' own filter of a full read gives

def _atoms(full):
    tables = sorted(set(full["__table_id"].to_list())) + [0, 77]
    tsids = sorted(set(full["__tsid"].to_list()))[:12] + [5, (1 << 64) - 1]
    stamps = full["ts"].cast(pl.Int64).to_list()
    ts = st.one_of(st.builds(lambda k, d: stamps[k] + d, st.integers(0, len(stamps) - 1), st.sampled_from([-1, 0, 0, 1])),
                   st.integers(T0 - 5_000, T0 + 9_400_000))  # mostly a row's timestamp: the edges matter
    when = st.one_of(ts, ts.map(lambda v: dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=v * 1000 + 500)),
                     ts.map(lambda v: dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=v)))
    cmp = st.sampled_from(["==", "<", "<=", ">", ">="])

    def compare(col, op, v):
        c = pl.col(col)
        return {"==": c == v, "<": c < v, "<=": c <= v, ">": c > v, ">=": c >= v}[op]

    pairs = sorted(set(zip(full["__table_id"].to_list(), full["__tsid"].to_list())))
    pair = st.builds(lambda p, q: (pl.col("__table_id") == p[0]) & (pl.col("__tsid") == q[1]), st.sampled_from(pairs),
                     st.sampled_from(pairs))  # often a real series, sometimes a mixed pair
    return st.one_of(
        pair, pair,
        st.builds(compare, st.just("__table_id"), cmp, st.sampled_from(tables)),
        st.builds(compare, st.just("__tsid"), cmp, st.sampled_from(tsids)),
        st.builds(compare, st.just("ts"), cmp, when),
        st.builds(lambda v: pl.col("__tsid").is_in(v), st.lists(st.sampled_from(tsids), max_size=4)),
        st.builds(lambda v: pl.col("__table_id").is_in(v), st.lists(st.sampled_from(tables), max_size=3)),
        st.builds(lambda a, b: pl.col("ts").is_between(a, b), ts, ts),
        st.builds(lambda x: pl.col("cpu_usage") > x, st.floats(0, 100)),
        st.builds(lambda v: ~(pl.col("__table_id") == v), st.sampled_from(tables)),
    )


@pytest.fixture(scope="module")
def predicates(full):
    return st.recursive(_atoms(full), lambda inner: st.one_of(st.builds(lambda a, b: a & b, inner, inner),
                                                               st.builds(lambda a, b: a | b, inner, inner)),
                        max_leaves=5)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_pushdown_equals_polars_filter(data, full, lf, predicates):
    pred = data.draw(predicates)
    cols = data.draw(st.sampled_from([["__tsid", "ts", "cpu_usage"], ["ts"], full.columns]))
    got = lf.filter(pred).select(cols).collect()
    want = full.filter(pred).select(cols)
    assert got.equals(want), (pred, predicate_selection(pred, "ts", "ms"))


@pytest.mark.parametrize("op", ["==", "<", "<=", ">", ">="])
def test_time_comparisons_at_the_edges(op, full, lf):
    """Each comparison with a row's own timestamp, one unit either side, and between two
    units (a microsecond datetime), as an integer and as a datetime."""
    stamps = full["ts"].cast(pl.Int64).to_list()
    for k in (0, 777, len(stamps) - 1):
        for v in (stamps[k] - 1, stamps[k], stamps[k] + 1):
            for lit in (v, dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=v),
                        dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=v * 1000 + 500)):
                c = pl.col("ts")
                pred = {"==": c == lit, "<": c < lit, "<=": c <= lit, ">": c > lit, ">=": c >= lit}[op]
                assert lf.filter(pred).select("ts").collect().equals(full.filter(pred).select("ts")), (op, lit)


def test_concurrent_collects_from_threads(full, lf):
    from concurrent.futures import ThreadPoolExecutor

    tables = sorted(set(full["__table_id"].to_list()))
    with ThreadPoolExecutor(4) as ex:
        got = list(ex.map(lambda t: lf.filter(pl.col("__table_id") == t).select("__tsid", "ts").collect(), tables * 3))
    for t, g in zip(tables * 3, got):
        assert g.equals(full.filter(pl.col("__table_id") == t).select("__tsid", "ts"))
