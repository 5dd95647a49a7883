"""manifest.json and the catalog entry ("Artifact manifest").

``parse_manifest`` and ``parse_catalog_entry`` turn untrusted JSON into frozen
objects, enforcing every rule of the spec's "Artifact manifest" section;
``check_entry`` checks a manifest and its object list against a catalog entry.
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


#: Manifests up to this size are first tried by :func:`_parse_small_manifest`.
SMALL_MANIFEST_BYTES = 64 * 1024


def parse_manifest(data: bytes, what: str = C.MANIFEST_NAME) -> Manifest:
    """Parse and validate manifest bytes; raise CorruptArtifactError/UnsupportedError.

    A small manifest is first read by :func:`_parse_small_manifest`, which
    accepts only documents breaking no rule; anything else (and every error)
    goes through the rule-by-rule parse below, which names the first broken rule.
    """
    if len(data) <= SMALL_MANIFEST_BYTES:
        m = _parse_small_manifest(data)
        if m is not None:
            return m
    return _parse_manifest_checked(data, what)


def _parse_manifest_checked(data: bytes, what: str = C.MANIFEST_NAME) -> Manifest:
    """:func:`parse_manifest` rule by rule: the first broken rule raises."""
    if len(data) > C.MAX_MANIFEST_BYTES:
        raise CorruptArtifactError(f"{what}: {len(data)} bytes exceeds the manifest limit of {C.MAX_MANIFEST_BYTES} bytes")
    ctx = _Ctx(what)
    doc = _load_manifest_json(data, what)
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
    if not isinstance(pl, _Parts):
        if not isinstance(pl, list):
            ctx.fail("files", f"expected an array, found {type(pl).__name__}")
        pl = _Parts.from_list(pl)
    if pl.count > C.U32_MAX + 1:
        ctx.fail("files", "too many parts for u32 part IDs")
    return Manifest(region_id, source_file_id, generation, ts, tuple(fields), _check_parts(ctx, pl))


# --- small manifests in one pass ------------------------------------------------------
#
# A region query opens one manifest per covered SST (about 1 KB each), so the
# fixed cost of a parse matters more there than its cost per part.  The fast
# path below is ``json`` (the same strict hook) plus every rule of
# ``_parse_manifest_checked`` as straight-line Python over the parsed document;
# it returns None at the first thing it does not accept (a broken rule, or
# merely something it does not handle, like non-ASCII names), and the checked
# parse then runs from scratch: the error is always that parse's.  It never
# accepts what the checked parse refuses (tests/format/test_manifest_files.py
# compares both on valid and mutated manifests).

_STRICT_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
_MANIFEST_KEYSET = frozenset(_MANIFEST_KEYS)
_TIMESTAMP_KEYSET = frozenset(("column_id", "name", "unit"))
_FIELD_KEYSET = frozenset(("column_id", "name", "type", "nullable"))
_FILE_ID_FULLMATCH = _FILE_ID_RE.fullmatch
_U32_MAX = C.U32_MAX
_U64_MAX = C.U64_MAX
_I64_MIN = C.I64_MIN
_I64_MAX = C.I64_MAX


def _parse_small_manifest(data: bytes) -> Manifest | None:
    """The manifest, if ``data`` is strict ASCII JSON breaking no rule; else None."""
    try:
        if not data.isascii():
            return None
        doc = _STRICT_DECODER.decode(data.decode("ascii"))
    except (ValueError, RecursionError, AttributeError, TypeError):
        return None
    if type(doc) is not dict or doc.keys() != _MANIFEST_KEYSET:
        return None
    version = doc["version"]
    region_id = doc["region_id"]
    sfid = doc["source_file_id"]
    gen = doc["generation"]
    if (doc["format"] != C.FORMAT_NAME or type(version) is not int or version != C.MANIFEST_VERSION
            or type(region_id) is not int or not 0 <= region_id <= _U64_MAX
            or type(sfid) is not str or _FILE_ID_FULLMATCH(sfid) is None
            or type(gen) is not str or _FILE_ID_FULLMATCH(gen) is None):
        return None
    t = doc["timestamp"]
    if type(t) is not dict or t.keys() != _TIMESTAMP_KEYSET:
        return None
    ts_id, ts_name, unit = t["column_id"], t["name"], t["unit"]
    if (type(ts_id) is not int or not 0 <= ts_id <= _U32_MAX or type(ts_name) is not str or not ts_name
            or not ts_name.isascii() or type(unit) is not str or unit not in C.TIME_UNITS):
        return None
    fl = doc["fields"]
    if type(fl) is not list or not C.MIN_FIELDS <= len(fl) <= C.MAX_FIELDS:
        return None
    key = [(ts_id, ts_name, unit)]
    ids = {ts_id}
    names = set(C.INTERNAL_COLUMN_NAMES)
    if ts_name in names:
        return None
    names.add(ts_name)
    for f in fl:
        if type(f) is not dict or f.keys() != _FIELD_KEYSET:
            return None
        cid, name = f["column_id"], f["name"]
        if (f["type"] != C.FIELD_TYPE or f["nullable"] is not True or type(cid) is not int
                or not 0 <= cid <= _U32_MAX or type(name) is not str or not name or not name.isascii()
                or cid in ids or name in names):
            return None
        ids.add(cid)
        names.add(name)
        key.append((cid, name))
    pl = doc["files"]
    if type(pl) is not list:
        return None
    rows = []
    prev = None
    for i, o in enumerate(pl):
        r = _row(o)
        if r is None:
            return None
        pid, fsz, nr, nb, ft, fs, lt, ls, mn, mx = r
        first = (ft, fs)
        if (pid != i or ft > _U32_MAX or lt > _U32_MAX or nr == 0 or nb == 0 or nb > nr
                or nr > nb * C.MAX_BLOCK_ROWS or fsz < MIN_PART_SIZE or first > (lt, ls) or mn > mx
                or (prev is not None and prev > first)):
            return None
        prev = (lt, ls)
        rows.append(r)
    files = PartTable(np.array(rows, dtype=PART_DTYPE) if rows else None)
    ts, fields = _columns(tuple(key))
    return Manifest(region_id, sfid, gen, ts, fields, files)


_COLUMNS: dict = {}


def _columns(key: tuple) -> tuple[TimestampColumn, tuple[FieldColumn, ...]]:
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


def _check_part(ctx: _Ctx, i: int, o: Any, prev_last: tuple[int, int] | None) -> PartDescriptor:
    """Every rule for ``files[i]``, in order; the message names the first broken one."""
    w = f"files[{i}]"
    o = _obj(ctx, w, o, _PART_KEYS)
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
    if prev_last is not None and prev_last > part.first:
        ctx.fail(w, f"parts follow input order: previous last {prev_last} > first {part.first}")
    return part


def _lex_le(a_hi, a_lo, b_hi, b_lo):
    return (a_hi < b_hi) | ((a_hi == b_hi) & (a_lo <= b_lo))


def _check_parts(ctx: _Ctx, pl: "_Parts") -> PartTable:
    """The rules of :func:`_check_part` for all rows at once; the first part that
    breaks one (or the element after the rows, which is not a well-formed part)
    goes through :func:`_check_part` for the exact message."""
    a = pl.rows
    n = a.shape[0]
    if n:
        pid, fsz, nr, nb = a["part_id"], a["file_size"], a["num_rows"], a["num_blocks"]
        ft, fs, lt, ls = a["first_table_id"], a["first_tsid"], a["last_table_id"], a["last_tsid"]
        ok = (pid == np.arange(n, dtype=np.uint64)) & (ft <= C.U32_MAX) & (lt <= C.U32_MAX)
        ok &= (nr > 0) & (nb > 0) & (nb <= nr)
        ok &= (nr - np.uint64(1)) // np.uint64(C.MAX_BLOCK_ROWS) < nb  # nr <= nb * MAX_BLOCK_ROWS, no overflow
        ok &= fsz >= MIN_PART_SIZE
        ok &= _lex_le(ft, fs, lt, ls)
        ok &= a["min_timestamp"] <= a["max_timestamp"]
        ok[1:] &= _lex_le(lt[:-1], ls[:-1], ft[1:], fs[1:])
        bad = np.flatnonzero(~ok)
        if bad.size:
            i = int(bad[0])
            _check_part(ctx, i, _row_obj(a[i].item()), _row_last(a[i - 1].item()) if i else None)
            ctx.fail(f"files[{i}]", "not a valid part descriptor")  # pragma: no cover - _check_part raised
    if pl.bad is not _NO_BAD:
        _check_part(ctx, n, pl.bad, _row_last(a[n - 1].item()) if n else None)
        ctx.fail(f"files[{n}]", "not a valid part descriptor")  # pragma: no cover - _check_part raised
    return PartTable(a)


def _row_obj(r: tuple) -> dict:
    """A row back as its JSON object (for :func:`_check_part`)."""
    return {"part_id": r[0], "file_size": r[1], "num_rows": r[2], "num_blocks": r[3],
            "first": {"table_id": r[4], "tsid": r[5]}, "last": {"table_id": r[6], "tsid": r[7]},
            "min_timestamp": r[8], "max_timestamp": r[9]}


def _row_last(r: tuple) -> tuple[int, int]:
    return (r[6], r[7])


# --- the files array, column-wise ------------------------------------------------------
#
# A manifest of many parts is mostly its ``files`` array: ~155 bytes per part, so
# up to ~430,000 parts under the 64 MiB limit.  Parsing it as Python objects
# (three dicts and ten ints per part, plus an object_pairs_hook call per dict)
# costs seconds and hundreds of MiB, so ``parse_manifest`` reads the array
# column-wise instead:
#
# * ``_load_manifest_json`` finds the top-level ``"files": [`` and scans the
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
#   turned into a row or kept as the ``bad`` element, nothing else is retained.
# * Any JSON-level error (syntax, duplicate key, NaN, depth) anywhere makes the
#   whole document be parsed once more by ``json`` keeping nothing
#   (``_check_duplicates``), which raises the first error exactly as a plain
#   parse would.  Semantic errors come only after the whole document is known to
#   be strict JSON, and name the same part and rule as the per-part checks.
#
# A valid 62 MiB manifest of 400k parts thus parses in ~0.6 s with ~120 bytes of memory per
# part beyond the document, against ~5 s and ~900 bytes per part object by object
# (benchmarks/FUZZING.md F4; tests/test_bad_files.py::test_manifest_400k_parts_bounded).


class _Parts:
    """The ``files`` array as scanned: the rows of its leading well-formed parts,
    then the element after them if that one is not a well-formed part (later
    elements are only syntax-checked: that element is the first error)."""

    __slots__ = ("rows", "bad", "count")

    def __init__(self, rows: np.ndarray, bad: Any, count: int):
        self.rows = rows
        self.bad = bad
        self.count = count

    @classmethod
    def from_list(cls, pl: list) -> "_Parts":
        rows = []
        bad = _NO_BAD
        for el in pl:
            r = _row(el)
            if r is None:
                bad = el
                break
            rows.append(r)
        return cls(np.array(rows, dtype=PART_DTYPE) if rows else np.empty(0, PART_DTYPE), bad, len(pl))


_NO_BAD = object()
_PART_KEYSET = frozenset(_PART_KEYS)
_ID_KEYSET = frozenset(("table_id", "tsid"))


def _row(o: Any) -> tuple | None:
    """A parsed part object as a row (keys exact, integers within u64 / i64), or None."""
    if type(o) is not dict or o.keys() != _PART_KEYSET:
        return None
    f, l = o["first"], o["last"]
    if type(f) is not dict or type(l) is not dict or f.keys() != _ID_KEYSET or l.keys() != _ID_KEYSET:
        return None
    r = (o["part_id"], o["file_size"], o["num_rows"], o["num_blocks"], f["table_id"], f["tsid"],
         l["table_id"], l["tsid"], o["min_timestamp"], o["max_timestamp"])
    for v in r[:8]:
        if type(v) is not int or not 0 <= v <= C.U64_MAX:
            return None
    for v in r[8:]:
        if type(v) is not int or not C.I64_MIN <= v <= C.I64_MAX:
            return None
    return r


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
    if type(pairs) is not list or len(pairs) != len(_PART_KEYS) or {k for k, _ in pairs} != _PART_KEYSET:
        return None
    cols = []
    for k, v in pairs:
        if k in ("first", "last"):
            if type(v) is not list or len(v) != 2 or {kk for kk, _ in v} != _ID_KEYSET:
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
        self.bad: Any = _NO_BAD
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
        if self.bad is not _NO_BAD:
            return
        r = _row(el)
        if r is None:
            self.bad = el
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
    if sink.bad is not _NO_BAD:
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
    if a is None:  # some value outside u64 / i64: element by element, up to it
        for t in range(m):
            sink.add_element(_row_obj(tuple(dict(zip(cols, vals[t * k:(t + 1) * k]))[c] for c in PART_COLUMNS)))
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


def _load_manifest_json(data: bytes, what: str) -> Any:
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


_ENTRY_KEYS = ("region_id", "file_id", "generation", "objects", "file_size")
_ENTRY_OPTIONAL = ("format", "version", "created_at")


_ENTRY_REQUIRED = frozenset(_ENTRY_KEYS)
_ENTRY_ALLOWED = frozenset(_ENTRY_KEYS + _ENTRY_OPTIONAL)
_OBJECT_KEYSET = frozenset(("path", "file_size"))


def _parse_entry_fast(o: Any) -> CatalogEntry | None:
    """The entry, if ``o`` is a plain dict breaking no rule of :func:`parse_catalog_entry`
    (ASCII strings only); else None, and the checked parse runs instead."""
    if type(o) is not dict:
        return None
    keys = o.keys()
    if not _ENTRY_REQUIRED <= keys <= _ENTRY_ALLOWED:
        return None
    fmt = o.get("format", C.FORMAT_NAME)
    version = o.get("version", C.MANIFEST_VERSION)
    created_at = o.get("created_at")
    region_id, file_id, generation, file_size = o["region_id"], o["file_id"], o["generation"], o["file_size"]
    if (fmt != C.FORMAT_NAME or type(version) is not int or version != C.MANIFEST_VERSION
            or (created_at is not None and (type(created_at) is not str or not created_at.isascii()))
            or type(region_id) is not int or not 0 <= region_id <= _U64_MAX
            or type(file_size) is not int or not 0 <= file_size <= _U64_MAX
            or type(file_id) is not str or _FILE_ID_FULLMATCH(file_id) is None
            or type(generation) is not str or _FILE_ID_FULLMATCH(generation) is None):
        return None
    objs = o["objects"]
    if type(objs) is not list:
        return None
    refs = []
    for ob in objs:
        if type(ob) is not dict or ob.keys() != _OBJECT_KEYSET:
            return None
        path, size = ob["path"], ob["file_size"]
        if type(path) is not str or not path.isascii() or type(size) is not int or not 0 <= size <= _U64_MAX:
            return None
        refs.append(ObjectRef(path, size))
    return CatalogEntry(region_id, file_id, generation, tuple(refs), file_size, fmt, version, created_at)


def parse_catalog_entry(entry: Any, what: str = "catalog entry") -> CatalogEntry:
    """Validate a catalog entry given as a dict (or a CatalogEntry)."""
    fast = _parse_entry_fast(entry)
    if fast is not None:
        return fast
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
