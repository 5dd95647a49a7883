"""GPU backend benchmark: stage times and decoded GB/s, with the CPU backend
and a device-to-device copy of the output size in the same run.

Headline (``"query": "files"`` records): the path users call, from artifact
files on local disk to a DeviceTable (``Artifact.read_device``: navigation, the
fetch in groups overlapped with the copy to the device, XXH64 on the device,
nvCOMP, the kernels), for 4 fields (``--files-fields``) at every size.  The
artifacts are written by the real writer (``gs.write_artifact``) to a temp
dir.  Keys: ``files_GBps`` (decoded output bytes / wall time of the read,
files to DeviceTable), ``files_wall_s``, ``host_share`` (the share of that wall
time the reading thread was not blocked on the device: 1 - time in device
syncs / wall), ``stages_ms`` (the driver's stages: ``host_*`` host work,
``host_device_wait``, ``navigate`` = read wall - driver wall, device stages by
CUDA events), ``files_cudf_wall_s`` (with the cuDF wrap, when cudf imports),
``device_GBps`` (the same batch decoded from HBM, beside it), ``cpu_files_s``
/ ``cpu_files_GBps`` (``Artifact.read()`` on the CPU from the same files),
``write_s``.  ``--dry-run`` writes and reads the files on the CPU and runs the
GPU read path over a device that does no work (``host_path_*``: the host's
own time on that path; no GPU figure).

Data: a few dozen realistic blocks (8192-row limit, or the decoded-size cap for
many fields) are encoded once by the test encoders (tests/gpu/batchgen.py,
spec-exact, Zstd level 3 when smaller) and tiled into ChunkBatches of 1M..200M
rows (chunks repeated, checksums valid), so batches of any size are built in
seconds without the writer.  Two queries per size:

* ``scan``: every block, every column;
* ``series``: the blocks of one series (0.1% of the rows, at least one block)
  with a [start, end) that cuts its first and last block (trimming).

Stages (ms, CUDA events; host work between launches counts where it delays
them): h2d (stored bytes), upload (tables), hash (XXH64 on the device), nvcomp,
decode (column kernels), trim + compact, assembly (DeviceTable; cuDF wrap when
cudf imports).  ``h2d GB/s``: the stored bytes copied from host memory
(pinned staging, overlapped with nvCOMP from 64 MiB); ``+h2d s`` / ``pageable
s``: wall time of a decode that starts from host memory with that staging /
with one plain pageable copy.  ``device GB/s`` = decoded output bytes / time from compressed
chunks in device memory to final columns (no H2D).  ``copy GB/s`` = a
device-to-device copy of the output size (the bandwidth ceiling).

  python benchmarks/bench_gpu.py                       # default sizes
  python benchmarks/bench_gpu.py --quick               # what device_check.sh runs
  python benchmarks/bench_gpu.py --dry-run --quick     # no GPU: build data, run the CPU side
  python benchmarks/bench_gpu.py --json gpu.jsonl --plot benchmarks/plots   # records, and their PNGs
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from gtsamples.batch import ChunkBatch  # noqa: E402
from gtsamples.format.constants import max_block_rows  # noqa: E402


# ----------------------------------------------------------------------------- data


def base_blocks(n_fields: int, n_base: int, seed: int = 0):
    """Realistic encoded blocks: 10 s interval with jitter, decreasing-ish
    sequences, puts, random-walk floats with 2 decimals and ~5% nulls."""
    from tests.gpu.batchgen import BlockSpec, build_batch

    rng = np.random.default_rng(seed)
    rows = max_block_rows(n_fields)
    blocks = []
    t = 1_700_000_000_000
    for b in range(n_base):
        ts = t + np.cumsum(10_000 + rng.integers(-3, 4, rows) * (rng.random(rows) < 0.2)).astype(np.int64)
        t = int(ts[-1]) + 10_000
        seq = (1_000_000 + b * rows + np.arange(rows)).astype(np.uint64)
        ops = np.ones(rows, np.uint8)
        fields = []
        for _ in range(n_fields):
            vals = np.round(np.cumsum(rng.normal(size=rows)) * 100) / 100 + 50
            valid = rng.random(rows) > 0.05
            valid[0] = True
            fields.append((vals, valid))
        blocks.append(BlockSpec(1, 1000 + b, ts, seq, ops, fields))
    names = tuple(f"f{k}" for k in range(n_fields))
    return build_batch(blocks, names, compression="mixed").batch


def tile(base: ChunkBatch, n_rows: int, start=None, end=None, series_blocks=None) -> ChunkBatch:
    """A batch of ~n_rows made of copies of ``base``'s blocks (tsid made unique
    per copy), or only ``series_blocks`` block indices of such a batch."""
    nb = len(base.blocks)
    rows_per = int(base.blocks["rows"].sum())
    copies = max(1, -(-n_rows // rows_per))
    bl = np.tile(base.blocks, copies)
    bl["tsid"] = np.arange(len(bl), dtype=np.uint64) // 4  # series of 4 blocks
    ch_per = len(base.chunks)
    ch = np.tile(base.chunks, copies)
    k = np.repeat(np.arange(copies, dtype=np.int64), ch_per)
    if series_blocks is not None:
        keep_b = np.zeros(len(bl), bool)
        keep_b[series_blocks] = True
        keep_c = keep_b[(ch["block"].astype(np.int64) + k * nb)]
        ch, k = ch[keep_c], k[keep_c]
        newidx = np.cumsum(keep_b) - 1
        block = newidx[ch["block"].astype(np.int64) + k * nb]
        bl = bl[keep_b]
    else:
        block = ch["block"].astype(np.int64) + k * nb
    ch = ch.copy()
    ch["block"] = block
    # data: only the chunk bytes, each copy once, chunks in order
    starts = ch["src_offset"].astype(np.int64)
    lens = ch["stored_len"].astype(np.int64)
    new_off = np.zeros(len(ch), np.int64)
    np.cumsum(lens[:-1], out=new_off[1:])
    total = int(new_off[-1] + lens[-1]) if len(ch) else 0
    data = np.empty(total, np.uint8)
    src = base.data
    # every copy of base chunk i0 gets its bytes in one vectorized scatter
    for i0 in range(ch_per):
        sel = np.flatnonzero(starts == int(base.chunks["src_offset"][i0]))
        if sel.size == 0:
            continue
        piece = src[int(base.chunks["src_offset"][i0]) : int(base.chunks["src_offset"][i0] + base.chunks["stored_len"][i0])]
        data[(new_off[sel][:, None] + np.arange(len(piece))[None, :]).ravel()] = np.tile(piece, sel.size)
    ch["src_offset"] = new_off
    rows = bl["rows"].astype(np.int64)
    out = np.zeros(len(bl), np.int64)
    np.cumsum(rows[:-1], out=out[1:])
    bl["out_row"] = out
    ch["out_row"] = out[ch["block"].astype(np.int64)]
    bl["trim"] = 0
    if start is not None or end is not None:
        lo = np.full(len(bl), np.iinfo(np.int64).min) if start is None else np.full(len(bl), start)
        hi = np.full(len(bl), np.iinfo(np.int64).max) if end is None else np.full(len(bl), end)
        bl["trim"] = (bl["min_timestamp"] < lo) | (bl["max_timestamp"] >= hi)
    return ChunkBatch(ch, bl, data, int(rows.sum()), base.field_names, start=start, end=end, source="bench")


def series_query(base: ChunkBatch, n_rows: int) -> ChunkBatch:
    """The blocks of ~0.1% of the rows (at least 2), trimmed inside the first and last block."""
    rows_per_block = int(base.blocks["rows"][0])
    n_blocks_total = max(1, n_rows // rows_per_block)
    want = max(2, n_blocks_total // 1000)
    b0 = n_blocks_total // 3
    sel = np.arange(b0, min(b0 + want, n_blocks_total))
    full = tile(base, n_rows)
    first, last = full.blocks[sel[0]], full.blocks[sel[-1]]
    start = int(first["min_timestamp"] + (first["max_timestamp"] - first["min_timestamp"]) // 2)
    end = int(last["min_timestamp"] + (last["max_timestamp"] - last["min_timestamp"]) // 2)
    if end <= start:
        end = start + 1
    return tile(base, n_rows, start=start, end=end, series_blocks=sel)


def output_bytes(batch: ChunkBatch, rows: int | None = None) -> int:
    n = batch.n_rows if rows is None else rows
    nf = len(batch.field_names)
    return n * (4 + 8 + 8 + 8 + 1 + 8 * nf) + nf * ((n + 7) // 8)


# ----------------------------------------------------------------------------- runs


def run_cpu(batch: ChunkBatch, repeat: int) -> dict:
    from gtsamples.batch import row_mask
    from gtsamples.decode import cpu

    cpu.decode_batch(batch)  # compile / warm
    best = 1e9
    for _ in range(repeat):
        t = time.perf_counter()
        cols = cpu.decode_batch(batch)
        rows = len(cols.timestamp)
        if batch.needs_trim:  # the kept rows of every column, as frames.to_arrow keeps them
            m = row_mask(cols.timestamp, batch.start, batch.end)
            kept = [c[m] for c in (cols.timestamp, cols.sequence, cols.op_type, *cols.values) if c is not None]
            rows = len(kept[0])
        best = min(best, time.perf_counter() - t)
    return {"cpu_s": best, "cpu_rows": rows, "cpu_GBps": output_bytes(batch, rows) / best / 1e9,
            "cpu_stages": cpu.last_stats()}  # fmt: skip


def run_gpu(batch: ChunkBatch, repeat: int, to_cudf: bool) -> dict:
    import cupy as cp

    from gtsamples.decode import gpu

    d = cp.empty(len(batch.data) + gpu.HASH_PAD, cp.uint8)
    d[len(batch.data) :] = 0
    d[: len(batch.data)].set(batch.data)
    gpu.decode_batch_gpu(batch, device_data=d, hash_on="device")  # compile, warm pools

    def decode(d=d):
        dt = gpu.decode_batch_gpu(batch, device_data=d, hash_on="device", timings=True)
        if to_cudf:
            t1 = time.perf_counter()
            dt.to_cudf()
            dt.timings["cudf_wrap"] = (time.perf_counter() - t1) * 1e3
        return dt

    wall, dt = best_of(decode, repeat, cp.cuda.Device().synchronize)
    timings, rows = dt.timings, dt.num_rows
    del dt
    out_b = output_bytes(batch, rows)
    # with H2D of the stored bytes from host memory: one pageable copy, and the
    # default (pinned staging from 4 MiB, copy/nvCOMP overlap from 64 MiB)
    h2d = {}
    for mode in ("pageable", "auto"):
        gpu.decode_batch_gpu(batch, h2d=mode)  # warm pinned slots and pools
        cp.cuda.Device().synchronize()
        t = time.perf_counter()
        dt = gpu.decode_batch_gpu(batch, timings=True, h2d=mode)
        cp.cuda.Device().synchronize()
        h2d[mode] = (time.perf_counter() - t, dt.timings.get("h2d_copy", dt.timings.get("h2d", float("nan"))))
        del dt
    wall_h2d, h2d_ms = h2d["auto"]
    # device-to-device copy of the output size
    src = cp.empty(out_b, cp.uint8)
    dst = cp.empty_like(src)
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    dst[...] = src
    e0.record()
    for _ in range(3):
        dst[...] = src
    e1.record()
    e1.synchronize()
    copy_s = cp.cuda.get_elapsed_time(e0, e1) / 3 / 1e3
    del src, dst, d
    cp.get_default_memory_pool().free_all_blocks()
    dev_ms = timings["total_device"] - timings.get("h2d", 0.0)
    kern_ms = timings.get("decode", 0.0)
    return {
        "gpu_wall_s": wall, "gpu_rows": rows, "stages_ms": timings, "device_ms": dev_ms,
        "device_GBps": out_b / (dev_ms / 1e3) / 1e9,
        "kernels_GBps": out_b / (kern_ms / 1e3) / 1e9 if kern_ms else float("nan"),
        "copy_GBps": 2 * out_b / copy_s / 1e9,  # read + write
        "copy_out_GBps": out_b / copy_s / 1e9,  # output bytes per second of copying
        "with_h2d_wall_s": wall_h2d, "h2d_ms": h2d_ms,
        "with_h2d_pageable_wall_s": h2d["pageable"][0], "h2d_pageable_ms": h2d["pageable"][1],
        "h2d_GBps": len(batch.data) / (h2d_ms / 1e3) / 1e9 if h2d_ms and h2d_ms == h2d_ms else float("nan"),
        "host_ms": sum(v for k, v in timings.items() if k.startswith("host_")),
    }  # fmt: skip


# ----------------------------------------------------------------------------- from files


def files_table(n_rows: int, n_fields: int, seed: int = 0):
    """A table in spec order like base_blocks' data: series of 32,768 rows (four
    full blocks), 10 s steps with jitter, decreasing sequences, random walks with 2
    decimals and ~5% nulls."""
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    per = 32_768
    series = max(1, -(-n_rows // per))
    n = series * per
    sid = np.repeat(np.arange(series, dtype=np.uint64), per)
    step = 10_000 + rng.integers(-3, 4, n) * (rng.random(n) < 0.2)
    ts = 1_700_000_000_000 + (np.cumsum(step.reshape(series, per), axis=1).reshape(-1)).astype(np.int64)
    cols = {
        "__table_id": pa.array((sid // 64 + 1).astype(np.uint32)),
        "__tsid": pa.array(sid * np.uint64(7919) + np.uint64(13)),
        "timestamp": pa.array(ts, pa.timestamp("ms")),
        "__sequence": pa.array(np.arange(n, dtype=np.uint64)[::-1] + np.uint64(1_000_000)),
        "__op_type": pa.array(np.ones(n, np.uint8)),
    }
    for k in range(n_fields):
        vals = np.round(np.cumsum(rng.normal(size=n)) * 100) / 100 + 50
        cols[f"f{k}"] = pa.array(vals, mask=rng.random(n) < 0.05)
    return pa.table(cols)


def write_files(n_rows: int, n_fields: int, root: str):
    """The artifact of ``files_table`` written by ``gs.write_artifact``: (artifact, write seconds)."""
    import gtsamples as gs
    from gtsamples.cache import PageCache

    table = files_table(n_rows, n_fields)
    t = time.perf_counter()
    entry = gs.write_artifact(table, root, region_id=1, source_file_id=str(uuid.uuid4()),
                              generation=str(uuid.uuid4()), timestamp_column_id=0,
                              field_column_ids=list(range(1, n_fields + 1)))  # fmt: skip
    write_s = time.perf_counter() - t
    return gs.open_artifact(root, entry=entry, cache=PageCache()), write_s, table.num_rows


class _HostTimer:
    """The driver's timer without CUDA events: host stages and wall only."""

    def __init__(self):
        self.t0 = time.perf_counter()
        self.host: dict[str, float] = {}

    def mark(self, name):
        pass

    def span(self, *a):
        pass

    def host_stage(self, name):
        import contextlib

        @contextlib.contextmanager
        def cm():
            t = time.perf_counter()
            try:
                yield
            finally:
                self.host[name] = self.host.get(name, 0.0) + (time.perf_counter() - t) * 1e3

        return cm()

    def result(self):
        out = {"host_" + k: v for k, v in self.host.items()}
        out["wall"] = (time.perf_counter() - self.t0) * 1e3
        return out


class NullDevice:
    """The driver's device interface doing no device work (``--dry-run``): what
    remains is the host's own time on the GPU read path (planning, fetch, frame
    check, tables).  Staged copies only wait for the fetch; nvCOMP and the
    kernels are no-ops; no error is ever found."""

    def __init__(self):
        from gtsamples.decode.gpu import nvcomp as nv

        self.nv = nv
        self._host = None

    def empty(self, n, dtype):
        return np.empty(n, dtype)

    def zeros(self, n, dtype):
        return np.zeros(n, dtype)

    def filled(self, n, dtype, byte):
        return np.empty(n, dtype)

    def upload(self, host):
        return np.array(host, copy=True)

    def copy_in(self, dev, host):
        pass

    def to_host(self, dev):
        return np.array(dev, copy=True)

    @staticmethod
    def ptr(dev):
        return int(dev.ctypes.data)

    def stream_ptr(self):
        return 0

    def keep_until_done(self, objs):
        pass

    def kernel(self, file, name):
        return lambda grid, block, args: None

    def nvcomp(self):
        return None

    def zstd_input_alignment(self):
        return 1

    def zstd_plan(self, declared, temp_budget):
        return self.nv.plan_subbatches(declared, temp_budget, self.nv.estimate_temp_bytes)

    def zstd(self, jobs, table, temp_budget, plan=None, before=None):
        for k in range(len(plan or [])):
            if before is not None:
                before(k)
        return np.zeros(len(jobs), np.int32), jobs.declared.copy()

    def host_staging(self, nbytes):  # a reused buffer, as the pinned pool reuses its own
        if self._host is None or self._host.size < nbytes:
            self._host = np.empty(nbytes, np.uint8)
        buf = self._host

        class _Buf:
            array = buf[:nbytes]

            def release(self, after=None):
                pass

        return _Buf()

    def stage_h2d(self, dst, host, tp, timing=False, arrivals=None):
        """Returns at once, as the real copy does; waiting on a segment waits for its bytes."""

        class _Events(list):
            def __getitem__(self, k):
                if arrivals is not None:
                    lo, hi = tp.segments[k]
                    arrivals.wait(int(lo), int(hi))
                return None

        return _Events([None] * len(tp.segments)), None

    def wait(self, event):
        pass

    def timer(self, enabled):
        return _HostTimer()


def run_files(art, n_out_rows: int, repeat: int, dry_run: bool, no_cpu: bool, to_cudf: bool) -> dict:
    """Files on local disk (page cache warm: just written) -> DeviceTable."""
    from gtsamples.decode import gpu
    from gtsamples.decode.gpu import fetch as gpu_fetch

    rec: dict = {}
    if not no_cpu:
        art.read()  # warm
        best = min(_timed(art.read) for _ in range(repeat))
        rec.update(cpu_files_s=best)
    if dry_run:
        real = gpu.decode_batch_gpu

        def host_only(batch, **kw):
            return real(batch, _device=NullDevice(), timings=True, **kw)

        gpu.decode_batch_gpu = host_only
        try:
            gpu_fetch.read_artifact(art)  # warm: numba, the pools
            wall, dt = best_of(lambda: gpu_fetch.read_artifact(art)[0], repeat)
        finally:
            gpu.decode_batch_gpu = real
        timings = dict(dt.timings, navigate=wall * 1e3 - dt.timings.get("wall", 0.0))
        rec.update(host_path_wall_s=wall, host_path_stages_ms=timings,
                   host_path_GBps=rec_out_bytes(art, n_out_rows) / wall / 1e9)  # fmt: skip
        return rec
    import cupy as cp

    gpu_fetch.read_artifact(art)  # warm: kernels, pools, pinned buffers
    wall, dt = best_of(lambda: gpu_fetch.read_artifact(art, timings=True)[0], repeat, cp.cuda.Device().synchronize)
    timings, nbytes = dt.timings, dt.nbytes
    del dt
    stages = dict(timings, navigate=wall * 1e3 - timings.get("wall", 0.0))
    rec.update(files_wall_s=wall, files_GBps=nbytes / wall / 1e9, stages_ms=stages,
               host_share=max(0.0, 1.0 - stages.get("host_device_wait", 0.0) / 1e3 / wall))  # fmt: skip
    if to_cudf:
        t = time.perf_counter()
        art.read(device="gpu")
        cp.cuda.Device().synchronize()
        rec["files_cudf_wall_s"] = time.perf_counter() - t
    # the same batch decoded from HBM, beside it
    batch, _ = art.plan()
    d = cp.empty(len(batch.data) + gpu.HASH_PAD, cp.uint8)
    d[len(batch.data):] = 0
    d[: len(batch.data)].set(batch.data)
    gpu.decode_batch_gpu(batch, device_data=d)
    dt = gpu.decode_batch_gpu(batch, device_data=d, timings=True)
    dev_ms = dt.timings["total_device"] - dt.timings.get("h2d", 0.0)
    rec.update(device_ms=dev_ms, device_GBps=dt.nbytes / (dev_ms / 1e3) / 1e9)
    del d, dt
    cp.get_default_memory_pool().free_all_blocks()
    return rec


def best_of(fn, repeat: int, sync=lambda: None):
    """``(fastest wall seconds, its result)`` of ``repeat`` runs of ``fn``, each
    between two ``sync`` calls (the device idle before and done after)."""
    best = None
    for _ in range(max(1, repeat)):
        sync()
        t = time.perf_counter()
        out = fn()
        sync()
        wall = time.perf_counter() - t
        if best is None or wall < best[0]:
            best = (wall, out)
        out = None
    return best


def rec_out_bytes(art, n_rows: int) -> int:
    return n_rows * (4 + 8 + 8 + 8 + 1 + 8 * len(art.manifest.fields)) + len(art.manifest.fields) * ((n_rows + 7) // 8)


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def files_records(args, sizes, to_cudf) -> list[dict]:
    out = []
    for nf in [int(f) for f in args.files_fields.split(",") if f]:
        for n in sizes:
            if n * (nf + 3) > args.max_cells:
                continue
            with tempfile.TemporaryDirectory(prefix="gts-bench-") as root:
                art, write_s, n_rows = write_files(n, nf, root)
                st = [f.file_size for f in art.manifest.files]
                rec = {"fields": nf, "rows": n, "query": "files", "batch_rows": n_rows,
                       "stored_MB": sum(st) / 1e6, "output_MB": rec_out_bytes(art, n_rows) / 1e6,
                       "write_s": write_s, "dry_run": bool(args.dry_run)}  # fmt: skip
                rec.update(run_files(art, n_rows, args.repeat, args.dry_run, args.no_cpu, to_cudf))
                if "cpu_files_s" in rec:
                    rec["cpu_files_GBps"] = rec["output_MB"] * 1e6 / rec["cpu_files_s"] / 1e9
            out.append(rec)
            emit(rec, args.json)
    return out


def emit(rec: dict, json_path: str | None) -> None:
    """Print one record, and append it to the JSON lines file."""
    print(json.dumps(rec, default=float), flush=True)
    if json_path:
        with open(json_path, "a") as f:
            f.write(json.dumps(rec, default=float) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1e6,1e7,1e8,2e8", help="rows, comma separated")
    ap.add_argument("--fields", default="1,4,64")
    ap.add_argument("--max-cells", type=float, default=3.2e9, help="skip size x fields above this many values")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="small sizes for device_check.sh")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: build batches, run the CPU backend")
    ap.add_argument("--no-cpu", action="store_true")
    ap.add_argument("--json", help="append one JSON object per run to this file")
    ap.add_argument("--files-fields", default="4", help="fields of the files -> DeviceTable records (comma separated)")
    ap.add_argument("--plot", metavar="DIR", help="also draw gpu_throughput.png and gpu_stages.png in DIR "
                                                   "(benchmarks/plotting.py)")
    args = ap.parse_args(argv)
    if args.quick:  # device_check.sh's bench step: the 4-field figures its summary reads, within its timeout
        args.sizes, args.fields, args.repeat = "1e6,1e7", "4", 2
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    fields = [int(f) for f in args.fields.split(",")]
    to_cudf = False
    if not args.dry_run:
        from gtsamples.decode import gpu

        if not gpu.is_gpu_available(require_nvcomp=True):
            print("no usable GPU (CuPy device + libnvcomp); use --dry-run", file=sys.stderr)
            return 2
        try:
            import cudf  # noqa: F401

            to_cudf = True
        except ImportError:
            pass
    files_out = files_records(args, sizes, to_cudf)
    rows_out = []
    for nf in fields:
        t = time.perf_counter()
        base = base_blocks(nf, n_base=8 if nf >= 64 else 16)
        enc_s = time.perf_counter() - t
        for n in sizes:
            if n * (nf + 3) > args.max_cells:
                continue
            for query in ("scan", "series"):
                t = time.perf_counter()
                batch = tile(base, n) if query == "scan" else series_query(base, n)
                build_s = time.perf_counter() - t
                rec = {"fields": nf, "rows": n, "query": query, "batch_rows": batch.n_rows,
                       "chunks": len(batch.chunks), "stored_MB": len(batch.data) / 1e6,
                       "output_MB": output_bytes(batch) / 1e6, "build_s": build_s, "encode_s": enc_s}  # fmt: skip
                if not args.no_cpu and (query == "series" or n <= 5e7 or args.dry_run):
                    rec.update(run_cpu(batch, 1 if n > 1e7 else args.repeat))
                if not args.dry_run:
                    rec.update(run_gpu(batch, args.repeat, to_cudf))
                    if "cpu_s" in rec:
                        rec["speedup"] = rec["cpu_s"] / (rec["device_ms"] / 1e3)
                rows_out.append(rec)
                emit(rec, args.json)
                del batch
    print_files_table(files_out)
    print_table(rows_out)
    if args.plot:
        from benchmarks import plotting

        for path in plotting.render("gpu", files_out + rows_out, args.plot):
            print(f"plot: {path}")
    return 0


def print_files_table(rows) -> None:
    """Files -> DeviceTable (the headline), with its HBM decode and the CPU read beside it."""
    if not rows:
        return
    print(f"{'fields':>6} {'rows':>10} {'out MB':>9} {'files GB/s':>10} {'wall s':>7} {'host share':>10} "
          f"{'HBM GB/s':>9} {'cpu GB/s':>9} {'nav ms':>7} {'fetch ms':>8} {'check ms':>8} {'dev wait ms':>11} "
          f"{'host-path GB/s':>14}")  # fmt: skip
    nan = float("nan")
    for r in rows:
        s = r.get("stages_ms") or r.get("host_path_stages_ms") or {}
        print(f"{r['fields']:>6} {r['batch_rows']:>10} {r['output_MB']:>9.1f} {r.get('files_GBps', nan):>10.2f} "
              f"{r.get('files_wall_s', nan):>7.3f} {r.get('host_share', nan):>10.2f} {r.get('device_GBps', nan):>9.1f} "
              f"{r.get('cpu_files_GBps', nan):>9.2f} {s.get('navigate', nan):>7.1f} {s.get('host_fetch_wait', nan):>8.1f} "
              f"{s.get('host_precheck', nan):>8.1f} {s.get('host_device_wait', nan):>11.1f} "
              f"{r.get('host_path_GBps', nan):>14.2f}")  # fmt: skip


def print_table(rows) -> None:
    hdr = f"{'fields':>6} {'rows':>10} {'query':>6} {'out MB':>9} {'cpu GB/s':>9} {'dev GB/s':>9} " \
          f"{'kern GB/s':>9} {'copy GB/s':>9} {'speedup':>8} {'nvcomp ms':>9} {'decode ms':>9} {'trim ms':>8} " \
          f"{'h2d GB/s':>8} {'+h2d s':>7} {'pageable s':>10}"
    print(hdr)
    for r in rows:
        s = r.get("stages_ms", {})
        trim = s.get("trim", 0.0) + s.get("compact", 0.0)
        print(f"{r['fields']:>6} {r['batch_rows']:>10} {r['query']:>6} {r['output_MB']:>9.1f} "
              f"{r.get('cpu_GBps', float('nan')):>9.2f} {r.get('device_GBps', float('nan')):>9.1f} "
              f"{r.get('kernels_GBps', float('nan')):>9.1f} {r.get('copy_out_GBps', float('nan')):>9.1f} "
              f"{r.get('speedup', float('nan')):>8.1f} {s.get('nvcomp', float('nan')):>9.2f} "
              f"{s.get('decode', float('nan')):>9.2f} {trim:>8.2f} {r.get('h2d_GBps', float('nan')):>8.1f} "
              f"{r.get('with_h2d_wall_s', float('nan')):>7.3f} "
              f"{r.get('with_h2d_pageable_wall_s', float('nan')):>10.3f}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
