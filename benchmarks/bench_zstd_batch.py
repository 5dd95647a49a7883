"""Zstd batching strategies and XXH64 for the CPU backend.

Builds ~10M values of realistic chunks (8,192-row blocks: delta-of-delta
timestamps with jitter, XOR-encoded float gauges), compresses each chunk with
Zstd level 3 as the default writer does, and measures, on the same batch:

* xxh64: per-chunk ``xxhash.xxh64_intdigest`` loop, numba xxh64 (prange), and the
  numba kernel ``gtsamples.decode.cpu`` uses (``xxh64.checksums_ok``);
* the structural frame check (``check_zstd_frames``);
* ``ZstdDecompressor.multi_decompress_to_buffer`` (threads 1, 2, N) + copy into
  one scratch buffer;
* a thread pool of ``ZstdDecompressor.decompress(max_output_size=declared)``
  (one task per chunk, and one contiguous range per thread) + copy;
* libzstd's ``ZSTD_decompressDCtx`` called from a numba loop straight into the
  scratch buffer (what the backend does, :mod:`gtsamples.format.libzstd`), serial
  and one range per thread;
* the full ``decode_batch`` (checksums, frame check, decompression, numba decode).

Throughput is reported as MB/s of *decoded* bytes for decompression and of
*stored* bytes for hashing/checking (best and median wall time over interleaved
rounds), plus the median process CPU time (all threads), which is robust to
noisy neighbours.  Run::

    .venv/bin/python benchmarks/bench_zstd_batch.py [--values 10000000] [--threads N] [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
import xxhash
import zstandard

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from gtsamples.batch import BLOCK_DTYPE, CHUNK_DTYPE, ChunkBatch  # noqa: E402
from gtsamples.decode import cpu
from gtsamples.format import libzstd  # noqa: E402
from gtsamples.format.libzstd import zstd_decompress_into  # noqa: E402
from gtsamples.format.zstd_frames import check_zstd_frames  # noqa: E402
from gtsamples.format.varint import encode_uvarint_array  # noqa: E402

ROWS = 8192


def _zigzag(x: np.ndarray) -> np.ndarray:
    s = x.view(np.int64)
    return ((s << 1) ^ (s >> 63)).view(np.uint64)


def enc_ts_dod(ts: np.ndarray) -> bytes:
    u = ts.view(np.uint64)
    d = u[1:] - u[:-1]
    dd = np.empty_like(d)
    dd[0] = d[0]
    dd[1:] = d[1:] - d[:-1]
    return u[:1].tobytes() + encode_uvarint_array(_zigzag(dd))


def enc_f64_xor(values: np.ndarray) -> bytes:
    bits = values.view(np.uint64)
    return b"\x00" + bits[:1].tobytes() + encode_uvarint_array(bits[1:] ^ bits[:-1])


def build_batch(n_values: int, seed: int = 0) -> tuple[ChunkBatch, int]:
    """Blocks of one timestamp chunk and one float chunk (sequence/op not wanted)."""
    rng = np.random.default_rng(seed)
    n_blocks = max(1, n_values // (2 * ROWS))
    cctx = zstandard.ZstdCompressor(level=3)
    stored, rows_meta = [], []
    t0 = 1_700_000_000_000
    for b in range(n_blocks):
        # 1 s scrape interval in ms with jitter, a gauge with two decimals
        ts = t0 + np.cumsum(rng.integers(995, 1006, ROWS)).astype(np.int64)
        t0 = int(ts[-1])
        vals = np.round(50 + np.cumsum(rng.normal(0, 0.5, ROWS)), 2)
        for slot, enc, payload, (lo, hi) in (
            (0, 2, enc_ts_dod(ts), (int(ts[0]), int(ts[-1]))),
            (3, 5, enc_f64_xor(vals), (int(ts[0]), int(ts[-1]))),
        ):
            comp = cctx.compress(payload)
            if len(comp) < len(payload):
                stored.append(comp)
                c = 1
            else:
                stored.append(payload)
                c = 0
            rows_meta.append((b, slot, enc, c, len(payload), lo, hi))
    n = len(stored)
    chunks = np.zeros(n, dtype=CHUNK_DTYPE)
    blocks = np.zeros(n_blocks, dtype=BLOCK_DTYPE)
    pos = 0
    for i, (b, slot, enc, c, dec, lo, hi) in enumerate(rows_meta):
        s = stored[i]
        chunks[i] = (0, b, 16 + pos, len(s), dec, xxhash.xxh64_intdigest(s), enc, c, 1 if slot == 0 else 4,
                     slot, 0, ROWS, 0, b * ROWS, pos, lo, hi)
        pos += len(s)
    for b in range(n_blocks):
        blocks[b] = (0, 0, b, 1, 1, 0, 0, b, ROWS, b * ROWS, 0)
    blocks["min_timestamp"] = chunks["min_timestamp"][::2]
    blocks["max_timestamp"] = chunks["max_timestamp"][::2]
    data = np.frombuffer(b"".join(stored), dtype=np.uint8).copy()
    batch = ChunkBatch(chunks, blocks, data, n_blocks * ROWS, ("v",), want_sequence=False, want_op_type=False,
                       source="bench")
    return batch, 2 * n_blocks * ROWS


@numba.njit(nogil=True)
def libzstd_range(fn, dctx, data, scratch, offs, lens, decl, dec_off, lo, hi):
    """Decompress chunks ``lo..hi`` into their scratch slots with libzstd; the failure count."""
    bad = 0
    src, dst = np.int64(data.ctypes.data), np.int64(scratch.ctypes.data)
    for i in range(lo, hi):
        r = zstd_decompress_into(fn, dctx, dst + dec_off[i], decl[i], src + offs[i], lens[i])
        bad += r != decl[i]
    return bad


def run_interleaved(cases, rounds: int):
    """Time every case once per round, interleaved (fair under noisy neighbours).

    Returns ``({name: [wall seconds]}, {name: [process CPU seconds, all threads]})``.
    """
    times = {name: [] for name, *_ in cases}
    cpu_times = {name: [] for name, *_ in cases}
    for _ in range(rounds):
        for name, fn, *_ in cases:
            c = time.process_time()
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
            cpu_times[name].append(time.process_time() - c)
    return times, cpu_times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--values", type=int, default=10_000_000)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    T = args.threads

    batch, n_values = build_batch(args.values)
    ch = batch.chunks
    z = np.flatnonzero(ch["compression"] == 1)
    offs = ch["src_offset"][z].astype(np.uint64)
    lens = ch["stored_len"][z].astype(np.uint32)
    decl = ch["decoded_len"][z].astype(np.uint32)
    stored_mb = batch.data.nbytes / 1e6
    zstored_mb = float(lens.sum()) / 1e6
    decoded_mb = float(decl.sum()) / 1e6
    dec_off = np.zeros(len(z) + 1, dtype=np.int64)
    np.cumsum(decl, out=dec_off[1:])
    scratch = np.empty(int(dec_off[-1]), dtype=np.uint8)
    print(f"chunks {len(ch)} ({len(z)} zstd), values {n_values:,}, stored {stored_mb:.1f} MB, "
          f"zstd stored {zstored_mb:.1f} MB -> decoded {decoded_mb:.1f} MB "
          f"(ratio {decoded_mb / zstored_mb:.2f}), threads {T}, cpus {os.cpu_count()}, "
          f"loadavg {os.getloadavg()[0]:.2f}")

    cases = []  # (name, fn, MB, unit)

    # --- xxh64 -------------------------------------------------------------
    mv = memoryview(batch.data)
    starts = ch["src_offset"].tolist()
    ends = (ch["src_offset"] + ch["stored_len"]).tolist()

    def xxh_loop():
        h = xxhash.xxh64_intdigest
        return [h(mv[a:b]) for a, b in zip(starts, ends)]

    out = np.empty(len(ch), dtype=np.uint64)
    all_idx = np.arange(len(ch), dtype=np.int64)
    src_u64 = np.ascontiguousarray(ch["src_offset"], dtype=np.uint64)
    len_u32 = np.ascontiguousarray(ch["stored_len"], dtype=np.uint32)

    def xxh_numba():
        cpu.xxh64.xxh64_chunks(batch.data, src_u64, len_u32, all_idx, out)

    cases += [
        ("xxh64 per-chunk python loop", xxh_loop, stored_mb, "stored"),
        ("xxh64 numba prange (all chunks)", xxh_numba, stored_mb, "stored"),
        ("xxh64 hybrid (gtsamples.decode.cpu)",
         lambda: cpu.xxh64.checksums_ok(batch, np.zeros(len(ch), np.uint32)), stored_mb, "stored"),
        ("xxh64 one call over the whole buffer", lambda: xxhash.xxh64_intdigest(mv), stored_mb, "stored"),
    ]

    # --- structural check ----------------------------------------------------
    flags = np.zeros(len(z), dtype=np.uint32)
    check_zstd_frames(batch.data, offs, lens, decl, flags)
    assert not flags.any()
    cases.append(("check_zstd_frames (numba prange)",
                  lambda: check_zstd_frames(batch.data, offs, lens, decl, flags), zstored_mb, "stored"))

    # --- decompression -------------------------------------------------------
    dctx = zstandard.ZstdDecompressor()
    segments = np.empty((len(z), 2), dtype=np.uint64)
    segments[:, 0] = offs
    segments[:, 1] = lens
    sizes = decl.astype(np.uint64)

    def multi(threads):
        def run():
            res = dctx.multi_decompress_to_buffer(
                zstandard.BufferWithSegments(batch.data, segments.tobytes()),
                decompressed_sizes=sizes.tobytes(), threads=threads)
            o = dec_off.tolist()
            for i in range(len(res)):
                scratch[o[i]:o[i + 1]] = np.frombuffer(res[i], dtype=np.uint8)
        return run

    for th in sorted({1, 2, T}):
        cases.append((f"multi_decompress_to_buffer threads={th} + copy", multi(th), decoded_mb, "decoded"))

    zs = offs.tolist()
    ze = (offs + lens).tolist()
    zd = decl.tolist()
    do = dec_off.tolist()
    pool = ThreadPoolExecutor(T)
    tls_dctx = [zstandard.ZstdDecompressor() for _ in range(T)]

    def one(i, d=dctx):
        out = d.decompress(mv[zs[i]:ze[i]], max_output_size=zd[i], allow_extra_data=False)
        scratch[do[i]:do[i + 1]] = np.frombuffer(out, dtype=np.uint8)

    def pool_per_chunk():
        list(pool.map(lambda i: one(i, zstandard.ZstdDecompressor()), range(len(zs))))

    def pool_ranges():
        bounds = np.linspace(0, len(zs), T + 1).astype(int)

        def work(k):
            d = tls_dctx[k]
            for i in range(bounds[k], bounds[k + 1]):
                one(i, d)

        list(pool.map(work, range(T)))

    def serial():
        for i in range(len(zs)):
            one(i)

    z_lib = libzstd.get()
    if z_lib is not None:
        lz = [np.ascontiguousarray(a, dtype=np.int64) for a in (offs, lens, decl, dec_off)]
        data_c = np.ascontiguousarray(batch.data)

        def lib_serial():
            assert libzstd_range(z_lib.decompress_addr, z_lib.dctx(), data_c, scratch, *lz, 0, len(zs)) == 0

        def lib_ranges():
            bounds = np.linspace(0, len(zs), T + 1).astype(int)

            def work(k):
                return libzstd_range(z_lib.decompress_addr, z_lib.dctx(), data_c, scratch, *lz, bounds[k],
                                     bounds[k + 1])

            assert sum(pool.map(work, range(T))) == 0

        cases += [
            ("libzstd from numba, serial (no copy)", lib_serial, decoded_mb, "decoded"),
            (f"ThreadPool({T}) libzstd from numba, one range per thread", lib_ranges, decoded_mb, "decoded"),
        ]
    cases += [
        ("decompress(max_output_size) serial + copy", serial, decoded_mb, "decoded"),
        (f"ThreadPool({T}) decompress, one task per chunk + copy", pool_per_chunk, decoded_mb, "decoded"),
        (f"ThreadPool({T}) decompress, one range per thread + copy", pool_ranges, decoded_mb, "decoded"),
    ]
    # --- the whole CPU backend -------------------------------------------------
    cpu.decode_batch(batch)  # compile / load cache
    stages: list[dict] = []

    def full():
        cpu.decode_batch(batch, threads=T)
        stages.append(cpu.last_stats())

    cases.append(("decode_batch (all steps)", full, decoded_mb, "decoded"))

    for _, fn, *_ in cases:  # warm up
        fn()
    stages.clear()
    times, cpu_times = run_interleaved(cases, args.rounds)
    print(f"{'':<58s} {'best':>8s} {'median':>8s}            {'best ms':>8s} {'CPU ms':>8s}")
    for name, _, mb, unit in cases:
        t = sorted(times[name])
        best, med = t[0], t[len(t) // 2]
        c = float(np.median(cpu_times[name]))
        print(f"{name:<58s} {mb / best:8.0f} {mb / med:8.0f} MB/s {unit:<8s} {best * 1e3:8.2f} {c * 1e3:8.2f}")
    t = sorted(times["decode_batch (all steps)"])
    print(f"decode_batch: {n_values / t[0] / 1e6:.0f} M values/s best, {n_values / t[len(t) // 2] / 1e6:.0f} "
          f"M values/s median")
    print("decode_batch stage times, median ms:",
          {k: round(float(np.median([s[k] for s in stages])) * 1e3, 2) for k in stages[0]})
    print(f"loadavg at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
