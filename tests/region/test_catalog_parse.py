"""Catalog format version 2 (the SST records and artifact entries as columns): its
round trip, each rule of its strict parse, and corrupt input.  Commits write format 3
(tests/region/test_catalog_packed.py); these tests write their format-2 versions
themselves (:func:`_v2_bytes`), as earlier releases did."""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import pytest

from gtsamples.region import CatalogError, catalog_parse, create_region, open_region
from gtsamples.region import catalog

from .conftest import (REGION_ID, assert_open_refuses, catalog_corruptions_refuse_or_read, catalog_path,
                       catalog_region, make_sst_table, set_at,
                       write_next_version)


def _v2_bytes(r, n=None) -> bytes:
    """The latest version of region ``r`` as format 2 (as catalog version ``n``)."""
    doc = catalog.copy_doc(r.catalog.read_latest()[1])
    if n is not None:
        doc["catalog_version"] = n
    return catalog_parse.encode_v2(doc)


def _next_version(tmp_path, r, edit=None, text_edit=None):
    """Version ``r.version + 1`` written as ``edit(the latest as JSON)`` (a format-2
    document as a dict) and then ``text_edit`` on its compact text."""
    doc = json.loads(_v2_bytes(r))
    assert doc["version"] == 2
    return write_next_version(tmp_path, r, doc, edit, text_edit)


def test_v2_round_trip_and_v1_still_opens(tmp_path):
    r = catalog_region(tmp_path)
    data = _v2_bytes(r, r.version + 1)
    assert json.loads(data)["version"] == 2 and b"\n " not in data  # compact, columns
    catalog_path(tmp_path, r.version + 1).write_bytes(data)
    got = open_region(tmp_path, REGION_ID)
    ssts, arts = got._doc["ssts"], got._doc["artifacts"]
    assert isinstance(ssts, catalog_parse.SstRecords) and isinstance(arts, catalog_parse.EntryRecords)
    # the records readers see are exactly the version-1 ones (the commit's own document)
    _, committed = r.catalog.read_latest()
    assert [dict(s) for s in ssts] == list(r._doc["ssts"]) and [dict(a) for a in arts] == list(r._doc["artifacts"])
    assert got.read().num_rows == 60 and [s.file_id for s in got.ssts] == [s.file_id for s in r.ssts]
    # the same version written as format 1 (as earlier releases did) opens to the same records
    v1 = catalog.copy_doc(committed)
    v1.update(version=1, catalog_version=r.version + 2)
    catalog_path(tmp_path, r.version + 2).write_text(json.dumps(v1, indent=1) + "\n")
    old = open_region(tmp_path, REGION_ID)
    assert old.version == r.version + 2 and isinstance(old._doc["ssts"], list)
    assert old._doc["ssts"] == ssts and old._doc["artifacts"] == arts
    assert old.read().num_rows == 60
    # a commit on top of a format-1 version writes format 3, its records carried over
    old.add_sst(make_sst_table(np.random.default_rng(12), rows=10))
    assert json.loads(catalog_path(tmp_path, old.version).read_bytes())["version"] == 3
    new = open_region(tmp_path, REGION_ID)
    assert list(new._doc["ssts"])[:2] == list(ssts) and new._doc["artifacts"] == arts
    assert new.read().num_rows == 70


def test_v2_optional_keys_round_trip(tmp_path):
    """An SST record without stats, one with null stats, entries without the optional keys."""
    r = catalog_region(tmp_path)
    doc = catalog.copy_doc(r.catalog.read_latest()[1])
    del doc["ssts"][0]["stats"]
    doc["ssts"][1]["stats"] = None
    for k in ("format", "version", "created_at"):
        doc["artifacts"][0].pop(k, None)
    first = next(a for a in doc["artifacts"] if a["file_id"] == doc["ssts"][0]["file_id"])
    first["objects"][-1]["path"] = "elsewhere/part-0.samples"  # not under the entry's directory
    doc["catalog_version"] = r.version + 1
    catalog_path(tmp_path, r.version + 1).write_bytes(catalog_parse.encode_v2(doc))
    got = open_region(tmp_path, REGION_ID)
    assert list(got._doc["ssts"]) == doc["ssts"] and list(got._doc["artifacts"]) == doc["artifacts"]
    assert "stats" not in got._doc["ssts"][0] and got._doc["ssts"][1]["stats"] is None
    with pytest.warns(Warning, match="elsewhere"):  # that artifact cannot serve: its SST is scanned
        assert got.read().num_rows == 30  # null stats say the SST is empty: pruned; no stats: read


@pytest.mark.parametrize("fmt", [2, 3])
def test_records_are_made_once(tmp_path, fmt):
    r = catalog_region(tmp_path, ssts=3)
    if fmt == 2:
        catalog_path(tmp_path, r.version + 1).write_bytes(_v2_bytes(r, r.version + 1))
    ssts = open_region(tmp_path, REGION_ID)._doc["ssts"]
    assert json.loads(catalog_path(tmp_path, open_region(tmp_path, REGION_ID).version).read_bytes())["version"] == fmt
    assert ssts[1] is ssts[1] and ssts[-1] is ssts[2] and ssts[0:2] == [ssts[0], ssts[1]]
    assert [id(s) for s in ssts] == [id(ssts[k]) for k in range(3)]
    assert ssts[0]["schema"] is ssts[1]["schema"]  # one schema dict, shared
    with pytest.raises(IndexError):
        ssts[3]
    assert ssts.column("file_id") == [s.file_id for s in r.ssts]
    import copy
    import pickle

    for again in (pickle.loads(pickle.dumps(ssts)), copy.deepcopy(ssts)):
        assert type(again) is type(ssts) and again == ssts and again[0] is not ssts[0]
    catalog.clear()
    ssts = open_region(tmp_path, REGION_ID)._doc["ssts"]
    got, start = [], threading.Barrier(8)

    def grab():
        start.wait()
        got.append([id(s) for s in ssts])

    ths = [threading.Thread(target=grab) for _ in range(8)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    assert len({tuple(g) for g in got}) == 1  # racing threads all got the same dicts


@pytest.mark.parametrize("edit, text_edit, match", [
    # duplicate keys: at the top, among the SST columns, among the entry columns, in a schema
    (None, lambda t: t.replace('"operation":', '"operation":"x","operation":', 1), "duplicate key 'operation'"),
    (None, lambda t: t.replace('"rows":[', '"rows":[1,1],"rows":[', 1), "duplicate key 'rows'"),
    (None, lambda t: t.replace('"generation":[', '"generation":[],"generation":[', 1), "duplicate key 'generation'"),
    (None, lambda t: t.replace('"unit":', '"unit":"second","unit":', 2), "duplicate key 'unit'"),
    # exact keys and types
    (None, lambda t: t.replace('"rows":[', '"rowz":[],"rows":[', 1), r"unknown field `rowz`.*\$\.ssts"),
    (None, lambda t: t.replace('"object_size":[', '"sizes":[],"object_size":[', 1), r"unknown field `sizes`.*artifacts"),
    (None, lambda t: t.replace('"nonce":', '"extra":1,"nonce":', 1), "unknown field `extra`"),
    (set_at(["ssts", "size", 0], 1.5), None, r"Expected `int`, got `float`.*\$\.ssts\.size\[0\]"),
    (set_at(["ssts", "rows", 1], True), None, r"Expected `int`, got `bool`.*\$\.ssts\.rows\[1\]"),
    (set_at(["artifacts", "file_id", 0], 7), None, r"Expected `str`, got `int`.*\$\.artifacts\.file_id\[0\]"),
    (lambda d: d["ssts"].pop("rows"), None, r"missing required field `rows`.*\$\.ssts"),
    (lambda d: d["artifacts"].pop("object_path"), None, r"missing required field `object_path`"),
    (set_at(["ssts"], lambda s: [dict(zip(s, v)) for v in zip(*s.values())]), None,
     "in format version 2, ssts and artifacts must be objects"),
    # the columns' rules
    (set_at(["ssts", "path"], lambda p: p + ["x"]), None, r"ssts\.path has 3 values, ssts\.file_id 2"),
    (set_at(["artifacts", "generation"], lambda g: g[:1]), None,
     r"artifacts\.generation has 1 values, artifacts\.file_id 2"),
    (set_at(["ssts", "schema", 1], 5), None, r"ssts\.schema holds 5: .* index into ssts\.schemas \(1 of them\)"),
    (set_at(["ssts", "schema", 0], -1), None, r"ssts\.schema holds -1"),
    (set_at(["ssts", "stats", 0], 2), None, r"ssts\.stats holds 2: an SST's stats code is 1"),
    (set_at(["artifacts", "objects", 0], -1), None, r"artifacts\.objects holds -1"),
    (set_at(["artifacts", "relative", 1], 2), None, r"artifacts\.relative holds 2: 1 \(the entry's object paths"),
    (set_at(["artifacts", "objects", 0], lambda c: c + 1), None, r"artifacts\.object_path has 4 values; .* counts 5"),
    (set_at(["artifacts", "object_size"], lambda s: s[:-1]), None, r"artifacts\.object_size has 3 values; .* counts 4"),
    # the rules every version has (check_doc)
    (set_at(["ssts", "file_id", 1], "not-a-file-id"), None, r"ssts\[1\]\.file_id 'not-a-file-id' is not a FileId"),
    (set_at(["ssts", "file_id"], lambda f: [f[0], f[0]]), None, "is listed twice"),
    (set_at(["format"], "other"), None, "format is 'other'"),
    (set_at(["version"], 4), None, "catalog format version 4 is not supported"),
    (set_at(["version"], 3), None, r"not a catalog version: .*Expected `object`, got `array` - at `\$\.ssts\.file_id`"),
    (set_at(["region_id"], REGION_ID + 1), None, "region_id is"),
    (set_at(["catalog_version"], 1), None, "but the file name says"),
    # not strict JSON, truncated, not UTF-8
    (None, lambda t: t.replace('"size":[', '"size":[NaN,', 1), "not strict JSON"),
    (None, lambda t: t[: len(t) // 2], "not strict JSON"),
    (None, lambda t: t + "{}", "not strict JSON"),
    (None, lambda t: t.replace('"ssts"', '"ss\udcfft"', 1), "not valid UTF-8"),
])
def test_v2_parse_is_strict(tmp_path, edit, text_edit, match):
    r = catalog_region(tmp_path)
    assert_open_refuses(tmp_path, _next_version(tmp_path, r, edit, text_edit), match)


def test_v2_corrupt_bytes_give_catalog_errors(tmp_path):
    """Any truncation or flipped byte of a version-2 document: a CatalogError or the
    same records, never another exception."""
    r = catalog_region(tmp_path)
    catalog_corruptions_refuse_or_read(_v2_bytes(r), REGION_ID, r.version, 5, 200)


def test_commit_refuses_a_document_the_columns_cannot_hold(tmp_path):
    r = catalog_region(tmp_path, ssts=1)

    def mutate(doc, n):
        doc["ssts"][0]["extra"] = 1
        return doc

    with pytest.raises(CatalogError, match="cannot be written"):
        r.catalog.commit(mutate, "test")

    def mutate_type(doc, n):
        doc["ssts"][0]["size"] = "big"
        return doc

    with pytest.raises(CatalogError, match=r"cannot be written.*\$\.ssts\.size\[0\]"):
        r.catalog.commit(mutate_type, "test")
    assert open_region(tmp_path, REGION_ID).version == r.version  # nothing written


def test_format_version_sniff():
    assert catalog_parse.format_version(b'{"format":"x","version":2,"a":1}') == 2
    assert catalog_parse.format_version(b'{\n "format": "x",\n "version": 1,\n "a": 1}') == 1
    assert catalog_parse.format_version(b'{"a": {"version": 5}, "version": 2}') == 2  # skimmed: the top level
    assert catalog_parse.format_version(b'{"version": "2"}') is None
    assert catalog_parse.format_version(b'{"version": 2') is None
    assert catalog_parse.format_version(b"\x00\xff") is None


def test_cache_lock_is_renewed_in_a_forked_child(tmp_path):
    """The version cache's lock is one of runtime's fork-safe locks: a child forked while
    the parent holds it can still open a region (and starts with an empty cache)."""
    if not hasattr(os, "fork"):  # pragma: no cover
        pytest.skip("no fork")
    catalog_region(tmp_path, ssts=1)
    open_region(tmp_path, REGION_ID)
    assert catalog.cached_versions() >= 1
    rd, w = os.pipe()
    with catalog._versions_lock:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                import signal
                import traceback

                signal.alarm(20)  # a lock inherited held would hang here
                n0 = catalog.cached_versions()
                n = open_region(tmp_path, REGION_ID).version
                os.write(w, f"{n0} {n} {catalog.cached_versions()}".encode())
            except BaseException:
                os.write(w, traceback.format_exc().encode()[-2000:])
            finally:
                os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    got = os.read(rd, 4096).decode()
    os.close(rd)
    assert len(got.split()) == 3, got
    got = got.split()
    assert got[0] == "0" and int(got[1]) >= 1 and got[2] == "1"


def test_v2_duplicate_count(tmp_path):
    """The pair count itself flags a duplicate key (not only the json hook behind it)."""
    r = catalog_region(tmp_path)
    data = _v2_bytes(r)
    doc, clean = catalog_parse.decode_v2(data)
    assert clean and catalog.copy_doc(doc) == dict(catalog.copy_doc(r.catalog.read_latest()[1]), version=2)
    for key, v in ((b'"operation":', b'"x"'), (b'"rows":', b'[]'), (b'"column_id":', b'1'),
                   (b'"object_size":', b'[]'), (b'"nonce":', b'"a:b"')):
        assert data.count(key) >= 1
        _, clean = catalog_parse.decode_v2(data.replace(key, key + v + b"," + key, 1))
        assert not clean, key
    # ':' inside strings and whitespace are not pairs
    spaced = data.replace(b'"operation":"build"', b'"operation" :  "a:b::c"')
    assert catalog_parse.decode_v2(spaced)[1]
    assert catalog_parse.decode_v2(data.replace(b"/sst/", b"/s:s:t/"))[1]


def test_plan_makes_only_the_records_it_keeps(tmp_path):
    """A plan over catalog columns prunes by the columns' statistics and makes the
    records (SST and entry) of the SSTs it keeps only; reads agree with format 1."""
    r = catalog_region(tmp_path, ssts=3)
    full = r.read()
    reg = open_region(tmp_path, REGION_ID)
    ssts, arts = reg._doc["ssts"], reg._doc["artifacts"]
    reg.VECTOR_PRUNE_SSTS = 0  # the bounds table path, as for many SSTs
    reg.VECTOR_PRUNE_SSTS_WARM = 0
    t0 = int(full.column("ts").cast("int64").to_numpy().max())
    plan = reg.plan(start=t0, end=t0 + 1)
    made_s, made_a = len(ssts.ids), len(arts.ids)
    assert 1 <= len(plan.sources) < 3 and made_s == len(plan.sources) and made_a == len(plan.sources)
    got = reg.read(start=t0, end=t0 + 1)
    v1 = catalog.copy_doc(r.catalog.read_latest()[1])
    v1.update(version=1, catalog_version=r.version + 1)
    catalog_path(tmp_path, r.version + 1).write_text(json.dumps(v1, indent=1) + "\n")
    old = open_region(tmp_path, REGION_ID)
    old.VECTOR_PRUNE_SSTS = 0
    old.VECTOR_PRUNE_SSTS_WARM = 0
    assert isinstance(old._doc["ssts"], list)
    assert [s.sst.file_id for s in old.plan(start=t0, end=t0 + 1).sources] == [s.sst.file_id for s in plan.sources]
    assert got.equals(old.read(start=t0, end=t0 + 1)) and got.num_rows >= 1
    assert reg.coverage() == old.coverage() and reg.info()["files"] == old.info()["files"]


@pytest.mark.parametrize("misfit", [False, True])
def test_column_bounds_prune_as_each_record_alone(tmp_path, monkeypatch, misfit):
    """The bounds table made from the stats columns prunes as the records tested one by
    one do, with absent (kept) and null (pruned) stats; a value that does not fit the
    table (a negative table id) leaves each SST to be tested alone."""
    from gtsamples.region import Region

    rng = np.random.default_rng(40)
    r = create_region(tmp_path, REGION_ID)
    r.replace_ssts(add=[make_sst_table(rng, rows=12, series=2, tables=(1 + k % 3,), ts_range=5 + 3 * k)
                        for k in range(40)])
    doc = catalog.copy_doc(r._doc)
    del doc["ssts"][3]["stats"]
    doc["ssts"][5]["stats"] = None
    if misfit:
        doc["ssts"][7]["stats"]["first"] = [-1, 0]
    doc["catalog_version"] = r.version + 1
    catalog_path(tmp_path, r.version + 1).write_bytes(catalog.encode_version(doc))
    reg = open_region(tmp_path, REGION_ID)
    assert isinstance(reg._doc["ssts"], catalog_parse.SstRecords)
    ids = [(int(t), int(s)) for t, s in zip(r.read()["__table_id"].to_pylist(), r.read()["__tsid"].to_pylist())]
    for q in (dict(), dict(series=[ids[0]]), dict(series=[ids[-1], ids[7]]), dict(tables=[2]),
              dict(start=20_000, end=31_000), dict(tables=[1], start=0, end=4_000), dict(series=[(9, 9)])):
        monkeypatch.setattr(Region, "VECTOR_PRUNE_SSTS", 10**9)
        monkeypatch.setattr(Region, "VECTOR_PRUNE_SSTS_WARM", 10**9)
        want = reg.plan(**q)
        monkeypatch.setattr(Region, "VECTOR_PRUNE_SSTS", 0)
        monkeypatch.setattr(Region, "VECTOR_PRUNE_SSTS_WARM", 0)
        got = reg.plan(**q)
        assert [s.ordinal for s in got.sources] == [s.ordinal for s in want.sources], q
        assert got.pruned == want.pruned, q
        if not q:
            assert 3 in [s.ordinal for s in got.sources] and 5 not in [s.ordinal for s in got.sources]
    assert (reg._state.derived("sst_bounds", lambda: "unset") is None) == misfit


GOLDEN_V1 = os.path.join(os.path.dirname(__file__), "..", "data", "catalog", "v1-3ssts-2artifacts.json")


def test_golden_v1_version_opens_and_upgrades(tmp_path):
    """A format-1 version written by the code before format 2 (3 SSTs, the first and
    last covered; tests/data/catalog) opens to its records, plans, and the next commit
    on top of it writes format 3 with the same records."""
    import shutil

    with open(GOLDEN_V1, "rb") as f:
        data = f.read()
    want = json.loads(data)
    assert want["version"] == 1 and want["catalog_version"] == 3
    os.makedirs(catalog_path(tmp_path, 3).parent)
    shutil.copy(GOLDEN_V1, catalog_path(tmp_path, 3))
    r = open_region(tmp_path, REGION_ID)
    assert r.version == 3 and isinstance(r._doc["ssts"], list)
    assert r._doc["ssts"] == want["ssts"] and r._doc["artifacts"] == want["artifacts"]
    ids = [s["file_id"] for s in want["ssts"]]
    assert [s.file_id for s in r.ssts] == ids
    assert [k for k, v in r.coverage().items() if v is not None] == [ids[0], ids[2]]
    assert [s.sst.file_id for s in r.plan(tables=[2]).sources] == [ids[1]]  # the stats prune the others
    r.replace_ssts(remove=[ids[1]])
    new = catalog_path(tmp_path, 4).read_bytes()
    assert json.loads(new)["version"] == 3
    assert list(catalog.parse_version(new, "v4")["ssts"].column("file_id")) == [ids[0], ids[2]]
    catalog.clear()
    again = open_region(tmp_path, REGION_ID)
    assert isinstance(again._doc["ssts"], catalog_parse.SstRecords)
    assert list(again._doc["ssts"]) == [want["ssts"][0], want["ssts"][2]]
    assert list(again._doc["artifacts"]) == want["artifacts"]
    assert again.schema == r.schema and again.info()["covered_ssts"] == 2


GOLDEN_V2 = os.path.join(os.path.dirname(__file__), "..", "data", "catalog", "v2-3ssts-2artifacts.json")


def test_golden_v2_version_opens_and_upgrades(tmp_path):
    """A format-2 version written by the code before format 3 (the golden format-1
    version's records, as columns) opens to the same records as format 1, and the next
    commit on top of it writes format 3 with the same records."""
    import shutil

    with open(GOLDEN_V1, "rb") as f:
        want = json.load(f)
    with open(GOLDEN_V2, "rb") as f:
        assert json.load(f)["version"] == 2
    os.makedirs(catalog_path(tmp_path, 3).parent)
    shutil.copy(GOLDEN_V2, catalog_path(tmp_path, 3))
    r = open_region(tmp_path, REGION_ID)
    assert r.version == 3 and isinstance(r._doc["ssts"], catalog_parse.SstRecords)
    assert list(r._doc["ssts"]) == want["ssts"] and list(r._doc["artifacts"]) == want["artifacts"]
    ids = [s["file_id"] for s in want["ssts"]]
    assert [k for k, v in r.coverage().items() if v is not None] == [ids[0], ids[2]]
    assert [s.sst.file_id for s in r.plan(tables=[2]).sources] == [ids[1]]
    r.replace_ssts(remove=[ids[1]])
    assert json.loads(catalog_path(tmp_path, 4).read_bytes())["version"] == 3
    catalog.clear()
    again = open_region(tmp_path, REGION_ID)
    assert list(again._doc["ssts"]) == [want["ssts"][0], want["ssts"][2]]
    assert list(again._doc["artifacts"]) == want["artifacts"]
