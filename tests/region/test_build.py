"""Build and publish, crash safety (SIGKILL), gc and compaction."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pytest

import gtsamples as gs
from gtsamples.region import create_region, open_region

from ..conftest import assert_tables_equal
from .conftest import REGION_ID, dedup_oracle, make_sst_table, oracle, rows_of

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src")


def _gen_dirs(root, rid=REGION_ID):
    base = os.path.join(root, str(rid), "samples")
    out = set()
    for fid in os.listdir(base) if os.path.isdir(base) else []:
        if fid == "_catalog":
            continue
        for g in os.listdir(os.path.join(base, fid)):
            out.add((fid, g))
    return out


def _region_of(root, seed: int, n: int, rows: int):
    """A new region holding ``n`` random SSTs of ``rows`` rows: ``(region, their tables)``."""
    rng = np.random.default_rng(seed)
    r = create_region(root, REGION_ID)
    tables = [make_sst_table(rng, rows=rows) for _ in range(n)]
    for t in tables:
        r.add_sst(t)
    return r, tables


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_build_publishes_in_one_commit(tmp_path, executor):
    r, tables = _region_of(tmp_path, 21, 3, 150)
    v0 = r.version
    entries = r.build(workers=2, executor=executor, verify="validate")
    assert r.version == v0 + 1 and len(entries) == 3
    assert [a.file_id for a in r.artifacts] == [s.file_id for s in r.ssts]
    for a in r.artifacts:
        assert a.created_at and a.format == "columnar-samples" and a.version == 1
        gs.open_artifact(tmp_path, entry=a).validate()
    assert r.build() == [] and r.version == v0 + 1  # missing_only: nothing left to build
    gens = {(a.file_id, a.generation) for a in r.artifacts}
    r.build(missing_only=False)  # fresh generations for everything
    assert not gens & {(a.file_id, a.generation) for a in r.artifacts}
    got = r.read()
    assert_tables_equal(got, oracle(tables).cast(got.schema))


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_build_passes_the_writers_options(tmp_path, executor):
    from ..write import _parse

    r, tables = _region_of(tmp_path, 23, 2, 300)
    r.build(workers=2, executor=executor, compression=None, verify="validate")
    for a in r.artifacts:  # every chunk and page raw, in the workers too
        _, parts = _parse.read_dir(os.path.join(tmp_path, a.prefix))
        assert {int(c.ref["compression"]) for p in parts for b in p.blocks for c in b.chunks} == {0}
        assert {int(p.root["ref"]["compression"]) for p in parts} == {0}
    got = r.read()
    assert_tables_equal(got, oracle(tables).cast(got.schema))
    with pytest.raises(ValueError, match="compression: 'lz4' is not a compression"):
        r.build(missing_only=False, workers=2, executor=executor, compression="lz4")


def test_gc_removes_only_unreferenced_old_generations(tmp_path):
    rng = np.random.default_rng(22)
    r = create_region(tmp_path, REGION_ID)
    for _ in range(2):
        r.add_sst(make_sst_table(rng, rows=100))
    r.build()
    first = {(a.file_id, a.generation) for a in r.artifacts}
    r.build(missing_only=False)
    second = {(a.file_id, a.generation) for a in r.artifacts}
    # an interrupted build: a generation no catalog version lists
    orphan = gs.write_artifact(make_sst_table(rng, rows=10), tmp_path, region_id=REGION_ID,
                               source_file_id=r.ssts[0].file_id, timestamp_column_id=0, field_column_ids=[1, 2])
    assert (orphan.file_id, orphan.generation) in _gen_dirs(tmp_path)
    out = r.gc(grace_seconds=3600)
    assert out["removed_generations"] == []  # too young
    out = r.gc(grace_seconds=0)
    # the first generations are still referenced by older catalog versions: kept
    assert _gen_dirs(tmp_path) == first | second
    assert len(out["removed_generations"]) == 1
    out = r.gc(grace_seconds=0, expire_versions=True)
    assert _gen_dirs(tmp_path) == second and r.versions() == [r.version]
    for a in r.artifacts:
        gs.open_artifact(tmp_path, entry=a).validate()


def test_replace_ssts_compaction_keeps_rows(tmp_path):
    r, tables = _region_of(tmp_path, 23, 4, 120)
    r.build()
    before = r.read()
    before_dd = r.read(dedup=True)
    ids = [s.file_id for s in r.ssts]
    # compaction: merge SSTs 1 and 2 into one SST in spec order, rows unchanged (stable in region order)
    merged = pa.concat_tables([tables[1], tables[2]])
    order = np.lexsort((np.arange(merged.num_rows), ~merged["__sequence"].to_numpy(),
                        merged["ts"].cast(pa.int64()).to_numpy(), merged["__tsid"].to_numpy(),
                        merged["__table_id"].to_numpy()))
    merged = merged.take(pa.array(order))
    v = r.version
    (new,) = r.replace_ssts(remove=ids[1:3], add=[merged])
    assert r.version == v + 1
    assert [s.file_id for s in r.ssts] == [ids[0], new.file_id, ids[3]]
    cov = r.coverage()
    assert cov[new.file_id] is None and cov[ids[0]] is not None and len(r.artifacts) == 2
    after = r.read()
    assert sorted(rows_of(after), key=repr) == sorted(rows_of(before), key=repr)
    assert rows_of(r.read(dedup=True)) == rows_of(before_dd)
    r.build()
    assert rows_of(r.read(dedup=True)) == rows_of(before_dd)
    assert sorted(rows_of(r.read()), key=repr) == sorted(rows_of(before), key=repr)
    with pytest.raises(gs.region.CatalogError, match="not in catalog"):
        r.replace_ssts(remove=[ids[1]], add=[])


_LOOP = r"""
import sys
sys.path.insert(0, {src!r})
from gtsamples.region import open_region
r = open_region({root!r}, {rid})
print("ready", flush=True)
while True:
    r.build(missing_only=False, workers=2, verify=None)
"""


def _snapshot(root):
    d = os.path.join(root, str(REGION_ID), "samples", "_catalog")
    return {n: hashlib.sha256(open(os.path.join(d, n), "rb").read()).hexdigest()
            for n in os.listdir(d) if n.startswith("v") and n.endswith(".json")}


def _tmp_files(root):
    d = os.path.join(root, str(REGION_ID), "samples", "_catalog")
    return [n for n in os.listdir(d) if n.startswith(".tmp-")]


def _kill_campaign(tmp_path, seconds: float, max_kills: int, min_kills: int):
    """SIGKILL builds for ``seconds`` (up to ``max_kills``), and at least ``min_kills`` times
    however long that takes on a loaded machine (each kill waits for a fresh process's start)."""
    rng = np.random.default_rng(24)
    root = str(tmp_path)
    r = create_region(root, REGION_ID)
    tables = [make_sst_table(rng, rows=n) for n in (800, 400, 1200, 5)]
    for t in tables:
        r.add_sst(t)
    want = oracle(tables)
    want_dd = dedup_oracle(pa.concat_tables(tables))
    code = _LOOP.format(src=SRC, root=root, rid=REGION_ID)
    kills = published = 0
    prev = _snapshot(root)
    rnd = random.Random(7)
    t_end = time.monotonic() + seconds
    while kills < min_kills or (time.monotonic() < t_end and kills < max_kills):
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert p.stdout.readline().strip() == b"ready"
        time.sleep(rnd.uniform(0.0, 0.6))
        p.send_signal(signal.SIGKILL)
        p.wait()
        kills += 1
        snap = _snapshot(root)
        # every earlier version is still there, byte for byte; versions only grow
        assert all(snap.get(k) == v for k, v in prev.items())
        published += len(snap) - len(prev)
        prev = snap
        r = open_region(root, REGION_ID)
        assert r.version == len(snap)
        for a in r.artifacts:  # every listed entry is complete and valid
            gs.open_artifact(root, entry=a).validate()
        got = r.read()
        assert_tables_equal(got, want.cast(got.schema))  # zero lost or duplicated rows
        assert rows_of(r.read(dedup=True)) == want_dd
    # leftovers of killed builds are garbage; gc removes them and nothing listed
    orphans = len(_gen_dirs(root) - {(a["file_id"], a["generation"]) for n in r.versions()
                                     for a in r.checkout(n)._doc["artifacts"]})
    in_commit = len(_tmp_files(root))
    r.gc(grace_seconds=0, expire_versions=True)
    assert _tmp_files(root) == []
    r = open_region(root, REGION_ID)
    assert _gen_dirs(root) == {(a.file_id, a.generation) for a in r.artifacts}
    for a in r.artifacts:
        gs.open_artifact(root, entry=a).validate()
    got = r.read()
    assert_tables_equal(got, want.cast(got.schema))
    print(f"\nkill test: {kills} SIGKILLs, {published} catalog versions published meanwhile, "
          f"{orphans} generation directories left by killed builds, {in_commit} kills inside a commit "
          f"(temporary version file left); all removed by gc")
    return kills, published


def test_sigkill_during_build_never_breaks_the_catalog(tmp_path):
    _kill_campaign(tmp_path, seconds=20, max_kills=40, min_kills=10)


@pytest.mark.slow
def test_sigkill_campaign_long(tmp_path, request):
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("long campaign: run with -m slow")
    _kill_campaign(tmp_path, seconds=float(os.environ.get("GTSAMPLES_KILL_SECONDS", 240)), max_kills=500,
                   min_kills=50)


# --- arguments: checked before any SST is read, even when there is nothing to build --------

_BAD_BUILD_ARGS = [
    (dict(workers=0), ValueError, r"workers must be a positive integer or None \(threads or processes; None: "
                                  r"one\), not 0"),
    (dict(workers=-1), ValueError, "workers must be a positive integer or None .*, not -1"),
    (dict(workers=1.5), TypeError, "workers must be a positive integer or None .*, not float 1.5"),
    (dict(workers=True), TypeError, "not bool True"),
    (dict(workers=np.timedelta64(2, "s")), TypeError, "not timedelta64 "),  # before: two workers
    (dict(executor="fork"), ValueError, "executor must be 'thread' or 'process', not 'fork'"),
    (dict(verify="yes"), ValueError, "verify must be 'inspect', 'validate' or None, not 'yes'"),
    (dict(row_limit=0), ValueError, r"row_limit: 0 is out of range; expected 1..=8192"),
    (dict(row_limit=8193), ValueError, r"row_limit: 8193 is out of range"),
    (dict(compression="lz4"), ValueError, "compression: 'lz4' is not a compression this writer knows"),
    (dict(compression_level=0), ValueError, "compression_level: 0 is not a level"),
    (dict(compression_level=23), ValueError, r"compression_level: 23 is out of range"),
    (dict(max_page_bytes=10), ValueError, r"max_page_bytes: 10 is out of range \(a leaf must hold the widest "
                                          r"descriptor of 2 field\(s\)\); expected 276..=65536"),
    (dict(max_leaves_per_root=1), ValueError, "max_leaves_per_root: 1 is out of range"),
    (dict(compresion="zstd"), TypeError, "build\\(\\) got unexpected keyword argument\\(s\\) 'compresion'; the "
                                         "writer's options are max_page_bytes, max_leaves_per_root, compression, "
                                         "compression_level"),
    (dict(file_ids="5a3c0000-0000-4000-8000-000000000001"), TypeError,
     "file_ids must be an iterable of file ids, not one str"),
]


@pytest.mark.parametrize("kw,cls,match", _BAD_BUILD_ARGS, ids=[next(iter(k)) + "=" + repr(next(iter(k.values())))
                                                               for k, _c, _m in _BAD_BUILD_ARGS])
@pytest.mark.parametrize("covered", [True, False])
def test_build_refuses_a_bad_argument_before_reading(tmp_path, kw, cls, match, covered):
    """Covered: nothing is left to build, and the bad argument still raises (before, it
    was ignored: ``build(compression="lz4")`` returned []); uncovered: it raises before
    any artifact is written."""
    r, _tables = _region_of(str(tmp_path), 5, 2, 50)
    if covered:
        r.build()
    before = _gen_dirs(str(tmp_path))
    version = r.version
    with pytest.raises(cls, match=match):
        r.build(**kw)
    assert _gen_dirs(str(tmp_path)) == before and r.version == version


def test_build_accepts_the_boundaries(tmp_path):
    r, tables = _region_of(str(tmp_path), 6, 2, 50)
    got = r.build(workers=1, executor="process", verify=None, row_limit=8192, compression_level=22,
                  max_leaves_per_root=2, max_page_bytes=65536)
    assert len(got) == 2
    assert_tables_equal(open_region(str(tmp_path), REGION_ID).read(), oracle(tables))


def test_remove_artifacts_refuses_one_string(tmp_path):
    r, _tables = _region_of(str(tmp_path), 7, 1, 50)
    r.build()
    version = r.version
    with pytest.raises(TypeError, match="file_ids must be an iterable of file ids, not one str"):
        r.remove_artifacts(r.ssts[0].file_id)  # before: read as its characters, a commit that removed nothing
    assert r.version == version and r.coverage()[r.ssts[0].file_id] is not None
    r.remove_artifacts([r.ssts[0].file_id])
    assert r.coverage()[r.ssts[0].file_id] is None


@pytest.mark.parametrize("grace,cls,match", [
    (-5, ValueError, r"grace_seconds must be >= 0 \(seconds; inf keeps everything\), not -5"),
    (float("nan"), ValueError, "not nan"),
    ("3600", TypeError, "grace_seconds must be a number of seconds, not str '3600'"),
    (True, TypeError, "not bool True"),
    (np.timedelta64(1, "D"), TypeError, "not timedelta64 "),  # before: one second of grace
])
def test_gc_refuses_a_grace_that_is_not_a_number_of_seconds(tmp_path, grace, cls, match):
    """Before: NaN compared false with every time, and expire_versions deleted every catalog
    version but the latest; a negative grace took generations written a moment ago."""
    r, _tables = _region_of(str(tmp_path), 8, 1, 50)
    r.build()
    r.build(missing_only=False)  # the first generation: garbage once its version expires
    versions, gens = r.versions(), _gen_dirs(str(tmp_path))
    with pytest.raises(cls, match=match):
        r.gc(grace_seconds=grace, expire_versions=True)
    assert r.versions() == versions and _gen_dirs(str(tmp_path)) == gens
    out = r.gc(grace_seconds=float("inf"), expire_versions=True)  # nothing is old enough
    assert out["expired_versions"] == [] and out["removed_generations"] == []
    assert r.versions() == versions and _gen_dirs(str(tmp_path)) == gens
