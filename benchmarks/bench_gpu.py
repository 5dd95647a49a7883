"""GPU backend benchmark: stage times and decoded GB/s, with the CPU backend
and a device-to-device copy of the output size in the same run.

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
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from gtsamples.batch import BLOCK_DTYPE, CHUNK_DTYPE, ChunkBatch  # noqa: E402
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
        if batch.needs_trim:
            cols = cols.take(row_mask(cols.timestamp, batch.start, batch.end))
        best = min(best, time.perf_counter() - t)
    rows = len(cols.timestamp)
    return {"cpu_s": best, "cpu_rows": rows, "cpu_GBps": output_bytes(batch, rows) / best / 1e9,
            "cpu_stages": cpu.last_stats()}  # fmt: skip


def run_gpu(batch: ChunkBatch, repeat: int, to_cudf: bool) -> dict:
    import cupy as cp

    from gtsamples.decode import gpu

    d = cp.empty(len(batch.data) + gpu.HASH_PAD, cp.uint8)
    d[len(batch.data) :] = 0
    d[: len(batch.data)].set(batch.data)
    gpu.decode_batch_gpu(batch, device_data=d, hash_on="device")  # compile, warm pools
    best = None
    for _ in range(repeat):
        cp.cuda.Device().synchronize()
        t = time.perf_counter()
        dt = gpu.decode_batch_gpu(batch, device_data=d, hash_on="device", timings=True)
        if to_cudf:
            t1 = time.perf_counter()
            dt.to_cudf()
            dt.timings["cudf_wrap"] = (time.perf_counter() - t1) * 1e3
        cp.cuda.Device().synchronize()
        wall = time.perf_counter() - t
        if best is None or wall < best[0]:
            best = (wall, dt.timings, dt.num_rows)
        del dt
    wall, timings, rows = best
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
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.repeat = "1e6,1e7", 2
        args.max_cells = 7e7  # 1M and 10M rows x 1 and 4 fields, 1M rows x 64 fields
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
                print(json.dumps(rec, default=float), flush=True)
                if args.json:
                    with open(args.json, "a") as f:
                        f.write(json.dumps(rec, default=float) + "\n")
                del batch
    print_table(rows_out)
    return 0


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
