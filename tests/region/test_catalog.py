"""Catalog versions, commits, SST registration and checks."""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gtsamples as gs
from gtsamples.region import CatalogError, create_region, open_region
from gtsamples.region import catalog
from gtsamples.region.catalog import Catalog

from ..conftest import assert_tables_equal
from .conftest import REGION_ID, make_sst_table


def test_create_open_and_versions(tmp_path):
    r = create_region(tmp_path, REGION_ID)
    assert r.version == 1 and r.ssts == [] and r.artifacts == []
    with pytest.raises(FileExistsError):
        create_region(tmp_path, REGION_ID)
    assert create_region(tmp_path, REGION_ID, exist_ok=True).version == 1
    with pytest.raises(CatalogError):
        open_region(tmp_path, REGION_ID + 1)
    rng = np.random.default_rng(0)
    t = make_sst_table(rng)
    s = r.add_sst(t)
    assert r.version == 2 and [x.file_id for x in r.ssts] == [s.file_id]
    assert s.rows == t.num_rows and s.path == f"{REGION_ID}/sst/{s.file_id}.parquet"
    cat_dir = tmp_path / str(REGION_ID) / "samples" / "_catalog"
    names = sorted(os.listdir(cat_dir))
    assert names == ["v00000000000000000001.json", "v00000000000000000002.json"]
    doc = json.loads((cat_dir / names[-1]).read_text())
    # new versions are written in format version 3: the records as packed columns
    assert doc["version"] == 3 and doc["catalog_version"] == 2 and doc["ssts"]["file_id"]["text"] == s.file_id
    assert set(doc["ssts"]) == {"file_id", "path", "size", "rows", "schemas", "schema", "stats", "first_table_id",
                                "first_tsid", "last_table_id", "last_tsid", "min_timestamp", "max_timestamp"}
    assert open_region(tmp_path, REGION_ID)._doc["ssts"][0]["file_id"] == s.file_id
    # an older version stays readable (time travel) and unchanged
    assert r.checkout(1).ssts == []
    assert open_region(tmp_path, REGION_ID, version=1).ssts == []
    assert open_region(tmp_path, REGION_ID).version == 2
    assert r.checkout(np.int64(2)).version == 2



def test_region_constructed_directly_opens_the_latest_version(tmp_path):
    """``gs.Region(root, id)`` is ``open_region``: before, it was an empty version 0 whose
    reads returned no rows, silently, whatever the region held."""
    with pytest.raises(CatalogError, match=rf"region {REGION_ID} has no catalog"):
        gs.Region(tmp_path, REGION_ID)
    r = create_region(tmp_path, REGION_ID)
    t = make_sst_table(np.random.default_rng(1))
    r.add_sst(t)
    direct = gs.Region(os.fspath(tmp_path), REGION_ID)
    assert direct.version == 2 and len(direct.ssts) == 1
    assert_tables_equal(direct.read(), open_region(tmp_path, REGION_ID).read())
    assert direct.read().num_rows == t.num_rows
    with pytest.raises(ValueError, match="is not a u64"):
        gs.Region(tmp_path, -1)



def test_a_file_where_the_region_belongs_has_no_catalog(tmp_path):
    """A local file at the root (or on the catalog's path) holds no region, as an object
    store lists nothing under an object's name: was 'cannot list the catalog: [Errno 20]
    Not a directory'."""
    f = tmp_path / "file"
    f.write_bytes(b"x")
    for root in (f, f / "deeper"):
        with pytest.raises(CatalogError, match=rf"region {REGION_ID} has no catalog$"):
            open_region(root, REGION_ID)
    store = gs.storage.Store(f)
    assert store.list("a/b") == [] and store.names("a/b") == [] and store.list("") == [] and store.names("") == []


def test_region_root_and_cache_are_checked_as_open_artifact_checks_them(tmp_path):
    """The same checks as open_artifact's (storage.root_arg, cache.cache_arg): a bytes root
    raised "a bytes-like object is required, not 'str'", and a cache that is not a PageCache
    was taken, to fail at the first read with "'str' object has no attribute 'get_many'"."""
    create_region(tmp_path, REGION_ID)
    assert open_region(os.fsencode(tmp_path), REGION_ID).version == 1
    with pytest.raises(TypeError, match=r"^root: expected a path or URL string, found int$"):
        open_region(5, REGION_ID)
    for fn in (open_region, create_region, gs.Region):
        with pytest.raises(TypeError, match=r"^cache must be a gtsamples.cache.PageCache or None, not str 'x'$"):
            fn(tmp_path, REGION_ID, cache="x")

@pytest.mark.parametrize("rid", [float(REGION_ID), str(REGION_ID), True, np.timedelta64(REGION_ID, "ns"), None])
def test_region_id_that_is_not_an_integer_is_refused(tmp_path, rid):
    """int() read a float or a string of digits as the region (5.7 opened region 5), True as 1."""
    create_region(tmp_path, REGION_ID)
    for fn in (open_region, create_region, gs.Region):
        with pytest.raises(TypeError, match=r"^region_id must be an integer \(a u64\), not "):
            fn(tmp_path, rid)
    assert open_region(tmp_path, np.uint64(REGION_ID)).region_id == REGION_ID

@pytest.mark.parametrize("version,cls,match", [
    (0, ValueError, "version must be a positive integer \\(a catalog version number\\), not 0"),
    (-1, ValueError, "not -1"),  # before: a CatalogError naming the key v-0000000000000000001.json
    (1.5, TypeError, "not float 1.5"),  # before: int() read version 1
    ("2", TypeError, "not str '2'"),
    (True, TypeError, "not bool True"),
    (np.timedelta64(1, "ns"), TypeError, "not timedelta64 "),  # before: version 1
])
def test_a_version_that_is_not_a_positive_integer_is_refused(tmp_path, version, cls, match):
    r = create_region(tmp_path, REGION_ID)
    r.add_sst(make_sst_table(np.random.default_rng(0)))
    with pytest.raises(cls, match=match):
        r.checkout(version)
    with pytest.raises(cls, match=match):
        open_region(tmp_path, REGION_ID, version=version)


@pytest.fixture
def parsed_versions(monkeypatch):
    """The version numbers the catalog reads and parses (not served by the cache), in order."""
    seen = []
    orig = Catalog._read_and_parse

    def spy(self, n, stats=None):
        seen.append(n)
        return orig(self, n, stats)

    monkeypatch.setattr(Catalog, "_read_and_parse", spy)
    return seen


def test_open_reads_only_the_latest_version(tmp_path, parsed_versions):
    r = create_region(tmp_path, REGION_ID)
    rng = np.random.default_rng(1)
    for _ in range(4):
        r.add_sst(make_sst_table(rng, rows=20))
    seen = parsed_versions
    seen.clear()  # (the commits above read versions too)
    r2 = open_region(tmp_path, REGION_ID)
    assert seen == [5] and r2.version == 5 and len(r2.ssts) == 4
    # the version is immutable: parsed once per process, its memos shared by every reader
    r3 = open_region(tmp_path, REGION_ID)
    assert seen == [5] and r3._doc is r2._doc and r3._state is r2._state
    catalog.clear()
    assert catalog.cached_versions() == 0
    assert open_region(tmp_path, REGION_ID).version == 5 and seen == [5, 5]


def test_concurrent_commits_lose_nothing(tmp_path):
    create_region(tmp_path, REGION_ID)
    rng = np.random.default_rng(2)
    tables = [make_sst_table(rng, rows=30) for _ in range(8)]
    errors = []

    def add(t):
        try:
            open_region(tmp_path, REGION_ID).add_sst(t)  # each thread its own Region
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=add, args=(t,)) for t in tables]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    r = open_region(tmp_path, REGION_ID)
    assert r.version == 9 and len(r.ssts) == 8
    assert sorted(s.rows for s in r.ssts) == sorted(t.num_rows for t in tables)
    # every version is a complete document, each one adding exactly one SST
    for n in range(1, 10):
        assert len(r.checkout(n).ssts) == n - 1


def test_add_existing_parquet_and_checks(tmp_path):
    r = create_region(tmp_path / "store", REGION_ID)
    rng = np.random.default_rng(3)
    t = make_sst_table(rng)
    fid = "0b0d9f5e-8a0c-4e7e-9d55-1f2b3c4d5e6f"
    src = tmp_path / f"{fid}.parquet"
    pq.write_table(t, src, row_group_size=37)
    s = r.add_sst(str(src))
    assert s.file_id == fid and s.path == str(src) and s.rows == t.num_rows
    assert_tables_equal(r.read(), t.cast(r.arrow_schema()))
    # the region schema is fixed by the first SST
    with pytest.raises(gs.SamplesError, match="schema"):
        r.add_sst(t.drop(["w"]))
    with pytest.raises(gs.SamplesError, match="must be"):
        r.add_sst(t.set_column(0, "__table_id", pa.array(t["__table_id"].to_numpy().astype(np.int64))))
    # row order: a swapped pair is rejected with the offending rows named
    bad = pa.concat_tables([t.slice(1, 1), t.slice(0, 1), t.slice(2)])
    if bad.slice(0, 2).equals(t.slice(0, 2)):  # pragma: no cover - identical rows
        return
    with pytest.raises(gs.SamplesError, match="spec order"):
        r.add_sst(bad)
    # the same file_id twice
    with pytest.raises(CatalogError, match="already"):
        r.add_sst(str(src))
    assert len(r.ssts) == 1


def test_bad_op_type_and_nulls_rejected(tmp_path):
    r = create_region(tmp_path, REGION_ID)
    t = make_sst_table(np.random.default_rng(4), rows=10)
    op = t["__op_type"].to_numpy().copy()
    op[3] = 2
    with pytest.raises(gs.SamplesError, match="__op_type"):
        r.add_sst(t.set_column(4, "__op_type", pa.array(op)))
    seq = pa.array(t["__sequence"].to_pylist()[:-1] + [None], pa.uint64())
    with pytest.raises(gs.SamplesError, match="null"):
        r.add_sst(t.set_column(3, "__sequence", seq))


def test_column_ids_from_metadata_and_schema_arg(tmp_path):
    t = make_sst_table(np.random.default_rng(5), rows=10)
    sch = pa.schema([f.with_metadata({b"column_id": str(i + 10).encode()}) for i, f in enumerate(t.schema)])
    r = create_region(tmp_path, REGION_ID, schema=sch)
    assert r.schema.ts_column_id == 12 and r.schema.fields == (("v", 15), ("w", 16))
    r.add_sst(t)  # no metadata: IDs taken from the region schema by name
    es = r.build()
    art = gs.open_artifact(tmp_path, entry=es[0])
    assert [f.column_id for f in art.manifest.fields] == [15, 16] and art.manifest.timestamp.column_id == 12


def test_empty_region_and_empty_sst(tmp_path):
    r = create_region(tmp_path, REGION_ID)
    assert r.read().num_rows == 0
    t = make_sst_table(np.random.default_rng(6), rows=10)
    r.add_sst(t.slice(0, 0))
    assert r.read().num_rows == 0 and r.read().schema == r.arrow_schema()
    r.build()
    assert r.read(dedup=True).num_rows == 0


def _corrupt_next_version(tmp_path, edit, format_version=1):
    """A built region whose next catalog version is ``edit(text of the latest)``, the
    latest written in ``format_version`` (1: as today's code wrote it, JSON records)."""
    r = create_region(tmp_path, REGION_ID)
    r.add_sst(make_sst_table(np.random.default_rng(7), rows=30))
    r.build()
    d = tmp_path / str(REGION_ID) / "samples" / "_catalog"
    if format_version == 1:
        doc = catalog.copy_doc(r.catalog.read_version(r.version))
        doc["version"] = 1
        text = json.dumps(doc, indent=1) + "\n"
    else:
        text = (d / f"v{r.version:020d}.json").read_text()
    text = text.replace(f'"catalog_version":{r.version}', f'"catalog_version":{r.version + 1}')
    text = text.replace(f'"catalog_version": {r.version}', f'"catalog_version": {r.version + 1}')
    (d / f"v{r.version + 1:020d}.json").write_text(edit(text))
    return r.version + 1


@pytest.mark.parametrize("edit, match", [
    # duplicate keys, wherever they are (top level, SST record, its stats, its schema, an entry, its objects)
    (lambda t: t.replace('"operation":', '"operation": "x", "operation":', 1), "duplicate key 'operation'"),
    (lambda t: t.replace('"rows":', '"rows": 1, "rows":', 1), "duplicate key 'rows'"),
    (lambda t: t.replace('"min_timestamp":', '"min_timestamp": 0, "min_timestamp":', 1), "duplicate key 'min_timestamp'"),
    (lambda t: t.replace('"unit":', '"unit": "second", "unit":', 2), "duplicate key 'unit'"),
    (lambda t: t.replace('"generation":', '"generation": "x", "generation":', 1), "duplicate key 'generation'"),
    (lambda t: t.replace('"file_size":', '"file_size": 1, "file_size":', 1), "duplicate key 'file_size'"),
    # the same key spelled with an escape is the same key
    (lambda t: t.replace('"size":', '"s\\u0069ze": 1, "size":', 1), "duplicate key 'size'"),
    # exact keys and types
    (lambda t: t.replace('"rows":', '"rowz": 1, "rows":', 1), r"unknown field `rowz`.*ssts\[0\]"),
    (lambda t: t.replace('"generation":', '"gen": 1, "generation":', 1), r"unknown field `gen`.*artifacts\[0\]"),
    (lambda t: t.replace('"size": ', '"size": 1.5, "x": ', 1), r"ssts\[0\]"),
    (lambda t: t.replace('"rows": ', '"rows": true, "y": ', 1), r"ssts\[0\]"),
    (lambda t: t.replace('"first": [', '"first": [1, ', 1), r"stats.first"),
    (lambda t: t.replace('"ssts":', '"sstz": [], "ssts":', 1), "sstz"),
    # the reference path's own messages
    (lambda t: t.replace('"file_size":', '"file_size": NaN, "x":', 1), "not strict JSON"),
    (lambda t: "\ufeff" + t, "BOM"),
    (lambda t: t + "{}", "not strict JSON"),
    (lambda t: t.replace('"version": 1', '"version": 4', 1), "not supported"),
    # check_doc's rules, each with its message, through the compiled parse
    (lambda t: t.replace('"gtsamples-region-catalog"', '"other"', 1), "format is 'other'"),
    (lambda t: t.replace('"operation": "build",', '', 1), "missing key.*operation"),
    (lambda t: t.replace(f'"region_id": {REGION_ID}', f'"region_id": {REGION_ID + 1}', 1), "region_id is"),
    (lambda t: t.replace('"catalog_version": ', '"catalog_version": 1', 1), "but the file name says"),
    (lambda t: t.replace('"ssts": [', '"ssts": {"x": [', 1).replace('\n ],\n "artifacts"', '\n ]},\n "artifacts"', 1),
     "ssts and artifacts must be arrays"),
    (lambda t: t.replace('"rows": ', '"x": ', 1), "ssts\\[0\\] must have file_id, path, size, rows and schema"),
    (lambda t: t.replace('"file_id": "', '"file_id": "X', 1), "is not a FileId"),
    (lambda t: t.replace('"ssts": [', '"ssts": [' + t[t.index('"ssts": [') + 9:t.index('"artifacts"')].rsplit("]", 1)[0].strip().rstrip(",") + ",", 1),
     "is listed twice"),
    (lambda t: t.replace('"rows":', '"x": 1, "rows":', 1).replace('"version": 1', '"version": 4', 1), "not supported"),
])
def test_catalog_parse_is_strict(tmp_path, edit, match):
    n = _corrupt_next_version(tmp_path, edit)
    with pytest.raises(CatalogError, match=match) as ei:
        open_region(tmp_path, REGION_ID)
    assert f"v{n:020d}.json" in str(ei.value)


def test_catalog_parse_equals_json(tmp_path):
    """The compiled parse gives exactly json's document, escapes and all."""
    n = _corrupt_next_version(tmp_path, lambda t: t.replace('"operation": "build"', '"operation": "b\\u00fcild"'))
    path = tmp_path / str(REGION_ID) / "samples" / "_catalog" / f"v{n:020d}.json"
    data = path.read_bytes()
    assert catalog.parse_version(data, "v") == json.loads(data)
    r = open_region(tmp_path, REGION_ID)
    assert r.version == n and r._doc["operation"] == "büild" and r.read().num_rows == 30


def test_version_cache_is_shared_bounded_and_thread_safe(tmp_path, monkeypatch, parsed_versions):
    r = create_region(tmp_path, REGION_ID)
    r.add_sst(make_sst_table(np.random.default_rng(8), rows=20))
    catalog.clear()
    reads = parsed_versions
    reads.clear()
    got, errors = [], []

    def opener():
        try:
            got.append(open_region(tmp_path, REGION_ID)._state)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ths = [threading.Thread(target=opener) for _ in range(8)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    assert not errors and len({id(s) for s in got}) == 1  # one parsed version kept, shared
    monkeypatch.setattr(catalog, "MAX_CACHED_VERSIONS", 1)
    open_region(tmp_path, REGION_ID, version=1)
    assert catalog.cached_versions() == 1
    n = len(reads)
    open_region(tmp_path, REGION_ID)  # evicted by version 1: read again
    assert len(reads) == n + 1
    # an expired (deleted) version leaves the cache too
    monkeypatch.setattr(catalog, "MAX_CACHED_VERSIONS", 64)
    r.checkout(1)
    assert catalog.cached_versions() == 2
    r.catalog.delete_version(1)
    assert catalog.cached_versions() == 1
    with pytest.raises(CatalogError):
        r.checkout(1)


def test_region_recreated_at_the_same_root_is_not_served_from_the_cache(tmp_path):
    """A region deleted and created again numbers its versions from 1 again: the cache
    must tell the new version 1 from the old one (a stale hit would return the old
    region's SSTs)."""
    import shutil

    r = create_region(tmp_path, REGION_ID)
    r.add_sst(make_sst_table(np.random.default_rng(3), rows=20))
    first = open_region(tmp_path, REGION_ID)
    assert first.read().num_rows == 20
    shutil.rmtree(tmp_path / str(REGION_ID))
    r = create_region(tmp_path, REGION_ID)
    r.add_sst(make_sst_table(np.random.default_rng(4), rows=30))
    again = open_region(tmp_path, REGION_ID)
    assert again.version == first.version
    assert again.read().num_rows == 30


def test_region_recreated_at_the_same_fsspec_root_is_not_served_from_the_cache():
    """The same on an fsspec store (``memory://``): no cheap identity there, so the catalog
    listing every open makes tells the versions apart (here by their creation time)."""
    import uuid

    import fsspec

    root = f"memory://gts-recreated-{uuid.uuid4().hex}"
    r = create_region(root, REGION_ID)
    r.add_sst(make_sst_table(np.random.default_rng(5), rows=20))
    first = open_region(root, REGION_ID)
    assert first.read().num_rows == 20
    try:
        fsspec.filesystem("memory").rm(root.removeprefix("memory://"), recursive=True)
        r = create_region(root, REGION_ID)
        r.add_sst(make_sst_table(np.random.default_rng(6), rows=30))
        again = open_region(root, REGION_ID)
        assert again.version == first.version
        assert again.read().num_rows == 30
    finally:
        fsspec.filesystem("memory").rm(root.removeprefix("memory://"), recursive=True)


def test_forked_child_starts_with_an_empty_version_cache(tmp_path):
    if not hasattr(os, "fork"):  # pragma: no cover
        pytest.skip("no fork")
    create_region(tmp_path, REGION_ID)
    assert catalog.cached_versions() >= 0
    open_region(tmp_path, REGION_ID)
    assert catalog.cached_versions() >= 1
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.write(w, str(catalog.cached_versions()).encode())
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    assert os.read(r, 16) == b"0"
    os.close(r)


def test_compiled_duplicate_count(tmp_path):
    """The pair count itself flags a duplicate (not only the json hook behind it)."""
    from gtsamples.region import catalog_parse

    n = _corrupt_next_version(tmp_path, lambda t: t)
    data = (tmp_path / str(REGION_ID) / "samples" / "_catalog" / f"v{n:020d}.json").read_bytes()
    doc, clean = catalog_parse.decode(data)
    assert clean and doc == json.loads(data)
    for key, v in ((b'"rows":', b'1'), (b'"path":', b'"p"'), (b'"column_id":', b'1'), (b'"max_timestamp":', b'1')):
        doc, clean = catalog_parse.decode(data.replace(key, key + v + b', ' + key, 1))
        assert not clean, key
    # in an SST record's schema (decoded once per distinct text, its keys counted alone)
    k = data.index(b'"ssts"')
    for key, v in ((b'"unit":', b'"second"'), (b'"column_id":', b'7')):
        bad = data[:k] + data[k:].replace(key, key + v + b', ' + key, 1)
        doc, clean = catalog_parse.decode(bad)
        assert not clean, key
    with pytest.raises(catalog_parse.ParseRefused, match="schema"):
        catalog_parse.decode(data[:k] + data[k:].replace(b'"unit":', b'"unit": 1, "u":', 1))
    # a ':' inside a string is not a pair
    assert catalog_parse.decode(data.replace(b'"operation": "build"', b'"operation": "a:b{c}"'))[1]


def _count_listings(monkeypatch):
    from gtsamples.storage import LocalStore

    listings = []
    names = LocalStore.names

    def counted(self, key):
        listings.append(key)
        return names(self, key)

    monkeypatch.setattr(LocalStore, "names", counted)
    return listings


def test_reopen_does_not_list_unless_a_newer_version_may_exist(tmp_path, monkeypatch):
    """A reopen on a local store checks the version it saw last and the next number
    (two stats) instead of listing; a version written meanwhile by another writer
    makes it list, and is the one opened."""
    r = create_region(tmp_path, REGION_ID)
    r.add_sst(make_sst_table(np.random.default_rng(11), rows=20))
    catalog.clear()
    listings = _count_listings(monkeypatch)
    assert open_region(tmp_path, REGION_ID).version == 2 and len(listings) == 1
    for _ in range(3):
        assert open_region(tmp_path, REGION_ID).version == 2
    assert len(listings) == 1
    # another writer (its own Catalog object, as another process has) commits version 3
    other = Catalog(open_region(tmp_path, REGION_ID).store, REGION_ID)
    n, _doc = other.commit(lambda doc, n: doc, "noop")
    assert n == 3
    again = open_region(tmp_path, REGION_ID)
    assert again.version == 3 and again.read().num_rows == 20
    assert listings.count(listings[0]) >= 2  # the new version was found by a listing
    # a version file that appears without going through this process is found too
    d = tmp_path / str(REGION_ID) / "samples" / "_catalog"
    text = (d / f"v{3:020d}.json").read_text()
    (d / f"v{4:020d}.json").write_text(text.replace('"catalog_version":3', '"catalog_version":4')
                                       .replace('"catalog_version": 3', '"catalog_version": 4'))
    assert open_region(tmp_path, REGION_ID).version == 4


def test_reopen_after_the_region_is_recreated_with_more_versions(tmp_path):
    """The version seen last (2) exists again in a recreated region, but as another file,
    and is no longer the newest: the reopen lists and opens version 3."""
    import shutil

    r = create_region(tmp_path, REGION_ID)
    r.add_sst(make_sst_table(np.random.default_rng(3), rows=20))
    assert open_region(tmp_path, REGION_ID).version == 2
    shutil.rmtree(tmp_path / str(REGION_ID))
    r = create_region(tmp_path, REGION_ID)
    r.add_sst(make_sst_table(np.random.default_rng(4), rows=30))
    r.add_sst(make_sst_table(np.random.default_rng(5), rows=40))
    again = open_region(tmp_path, REGION_ID)
    assert again.version == 3 and again.read().num_rows == 70


def test_reopen_after_older_versions_expire(tmp_path, monkeypatch):
    """Expiry removes older versions, never the newest: the reopen still finds the
    newest without listing."""
    r = create_region(tmp_path, REGION_ID)
    r.add_sst(make_sst_table(np.random.default_rng(6), rows=20))
    r.add_sst(make_sst_table(np.random.default_rng(7), rows=20))
    assert open_region(tmp_path, REGION_ID).version == 3
    r.catalog.delete_version(1)
    r.catalog.delete_version(2)
    listings = _count_listings(monkeypatch)
    again = open_region(tmp_path, REGION_ID)
    assert again.version == 3 and again.read().num_rows == 40 and not listings


def test_expiry_never_removes_a_newer_version_before_an_older(tmp_path):
    """Writers' clocks may disagree: a version stamped earlier than the one before it is
    kept while that one is, so the versions left are always the newest ones (which a
    reopen's check of the next number relies on)."""
    import re

    r = create_region(tmp_path, REGION_ID)
    for seed in (1, 2, 3):
        r.add_sst(make_sst_table(np.random.default_rng(seed), rows=10))
    assert r.versions() == [1, 2, 3, 4]
    d = tmp_path / str(REGION_ID) / "samples" / "_catalog"
    stamps = {1: "2020-01-01", 2: "2999-01-01", 3: "2020-01-02"}  # v2: a writer whose clock runs ahead
    for n, day in stamps.items():
        p = d / f"v{n:020d}.json"
        text, k = re.subn(r'"created_at": ?"[^"]*"', f'"created_at":"{day}T00:00:00.000000Z"', p.read_text())
        assert k == 1
        p.write_text(text)
    catalog.clear()
    out = r.gc(grace_seconds=0, expire_versions=True)
    assert out["expired_versions"] == [1] and r.versions() == [2, 3, 4]
    assert open_region(tmp_path, REGION_ID).version == 4
