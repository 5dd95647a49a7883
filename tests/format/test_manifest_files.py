"""``parse_manifest`` against the reference (tests/format/manifest_reference.py:
the whole document by ``json``, then every rule object by object): the same
manifest, or the same first error with the same message, whichever way the
document is read -- plain ``json`` (small documents) or its ``files`` array
column-wise (F4, ``files_array``: forced here by ``parse.SCAN_FILES_BYTES = -1``) --
and whichever way the part rules run (row by row or column-wise); and bounded
memory.  Small ``_CHUNK`` / ``_TEMPLATE_WINDOW`` values put chunk and window
boundaries inside these small manifests.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import random
import re
import tracemalloc

import numpy as np
import pytest

import gtsamples as gs
from gtsamples.format import constants as C
from gtsamples.format import manifest as M
from gtsamples.format.manifest import files_array, parse
from gtsamples.plan import Selection

from ..test_bad_files import many_parts_manifest
from . import manifest_reference as R


def _outcome(b: bytes, parse=M.parse_manifest):
    try:
        m = parse(b)
    except gs.SamplesError as e:
        return ("error", type(e).__name__, str(e))
    return ("ok", m.region_id, m.source_file_id, m.generation, m.timestamp, m.fields, tuple(m.files),
            m.num_rows, m.num_blocks)


def _scanned(b: bytes, monkeypatch, chunk: int = 1 << 20, window: int = 1 << 14, row_by_row=None):
    """The outcome with the files array read column-wise (and the part rules run
    row by row up to ``row_by_row`` parts)."""
    with monkeypatch.context() as mp:
        mp.setattr(parse, "SCAN_FILES_BYTES", -1)
        mp.setattr(files_array, "_CHUNK", chunk)
        mp.setattr(files_array, "_TEMPLATE_WINDOW", window)
        if row_by_row is not None:
            mp.setattr(parse, "_ROW_BY_ROW", row_by_row)
        return _outcome(b)


@pytest.fixture
def compare(monkeypatch):
    """compare(bytes, chunk=..., window=...): the reference's outcome == the
    outcome with the files array read column-wise == the default outcome."""
    def run(b: bytes, chunk: int = 1 << 20, window: int = 1 << 14):
        want = _outcome(b, R.parse_manifest)
        got = _scanned(b, monkeypatch, chunk, window)
        assert got == want
        assert _outcome(b) == want
        return got
    return run


def _doc(n: int, seed: int = 0) -> dict:
    """n valid parts with varied values (big TSIDs, negative timestamps, multi-block parts)."""
    rng = random.Random(seed)
    doc = json.loads(many_parts_manifest(1))
    files, tid, tsid = [], 1, 0
    for i in range(n):
        first = (tid, tsid)
        tsid += rng.choice([0, 1, 2**60])
        if tsid > C.U64_MAX:
            tid, tsid = tid + 1, 0
        mn = rng.randrange(-2**63, 2**63 - 1000)
        blocks = rng.randint(1, 3)
        files.append({"part_id": i, "file_size": rng.choice([128, 4096, 2**40]), "num_rows": blocks * rng.randint(1, 8192),
                      "num_blocks": blocks, "first": {"table_id": first[0], "tsid": first[1]},
                      "last": {"table_id": tid, "tsid": tsid}, "min_timestamp": mn, "max_timestamp": mn + rng.randint(0, 999)})
    doc["files"] = files
    return doc


def _dump_files(doc: dict, parts_text: list[str], indent=None) -> bytes:
    d = dict(doc, files="@FILES@")
    return json.dumps(d, indent=indent).replace('"@FILES@"', "[" + ", ".join(parts_text) + "]").encode()


# --- same manifest, whatever the layout ------------------------------------------------

LAYOUTS = {
    "compact": lambda doc: json.dumps(doc, separators=(",", ":")).encode(),
    "default": lambda doc: json.dumps(doc).encode(),
    "indent-2 (writer)": lambda doc: json.dumps(doc, indent=2).encode(),
    "indent-tab-crlf": lambda doc: json.dumps(doc, indent="\t").replace("\n", "\r\n").encode(),
    "spaces-everywhere": lambda doc: json.dumps(doc, separators=(" , ", " : ")).encode(),
    "keys-reversed": lambda doc: _dump_files(doc, [json.dumps(dict(reversed(list(p.items())))) for p in doc["files"]]),
    "one-part-reordered": lambda doc: _dump_files(doc, [json.dumps(dict(reversed(list(p.items()))) if i == len(doc["files"]) // 2
                                                                   else p) for i, p in enumerate(doc["files"])]),
    "mixed-indent": lambda doc: _dump_files(doc, [json.dumps(p, indent=i % 3 or None) for i, p in enumerate(doc["files"])]),
    "escaped-part-key": lambda doc: json.dumps(doc).replace('"part_id"', '"part\\u005fid"', 3).encode(),
    "escaped-files-key": lambda doc: json.dumps(doc).replace('"files"', '"fil\\u0065s"').encode(),
    "files-first": lambda doc: json.dumps({"files": doc["files"], **{k: v for k, v in doc.items() if k != "files"}}).encode(),
    "non-ascii-name": lambda doc: json.dumps(dict(doc, timestamp=dict(doc["timestamp"], name="zeit\u00e9")),
                                             ensure_ascii=False).encode(),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("n", [1, 2, 40])
@pytest.mark.parametrize("chunk,window", [(1 << 20, 1 << 14), (64, 1 << 14), (300, 90)])
def test_layouts_give_the_same_manifest(compare, layout, n, chunk, window):
    doc = _doc(n, seed=n)
    got = compare(LAYOUTS[layout](doc), chunk, window)
    assert got[0] == "ok"
    assert [dataclasses.asdict(p) | {"first": None, "last": None} for p in got[6]] == [
        dict(p, first=None, last=None) for p in doc["files"]]
    assert [(p.first, p.last) for p in got[6]] == [((p["first"]["table_id"], p["first"]["tsid"]),
                                                    (p["last"]["table_id"], p["last"]["tsid"])) for p in doc["files"]]


def test_empty_files(compare):
    for text in ('"files": []', '"files":[ \n ]'):
        b = json.dumps(_doc(1)).replace(json.dumps({"files": _doc(1)["files"]})[1:-1], text).encode()
        assert compare(b)[6] == ()


# --- the same first error ----------------------------------------------------------------

def _late(n: int = 40, k: int = 30, indent=None):
    """A valid manifest's text and a function replacing text inside part k."""
    doc = _doc(n, seed=7)
    text = json.dumps(doc, indent=indent)
    start = text.index(f'"part_id": {k},')
    stop = text.index(f'"part_id": {k + 1},')

    def edit(old: str, new: str) -> bytes:
        i = text.index(old, start)
        assert i < stop, old
        return (text[:i] + new + text[i + len(old):]).encode()
    return doc, edit


@pytest.mark.parametrize("chunk", [1 << 20, 64, 700])
@pytest.mark.parametrize("old,new,rule", [
    ('"num_rows": ', '"num_rows": 5, "num_rows": ', r"not strict JSON: duplicate key 'num_rows'"),
    ('"tsid": ', '"tsid": 1, "tsid": ', r"not strict JSON: duplicate key 'tsid'"),
    ('"first": {', '"first": {"table_id": 1, ', r"not strict JSON: duplicate key 'table_id'"),
    ('"part_id": 30', '"part_id": 030', r"not strict JSON: Expecting ',' delimiter"),
    ('"file_size": ', '"file_size": -, "v": ', r"not strict JSON: Expecting value"),
    ('"file_size": ', '"file_size": 1-', r"not strict JSON"),
    ('"num_blocks": ', '"num_blocks": --', r"not strict JSON"),
    ('"min_timestamp": ', '"min_timestamp": NaN, "x": ', r"not strict JSON: non-standard JSON constant NaN"),
    ('"num_rows": ', '"num_rows": 1' + "0" * 5000 + ', "y": ', r"not strict JSON: Exceeds the limit"),
    ('"first": {"table_id": ', '"first": {"table_id": 1.0, "q": ', r"files\[30\].first: unknown key\(s\) 'q'"),
    ('"tsid": ', '"tsid": 1.0, "z": ', r"files\[30\].first: unknown key"),
    ('"part_id": 30', '"part_id": 30.0', r"files\[30\].part_id: expected an integer \(u32\), found float 30.0"),
    ('"part_id": 30', '"part_id": 3e1', r"files\[30\].part_id: expected an integer \(u32\), found float 30.0"),
    ('"part_id": 30', '"part_id": true', r"files\[30\].part_id: expected an integer \(u32\), found bool True"),
    ('"part_id": 30', '"part_id": -30', r"files\[30\].part_id: -30 is out of range for u32"),
    ('"part_id": 30', '"part_id": 31', r"files\[30\].part_id: part IDs start at zero and increase by one: found 31"),
    ('"first": {"table_id": ', '"first": {"table_id": "1", "tsid": 1}, "f": {"x": ', r"files\[30\]: unknown key"),
    ('"table_id": ', '"table_id": 4294967296, "x": ', r"files\[30\].first: unknown key"),
    ('"num_blocks": ', '"num_blocks": 0, "w": ', r"files\[30\]: unknown key"),
])
def test_first_error_inside_a_late_part(compare, chunk, old, new, rule):
    doc, edit = _late()
    got = compare(edit(old, new), chunk)
    assert got[0] == "error" and re.search(rule, got[2]), got


@pytest.mark.parametrize("chunk", [1 << 20, 64])
@pytest.mark.parametrize("field,value,rule", [
    ("tsid", 2**64, r"files\[30\].first.tsid: 18446744073709551616 is out of range for u64"),
    ("tsid", None, r"files\[30\].first.tsid: expected an integer \(u64\), found NoneType None"),
    ("tsid", False, r"files\[30\].first.tsid: expected an integer \(u64\), found bool False"),
    ("tsid", "1", r"files\[30\].first.tsid: expected an integer \(u64\), found str '1'"),
    ("tsid", [1], r"files\[30\].first.tsid: expected an integer \(u64\), found list \[1\]"),
    ("table_id", 2**32, r"files\[30\].first.table_id: 4294967296 is out of range for u32"),
    ("table_id", -1, r"files\[30\].first.table_id: -1 is out of range for u32"),
])
def test_wrong_value_inside_first(compare, chunk, field, value, rule):
    doc = _doc(40, seed=7)
    doc["files"][30]["first"][field] = value
    got = compare(json.dumps(doc).encode(), chunk)
    assert got[0] == "error" and re.search(rule, got[2]), got


@pytest.mark.parametrize("chunk", [1 << 20, 64])
@pytest.mark.parametrize("field,value,rule", [
    ("file_size", -1, r"files\[30\].file_size: -1 is out of range for u64"),
    ("file_size", 2**64, r"files\[30\].file_size: 18446744073709551616 is out of range"),
    ("file_size", 127, r"files\[30\].file_size: 127 is smaller than header \+ trailer"),
    ("min_timestamp", -2**63 - 1, r"files\[30\].min_timestamp: -9223372036854775809 is out of range for i64"),
    ("max_timestamp", 2**63, r"files\[30\].max_timestamp: 9223372036854775808 is out of range for i64"),
    ("num_rows", 0, r"files\[30\]: every part is nonempty"),
    ("num_blocks", 2**64 - 1, r"files\[30\]: num_blocks 18446744073709551615 exceeds num_rows"),
    ("num_rows", 3 * 8192 + 1, r"files\[30\]: num_rows 24577 exceeds num_blocks"),
])
def test_wrong_value_in_a_late_part(compare, chunk, field, value, rule):
    doc = _doc(40, seed=7)
    doc["files"][30]["num_blocks"] = 3 if field == "num_rows" else doc["files"][30]["num_blocks"]
    doc["files"][30][field] = value
    got = compare(json.dumps(doc).encode(), chunk)
    assert got[0] == "error" and re.search(rule, got[2]), got


def test_json_error_after_a_bad_part_wins(compare):
    """As for a plain parse: a later syntax error is reported before an earlier bad part."""
    doc = _doc(40, seed=7)
    doc["files"][3]["num_rows"] = 0
    for b in (json.dumps(doc).encode() + b"x", json.dumps(doc).replace('"max_timestamp": ', '"max_timestamp": 0', 39).encode()):
        got = compare(b, 64)
        assert got[0] == "error" and "not strict JSON" in got[2], got


def test_files_key_nested_before_the_top_level_one(compare):
    """The first '"files": [' in the text is not the top-level key: refused as before."""
    doc = _doc(3)
    doc["fields"][0]["files"] = doc["files"]
    got = compare(json.dumps({k: doc[k] for k in ("format", "version", "region_id", "source_file_id", "generation",
                                                  "timestamp", "fields", "files")}).encode())
    assert got[0] == "error" and re.search(r"fields\[0\]: unknown key\(s\) 'files'", got[2]), got
    got = compare(json.dumps([doc]).encode())
    assert got[0] == "error" and "top level: expected an object, found list" in got[2]
    got = compare(json.dumps(dict(doc, x={"files": doc["files"]})).encode())
    assert got[0] == "error" and "unknown key(s) 'x'" in got[2]


def test_mutations_same_outcome(compare):
    """Seeded byte-level mutations of small manifests: the same outcome and message."""
    rng = random.Random(4)
    bases = [json.dumps(_doc(n, seed=n), indent=ind).encode() for n in (1, 5, 30) for ind in (None, 2)]
    tokens = [b"0", b"-", b"01", b"1e3", b"1.0", b"true", b"null", b'"x"', b"{", b"}", b"[", b"]", b",", b":", b" ",
              b'"part_id": 1,', b"NaN", b"\\u0065", b"\xff", b"18446744073709551616", b'{"table_id": 1, "tsid": 1}']
    for _ in range(600):
        b = bytearray(rng.choice(bases))
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(b))
            op = rng.randrange(4)
            if op == 0:
                b[i:i] = rng.choice(tokens)
            elif op == 1:
                del b[i:i + rng.randint(1, 8)]
            elif op == 2 and 48 <= b[i] <= 57:
                b[i] = rng.choice(b"0123456789-")
            else:
                j = min(len(b), i + rng.randint(1, 160))
                b[j:j] = b[i:j]
        compare(bytes(b), rng.choice([1 << 20, 64, 500]), rng.choice([1 << 14, 90]))


# --- the part rules, row by row and column-wise, are the reference's per-part checks ---------

def test_part_rules_row_by_row_and_column_wise_match_the_reference(monkeypatch):
    rng = random.Random(11)
    edits = [("part_id", lambda v: v + 1), ("num_rows", lambda v: 0), ("num_blocks", lambda v: 0),
             ("num_blocks", lambda v: 10**6), ("num_rows", lambda v: v * 9000), ("file_size", lambda v: 127),
             ("min_timestamp", lambda v: 2**63 - 1), ("first", lambda v: {"table_id": 2**32 - 1, "tsid": 0}),
             ("last", lambda v: {"table_id": 0, "tsid": 0}), ("first", lambda v: {"table_id": 2**32, "tsid": 0}),
             ("part_id", lambda v: 2**32 + v), ("last", lambda v: {"table_id": 2**32, "tsid": 1})]
    errors = 0
    for _ in range(300):
        doc = _doc(rng.randint(1, 12), seed=rng.randrange(1000))
        for _ in range(rng.randint(0, 2)):
            p = rng.choice(doc["files"])
            key, f = rng.choice(edits)
            p[key] = f(p[key])
        b = json.dumps(doc).encode()
        want = _outcome(b, R.parse_manifest)
        assert _outcome(b) == want
        for row_by_row in (0, 10**6):
            assert _scanned(b, monkeypatch, 64, row_by_row=row_by_row) == want
            with monkeypatch.context() as mp:
                mp.setattr(parse, "_ROW_BY_ROW", row_by_row)
                assert _outcome(b) == want
        errors += want[0] == "error"
    assert 100 < errors < 300


# --- PartTable ---------------------------------------------------------------------------

def test_part_table_is_a_sequence_of_descriptors():
    doc = _doc(6)
    m = M.parse_manifest(json.dumps(doc).encode())
    parts = [M.PartDescriptor(p["part_id"], p["file_size"], p["num_rows"], p["num_blocks"],
                              (p["first"]["table_id"], p["first"]["tsid"]), (p["last"]["table_id"], p["last"]["tsid"]),
                              p["min_timestamp"], p["max_timestamp"]) for p in doc["files"]]
    t = m.files
    assert isinstance(t, M.PartTable) and len(t) == 6
    assert list(t) == parts and t == tuple(parts) and t == parts and tuple(parts) == t and t != parts[:5]
    assert t[0] == parts[0] and t[-1] == parts[-1] and t[np.int64(2)] == parts[2] and t[2].name == "part-2.samples"
    assert t[1:3] == parts[1:3] and isinstance(t[1:3], M.PartTable)
    assert all(type(x) is int for p in t for x in (p.part_id, p.file_size, *p.first, *p.last, p.min_timestamp))
    with pytest.raises(IndexError):
        t[6]
    assert t.column("file_size").tolist() == [p.file_size for p in parts]
    with pytest.raises(ValueError):
        t.column("file_size")[0] = 1  # read-only
    assert parts[3] in t and t.index(parts[3]) == 3
    assert M.PartTable.from_parts(parts) == t and hash(M.PartTable.from_parts(parts)) == hash(t)
    assert pickle.loads(pickle.dumps(t)) == t and pickle.loads(pickle.dumps(m)) == m
    # a Manifest built from descriptors (writer, dataclasses.replace) holds a PartTable too
    one = dataclasses.replace(m, files=(t[4],))
    assert isinstance(one.files, M.PartTable) and one.files == (parts[4],) and one.num_rows == parts[4].num_rows
    assert dataclasses.replace(m, files=()).files == () and m.num_rows == sum(p.num_rows for p in parts)
    assert m.object_keys("p/") == ["p/manifest.json"] + [f"p/part-{i}.samples" for i in range(6)]
    assert M.parse_manifest(m.to_json_bytes()) == m


def test_part_mask_is_selects():
    rng = random.Random(3)
    tids, tsids = [0, 1, 2, 255, 256, 2**32 - 1], [0, 1, 255, 256, 2**56, 2**63 - 1, 2**63, 2**64 - 1]
    for _ in range(300):
        parts = []
        for i in range(rng.randint(1, 25)):
            a, b = sorted((rng.choice(tids), rng.choice(tsids)) for _ in range(2))
            mn, mx = sorted((rng.randint(-5, 5), rng.randint(-5, 5)))
            parts.append(M.PartDescriptor(i, 200, 1, 1, a, b, mn, mx))
        t = M.PartTable.from_parts(parts)
        ids = sorted({(rng.choice(tids), rng.choice(tsids)) for _ in range(rng.randint(1, 10))})
        for sel in (Selection(), Selection(series=tuple(ids)), Selection(tables=tuple(sorted({x for x, _ in ids}))),
                    Selection(series=tuple(ids), start=rng.randint(-5, 5)), Selection(end=rng.randint(-5, 5), tables=(0,)),
                    Selection(start=rng.randint(-5, 5), end=rng.randint(-5, 5))):
            assert sel.part_mask(t).tolist() == [sel.selects(p.first, p.last, p.min_timestamp, p.max_timestamp)
                                                 for p in parts]


# --- many parts: memory proportional to the parts, not to Python objects -----------------

@pytest.mark.parametrize("variant", ["valid", "reordered-after-part-0", "last-part-invalid"])
def test_many_parts_memory(variant):
    n = 50_000
    data = many_parts_manifest(n)
    if variant == "reordered-after-part-0":
        i = data.index(b'{"part_id":1,')
        data = data[:i] + data[i:].replace(b'"min_timestamp":0,"max_timestamp":0}', b'"max_timestamp":0,"min_timestamp":0}')
    elif variant == "last-part-invalid":
        data = data.replace(b'{"part_id":%d,"file_size":128,"num_rows":1' % (n - 1),
                            b'{"part_id":%d,"file_size":128,"num_rows":0' % (n - 1))
    tracemalloc.start()
    try:
        m = M.parse_manifest(data)
        assert variant != "last-part-invalid" and len(m.files) == n and m.num_rows == n
    except gs.CorruptArtifactError as e:
        assert variant == "last-part-invalid" and f"files[{n - 1}]: every part is nonempty" in str(e)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # rows take 80 bytes a part, column checks ~40 more, a chunk's work a few MiB; per-part
    # Python objects took ~900 bytes a part (F4: a 362 MiB peak for 400k parts)
    assert peak <= n * 160 + (8 << 20), peak


# --- small manifests: every value and key mutated, against the reference ------------------------


def _paths(o, prefix=()):
    """Every key / index path of a parsed JSON document."""
    yield prefix
    if isinstance(o, dict):
        for k, v in o.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(o, list):
        for i, v in enumerate(o):
            yield from _paths(v, prefix + (i,))


def _set(doc, path, value):
    doc = json.loads(json.dumps(doc))
    o = doc
    for k in path[:-1]:
        o = o[k]
    o[path[-1]] = value
    return doc


def _small_fast_and_checked(b: bytes, monkeypatch):
    """(the default outcome, the reference's); the column-wise outcome is the reference's too."""
    want = _outcome(b, R.parse_manifest)
    assert _scanned(b, monkeypatch) == want, b[:80]
    return _outcome(b), want


def test_small_manifests_are_the_references():
    for n in (0, 1, 3):
        b = json.dumps(_doc(n, seed=n), indent=2).encode()
        assert M.parse_manifest(b) == R.parse_manifest(b)


def test_small_manifest_value_mutations_same_outcome(monkeypatch):
    """Every value of small manifests replaced by wrong types, edge and out-of-range
    values, and every key dropped, renamed or repeated: the parse accepts exactly
    what the reference accepts, and errors are the reference's."""
    values = [None, True, False, 0, 1, -1, 2, 3, 4, 16, 127, 128, C.U32_MAX, C.U32_MAX + 1, C.U64_MAX, C.U64_MAX + 1,
              C.I64_MIN, C.I64_MIN - 1, C.I64_MAX, 1.0, 1.5, "", "x", "f0", "ts", "__tsid", "__op_type", "float64",
              "millisecond", "columnar-samples", "é", "\ud800", [], {}, [1], {"table_id": 1, "tsid": 2},
              "0000000a-0000-4000-8000-00000000000b", "0000000A-0000-4000-8000-00000000000B"]
    accepted = 0
    for n in (1, 2):
        doc = _doc(n, seed=7 + n)
        doc["fields"].append({"column_id": 9, "name": "g", "type": "float64", "nullable": True})
        for path in list(_paths(doc)):
            if not path:
                continue
            for v in values:
                b = json.dumps(_set(doc, path, v)).encode()
                fast, want = _small_fast_and_checked(b, monkeypatch)
                assert fast == want, (path, v)
                accepted += fast[0] == "ok"
            parent = doc
            for k in path[:-1]:
                parent = parent[k]
            if isinstance(parent, dict):
                text = json.dumps(doc)
                key = json.dumps(path[-1])
                for new in ('"zz"', key + ": 1, " + key):  # renamed; repeated (a duplicate key)
                    b = text.replace(key, new, 1).encode()
                    fast, want = _small_fast_and_checked(b, monkeypatch)
                    assert fast == want, (path, new)
                d2 = json.loads(json.dumps(doc))
                p2 = d2
                for k in path[:-1]:
                    p2 = p2[k]
                del p2[path[-1]]
                fast, want = _small_fast_and_checked(json.dumps(d2).encode(), monkeypatch)
                assert fast == want, (path, "dropped")
    assert accepted > 20  # some replacements are valid manifests


def test_small_manifest_json_level_inputs(monkeypatch):
    base = json.dumps(_doc(2, seed=3)).encode()
    for b in (base + b" x", base + b"\n", b"\xef\xbb\xbf" + base, base.replace(b"0", b"NaN", 1),
              base.replace(b'"format"', b'"form\\u0061t"'), base.replace(b"{", b"[", 1), b"", b"[]", b"null",
              base.replace(b'"ts"', '"t\u00e9"'.encode()), base.replace(b'"ts"', b'"t\\u00e9"'),
              base.replace(b'"ts"', b'"t\\ud800"'), bytearray(base), memoryview(base), b"[" * 100000):
        fast, want = _small_fast_and_checked(b, monkeypatch)
        assert fast == want, b[:80]
