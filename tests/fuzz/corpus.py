"""Seed corpus: small valid artifacts of many shapes, as fuzz containers.

    .venv/bin/python -m tests.fuzz.corpus [OUT_DIR]     (default .fuzz/seeds, git-ignored)

Shapes: depth 1 and 2, one to several parts, a series crossing parts, 1 and
3 fields, nulls (validity kinds 0 and 1), all-null (omitted) chunks, NaN
payloads and -0.0, every timestamp unit, encodings 1-7, and for each artifact
variants with chunks kept/raw/Zstd and pages raw/Zstd (rebuilt by
:mod:`partkit`).  Each artifact is written by ``gs.write_artifact`` and then
re-laid-out, plus the four interop vectors from ``tests/data/vectors``.
Every seed is checked to read back successfully before it is kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import sys
import tempfile

import numpy as np
import pyarrow as pa

import gtsamples as gs

from . import partkit
from .targets import (
    DEFAULT_FILE_ID,
    DEFAULT_GENERATION,
    DEFAULT_REGION,
    FLAG_ENTRY,
    FLAG_FIX_CHECKSUMS,
    FLAG_FIX_SIZES,
    pack,
)

VECTORS = pathlib.Path(__file__).resolve().parents[1] / "data" / "vectors"
UNITS = {"s": "second", "ms": "millisecond", "us": "microsecond", "ns": "nanosecond"}


def make_table(series, rows_per_series, n_fields=1, unit="ms", nulls=0.0, all_null_field=False, regular=True,
               ops="put", seq="const", specials=False, seed=0, ts_name="ts") -> pa.Table:
    rng = np.random.default_rng(seed)
    tid, tsid, ts, sq, op = [], [], [], [], []
    for (t, s), n in zip(series, rows_per_series):
        base = int(rng.integers(0, 1 << 40))
        if regular:
            times = base + 1000 * np.arange(n)
        else:
            times = np.sort(base + rng.integers(0, 10_000, n))
        tid += [t] * n
        tsid += [s] * n
        ts += times.tolist()
        if seq == "const":
            q = [7] * n
        else:
            q = (1000 + rng.integers(0, 100, n)).tolist()
            # nonincreasing within equal timestamps
            for i in range(1, n):
                if times[i] == times[i - 1] and q[i] > q[i - 1]:
                    q[i] = q[i - 1]
        sq += q
        op += ([1] * n if ops == "put" else rng.integers(0, 2, n).tolist())
    n = len(ts)
    cols = {
        "__table_id": pa.array(tid, pa.uint32()),
        "__tsid": pa.array(tsid, pa.uint64()),
        ts_name: pa.array(ts, pa.timestamp(unit)),
        "__sequence": pa.array(sq, pa.uint64()),
        "__op_type": pa.array(op, pa.uint8()),
    }
    for k in range(n_fields):
        v = rng.normal(size=n).round(2)
        if specials and n >= 4:
            bits = v.view(np.uint64)
            bits[0] = 0x7FF8_0000_DEAD_BEEF  # NaN payload
            v[1] = -0.0
            v[2] = np.inf
            bits[3] = 1  # subnormal
        mask = rng.random(n) < nulls
        if all_null_field and k == n_fields - 1:
            mask[:] = True
        cols[f"f{k}"] = pa.array(v, pa.float64(), mask=mask)
    return pa.table(cols)


def writer_shapes():
    """(name, table, write kwargs) of the writer-made seeds."""
    one = [(7, 42)]
    yield "single", make_table(one, [5]), {}
    yield "irregular_nulls", make_table(one, [20], nulls=0.3, regular=False, seq="delta", ops="mixed", seed=1), {}
    yield "three_fields_allnull", make_table([(1, 1), (1, 2), (2, 1)], [6, 3, 4], n_fields=3, nulls=0.2,
                                            all_null_field=True, seed=2), {"row_limit": 4}
    yield "specials_ns", make_table(one, [9], unit="ns", specials=True, seed=3), {}
    yield "seconds", make_table([(0, 0), (0, (1 << 64) - 1)], [3, 3], unit="s", seed=4), {}
    yield "micro_dups", make_table([(9, 9)], [12], unit="us", regular=False, seq="delta", seed=5), {"row_limit": 5}
    # depth 2: small pages, several leaves
    yield "depth2", make_table([(7, i) for i in range(6)], [3] * 6, seed=6), {
        "row_limit": 2, "max_page_bytes": 12 + 220 * 2}
    # several parts: small pages and two leaves per root, series crossing parts
    yield "multipart", make_table([(7, 42), (7, 43), (8, 1)], [9, 4, 5], nulls=0.2, seed=7, regular=False), {
        "row_limit": 2, "max_page_bytes": 12 + 220, "max_leaves_per_root": 2}


QUICK_SHAPES = ("irregular_nulls", "three_fields_allnull", "depth2", "multipart")


def _seed_entries(quick: bool = False):
    with tempfile.TemporaryDirectory() as tmp:
        for name, table, kw in writer_shapes():
            if quick and name not in QUICK_SHAPES:
                continue
            n_fields = table.num_columns - 5
            entry = gs.write_artifact(table, tmp, region_id=DEFAULT_REGION, source_file_id=DEFAULT_FILE_ID,
                                      generation=None, timestamp_column_id=0,
                                      field_column_ids=list(range(1, n_fields + 1)), **kw)
            mb, parts = partkit.read_artifact_files(tmp, entry)
            yield name, json.loads(mb), parts
    for vec in sorted(p for p in VECTORS.iterdir() if p.is_dir()):
        entry = json.loads((vec / "entry.json").read_text())
        mb, parts = partkit.read_artifact_files(vec / "store", entry)
        yield vec.name, json.loads(mb), parts


def build_seeds(quick: bool = False) -> list[tuple[str, bytes]]:
    """(name, container bytes) of every seed; each is checked to read.

    ``quick``: fewer shapes and layout variants (for the smoke test).
    """
    from .targets import target_read

    seeds = []
    for name, manifest, parts in _seed_entries(quick):
        manifest["region_id"] = DEFAULT_REGION
        manifest["source_file_id"] = DEFAULT_FILE_ID
        manifest["generation"] = DEFAULT_GENERATION
        models = [partkit.parse_part(p) for p in parts]
        variants = [("orig", None, None)] + [
            (f"c{c}_p{p}", c, p) for c, p in (("raw", "raw"), ("zstd", "zstd"), ("keep", "raw"), ("raw", "zstd"))
        ]
        if quick:
            variants = variants[:2]
        for vname, cmode, pmode in variants:
            if cmode is None:
                new_parts = list(parts)
            else:
                new_parts = [partkit.build_part(m, chunks=cmode, pages=pmode) for m in models]
            m = json.loads(json.dumps(manifest))
            for p, data in zip(m["files"], new_parts):
                p["file_size"] = len(data)
            mb = partkit.manifest_bytes(m)
            entry = partkit.entry_for(m, len(mb))
            eb = json.dumps(entry).encode()
            params = hashlib.sha256(f"{name}/{vname}".encode()).digest()[:8]
            for flags in (FLAG_FIX_CHECKSUMS | FLAG_FIX_SIZES | FLAG_ENTRY, FLAG_FIX_CHECKSUMS):
                data = pack(flags, params, mb, eb, new_parts)
                assert target_read(data) == "ok", (name, vname, flags)
                seeds.append((f"{name}_{vname}_f{flags}", data))
    return seeds


def write_seeds(out_dir, quick: bool = False) -> int:
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    n = 0
    for name, data in build_seeds(quick):
        (out / name).write_bytes(data)
        n += 1
    return n


if __name__ == "__main__":
    d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(".fuzz", "seeds")
    print(f"{write_seeds(d)} seeds in {d}")
