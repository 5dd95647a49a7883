"""The real NAB series (../shared/data/nab-real.tar.xz) round-trip bit for bit.

All 47 files go into one artifact, one identity per file (table_id = group,
tsid = file index within the group), timestamps in milliseconds.  NAB has
duplicate timestamps in four files (and one step back in time in one): rows are
put in spec order by a stable sort on the timestamp, so duplicates keep their
input order, and sequences descend on ties.  Skipped (not failed) when ../shared
is absent.  Prints bytes per sample (the figure for benchmarks/RESULTS.md).
"""

from __future__ import annotations

import os
import tarfile

import numpy as np
import pyarrow as pa
import pytest

import gtsamples as gs
from gtsamples.cache import PageCache

from .conftest import assert_tables_equal

NAB_SAMPLES = 321_206
NAB_FILES = 47


def load_nab(archive: str, dest: str) -> tuple[pa.Table, list[str]]:
    with tarfile.open(archive, "r:xz") as tar:
        members = [m for m in tar.getmembers() if m.isfile() and m.name.endswith(".csv")]
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, members=members, filter="data")
        else:  # pragma: no cover - Python < 3.10.12
            tar.extractall(dest, members=members)
    texts = []
    for m in sorted(members, key=lambda m: m.name):
        with open(os.path.join(dest, m.name), encoding="utf-8") as f:
            texts.append((m.name, f.read()))
    groups = sorted({os.path.dirname(n) for n, _ in texts})
    parts = []
    names = []
    seq_next = NAB_SAMPLES + 1
    per_group: dict[str, int] = {}
    for name, text in texts:
        lines = text.strip().splitlines()
        assert lines[0].strip() == "timestamp,value", name
        stamps, values = zip(*(ln.split(",") for ln in lines[1:]))
        ts = np.array(stamps, dtype="datetime64[ms]").astype(np.int64)
        vals = np.array([float(v) for v in values], dtype=np.float64)  # correctly rounded
        order = np.argsort(ts, kind="stable")  # spec order; duplicates keep input order
        ts, vals = ts[order], vals[order]
        n = ts.shape[0]
        seq = np.arange(seq_next - 1, seq_next - 1 - n, -1, dtype=np.uint64)  # descending: ties too
        seq_next -= n
        g = os.path.dirname(name)
        per_group[g] = per_group.get(g, 0) + 1
        parts.append(pa.table({
            "__table_id": pa.array(np.full(n, groups.index(g) + 1, np.uint32)),
            "__tsid": pa.array(np.full(n, per_group[g], np.uint64)),
            "timestamp": pa.array(ts, pa.timestamp("ms")),
            "__sequence": pa.array(seq),
            "__op_type": pa.array(np.ones(n, np.uint8)),
            "value": pa.array(vals),
        }))
        names.append(name)
    return pa.concat_tables(parts), names


@pytest.fixture
def nab(shared_dir, tmp_path):
    archive = shared_dir / "data" / "nab-real.tar.xz"
    if not archive.exists():
        pytest.skip(f"{archive} is absent")
    return load_nab(str(archive), str(tmp_path / "nab"))


def test_nab_roundtrip_bit_exact(nab, tmp_path, capsys):
    tmp_path = tmp_path / "store"
    table, names = nab
    assert len(names) == NAB_FILES and table.num_rows == NAB_SAMPLES
    ts = table.column("timestamp").cast(pa.int64()).to_numpy()
    tid = table.column("__table_id").to_numpy().astype(np.int64)
    tsid = table.column("__tsid").to_numpy().astype(np.int64)
    same = (tid[1:] == tid[:-1]) & (tsid[1:] == tsid[:-1])
    assert ((ts[1:] == ts[:-1]) & same).sum() > 0, "NAB has duplicate timestamps"
    entry = gs.write_artifact(table, tmp_path, region_id=1, source_file_id="00000000-0000-4000-8000-0000000000ab",
                              generation="00000000-0000-4000-8000-0000000000ac", timestamp_column_id=0,
                              field_column_ids=[1])
    art = gs.open_artifact(tmp_path, entry=entry, cache=PageCache())
    got = art.read()
    assert_tables_equal(got, table)
    # one series at a time, too (selection by identity)
    for t, s in [(1, 1), (int(tid[-1]), int(tsid[-1]))]:
        mask = (tid == t) & (tsid == s)
        assert_tables_equal(art.read(series=[(t, s)]), table.filter(pa.array(mask)))
    parts = sum(p.file_size for p in art.manifest.files)
    total = entry["file_size"]
    summary = art.inspect()
    with capsys.disabled():
        print(f"\nNAB: {NAB_SAMPLES} samples, {len(names)} series, {len(art.manifest.files)} part(s), "
              f"{summary['blocks']} blocks: {parts} part bytes = {parts / NAB_SAMPLES:.3f} bytes/sample "
              f"({total / NAB_SAMPLES:.3f} with the manifest); chunk compression ratio "
              f"{summary['compression_ratio']:.2f}")
    assert parts / NAB_SAMPLES < 8.0  # the raw (timestamp, value) pair is 16 bytes
