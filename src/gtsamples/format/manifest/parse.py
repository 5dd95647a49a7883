"""The manifest's and the catalog entry's rules, in the spec's order:
:func:`parse_manifest`, :func:`parse_catalog_entry`, and the checks of a manifest
against its catalog entry."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import CatalogMismatchError, CorruptArtifactError, UnsupportedError
from .. import constants as C
from . import files_array
from .checks import (U32, U64, Broken, Keys, PartRows, distinct, file_id_text, integer,
                     load_strict_json, nonempty, obj, text)
from .model import PART_COLUMNS, CatalogEntry, FieldColumn, Manifest, ObjectRef, PartTable, TimestampColumn

# --- the manifest ------------------------------------------------------------------------

_MANIFEST_KEYS = Keys(("format", "version", "region_id", "source_file_id", "generation", "timestamp", "fields", "files"))
_TIMESTAMP_KEYS = Keys(("column_id", "name", "unit"))
_FIELD_KEYS = Keys(("column_id", "name", "type", "nullable"))
MIN_PART_SIZE = C.HEADER_SIZE + C.TRAILER_SIZE

#: Documents longer than this have their ``files`` array read column-wise (see below).
SCAN_FILES_BYTES = 64 * 1024


def parse_manifest(data: bytes, what: str = C.MANIFEST_NAME) -> Manifest:
    """Parse and validate manifest bytes; raise CorruptArtifactError (UnsupportedError
    for another version) naming the first broken rule."""
    if len(data) > C.MAX_MANIFEST_BYTES:
        raise CorruptArtifactError(f"{what}: {len(data)} bytes exceeds the manifest limit of {C.MAX_MANIFEST_BYTES} bytes")
    doc = load_strict_json(data, what) if len(data) <= SCAN_FILES_BYTES else files_array.load_scanning_files(data, what)
    try:
        return _manifest(doc)
    except Broken as e:
        raise e.error(what) from None


def _manifest(doc: Any) -> Manifest:
    if not isinstance(doc, dict):
        raise Broken("top level", f"expected an object, found {type(doc).__name__}")
    # format and version first: an unknown version is unsupported, not corrupt
    if doc.get("format") != C.FORMAT_NAME:
        raise Broken("format", f"expected {C.FORMAT_NAME!r}, found {doc.get('format')!r}")
    version = doc.get("version")
    if type(version) is not int:
        raise Broken("version", f"expected an integer, found {version!r}")
    if version != C.MANIFEST_VERSION:
        raise Broken("version", f"manifest version {version} is not supported (expected {C.MANIFEST_VERSION})",
                      UnsupportedError)
    obj(doc, "top level", _MANIFEST_KEYS)
    region_id = integer(doc["region_id"], "region_id", U64)
    source_file_id = file_id_text(doc["source_file_id"], "source_file_id")
    generation = file_id_text(doc["generation"], "generation")
    ts, fields = _columns(doc["timestamp"], doc["fields"])
    return Manifest(region_id, source_file_id, generation, ts, fields, _parts(doc["files"]))


def _columns(t: Any, fl: Any) -> tuple[TimestampColumn, tuple[FieldColumn, ...]]:
    t = obj(t, "timestamp", _TIMESTAMP_KEYS)
    ts_id = integer(t["column_id"], "timestamp.column_id", U32)
    ts_name = text(t["name"], "timestamp.name")
    unit = text(t["unit"], "timestamp.unit")
    if unit not in C.TIME_UNITS:
        raise Broken("timestamp.unit", f"{unit!r} is not one of {', '.join(C.TIME_UNITS)}")
    nonempty(ts_name, "timestamp.name")
    if not isinstance(fl, list):
        raise Broken("fields", f"expected an array, found {type(fl).__name__}")
    if not C.MIN_FIELDS <= len(fl) <= C.MAX_FIELDS:
        raise Broken("fields", f"{len(fl)} fields; require {C.MIN_FIELDS}..={C.MAX_FIELDS}")
    key = [(ts_id, ts_name, unit)]
    for i, f in enumerate(fl):
        try:
            key.append(_field(f))
        except Broken as e:
            raise e.inside(f"fields[{i}]") from None
    distinct([k[0] for k in key], "fields", "timestamp and field column IDs must be distinct")
    distinct([*C.INTERNAL_COLUMN_NAMES, *(k[1] for k in key)], "fields", _UNIQUE_NAMES)
    return _column_objects(tuple(key))


_UNIQUE_NAMES = f"output names must be unique, including {', '.join(C.INTERNAL_COLUMN_NAMES)}"


def _field(f: Any) -> tuple[int, str]:
    o = obj(f, "", _FIELD_KEYS)
    if o["type"] != C.FIELD_TYPE:
        raise Broken("type", f"expected {C.FIELD_TYPE!r}, found {o['type']!r}")
    if o["nullable"] is not True:
        raise Broken("nullable", f"expected true, found {o['nullable']!r}")
    name = nonempty(text(o["name"], "name"), "name")
    return integer(o["column_id"], "column_id", U32), name


_COLUMNS: dict = {}


def _column_objects(key: tuple) -> tuple[TimestampColumn, tuple[FieldColumn, ...]]:
    """The timestamp column and field list of ``key`` ((ts id, name, unit), then (field
    id, name) pairs), one shared pair of objects per distinct key: the artifacts of a
    region usually have the same columns, and code keyed on the field list object
    (leaf checks, region batching) then sees the same object."""
    hit = _COLUMNS.get(key)
    if hit is None:
        if len(_COLUMNS) >= 4096:
            _COLUMNS.clear()
        hit = _COLUMNS[key] = (TimestampColumn(*key[0]), tuple(FieldColumn(cid, name) for cid, name in key[1:]))
    return hit


def _lex_le(a_hi, a_lo, b_hi, b_lo):
    return (a_hi < b_hi) | ((a_hi == b_hi) & (a_lo <= b_lo))


# The rules between a part's values and its predecessor's, in the order they are
# checked (all of a part's before the next part's): (where, holds, message).
# ``holds(r, p, i)`` means the same on Python ints (r the row, p the previous row,
# i its index) and on numpy columns (r[k] column k of parts 1.., p[k] of parts
# 0.., i the indices): one expression serves both.
_PART_RULES = (
    ("part_id", lambda r, p, i: r[0] == i,
     lambda r, p, i: f"part IDs start at zero and increase by one: found {r[0]}, expected {i}"),
    ("", lambda r, p, i: (r[2] > 0) & (r[3] > 0),
     lambda r, p, i: f"every part is nonempty: num_rows {r[2]}, num_blocks {r[3]}"),
    ("", lambda r, p, i: r[3] <= r[2],
     lambda r, p, i: f"num_blocks {r[3]} exceeds num_rows {r[2]} (blocks have nonzero rows)"),
    ("", lambda r, p, i: (r[2] - 1) // C.MAX_BLOCK_ROWS < r[3],  # num_rows <= num_blocks x max, no overflow
     lambda r, p, i: f"num_rows {r[2]} exceeds num_blocks {r[3]} x {C.MAX_BLOCK_ROWS} rows"),
    ("file_size", lambda r, p, i: r[1] >= MIN_PART_SIZE,
     lambda r, p, i: f"{r[1]} is smaller than header + trailer ({MIN_PART_SIZE})"),
    ("", lambda r, p, i: _lex_le(r[4], r[5], r[6], r[7]),
     lambda r, p, i: f"first {(r[4], r[5])} > last {(r[6], r[7])}; require first <= last"),
    ("", lambda r, p, i: r[8] <= r[9],
     lambda r, p, i: f"min_timestamp {r[8]} > max_timestamp {r[9]}"),
    ("", lambda r, p, i: _lex_le(p[6], p[7], r[4], r[5]),
     lambda r, p, i: f"parts follow input order: previous last {(p[6], p[7])} > first {(r[4], r[5])}"),
)
_NO_PREVIOUS = (0,) * len(PART_COLUMNS)  # before part 0: passes the order rule
_ROW_BY_ROW = 16  # up to this many parts, checking row by row is faster than numpy


def _broken_row(r: tuple, p: tuple, i: int) -> Broken | None:
    for where, holds, message in _PART_RULES:
        if not holds(r, p, i):
            return Broken(where, message(r, p, i)).inside(f"files[{i}]")
    return None


def _first_broken_row(a: np.ndarray) -> Broken | None:
    n = a.shape[0]
    if n <= _ROW_BY_ROW:
        p = _NO_PREVIOUS
        for i, r in enumerate(a.tolist()):
            broken = _broken_row(r, p, i)
            if broken is not None:
                return broken
            p = r
        return None
    broken = _broken_row(a[0].item(), _NO_PREVIOUS, 0)
    if broken is not None:
        return broken
    cols = [a[k] for k in PART_COLUMNS]  # parts 1.. against their predecessors (views)
    rest, prev, index = [c[1:] for c in cols], [c[:-1] for c in cols], np.arange(1, n, dtype=np.uint64)
    ok = np.ones(n - 1, bool)
    for _, holds, _ in _PART_RULES:
        ok &= holds(rest, prev, index)
    bad = np.flatnonzero(~ok)
    if not bad.size:
        return None
    i = int(bad[0]) + 1
    return _broken_row(a[i].item(), a[i - 1].item(), i)


def _parts(pl: Any) -> PartTable:
    if not isinstance(pl, PartRows):
        if not isinstance(pl, list):
            raise Broken("files", f"expected an array, found {type(pl).__name__}")
        pl = PartRows.from_list(pl)
    if pl.count > C.U32_MAX + 1:
        raise Broken("files", "too many parts for u32 part IDs")
    broken = _first_broken_row(pl.rows)
    if broken is None and pl.bad is not None:
        broken = pl.bad.inside(f"files[{pl.rows.shape[0]}]")
    if broken is not None:
        raise broken
    return PartTable(pl.rows)


# --- the catalog entry ---------------------------------------------------------------------

_ENTRY_KEYS = Keys(("region_id", "file_id", "generation", "objects", "file_size"), ("format", "version", "created_at"))
_OBJECT_KEYS = Keys(("path", "file_size"))


def parse_catalog_entry(entry: Any, what: str = "catalog entry") -> CatalogEntry:
    """Validate a catalog entry given as a dict (or a CatalogEntry)."""
    if isinstance(entry, CatalogEntry):
        entry = entry.to_dict()
    try:
        return _entry(entry)
    except Broken as e:
        raise e.error(what) from None


def _entry(entry: Any) -> CatalogEntry:
    o = obj(entry, "top level", _ENTRY_KEYS)
    fmt = o.get("format", C.FORMAT_NAME)
    if fmt != C.FORMAT_NAME:
        raise Broken("format", f"expected {C.FORMAT_NAME!r}, found {fmt!r}")
    version = o.get("version", C.MANIFEST_VERSION)
    if type(version) is not int:
        raise Broken("version", f"expected an integer, found {version!r}")
    if version != C.MANIFEST_VERSION:
        raise Broken("", f"version {version} is not supported (expected {C.MANIFEST_VERSION})", UnsupportedError)
    created_at = o.get("created_at")
    if created_at is not None:
        text(created_at, "created_at")
    objs = o["objects"]
    if not isinstance(objs, list):
        raise Broken("objects", f"expected an array, found {type(objs).__name__}")
    refs = []
    for i, ob in enumerate(objs):
        try:
            ob = obj(ob, "", _OBJECT_KEYS)
            refs.append(ObjectRef(text(ob["path"], "path"), integer(ob["file_size"], "file_size", U64)))
        except Broken as e:
            raise e.inside(f"objects[{i}]") from None
    return CatalogEntry(
        region_id=integer(o["region_id"], "region_id", U64),
        file_id=file_id_text(o["file_id"], "file_id"),
        generation=file_id_text(o["generation"], "generation"),
        objects=tuple(refs),
        file_size=integer(o["file_size"], "file_size", U64),
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
    prefix = entry.prefix
    expected = {prefix + C.MANIFEST_NAME: manifest_size}
    for pid, size in zip(manifest.files.column("part_id").tolist(), manifest.files.column("file_size").tolist()):
        expected[prefix + C.part_file_name(pid)] = size
    got = {o.path: o.file_size for o in entry.objects}
    if (entry.region_id == manifest.region_id and entry.file_id == manifest.source_file_id
            and entry.generation == manifest.generation and got == expected):
        return  # everything matches (the checks below name the first mismatch)
    what = f"catalog entry {prefix}"
    for name, ev, mv in (
        ("region_id", entry.region_id, manifest.region_id),
        ("file_id / source_file_id", entry.file_id, manifest.source_file_id),
        ("generation", entry.generation, manifest.generation),
    ):
        if ev != mv:
            raise CatalogMismatchError(f"{what}: {name} is {ev!r} in the entry but {mv!r} in the manifest")
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
