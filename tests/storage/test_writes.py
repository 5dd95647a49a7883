"""Store writes (put-if-absent, put, publish, list, remove, gc helpers) on the local and
the fsspec store, and the remote read path's length checks and errors."""

from __future__ import annotations

import errno
import os
import time
import uuid

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from gtsamples.errors import CorruptArtifactError, SamplesError, StorageError
from gtsamples.storage import ReadStats, Store


def _rm_tree(fs, path):
    try:
        fs.rm(path, recursive=True)
    except FileNotFoundError:
        pass


@pytest.fixture
def mem_root():
    """A fresh directory of the (process-wide) memory filesystem."""
    name = f"gts-store-{uuid.uuid4().hex[:8]}"
    yield f"memory://{name}"
    _rm_tree(MemoryFileSystem(), f"/{name}")


@pytest.fixture(params=["local", "memory"])
def store(request, tmp_path, mem_root):
    return Store(tmp_path) if request.param == "local" else Store(mem_root)


def _read(store: Store, key: str) -> bytes:
    return store.read_whole(key, None, 1 << 20)


def test_put_if_absent_creates_once(store):
    assert store.put_if_absent("cat/v1.json", b"first") is True
    assert _read(store, "cat/v1.json") == b"first"
    assert store.put_if_absent("cat/v1.json", b"other") is False  # someone else's: a conflict
    assert store.put_if_absent("cat/v1.json", b"other!") is False  # another size: not even fetched
    assert _read(store, "cat/v1.json") == b"first"
    # the same bytes again (a retry that finds its own first attempt) is not a conflict
    assert store.put_if_absent("cat/v1.json", b"first") is True
    assert [n for n, _ in store.list("cat")] == ["v1.json"]  # no temporary file left


def test_put_replaces_whole_objects(store):
    store.put("sst/a.parquet", b"old bytes")
    store.put("sst/a.parquet", memoryview(b"new"))
    assert _read(store, "sst/a.parquet") == b"new"
    assert store.list("sst") == [("a.parquet", False)]


def test_publish_local_appears_only_on_commit(tmp_path):
    store = Store(tmp_path)
    pub = store.publish("1/samples/f/g/")
    obj = pub.open("part-0.samples")
    obj.write([b"ab", memoryview(b"cd"), b""])
    obj.close()
    assert obj.size == 4
    assert not (tmp_path / "1/samples/f/g").exists()  # nothing at the final name yet
    assert [n for n, _ in store.list("1/samples/f")][0].startswith(".tmp-g-")
    m = pub.open("manifest.json")
    m.write([b"{}"])
    m.close()
    pub.commit()
    assert store.list("1/samples/f") == [("g", True)]
    assert sorted(n for n, _ in store.list("1/samples/f/g")) == ["manifest.json", "part-0.samples"]
    assert _read(store, "1/samples/f/g/part-0.samples") == b"abcd"
    with pytest.raises(FileExistsError):
        store.publish("1/samples/f/g")
    pub = store.publish("1/samples/f/h")
    pub.open("part-0.samples").discard()
    pub.abort()
    assert store.list("1/samples/f") == [("g", True)]


def test_publish_fsspec_writes_in_order_and_aborts(mem_root):
    store = Store(mem_root)
    pub = store.publish("1/samples/f/g")
    for name, data in (("part-0.samples", [b"xy", memoryview(b"z")]), ("manifest.json", [b"{}"])):
        obj = pub.open(name)
        obj.write(data)
        obj.close()
    pub.commit()
    assert _read(store, "1/samples/f/g/part-0.samples") == b"xyz"
    with pytest.raises(FileExistsError):
        store.publish("1/samples/f/g")
    pub = store.publish("1/samples/f/h")
    obj = pub.open("part-0.samples")
    obj.write([b"partial"])
    obj.close()
    pub.abort()
    assert not store.exists("1/samples/f/h/part-0.samples")


def test_list_remove_and_mtimes(store):
    assert store.list("nothing/here") == []
    assert store.newest_mtime("nothing/here", True) is None
    before = time.time() - 5
    store.put("d/sub/a", b"1")
    store.put("d/b", b"2")
    assert sorted(store.list("d")) == [("b", False), ("sub", True)]
    t = store.newest_mtime("d", True)
    assert t is not None and t >= before
    assert store.newest_mtime("d/b", False) >= before
    store.remove("d/b")
    store.remove("d/b")  # missing: fine
    store.remove("d/sub", recursive=True)
    assert store.list("d") == []
    store.rmdir_if_empty("d")
    assert not store.exists("d/b")


def test_local_rmdir_if_empty_keeps_a_full_directory(tmp_path):
    store = Store(tmp_path)
    store.put("d/a", b"1")
    store.rmdir_if_empty("d")
    assert store.list("d") == [("a", False)]
    store.remove("d/a")
    store.rmdir_if_empty("d")
    assert not (tmp_path / "d").exists()


# --- fsspec failures: StorageError naming the object -----------------------------------------


class _Flaky(MemoryFileSystem):
    """A memory filesystem whose operations fail while ``fail`` names them."""

    protocol = "gtsflaky"
    fail: set = set()
    short: int = 0  # ranged reads that come back one byte short
    calls: list = []

    def _maybe(self, op, path):
        _Flaky.calls.append(op)
        if op in _Flaky.fail:
            raise OSError(errno.EIO, f"injected {op} failure", path)

    def cat_file(self, path, start=None, end=None, **kw):
        self._maybe("cat", path)
        data = super().cat_file(path, start, end, **kw)
        if start is not None and _Flaky.short:
            _Flaky.short -= 1
            return data[:-1]
        return data

    def pipe_file(self, path, value, mode="overwrite", **kw):
        self._maybe("put", path)
        return super().pipe_file(path, value, mode=mode, **kw)

    def ls(self, path, detail=True, **kw):
        self._maybe("ls", path)
        return super().ls(path, detail=detail, **kw)

    def rm(self, path, recursive=False, maxdepth=None):
        self._maybe("rm", path)
        return super().rm(path, recursive=recursive, maxdepth=maxdepth)


@pytest.fixture
def flaky():
    fsspec.register_implementation("gtsflaky", _Flaky, clobber=True)
    name = f"gts-flaky-{uuid.uuid4().hex[:8]}"
    _Flaky.fail, _Flaky.short, _Flaky.calls = set(), 0, []
    yield Store(f"gtsflaky://{name}")
    _Flaky.fail, _Flaky.short = set(), 0
    _rm_tree(MemoryFileSystem(), f"/{name}")


def test_fsspec_failures_are_storage_errors_naming_the_object(flaky):
    flaky.put("a/obj", bytes(range(100)))
    _Flaky.fail = {"cat"}
    with pytest.raises(StorageError, match=r"a/obj: cannot read \[10, 30\): .*injected cat failure") as ei:
        flaky.read_ranges("a/obj", [10], [20])
    assert isinstance(ei.value, SamplesError) and isinstance(ei.value, OSError)
    _Flaky.fail = {"put"}
    with pytest.raises(StorageError, match=r"a/new: cannot write: .*injected put failure") as ei:
        flaky.put("a/new", b"x")
    assert ei.value.errno == errno.EIO
    with pytest.raises(StorageError, match=r"a/v1: cannot create \(whether it was written is unknown\)"):
        flaky.put_if_absent("a/v1", b"x")
    _Flaky.fail = {"ls"}
    with pytest.raises(StorageError, match=r"a: cannot list: .*injected ls failure"):
        flaky.list("a")
    _Flaky.fail = {"rm"}
    with pytest.raises(StorageError, match=r"a/obj: cannot remove"):
        flaky.remove("a/obj")


def test_put_if_absent_decides_a_failed_put_by_reading_back(flaky):
    """A conditional put that fails after it landed (its response lost) is ours;
    one that failed and did not land is an unknown outcome, not a conflict."""

    class LandsThenFails(_Flaky):
        protocol = "gtsflaky"

        def pipe_file(self, path, value, mode="overwrite", **kw):
            MemoryFileSystem.pipe_file(self, path, value, mode=mode, **kw)
            raise OSError(errno.ECONNRESET, "connection reset after the put landed", path)

    fsspec.register_implementation("gtsflaky", LandsThenFails, clobber=True)
    st = Store(flaky.root)
    assert st.put_if_absent("c/v1", b"mine") is True
    assert st.put_if_absent("c/v1", b"theirs") is False
    fsspec.register_implementation("gtsflaky", _Flaky, clobber=True)


def test_remote_short_range_is_read_again_then_corruption(flaky):
    data = bytes(range(200))
    flaky.put("s/obj", data)
    _Flaky.short, _Flaky.calls = 2, []  # two bodies cut short in transit: read again, whole
    st = ReadStats()
    buf, pos = flaky.read_ranges("s/obj", [0, 150], [10, 40], st, gap=0)
    assert bytes(buf[pos[0]:pos[0] + 10]) == data[:10] and bytes(buf[pos[1]:pos[1] + 40]) == data[150:190]
    assert _Flaky.calls.count("cat") == 4  # two ranges, each short once, each read again
    _Flaky.short, _Flaky.calls = 2, []
    assert flaky.read("s/obj", 100, 50) == data[100:150]  # short twice, whole the third time
    assert _Flaky.calls.count("cat") == 3
    _Flaky.short = 100  # short every time: the object is shorter than recorded
    with pytest.raises(CorruptArtifactError, match=r"s/obj: object is shorter than its recorded size"):
        flaky.read("s/obj", 100, 50)
    with pytest.raises(CorruptArtifactError, match="s/obj: object is shorter"):
        flaky.read_ranges_many([("s/obj", [0], [10]), ("s/obj", [100], [10])])
    _Flaky.short = 0
    with pytest.raises(CorruptArtifactError, match=r"s/missing: object is missing"):
        flaky.read("s/missing", 0, 1)
    with pytest.raises(CorruptArtifactError, match=r"s/missing: object is missing"):
        flaky.size("s/missing")


def test_local_read_errors_are_storage_errors(tmp_path):
    (tmp_path / "dir").mkdir()
    with pytest.raises(StorageError, match="dir: cannot read"):
        Store(tmp_path).read("dir", 0, 10)
    with pytest.raises(StorageError, match="dir: cannot read"):
        Store(tmp_path).read_ranges("dir", [0], [2 << 20])


@pytest.mark.parametrize("op", ["put", "put_if_absent", "publish"])
def test_local_write_errors_keep_their_os_error(tmp_path, op):
    """Local writes raise the OS's own error (errno and path), as the writer always has."""
    (tmp_path / "file").write_bytes(b"x")
    store = Store(tmp_path)
    with pytest.raises(OSError) as ei:
        if op == "publish":
            store.publish("file/gen")
        else:
            getattr(store, op)("file/sub/obj", b"y")
    assert not isinstance(ei.value, StorageError)
    assert ei.value.errno in (errno.ENOTDIR, errno.EEXIST)
    assert os.listdir(tmp_path) == ["file"]


def test_put_if_absent_tells_a_412_by_the_error_not_by_digits_in_its_text(flaky):
    """A failed put whose message holds "412" only in its key (or port) raises, as an
    unknown outcome; a precondition failure (botocore's PreconditionFailed, an HttpError's
    code 412) with another object there is a conflict."""

    class ResetInKey(_Flaky):
        protocol = "gtsflaky"

        def pipe_file(self, path, value, mode="overwrite", **kw):
            raise OSError(errno.ECONNRESET, "Connection reset: http://127.0.0.1:4125/b", path)

    fsspec.register_implementation("gtsflaky", ResetInKey, clobber=True)
    st = Store(flaky.root)
    with pytest.raises(StorageError, match=r"51d444a4128a/v1: cannot create \(whether it was written is unknown\)"):
        st.put_if_absent("51d444a4128a/v1", b"mine")

    class Botocore412(Exception):
        response = {"Error": {"Code": "PreconditionFailed"}, "ResponseMetadata": {"HTTPStatusCode": 412}}

    class GcsHttpError(Exception):
        code = 412

    for err in (Botocore412("An error occurred"), GcsHttpError("conditionNotMet")):
        class ThemFirst(_Flaky):
            protocol = "gtsflaky"

            def pipe_file(self, path, value, mode="overwrite", err=err, **kw):
                MemoryFileSystem.pipe_file(self, path, b"theirs", mode="overwrite")
                raise OSError("put refused") from err

        fsspec.register_implementation("gtsflaky", ThemFirst, clobber=True)
        key = f"c/{type(err).__name__}"
        assert Store(flaky.root).put_if_absent(key, b"mine") is False
    fsspec.register_implementation("gtsflaky", _Flaky, clobber=True)


def test_put_if_absent_read_back_failing_is_unknown_not_lost(flaky):
    """The read-back after a conditional put that landed fails with a
    ``FileNotFoundError`` whose cause is a server error (fsspec's HTTP filesystem
    raises one for any failed GET): the outcome is unknown, a ``StorageError``, not
    "another writer's object" (the caller would commit its change a second time).
    A read-back that finds no object at all is still "not written"."""

    class ServerError(Exception):
        status = 500

    class ReadBackFails(_Flaky):
        protocol = "gtsflaky"

        def cat_file(self, path, start=None, end=None, **kw):
            raise FileNotFoundError(path) from ServerError("500 Internal Server Error")

    fsspec.register_implementation("gtsflaky", ReadBackFails, clobber=True)
    st = Store(flaky.root)
    with pytest.raises(StorageError, match=r"r/v1: cannot create \(whether it was written is unknown\)"):
        st.put_if_absent("r/v1", b"mine")

    class Gone(_Flaky):  # put accepted, yet the object is not there: not ours
        protocol = "gtsflaky"

        def pipe_file(self, path, value, mode="overwrite", **kw):
            return None

    fsspec.register_implementation("gtsflaky", Gone, clobber=True)
    assert Store(flaky.root).put_if_absent("r/v2", b"mine") is False
    fsspec.register_implementation("gtsflaky", _Flaky, clobber=True)
