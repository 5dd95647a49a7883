"""Selections, projections, bounds conversion and coalesced ranged reads."""

import datetime as dt

import numpy as np
import pytest

from gtsamples.batch import BLOCK_DTYPE
from gtsamples.errors import CorruptArtifactError
from gtsamples.format.structs import BLOCK_PREFIX
from gtsamples.plan import Selection, to_unit
from gtsamples.storage import ReadStats, Store, coalesce


def test_to_unit_rounds_datetimes_up_for_half_open_bounds():
    assert to_unit(5, "second", "start") == 5
    assert to_unit(np.datetime64("1970-01-01T00:00:01.5"), "second", "start") == 2
    assert to_unit(np.datetime64("1970-01-01T00:00:01", "s"), "millisecond", "end") == 1000
    assert to_unit(dt.datetime(1970, 1, 1, 0, 0, 2, tzinfo=dt.timezone.utc), "second", "end") == 2
    assert to_unit(np.datetime64("1969-12-31T23:59:59.5"), "second", "start") == 0
    with pytest.raises(TypeError):
        to_unit(True, "second", "start")
    with pytest.raises(TypeError):
        to_unit(1.5, "second", "start")
    with pytest.raises(ValueError, match="start='yesterday': not an ISO-8601 date"):  # strings: tests/test_timebounds.py
        to_unit("yesterday", "second", "start")
    with pytest.raises(ValueError):
        to_unit(np.datetime64("NaT"), "second", "start")
    with pytest.raises(ValueError):
        to_unit(2**63, "second", "start")


def test_selection_ids_and_time_overlap():
    s = Selection.build(series=[(7, 43), (7, 42), (7, 42)], start=100, end=101)
    assert s.series == ((7, 42), (7, 43))
    assert s.ids_overlap((7, 42), (7, 42)) and s.ids_overlap((7, 40), (7, 50))
    assert not s.ids_overlap((7, 44), (8, 0)) and not s.ids_overlap((6, 0), (7, 41))
    assert s.time_overlaps(0, 100) and not s.time_overlaps(0, 99) and not s.time_overlaps(101, 200)
    t = Selection.build(tables=[8, 3])
    assert t.ids_overlap((2, 5), (3, 0)) and not t.ids_overlap((4, 0), (7, 2**64 - 1))
    both = Selection.build(series=[(7, 1), (8, 1)], tables=[8])
    assert both.series == ((8, 1),) and both.tables is None
    assert Selection.build(series=[]).is_empty and Selection.build(start=5, end=5).is_empty
    with pytest.raises(TypeError):
        Selection.build(series=[7])
    with pytest.raises(ValueError):
        Selection.build(series=[(2**32, 1)])


@pytest.mark.parametrize("kw,cls,match", [
    # int() truncated a float (series (1.5, 2) read table 1), parsed a string, took a bool as 0/1
    (dict(series=[(1.5, 2)]), TypeError, r"series: IDs must be integers, got float 1.5 in \(1.5, 2\)"),
    (dict(series=[(7, "42")]), TypeError, r"series: IDs must be integers, got str '42' in \(7, '42'\)"),
    (dict(series=[(True, 2)]), TypeError, r"series: IDs must be integers, got bool True"),
    (dict(series=[(7, 2**64)]), ValueError, r"series \(7, 18446744073709551616\) is outside \(u32, u64\)"),
    (dict(tables=["x"]), TypeError, r"tables: IDs must be integers, got str 'x' in \['x'\]"),  # was int()'s message
    (dict(tables=[3.0]), TypeError, r"tables: IDs must be integers, got float 3.0"),
    (dict(tables="12"), TypeError, r"tables must be a table ID or an iterable of them \(u32 integers\), got str '12'"),
    (dict(tables=1.0), TypeError, r"tables must be a table ID or an iterable of them \(u32 integers\), got float"),
    (dict(tables=True), TypeError, r"tables must be a table ID or an iterable of them \(u32 integers\), got bool"),
    (dict(tables=[2**32]), ValueError, r"tables: table ID 4294967296 is outside u32 \(0..=4294967295\)"),
    (dict(tables=[-1]), ValueError, r"tables: table ID -1 is outside u32"),
    # a series that is no iterable raised 'int' object is not iterable; a string was read as its characters
    (dict(series=5), TypeError, r"^series must be an iterable of \(table_id, tsid\) pairs, got int 5$"),
    (dict(series="7:42"), TypeError, r"^series must be an iterable of \(table_id, tsid\) pairs, got str '7:42'$"),
    (dict(series=b"ab"), TypeError, r"^series must be an iterable of \(table_id, tsid\) pairs, got bytes"),
    # a 0-d array raised numpy's 'iteration over a 0-d array'
    (dict(series=np.array(7)), TypeError, r"^series must be an iterable of \(table_id, tsid\) pairs, got ndarray"),
    # a bytearray or memoryview was read as table IDs, its byte values (bytearray(b"\x07") was table 7)
    (dict(tables=bytearray(b"\x07")), TypeError, r"^tables must be a table ID or an iterable of them .*bytearray"),
    (dict(tables=memoryview(b"\x07")), TypeError, r"^tables must be a table ID or an iterable of them .*memoryview"),
    (dict(series=bytearray(b"ab")), TypeError, r"^series must be an iterable of \(table_id, tsid\) pairs, got bytearray"),
    (dict(tables=np.array(7)), TypeError, r"^tables must be a table ID or an iterable of them \(u32 integers\), got ndarray"),
    (dict(series=(7, 42)), TypeError, r"^series must be \(table_id, tsid\) pairs, got 7 \(one series is \[\(7, 42\)\]\)$"),
    # numpy's timedelta64 is an integer type to numpy (series [(td 1 ns, 5)] read table 1)
    (dict(series=[(np.timedelta64(1, "ns"), 5)]), TypeError, r"series: IDs must be integers, got timedelta64"),
    (dict(tables=[np.timedelta64(1, "ns")]), TypeError, r"tables: IDs must be integers, got timedelta64"),
    (dict(tables=np.timedelta64(1, "ns")), TypeError, r"tables must be a table ID or an iterable of them .*timedelta64"),
])
def test_selection_refuses_ids_that_are_not_integers_in_range(kw, cls, match):
    with pytest.raises(cls, match=match):
        Selection.build(**kw)


def test_selection_takes_numpy_integers_and_iterables():
    s = Selection.build(series=[(np.uint32(7), np.uint64(2**64 - 1))])
    assert s.series == ((7, 2**64 - 1),) and all(type(x) is int for x in s.series[0])
    assert Selection.build(tables=np.uint32(4)).tables == (4,)
    assert Selection.build(tables=(t for t in [9, 3, 9])).tables == (3, 9)
    assert Selection.build(tables=np.array([5, 4], np.uint32)).tables == (4, 5)
    assert Selection.build(tables=[2**32 - 1, 0]).tables == (0, 2**32 - 1)


def test_block_mask_and_trim_mask():
    b = np.zeros(4, BLOCK_PREFIX)
    b["table_id"] = [7, 7, 7, 8]
    b["tsid"] = [42, 42, 43, 42]
    b["min_timestamp"] = [0, 100, 0, 0]
    b["max_timestamp"] = [100, 200, 50, 10]
    s = Selection.build(series=[(7, 42), (8, 42)], start=100, end=150)
    assert s.block_mask(b).tolist() == [True, True, False, False]
    assert s.trim_mask(b).tolist() == [True, True, True, True]
    assert Selection.build(start=0, end=300).trim_mask(b).tolist() == [False] * 4
    assert Selection.build(tables=[8]).block_mask(b).tolist() == [False, False, False, True]


def _block_mask_reference(sel, b) -> list:
    """The spec's overlap test for each block (one identity), by brute force on Python ints."""
    out = []
    for t, s, mn, mx in zip(*(b[k].tolist() for k in ("table_id", "tsid", "min_timestamp", "max_timestamp"))):
        ok = (sel.series is None or (t, s) in set(sel.series)) and (sel.tables is None or t in sel.tables)
        out.append(ok and (sel.start is None or mx >= sel.start) and (sel.end is None or mn < sel.end))
    return out


def test_block_mask_kernel_equals_reference():
    """The numba block mask (over BLOCK_PREFIX records, and over the prefix fields of
    another table) and ``Selection.selects`` (the same predicate run as Python) are the
    brute-force reference: identities (few, many, extreme u32/u64 values), tables,
    half-open bounds at i64 extremes, empty selections."""
    rng = np.random.default_rng(11)
    big = [0, 1, 2, 2**32 - 1, 2**63, 2**64 - 1]
    for trial in range(300):
        n = int(rng.integers(0, 40))
        b = np.zeros(n, BLOCK_PREFIX)
        b["table_id"] = rng.choice([0, 1, 2, 2**32 - 1], n)
        b["tsid"] = rng.choice(np.array(big, dtype=np.uint64), n)
        mn = rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64) if trial % 3 == 0 else rng.integers(-50, 50, n)
        b["min_timestamp"] = mn
        b["max_timestamp"] = np.maximum(mn, mn + rng.integers(0, 30, n))
        b = np.sort(b, order=["table_id", "tsid"])
        ids = [(int(t), int(x)) for t in (0, 1, 2, 2**32 - 1) for x in big]
        k = int(rng.integers(0, 8))
        series = [ids[j] for j in rng.choice(len(ids), k)] if trial % 4 else None
        tables = [int(t) for t in rng.choice([0, 1, 2, 2**32 - 1], int(rng.integers(0, 3)))] if trial % 4 == 0 else None
        lims = [None, -2**63, 2**63 - 1, -10, 0, 10]
        sel = Selection.build(series=series, tables=tables, start=lims[trial % 6], end=lims[(trial // 6) % 6])
        want = _block_mask_reference(sel, b)
        assert sel.block_mask(b).tolist() == want, (series, tables, sel)
        other = np.zeros(n, BLOCK_DTYPE)  # another layout: the column-wise kernel
        for k in ("table_id", "tsid", "min_timestamp", "max_timestamp"):
            other[k] = b[k]
        assert sel.block_mask(other).tolist() == want, (series, tables, sel)
        assert [sel.selects((t, s), (t, s), lo, hi) for t, s, lo, hi in
                zip(*(b[k].tolist() for k in ("table_id", "tsid", "min_timestamp", "max_timestamp")))] == want


def test_selected_refs_and_parts_are_selects():
    """``selected_refs`` (an internal page's children, bisected per selected item when
    there are many) and ``iter_parts`` (a manifest's parts, lazily past a few hundred)
    pick what ``selects`` picks."""
    from gtsamples.format.manifest import PART_COLUMNS, PART_DTYPE
    from gtsamples.format.pages import PageRef

    rng = np.random.default_rng(5)
    for trial in range(90):
        n = int(rng.choice([0, 3, 300, 700]))
        # children in block order, as a loaded page's are (each first >= the previous last; a series
        # may span neighbours): a sorted list of identities, two per child (few distinct: many ties)
        ids = sorted(zip(rng.integers(0, 4, 2 * n).tolist(), rng.integers(0, 6, 2 * n).tolist()))
        mn = rng.integers(-5, 5, n)
        refs = [PageRef(ids[2 * k], ids[2 * k + 1], int(mn[k]), int(mn[k]) + int(rng.integers(0, 4)),
                        0, 1, 1, 0, 1, 0, 0) for k in range(n)]
        series = [(1, 2), (2, 4)] if trial % 6 < 3 else [(0, 0), (3, 5)]  # (the ends of the range too)
        sel = Selection.build(series=series if trial % 3 == 0 else None,
                              tables=[1, 3] if trial % 3 == 1 else None, start=int(rng.integers(-5, 5)),
                              end=None if trial % 2 else 4)
        want = [k for k, r in enumerate(refs) if sel.selects(r.first, r.last, r.min_timestamp, r.max_timestamp)]
        assert sel.selected_refs(refs) == want
        table = np.zeros(n, PART_DTYPE)
        for name, col in zip(PART_COLUMNS[4:10], zip(*[(*r.first, *r.last, r.min_timestamp, r.max_timestamp)
                                                      for r in refs]) if n else [()] * 6):
            table[name] = col

        class Parts:  # the PartTable surface Selection reads
            array = table

        assert list(sel.iter_parts(Parts)) == want == sel.part_indices(Parts)
        assert np.flatnonzero(sel.part_mask(Parts)).tolist() == want
    assert PART_COLUMNS[4:10] == ("first_table_id", "first_tsid", "last_table_id", "last_tsid", "min_timestamp",
                                  "max_timestamp")


def test_coalesce_merges_close_ranges():
    starts, ends, group = coalesce(np.array([0, 10, 100, 5000]), np.array([10, 20, 50, 10]), gap=100)
    assert starts.tolist() == [0, 5000] and ends.tolist() == [150, 5010] and group.tolist() == [0, 0, 0, 1]
    with pytest.raises(ValueError):
        coalesce(np.array([10, 0]), np.array([1, 1]), gap=0)


def test_store_reads_ranges_and_counts(tmp_path):
    data = bytes(range(256)) * 1024
    (tmp_path / "obj").write_bytes(data)
    st = Store(tmp_path)
    stats = ReadStats()
    buf, pos = st.read_ranges("obj", [10, 20, 200_000], [5, 5, 3], stats)
    assert bytes(buf[pos[0]:pos[0] + 5]) == data[10:15]
    assert bytes(buf[pos[2]:pos[2] + 3]) == data[200_000:200_003]
    assert stats.requests == 2  # two far-apart groups
    with pytest.raises(CorruptArtifactError, match="shorter than its recorded size"):
        st.read("obj", len(data) - 2, 10)
    with pytest.raises(CorruptArtifactError, match="missing"):
        st.read("nope", 0, 1)
    with pytest.raises(CorruptArtifactError, match="exceeds the limit"):
        st.read_whole("obj", None, 100)
    with pytest.raises(ValueError):
        Store(tmp_path, {"anon": True})


def test_fsspec_memory_store_reads():
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/gts-test/obj", b"0123456789" * 10)
    st = Store("memory://gts-test")
    stats = ReadStats()
    buf, pos = st.read_ranges("obj", [3, 50], [4, 2], stats)
    assert bytes(buf[pos[0]:pos[0] + 4]) == b"3456" and bytes(buf[pos[1]:pos[1] + 2]) == b"01"
    assert st.size("obj") == 100 and st.exists("obj")


def test_fetch_refuses_unordered_chunks_of_a_part(tmp_path):
    """Chunks of one part out of physical order (possible across leaves that are not
    loaded together) are a CorruptArtifactError naming the chunk, before any read."""
    from gtsamples.batch import CHUNK_DTYPE, ChunkBatch
    from gtsamples.plan import fetch_batch

    (tmp_path / "part-0.samples").write_bytes(bytes(1000))
    (tmp_path / "part-1.samples").write_bytes(bytes(1000))
    ch = np.zeros(3, CHUNK_DTYPE)
    ch["part"] = [0, 0, 1]
    ch["block"] = [0, 1, 2]
    ch["file_offset"] = [100, 50, 10]
    ch["stored_len"] = [10, 10, 10]
    bl = np.zeros(3, BLOCK_DTYPE)
    b = ChunkBatch(ch, bl, np.zeros(0, np.uint8), 3, (), source="x", part_names=["part-0.samples", "part-1.samples"])
    st = ReadStats()
    with pytest.raises(CorruptArtifactError, match=r"x/part-0.samples leaf 0 block 0 .*physically ordered and disjoint: "
                                                   r"starts at 50, the part's previous chunk ends at 110"):
        fetch_batch(Store(tmp_path), ["part-0.samples", "part-1.samples"], b, st)
    assert st.requests == 0
    ch["file_offset"] = [50, 100, 10]  # ordered: the next part may start anywhere
    fetch_batch(Store(tmp_path), ["part-0.samples", "part-1.samples"], b, st)
    assert st.chunk_bytes == 30 and b.chunks["src_offset"].tolist() == [0, 50, 60]


def test_child_refs_are_the_page_refs_made_when_asked():
    """``ChildRefs`` (a loaded root's children) reads as the list ``page_refs`` makes:
    each index, negative ones, slices, iteration, and IndexError past either end."""
    from gtsamples.format import constants as C
    from gtsamples.format.pages import page_refs
    from gtsamples.format.structs import PAGE_REF_STRUCT
    from gtsamples.plan.loading import ChildRefs

    rows = [(1, 10 + k, 1, 11 + k, -k, k, 100 * k, 50, 60, 7 * k, 1, 1, 0) for k in range(5)]
    raw = b"".join(PAGE_REF_STRUCT.pack(*r) for r in rows)
    assert len(raw) == 5 * C.PAGE_REF_SIZE
    want = page_refs(raw, 0, 5)
    refs = ChildRefs(raw, 5)
    assert len(refs) == 5
    assert [refs[k] for k in (3, 0, -1, -5)] == [want[3], want[0], want[4], want[0]]
    assert list(refs) == want and refs[1:4] == want[1:4] and refs[::-2] == want[::-2]
    for k in (5, -6):
        with pytest.raises(IndexError):
            refs[k]


def _sorted_leaves(rng, n_leaves: int, per_leaf: int):
    """LeafPages whose blocks sort by identity, as a loaded leaf's do (few identities: long
    runs of one, which a leaf is bisected to)."""
    from gtsamples.format.pages import LeafPage
    from gtsamples.format.structs import COLUMN_DESC

    big = [0, 1, 2**63, 2**64 - 1]
    out = []
    for _ in range(n_leaves):
        n = int(rng.integers(0, per_leaf))
        b = np.zeros(n, BLOCK_PREFIX)
        b["table_id"] = rng.choice([0, 1, 2, 2**32 - 1], n)
        b["tsid"] = rng.choice(np.array(big, dtype=np.uint64), n)
        mn = rng.integers(-50, 50, n)
        b["min_timestamp"] = mn
        b["max_timestamp"] = mn + rng.integers(0, 30, n)
        b["row_count"] = rng.integers(1, 1000, n)
        out.append(LeafPage(np.sort(b, order=["table_id", "tsid", "min_timestamp"]), np.zeros(0, COLUMN_DESC),
                            np.zeros(n, np.int64)))
    return out


@pytest.mark.parametrize("kernels", ["compiled", "as-python"])
def test_block_masks_are_each_leafs_block_mask(kernels, monkeypatch):
    """``block_masks`` (many leaves in one pass, read in place and each bisected to the
    selected items' blocks; leaf by leaf when one is a strided table) gives each leaf's
    ``block_mask`` and its selected rows; its kernel run as Python too."""
    from gtsamples.plan import selection

    from tests.conftest import kernels_as_python

    if kernels == "as-python":
        assert "_block_masks_kernel" in kernels_as_python(monkeypatch, selection)
    rng = np.random.default_rng(29)
    ids = [(t, x) for t in (0, 1, 2, 2**32 - 1) for x in (0, 1, 2**63, 2**64 - 1)]
    for trial in range(200 if kernels == "compiled" else 30):
        pages = _sorted_leaves(rng, int(rng.integers(0, 6)), int(rng.choice([3, 60, 400])))
        k = int(rng.integers(0, 4))
        series = [ids[j] for j in rng.choice(len(ids), k)] if trial % 3 == 0 else None
        tables = [int(t) for t in rng.choice([0, 1, 2**32 - 1], int(rng.integers(0, 3)))] if trial % 3 == 1 else None
        lims = [None, -10, 0, 10]
        sel = Selection.build(series=series, tables=tables, start=lims[trial % 4], end=lims[(trial // 4) % 4])
        want = [sel.block_mask(p.blocks).tolist() for p in pages]
        rows = [int(p.blocks["row_count"][np.array(w, bool)].sum()) for p, w in zip(pages, want)]
        masks, got_rows = sel.block_masks(pages)
        assert [m.tolist() for m in masks] == want and got_rows == rows, (series, tables, sel)
    from gtsamples.format.pages import LeafPage

    pages = _sorted_leaves(rng, 3, 50)
    strided = LeafPage(np.concatenate([pages[0].blocks, pages[0].blocks])[::2], pages[0].columns, pages[0].col_start)
    assert strided.prefix_address is None
    sel = Selection.build(tables=[1])
    masks, rows = sel.block_masks([strided] + pages)
    assert [m.tolist() for m in masks] == [sel.block_mask(p.blocks).tolist() for p in [strided] + pages]


def test_parts_of_is_iter_parts_of_each():
    """``parts_of`` (many manifests' parts in one pass) gives each table's ``iter_parts``."""
    from gtsamples.format.manifest import PART_DTYPE
    from gtsamples.format.manifest.model import PartTable

    rng = np.random.default_rng(3)
    for trial in range(60):
        tables = []
        for _ in range(int(rng.integers(0, 7))):
            n = int(rng.choice([0, 1, 2, 9]))
            a = np.zeros(n, PART_DTYPE)
            ids = np.sort(rng.integers(0, 5, 2 * n)).reshape(n, 2) if n else np.zeros((0, 2), np.int64)
            a["first_table_id"], a["last_table_id"] = ids[:, 0], ids[:, 1]
            a["first_tsid"], a["last_tsid"] = rng.integers(0, 3, n), rng.integers(0, 3, n)
            a["min_timestamp"] = rng.integers(-9, 9, n)
            a["max_timestamp"] = a["min_timestamp"] + rng.integers(0, 5, n)
            tables.append(PartTable(a if trial % 2 else np.concatenate([a, a])[::2]))  # (strided tables too)
        sel = Selection.build(series=[(1, 1), (3, 0)] if trial % 3 == 0 else None,
                              tables=[2] if trial % 3 == 1 else None, start=int(rng.integers(-5, 5)))
        assert sel.parts_of(tables) == [list(sel.iter_parts(t)) for t in tables]


@pytest.mark.parametrize("kernels", ["compiled", "as-python"])
def test_pick_children_is_selected_refs_of_each(kernels, monkeypatch):
    """``pick_children`` (the children of many roots in one numba pass over their
    records) picks what ``selected_refs`` picks for each root; its kernel run as Python too."""
    from gtsamples.format.pages import PageRef
    from gtsamples.format.structs import PAGE_REF_STRUCT
    from gtsamples.plan import loading
    from gtsamples.plan.loading import ChildRefs, pick_children

    from tests.conftest import kernels_as_python

    if kernels == "as-python":
        assert "_children_kernel" in kernels_as_python(monkeypatch, loading)
    rng = np.random.default_rng(8)
    for trial in range(80 if kernels == "compiled" else 20):
        roots = []
        for _ in range(int(rng.integers(0, 5))):
            n = int(rng.choice([0, 1, 5, 40]))
            ids = sorted(zip(rng.integers(0, 4, 2 * n).tolist(), rng.choice(np.array([0, 3, 2**64 - 1], dtype=np.uint64), 2 * n).tolist()))
            mn = rng.integers(-5, 5, n)
            refs = [PageRef(ids[2 * k], ids[2 * k + 1], int(mn[k]), int(mn[k]) + int(rng.integers(0, 4)),
                            100 * k, 1, 1, 0, 1, 0, 0) for k in range(n)]
            raw = b"".join(PAGE_REF_STRUCT.pack(*r.first, *r.last, *r[2:]) for r in refs)
            roots.append(ChildRefs(raw, n))
        sel = Selection.build(series=[(1, 3), (2, 2**64 - 1)] if trial % 3 == 0 else None,
                              tables=[1, 3] if trial % 3 == 1 else None, start=int(rng.integers(-5, 5)),
                              end=None if trial % 2 else 4)
        assert pick_children(roots, sel) == [sel.selected_refs(list(c)) for c in roots]


def test_leaf_page_addresses_follow_their_tables_and_stay_in_their_process():
    """``prefix_address`` and ``tables_at`` are the current tables' (a table set later
    gets its own), and a pickled copy carries no address of this process."""
    import pickle

    from gtsamples.format.pages import LeafPage

    from gtsamples.format.structs import COLUMN_DESC

    page = _sorted_leaves(np.random.default_rng(1), 1, 20)[0]
    assert page.tables_at[2:4] == (0, 0)  # (no descriptor: no address)
    page = LeafPage(page.blocks, np.zeros(4, COLUMN_DESC), page.col_start)
    assert page.prefix_address == page.blocks.ctypes.data
    assert page.tables_at[:4] == (page.blocks.ctypes.data, page.blocks.shape[0], page.columns.ctypes.data,
                                  page.columns.shape[0])
    assert page.tables_at[4][0] is page.blocks and page.tables_at[4][1] is page.columns  # (held by the caller)
    copy = pickle.loads(pickle.dumps(page))
    assert "_tables_at" not in copy.__dict__
    assert copy.blocks.tobytes() == page.blocks.tobytes()
    assert copy.tables_at[0] == copy.blocks.ctypes.data and copy.tables_at[2] == copy.columns.ctypes.data
    assert copy.prefix_address == copy.blocks.ctypes.data
    page.blocks = page.blocks.copy()
    page.columns = page.columns.copy()
    assert page.prefix_address == page.blocks.ctypes.data
    assert page.tables_at[0] == page.blocks.ctypes.data and page.tables_at[2] == page.columns.ctypes.data
    assert LeafPage(page.blocks[::2], page.columns, page.col_start).prefix_address is None


def test_split_hits_gives_each_sequence_its_own_positions():
    """``split_hits``: the sorted positions in a concatenation of sequences (some empty),
    as each sequence's own positions; a position past the end is an IndexError."""
    from gtsamples.plan.selection import split_hits

    rng = np.random.default_rng(5)
    for _ in range(300):
        counts = rng.integers(0, 5, int(rng.integers(0, 8))).tolist()
        total = sum(counts)
        hit = np.sort(rng.choice(total, int(rng.integers(0, total + 1)), replace=False)) if total else np.zeros(0, int)
        starts = np.concatenate([[0], np.cumsum(counts)]).tolist()
        want = [[int(h) - starts[k] for h in hit if starts[k] <= h < starts[k + 1]] for k in range(len(counts))]
        assert split_hits(hit, counts) == want
    with pytest.raises(IndexError):
        split_hits(np.array([3]), [1, 2])
