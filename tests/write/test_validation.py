"""Every input-validation error of write_artifact: type, message, and nothing written."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

from gtsamples.write import write_artifact

from .helpers import GEN, SRC, table

OK = dict(region_id=1, source_file_id=SRC, generation=GEN, timestamp_column_id=0, field_column_ids=[1])


def call(tmp_path, t, **kw):
    args = dict(OK)
    args.update(kw)
    return write_artifact(t, tmp_path, **args)


def expect(tmp_path, exc, match, t=None, **kw):
    t = table(1, 1, [0, 1, 2]) if t is None else t
    root = tmp_path / "bad"
    root.mkdir(exist_ok=True)
    with pytest.raises(exc, match=match):
        call(root, t, **kw)
    assert os.listdir(root) == []  # nothing written


def test_good_call_works(tmp_path):
    call(tmp_path, table(1, 1, [0, 1, 2]))


# --- arguments ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, exc, match",
    [
        ({"region_id": -1}, ValueError, r"region_id: -1 is out of range \(u64\)"),
        ({"region_id": 2**64}, ValueError, "region_id"),
        ({"region_id": "1"}, TypeError, "region_id: expected an integer"),
        ({"region_id": True}, TypeError, "region_id"),
        ({"region_id": 1.0}, TypeError, "region_id"),
        ({"source_file_id": "5A3C0000-0000-4000-8000-000000000001"}, ValueError, "source_file_id.*not a FileId"),
        ({"source_file_id": "5a3c000000004000800000000000001"}, ValueError, "source_file_id"),
        ({"source_file_id": 5}, TypeError, "source_file_id"),
        ({"generation": "not-a-uuid"}, ValueError, "generation.*not a FileId"),
        ({"generation": "5a3c0000-0000-4000-8000-000000000002\n"}, ValueError, "generation.*not a FileId"),
        ({"source_file_id": " 5a3c0000-0000-4000-8000-000000000001"}, ValueError, "source_file_id"),
        ({"generation": b"5a3c0000-0000-4000-8000-000000000002"}, TypeError, "generation"),
        ({"timestamp_column_id": -1}, ValueError, "timestamp_column_id"),
        ({"timestamp_column_id": 2**32}, ValueError, r"timestamp_column_id: 4294967296 is out of range \(u32\)"),
        ({"field_column_ids": [1, 2]}, ValueError, "2 IDs for 1 field"),
        ({"field_column_ids": []}, ValueError, "0 IDs for 1 field"),
        ({"field_column_ids": [0]}, ValueError, r"field_column_ids\[0\]: ID 0 repeats timestamp_column_id"),
        ({"field_column_ids": [2**32]}, ValueError, r"field_column_ids\[0\].*u32"),
        ({"field_column_ids": [-3]}, ValueError, r"field_column_ids\[0\]"),
        ({"field_column_ids": ["1"]}, TypeError, r"field_column_ids\[0\]"),
        ({"field_column_ids": 1}, TypeError, "field_column_ids: expected a sequence"),
        # no order of their own (a set's is its hashes'), or no items: refused, not read in some order
        ({"field_column_ids": {1}}, TypeError, r"field_column_ids: expected a sequence of integers \(one per field, "
                                               r"in field order\), found set"),
        ({"field_column_ids": frozenset([1])}, TypeError, "field_column_ids: expected a sequence.*found frozenset"),
        ({"field_column_ids": {1: 1}}, TypeError, "field_column_ids: expected a sequence.*found dict"),
        ({"field_column_ids": np.array(1)}, TypeError, "field_column_ids: expected a sequence.*found ndarray"),
        ({"field_column_ids": np.array([[1]])}, TypeError, "field_column_ids: expected a sequence.*found ndarray"),
        ({"row_limit": 0}, ValueError, "row_limit: 0 is out of range"),
        ({"row_limit": 8193}, ValueError, "row_limit"),
        ({"max_page_bytes": 65537}, ValueError, "max_page_bytes"),
        ({"max_page_bytes": 12 + 220 - 1}, ValueError, "max_page_bytes: 231 is out of range.*widest descriptor"),
        ({"max_leaves_per_root": 1}, ValueError, "max_leaves_per_root"),
        ({"max_leaves_per_root": 911}, ValueError, "max_leaves_per_root"),
        ({"compression_level": 0}, ValueError, r"compression_level: 0 is not a level; expected -131072..=-1 \(fast\) "
                                               r"or 1..=22 \(the default is 3\)"),
        ({"compression_level": 23}, ValueError, r"compression_level: 23 is out of range; expected -131072..=22"),
        ({"compression_level": -131073}, ValueError, r"compression_level: -131073 is out of range"),
        ({"compression_level": 3.0}, TypeError, "compression_level: expected an integer"),
        ({"compression_level": 0, "compression": None}, ValueError, "compression_level: 0 is not a level"),
        ({"compression": "lz4"}, ValueError, r"compression: 'lz4' is not a compression this writer knows; "
                                             r"expected 'zstd' or None \(raw\)"),
        ({"compression": "none"}, ValueError, r"compression: 'none' is not a compression"),
        ({"compression": "ZSTD"}, ValueError, r"compression: 'ZSTD'"),
        ({"compression": 1}, TypeError, r"compression: expected 'zstd' or None, found int 1"),
        ({"storage_options": "x"}, TypeError, "storage_options"),
        # numpy's timedelta64 is an integer type to numpy: a duration is no ID or count
        ({"region_id": np.timedelta64(5, "ns")}, TypeError, "region_id: expected an integer .*timedelta64"),
        ({"timestamp_column_id": np.timedelta64(0, "ns")}, TypeError, "timestamp_column_id: expected an integer"),
        ({"field_column_ids": [np.timedelta64(1, "ns")]}, TypeError, r"field_column_ids\[0\]: expected an integer"),
        ({"row_limit": np.timedelta64(8, "ns")}, TypeError, "row_limit: expected an integer"),
        ({"max_leaves_per_root": np.timedelta64(8, "s")}, TypeError, "max_leaves_per_root: expected an integer"),
        ({"compression_level": np.timedelta64(3, "ns")}, TypeError, "compression_level: expected an integer"),
    ],
)
def test_bad_arguments(tmp_path, kw, exc, match):
    expect(tmp_path, exc, match, **kw)


def test_numpy_strings_accepted_as_plain_strings(tmp_path):
    # numpy.str_ IDs went on into the entry (file_id=np.str_('...'))
    e = call(tmp_path, table(1, 1, [0]), source_file_id=np.str_(SRC), generation=np.str_(GEN))
    assert (e.file_id, e.generation) == (SRC, GEN) and type(e.file_id) is str and type(e.generation) is str
    assert all(type(o.path) is str for o in e.objects)


def test_numpy_integers_accepted(tmp_path):
    call(tmp_path, table(1, 1, [0]), region_id=np.uint64(2**64 - 1), field_column_ids=np.array([2**32 - 1]),
         timestamp_column_id=np.int32(0), row_limit=np.int64(1))


def test_field_ids_follow_the_fields_in_their_order(tmp_path):
    from gtsamples import open_artifact

    t = table(1, 1, [0], fields={"a": [1.0], "b": [2.0]})
    for k, ids in enumerate(([7, 3], (7, 3), np.array([7, 3], np.uint32), range(7, 2, -4))):
        e = call(tmp_path / str(k), t, field_column_ids=ids)
        fields = open_artifact(tmp_path / str(k), entry=e).manifest.fields
        assert [(f.column_id, f.name) for f in fields] == [(7, "a"), (3, "b")]


def test_duplicate_field_ids(tmp_path):
    t = table(1, 1, [0], fields={"a": [1.0], "b": [2.0]})
    expect(tmp_path, ValueError, r"field_column_ids\[1\]: ID 4 repeats field_column_ids\[0\]", t=t,
           field_column_ids=[4, 4])


def test_not_a_table(tmp_path):
    expect(tmp_path, TypeError, "pyarrow.Table", t={"a": [1]})


def test_store_root_type(tmp_path):
    with pytest.raises(TypeError, match="store_root"):
        write_artifact(table(1, 1, [0]), 5, **OK)


# --- schema -------------------------------------------------------------------------


def _arrays(n=2):
    return [
        pa.array([1] * n, pa.uint32()),
        pa.array([1] * n, pa.uint64()),
        pa.array(list(range(n)), pa.timestamp("ms")),
        pa.array([1] * n, pa.uint64()),
        pa.array([1] * n, pa.uint8()),
        pa.array([0.5] * n, pa.float64()),
    ]


NAMES = ["__table_id", "__tsid", "ts", "__sequence", "__op_type", "v"]


def _t(arrays=None, names=None):
    return pa.Table.from_arrays(arrays or _arrays(), names=names or NAMES)


def test_no_fields(tmp_path):
    expect(tmp_path, ValueError, "5 column", t=_t(_arrays()[:5], NAMES[:5]), field_column_ids=[])


def test_too_many_fields(tmp_path):
    arr = pa.array([0.5, 0.5])
    t = _t(_arrays()[:5] + [arr] * 1025, NAMES[:5] + [f"f{i}" for i in range(1025)])
    expect(tmp_path, ValueError, "1025 field columns; at most 1024", t=t, field_column_ids=list(range(1, 1026)))


@pytest.mark.parametrize("pos, name", [(0, "table_id"), (1, "tsid"), (3, "seq"), (4, "op")])
def test_fixed_column_names(tmp_path, pos, name):
    names = list(NAMES)
    names[pos] = name
    expect(tmp_path, ValueError, f"column {pos} must be named '{NAMES[pos]}', found '{name}'", t=_t(names=names))


@pytest.mark.parametrize(
    "pos, arr, match",
    [
        (0, pa.array([1, 1], pa.uint64()), "column 0 '__table_id': expected type uint32, found uint64"),
        (1, pa.array([1, 1], pa.int64()), "column 1 '__tsid': expected type uint64, found int64"),
        (3, pa.array([1, 1], pa.uint32()), "column 3 '__sequence': expected type uint64"),
        (4, pa.array([1, 1], pa.int8()), "column 4 '__op_type': expected type uint8"),
        (2, pa.array([0, 1], pa.int64()), "column 2 'ts' .*expected timestamp.*found int64"),
        (2, pa.array([0, 1], pa.timestamp("ms", tz="UTC")), "without a timezone"),
        (2, pa.array([0, 1], pa.date64()), "column 2 'ts'"),
        (5, pa.array([0.5, 1], pa.float32()), r"column 5 'v' \(a field\): expected type double \(float64\), found float"),
        (5, pa.array([1, 2], pa.int64()), "column 5 'v'"),
        (5, pa.nulls(2), "column 5 'v'"),
    ],
)
def test_column_types(tmp_path, pos, arr, match):
    arrays = _arrays()
    arrays[pos] = arr
    expect(tmp_path, TypeError, match, t=_t(arrays))


@pytest.mark.parametrize("bad", ["__table_id", "__tsid", "__sequence", "__op_type"])
def test_field_names_reserved(tmp_path, bad):
    expect(tmp_path, ValueError, f"column 5 \\(a field\\): name '{bad}' is reserved", t=_t(names=NAMES[:5] + [bad]))


def test_field_name_equals_timestamp_name(tmp_path):
    expect(tmp_path, ValueError, "duplicate name 'ts' \\(also column 2\\)", t=_t(names=NAMES[:5] + ["ts"]))


def test_duplicate_field_names(tmp_path):
    t = _t(_arrays() + [pa.array([1.0, 2.0])], NAMES + ["v"])
    expect(tmp_path, ValueError, "column 6 .*duplicate name 'v' \\(also column 5\\)", t=t, field_column_ids=[1, 2])


def test_timestamp_name_reserved(tmp_path):
    expect(tmp_path, ValueError, "column 2 .*reserved", t=_t(names=NAMES[:2] + ["__sequence"] + NAMES[3:]))


def test_empty_names(tmp_path):
    expect(tmp_path, ValueError, "column 5 .*nonempty", t=_t(names=NAMES[:5] + [""]))
    expect(tmp_path, ValueError, "column 2 .*nonempty", t=_t(names=NAMES[:2] + [""] + NAMES[3:]))


# --- rows ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pos, arr, name",
    [
        (0, pa.array([1, None, None], pa.uint32()), "__table_id"),
        (1, pa.array([1, None, 1], pa.uint64()), "__tsid"),
        (2, pa.array([0, None, 5], pa.timestamp("ms")), "ts"),
        (3, pa.array([1, None, None], pa.uint64()), "__sequence"),
        (4, pa.array([1, None, 1], pa.uint8()), "__op_type"),
    ],
)
def test_nulls_in_fixed_columns(tmp_path, pos, arr, name):
    arrays = _arrays(3)
    arrays[pos] = arr
    expect(tmp_path, ValueError, f"column {pos} '{name}' row 1: null value", t=_t(arrays))


def test_nat_is_null(tmp_path):
    ts = pa.array(np.array(["2024-01-01", "NaT"], dtype="datetime64[ms]"))
    assert ts.null_count == 1
    arrays = _arrays()
    arrays[2] = ts
    expect(tmp_path, ValueError, "column 2 'ts' row 1: null value", t=_t(arrays))


def test_op_type_values(tmp_path):
    t = table(1, 1, [0, 1, 2, 3], op=[1, 0, 2, 7])
    expect(tmp_path, ValueError, r"column 4 '__op_type' row 2: operation type 2 is not 0 \(delete\) or 1 \(put\)", t=t)


def test_identity_order_table_id(tmp_path):
    t = table([1, 2, 1], [9, 1, 9], [0, 0, 0])
    expect(tmp_path, ValueError, r"row 2: identity \(table_id, tsid\) \(1, 9\) follows \(2, 1\) at row 1", t=t)


def test_identity_order_tsid_unsigned(tmp_path):
    # tsid compared as u64: 1 < 2**63 is ascending; 2**63 then 1 is not
    call(tmp_path / "ok", table(1, [1, 2**63, 2**64 - 1], [0, 0, 0]))
    t = table(1, [2**63, 1], [0, 0])
    expect(tmp_path, ValueError, rf"row 1: identity \(table_id, tsid\) \(1, 1\) follows \(1, {2**63}\)", t=t)


def test_timestamp_order_signed(tmp_path):
    call(tmp_path / "ok", table(1, 1, [-(2**63), -1, 0, 2**63 - 1]))
    t = table(1, 1, [-5, 3, 3, -7])
    expect(tmp_path, ValueError, r"row 3: column 'ts' value -7 follows 3 at row 2 within identity \(1, 1\)", t=t)


def test_timestamp_may_restart_on_new_identity(tmp_path):
    call(tmp_path, table(1, [1, 1, 2], [5, 9, 0]))


def test_sequence_order(tmp_path):
    # increasing sequences are fine across different timestamps; not at equal ones
    call(tmp_path / "ok", table(1, 1, [0, 1, 1, 2], seq=[1, 5, 5, 9]))
    t = table(1, 1, [0, 1, 1, 1], seq=[1, 5, 4, 6])
    expect(tmp_path, ValueError, r"row 3: column '__sequence' value 6 follows 4 at row 2 at equal timestamp 1", t=t)


def test_sequence_unsigned(tmp_path):
    call(tmp_path / "ok", table(1, 1, [0, 0], seq=[2**64 - 1, 0]))
    expect(tmp_path, ValueError, "__sequence", t=table(1, 1, [0, 0], seq=[0, 2**64 - 1]))


def test_first_offending_row_is_reported(tmp_path):
    t = table(1, [1, 1, 1, 0, 0], [0, 0, 5, 1, 0], seq=[1, 2, 0, 0, 0])
    expect(tmp_path, ValueError, "at row 1: column '__sequence'", t=t)


def test_op_type_checked_before_later_order_error(tmp_path):
    t = table(1, 1, [0, 1, 0], op=[1, 5, 1])
    expect(tmp_path, ValueError, "row 1: operation type 5", t=t)
