"""Building a region's artifacts: one per SST, in worker threads or processes
(:meth:`Region.build <gtsamples.region.Region.build>`)."""

from __future__ import annotations

import concurrent.futures as cf
import inspect
import uuid

import pyarrow as pa

from ..artifact import open_artifact
from ..errors import SamplesError
from ..storage import Store
from . import sst as _sst
from .args import positive_int
from .catalog import RegionSchema, now_iso
from .threads import pmap


#: :meth:`Region.build`'s ``executor`` and ``verify`` values.
EXECUTORS = ("thread", "process")
VERIFY = ("inspect", "validate", None)


def check_build_args(n_fields: int, workers, executor, verify, row_limit, write_kw: dict) -> int:
    """:meth:`Region.build`'s arguments checked before any SST is read (even when there
    is nothing to build): TypeError or ValueError naming the bad one, the writer's
    knobs as :func:`~gtsamples.write.parse_write_options` checks them.  Returns the
    number of workers (None: 1)."""
    from ..write import parse_write_options

    if executor not in EXECUTORS:
        raise ValueError(f"executor must be 'thread' or 'process', not {executor!r}")
    if verify not in VERIFY:
        raise ValueError(f"verify must be 'inspect', 'validate' or None, not {verify!r}")
    workers = positive_int("workers", workers, "threads or processes; None: one", none_ok=True) or 1
    knobs = [k for k, p in inspect.signature(parse_write_options).parameters.items()
             if p.kind is p.KEYWORD_ONLY and k != "row_limit"]
    unknown = sorted(set(write_kw) - set(knobs))
    if unknown:
        raise TypeError(f"build() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; "
                        f"the writer's options are {', '.join(knobs)}")
    parse_write_options(n_fields, row_limit=row_limit, **write_kw)
    return workers


def build_entries(args: list, workers: int, executor: str) -> list:
    """Catalog entries of ``build_one(*a)`` for each of ``args``, on ``workers`` threads or
    processes (``executor``, checked by :func:`check_build_args`)."""
    if len(args) == 1:
        return [build_one(*args[0])]
    if executor == "thread":  # the region layer's helper threads (gtsamples.threadpools.LazyThreadPool)
        return pmap(lambda a: build_one(*a), args, workers)
    import multiprocessing

    # spawn: forking a process whose OpenMP (numba) threads are running is unsafe
    with cf.ProcessPoolExecutor(max_workers=min(workers, len(args)),
                                mp_context=multiprocessing.get_context("spawn")) as ex:
        return list(ex.map(build_one, *zip(*args)))


def build_one(root, storage_options, region_id, rec, schema_json, row_limit, verify, write_kw) -> dict:
    """Build one artifact for one SST (runs in a worker thread or process)."""
    from ..write import write_artifact

    store = Store(root, storage_options or None)
    schema = RegionSchema.from_json_obj(schema_json, "schema")
    st, key = _sst.store_for(rec["path"], store)
    pf = _sst.open_parquet(st, key, int(rec["size"]), None)
    target = schema.arrow_schema()
    # (KeyError: a column the SST lacks)
    with _sst.sst_errors(st.path(key), "cannot read the SST", (pa.ArrowException, OSError, KeyError)):
        table = pf.read(columns=list(schema.column_names), use_threads=False)
        table = pa.Table.from_arrays([table.column(n).cast(target.field(n).type) for n in target.names],
                                     schema=target)
    if table.num_rows != int(rec["rows"]):
        raise SamplesError(f"SST {rec['file_id']}: holds {table.num_rows} rows, the catalog says {rec['rows']}")
    generation = str(uuid.uuid4())
    kw = dict(region_id=int(region_id), source_file_id=rec["file_id"], generation=generation,
              timestamp_column_id=schema.ts_column_id, field_column_ids=schema.field_column_ids,
              row_limit=row_limit, **write_kw)
    entry = write_artifact(table, root, storage_options=(storage_options or None) if not store.is_local else None,
                           **kw)
    d = dict(entry.to_dict() if hasattr(entry, "to_dict") else entry)
    d["created_at"] = d.get("created_at") or now_iso()
    if verify:
        art = open_artifact(root, entry=d, storage_options=storage_options or None)
        if verify == "validate":
            art.validate()
        else:
            art.inspect()
    return d
