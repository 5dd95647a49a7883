"""``Artifact.iter_batches``: bounded batches whose concatenation is ``read``.

Properties (hypothesis): random tables, block sizes, selections and
``max_bytes`` stream to exactly ``read``'s rows and schema, in order, each
batch within ``max_bytes`` unless it is a single block.  Boundary sizes (below
one block, exactly one block, two blocks, huge), argument checks, time bounds
of every accepted type, ``parts`` and statistics.  Corruption found in a later
batch: ``tests/corruption/test_streamed_rules.py``.
"""

from __future__ import annotations

import datetime

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gtsamples as gs
from gtsamples.cache import PageCache
from gtsamples.plan import Selection
from gtsamples.plan.split import output_row_bytes

from .conftest import assert_tables_equal
from .region.conftest import make_sst_table

FILE_ID = "00000000-0000-4000-8000-00000000beef"
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _write(tmp_path, table, **kw):
    kw.setdefault("row_limit", 64)
    entry = gs.write_artifact(table, tmp_path, region_id=7, source_file_id=FILE_ID, timestamp_column_id=0,
                              field_column_ids=list(range(1, table.num_columns - 4)), **kw)
    return gs.open_artifact(tmp_path, entry=entry, cache=PageCache())


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    table = make_sst_table(np.random.default_rng(11), rows=4000, series=6, ts_range=3000)
    return _write(tmp_path_factory.mktemp("iter"), table, max_page_bytes=600, max_leaves_per_root=4)


def _streamed(art, **kw) -> tuple[pa.Table, list]:
    batches = list(art.iter_batches(**kw))
    assert batches and all(isinstance(b, pa.RecordBatch) for b in batches)
    return pa.Table.from_batches(batches), batches


def _block_rows(art, **sel) -> list[int]:
    """Rows of every selected block, in read order (navigation only)."""
    s = Selection.build(sel.get("series"), sel.get("tables"), sel.get("start"), sel.get("end"),
                        art.manifest.timestamp.unit)
    return [int(r) for sl in art.navigate(s) for r in sl.page.blocks["row_count"][sl.mask]]


def test_fixture_has_parts_and_many_blocks(art):
    assert len(art.manifest.files) > 1 and art.manifest.num_blocks > 50


@SETTINGS
@given(data=st.data())
def test_concatenation_is_the_read(art, data):
    names = list(art.manifest.column_names)
    columns = data.draw(st.none() | st.lists(st.sampled_from(names), min_size=1, unique=True), "columns")
    full = art.read()
    ids = sorted(set(zip(full.column("__table_id").to_pylist(), full.column("__tsid").to_pylist())))
    series = data.draw(st.none() | st.lists(st.sampled_from(ids + [(9, 9)]), min_size=1, max_size=4), "series")
    tables = data.draw(st.none() | st.lists(st.sampled_from([1, 2, 3]), min_size=1), "tables")
    start = data.draw(st.none() | st.integers(-1000, 3_000_000), "start")
    end = data.draw(st.none() | st.integers(-1000, 3_000_000), "end")
    max_bytes = data.draw(st.integers(1, 200_000), "max_bytes")
    kw = dict(columns=columns, series=series, tables=tables, start=start, end=end)
    want = art.read(**kw)
    got, batches = _streamed(art, max_bytes=max_bytes, **kw)
    assert_tables_equal(got, want)
    row = output_row_bytes(want.schema.names, art.manifest.timestamp.name)
    biggest = max(_block_rows(art, **kw), default=0)
    for b in batches:  # within max_bytes, or a single block (trimmed rows only shrink a batch)
        assert b.num_rows * row <= max(max_bytes, biggest * row)


def test_max_bytes_below_one_block_gives_one_block_per_batch(art):
    rows = _block_rows(art)
    got, batches = _streamed(art, max_bytes=1)
    assert [b.num_rows for b in batches] == rows
    assert_tables_equal(got, art.read())


def test_max_bytes_of_exactly_one_or_two_blocks(art):
    rows = _block_rows(art)
    row = output_row_bytes(art.manifest.column_names, "ts")
    full = rows[0]
    assert rows.count(full) > 10  # most blocks are full (row_limit rows)
    one = list(art.iter_batches(max_bytes=full * row))
    assert all(b.num_rows <= full for b in one) and len(one) == len(rows)
    two = list(art.iter_batches(max_bytes=2 * full * row))
    assert all(b.num_rows <= 2 * full for b in two) and max(b.num_rows for b in two) == 2 * full
    assert len(two) < len(one)
    for got in (one, two):
        assert_tables_equal(pa.Table.from_batches(got), art.read())


def test_huge_max_bytes_is_one_batch(art):
    got, batches = _streamed(art, max_bytes=1 << 62)
    assert len(batches) == 1
    assert_tables_equal(got, art.read())


@pytest.mark.parametrize("huge", [2**63 - 1, 2**63, 2**70, np.uint64(2**64 - 1)])
def test_max_bytes_past_i64_is_one_batch(art, huge):
    # the batching kernel takes an i64: 2**63 and more raised OverflowError ('Python int too large to
    # convert to C long'; np.uint64 numba's own); any size that large reads the same, one batch
    got, batches = _streamed(art, max_bytes=huge)
    assert len(batches) == 1
    assert_tables_equal(got, art.read())
    assert art.to_reader(max_bytes=huge).read_all().num_rows == art.manifest.num_rows


def test_empty_selection_is_one_empty_batch(art):
    for kw in ({"start": 10**15}, {"series": [(9, 9)]}, {"start": 5, "end": 5}):
        batches = list(art.iter_batches(columns=["v", "ts"], max_bytes=1, **kw))
        assert len(batches) == 1 and batches[0].num_rows == 0
        assert batches[0].schema == art.read(columns=["v", "ts"], **kw).schema


def test_time_bounds_of_every_type_are_reads(art):
    lo, hi = 400_000, 1_700_000
    for start, end in [(lo, hi), ("1970-01-01T00:06:40Z", "1970-01-01T00:28:20Z"),
                       (np.datetime64(lo, "ms"), np.datetime64(hi, "ms")),
                       (pd.Timestamp(lo, unit="ms"), pd.Timestamp(hi, unit="ms")),
                       (datetime.datetime(1970, 1, 1, 0, 6, 40, tzinfo=datetime.timezone.utc),
                        datetime.datetime(1970, 1, 1, 0, 28, 20))]:
        got, _ = _streamed(art, start=start, end=end, max_bytes=3000)
        assert_tables_equal(got, art.read(start=lo, end=hi))


def test_parts_are_reads_of_those_parts(art):
    for parts in (0, [1], [0, 2], range(len(art.manifest.files))):
        got, _ = _streamed(art, parts=parts, max_bytes=5000)
        assert_tables_equal(got, art.read(parts=parts))


def test_stats_count_what_the_read_counts(art):
    _, want = art.read_with_stats(start=100_000)
    list(art.iter_batches(start=100_000, max_bytes=1))
    got = art.last_stats
    assert (got.blocks_decoded, got.chunks_decoded, got.chunk_bytes) == (
        want.blocks_decoded, want.chunks_decoded, want.chunk_bytes)


def test_each_batch_is_fetched_on_its_own(art, monkeypatch):
    """Bounded memory: a batch's chunks are fetched when it is built, not before."""
    from gtsamples.plan import leaves

    fetched = []
    real = leaves.fetch_batch

    def spy(store, keys, batch, stats):
        fetched.append(int(batch.blocks.shape[0]))
        return real(store, keys, batch, stats)

    import gtsamples.plan as plan_mod

    monkeypatch.setattr(plan_mod, "fetch_batch", spy)  # the pipeline's fetch step
    it = art.iter_batches(max_bytes=1)
    next(it)
    assert fetched[-1] == 1 and sum(fetched) <= 3  # this batch's block (and a cut's pair check at most)
    next(it)
    assert fetched[-1] == 1 and sum(fetched) <= 6


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "64", None, np.float64(8), np.timedelta64(4096, "ns")])
def test_bad_max_bytes(art, bad):
    with pytest.raises(ValueError, match=r"max_bytes must be a positive integer .*not"):
        art.iter_batches(max_bytes=bad)


def test_bad_arguments_raise_at_the_call(art):
    with pytest.raises(ValueError, match="device must be one of"):
        art.iter_batches(device="tpu")
    with pytest.raises(ValueError, match="unknown column 'nope'"):
        art.iter_batches(columns=["nope"])
    with pytest.raises(ValueError, match="part 99 does not exist"):
        art.iter_batches(parts=[99])
    with pytest.raises(ValueError):
        art.iter_batches(start="not a time")


#: each artifact reader as a function of the artifact and read's arguments
READERS = {
    "read": lambda art, **kw: art.read(**kw),
    "read_with_stats": lambda art, **kw: art.read_with_stats(**kw)[0],
    "iter_batches": lambda art, **kw: pa.Table.from_batches(list(art.iter_batches(**kw))),
    "to_reader": lambda art, **kw: art.to_reader(**kw).read_all(),
    "fetch_batch": lambda art, **kw: art.fetch_batch(**kw),
    "query": lambda art, **kw: art.query(**kw),
}


@pytest.mark.parametrize("sel", [{}, {"start": 100}, {"series": [(1, 1)], "start": 5, "end": 60}])
def test_no_columns_is_refused(art, sel):
    # a table of no columns: read(columns=[]) had 0 rows, or the selection's rows when its trim was one slice
    for reader in READERS.values():
        for columns in ([], (), iter([])):
            with pytest.raises(ValueError, match="^columns must name at least one column$"):
                reader(art, columns=columns, **sel)


@pytest.mark.parametrize("columns, what", [(b"ts", "bytes b'ts'"), (3, "int 3"), (bytearray(b"v"), "bytearray"),
                                           (np.array("ts"), "ndarray")])  # (0-d: 'iteration over a 0-d array')
def test_columns_that_are_no_names_are_type_errors(art, columns, what):
    # bytes were read as their byte values ('unknown column 116'), an int raised 'int' object is not iterable
    for reader in READERS.values():
        with pytest.raises(TypeError, match=f"^columns must be a column name or an iterable of names, not {what}"):
            reader(art, columns=columns)


def test_columns_from_a_generator(art):
    # to_reader read a generator twice (the batches, then the schema): pyarrow's 'Schema at index 0 was different'
    want = art.read(columns=["ts", "v"])  # (NaNs: compared by assert_tables_equal, not Table.equals)
    assert_tables_equal(art.to_reader(columns=(c for c in ["v", "ts"])).read_all(), want)
    assert_tables_equal(pa.Table.from_batches(list(art.iter_batches(columns=(c for c in ["v", "ts"])))), want)
    assert_tables_equal(art.read(columns=(c for c in ["ts", "v"])), want)
    assert_tables_equal(art.read(columns="ts"), art.read(columns=["ts"]))


@pytest.mark.parametrize("stats", [5, "stats", {}, gs.ReadStats])
def test_stats_that_are_not_read_stats_are_type_errors(art, stats):
    # raised AttributeError ('int' object has no attribute 'cache_hits') at the first batch or fetch
    with pytest.raises(TypeError, match=f"^stats must be a gtsamples.ReadStats or None, not {type(stats).__name__}"):
        art.iter_batches(stats=stats)
    with pytest.raises(TypeError, match="^stats must be a gtsamples.ReadStats or None"):
        art.to_reader(stats=stats)
    with pytest.raises(TypeError, match="^stats must be a gtsamples.ReadStats or None"):
        art.fetch_batch(stats=stats)
    with pytest.raises(TypeError, match="^stats must be a gtsamples.ReadStats or None"):
        art.navigate(Selection(), stats)


@pytest.mark.parametrize("selection", [None, {"start": 5}, (), "all"])
def test_navigate_takes_a_selection(art, selection):
    # raised AttributeError ('NoneType' object has no attribute 'is_empty')
    with pytest.raises(TypeError, match=r"^selection must be a gtsamples.plan.Selection \(Selection.build\("):
        art.navigate(selection)
    assert sum(int(sl.mask.sum()) for sl in art.navigate(Selection())) == art.manifest.num_blocks


def test_numpy_integer_max_bytes(art):
    got, _ = _streamed(art, max_bytes=np.int64(4096))
    assert_tables_equal(got, art.read())
