"""Region reads as Dask partitions: one per artifact part or uncovered SST.

``to_dask`` plans on the client (the catalog and the artifacts' manifests,
no chunk I/O) and returns a dask DataFrame whose partitions each read one
artifact part (or scan one SST) with the same filters and projection as
:meth:`Region.read`.  Partitions are in region order, so without ``dedup``
``ddf.compute()`` equals ``region.read(...)`` row for row (pandas frames;
float fields use ``pd.ArrowDtype(pa.float64())`` so nulls stay distinct from
NaN and values keep their bits).

``dedup=True`` is exact across partitions: every partition carries its region
order (SST ordinal, part, row); the frame is shuffled on ``(__table_id,
__tsid)`` so that all rows of one identity meet in one partition, where the
last-write-wins rule runs.  Each output partition is sorted by (table_id,
tsid, timestamp); the order of partitions is the shuffle's.

On the GPU (``device="gpu"``) partitions are cudf DataFrames (dask-cudf).
A partition whose artifact turns out to be unusable on the worker (corruption
found while reading) scans the rows of its SST that the part covers instead,
with an :class:`~gtsamples.ArtifactSkippedWarning` (raised with ``strict``).
"""

from __future__ import annotations

import functools
import json
import os

import numpy as np
import pyarrow as pa

from ..artifact import open_artifact
from ..backends import get_backend
from ..format.manifest import parse_catalog_entry
from ..errors import SamplesError, warn_skipped
from ..plan import Selection
from ..storage import ReadStats, Store
from . import sst as _sst
from .args import positive_int
from .catalog import RegionSchema
from .dedup import dedup_frame
from .plan import PlannedSource, SstFile, needed_columns
from .region import Region, UnusableArtifactError

ORDER_COLUMNS = ("__gts_sst", "__gts_part", "__gts_row")


# --- partition specs and the worker side -----------------------------------------------------


@functools.lru_cache(maxsize=64)
def _worker_region(root: str, opts_json: str, region_id: int, schema_json: str) -> Region:
    doc = {"schema": json.loads(schema_json), "ssts": [], "artifacts": []}
    return Region(root, region_id, json.loads(opts_json) or None, _doc=doc)


def _finish(table: pa.Table, spec: dict, q: dict):
    """Add region-order columns (dedup) and convert to the partition type."""
    if q["dedup"]:
        n = table.num_rows
        table = table.append_column("__gts_sst", pa.array(np.full(n, spec["order"][0], np.int64)))
        table = table.append_column("__gts_part", pa.array(np.full(n, spec["order"][1], np.int64)))
        table = table.append_column("__gts_row", pa.array(np.arange(n, dtype=np.int64)))
    return get_backend(q["backend"]).dataframe(table)


def _read_partition(spec: dict, q: dict):
    """Worker side: one artifact part or one SST (or the SST rows a part covers)."""
    sel = Selection(q["series"], q["tables"], q["start"], q["end"])
    need = tuple(q["need"])
    stats = ReadStats()
    schema = RegionSchema.from_json_obj(json.loads(q["schema"]), "schema")
    if spec["mode"] == "region":
        region = _worker_region(spec["root"], spec["opts"], spec["region_id"], q["schema"])
        store = region.store
        cache = region.cache
    else:
        region = None
        store = Store(spec["root"], json.loads(spec["opts"]) or None)
        cache = None
    if spec["kind"] == "part":
        try:
            if region is not None:
                src = PlannedSource(spec["order"][0], SstFile.from_record(spec["rec"]),
                                    parse_catalog_entry(spec["entry"]), spec["rec"], spec["entry"])
                art = region.usable_artifact(src, need, stats)
            else:
                art = open_artifact(spec["root"], storage_options=json.loads(spec["opts"]) or None)
            t = art.read(columns=need, series=sel.series, tables=sel.tables, start=sel.start, end=sel.end,
                         parts=[spec["part"]])
            t = pa.Table.from_arrays([t.column(n) for n in need], schema=schema.arrow_schema(need))
            return _finish(t, spec, q)
        except SamplesError as e:
            if q["strict"] or spec["rec"] is None:
                raise
            warn_skipped(f"artifact part {spec['part']} of {spec['entry'].get('generation')} covering SST "
                         f"{spec['rec']['file_id']} skipped ({type(e).__name__}: {e}); scanning its rows of the SST",
                         2)
    t = _sst.scan_sst(spec["rec"], store, schema, sel, need, stats, cache, row_range=spec.get("row_range"))
    return _finish(t, spec, q)


def _dedup_partition(df, ts_name: str, names: list):
    return dedup_frame(df, ts_name, ORDER_COLUMNS)[names]


def _path_item(path: str, storage_options: dict | None):
    """(kind, schema, info) of an artifact directory or a Parquet SST path."""
    p = os.fspath(path)
    is_parquet = p.endswith(".parquet")
    if not is_parquet:
        art = open_artifact(p, storage_options=storage_options)
        m = art.manifest
        schema = RegionSchema(m.timestamp.name, m.timestamp.unit, m.timestamp.column_id,
                              tuple((f.name, f.column_id) for f in m.fields))
        return "artifact", schema, art
    if "://" in p and not p.startswith("file://"):
        parent, name = p.rstrip("/").rsplit("/", 1)
    else:
        parent, name = os.path.split(p[len("file://"):] if p.startswith("file://") else p)
    store = Store(parent or ".", storage_options)
    size = _sst.sst_size(store, name)
    pf = _sst.open_parquet(store, name, size, None)
    schema = RegionSchema.from_arrow(pf.schema_arrow, what=p)
    return "sst", schema, {"root": parent or ".", "rec": {"file_id": name, "path": name, "size": size,
                                                           "rows": pf.metadata.num_rows}}


def to_dask(region_or_paths, columns=None, series=None, tables=None, start=None, end=None, dedup: bool = False,
            device: str = "cpu", *, storage_options: dict | None = None, strict: bool = False, use_artifacts=True,
            shuffle_npartitions: int | None = None):
    """A dask DataFrame of the selection: one partition per artifact part or uncovered SST.

    ``region_or_paths``: a :class:`Region`, or a list of artifact generation
    directories and/or Parquet SST paths (read in list order).  Filters,
    projection and ``dedup`` are those of :meth:`Region.read` (``start``/``end``:
    integers in the timestamp unit, ISO-8601 strings or datetimes), converted
    once here; the partitions get the integer bounds.
    """
    import dask.dataframe as dd

    shuffle_npartitions = positive_int("shuffle_npartitions", shuffle_npartitions,
                                       "partitions after the shuffle; None: the read's", none_ok=True)
    backend = get_backend(device)
    backend.require_dask()
    specs = []
    if isinstance(region_or_paths, Region):
        region = region_or_paths
        if region.schema is None:
            raise SamplesError("the region has no SSTs (and so no schema) yet")
        schema = region.schema
        plan = region.plan(columns, series, tables, start, end, dedup, use_artifacts)
        names, need, sel = plan.columns, plan.need, plan.selection
        base = {"mode": "region", "root": region.root, "opts": json.dumps(region.storage_options, sort_keys=True),
                "region_id": region.region_id}
        for src in plan.sources:
            i, rec, fid = src.ordinal, src.record, src.sst.file_id
            if src.covered:
                entry = src.entry
                try:
                    art = region.usable_artifact(src, need)
                    row0 = 0
                    for k, part in enumerate(art.manifest.files):
                        if sel.selects(part.first, part.last, part.min_timestamp, part.max_timestamp):
                            specs.append({**base, "kind": "part", "entry": dict(entry), "rec": rec, "part": k,
                                          "row_range": (row0, row0 + part.num_rows), "order": (i, k)})
                        row0 += part.num_rows
                    continue
                except SamplesError as e:
                    if strict:
                        raise
                    kind = "a lacking" if isinstance(e, UnusableArtifactError) else "an unusable"
                    warn_skipped(f"{kind} artifact {entry.get('file_id')}/{entry.get('generation')} covering SST "
                                 f"{fid} skipped ({type(e).__name__}: {e}); scanning the SST instead", 2)
            specs.append({**base, "kind": "sst", "rec": rec, "row_range": None, "order": (i, 0)})
    else:
        paths = [region_or_paths] if isinstance(region_or_paths, (str, os.PathLike)) else list(region_or_paths)
        if not paths:
            raise ValueError("to_dask needs a Region or at least one path")
        items = [_path_item(p, storage_options) for p in paths]
        schema = items[0][1]
        for (kind, sch, _), p in zip(items, paths):
            if sch.arrow_schema() != schema.arrow_schema():
                raise SamplesError(f"{p}: schema {sch.arrow_schema()} differs from {paths[0]}'s {schema.arrow_schema()}")
        all_names = schema.column_names
        if columns is None:
            names = all_names
        else:
            cols = [columns] if isinstance(columns, str) else list(columns)
            bad = [c for c in cols if c not in all_names]
            if bad or not cols:
                raise ValueError(f"unknown column(s) {bad}; the columns are {', '.join(all_names)}")
            names = tuple(n for n in all_names if n in set(cols))
        sel = Selection.build(series, tables, start, end, schema.ts_unit)
        need = needed_columns(schema, names, dedup)
        opts = json.dumps(storage_options or {}, sort_keys=True)
        for i, (kind, sch, info) in enumerate(items):
            if kind == "artifact":
                for k, part in enumerate(info.manifest.files):
                    if sel.selects(part.first, part.last, part.min_timestamp, part.max_timestamp):
                        specs.append({"mode": "paths", "kind": "part", "root": os.fspath(paths[i]), "opts": opts,
                                      "entry": {}, "rec": None, "part": k, "order": (i, k)})
            else:
                if _sst.sst_selects(info["rec"], sel):
                    specs.append({"mode": "paths", "kind": "sst", "root": info["root"], "opts": opts,
                                  "rec": info["rec"], "row_range": None, "order": (i, 0)})
    q = {"series": sel.series, "tables": sel.tables, "start": sel.start, "end": sel.end, "need": list(need),
         "dedup": bool(dedup), "strict": bool(strict), "backend": backend.name,
         "schema": json.dumps(schema.to_json_obj(), sort_keys=True)}
    empty = schema.arrow_schema(need).empty_table()
    meta = _finish(empty, {"order": (0, 0)}, q)
    if specs:
        ddf = dd.from_map(_read_partition, specs, q=q, meta=meta, enforce_metadata=False,
                          label="gtsamples-read")
    else:
        ddf = dd.from_pandas(meta, npartitions=1) if _is_pandas(meta) else dd.from_dict({}, npartitions=1)
    if not dedup:
        return ddf
    out_meta = _dedup_partition(meta, schema.ts_name, list(names))
    nparts = shuffle_npartitions or max(1, ddf.npartitions)
    shuffled = ddf.shuffle(on=["__table_id", "__tsid"], npartitions=nparts)
    return shuffled.map_partitions(_dedup_partition, schema.ts_name, list(names), meta=out_meta)


def _is_pandas(frame) -> bool:
    return type(frame).__module__.partition(".")[0] == "pandas"
