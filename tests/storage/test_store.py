"""The ``Store`` contract: every implementation (local, fsspec on memory, fsspec on a
real S3-compatible server) passes the same tests; and what the ABC itself decides
(scheme registry, dispatch, errors of a read-only store)."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from gtsamples.errors import CorruptArtifactError, StorageError, UnsupportedError
from gtsamples.storage import (
    MAX_OBJECT_END, FsspecStore, LocalObjectReader, LocalStore, ObjectReader, ReadStats, Store, is_local_root,
    store_class,
)

DATA = bytes(range(256)) * 4096  # 1 MiB: far-apart ranges, a coalesced run, whole reads


@pytest.fixture(scope="module")
def s3_opts():
    pytest.importorskip("moto.server")
    s3fs = pytest.importorskip("s3fs")
    import logging

    from ..region.faultproxy import Moto

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    moto = Moto()
    moto.start()
    opts = {"key": "testing", "secret": "testing",
            "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{moto.port}", "region_name": "us-east-1"}}
    s3fs.S3FileSystem(**opts).call_s3("create_bucket", Bucket="gtsamples-store")
    try:
        yield opts
    finally:
        moto.stop()


@pytest.fixture(params=["local", "memory", "s3"])
def store(request, tmp_path):
    if request.param == "local":
        yield Store(tmp_path)
    elif request.param == "memory":
        name = f"gts-contract-{uuid.uuid4().hex[:8]}"
        yield Store(f"memory://{name}")
        try:
            MemoryFileSystem().rm(f"/{name}", recursive=True)
        except FileNotFoundError:
            pass
    else:
        opts = request.getfixturevalue("s3_opts")
        yield Store(f"s3://gtsamples-store/{uuid.uuid4().hex[:8]}", opts)


def test_root_opens_its_registered_class(store, tmp_path):
    assert isinstance(store, Store)
    assert type(store) is (LocalStore if store.is_local else FsspecStore)
    assert type(store) is store_class(store.root) and is_local_root(store.root) == store.is_local
    assert repr(store) == f"{type(store).__name__}({store.root!r})"
    assert store.path("a/b").endswith("/a/b")


def test_put_then_every_read_returns_the_bytes(store):
    store.put("d/obj", DATA)
    assert store.exists("d/obj") and not store.exists("d/none")
    assert store.size("d/obj") == len(DATA)
    st = ReadStats()
    assert store.read("d/obj", 1000, 10, st) == DATA[1000:1010]
    assert (st.requests, st.bytes_read) == (1, 10)
    assert store.read_whole("d/obj", None, len(DATA)) == DATA
    assert store.read_whole("d/obj", len(DATA), len(DATA)) == DATA
    offs, lens = [10, 20, 600_000, 900_000], [5, 5, 3, 0]
    st = ReadStats()
    buf, pos = store.read_ranges("d/obj", offs, lens, st, gap=100)
    assert [bytes(buf[p: p + n]) for p, n in zip(pos.tolist(), lens)] == [DATA[o: o + n] for o, n in zip(offs, lens)]
    assert st.requests == 3  # [10, 25) coalesced; the others apart
    many = [("d/obj", [0, 100], [4, 4]), ("d/obj2", [7], [3])]
    store.put("d/obj2", DATA[:100])
    buf, poss = store.read_ranges_many(many)
    assert [bytes(buf[p: p + 4]) for p in poss[0].tolist()] == [DATA[0:4], DATA[100:104]]
    assert bytes(buf[poss[1][0]: poss[1][0] + 3]) == DATA[7:10]
    obj = np.array([0, 0, 1], np.int64)
    off, ln = np.array([0, 100, 7], np.uint64), np.array([4, 4, 3], np.uint64)
    st = ReadStats()
    buf, pos = store.read_coalesced(["d/obj", "d/obj2"], obj, off, ln, st)
    assert [bytes(buf[p: p + int(n)]) for p, n in zip(pos.tolist(), ln)] == [DATA[0:4], DATA[100:104], DATA[7:10]]
    assert (st.requests, st.bytes_read) == (2, 104 + 3)  # one request per object, the gap kept


def test_reader_reads_as_the_store_does(store):
    store.put("obj", DATA)
    st = ReadStats()
    with store.reader("obj", st) as rd:
        assert isinstance(rd, LocalObjectReader if store.is_local else ObjectReader)
        assert rd.read(5, 3) == DATA[5:8]
        assert rd.read_ranges([0, 800_000], [4, 4]) == [DATA[0:4], DATA[800_000:800_004]]
        assert rd.read_ranges([0, 10, 30], [4, 4, 0], gap=64) == [DATA[0:4], DATA[10:14], b""]
        offs = list(range(0, 40 * 100, 100))  # more than SMALL_RANGE_COUNT ranges
        assert rd.read_ranges(offs, [2] * 40) == [DATA[o: o + 2] for o in offs]
    assert st.bytes_read >= 3 + 8 + 8 + 80


def test_missing_and_short_objects_are_corruption_naming_the_object(store):
    store.put("short", b"0123456789")
    for call in (lambda: store.read("nope", 0, 4), lambda: store.size("nope"),
                 lambda: store.read_ranges("nope", [0], [4]), lambda: store.read_whole("nope", None, 100)):
        with pytest.raises(CorruptArtifactError, match=r"nope: object is missing"):
            call()
    with pytest.raises(CorruptArtifactError, match=r"short: object is shorter than its recorded size"):
        store.read("short", 5, 10)
    with pytest.raises(CorruptArtifactError, match=r"short: object is shorter than its recorded size"):
        store.read_ranges("short", [0, 8], [2, 4])
    with pytest.raises(CorruptArtifactError, match=r"short: object is shorter .* largest possible object end"):
        store.read_ranges("short", [MAX_OBJECT_END - 1], [4])
    with pytest.raises(CorruptArtifactError, match=r"short: size 10 exceeds the limit of 5 bytes"):
        store.read_whole("short", None, 5)


def test_writes_listing_and_removal(store):
    assert store.put_if_absent("c/v1", b"mine") is True
    assert store.put_if_absent("c/v1", b"mine") is True  # a retry that finds its own object
    assert store.put_if_absent("c/v1", b"theirs") is False
    store.put("c/v1", b"replaced")
    assert store.read_whole("c/v1", None, 100) == b"replaced"
    pub = store.publish("gen")
    w = pub.open("part-0.samples")
    w.write([b"ab", memoryview(np.arange(3, dtype=np.uint8))])
    w.close()
    pub.commit()
    assert w.size == 5 and store.read("gen/part-0.samples", 0, 5) == b"ab\x00\x01\x02"
    with pytest.raises(FileExistsError):
        store.publish("gen")
    assert sorted(store.list("")) == [("c", True), ("gen", True)]
    assert sorted(store.names("c/")) == ["v1"] and store.list("none") == [] and store.names("none") == []
    assert isinstance(store.identity("c/v1"), tuple)
    t = store.newest_mtime("gen", True)
    assert t is not None and store.newest_mtime("none", False) is None
    store.remove("c/v1")
    store.remove("c/v1")  # missing: not an error
    store.rmdir_if_empty("c")
    assert not store.exists("c/v1")
    store.remove("gen", recursive=True)
    assert store.list("gen") == []


def test_local_identity_tells_a_rewritten_object(tmp_path):
    st = Store(tmp_path)
    st.put("v", b"one")
    first = st.identity("v")
    assert len(first) == 3 and st.identity("v") == first
    st.remove("v")
    st.put("v", b"other")
    assert st.identity("v") != first and st.identity("missing") == ()


def test_root_forms_and_options(tmp_path):
    assert type(Store(f"file://{tmp_path}")) is LocalStore
    assert Store(f"file://{tmp_path}/").path("a") == f"{tmp_path}/a"
    with pytest.raises(ValueError, match="storage_options apply only to fsspec URLs"):
        Store(tmp_path, {"anon": True})
    assert LocalStore(tmp_path).path("x") == Store(tmp_path).path("x")


class _ReadOnly(Store):
    """The least a store defines: no writes."""

    def path(self, key):
        return f"ro/{key}"

    def getsize(self, key):
        raise FileNotFoundError(key)

    def exists(self, key):
        return False

    def read_into(self, key, ranges, out, out_pos, stats):
        raise StorageError(f"{self.path(key)}: cannot read: offline")

    def list(self, key):
        return []


def test_a_store_without_writes_refuses_them_naming_itself():
    ro = _ReadOnly("ro://x")
    for call in (lambda: ro.put("k", b"x"), lambda: ro.put_if_absent("k", b"x"), lambda: ro.publish("k"),
                 lambda: ro.remove("k")):
        with pytest.raises(UnsupportedError, match=r"ro/k: _ReadOnly cannot"):
            call()
    assert ro.newest_mtime("k", False) is None and ro.identity("k") == ()
    with pytest.raises(CorruptArtifactError, match="ro/k: object is missing"):
        ro.size("k")
    with pytest.raises(StorageError, match="offline"):
        ro.read("k", 0, 1)


def test_an_incomplete_store_cannot_be_made():
    class NoReads(Store):
        def path(self, key):
            return key

    with pytest.raises(TypeError, match="abstract"):
        NoReads("x://y")


def test_one_store_serves_many_threads(store):
    """A store holds no per-call state: concurrent reads of every kind return their bytes."""
    import concurrent.futures

    store.put("t/obj", DATA)

    def work(i):
        o = (i * 7919) % (len(DATA) - 64)
        with store.reader("t/obj") as rd:
            one = rd.read(o, 16)
        buf, pos = store.read_ranges("t/obj", [o, o + 40], [8, 8])
        return one == DATA[o: o + 16] and bytes(buf[pos[1]: pos[1] + 8]) == DATA[o + 40: o + 48]

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        assert all(ex.map(work, range(200)))


def _child_read(store, q):
    q.put(store.read("f/obj", 3, 5))


def test_a_forked_child_reads_through_its_parents_store(tmp_path):
    import multiprocessing as mp

    for st in (Store(tmp_path), Store(f"memory://gts-fork-{uuid.uuid4().hex[:8]}")):
        st.put("f/obj", DATA)
        st.read("f/obj", 0, 1)  # used in the parent first
        ctx = mp.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=_child_read, args=(st, q))
        p.start()
        got = q.get(timeout=60)
        p.join(60)
        assert p.exitcode == 0 and got == DATA[3:8]


def test_listed_identity_needs_an_etag_or_a_time():
    from gtsamples.storage.remote import listed_identity

    assert listed_identity({"name": "b/v", "type": "file", "size": 10, "ETag": '"ab"'}) == ('"ab"', "", 10)
    assert listed_identity({"name": "b/v", "type": "file", "size": 10, "mtime": 5.0}) == ("", "5.0", 10)
    assert listed_identity({"name": "b/v", "type": "file", "size": 10, "created": 7}) == ("", "7", 10)
    assert listed_identity({"name": "b/v", "type": "file", "size": 10}) == ()  # a size alone tells nothing
    assert listed_identity({"name": "b/d", "type": "directory", "size": 0, "ETag": "x"}) == ()


@pytest.mark.parametrize("limit", [None, 1000])
def test_local_reads_either_side_of_the_one_pread_limit(tmp_path, monkeypatch, limit):
    from gtsamples.storage import store as tuning

    if limit is not None:  # the same reads through the preadv loop past a small limit
        monkeypatch.setattr(tuning, "PREAD_MAX_BYTES", limit)
    big = np.random.default_rng(3).integers(0, 256, 3 << 20, dtype=np.uint8).tobytes()  # a 10,000-SST catalog's size
    st = Store(tmp_path)
    st.put("big", big)
    n = len(big)
    cases = ((0, n), (1, n - 1), (7, n - 7)) if limit is None else ((0, limit), (0, limit + 1), (5, limit - 1))
    for off, ln in cases:
        stats = ReadStats()
        assert st.read("big", off, ln, stats) == big[off: off + ln]
        assert (stats.requests, stats.bytes_read) == (1, ln)
        with st.reader("big") as rd:
            assert rd.read(off, ln) == big[off: off + ln]
    assert st.read_whole("big", None, len(big)) == big
    st.put("cut", big[: (2 << 20)])  # recorded 3 MiB, holds 2: corruption, whichever path reads it
    with pytest.raises(CorruptArtifactError, match=r"cut: object is shorter than its recorded size"):
        st.read("cut", 0, 3 << 20)


@pytest.mark.parametrize("opts", ["anon=true", [("anon", True)], 1])
def test_storage_options_must_be_a_mapping(tmp_path, opts):
    """Before: dict() of a string raised 'dictionary update sequence element #0 has length
    1', and a list of pairs was taken as a dict."""
    from gtsamples.storage import Store

    with pytest.raises(TypeError, match=f"storage_options must be a dict \\(fsspec's options\\) or None, not "
                                        f"{type(opts).__name__}"):
        Store(str(tmp_path), opts)
    assert Store(str(tmp_path), None).storage_options == {}
    assert Store("memory://b", {"skip_instance_cache": True}).storage_options == {"skip_instance_cache": True}
