"""A reference for ``gtsamples.format.manifest``: the spec's manifest and catalog
entry rules written the plainest way -- the whole document by ``json.loads``
(strict hooks), then each rule checked object by object, in the spec's order,
with the messages the library promises.  Slow (a Python object per part) and
kept only for tests: the library's parse must give the same manifest, or the
same error class and message, for every input (tests/format/test_manifest_files.py).
"""

from __future__ import annotations

import json
import re
from typing import Any

from gtsamples.errors import CorruptArtifactError, UnsupportedError
from gtsamples.format import constants as C
from gtsamples.format.manifest import CatalogEntry, FieldColumn, Manifest, ObjectRef, PartDescriptor, TimestampColumn

FILE_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
MANIFEST_KEYS = ("format", "version", "region_id", "source_file_id", "generation", "timestamp", "fields", "files")
PART_KEYS = ("part_id", "file_size", "num_rows", "num_blocks", "first", "last", "min_timestamp", "max_timestamp")
MIN_PART_SIZE = C.HEADER_SIZE + C.TRAILER_SIZE


class Ctx:
    def __init__(self, what: str):
        self.what = what

    def fail(self, where: str, msg: str):
        raise CorruptArtifactError(f"{self.what}: {where}: {msg}")


def _reject_constant(name):
    raise ValueError(f"non-standard JSON constant {name}")


def _no_duplicates(pairs):
    seen = set()
    for k, _ in pairs:
        if k in seen:
            raise ValueError(f"duplicate key {k!r}")
        seen.add(k)
    return dict(pairs)


def load_strict_json(data: bytes, what: str) -> Any:
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptArtifactError(f"{what}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        raise CorruptArtifactError(f"{what}: not strict JSON: {e}") from None


def obj(ctx, where, v, keys, optional=()):
    if not isinstance(v, dict):
        ctx.fail(where, f"expected an object, found {type(v).__name__}")
    missing = [k for k in keys if k not in v]
    if missing:
        ctx.fail(where, f"missing key(s) {', '.join(missing)}")
    extra = sorted(set(v) - set(keys) - set(optional))
    if extra:
        ctx.fail(where, f"unknown key(s) {', '.join(map(repr, extra))}; expected exactly {', '.join(keys)}")
    return v


def integer(ctx, where, v, lo, hi, kind):
    if type(v) is not int:
        ctx.fail(where, f"expected an integer ({kind}), found {type(v).__name__} {v!r}")
    if not lo <= v <= hi:
        ctx.fail(where, f"{v} is out of range for {kind} [{lo}, {hi}]")
    return v


def u32(ctx, where, v):
    return integer(ctx, where, v, 0, C.U32_MAX, "u32")


def u64(ctx, where, v):
    return integer(ctx, where, v, 0, C.U64_MAX, "u64")


def i64(ctx, where, v):
    return integer(ctx, where, v, C.I64_MIN, C.I64_MAX, "i64")


def string(ctx, where, v):
    if not isinstance(v, str):
        ctx.fail(where, f"expected a string, found {type(v).__name__}")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError as e:
        ctx.fail(where, f"string is not valid Unicode text ({e.reason} at index {e.start})")
    return v


def file_id(ctx, where, v):
    s = string(ctx, where, v)
    if not FILE_ID.fullmatch(s):
        ctx.fail(where, f"{s!r} is not a FileId (lowercase hyphenated UUID)")
    return s


def identity(ctx, where, v):
    o = obj(ctx, where, v, ("table_id", "tsid"))
    return (u32(ctx, where + ".table_id", o["table_id"]), u64(ctx, where + ".tsid", o["tsid"]))


def check_part(ctx, i, o, prev_last):
    """Every rule for ``files[i]``, in order."""
    w = f"files[{i}]"
    o = obj(ctx, w, o, PART_KEYS)
    part = PartDescriptor(
        part_id=u32(ctx, w + ".part_id", o["part_id"]),
        file_size=u64(ctx, w + ".file_size", o["file_size"]),
        num_rows=u64(ctx, w + ".num_rows", o["num_rows"]),
        num_blocks=u64(ctx, w + ".num_blocks", o["num_blocks"]),
        first=identity(ctx, w + ".first", o["first"]),
        last=identity(ctx, w + ".last", o["last"]),
        min_timestamp=i64(ctx, w + ".min_timestamp", o["min_timestamp"]),
        max_timestamp=i64(ctx, w + ".max_timestamp", o["max_timestamp"]),
    )
    if part.part_id != i:
        ctx.fail(w + ".part_id", f"part IDs start at zero and increase by one: found {part.part_id}, expected {i}")
    if part.num_rows == 0 or part.num_blocks == 0:
        ctx.fail(w, f"every part is nonempty: num_rows {part.num_rows}, num_blocks {part.num_blocks}")
    if part.num_blocks > part.num_rows:
        ctx.fail(w, f"num_blocks {part.num_blocks} exceeds num_rows {part.num_rows} (blocks have nonzero rows)")
    if part.num_rows > part.num_blocks * C.MAX_BLOCK_ROWS:
        ctx.fail(w, f"num_rows {part.num_rows} exceeds num_blocks {part.num_blocks} x {C.MAX_BLOCK_ROWS} rows")
    if part.file_size < MIN_PART_SIZE:
        ctx.fail(w + ".file_size", f"{part.file_size} is smaller than header + trailer ({MIN_PART_SIZE})")
    if part.first > part.last:
        ctx.fail(w, f"first {part.first} > last {part.last}; require first <= last")
    if part.min_timestamp > part.max_timestamp:
        ctx.fail(w, f"min_timestamp {part.min_timestamp} > max_timestamp {part.max_timestamp}")
    if prev_last is not None and prev_last > part.first:
        ctx.fail(w, f"parts follow input order: previous last {prev_last} > first {part.first}")
    return part


def parse_manifest(data: bytes, what: str = C.MANIFEST_NAME) -> Manifest:
    if len(data) > C.MAX_MANIFEST_BYTES:
        raise CorruptArtifactError(f"{what}: {len(data)} bytes exceeds the manifest limit of {C.MAX_MANIFEST_BYTES} bytes")
    return check_document(load_strict_json(data, what), what)


def check_document(doc: Any, what: str = C.MANIFEST_NAME) -> Manifest:
    """Every rule of the manifest on a parsed document (any JSON reader's)."""
    ctx = Ctx(what)
    if not isinstance(doc, dict):
        ctx.fail("top level", f"expected an object, found {type(doc).__name__}")
    if doc.get("format") != C.FORMAT_NAME:
        ctx.fail("format", f"expected {C.FORMAT_NAME!r}, found {doc.get('format')!r}")
    version = doc.get("version")
    if type(version) is not int:
        ctx.fail("version", f"expected an integer, found {version!r}")
    if version != C.MANIFEST_VERSION:
        raise UnsupportedError(f"{what}: version: manifest version {version} is not supported (expected {C.MANIFEST_VERSION})")
    obj(ctx, "top level", doc, MANIFEST_KEYS)
    region_id = u64(ctx, "region_id", doc["region_id"])
    source_file_id = file_id(ctx, "source_file_id", doc["source_file_id"])
    generation = file_id(ctx, "generation", doc["generation"])
    t = obj(ctx, "timestamp", doc["timestamp"], ("column_id", "name", "unit"))
    ts = TimestampColumn(u32(ctx, "timestamp.column_id", t["column_id"]), string(ctx, "timestamp.name", t["name"]),
                         string(ctx, "timestamp.unit", t["unit"]))
    if ts.unit not in C.TIME_UNITS:
        ctx.fail("timestamp.unit", f"{ts.unit!r} is not one of {', '.join(C.TIME_UNITS)}")
    if not ts.name:
        ctx.fail("timestamp.name", "must be nonempty")
    fl = doc["fields"]
    if not isinstance(fl, list):
        ctx.fail("fields", f"expected an array, found {type(fl).__name__}")
    if not C.MIN_FIELDS <= len(fl) <= C.MAX_FIELDS:
        ctx.fail("fields", f"{len(fl)} fields; require {C.MIN_FIELDS}..={C.MAX_FIELDS}")
    fields = []
    for i, f in enumerate(fl):
        w = f"fields[{i}]"
        o = obj(ctx, w, f, ("column_id", "name", "type", "nullable"))
        if o["type"] != C.FIELD_TYPE:
            ctx.fail(w + ".type", f"expected {C.FIELD_TYPE!r}, found {o['type']!r}")
        if o["nullable"] is not True:
            ctx.fail(w + ".nullable", f"expected true, found {o['nullable']!r}")
        name = string(ctx, w + ".name", o["name"])
        if not name:
            ctx.fail(w + ".name", "must be nonempty")
        fields.append(FieldColumn(u32(ctx, w + ".column_id", o["column_id"]), name))
    ids = [ts.column_id] + [f.column_id for f in fields]
    if len(set(ids)) != len(ids):
        dup = sorted({x for x in ids if ids.count(x) > 1})
        ctx.fail("fields", f"timestamp and field column IDs must be distinct; repeated: {dup}")
    names = list(C.INTERNAL_COLUMN_NAMES) + [ts.name] + [f.name for f in fields]
    if len(set(names)) != len(names):
        dup = sorted({x for x in names if names.count(x) > 1})
        ctx.fail("fields", f"output names must be unique, including {', '.join(C.INTERNAL_COLUMN_NAMES)}; repeated: {dup}")
    pl = doc["files"]
    if not isinstance(pl, list):
        ctx.fail("files", f"expected an array, found {type(pl).__name__}")
    if len(pl) > C.U32_MAX + 1:
        ctx.fail("files", "too many parts for u32 part IDs")
    parts, prev = [], None
    for i, p in enumerate(pl):
        parts.append(check_part(ctx, i, p, prev))
        prev = parts[-1].last
    return Manifest(region_id, source_file_id, generation, ts, tuple(fields), tuple(parts))


def parse_catalog_entry(entry: Any, what: str = "catalog entry") -> CatalogEntry:
    if isinstance(entry, CatalogEntry):
        entry = entry.to_dict()
    ctx = Ctx(what)
    o = obj(ctx, "top level", entry, ("region_id", "file_id", "generation", "objects", "file_size"),
            ("format", "version", "created_at"))
    fmt = o.get("format", C.FORMAT_NAME)
    if fmt != C.FORMAT_NAME:
        ctx.fail("format", f"expected {C.FORMAT_NAME!r}, found {fmt!r}")
    version = o.get("version", C.MANIFEST_VERSION)
    if type(version) is not int:
        ctx.fail("version", f"expected an integer, found {version!r}")
    if version != C.MANIFEST_VERSION:
        raise UnsupportedError(f"{what}: version {version} is not supported (expected {C.MANIFEST_VERSION})")
    created_at = o.get("created_at")
    if created_at is not None:
        string(ctx, "created_at", created_at)
    objs = o["objects"]
    if not isinstance(objs, list):
        ctx.fail("objects", f"expected an array, found {type(objs).__name__}")
    refs = []
    for i, ob in enumerate(objs):
        w = f"objects[{i}]"
        oo = obj(ctx, w, ob, ("path", "file_size"))
        refs.append(ObjectRef(string(ctx, w + ".path", oo["path"]), u64(ctx, w + ".file_size", oo["file_size"])))
    return CatalogEntry(region_id=u64(ctx, "region_id", o["region_id"]), file_id=file_id(ctx, "file_id", o["file_id"]),
                        generation=file_id(ctx, "generation", o["generation"]), objects=tuple(refs),
                        file_size=u64(ctx, "file_size", o["file_size"]), format=fmt, version=version,
                        created_at=created_at)
