"""Catalog format version 3: format 2's columns, packed (docs/catalog.md).

Format 2 spells every value of a column in JSON, so its parse makes a Python object
per value: 10,000 SSTs are ~270,000 ints and strings, ~10 MB of objects, and a first
open in a fresh process spent ~20 ms in msgspec, most of it touching new memory.
Format 3 keeps format 2's document, header and columns, and writes each column as one
or two JSON strings:

* an integer column is ``{"dtype": "<u4", "data": "<base64>"}``: its values as
  little-endian integers of that type (one of :data:`INT_DTYPES`; writers pick the
  narrowest that holds them), in base64 (RFC 4648, padded); read as one numpy array;
* a string column is ``{"ends": <integer column>, "text": "<the values, concatenated>"}``:
  value ``i`` is ``text[ends[i - 1]:ends[i]]`` (in code points; ``ends[-1]`` is 0); or,
  a dictionary column, ``{"ends", "text", "indices": <integer column>}``: ``text`` and
  ``ends`` give the distinct values (pieces) and value ``i`` is piece ``indices[i]``.

So a version is a few dozen JSON values whatever its size, and its parse is msgspec
over a few long strings, base64 decodes and numpy checks.  Records are made from the
arrays on first use, as for format 2 (:class:`~.catalog_parse.SstRecords`,
:class:`~.catalog_parse.EntryRecords`, over the column views :class:`IntColumn` and
:class:`StrColumn`).

Format 2's nulls: in ``ssts.path``, ``artifacts.format`` and ``artifacts.created_at``
an empty string is null; in ``artifacts.version``, -1.  A document with a real empty
string or negative version there is written as format 2 (:func:`encode_v3` refuses it).

Duplicate keys: as for format 2 (:func:`~.catalog_parse.decode_v2`), the ``:`` of a
text without escapes are counted against the typed document's pairs; base64 never
holds one, so a ``:`` there only sends the text to the ``json`` hook, which finds no
duplicate, and the column's base64 is refused.  The base64 strings are not made into
``str``: msgspec gives them as views of the document (``Raw``), decoded from there
(a byte that is not base64, UTF-8 or not, refuses the column).
"""

from __future__ import annotations

import base64
import binascii
import sys

import msgspec
import numpy as np
from msgspec import UNSET, Struct, UnsetType

from .catalog_parse import (
    ENTRY_COLUMNS,
    HEAD_KEYS,
    SST_COLUMNS,
    STRUCT_OPTIONS,
    DocHeader,
    EncodeRefused,
    EntryRecords,
    ParseRefused,
    SchemaShape,
    SstRecords,
    check_entry_codes,
    check_lengths,
    check_sst_codes,
    decode_header,
    gc_paused,
    record_columns,
    schema_colons,
    schema_pairs,
)

__all__ = ["FORMAT_VERSION", "INT_DTYPES", "IntColumn", "PackedColumn", "StrColumn", "decode_v3", "encode_v3"]

FORMAT_VERSION = 3
#: The integer types a packed column may have, as numpy names them (little-endian); a
#: writer picks the first that holds the column's values.
INT_DTYPES = {name: np.dtype(name) for name in ("<u1", "<i1", "<u2", "<i2", "<u4", "<i4", "<u8", "<i8")}
#: A writer makes a string column a dictionary column when its distinct values are at most
#: this fraction of its values (1/4: e.g. ``format``, ``object_path``; never the file ids).
DICTIONARY_RATIO = 4
#: Nullable columns: the value that stands for null.
STR_NULL = ""
VERSION_NULL = -1
_NULLABLE_STR = {("ssts", "path"), ("artifacts", "format"), ("artifacts", "created_at")}
_INT_NULL = {("artifacts", "version"): VERSION_NULL}  # nullable integer columns: their null
_STR_NAMES = {"ssts": ("file_id", "path"),
              "artifacts": ("file_id", "generation", "format", "created_at", "object_path")}


class PackedColumn:
    """What the packed columns share: iteration, equality and repr over ``tolist()``."""

    __slots__ = ()

    def tolist(self) -> list:  # pragma: no cover - defined by the subclasses
        raise NotImplementedError

    def __iter__(self):
        return iter(self.tolist())

    def __eq__(self, other):
        return self.tolist() == list(other)

    __hash__ = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.tolist()!r})"


class IntColumn(PackedColumn):
    """A packed integer column as records read it: an int (or None for the column's
    null) by index, a list by slice; ``values`` is the array itself."""

    __slots__ = ("values", "null")

    def __init__(self, values: np.ndarray, null: int | None = None):
        self.values = values
        self.null = null

    def __len__(self) -> int:
        return self.values.shape[0]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.tolist()[i] if self.null is not None else self.values[i].tolist()
        v = self.values[i].item()
        return None if v == self.null else v

    def tolist(self) -> list:
        out = self.values.tolist()
        if self.null is not None:
            out = [None if v == self.null else v for v in out]
        return out

    def __array__(self, dtype=None, copy=None):
        """The values as an array (of ``dtype``: OverflowError for a value it does not
        hold, as numpy gives for Python ints, never a wrapped value)."""
        if dtype is not None and np.dtype(dtype).kind in "iu" and len(self):
            info = np.iinfo(dtype)
            if self.min() < info.min or self.max() > info.max:
                raise OverflowError(f"a value of {self.min()}..{self.max()} does not fit {np.dtype(dtype)}")
        return np.array(self.values, dtype=dtype, copy=True if copy else None)

    def min(self) -> int:
        return int(self.values.min())

    def max(self) -> int:
        return int(self.values.max())

    def sum(self) -> int:
        return int(self.values.sum(dtype=np.uint64 if self.values.dtype.kind == "u" else np.int64))

    def __reduce__(self):
        return IntColumn, (self.values, self.null)


class StrColumn(PackedColumn):
    """A packed string column as records read it: a str (None for the null of a
    nullable column) by index, a list by slice.  Its pieces are ``text`` cut at ``ends``;
    value ``i`` is piece ``i``, or piece ``indices[i]`` in a dictionary column."""

    __slots__ = ("text", "ends", "nullable", "indices", "_values")

    def __init__(self, text: str, ends: np.ndarray, nullable: bool = False, indices: np.ndarray | None = None):
        self.text = text
        self.ends = ends  # int64, checked: nondecreasing, from >= 0 to len(text)
        self.nullable = nullable
        self.indices = indices  # int64, checked: each < len(ends); None: one piece per value
        self._values: list | None = None  # the values, once made (a plan's coverage and bounds both use them)

    def __len__(self) -> int:
        return (self.ends if self.indices is None else self.indices).shape[0]

    def _piece(self, k: int) -> str | None:
        v = self.text[int(self.ends[k - 1]) if k else 0:int(self.ends[k])]
        return None if self.nullable and v == STR_NULL else v

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("column index out of range")
        return self._piece(i if self.indices is None else int(self.indices[i]))

    def tolist(self) -> list:
        """The values, as a new list (of strs made once per column: a race makes them twice, harmlessly)."""
        out = self._values
        if out is None:
            text, ends = self.text, self.ends.tolist()
            out = [text[a:b] for a, b in zip([0, *ends[:-1]], ends)]
            if self.nullable:
                out = [None if v == STR_NULL else v for v in out]
            if self.indices is not None:
                out = [out[k] for k in self.indices.tolist()]
            self._values = out
        return list(out)

    def __array__(self, dtype=None, copy=None):
        a = np.empty(len(self), object)
        a[:] = self.tolist()
        return a if dtype is None else a.astype(dtype)

    def fixed_width(self, width: int) -> bool:
        """Every value is ``width`` characters long and its own piece (then value ``i`` is
        ``text[i * width:][:width]``)."""
        n = len(self)
        return (self.indices is None and len(self.text) == width * n
                and bool(np.array_equal(self.ends, np.arange(1, n + 1) * width)))

    def __reduce__(self):
        return StrColumn, (self.text, self.ends, self.nullable, self.indices)


class _Ints(Struct, **STRUCT_OPTIONS):
    dtype: str
    data: msgspec.Raw  # the JSON string itself, quotes included: a view of the document, no str made


class _Strs(Struct, **STRUCT_OPTIONS):
    ends: _Ints
    text: str
    indices: _Ints | UnsetType = UNSET  # a dictionary column: each value's piece


class _SstCols(Struct, **STRUCT_OPTIONS):
    file_id: _Strs
    path: _Strs
    size: _Ints
    rows: _Ints
    schemas: list[SchemaShape]
    schema: _Ints
    stats: _Ints
    first_table_id: _Ints
    first_tsid: _Ints
    last_table_id: _Ints
    last_tsid: _Ints
    min_timestamp: _Ints
    max_timestamp: _Ints


class _EntryCols(Struct, **STRUCT_OPTIONS):
    region_id: _Ints
    file_id: _Strs
    generation: _Strs
    file_size: _Ints
    format: _Strs
    version: _Ints
    created_at: _Strs
    objects: _Ints
    relative: _Ints
    object_path: _Strs
    object_size: _Ints


class _Doc(DocHeader, **STRUCT_OPTIONS):
    ssts: _SstCols
    artifacts: _EntryCols


_DECODER = msgspec.json.Decoder(_Doc)
_ENCODER = msgspec.json.Encoder()

if sys.version_info >= (3, 11):
    def _b64decode(text) -> bytes:
        return binascii.a2b_base64(text, strict_mode=True)  # only the alphabet, padding where due
else:  # pragma: no cover - Python 3.10
    def _b64decode(text) -> bytes:
        return base64.b64decode(text, validate=True)


def _ints(packed: _Ints, name: str) -> np.ndarray:
    """The values of packed integer column ``name`` (rules: its dtype, its base64, whole values)."""
    dt = INT_DTYPES.get(packed.dtype)
    if dt is None:
        raise ParseRefused(f"{name}.dtype is {packed.dtype!r}: a packed integer column's dtype is one of "
                           f"{', '.join(INT_DTYPES)}")
    text = memoryview(packed.data)
    if len(text) < 2 or text[0] != 0x22 or text[-1] != 0x22:  # (a JSON string: base64 needs no escape)
        raise ParseRefused(f"{name}.data is {bytes(text[:20]).decode('utf-8', 'replace')!r}: "
                           f"a packed integer column's data is a string")
    try:
        raw = _b64decode(text[1:-1])
    except (binascii.Error, ValueError) as e:
        raise ParseRefused(f"{name}.data is not base64 ({e})") from None
    if len(raw) % dt.itemsize:
        raise ParseRefused(f"{name}.data holds {len(raw)} bytes: not a whole number of {packed.dtype} values "
                           f"({dt.itemsize} bytes each)")
    return np.frombuffer(raw, dt)


def _strs(packed: _Strs, name: str, nullable: bool) -> StrColumn:
    """Packed string column ``name`` (rules: its ends are integers that never decrease,
    from 0 up, and end where its text does)."""
    ends = _ints(packed.ends, name + ".ends")
    n = ends.shape[0]
    e = ends.astype(np.int64)
    text = packed.text
    if n and ends.dtype.kind == "u" and ends.max() > np.iinfo(np.int64).max:
        raise ParseRefused(f"{name}.ends holds {int(ends.max())}: beyond its text ({len(text)} characters)")
    if n and (e[0] < 0 or (n > 1 and bool((e[1:] < e[:-1]).any()))):
        k = 0 if e[0] < 0 else int(np.flatnonzero(e[1:] < e[:-1])[0]) + 1
        raise ParseRefused(f"{name}.ends[{k}] is {int(e[k])}, after {int(e[k - 1]) if k else 0}: a string column's "
                           f"ends never decrease")
    last = int(e[-1]) if n else 0
    if last != len(text):
        raise ParseRefused(f"{name}.ends ends at {last} but its text has {len(text)} characters")
    if packed.indices is UNSET:
        return StrColumn(text, e, nullable)
    idx = _ints(packed.indices, name + ".indices")
    if idx.shape[0] and (idx.min() < 0 or idx.max() >= n):
        bad = int(idx.min()) if idx.min() < 0 else int(idx.max())
        raise ParseRefused(f"{name}.indices holds {bad}: a dictionary column's indices are below its "
                           f"{n} pieces")
    return StrColumn(text, e, nullable, idx.astype(np.int64))


def _pairs(t: _Doc) -> int:
    """The ``:`` a version-3 text without escapes holds when no object has a duplicate
    key (as :func:`~.catalog_parse.decode_v2` counts them): one per key/value pair, plus
    those inside its strings other than the base64 (which holds none)."""
    head = [getattr(t, k) for k in HEAD_KEYS]
    n = sum(1 for v in head if v is not UNSET) + 2  # + ssts, artifacts
    n += sum(v.count(":") for v in head if type(v) is str)
    n += schema_pairs(t.schema) + schema_colons(t.schema)
    n += sum(schema_pairs(x) + schema_colons(x) for x in t.ssts.schemas)
    for part in (t.ssts, t.artifacts):
        for k in part.__struct_fields__:
            n += 1
            v = getattr(part, k)
            if type(v) is _Ints:
                n += 2 + v.dtype.count(":")
            elif type(v) is _Strs:
                n += 4 + v.ends.dtype.count(":") + v.text.count(":")
                if v.indices is not UNSET:
                    n += 3 + v.indices.dtype.count(":")
    return n


def _columns(part, what: str, names) -> dict:
    cols = {}
    for k in names:
        v = getattr(part, k)
        name = f"{what}.{k}"
        if type(v) is _Strs:
            cols[k] = _strs(v, name, (what, k) in _NULLABLE_STR)
        else:
            cols[k] = IntColumn(_ints(v, name), _INT_NULL.get((what, k)))
    return cols


def decode_v3(data: bytes) -> tuple[dict, bool]:
    """(document, duplicate-free) of a version-3 catalog's bytes, as
    :func:`~.catalog_parse.decode_v2`: the header as ``json`` gives it, ``ssts`` and
    ``artifacts`` as record sequences over the unpacked columns.  Raises
    :class:`~.catalog_parse.ParseRefused` naming the broken rule."""
    with gc_paused():
        typed, doc, clean = decode_header(_DECODER, data, _pairs)
        s = _columns(typed.ssts, "ssts", SST_COLUMNS)
        check_lengths(s, SST_COLUMNS, "ssts", "SST")
        s["region_id"] = typed.region_id
        s["schemas"] = [msgspec.to_builtins(x) for x in typed.ssts.schemas]
        check_sst_codes(s["schema"], s["stats"], len(s["schemas"]))
        a = _columns(typed.artifacts, "artifacts", ENTRY_COLUMNS + ("object_path", "object_size"))
        check_lengths(a, ENTRY_COLUMNS, "artifacts", "entry")
        check_entry_codes(a["objects"], a["relative"], len(a["object_path"]), len(a["object_size"]))
        a["starts"] = IntColumn(np.concatenate(([0], np.cumsum(a["objects"].values, dtype=np.int64))))
        doc["ssts"], doc["artifacts"] = SstRecords(s), EntryRecords(a)
    return doc, clean


def _pack_ints(values: list, name: str, null: int | None = None) -> dict:
    if null is not None:
        if any(type(v) is int and v < 0 for v in values):
            raise EncodeRefused(f"{name} holds a negative value: format 3 writes none as {null}")
        values = [null if v is None else v for v in values]
    if not set(map(type, values)) <= {int}:
        raise EncodeRefused(f"{name} holds a value that is not an integer")
    lo, hi = (min(values), max(values)) if values else (0, 0)
    for dtype, dt in INT_DTYPES.items():
        info = np.iinfo(dt)
        if info.min <= lo and hi <= info.max:
            raw = np.array(values, dt).tobytes()
            return {"dtype": dtype, "data": binascii.b2a_base64(raw, newline=False).decode("ascii")}
    raise EncodeRefused(f"{name} holds {lo if lo < 0 else hi}: beyond 64 bits")


def _pack_strs(values: list, name: str, nullable: bool) -> dict:
    if nullable:
        if STR_NULL in values:
            raise EncodeRefused(f"{name} holds an empty string: format 3 writes null as one")
        values = [STR_NULL if v is None else v for v in values]
    if not set(map(type, values)) <= {str}:
        raise EncodeRefused(f"{name} holds a value that is not a string")
    pieces = list(dict.fromkeys(values))  # (in order of first use)
    dictionary = len(pieces) <= len(values) // DICTIONARY_RATIO
    if dictionary:
        where = {v: k for k, v in enumerate(pieces)}
        indices = [where[v] for v in values]
        values = pieces
    ends = np.cumsum(np.fromiter(map(len, values), np.int64, len(values)), dtype=np.int64)
    out = {"ends": _pack_ints(ends.tolist(), name + ".ends"), "text": "".join(values)}
    if dictionary:
        out["indices"] = _pack_ints(indices, name + ".indices")
    return out


def encode_v3(doc: dict) -> bytes:
    """A catalog document (a version-1 shape: lists of record dicts) as a version-3
    document's bytes.  Raises ``KeyError`` / ``TypeError`` / ``ValueError`` for a
    record the columns cannot hold (the caller checked the document first), and
    :class:`~.catalog_parse.EncodeRefused` for values format 3 does not hold (the
    caller writes format 2 then)."""
    cols = dict(zip(("ssts", "artifacts"), record_columns(doc)))
    out = {k: doc[k] for k in HEAD_KEYS if k in doc}
    out["version"] = FORMAT_VERSION
    for what, names in (("ssts", SST_COLUMNS + ("schemas",)),
                        ("artifacts", ENTRY_COLUMNS + ("object_path", "object_size"))):
        packed = {}
        for k in names:
            v, name = cols[what][k], f"{what}.{k}"
            if k == "schemas":
                packed[k] = v
            elif k in _STR_NAMES[what]:
                packed[k] = _pack_strs(v, name, (what, k) in _NULLABLE_STR)
            else:
                packed[k] = _pack_ints(v, name, _INT_NULL.get((what, k)))
        out[what] = packed
    try:  # typed on the way out too: what is written is what the decoder accepts
        data = _ENCODER.encode(out) + b"\n"
        decode_v3(data)
    except (msgspec.EncodeError, OverflowError, ParseRefused) as e:
        raise EncodeRefused(str(e)) from None
    return data

