"""Region benchmark: a one-series query over a region of many SSTs with artifacts.

Builds (once, in ``--dir``) a region of ``--ssts`` time-partitioned SSTs, each
holding every series for its own time window (as Mito's time-window compaction
lays them out), with ``--row-group-size``-row Parquet row groups, and builds an
artifact for every SST.  Then, in the same run, it measures a one-series query
(all columns, whole time range):

* bytes: ``ReadStats.bytes_read`` of a cold query (fresh page cache, region just
  opened) against the bytes it needed: the chunks it decodes plus the metadata it
  must load (manifests, part headers/trailers, pages): target ratio <= 1.5;
* time: the region read (cold cache and warm cache) against scanning the same
  SSTs with pyarrow (``pyarrow.dataset`` with the same filter pushed down, so
  row groups are pruned by their statistics): target >= 20x.  The three are
  measured side by side in every repeat (cold, warm, pyarrow), and a speedup is
  the median of the per-repeat ratios: the machine's speed drifts.

With a list of SST counts (``--ssts 100,1000,10000``) it runs the many-SST
queries instead (:func:`scale_run`): one series over one day and over all time,
the region opened afresh for each query, side by side with ``pyarrow.dataset``,
with the open, plan, navigate, fetch and decode phases, and each count's first open
timed in ``--fresh-opens`` fresh processes too (:func:`fresh_process_open`: a user's
first open, its page faults included).  Its speedup is best of
``--repeat`` against best of ``--repeat`` (issue 29's protocol), with the median and
range of the per-repeat ratios beside it (each repeat's two are measured moments
apart, so a drift of the machine's speed moves both).  The first count's region
is real (built once, 200 series x 500 rows per SST); larger ones reuse its files
and add synthetic catalog entries (:func:`synthetic_region`).

Run::

    .venv/bin/python benchmarks/bench_region.py                    # 100 SSTs
    .venv/bin/python benchmarks/bench_region.py --ssts 100,1000,10000
    .venv/bin/python benchmarks/bench_region.py --ssts 20 --quick  # smoke run

The region is kept in ``--dir`` (default ``benchmarks/out/region``) and reused
when its parameters match.

After the timed repeats, a few more cold and warm queries run with timers
around the region read's steps (:func:`stage_timers`: opening artifacts,
navigating, fetching, decoding; the rest is "other"), so the timed repeats run
untouched.  ``--json FILE`` writes the results with those stages;
``--plot DIR`` draws them (benchmarks/plotting.py).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import inspect
import json
import os
import shutil
import statistics
import sys
import time
import uuid

import numpy as np
import pyarrow as pa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

import gtsamples as gs  # noqa: E402
from gtsamples import cache as gcache  # noqa: E402
from gtsamples.format import constants as C  # noqa: E402
from gtsamples.region import create_region, open_region  # noqa: E402

REGION_ID = 4398046511104 + 7


def make_sst(i: int, n_series: int, rows: int, n_fields: int, tables: int, seed: int) -> pa.Table:
    """SST ``i``: every series, ``rows`` samples each in time window ``i`` (10 s step)."""
    rng = np.random.default_rng(seed + i)
    per_table = n_series // tables
    tid = np.repeat(np.arange(1, tables + 1, dtype=np.uint32), per_table * rows)
    tsid = np.tile(np.repeat(np.arange(per_table, dtype=np.uint64) * 7919 + 11, rows), tables)
    n = tid.shape[0]
    t0 = 1_700_000_000_000 + i * rows * 10_000
    ts = np.tile(t0 + np.arange(rows, dtype=np.int64) * 10_000, n_series)
    ts += rng.integers(-50, 50, n) * (rng.random(n) < 0.05)  # jitter on a few samples
    ts = np.maximum.accumulate(ts.reshape(n_series, rows), axis=1).reshape(-1)
    seq = np.uint64(i * n) + np.arange(n, dtype=np.uint64)
    op = np.ones(n, np.uint8)
    cols = {"__table_id": tid, "__tsid": tsid, "ts": pa.array(ts, pa.timestamp("ms")), "__sequence": seq,
            "__op_type": op}
    for k in range(n_fields):
        walk = np.cumsum(rng.normal(0, 1, n)).round(2) + 100 * k
        cols[f"f{k}"] = walk
    return pa.table(cols)


def ensure_region(d: str, args) -> None:
    params = {k: getattr(args, k) for k in ("ssts", "series", "rows", "fields", "tables", "row_group_size", "seed")}
    params["writer_page_bytes"] = C.WRITER_PAGE_BYTES  # artifacts built with the writer's defaults,
    params["compression"] = args.compression  # except the compression options
    params["compression_level"] = args.compression_level
    pfile = os.path.join(d, "params.json")
    if os.path.exists(pfile):
        with open(pfile) as f:
            if json.load(f) == params:
                return
        shutil.rmtree(d)
    os.makedirs(d, exist_ok=True)
    t0 = time.perf_counter()
    r = create_region(d, REGION_ID)
    for i in range(args.ssts):
        r.add_sst(make_sst(i, args.series, args.rows, args.fields, args.tables, args.seed),
                  row_group_size=args.row_group_size)
    t1 = time.perf_counter()
    r.build(workers=args.workers, compression=None if args.compression == "none" else args.compression,
            compression_level=args.compression_level)
    t2 = time.perf_counter()
    print(f"built region: {args.ssts} SSTs in {t1 - t0:.1f}s, artifacts in {t2 - t1:.1f}s", file=sys.stderr)
    with open(pfile, "w") as f:
        json.dump(params, f)


# the region read's steps, timed by wrapping these (module, attribute) pairs: internals,
# so a step whose function moved is left out (and said so) rather than failing the run
STAGES = {
    "open artifacts": [("gtsamples.region.region", "Region._artifact")],
    "navigate": [("gtsamples.plan.navigator", "Navigation.add"), ("gtsamples.plan.navigator", "Navigation.finish"),
                 ("gtsamples.plan.warm", "WarmIndex.navigate")],  # (the warm index: every page cached)
    "build batch": [("gtsamples.region.execute", "build_batch")],
    "fetch chunks": [("gtsamples.plan", "fetch_batch")],  # looked up there by Backend.fetch_decode
    "decode chunks": [("gtsamples.backends", "CpuBackend.decode")],
    "Arrow tables": [("gtsamples.region.execute", "_group_tables")],
}


@contextlib.contextmanager
def stage_timers():
    """Yields ``(totals, missing)``: seconds spent in each stage's functions
    while the block runs (outermost calls only), and the stages
    whose functions were not found."""
    totals = {name: 0.0 for name in STAGES}
    missing = []
    undo = []
    depth = {name: 0 for name in STAGES}

    def wrap(name, fn, generator):
        if generator:  # time the whole iteration (execute._group_tables yields tables)
            @functools.wraps(fn)
            def timed_gen(*a, **kw):
                t = time.perf_counter()
                try:
                    yield from fn(*a, **kw)
                finally:
                    totals[name] += time.perf_counter() - t
            return timed_gen

        @functools.wraps(fn)
        def timed(*a, **kw):
            depth[name] += 1
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                depth[name] -= 1
                if depth[name] == 0:
                    totals[name] += time.perf_counter() - t
        return timed

    for name, targets in STAGES.items():
        found = []
        for modname, attr in targets:
            owner = importlib.import_module(modname)
            *path, leaf = attr.split(".")
            for part in path:
                owner = getattr(owner, part, None)
            fn = getattr(owner, leaf, None) if owner is not None else None
            if fn is None:
                break
            found.append((owner, leaf, fn))
        else:
            for owner, leaf, fn in found:
                setattr(owner, leaf, wrap(name, fn, inspect.isgeneratorfunction(fn)))
                undo.append((owner, leaf, fn))
            continue
        missing.append(name)
        del totals[name]
    try:
        yield totals, missing
    finally:
        for owner, leaf, fn in reversed(undo):
            setattr(owner, leaf, fn)


def measure_stages(d: str, series, repeat: int) -> dict:
    """ms per stage of the median (by wall time) of ``repeat`` cold and of
    ``repeat`` warm queries; "other" is the rest of that query."""
    out = {}
    runs = {"cold": [], "warm": []}
    missing = []
    for _ in range(repeat):
        gcache.set_cache_size(gcache.DEFAULT_CACHE_BYTES)
        r = open_region(d, REGION_ID)
        for kind in ("cold", "warm"):
            with stage_timers() as (totals, missing):
                t0 = time.perf_counter()
                r.read_with_stats(series=[series])
                wall = time.perf_counter() - t0
            stages = {k: v * 1e3 for k, v in totals.items()}
            stages["other"] = max(0.0, wall * 1e3 - sum(stages.values()))
            stages["wall"] = wall * 1e3
            runs[kind].append(stages)
    for kind, rs in runs.items():
        out[kind] = dict(sorted(rs, key=lambda st: st["wall"])[len(rs) // 2], n=len(rs))
    if missing:
        out["missing"] = missing
    return out


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(path) for f in fs)


# --- many SSTs: open, plan, navigate, fetch, decode (``--ssts 100,1000,10000``) -----------------

SCALE_REAL_SSTS = 100


def synthetic_region(real: str, d: str, n: int) -> None:
    """A region root ``d`` whose one catalog version lists ``n`` SSTs: the real region's
    SSTs and artifacts (linked, not copied) first, then ``n - real`` synthetic records
    and entries, later in time (as newer flushes), for files that do not exist: they
    are only parsed and pruned, never read (the queries' plans keep none of them, except
    the all-time plan, which is timed but not executed)."""
    from gtsamples.region import catalog as gcatalog

    stamp = os.path.join(d, f"synthetic-{n}.json")
    if os.path.exists(stamp):
        with open(stamp) as f:
            made = json.load(f)
            if made.get("format", 1) == getattr(gcatalog, "CATALOG_FORMAT_VERSION", 1) and made.get("created_at"):
                return
    shutil.rmtree(d, ignore_errors=True)
    rid = str(REGION_ID)
    src_cat = os.path.join(real, rid, "samples", "_catalog")
    latest = sorted(x for x in os.listdir(src_cat) if x.startswith("v") and x.endswith(".json"))[-1]
    with open(os.path.join(src_cat, latest), "rb") as f:
        data = f.read()
    if hasattr(gcatalog, "copy_doc"):  # any format version this build reads, as records
        doc = gcatalog.copy_doc(gcatalog.parse_version(data, latest))
    else:
        doc = json.loads(data)
    os.makedirs(os.path.join(d, rid, "samples", "_catalog"))
    os.symlink(os.path.join(real, rid, "sst"), os.path.join(d, rid, "sst"))
    for name in os.listdir(os.path.join(real, rid, "samples")):
        if name != "_catalog":
            os.symlink(os.path.join(real, rid, "samples", name), os.path.join(d, rid, "samples", name))
    ssts, arts = doc["ssts"], doc["artifacts"]
    span = max(s["stats"]["max_timestamp"] for s in ssts) - min(s["stats"]["min_timestamp"] for s in ssts) + 1
    by_file = {a["file_id"]: a for a in arts}
    out_s, out_a = list(ssts), list(arts)
    for k in range(len(ssts), n):
        base = ssts[k % len(ssts)]
        fid = str(uuid.UUID(int=(0x5A7 << 64) + k, version=4))
        s = json.loads(json.dumps(base))
        shift = span * (k // len(ssts))
        s.update(file_id=fid, path=f"{rid}/sst/{fid}.parquet")
        s["stats"]["min_timestamp"] += shift
        s["stats"]["max_timestamp"] += shift
        out_s.append(s)
        a = json.loads(json.dumps(by_file[base["file_id"]]))
        gen = str(uuid.UUID(int=(0x6E7 << 64) + k, version=4))
        old = f"{rid}/samples/{a['file_id']}/{a['generation']}/"
        a.update(file_id=fid, generation=gen)
        if a.get("created_at"):  # each its own build time, as real builds (not the copied entry's)
            a["created_at"] = f"2026-12-06T21:{k // 60000 % 60:02d}:{k // 1000 % 60:02d}.{k % 1000:03d}{k % 997:03d}Z"
        for o in a["objects"]:
            o["path"] = o["path"].replace(old, f"{rid}/samples/{fid}/{gen}/")
        out_a.append(a)
    doc.update(ssts=out_s, artifacts=out_a, catalog_version=1, nonce=uuid.uuid4().hex)

    # written as this build's commits write a version (format 2, columns, where it has one)
    encode = getattr(gcatalog, "encode_version", lambda x: (json.dumps(x, indent=1) + "\n").encode())
    with open(os.path.join(d, rid, "samples", "_catalog", "v" + "0" * 19 + "1.json"), "wb") as f:
        f.write(encode(doc))
    with open(stamp, "w") as f:
        json.dump({"ssts": n, "real": len(ssts), "format": getattr(gcatalog, "CATALOG_FORMAT_VERSION", 1),
                   "created_at": "distinct"}, f)


def _best(xs):
    return min(xs) * 1e3


_FRESH_OPEN = """
import resource, sys, time
sys.path.insert(0, sys.argv[1])
from gtsamples.region import catalog, open_region
# imports done and a version parsed: another region's, or this one's first (empty) version,
# and that version again as this build writes it (the real region may be in an older format)
r = open_region(sys.argv[2], int(sys.argv[4]), version=None if sys.argv[2] != sys.argv[3] else 1)
catalog.parse_version(catalog.encode_version(catalog.copy_doc(r._doc)), "warm-up")
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
t = time.perf_counter()
open_region(sys.argv[3], int(sys.argv[4]))
print((time.perf_counter() - t) * 1e3, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


def fresh_process_open(other: str, d: str) -> tuple[float, int]:
    """(ms, page faults) of a fresh Python process's first open of region ``d``, after it
    imported gtsamples and opened region ``other`` (``d`` itself: its first version, which is
    empty): what a user's first open costs."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", _FRESH_OPEN, os.path.join(ROOT, "src"), other, d, str(REGION_ID)],
                         capture_output=True, text=True, check=True, timeout=300).stdout.split()
    return float(out[0]), int(out[1])


def scale_queries(n_series: int, tables: int) -> tuple:
    """The one-series queries over a region of :func:`make_sst` SSTs: ``(series, {name:
    ((start, end), the same filter for pyarrow.dataset)})``, one series over one day
    and over all time."""
    import pyarrow.dataset as ds

    series = (2, (n_series // tables // 2) * 7919 + 11)
    t0 = 1_700_000_000_000
    day = (t0 + 2 * 86_400_000, t0 + 3 * 86_400_000)
    ts = pa.timestamp("ms")
    flt = (ds.field("__table_id") == series[0]) & (ds.field("__tsid") == series[1])
    return series, {"one day": (day, flt & (ds.field("ts") >= pa.scalar(day[0], ts))
                                & (ds.field("ts") < pa.scalar(day[1], ts))),
                    "all time": ((None, None), flt)}


def scale_run(args, counts: list[int]) -> dict:
    """The issue-29 queries on regions of ``counts`` SSTs, side by side with pyarrow.dataset
    over the real SSTs: ms, best of ``--repeat`` (interleaved)."""
    import pyarrow.dataset as ds

    from gtsamples.region import catalog as gcatalog

    clear_versions = getattr(gcatalog, "clear", lambda: None)  # (a build without the version cache)

    real = args.dir.rstrip("/") + "-scale"
    a = argparse.Namespace(**{**vars(args), "ssts": SCALE_REAL_SSTS})
    ensure_region(real, a)
    series, queries = scale_queries(args.series, args.tables)
    r0 = open_region(real, REGION_ID)
    paths = [os.path.join(real, s.path) for s in r0.ssts]
    info = r0.info()
    comp = "none" if args.compression == "none" else f"zstd level {args.compression_level}"
    print(f"real region: {len(paths)} SSTs, SSTs {info['sst_bytes'] / 1e6:.1f} MB, artifacts "
          f"{info['artifact_bytes'] / 1e6:.1f} MB (compression: {comp})")
    results = {}
    for n in counts:
        d = real
        if n > SCALE_REAL_SSTS:
            d = f"{real}-synthetic-{n}"
            synthetic_region(real, d, n)
        res = results[n] = {"synthetic": n > SCALE_REAL_SSTS}
        opens_first, opens_cached = [], []
        for _ in range(args.repeat):
            clear_versions()
            t = time.perf_counter()
            open_region(d, REGION_ID)
            opens_first.append(time.perf_counter() - t)
            for _ in range(10):
                t = time.perf_counter()
                open_region(d, REGION_ID)
                opens_cached.append(time.perf_counter() - t)
        res["open_first_ms"], res["open_cached_ms"] = _best(opens_first), _best(opens_cached)
        fresh = [fresh_process_open(real, d) for _ in range(args.fresh_opens)]
        if fresh:
            ms = sorted(f[0] for f in fresh)
            res["open_fresh_process_ms"] = {"best": round(ms[0], 3), "median": round(statistics.median(ms), 3),
                                            "page_faults": int(statistics.median(f[1] for f in fresh))}
        for qname, ((start, end), f) in queries.items():
            q = res[qname] = {}
            execute = not (qname == "all time" and n > SCALE_REAL_SSTS)  # synthetic files do not exist
            plans, walls, colds, scans, stage_runs = [], [], [], [], []
            out = None
            for k in range(-1, args.repeat):
                r = open_region(d, REGION_ID)
                t = time.perf_counter()
                plan = r.plan(series=[series], start=start, end=end)
                plans.append(time.perf_counter() - t)
                if execute:
                    t = time.perf_counter()  # the query as a user runs it: region opened afresh
                    got = open_region(d, REGION_ID).read(series=[series], start=start, end=end)
                    walls.append(time.perf_counter() - t)
                    gcache.set_cache_size(gcache.DEFAULT_CACHE_BYTES)  # cold: no page, no parsed version
                    clear_versions()
                    t = time.perf_counter()
                    open_region(d, REGION_ID).read(series=[series], start=start, end=end)
                    colds.append(time.perf_counter() - t)
                    open_region(d, REGION_ID).read(series=[series], start=start, end=end)  # warm again
                    with stage_timers() as (totals, _missing):
                        t = time.perf_counter()
                        rr = open_region(d, REGION_ID)
                        t_open = time.perf_counter() - t
                        pl = rr.plan(series=[series], start=start, end=end)
                        t_plan = time.perf_counter() - t - t_open
                        rr.execute(pl)
                        wall = time.perf_counter() - t
                    st = {"open region": t_open * 1e3, "plan": t_plan * 1e3, **{k2: v * 1e3 for k2, v in totals.items()}}
                    st["other"] = max(0.0, wall * 1e3 - sum(st.values()))
                    st["wall"] = wall * 1e3
                    stage_runs.append(st)
                    out = got if out is None else out
                    assert got.equals(out)
                if n <= SCALE_REAL_SSTS or qname == "one day":
                    t = time.perf_counter()
                    ref = ds.dataset(paths, format="parquet").to_table(filter=f)
                    scans.append(time.perf_counter() - t)
                if k < 0:
                    for xs in (plans, walls, colds, scans, stage_runs):
                        xs.clear()
            q["sources"] = len(plan.sources)
            q["plan_ms"] = _best(plans)
            if execute:
                ref = ref.select(out.schema.names)
                assert ref.cast(out.schema).equals(out), "pyarrow and the region disagree"
                q.update(rows=out.num_rows, query_ms=_best(walls), cold_query_ms=_best(colds),
                         pyarrow_ms=_best(scans), stages_ms=min(stage_runs, key=lambda s: s["wall"]))
                q["speedup"] = round(q["pyarrow_ms"] / q["query_ms"], 1)
                q["speedup_cold"] = round(q["pyarrow_ms"] / q["cold_query_ms"], 1)
                if len(scans) == len(walls):  # each repeat's pair, measured within ~0.2 s of each other
                    paired = sorted(s_ / w_ for s_, w_ in zip(scans, walls))
                    q["speedup_paired"] = round(statistics.median(paired), 1)
                    q["speedup_paired_range"] = [round(paired[0], 1), round(paired[-1], 1)]
        line = (f"{n:>6} SSTs{' (synthetic entries)' if res['synthetic'] else ''}: open first {res['open_first_ms']:.2f} ms, "
                f"cached {res['open_cached_ms'] * 1e3:.0f} us")
        if "open_fresh_process_ms" in res:
            fp = res["open_fresh_process_ms"]
            line += (f"; first open in a fresh process {fp['best']:.2f} ms best, {fp['median']:.2f} ms median of "
                     f"{args.fresh_opens} ({fp['page_faults']:,} page faults)")
        print(line)
        for qname in queries:
            q = res[qname]
            if "query_ms" in q:
                print(f"   {qname}: {q['sources']} artifacts, {q['rows']:,} rows; region opened afresh {q['query_ms']:.2f} ms "
                      f"(cold {q['cold_query_ms']:.2f} ms); pyarrow.dataset {q['pyarrow_ms']:.1f} ms -> {q['speedup']}x "
                      f"(cold {q['speedup_cold']}x); plan {q['plan_ms']:.3f} ms")
                if "speedup_paired" in q:
                    print(f"      per-repeat ratios (median, range): {q['speedup_paired']}x, "
                          f"{q['speedup_paired_range'][0]}-{q['speedup_paired_range'][1]}x")
                print("      phases (ms): " + ", ".join(f"{k} {v:.2f}" for k, v in q["stages_ms"].items()))
            else:
                print(f"   {qname}: {q['sources']} sources planned in {q['plan_ms']:.2f} ms (not executed: synthetic files)")
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=os.path.join(ROOT, "benchmarks", "out", "region"))
    ap.add_argument("--ssts", default="100", help="SSTs; a list (100,1000,10000): the many-SST queries (scale_run)")
    ap.add_argument("--series", type=int, default=200)
    ap.add_argument("--rows", type=int, default=2000, help="samples per series per SST")
    ap.add_argument("--fields", type=int, default=4)
    ap.add_argument("--tables", type=int, default=4)
    ap.add_argument("--row-group-size", type=int, default=102_400, help="Parquet rows per row group")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fresh-opens", type=int, default=5,
                    help="many-SST runs: first opens timed in this many fresh processes (0: none)")
    ap.add_argument("--compression", choices=("zstd", "none"), default="zstd",
                    help="write_artifact's compression for the region's artifacts (default zstd: the spec's writer)")
    ap.add_argument("--compression-level", type=int, default=C.WRITER_ZSTD_LEVEL,
                    help=f"write_artifact's compression_level (default {C.WRITER_ZSTD_LEVEL})")
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    ap.add_argument("--json", help="also write the results to this JSON file")
    ap.add_argument("--plot", metavar="DIR", help="also draw region_times.png and region_stages.png in DIR")
    args = ap.parse_args(argv)
    if "," in args.ssts:
        if args.rows == 2000:  # the many-SST region: 200 series x 500 rows per SST
            args.rows = 500
        res = scale_run(args, [int(x) for x in args.ssts.split(",") if x.strip()])
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"scale": {str(k): v for k, v in res.items()}, "command": " ".join(sys.argv[1:] if argv is None else argv)},
                          f, indent=1)
        return 0
    args.ssts = int(args.ssts)
    sys.path.insert(0, ROOT)
    from benchmarks import plotting

    info = plotting.run_info()
    info["load_avg_start"] = info.pop("load_avg")
    if args.quick:
        args.series, args.rows, args.repeat = 40, 500, 3
        args.dir = args.dir.rstrip("/") + "-quick"
    ensure_region(args.dir, args)

    import pyarrow.dataset as ds

    region = open_region(args.dir, REGION_ID)
    series, queries = scale_queries(args.series, args.tables)
    flt = queries["all time"][1]
    paths = [os.path.join(args.dir, s.path) for s in region.ssts]
    print(f"region: {len(region.ssts)} SSTs, {region.num_rows:,} rows, SSTs {region.info()['sst_bytes'] / 1e6:.1f} MB, "
          f"artifacts {region.info()['artifact_bytes'] / 1e6:.1f} MB; query: series {series}, all columns")

    # --- cold query, warm query and pyarrow scan, interleaved per repeat -------------------------
    # (this machine's speed drifts minute to minute: each repeat's three measures are
    # taken side by side, and the speedups are the medians of the per-repeat ratios)
    colds, warms, scans = [], [], []
    cold_stats = warm_stats = out = ref = None
    for k in range(-1, args.repeat):  # repeat -1 warms up (numba's cached kernels load; not counted)
        gcache.set_cache_size(gcache.DEFAULT_CACHE_BYTES)  # cold: fresh page cache, freshly opened region
        r = open_region(args.dir, REGION_ID)
        t0 = time.perf_counter()
        got, cold_stats = r.read_with_stats(series=[series])
        colds.append(time.perf_counter() - t0)
        t0 = time.perf_counter()  # warm: the same region again, its pages cached
        warm, warm_stats = r.read_with_stats(series=[series])
        warms.append(time.perf_counter() - t0)
        t0 = time.perf_counter()  # pyarrow: the SSTs scanned with the filter pushed down (row-group pruning)
        ref = ds.dataset(paths, format="parquet").to_table(filter=flt)
        scans.append(time.perf_counter() - t0)
        if out is None:
            out = got
        assert got.equals(out) and warm.equals(out)
        if k < 0:
            for times in (colds, warms, scans):
                times.clear()
    need = cold_stats.chunk_bytes + cold_stats.metadata_bytes
    ratio = cold_stats.bytes_read / need
    ref = ref.select(out.schema.names)
    assert ref.num_rows == out.num_rows, (ref.num_rows, out.num_rows)
    assert ref.cast(out.schema).equals(out), "pyarrow scan and region read disagree"

    # --- the same region read without artifacts (uncovered plan only) ----------------------------
    fallbacks = []
    for _ in range(max(1, args.repeat // 2)):
        t0 = time.perf_counter()
        out3 = region.read(series=[series], use_artifacts=False)
        fallbacks.append(time.perf_counter() - t0)
    assert out3.equals(out)

    med = statistics.median
    cold_ratios = [s / c for s, c in zip(scans, colds)]  # per repeat
    res = {
        "ssts": len(region.ssts), "rows": region.num_rows, "rows_out": out.num_rows,
        "cold": {"bytes_read": cold_stats.bytes_read, "requests": cold_stats.requests,
                 "chunk_bytes": cold_stats.chunk_bytes, "metadata_bytes": cold_stats.metadata_bytes,
                 "bytes_ratio": round(ratio, 3), "seconds": med(colds)},
        "warm": {"bytes_read": warm_stats.bytes_read, "requests": warm_stats.requests,
                 "metadata_bytes": warm_stats.metadata_bytes, "cache_hits": warm_stats.cache_hits,
                 "seconds": med(warms)},
        "pyarrow_scan_seconds": med(scans),
        "region_scan_no_artifacts_seconds": med(fallbacks),
        "speedup_cold": round(med(cold_ratios), 1),
        "speedup_warm": round(med([s / w for s, w in zip(scans, warms)]), 1),
        "speedup_cold_range": [round(min(cold_ratios), 1), round(max(cold_ratios), 1)],
        "speedups_cold": [round(x, 2) for x in cold_ratios],
    }
    print(f"rows returned: {out.num_rows:,}")
    print(f"cold: {cold_stats.bytes_read:,} B read in {cold_stats.requests} requests; needed "
          f"{cold_stats.chunk_bytes:,} B chunks + {cold_stats.metadata_bytes:,} B metadata -> ratio {ratio:.3f} "
          f"(target <= 1.5)")
    print(f"warm: {warm_stats.bytes_read:,} B read, {warm_stats.metadata_bytes} B metadata, "
          f"{warm_stats.cache_hits} cache hits")
    print(f"time (median of {args.repeat}): region cold {med(colds) * 1e3:.1f} ms, warm {med(warms) * 1e3:.1f} ms; "
          f"pyarrow dataset scan {med(scans) * 1e3:.1f} ms; region without artifacts {med(fallbacks) * 1e3:.1f} ms")
    print(f"speedup vs pyarrow (median of the per-repeat ratios): cold {res['speedup_cold']}x "
          f"(repeats {res['speedup_cold_range'][0]}-{res['speedup_cold_range'][1]}x), warm {res['speedup_warm']}x "
          f"(target >= 20x)")
    stages = measure_stages(args.dir, series, max(3, args.repeat))
    for kind in ("cold", "warm"):
        print(f"{kind} stages (ms, the median query of {stages[kind]['n']}): "
              + ", ".join(f"{k} {v:.1f}" for k, v in stages[kind].items() if k not in ("n", "wall"))
              + f"; query {stages[kind]['wall']:.1f}")
    if stages.get("missing"):
        print(f"stages not timed (their functions moved): {', '.join(stages['missing'])}")
    info["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    res.update(stages_ms=stages, info=info, command=" ".join(sys.argv[1:] if argv is None else argv))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    if args.plot:
        for path in plotting.render("region", res, args.plot):
            print(f"plot: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
