"""Concurrency scenarios, each run in a fresh process (tests/test_first_calls.py, ``make stress``).

    python -m tests.concurrency.scenarios prepare DIR            # data and expected digests
    python -m tests.concurrency.scenarios threads DIR [--threads 4] [--low-thresholds]
    python -m tests.concurrency.scenarios children DIR [--methods fork,forkserver,spawn] [--no-parent-read]
    python -m tests.concurrency.scenarios dask-threads DIR
    python -m tests.concurrency.scenarios dask-cluster DIR
    python -m tests.concurrency.scenarios build DIR

Each scenario prints one JSON line (``{"scenario": ..., "ok": ..., "wrong": [...], ...}``)
and exits 0 when every result equals the digest ``prepare`` recorded (1 otherwise).  A
crash is the process's signal, a hang the caller's timeout.  The user's first calls
start inside the threads and children (nothing is opened or read before, unless the
scenario says so): a process-wide object created on first use is raced as a new user's
process races it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from .threads import barrier_threads


REGION_ID = 4398046511104 + 23
SST_IDS = ["5a3c0000-0000-4000-8000-0000000023a1", "5a3c0000-0000-4000-8000-0000000023a2"]
ART_SRC = "5a3c0000-0000-4000-8000-0000000023f0"
DASK_COLUMNS = ["ts", "cpu_usage"]
CALLS = ("read", "series", "validate", "dedup", "batches", "region_series")


# ----------------------------------------------------------------------------- digests
def digest(t) -> str:
    """Column names, validity and values of a Table (or list of Tables, or pandas frame), chunking aside."""
    if isinstance(t, list):
        t = pa.Table.from_batches(t) if t and isinstance(t[0], pa.RecordBatch) else pa.concat_tables(t)
    if not isinstance(t, pa.Table):  # pandas
        t = pa.Table.from_pandas(t, preserve_index=False)
    h = hashlib.sha256(repr(t.column_names).encode())
    h.update(str(t.num_rows).encode())
    for col in t.columns:
        a = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        h.update(np.asarray(a.is_valid().to_numpy(zero_copy_only=False), bool).tobytes())
        h.update(np.ascontiguousarray(a.to_numpy(zero_copy_only=False)).tobytes())
    return h.hexdigest()


def _open(d: Path):
    import gtsamples as gs
    from gtsamples.region import open_region

    entry = json.loads((d / "entry.json").read_text())
    return gs.open_artifact(d / "store", entry=entry), open_region(d / "region", REGION_ID)


def call(name: str, d: Path, series) -> str:
    """One of CALLS, made from scratch (opening included), as its digest."""
    art, region = _open(d)
    if name == "read":
        return digest(art.read())
    if name == "series":
        return digest(art.read(series=[tuple(series)], columns=["__tsid", "ts", "cpu_usage"]))
    if name == "validate":
        art.validate()
        return "ok"
    if name == "dedup":
        return digest(region.read(dedup=True))
    if name == "batches":
        return digest(list(art.iter_batches(max_bytes=1 << 20)))
    if name == "region_series":  # twice: navigated, then from the version's warm index once cached
        region.read(series=[tuple(series)], columns=["__tsid", "ts", "cpu_usage"])
        return digest(region.read(series=[tuple(series)], columns=["__tsid", "ts", "cpu_usage"]))
    raise ValueError(name)


# ----------------------------------------------------------------------------- prepare
def prepare(d: Path, n_series: int = 40, rows: int = 10_000) -> None:
    """An artifact of ``n_series * rows`` rows (DIR/store), a region of the same rows in two
    SSTs with artifacts (DIR/region) and without (DIR/region_src), and the digests."""
    import gtsamples as gs
    from gtsamples.demo import synthetic_metrics
    from gtsamples.region import create_region, open_region, to_dask

    t = synthetic_metrics(n_series=n_series, rows_per_series=rows)
    half = t.num_rows // 2
    entry = gs.write_artifact(t, d / "store", region_id=REGION_ID, source_file_id=ART_SRC, timestamp_column_id=0,
                              field_column_ids=[1, 2, 3, 4])
    (d / "entry.json").write_text(json.dumps(dict(entry) if not isinstance(entry, dict) else entry, default=str))
    for name in ("region", "region_src"):
        r = create_region(d / name, REGION_ID)
        for fid, part in zip(SST_IDS, (t.slice(0, half), t.slice(half))):
            r.add_sst(part, file_id=fid)
    r = open_region(d / "region", REGION_ID)
    r.build(workers=1, max_page_bytes=4096)  # (small pages: internal roots, as the warm index holds)
    series = [int(t["__table_id"][0].as_py()), int(t["__tsid"][0].as_py())]
    want = {name: call(name, d, series) for name in CALLS}
    want["dask"] = digest(to_dask(r, columns=DASK_COLUMNS).compute(scheduler="sync"))
    (d / "expected.json").write_text(json.dumps({"series": series, "digests": want}))


def _expected(d: Path) -> dict:
    return json.loads((d / "expected.json").read_text())


# ----------------------------------------------------------------------------- scenarios
def _low_thresholds() -> None:
    """Every stage on numba's threads (prange kernels) and the decode pool, however small."""
    from gtsamples.decode.cpu import parallel

    for name in ("PARALLEL_ZSTD_MIN_BYTES", "PARALLEL_MIN_ITEMS", "PARALLEL_MIN_VALUES", "PARALLEL_HASH_MIN_BYTES"):
        setattr(parallel, name, 0)


def threads(d: Path, n: int, with_dask: bool = False) -> dict:
    """``n`` barrier threads, thread k making CALLS rotated by k (its first call differs);
    ``with_dask``: one more thread computes the Dask frame on Dask's threads (4 more threads)."""
    exp = _expected(d)

    def work(k):
        if k == n:
            return [("dask", dask_digest(d))]
        order = CALLS[k % len(CALLS):] + CALLS[:k % len(CALLS)]
        return [(c, call(c, d, exp["series"])) for c in order]

    wrong = []
    for k, res in enumerate(barrier_threads(n + int(with_dask), work)):
        if isinstance(res, str):
            wrong.append(f"thread {k}: {res}")
            continue
        wrong += [f"thread {k}: {c}" for c, got in res if got != exp["digests"][c]]
    return {"wrong": wrong}


def child(d: str, parent_pid: int) -> None:
    """A child process's read (exit 0: right rows, 3: wrong rows)."""
    exp = _expected(Path(d))
    got = call("read", Path(d), exp["series"])
    got_series = call("series", Path(d), exp["series"])
    sys.exit(0 if (got, got_series) == (exp["digests"]["read"], exp["digests"]["series"]) else 3)


def children(d: Path, methods: list[str], parent_read: bool, timeout: float) -> dict:
    """The parent reads (with its thread pools), then starts a child of each method, which reads."""
    exp = _expected(d)
    wrong, times = [], {}
    if parent_read:
        if call("read", d, exp["series"]) != exp["digests"]["read"]:
            wrong.append("parent: read")
    for m in methods:
        ctx = mp.get_context(m)
        t0 = time.perf_counter()
        p = ctx.Process(target=child, args=(str(d), os.getpid()))
        p.start()
        p.join(timeout)
        times[m] = round(time.perf_counter() - t0, 3)
        if p.exitcode is None:
            p.kill()
            p.join()
            wrong.append(f"{m} child: hang (no exit in {timeout} s)")
        elif p.exitcode != 0:
            wrong.append(f"{m} child: exit code {p.exitcode}")
    return {"wrong": wrong, "seconds": times}


def dask_digest(d: Path, workers: int = 4) -> str:
    """The README's Dask path on Dask's threads scheduler (its default without a client)."""
    from gtsamples.region import open_region, to_dask

    return digest(to_dask(open_region(d / "region", REGION_ID), columns=DASK_COLUMNS).compute(scheduler="threads",
                                                                                              num_workers=workers))


def dask_threads(d: Path, workers: int = 4) -> dict:
    exp = _expected(d)
    return {"wrong": [] if dask_digest(d, workers) == exp["digests"]["dask"] else ["dask threads: rows"]}


def point_package_cache(path: str | None) -> None:
    """gtsamples.jit's package cache in ``path`` (a worker process of a cluster, before its tasks)."""
    if path:
        from gtsamples import jit

        jit.PACKAGE_CACHE = path


def dask_cluster(d: Path) -> dict:
    import distributed

    from gtsamples.region import open_region, to_dask

    exp = _expected(d)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster, distributed.Client(cluster) as client:
        client.run(point_package_cache, os.environ.get("GTS_SCENARIO_JITCACHE"))  # the workers' caches too
        df = to_dask(open_region(d / "region", REGION_ID), columns=DASK_COLUMNS).compute()
    return {"wrong": [] if digest(df) == exp["digests"]["dask"] else ["dask cluster: rows"]}


def build(d: Path) -> dict:
    """A region build (2 threads) from a user thread while 3 others read the artifact and the region."""
    from gtsamples.region import open_region

    exp = _expected(d)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "region"
        shutil.copytree(d / "region_src", root)

        def work(k):
            if k == 0:
                open_region(root, REGION_ID).build(workers=2)
                return [("dedup", digest(open_region(root, REGION_ID).read(dedup=True)))]
            if k == 1:
                return [("dedup", digest(open_region(root, REGION_ID).read(dedup=True)))]
            return [(c, call(c, d, exp["series"])) for c in ("read", "batches")]

        wrong = []
        for k, res in enumerate(barrier_threads(4, work)):
            if isinstance(res, str):
                wrong.append(f"thread {k}: {res}")
                continue
            wrong += [f"thread {k}: {c}" for c, got in res if got != exp["digests"][c]]
        built = open_region(root, REGION_ID)
        if any(v is None for v in built.coverage().values()):
            wrong.append("build: an SST left uncovered")
    return {"wrong": wrong}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", choices=["prepare", "threads", "children", "dask-threads", "dask-cluster", "build"])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--low-thresholds", action="store_true")
    ap.add_argument("--methods", default="fork,forkserver,spawn")
    ap.add_argument("--no-parent-read", action="store_true")
    ap.add_argument("--with-dask", action="store_true", help="threads: one more thread runs the Dask path")
    ap.add_argument("--fork-child", action="store_true", help="threads: then a fork child reads")
    ap.add_argument("--child-timeout", type=float, default=120.0)
    a = ap.parse_args(argv)
    # the package's kernel cache (gtsamples.jit) in a folder of the caller's: cold when empty
    point_package_cache(os.environ.get("GTS_SCENARIO_JITCACHE"))
    if a.low_thresholds:
        _low_thresholds()
    t0 = time.perf_counter()
    if a.scenario == "prepare":
        a.dir.mkdir(parents=True, exist_ok=True)
        prepare(a.dir)
        out = {"wrong": []}
    elif a.scenario == "threads":
        out = threads(a.dir, a.threads, a.with_dask)
        if a.fork_child:
            forked = children(a.dir, ["fork"], False, a.child_timeout)
            out["wrong"] += forked["wrong"]
            out["seconds"] = forked["seconds"]
    elif a.scenario == "children":
        out = children(a.dir, a.methods.split(","), not a.no_parent_read, a.child_timeout)
    elif a.scenario == "dask-threads":
        out = dask_threads(a.dir)
    elif a.scenario == "dask-cluster":
        out = dask_cluster(a.dir)
    else:
        out = build(a.dir)
    out.update(scenario=a.scenario, ok=not out["wrong"], seconds_total=round(time.perf_counter() - t0, 3))
    try:
        import numba

        out["layer"] = numba.threading_layer()
    except (ImportError, ValueError):
        out["layer"] = None
    print(json.dumps(out), flush=True)
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
