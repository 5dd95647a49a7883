"""Concurrency: one opened artifact read from 8 threads at once gives identical results.

The threads share the Artifact and its metadata cache (the process-wide default
cache, and an explicit small cache that evicts while they run); every round
starts cold and releases all threads at once through a barrier, so page loads,
cache puts/evictions, the zstd thread pool and numba's per-thread settings race.
Also: 8 writers racing for one generation -- exactly one publishes, the others
get FileExistsError, and nothing else is left behind.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pyarrow as pa
import pytest

import gtsamples as gs
from gtsamples import cache as _cache
from gtsamples.cache import PageCache

from .conftest import assert_tables_equal

THREADS = 8
ROUNDS = 4
SRC = "5a3c0000-0000-4000-8000-00000000c001"
GEN = "5a3c0000-0000-4000-8000-00000000c002"


def _table(n_series=12, rows=3000, seed=0) -> pa.Table:
    rng = np.random.default_rng(seed)
    tid = np.repeat(np.arange(n_series, dtype=np.uint32) // 4 + 1, rows)
    tsid = np.repeat(np.arange(n_series, dtype=np.uint64) * 7 + 3, rows)
    ts = np.tile(np.cumsum(rng.integers(0, 3, rows)) * 1000, n_series)
    n = ts.size
    seq = np.full(n, 9, np.uint64)
    op = (rng.random(n) < 0.9).astype(np.uint8)
    # compressible values so most chunks are Zstd (and batches exceed the parallel-zstd threshold)
    a = np.round(rng.normal(size=n), 1)
    b = np.repeat(rng.normal(size=n // 50 + 1), 50)[:n]
    return pa.table({
        "__table_id": pa.array(tid), "__tsid": pa.array(tsid), "ts": pa.array(ts, pa.timestamp("ms")),
        "__sequence": pa.array(seq), "__op_type": pa.array(op),
        "a": pa.array(a, mask=rng.random(n) < 0.1), "b": pa.array(b),
        "c": pa.array(np.zeros(n), mask=np.ones(n, bool)),  # all null: omitted chunks
    })


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("conc")
    t = _table()
    entry = gs.write_artifact(t, root, region_id=77, source_file_id=SRC, generation=GEN, timestamp_column_id=0,
                              field_column_ids=[1, 2, 3], row_limit=500, max_page_bytes=12 + 264 * 3,
                              max_leaves_per_root=4)
    return root, entry, t


QUERIES = [
    {},
    {"series": [(1, 3), (2, 31)]},
    {"tables": [2], "start": 10_000, "end": 900_000},
    {"columns": ["__tsid", "ts", "b"], "start": 500_000},
    {"series": [(3, 80)], "end": 50_000, "columns": ["ts", "a", "c"]},
]


def _run_threads(fn, n=THREADS):
    barrier = threading.Barrier(n)
    results: list = [None] * n
    errors: list = []

    def work(i):
        try:
            barrier.wait()
            results[i] = fn(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors
    return results


def test_artifact_has_the_shapes_we_want(written):
    root, entry, t = written
    s = gs.open_artifact(root, entry=entry).inspect()
    assert len(s["parts"]) >= 3 and all(p["depth"] == 2 for p in s["parts"][:-1])
    assert any("zstd" in k for k in s["encodings"])


@pytest.fixture
def zstd_pool(monkeypatch):
    """Force the CPU backend's parallel Zstd path (a thread pool shared by all readers) on small batches."""
    from gtsamples.decode import cpu

    monkeypatch.setattr(cpu.parallel, "PARALLEL_ZSTD_MIN_BYTES", 1)


@pytest.mark.parametrize("which_cache", ["default", "explicit-small", "explicit-large"])
def test_eight_threads_one_artifact(written, which_cache, zstd_pool):
    root, entry, t = written
    if which_cache == "default":
        cache = None
    elif which_cache == "explicit-small":
        cache = PageCache(max_bytes=64 * 1024)  # evicts while the threads run
    else:
        cache = PageCache()
    ref_art = gs.open_artifact(root, entry=entry, cache=PageCache())
    expected = [ref_art.read(**q) for q in QUERIES]
    assert_tables_equal(expected[0], t)
    for _ in range(ROUNDS):
        if cache is None:
            _cache.default_cache().clear()
        else:
            cache.clear()
        art = gs.open_artifact(root, entry=entry, cache=cache)

        def job(i):
            q = QUERIES[i % len(QUERIES)]
            out = [(i % len(QUERIES), art.read(**q))]
            if i % 3 == 0:
                out.append(("inspect", art.inspect()["rows"]))
            if i % 4 == 1:
                out.append(("validate", art.validate()["valid"]))
            # a second query, other than the first, on the now (partly) warm cache
            k = (i + 2) % len(QUERIES)
            out.append((k, art.read(**QUERIES[k])))
            return out

        for res in _run_threads(job):
            for key, val in res:
                if key == "inspect":
                    assert val == t.num_rows
                elif key == "validate":
                    assert val is True
                else:
                    assert_tables_equal(val, expected[key])


def test_threads_each_open_their_own_artifact(written, zstd_pool):
    """8 threads open and read the same artifact through the shared default cache."""
    root, entry, t = written
    _cache.default_cache().clear()
    results = _run_threads(lambda i: gs.open_artifact(root, entry=entry).read(**QUERIES[i % len(QUERIES)]))
    ref = gs.open_artifact(root, entry=entry, cache=PageCache())
    for i, r in enumerate(results):
        assert_tables_equal(r, ref.read(**QUERIES[i % len(QUERIES)]))


def test_threads_share_a_bad_artifact_consistently(written, tmp_path):
    """Concurrent reads of a corrupt artifact all raise the same SamplesError (no foreign exception)."""
    import shutil

    root, entry, t = written
    bad_root = tmp_path / "bad"
    shutil.copytree(root, bad_root)
    key = entry.objects[2].path  # part-1
    p = bad_root / key
    data = bytearray(p.read_bytes())
    data[len(data) // 3] ^= 0xFF  # a chunk byte: checksum mismatch on decode
    p.write_bytes(bytes(data))
    art = gs.open_artifact(bad_root, entry=entry, cache=PageCache())

    def job(i):
        try:
            art.read()
        except gs.SamplesError as e:
            return type(e).__name__, str(e)
        return "ok", ""

    results = _run_threads(job)
    assert len(set(results)) == 1, set(results)
    assert results[0][0] == "CorruptArtifactError"


def test_writer_refuses_existing_generation_under_a_race(tmp_path):
    """8 writers of one generation at once: one publishes, 7 get FileExistsError; no leftovers."""
    t = _table(n_series=2, rows=200)

    def job(i):
        try:
            e = gs.write_artifact(t, tmp_path, region_id=5, source_file_id=SRC, generation=GEN,
                                  timestamp_column_id=0, field_column_ids=[1, 2, 3], row_limit=100)
            return "won", e
        except FileExistsError as ex:
            return "refused", str(ex)

    results = _run_threads(job)
    won = [r[1] for r in results if r[0] == "won"]
    assert len(won) == 1, [r[0] for r in results]
    assert all(r[0] in ("won", "refused") for r in results)
    parent = tmp_path / "5" / "samples" / SRC
    assert os.listdir(parent) == [GEN]  # no temp directories left
    assert_tables_equal(gs.open_artifact(tmp_path, entry=won[0]).read(), t)
    # and a later write of the same generation is refused too, leaving the artifact intact
    before = {p.name: p.read_bytes() for p in (parent / GEN).iterdir()}
    with pytest.raises(FileExistsError):
        gs.write_artifact(t.slice(0, 10), tmp_path, region_id=5, source_file_id=SRC, generation=GEN,
                          timestamp_column_id=0, field_column_ids=[1, 2, 3])
    assert {p.name: p.read_bytes() for p in (parent / GEN).iterdir()} == before
    assert os.listdir(parent) == [GEN]
