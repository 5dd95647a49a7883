"""The manifest's and the catalog entry's objects: frozen, validated by
:mod:`.parse` before they are made from untrusted input."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Iterable, Iterator

import numpy as np

from .. import constants as C

#: A ``FileId``: a lowercase hyphenated UUID (matched whole: ``fullmatch``, so no trailing newline).
_FILE_ID_RE = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_FILE_ID_FULLMATCH = re.compile(_FILE_ID_RE).fullmatch
_HEX_DIGIT = np.zeros(256, bool)  # the characters of a FileId's hex groups: 0-9 a-f
_HEX_DIGIT[list(b"0123456789abcdef")] = True


#: A FileId's length.
FILE_ID_CHARS = 36


def all_file_ids(ids: list) -> bool:
    """:func:`is_file_id` for every item of ``ids`` at once (a catalog version lists
    thousands): the items joined and checked as one text (:func:`file_ids_text_ok`)."""
    n = len(ids)
    if n == 0:
        return True
    try:
        text = "".join(ids)
    except TypeError:  # an item that is not a str
        return False
    return set(map(len, ids)) == {FILE_ID_CHARS} and file_ids_text_ok(text, n)


#: Each character of a FileId as the pattern below spells it: h for a hex digit, - for itself, x otherwise.
_FILE_ID_CLASS = bytes(0x68 if _HEX_DIGIT[c] else 0x2D if c == 0x2D else 0x78 for c in range(256))
_FILE_ID_PATTERN = b"hhhhhhhh-hhhh-hhhh-hhhh-hhhhhhhhhhhh"


def file_ids_text_ok(text: str, n: int) -> bool:
    """``text`` is ``n`` FileIds, one after another (:func:`is_file_id` of each
    ``FILE_ID_CHARS`` characters), checked at once: each character's class
    (``bytes.translate``) against the pattern's."""
    if len(text) != FILE_ID_CHARS * n or not text.isascii():
        return False
    return text.encode("ascii").translate(_FILE_ID_CLASS) == _FILE_ID_PATTERN * n


def file_ids_distinct(text: str, n: int) -> bool:
    """No FileId twice in ``text``, ``n`` FileIds one after another (that passed
    :func:`file_ids_text_ok`): their 128-bit values folded to 64 bits and sorted (numpy);
    only when two folds are equal are the FileIds themselves compared."""
    if n < 2:
        return True
    k = np.frombuffer(bytes.fromhex(text.replace("-", "")), ">u8").reshape(n, 2)
    folded = np.sort(k[:, 0] ^ (k[:, 1] * np.uint64(0x9E3779B97F4A7C15)))
    if not (folded[1:] == folded[:-1]).any():
        return True
    w = FILE_ID_CHARS
    return len({text[i:i + w] for i in range(0, len(text), w)}) == n


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

    @staticmethod
    def from_row(r: tuple) -> "PartDescriptor":
        """The descriptor of a row (:data:`PART_COLUMNS` order)."""
        return PartDescriptor(r[0], r[1], r[2], r[3], (r[4], r[5]), (r[6], r[7]), r[8], r[9])

    @property
    def name(self) -> str:
        return C.part_file_name(self.part_id)

    def to_json_obj(self) -> dict:
        d = dataclasses.asdict(self)  # the manifest's key order
        for k in ("first", "last"):
            d[k] = dict(zip(("table_id", "tsid"), d[k]))
        return d


#: One row per part: the manifest's part descriptors as columns (``first`` and
#: ``last`` split into table ID and TSID).  Values are validated before a row is
#: kept, so table IDs and part IDs fit u32 although stored as u64.
PART_COLUMNS = ("part_id", "file_size", "num_rows", "num_blocks", "first_table_id", "first_tsid",
                "last_table_id", "last_tsid", "min_timestamp", "max_timestamp")
PART_DTYPE = np.dtype([(k, "<i8" if k.endswith("timestamp") else "<u8") for k in PART_COLUMNS])
_ITER_ROWS = 4096


class PartTable(Sequence):
    """``Manifest.files``: a read-only sequence of :class:`PartDescriptor` kept as
    one numpy structured array (:data:`PART_DTYPE`), so a manifest of many parts
    costs 80 bytes per part and checks run column-wise.  Indexing and iteration
    build the descriptors on demand; :meth:`column` gives a column as an array.
    Compares equal to a tuple or list of the same descriptors."""

    __slots__ = ("_a", "_raw")

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

    @property
    def raw(self) -> bytes:
        """The rows' bytes (made once: 80 a part): a region query joins many artifacts'
        tables to test all their parts in one pass."""
        try:
            return self._raw
        except AttributeError:
            self._raw = self._a.tobytes()
            return self._raw

    def column(self, name: str) -> np.ndarray:
        """One of :data:`PART_COLUMNS` as a read-only array."""
        return self._a[name]

    def __len__(self) -> int:
        return self._a.shape[0]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return PartTable(self._a[i])
        return PartDescriptor.from_row(self._a[i].item())

    def __iter__(self) -> Iterator[PartDescriptor]:
        a, from_row = self._a, PartDescriptor.from_row
        for k in range(0, a.shape[0], _ITER_ROWS):
            for r in a[k:k + _ITER_ROWS].tolist():
                yield from_row(r)

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


