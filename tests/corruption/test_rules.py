"""One corruption case per rule of columnar-samples v1 (table-driven).

Every case starts from a small valid artifact written by our writer (module
fixtures), breaks exactly one rule through the structural model in
``kit.py`` (which re-fixes checksums, sizes, offsets, bounds, the trailer,
the manifest and the catalog entry), and asserts the exact error class, a
message naming the rule and, for decode-stage cases, ``err.flags``.  A case
with ``err=None`` is a boundary that must still read (and equal the input).

Stages: ``open`` (manifest / catalog entry: ``open_artifact``), ``meta``
(header, trailer, references, pages, descriptors: ``read``, ``validate`` and
``inspect`` all raise), ``decode`` (chunk payloads: ``read`` and
``validate`` raise with flags; ``inspect`` decodes no payload and passes).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import struct
from typing import Any, Callable

import pyarrow as pa
import pytest
import zstandard

import gtsamples as gs
from gtsamples.cache import PageCache
from gtsamples.errors import DecodeErrorFlag as F
from gtsamples.format import constants as C

from ..conftest import assert_tables_equal
from . import kit
from .fixtures import FIXTURES, write_fixture
from .kit import Column, Internal

CORRUPT = gs.CorruptArtifactError
UNSUPPORTED = gs.UnsupportedError
MISMATCH = gs.CatalogMismatchError
I64_MAX = C.I64_MAX
U64_MAX = C.U64_MAX


# =============================================================================
# fixtures and the runner
# =============================================================================


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """name -> (input table, store root, entry dict) of each valid fixture artifact."""
    out = {}
    for name in FIXTURES:
        root = tmp_path_factory.mktemp(f"fixture-{name}")
        table, entry = write_fixture(name, root)
        out[name] = (table, str(root), entry)
    return out


@dataclasses.dataclass
class Case:
    id: str
    fixture: str
    mutate: Callable[[kit.ArtifactModel], Any]
    err: Any  # exception class, tuple of classes, or None (must read fine)
    match: str = ""
    stage: str = "meta"
    flags: F | None = None
    read_kw: dict = dataclasses.field(default_factory=dict)
    gen_dir: bool = False  # open the generation directory (no catalog entry)
    same: bool = True  # err=None: the read equals the fixture's input table


CASES: list[Case] = []


def add(id, fixture, mutate, err, match="", stage="meta", flags=None, read_kw=None, gen_dir=False, same=True):
    CASES.append(Case(id, fixture, mutate, err, match, stage, flags, read_kw or {}, gen_dir, same))


def opener(root, entry, gen_dir_path, gen_dir):
    if gen_dir:
        return lambda: gs.open_artifact(gen_dir_path, cache=PageCache())
    return lambda: gs.open_artifact(root, entry=entry, cache=PageCache())


OPS = {
    "open": ("open",),
    "meta": ("read", "validate", "inspect"),
    "decode": ("read", "validate"),
}


def run_op(op, open_fn, read_kw):
    if op == "open":
        return open_fn()
    art = open_fn()
    if op == "read":
        return art.read(**read_kw)
    if op == "validate":
        return art.validate()
    return art.inspect()


def check_error(e: BaseException, case: Case) -> None:
    allowed = case.err if isinstance(case.err, tuple) else (case.err,)
    assert type(e) in allowed, f"{case.id}: raised {type(e).__name__}: {e}; expected exactly {allowed}"
    assert re.search(case.match, str(e), re.S), f"{case.id}: message {str(e)!r} does not match {case.match!r}"
    if case.flags is not None:
        assert getattr(e, "flags", None) == case.flags, f"{case.id}: flags {getattr(e, 'flags', None)!r}, expected {case.flags!r}"
    elif case.stage == "decode":
        assert getattr(e, "flags", F.NONE) != F.NONE


def build(case: Case, written, tmp_path):
    table, root, entry = written[case.fixture]
    m = kit.ArtifactModel.load(root, entry)
    case.mutate(m)
    out_root, out_entry = m.write(tmp_path / "store")
    return table, out_root, out_entry, m.generation_dir(out_root)


# =============================================================================
# model helpers
# =============================================================================


def blk(m, p, b):
    return m.parts[p].blocks()[b]


def leaf(m, p, k):
    return m.parts[p].leaves()[k]


def set_enc(c: Column, b: bytes, encoding: int | None = None) -> None:
    """New encoded bytes, stored raw."""
    c.encoded, c.compression, c.stored = bytes(b), C.COMP_RAW, None
    if encoding is not None:
        c.encoding = encoding


def man(fn):
    """A manifest mutation (in place)."""
    def mutate(m):
        m.on_manifest = fn
    return mutate


def ent(fn):
    def mutate(m):
        m.on_entry = fn
    return mutate


def seq(*fns):
    def mutate(m):
        for f in fns:
            f(m)
    return mutate


def setattrs(get, **kw):
    def mutate(m):
        obj = get(m)
        for k, v in kw.items():
            setattr(obj, k, v)
    return mutate


def colref(get, **kw):
    def mutate(m):
        get(m).ref.update(kw)
    return mutate


def pageref(get, **kw):
    def mutate(m):
        get(m).ref.update(kw)
    return mutate


def trailer(part, **kw):
    def mutate(m):
        m.parts[part].trailer.update(kw)
    return mutate


def col(p, b, role, cid=None):
    return lambda m: blk(m, p, b).col(role, cid)


def field(p, b, cid):
    return lambda m: blk(m, p, b).field(cid)


def encoded(get, fn, encoding=None):
    def mutate(m):
        c = get(m)
        set_enc(c, fn(c.encoded), encoding)
    return mutate


def root_of(p):
    return lambda m: m.parts[p].root


def child(p, k):
    return lambda m: m.parts[p].root.children[k]


TS, SEQ, OP, FLD = C.ROLE_TIMESTAMP, C.ROLE_SEQUENCE, C.ROLE_OP_TYPE, C.ROLE_FIELD
FIXED5 = ["__table_id", "__tsid", "ts", "__sequence", "__op_type"]

# multi fixture map (see fixtures.multi_table; verified by test_fixture_shapes):
#   part 0 (depth 2): leaf 0 [b0 (1,5)#0, b1 (1,5)#1]  leaf 1 [b2 #2, b3 #3]  leaf 2 [b4 (1,5)#4, b5 (1,6)#0]
#   part 1 (depth 2): leaf 0 [b0 (1,6)#1, b1 (2,5)#0]  leaf 1 [b2 (2,5)#1, b3 (2,5)#2]
#                     leaf 2 [b4 (3,1)#0, b5 (4,1)#0]
#   part 2 (depth 1): leaf 0 [b0 (4,1)#1]
# flat fixture: one leaf [(1,1)#0, (1,2)#0, (1,2)#1, (2,1)#0, (2,2)#0, (3,1)#0], field 7 only.


# =============================================================================
# manifest (stage "open")
# =============================================================================


def _set(path, value):
    """Manifest mutation: set obj[path...] = value."""
    def fn(d):
        o = d
        for k in path[:-1]:
            o = o[k]
        o[path[-1]] = value
    return man(fn)


def _del(path):
    def fn(d):
        o = d
        for k in path[:-1]:
            o = o[k]
        del o[path[-1]]
    return man(fn)


def _text(fn):
    """Manifest mutation on the serialised text (strict-JSON cases)."""
    return man(lambda d: fn((json.dumps(d, indent=1) + "\n")))


def _fields(n):
    return man(lambda d: d.__setitem__("fields", [
        {"column_id": 100 + i, "name": f"x{i}", "type": "float64", "nullable": True} for i in range(n)]))


for cid, path, value, err, match in [
    ("format", ["format"], "columnar-series", CORRUPT, r"format.*columnar-samples"),
    ("version-2", ["version"], 2, UNSUPPORTED, r"version 2 is not supported"),
    ("version-0", ["version"], 0, UNSUPPORTED, r"version 0 is not supported"),
    ("version-string", ["version"], "1", CORRUPT, r"version.*integer"),
    ("version-float", ["version"], 1.0, CORRUPT, r"version.*integer"),
    ("version-bool", ["version"], True, CORRUPT, r"version.*integer"),
    ("region-string", ["region_id"], "4398046511111", CORRUPT, r"region_id.*integer"),
    ("region-negative", ["region_id"], -1, CORRUPT, r"region_id.*out of range"),
    ("region-u64-overflow", ["region_id"], 1 << 64, CORRUPT, r"region_id.*out of range"),
    ("region-float", ["region_id"], 4398046511111.0, CORRUPT, r"region_id.*integer"),
    ("region-bool", ["region_id"], True, CORRUPT, r"region_id.*integer"),
    ("file-id-uppercase", ["source_file_id"], "5A3C0000-0000-4000-8000-00000000C001", CORRUPT, r"source_file_id.*FileId"),
    ("file-id-no-hyphens", ["source_file_id"], "5a3c0000000040008000" + "00000000c001", CORRUPT, r"source_file_id.*FileId"),
    ("file-id-braces", ["source_file_id"], "{5a3c0000-0000-4000-8000-00000000c001}", CORRUPT, r"source_file_id.*FileId"),
    ("file-id-int", ["source_file_id"], 5, CORRUPT, r"source_file_id.*string"),
    ("generation-short", ["generation"], "5a3c0000-0000-4000-8000-00000000c00", CORRUPT, r"generation.*FileId"),
    ("generation-null", ["generation"], None, CORRUPT, r"generation.*string"),
    ("ts-unit-unknown", ["timestamp", "unit"], "minute", CORRUPT, r"timestamp.unit.*minute"),
    ("ts-unit-arrow-spelling", ["timestamp", "unit"], "ms", CORRUPT, r"timestamp.unit"),
    ("ts-column-id-u32-overflow", ["timestamp", "column_id"], 1 << 32, CORRUPT, r"timestamp.column_id.*out of range"),
    ("ts-column-id-negative", ["timestamp", "column_id"], -1, CORRUPT, r"timestamp.column_id.*out of range"),
    ("ts-name-not-string", ["timestamp", "name"], 3, CORRUPT, r"timestamp.name.*string"),
    ("ts-name-empty", ["timestamp", "name"], "", CORRUPT, r"timestamp.name.*nonempty"),
    ("ts-extra-key", ["timestamp", "tz"], "UTC", CORRUPT, r"timestamp.*unknown key"),
    ("field-type", ["fields", 0, "type"], "float32", CORRUPT, r"fields\[0\].type.*float64"),
    ("field-nullable-false", ["fields", 0, "nullable"], False, CORRUPT, r"fields\[0\].nullable.*true"),
    ("field-nullable-string", ["fields", 0, "nullable"], "true", CORRUPT, r"fields\[0\].nullable.*true"),
    ("field-nullable-1", ["fields", 0, "nullable"], 1, CORRUPT, r"fields\[0\].nullable.*true"),
    ("field-id-float", ["fields", 1, "column_id"], 9.0, CORRUPT, r"fields\[1\].column_id.*integer"),
    ("field-id-equals-ts-id", ["fields", 1, "column_id"], 3, CORRUPT, r"IDs must be distinct.*3"),
    ("field-ids-repeated", ["fields", 1, "column_id"], 7, CORRUPT, r"IDs must be distinct.*7"),
    ("field-names-repeated", ["fields", 1, "name"], "a", CORRUPT, r"names must be unique.*'a'"),
    ("field-name-internal-tsid", ["fields", 0, "name"], "__tsid", CORRUPT, r"names must be unique.*__tsid"),
    ("field-name-internal-op", ["fields", 1, "name"], "__op_type", CORRUPT, r"names must be unique.*__op_type"),
    ("field-name-is-ts-name", ["fields", 0, "name"], "ts", CORRUPT, r"names must be unique.*'ts'"),
    ("ts-name-internal", ["timestamp", "name"], "__sequence", CORRUPT, r"names must be unique.*__sequence"),
    ("ts-name-table-id", ["timestamp", "name"], "__table_id", CORRUPT, r"names must be unique.*__table_id"),
    ("field-name-empty", ["fields", 0, "name"], "", CORRUPT, r"fields\[0\].name.*nonempty"),
    ("field-extra-key", ["fields", 0, "unit"], "s", CORRUPT, r"fields\[0\].*unknown key"),
    ("fields-not-array", ["fields"], {"a": 1}, CORRUPT, r"fields.*array"),
    ("files-not-array", ["files"], {}, CORRUPT, r"files.*array"),
    ("part-id-starts-at-1", ["files", 0, "part_id"], 1, CORRUPT, r"files\[0\].part_id.*start at zero"),
    ("part-id-gap", ["files", 1, "part_id"], 2, CORRUPT, r"files\[1\].part_id.*increase by one"),
    ("part-id-bool", ["files", 0, "part_id"], False, CORRUPT, r"files\[0\].part_id.*integer"),
    ("part-num-rows-zero", ["files", 1, "num_rows"], 0, CORRUPT, r"files\[1\].*nonempty"),
    ("part-num-blocks-zero", ["files", 2, "num_blocks"], 0, CORRUPT, r"files\[2\].*nonempty"),
    ("part-num-rows-float", ["files", 0, "num_rows"], 182.0, CORRUPT, r"num_rows.*integer"),
    ("part-file-size-below-128", ["files", 2, "file_size"], 127, CORRUPT, r"file_size.*header \+ trailer"),
    ("part-first-after-last", ["files", 0, "first"], {"table_id": 1, "tsid": 7}, CORRUPT, r"files\[0\].*first <= last"),
    ("part-min-after-max", ["files", 2, "min_timestamp"], 9079, CORRUPT, r"files\[2\].*min_timestamp 9079 > max_timestamp"),
    ("part-order", ["files", 1, "first"], {"table_id": 1, "tsid": 5}, CORRUPT, r"files\[1\].*input order"),
    ("part-tsid-u64-overflow", ["files", 2, "last", "tsid"], 1 << 64, CORRUPT, r"files\[2\].last.tsid.*out of range"),
    ("part-table-id-u32-overflow", ["files", 2, "last", "table_id"], 1 << 32, CORRUPT, r"table_id.*out of range"),
    ("part-min-ts-i64-underflow", ["files", 0, "min_timestamp"], -(1 << 63) - 1, CORRUPT, r"min_timestamp.*out of range"),
    ("part-nan", ["files", 0, "min_timestamp"], float("nan"), CORRUPT, r"not strict JSON"),
    ("part-infinity", ["files", 0, "max_timestamp"], float("inf"), CORRUPT, r"not strict JSON"),
    ("part-extra-key", ["files", 0, "path"], "part-0.samples", CORRUPT, r"files\[0\].*unknown key"),
    ("top-level-extra-key", ["created_at"], "now", CORRUPT, r"unknown key"),
]:
    add(f"manifest-{cid}", "multi", _set(path, value), err, match, "open")

add("manifest-fields-0", "multi", _fields(0), CORRUPT, r"0 fields; require 1..=1024", "open")
add("manifest-fields-1025", "multi", _fields(1025), CORRUPT, r"1025 fields; require 1..=1024", "open")
add("manifest-format-missing", "multi", _del(["format"]), CORRUPT, r"format: expected 'columnar-samples', found None", "open")
add("manifest-version-missing", "multi", _del(["version"]), CORRUPT, r"version: expected an integer", "open")
add("manifest-missing-files", "multi", _del(["files"]), CORRUPT, r"missing key.*files", "open")
add("manifest-missing-part-key", "multi", _del(["files", 0, "num_blocks"]), CORRUPT, r"files\[0\].*missing key.*num_blocks", "open")
add("manifest-duplicate-key", "multi",
    _text(lambda t: t.replace('"version": 1,', '"version": 1, "version": 1,', 1).encode()),
    CORRUPT, r"not strict JSON.*duplicate key", "open")
add("manifest-duplicate-nested-key", "multi",
    _text(lambda t: t.replace('"unit": "millisecond"', '"unit": "millisecond", "unit": "second"', 1).encode()),
    CORRUPT, r"duplicate key 'unit'", "open")
add("manifest-trailing-data", "multi", _text(lambda t: (t + "{}").encode()), CORRUPT, r"not strict JSON", "open")
add("manifest-invalid-utf8", "multi", _text(lambda t: t.replace('"ts"', '"t\xff"').encode("latin-1")),
    CORRUPT, r"UTF-8", "open")
add("manifest-utf8-bom", "multi", _text(lambda t: b"\xef\xbb\xbf" + t.encode()), CORRUPT, r"not strict JSON", "open")
add("manifest-top-level-array", "multi", _text(lambda t: ("[" + t + "]").encode()), CORRUPT, r"expected an object", "open")
add("manifest-huge-int", "multi", _text(lambda t: t.replace('"num_rows": 182', '"num_rows": 1' + "0" * 5000, 1).encode()),
    CORRUPT, r"not strict JSON", "open")
add("manifest-exponent-int", "multi", _text(lambda t: t.replace('"num_rows": 182', '"num_rows": 1.82e2', 1).encode()),
    CORRUPT, r"num_rows.*integer", "open")
add("manifest-deep-nesting", "multi", _text(lambda t: t[:-2].encode() + b', "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"),
    CORRUPT, r"not strict JSON", "open")
add("manifest-empty", "multi", _text(lambda t: b""), CORRUPT, r"not strict JSON", "open")

# A manifest's own counts/bounds disagreeing with its part (found when the part is read).
add("manifest-num-rows-off-by-one", "multi", man(lambda d: d["files"][1].update(num_rows=d["files"][1]["num_rows"] + 1)),
    CORRUPT, r"part-1.samples: part holds 6 blocks / 115 rows.*says 6 blocks / 116 rows")
add("manifest-num-blocks-off-by-one", "multi", _set(["files", 0, "num_blocks"], 5), CORRUPT,
    r"part-0.samples: part holds 6 blocks.*says 5 blocks")

# FileId serialisation is exactly a lowercase hyphenated UUID: no trailing newline.
add("manifest-generation-trailing-newline", "multi",
    _set(["generation"], "5a3c0000-0000-4000-8000-00000000c002\n"), CORRUPT, r"generation.*FileId", "open", gen_dir=True)
add("manifest-source-file-id-trailing-newline", "multi",
    _set(["source_file_id"], "5a3c0000-0000-4000-8000-00000000c001\n"), CORRUPT, r"source_file_id.*FileId", "open",
    gen_dir=True)


# =============================================================================
# catalog entry (stage "open")
# =============================================================================


def _drop_object(idx):
    def fn(e):
        o = e["objects"].pop(idx)
        e["file_size"] -= o["file_size"]
    return ent(fn)


def _extra_object(e):
    e["objects"].append({"path": e["objects"][1]["path"].replace("part-0", "part-9"), "file_size": 500})
    e["file_size"] += 500


def _dup_object(e):
    e["objects"].append(dict(e["objects"][1]))
    e["file_size"] += e["objects"][1]["file_size"]


def _obj_size(idx, delta):
    def fn(e):
        e["objects"][idx]["file_size"] += delta
        e["file_size"] += delta
    return ent(fn)


def _entry_set(k, v):
    return ent(lambda e: e.__setitem__(k, v))


add("entry-region-mismatch", "multi", _set(["region_id"], 4398046511112), MISMATCH, r"region_id is 4398046511111 in the entry but 4398046511112", "open")
add("entry-file-id-mismatch", "multi", _set(["source_file_id"], "5a3c0000-0000-4000-8000-00000000c003"), MISMATCH, r"file_id / source_file_id", "open")
add("entry-generation-mismatch", "multi", _set(["generation"], "5a3c0000-0000-4000-8000-00000000c003"), MISMATCH, r"generation is .* in the entry but", "open")
add("entry-missing-part", "multi", _drop_object(3), MISMATCH, r"objects must be exactly.*missing \[.*part-2.samples", "open")
add("entry-missing-manifest", "multi", _drop_object(0), MISMATCH, r"objects must include .*manifest.json", "open")
add("entry-extra-object", "multi", ent(_extra_object), MISMATCH, r"unexpected \[.*part-9.samples", "open")
add("entry-duplicate-object", "multi", ent(_dup_object), MISMATCH, r"duplicate paths", "open")
add("entry-part-size-wrong", "multi", _obj_size(2, 1), MISMATCH, r"part-1.samples has file_size \d+ in the entry but \d+", "open")
add("entry-file-size-not-sum", "multi", ent(lambda e: e.__setitem__("file_size", e["file_size"] + 1)), MISMATCH, r"not the sum of the object sizes", "open")
add("entry-manifest-size-too-big", "multi", _obj_size(0, 1), (MISMATCH, CORRUPT), r"manifest.json.*(shorter than its recorded size|file_size)", "open")
add("entry-manifest-size-too-small", "multi", _obj_size(0, -2), CORRUPT, r"manifest.json: not strict JSON", "open")
add("entry-manifest-size-over-64mib", "multi", _obj_size(0, 64 << 20), CORRUPT, r"manifest size \d+ exceeds the manifest limit of 67108864", "open")
add("entry-part-outside-prefix", "multi", ent(lambda e: e["objects"][1].__setitem__("path", "x/" + e["objects"][1]["path"])),
    MISMATCH, r"missing \[.*part-0.samples.*unexpected \[.*x/", "open")
add("entry-unknown-key", "multi", _entry_set("extra", 1), CORRUPT, r"catalog entry.*unknown key", "open")
add("entry-region-string", "multi", _entry_set("region_id", "4398046511111"), CORRUPT, r"region_id.*integer", "open")
add("entry-file-size-bool", "multi", _entry_set("file_size", True), CORRUPT, r"file_size.*integer", "open")
add("entry-file-id-format", "multi", _entry_set("file_id", "not-a-uuid"), CORRUPT, r"file_id.*FileId", "open")
add("entry-version-2", "multi", _entry_set("version", 2), UNSUPPORTED, r"version 2 is not supported", "open")
add("entry-format", "multi", _entry_set("format", "parquet"), CORRUPT, r"format", "open")
add("entry-objects-not-list", "multi", _entry_set("objects", {}), CORRUPT, r"objects.*array", "open")
add("entry-object-path-not-string", "multi", ent(lambda e: e["objects"][1].__setitem__("path", 1)), CORRUPT, r"objects\[1\].path.*string", "open")
add("entry-object-missing-size", "multi", ent(lambda e: e["objects"][1].pop("file_size")), CORRUPT, r"objects\[1\].*missing key", "open")
# Part order comes from the manifest, not from the object list.
add("entry-objects-reordered-ok", "multi", ent(lambda e: e["objects"].reverse()), None, stage="open")


# =============================================================================
# header and trailer (stage "meta")
# =============================================================================


def _header(part, off, data):
    def mutate(m):
        m.parts[part].header[off: off + len(data)] = data
    return mutate


add("header-magic", "multi", _header(0, 0, b"GTSAMPLX"), CORRUPT, r"part-0.samples: header magic")
add("header-version-2", "multi", _header(1, 8, struct.pack("<I", 2)), UNSUPPORTED, r"part-1.samples: header file version 2 is not supported")
add("header-version-0", "multi", _header(2, 8, struct.pack("<I", 0)), UNSUPPORTED, r"header file version 0")
add("header-reserved", "multi", _header(0, 12, struct.pack("<I", 1)), CORRUPT, r"header reserved field is 1, must be zero")

add("trailer-checksum", "multi", setattrs(lambda m: m.parts[0], trailer_checksum=12345), CORRUPT, r"part-0.samples: trailer checksum")
add("trailer-magic", "multi", trailer(1, magic=b"GTSAMPLY"), CORRUPT, r"trailer magic")
add("trailer-version-2", "multi", trailer(2, version=2), UNSUPPORTED, r"trailer file version 2 is not supported")
add("trailer-file-length", "multi", trailer(0, file_length=lambda t: t["file_length"] + 1), CORRUPT, r"trailer file length \d+ differs from the recorded size")
add("trailer-depth-0", "multi", trailer(0, depth=0), UNSUPPORTED, r"index depth 0 is not supported")
add("trailer-depth-3-label", "multi", trailer(0, depth=3), UNSUPPORTED, r"index depth 3 is not supported")
add("trailer-depth-1-for-internal-root", "multi", trailer(0, depth=1), CORRUPT, r"page kind 1, expected leaf")
add("trailer-depth-2-for-leaf-root", "multi", trailer(2, depth=2), CORRUPT, r"page kind 0, expected internal")
add("trailer-payload-end-in-header", "multi", trailer(0, payload_end=15), CORRUPT, r"payload_end 15 lies outside")
add("trailer-payload-end-past-metadata", "multi", trailer(1, payload_end=lambda t: t["file_length"] - 111), CORRUPT, r"payload_end \d+ lies outside")
add("trailer-root-outside-metadata", "multi", trailer(2, payload_end=lambda t: t["root"]["offset"] + 1), CORRUPT, r"root page reference: page bytes .* outside the metadata area")
add("trailer-root-in-column-area", "multi", pageref(root_of(2), offset=16), CORRUPT, r"root page reference: page bytes \[16, .* outside the metadata area")
add("trailer-root-not-at-end", "multi", setattrs(lambda m: m.parts[1], tail_pad=b"\0" * 8), CORRUPT, r"root page must end immediately before the trailer")
add("trailer-root-bounds-vs-manifest-time", "multi", _set(["files", 0, "max_timestamp"], 1149041), CORRUPT, r"part-0.samples: root bounds .* differ from the manifest part descriptor")
add("trailer-root-bounds-vs-manifest-id", "multi", _set(["files", 1, "last"], {"table_id": 3, "tsid": 9}), CORRUPT, r"part-1.samples: root bounds .* differ from the manifest")
add("trailer-root-bounds-vs-manifest-first", "multi", _set(["files", 2, "last"], {"table_id": 4, "tsid": 2}), CORRUPT, r"part-2.samples: root bounds")
add("trailer-truncated-file", "multi", seq(setattrs(lambda m: m.parts[2], on_bytes=lambda b: b[:-1])), CORRUPT, r"part-2.samples: trailer (checksum|file length)")
add("part-shorter-than-recorded", "multi", _set(["files", 2, "file_size"], 100_000), CORRUPT, r"part-2.samples: object is shorter than its recorded size", gen_dir=True)
add("part-longer-than-recorded", "multi", setattrs(lambda m: m.parts[2], on_bytes=lambda b: b + b"\0" * 7), CORRUPT, r"part-2.samples: trailer checksum")
add("part-file-size-u64-max", "multi", _set(["files", 2, "file_size"], U64_MAX), CORRUPT, r"part-2.samples", gen_dir=True)
add("part-file-size-past-off-t", "multi", _set(["files", 2, "file_size"], (1 << 63) + 4096), CORRUPT, r"part-2.samples", gen_dir=True)
add("part-file-size-2-63", "multi", _set(["files", 2, "file_size"], 1 << 63), CORRUPT, r"part-2.samples", gen_dir=True)


def _huge_part_size_with_entry(size):
    def on_manifest(d):
        d["files"][2]["file_size"] = size

    def on_entry(e):
        e["file_size"] += size - e["objects"][3]["file_size"]
        e["objects"][3]["file_size"] = size
    return seq(man(on_manifest), ent(on_entry))


add("part-file-size-huge-with-entry", "multi", _huge_part_size_with_entry((1 << 63) + 4096), CORRUPT, r"part-2.samples")
add("part-file-size-2-40", "multi", _set(["files", 2, "file_size"], 1 << 40), CORRUPT, r"part-2.samples: object is shorter than its recorded size", gen_dir=True)


# =============================================================================
# payload references (stage "meta" unless noted)
# =============================================================================

MAXCS = C.MAX_CHUNK_STORED

for cid, get, kw, err, match in [
    ("chunk-stored-zero", col(0, 1, SEQ), dict(stored_len=0), CORRUPT, r"payload lengths must be nonzero \(stored 0"),
    ("chunk-decoded-zero", col(0, 1, SEQ), dict(decoded_len=0), CORRUPT, r"payload lengths must be nonzero .*decoded 0"),
    ("chunk-offset-u64-overflow", col(1, 2, TS), dict(offset=U64_MAX - 3), CORRUPT, r"overflows u64"),
    ("chunk-end-exactly-2-64", col(1, 2, TS), dict(offset=lambda r: (1 << 64) - r["stored_len"]), CORRUPT, r"overflows u64"),
    ("chunk-end-u64-max-no-overflow", col(1, 2, TS), dict(offset=lambda r: U64_MAX - r["stored_len"]), CORRUPT, r"outside the column area"),
    ("chunk-in-header", col(0, 0, TS), dict(offset=4), CORRUPT, r"chunk bytes \[4, 20\) lie outside the column area \[16,"),
    ("chunk-past-payload-end", col(2, 0, FLD, 9), dict(stored_len=lambda r: r["stored_len"] + 1, decoded_len=lambda r: r["decoded_len"] + 1), CORRUPT, r"lie outside the column area"),
    ("chunk-in-metadata-area", col(2, 0, TS), dict(offset=lambda r: 10_000), CORRUPT, r"lie outside the column area"),
    ("chunk-reserved", col(0, 3, OP), dict(reserved=1), CORRUPT, r"payload reference reserved field is 1, must be zero"),
    ("chunk-reserved-high-bit", field(1, 1, 7), dict(reserved=1 << 31), CORRUPT, r"reserved field is 2147483648"),
    ("chunk-decoded-over-1mib", field(0, 0, 7), dict(decoded_len=(1 << 20) + 1), CORRUPT, r"chunk decoded length 1048577 exceeds 1048576 bytes"),
    ("chunk-raw-unequal-lengths", col(0, 0, TS), dict(decoded_len=17), CORRUPT, r"compression 0 requires equal lengths \(stored 16, decoded 17\)"),
    ("chunk-raw-unequal-shorter", col(1, 4, OP), dict(stored_len=lambda r: r["stored_len"] + 1), CORRUPT, r"compression 0 requires equal lengths"),
]:
    add(f"ref-{cid}", "multi", colref(get, **kw), err, match)


def _chunk_stored_over_limit(m):
    p = m.parts[2]
    p.payload_pad = bytes(MAXCS)
    p.blocks()[0].field(9).ref.update(stored_len=MAXCS + 1)


add("ref-chunk-stored-over-limit", "multi", _chunk_stored_over_limit, CORRUPT, rf"chunk stored length {MAXCS + 1} exceeds {MAXCS} bytes")

for cid, get, kw, err, match in [
    ("page-stored-zero", child(0, 1), dict(stored_len=0), CORRUPT, r"leaf|child 1.*payload lengths must be nonzero"),
    ("page-decoded-zero", child(0, 1), dict(decoded_len=0), CORRUPT, r"child 1: payload lengths must be nonzero"),
    ("root-stored-zero", root_of(2), dict(stored_len=0, decoded_len=0), CORRUPT, r"root page reference: payload lengths must be nonzero"),
    ("page-offset-u64-overflow", child(0, 2), dict(offset=U64_MAX - 10), CORRUPT, r"child 2: offset \d+ \+ stored length \d+ overflows u64"),
    ("root-offset-u64-overflow", root_of(1), dict(offset=U64_MAX - 10), CORRUPT, r"root page reference: offset .* overflows u64"),
    ("page-in-column-area", child(0, 0), dict(offset=16), CORRUPT, r"child 0: page bytes \[16, .* outside the metadata area"),
    ("page-reserved", child(1, 2), dict(reserved=7), CORRUPT, r"child 2: payload reference reserved field is 7"),
    ("root-reserved", root_of(0), dict(reserved=1), CORRUPT, r"root page reference: payload reference reserved field is 1"),
    ("page-metadata-encoding-2", child(0, 1), dict(encoding=2), UNSUPPORTED, r"child 1: metadata encoding 2 is not supported"),
    ("root-metadata-encoding-0", root_of(2), dict(encoding=0), UNSUPPORTED, r"metadata encoding 0 is not supported"),
    ("page-compression-2", child(0, 1), dict(compression=2), UNSUPPORTED, r"child 1: compression 2 is not supported"),
    ("root-compression-9", root_of(2), dict(compression=9), UNSUPPORTED, r"compression 9 is not supported"),
    ("page-raw-unequal", child(1, 0), dict(decoded_len=lambda r: r["decoded_len"] + 1), CORRUPT, r"compression 0 requires equal lengths"),
    ("page-checksum", child(0, 1), dict(checksum=lambda r: r["checksum"] ^ 1), CORRUPT, r"leaf 1: XXH64 of the stored bytes"),
    ("root-checksum", root_of(2), dict(checksum=lambda r: r["checksum"] ^ 1), CORRUPT, r"root page: XXH64 of the stored bytes"),
    ("internal-root-checksum", root_of(0), dict(checksum=0), CORRUPT, r"root page: XXH64"),
]:
    add(f"ref-{cid}", "multi", pageref(get, **kw), err, match)


def _page_decoded_over_limit(m):
    c = m.parts[0].root.children[1]
    c.compression = C.COMP_ZSTD
    c.ref.update(decoded_len=C.MAX_PAGE_DECODED + 1)


def _page_stored_over_limit(m):
    p = m.parts[2]
    p.meta_pad = bytes(C.MAX_PAGE_STORED)
    p.root.ref.update(offset=lambda r: r["offset"] + r["stored_len"] - (C.MAX_PAGE_STORED + 1),
                      stored_len=C.MAX_PAGE_STORED + 1)


add("ref-page-decoded-over-limit", "multi", _page_decoded_over_limit, CORRUPT, r"page decoded length 65537 exceeds 65536 bytes")
add("ref-page-stored-over-limit", "multi", _page_stored_over_limit, CORRUPT, r"page stored length 131073 exceeds 131072 bytes")


# =============================================================================
# metadata pages
# =============================================================================


def _nest_internal(depth):
    """Root -> [leaf 0, internal -> [leaf 1, leaf 2]]."""
    def mutate(m):
        p = m.parts[0]
        kids = p.root.children
        p.root.children = [kids[0], Internal(children=[kids[1], kids[2]])]
        if depth is not None:
            p.depth = depth
    return mutate


def _swap_pages(a, b):
    def order(pages):
        pages = list(pages)
        pages[a], pages[b] = pages[b], pages[a]
        return pages
    return order


add("page-leaf-kind-1-at-depth-1", "multi", setattrs(root_of(2), kind=1), CORRUPT, r"part-2.samples leaf 0 \(root\): page kind 1, expected leaf")
add("page-leaf-kind-2", "multi", setattrs(child(0, 1), kind=2), CORRUPT, r"leaf 1: page kind 2, expected leaf")
add("page-internal-kind-0-at-depth-2", "multi", setattrs(root_of(0), kind=0), CORRUPT, r"root page: page kind 0, expected internal")
add("page-internal-child-at-depth-2", "multi", _nest_internal(2), CORRUPT, r"leaf 1: page kind 1, expected leaf")
add("page-three-levels-depth-3", "multi", _nest_internal(None), UNSUPPORTED, r"index depth 3 is not supported")
add("page-leaf-empty", "multi", setattrs(child(1, 1), entry_count=0), CORRUPT, r"leaf 1: pages are nonempty; entry_count is 0")
add("page-root-leaf-empty", "multi", setattrs(root_of(2), entry_count=0), CORRUPT, r"pages are nonempty")
add("page-internal-empty", "multi", setattrs(root_of(1), entry_count=0), CORRUPT, r"root page: pages are nonempty")
add("page-leaf-count-huge", "multi", setattrs(child(0, 2), entry_count=1 << 63), CORRUPT, r"leaf 2: entry_count \d+ cannot fit")
add("page-leaf-count-plus-one", "multi", setattrs(child(0, 0), entry_count=3), CORRUPT, r"leaf 0: (block descriptor 2 runs past the end|entry_count 3 cannot fit)")
add("page-internal-count-huge", "multi", setattrs(root_of(0), entry_count=U64_MAX), CORRUPT, r"internal page with entry_count \d+ must be 12 \+ 72")
add("page-internal-count-plus-one", "multi", setattrs(root_of(0), entry_count=4), CORRUPT, r"entry_count 4 must be 12 \+ 72 \* 4 bytes")
add("page-internal-count-911", "multi", setattrs(root_of(0), entry_count=911), CORRUPT, r"entry_count 911 must be")
add("page-leaf-trailing-bytes", "multi", setattrs(child(0, 1), on_decoded=lambda b: b + b"\0" * 4), CORRUPT, r"leaf 1: trailing bytes after 2 block descriptors")
add("page-leaf-trailing-descriptor-size", "multi", setattrs(root_of(2), on_decoded=lambda b: b + b"\0" * 300), CORRUPT, r"trailing bytes|cannot fit")
add("page-leaf-truncated-descriptor", "multi", setattrs(child(0, 1), on_decoded=lambda b: b[:-1]), CORRUPT, r"leaf 1: block descriptor 1 runs past the end")
add("page-internal-trailing-byte", "multi", setattrs(root_of(1), on_decoded=lambda b: b + b"\0"), CORRUPT, r"root page: internal page with entry_count 3 must be 12 \+ 72 \* 3 bytes")
add("page-shorter-than-prefix", "multi", setattrs(root_of(2), on_decoded=lambda b: b[:8]), CORRUPT, r"shorter than the 12-byte prefix")
add("page-children-unordered", "multi", setattrs(lambda m: m.parts[0], page_order=_swap_pages(0, 1)), CORRUPT, r"root page child 1: child byte ranges must be ordered and disjoint")
add("page-children-overlap", "multi",
    pageref(child(1, 1), offset=lambda r: r["offset"] - 1, stored_len=lambda r: r["stored_len"] + 1,
            decoded_len=lambda r: r["decoded_len"] + 1),
    CORRUPT, r"child 1: child byte ranges must be ordered and disjoint")
add("page-child-overlaps-parent", "multi",
    pageref(child(0, 2), stored_len=lambda r: r["stored_len"] + 1, decoded_len=lambda r: r["decoded_len"] + 1),
    CORRUPT, r"child 2: page bytes .* outside the metadata area")
add("page-child-after-parent", "multi", pageref(child(0, 0), offset=lambda r: 3000), CORRUPT, r"child 0: page bytes \[3000, .* outside the metadata area")
add("page-children-id-order", "multi", lambda m: m.parts[1].root.children.__setitem__(slice(1, 3), m.parts[1].root.children[2:0:-1]),
    CORRUPT, r"root page child 2: children follow block order: previous last \(4, 1\) > first \(2, 5\)")
add("page-ref-first-after-last", "multi", pageref(child(0, 1), first_tsid=6), CORRUPT, r"child 1: identifier interval first \(1, 6\) > last \(1, 5\)")
add("page-ref-min-after-max", "multi", pageref(child(1, 2), min_timestamp=lambda r: r["max_timestamp"] + 1), CORRUPT, r"child 2: time interval min_timestamp \d+ > max_timestamp")
add("page-leaf-bounds-first-id", "multi", pageref(child(0, 0), first_tsid=4), CORRUPT, r"part-0.samples leaf 0: derived bounds ids \[\(1, 5\).* differ from its reference's ids \[\(1, 4\)")
add("page-leaf-bounds-last-id", "multi", pageref(root_of(2), last_tsid=2), CORRUPT, r"leaf 0 \(root\): derived bounds .* differ from its reference")
add("page-leaf-bounds-min-time", "multi", pageref(child(0, 1), min_timestamp=lambda r: r["min_timestamp"] - 1), CORRUPT, r"leaf 1: derived bounds .* differ from its reference")
add("page-leaf-bounds-max-time", "multi", pageref(child(1, 1), max_timestamp=lambda r: r["max_timestamp"] + 1), CORRUPT, r"leaf 1: derived bounds .* differ")
add("page-internal-bounds-time", "multi", pageref(root_of(0), max_timestamp=lambda r: r["max_timestamp"] + 1), CORRUPT, r"part-0.samples root page: derived bounds .* differ from its reference")
add("page-internal-bounds-id", "multi", pageref(root_of(0), first_tsid=4), CORRUPT, r"root page: derived bounds ids \[\(1, 5\)")
add("page-internal-bounds-min-narrower", "multi", pageref(root_of(1), min_timestamp=lambda r: r["min_timestamp"] + 1), CORRUPT, r"root page: derived bounds")
add("page-zstd-content-size", "multi",
    seq(setattrs(root_of(2), compression=1, on_stored=lambda s: kit.zstd(zstandard.decompress(s) + b"\0"))),
    CORRUPT, r"Zstd frame content size \d+ differs from the declared decoded length")
add("page-zstd-forged-content-size", "multi",
    seq(setattrs(child(0, 1), compression=1, on_stored=lambda s: kit.zstd_frame(zstandard.decompress(s), fcs=1 << 40))),
    CORRUPT, r"content size 1099511627776 differs")
add("page-zstd-trailing-junk", "multi", setattrs(root_of(2), compression=1, on_stored=lambda s: s + b"junk"), CORRUPT, r"Zstd")
add("page-zstd-two-frames", "multi",
    setattrs(child(1, 0), compression=1, on_stored=lambda s: (lambda d: kit.zstd(d[:40]) + kit.zstd(d[40:]))(zstandard.decompress(s))),
    CORRUPT, r"leaf 0: .*(Zstd|content size)")
add("page-zstd-no-fcs-more-output", "multi",
    setattrs(root_of(2), compression=1, on_stored=lambda s: kit.zstd_frame(zstandard.decompress(s) + b"\0" * 16)),
    CORRUPT, r"(Zstd|decompress)")
add("page-zstd-bad-magic", "multi", setattrs(root_of(2), compression=1, on_stored=lambda s: b"\x29" + s[1:]), CORRUPT, r"magic is 29b52ffd")
add("page-zstd-truncated", "multi", setattrs(child(0, 2), compression=1, on_stored=lambda s: s[:-2]), CORRUPT, r"leaf 2: .*Zstd")
add("page-zstd-window-too-large", "multi",
    setattrs(root_of(2), compression=1, on_stored=lambda s: kit.zstd_frame(zstandard.decompress(s), window_exp=24)),
    CORRUPT, r"Zstd (window \d+ bytes exceeds|frame header: .*too much memory)")
add("page-zstd-ok", "multi", lambda m: [setattr(p, "compression", 1) for part in m.parts for p in kit._post_order(part.root)], None)
add("page-zstd-no-fcs-ok", "multi",
    setattrs(root_of(2), compression=1, on_stored=lambda s: kit.zstd_frame(zstandard.decompress(s))), None)
add("page-zstd-checksum-ok", "multi",
    setattrs(child(0, 1), compression=1, on_stored=lambda s: kit.zstd_frame(zstandard.decompress(s), fcs=len(zstandard.decompress(s)), fcs_bytes=4, checksum=True)), None)


# =============================================================================
# block and column descriptors
# =============================================================================


def _cols(p, b, fn):
    def mutate(m):
        bl = blk(m, p, b)
        bl.columns = fn(list(bl.columns))
    return mutate


def _swap(i, j):
    def fn(cs):
        cs[i], cs[j] = cs[j], cs[i]
        return cs
    return fn


def _shift_ts(p, b, delta):
    def mutate(m):
        bl = blk(m, p, b)
        ts = kit.decode_column(bl.ts, bl.row_count)
        kit.set_timestamps(bl, [t + delta for t in ts])
    return mutate


def _rows(fixture_fields, ts_id, p, b, n, ts0=None):
    """Replace block (p, b) with n valid rows at one timestamp (the block's min)."""
    def mutate(m):
        bl = blk(m, p, b)
        t = bl.min_timestamp if ts0 is None else ts0
        fields = {fid: ([1.0 + k] * n, None) for k, fid in enumerate(fixture_fields)}
        kit.set_block_rows(bl, [t] * n, [5] * n, [1] * n, fields, m.field_ids, ts_id)
    return mutate


CAP2 = C.max_block_rows(2)
assert CAP2 < C.MAX_BLOCK_ROWS and C.max_block_rows(1) == 8192 and C.max_block_rows(1024) == 31

add("desc-missing-time", "multi", _cols(0, 0, lambda cs: cs[1:]), CORRUPT, r"block 0 .*column descriptor 0 \(role 2, id 0\): role must be 1 \(timestamp\)")
add("desc-missing-sequence", "multi", _cols(0, 1, lambda cs: cs[:1] + cs[2:]), CORRUPT, r"block 1 .*column descriptor 1 \(role 3, id 0\): role must be 2 \(sequence\)")
add("desc-missing-op", "multi", _cols(1, 2, lambda cs: cs[:2] + cs[3:]), CORRUPT, r"column descriptor 2 \(role 4, id 7\): role must be 3 \(operation\)")
add("desc-only-fields", "flat", _cols(0, 0, lambda cs: cs[3:] * 3), CORRUPT, r"role must be 1")
add("desc-seq-op-swapped", "multi", _cols(0, 2, _swap(1, 2)), CORRUPT, r"column descriptor 1 \(role 3, id 0\): role must be 2")
add("desc-field-before-time", "flat", _cols(0, 3, lambda cs: cs[3:] + cs[:3]), CORRUPT, r"role must be 1 \(timestamp\)")
add("desc-role-5", "multi", setattrs(field(0, 0, 9), role=5), UNSUPPORTED, r"column descriptor 4: column role 5 is not supported")
add("desc-role-0", "multi", setattrs(col(1, 4, TS), role=0), UNSUPPORTED, r"column role 0 is not supported")
add("desc-role-5-unprojected", "multi", setattrs(field(0, 0, 9), role=5), UNSUPPORTED, r"column role 5", read_kw=dict(columns=FIXED5 + ["a"]))
add("desc-seq-column-id", "multi", setattrs(col(0, 0, SEQ), column_id=1), CORRUPT, r"\(role 2, id 1\): column ID must be 0")
add("desc-op-column-id", "multi", setattrs(col(2, 0, OP), column_id=7), CORRUPT, r"\(role 3, id 7\): column ID must be 0")
add("desc-ts-column-id", "multi", setattrs(col(1, 3, TS), column_id=7), CORRUPT, r"\(role 1, id 7\): column ID must be 3")
add("desc-ts-column-id-zero", "flat", setattrs(col(0, 5, TS), column_id=0), CORRUPT, r"column ID must be 3")
add("desc-ts-nulls", "multi", setattrs(col(0, 0, TS), null_count=1), CORRUPT, r"null count 1 must be zero for time, sequence and operation")
add("desc-seq-nulls", "multi", setattrs(col(1, 1, SEQ), null_count=2), CORRUPT, r"\(role 2, id 0\): null count 2 must be zero")
add("desc-op-nulls", "flat", setattrs(col(0, 2, OP), null_count=1), CORRUPT, r"\(role 3, id 0\): null count 1 must be zero")
add("desc-unknown-field-id", "multi", setattrs(field(0, 0, 9), column_id=8), CORRUPT, r"field column ID 8 is not in the manifest")
add("desc-field-id-is-ts-id", "flat", setattrs(field(0, 1, 7), column_id=3), CORRUPT, r"field column ID 3 is not in the manifest")
add("desc-field-id-repeated", "multi", setattrs(field(0, 0, 9), column_id=7), CORRUPT, r"value descriptors follow manifest order with no repeated IDs")
add("desc-field-order", "multi", _cols(0, 2, _swap(3, 4)), CORRUPT, r"column descriptor 4 \(role 4, id 7\): value descriptors follow manifest order")
add("desc-field-nulls-equal-rows", "multi", setattrs(field(0, 4, 9), null_count=22), CORRUPT, r"present value chunks need null_count < row_count \(22 >= 22\)")
add("desc-field-nulls-over-rows", "flat", setattrs(field(0, 3, 7), null_count=4), CORRUPT, r"null_count < row_count \(4 >= 3\)")
add("desc-row-count-zero", "multi", setattrs(lambda m: blk(m, 1, 4), row_count=0), CORRUPT, r"block 0 \(table 3, tsid 1, ordinal 0\): row count must be nonzero")
add("desc-rows-8193-one-field", "flat", _rows([7], 3, 0, 5, 8193), CORRUPT, r"row count 8193 exceeds the cap of 8192 rows for 1 fields")
add("desc-rows-8192-one-field-ok", "flat", _rows([7], 3, 0, 5, 8192), None, same=False)
add("desc-rows-over-formula-two-fields", "multi", _rows([7, 9], 3, 2, 0, CAP2 + 1), CORRUPT,
    rf"row count {CAP2 + 1} exceeds the cap of {CAP2} rows for 2 fields .*262144-byte decoded-size formula")
add("desc-rows-at-formula-two-fields-ok", "multi", _rows([7, 9], 3, 2, 0, CAP2), None, same=False)
add("desc-rows-over-formula-one-present-of-two", "multi", _rows([7], 3, 2, 0, CAP2 + 1), CORRUPT, rf"exceeds the cap of {CAP2} rows for 2 fields")
add("desc-rows-32-of-1024-fields", "wide", _rows([1, 1024], 0, 0, 0, 32), CORRUPT, r"row count 32 exceeds the cap of 31 rows for 1024 fields")
add("desc-rows-32-of-1024-fields-one-present", "wide", _rows([500], 0, 0, 0, 32), CORRUPT, r"row count 32 exceeds the cap of 31")
add("desc-rows-31-of-1024-fields-ok", "wide", _rows([1, 1024], 0, 0, 0, 31), None, same=False)
add("desc-row-count-vs-chunks", "multi", setattrs(lambda m: blk(m, 2, 0), row_count=9), CORRUPT, r"decode failed", stage="decode")
add("desc-column-count-too-many", "flat",
    lambda m: blk(m, 0, 1).columns.append(Column(FLD, 7, 5, 0, 0, kit.enc_f64([1.0] * 4)[0])),
    CORRUPT, r"column count 5 must be 3 \+ present fields \(3..=4\)")
add("desc-column-count-two", "multi", _cols(0, 0, lambda cs: cs[:2]), CORRUPT, r"block 0 .*column count 2 must be 3 \+ present fields")
add("desc-column-count-vs-bytes", "multi", _cols(2, 0, lambda cs: cs[:2]), CORRUPT, r"entry_count 1 cannot fit in 144 bytes")
add("desc-block-min-after-max", "multi", setattrs(lambda m: blk(m, 1, 3), min_timestamp=5208), CORRUPT, r"min_timestamp 5208 > max_timestamp 5207")

# role <-> encoding agreement, even for an unprojected column
NO_B = dict(columns=FIXED5 + ["a"])
add("desc-field-enc-3-unprojected", "multi", setattrs(field(0, 0, 9), encoding=3), CORRUPT, r"\(role 4, id 9\): encoding 3 is not valid for the field role", read_kw=NO_B)
add("desc-field-enc-1-unprojected", "multi", setattrs(field(1, 0, 9), encoding=1), CORRUPT, r"encoding 1 is not valid for the field role", read_kw=NO_B)
add("desc-field-enc-7-unprojected-other-series", "multi", setattrs(field(0, 4, 9), encoding=7), CORRUPT, r"encoding 7 is not valid for the field role",
    read_kw=dict(columns=FIXED5 + ["a"], series=[(1, 6)]))
add("desc-ts-enc-5", "multi", setattrs(col(0, 0, TS), encoding=5), CORRUPT, r"encoding 5 is not valid for the timestamp role")
add("desc-ts-enc-3", "flat", setattrs(col(0, 0, TS), encoding=3), CORRUPT, r"encoding 3 is not valid for the timestamp role")
add("desc-seq-enc-1-unprojected", "multi", setattrs(col(0, 0, SEQ), encoding=1), CORRUPT, r"encoding 1 is not valid for the sequence role",
    read_kw=dict(columns=["__tsid", "ts", "a"]))
add("desc-op-enc-4-unprojected", "multi", setattrs(col(0, 3, OP), encoding=4), CORRUPT, r"encoding 4 is not valid for the operation role",
    read_kw=dict(columns=["ts"]))
add("desc-op-enc-5", "flat", setattrs(col(0, 0, OP), encoding=5), CORRUPT, r"encoding 5 is not valid for the operation role")

# block order, ordinals, adjacent-block time rule
add("block-sort-order", "flat", lambda m: m.parts[0].root.blocks.__setitem__(slice(3, 5), m.parts[0].root.blocks[3:5][::-1]),
    CORRUPT, r"block 4 \(table 2, tsid 1, ordinal 0\): blocks sort by \(table_id, tsid, min_timestamp, ordinal\)")
add("block-sort-order-equal-tsid-other-table", "flat",
    lambda m: m.parts[0].root.blocks.__setitem__(slice(3, 6), [m.parts[0].root.blocks[i] for i in (3, 5, 4)]),
    CORRUPT, r"block 5 \(table 2, tsid 2, ordinal 0\): blocks sort by")
add("block-ordinal-first-of-page-1", "flat", setattrs(lambda m: blk(m, 0, 0), ordinal=1), CORRUPT, r"block 0 \(table 1, tsid 1\): the identity's first block must have ordinal 0, found 1")
add("block-ordinal-not-zero-mid-page", "flat", setattrs(lambda m: blk(m, 0, 3), ordinal=1), CORRUPT, r"block 3 \(table 2, tsid 1, ordinal 1\): ordinals start at zero for each identity")
add("block-ordinal-gap", "flat", setattrs(lambda m: blk(m, 0, 2), ordinal=2), CORRUPT, r"block 2 \(table 1, tsid 2, ordinal 2\): ordinals increase by one per identity: expected 1")
add("block-ordinal-repeat", "multi", setattrs(lambda m: blk(m, 0, 1), ordinal=0), CORRUPT, r"ordinals increase by one per identity: expected 1")
add("block-ordinal-gap-across-leaves", "multi", lambda m: [setattr(b, "ordinal", b.ordinal + 1) for b in m.parts[0].blocks()[2:5]], CORRUPT, r"leaf 1 \(boundary with the previous page\).*ordinals increase by one per identity: expected 2")
add("block-ordinal-across-parts-restart", "multi", setattrs(lambda m: blk(m, 1, 0), ordinal=0), CORRUPT, r"part-1.samples leaf 0 \(boundary with the previous page\).*expected 1")
add("block-ordinal-across-parts-gap", "multi", setattrs(lambda m: blk(m, 2, 0), ordinal=2), CORRUPT, r"part-2.samples leaf 0 \(boundary.*expected 1")
add("block-ordinal-first-of-part-new-series", "multi", setattrs(lambda m: blk(m, 1, 1), ordinal=1), CORRUPT, r"ordinals start at zero")
add("block-time-rule-in-leaf", "multi", _shift_ts(0, 1, -2000), CORRUPT, r"block 1 \(table 1, tsid 5, ordinal 1\): adjacent blocks of a series need previous.max_timestamp <= next.min_timestamp \(1031000 > 1030000\)")
def _zero_seq_after(mutate, p, b):
    """Equal boundary timestamps need nonincreasing sequences across the boundary too:
    the shifted block's sequences become 0 (the smallest u64)."""
    def both(m):
        mutate(m)
        set_enc(blk(m, p, b).seq, kit.enc_seq_const(0), 3)
    return both


add("block-time-rule-equal-ok", "multi", _zero_seq_after(_shift_ts(0, 1, -1000), 0, 1), None, same=False)
add("block-time-rule-across-leaves", "multi", _shift_ts(0, 2, -1500), CORRUPT, r"leaf 1 \(boundary with the previous page\).*previous.max_timestamp <= next.min_timestamp")
add("block-time-rule-across-parts", "multi", _shift_ts(1, 0, -11), CORRUPT, r"part-1.samples leaf 0 \(boundary.*\(310 > 309\)")
add("block-time-rule-across-parts-equal-ok", "multi", _zero_seq_after(_shift_ts(1, 0, -10), 1, 0), None, same=False)

# chunks physically ordered and disjoint across the whole column area


def _phys_swap(part, ka, kb):
    def mutate(m):
        def order(keys):
            keys = list(keys)
            i, j = keys.index(ka), keys.index(kb)
            keys[i], keys[j] = keys[j], keys[i]
            return keys
        m.parts[part].physical_order = order
    return mutate


def _alias(part, k, target):
    def mutate(m):
        m.parts[part].aliases[k] = target
    return mutate


add("chunks-out-of-order-in-block", "multi", _phys_swap(0, (0, 1), (0, 2)), CORRUPT, r"block 0 .*column descriptor 2 \(role 3, id 0\): chunks must be physically ordered and disjoint")
add("chunks-out-of-order-across-blocks", "multi", _phys_swap(0, (0, 4), (1, 0)), CORRUPT, r"block 1 .*column descriptor 0 \(role 1, id 3\): chunks must be physically ordered")
add("chunks-out-of-order-across-leaves", "multi", _phys_swap(0, (1, 3), (2, 0)), CORRUPT, r"leaf 1 block 0: chunks must be physically ordered and disjoint across blocks")
add("chunks-overlap-in-block", "multi", _alias(0, (0, 2), ((0, 1), 1, 1)), CORRUPT, r"block 0 .*column descriptor 2 \(role 3, id 0\): chunks must be physically ordered and disjoint")
add("chunks-overlap-across-blocks", "multi", _alias(0, (1, 2), (0, 2)), CORRUPT, r"block 1 .*column descriptor 2.*physically ordered and disjoint")
add("chunks-overlap-across-leaves", "multi", _alias(1, (2, 0), (1, 0)), CORRUPT, r"leaf 1 block 0: chunks must be physically ordered and disjoint across blocks")
add("chunks-with-gaps-ok", "multi", setattrs(lambda m: m.parts[0], payload_pad=b"\0" * 100, meta_pad=b"\0" * 50), None)


# =============================================================================
# chunk payloads: encodings and compression (stage "decode")
# =============================================================================


def dec(id, fixture, mutate, flags, match=None, err=CORRUPT, read_kw=None):
    add(f"decode-{id}", fixture, mutate, err, match or flags.name, "decode", flags, read_kw)


def _replace_last_varint(get, new, n_last=1):
    """Drop the last ``n_last`` encoded bytes (the final 1-byte varint) and append ``new``."""
    return encoded(get, lambda b: b[:-n_last] + new)


SEQ4 = col(1, 3, SEQ)  # (2,5)#2: 6 rows, seq 36..31, deltas -1 -> 1-byte varints, raw
TS2 = col(0, 2, TS)  # (1,5)#2: delta-of-delta, Zstd
TS1 = col(2, 0, TS)  # (4,1)#1: constant step 2, 8 rows, min 9064
F_K0 = field(1, 4, 7)  # (3,1)#0: 5 rows, kind 0, raw
F_K1 = field(0, 4, 9)  # (1,5)#4: 22 rows, kind 1, 18 nulls, raw
F_ZSTD = field(0, 0, 7)  # (1,5)#0: 32 rows, kind 0, Zstd
OP7 = col(0, 4, OP)  # 22 rows, raw operation types
OP6 = col(1, 4, OP)  # constant delete


def _ts_block(p, b, make_ts, encoding=None, set_bounds=True):
    def mutate(m):
        bl = blk(m, p, b)
        ts = make_ts(kit.decode_column(bl.ts, bl.row_count))
        if encoding == 2:
            set_enc(bl.ts, kit.enc_ts_dod(ts), 2)
        else:
            kit.set_timestamps(bl, ts)
        if set_bounds:
            bl.min_timestamp, bl.max_timestamp = ts[0], ts[-1]
    return mutate


def _decreasing(ts):
    ts = list(ts)
    ts[2], ts[3] = ts[3], ts[2]
    return ts


def _enc1(first, step, lo=None, hi=None):
    def mutate(m):
        bl = blk(m, 2, 0)
        set_enc(bl.ts, kit.enc_ts_const(first, step), 1)
        bl.min_timestamp = first if lo is None else lo
        bl.max_timestamp = bl.max_timestamp if hi is None else hi
    return mutate


dec("varint-truncated-seq", "multi", encoded(SEQ4, lambda b: b[:-1]), F.VARINT_TRUNCATED)
dec("varint-truncated-ts", "multi", encoded(TS2, lambda b: b[:-1]), F.VARINT_TRUNCATED)
dec("varint-truncated-f64", "multi", encoded(field(0, 1, 7), lambda b: b[:-1]), F.VARINT_TRUNCATED)
dec("varint-truncated-continuation", "multi", _replace_last_varint(SEQ4, b"\x81"), F.VARINT_TRUNCATED)
dec("varint-11-bytes", "multi", _replace_last_varint(SEQ4, b"\x81" + b"\x80" * 9 + b"\x00"), F.VARINT_OVERFLOW)
dec("varint-tenth-byte-2", "multi", _replace_last_varint(SEQ4, b"\xff" * 9 + b"\x02"), F.VARINT_OVERFLOW)
dec("varint-tenth-byte-2-ts", "multi", encoded(TS2, lambda b: b[:-1] + b"\x80" * 9 + b"\x02"), F.VARINT_OVERFLOW)
dec("varint-tenth-byte-2-f64", "multi", encoded(F_K0, lambda b: b[:-1] + b"\xff" * 9 + b"\x03"), F.VARINT_OVERFLOW)
add("decode-varint-non-shortest-ok", "multi", _replace_last_varint(SEQ4, b"\x81\x00"), None)
add("decode-varint-ten-bytes-ok", "multi", _replace_last_varint(SEQ4, b"\x81" + b"\x80" * 8 + b"\x00"), None)
dec("trailing-bytes-seq4", "multi", encoded(SEQ4, lambda b: b + b"\x00"), F.TRAILING_BYTES)
dec("trailing-bytes-ts2", "multi", encoded(TS2, lambda b: b + b"\x00"), F.TRAILING_BYTES)
dec("trailing-bytes-f64-kind0", "multi", encoded(F_K0, lambda b: b + b"\x00"), F.TRAILING_BYTES)
dec("trailing-bytes-f64-kind1", "multi", encoded(F_K1, lambda b: b + b"\x05"), F.TRAILING_BYTES)
dec("enc1-17-bytes", "multi", encoded(TS1, lambda b: b + b"\x00"), F.BAD_LENGTH)
dec("enc1-15-bytes", "multi", encoded(TS1, lambda b: b[:-1]), F.BAD_LENGTH)
dec("enc2-7-bytes", "multi", encoded(TS2, lambda b: b[:7]), F.BAD_LENGTH)
dec("enc3-9-bytes", "multi", encoded(col(1, 4, SEQ), lambda b: b + b"\x00"), F.BAD_LENGTH)
dec("enc4-7-bytes", "multi", encoded(SEQ4, lambda b: b[:7]), F.BAD_LENGTH)
dec("enc5-short-first-value", "multi", encoded(F_K0, lambda b: b[:5]), F.BAD_LENGTH)
dec("enc5-short-bitmap", "multi", encoded(F_K1, lambda b: b[:3]), F.BAD_LENGTH)
dec("enc6-2-bytes", "multi", encoded(OP6, lambda b: b + b"\x00"), F.BAD_LENGTH)
dec("enc7-rows-plus-1", "multi", encoded(OP7, lambda b: b + b"\x01"), F.BAD_LENGTH)
dec("enc7-rows-minus-1", "multi", encoded(OP7, lambda b: b[:-1]), F.BAD_LENGTH)
dec("enc1-negative-step", "multi", _enc1(9064, -2), F.NEGATIVE_STEP)
dec("enc1-checked-add-overflow", "multi", _enc1(I64_MAX - 6, 1, hi=I64_MAX), F.TIMESTAMP_OVERFLOW)
dec("enc1-checked-add-overflow-huge-step", "multi", _enc1(9064, I64_MAX, hi=I64_MAX), F.TIMESTAMP_OVERFLOW)
dec("ts-decreasing", "multi", _ts_block(2, 0, _decreasing, encoding=2), F.TIMESTAMP_DECREASING)
dec("ts-decreasing-wrapping", "multi", _ts_block(2, 0, lambda ts: [ts[0], I64_MAX, ts[0] + 1] + list(ts[3:]), encoding=2), F.TIMESTAMP_DECREASING)
dec("ts-first-below-min", "multi", setattrs(lambda m: blk(m, 1, 1), min_timestamp=4999), F.TIMESTAMP_BOUNDS)
dec("ts-last-above-max", "multi", setattrs(lambda m: blk(m, 2, 0), max_timestamp=9079), F.TIMESTAMP_BOUNDS)
dec("ts-first-above-min-enc2", "multi", setattrs(lambda m: blk(m, 0, 2), min_timestamp=1064009), F.TIMESTAMP_BOUNDS)
dec("validity-kind-2", "multi", encoded(F_K0, lambda b: b"\x02" + b[1:]), F.VALIDITY_KIND)
dec("validity-kind-255", "multi", encoded(F_K1, lambda b: b"\xff" + b[1:]), F.VALIDITY_KIND)
dec("validity-kind0-with-nulls", "multi", setattrs(F_K0, null_count=1), F.NULL_COUNT_MISMATCH)
dec("validity-kind1-count-mismatch", "multi", setattrs(F_K1, null_count=17), F.NULL_COUNT_MISMATCH)
dec("validity-kind1-zero-nulls", "multi", setattrs(F_K1, null_count=0), F.NULL_COUNT_MISMATCH)
dec("validity-padding-bits", "multi", encoded(F_K1, lambda b: b[:3] + bytes([b[3] | 0x80]) + b[4:]), F.VALIDITY_PADDING)
dec("validity-kind1-all-set", "multi",
    encoded(F_K0, lambda b: b"\x01\x1f" + b[1:]), F.NULL_COUNT_MISMATCH)
dec("op-type-2-constant", "multi", encoded(OP6, lambda b: b"\x02"), F.OP_TYPE_INVALID)
dec("op-type-255-raw", "multi", encoded(OP7, lambda b: b[:5] + b"\xff" + b[6:]), F.OP_TYPE_INVALID)
dec("op-type-2-raw", "multi", encoded(OP7, lambda b: b[:-1] + b"\x02"), F.OP_TYPE_INVALID)
dec("checksum-chunk", "multi", colref(field(0, 3, 7), checksum=lambda r: r["checksum"] ^ (1 << 63)), F.CHECKSUM_MISMATCH, r"XXH64 of the stored bytes")
dec("checksum-zero", "multi", colref(col(1, 0, TS), checksum=0), F.CHECKSUM_MISMATCH)
dec("unknown-encoding-field", "multi", setattrs(field(0, 0, 9), encoding=99), F.UNSUPPORTED_ENCODING, r"field 'b' \(id 9\).*UNSUPPORTED_ENCODING", err=UNSUPPORTED)
dec("unknown-encoding-ts", "multi", setattrs(col(2, 0, TS), encoding=8), F.UNSUPPORTED_ENCODING, err=UNSUPPORTED)
dec("unknown-encoding-zero", "flat", setattrs(col(0, 4, OP), encoding=0), F.UNSUPPORTED_ENCODING, err=UNSUPPORTED)
dec("unknown-compression-field", "multi", setattrs(field(0, 3, 9), compression=5), F.UNSUPPORTED_COMPRESSION, err=UNSUPPORTED)
dec("unknown-compression-ts", "flat", setattrs(col(0, 2, TS), compression=2), F.UNSUPPORTED_COMPRESSION, err=UNSUPPORTED)
# ... but only when the chunk is decoded: an unprojected field, or a block outside the identity selection
add("decode-unknown-encoding-unprojected-ok", "multi", setattrs(field(0, 0, 9), encoding=99), None, read_kw=NO_B)
add("decode-unknown-encoding-other-series-ok", "multi", setattrs(field(0, 0, 9), encoding=99), None, read_kw=dict(series=[(1, 6), (4, 1)]))
add("decode-unknown-compression-unprojected-ok", "multi", setattrs(field(0, 3, 9), compression=5), None, read_kw=NO_B)
add("decode-unknown-encoding-outside-time-ok", "multi", setattrs(field(0, 0, 9), encoding=99), None, read_kw=dict(start=1_032_000))
add("decode-bad-unprojected-chunk-not-fetched-ok", "multi", colref(field(0, 0, 9), checksum=0), None, read_kw=NO_B)

# Zstd chunks: exactly one frame, ending at the stored length, content size == declared length


def _zstored(get, fn):
    def mutate(m):
        c = get(m)
        c.compression = C.COMP_ZSTD
        c.stored = fn(c.encoded)
    return mutate


dec("zstd-content-size-plus-one", "multi", _zstored(F_ZSTD, lambda e: kit.zstd(e + b"\0")), F.DECODED_LENGTH_MISMATCH)
dec("zstd-content-size-minus-one", "multi", _zstored(F_ZSTD, lambda e: kit.zstd(e[:-1])), F.DECODED_LENGTH_MISMATCH)
dec("zstd-forged-content-size-2-40", "multi", _zstored(F_ZSTD, lambda e: kit.zstd_frame(e, fcs=1 << 40)), F.DECODED_LENGTH_MISMATCH)
dec("zstd-forged-content-size-4-byte", "multi", _zstored(F_ZSTD, lambda e: kit.zstd_frame(e, fcs=(1 << 32) - 1, fcs_bytes=4)), F.DECODED_LENGTH_MISMATCH)
dec("zstd-no-content-size-more-output", "multi", _zstored(F_ZSTD, lambda e: kit.zstd_frame(e + b"\0" * 64)), F.DECODED_LENGTH_MISMATCH)
dec("zstd-no-content-size-less-output", "multi", _zstored(F_ZSTD, lambda e: kit.zstd_frame(e[:-1])), F.DECODED_LENGTH_MISMATCH)
# compressed blocks and no content size: the headers do not prove the decoded size, so the
# GPU backend must decode such a frame on the host (never hand it to nvCOMP) with this verdict
dec("zstd-no-content-size-compressed-more-output", "multi",
    _zstored(F_ZSTD, lambda e: kit.zstd_no_content_size((e[:8] * len(e))[: len(e) + 64])), F.DECODED_LENGTH_MISMATCH)
dec("zstd-no-content-size-compressed-less-output", "multi",
    _zstored(F_ZSTD, lambda e: kit.zstd_no_content_size((e[:8] * len(e))[: len(e) - 1])), F.DECODED_LENGTH_MISMATCH)
dec("zstd-two-frames", "multi", _zstored(F_ZSTD, lambda e: kit.zstd_frame(e[:10]) + kit.zstd_frame(e[10:])), F.ZSTD_FRAME_INVALID)
dec("zstd-two-frames-first-sized", "multi", _zstored(F_ZSTD, lambda e: kit.zstd(e[:10]) + kit.zstd(e[10:])), F.DECODED_LENGTH_MISMATCH)
dec("zstd-trailing-junk", "multi", _zstored(F_ZSTD, lambda e: kit.zstd(e) + b"junk"), F.ZSTD_FRAME_INVALID)
dec("zstd-trailing-zero-byte", "multi", _zstored(F_ZSTD, lambda e: kit.zstd(e) + b"\0"), F.ZSTD_FRAME_INVALID)
dec("zstd-bad-magic", "multi", _zstored(F_ZSTD, lambda e: b"\x27" + kit.zstd(e)[1:]), F.ZSTD_FRAME_INVALID)
dec("zstd-skippable-frame", "multi", _zstored(F_ZSTD, lambda e: b"\x50\x2a\x4d\x18" + b"\x00" * 4 + kit.zstd(e)), F.ZSTD_FRAME_INVALID)
dec("zstd-truncated", "multi", _zstored(F_ZSTD, lambda e: kit.zstd(e)[:-3]), F.ZSTD_FRAME_INVALID)
dec("zstd-window-16mib", "multi", _zstored(F_ZSTD, lambda e: kit.zstd_frame(e, window_exp=14 + 10)), F.ZSTD_FRAME_INVALID)
dec("zstd-raw-bytes-labelled-zstd", "multi", _zstored(col(1, 4, TS), lambda e: e), F.ZSTD_FRAME_INVALID)
# the checksum is verified before decompression: a bad checksum over a hostile frame is only CHECKSUM_MISMATCH
dec("zstd-checksum-before-decompression", "multi",
    seq(_zstored(F_ZSTD, lambda e: kit.zstd_frame(e + bytes(4096))), colref(F_ZSTD, checksum=lambda r: r["checksum"] ^ 1)),
    F.CHECKSUM_MISMATCH)
add("page-checksum-before-decompression", "multi",
    seq(setattrs(root_of(2), compression=1, on_stored=lambda s: kit.zstd_frame(zstandard.decompress(s), fcs=1 << 40)),
        pageref(root_of(2), checksum=lambda r: r["checksum"] ^ 1)),
    CORRUPT, r"root page: XXH64 of the stored bytes")
add("decode-zstd-no-content-size-ok", "multi", _zstored(F_ZSTD, lambda e: kit.zstd_frame(e)), None)
add("decode-zstd-with-checksum-ok", "multi", _zstored(F_ZSTD, lambda e: zstandard.ZstdCompressor(level=19, write_checksum=True).compress(e)), None)
add("decode-zstd-larger-than-raw-ok", "multi", _zstored(col(1, 4, TS), lambda e: kit.zstd(e)), None)


# "Column payloads and row semantics": sequences are nonincreasing within equal
# timestamps, including across parts.  Reads check it over the blocks they decode
# (DecodeErrorFlag.SEQUENCE_ORDER on the later block's sequence chunk).
SEQ_ORDER = r"sequences must be nonincreasing within equal timestamps"


def _seq_in_block(m):
    bl = blk(m, 1, 3)  # SEQ4's block: 6 rows, sequence deltas of -1
    ts = kit.decode_column(bl.ts, bl.row_count)
    kit.set_timestamps(bl, [ts[0]] * len(ts))  # all rows at one timestamp ...
    s = list(kit.decode_column(bl.seq, bl.row_count))
    s[1], s[2] = s[2], s[1]  # ... and one sequence increase
    set_enc(bl.seq, kit.enc_seq_delta(s), 4)


def _seq_tie(pa, a, pb, b, delta=1, same_series=True):
    """Block (pb, b)'s first row moves to block (pa, a)'s last timestamp, with its
    sequence ``delta`` above that row's (wrapping u64): only the boundary pair ties.
    A block of another series (alone in it) is shifted whole instead."""
    def mutate(m):
        A, B = blk(m, pa, a), blk(m, pb, b)
        ta, tb = kit.decode_column(A.ts, A.row_count), kit.decode_column(B.ts, B.row_count)
        if same_series:
            assert B.identity == A.identity and B.ordinal == A.ordinal + 1
            assert B.row_count >= 2 and tb[1] > ta[-1], "the tie must be the boundary pair only"
            kit.set_timestamps(B, [ta[-1]] + list(tb[1:]))
        else:
            assert B.identity != A.identity and B.ordinal == 0
            assert [x.identity for x in m.parts[pb].blocks()].count(B.identity) == 1
            kit.set_timestamps(B, [t - tb[0] + ta[-1] for t in tb])
        sa, sb = kit.decode_column(A.seq, A.row_count), list(kit.decode_column(B.seq, B.row_count))
        sb[0] = (sa[-1] + delta) % 2**64
        set_enc(B.seq, kit.enc_seq_delta(sb), 4)
    return mutate


add("seq-order-in-block", "multi", _seq_in_block, CORRUPT, SEQ_ORDER + r".*row 2 of the block", "decode",
    F.SEQUENCE_ORDER)
add("seq-order-across-blocks", "multi", _seq_tie(0, 0, 0, 1), CORRUPT,
    r"block 1 \(table 1, tsid 5, ordinal 1\).*" + SEQ_ORDER + ".*its first row after the previous block's last row",
    "decode", F.SEQUENCE_ORDER)
add("seq-order-across-leaves", "multi", _seq_tie(0, 1, 0, 2), CORRUPT, SEQ_ORDER, "decode", F.SEQUENCE_ORDER)
add("seq-order-across-parts", "multi", _seq_tie(0, 5, 1, 0), CORRUPT,
    r"part-1\.samples.*ordinal 1.*" + SEQ_ORDER, "decode", F.SEQUENCE_ORDER)
add("seq-order-u64-wrap", "multi", _seq_tie(0, 0, 0, 1, delta=2**64 - 1), None, same=False)  # a decrease: valid
add("seq-order-equal-ok", "multi", _seq_tie(0, 0, 0, 1, delta=0), None, same=False)
add("seq-order-other-series-ok", "multi", _seq_tie(1, 3, 1, 4, same_series=False), None, same=False)
add("seq-order-unselected-block-ok", "multi", _seq_tie(0, 0, 0, 1), None,
    read_kw={"series": [(1, 6)]})  # the bad pair is not decoded: selection reads check what they decode
add("seq-order-unprojected-ok", "multi", _seq_tie(0, 0, 0, 1), None,
    read_kw={"columns": ["ts"]})  # sequences not decoded


# =============================================================================
# the tests
# =============================================================================

_ids = [c.id for c in CASES]
assert len(_ids) == len(set(_ids)), sorted({i for i in _ids if _ids.count(i) > 1})


def test_fixture_shapes(written):
    """The fixture map the cases rely on (see the comment above)."""
    table, root, entry = written["multi"]
    m = kit.ArtifactModel.load(root, entry)
    shape = [[[(b.identity, b.ordinal) for b in lf.blocks] for lf in p.leaves()] for p in m.parts]
    assert shape == [
        [[((1, 5), 0), ((1, 5), 1)], [((1, 5), 2), ((1, 5), 3)], [((1, 5), 4), ((1, 6), 0)]],
        [[((1, 6), 1), ((2, 5), 0)], [((2, 5), 1), ((2, 5), 2)], [((3, 1), 0), ((4, 1), 0)]],
        [[((4, 1), 1)]],
    ]
    assert [kit._height(p.root) for p in m.parts] == [2, 2, 1]
    b = m.parts[0].blocks()
    assert b[0].seq.encoded[:2] == b"\xf4\x01" and b[0].op.encoded == b"\x01"  # chunks-overlap-in-block
    assert (b[2].ts.encoding, b[2].ts.compression) == (2, 1)
    assert F_ZSTD(m).compression == 1 and F_K1(m).null_count == 18 and F_K1(m).compression == 0
    assert SEQ4(m).encoding == 4 and len(SEQ4(m).encoded) == 13 and OP7(m).encoding == 7 and OP6(m).encoded == b"\x00"
    assert TS1(m).encoding == 1 and F_K0(m).encoded[0] == 0
    encs = {(c.role, c.encoding, c.compression) for p in m.parts for bl in p.blocks() for c in bl.columns}
    assert {(1, 1, 0), (1, 2, 1), (2, 3, 0), (2, 4, 0), (2, 4, 1), (3, 6, 0), (3, 7, 0), (3, 7, 1), (4, 5, 0), (4, 5, 1)} <= encs
    flat = kit.ArtifactModel.load(*written["flat"][1:])
    assert [(b.identity, b.ordinal) for b in flat.parts[0].blocks()] == [
        ((1, 1), 0), ((1, 2), 0), ((1, 2), 1), ((2, 1), 0), ((2, 2), 0), ((3, 1), 0)]


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_unmutated_rebuild_reads(name, written, tmp_path):
    """The writer's artifact and the kit's identity rebuild of it both read, validate and
    inspect to the input: every case below fails only because of its one mutation."""
    table, root, entry = written[name]
    art = gs.open_artifact(root, entry=entry, cache=PageCache())
    assert_tables_equal(art.read(), table)
    assert art.validate()["valid"]
    m = kit.ArtifactModel.load(root, entry)
    out_root, out_entry = m.write(tmp_path / "store")
    for op in ("read", "validate", "inspect"):
        res = run_op(op, opener(out_root, out_entry, m.generation_dir(out_root), False), {})
        if op == "read":
            assert_tables_equal(res, table)
    assert_tables_equal(gs.open_artifact(m.generation_dir(out_root), cache=PageCache()).read(), table)


# Open reader bugs (strict xfail: each turns into a failure once fixed, so drop its entry then).
READER_BUGS: dict[str, str] = {}
assert set(READER_BUGS) <= set(_ids)


def _params():
    for c in CASES:
        marks = [pytest.mark.xfail(strict=True, reason=READER_BUGS[c.id])] if c.id in READER_BUGS else []
        yield pytest.param(c, id=c.id, marks=marks)


@pytest.mark.parametrize("case", list(_params()))
def test_rule(case: Case, written, tmp_path):
    table, root, entry, gen_dir = build(case, written, tmp_path)
    open_fn = opener(root, entry, gen_dir, case.gen_dir)
    if case.err is None:
        got = open_fn().read(**case.read_kw)
        if case.same and not case.read_kw:
            assert_tables_equal(got, table)
        assert open_fn().inspect()["parts"]
        if not case.read_kw:
            assert open_fn().validate()["valid"]
        return
    for op in OPS[case.stage]:
        try:
            run_op(op, open_fn, case.read_kw)
        except gs.SamplesError as e:
            check_error(e, case)
        except Exception as e:  # a foreign exception escaped: always a reader bug
            pytest.fail(f"{case.id}: {op} raised foreign {type(e).__module__}.{type(e).__name__}: {e}")
        else:
            pytest.fail(f"{case.id}: {op} did not raise (expected {case.err})")
    if case.stage == "decode" and not case.read_kw:
        open_fn().inspect()  # decodes no payload: must pass


def test_enc1_reaches_i64_max(written, tmp_path):
    """Checked addition rejects overflow only: a block ending exactly at i64::MAX reads."""
    table, root, entry = written["multi"]
    m = kit.ArtifactModel.load(root, entry)
    _enc1(I64_MAX - 7, 1, hi=I64_MAX)(m)
    out_root, out_entry = m.write(tmp_path / "s")
    got = gs.open_artifact(out_root, entry=out_entry, cache=PageCache()).read(series=[(4, 1)], start=I64_MAX - 7)
    assert got.column("ts").cast(pa.int64()).to_pylist() == list(range(I64_MAX - 7, I64_MAX + 1))


def test_manifest_over_limit_not_read(written, tmp_path, monkeypatch):
    """A recorded manifest size over 64 MiB is refused before any byte is read."""
    table, root, entry = written["multi"]
    m = kit.ArtifactModel.load(root, entry)
    _obj_size(0, 64 << 20)(m)
    out_root, out_entry = m.write(tmp_path / "s")
    calls = []
    from gtsamples import storage

    def spy(self, key, *a, **kw):
        calls.append(key)
        raise AssertionError(f"read {key}")
    for name in ("read_into", "read", "read_whole"):
        monkeypatch.setattr(storage.LocalStore, name, spy)
    with pytest.raises(gs.CorruptArtifactError, match="exceeds the manifest limit") as ei:
        gs.open_artifact(out_root, entry=out_entry)
    assert type(ei.value) is gs.CorruptArtifactError and calls == []


def test_manifest_file_over_limit_generation_dir(written, tmp_path):
    """Opened without an entry, a manifest file over 64 MiB is refused (bounded read)."""
    table, root, entry = written["multi"]
    m = kit.ArtifactModel.load(root, entry)
    m.on_manifest = lambda d: (json.dumps(d) + " " * (C.MAX_MANIFEST_BYTES + 1)).encode()
    out_root, out_entry = m.write(tmp_path / "s")
    with pytest.raises(gs.CorruptArtifactError, match=r"exceeds the limit of 67108864") as ei:
        gs.open_artifact(m.generation_dir(out_root), cache=PageCache())
    assert type(ei.value) is gs.CorruptArtifactError
    os.remove(os.path.join(m.generation_dir(out_root), "manifest.json"))


def test_manifest_at_limit_whitespace_ok(written, tmp_path):
    """Whitespace is JSON: a manifest padded to exactly 64 MiB still opens."""
    table, root, entry = written["flat"]
    m = kit.ArtifactModel.load(root, entry)
    m.on_manifest = lambda d: (lambda b: b + b" " * (C.MAX_MANIFEST_BYTES - len(b)))(json.dumps(d).encode())
    out_root, out_entry = m.write(tmp_path / "s")
    art = gs.open_artifact(out_root, entry=out_entry, cache=PageCache())
    assert_tables_equal(art.read(), table)
    os.remove(os.path.join(m.generation_dir(out_root), "manifest.json"))


def test_empty_artifact(tmp_path):
    """An empty artifact: "files": [] and no part objects; reads zero rows."""
    make, kw = FIXTURES["flat"]
    t = make().slice(0, 0)
    e = gs.write_artifact(t, tmp_path, region_id=1, source_file_id="00000000-0000-4000-8000-000000000001",
                          generation="00000000-0000-4000-8000-000000000002", **kw)
    assert [o["path"].rsplit("/", 1)[1] for o in e["objects"]] == ["manifest.json"]
    art = gs.open_artifact(tmp_path, entry=e)
    assert art.manifest.files == () and art.read().num_rows == 0
    # ... and an object list naming a part that the manifest does not have is a mismatch
    d = e.to_dict()
    d["objects"].append({"path": d["objects"][0]["path"].replace("manifest.json", "part-0.samples"), "file_size": 200})
    d["file_size"] += 200
    with pytest.raises(gs.CatalogMismatchError, match="unexpected"):
        gs.open_artifact(tmp_path, entry=d)


# =============================================================================
# no foreign exception, whatever the bytes (seeded, re-fixed checksums)
# =============================================================================


def _random_mutation(rng: random.Random, m: kit.ArtifactModel) -> str:
    part = rng.choice(m.parts)
    kind = rng.randrange(6)
    blocks = part.blocks()
    b = rng.choice(blocks)
    c = rng.choice(b.columns)
    if kind == 0:  # flip bytes of a chunk's encoded bytes
        e = bytearray(c.encoded)
        for _ in range(rng.randint(1, 3)):
            e[rng.randrange(len(e))] ^= 1 << rng.randrange(8)
        set_enc(c, bytes(e))
        return "chunk"
    if kind == 1:  # truncate or extend a chunk
        set_enc(c, c.encoded[: rng.randrange(len(c.encoded))] if rng.random() < 0.5 else c.encoded + bytes([rng.randrange(256)]))
        return "chunk-len"
    if kind == 2:  # flip bits of a decoded page (descriptors), re-stored raw with a fixed checksum
        pg = rng.choice(kit._post_order(part.root))
        pos = [rng.randrange(12, 600) for _ in range(rng.randint(1, 3))]
        bits = [rng.randrange(8) for _ in pos]

        def flip(d, pos=pos, bits=bits):
            d = bytearray(d)
            for p, bit in zip(pos, bits):
                d[p % len(d)] ^= 1 << bit
            return bytes(d)
        pg.on_decoded = flip
        return "page"
    if kind == 3:  # a random descriptor field
        name = rng.choice(["row_count", "min_timestamp", "max_timestamp", "ordinal", "table_id", "tsid"])
        setattr(b, name, rng.choice([0, 1, getattr(b, name) + rng.choice([-1, 1]), (1 << 31) - 1, (1 << 32) - 1]) % (1 << 32))
        return "block"
    if kind == 4:  # a random reference field
        name = rng.choice(["offset", "stored_len", "decoded_len", "encoding", "compression"])
        values = {"offset": [0, 16, 1 << 40, U64_MAX], "encoding": [0, 1, 2, 7, 255, 65535],
                  "compression": [0, 1, 2, 65535]}.get(name, [0, 1, 2, 7, 255, 65535, (1 << 32) - 1])
        c.ref[name] = rng.choice(values)
        return "ref"
    c.null_count = rng.choice([0, 1, b.row_count - 1, b.row_count, (1 << 32) - 1])
    return "nulls"


@pytest.mark.parametrize("seed", range(int(os.environ.get("GTS_FUZZ_SEEDS", "6"))))
def test_random_mutations_raise_only_samples_errors(seed, written, tmp_path):
    rng = random.Random(seed)
    outcomes = {"ok": 0, "error": 0}
    for i in range(30):
        name = rng.choice(["multi", "flat"])
        table, root, entry = written[name]
        m = kit.ArtifactModel.load(root, entry)
        what = _random_mutation(rng, m)
        out_root, out_entry = m.write(tmp_path / f"s{i}")
        for op in ("read", "validate", "inspect"):
            try:
                run_op(op, opener(out_root, out_entry, None, False), {})
                outcomes["ok"] += 1
            except gs.SamplesError:
                outcomes["error"] += 1
            except Exception as e:  # noqa: BLE001
                pytest.fail(f"seed {seed} #{i} ({what}) {op}: foreign {type(e).__name__}: {e}")
    assert outcomes["error"] > 0
