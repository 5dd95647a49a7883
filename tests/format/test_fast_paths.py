"""Fast paths of the read path against their rule-by-rule (or numpy) references.

* ``pages.parse_leaf_page`` checks a leaf in one numba pass
  (``pages.leaf_page_rules``), its message built from the rule code it returns:
  on valid and on mutated pages (every descriptor field, lengths, bounds) it must
  give the same tables or the same error as the rule-by-rule reference
  (``tests/format/reference.py``).
* struct-based header / trailer / page reference parsing equals the numpy
  structured views.
* ``Store.read_ranges`` coalesces a few ranges in plain Python: same requests and
  positions as :func:`gtsamples.storage.coalesce`.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import gtsamples as gs
from gtsamples.cache import PageCache
from gtsamples.errors import SamplesError
from gtsamples.format import constants as C
from gtsamples.format import pages
from gtsamples.format import structs as S
from gtsamples.format import zstd
from gtsamples.format.structs import PAGE_REF, TRAILER
from gtsamples.plan import Selection, loading
from gtsamples.storage import ReadStats, Store, coalesce
from gtsamples.storage.store import coalesce_small as _coalesce_small

from ..conftest import DATA
from . import reference

CASES = sorted(p for p in list((DATA / "golden").iterdir()) + list((DATA / "vectors").iterdir())
               if (p / "entry.json").exists())


def _leaf_calls():
    """(data, ref, manifest, column_area) of every leaf page of the test artifacts, as
    the navigator hands them to the page loader."""
    from gtsamples.plan.navigator import navigate_many

    calls = []
    orig = loading.start_leaves

    def spy(jobs):
        for job in jobs:
            data = job.stored
            if job.ref.compression == C.COMP_ZSTD:
                data = zstd.decompress_exact(data, job.ref.decoded_len, C.MAX_PAGE_DECODED, "")
            calls.append((bytes(data), job.ref, job.manifest, job.area))
        return orig(jobs)

    loading.start_leaves = spy
    try:
        for d in CASES:
            art = gs.open_artifact(d / "store", entry=json.loads((d / "entry.json").read_text()), cache=PageCache(0))
            res = navigate_many([art], Selection(), [ReadStats()])[0]
            assert not isinstance(res, SamplesError), res
    finally:
        loading.start_leaves = orig
    return calls


LEAVES = _leaf_calls()


def _outcome(fn):
    try:
        lp = fn()
    except SamplesError as e:
        return ("error", type(e).__name__, str(e))
    return ("ok", lp.blocks.dtype, lp.columns.dtype, lp.blocks.tobytes(), lp.columns.tobytes(),
            lp.col_block.tobytes(), lp.col_start.tobytes())


def _both(data, ref, manifest, area):
    fast = _outcome(lambda: pages.parse_leaf_page(data, ref, manifest, area, "leaf"))
    slow = _outcome(lambda: reference.parse_leaf_page(data, ref, manifest, area, "leaf"))
    return fast, slow


def test_valid_leaves_take_the_kernel_path():
    assert len(LEAVES) >= 8
    for data, ref, manifest, area in LEAVES:
        fast, slow = _both(data, ref, manifest, area)
        assert fast == slow and fast[0] == "ok"
        status = _kernel_status(data, ref, manifest, area)
        assert status == 0


def _kernel_status(data, ref, manifest, area, kernel=None):
    """The rule code of ``pages.leaf_page_rules`` (or ``kernel``) for the page."""
    fields = manifest.fields
    ids = np.array([f.column_id for f in fields], dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    (ft, fs), (lt, ls) = ref.first, ref.last
    k = kernel or pages.leaf_page_rules
    return k(np.frombuffer(data, dtype="<u4", count=len(data) // 4), len(data), len(fields),
             C.max_block_rows(len(fields)), manifest.timestamp.column_id, ids[order], order, np.uint64(area[0]),
             np.uint64(area[1]), np.uint64(ft), np.uint64(fs), np.uint64(lt), np.uint64(ls),
             np.int64(ref.min_timestamp), np.int64(ref.max_timestamp), pages.ALLOWED_ENCODINGS, 0, np.uint64(0),
             np.uint64(0))[0]


# descriptor fields: (offset, size) in a block prefix and in a column descriptor
BLOCK_FIELDS = [(0, 4), (4, 8), (12, 8), (20, 8), (28, 8), (36, 4), (40, 4)]
COLUMN_FIELDS = [(0, 4), (4, 4), (8, 8), (16, 4), (20, 4), (24, 8), (32, 2), (34, 2), (36, 4), (40, 4)]


def _descriptor_starts(data: bytes) -> tuple[list[int], list[int]]:
    buf = np.frombuffer(data, np.uint8)
    _, count = reference._prefix(data, "x")
    starts, status, _ = reference._walk_leaf(buf, count)
    assert status == 0
    blocks = starts.tolist()
    cols = []
    for s in blocks:
        cc = int.from_bytes(data[s + 40: s + 44], "little")
        cols += [s + 44 + 44 * q for q in range(cc)]
    return blocks, cols


def _mutate(rng, data: bytes) -> bytes:
    b = bytearray(data)
    blocks, cols = _descriptor_starts(data)
    kind = rng.integers(0, 10)
    if kind == 0:  # a random byte
        i = int(rng.integers(12, len(b)))
        b[i] ^= int(rng.integers(1, 256))
        return bytes(b)
    if kind == 1:  # trailing or missing bytes
        return bytes(b) + b"\0" * int(rng.integers(1, 9)) if rng.random() < 0.5 else bytes(b[: -int(rng.integers(1, 9))])
    if kind < 5:
        base = blocks[int(rng.integers(0, len(blocks)))]
        off, size = BLOCK_FIELDS[int(rng.integers(0, len(BLOCK_FIELDS)))]
        others = blocks
    else:
        base = cols[int(rng.integers(0, len(cols)))]
        off, size = COLUMN_FIELDS[int(rng.integers(0, len(COLUMN_FIELDS)))]
        others = cols
    p = base + off
    old = int.from_bytes(b[p: p + size], "little")
    top = (1 << (8 * size)) - 1
    neighbour = others[int(rng.integers(0, len(others)))] + off
    choices = [0, 1, 2, 3, 4, 5, 6, 7, 8, top, top - 1, top >> 1, (top >> 1) + 1, old + 1, old - 1,
               old ^ (1 << int(rng.integers(0, 8 * size))), int.from_bytes(b[neighbour: neighbour + size], "little")]
    v = choices[int(rng.integers(0, len(choices)))] & top
    b[p: p + size] = v.to_bytes(size, "little")
    return bytes(b)


def test_mutated_leaves_give_the_checked_outcome():
    rng = np.random.default_rng(2024)
    accepted = rejected = 0
    for n in range(2500):
        data, ref, manifest, area = LEAVES[n % len(LEAVES)]
        bad = _mutate(rng, data)
        if rng.random() < 0.1:  # the bounds it is checked against
            area = (area[0], max(area[0], area[1] - int(rng.integers(0, 64))))
        fast, slow = _both(bad, ref, manifest, area)
        assert fast == slow, (n, fast[:3], slow[:3])
        if fast[0] == "ok":
            accepted += 1
        else:
            rejected += 1
    assert accepted > 100 and rejected > 1000  # both outcomes well exercised


def test_leaf_kernel_as_python_agrees(monkeypatch):
    rng = np.random.default_rng(7)
    pages_in = [(d, ref, manifest, area) for data, ref, manifest, area in LEAVES[:6]
                for d in [data] + [_mutate(rng, data) for _ in range(6)]]
    jit = [_kernel_status(*p) for p in pages_in]  # (compiled before its helpers are swapped)
    for name in ("w64", "_prefix_rule", "_walk_leaf", "sequence_rule", "_sequence_vals"):  # its helpers, as Python
        monkeypatch.setattr(pages, name, getattr(getattr(pages, name), "py_func"))
    py = [_kernel_status(*p, kernel=getattr(pages.leaf_page_rules, "py_func")) for p in pages_in]
    assert [j == 0 for j in jit] == [p == 0 for p in py]
    assert jit == py


def test_struct_parsing_equals_structured_views():
    rng = np.random.default_rng(3)
    for _ in range(200):
        raw = rng.integers(0, 256, C.TRAILER_SIZE, dtype=np.uint8).tobytes()
        t = np.frombuffer(raw, TRAILER)[0]
        assert pages.PageRef.from_bytes(raw) == pages.PageRef.from_record(t["root"])
        r = np.frombuffer(raw[:C.PAGE_REF_SIZE], PAGE_REF)[0]
        assert pages.PageRef.from_bytes(raw[:C.PAGE_REF_SIZE]) == pages.PageRef.from_record(r)
        depth, version, flen, pend, magic, ck = S.TRAILER_STRUCT.unpack(raw)[13:]
        assert (depth, version, flen, pend, ck) == (int(t["depth"]), int(t["version"]), int(t["file_length"]),
                                                    int(t["payload_end"]), int(t["checksum"]))
        assert magic == raw[96:104]
        tr = pages.Trailer.from_bytes(raw)
        assert (tr.root, tr.depth, tr.version, tr.file_length, tr.payload_end) == (
            pages.PageRef.from_record(t["root"]), int(t["depth"]), int(t["version"]), int(t["file_length"]),
            int(t["payload_end"]))


# --- storage ------------------------------------------------------------------------------


def test_small_coalesce_equals_numpy_coalesce():
    rng = np.random.default_rng(9)
    for _ in range(500):
        n = int(rng.integers(1, 17))
        offs = np.sort(rng.integers(0, 5000, n)).astype(np.uint64)
        lens = rng.integers(0, 400, n).astype(np.uint64)
        gap = int(rng.integers(0, 300))
        starts, ends, group = coalesce(offs, lens, gap)
        ranges, pos = _coalesce_small(offs.tolist(), lens.tolist(), gap)
        assert [(a, n) for a, n, _ in ranges] == list(zip(starts.tolist(), (ends - starts).tolist()))
        base = np.concatenate([[0], np.cumsum((ends - starts).astype(np.int64))[:-1]])
        assert pos == (base[group] + (offs - starts[group]).astype(np.int64)).tolist()
    with pytest.raises(ValueError):
        _coalesce_small([10, 0], [1, 1], 0)


def test_read_ranges_small_and_large_paths_agree(tmp_path, monkeypatch):
    data = np.random.default_rng(1).integers(0, 256, 300_000, dtype=np.uint8).tobytes()
    (tmp_path / "obj").write_bytes(data)
    st = Store(tmp_path)
    rng = np.random.default_rng(4)
    for _ in range(50):
        n = int(rng.integers(1, 12))
        offs = np.sort(rng.integers(0, 290_000, n))
        lens = rng.integers(1, 5000, n)
        lens = np.minimum(lens, len(data) - offs)
        gap = int(rng.integers(0, 100_000))
        got = []
        for count in (16, 0):  # the plain-Python path, then numpy
            monkeypatch.setattr("gtsamples.storage.store.SMALL_RANGE_COUNT", count)  # read where _plan_ranges runs
            s = ReadStats()
            buf, pos = st.read_ranges("obj", offs, lens, s, gap=gap)
            assert all(bytes(buf[p: p + k]) == data[o: o + k] for p, o, k in zip(pos, offs, lens))
            got.append((s.requests, s.bytes_read, buf.shape[0], np.asarray(pos).tolist()))
        assert got[0] == got[1]


def test_store_read_fast_path_errors(tmp_path):
    (tmp_path / "obj").write_bytes(b"x" * 100)
    st = Store(tmp_path)
    s = ReadStats()
    assert st.read("obj", 90, 10, s) == b"x" * 10 and s.requests == 1 and s.bytes_read == 10
    with pytest.raises(gs.CorruptArtifactError, match="shorter than its recorded size"):
        st.read("obj", 95, 10)
    with pytest.raises(gs.CorruptArtifactError, match="missing"):
        st.read("nope", 0, 1)
    assert st.read("obj", 0, 0) == b""


@pytest.mark.parametrize("root", ["rel/dir", "/abs/dir/", ".", "/"])
def test_store_path_is_os_path_join(root):
    st = Store(root)
    for key in ("a", "a/b/part-0.samples", "", "/x"):
        assert st.path(key) == (os.path.join(st.base, key) if key else st.base)


@pytest.mark.parametrize("remote", [False, True])
def test_read_ranges_many_one_buffer(tmp_path, remote):
    """Several objects' ranges land in one buffer (remote: one cat_ranges call);
    positions and counts are those of one read_ranges per object."""
    objs = {"a": bytes(range(256)) * 8, "b/c": bytes(reversed(range(256))) * 8}
    if remote:
        import fsspec

        fs = fsspec.filesystem("memory")
        for k, v in objs.items():
            fs.pipe(f"/gts-many/{k}", v)
        st = Store("memory://gts-many")
    else:
        for k, v in objs.items():
            (tmp_path / k).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / k).write_bytes(v)
        st = Store(tmp_path)
    items = [("a", [1, 5, 1500], [3, 2, 10]), ("b/c", np.array([7, 2000], np.uint64), np.array([4, 40], np.uint32))]
    s = ReadStats()
    buf, poss = st.read_ranges_many(items, s, gap=100)
    one = ReadStats()
    for (key, offs, lens), pos in zip(items, poss):
        for p, o, n in zip(pos, offs, lens):
            assert bytes(buf[int(p): int(p) + int(n)]) == objs[key][int(o): int(o) + int(n)]
        st.read_ranges(key, offs, lens, one, gap=100)
    assert (s.requests, s.bytes_read) == (one.requests, one.bytes_read) == (4, 2 + 10 + 4 + 40 + 4)
    with pytest.raises(gs.CorruptArtifactError, match=r"nope: object is missing"):
        st.read_ranges_many(items + [("nope", [0], [1])], ReadStats())
    with pytest.raises(gs.CorruptArtifactError, match=r"b/c: object is shorter than its recorded size"):
        st.read_ranges_many([("a", [0], [1]), ("b/c", [2040], [100])], ReadStats())


@pytest.mark.parametrize("remote", [False, True])
def test_read_coalesced_equals_read_ranges_many(tmp_path, remote):
    """The one-pass planned batch read (a batch's chunks) gives the same buffer bytes,
    positions and counts as one read_ranges_many over the objects' runs, and
    unsorted or overlapping ranges go that way; errors name the object."""
    objs = {"a": bytes(range(256)) * 40, "b/c": bytes(reversed(range(256))) * 40}
    if remote:
        import fsspec

        fs = fsspec.filesystem("memory")
        for k, v in objs.items():
            fs.pipe(f"/gts-coal/{k}", v)
        st = Store("memory://gts-coal")
    else:
        for k, v in objs.items():
            (tmp_path / k).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / k).write_bytes(v)
        st = Store(tmp_path)
    keys = ["a", "b/c"]
    rng = np.random.default_rng(5)
    for trial in range(60):
        obj, offs, lens = [], [], []
        for k in sorted(rng.choice(2, int(rng.integers(1, 3)), replace=False).tolist()):
            pos = int(rng.integers(0, 200))
            for _ in range(int(rng.integers(1, 25))):
                n = int(rng.integers(1, 60))
                if pos + n > len(objs[keys[k]]):
                    break
                obj.append(k)
                offs.append(pos)
                lens.append(n)
                pos += n + int(rng.choice([0, 0, 3, 50, 500, 3000]))
        if trial % 7 == 0 and len(offs) > 2:  # overlapping / unsorted: the per-object path
            offs[1], offs[2] = offs[2], offs[1]
        obj, offs, lens = np.array(obj), np.array(offs, np.uint64), np.array(lens, np.uint32)
        gap = int(rng.choice([0, 10, 100, 10_000]))
        s = ReadStats()
        try:
            buf, pos = st.read_coalesced(keys, obj, offs, lens, s, gap=gap)
        except ValueError:  # unsorted ranges: the per-object coalescing refuses them, as before
            assert trial % 7 == 0
            continue
        for k, p, o, n in zip(obj.tolist(), pos.tolist(), offs.tolist(), lens.tolist()):
            assert bytes(buf[p: p + n]) == objs[keys[k]][o: o + n]
        runs = np.flatnonzero(np.r_[True, obj[1:] != obj[:-1]])
        items = [(keys[int(obj[lo])], offs[lo:hi], lens[lo:hi]) for lo, hi in zip(runs.tolist(), np.r_[runs[1:], len(obj)].tolist())]
        one = ReadStats()
        buf2, poss2 = st.read_ranges_many(items, one, gap=gap)
        assert (s.requests, s.bytes_read) == (one.requests, one.bytes_read)
        assert np.concatenate(poss2).tolist() == pos.tolist() and bytes(buf2) == bytes(buf)
    with pytest.raises(gs.CorruptArtifactError, match=r"nope: object is missing"):
        st.read_coalesced(["a", "nope"], np.array([0, 1]), np.array([0, 0], np.uint64), np.array([1, 1], np.uint32),
                          ReadStats())
    with pytest.raises(gs.CorruptArtifactError, match=r"b/c: object is shorter than its recorded size"):
        st.read_coalesced(keys, np.array([0, 1]), np.array([0, 10_230], np.uint64), np.array([1, 100], np.uint32),
                          ReadStats())
