"""Write -> read round trips, bit for bit (hypothesis), and selections vs brute force.

Every property writes a table in spec order with small knobs (row limit, page
size, leaves per root) so series cross blocks, leaves and parts, reads it back
and compares with ``assert_tables_equal`` (floats by bit pattern, nulls by
validity).  Selections (series, tables, start, end, columns) must equal a
brute-force filter of the full read.
"""

from __future__ import annotations

import math
import struct
import tempfile

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gtsamples as gs
from gtsamples.cache import PageCache
from gtsamples.format import constants as C

from .conftest import assert_tables_equal

I64_MIN, I64_MAX, U64_MAX = C.I64_MIN, C.I64_MAX, C.U64_MAX
UNITS = {"second": "s", "millisecond": "ms", "microsecond": "us", "nanosecond": "ns"}
SPECIAL_BITS = [
    0x0000000000000000,  # +0.0
    0x8000000000000000,  # -0.0
    0x7FF0000000000000,  # +inf
    0xFFF0000000000000,  # -inf
    0x7FF8000000000000,  # quiet NaN
    0x7FF0000000000001,  # signalling NaN payload
    0xFFFFFFFFFFFFFFFF,  # negative NaN, all payload bits
    0x7FF8DEADBEEF0042,  # NaN payload
    0x0000000000000001,  # smallest subnormal
    0x800FFFFFFFFFFFFF,  # largest negative subnormal
    0x7FEFFFFFFFFFFFFF,  # max finite
    0x3FF0000000000000,  # 1.0
]
SETTINGS = settings(max_examples=30, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
REGION = 4398046511111
FILE_ID = "00000000-0000-4000-8000-00000000abcd"


@pytest.fixture(scope="module", autouse=True)
def _no_fsync():
    """The writer fsyncs every object (crash safety, tested elsewhere); here it only
    costs time, so these round trips skip it."""
    import os

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "fsync", lambda fd: None)
        yield


# =============================================================================
# building tables
# =============================================================================


def f64_array(bits, valid) -> pa.Array:
    """A float64 array from raw bit patterns (NaN payloads kept) and validity."""
    bits = np.asarray(bits, dtype=np.uint64)
    valid = np.asarray(valid, dtype=bool)
    n = bits.shape[0]
    vals = np.where(valid, bits, np.uint64(0)).astype(np.uint64)
    nulls = int(n - valid.sum())
    bitmap = None if nulls == 0 else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.float64(), n, [bitmap, pa.py_buffer(vals.tobytes())], null_count=nulls)


def make_table(rows: list[tuple], n_fields: int, unit: str = "millisecond", names=None) -> pa.Table:
    """rows: (table_id, tsid, ts, seq, op, [bits or None] * n_fields)."""
    names = names or [f"f{i}" for i in range(n_fields)]
    cols = {
        "__table_id": pa.array([r[0] for r in rows], pa.uint32()),
        "__tsid": pa.array([r[1] for r in rows], pa.uint64()),
        "ts": pa.array(np.array([r[2] for r in rows], dtype=np.int64), pa.timestamp(UNITS[unit])),
        "__sequence": pa.array(np.array([r[3] for r in rows], dtype=np.uint64), pa.uint64()),
        "__op_type": pa.array([r[4] for r in rows], pa.uint8()),
    }
    n = len(rows)
    raw = [v for r in rows for v in r[5]]
    valid = np.array([v is not None for v in raw], dtype=bool).reshape(n, n_fields)
    vals = np.array([0 if v is None else v for v in raw], dtype=np.uint64).reshape(n, n_fields)
    for k in range(n_fields):
        cols[names[k]] = f64_array(vals[:, k], valid[:, k])
    return pa.table(cols)


def bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def spec_order(rows):
    """Identity, then timestamp (stable: input order on ties), sequence descending on ties."""
    rows = sorted(rows, key=lambda r: (r[0], r[1], r[2]))
    out, i = [], 0
    while i < len(rows):
        j = i
        while j < len(rows) and rows[j][:3] == rows[i][:3]:
            j += 1
        seqs = sorted((r[3] for r in rows[i:j]), reverse=True)
        out += [r[:3] + (s,) + r[4:] for r, s in zip(rows[i:j], seqs)]
        i = j
    return out


def write(table, tmp, **kw):
    kw.setdefault("timestamp_column_id", 0)
    kw.setdefault("field_column_ids", list(range(1, table.num_columns - 4)))
    entry = gs.write_artifact(table, tmp, region_id=REGION, source_file_id=FILE_ID, **kw)
    return gs.open_artifact(tmp, entry=entry, cache=PageCache())


def roundtrip(table, **kw):
    with tempfile.TemporaryDirectory() as tmp:
        art = write(table, tmp, **kw)
        got = art.read()
        assert_tables_equal(got, table)
        assert art.validate()["valid"]
        return art.inspect()


# =============================================================================
# strategies
# =============================================================================

float_bits = st.one_of(st.sampled_from(SPECIAL_BITS), st.integers(0, U64_MAX),
                       st.floats(allow_nan=False).map(bits), st.integers(-1000, 1000).map(lambda i: bits(i / 4)))
u64s = st.one_of(st.sampled_from([0, 1, U64_MAX, U64_MAX - 1, 1 << 63, (1 << 63) - 1]), st.integers(0, U64_MAX))


@st.composite
def timestamps(draw, n):
    """n nondecreasing i64 timestamps: constant step (incl. 0), jittered, or spanning the i64 range."""
    if n == 0:
        return []
    mode = draw(st.sampled_from(["step", "step0", "jitter", "extreme", "dups"]))
    if mode in ("step", "step0"):
        step = 0 if mode == "step0" else draw(st.integers(0, 10**6))
        first = draw(st.integers(I64_MIN, I64_MAX - step * (n - 1)))
        return [first + step * i for i in range(n)]
    if mode == "jitter":
        first = draw(st.integers(-10**12, 10**12))
        incs = draw(st.lists(st.integers(0, 1000), min_size=n - 1, max_size=n - 1))
        return list(np.cumsum([first] + incs).tolist())
    if mode == "dups":
        first = draw(st.integers(-10**6, 10**6))
        incs = draw(st.lists(st.sampled_from([0, 0, 1, 5]), min_size=n - 1, max_size=n - 1))
        return list(np.cumsum([first] + incs).tolist())
    pool = st.one_of(st.sampled_from([I64_MIN, I64_MIN + 1, -1, 0, 1, I64_MAX - 1, I64_MAX]),
                     st.integers(I64_MIN, I64_MAX))
    return sorted(draw(st.lists(pool, min_size=n, max_size=n)))


@st.composite
def sample_tables(draw, max_fields=3, max_series=4, max_rows=40):
    unit = draw(st.sampled_from(list(UNITS)))
    n_fields = draw(st.integers(1, max_fields))
    idents = draw(st.lists(st.tuples(st.sampled_from([0, 1, 2, (1 << 32) - 1]),
                                     st.sampled_from([0, 1, 7, U64_MAX])),
                           min_size=1, max_size=max_series, unique=True))
    # per field: dense, sparse, or all null
    kinds = draw(st.lists(st.sampled_from(["dense", "sparse", "mixed", "null"]), min_size=n_fields, max_size=n_fields))
    rows = []
    for tid, tsid in idents:
        n = draw(st.integers(1, max_rows))
        ts = draw(timestamps(n))
        seqs = draw(st.one_of(st.lists(u64s, min_size=n, max_size=n),
                              st.integers(0, U64_MAX).map(lambda v: [v] * n)))
        op_mode = draw(st.sampled_from(["put", "delete", "mixed"]))
        for i in range(n):
            op = 1 if op_mode == "put" else 0 if op_mode == "delete" else draw(st.integers(0, 1))
            vals = []
            for k in kinds:
                if k == "null" or (k == "sparse" and draw(st.integers(0, 9)) > 0) or (k == "mixed" and draw(st.booleans())):
                    vals.append(None)
                else:
                    vals.append(draw(float_bits))
            rows.append((tid, tsid, ts[i], seqs[i], op, vals))
    rows = spec_order(rows)
    return make_table(rows, n_fields, unit)


@st.composite
def knobs(draw, n_fields, max_rows_hint=24):
    min_page = 12 + 44 * (4 + n_fields)
    return dict(
        row_limit=draw(st.sampled_from([1, 3, 8, 8192]) if max_rows_hint <= 12 else st.sampled_from([3, 8, 8192])),
        max_page_bytes=draw(st.sampled_from([min_page, 2 * min_page + 300, 65536])),
        max_leaves_per_root=draw(st.sampled_from([2, 4, 910])),
    )


# =============================================================================
# properties
# =============================================================================


@SETTINGS
@given(st.data())
def test_roundtrip_bit_exact(data):
    table = data.draw(sample_tables(max_series=3, max_rows=24))
    kw = data.draw(knobs(table.num_columns - 5))
    s = roundtrip(table, **kw)
    assert s["rows"] == table.num_rows


@SETTINGS
@given(st.data())
def test_selection_equals_brute_force(data):
    table = data.draw(sample_tables(max_series=4, max_rows=12))
    kw = data.draw(knobs(table.num_columns - 5, 12))
    with tempfile.TemporaryDirectory() as tmp:
        art = write(table, tmp, **kw)
        full = art.read()
        assert_tables_equal(full, table)
        ts = full.column("ts").cast(pa.int64()).to_numpy()
        ids = sorted({(int(a), int(b)) for a, b in zip(full.column("__table_id").to_numpy(), full.column("__tsid").to_numpy())})
        bounds = st.one_of(st.none(), st.sampled_from(ts.tolist()), st.integers(I64_MIN, I64_MAX),
                           st.sampled_from([I64_MIN, I64_MAX]))
        for _ in range(4):
            series = data.draw(st.one_of(st.none(), st.lists(st.one_of(st.sampled_from(ids), st.tuples(
                st.integers(0, 3), st.sampled_from([0, 1, 2, 7]))), max_size=4)))
            tables = data.draw(st.one_of(st.none(), st.lists(st.integers(0, 3), max_size=3)))
            start, end = data.draw(bounds), data.draw(bounds)
            names = full.schema.names
            cols = data.draw(st.one_of(st.none(), st.lists(st.sampled_from(names), min_size=1, unique=True)))
            got = art.read(columns=cols, series=series, tables=tables, start=start, end=end)
            assert_tables_equal(got, brute_force(full, series, tables, start, end, cols))


def brute_force(full, series, tables, start, end, cols):
    tid = full.column("__table_id").to_numpy()
    tsid = full.column("__tsid").to_numpy()
    ts = full.column("ts").cast(pa.int64()).to_numpy()
    mask = np.ones(full.num_rows, dtype=bool)
    if series is not None:
        want = {(int(a), int(b)) for a, b in series}
        mask &= np.array([(int(a), int(b)) in want for a, b in zip(tid, tsid)], dtype=bool)
    if tables is not None:
        mask &= np.isin(tid, np.array(list(tables), dtype=np.uint32))
    if start is not None:
        mask &= ts >= start
    if end is not None:
        mask &= ts < end
    out = full.filter(pa.array(mask))
    if cols is not None:
        out = out.select([n for n in full.schema.names if n in set(cols)])
    return out


@settings(max_examples=4, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_roundtrip_1024_fields_row_cap_31(data):
    """1,024 fields: blocks hold at most 31 rows; sparse and all-null fields; still bit exact."""
    n = data.draw(st.integers(1, 70))
    present = data.draw(st.lists(st.integers(0, 1023), min_size=0, max_size=4, unique=True))
    ts = data.draw(timestamps(n))
    rows = []
    for i in range(n):
        vals = [None] * 1024
        for k in present:
            vals[k] = data.draw(st.one_of(st.none(), float_bits))
        rows.append((5, 9, ts[i], n - i, 1, vals))
    table = make_table(spec_order(rows), 1024)
    s = roundtrip(table, row_limit=data.draw(st.sampled_from([8192, 7, 31])))
    assert s["blocks"] >= math.ceil(n / 31)


# =============================================================================
# the listed edge cases, each guaranteed (not left to chance)
# =============================================================================

NAN_PAYLOADS = [0x7FF0000000000001, 0x7FF8000000000000, 0xFFF8000000000001, 0x7FFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFF,
                0x7FF4000000BEEF00]


def _series(tid, tsid, ts, seq=None, op=None, vals=None):
    n = len(ts)
    seq = seq if seq is not None else list(range(n, 0, -1))
    op = op if op is not None else [1] * n
    vals = vals if vals is not None else [[bits(float(i))] for i in range(n)]
    return [(tid, tsid, ts[i], seq[i], op[i], vals[i]) for i in range(n)]


EDGE = {
    "nan-payloads": _series(1, 1, list(range(6)), vals=[[b] for b in NAN_PAYLOADS]),
    "negative-zero-inf": _series(1, 1, list(range(5)), vals=[[bits(-0.0)], [bits(0.0)], [bits(math.inf)],
                                                             [bits(-math.inf)], [bits(-0.0)]]),
    "subnormals": _series(1, 1, list(range(4)), vals=[[1], [0x000FFFFFFFFFFFFF], [0x8000000000000001], [2]]),
    "sparse": _series(1, 1, list(range(40)), vals=[[bits(1.5) if i in (3, 31) else None] for i in range(40)]),
    "all-null": _series(1, 1, list(range(9)), vals=[[None]] * 9),
    "i64-extremes-wrapping-deltas": _series(1, 1, [I64_MIN, I64_MIN + 1, -1, 0, I64_MAX - 1, I64_MAX]),
    "i64-min-to-max": _series(1, 1, [I64_MIN, I64_MAX]),
    "i64-max-repeated": _series(1, 1, [I64_MAX] * 3),
    "step-0": _series(1, 1, [77] * 20),
    "constant-step": _series(1, 1, [10 + 15 * i for i in range(20)]),
    "constant-step-huge": _series(1, 1, [I64_MIN, 0, I64_MAX - 1]),
    "u64-sequence-extremes": _series(1, 1, list(range(6)), seq=[U64_MAX, 0, U64_MAX, 1, 1 << 63, U64_MAX - 1]),
    "u64-sequence-constant-max": _series(1, 1, list(range(3)), seq=[U64_MAX] * 3),
    "delete-markers": _series(1, 1, list(range(6)), op=[0, 1, 0, 0, 1, 0], vals=[[bits(1.0)], [None], [bits(3.0)], [None], [bits(5.0)], [bits(6.0)]]),
    "all-deletes": _series(1, 1, list(range(4)), op=[0] * 4),
    "duplicate-ts-conflicting-values": _series(1, 1, [5, 5, 5, 6, 6], seq=[9, 9, 3, 2, 2],
                                               vals=[[bits(1.0)], [bits(2.0)], [bits(-1.0)], [None], [bits(4.0)]]),
    "equal-tsid-different-tables": _series(1, 42, [1, 2]) + _series(2, 42, [1, 2]) + _series(3, 42, [0]),
    # identities compare as integer pairs, not as little-endian bytes (256 < 1 bytewise)
    "identity-integer-order": _series(1, 1, [0]) + _series(1, 255, [0]) + _series(1, 256, [0]) + _series(1, 65536, [0])
    + _series(1, 1 << 63, [0]) + _series(256, 1, [0]) + _series(65536, 0, [0]),
    "u32-u64-identity-extremes": _series(0, 0, [1]) + _series(0, U64_MAX, [1]) + _series((1 << 32) - 1, 0, [1])
    + _series((1 << 32) - 1, U64_MAX, [1]),
}


@pytest.mark.parametrize("name", list(EDGE))
def test_edge_case_roundtrip(name):
    """Each listed edge case, in one unit (round robin), with blocks of at most 3 rows,
    one block per leaf and up to 3 leaves per part, so it also crosses blocks, leaves and parts."""
    unit = list(UNITS)[list(EDGE).index(name) % 4]
    table = make_table(EDGE[name], 1, unit)
    roundtrip(table, row_limit=3, max_page_bytes=12 + 44 * 5, max_leaves_per_root=3)


@pytest.mark.parametrize("unit", list(UNITS))
def test_all_units(unit):
    rows = spec_order(EDGE["i64-extremes-wrapping-deltas"] + EDGE["equal-tsid-different-tables"]
                      + _series(9, 9, [-5, -5, 0, 86_400], vals=[[bits(-0.0)], [None], [NAN_PAYLOADS[0]], [1]]))
    table = make_table(rows, 1, unit)
    assert table.schema.field("ts").type == pa.timestamp(UNITS[unit])
    with tempfile.TemporaryDirectory() as tmp:
        art = write(table, tmp, row_limit=4)
        assert art.manifest.timestamp.unit == unit
        full = art.read()
        assert_tables_equal(full, table)
        assert_tables_equal(art.read(start=-5, end=1), brute_force(full, None, None, -5, 1, None))


def test_one_field_and_1024_fields():
    one = make_table(_series(1, 1, list(range(8193))), 1)
    s = roundtrip(one)
    assert s["blocks"] == 2  # 8,192 rows per block for one field
    rows = [(1, 1, i, 1, 1, [bits(float(i)) if k in (0, 1023) else None for k in range(1024)]) for i in range(63)]
    wide = make_table(rows, 1024)
    s = roundtrip(wide)
    assert s["blocks"] == 3  # 31 + 31 + 1: the decoded-size formula counts all 1,024 fields


def test_series_cross_blocks_leaves_and_parts():
    rows = _series(1, 1, list(range(0, 300, 2))) + _series(1, 2, [1000] * 7) + _series(2, 1, list(range(40)))
    table = make_table(spec_order(rows), 1)
    with tempfile.TemporaryDirectory() as tmp:
        art = write(table, tmp, row_limit=4, max_page_bytes=12 + 220 * 2, max_leaves_per_root=3)
        s = art.inspect()
        assert len(s["parts"]) >= 5 and {p["depth"] for p in s["parts"]} <= {1, 2} and any(p["depth"] == 2 for p in s["parts"])
        first = [p["first"] for p in s["parts"]]
        last = [p["last"] for p in s["parts"]]
        assert any(a == b for a, b in zip(last, first[1:])), "a series continues into the next part"
        full = art.read()
        assert_tables_equal(full, table)
        for series, start, end in [([(1, 1)], 100, 202), ([(1, 2)], 1000, 1001), (None, 7, 9), ([(2, 1), (1, 1)], 38, None)]:
            assert_tables_equal(art.read(series=series, start=start, end=end),
                                brute_force(full, series, None, start, end, None))


def test_open_artifact_arguments(tmp_path):
    import os
    import pathlib

    entry = gs.write_artifact(make_table(_series(1, 1, [0, 1, 2]), 1), tmp_path, region_id=1, source_file_id=FILE_ID,
                              timestamp_column_id=0, field_column_ids=[1])
    gen = os.path.join(str(tmp_path), entry.prefix)
    want = gs.open_artifact(gen).read()
    # paths as write_artifact takes its store root: bytes raised "a bytes-like object is required, not 'str'"
    for path in (gen, pathlib.Path(gen), os.fsencode(gen)):
        assert gs.open_artifact(path).read().equals(want)
    assert gs.open_artifact(os.fsencode(str(tmp_path)), entry=entry).read().equals(want)
    for path in (None, 3, [gen]):  # os.fspath's "expected str, bytes or os.PathLike object"
        with pytest.raises(TypeError, match=f"^path: expected a path or URL string, found {type(path).__name__}$"):
            gs.open_artifact(path)
    # a cache that is no PageCache raised AttributeError ('int' object has no attribute 'get_many') at the read
    for cache in (5, {}, "cache"):
        with pytest.raises(TypeError, match=f"^cache must be a gtsamples.cache.PageCache or None, not "
                                            f"{type(cache).__name__}"):
            gs.open_artifact(gen, cache=cache)
    assert gs.open_artifact(gen, cache=PageCache(0)).read().equals(want)
