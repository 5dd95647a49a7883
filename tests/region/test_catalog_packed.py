"""Catalog format version 3 (format 2's columns, packed: gtsamples.region.catalog_packed):
its round trip, the documents it leaves to format 2, each rule of its parse, corrupt
input, and the column views records read."""

from __future__ import annotations

import base64
import copy
import json
import pickle
import uuid

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gtsamples.region import catalog, catalog_packed, catalog_parse, open_region

from .conftest import (REGION_ID, assert_open_refuses, catalog_corruptions_refuse_or_read, catalog_path,
                       catalog_region, set_at, write_next_version)


def _b64(a) -> str:
    return base64.b64encode(np.asarray(a).tobytes()).decode()


def _next_version(tmp_path, r, edit=None, text_edit=None):
    """Version ``r.version + 1`` written as ``edit(the latest, a format-3 document, as
    JSON)`` and then ``text_edit`` on its compact text."""
    doc = json.loads(catalog_path(tmp_path, r.version).read_bytes())
    assert doc["version"] == 3
    return write_next_version(tmp_path, r, doc, edit, text_edit)


def test_v3_round_trip(tmp_path):
    r = catalog_region(tmp_path)
    data = catalog_path(tmp_path, r.version).read_bytes()
    doc = json.loads(data)
    assert doc["version"] == 3 and b"\n " not in data
    assert doc["ssts"]["size"]["dtype"] in catalog_packed.INT_DTYPES and "text" in doc["ssts"]["file_id"]
    got = open_region(tmp_path, REGION_ID)
    ssts, arts = got._doc["ssts"], got._doc["artifacts"]
    assert isinstance(ssts, catalog_parse.SstRecords) and isinstance(arts, catalog_parse.EntryRecords)
    assert isinstance(ssts.column("size"), catalog_packed.IntColumn)
    assert isinstance(ssts.column("file_id"), catalog_packed.StrColumn)
    # the records readers see are exactly the version-1 ones (the commit's own document), with Python values
    assert [dict(s) for s in ssts] == list(r._doc["ssts"]) and [dict(a) for a in arts] == list(r._doc["artifacts"])
    assert all(type(s["size"]) is int and type(s["stats"]["min_timestamp"]) is int for s in ssts)
    assert repr(got.read().to_pydict()) == repr(r.read().to_pydict()) and got.read().num_rows == 60  # (NaN: by repr)
    assert json.loads(json.dumps(catalog.copy_doc(got._doc))) == catalog.copy_doc(r._doc)


def test_v3_optional_keys_round_trip(tmp_path):
    """An SST record without stats, one with null stats, entries without the optional
    keys, an object outside its entry's directory, an SST outside the region's key."""
    r = catalog_region(tmp_path)
    doc = catalog.copy_doc(r.catalog.read_latest()[1])
    del doc["ssts"][0]["stats"]
    doc["ssts"][1]["stats"] = None
    doc["ssts"][1]["path"] = "elsewhere/x.parquet"
    for k in ("format", "version", "created_at"):
        doc["artifacts"][0].pop(k, None)
    first = next(a for a in doc["artifacts"] if a["file_id"] == doc["ssts"][0]["file_id"])
    first["objects"][-1]["path"] = "elsewhere/part-0.samples"  # not under the entry's directory
    doc["catalog_version"] = r.version + 1
    data = catalog.encode_version(doc)
    assert json.loads(data)["version"] == 3
    catalog_path(tmp_path, r.version + 1).write_bytes(data)
    got = open_region(tmp_path, REGION_ID)
    assert list(got._doc["ssts"]) == doc["ssts"] and list(got._doc["artifacts"]) == doc["artifacts"]
    assert "stats" not in got._doc["ssts"][0] and got._doc["ssts"][1]["stats"] is None
    assert "format" not in got._doc["artifacts"][0] and got._doc["artifacts"][0].get("version") is None


def test_dictionary_columns_round_trip(tmp_path):
    """A string column with few distinct values is written as a dictionary column
    (format, object_path, a shared created_at), the file ids never; records read the same."""
    r = catalog_region(tmp_path, ssts=9)
    doc = catalog.copy_doc(r.catalog.read_latest()[1])
    for a in doc["artifacts"][:5]:
        a["created_at"] = "2026-12-07T00:00:00Z"
    doc["artifacts"][6].pop("format")  # a null among the pieces
    doc["catalog_version"] = r.version + 1
    data = catalog.encode_version(doc)
    packed = json.loads(data)
    arts = packed["artifacts"]
    assert "indices" in arts["format"] and "indices" in arts["object_path"] and "indices" not in arts["file_id"]
    assert arts["format"]["text"] == "columnar-samples" and "indices" not in packed["ssts"]["file_id"]
    assert "indices" not in arts["created_at"]  # 5 of 9 alike: 5 distinct values, more than a quarter
    catalog_path(tmp_path, r.version + 1).write_bytes(data)
    got = open_region(tmp_path, REGION_ID)
    assert list(got._doc["artifacts"]) == doc["artifacts"] and list(got._doc["ssts"]) == doc["ssts"]
    col = got._doc["artifacts"].column("format")
    assert col[6] is None and col[0] == "columnar-samples" and col[-1] == "columnar-samples" and len(col) == 9
    assert got.read().num_rows == 270


def _edit_sst(k, v):
    def edit(doc):
        doc["ssts"][0][k] = v
    return edit


def _edit_entry(k, v):
    def edit(doc):
        doc["artifacts"][0][k] = v
    return edit


@pytest.mark.parametrize("edit, why", [
    (_edit_sst("path", ""), "ssts.path holds an empty string"),
    (_edit_entry("format", ""), "artifacts.format holds an empty string"),
    (_edit_entry("created_at", ""), "artifacts.created_at holds an empty string"),
    (_edit_entry("version", -1), "artifacts.version holds a negative value"),
])
def test_a_document_format_3_does_not_hold_is_written_as_format_2(tmp_path, edit, why):
    """Format 3 writes null as an empty string (a version as -1): a document with a real
    one is written as format 2, and reads back the same."""
    r = catalog_region(tmp_path)
    doc = catalog.copy_doc(r.catalog.read_latest()[1])
    edit(doc)
    with pytest.raises(catalog_parse.EncodeRefused, match=why):
        catalog_packed.encode_v3(doc)

    def mutate(cur, n):
        edit(cur)
        return cur

    n, _ = r.catalog.commit(mutate, "test")
    assert json.loads(catalog_path(tmp_path, n).read_bytes())["version"] == 2
    got = open_region(tmp_path, REGION_ID)
    want = catalog.copy_doc(got.catalog.read_latest()[1])
    assert catalog.copy_doc(got._doc) == want
    edit(doc)
    assert [dict(s) for s in got._doc["ssts"]] == doc["ssts"]
    assert [dict(a) for a in got._doc["artifacts"]] == doc["artifacts"]


@pytest.mark.parametrize("value, fmt, dtype", [
    (255, 3, "<u1"), (256, 3, "<u2"), (-1, 3, "<i1"), (-129, 3, "<i2"), (2**32, 3, "<u8"), (2**63, 3, "<u8"),
    (2**64 - 1, 3, "<u8"), (-(2**63), 3, "<i8"), (2**64, 2, None), (-(2**63) - 1, 2, None), (2**70, 2, None),
])
def test_integer_columns_take_the_narrowest_type(tmp_path, value, fmt, dtype):
    """Each boundary of the packed types; a value beyond 64 bits is written as format 2."""
    r = catalog_region(tmp_path, ssts=1)

    def mutate(cur, n):
        cur["ssts"][0]["size"] = value
        return cur

    n, _ = r.catalog.commit(mutate, "test")
    doc = json.loads(catalog_path(tmp_path, n).read_bytes())
    assert doc["version"] == fmt
    if fmt == 3:
        assert doc["ssts"]["size"]["dtype"] == dtype
    else:
        assert doc["ssts"]["size"] == [value]
    got = open_region(tmp_path, REGION_ID)._doc["ssts"]
    assert got[0]["size"] == value and type(got[0]["size"]) is int


def _ints(path, values, dtype="<i8"):
    return set_at(path, {"dtype": dtype, "data": _b64(np.array(values, dtype))})


@pytest.mark.parametrize("edit, text_edit, match", [
    # duplicate keys: among the columns, in a packed column, in its ends
    (None, lambda t: t.replace('"rows":{', '"rows":{"dtype":"<u1","data":""},"rows":{', 1), "duplicate key 'rows'"),
    (None, lambda t: t.replace('"dtype":', '"dtype":"<u1","dtype":', 1), "duplicate key 'dtype'"),
    (None, lambda t: t.replace('"text":', '"text":"","text":', 1), "duplicate key 'text'"),
    # exact keys and types
    (set_at(["ssts", "size", "extra"], 1), None, r"unknown field `extra`.*\$\.ssts\.size"),
    (lambda d: d["ssts"]["file_id"].pop("ends"), None, r"missing required field `ends`.*\$\.ssts\.file_id"),
    (set_at(["ssts", "size"], [1, 2]), None, r"Expected `object`, got `array`.*\$\.ssts\.size"),
    (set_at(["ssts", "size", "data"], 7), None, r"ssts\.size\.data is '7': a packed integer column's data is a string"),
    (set_at(["ssts", "size", "data"], None), None, r"ssts\.size\.data is 'null'"),
    (None, lambda t: t.replace('"data":"', '"data":"\\u0041', 1), r"\.data is not base64"),
    (None, lambda t: t.replace('"data":"', '"data":"\udcff', 1), "not valid UTF-8"),
    (set_at(["artifacts", "generation", "text"], None), None, r"Expected `str`, got `null`"),
    # a packed integer column: its type, its base64, whole values
    (set_at(["ssts", "size", "dtype"], "<f8"), None,
     r"ssts\.size\.dtype is '<f8': a packed integer column's dtype is one of <u1, <i1"),
    (set_at(["ssts", "rows", "dtype"], ">u4"), None, r"ssts\.rows\.dtype is '>u4'"),
    (set_at(["ssts", "size", "dtype"], "u4"), None, r"ssts\.size\.dtype is 'u4'"),
    (set_at(["ssts", "size", "data"], lambda s: s[:-1] + "!"), None, r"ssts\.size\.data is not base64"),
    (_ints(["ssts", "size"], [1]), None, r"ssts\.size has 1 values, ssts\.file_id 2"),
    (set_at(["ssts", "size", "data"], lambda s: s[:-1]), None, r"ssts\.size\.data is not base64"),
    (set_at(["ssts", "size", "data"], lambda s: "é" + s[1:]), None, r"ssts\.size\.data is not base64"),
    (set_at(["ssts", "size", "data"], lambda s: s + "AAAA"), None, r"ssts\.size\.data is not base64"),
    (set_at(["ssts", "size"], {"dtype": "<u2", "data": _b64(np.zeros(3, np.uint8))}), None,
     r"ssts\.size\.data holds 3 bytes: not a whole number of <u2 values \(2 bytes each\)"),
    # a packed string column: its ends
    (_ints(["ssts", "file_id", "ends"], [36, 35]), None,
     r"ssts\.file_id\.ends\[1\] is 35, after 36: a string column's ends never decrease"),
    (_ints(["ssts", "file_id", "ends"], [-1, 72]), None, r"ssts\.file_id\.ends\[0\] is -1, after 0"),
    (_ints(["ssts", "file_id", "ends"], [36, 71]), None, r"ssts\.file_id\.ends ends at 71 but its text has 72"),
    (_ints(["ssts", "file_id", "ends"], [36, 2**64 - 1], "<u8"), None,
     r"ssts\.file_id\.ends holds 18446744073709551615"),
    (set_at(["artifacts", "object_path"], {"ends": {"dtype": "<u1", "data": ""}, "text": "x"}), None,
     r"artifacts\.object_path\.ends ends at 0 but its text has 1"),
    # a dictionary column: its indices
    (set_at(["artifacts", "format"], {"ends": {"dtype": "<u1", "data": _b64(np.array([16], np.uint8))},
                                    "text": "columnar-samples",
                                    "indices": {"dtype": "<u1", "data": _b64(np.array([0, 1], np.uint8))}}), None,
     r"artifacts\.format\.indices holds 1: a dictionary column's indices are below its 1 pieces"),
    (set_at(["artifacts", "format"], {"ends": {"dtype": "<u1", "data": _b64(np.array([16], np.uint8))},
                                    "text": "columnar-samples",
                                    "indices": {"dtype": "<i1", "data": _b64(np.array([0, -1], np.int8))}}), None,
     r"artifacts\.format\.indices holds -1"),
    (set_at(["artifacts", "format"], {"ends": {"dtype": "<u1", "data": _b64(np.array([16], np.uint8))},
                                    "text": "columnar-samples",
                                    "indices": {"dtype": "<u1", "data": _b64(np.array([0], np.uint8))}}), None,
     r"artifacts\.format has 1 values, artifacts\.file_id 2"),
    (set_at(["artifacts", "format"], {"ends": {"dtype": "<u1", "data": _b64(np.array([16], np.uint8))},
                                    "text": "columnar-samples", "indices": [0, 0]}), None,
     r"Expected `object`, got `array` - at `\$\.artifacts\.format\.indices`"),
    # the columns' rules (as format 2's)
    (_ints(["ssts", "rows"], [1, 2, 3]), None, r"ssts\.rows has 3 values, ssts\.file_id 2"),
    (set_at(["artifacts", "generation"], lambda g: {"ends": {"dtype": "<u1", "data": _b64(np.array([36], np.uint8))},
                                                  "text": g["text"][:36]}), None,
     r"artifacts\.generation has 1 values, .*file_id 2"),
    (_ints(["ssts", "schema"], [0, 5]), None, r"ssts\.schema holds 5: .* index into ssts\.schemas \(1 of them\)"),
    (_ints(["ssts", "schema"], [-1, 0]), None, r"ssts\.schema holds -1"),
    (_ints(["ssts", "stats"], [1, 2]), None, r"ssts\.stats holds 2: an SST's stats code is 1"),
    (_ints(["ssts", "stats"], [-2, 1]), None, r"ssts\.stats holds -2"),
    (_ints(["artifacts", "objects"], [-1, 2]), None, r"artifacts\.objects holds -1"),
    (_ints(["artifacts", "relative"], [1, 2]), None, r"artifacts\.relative holds 2: 1 \(the entry's object paths"),
    (_ints(["artifacts", "objects"], [3, 2]), None, r"artifacts\.object_path has 4 values; .* counts 5"),
    (_ints(["artifacts", "object_size"], [1, 2, 3]), None, r"artifacts\.object_size has 3 values; .* counts 4"),
    # counts whose fixed-width sum would wrap around to the 4 objects listed
    (_ints(["artifacts", "objects"], [2**64 - 1, 5], "<u8"), None,
     r"artifacts\.object_path has 4 values; artifacts\.objects counts at least 18446744073709551615"),
    (_ints(["artifacts", "objects"], [2**63 - 1, 4], "<i8"), None,
     r"artifacts\.object_path has 4 values; artifacts\.objects counts at least 9223372036854775807"),
    # the rules every version has (check_doc), on the packed file ids
    (set_at(["ssts", "file_id", "text"], lambda t: t[:36] + "X" + t[37:]), None,
     r"ssts\[1\]\.file_id 'X.*' is not a FileId"),
    (set_at(["ssts", "file_id", "text"], lambda t: t[:36] + t[:36].upper()), None,
     r"ssts\[1\]\.file_id .* not a FileId"),
    (set_at(["ssts", "file_id"], lambda f: dict(f, text=f["text"][:36] * 2)), None, "is listed twice"),
    (set_at(["ssts", "file_id"], lambda f: {"ends": {"dtype": "<u1", "data": _b64(np.array([35, 72], np.uint8))},
                                          "text": f["text"]}), None, r"ssts\[0\]\.file_id '.{35}' is not a FileId"),
    (set_at(["format"], "other"), None, "format is 'other'"),
    (set_at(["region_id"], REGION_ID + 1), None, "region_id is"),
    (set_at(["ssts"], lambda s: [s]), None, "in format version 3, ssts and artifacts must be objects"),
    # not strict JSON, truncated
    (None, lambda t: t[: len(t) // 2], "not strict JSON"),
    (None, lambda t: t + "[]", "not strict JSON"),
])
def test_v3_parse_is_strict(tmp_path, edit, text_edit, match):
    r = catalog_region(tmp_path)
    assert_open_refuses(tmp_path, _next_version(tmp_path, r, edit, text_edit), match)


def test_v3_corrupt_bytes_give_catalog_errors(tmp_path):
    """Any truncation or changed byte of a version-3 document: a CatalogError or records
    that can be made, never another exception."""
    r = catalog_region(tmp_path)
    catalog_corruptions_refuse_or_read(catalog_path(tmp_path, r.version).read_bytes(), REGION_ID, r.version, 6, 300)


def test_v3_duplicate_count(tmp_path):
    """The pair count itself flags a duplicate key (not only the json hook behind it);
    ':' inside strings is not a pair."""
    r = catalog_region(tmp_path)
    data = catalog_path(tmp_path, r.version).read_bytes()
    doc, clean = catalog_packed.decode_v3(data)
    assert clean and catalog.copy_doc(doc) == catalog.copy_doc(r.catalog.read_latest()[1])
    for key, v in ((b'"operation":', b'"x"'), (b'"rows":', b'{"dtype":"<u1","data":""}'), (b'"column_id":', b'1'),
                   (b'"dtype":', b'"<u1"'), (b'"ends":', b'{"dtype":"<u1","data":""}'), (b'"nonce":', b'"a:b"'),
                   (b'"text":', b'""')):
        assert data.count(key) >= 1
        _, clean = catalog_packed.decode_v3(data.replace(key, key + v + b"," + key, 1))
        assert not clean, key
    assert catalog_packed.decode_v3(data.replace(b'"operation":"build"', b'"operation" :  "a:b::c"'))[1]
    k = data.index(b'"object_path":')
    colons = data[:k] + data[k:].replace(b"manifest.json", b"manif:st.json", 1)
    assert catalog_packed.decode_v3(colons)[1]


def test_column_views():
    ints = catalog_packed.IntColumn(np.array([5, -1, 7], np.int8), null=-1)
    assert len(ints) == 3 and ints[0] == 5 and type(ints[0]) is int and ints[1] is None and ints[-1] == 7
    assert ints[0:2] == [5, None] and list(ints) == [5, None, 7] and ints == [5, None, 7]
    assert (ints.min(), ints.max(), ints.sum()) == (-1, 7, 11)
    plain = catalog_packed.IntColumn(np.array([1, 300], np.uint16))
    assert plain[0:2] == [1, 300] and np.array(plain, np.int64).tolist() == [1, 300]
    with pytest.raises(OverflowError, match="does not fit uint8"):
        np.array(plain, np.uint8)
    with pytest.raises(OverflowError, match="does not fit uint32"):
        np.array(ints, np.uint32)
    words = catalog_packed.StrColumn("abc", np.array([0, 1, 3]), nullable=True, indices=np.array([2, 0, 1, 2]))
    assert len(words) == 4 and list(words) == ["bc", None, "a", "bc"] and words[-1] == "bc" and words[1] is None
    assert not words.fixed_width(2)
    strs = catalog_packed.StrColumn("abcdef", np.array([1, 1, 3, 6]), nullable=True)
    assert len(strs) == 4 and strs[0] == "a" and strs[1] is None and strs[-1] == "def" and strs[1:3] == [None, "bc"]
    assert list(strs) == ["a", None, "bc", "def"] and np.array(strs).tolist() == ["a", None, "bc", "def"]
    with pytest.raises(IndexError):
        strs[4]
    mine = strs.tolist()
    mine[0] = "changed"  # a caller's list: the column's values stay
    assert strs.tolist() == ["a", None, "bc", "def"] and strs.tolist()[2] is strs.tolist()[2]  # made once
    assert not strs.fixed_width(1)
    assert catalog_packed.StrColumn("abcdef", np.array([2, 4, 6])).fixed_width(2)
    for col in (ints, plain, strs, words):
        for again in (pickle.loads(pickle.dumps(col)), copy.deepcopy(col)):
            assert type(again) is type(col) and list(again) == list(col)


_INT = st.one_of(st.integers(0, 3), st.integers(-(2**63), 2**64 - 1),
                 st.sampled_from([255, 256, -128, -129, 2**16, 2**32, -(2**31) - 1, 2**63, 2**64 - 1]))
_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


@st.composite
def catalog_doc(draw):
    """A catalog document (as commits hand to encode_version) with random values:
    integers across the packed types' boundaries, optional stats and entry keys, texts
    of any characters, repeated values (dictionary columns), objects in or out of their
    entry's directory."""
    rid = 4398046511104 + 3
    schema = {"timestamp": {"column_id": 0, "name": "ts", "unit": "millisecond"},
              "fields": [{"column_id": 1, "name": draw(_TEXT)}]}
    n = draw(st.integers(0, 9))
    ids = [str(uuid.UUID(int=draw(st.integers(0, 2**128 - 1)))) for _ in range(n)]
    ssts, arts = [], []
    for fid in dict.fromkeys(ids):
        rec = {"file_id": fid, "path": draw(st.one_of(st.just(f"{rid}/sst/{fid}.parquet"), _TEXT)),
               "size": draw(_INT), "rows": draw(_INT), "schema": schema}
        stats = draw(st.sampled_from(["present", "null", "absent"]))
        if stats == "present":
            rec["stats"] = {"first": [draw(_INT), draw(_INT)], "last": [draw(_INT), draw(_INT)],
                            "min_timestamp": draw(_INT), "max_timestamp": draw(_INT)}
        elif stats == "null":
            rec["stats"] = None
        ssts.append(rec)
        if draw(st.booleans()):
            gen = draw(st.sampled_from(["g", str(uuid.UUID(int=draw(st.integers(0, 2**128 - 1))))]))
            top = f"{rid}/samples/{fid}/{gen}/"
            e = {"region_id": draw(st.sampled_from([rid, 0, 2**64 - 1])), "file_id": fid, "generation": gen,
                 "objects": [{"path": draw(st.sampled_from([top + "manifest.json", top + "part-0.samples", "x/y"])),
                              "file_size": draw(_INT)} for _ in range(draw(st.integers(0, 3)))],
                 "file_size": draw(_INT)}
            for k, v in (("format", st.sampled_from(["columnar-samples", "", "other"])),
                         ("version", st.one_of(st.integers(-2, 2), _INT)),
                         ("created_at", st.one_of(st.just("2026-12-07T00:00:00Z"), _TEXT))):
                if draw(st.booleans()):
                    e[k] = draw(v)
            arts.append(e)
    return {"format": catalog.CATALOG_FORMAT, "version": catalog.CATALOG_FORMAT_VERSION, "region_id": rid,
            "catalog_version": 7, "created_at": "2026-12-07T00:00:00Z", "operation": draw(_TEXT),
            "schema": schema, "ssts": ssts, "artifacts": arts, "nonce": "n"}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(catalog_doc())
def test_any_document_reads_back_its_records(doc):
    """Property: whatever a document holds, the version a commit writes (format 3, or
    format 2 for what format 3 does not hold) parses to exactly its records, as
    Python values; format 2 is chosen only for those values."""
    data = catalog.encode_version(doc)
    fmt = json.loads(data)["version"]
    got = catalog.copy_doc(catalog.parse_version(data, "v", doc["region_id"], 7))
    assert got == dict(doc, version=fmt)
    assert json.loads(json.dumps(got)) == got
    ssts, arts = doc["ssts"], doc["artifacts"]
    stats = [s["stats"] for s in ssts if s.get("stats")]
    columns = [[s["size"] for s in ssts], [s["rows"] for s in ssts], [a["file_size"] for a in arts],
               [a["region_id"] for a in arts], [o["file_size"] for a in arts for o in a["objects"]],
               [a.get("version", -1) for a in arts]]  # (-1: format 3's "none")
    zeros = [0] * (len(ssts) - len(stats))  # (the stats columns' values where an SST has none)
    columns += [[st_[k][j] for st_ in stats] + zeros for k in ("first", "last") for j in (0, 1)]
    columns += [[st_[k] for st_ in stats] + zeros for k in ("min_timestamp", "max_timestamp")]
    fits = all(not c or (-(2**63) <= min(c) and max(c) < 2**63) or (0 <= min(c) and max(c) < 2**64) for c in columns)
    holds = (fits and all("" not in (a.get("format"), a.get("created_at")) and a.get("version", 0) >= 0 for a in arts)
             and all(s["path"] != "" for s in ssts))
    assert fmt == (3 if holds else 2), doc
