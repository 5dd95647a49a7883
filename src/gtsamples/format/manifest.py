"""manifest.json and the catalog entry ("Artifact manifest").

``parse_manifest`` and ``parse_catalog_entry`` turn untrusted JSON into frozen
objects, enforcing every rule of the spec's "Artifact manifest" section;
``check_entry`` checks a manifest and its object list against a catalog entry.

One path: strict JSON into Python values (a manifest's ``files`` array as rows
of integers, read column-wise when the document is large: F4), then one check
per rule, in the spec's order; the first broken rule raises, naming the object,
the key path, the rule and what was found.
"""

from __future__ import annotations

import array
import dataclasses
import functools
import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Iterable, Iterator

import numpy as np

from ..errors import CatalogMismatchError, CorruptArtifactError, UnsupportedError
from . import constants as C

#: A ``FileId``: a lowercase hyphenated UUID (matched whole: ``fullmatch``, so no trailing newline).
_FILE_ID_FULLMATCH = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}").fullmatch


def is_file_id(s: Any) -> bool:
    """A ``FileId``: a lowercase hyphenated UUID string (the one FileId rule: the
    manifest, the catalog entry, the region catalog and the writer use it)."""
    return isinstance(s, str) and _FILE_ID_FULLMATCH(s) is not None


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


#: One row per part: the manifest's part descriptors as columns (``first`` and
#: ``last`` split into table ID and TSID).  Values are validated before a row is
#: kept, so table IDs and part IDs fit u32 although stored as u64.
PART_COLUMNS = ("part_id", "file_size", "num_rows", "num_blocks", "first_table_id", "first_tsid",
                "last_table_id", "last_tsid", "min_timestamp", "max_timestamp")
PART_DTYPE = np.dtype([(k, "<i8" if k.endswith("timestamp") else "<u8") for k in PART_COLUMNS])
_ITER_ROWS = 4096


def _descriptor(r: tuple) -> PartDescriptor:
    return PartDescriptor(r[0], r[1], r[2], r[3], (r[4], r[5]), (r[6], r[7]), r[8], r[9])


class PartTable(Sequence):
    """``Manifest.files``: a read-only sequence of :class:`PartDescriptor` kept as
    one numpy structured array (:data:`PART_DTYPE`), so a manifest of many parts
    costs 80 bytes per part and checks run column-wise.  Indexing and iteration
    build the descriptors on demand; :meth:`column` gives a column as an array.
    Compares equal to a tuple or list of the same descriptors."""

    __slots__ = ("_a",)

    def __init__(self, array: np.ndarray | None = None):
        a = np.empty(0, PART_DTYPE) if array is None else np.asarray(array)
        if a.dtype != PART_DTYPE or a.ndim != 1:
            raise TypeError(f"PartTable needs a 1-D array of PART_DTYPE, not {a.dtype} x {a.shape}")
        if a.flags.writeable:
            a = a.view()
            a.flags.writeable = False
        self._a = a

    @classmethod
    def from_parts(cls, parts: Iterable[PartDescriptor]) -> "PartTable":
        if isinstance(parts, PartTable):
            return parts
        rows = [(p.part_id, p.file_size, p.num_rows, p.num_blocks, p.first[0], p.first[1], p.last[0], p.last[1],
                 p.min_timestamp, p.max_timestamp) for p in parts]
        return cls(np.array(rows, dtype=PART_DTYPE) if rows else None)

    @property
    def array(self) -> np.ndarray:
        """The rows (read-only)."""
        return self._a

    def column(self, name: str) -> np.ndarray:
        """One of :data:`PART_COLUMNS` as a read-only array."""
        return self._a[name]

    def __len__(self) -> int:
        return self._a.shape[0]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return PartTable(self._a[i])
        return _descriptor(self._a[i].item())

    def __iter__(self) -> Iterator[PartDescriptor]:
        a = self._a
        for k in range(0, a.shape[0], _ITER_ROWS):
            for r in a[k:k + _ITER_ROWS].tolist():
                yield _descriptor(r)

    def __eq__(self, other):
        if isinstance(other, PartTable):
            return len(self) == len(other) and bool(np.array_equal(self._a, other._a))
        if isinstance(other, (tuple, list)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash((len(self), self._a.tobytes()))

    def __reduce__(self):
        return (PartTable, (np.array(self._a),))

    def __repr__(self) -> str:
        if len(self) <= 4:
            return f"PartTable({list(self)!r})"
        return f"PartTable(<{len(self)} parts: {self[0]!r} ... {self[-1]!r}>)"


@dataclasses.dataclass(frozen=True)
class Manifest:
    region_id: int
    source_file_id: str
    generation: str
    timestamp: TimestampColumn
    fields: tuple[FieldColumn, ...]
    files: PartTable  # a Sequence[PartDescriptor]; a tuple or list of them is converted
    format: str = C.FORMAT_NAME
    version: int = C.MANIFEST_VERSION

    def __post_init__(self):
        if not isinstance(self.files, PartTable):
            object.__setattr__(self, "files", PartTable.from_parts(self.files))

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def column_names(self) -> tuple[str, ...]:
        """The stored logical schema's column names, in order."""
        return ("__table_id", "__tsid", self.timestamp.name, "__sequence", "__op_type") + self.field_names

    @property
    def num_rows(self) -> int:
        return sum(self.files.column("num_rows").tolist())

    @property
    def num_blocks(self) -> int:
        return sum(self.files.column("num_blocks").tolist())

    @property
    def max_block_rows(self) -> int:
        return C.max_block_rows(len(self.fields))

    def object_keys(self, prefix: str = "") -> list[str]:
        """Derived object paths: the manifest first, then parts in manifest order."""
        return [prefix + C.MANIFEST_NAME] + [prefix + C.part_file_name(i) for i in self.files.column("part_id").tolist()]

    def to_json_obj(self) -> dict:
        return {
            "format": self.format,
            "version": self.version,
            "region_id": self.region_id,
            "source_file_id": self.source_file_id,
            "generation": self.generation,
            "timestamp": dataclasses.asdict(self.timestamp),
            "fields": [dataclasses.asdict(f) for f in self.fields],
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

    @functools.cached_property
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


# --- strict JSON ---------------------------------------------------------------------


def _reject_constant(name: str):
    raise ValueError(f"non-standard JSON constant {name}")


def _first_duplicate(pairs):
    seen = set()
    for k, _ in pairs:
        if k in seen:
            raise ValueError(f"duplicate key {k!r}")
        seen.add(k)


def _no_duplicates(pairs):
    d = dict(pairs)
    if len(d) != len(pairs):
        _first_duplicate(pairs)
    return d


def _check_duplicates(pairs):
    """The same check keeping nothing (only the first error of a document is wanted)."""
    if len(pairs) > 1 and len(dict(pairs)) != len(pairs):
        _first_duplicate(pairs)


_STRICT_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)


def load_strict_json(data: bytes, what: str, err=CorruptArtifactError) -> Any:
    """Strict JSON: UTF-8, no duplicate keys, no NaN/Infinity, no trailing data.
    (``json.loads`` with the strict hooks, its decoder made once.)"""
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise err(f"{what}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
    try:
        if text.startswith("\ufeff"):  # as json.loads refuses it
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        return _STRICT_DECODER.decode(text)
    except (ValueError, RecursionError) as e:
        raise err(f"{what}: not strict JSON: {e}") from None


# --- the rules ---------------------------------------------------------------------------
#
# Each rule is written once, as a check that returns the value when the rule
# holds and otherwise raises _Broken: where (the key path inside the object) and
# what is wrong, found against expected.  Messages are built only then, so the
# checks cost little on valid input.  parse_manifest and parse_catalog_entry add
# the object's name and raise the gtsamples error.


class _Broken(Exception):
    """A broken rule at ``where`` ("" for the object itself); raised as ``err``."""

    def __init__(self, where: str, message: str, err=CorruptArtifactError):
        super().__init__(where, message)
        self.where, self.message, self.err = where, message, err

    def inside(self, outer: str) -> "_Broken":
        """The same rule broken inside ``outer`` (``files[3]``)."""
        self.where = f"{outer}.{self.where}" if self.where else outer
        return self

    def error(self, what: str) -> Exception:
        return self.err(f"{what}: {self.where}: {self.message}" if self.where else f"{what}: {self.message}")


class _Keys:
    """The keys of a JSON object: required (in the order messages list them) and optional."""

    __slots__ = ("names", "required", "allowed", "optional")

    def __init__(self, names: tuple[str, ...], optional: tuple[str, ...] = ()):
        self.names, self.optional = names, optional
        self.required, self.allowed = frozenset(names), frozenset(names + optional)


def _obj(v: Any, where: str, keys: _Keys) -> dict:
    """An object with every required key and no key but those allowed."""
    if isinstance(v, dict):
        k = v.keys()
        if k == keys.required or (keys.optional and keys.required <= k <= keys.allowed):
            return v
    else:
        raise _Broken(where, f"expected an object, found {type(v).__name__}")
    missing = [k for k in keys.names if k not in v]
    if missing:
        raise _Broken(where, f"missing key(s) {', '.join(missing)}")
    extra = sorted(set(v) - keys.allowed)
    raise _Broken(where, f"unknown key(s) {', '.join(map(repr, extra))}; expected exactly {', '.join(keys.names)}")


_U32 = (0, C.U32_MAX, "u32")
_U64 = (0, C.U64_MAX, "u64")
_I64 = (C.I64_MIN, C.I64_MAX, "i64")


def _int(v: Any, where: str, kind: tuple[int, int, str]) -> int:
    """An integer (not a bool, not a float such as 1.0) within ``kind``'s range."""
    lo, hi, name = kind
    if type(v) is not int:
        raise _Broken(where, f"expected an integer ({name}), found {type(v).__name__} {v!r}")
    if not lo <= v <= hi:
        raise _Broken(where, f"{v} is out of range for {name} [{lo}, {hi}]")
    return v


def _str(v: Any, where: str) -> str:
    """A string with a UTF-8 form (a lone surrogate escape is valid JSON, not text: F5)."""
    if not isinstance(v, str):
        raise _Broken(where, f"expected a string, found {type(v).__name__}")
    if not v.isascii():
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as e:
            raise _Broken(where, f"string is not valid Unicode text ({e.reason} at index {e.start})") from None
    return v


def _name(v: Any, where: str) -> str:
    if not _str(v, where):
        raise _Broken(where, "must be nonempty")
    return v


def _file_id(v: Any, where: str) -> str:
    s = _str(v, where)
    if _FILE_ID_FULLMATCH(s) is None:
        raise _Broken(where, f"{s!r} is not a FileId (lowercase hyphenated UUID)")
    return s


def _distinct(values: list, where: str, rule: str) -> None:
    if len(set(values)) != len(values):
        raise _Broken(where, f"{rule}; repeated: {sorted({x for x in values if values.count(x) > 1})}")


# --- the manifest ------------------------------------------------------------------------

_MANIFEST_KEYS = _Keys(("format", "version", "region_id", "source_file_id", "generation", "timestamp", "fields", "files"))
_TIMESTAMP_KEYS = _Keys(("column_id", "name", "unit"))
_FIELD_KEYS = _Keys(("column_id", "name", "type", "nullable"))
_PART_KEYS = _Keys(("part_id", "file_size", "num_rows", "num_blocks", "first", "last", "min_timestamp", "max_timestamp"))
_ID_KEYS = _Keys(("table_id", "tsid"))
MIN_PART_SIZE = C.HEADER_SIZE + C.TRAILER_SIZE

#: Documents longer than this have their ``files`` array read column-wise (see below).
SCAN_FILES_BYTES = 64 * 1024


def parse_manifest(data: bytes, what: str = C.MANIFEST_NAME) -> Manifest:
    """Parse and validate manifest bytes; raise CorruptArtifactError (UnsupportedError
    for another version) naming the first broken rule."""
    if len(data) > C.MAX_MANIFEST_BYTES:
        raise CorruptArtifactError(f"{what}: {len(data)} bytes exceeds the manifest limit of {C.MAX_MANIFEST_BYTES} bytes")
    doc = load_strict_json(data, what) if len(data) <= SCAN_FILES_BYTES else _load_scanning_files(data, what)
    try:
        return _manifest(doc)
    except _Broken as e:
        raise e.error(what) from None


def _manifest(doc: Any) -> Manifest:
    if not isinstance(doc, dict):
        raise _Broken("top level", f"expected an object, found {type(doc).__name__}")
    # format and version first: an unknown version is unsupported, not corrupt
    if doc.get("format") != C.FORMAT_NAME:
        raise _Broken("format", f"expected {C.FORMAT_NAME!r}, found {doc.get('format')!r}")
    version = doc.get("version")
    if type(version) is not int:
        raise _Broken("version", f"expected an integer, found {version!r}")
    if version != C.MANIFEST_VERSION:
        raise _Broken("version", f"manifest version {version} is not supported (expected {C.MANIFEST_VERSION})",
                      UnsupportedError)
    _obj(doc, "top level", _MANIFEST_KEYS)
    region_id = _int(doc["region_id"], "region_id", _U64)
    source_file_id = _file_id(doc["source_file_id"], "source_file_id")
    generation = _file_id(doc["generation"], "generation")
    ts, fields = _columns(doc["timestamp"], doc["fields"])
    return Manifest(region_id, source_file_id, generation, ts, fields, _parts(doc["files"]))


def _columns(t: Any, fl: Any) -> tuple[TimestampColumn, tuple[FieldColumn, ...]]:
    t = _obj(t, "timestamp", _TIMESTAMP_KEYS)
    ts_id = _int(t["column_id"], "timestamp.column_id", _U32)
    ts_name = _str(t["name"], "timestamp.name")
    unit = _str(t["unit"], "timestamp.unit")
    if unit not in C.TIME_UNITS:
        raise _Broken("timestamp.unit", f"{unit!r} is not one of {', '.join(C.TIME_UNITS)}")
    _name(ts_name, "timestamp.name")
    if not isinstance(fl, list):
        raise _Broken("fields", f"expected an array, found {type(fl).__name__}")
    if not C.MIN_FIELDS <= len(fl) <= C.MAX_FIELDS:
        raise _Broken("fields", f"{len(fl)} fields; require {C.MIN_FIELDS}..={C.MAX_FIELDS}")
    key = [(ts_id, ts_name, unit)]
    for i, f in enumerate(fl):
        try:
            key.append(_field(f))
        except _Broken as e:
            raise e.inside(f"fields[{i}]") from None
    _distinct([k[0] for k in key], "fields", "timestamp and field column IDs must be distinct")
    _distinct(list(C.INTERNAL_COLUMN_NAMES) + [k[1] for k in key], "fields",
              f"output names must be unique, including {', '.join(C.INTERNAL_COLUMN_NAMES)}")
    return _column_objects(tuple(key))


def _field(f: Any) -> tuple[int, str]:
    o = _obj(f, "", _FIELD_KEYS)
    if o["type"] != C.FIELD_TYPE:
        raise _Broken("type", f"expected {C.FIELD_TYPE!r}, found {o['type']!r}")
    if o["nullable"] is not True:
        raise _Broken("nullable", f"expected true, found {o['nullable']!r}")
    name = _name(o["name"], "name")
    return _int(o["column_id"], "column_id", _U32), name


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


# --- parts -------------------------------------------------------------------------------
#
# The files array becomes rows of PART_DTYPE (a PartTable): _part_row checks a
# part object's keys and the type and range of each value (the rules that make
# it a row), then the rules between values (_PART_RULES) run on the rows: row by
# row for a few parts, column-wise for many.


def _part_row(o: Any) -> tuple:
    """A part object as a row (PART_COLUMNS order), or _Broken (where relative to the part)."""
    o = _obj(o, "", _PART_KEYS)
    return (_int(o["part_id"], "part_id", _U32), _int(o["file_size"], "file_size", _U64),
            _int(o["num_rows"], "num_rows", _U64), _int(o["num_blocks"], "num_blocks", _U64),
            *_identity(o["first"], "first", "first.table_id", "first.tsid"),
            *_identity(o["last"], "last", "last.table_id", "last.tsid"),
            _int(o["min_timestamp"], "min_timestamp", _I64), _int(o["max_timestamp"], "max_timestamp", _I64))


def _identity(v: Any, where: str, table_id_where: str, tsid_where: str) -> tuple[int, int]:
    o = _obj(v, where, _ID_KEYS)
    return _int(o["table_id"], table_id_where, _U32), _int(o["tsid"], tsid_where, _U64)


#: the range of each PART_COLUMNS value, as _part_row checks it (the column-wise reader
#: keeps a row only where all values are within these)
_PART_RANGES = (_U32, _U64, _U64, _U64, _U32, _U64, _U32, _U64, _I64, _I64)


def _lex_le(a_hi, a_lo, b_hi, b_lo):
    return (a_hi < b_hi) | ((a_hi == b_hi) & (a_lo <= b_lo))


# The rules between a part's values and its predecessor's, in the order they are
# checked (all of a part's before the next part's): (where, holds, message).
# ``holds(r, p, i)`` means the same on Python ints (r the row, p the previous row,
# i its index) and on numpy columns (r[k] column k of every row, p[k] of the
# rows before them (the last-identity columns only), i the indices): one
# expression serves both.
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


def _broken_row(r: tuple, p: tuple, i: int) -> _Broken | None:
    for where, holds, message in _PART_RULES:
        if not holds(r, p, i):
            return _Broken(where, message(r, p, i)).inside(f"files[{i}]")
    return None


def _first_broken_row(a: np.ndarray) -> _Broken | None:
    n = a.shape[0]
    if n <= _ROW_BY_ROW:
        p = _NO_PREVIOUS
        for i, r in enumerate(a.tolist()):
            broken = _broken_row(r, p, i)
            if broken is not None:
                return broken
            p = r
        return None
    cols = [a[k] for k in PART_COLUMNS]
    prev = [np.concatenate((np.zeros(1, c.dtype), c[:-1])) if k in (6, 7) else None for k, c in enumerate(cols)]
    index = np.arange(n, dtype=np.uint64)
    ok = np.ones(n, bool)
    for _, holds, _ in _PART_RULES:
        ok &= holds(cols, prev, index)
    bad = np.flatnonzero(~ok)
    if not bad.size:
        return None
    i = int(bad[0])
    return _broken_row(a[i].item(), a[i - 1].item() if i else _NO_PREVIOUS, i)


def _parts(pl: Any) -> PartTable:
    if not isinstance(pl, _Parts):
        if not isinstance(pl, list):
            raise _Broken("files", f"expected an array, found {type(pl).__name__}")
        pl = _Parts.from_list(pl)
    if pl.count > C.U32_MAX + 1:
        raise _Broken("files", "too many parts for u32 part IDs")
    broken = _first_broken_row(pl.rows)
    if broken is None and pl.bad is not None:
        broken = pl.bad.inside(f"files[{pl.rows.shape[0]}]")
    if broken is not None:
        raise broken
    return PartTable(pl.rows)


class _Parts:
    """The ``files`` array as read: the rows of its leading parts that _part_row
    takes, the _Broken of the element after them if any (later elements are only
    read as JSON: that element holds the first broken rule), the element count."""

    __slots__ = ("rows", "bad", "count")

    def __init__(self, rows: np.ndarray, bad: _Broken | None, count: int):
        self.rows = rows
        self.bad = bad
        self.count = count

    @classmethod
    def from_list(cls, pl: list) -> "_Parts":
        rows = []
        bad = None
        for el in pl:
            try:
                rows.append(_part_row(el))
            except _Broken as e:
                bad = e
                break
        return cls(np.array(rows, dtype=PART_DTYPE) if rows else np.empty(0, PART_DTYPE), bad, len(pl))


# --- the files array, column-wise ------------------------------------------------------
#
# A manifest of many parts is mostly its ``files`` array: ~155 bytes per part, so
# up to ~430,000 parts under the 64 MiB limit.  Parsing it as Python objects
# (three dicts and ten ints per part, plus an object_pairs_hook call per dict)
# costs seconds and hundreds of MiB, so ``parse_manifest`` reads the array
# column-wise instead when the document is over SCAN_FILES_BYTES:
#
# * ``_load_scanning_files`` finds the top-level ``"files": [`` and scans the
#   array (``_scan_files``); the rest of the document, with the array replaced by
#   a placeholder string, is parsed by ``json`` as before (``_no_duplicates``).
# * ``_scan_files`` takes the first element's exact text as a template (the
#   element itself is parsed by ``json`` and must be a well-formed part object:
#   the eight keys, ``first``/``last`` with the two identity keys, integer values,
#   any key order, any whitespace).  Then, 1 MiB at a time, it checks that the text
#   is that template repeated -- identical bytes except that each integer may be
#   any run of ``0-9`` and ``-`` -- and hands the runs, comma-separated, to
#   ``json.loads`` as one flat array (which rejects whatever is not a JSON
#   number: ``01``, ``-``, ``1-2``).  The integers go straight into a
#   ``PART_DTYPE`` array: no per-part Python object.
# * Anything else (keys in another order than the first element's, changed
#   whitespace, escapes, a part that is not well-formed) continues element by
#   element from that chunk: each element is parsed by ``json`` (strict hook) and
#   made a row by ``_part_row``, or its broken rule is kept; nothing else is retained.
#   The template's integers become rows only where each is within its column's
#   range (``_PART_RANGES``); elsewhere their parts go through ``_part_row`` too.
# * Any JSON-level error (syntax, duplicate key, NaN, depth) anywhere makes the
#   whole document be parsed once more by ``json`` keeping nothing
#   (``_check_duplicates``), which raises the first error exactly as a plain
#   parse would.  Broken rules are raised only after the whole document is known
#   to be strict JSON: the result is the document a plain parse gives, with its
#   ``files`` as :class:`_Parts` (tests/format/test_manifest_files.py compares them).
#
# A valid 62 MiB manifest of 400k parts thus parses in ~0.6 s with ~120 bytes of memory per
# part beyond the document, against ~5 s and ~900 bytes per part object by object
# (benchmarks/FUZZING.md F4; tests/test_bad_files.py::test_manifest_400k_parts_bounded).


class _NotStrictJSON(Exception):
    """Raised inside the scan: the document is not strict JSON somewhere."""


def _json_key_pattern(key: str) -> bytes:
    """A regex for a JSON string literal spelling ``key`` (each character literal
    or as a ``\\uXXXX`` escape)."""
    out = []
    for ch in key:
        hexes = "".join(f"[{h}{h.upper()}]" if h.isalpha() else h for h in f"{ord(ch):04x}")
        out.append(f"(?:{re.escape(ch)}|\\\\u{hexes})")
    return ('"' + "".join(out) + '"').encode()


_WS = rb"[ \t\n\r]*"
_FILES_RE = re.compile(_json_key_pattern("files") + _WS + rb":" + _WS + rb"(\[)" + _WS)
_SEP_RE = re.compile(_WS + rb"," + _WS)
_SEP_TEXT_RE = re.compile(r"[ \t\n\r]*,[ \t\n\r]*")
_SEP_OR_CLOSE_RE = re.compile(r"[ \t\n\r]*([,\]])[ \t\n\r]*")
_TO_ZERO = bytes.maketrans(b"123456789-", b"0000000000")
_NOT_NUMERIC = bytes(b for b in range(256) if b not in b"0123456789-,")
_CHUNK = 1 << 20
_FLUSH_ROWS = 1 << 16
_TEMPLATE_WINDOW = 1 << 14


def _collapse(b: bytes) -> bytes:
    """``b`` with each run of ``0-9`` and ``-`` replaced by one ``0``."""
    x = np.frombuffer(b.translate(_TO_ZERO), np.uint8)
    if x.shape[0] < 2:
        return x.tobytes()
    d = x == 48
    keep = np.empty(x.shape[0], bool)
    keep[0] = True
    np.logical_and(d[1:], d[:-1], out=keep[1:])
    np.logical_not(keep[1:], out=keep[1:])
    return x[keep].tobytes()


def _hole_columns(pairs: Any) -> tuple[str, ...] | None:
    """For a part object parsed as nested pair lists: the column of each integer
    in text order, or None if it is not a well-formed part object."""
    if type(pairs) is not list or len(pairs) != len(_PART_KEYS.names) or {k for k, _ in pairs} != _PART_KEYS.required:
        return None
    cols = []
    for k, v in pairs:
        if k in ("first", "last"):
            if type(v) is not list or len(v) != 2 or {kk for kk, _ in v} != _ID_KEYS.required:
                return None
            for kk, vv in v:
                if type(vv) is not int:
                    return None
                cols.append(f"{k}_{kk}")
        elif type(v) is not int:
            return None
        else:
            cols.append(k)
    return tuple(cols)


_PAIRS_SCAN = json.JSONDecoder(object_pairs_hook=list, parse_constant=_reject_constant).scan_once
_STRICT_SCAN = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_reject_constant).scan_once


class _RowSink:
    """Collects rows until the first element that is not a well-formed part."""

    def __init__(self):
        self.buf = np.empty(0, PART_DTYPE)
        self.n = 0  # rows in buf
        self.pending: list[tuple] = []
        self.bad: _Broken | None = None
        self.count = 0  # elements seen

    def reserve(self, rows: int) -> None:
        if rows > self.buf.shape[0]:
            buf = np.empty(rows, PART_DTYPE)
            buf[:self.n] = self.buf[:self.n]
            self.buf = buf

    def add_array(self, a: np.ndarray, count: int) -> None:
        self._flush()
        self.reserve(max(self.n + a.shape[0], 2 * self.buf.shape[0]) if self.n + a.shape[0] > self.buf.shape[0] else 0)
        self.buf[self.n:self.n + a.shape[0]] = a
        self.n += a.shape[0]
        self.count += count

    def add_element(self, el: Any) -> None:
        self.count += 1
        if self.bad is not None:
            return
        try:
            r = _part_row(el)
        except _Broken as e:
            self.bad = e
            return
        self.pending.append(r)
        if len(self.pending) >= _FLUSH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self.pending:
            a = np.array(self.pending, dtype=PART_DTYPE)
            self.pending = []
            self.count -= a.shape[0]
            self.add_array(a, a.shape[0])

    def parts(self) -> _Parts:
        self._flush()
        buf = self.buf
        if buf.shape[0] != self.n:
            buf.resize(self.n, refcheck=False)  # in place: nothing else refers to buf
        return _Parts(buf, self.bad, self.count)


def _chunk_rows(sink: _RowSink, vals: list, cols: tuple[str, ...], m: int) -> None:
    """The integers of ``m`` template parts (text order) into the sink."""
    if sink.bad is not None:
        sink.count += m
        return
    k = len(cols)
    a = None
    for code, dtype in (("Q", np.uint64), ("q", np.int64)):  # all of them as u64, else all as i64
        try:
            raw = np.frombuffer(array.array(code, vals), dtype=dtype).reshape(m, k)
        except OverflowError:
            continue
        if dtype is np.uint64:
            fits = all(int(raw[:, h].max()) <= C.I64_MAX for h, c in enumerate(cols) if c.endswith("timestamp"))
        else:
            fits = all(int(raw[:, h].min()) >= 0 for h, c in enumerate(cols) if not c.endswith("timestamp"))
        if fits:
            raw = raw.view(np.uint64)
            if cols != PART_COLUMNS:
                raw = raw[:, [cols.index(c) for c in PART_COLUMNS]]
            a = np.ascontiguousarray(raw).view(PART_DTYPE).reshape(m)
        break
    if a is None:  # u64 columns past i64 and negative timestamps both: column by column
        a = np.empty(m, PART_DTYPE)
        try:
            for h, name in enumerate(cols):
                a[name] = vals[h::k]
        except OverflowError:
            a = None
    if a is not None and not all(int(a[c].max()) <= hi for c, (_, hi, kind) in zip(PART_COLUMNS, _PART_RANGES)
                                 if kind == "u32"):
        a = None
    if a is None:  # some value outside its range: element by element, each through _part_row
        for t in range(m):
            r = tuple(dict(zip(cols, vals[t * k:(t + 1) * k]))[c] for c in PART_COLUMNS)
            sink.add_element(_descriptor(r).to_json_obj())
        return
    sink.add_array(a, m)


def _scan_files(data: bytes, start: int) -> tuple[_Parts, int]:
    """Scan the elements of the array whose first element (or ``]``) is at
    ``start``; return them and the position of the closing ``]``."""
    sink = _RowSink()
    if data[start:start + 1] == b"]":
        return sink.parts(), start
    close = data.find(b"]", start)  # where the array ends if its elements are part objects (they hold no "]")
    end = close
    if end > start and data[end - 1] in b" \t\n\r":
        end = start + len(data[start:close].rstrip(b" \t\n\r"))
    pos = start
    while close > 0:
        template = _template(data, pos, end)
        if template is not None:
            pos = _template_chunks(sink, data, pos, end, template)
            if pos >= end:
                return sink.parts(), close
        # element by element through about one chunk, then a template again
        pos, ok = _window_elements(sink, data, pos, end)
        if not ok:
            break
        if pos >= end:
            return sink.parts(), close
    return _text_elements(sink, data, pos)


def _template_chunks(sink: _RowSink, data: bytes, pos: int, end: int, template) -> int:
    """Template parts from ``pos``, a chunk at a time; where they stop (``>= end``: all)."""
    t0, sep, head, cols = template
    unit = t0 + sep
    k = len(cols)
    sink.reserve(sink.n + (end - pos + len(sep)) // len(unit))  # at most this many parts fit
    while pos < end:
        q = data.find(head, pos + _CHUNK, end) if pos + _CHUNK < end else -1
        if q < 0:
            q = end
        chunk = data[pos:q]
        c = _collapse(chunk)
        m, r = divmod(len(c) + len(sep), len(unit))
        if r or m == 0 or c != unit * (m - 1) + t0:
            return pos  # not the template
        try:
            vals = json.loads(b"[" + chunk.translate(None, _NOT_NUMERIC) + b"]")
        except ValueError:
            raise _NotStrictJSON from None
        if len(vals) != m * k:  # pragma: no cover - implied by the template check
            return pos
        _chunk_rows(sink, vals, cols, m)
        pos = q + len(sep)
    return pos


def _window_elements(sink: _RowSink, data: bytes, pos: int, end: int) -> tuple[int, bool]:
    """Elements one by one (``json``) from ``pos`` through about one chunk of
    ASCII text; return where the next element starts (``end``: the array is
    done) and True, or where to go on with ``_text_elements`` and False (not
    ASCII, an element running past the window, a JSON error)."""
    stop = min(end, pos + _CHUNK)
    w = data[pos:min(end, stop + _TEMPLATE_WINDOW)]
    if not w.isascii():
        return pos, False
    text = w.decode("ascii")
    i = 0
    while True:
        try:
            el, j = _STRICT_SCAN(text, i)
        except (StopIteration, ValueError, RecursionError):
            return pos + i, False
        if pos + j == end:
            sink.add_element(el)
            return end, True
        m = _SEP_TEXT_RE.match(text, j)
        if m is None or m.end() == len(text):
            return pos + i, False
        sink.add_element(el)
        i = m.end()
        if pos + i >= stop:
            return pos + i, True


def _text_elements(sink: _RowSink, data: bytes, pos: int) -> tuple[_Parts, int]:
    """Elements one by one (``json.scan_once``) from ``pos`` to the closing bracket."""
    text = data[pos:].decode("utf-8")
    i = 0
    while True:
        try:
            el, i = _STRICT_SCAN(text, i)
        except (StopIteration, ValueError, RecursionError):
            raise _NotStrictJSON from None
        sink.add_element(el)
        m = _SEP_OR_CLOSE_RE.match(text, i)
        if m is None:
            raise _NotStrictJSON
        if m.group(1) == "]":
            k = m.start(1)
            return sink.parts(), pos + (k if text.isascii() else len(text[:k].encode("utf-8")))
        i = m.end()


def _template(data: bytes, start: int, end: int):
    """The first element as a template: (collapsed text, separator, chunk-boundary
    marker, column of each integer), or None if it does not make one."""
    win = data[start:min(end, start + _TEMPLATE_WINDOW)]
    if not win.isascii():
        return None
    try:
        pairs, n0 = _PAIRS_SCAN(win.decode("ascii"), 0)
    except (StopIteration, ValueError, RecursionError):
        return None
    cols = _hole_columns(pairs)
    s0 = win[:n0]
    if cols is None or b"\\" in s0:  # escapes hold digits: not a template
        return None
    t0 = _collapse(s0)
    if t0.count(b"0") != len(cols):  # pragma: no cover - the integers are the only digits
        return None
    if start + n0 == end:
        sep = b","
    else:
        m = _SEP_RE.match(data, start + n0, end)
        if m is None:
            return None
        sep = m.group(0)
    first_key_end = s0.index(b'"', s0.index(b'"') + 1) + 1
    return t0, sep, sep + s0[:first_key_end], cols


def _load_scanning_files(data: bytes, what: str) -> Any:
    """``load_strict_json`` for a manifest, with its ``files`` array as :class:`_Parts`
    (the same document and the same first error, see above)."""
    data = bytes(data)
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorruptArtifactError(f"{what}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
    m = _FILES_RE.search(data)
    if m is None:
        return load_strict_json(data, what)
    placeholder = "\0gtsamples-files-" + os.urandom(16).hex()
    try:
        parts, close = _scan_files(data, m.end())
        outer = data[:m.start(1)] + json.dumps(placeholder).encode() + data[close + 1:]
        doc = json.loads(outer.decode("utf-8"), object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except (_NotStrictJSON, ValueError, RecursionError):
        try:
            json.loads(data.decode("utf-8"), object_pairs_hook=_check_duplicates, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as e:
            raise CorruptArtifactError(f"{what}: not strict JSON: {e}") from None
        return load_strict_json(data, what)  # pragma: no cover - the scan refused strict JSON
    if type(doc) is dict and doc.get("files") == placeholder:
        doc["files"] = parts
    # else the array scanned was not the top-level "files" but one nested before it:
    # a key no object but the top level may hold, refused before "files" is looked at.
    return doc


# --- the catalog entry ---------------------------------------------------------------------

_ENTRY_KEYS = _Keys(("region_id", "file_id", "generation", "objects", "file_size"), ("format", "version", "created_at"))
_OBJECT_KEYS = _Keys(("path", "file_size"))


def parse_catalog_entry(entry: Any, what: str = "catalog entry") -> CatalogEntry:
    """Validate a catalog entry given as a dict (or a CatalogEntry)."""
    if isinstance(entry, CatalogEntry):
        entry = entry.to_dict()
    try:
        return _entry(entry)
    except _Broken as e:
        raise e.error(what) from None


def _entry(entry: Any) -> CatalogEntry:
    o = _obj(entry, "top level", _ENTRY_KEYS)
    fmt = o.get("format", C.FORMAT_NAME)
    if fmt != C.FORMAT_NAME:
        raise _Broken("format", f"expected {C.FORMAT_NAME!r}, found {fmt!r}")
    version = o.get("version", C.MANIFEST_VERSION)
    if type(version) is not int:
        raise _Broken("version", f"expected an integer, found {version!r}")
    if version != C.MANIFEST_VERSION:
        raise _Broken("", f"version {version} is not supported (expected {C.MANIFEST_VERSION})", UnsupportedError)
    created_at = o.get("created_at")
    if created_at is not None:
        _str(created_at, "created_at")
    objs = o["objects"]
    if not isinstance(objs, list):
        raise _Broken("objects", f"expected an array, found {type(objs).__name__}")
    refs = []
    for i, ob in enumerate(objs):
        try:
            ob = _obj(ob, "", _OBJECT_KEYS)
            refs.append(ObjectRef(_str(ob["path"], "path"), _int(ob["file_size"], "file_size", _U64)))
        except _Broken as e:
            raise e.inside(f"objects[{i}]") from None
    return CatalogEntry(
        region_id=_int(o["region_id"], "region_id", _U64),
        file_id=_file_id(o["file_id"], "file_id"),
        generation=_file_id(o["generation"], "generation"),
        objects=tuple(refs),
        file_size=_int(o["file_size"], "file_size", _U64),
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
