"""The region catalog: copy-on-write JSON versions (Lance-style manifests).

The format of a version (docs/catalog.md): format version 3, written by commits, holds
the SST records and artifact entries as packed columns (:mod:`.catalog_packed`);
versions 2 (the same columns as JSON arrays, :mod:`.catalog_parse`) and 1 (records as
objects) are still read.  Layout under the store root::

    <region_id>/samples/_catalog/v00000000000000000001.json
    <region_id>/samples/_catalog/v00000000000000000002.json
    ...

Each version is a complete, immutable description of the region: its schema,
its source SSTs (in region order) and the artifact entries covering them.  A
commit writes version N+1 *only if it does not exist yet*; a writer that
loses the race re-reads the winner and re-applies its change on top of it.

Versions are created with :meth:`~gtsamples.storage.Store.put_if_absent`:

* local directories: the new version is written to a temporary file, fsynced,
  then ``os.link``-ed to its final name (atomic, fails if the name exists);
* fsspec URLs: a conditional put (``If-None-Match`` on S3; an ``exists`` check
  where the backend has none), read back and compared (the document carries a
  nonce, so a retried put that finds its own first attempt is not a conflict);
  object stores write whole objects atomically.  A put whose outcome cannot be
  seen (the store kept failing) is tried again with the same bytes, which is
  safe for the same reason.

Opening a region lists the catalog directory once and reads the newest
version and nothing else.  Versions are immutable, so each one read is kept
process-wide (:class:`CatalogVersion`, keyed by store and version number, as the
page cache keys artifacts).  A reopen on a local store does not list again: the
newest version seen in this process, ``n``, is still the newest when its file is
the same (one ``stat``) and ``n + 1`` does not exist (one more): version ``n + 2``
is only ever written by a commit that saw ``n + 1``, and expiry never removes the
newest version, nor a newer one before an older (:mod:`.gc`).  So a reopen of an
unchanged version costs two ``stat`` calls whatever the number of versions.  On an
object store (no cheap identity) every open lists, and the listing's ETags tell a
version from one of a region recreated at the same root.  :func:`clear` empties that
cache (a forked child starts with an empty one).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as _dt
import functools
import json
import operator
import random
import re
import time
import uuid
from typing import Any, Callable

from ..errors import SamplesError, StorageError
from ..format import constants as C
from ..format.manifest import (FILE_ID_CHARS, all_file_ids, file_ids_distinct, file_ids_text_ok, is_file_id,
                               load_strict_json)
from ..runtime import ForkSafeLock, at_fork_child

CATALOG_FORMAT = "gtsamples-region-catalog"
#: The format version new commits write (3: the records as packed columns; 2 where a
#: document holds a value format 3 does not); versions 1, 2 and 3 are read.
CATALOG_FORMAT_VERSION = 3
READ_FORMAT_VERSIONS = (1, 2, 3)
CATALOG_DIR = "_catalog"
MAX_CATALOG_BYTES = 256 * 1024 * 1024
#: Attempts to create one version while the store keeps failing (each after the library's own retries).
PUT_ATTEMPTS = 3
_VERSION_RE = re.compile(r"^v(\d{20})\.json$")

_TOP_KEYS = ("format", "version", "region_id", "catalog_version", "created_at", "operation", "schema",
             "ssts", "artifacts")


class CatalogError(SamplesError):
    """The region catalog is missing, malformed, or a commit could not be made."""


class CommitConflict(CatalogError):
    """A commit kept losing the race for the next version (after all retries)."""


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def version_name(n: int) -> str:
    return f"v{n:020d}.json"


def catalog_prefix(region_id: int) -> str:
    return f"{region_id}/samples/{CATALOG_DIR}/"


# --- the region schema ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RegionSchema:
    """The samples logical schema of a region: time index and float64 fields, with column IDs."""

    ts_name: str
    ts_unit: str  # manifest unit name: second | millisecond | microsecond | nanosecond
    ts_column_id: int
    fields: tuple[tuple[str, int], ...]  # (name, column_id) in metadata order

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.fields)

    @property
    def field_column_ids(self) -> list[int]:
        return [c for _, c in self.fields]

    @property
    def column_names(self) -> tuple[str, ...]:
        return ("__table_id", "__tsid", self.ts_name, "__sequence", "__op_type") + self.field_names

    def arrow_schema(self, names=None):
        return _arrow_schema(self, None if names is None else tuple(names))

    def _make_arrow_schema(self, names):
        import pyarrow as pa

        fixed = [
            pa.field("__table_id", pa.uint32(), nullable=False),
            pa.field("__tsid", pa.uint64(), nullable=False),
            pa.field(self.ts_name, pa.timestamp(C.ARROW_UNITS[self.ts_unit]), nullable=False),
            pa.field("__sequence", pa.uint64(), nullable=False),
            pa.field("__op_type", pa.uint8(), nullable=False),
        ]
        fields = fixed + [pa.field(n, pa.float64(), nullable=True) for n in self.field_names]
        if names is not None:
            keep = set(names)
            fields = [f for f in fields if f.name in keep]
        return pa.schema(fields)

    def to_json_obj(self) -> dict:
        return {
            "timestamp": {"column_id": self.ts_column_id, "name": self.ts_name, "unit": self.ts_unit},
            "fields": [{"column_id": c, "name": n} for n, c in self.fields],
        }

    @classmethod
    def from_json_obj(cls, o: Any, what: str) -> "RegionSchema":
        try:
            t = o["timestamp"]
            ts = (str(t["name"]), str(t["unit"]), int(t["column_id"]))
            fields = tuple((str(f["name"]), int(f["column_id"])) for f in o["fields"])
        except (TypeError, KeyError, ValueError) as e:
            raise CatalogError(f"{what}: malformed schema ({type(e).__name__}: {e})") from None
        s = cls(ts[0], ts[1], ts[2], fields)
        s.check(what)
        return s

    def check(self, what: str) -> None:
        if self.ts_unit not in C.TIME_UNITS:
            raise CatalogError(f"{what}: timestamp unit {self.ts_unit!r} is not one of {', '.join(C.TIME_UNITS)}")
        if not C.MIN_FIELDS <= len(self.fields) <= C.MAX_FIELDS:
            raise CatalogError(f"{what}: {len(self.fields)} fields; a samples schema has {C.MIN_FIELDS}..={C.MAX_FIELDS}")
        names = self.column_names
        if len(set(names)) != len(names):
            raise CatalogError(f"{what}: column names must be unique: {names}")
        ids = [self.ts_column_id] + self.field_column_ids
        if len(set(ids)) != len(ids) or any(not 0 <= i <= C.U32_MAX for i in ids):
            raise CatalogError(f"{what}: timestamp and field column IDs must be distinct u32 values: {ids}")

    @classmethod
    def from_arrow(cls, schema, like: "RegionSchema | None" = None, what: str = "table") -> "RegionSchema":
        """Check an Arrow schema is the samples logical schema; derive column IDs.

        Column IDs come from, in order: the Arrow field metadata key ``column_id``,
        the region schema ``like`` (matched by name), and finally defaults
        (timestamp 0, fields 1..n).
        """
        import pyarrow as pa

        names = schema.names
        if len(names) < 6:
            raise SamplesError(
                f"{what}: a samples SST has __table_id, __tsid, <timestamp>, __sequence, __op_type and at least "
                f"one float64 field; found columns {names}"
            )
        expect = [("__table_id", pa.uint32()), ("__tsid", pa.uint64()), (None, None), ("__sequence", pa.uint64()),
                  ("__op_type", pa.uint8())]
        for i, (name, typ) in enumerate(expect):
            f = schema.field(i)
            if name is None:
                if not pa.types.is_timestamp(f.type):
                    raise SamplesError(f"{what}: column 2 ({f.name!r}) must be the timestamp, found type {f.type}")
                if f.type.tz is not None:
                    raise SamplesError(f"{what}: timestamp column {f.name!r} must have no time zone, found {f.type.tz!r}")
                continue
            if f.name != name or f.type != typ:
                raise SamplesError(f"{what}: column {i} must be {name} {typ}, found {f.name} {f.type}")
        ts_field = schema.field(2)
        unit = {v: k for k, v in C.ARROW_UNITS.items()}[ts_field.type.unit]
        fields = []
        for f in list(schema)[5:]:
            if f.type != pa.float64():
                raise SamplesError(f"{what}: field column {f.name!r} must be float64, found {f.type}")
            fields.append(f)

        def meta_id(f):
            md = f.metadata or {}
            v = md.get(b"column_id")
            if v is None:
                return None
            try:
                return int(v)
            except ValueError:
                raise SamplesError(f"{what}: column {f.name!r} has a non-integer column_id metadata {v!r}") from None

        like_ids = {}
        if like is not None:
            like_ids = dict(like.fields)
            like_ids[like.ts_name] = like.ts_column_id
        ts_id = meta_id(ts_field)
        if ts_id is None:
            ts_id = like_ids.get(ts_field.name, 0)
        fids = []
        for k, f in enumerate(fields):
            cid = meta_id(f)
            if cid is None:
                cid = like_ids.get(f.name, k + 1)
            fids.append((f.name, cid))
        s = cls(ts_field.name, unit, int(ts_id), tuple(fids))
        try:
            s.check(what)
        except CatalogError as e:
            raise SamplesError(str(e)) from None
        return s


@functools.lru_cache(maxsize=256)
def _arrow_schema(schema: RegionSchema, names):
    return schema._make_arrow_schema(names)


# --- catalog documents ------------------------------------------------------------------


def empty_doc(region_id: int, schema: RegionSchema | None) -> dict:
    return {
        "format": CATALOG_FORMAT,
        "version": CATALOG_FORMAT_VERSION,
        "region_id": region_id,
        "catalog_version": 0,
        "created_at": now_iso(),
        "operation": "create",
        "schema": None if schema is None else schema.to_json_obj(),
        "ssts": [],
        "artifacts": [],
    }


_SST_FIELDS = operator.itemgetter("file_id", "path", "size", "rows", "schema")  # KeyError / TypeError
_FILE_ID_OF = operator.itemgetter("file_id")


def check_doc(doc: Any, what: str, region_id: int | None = None, number: int | None = None) -> dict:
    """Structural checks of a catalog version (entries are checked when used)."""
    if not isinstance(doc, dict):
        raise CatalogError(f"{what}: expected a JSON object")
    if doc.get("format") != CATALOG_FORMAT:
        raise CatalogError(f"{what}: format is {doc.get('format')!r}, expected {CATALOG_FORMAT!r}")
    if doc.get("version") not in READ_FORMAT_VERSIONS or type(doc.get("version")) is not int:
        raise CatalogError(f"{what}: catalog format version {doc.get('version')!r} is not supported "
                           f"(expected one of {', '.join(map(str, READ_FORMAT_VERSIONS))})")
    missing = [k for k in _TOP_KEYS if k not in doc]
    if missing:
        raise CatalogError(f"{what}: missing key(s) {', '.join(missing)}")
    if region_id is not None and doc["region_id"] != region_id:
        raise CatalogError(f"{what}: region_id is {doc['region_id']!r}, expected {region_id}")
    if number is not None and doc["catalog_version"] != number:
        raise CatalogError(f"{what}: catalog_version is {doc['catalog_version']!r} but the file name says {number}")
    ssts, arts = doc["ssts"], doc["artifacts"]
    from .catalog_parse import Records  # (msgspec's module, imported by the first parse)

    if isinstance(ssts, Records) and isinstance(arts, Records):  # versions 2 and 3, decoded: typed columns
        _check_file_ids(ssts.column("file_id"), what)
        return doc
    if doc["version"] != 1 and isinstance(ssts, dict) and isinstance(arts, dict):
        return doc  # columns on the reference path: their rules are the compiled parse's
    if not isinstance(ssts, list) or not isinstance(arts, list):  # (in memory, any version has lists)
        raise CatalogError(f"{what}: ssts and artifacts must be arrays" if doc["version"] == 1 else
                           f"{what}: in format version {doc['version']}, ssts and artifacts must be objects "
                           f"(of columns)")
    try:  # all at once (C loops); whatever fails is found again below, one by one
        collections.deque(map(_SST_FIELDS, ssts), maxlen=0)  # JSON: only a dict has keys
    except (KeyError, TypeError):
        for i, s in enumerate(ssts):
            if not isinstance(s, dict) or not all(k in s for k in ("file_id", "path", "size", "rows", "schema")):
                raise CatalogError(f"{what}: ssts[{i}] must have file_id, path, size, rows and schema")
    _check_file_ids(list(map(_FILE_ID_OF, ssts)), what)
    return doc


def _check_file_ids(ids, what: str) -> None:
    """Every SST's file_id is a FileId, and no SST is listed twice (``ids``: a list, or a
    packed column: then checked on its text, without a str per SST)."""
    text = getattr(ids, "text", None)
    if text is not None and ids.fixed_width(FILE_ID_CHARS):  # (a packed column of FileId-long values)
        if file_ids_text_ok(text, len(ids)) and file_ids_distinct(text, len(ids)):
            return
    if text is not None:  # found one by one below
        ids = ids.tolist()
    if all_file_ids(ids) and len(set(ids)) == len(ids):  # all at once (numpy); else found one by one
        return
    seen = set()
    for i, f in enumerate(ids):
        if not is_file_id(f):
            raise CatalogError(f"{what}: ssts[{i}].file_id {f!r} is not a FileId")
        if f in seen:
            raise CatalogError(f"{what}: SST {f} is listed twice")
        seen.add(f)


def parse_version(data: bytes, what: str, region_id: int | None = None, number: int | None = None) -> dict:
    """A catalog version's bytes as its checked document (strict JSON: UTF-8, no
    duplicate keys, no NaN; exactly the catalog's keys and value types;
    :func:`check_doc`), parsed in compiled code (:mod:`.catalog_parse`).  Format
    version 2 (the records as columns) gives ``ssts`` and ``artifacts`` as record
    sequences (:class:`~.catalog_parse.Records`); version 1, lists of dicts."""
    from . import catalog_parse as _parse  # msgspec, imported on the first catalog read

    try:
        fv = _parse.format_version(data)
        if fv == 3:
            from .catalog_packed import decode_v3

            doc, clean = decode_v3(data)
        elif fv == 2:
            doc, clean = _parse.decode_v2(data)
        else:
            doc, clean = _parse.decode(data)
    except _parse.ParseRefused as e:
        # the reference path first: the established message for what it knows
        check_doc(load_strict_json(data, what, CatalogError), what, region_id, number)
        raise CatalogError(f"{what}: not a catalog version: {e}") from None
    if not clean:  # a duplicate key (or the count could not tell): the json hook names it
        load_strict_json(data, what, CatalogError)
    return check_doc(doc, what, region_id, number)


def encode_version(doc: dict) -> bytes:
    """A checked catalog document (records as lists of dicts) as the bytes of a
    version in the format new commits write (:data:`CATALOG_FORMAT_VERSION`: the
    records as packed columns, :func:`~.catalog_packed.encode_v3`), or in format 2
    (:func:`~.catalog_parse.encode_v2`) when it holds a value format 3 does not."""
    from . import catalog_packed as _packed
    from . import catalog_parse as _parse

    doc = dict(doc, version=CATALOG_FORMAT_VERSION)
    try:
        try:
            return _packed.encode_v3(doc)
        except _parse.EncodeRefused:  # a value format 3 does not hold (see catalog_packed): format 2
            return _parse.encode_v2(doc)
    except (KeyError, TypeError, ValueError, AttributeError, _parse.EncodeRefused) as e:
        raise CatalogError(f"catalog version {doc.get('catalog_version')}: cannot be written: "
                           f"{type(e).__name__}: {e}") from None


def copy_doc(doc: dict) -> dict:
    """A deep copy of a catalog document made of builtins only (lists of fresh record
    dicts): what a commit's ``mutate`` may change."""
    from . import catalog_parse as _parse

    return json.loads(json.dumps(doc, default=_parse.fresh_list))


# --- versions, parsed once per process ---------------------------------------------------


class CatalogVersion:
    """One parsed catalog version and what readers derive from it, shared by every
    :class:`~gtsamples.region.Region` of the process at that version.  ``doc`` is
    never modified (commits work on a copy); ``memo`` holds values derived from it
    (see :meth:`derived`)."""

    __slots__ = ("number", "doc", "memo", "size")

    def __init__(self, number: int, doc: dict, size: int = 0):
        self.number = number
        self.doc = doc
        self.size = size
        self.memo: dict = {}

    def derived(self, key, make):
        """``memo[key]``, made by ``make()`` on first use.  No lock (none to inherit
        held in a forked child): threads racing on a first use may each make it, and
        all get the one ``dict.setdefault`` kept (``make`` is a function of the
        immutable document)."""
        try:
            return self.memo[key]
        except KeyError:
            return self.memo.setdefault(key, make())


#: Parsed versions kept process-wide, least recently used evicted beyond these (the bytes:
#: the versions' JSON sizes times :data:`PARSED_BYTES_PER_JSON_BYTE`, their Python objects).
MAX_CACHED_VERSIONS = 64
MAX_CACHED_VERSION_BYTES = 512 * 1024 * 1024
PARSED_BYTES_PER_JSON_BYTE = 3  # measured: ~2.9 for a 1,000-SST version (format 1)
#: Format 2 (columns): 3.7 per byte parsed, 10.5 once every record is made (10,000 SSTs, tracemalloc).
PARSED_BYTES_PER_COLUMNS_BYTE = 11
_versions: "collections.OrderedDict[tuple, CatalogVersion]" = collections.OrderedDict()
_versions_bytes = 0
_versions_lock = ForkSafeLock()
#: The newest version number each catalog was last seen at in this process (a hint,
#: checked on every use: :meth:`Catalog.latest`); keyed like the versions, less the number.
_latest_seen: dict = {}
#: Object stores: each region's versions -> their identities in its last listing (:meth:`Catalog._names`).
_listed_identities: dict = {}


def clear() -> None:
    """Forget every cached catalog version (the process-wide cache; the fork hook
    calls this in a child).  Versions are immutable, so this is never needed for
    correctness: a region deleted and created again at the same root numbers its
    versions from 1 again, and the cache tells them apart by the object's identity (a
    local file's inode, size and mtime; an object's ETag or modification time and size
    in the listing every open makes).  Only an object store whose listing reports
    neither needs this call in a process that read the old region."""
    global _versions_bytes
    with _versions_lock:
        _versions.clear()
        _versions_bytes = 0
        _latest_seen.clear()
        _listed_identities.clear()


def cached_versions() -> int:
    """How many parsed versions the process keeps now."""
    return len(_versions)


def _cache_get(key) -> CatalogVersion | None:
    with _versions_lock:
        v = _versions.get(key)
        if v is not None:
            _versions.move_to_end(key)
        return v


def _cache_put(key, v: CatalogVersion) -> CatalogVersion:
    global _versions_bytes
    with _versions_lock:
        have = _versions.get(key)
        if have is not None:  # another thread parsed it first: keep one
            return have
        _versions[key] = v
        _versions_bytes += v.size
        while len(_versions) > 1 and (len(_versions) > MAX_CACHED_VERSIONS
                                      or _versions_bytes > MAX_CACHED_VERSION_BYTES):
            _, old = _versions.popitem(last=False)
            _versions_bytes -= old.size
        return v


def _cache_drop(key) -> None:
    global _versions_bytes
    with _versions_lock:
        v = _versions.pop(key, None)
        if v is not None:
            _versions_bytes -= v.size


@at_fork_child
def _forget_versions_in_child() -> None:
    """A forked child starts with an empty cache (its lock is renewed by :mod:`~gtsamples.runtime`)."""
    global _versions_bytes
    _versions.clear()
    _versions_bytes = 0
    _latest_seen.clear()
    _listed_identities.clear()


# --- the catalog store -------------------------------------------------------------------


class Catalog:
    """The versioned catalog of one region in a :class:`~gtsamples.storage.Store`."""

    def __init__(self, store, region_id: int):
        self.store = store
        self.region_id = int(region_id)
        self.prefix = catalog_prefix(self.region_id)

    @property
    def dir_path(self) -> str:
        return self.store.path(self.prefix.rstrip("/"))

    # listing ---------------------------------------------------------------------------
    def _names(self) -> list[str]:
        """The names in the catalog directory (one listing).  On a store without a cheap
        :meth:`~gtsamples.storage.Store.identity` (object stores), the identities the
        same listing gives the versions are kept for :meth:`_identity`."""
        try:
            if self.store.has_cheap_identity:
                return self.store.names(self.prefix)
            listed = self.store.names_with_identity(self.prefix)
        except StorageError:
            raise
        except OSError as e:
            raise CatalogError(f"{self.dir_path}: cannot list the catalog: {e}") from None
        ids = {}
        for name, ident in listed:
            m = _VERSION_RE.match(name)
            if m and ident:
                ids[int(m.group(1))] = ident
        _listed_identities[self._region_key()] = ids  # (one assignment: atomic for readers)
        return [name for name, _ in listed]

    def list_versions(self) -> list[int]:
        """All committed version numbers, ascending (one directory listing)."""
        out = []
        for n in self._names():
            m = _VERSION_RE.match(n)
            if m:
                out.append(int(m.group(1)))
        return sorted(out)

    def latest_version(self) -> int:
        """The newest committed version number, 0 when none (one directory listing).
        Version names have a fixed width, so the newest is the greatest name."""
        names = self._names()
        names.sort(reverse=True)
        for n in names:  # usually the first one
            m = _VERSION_RE.match(n)
            if m:
                return int(m.group(1))
        return 0

    def version_key(self, n: int) -> str:
        return self.prefix + version_name(n)

    def _region_key(self) -> tuple:
        opts = tuple(sorted((k, repr(v)) for k, v in self.store.storage_options.items()))
        return (self.store.root, opts, self.region_id)

    def _cache_key(self, n: int, identity: tuple | None = None) -> tuple:
        return (*self._region_key(), int(n), self._identity(n) if identity is None else identity)

    def _identity(self, n: int) -> tuple:
        """What tells this version's object from another of the same name: a region
        deleted and created again at the same root numbers its versions from 1 again, so
        the name alone could return another region's parsed version.  Local stores: the
        file's inode, size and mtime (one ``stat``, ~1 us).  Object stores: the ETag (or
        modification time) and size of the process's last listing of the catalog (every
        open lists there), () for a version that listing did not show.  See
        :meth:`~gtsamples.storage.Store.identity`."""
        if self.store.has_cheap_identity:
            return self.store.identity(self.version_key(n))
        return _listed_identities.get(self._region_key(), {}).get(int(n), ())

    def version(self, n: int, stats=None) -> CatalogVersion:
        """Version ``n`` parsed, from the process-wide cache (read and parsed on a miss)."""
        key = self._cache_key(n)
        v = _cache_get(key)
        if v is not None:
            return v
        data, doc = self._read_and_parse(n, stats)
        per_byte = PARSED_BYTES_PER_COLUMNS_BYTE if doc["version"] == 2 else PARSED_BYTES_PER_JSON_BYTE
        return _cache_put(key, CatalogVersion(int(n), doc, len(data) * per_byte))

    def _read_and_parse(self, n: int, stats=None) -> tuple[bytes, dict]:
        key = self.version_key(n)
        what = self.store.path(key)
        try:
            data = self.store.read_whole(key, None, MAX_CATALOG_BYTES, stats)
        except StorageError:
            raise  # the store failed, the catalog is not known to be broken
        except SamplesError as e:
            raise CatalogError(f"{what}: cannot read catalog version {n}: {e}") from None
        return data, parse_version(data, what, self.region_id, n)

    def read_version(self, n: int, stats=None) -> dict:
        """Version ``n``'s document (shared, never to be modified: copy it to change it)."""
        return self.version(n, stats).doc

    def read_latest(self, stats=None) -> tuple[int, dict | None]:
        """(version, document); (0, None) when the region has no catalog."""
        n, v = self.latest(stats)
        return n, None if v is None else v.doc

    def latest(self, stats=None) -> tuple[int, CatalogVersion | None]:
        """(version, :class:`CatalogVersion`); (0, None) when the region has no catalog.
        The version seen last in this process when it is provably still the newest
        (see the module's docstring), else the newest of a listing."""
        region_key = self._region_key()
        seen = _latest_seen.get(region_key)
        if seen is not None and self.store.has_cheap_identity:  # (object stores: every open lists)
            identity = self._identity(seen)
            if identity and not self.store.exists(self.version_key(seen + 1)):
                v = _cache_get(self._cache_key(seen, identity))
                if v is not None:
                    return seen, v
        for _ in range(8):
            n = self.latest_version()
            if n == 0:
                return 0, None
            try:
                v = self.version(n, stats)
                _latest_seen[region_key] = n
                return n, v
            except CatalogError:
                # a version can only disappear through an explicit expiry; re-list once more
                if n not in self.list_versions():
                    continue
                raise
        raise CatalogError(f"{self.dir_path}: the catalog kept changing while being read")

    # committing ------------------------------------------------------------------------
    def _write_if_absent(self, n: int, data: bytes) -> bool:
        """Create version ``n`` with ``data`` unless it exists. True when we created it.

        ``data`` is unique (a nonce), so trying it again after a failure whose
        outcome is unknown cannot duplicate the commit: if the first try landed,
        the version holds these bytes and counts as ours."""
        key = self.version_key(n)
        for attempt in range(PUT_ATTEMPTS):
            try:
                return self.store.put_if_absent(key, data)
            except StorageError:
                if attempt == PUT_ATTEMPTS - 1:
                    raise
                time.sleep(0.1 * 2 ** attempt * (1 + random.random()))
        raise AssertionError("unreachable")  # pragma: no cover

    def commit(self, mutate: Callable[[dict | None, int], dict], operation: str, retries: int = 64) -> tuple[int, dict]:
        """Apply ``mutate(current_doc, current_version)`` and write it as the next version.

        ``mutate`` is re-applied on top of the winner after each lost race, so it
        must derive its result from the document it is given.  Returns
        (new version, new document).
        """
        delay = 0.001
        for _ in range(retries):
            n, cur = self.read_latest()
            doc = mutate(None if cur is None else copy_doc(cur), n)
            doc = dict(doc)
            doc["format"] = CATALOG_FORMAT
            doc["version"] = CATALOG_FORMAT_VERSION
            doc["region_id"] = self.region_id
            doc["catalog_version"] = n + 1
            doc["created_at"] = now_iso()
            doc["operation"] = operation
            doc["nonce"] = uuid.uuid4().hex
            check_doc(doc, f"new catalog version {n + 1}", self.region_id, n + 1)
            data = encode_version(doc)
            if self._write_if_absent(n + 1, data):
                return n + 1, doc
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 0.1)
        raise CommitConflict(f"{self.dir_path}: could not commit {operation!r} after {retries} attempts")

    def delete_version(self, n: int) -> None:
        key = self._cache_key(n)  # before the file goes: its identity is part of the key
        self.store.remove(self.version_key(n))
        _cache_drop(key)
