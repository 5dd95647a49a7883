"""Strict JSON, and the checks every manifest and catalog-entry rule is written
with: each returns the value when its rule holds, else raises :class:`Broken`
(where, what is wrong: found against expected); messages are built only then,
so the checks cost little on valid input.  Also a part object as a row
(:func:`part_row`), shared by both ways of reading the ``files`` array."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ...errors import CorruptArtifactError
from .. import constants as C
from .model import PART_DTYPE, is_file_id

# --- strict JSON ---------------------------------------------------------------------


def reject_constant(name: str):
    raise ValueError(f"non-standard JSON constant {name}")


def _first_duplicate(pairs):
    seen = set()
    for k, _ in pairs:
        if k in seen:
            raise ValueError(f"duplicate key {k!r}")
        seen.add(k)


def no_duplicates(pairs):
    d = dict(pairs)
    if len(d) != len(pairs):
        _first_duplicate(pairs)
    return d


def check_duplicates(pairs):
    """The same check keeping nothing (only the first error of a document is wanted)."""
    if len(pairs) > 1 and len(dict(pairs)) != len(pairs):
        _first_duplicate(pairs)


_STRICT_DECODER = json.JSONDecoder(object_pairs_hook=no_duplicates, parse_constant=reject_constant)


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


# --- the checks --------------------------------------------------------------------------
#
# parse_manifest and parse_catalog_entry add the object's name to a Broken and
# raise the gtsamples error.


class Broken(Exception):
    """A broken rule at ``where`` ("" for the object itself); raised as ``err``."""

    def __init__(self, where: str, message: str, err=CorruptArtifactError):
        super().__init__(where, message)
        self.where, self.message, self.err = where, message, err

    def inside(self, outer: str) -> "Broken":
        """The same rule broken inside ``outer`` (``files[3]``)."""
        self.where = f"{outer}.{self.where}" if self.where else outer
        return self

    def error(self, what: str) -> Exception:
        return self.err(f"{what}: {self.where}: {self.message}" if self.where else f"{what}: {self.message}")


class Keys:
    """The keys of a JSON object: required (in the order messages list them) and optional."""

    __slots__ = ("names", "required", "allowed", "optional")

    def __init__(self, names: tuple[str, ...], optional: tuple[str, ...] = ()):
        self.names, self.optional = names, optional
        self.required, self.allowed = frozenset(names), frozenset(names + optional)


def obj(v: Any, where: str, keys: Keys) -> dict:
    """An object with every required key and no key but those allowed."""
    if isinstance(v, dict):
        k = v.keys()
        if k == keys.required or (keys.optional and keys.required <= k <= keys.allowed):
            return v
    else:
        raise Broken(where, f"expected an object, found {type(v).__name__}")
    missing = [k for k in keys.names if k not in v]
    if missing:
        raise Broken(where, f"missing key(s) {', '.join(missing)}")
    extra = sorted(set(v) - keys.allowed)
    raise Broken(where, f"unknown key(s) {', '.join(map(repr, extra))}; expected exactly {', '.join(keys.names)}")


U32 = (0, C.U32_MAX, "u32")
U64 = (0, C.U64_MAX, "u64")
I64 = (C.I64_MIN, C.I64_MAX, "i64")


def integer(v: Any, where: str, kind: tuple[int, int, str]) -> int:
    """An integer (not a bool, not a float such as 1.0) within ``kind``'s range."""
    lo, hi, name = kind
    if type(v) is not int:
        raise Broken(where, f"expected an integer ({name}), found {type(v).__name__} {v!r}")
    if not lo <= v <= hi:
        raise Broken(where, f"{v} is out of range for {name} [{lo}, {hi}]")
    return v


def text(v: Any, where: str) -> str:
    """A string with a UTF-8 form (a lone surrogate escape is valid JSON, not text: F5)."""
    if not isinstance(v, str):
        raise Broken(where, f"expected a string, found {type(v).__name__}")
    if not v.isascii():
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as e:
            raise Broken(where, f"string is not valid Unicode text ({e.reason} at index {e.start})") from None
    return v


def nonempty(s: str, where: str) -> str:
    if not s:
        raise Broken(where, "must be nonempty")
    return s


def file_id_text(v: Any, where: str) -> str:
    s = text(v, where)
    if not is_file_id(s):
        raise Broken(where, f"{s!r} is not a FileId (lowercase hyphenated UUID)")
    return s


def distinct(values: list, where: str, rule: str) -> None:
    if len(set(values)) != len(values):
        raise Broken(where, f"{rule}; repeated: {sorted({x for x in values if values.count(x) > 1})}")


# --- parts -------------------------------------------------------------------------------
#
# The files array becomes rows of PART_DTYPE (a PartTable): part_row checks a
# part object's keys and the type and range of each value (the rules that make
# it a row); the rules between values (parse._PART_RULES) then run on the rows.

PART_KEYS = Keys(("part_id", "file_size", "num_rows", "num_blocks", "first", "last", "min_timestamp", "max_timestamp"))
ID_KEYS = Keys(("table_id", "tsid"))


def part_row(o: Any) -> tuple:
    """A part object as a row (PART_COLUMNS order), or Broken (where relative to the part)."""
    o = obj(o, "", PART_KEYS)
    return (integer(o["part_id"], "part_id", U32), integer(o["file_size"], "file_size", U64),
            integer(o["num_rows"], "num_rows", U64), integer(o["num_blocks"], "num_blocks", U64),
            *_identity(o["first"], "first", "first.table_id", "first.tsid"),
            *_identity(o["last"], "last", "last.table_id", "last.tsid"),
            integer(o["min_timestamp"], "min_timestamp", I64), integer(o["max_timestamp"], "max_timestamp", I64))


def _identity(v: Any, where: str, table_id_where: str, tsid_where: str) -> tuple[int, int]:
    o = obj(v, where, ID_KEYS)
    return integer(o["table_id"], table_id_where, U32), integer(o["tsid"], tsid_where, U64)


#: the range of each PART_COLUMNS value, as part_row checks it (the column-wise reader
#: keeps a row only where all values are within these)
PART_RANGES = (U32, U64, U64, U64, U32, U64, U32, U64, I64, I64)


class PartRows:
    """The ``files`` array as read: the rows of its leading parts that part_row
    takes, the Broken of the element after them if any (later elements are only
    read as JSON: that element holds the first broken rule), the element count."""

    __slots__ = ("rows", "bad", "count")

    def __init__(self, rows: np.ndarray, bad: Broken | None, count: int):
        self.rows = rows
        self.bad = bad
        self.count = count

    @classmethod
    def from_list(cls, pl: list) -> "PartRows":
        rows = []
        bad = None
        for el in pl:
            try:
                rows.append(part_row(el))
            except Broken as e:
                bad = e
                break
        return cls(np.array(rows, dtype=PART_DTYPE) if rows else np.empty(0, PART_DTYPE), bad, len(pl))


