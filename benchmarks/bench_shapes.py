"""Real-world shapes: full scans and one-series queries, gtsamples vs Parquet (pyarrow), side by side.

Real SSTs hold many series with few samples each (a one-hour SST of a 15 s
scrape: 240 samples per series).  This benchmark runs a grid of shapes --
rows per series (``--per-series``, default 50, 250, 1,000, 8,192, 100,000)
times total rows (``--rows``, default 1M, 10M, 30M) -- and at each point
measures, interleaved in every repeat:

* full scan: ``Artifact.read()`` against ``pyarrow.parquet.read_table``
  (rows/s; the ratio is the median of the per-repeat ratios);
* one series, a 1% window of its time range (``--window``): warm (artifact
  open, its pages cached) against a reused ``pyarrow.dataset`` with the
  filter pushed down, and cold (``open_artifact`` on an artifact not opened
  before, fresh page cache, then the query: what a user pays) against a new
  ``pyarrow.dataset`` and the same filter;
* bytes per row of both files;
* the Zstd floor: libzstd alone decompressing every Zstd frame of the full
  scan (``ZSTD_decompressDCtx`` from a numba loop, no checksum, check or
  decoding, frames split evenly over the decode threads), from the fetched
  batch.  ``pyarrow / floor`` bounds the full-scan ratio any decoder of this
  format can reach with libzstd on this machine: every chunk is one frame.

Data (cached under ``--dir``, rebuilt only when its parameters change): 4
random-walk float fields with two decimals, 15 s scrapes with +-40 ms jitter,
3 tables, TSIDs spread over u64, sequences descending, all puts; the
artifact from ``gs.write_artifact`` with its defaults, the Parquet file from
``pq.write_table(compression="zstd")``.

    python benchmarks/bench_shapes.py                                  # the whole grid
    python benchmarks/bench_shapes.py --quick                          # 1M, 10M x 250, 1k, 100k
    python benchmarks/bench_shapes.py --rows 1e6 --per-series 250,8192 # a subset
    python benchmarks/bench_shapes.py --quick --json out.json --plot benchmarks/plots

Each point also prints the decoder's stages of a full read per chunk and per
row (``cpu.last_stats()``).  Writes the results as JSON (``--json``) and, when
matplotlib is installed (``pip install -e '.[plots]'``), a plot of throughput
against rows per series and against total rows (``--plot DIR``:
``shapes_throughput.png``, benchmarks/plotting.py's style).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import sys
import time
import uuid

from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

import gtsamples as gs  # noqa: E402
from gtsamples.cache import PageCache  # noqa: E402
from gtsamples.decode import cpu  # noqa: E402
from gtsamples.format import libzstd  # noqa: E402
from gtsamples.format.constants import COMP_ZSTD  # noqa: E402
from gtsamples.format.libzstd import zstd_decompress_into  # noqa: E402

GRID_ROWS = (1_000_000, 10_000_000, 30_000_000)
GRID_PER_SERIES = (50, 250, 1_000, 8_192, 100_000)
N_FIELDS = 4
N_TABLES = 3
STEP_MS = 15_000
T0_MS = 1_700_000_000_000
#: Bumped when the generated data changes (cached data sets are rebuilt).
DATA_VERSION = 1


def generate(n_series: int, per_series: int, seed: int) -> pa.Table:
    """``n_series`` series of ``per_series`` rows, in spec order (see the module doc)."""
    rng = np.random.default_rng(seed)
    n = n_series * per_series
    # identities sorted by (table_id, tsid): tables in contiguous runs, TSIDs ascending
    tsid = np.unique(rng.integers(0, 2**64 - 1, n_series, dtype=np.uint64, endpoint=True))
    while tsid.shape[0] < n_series:  # (a collision among 64-bit draws: practically never)
        tsid = np.unique(np.r_[tsid, rng.integers(0, 2**64 - 1, n_series - tsid.shape[0], dtype=np.uint64)])
    table_id = (np.arange(n_series) * N_TABLES // n_series + 1).astype(np.uint32)
    inc = STEP_MS + rng.integers(-40, 41, (n_series, per_series))
    inc[:, 0] = 0
    ts = T0_MS + np.cumsum(inc, axis=1).reshape(n)
    del inc
    cols = {
        "__table_id": pa.array(np.repeat(table_id, per_series)),
        "__tsid": pa.array(np.repeat(tsid, per_series)),
        "ts": pa.array(ts, pa.timestamp("ms")),
        "__sequence": pa.array(np.arange(n, 0, -1, dtype=np.uint64)),  # descending: the tie rule holds
        "__op_type": pa.array(np.ones(n, np.uint8)),
    }
    for k in range(N_FIELDS):
        walk = np.cumsum(rng.normal(0, 1, (n_series, per_series)), axis=1)
        walk += rng.uniform(10, 1000, (n_series, 1))
        cols[f"f{k}"] = pa.array(np.round(walk.reshape(n), 2))
    return pa.table(cols)


def ensure_data(root: str, rows: int, per_series: int, seed: int) -> dict:
    """The artifact and Parquet file of one grid point under ``root`` (built once)."""
    n_series = max(1, rows // per_series)
    d = os.path.join(root, f"{rows}x{per_series}")
    params = {"version": DATA_VERSION, "rows": n_series * per_series, "per_series": per_series,
              "series": n_series, "seed": seed}
    meta_path = os.path.join(d, "meta.json")
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
        if meta.get("params") == params:
            return meta
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    t0 = time.perf_counter()
    tbl = generate(n_series, per_series, seed)
    entry = gs.write_artifact(tbl, os.path.join(d, "store"), region_id=1, source_file_id=str(uuid.uuid4()),
                              timestamp_column_id=0, field_column_ids=list(range(1, N_FIELDS + 1)))
    pq_path = os.path.join(d, "sst.parquet")
    pq.write_table(tbl, pq_path, compression="zstd")
    # the query: the middle series, the middle --window of its time range (kept: the window varies per run)
    k = n_series // 2
    r0 = k * per_series
    ts = tbl["ts"].slice(r0, per_series).to_numpy().astype(np.int64)
    meta = {
        "params": params,
        "entry": entry.to_dict(),
        "artifact_bytes": int(entry.file_size),
        "parquet_bytes": os.path.getsize(pq_path),
        "series_id": [int(tbl["__table_id"][r0].as_py()), int(tbl["__tsid"][r0].as_py())],
        "series_ts": [int(ts[0]), int(ts[-1])],
        "build_s": round(time.perf_counter() - t0, 1),
    }
    del tbl
    with open(meta_path + ".tmp", "w") as f:
        json.dump(meta, f)
    os.replace(meta_path + ".tmp", meta_path)
    return meta


def load_average() -> float:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover - no getloadavg
        return -1.0


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


@numba.njit(nogil=True, cache=True)
def _decompress_frames(fn, dctx, data, src, stored, declared, out, lo, hi):
    """``ZSTD_decompressDCtx`` on frames ``lo <= i < hi`` into ``out`` (reused per frame:
    only libzstd's cost is measured); returns how many did not give their declared length."""
    bad = 0
    for i in range(lo, hi):
        r = zstd_decompress_into(fn, dctx, out.ctypes.data, declared[i], data.ctypes.data + src[i], stored[i])
        if r != declared[i]:
            bad += 1
    return bad


class ZstdFloor:
    """libzstd alone on a full scan's Zstd frames, on ``threads`` threads (see the module doc)."""

    def __init__(self, art, threads: int):
        batch, _ = art.fetch_batch()
        z = batch.chunks[batch.chunks["compression"] == COMP_ZSTD]
        self.data = np.ascontiguousarray(batch.data)
        self.src = z["src_offset"].astype(np.int64)
        self.stored = z["stored_len"].astype(np.int64)
        self.declared = z["decoded_len"].astype(np.int64)
        self.frames = int(z.shape[0])
        self.threads = max(1, threads)
        self.lib = libzstd.get()
        cut = np.linspace(0, self.frames, self.threads + 1).astype(np.int64)
        self.ranges = list(zip(cut[:-1].tolist(), cut[1:].tolist()))
        self.pool = ThreadPoolExecutor(self.threads)

    def _run(self, lo: int, hi: int) -> int:
        out = np.empty(max(1, int(self.declared.max(initial=1))), np.uint8)
        return _decompress_frames(self.lib.decompress_addr, self.lib.dctx(), self.data, self.src, self.stored,
                                  self.declared, out, lo, hi)

    def __call__(self) -> None:
        bad = sum(self.pool.map(lambda r: self._run(*r), self.ranges))
        assert bad == 0, f"{bad} frames failed"


def read_phases(art) -> dict:
    """One full read in its phases, wall seconds, through the public steps that
    ``Artifact.read`` takes: ``navigate`` (the leaves, from the page cache once warm:
    ``Artifact.navigate``), ``tables`` (the batch's block and chunk tables:
    ``plan.build_batch``), ``fetch`` (``plan.fetch_batch``), ``decode`` (the CPU backend)
    and ``assemble`` (the identity columns and the Arrow table: ``frames.to_arrow``)."""
    from gtsamples import frames
    from gtsamples.plan import Projection, Selection, build_batch, fetch_batch
    from gtsamples.storage import ReadStats

    m = art.manifest
    t0 = time.perf_counter()
    sel = Selection.build(None, None, None, None, m.timestamp.unit)
    leaves = art.navigate(sel)
    t1 = time.perf_counter()
    projection = Projection.build(m, None)
    batch = build_batch(leaves, m, sel, projection, source=art.location)
    t2 = time.perf_counter()
    fetch_batch(art.store, art.part_keys, batch, ReadStats())
    t3 = time.perf_counter()
    cols = cpu.decode_batch(batch)
    t4 = time.perf_counter()
    table = frames.to_arrow(m, projection, batch, cols)
    t5 = time.perf_counter()
    assert table.num_rows == m.num_rows
    return {"navigate": t1 - t0, "tables": t2 - t1, "fetch": t3 - t2, "decode": t4 - t3, "assemble": t5 - t4}


def measure_point(point_dir: str, meta: dict, repeat: int, window: float) -> dict:
    store = os.path.join(point_dir, "store")
    pq_path = os.path.join(point_dir, "sst.parquet")
    entry = meta["entry"]
    n = meta["params"]["rows"]
    series = tuple(meta["series_id"])
    lo, hi = meta["series_ts"]
    start = lo + int((hi - lo) * (0.5 - window / 2))
    end = start + max(1, int((hi - lo) * window))
    flt = ((ds.field("__table_id") == series[0]) & (ds.field("__tsid") == pa.scalar(series[1], pa.uint64()))
           & (ds.field("ts") >= pa.scalar(start, pa.timestamp("ms"))) & (ds.field("ts") < pa.scalar(end, pa.timestamp("ms"))))

    art = gs.open_artifact(store, entry=entry, cache=PageCache())
    dset = ds.dataset(pq_path, format="parquet")
    keys = ("ours_full", "pq_full", "zstd_floor", "ours_query", "ds_query", "ours_open", "ours_cold", "ds_cold",
            "ours_query_loop", "ds_query_loop")
    floor = ZstdFloor(art, numba.get_num_threads()) if libzstd.get() is not None else None
    times = {k: [] for k in keys}
    stages = []
    q_rows = None
    load = [load_average()]
    for rep in range(-1, repeat):  # repeat -1 warms up (kernels, page cache, file cache): not counted
        t, got = timed(art.read)
        times["ours_full"].append(t)
        stages.append(cpu.last_stats())
        n_ours = got.num_rows
        del got
        gc.collect()
        t, ref = timed(lambda: pq.read_table(pq_path))
        times["pq_full"].append(t)
        assert ref.num_rows == n_ours == n, (ref.num_rows, n_ours, n)
        del ref
        gc.collect()
        if floor is not None:
            times["zstd_floor"].append(timed(floor)[0])
        t, q = timed(lambda: art.read(series=[series], start=start, end=end))
        times["ours_query"].append(t)
        t, qd = timed(lambda: dset.to_table(filter=flt))
        times["ds_query"].append(t)
        t_open, cold = timed(lambda: gs.open_artifact(store, entry=entry, cache=PageCache()))
        t, qc = timed(lambda: cold.read(series=[series], start=start, end=end))
        times["ours_open"].append(t_open)
        times["ours_cold"].append(t_open + t)
        t, qdc = timed(lambda: ds.dataset(pq_path, format="parquet").to_table(filter=flt))
        times["ds_cold"].append(t)
        assert q.num_rows == qd.num_rows == qc.num_rows == qdc.num_rows, (q.num_rows, qd.num_rows, qc.num_rows)
        if rep < 0:
            assert qd.select(q.schema.names).cast(q.schema).equals(q), "query results differ"
            for v in times.values():
                v.clear()
            stages.clear()
        q_rows = q.num_rows
    # the query in steady state: after the full reads above, a single query also pays for
    # the caches and memory those left behind; here each side runs its query in a loop,
    # interleaved per repeat (medians; ours QUERY_LOOP times, the dataset's 5 times)
    for _ in range(repeat):
        loop = [timed(lambda: art.read(series=[series], start=start, end=end))[0] for _ in range(QUERY_LOOP)]
        times["ours_query_loop"].append(statistics.median(loop))
        loop = [timed(lambda: dset.to_table(filter=flt))[0] for _ in range(5)]
        times["ds_query_loop"].append(statistics.median(loop))
    # the full read in phases, after the interleaved repeats: the fastest of two
    gc.collect()
    phases = [read_phases(art) for _ in range(2)]
    phases = min(phases, key=lambda ph: sum(ph.values()))
    gc.collect()
    load.append(load_average())

    med = statistics.median

    def ratios(num, den):
        return [a / b for a, b in zip(times[num], times[den])]

    full_ratio = ratios("pq_full", "ours_full")
    floor_ratio = ratios("pq_full", "zstd_floor")
    return {
        "rows": n, "per_series": meta["params"]["per_series"], "series": meta["params"]["series"],
        "bytes_per_row": {"ours": meta["artifact_bytes"] / n, "parquet": meta["parquet_bytes"] / n},
        "full_scan": {
            "ours_s": times["ours_full"], "parquet_s": times["pq_full"],
            "ours_rows_per_s": n / med(times["ours_full"]), "parquet_rows_per_s": n / med(times["pq_full"]),
            "ratio": med(full_ratio), "ratio_range": [min(full_ratio), max(full_ratio)],
            # libzstd alone on the scan's frames (None without libzstd): pyarrow / floor bounds "ratio"
            "zstd_floor_s": times["zstd_floor"], "zstd_frames": floor.frames if floor else 0,
            "zstd_threads": floor.threads if floor else 0,
            "floor_ratio": med(floor_ratio) if floor_ratio else None,
        },
        "query": {
            "window": window, "rows_out": q_rows,
            "ours_warm_s": times["ours_query"], "dataset_warm_s": times["ds_query"],
            "ours_cold_s": times["ours_cold"], "dataset_cold_s": times["ds_cold"],
            "ratio_warm": med(ratios("ds_query", "ours_query")),
            "ours_steady_s": times["ours_query_loop"], "dataset_steady_s": times["ds_query_loop"],
            "ratio_steady": med(ratios("ds_query_loop", "ours_query_loop")),
            "ratio_cold": med(ratios("ds_cold", "ours_cold")),
            "ours_open_s": times["ours_open"],
        },
        # cpu.last_stats() of the full reads, the median of each entry: seconds and counts
        "stages": {k: med([s[k] for s in stages]) for k in stages[0]} if stages else {},
        "read_phases_s": phases,
        "load_average": load,
    }


def machine() -> dict:
    """benchmarks/plotting.py's run_info (machine, commit, load) with the CPU model and versions."""
    import numba

    info = _plotting().run_info()
    info["load_avg_start"] = info.pop("load_avg")
    cpu_name = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu_name = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu_name)
    except OSError:  # pragma: no cover - not Linux
        pass
    info.update(cpu=cpu_name, numba_threads=numba.config.NUMBA_NUM_THREADS, pyarrow=pa.__version__,
                date=time.strftime("%Y-%m-%d %H:%M:%S %z"))
    return info


def _plotting():
    sys.path.insert(0, ROOT)
    from benchmarks import plotting

    return plotting


def plot(doc: dict, out_dir: str) -> list[str]:
    """``shapes_throughput.png`` in ``out_dir``: full-scan rows/s against rows per series (a
    line per total rows) and against total rows (a line per rows per series), gtsamples
    solid and pyarrow dashed, and the interleaved ratio against rows per series, in
    benchmarks/plotting.py's style (footer: commit, machine, load), with the bound the
    Zstd floor sets on that ratio (dotted) when measured."""
    pl = _plotting()
    results = doc["results"]
    fig, axes = pl._figure(3, width=15, height=4.6)
    for ax, key, other, xlabel in ((axes[0], "per_series", "grid_rows", "rows per series"),
                                   (axes[1], "grid_rows", "per_series", "total rows")):
        for k, val in enumerate(sorted({r[other] for r in results})):
            pts = sorted((r for r in results if r[other] == val), key=lambda r: r[key])
            xs = [r[key] for r in pts]
            label = f"{pl._rows_label(val)} rows" if other == "grid_rows" else f"{pl._rows_label(val)} rows/series"
            ax.plot(xs, [r["full_scan"]["ours_rows_per_s"] / 1e6 for r in pts], "o-", color=f"C{k}",
                    label=f"gtsamples, {label}")
            ax.plot(xs, [r["full_scan"]["parquet_rows_per_s"] / 1e6 for r in pts], "s--", color=f"C{k}",
                    alpha=0.55, label=f"pyarrow, {label}")
            if other == "grid_rows":  # the robust figure on a shared machine: the interleaved ratio
                axes[2].plot(xs, [r["full_scan"]["ratio"] for r in pts], "o-", color=f"C{k}", label=label)
                floor = [(x, r["full_scan"].get("floor_ratio")) for x, r in zip(xs, pts)]
                floor = [(x, f) for x, f in floor if f is not None]
                if floor:  # the bound libzstd alone sets on that ratio
                    axes[2].plot(*zip(*floor), "^:", color=f"C{k}", alpha=0.55, label=f"{label}: Zstd floor bound")
        ax.set_ylim(bottom=0)
        ax.set_ylabel("full scan, M rows/s (median)")
        ax.set_xlabel(xlabel)
    axes[2].axhline(1.0, color="0.4", lw=0.8, ls=":")
    axes[2].set_ylim(bottom=0)
    axes[2].set_xlabel("rows per series")
    axes[2].set_ylabel("pyarrow time / gtsamples time (median of repeats)")
    for ax in axes:
        ax.set_xscale("log")
        pl._rows_axis(ax.xaxis)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=6.5)
    axes[0].set_title("full scan against rows per series", fontsize=10)
    axes[1].set_title("full scan against total rows", fontsize=10)
    axes[2].set_title("full scan: gtsamples / pyarrow, interleaved", fontsize=10)
    pl._footer(fig, "bench_shapes.py " + doc.get("command", ""), doc.get("info"))
    return [str(pl._save(fig, out_dir, "shapes_throughput.png"))]


def parse_counts(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x.strip()]


#: one-series queries per steady-state loop (gtsamples' side; the dataset's runs 5)
QUERY_LOOP = 20

#: ``--quick``: a subset that fits a few minutes on a 2-core machine.
QUICK_ROWS = (1_000_000, 10_000_000)
QUICK_PER_SERIES = (250, 1_000, 100_000)


def stage_costs(r: dict) -> str:
    """A full read's decoder stages per chunk and per row (``cpu.last_stats()``, median repeat)."""
    st = r["stages"]
    if not st or not st.get("chunks"):
        return ""
    chunks, rows = st["chunks"], st["rows"]
    us_chunk = {k: st[k] * 1e6 / chunks for k in ("decompress", "kernel")}
    ns_row = {k: st[k] * 1e9 / rows for k in ("prepare", "decode", "finish", "total")}
    fs = r["full_scan"]
    floor = ""
    if fs.get("floor_ratio") is not None:
        floor = (f"\n{'':32s}Zstd floor: libzstd alone on the scan's {fs['zstd_frames']:,} frames, "
                 f"{fs['zstd_threads']} threads: {statistics.median(fs['zstd_floor_s']) * 1e3:.0f} ms, "
                 f"pyarrow / floor {fs['floor_ratio']:.2f}x (the bound on the full-scan ratio)")
    ph = r.get("read_phases_s") or {}
    phases = ("" if not ph else f"\n{'':32s}full read, wall ns/row: "
              + ", ".join(f"{k} {v * 1e9 / r['rows']:.1f}" for k, v in ph.items()))
    return (f"{'':32s}stages: {chunks:,.0f} chunks, checks + decompress {us_chunk['decompress']:.2f} us/chunk, "
            f"kernels {us_chunk['kernel']:.2f} us/chunk (CPU); wall ns/row: "
            + ", ".join(f"{k} {v:.1f}" for k, v in ns_row.items()) + phases + floor)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=os.path.join(ROOT, "benchmarks", "out", "shapes"),
                    help="where generated data sets are cached")
    ap.add_argument("--rows", help="total rows, comma separated (default: 1M, 10M, 30M)")
    ap.add_argument("--per-series", help="rows per series, comma separated (default: 50, 250, 1k, 8192, 100k)")
    ap.add_argument("--quick", action="store_true",
                    help=f"rows {QUICK_ROWS} x rows per series {QUICK_PER_SERIES} (unless --rows/--per-series)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--window", type=float, default=0.01, help="query window, a fraction of the series' time range")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the results as JSON here")
    ap.add_argument("--plot", metavar="DIR", help="also draw shapes_throughput.png in DIR (the plots extra)")
    ap.add_argument("--prepare", action="store_true", help="only build (or check) the cached data sets")
    args = ap.parse_args(argv)
    rows_grid = parse_counts(args.rows) if args.rows else (QUICK_ROWS if args.quick else GRID_ROWS)
    per_grid = parse_counts(args.per_series) if args.per_series else (QUICK_PER_SERIES if args.quick
                                                                       else GRID_PER_SERIES)

    os.makedirs(args.dir, exist_ok=True)
    info = machine()
    print(f"{info['cpu']}, {info['cpus']} cores, Python {info['python']}, pyarrow {info['pyarrow']}, "
          f"commit {info['commit']}{'+dirty' if info['dirty'] else ''}, load average {load_average()}")
    header = (f"{'rows':>11s} {'rows/series':>11s} {'series':>8s} | {'full: ours':>11s} {'pyarrow':>11s} "
              f"{'ratio':>6s} | {'1 series warm':>13s} {'ratio':>6s} {'(steady loop)':>20s} | {'cold (open)':>17s} {'ratio':>6s} | "
              f"{'B/row ours':>10s} {'parquet':>8s} | load")
    if not args.prepare:
        print(header)
    results = []
    for rows in rows_grid:
        for per in per_grid:
            if per > rows:
                continue
            meta = ensure_data(args.dir, rows, per, args.seed)
            if args.prepare:
                print(f"{rows:,} rows x {per:,}: {meta['artifact_bytes']:,} B artifact, {meta['parquet_bytes']:,} B "
                      f"Parquet (built in {meta['build_s']} s)", flush=True)
                continue
            r = measure_point(os.path.join(args.dir, f"{rows}x{per}"), meta, args.repeat, args.window)
            r["grid_rows"] = rows  # (rows: what the series fill, a little less when per does not divide it)
            results.append(r)
            fs, q = r["full_scan"], r["query"]
            print(f"{r['rows']:11,d} {per:11,d} {r['series']:8,d} | {fs['ours_rows_per_s'] / 1e6:7.1f} M/s "
                  f"{fs['parquet_rows_per_s'] / 1e6:7.1f} M/s {fs['ratio']:5.2f}x | "
                  f"{statistics.median(q['ours_warm_s']) * 1e3:10.2f} ms {q['ratio_warm']:5.0f}x "
                  f"(steady {statistics.median(q['ours_steady_s']) * 1e3:5.2f} ms {q['ratio_steady']:4.0f}x) | "
                  f"{statistics.median(q['ours_cold_s']) * 1e3:7.2f} ms ({statistics.median(q['ours_open_s']) * 1e3:5.2f}) "
                  f"{q['ratio_cold']:5.0f}x | {r['bytes_per_row']['ours']:10.2f} {r['bytes_per_row']['parquet']:8.2f} | "
                  f"{r['load_average'][0]}-{r['load_average'][1]}", flush=True)
            print(stage_costs(r), flush=True)
    if args.prepare:
        return 0
    info["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    doc = {"info": info, "command": " ".join(sys.argv[1:] if argv is None else argv), "repeat": args.repeat,
           "results": results}
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"results: {args.json}")
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("plot: skipped (matplotlib is not installed: pip install -e '.[plots]')")
            return 0
        for path in plot(doc, args.plot):
            print(f"plot: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
