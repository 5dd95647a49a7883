"""gtsamples.storage.fds: the process-wide cache of open part files, and LocalStore's
reads through it (leases, eviction, removed and replaced objects, EMFILE, threads, fork)."""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import shutil
import threading

import numpy as np
import pytest

from gtsamples.errors import CorruptArtifactError
from gtsamples.storage import LocalStore, ReadStats, Store, fds

from ..concurrency.threads import barrier_threads, held_by_a_thread, in_child


def _body(i: int, n: int = 4096) -> bytes:
    return bytes((i * 31 + k) % 251 for k in range(n))


@pytest.fixture
def parts(tmp_path):
    """40 objects ``g<i>/part-0`` of distinct bytes under a LocalStore."""
    store = Store(tmp_path)
    for i in range(40):
        (tmp_path / f"g{i}").mkdir()
        (tmp_path / f"g{i}" / "part-0").write_bytes(_body(i))
    return store


@pytest.fixture
def cache():
    """A fresh process-wide cache for the test (the default size restored after)."""
    fds.set_fd_cache_size(fds.DEFAULT_MAX_FDS)
    yield fds.default_fd_cache()
    fds.set_fd_cache_size(fds.DEFAULT_MAX_FDS)


def _read_all(store, ids, off=100, n=64) -> list[bytes]:
    """One read_coalesced over the objects ``ids``: the bytes of each."""
    keys = [f"g{i}/part-0" for i in ids]
    obj = np.arange(len(ids), dtype=np.int64)
    offs, lens = np.full(len(ids), off, np.uint64), np.full(len(ids), n, np.uint64)
    buf, pos = store.read_coalesced(keys, obj, offs, lens, ReadStats())
    return [bytes(buf[p: p + n]) for p in pos.tolist()]


def _want(ids, off=100, n=64) -> list[bytes]:
    return [_body(i)[off: off + n] for i in ids]


def test_reads_keep_part_files_open_up_to_the_bound(parts, cache):
    fds.set_fd_cache_size(8)
    c = fds.default_fd_cache()
    st = ReadStats()
    buf, pos = parts.read_ranges_many([(f"g{i}/part-0", [0, 2000], [4, 8]) for i in range(3)], st, gap=0)
    assert [bytes(buf[p: p + 4]) for p in (pos[0][0], pos[1][0], pos[2][0])] == [_body(i)[:4] for i in range(3)]
    assert (st.requests, st.bytes_read) == (6, 36)
    assert len(c) == 3 and c.misses == 3
    assert _read_all(parts, range(3)) == _want(range(3))
    assert c.hits == 3 and c.misses == 3  # the second read opened nothing
    assert _read_all(parts, range(40)) == _want(range(40))
    assert len(c) == 8  # least recently used closed beyond the bound
    assert all(e.refs == 0 for e in c._items.values())
    with parts.reader("g39/part-0") as rd:  # the navigator's reader leases the cached descriptor
        assert rd.read(5, 3) == _body(39)[5:8]
        assert c._items[parts.fd_path("g39/part-0")].refs == 1
    assert c._items[parts.fd_path("g39/part-0")].refs == 0


def test_size_zero_keeps_nothing_open(parts, cache):
    fds.set_fd_cache_size(0)
    before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    assert _read_all(parts, range(40)) == _want(range(40))
    with parts.reader("g1/part-0") as rd:
        assert rd.read(0, 4) == _body(1)[:4]
    assert len(fds.default_fd_cache()) == 0
    if before is not None:
        assert len(os.listdir("/proc/self/fd")) == before


def test_eviction_never_closes_a_leased_descriptor(tmp_path):
    c = fds.FdCache(1)
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"A" * 100)
    b.write_bytes(b"B" * 100)
    la = c.lease(str(a))
    lb = c.lease(str(b))  # evicts a from the table: a is leased, so it stays open
    assert len(c) == 1 and la.dead and not lb.dead
    other = os.open(str(b), os.O_RDONLY)  # would take a's number were it closed
    try:
        assert os.pread(la.fd, 4, 0) == b"AAAA"
        c.release(la)  # the last lease of an evicted entry closes it
        with pytest.raises(OSError):
            os.fstat(la.fd)
    finally:
        os.close(other)
    c.release(lb)
    assert os.pread(lb.fd, 4, 0) == b"BBBB"  # idle, still cached
    c.clear()
    assert len(c) == 0


def test_a_removed_or_replaced_object_is_not_read_through_its_old_descriptor(parts, cache, tmp_path):
    """Region GC removes a generation; a new object at the same path (here: the same
    directory written again, and a file renamed over another) is read, not the old one."""
    assert _read_all(parts, [0, 1]) == _want([0, 1])
    old = cache._items[parts.fd_path("g0/part-0")]
    shutil.rmtree(tmp_path / "g0")  # behind the store's back: the link count tells
    (tmp_path / "g0").mkdir()
    (tmp_path / "g0" / "part-0").write_bytes(_body(7))
    tmp = tmp_path / "g1" / "new"
    tmp.write_bytes(_body(8))
    os.replace(tmp, tmp_path / "g1" / "part-0")
    assert _read_all(parts, [0, 1]) == _want([7, 8])
    assert cache._items[parts.fd_path("g0/part-0")] is not old and old.dead
    assert old.refs == 0  # released, dead: closed
    # the store's own writes forget what they replace or remove at once
    parts.put("g2/part-0", _body(9))
    assert parts.fd_path("g2/part-0") not in cache._items
    assert _read_all(parts, [2, 3]) == _want([9, 3])
    parts.remove("g3", recursive=True)
    assert parts.fd_path("g3/part-0") not in cache._items
    assert parts.fd_path("g2/part-0") in cache._items
    with pytest.raises(CorruptArtifactError, match=r"g3/part-0: object is missing"):
        _read_all(parts, [2, 3])
    assert all(e.refs == 0 for e in cache._items.values())  # the failed read gave its leases back


def test_a_relative_root_reads_the_current_directory(parts, cache, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rel = LocalStore("g5")
    assert rel.read_coalesced(["part-0"], np.zeros(1, np.int64), np.array([10], np.uint64),
                              np.array([4], np.uint64))[0].tobytes() == _body(5)[10:14]
    monkeypatch.chdir(tmp_path / "g5")
    (tmp_path / "g5" / "g5").mkdir()
    (tmp_path / "g5" / "g5" / "part-0").write_bytes(_body(6))
    assert rel.read_coalesced(["part-0"], np.zeros(1, np.int64), np.array([10], np.uint64),
                              np.array([4], np.uint64))[0].tobytes() == _body(6)[10:14]


def test_no_descriptor_free_closes_the_idle_ones_and_reads_uncached(parts, cache, monkeypatch):
    assert _read_all(parts, range(5)) == _want(range(5))
    real_open, calls = os.open, []

    def open_emfile_once(path, flags, *a):
        calls.append(path)
        if len(calls) == 1:
            raise OSError(errno.EMFILE, "Too many open files", path)
        return real_open(path, flags, *a)

    monkeypatch.setattr(fds.os, "open", open_emfile_once)
    assert _read_all(parts, [20]) == _want([20])
    assert len(calls) == 2 and len(cache) == 0  # idle ones closed; the retry's closed after the read
    monkeypatch.setattr(fds.os, "open", real_open)
    assert _read_all(parts, range(3)) == _want(range(3)) and len(cache) == 3


def test_a_real_descriptor_limit_in_a_child(parts, cache):
    """A forked child left 3 free descriptors reads 40 objects through a cache allowed 256:
    an EMFILE gives the idle ones back (and one call needing more than are free reads
    object by object, each opened and closed)."""

    def child():
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        fillers = []
        try:
            while True:
                fillers.append(os.open(os.devnull, os.O_RDONLY))
        except OSError as e:
            assert e.errno == errno.EMFILE
        for fd in fillers[-3:]:
            os.close(fd)
        flushes = []
        clear_idle = fds.FdCache.clear_idle
        fds.FdCache.clear_idle = lambda self: (flushes.append(1), clear_idle(self))[1]
        ok = all(_read_all(parts, [k, k + 1]) == _want([k, k + 1]) for k in range(0, 40, 2))
        ok = ok and _read_all(parts, range(8)) == _want(range(8))  # more than are free
        return ok and len(flushes) >= 10 and len(fds.default_fd_cache()) <= 3

    in_child(child)


def test_many_threads_read_right_bytes_while_entries_are_evicted_and_cleared(parts):
    """8 threads read 40 objects through a cache of 4 descriptors (every read evicts)
    while another thread forgets entries and clears it: a descriptor is never closed
    under a reader."""
    c = fds.FdCache(4)
    stop = threading.Event()

    def clearer():
        k = 0
        while not stop.is_set():
            c.forget(parts.fd_path(f"g{k % 40}/part-0"))
            k += 1
            if k % 7 == 0:
                c.clear()

    def work(k):
        rng = np.random.default_rng(k)
        for _ in range(300):
            ids = rng.choice(40, 3, replace=False).tolist()
            leases = c.lease_many([parts.fd_path(f"g{i}/part-0") for i in ids])
            try:
                got = [os.pread(ls.fd, 64, 100) for ls in leases]
            finally:
                c.release_many(leases)
            if got != _want(ids):
                return f"wrong bytes for {ids}"
            with parts.reader(f"g{ids[0]}/part-0") as rd:  # the default cache, at the same time
                if rd.read(100, 64) != _want(ids[:1])[0]:
                    return "wrong reader bytes"
        return True

    t = threading.Thread(target=clearer)
    t.start()
    try:
        res = barrier_threads(8, work)
    finally:
        stop.set()
        t.join()
    assert res == [True] * 8
    assert len(c) <= 4 and all(e.refs == 0 for e in c._items.values())
    c.clear()


def test_a_forked_child_reads_through_inherited_descriptors(parts, cache):
    """The child renews the lock (held by another thread at the fork), keeps the idle
    descriptors and reads through them; the forking thread's own lease is still its own
    there, and given back there as in the parent."""
    assert _read_all(parts, range(4)) == _want(range(4))
    path0 = parts.fd_path("g0/part-0")
    held = cache.lease(path0)
    try:
        with held_by_a_thread(cache._lock.lock):
            def child():
                e = cache._items[path0]
                assert e is held and e.refs == 1  # this thread's lease, kept
                kept = cache._items[parts.fd_path("g1/part-0")]
                ok = _read_all(parts, range(6)) == _want(range(6))
                cache.release(held)
                os.fstat(held.fd)  # still open: cached, idle
                return ok and cache._items[parts.fd_path("g1/part-0")] is kept and held.refs == 0
            in_child(child)
    finally:
        cache.release(held)
    assert cache._items[path0].refs == 0  # the parent's table is its own
    assert _read_all(parts, range(6)) == _want(range(6))


@contextlib.contextmanager
def _leased_by_a_thread(cache, paths):
    """Leases of ``paths`` taken by another thread and held for the body (then given back)."""
    got, done = [], threading.Event()
    taken = threading.Event()

    def hold():
        got.extend(cache.lease_many(paths))
        taken.set()
        done.wait(60)
        cache.release_many(got)

    t = threading.Thread(target=hold)
    t.start()
    assert taken.wait(30)
    try:
        yield got
    finally:
        done.set()
        t.join()


def _open_fd(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError as e:
        assert e.errno == errno.EBADF
        return False


def test_a_forked_child_drops_the_leases_of_the_parents_other_threads(parts, cache):
    """Leases another thread of the parent held at the fork are never given back in the
    child (that thread does not exist there): a cached entry becomes idle and is read
    through; a descriptor already out of the table (cleared while leased) is closed,
    not left open for the child's life.  The parent's leases are untouched."""
    assert _read_all(parts, range(4)) == _want(range(4))
    p0, p1 = parts.fd_path("g0/part-0"), parts.fd_path("g1/part-0")
    with _leased_by_a_thread(cache, [p0, p1]) as (l0, l1):
        cache.forget(p1)  # out of the table while leased: held until its release
        assert cache.held_count() == 1 and _open_fd(l1.fd)

        def child():
            e = cache._items[p0]
            assert e is l0 and e.refs == 0 and not e.dead  # idle now: the child's own cached descriptor
            assert cache.held_count() == 0 and not _open_fd(l1.fd)  # no owner left: closed
            ok = _read_all(parts, range(4)) == _want(range(4))
            return ok and cache._items[p0] is l0 and l0.refs == 0 and _open_fd(l0.fd)

        in_child(child)
        assert l0.refs == 1 and l1.refs == 1 and _open_fd(l1.fd)  # the parent's thread still reads
    assert cache.held_count() == 0 and not _open_fd(l1.fd) and l0.refs == 0


def test_a_held_lease_of_the_forking_thread_closes_on_its_release_in_the_child(parts, cache):
    path = parts.fd_path("g2/part-0")
    lease = cache.lease(path)
    cache.clear()  # leased: held, not closed
    try:
        def child():
            assert cache.held_count() == 1 and lease.refs == 1 and _open_fd(lease.fd)
            cache.release(lease)
            return cache.held_count() == 0 and not _open_fd(lease.fd)

        in_child(child)
        assert _open_fd(lease.fd)
    finally:
        cache.release(lease)
    assert cache.held_count() == 0 and not _open_fd(lease.fd)


def test_a_lease_given_back_by_another_thread_keeps_the_count(parts, cache):
    """Each lease records its thread; one released on another thread still balances."""
    path = parts.fd_path("g3/part-0")
    a, b = cache.lease(path), cache.lease(path)
    assert a is b and a.refs == 2 and len(a.holders) == 2
    t = threading.Thread(target=cache.release, args=(a,))
    t.start()
    t.join()
    assert a.refs == 1 and a.holders == [threading.get_ident()]
    cache.release(b)
    assert a.refs == 0 and a.holders == []


def test_uncached_leases_are_held_until_released(parts, cache):
    """With the cache off each lease is its own descriptor, held until its release closes it."""
    c = fds.FdCache(0)
    lease = c.lease(parts.fd_path("g4/part-0"))
    assert c.held_count() == 1 and _open_fd(lease.fd)
    c.release(lease)
    assert c.held_count() == 0 and not _open_fd(lease.fd)


def _spawned_read(root, q):
    from gtsamples.storage import Store as S

    st = S(root)
    q.put(bytes(st.read_coalesced(["g3/part-0"], np.zeros(1, np.int64), np.array([100], np.uint64),
                                  np.array([64], np.uint64))[0]))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_multiprocessing_children_read_parts(parts, cache, method):
    import multiprocessing as mp

    assert _read_all(parts, range(4)) == _want(range(4))  # the parent's cache is warm
    ctx = mp.get_context(method)
    q = ctx.Queue()
    p = ctx.Process(target=_spawned_read, args=(parts.root, q))
    p.start()
    got = q.get(timeout=120)
    p.join(60)
    assert got == _want([3])[0] and p.exitcode == 0


def test_a_short_or_missing_part_is_the_plain_paths_error(parts, cache):
    """The cached path gives its leases back and the object-by-object path names the object."""
    keys = ["g0/part-0", "g1/part-0", "nope/part-0"]
    st = ReadStats()
    buf, pos = parts.read_coalesced(keys[:2], np.array([0, 0, 1], np.int64), np.array([0, 1000, 8], np.uint64),
                                    np.array([4, 4, 4], np.uint64), st)
    assert [bytes(buf[p: p + 4]) for p in pos.tolist()] == [_body(0)[:4], _body(0)[1000:1004], _body(1)[8:12]]
    assert (st.requests, st.bytes_read) == (2, 1004 + 4)
    with pytest.raises(CorruptArtifactError, match=r"g1/part-0: object is shorter than its recorded size"):
        parts.read_coalesced(keys[:2], np.array([0, 1], np.int64), np.array([0, 4090], np.uint64),
                             np.array([4, 64], np.uint64))
    with pytest.raises(CorruptArtifactError, match=r"nope/part-0: object is missing"):
        parts.read_coalesced(keys, np.array([0, 2], np.int64), np.array([0, 0], np.uint64),
                             np.array([4, 4], np.uint64))
    assert all(e.refs == 0 for e in cache._items.values())


def _table(value: float, n: int = 300):
    import pyarrow as pa

    return pa.table({
        "__table_id": pa.array([1] * n, pa.uint32()), "__tsid": pa.array([7] * n, pa.uint64()),
        "ts": pa.array(np.arange(n, dtype=np.int64) * 1000, pa.timestamp("ms")),
        "__sequence": pa.array(np.ones(n, np.uint64), pa.uint64()), "__op_type": pa.array([1] * n, pa.uint8()),
        "f0": pa.array(np.full(n, value), pa.float64()),
    })


def test_an_artifact_written_again_at_its_path_is_read_anew(tmp_path, cache):
    """A generation removed (as region GC does) and written again under the same name:
    the new parts are read, not the old ones through descriptors kept open."""
    import gtsamples as gs
    from gtsamples.cache import PageCache

    kw = dict(region_id=7, source_file_id="00000000-0000-4000-8000-000000000001", generation="00000000-0000-4000-8000-0000000000aa",
              timestamp_column_id=0, field_column_ids=[1])
    entry = gs.write_artifact(_table(1.5), tmp_path, **kw)
    assert gs.open_artifact(tmp_path, entry=entry, cache=PageCache()).read()["f0"].to_pylist() == [1.5] * 300
    assert len(cache) >= 1  # its part is kept open
    shutil.rmtree(tmp_path / "7" / "samples" / kw["source_file_id"] / kw["generation"])
    entry = gs.write_artifact(_table(2.5), tmp_path, **kw)
    assert gs.open_artifact(tmp_path, entry=entry, cache=PageCache()).read()["f0"].to_pylist() == [2.5] * 300
