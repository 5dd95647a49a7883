"""manifest.json and the catalog entry ("Artifact manifest").

``parse_manifest`` and ``parse_catalog_entry`` turn untrusted JSON into frozen
objects, enforcing every rule of the spec's "Artifact manifest" section;
``check_entry`` checks a manifest and its object list against a catalog entry.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any, Iterator

import numpy as np

from ..errors import CatalogMismatchError, CorruptArtifactError, UnsupportedError
from . import constants as C

_FILE_ID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

@dataclasses.dataclass(frozen=True)
class TimestampColumn:
    column_id: int
    name: str
    unit: str

    @property
    def arrow_unit(self) -> str:
        return C.ARROW_UNITS[self.unit]


@dataclasses.dataclass(frozen=True)
class FieldColumn:
    column_id: int
    name: str
    type: str = C.FIELD_TYPE
    nullable: bool = True


@dataclasses.dataclass(frozen=True)
class PartDescriptor:
    part_id: int
    file_size: int
    num_rows: int
    num_blocks: int
    first: tuple[int, int]  # (table_id, tsid), inclusive
    last: tuple[int, int]
    min_timestamp: int
    max_timestamp: int

    @property
    def name(self) -> str:
        return C.part_file_name(self.part_id)

    def to_json_obj(self) -> dict:
        return {
            "part_id": self.part_id,
            "file_size": self.file_size,
            "num_rows": self.num_rows,
            "num_blocks": self.num_blocks,
            "first": {"table_id": self.first[0], "tsid": self.first[1]},
            "last": {"table_id": self.last[0], "tsid": self.last[1]},
            "min_timestamp": self.min_timestamp,
            "max_timestamp": self.max_timestamp,
        }


@dataclasses.dataclass(frozen=True)
class Manifest:
    region_id: int
    source_file_id: str
    generation: str
    timestamp: TimestampColumn
    fields: tuple[FieldColumn, ...]
    files: tuple[PartDescriptor, ...]
    format: str = C.FORMAT_NAME
    version: int = C.MANIFEST_VERSION

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def column_names(self) -> tuple[str, ...]:
        """The stored logical schema's column names, in order."""
        return ("__table_id", "__tsid", self.timestamp.name, "__sequence", "__op_type") + self.field_names

    @property
    def num_rows(self) -> int:
        return sum(p.num_rows for p in self.files)

    @property
    def num_blocks(self) -> int:
        return sum(p.num_blocks for p in self.files)

    @property
    def max_block_rows(self) -> int:
        return C.max_block_rows(len(self.fields))

    def object_keys(self, prefix: str = "") -> list[str]:
        """Derived object paths: the manifest first, then parts in manifest order."""
        return [prefix + C.MANIFEST_NAME] + [prefix + p.name for p in self.files]

    def to_json_obj(self) -> dict:
        return {
            "format": self.format,
            "version": self.version,
            "region_id": self.region_id,
            "source_file_id": self.source_file_id,
            "generation": self.generation,
            "timestamp": {"column_id": self.timestamp.column_id, "name": self.timestamp.name, "unit": self.timestamp.unit},
            "fields": [
                {"column_id": f.column_id, "name": f.name, "type": f.type, "nullable": f.nullable} for f in self.fields
            ],
            "files": [p.to_json_obj() for p in self.files],
        }

    def to_json_bytes(self) -> bytes:
        """Canonical serialisation used by our writer: the same bytes as the
        independent writer's vectors (2-space indent, no trailing newline)."""
        return json.dumps(self.to_json_obj(), indent=2).encode()


def artifact_prefix(region_id: int, file_id: str, generation: str) -> str:
    """``<region_id>/samples/<source_file_id>/<generation>/``."""
    return f"{region_id}/samples/{file_id}/{generation}/"


@dataclasses.dataclass(frozen=True)
class ObjectRef:
    path: str
    file_size: int


@dataclasses.dataclass(frozen=True)
class CatalogEntry(Mapping):
    """The spec's catalog entry (``ArtifactMetadata``); also usable as a dict."""

    region_id: int
    file_id: str
    generation: str
    objects: tuple[ObjectRef, ...]
    file_size: int
    format: str = C.FORMAT_NAME
    version: int = C.MANIFEST_VERSION
    created_at: str | None = None

    def to_dict(self) -> dict:
        d = {
            "format": self.format,
            "version": self.version,
            "region_id": self.region_id,
            "file_id": self.file_id,
            "generation": self.generation,
            "objects": [{"path": o.path, "file_size": o.file_size} for o in self.objects],
            "file_size": self.file_size,
        }
        if self.created_at is not None:
            d["created_at"] = self.created_at
        return d

    @property
    def prefix(self) -> str:
        return artifact_prefix(self.region_id, self.file_id, self.generation)

    def object_size(self, key: str) -> int | None:
        for o in self.objects:
            if o.path == key:
                return o.file_size
        return None

    # Mapping interface over to_dict()
    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())


# --- strict JSON helpers ---------------------------------------------------------


class _Ctx:
    """Carries the object name for messages: ``manifest.json: files[2].first.tsid``."""

    def __init__(self, what: str, err=CorruptArtifactError):
        self.what = what
        self.err = err

    def fail(self, where: str, msg: str):
        raise self.err(f"{self.what}: {where}: {msg}")


def _reject_constant(name: str):
    raise ValueError(f"non-standard JSON constant {name}")


def _no_duplicates(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise ValueError(f"duplicate key {k!r}")
        d[k] = v
    return d


def load_strict_json(data: bytes, what: str, err=CorruptArtifactError) -> Any:
    """Strict JSON: UTF-8, no duplicate keys, no NaN/Infinity, no trailing data."""
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise err(f"{what}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        raise err(f"{what}: not strict JSON: {e}") from None


def _obj(ctx: _Ctx, where: str, v: Any, keys: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict:
    if not isinstance(v, dict):
        ctx.fail(where, f"expected an object, found {type(v).__name__}")
    missing = [k for k in keys if k not in v]
    if missing:
        ctx.fail(where, f"missing key(s) {', '.join(missing)}")
    extra = sorted(set(v) - set(keys) - set(optional))
    if extra:
        ctx.fail(where, f"unknown key(s) {', '.join(map(repr, extra))}; expected exactly {', '.join(keys)}")
    return v


def _int(ctx: _Ctx, where: str, v: Any, lo: int, hi: int, kind: str) -> int:
    if type(v) is not int:  # bool and float are not integers here
        ctx.fail(where, f"expected an integer ({kind}), found {type(v).__name__} {v!r}")
    if not lo <= v <= hi:
        ctx.fail(where, f"{v} is out of range for {kind} [{lo}, {hi}]")
    return v


def _u32(ctx, where, v):
    return _int(ctx, where, v, 0, C.U32_MAX, "u32")


def _u64(ctx, where, v):
    return _int(ctx, where, v, 0, C.U64_MAX, "u64")


def _i64(ctx, where, v):
    return _int(ctx, where, v, C.I64_MIN, C.I64_MAX, "i64")


def _str(ctx: _Ctx, where: str, v: Any) -> str:
    if not isinstance(v, str):
        ctx.fail(where, f"expected a string, found {type(v).__name__}")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate escape: valid JSON, not text
        ctx.fail(where, f"string is not valid Unicode text ({e.reason} at index {e.start})")
    return v


def is_file_id(s: Any) -> bool:
    """A ``FileId``: a lowercase hyphenated UUID string."""
    return isinstance(s, str) and _FILE_ID_RE.fullmatch(s) is not None


def parse_file_id(ctx: _Ctx, where: str, v: Any) -> str:
    s = _str(ctx, where, v)
    if not _FILE_ID_RE.fullmatch(s):
        ctx.fail(where, f"{s!r} is not a FileId (lowercase hyphenated UUID)")
    return s


def _identity(ctx: _Ctx, where: str, v: Any) -> tuple[int, int]:
    o = _obj(ctx, where, v, ("table_id", "tsid"))
    return (_u32(ctx, where + ".table_id", o["table_id"]), _u64(ctx, where + ".tsid", o["tsid"]))


_MANIFEST_KEYS = ("format", "version", "region_id", "source_file_id", "generation", "timestamp", "fields", "files")
_PART_KEYS = ("part_id", "file_size", "num_rows", "num_blocks", "first", "last", "min_timestamp", "max_timestamp")
MIN_PART_SIZE = C.HEADER_SIZE + C.TRAILER_SIZE


def parse_manifest(data: bytes, what: str = C.MANIFEST_NAME) -> Manifest:
    """Parse and validate manifest bytes; raise CorruptArtifactError/UnsupportedError."""
    if len(data) > C.MAX_MANIFEST_BYTES:
        raise CorruptArtifactError(f"{what}: {len(data)} bytes exceeds the manifest limit of {C.MAX_MANIFEST_BYTES} bytes")
    ctx = _Ctx(what)
    doc = load_strict_json(data, what)
    if not isinstance(doc, dict):
        ctx.fail("top level", f"expected an object, found {type(doc).__name__}")
    # format and version first: an unknown version is unsupported, not corrupt
    if doc.get("format") != C.FORMAT_NAME:
        ctx.fail("format", f"expected {C.FORMAT_NAME!r}, found {doc.get('format')!r}")
    version = doc.get("version")
    if type(version) is not int:
        ctx.fail("version", f"expected an integer, found {version!r}")
    if version != C.MANIFEST_VERSION:
        raise UnsupportedError(f"{what}: version: manifest version {version} is not supported (expected {C.MANIFEST_VERSION})")
    _obj(ctx, "top level", doc, _MANIFEST_KEYS)
    region_id = _u64(ctx, "region_id", doc["region_id"])
    source_file_id = parse_file_id(ctx, "source_file_id", doc["source_file_id"])
    generation = parse_file_id(ctx, "generation", doc["generation"])

    t = _obj(ctx, "timestamp", doc["timestamp"], ("column_id", "name", "unit"))
    ts = TimestampColumn(
        _u32(ctx, "timestamp.column_id", t["column_id"]),
        _str(ctx, "timestamp.name", t["name"]),
        _str(ctx, "timestamp.unit", t["unit"]),
    )
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
        o = _obj(ctx, w, f, ("column_id", "name", "type", "nullable"))
        if o["type"] != C.FIELD_TYPE:
            ctx.fail(w + ".type", f"expected {C.FIELD_TYPE!r}, found {o['type']!r}")
        if o["nullable"] is not True:
            ctx.fail(w + ".nullable", f"expected true, found {o['nullable']!r}")
        name = _str(ctx, w + ".name", o["name"])
        if not name:
            ctx.fail(w + ".name", "must be nonempty")
        fields.append(FieldColumn(_u32(ctx, w + ".column_id", o["column_id"]), name))

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
    fast = _parts_fast(pl)
    if fast is not None:
        return Manifest(region_id, source_file_id, generation, ts, tuple(fields), fast)
    parts = []  # the slow path names the first broken rule exactly
    for i, p in enumerate(pl):
        w = f"files[{i}]"
        o = _obj(ctx, w, p, _PART_KEYS)
        part = PartDescriptor(
            part_id=_u32(ctx, w + ".part_id", o["part_id"]),
            file_size=_u64(ctx, w + ".file_size", o["file_size"]),
            num_rows=_u64(ctx, w + ".num_rows", o["num_rows"]),
            num_blocks=_u64(ctx, w + ".num_blocks", o["num_blocks"]),
            first=_identity(ctx, w + ".first", o["first"]),
            last=_identity(ctx, w + ".last", o["last"]),
            min_timestamp=_i64(ctx, w + ".min_timestamp", o["min_timestamp"]),
            max_timestamp=_i64(ctx, w + ".max_timestamp", o["max_timestamp"]),
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
        if parts and parts[-1].last > part.first:
            ctx.fail(w, f"parts follow input order: previous last {parts[-1].last} > first {part.first}")
        parts.append(part)

    return Manifest(region_id, source_file_id, generation, ts, tuple(fields), tuple(parts))


_PART_KEYSET = frozenset(_PART_KEYS)
_ID_KEYSET = frozenset(("table_id", "tsid"))


def _lex_le(a_hi, a_lo, b_hi, b_lo):
    return (a_hi < b_hi) | ((a_hi == b_hi) & (a_lo <= b_lo))


def _parts_fast(pl: list) -> tuple[PartDescriptor, ...] | None:
    """Vectorised validation of well-formed part lists (large manifests stay fast).

    Returns None when anything is off; the caller's per-part path then reports
    the exact rule.  Accepts exactly what the per-part path accepts.
    """
    try:
        if not all(type(p) is dict and p.keys() == _PART_KEYSET for p in pl):
            return None
        firsts = [p["first"] for p in pl]
        lasts = [p["last"] for p in pl]
        if not all(type(x) is dict and x.keys() == _ID_KEYSET for x in firsts + lasts):
            return None
        cols = {k: [p[k] for p in pl] for k in ("part_id", "file_size", "num_rows", "num_blocks",
                                                 "min_timestamp", "max_timestamp")}
        cols["ft"] = [x["table_id"] for x in firsts]
        cols["fs"] = [x["tsid"] for x in firsts]
        cols["lt"] = [x["table_id"] for x in lasts]
        cols["ls"] = [x["tsid"] for x in lasts]
        if not all(type(v) is int for col in cols.values() for v in col):
            return None
        u = {k: np.array(cols[k], dtype=np.uint64) for k in ("part_id", "file_size", "num_rows", "num_blocks",
                                                           "ft", "fs", "lt", "ls")}
        i = {k: np.array(cols[k], dtype=np.int64) for k in ("min_timestamp", "max_timestamp")}
    except (OverflowError, ValueError, TypeError):  # negative or out-of-range integers
        return None
    n = len(pl)
    nr, nb = u["num_rows"], u["num_blocks"]
    ok = (
        np.array_equal(u["part_id"], np.arange(n, dtype=np.uint64))
        and bool(np.all(u["ft"] <= C.U32_MAX)) and bool(np.all(u["lt"] <= C.U32_MAX))
        and bool(np.all((nr > 0) & (nb > 0) & (nb <= nr)))
        and bool(np.all((nr - np.uint64(1)) // np.uint64(C.MAX_BLOCK_ROWS) < nb))
        and bool(np.all(u["file_size"] >= MIN_PART_SIZE))
        and bool(np.all(_lex_le(u["ft"], u["fs"], u["lt"], u["ls"])))
        and bool(np.all(i["min_timestamp"] <= i["max_timestamp"]))
        and bool(np.all(_lex_le(u["lt"][:-1], u["ls"][:-1], u["ft"][1:], u["fs"][1:])))
    )
    if not ok:
        return None
    return tuple(
        PartDescriptor(pid, fsz, rows, blocks, (ft, fs), (lt, ls), mn, mx)
        for pid, fsz, rows, blocks, ft, fs, lt, ls, mn, mx in zip(
            cols["part_id"], cols["file_size"], cols["num_rows"], cols["num_blocks"], cols["ft"], cols["fs"],
            cols["lt"], cols["ls"], cols["min_timestamp"], cols["max_timestamp"])
    )


_ENTRY_KEYS = ("region_id", "file_id", "generation", "objects", "file_size")
_ENTRY_OPTIONAL = ("format", "version", "created_at")


def parse_catalog_entry(entry: Any, what: str = "catalog entry") -> CatalogEntry:
    """Validate a catalog entry given as a dict (or a CatalogEntry)."""
    if isinstance(entry, CatalogEntry):
        entry = entry.to_dict()
    ctx = _Ctx(what)
    o = _obj(ctx, "top level", entry, _ENTRY_KEYS, _ENTRY_OPTIONAL)
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
        _str(ctx, "created_at", created_at)
    objs = o["objects"]
    if not isinstance(objs, list):
        ctx.fail("objects", f"expected an array, found {type(objs).__name__}")
    refs = []
    for i, ob in enumerate(objs):
        w = f"objects[{i}]"
        oo = _obj(ctx, w, ob, ("path", "file_size"))
        refs.append(ObjectRef(_str(ctx, w + ".path", oo["path"]), _u64(ctx, w + ".file_size", oo["file_size"])))
    return CatalogEntry(
        region_id=_u64(ctx, "region_id", o["region_id"]),
        file_id=parse_file_id(ctx, "file_id", o["file_id"]),
        generation=parse_file_id(ctx, "generation", o["generation"]),
        objects=tuple(refs),
        file_size=_u64(ctx, "file_size", o["file_size"]),
        format=fmt,
        version=version,
        created_at=created_at,
    )


def check_entry_objects(entry: CatalogEntry) -> int:
    """Checks needing only the entry: manifest object present, sizes sum. Returns manifest size."""
    what = f"catalog entry {entry.prefix}"
    prefix = entry.prefix
    paths = [o.path for o in entry.objects]
    if len(set(paths)) != len(paths):
        dup = sorted({p for p in paths if paths.count(p) > 1})
        raise CatalogMismatchError(f"{what}: objects list duplicate paths {dup}")
    total = sum(o.file_size for o in entry.objects)
    if total != entry.file_size:
        raise CatalogMismatchError(
            f"{what}: file_size {entry.file_size} is not the sum of the object sizes ({total})"
        )
    msize = entry.object_size(prefix + C.MANIFEST_NAME)
    if msize is None:
        raise CatalogMismatchError(f"{what}: objects must include {prefix + C.MANIFEST_NAME}")
    if msize > C.MAX_MANIFEST_BYTES:
        raise CorruptArtifactError(
            f"{what}: manifest size {msize} exceeds the manifest limit of {C.MAX_MANIFEST_BYTES} bytes"
        )
    return msize


def check_entry(entry: CatalogEntry, manifest: Manifest, manifest_size: int) -> None:
    """Region, source SST and generation match; objects are exactly the derived paths."""
    what = f"catalog entry {entry.prefix}"
    for name, ev, mv in (
        ("region_id", entry.region_id, manifest.region_id),
        ("file_id / source_file_id", entry.file_id, manifest.source_file_id),
        ("generation", entry.generation, manifest.generation),
    ):
        if ev != mv:
            raise CatalogMismatchError(f"{what}: {name} is {ev!r} in the entry but {mv!r} in the manifest")
    prefix = entry.prefix
    expected = {prefix + C.MANIFEST_NAME: manifest_size}
    for p in manifest.files:
        expected[prefix + p.name] = p.file_size
    got = {o.path: o.file_size for o in entry.objects}
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    if missing or extra:
        raise CatalogMismatchError(
            f"{what}: objects must be exactly the manifest and its {len(manifest.files)} part(s); "
            f"missing {missing}, unexpected {extra}"
        )
    for k, v in expected.items():
        if got[k] != v:
            raise CatalogMismatchError(f"{what}: object {k} has file_size {got[k]} in the entry but {v} in the manifest/stored object")
