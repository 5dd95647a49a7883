"""gs.arrow_dataset: DuckDB's projection and filters reach the read; results equal DuckDB over read()."""

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gtsamples as gs
from tests.conftest import assert_tables_equal
from gtsamples.integrations import dataset as AD

duckdb = pytest.importorskip("duckdb")  # the duckdb extra

NAMES = ["__table_id", "__tsid", "ts", "__sequence", "__op_type", "cpu_usage"]


@pytest.fixture(scope="module")
def whole(art):
    return art.read()


@pytest.fixture(scope="module")
def dset(art):
    return gs.arrow_dataset(art, max_bytes=16 << 10)


def _rows(sql, **tables):
    con = duckdb.connect()
    for name, t in tables.items():
        con.register(name, t)
    return con.sql(sql).fetchall()


@pytest.fixture
def seen(monkeypatch):
    """The selections the dataset's scans pushed into the read."""
    out = []
    orig = AD.filter_selection

    def spy(*a):
        r = orig(*a)
        out.append(r[0])
        return r

    monkeypatch.setattr(AD, "filter_selection", spy)
    return out


def test_is_a_pyarrow_dataset(dset, whole):
    assert isinstance(dset, ds.Dataset) and dset.schema == whole.schema
    assert_tables_equal(dset.to_table(), whole)
    assert dset.to_table(columns=["ts"], filter=pc.field("__table_id") == 2).equals(
        whole.filter(pc.field("__table_id") == 2).select(["ts"]))
    assert dset.count_rows(filter=pc.field("__table_id") == 3) == whole.filter(pc.field("__table_id") == 3).num_rows
    assert_tables_equal(dset.head(4), whole.slice(0, 4))


def test_duckdb_series_and_time_filter_is_pushed(dset, whole, seen, art):
    tid, tsid = whole["__table_id"][900].as_py(), whole["__tsid"][900].as_py()
    q = (f"SELECT count(*), sum(requests), min(ts), max(ts) FROM {{t}} WHERE __table_id = {tid} AND __tsid = {tsid} "
         "AND ts BETWEEN '2023-11-14 22:20:00' AND '2023-11-14 22:40:00'")
    got = _rows(q.format(t="dset"), dset=dset)
    assert got == _rows(q.format(t="whole"), whole=whole) and got[0][0] > 0
    assert seen[-1] == {"series": [(tid, tsid)], "start": 1_700_000_400_000, "end": 1_700_001_600_001}
    assert art.last_stats.chunk_bytes * 10 < art.read_with_stats()[1].chunk_bytes


def test_duckdb_group_by_over_region(region):
    q = "SELECT __table_id, count(*), count(cpu_usage), max(__tsid), min(ts) FROM {t} WHERE __table_id IN (1, 3) GROUP BY ALL ORDER BY ALL"
    got = _rows(q.format(t="d"), d=gs.arrow_dataset(region, max_bytes=8 << 10))
    assert got == _rows(q.format(t="w"), w=region.read())


def test_filter_text_parsing():
    names = set(NAMES)
    f = (pc.field("__table_id") == 3) & pc.field("__tsid").isin(pa.array([5, (1 << 64) - 1], pa.uint64()))
    assert AD.filter_selection(f, names, "ts", "ms") == ({"series": [(3, 5), (3, (1 << 64) - 1)]},
                                                         {"__table_id", "__tsid"})
    f = pc.field("ts") >= pa.scalar(1_700_000_000_123_456, pa.timestamp("us"))
    assert AD.filter_selection(f, names, "ts", "ms")[0] == {"start": 1_700_000_000_123}
    f = (pc.field("cpu_usage") > 3) | (pc.field("__table_id") == 1)
    assert AD.filter_selection(f, names, "ts", "ms") == ({}, {"cpu_usage", "__table_id"})
    f = ~(pc.field("__table_id") == 1)
    assert AD.filter_selection(f, names, "ts", "ms")[0] == {}
    f = pc.field("__table_id").isin(pa.array(range(40), pa.uint32()))  # printed cut short: nothing pushed
    assert AD.filter_selection(f, names, "ts", "ms")[0] == {}
    assert AD.parse_expression("(a == (b < 3))", {"a", "b"}) == (
        "call", "==", [("field", "a"), ("call", "<", [("field", "b"), ("lit", "3")], "")], "")


# -- property: random WHERE clauses give what DuckDB gives over the whole table

def _clauses(whole):
    tables = sorted(set(whole["__table_id"].to_pylist())) + [0, 77]
    tsids = sorted(set(whole["__tsid"].to_pylist()))[:10] + [5]
    stamps = whole["ts"].cast(pa.int64()).to_pylist()
    stamp = st.builds(lambda k, d: stamps[k] + d, st.integers(0, len(stamps) - 1), st.sampled_from([-1, 0, 1]))
    op = st.sampled_from(["=", "<", "<=", ">", ">=", "<>"])
    ts_lit = stamp.map(lambda v: f"epoch_ms({v})::TIMESTAMP_MS")
    atom = st.one_of(
        st.builds(lambda o, v: f"__table_id {o} {v}", op, st.sampled_from(tables)),
        st.builds(lambda o, v: f"__tsid {o} {v}", op, st.sampled_from(tsids)),
        st.builds(lambda o, v: f"ts {o} {v}", op, ts_lit),
        st.builds(lambda v: f"__tsid IN ({', '.join(map(str, v))})", st.lists(st.sampled_from(tsids), min_size=1, max_size=4)),
        st.builds(lambda a, b: f"ts BETWEEN {a} AND {b}", ts_lit, ts_lit),
        st.builds(lambda x: f"cpu_usage > {x}", st.integers(0, 100)),
        st.builds(lambda v: f"NOT (__table_id = {v})", st.sampled_from(tables)),
    )
    pairs = sorted(set(zip(whole["__table_id"].to_pylist(), whole["__tsid"].to_pylist())))
    pair = st.builds(lambda p, q: f"(__table_id = {p[0]} AND __tsid = {q[1]})", st.sampled_from(pairs),
                     st.sampled_from(pairs))  # often a real series, sometimes a mixed pair
    atom = st.one_of(atom, pair, pair)
    return st.recursive(atom, lambda inner: st.builds(lambda a, o, b: f"({a}) {o} ({b})", inner,
                                                      st.sampled_from(["AND", "OR"]), inner), max_leaves=5)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_duckdb_pushdown_equals_full_read(data, dset, whole):
    where = data.draw(_clauses(whole))
    q = "SELECT __table_id, __tsid, ts, CAST(cpu_usage AS VARCHAR) FROM {t} WHERE " + where + " ORDER BY ALL"
    assert _rows(q.format(t="dset"), dset=dset) == _rows(q.format(t="whole"), whole=whole), where


@pytest.mark.parametrize("op", ["=", "<", "<=", ">", ">="])
def test_duckdb_time_comparisons_at_the_edges(op, dset, whole):
    stamps = whole["ts"].cast(pa.int64()).to_pylist()
    for k in (0, 777, len(stamps) - 1):
        for v in (stamps[k] - 1, stamps[k], stamps[k] + 1):
            q = f"SELECT count(*), min(ts), max(ts) FROM {{t}} WHERE ts {op} epoch_ms({v})::TIMESTAMP_MS"
            assert _rows(q.format(t="dset"), dset=dset) == _rows(q.format(t="whole"), whole=whole), (op, v)


def test_pickles_and_scans_in_a_spawned_process(dset, whole):
    import multiprocessing as mp
    import pickle

    again = pickle.loads(pickle.dumps(dset))
    assert_tables_equal(again.to_table(filter=pc.field("__table_id") == 1), whole.filter(pc.field("__table_id") == 1))
    with mp.get_context("spawn").Pool(1) as pool:
        n = pool.apply(_count_table, (dset, 2))
    assert n == whole.filter(pc.field("__table_id") == 2).num_rows > 0


def _count_table(d, table_id):
    return d.count_rows(filter=pc.field("__table_id") == table_id)


def test_concurrent_scans_from_threads(dset, whole):
    from concurrent.futures import ThreadPoolExecutor

    tables = sorted(set(whole["__table_id"].to_pylist()))
    with ThreadPoolExecutor(4) as ex:
        got = list(ex.map(lambda t: dset.to_table(columns=["__tsid", "ts"], filter=pc.field("__table_id") == t),
                          tables * 3))
    for t, g in zip(tables * 3, got):
        assert g.equals(whole.filter(pc.field("__table_id") == t).select(["__tsid", "ts"]))


def test_region_dataset_pickles(region):
    import pickle

    q = "SELECT count(*), max(__tsid) FROM d WHERE __table_id = 2"
    assert _rows(q, d=pickle.loads(pickle.dumps(gs.arrow_dataset(region)))) == _rows(q, d=region.read())
