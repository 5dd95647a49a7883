"""Regions: source SSTs plus the artifacts covering them (README "Regions: SSTs plus artifacts").

A region is a set of source SSTs (Parquet files with the samples logical schema)
and a catalog of artifacts, each derived from one SST, like Lance index
segments over fragments.  The SSTs stay authoritative: whatever artifacts
exist (or can be used), :meth:`Region.read` returns the same rows.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Iterable

import numpy as np
import pyarrow as pa

from .. import cache as _cache
from ..argcheck import is_integer
from ..artifact import Artifact, columns_arg, open_parsed_entry
from ..backends import get_backend
from ..errors import CatalogMismatchError, SamplesError
from ..format import constants as C
from ..format.manifest import PART_DTYPE, CatalogEntry, parse_catalog_entry
from ..frames import batch_reader
from ..plan.split import DEFAULT_MAX_BYTES, check_max_bytes
from ..plan import Selection
from ..plan.selection import bound_columns
from ..plan.warm import WarmIndex
from ..storage import ReadStats, Store, root_arg
from . import sst as _sst
from .args import file_ids_arg, positive_int
from .build import build_entries, build_one, check_build_args
from .catalog import Catalog, CatalogError, CatalogVersion, RegionSchema, empty_doc, now_iso
from .context import LOCAL_WORKERS, REMOTE_WORKERS, ReadContext  # noqa: F401 - the defaults read() names
from .execute import execute_plan
from .plan import PlannedSource, RegionPlan, SstFile, needed_columns
from .stream import iter_plan

__all__ = ["PlannedSource", "Region", "RegionPlan", "SstFile", "UnusableArtifactError", "open_region",
           "create_region"]


class UnusableArtifactError(SamplesError):
    """An artifact that is valid but cannot serve this query (e.g. lacks a field)."""


def _as_schema(schema) -> RegionSchema | None:
    if schema is None or isinstance(schema, RegionSchema):
        return schema
    if isinstance(schema, pa.Schema):
        return RegionSchema.from_arrow(schema, what="schema")
    if isinstance(schema, dict):
        return RegionSchema.from_json_obj(schema, "schema")
    raise TypeError(f"schema must be a pyarrow.Schema, a RegionSchema or a dict, not {type(schema).__name__}")


def _opts_key(opts: dict | None) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in (opts or {}).items()))


def _artifact_key(root: str, opts: tuple, parsed: CatalogEntry) -> tuple:
    """The page cache key of a catalog entry's opened artifact, in the store at ``root``
    opened with the options ``opts`` (:func:`_opts_key`)."""
    return ("gtsamples.region.artifact", root, opts, parsed.prefix)


def _source_artifact_key(root: str, opts: tuple, src: PlannedSource) -> tuple:
    """:func:`_artifact_key` of a planned source's artifact (a warm index's)."""
    return _artifact_key(root, opts, src.artifact)


class Region:
    """One version of a region's catalog, with reads, builds and commits.

    ``Region(root, region_id, storage_options, cache)`` opens the latest version, as
    :func:`open_region` does (:class:`CatalogError` when the region has no catalog);
    :func:`create_region` starts a new region and :meth:`checkout` opens an older version.

    Mutations (:meth:`add_sst`, :meth:`replace_ssts`, :meth:`build`) commit on top
    of the *latest* catalog version and then move this object to the new version.
    """

    def __init__(self, root, region_id: int, storage_options: dict | None = None,
                 cache: _cache.PageCache | None = None, *, _version: int | None = None, _doc=None):
        self.root = root_arg("root", root)
        if not is_integer(region_id):  # (int() read 5.7 and "5" as region 5, True as region 1)
            raise TypeError(f"region_id must be an integer (a u64), not {type(region_id).__name__} {region_id!r}")
        self.region_id = int(region_id)
        if not 0 <= self.region_id <= C.U64_MAX:
            raise ValueError(f"region_id {region_id} is not a u64")
        self._cache = _cache.cache_arg(cache)
        self.storage_options = dict(storage_options or {})
        self._opts = _opts_key(self.storage_options)
        self.store = Store(self.root, self.storage_options or None)
        self.catalog = Catalog(self.store, self.region_id)
        self.last_stats = ReadStats()
        if _version is None and _doc is None:  # the latest version (no empty document first)
            self.version, self._state = -1, None
            self.refresh()
        else:  # a given version (checkout, a Dask worker's schema-only document), or 0: empty (create_region)
            self._set(_version or 0, _doc)

    # -- catalog state ----------------------------------------------------------------------
    def _set(self, version: int, doc: "dict | CatalogVersion | None") -> None:
        """Move to ``version``: its :class:`CatalogVersion` (shared by every Region of the
        process at that version, with the memos below) or a document of our own."""
        if not isinstance(doc, CatalogVersion):
            doc = CatalogVersion(version, doc if doc is not None else empty_doc(self.region_id, None))
        state = self._state = doc
        self.version = version
        self._doc = state.doc
        # the memos live as long as the version, and are shared by its readers (all immutable)
        self._parsed: dict[int, tuple[dict, CatalogEntry]] = state.derived("parsed", dict)  # id(entry) -> (entry, parsed)
        self._usable: dict[tuple, dict] = state.derived("usable", dict)  # (artifact, id(SST record), columns) -> record
        s = self._doc.get("schema")
        self.schema: RegionSchema | None = None if s is None else state.derived(
            "schema", lambda: RegionSchema.from_json_obj(s, f"{self.catalog.dir_path} v{version}"))

    @property
    def _entry_ids(self) -> set[int]:
        """The ids of this version's entry dicts (catalog columns: of those made so far)."""
        made = getattr(self._doc["artifacts"], "ids", None)
        if made is not None:
            return made
        return self._state.derived("entry_ids", lambda: {id(e) for e in self._doc["artifacts"]})

    @property
    def cache(self) -> _cache.PageCache:
        return self._cache if self._cache is not None else _cache.default_cache()

    @property
    def ssts(self) -> list[SstFile]:
        """The source SSTs, in region order."""
        return [SstFile.from_record(s) for s in self._doc["ssts"]]

    @property
    def artifacts(self) -> list:
        """The catalog's artifact entries (``CatalogEntry``; the raw dict when it does not parse)."""
        return [self._entry_record(a) for a in self._doc["artifacts"]]

    @staticmethod
    def _entry_record(a: dict):
        """A catalog document's artifact entry as a typed ``CatalogEntry`` (a
        read-only mapping too), or a copy of the raw dict when it does not parse."""
        try:
            e = parse_catalog_entry(a)
        except SamplesError:
            return dict(a)
        return dataclasses.replace(e, created_at=a.get("created_at"))

    def coverage(self) -> dict:
        """file_id -> the artifact entry covering it (a ``CatalogEntry``, the raw dict
        when it does not parse; None when uncovered), in region order."""
        return {f: None if a is None else self._entry_record(a) for f, a in self._coverage_docs().items()}

    def _coverage_docs(self) -> dict[str, dict | None]:
        """:meth:`coverage` as the catalog document's own entry dicts (memo keys; shared:
        not to be modified)."""
        from .catalog_parse import Coverage, SstRecords  # (msgspec's module: imported with the first catalog read)

        def make():
            if isinstance(self._doc["ssts"], SstRecords):  # catalog columns: no record made until used
                return Coverage(self._doc["ssts"], self._doc["artifacts"])
            by = {a.get("file_id"): a for a in self._doc["artifacts"] if isinstance(a, dict)}
            return {s["file_id"]: by.get(s["file_id"]) for s in self._doc["ssts"]}

        return self._state.derived("coverage", make)

    @property
    def num_rows(self) -> int:
        return sum(int(s["rows"]) for s in self._doc["ssts"])

    def arrow_schema(self, names=None) -> pa.Schema:
        if self.schema is None:
            return pa.schema([])
        return self.schema.arrow_schema(names)

    def versions(self) -> list[int]:
        return self.catalog.list_versions()

    def refresh(self) -> "Region":
        """Move to the latest catalog version."""
        n, v = self.catalog.latest()
        if v is None:
            raise CatalogError(f"{self.catalog.dir_path}: region {self.region_id} has no catalog")
        if n != self.version or v is not self._state:
            self._set(n, v)
        return self

    def checkout(self, version: int) -> "Region":
        """A Region object at an earlier (or any existing) catalog version."""
        version = positive_int("version", version, "a catalog version number")
        v = self.catalog.version(version)
        return Region(self.root, self.region_id, self.storage_options, self._cache, _version=version, _doc=v)

    def __repr__(self) -> str:
        cov = sum(1 for v in self._coverage_docs().values() if v is not None)
        return (f"<gtsamples.Region {self.store.path(str(self.region_id))} v{self.version} "
                f"ssts={len(self._doc['ssts'])} covered={cov} rows={self.num_rows}>")

    def info(self) -> dict:
        cov = self._coverage_docs()
        return {
            "root": self.root,
            "region_id": self.region_id,
            "catalog_version": self.version,
            "created_at": self._doc.get("created_at"),
            "operation": self._doc.get("operation"),
            "schema": None if self.schema is None else self.schema.to_json_obj(),
            "ssts": len(self._doc["ssts"]),
            "rows": self.num_rows,
            "covered_ssts": sum(1 for v in cov.values() if v is not None),
            "covered_rows": sum(int(s["rows"]) for s in self._doc["ssts"] if cov[s["file_id"]] is not None),
            "artifact_bytes": sum(int(a.get("file_size", 0)) for a in self._doc["artifacts"]),
            "sst_bytes": sum(int(s["size"]) for s in self._doc["ssts"]),
            "files": [
                {"file_id": s["file_id"], "path": s["path"], "rows": s["rows"], "size": s["size"],
                 "generation": None if cov[s["file_id"]] is None else cov[s["file_id"]].get("generation")}
                for s in self._doc["ssts"]
            ],
        }

    # -- mutations ------------------------------------------------------------------------------
    def _prepare_sst(self, item, file_id: str | None, row_group_size: int) -> tuple[dict, RegionSchema]:
        if isinstance(item, (pa.Table, pa.RecordBatch)):
            table = item if isinstance(item, pa.Table) else pa.Table.from_batches([item])
            schema = RegionSchema.from_arrow(table.schema, like=self.schema, what="table")
            if self.schema is not None and schema != self.schema:
                raise SamplesError(f"table schema {schema.to_json_obj()} differs from the region schema "
                                   f"{self.schema.to_json_obj()}")
            return _sst.write_sst(table, self.store, self.region_id, schema, file_id, row_group_size), schema
        if isinstance(item, (str, os.PathLike)):
            return _sst.describe_sst(os.fspath(item), self.store, self.schema, file_id)
        raise TypeError(f"an SST is a path / URL to a Parquet file or a pyarrow Table, not {type(item).__name__}")

    def add_sst(self, path_or_table, file_id: str | None = None, *,
                row_group_size: int = _sst.DEFAULT_ROW_GROUP_SIZE) -> SstFile:
        """Register a Parquet SST (schema and row order checked), or write a Table as one; one commit."""
        return self.replace_ssts(remove=(), add=[path_or_table], file_ids=[file_id], row_group_size=row_group_size)[0]

    def replace_ssts(self, remove: Iterable[str] = (), add: Iterable = (), *, file_ids=None,
                     row_group_size: int = _sst.DEFAULT_ROW_GROUP_SIZE) -> list[SstFile]:
        """Remove SSTs (and their artifacts' coverage) and add new ones, in ONE catalog commit.

        New SSTs take the place of the first removed one (else they are appended);
        they start uncovered.  Returns the added SSTs.
        """
        remove = [str(r) for r in remove]
        add = list(add)
        file_ids = list(file_ids) if file_ids is not None else [None] * len(add)
        if len(file_ids) != len(add):
            raise ValueError("file_ids must have one entry per added SST")
        recs, schema = [], self.schema
        for item, fid in zip(add, file_ids):
            rec, sch = self._prepare_sst(item, fid, row_group_size)
            if schema is not None and sch != schema:
                raise SamplesError(f"SST {rec['file_id']}: schema differs from the region's")
            schema = schema or sch
            recs.append(rec)
        new_ids = [r["file_id"] for r in recs]
        if len(set(new_ids)) != len(new_ids):
            raise SamplesError(f"an SST file_id is repeated among the added SSTs: {new_ids}")

        def mutate(doc, n):
            if doc is None:
                raise CatalogError(f"{self.catalog.dir_path}: region {self.region_id} has no catalog")
            if schema is not None:
                if doc["schema"] is None:
                    doc["schema"] = schema.to_json_obj()
                elif RegionSchema.from_json_obj(doc["schema"], "catalog") != schema:
                    raise SamplesError("the region schema changed concurrently; the new SSTs do not match it")
            ids = [s["file_id"] for s in doc["ssts"]]
            missing = [r for r in remove if r not in ids]
            if missing:
                raise CatalogError(f"cannot remove SST(s) {missing}: not in catalog version {n}")
            clash = [f for f in new_ids if f in ids and f not in remove]
            if clash:
                raise CatalogError(f"SST(s) {clash} are already in catalog version {n}")
            pos = min((ids.index(r) for r in remove), default=len(ids))
            gone = set(remove)
            before = [s for s in doc["ssts"][:pos] if s["file_id"] not in gone]
            after = [s for s in doc["ssts"][pos:] if s["file_id"] not in gone]
            doc["ssts"] = before + recs + after
            doc["artifacts"] = [a for a in doc["artifacts"] if a.get("file_id") not in gone]
            return doc

        op = "add_sst" if not remove else "replace_ssts"
        n, doc = self.catalog.commit(mutate, op)
        self._set(n, doc)
        return [SstFile.from_record(r) for r in recs]

    def remove_artifacts(self, file_ids: Iterable[str]) -> int:
        """Withdraw the artifacts covering ``file_ids`` (one commit); their generations become garbage."""
        ids = set(file_ids_arg("file_ids", file_ids))

        def mutate(doc, n):
            doc["artifacts"] = [a for a in doc["artifacts"] if a.get("file_id") not in ids]
            return doc

        n, doc = self.catalog.commit(mutate, "remove_artifacts")
        self._set(n, doc)
        return n

    def publish(self, entries: Iterable) -> int:
        """Publish artifact entries in ONE catalog commit (replacing older entries of the same SSTs).

        Entries whose SST is no longer in the catalog (removed by a concurrent
        compaction) are dropped: their generations become garbage.
        """
        new = []
        for e in entries:
            d = parse_catalog_entry(e).to_dict()
            d["created_at"] = (e.get("created_at") if isinstance(e, dict) else getattr(e, "created_at", None)) or now_iso()
            if d["region_id"] != self.region_id:
                raise CatalogMismatchError(f"entry {d['file_id']}/{d['generation']} is for region {d['region_id']}, "
                                           f"not {self.region_id}")
            new.append(d)
        by_file = {d["file_id"]: d for d in new}

        def mutate(doc, n):
            order = [s["file_id"] for s in doc["ssts"]]
            keep = [a for a in doc["artifacts"] if a.get("file_id") not in by_file]
            keep += [by_file[f] for f in order if f in by_file]
            rank = {f: i for i, f in enumerate(order)}
            keep.sort(key=lambda a: rank.get(a.get("file_id"), len(rank)))
            doc["artifacts"] = [a for a in keep if a.get("file_id") in rank]
            return doc

        n, doc = self.catalog.commit(mutate, "build")
        self._set(n, doc)
        return n

    # -- artifacts ---------------------------------------------------------------------------
    def _parse_entry(self, entry: dict) -> CatalogEntry:
        """The catalog entry, parsed once per catalog version (the documents never change)."""
        hit = self._parsed.get(id(entry))
        if hit is not None and hit[0] is entry:
            return hit[1]
        parsed = parse_catalog_entry(entry)
        if id(entry) in self._entry_ids:  # this version's own entry: the memo keeps it alive, so its id is not reused
            self._parsed[id(entry)] = (entry, parsed)
        return parsed

    def _artifact_key(self, parsed: CatalogEntry) -> tuple:
        """The page cache key of a catalog entry's opened artifact."""
        return _artifact_key(self.store.root, self._opts, parsed)

    def _artifact(self, entry: dict, stats: ReadStats) -> Artifact:
        """Open (or take from the cache) the artifact of a catalog entry."""
        parsed = self._parse_entry(entry)
        key = self._artifact_key(parsed)

        def load():
            art = open_parsed_entry(self.store, parsed, cache=self._cache)
            o = art.open_stats
            stats.bytes_read += o.bytes_read
            stats.requests += o.requests
            stats.metadata_bytes += o.bytes_read
            msize = parsed.object_size(parsed.prefix + C.MANIFEST_NAME) or 0
            return art, int(msize) * 2 + 4096

        return self.cache.get_or_load(key, load, stats)

    def _check_usable(self, art: Artifact, rec: dict, need: tuple[str, ...]) -> None:
        key = (art, id(rec), need)
        if self._usable.get(key) is rec:  # passed for this version's record (all immutable)
            return
        self._check_usable_now(art, rec, need)
        if len(self._usable) < 65536:
            self._usable[key] = rec

    def _check_usable_now(self, art: Artifact, rec: dict, need: tuple[str, ...]) -> None:
        m, s = art.manifest, self.schema
        if m.region_id != self.region_id or m.source_file_id != rec["file_id"]:
            raise CatalogMismatchError(f"artifact {art.location}: covers region {m.region_id} SST {m.source_file_id}, "
                                       f"not region {self.region_id} SST {rec['file_id']}")
        ts = m.timestamp
        if (ts.name, ts.unit, ts.column_id) != (s.ts_name, s.ts_unit, s.ts_column_id):
            raise CatalogMismatchError(f"artifact {art.location}: timestamp column {ts.name!r} ({ts.unit}, id {ts.column_id}) differs "
                                       f"from the SST's {s.ts_name!r} ({s.ts_unit}, id {s.ts_column_id})")
        if m.num_rows != int(rec["rows"]):
            raise CatalogMismatchError(f"artifact {art.location}: holds {m.num_rows} rows, its SST has {rec['rows']}")
        have = {f.name: f.column_id for f in m.fields}
        want = dict(s.fields)
        lacking = [n for n in need if n in want and have.get(n) != want[n]]
        if lacking:
            raise UnusableArtifactError(f"artifact {art.location}: does not carry field(s) {', '.join(map(repr, lacking))} needed by the "
                            f"projection (the manifest is authoritative for the fields an artifact carries)")

    # -- reads ---------------------------------------------------------------------------------
    def _names(self, columns) -> tuple[str, ...]:
        all_names = self.schema.column_names
        columns = columns_arg(columns)  # (None, one name, or a nonempty list of them)
        if columns is None:
            return all_names
        if isinstance(columns, str):
            columns = [columns]
        for c in columns:
            if c not in all_names:
                raise ValueError(f"unknown column {c!r}; the region's columns are {', '.join(all_names)}")
        want = set(columns)
        return tuple(n for n in all_names if n in want)

    def _allowed(self, use_artifacts) -> set | None:
        if use_artifacts is True or use_artifacts is None:
            return None
        if use_artifacts is False:
            return set()
        return set(file_ids_arg("use_artifacts", use_artifacts))

    def plan(self, columns=None, series=None, tables=None, start=None, end=None, dedup: bool = False,
             use_artifacts=True) -> RegionPlan:
        """The query's :class:`~gtsamples.region.plan.RegionPlan` (no I/O): which
        SSTs are read from which artifact, which are scanned, which are pruned by
        their statistics, and the columns every source must give.  Arguments as
        for :meth:`read`; ``use_artifacts``: True, False or the file ids whose
        artifacts may serve."""
        sel = Selection.build(series, tables, start, end, self.schema.ts_unit if self.schema else "millisecond")
        names = self._names(columns) if self.schema is not None else ()
        need = needed_columns(self.schema, names, dedup) if self.schema is not None else ()
        allowed = self._allowed(use_artifacts)
        cov = self._coverage_docs()
        ssts = self._doc["ssts"]
        # each SST's planned source, made once per version (immutable): [covered, scanned, record, entry]
        memo = self._state.derived("sources", lambda: [None] * len(ssts))
        sources = []
        kept, pruned = self._selected_ssts(sel)
        for k in kept:
            m = memo[k]
            if m is None:
                rec = ssts[k]
                m = memo[k] = [None, None, rec, cov[rec["file_id"]]]
            rec, entry = m[2], m[3]
            use = entry is not None and (allowed is None or rec["file_id"] in allowed)
            src = m[0 if use else 1]
            if src is None:
                f = SstFile.from_record(rec) if m[1 - use] is None else m[1 - use].sst
                src = PlannedSource(k, f, self._entry_view(entry) if use else None, rec, entry if use else None)
                m[0 if use else 1] = src
            sources.append(src)
        return RegionPlan(sel, names, need, bool(dedup), tuple(sources), pruned, self.schema)

    #: Above this many SSTs a plan prunes them in one numba pass over their bounds (below,
    #: ~0.7 us each in Python, and a plan needs no numba: a process's first numba call costs
    #: ~0.4 s, which a plan-only caller or an uncovered region would otherwise pay); at any
    #: count above :data:`VECTOR_PRUNE_SSTS_WARM` once the process has run a selection
    #: kernel (a read has): 100 SSTs, 70 -> 21 us.
    VECTOR_PRUNE_SSTS = 256
    VECTOR_PRUNE_SSTS_WARM = 1

    def _selected_ssts(self, sel: Selection) -> tuple[list[int], tuple[str, ...]]:
        """(the indices of the SSTs that can hold selected rows, the file ids of the
        others), in region order (:func:`~gtsamples.region.sst.sst_selects`)."""
        ssts = self._doc["ssts"]
        n = len(ssts)
        if sel.is_empty:
            return [], tuple(s["file_id"] for s in ssts)
        vector = n > self.VECTOR_PRUNE_SSTS or (n > self.VECTOR_PRUNE_SSTS_WARM and sel.kernels_loaded())
        bounds = self._state.derived("sst_bounds", self._sst_bounds) if vector else None
        if bounds is None:
            keep = [_sst.sst_selects(rec, sel) for rec in ssts]
            return ([k for k in range(n) if keep[k]],
                    tuple(ssts[k]["file_id"] for k in range(n) if not keep[k]))
        ids, times, no_stats, has_stats, file_ids = bounds
        order, k = sel.keep_sources(ids, times, no_stats, has_stats)
        return order[:k].tolist(), tuple(file_ids[order[k:]].tolist())

    def _sst_bounds(self):
        """The SSTs' catalog statistics as bounds arrays (:func:`~gtsamples.plan.selection.
        bound_columns` of a part table's columns), built once per version: (identities,
        time bounds, no stats key, stats present, file ids); None when some value does not
        fit (then each SST is tested alone, as sst_selects does)."""
        ssts = self._doc["ssts"]
        n = len(ssts)
        a = np.zeros(n, PART_DTYPE)
        no_stats = np.zeros(n, bool)
        has = np.zeros(n, bool)
        from .catalog_parse import STATS_ABSENT, STATS_PRESENT, SstRecords

        try:
            if isinstance(ssts, SstRecords):  # catalog columns: no record made
                codes, cols = ssts.stats_columns()
                codes = np.array(codes, np.int8)
                no_stats[:], has[:] = codes == STATS_ABSENT, codes == STATS_PRESENT
                for name, col in cols.items():
                    a[name] = np.array(col, dtype=a.dtype[name]) if n else 0
                file_ids = np.empty(n, object)
                file_ids[:] = ssts.column("file_id")
                return (*bound_columns(a), no_stats, has, file_ids)
            rows = []
            for k, rec in enumerate(ssts):
                if "stats" not in rec:
                    no_stats[k] = True
                    rows.append((0, 0, 0, 0, 0, 0))
                    continue
                st = rec["stats"]
                if st is None:
                    rows.append((0, 0, 0, 0, 0, 0))
                    continue
                has[k] = True
                (ft, fs), (lt, ls) = st["first"], st["last"]
                rows.append((ft, fs, lt, ls, st["min_timestamp"], st["max_timestamp"]))
            cols = list(zip(*rows)) if rows else [()] * 6
            for name, col in zip(("first_table_id", "first_tsid", "last_table_id", "last_tsid", "min_timestamp",
                                  "max_timestamp"), cols):
                a[name] = np.array(col, dtype=a.dtype[name]) if col else 0
        except (TypeError, ValueError, OverflowError):
            return None
        file_ids = np.empty(n, object)
        file_ids[:] = [s["file_id"] for s in ssts]
        return (*bound_columns(a), no_stats, has, file_ids)

    def _entry_view(self, entry: dict):
        """The parsed catalog entry of a plan's source (the raw dict when it does not
        parse: opening the artifact then raises, and the SST is scanned)."""
        try:
            return self._parse_entry(entry)
        except SamplesError:
            return dict(entry)

    def usable_artifact(self, source: PlannedSource, need, stats: ReadStats | None = None,
                        opened: Artifact | None = None) -> Artifact:
        """The opened artifact serving a plan's ``source``, checked against its SST and
        the columns ``need`` (a plan's ``need``); raises the reason it cannot serve
        (:class:`UnusableArtifactError` when it lacks a needed field, else the
        artifact's own error).  ``opened``: the source's artifact as
        :meth:`cached_artifacts` found it (a cache hit, counted here)."""
        if source.entry is None:
            raise ValueError(f"SST {source.sst.file_id} is not covered in this plan")
        if opened is not None:
            art = opened
            if stats is not None:
                stats.cache_hits += 1
        else:
            art = self._artifact(source.entry, stats if stats is not None else ReadStats())
        self._check_usable(art, source.record, tuple(need))
        return art

    def cached_artifacts(self, sources) -> list:
        """The opened artifact of each covered planned source already in the page
        cache (None for the others: :meth:`usable_artifact` opens them), looked up
        in one call: a region query opens each of its many artifacts."""
        keys = []
        for src in sources:
            parsed = src.artifact
            keys.append(self._artifact_key(parsed) if isinstance(parsed, CatalogEntry) else None)
        got = self.cache.get_many([k for k in keys if k is not None], count_misses=False)
        it = iter(got)
        return [None if k is None else next(it) for k in keys]

    def read(self, columns=None, series=None, tables=None, start=None, end=None, device: str = "cpu",
             dedup: bool = False, strict: bool = False, **kw):
        """Rows of the selection across the region: a pyarrow.Table ("cpu") or cudf.DataFrame ("gpu").

        Covered SSTs are read from their artifacts, the others scanned (pushdown
        on ``__table_id``, ``__tsid`` and the timestamp); pieces are concatenated
        in region order (SST order in the catalog, then file order).  An artifact
        that cannot be used is skipped with :class:`gtsamples.ArtifactSkippedWarning`
        and its SST scanned (``strict=True`` raises instead).  ``dedup=True`` is
        the last-write-wins view, sorted by (table_id, tsid, timestamp).
        ``start``/``end`` bound the half-open ``[start, end)``: integers in the
        region's timestamp unit, or ISO-8601 strings and datetimes (numpy, pandas,
        ``datetime``; naive ones are UTC), see :func:`gtsamples.timebounds.to_unit`.
        Keyword-only extras: ``use_artifacts`` (True, False or file_ids allowed),
        ``max_workers`` (threads opening and navigating artifacts and scanning SSTs;
        default :data:`LOCAL_WORKERS` locally, :data:`REMOTE_WORKERS` remotely).
        """
        out, _ = self.read_with_stats(columns, series, tables, start, end, device, dedup, strict, **kw)
        return out

    def read_with_stats(self, columns=None, series=None, tables=None, start=None, end=None, device: str = "cpu",
                        dedup: bool = False, strict: bool = False, *, use_artifacts=True,
                        max_workers: int | None = None):
        """Like :meth:`read`, also returning the query's :class:`ReadStats`."""
        get_backend(device).require()  # an unknown or unusable device is refused before any planning
        return self.execute(self._query_plan(columns, series, tables, start, end, dedup, use_artifacts), device,
                            strict, max_workers=max_workers)

    def _query_plan(self, columns, series, tables, start, end, dedup, use_artifacts) -> RegionPlan:
        """:meth:`plan` for the readers; a region without a schema has nothing to plan
        (the arguments are not checked against a schema)."""
        if self.schema is None:
            return RegionPlan(Selection(), (), (), bool(dedup), (), ())
        return self.plan(columns, series, tables, start, end, dedup, use_artifacts)

    def iter_batches(self, columns=None, series=None, tables=None, start=None, end=None, *, dedup: bool = False,
                     max_bytes: int = DEFAULT_MAX_BYTES, device: str = "cpu", strict: bool = False,
                     use_artifacts=True):
        """The rows of :meth:`read` as a stream of batches in bounded memory.

        Without ``dedup`` the batches come in the order of :meth:`read` (region
        order: SST order in the catalog, then file order) and concatenate to
        exactly its result; each decodes at most about ``max_bytes`` (an
        artifact's block or an SST's Parquet batch is the unit).  With
        ``dedup=True`` the sources are merged (each is sorted by identity,
        timestamp and sequence descending), so the batches are the
        last-write-wins view sorted by (table_id, tsid, timestamp), equal to
        ``read(dedup=True)`` row for row, with every source buffering about
        ``max_bytes / sources`` at a time.  Unusable artifacts are skipped (their
        SSTs scanned) with :class:`gtsamples.ArtifactSkippedWarning` as by
        :meth:`read`, also when found after some of their batches; ``strict=True``
        raises instead.  An empty result is one empty batch.

        Yields ``pyarrow.RecordBatch`` on the CPU, ``cudf.DataFrame`` on the GPU
        (with ``dedup`` the sources are decoded and merged on the host and each
        merged batch is then moved to the GPU).  :attr:`last_stats` holds
        the statistics once the stream ends.
        """
        max_bytes = check_max_bytes(max_bytes)
        backend = get_backend(device)
        backend.require()  # before any I/O or device work
        plan = self._query_plan(columns, series, tables, start, end, dedup, use_artifacts)
        return self._stream(plan, max_bytes, backend, bool(strict))

    def _stream(self, plan: RegionPlan, max_bytes: int, backend, strict: bool):
        """:meth:`iter_batches`'s generator: :func:`~gtsamples.region.stream.iter_plan`,
        its statistics in :attr:`last_stats` once it ends."""
        stats = ReadStats()
        try:
            yield from iter_plan(self._context(), plan, max_bytes, backend, strict, stats)
        finally:
            self.last_stats = stats

    def _context(self) -> ReadContext:
        """What the executors need from this region (:mod:`gtsamples.region.context`)."""
        return ReadContext(self.store, self.schema, self.cache, self.region_id, self.usable_artifact,
                           self.cached_artifacts, self._warm_index)

    def _warm_index(self, need) -> WarmIndex:
        """This version's :class:`~gtsamples.plan.warm.WarmIndex` for the columns ``need``
        in the region's page cache (one per ``need``; a new one when the cache changed:
        :func:`gtsamples.cache.set_cache_size`)."""
        need = tuple(need)
        indices = self._state.derived("warm", dict)
        cache = self.cache
        w = indices.get(need)
        if w is None or w.cache is not cache:
            if len(indices) >= 64:  # (distinct column sets of one version: kept few)
                indices.clear()
            w = indices[need] = WarmIndex(cache, len(self._doc["ssts"]),
                                          functools.partial(_source_artifact_key, self.store.root, self._opts))
        return w

    def to_reader(self, columns=None, series=None, tables=None, start=None, end=None, *, dedup: bool = False,
                  max_bytes: int = DEFAULT_MAX_BYTES, strict: bool = False, use_artifacts=True):
        """The rows of :meth:`read` as a ``pyarrow.RecordBatchReader`` over
        :meth:`iter_batches` (CPU batches; arguments as for it): lazy, bounded in
        memory (about ``max_bytes`` decoded at a time) and read once.  DuckDB,
        Polars (``from_arrow``), pandas and DataFusion consume it through the Arrow
        C stream without copying; :func:`gtsamples.arrow_dataset` is the DuckDB
        source that also receives the query's filters."""
        columns = columns_arg(columns)  # (once: the batches and the schema both need it)
        batches = self.iter_batches(columns, series, tables, start, end, dedup=dedup, max_bytes=max_bytes,
                                    strict=strict, use_artifacts=use_artifacts)
        names = self._names(columns) if self.schema is not None else None
        return batch_reader(self.arrow_schema(names), batches)

    def execute(self, plan: RegionPlan, device: str = "cpu", strict: bool = False, *, max_workers: int | None = None):
        """Run a :meth:`plan` as one read: ``(table, ReadStats)`` as :meth:`read_with_stats`.
        The covered sources are opened, navigated and decoded in groups of artifacts
        (one batch each on the CPU, one read each on the GPU), the others scanned."""
        max_workers = positive_int("max_workers", max_workers, "threads", none_ok=True)
        out, stats = execute_plan(self._context(), plan, get_backend(device), strict, max_workers)
        self.last_stats = stats
        return out, stats

    # -- build and gc ------------------------------------------------------------------------------
    def build(self, missing_only: bool = True, workers: int | None = None, *, executor: str = "thread",
              row_limit: int = C.MAX_BLOCK_ROWS, verify: str | None = "inspect", file_ids=None,
              publish: bool = True, **write_kw) -> list[CatalogEntry]:
        """Build artifacts for SSTs (the uncovered ones by default), in parallel, then publish
        them in ONE catalog commit.  Each build writes a fresh generation directory; a
        crash before the commit leaves the catalog unchanged (``gc`` removes the leftovers).

        ``executor``: "thread" or "process".  ``verify``: "inspect" (headers, trailers,
        pages), "validate" (every chunk decoded) or None, run on each new artifact
        before publishing.  ``write_kw``: :func:`~gtsamples.write_artifact`'s options
        (``compression``, ``compression_level``, ``max_page_bytes``,
        ``max_leaves_per_root``).  ``workers``: a positive integer or None (one);
        ``file_ids``: an iterable of file ids (not one string).  Every argument is checked
        before any SST is read, even when there is nothing to build (TypeError or
        ValueError naming it).  Returns the published entries.
        """
        wanted = None if file_ids is None else set(file_ids_arg("file_ids", file_ids))
        workers = check_build_args(len(self.schema.fields) if self.schema is not None else 0, workers, executor,
                                   verify, row_limit, write_kw)
        if self.schema is None:
            return []
        cov = self._coverage_docs()
        targets = [s for s in self._doc["ssts"]
                   if (not missing_only or cov[s["file_id"]] is None)
                   and (wanted is None or s["file_id"] in wanted)]
        if not targets:
            return []
        args = [(self.root, self.storage_options, self.region_id, rec, self.schema.to_json_obj(), row_limit, verify,
                 write_kw) for rec in targets]
        if workers == 1 or len(args) == 1:
            entries = [build_one(*a) for a in args]
        else:
            entries = build_entries(args, workers, executor)
        if publish:
            self.publish(entries)
        return [parse_catalog_entry(e) for e in entries]


    def gc(self, grace_seconds: float = 3600.0, *, expire_versions: bool = False, dry_run: bool = False) -> dict:
        """Remove garbage older than ``grace_seconds``: generation directories that no catalog
        version references, SST files gtsamples wrote that no version lists, and temporary
        files of interrupted commits.  ``expire_versions=True`` first deletes catalog versions
        (never the latest) created more than ``grace_seconds`` ago, as Lance's cleanup does,
        so artifacts replaced or removed by then become garbage too.  ``grace_seconds``: a
        number >= 0 (``inf``: nothing is old enough); a negative one would take the
        generations concurrent builders are writing now, and NaN compares false with every
        time (``expire_versions`` then deleted every version but the latest).
        """
        from .gc import collect

        if not (is_integer(grace_seconds) or isinstance(grace_seconds, (float, np.floating))):
            raise TypeError(f"grace_seconds must be a number of seconds, not {type(grace_seconds).__name__} "
                            f"{grace_seconds!r}")
        if not grace_seconds >= 0:  # (NaN too)
            raise ValueError(f"grace_seconds must be >= 0 (seconds; inf keeps everything), not {grace_seconds!r}")
        out = collect(self, float(grace_seconds), expire_versions, dry_run)
        if not dry_run:
            try:
                self.refresh()
            except CatalogError:  # pragma: no cover
                pass
        return out


# --- opening and creating ---------------------------------------------------------------------


def open_region(root, region_id: int, storage_options: dict | None = None, *, version: int | None = None,
                cache: _cache.PageCache | None = None) -> Region:
    """Open a region: list its catalog once and read the newest version (or ``version``)."""
    if version is None:
        return Region(root, region_id, storage_options, cache)
    version = positive_int("version", version, "a catalog version number")
    r = Region(root, region_id, storage_options, cache, _version=0)
    r._set(version, r.catalog.version(version))
    return r


def create_region(root, region_id: int, storage_options: dict | None = None, *, schema=None,
                  exist_ok: bool = False, cache: _cache.PageCache | None = None) -> Region:
    """Start an empty region (catalog version 1).  ``schema``: optional pyarrow.Schema of its SSTs."""
    r = Region(root, region_id, storage_options, cache, _version=0)
    sch = _as_schema(schema)

    def mutate(doc, n):
        if doc is not None:
            raise FileExistsError(f"{r.catalog.dir_path}: region {region_id} already exists (version {n})")
        return empty_doc(r.region_id, sch)

    try:
        n, doc = r.catalog.commit(mutate, "create")
    except FileExistsError:
        if not exist_ok:
            raise
        return r.refresh()
    r._set(n, doc)
    return r
