"""The strict parse of a catalog version, in compiled code (msgspec).

Format versions 1 and 2 (docs/catalog.md; version 3, what commits write, packs
version 2's columns: :mod:`.catalog_packed`, which shares the columns' rules and
records defined here):

* **2**: the SST records and artifact entries as columns
  (:func:`decode_v2`, :func:`encode_v2`).  A version is about a dozen objects
  whatever its size, so the decode makes no dict per SST: msgspec decodes the
  columns against their exact shape (lists of str and int), the columns' own rules
  are checked in bulk (lengths, indices, codes), and the records readers see are
  made on first use (:class:`SstRecords`, :class:`EntryRecords`: the version-1
  dicts, each made once).  10,000 SSTs: 2.8 MB, ~10 ms (format 1: 12 MB, ~65 ms).
  Duplicate keys: without escapes, a text holds one ``:`` per key/value pair plus
  those inside its strings, all known from the typed document (:func:`_pairs_v2`);
  a duplicate adds one.
* **1**: one object per SST record and per artifact entry, as below (:func:`decode`).

Format 1: a catalog version is one JSON document that grows with the region: about 1.3 KB
per SST (its record and its artifact's entry), 13 MB for 10,000 SSTs.  Parsing it
with ``json`` and a Python ``object_pairs_hook`` for the duplicate-key rule costs
about 2 us per object (~210 ms for 10,000 SSTs).  Here:

* ``msgspec`` decodes the document against its exact shape (:class:`_Doc`): every
  object has exactly its keys (required ones present, no other), every value its
  type (integers are integers, not floats or booleans);
* duplicate keys: an object whose keys are all known fields holds a duplicate
  exactly when it has more key/value pairs than distinct fields.  The decoded
  document is encoded again (``msgspec.json.encode``: each field once, the same
  strings) and the two texts' ``:`` are counted (``bytes.count``): a duplicate
  adds its pair's ``:`` (and any in its dropped value) to the original only;
  whitespace, numbers and field order add none.  This needs the strings to be the
  same bytes in both texts, so a text with a backslash (an escape) is checked by
  the ``json`` hook instead.
* the SST records' ``schema`` objects, nearly always one text, stay Raw in the
  decode: each distinct text is decoded (and its keys counted) once and its dict
  shared by the records that carry it (:func:`_shared_schemas`);
* the rule checks of each artifact entry stay lazy: ``parse_catalog_entry`` runs
  on the entries a plan keeps (:meth:`Region._parse_entry`), once per version and
  process (:mod:`.catalog`'s version cache).

Whatever this path refuses is parsed again by the reference path
(:func:`~gtsamples.format.manifest.load_strict_json` then
:func:`~.catalog.check_doc`), so a document broken in a way that path knows
gets the same error as before; a document only this path refuses (an unknown
key in an SST record, a size that is not an integer) gets msgspec's message,
which names the place (``$.ssts[3].size``).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import re
from typing import Annotated, Union

import msgspec
from msgspec import UNSET, Struct, UnsetType

from ..format.manifest import artifact_prefix
from ..runtime import ForkSafeLock

#: Every struct of a catalog document: exactly its keys (msgspec).
STRUCT_OPTIONS = dict(forbid_unknown_fields=True, omit_defaults=True)


class _Ts(Struct, **STRUCT_OPTIONS):
    column_id: int
    name: str
    unit: str


class _Field(Struct, **STRUCT_OPTIONS):
    column_id: int
    name: str


class SchemaShape(Struct, **STRUCT_OPTIONS):
    timestamp: _Ts
    fields: list[_Field]


_Pair = Annotated[list[int], msgspec.Meta(min_length=2, max_length=2)]  # a list, as json gives it


class _Stats(Struct, **STRUCT_OPTIONS):
    first: _Pair  # (table_id, tsid)
    last: _Pair
    min_timestamp: int
    max_timestamp: int


class _Sst(Struct, **STRUCT_OPTIONS):
    file_id: str
    path: str
    size: int
    rows: int
    schema: msgspec.Raw  # nearly always the same text: each distinct one decoded once (_shared_schemas)
    stats: Union[_Stats, None, UnsetType] = UNSET


class _Object(Struct, **STRUCT_OPTIONS):
    path: str
    file_size: int


class _Entry(Struct, **STRUCT_OPTIONS):
    region_id: int
    file_id: str
    generation: str
    objects: list[_Object]
    file_size: int
    format: Union[str, UnsetType] = UNSET
    version: Union[int, UnsetType] = UNSET
    created_at: Union[str, None, UnsetType] = UNSET


class DocHeader(Struct, kw_only=True, **STRUCT_OPTIONS):
    """A catalog version's header, the same in every format version (docs/catalog.md);
    each format's document adds its ``ssts`` and ``artifacts``."""
    format: str
    version: int
    region_id: int
    catalog_version: int
    created_at: str
    operation: str
    schema: Union[SchemaShape, None]
    nonce: Union[str, UnsetType] = UNSET


#: The header's keys, in the order writers put them.
HEAD_KEYS = DocHeader.__struct_fields__


class _Doc(DocHeader, **STRUCT_OPTIONS):
    ssts: list[_Sst]
    artifacts: list[_Entry]


_DECODER = msgspec.json.Decoder(_Doc)
_SCHEMA_DECODER = msgspec.json.Decoder(SchemaShape)
_ENCODER = msgspec.json.Encoder()


class EncodeRefused(Exception):
    """A document the version-2 columns cannot hold (or that would not decode)."""


class ParseRefused(Exception):
    """The fast path refused the document; ``message`` says why (msgspec's words)."""


def decode(data: bytes) -> tuple[dict, bool]:
    """(document, duplicate-free) of a catalog version's bytes: the document as
    ``json`` would give it (dicts, lists, str, int, None).  ``duplicate-free`` is
    False when the count could not decide (a backslash in the text) or found more
    pairs than fields: the caller then runs the ``json`` hook.  Raises
    :class:`ParseRefused` when the text is not the catalog's exact shape."""
    with gc_paused():  # (~10 objects per SST)
        try:
            typed = _DECODER.decode(data)
        except (msgspec.ValidationError, msgspec.DecodeError) as e:
            raise ParseRefused(str(e)) from None
        data = bytes(data)
        # the SST records' schemas are Raw: re-encoded as they are, so the count below
        # leaves their keys to _shared_schemas
        clean = b"\\" not in data and data.count(b":") == _ENCODER.encode(typed).count(b":")
        schemas, clean_schemas = _shared_schemas(typed.ssts)
        doc = msgspec.to_builtins(typed)
        del typed
        for rec, sch in zip(doc["ssts"], schemas):
            rec["schema"] = sch
    for s in doc["ssts"]:  # the identity pairs' length (a rule of the shape, not of values)
        st = s.get("stats")
        if st is not None and (len(st["first"]) != 2 or len(st["last"]) != 2):
            raise ParseRefused("an SST's stats.first and stats.last must be [table_id, tsid] pairs")
    return doc, clean and clean_schemas


def _shared_schemas(ssts) -> tuple[list, bool]:
    """(each SST record's schema as a dict, no duplicate key in them): the records'
    schemas are nearly always one text, so each distinct text is decoded once (its
    exact shape by msgspec, its keys counted as :func:`decode` counts the document's)
    and its dict shared by the records that have it (the documents are never
    modified).  Each record's ``schema`` is set to None (to_builtins then skips it)."""
    by_text: dict[bytes, dict] = {}
    out = []
    clean = True
    for rec in ssts:
        text = bytes(rec.schema)
        d = by_text.get(text)
        if d is None:
            try:
                typed = _SCHEMA_DECODER.decode(text)
            except (msgspec.ValidationError, msgspec.DecodeError) as e:
                raise ParseRefused(f"{e} (an SST record's schema)") from None
            clean = clean and b"\\" not in text and text.count(b":") == _ENCODER.encode(typed).count(b":")
            d = by_text[text] = msgspec.to_builtins(typed)
        rec.schema = None
        out.append(d)
    return out, clean


# --- format version 2: the SST records and artifact entries as columns ----------------------
#
# A version-2 document is the same header (format, version 2, region_id, catalog_version,
# created_at, operation, schema, nonce) with "ssts" and "artifacts" as objects of
# columns, one value per SST / entry (docs/region.md, "Catalog versions").  Its objects
# are a dozen whatever the SST count, so the decode makes no dict per SST: the columns
# decode as lists of str and int (typed, in compiled code), and the records readers see
# are made from them on first use (:class:`SstRecords`, :class:`EntryRecords`).

#: stats codes of the ``ssts.stats`` column
STATS_PRESENT, STATS_NULL, STATS_ABSENT = 1, 0, -1
STATS_NAMES = ("first_table_id", "first_tsid", "last_table_id", "last_tsid", "min_timestamp", "max_timestamp")


class _SstCols(Struct, **STRUCT_OPTIONS):
    file_id: list[str]
    path: list[Union[str, None]]  # None: the region's own SST key, <region_id>/sst/<file_id>.parquet
    size: list[int]
    rows: list[int]
    schemas: list[SchemaShape]
    schema: list[int]
    stats: list[int]
    first_table_id: list[int]
    first_tsid: list[int]
    last_table_id: list[int]
    last_tsid: list[int]
    min_timestamp: list[int]
    max_timestamp: list[int]


class _EntryCols(Struct, **STRUCT_OPTIONS):
    region_id: list[int]
    file_id: list[str]
    generation: list[str]
    file_size: list[int]
    format: list[Union[str, None]]
    version: list[Union[int, None]]
    created_at: list[Union[str, None]]
    objects: list[int]
    relative: list[int]
    object_path: list[str]
    object_size: list[int]


class _DocV2(DocHeader, **STRUCT_OPTIONS):
    ssts: _SstCols
    artifacts: _EntryCols


_DECODER_V2 = msgspec.json.Decoder(_DocV2)


@contextlib.contextmanager
def gc_paused():
    """The cyclic collector paused: a parse makes many objects, all kept, none cyclic, and
    with a large heap (earlier versions cached) the collector's passes cost more than it."""
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def decode_header(decoder: msgspec.json.Decoder, data: bytes, pairs) -> tuple:
    """(typed document, header as ``json`` gives it, duplicate-free) of a catalog version
    with columns: ``decoder``'s typed decode (:class:`ParseRefused` with msgspec's words),
    and the ``:`` count against ``pairs(typed)`` (see :func:`_pairs_v2`)."""
    try:
        typed = decoder.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise ParseRefused(str(e)) from None
    data = bytes(data)
    clean = b"\\" not in data and data.count(b":") == pairs(typed)
    doc = {k: getattr(typed, k) for k in HEAD_KEYS if getattr(typed, k) is not UNSET}
    if doc["schema"] is not None:
        doc["schema"] = msgspec.to_builtins(doc["schema"])
    return typed, doc, clean


def decode_v2(data: bytes) -> tuple[dict, bool]:
    """(document, duplicate-free) of a version-2 catalog's bytes, as :func:`decode`:
    the header as ``json`` gives it, ``ssts`` and ``artifacts`` as record sequences
    over the decoded columns.  Raises :class:`ParseRefused` naming the broken rule."""
    with gc_paused():
        typed, doc, clean = decode_header(_DECODER_V2, data, _pairs_v2)
        doc["ssts"] = SstRecords(_sst_columns(typed.ssts, typed.region_id))
        doc["artifacts"] = EntryRecords(_entry_columns(typed.artifacts))
    return doc, clean


_STR_COLUMNS = (("ssts", "file_id"), ("artifacts", "file_id"), ("artifacts", "generation"),
                ("artifacts", "object_path"))
_OPT_STR_COLUMNS = (("ssts", "path"), ("artifacts", "format"), ("artifacts", "created_at"))


def schema_pairs(sch) -> int:
    """The key/value pairs of a typed schema (``{timestamp: {column_id, name, unit},
    fields: [{column_id, name}]}``; 0 for None)."""
    return 5 + 2 * len(sch.fields) if sch is not None else 0


def schema_colons(sch) -> int:
    """The ``:`` inside a typed schema's strings (0 for None)."""
    return (sch.timestamp.name.count(":") + sch.timestamp.unit.count(":")
            + sum(f.name.count(":") for f in sch.fields)) if sch is not None else 0


def _pairs_v2(t: _DocV2) -> int:
    """The ``:`` a version-2 text without escapes holds when no object has a duplicate
    key: one per key/value pair of the typed document (each field once: the header's,
    the two column objects', the schemas') plus those inside its strings (the same
    characters in the text: no escapes).  A duplicate key adds its pair's ``:``."""
    head = [getattr(t, k) for k in HEAD_KEYS]
    n = sum(1 for v in head if v is not UNSET) + 2  # + ssts, artifacts
    n += len(_SstCols.__struct_fields__) + len(_EntryCols.__struct_fields__)
    n += schema_pairs(t.schema) + sum(schema_pairs(x) for x in t.ssts.schemas)
    n += sum(v.count(":") for v in head if type(v) is str)
    n += schema_colons(t.schema) + sum(schema_colons(x) for x in t.ssts.schemas)
    for part, col in _STR_COLUMNS:
        n += "".join(getattr(getattr(t, part), col)).count(":")
    for part, col in _OPT_STR_COLUMNS:
        n += "".join(filter(None, getattr(getattr(t, part), col))).count(":")
    return n


def check_lengths(cols: dict, names, what: str, unit: str) -> int:
    n = len(cols[names[0]])
    for k in names[1:]:
        if len(cols[k]) != n:
            raise ParseRefused(f"{what}.{k} has {len(cols[k])} values, {what}.{names[0]} {n}: "
                               f"every column of {what} has one value per {unit}")
    return n


#: The columns with one value per SST / per entry, in a document's order.
SST_COLUMNS = ("file_id", "path", "size", "rows", "schema", "stats") + STATS_NAMES
ENTRY_COLUMNS = ("file_id", "region_id", "generation", "file_size", "format", "version", "created_at", "objects",
                 "relative")


def _lo_hi(values) -> tuple:
    """(smallest, largest) of a nonempty column: a list (format 2) or an array (format 3)."""
    if hasattr(values, "min"):
        return values.min(), values.max()
    return min(values), max(values)


def check_sst_codes(schema, stats, n_schemas: int) -> None:
    """The rules of the ``ssts`` columns that hold codes (any format with columns):
    ``schema`` indexes ``schemas``, ``stats`` is a stats code."""
    if len(schema):
        lo, hi = _lo_hi(schema)
        if not (0 <= lo and hi < n_schemas):
            bad = lo if lo < 0 else hi
            raise ParseRefused(f"ssts.schema holds {bad}: an SST's schema is an index into ssts.schemas "
                               f"({n_schemas} of them)")
    if len(stats):
        lo, hi = _lo_hi(stats)
        if not (STATS_ABSENT <= lo and hi <= STATS_PRESENT):
            bad = lo if lo < STATS_ABSENT else hi
            raise ParseRefused(f"ssts.stats holds {bad}: an SST's stats code is {STATS_PRESENT} (present), "
                               f"{STATS_NULL} (null) or {STATS_ABSENT} (absent)")


def check_entry_codes(objects, relative, n_paths: int, n_sizes: int) -> int:
    """The rules of the ``artifacts`` columns that hold codes and counts (any format with
    columns); the number of objects listed."""
    if len(relative):
        lo, hi = _lo_hi(relative)
        if not (0 <= lo and hi <= 1):
            raise ParseRefused(f"artifacts.relative holds {lo if lo < 0 else hi}: 1 (the entry's object paths are "
                               f"relative to its directory) or 0 (they are whole)")
    total = 0
    if len(objects):
        lo, hi = _lo_hi(objects)
        if lo < 0:
            raise ParseRefused(f"artifacts.objects holds {lo}: an entry's object count is >= 0")
        # an array's sum is fixed-width: summed only when no count exceeds the objects listed
        # (then it cannot wrap around), else that count alone already breaks the rule
        total = hi if hi > n_paths else int(objects.sum()) if hasattr(objects, "sum") else sum(objects)
    for k, got in (("object_path", n_paths), ("object_size", n_sizes)):
        if got != total:
            raise ParseRefused(f"artifacts.{k} has {got} values; artifacts.objects counts "
                               f"{'at least ' if total == hi and hi > n_paths else ''}{total}")
    return total


def _sst_columns(t: _SstCols, region_id: int) -> dict:
    cols = {k: getattr(t, k) for k in SST_COLUMNS}
    check_lengths(cols, SST_COLUMNS, "ssts", "SST")
    cols["region_id"] = region_id
    schemas = [msgspec.to_builtins(s) for s in t.schemas]
    cols["schemas"] = schemas
    check_sst_codes(cols["schema"], cols["stats"], len(schemas))
    return cols


def _entry_columns(t: _EntryCols) -> dict:
    cols = {k: getattr(t, k) for k in ENTRY_COLUMNS}
    check_lengths(cols, ENTRY_COLUMNS, "artifacts", "entry")
    check_entry_codes(cols["objects"], cols["relative"], len(t.object_path), len(t.object_size))
    cols["starts"] = [0, *itertools.accumulate(cols["objects"])]
    cols["object_path"], cols["object_size"] = t.object_path, t.object_size
    return cols


class Records:
    """A catalog version's records (a read-only sequence of dicts, as in a version-1
    document), made from the version's columns on first use, each once: the same
    index gives the same dict (readers' memos key on its id).  ``column(name)`` gives
    a column itself (a list), without making records."""

    __slots__ = ("_cols", "_rows", "_lock", "_n", "ids")

    def __init__(self, cols: dict):
        self._cols = cols
        self._n = len(cols["file_id"])
        self._rows: list = [None] * self._n
        self._lock = ForkSafeLock()
        #: id(record) -> its index, for the records made so far (they live as long as this
        #: sequence, so their ids are not reused): "is this one of ours" without making the rest
        self.ids: dict[int, int] = {}

    def column(self, name: str) -> list:
        return self._cols[name]

    def __reduce__(self):  # pickled and copied as its columns (its records are made again)
        return type(self), (self._cols,)

    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0

    def _make(self, i: int) -> dict:  # pragma: no cover - defined by the subclasses
        raise NotImplementedError

    def __getitem__(self, i):
        r = self._rows[i]  # (an int: the record once made; the planner's loop takes this path)
        if r.__class__ is dict:
            return r
        return self._item(i)

    def _item(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("record index out of range")
        r = self._rows[i]
        if r is None:
            with self._lock:  # one dict per index, also when threads race to make it
                r = self._rows[i]
                if r is None:
                    r = self._rows[i] = self._make(i)
                    self.ids[id(r)] = i
        return r

    def __iter__(self):
        if None in self._rows:
            with gc_paused(), self._lock:
                rows = self._rows
                ids = self.ids
                for i in range(self._n):
                    if rows[i] is None:
                        r = rows[i] = self._make(i)
                        ids[id(r)] = i
        return iter(self._rows)

    def __eq__(self, other):
        try:
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        except TypeError:
            return NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self._n}>"


class SstRecords(Records):
    """The SST records of a version-2 catalog: ``{file_id, path, size, rows, schema,
    stats}`` dicts (``stats`` absent where the column says so); the schema dicts are
    shared by the records that have the same one."""

    __slots__ = ()

    def stats_columns(self) -> tuple[list, dict]:
        """(the stats codes: :data:`STATS_PRESENT`, :data:`STATS_NULL` or
        :data:`STATS_ABSENT` per SST, {statistic: its column}), without making records."""
        return self._cols["stats"], {k: self._cols[k] for k in STATS_NAMES}

    def _make(self, i: int) -> dict:
        c = self._cols
        fid, path = c["file_id"][i], c["path"][i]
        rec = {"file_id": fid, "path": f"{c['region_id']}/sst/{fid}.parquet" if path is None else path,
               "size": c["size"][i], "rows": c["rows"][i], "schema": c["schemas"][c["schema"][i]]}
        code = c["stats"][i]
        if code == STATS_PRESENT:
            rec["stats"] = {"first": [c["first_table_id"][i], c["first_tsid"][i]],
                            "last": [c["last_table_id"][i], c["last_tsid"][i]],
                            "min_timestamp": c["min_timestamp"][i], "max_timestamp": c["max_timestamp"][i]}
        elif code == STATS_NULL:
            rec["stats"] = None
        return rec


class Coverage(dict):
    """file_id -> the artifact entry covering that SST (None when uncovered), in region
    order, from a version-2 catalog's file_id columns (``Region._coverage_docs``; the
    last entry of a file_id wins, as there).  An entry's record is made when first
    looked up, and then kept in the dict itself, so later lookups are the dict's own
    (no Python call); iterating, ``keys``, ``values`` and ``items`` go over every SST in
    region order.  Copied and pickled as a plain dict."""

    __slots__ = ("_arts", "_pos")

    def __init__(self, ssts: "SstRecords", arts: "EntryRecords"):
        super().__init__()
        self._arts = arts
        pos = dict(zip(arts.column("file_id"), range(len(arts))))
        self._pos = {f: pos.get(f) for f in ssts.column("file_id")}

    def __missing__(self, file_id):
        k = self._pos[file_id]  # KeyError: not an SST of the version
        v = None if k is None else self._arts[k]
        self[file_id] = v
        return v

    def get(self, file_id, default=None):
        return self[file_id] if file_id in self._pos else default

    def __contains__(self, file_id) -> bool:
        return file_id in self._pos

    def __iter__(self):
        return iter(self._pos)

    def __len__(self) -> int:
        return len(self._pos)

    def keys(self):
        return self._pos.keys()

    def values(self) -> list:
        return [self[f] for f in self._pos]

    def items(self) -> list:
        return [(f, self[f]) for f in self._pos]

    def __eq__(self, other) -> bool:
        return dict(self.items()) == other

    def __ne__(self, other) -> bool:
        return not self == other

    __hash__ = None

    def __repr__(self) -> str:
        return repr(dict(self.items()))

    def __reduce__(self):
        return dict, (self.items(),)


class EntryRecords(Records):
    """The artifact entries of a version-2 catalog, as the catalog-entry dicts
    (``format``, ``version``, ``created_at`` absent where their column holds null)."""

    __slots__ = ()

    def _make(self, i: int) -> dict:
        c = self._cols
        a, b = c["starts"][i], c["starts"][i + 1]
        rid, fid, gen = c["region_id"][i], c["file_id"][i], c["generation"][i]
        top = artifact_prefix(rid, fid, gen) if c["relative"][i] else ""
        e = {"region_id": rid, "file_id": fid, "generation": gen,
             "objects": [{"path": top + p, "file_size": s} for p, s in zip(c["object_path"][a:b],
                                                                           c["object_size"][a:b])],
             "file_size": c["file_size"][i]}
        for k in ("format", "version", "created_at"):
            v = c[k][i]
            if v is not None:
                e[k] = v
        return e


def record_columns(doc: dict) -> tuple[dict, dict]:
    """(ssts columns, artifacts columns) of a catalog document of records (a version-1
    shape: lists of record dicts), as lists: the columns of format versions 2 and 3.
    Raises ``KeyError`` / ``TypeError`` / ``ValueError`` for a record the columns cannot
    hold (the caller checked the document first)."""
    ssts, arts = list(doc["ssts"]), list(doc["artifacts"])
    schemas: list = []
    index: dict[str, int] = {}
    scol, stats = [], []
    cols = {k: [] for k in STATS_NAMES}
    for s in ssts:
        key = _ENCODER.encode(s["schema"]).decode()
        k = index.get(key)
        if k is None:
            k = index[key] = len(schemas)
            schemas.append(s["schema"])
        scol.append(k)
        st = s.get("stats", UNSET)
        if st is UNSET:
            stats.append(STATS_ABSENT)
            vals = (0,) * 6
        elif st is None:
            stats.append(STATS_NULL)
            vals = (0,) * 6
        else:
            stats.append(STATS_PRESENT)
            (ft, fs), (lt, ls) = st["first"], st["last"]
            vals = (ft, fs, lt, ls, st["min_timestamp"], st["max_timestamp"])
            if set(st) != {"first", "last", "min_timestamp", "max_timestamp"}:
                raise ValueError(f"SST {s['file_id']}: stats keys {sorted(st)}")
        for name, v in zip(STATS_NAMES, vals):
            cols[name].append(v)
        if set(s) - {"file_id", "path", "size", "rows", "schema", "stats"}:
            raise ValueError(f"SST {s['file_id']}: unknown record keys {sorted(set(s))}")
    rid = doc["region_id"]
    sst_cols = {"file_id": [s["file_id"] for s in ssts],
                "path": [None if s["path"] == f"{rid}/sst/{s['file_id']}.parquet" else s["path"] for s in ssts],
                "size": [s["size"] for s in ssts], "rows": [s["rows"] for s in ssts],
                "schemas": schemas, "schema": scol, "stats": stats, **cols}
    art_cols = {"region_id": [a["region_id"] for a in arts], "file_id": [a["file_id"] for a in arts],
                "generation": [a["generation"] for a in arts], "file_size": [a["file_size"] for a in arts],
                "format": [a.get("format") for a in arts], "version": [a.get("version") for a in arts],
                "created_at": [a.get("created_at") for a in arts], "objects": [len(a["objects"]) for a in arts],
                "relative": [], "object_path": [], "object_size": [o["file_size"] for a in arts for o in a["objects"]]}
    for a in arts:  # an entry's objects are named relative to its directory when all are under it
        top = artifact_prefix(a["region_id"], a["file_id"], a["generation"])
        paths = [o["path"] for o in a["objects"]]
        rel = all(type(p) is str and p.startswith(top) for p in paths)
        art_cols["relative"].append(int(rel))
        art_cols["object_path"] += [p[len(top):] for p in paths] if rel else paths
    for a in arts:
        if set(a) - {"region_id", "file_id", "generation", "objects", "file_size", "format", "version", "created_at"}:
            raise ValueError(f"artifact entry {a.get('file_id')}: unknown keys {sorted(set(a))}")
        if any(set(o) != {"path", "file_size"} for o in a["objects"]):
            raise ValueError(f"artifact entry {a.get('file_id')}: an object is not {{path, file_size}}")
    return sst_cols, art_cols


def encode_v2(doc: dict) -> bytes:
    """A catalog document (a version-1 shape: lists of record dicts) as a version-2
    document's bytes.  Raises ``KeyError`` / ``TypeError`` / ``ValueError`` for a
    record the columns cannot hold (the caller checked the document first), and
    :class:`EncodeRefused` for values the columns' types refuse."""
    sst_cols, art_cols = record_columns(doc)
    out = {k: doc[k] for k in HEAD_KEYS if k in doc}
    out["version"] = 2
    out["ssts"], out["artifacts"] = sst_cols, art_cols
    # typed on the way out too: what is written is what the decoder accepts
    try:
        data = _ENCODER.encode(out) + b"\n"
        decode_v2(data)
    except (msgspec.EncodeError, OverflowError) as e:
        raise EncodeRefused(str(e)) from None
    except ParseRefused as e:
        raise EncodeRefused(str(e)) from None
    return data


def fresh_list(o) -> list:
    """A record sequence as a list of new dicts, none shared with it (``json.dumps``'s
    ``default`` in :func:`~.catalog.copy_doc`)."""
    if isinstance(o, Records):
        return [o._make(i) for i in range(len(o))]
    raise TypeError(f"{type(o).__name__} is not part of a catalog document")


_SNIFF = re.compile(rb'\s*\{\s*"format"\s*:\s*"[^"\\]*"\s*,\s*"version"\s*:\s*(\d{1,9})\s*[,}]')


class _Head(Struct):
    version: object = None


def format_version(data: bytes):
    """The format version a catalog version's bytes say (the top-level ``version``;
    None when it cannot be told, or is not an integer).  Writers put it second, after
    ``format``: read from the first bytes; else the whole text is skimmed."""
    m = _SNIFF.match(bytes(data[:256]))
    if m is not None:
        return int(m.group(1))
    try:
        v = msgspec.json.decode(data, type=_Head).version
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    return v if type(v) is int else None
