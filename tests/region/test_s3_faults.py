"""Remote-store faults: a region on a moto S3 server (127.0.0.1) behind a fault-injecting
proxy (tests/region/faultproxy.py): 500 and 503 responses, connection resets before
and after a request is applied, truncated and lying-short bodies, a server restart in
the middle of a query.

Contract: reads retry where that is safe (the libraries' retries, plus one re-read
of a body that came back short) and otherwise fail with a StorageError naming the
object; never wrong rows; a build or commit interrupted by a fault leaves the
catalog valid, with nothing lost and nothing half-published; a conditional put
retried after its first attempt landed is neither a conflict nor a second commit.

The clients use the libraries' default retry settings (botocore "legacy": 5
attempts; s3fs: 5); only botocore's backoff sleeps are scaled down (x0.05), so a
fault costs milliseconds instead of up to seconds.
"""

from __future__ import annotations

import logging
import uuid
import warnings

import numpy as np
import pytest

import gtsamples as gs
from gtsamples import cache as gcache
from gtsamples.region import create_region, open_region
from gtsamples.region import catalog
from gtsamples.storage import Store

from ..conftest import assert_tables_equal
from .conftest import REGION_ID, make_sst_table, oracle

pytest.importorskip("moto.server")
pytest.importorskip("s3fs")

from .faultproxy import KINDS, FaultProxy, Moto  # noqa: E402

BUCKET = "gtsamples-faults"
BACKOFF_SCALE = 0.05


def ranged_get(method, path, headers):
    return method == "GET" and "range" in headers


def is_part(method, path, headers):
    return ranged_get(method, path, headers) and ".samples" in path


def catalog_put(method, path, headers):
    return method == "PUT" and "/_catalog/" in path


@pytest.fixture(scope="module")
def faulty():
    import botocore.retryhandler as rh
    import s3fs

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    real_delay = rh.delay_exponential
    mp = pytest.MonkeyPatch()
    # the clients' retry handlers bind this function when they are created (below)
    mp.setattr(rh, "delay_exponential", lambda **kw: BACKOFF_SCALE * real_delay(**kw))
    moto = Moto()
    moto.start()
    proxy = FaultProxy(moto, down_seconds=0.05).start()
    opts = {"key": "testing", "secret": "testing",
            "client_kwargs": {"endpoint_url": proxy.url, "region_name": "us-east-1"}}
    s3fs.S3FileSystem(**opts).call_s3("create_bucket", Bucket=BUCKET)
    try:
        yield proxy, opts
    finally:
        proxy.clear()
        proxy.stop()
        moto.stop()
        mp.undo()
        print(f"\nfault proxy: {proxy.total_injected} faults injected ({dict(proxy.injected)}), "
              f"{sum(proxy.requests.values())} requests, {moto.restarts} server restarts")


def _root():
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"


def _region(opts, tables, build=True):
    root = _root()
    r = create_region(root, REGION_ID, storage_options=opts)
    for t in tables:
        r.add_sst(t, row_group_size=200)
    if build:
        r.build(workers=2)
    return root, r


def _cold_open(root, opts):
    gcache.default_cache().clear()
    catalog.clear()  # the process-wide parsed versions: a cold open reads the catalog again
    return open_region(root, REGION_ID, storage_options=opts)


def _check_catalog(root, opts, want_ssts=None):
    """The catalog is valid: every version readable, every listed artifact complete
    and valid, the rows those of the listed SSTs exactly.  Returns the region."""
    r = _cold_open(root, opts)
    for n in r.versions():
        r.checkout(n)
    for a in r.artifacts:
        gs.open_artifact(root, entry=a, storage_options=opts).validate()
    if want_ssts is not None:
        assert [s.file_id for s in r.ssts] == list(want_ssts)
    return r


@pytest.fixture(scope="module")
def built(faulty):
    """A region of two built SSTs (every series in both), read by the read tests."""
    _, opts = faulty
    rng = np.random.default_rng(70)
    ids = [(1, s) for s in range(10, 20)]
    tables = [make_sst_table(rng, rows=2000, ts_range=300, ids=ids) for _ in range(2)]
    root, r = _region(opts, tables)
    return root, r, tables, ids


def test_reads_retry_every_fault_kind(faulty, built):
    """Two faults of every kind on the artifact part reads of a cold region query: the
    rows are exactly right and no artifact falls back to its SST."""
    proxy, opts = faulty
    root, _, tables, ids = built
    series = [ids[3]]
    want = oracle(tables, None, series)
    for kind in KINDS:
        r = _cold_open(root, opts)
        before = proxy.injected[kind]
        proxy.inject(kind, is_part, count=2)
        with warnings.catch_warnings():
            warnings.simplefilter("error", gs.ArtifactSkippedWarning)
            got = r.read(series=series)
        proxy.clear()
        proxy.moto.wait_up()
        assert proxy.injected[kind] - before == 2, kind
        assert_tables_equal(got, want.cast(got.schema))


def test_catalog_reads_retry(faulty, built):
    """Faults on the listing, the stat and the read of the catalog version when a region opens."""
    proxy, opts = faulty
    root, r0, tables, _ = built
    # the listing, then the read of the newest version (its size comes with the listing)
    steps = [lambda m, p, h: m == "GET" and "list-type" in p,
             lambda m, p, h: ranged_get(m, p, h) and "/_catalog/" in p]
    for kind in ("500", "truncate", "short", "restart"):
        for when in steps:
            before = proxy.total_injected
            proxy.inject(kind, when, count=2)
            r = _cold_open(root, opts)
            proxy.clear()
            proxy.moto.wait_up()
            assert proxy.total_injected - before == 2
            assert r.version == r0.version and r._doc == r0._doc


def test_persistent_faults_fail_naming_the_object(faulty, built):
    """Faults that outlast the retries: a StorageError naming the part (500s, resets,
    truncated bodies), CorruptArtifactError for a body that stays short; a region read
    falls back to the SST with a warning naming the artifact; never wrong rows."""
    proxy, opts = faulty
    root, r, tables, _ = built
    entry = r.artifacts[0]
    want = oracle(tables)
    # a part is read whole here: botocore checks moto's checksum of a short body too
    for kind, match in [("500", "cannot read .*internal error"), ("reset", "cannot read"),
                        ("truncate", "cannot read .*(payload|Content-Length)"),
                        ("short", "cannot read .*checksum|shorter than its recorded size")]:
        gcache.default_cache().clear()
        proxy.inject(kind, is_part, count=10_000)
        with pytest.raises((gs.StorageError, gs.CorruptArtifactError), match=match) as ei:
            gs.open_artifact(root, entry=entry, storage_options=opts).read()
        proxy.clear()
        assert f"{entry.prefix}part-0.samples" in str(ei.value)
    proxy.inject("reset", is_part, count=10_000)
    with pytest.warns(gs.ArtifactSkippedWarning, match=entry.generation):
        got = _cold_open(root, opts).read()
    assert_tables_equal(got, want.cast(got.schema))  # the SSTs, not a broken artifact
    with pytest.raises(gs.StorageError, match="part-0.samples: cannot read"):
        _cold_open(root, opts).read(strict=True)
    proxy.clear()
    proxy.inject("503", lambda m, p, h: ranged_get(m, p, h) and "/_catalog/" in p, count=10_000)
    with pytest.raises(gs.StorageError, match=r"_catalog/v0+4\.json: cannot read"):
        _cold_open(root, opts)
    proxy.clear()


@pytest.mark.parametrize("kind", ["500-after", "reset-after", "truncate"])
def test_conditional_put_that_landed_is_not_a_conflict(faulty, kind):
    """The catalog version's conditional PUT is applied, but its response is lost; the
    library retries it and gets 412 Precondition Failed.  That is our own version:
    one commit, not a conflict (which would re-apply add_sst on top of itself)."""
    proxy, opts = faulty
    rng = np.random.default_rng(73)
    root, r = _region(opts, [make_sst_table(rng, rows=50)], build=False)
    v = r.version
    t = make_sst_table(rng, rows=60)
    proxy.inject(kind, catalog_put, count=1)
    s = r.add_sst(t)
    assert proxy.pending() == 0
    assert r.version == v + 1
    r2 = _check_catalog(root, opts)
    assert r2.version == v + 1 and [x.file_id for x in r2.ssts][-1] == s.file_id
    # and through Store directly: the same bytes again are ours, other bytes a conflict
    st = Store(root, opts)
    proxy.inject(kind, lambda m, p, h: m == "PUT" and p.endswith("/obj"), count=1)
    assert st.put_if_absent("obj", b"mine") is True
    assert st.put_if_absent("obj", b"theirs") is False


def test_interrupted_commit_and_build_leave_the_catalog_valid(faulty):
    """Commits and builds whose writes keep failing raise StorageError; the catalog
    is unchanged and valid, and the same operation succeeds once the store recovers."""
    proxy, opts = faulty
    rng = np.random.default_rng(74)
    tables = [make_sst_table(rng, rows=200) for _ in range(3)]
    root, r = _region(opts, tables[:2], build=False)
    ids = [s.file_id for s in r.ssts]
    v = r.version
    # every catalog PUT fails: the commit of add_sst gives up
    proxy.inject("503", catalog_put, count=10_000)
    with pytest.raises(gs.StorageError, match=r"_catalog/v0+4\.json: cannot create"):
        r.add_sst(tables[2])
    proxy.clear()
    _check_catalog(root, opts, ids)
    # a build whose part uploads fail: nothing published, nothing left that looks complete
    proxy.inject("500", lambda m, p, h: m == "PUT" and ".samples" in p, count=10_000)
    with pytest.raises(gs.StorageError, match=r"part-0\.samples: cannot write"):
        r.build(workers=1)
    proxy.clear()
    r2 = _check_catalog(root, opts, ids)
    assert r2.version == v and r2.artifacts == []
    # a build whose catalog commit fails: the generations are written, never listed
    proxy.inject("reset", catalog_put, count=10_000)
    with pytest.raises(gs.StorageError, match="cannot create"):
        r.build(workers=2)
    proxy.clear()
    r2 = _check_catalog(root, opts, ids)
    assert r2.version == v and r2.artifacts == []
    out = r2.gc(grace_seconds=0)
    assert len(out["removed_generations"]) == 2 and out["removed_ssts"]  # the orphan SST of add_sst
    r2.add_sst(tables[2])
    r2.build(workers=2)
    r3 = _check_catalog(root, opts)
    assert len(r3.artifacts) == 3
    got = r3.read()
    assert_tables_equal(got, oracle(tables).cast(got.schema))


def test_server_restart_in_the_middle_of_a_query(faulty, built):
    proxy, opts = faulty
    root, _, tables, _ = built
    for nth in (0, 2, 4):  # after some of the query's requests were answered
        r = _cold_open(root, opts)
        seen = {"n": 0}

        def later_part_read(m, p, h, seen=seen, nth=nth):
            if not is_part(m, p, h):
                return False
            seen["n"] += 1
            return seen["n"] > nth

        before = proxy.moto.restarts
        proxy.inject("restart", later_part_read, count=1)
        with warnings.catch_warnings():
            warnings.simplefilter("error", gs.ArtifactSkippedWarning)
            got = r.read()
        proxy.clear()
        assert proxy.moto.restarts == before + 1
        assert_tables_equal(got, oracle(tables).cast(got.schema))


def _outage_after(n: int):
    """A predicate true from the (n+1)-th request on: the store goes down mid-operation."""
    seen = [0]

    def when(method, path, headers):
        seen[0] += 1
        return seen[0] > n

    return when


def _campaign(faulty, capsys, label: str, seed: int, rounds: int, rate: float) -> dict:
    """Random faults on every request while SSTs are added, artifacts built and rows
    read, and in half the operations an outage (every request fails from a random
    point on, so the operation is interrupted); after each operation (faults off)
    the catalog is checked.  Asserts no wrong rows and no broken catalog; returns counts."""
    proxy, opts = faulty
    faults_before = proxy.total_injected
    rng = np.random.default_rng(seed)
    ids = [(3, s) for s in range(50, 58)]
    t0 = make_sst_table(rng, rows=300, ids=ids)
    root, r = _region(opts, [t0], build=False)
    tables = {r.ssts[0].file_id: t0}  # the catalog's SSTs, in order, as the test knows them
    counts = {"operations": 0, "failed": 0, "wrong_rows": 0, "broken_catalogs": 0, "reads": 0}
    for k in range(rounds):
        op = ("add", "build", "read", "read")[k % 4]
        t = make_sst_table(rng, rows=int(rng.integers(50, 400)), ids=ids) if op == "add" else None
        fid = str(uuid.uuid4())
        gcache.default_cache().clear()
        catalog.clear()  # each round opens the region cold: the faults reach the catalog reads too
        proxy.randomize(rate, seed=seed * 1000 + k)
        if k % 2 == k // 4 % 2:  # half the rounds, each kind of operation in turn
            proxy.inject(("503", "reset")[k // 2 % 2], _outage_after(int(rng.integers(0, 40))), count=10**9)
        got, err = None, None
        try:
            r = open_region(root, REGION_ID, storage_options=opts)
            if op == "add":
                r.add_sst(t, file_id=fid)
            elif op == "build":
                r.build(workers=2)
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", gs.ArtifactSkippedWarning)
                    got = r.read(series=[ids[k % len(ids)]])
        except gs.SamplesError as e:
            err = e
        finally:
            proxy.clear()
            proxy.moto.wait_up()
        counts["operations"] += 1
        counts["failed"] += err is not None
        if err is not None:
            assert isinstance(err, (gs.StorageError, gs.CorruptArtifactError)), repr(err)
            assert f"{BUCKET}/" in str(err), str(err)  # names the object
        try:
            cur = _check_catalog(root, opts)
        except Exception as e:  # noqa: BLE001 - counted; the assertion below reports it
            counts["broken_catalogs"] += 1
            counts["broken"] = repr(e)
            break
        listed = [s.file_id for s in cur.ssts]
        if op == "add":
            if fid in listed:  # landed (an error may still have been reported: outcome unknown)
                tables[fid] = t
            assert err is not None or fid in listed  # a reported success is never lost
        assert listed == list(tables)  # nothing lost, nothing extra, in order
        want = oracle(list(tables.values()))
        if got is not None:
            counts["reads"] += 1
            counts["wrong_rows"] += not _same(got, oracle(list(tables.values()), None, [ids[k % len(ids)]]))
        counts["wrong_rows"] += not _same(cur.read(), want)
    counts["faults"] = proxy.total_injected - faults_before
    with capsys.disabled():
        print(f"\n{label}: {counts['faults']} faults injected; {counts}")
    assert counts["wrong_rows"] == 0 and counts["broken_catalogs"] == 0, counts
    return counts


def _same(got, want) -> bool:
    try:
        assert_tables_equal(got, want.cast(got.schema))  # bit for bit (NaN payloads, -0.0, nulls)
        return True
    except AssertionError:
        return False


def test_random_fault_campaign(faulty, capsys):
    counts = _campaign(faulty, capsys, "fault campaign", seed=5, rounds=8, rate=0.15)
    assert counts["faults"] >= 20 and counts["failed"] >= 1


@pytest.mark.slow
def test_random_fault_campaign_long(faulty, capsys, request):
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("long fault campaign: run with -m slow")
    _campaign(faulty, capsys, "long fault campaign", seed=6, rounds=80, rate=0.25)
