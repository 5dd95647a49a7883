"""The GPU read path from artifact files (``Artifact.read_device`` /
``read(device="gpu")``) on the host emulator: the fetch in groups overlapped
with the copy to the device (gtsamples.decode.gpu.fetch), XXH64 on the device
by default, and the whole corruption catalogue read through it with the CPU
read's result: equal rows, or the same error class, flags, per-chunk flags and
message.  The emulated nvCOMP fails the run if it is ever handed a frame that
decodes past its capacity, or if a buffer it uses is freed before it runs
(tests/kernels/emu_nvcomp.py).
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
import zstandard

import gtsamples as gs
from gtsamples.decode.gpu import table as gpu_table
from gtsamples.cache import PageCache
from gtsamples.decode import gpu
from gtsamples.decode.gpu import fetch as gpu_fetch
from gtsamples.decode.gpu import nvcomp as nv
from gtsamples.errors import DecodeErrorFlag as F
from gtsamples.plan import fetch_batch
from gtsamples.storage import ReadStats
from tests.conftest import assert_tables_equal
from tests.corruption import test_rules as R
from tests.corruption.test_rules import written  # noqa: F401  (module fixture)

emu = pytest.importorskip("tests.kernels.emu_device")
if emu.compiler() is None:  # pragma: no cover
    pytest.skip("no C++ compiler for the kernel emulator", allow_module_level=True)
from tests.kernels import emu_nvcomp as EN  # noqa: E402


class _Read:
    """``read_device(...).to_arrow()``; each decode on a fresh ``device_cls``,
    kept in ``devices`` with the decode's keywords."""

    def __init__(self, device_cls):
        self.device_cls, self.devices = device_cls, []

    def __call__(self, art, **read_kw):
        return art.read_device(**read_kw).to_arrow()


@pytest.fixture
def gpu_read(monkeypatch):
    """``read_device`` through the emulator, the fetch always grouped (groups of
    a few hundred bytes), the host buffer page-locked (TrackedEmuDevice)."""
    emu.load_library()
    real = gpu.decode_batch_gpu
    reader = _Read(EN.TrackedEmuDevice)

    def decode(batch, **kw):
        dev = reader.device_cls()
        reader.devices.append((dev, kw))
        out = real(batch, _device=dev, poison=0xA5, **kw)
        getattr(dev, "finish", lambda: None)()  # TrackedEmuDevice: run what is still queued
        assert dev.unwaited() == 0, "a staged copy was never waited for"
        return out

    monkeypatch.setattr(gpu, "is_gpu_available", lambda require_nvcomp=True: True)
    monkeypatch.setattr(gpu, "decode_batch_gpu", decode)
    monkeypatch.setattr(gpu_fetch, "FETCH_PROGRESSIVE_MIN_BYTES", 1)
    monkeypatch.setattr(gpu_fetch, "FETCH_GROUP_BYTES", 700)
    return reader


def assert_same_read(art, cpu_art, read, kw: dict, what: str = ""):
    """The CPU read of ``cpu_art`` and the GPU read of ``art`` agree; returns the GPU's error (or None)."""
    try:
        want, cpu_err = cpu_art.read(**kw), None
    except gs.SamplesError as e:
        cpu_err = e
    try:
        got, gpu_err = read(art, **kw), None
    except gs.SamplesError as e:
        gpu_err = e
    if cpu_err is not None:
        assert gpu_err is not None, f"{what}: CPU raised {cpu_err!r}, the GPU read {got.num_rows} rows"
        assert type(gpu_err) is type(cpu_err), (what, gpu_err, cpu_err)
        assert getattr(gpu_err, "flags", None) == getattr(cpu_err, "flags", None), what
        cf = getattr(cpu_err, "chunk_flags", None)
        if cf is not None:
            np.testing.assert_array_equal(gpu_err.chunk_flags, cf, err_msg=what)
        assert str(gpu_err) == str(cpu_err), what
        return gpu_err
    assert gpu_err is None, f"{what}: GPU raised {gpu_err!r}"
    assert_tables_equal(got, want)
    assert got.schema == want.schema
    return None


# ----------------------------------------------------------------------------- the corruption catalogue

def _zstd_no_fcs(e: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=3, write_content_size=False).compress(e)


def _flip_compressed(frame: bytes) -> bytes:
    out = bytearray(frame)
    h = int.from_bytes(frame[6:9], "little")
    assert (h >> 1) & 3 == 2, "a compressed block"
    out[9 + (h >> 3) // 2] ^= 0x5A
    return bytes(out)


#: Frames without a content size holding compressed blocks pass the frame check, so
#: only the size proof keeps them from nvCOMP.  The catalogue has the wrong-size ones
#: (decode-zstd-no-content-size-compressed-*); these add a corrupt block and a valid frame.
_F_ZSTD = R.F_ZSTD
EXTRA_CASES = [
    R.Case("decode-zstd-compressed-block-corrupt", "multi",
           R._zstored(_F_ZSTD, lambda e: _flip_compressed(_zstd_no_fcs(e * 4))), R.CORRUPT,
           "", "decode", None, {}, False, True),
    R.Case("decode-zstd-compressed-no-content-size-ok", "multi",
           R._zstored(_F_ZSTD, lambda e: _zstd_no_fcs(e)), None, "", "decode", None, {}, False, True),
]  # fmt: skip

FULL = os.environ.get("GTS_EMU_FULL") == "1"


def _quick(case) -> bool:
    """Without GTS_EMU_FULL=1: the cases about what reaches nvCOMP (Zstd, checksums,
    codecs), the fetch (object sizes) and one per decode rule family; the whole
    catalogue (about 260 reads, minutes) with it."""
    keys = ("zstd", "checksum", "unknown-", "part-shorter", "part-file-size", "varint-truncated-ts",
            "validity-kind1-count", "ts-first-below-min", "op-type-2-raw", "seq-order-across-parts")  # fmt: skip
    return any(k in case.id for k in keys)


_CATALOGUE = [c for c in R.CASES if "read" in R.OPS[c.stage] and (FULL or _quick(c))] + EXTRA_CASES


def test_extra_cases_reach_the_unproven_path(written, tmp_path):  # noqa: F811
    """The extra frames pass the frame check without a proven size (else they test nothing new)."""
    for case in EXTRA_CASES:
        _, root, entry, gen_dir = R.build(case, written, tmp_path / case.id)
        batch, _ = R.opener(root, entry, gen_dir, case.gen_dir)().plan()
        ch = batch.chunks
        z = np.flatnonzero(ch["compression"] == 1)
        flags = nv.limit_and_codec_flags(ch, len(batch.data))[0]
        proven = nv.frame_verdicts(ch, batch.data, flags, checksums=True)
        assert ((flags[z] == 0) & ~proven[z]).any(), case.id


@pytest.mark.parametrize("case", _CATALOGUE, ids=[c.id for c in _CATALOGUE])
def test_catalogue_reads_alike_on_the_gpu_path(case, gpu_read, written, tmp_path):  # noqa: F811
    _, root, entry, gen_dir = R.build(case, written, tmp_path)
    open_fn = R.opener(root, entry, gen_dir, case.gen_dir)
    try:
        art = open_fn()
    except gs.SamplesError as e:  # the artifact does not open: no read to compare
        R.check_error(e, case)
        return
    gpu_err = assert_same_read(art, open_fn(), gpu_read, case.read_kw, case.id)
    if case.err is not None and case.stage == "decode":  # the case's own rule holds on the GPU path too
        R.check_error(gpu_err, case)
    for dev, kw in gpu_read.devices:
        assert not dev.overruns and not dev.violations, case.id
        assert kw.get("hash_on", "device") == "device"  # the default read hashes on the device


# ----------------------------------------------------------------------------- the grouped fetch


def _table(rows=6000, fields=2, seed=0) -> pa.Table:
    rng = np.random.default_rng(seed)
    series = 6
    per = rows // series
    sid = np.repeat(np.arange(series, dtype=np.uint64), per)
    n = sid.size
    cols = {
        "__table_id": pa.array((sid // 3 + 1).astype(np.uint32)),
        "__tsid": pa.array(sid * np.uint64(7) + np.uint64(1)),
        "ts": pa.array(np.tile(np.arange(per, dtype=np.int64) * 1000, series), pa.timestamp("ms")),
        "__sequence": pa.array(np.arange(n, dtype=np.uint64)[::-1].copy()),
        "__op_type": pa.array(np.ones(n, np.uint8)),
    }
    for f in range(fields):
        cols[f"f{f}"] = pa.array(np.round(np.cumsum(rng.normal(size=n)), 2), mask=rng.random(n) < 0.05)
    return pa.table(cols)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu-read")
    entry = gs.write_artifact(_table(), root, region_id=3, source_file_id="00000000-0000-4000-8000-0000000000f1",
                              generation="00000000-0000-4000-8000-0000000000f2", timestamp_column_id=0,
                              field_column_ids=[1, 2], row_limit=500)  # fmt: skip
    return root, entry


def _open(artifact):
    root, entry = artifact
    return gs.open_artifact(root, entry=entry, cache=PageCache())


def _batch(art, **kw):
    from gtsamples.plan import Projection, Selection, build_batch

    m = art.manifest
    sel = Selection.build(kw.get("series"), None, kw.get("start"), None, m.timestamp.unit)
    proj = Projection.build(m, kw.get("columns"))
    return build_batch(art.navigate(sel, ReadStats()), m, sel, proj, source=art.location)


@pytest.mark.parametrize("group_bytes", [1, 500, 5000, 1 << 30])
def test_grouped_fetch_gathers_every_chunk(artifact, group_bytes):
    art = _open(artifact)
    for kw in ({}, {"columns": ["ts", "f1"]}, {"series": [(1, 8)]}):
        want = _batch(art, **kw)
        fetch_batch(art.store, art.part_keys, want, ReadStats())
        got = _batch(art, **kw)
        stats = ReadStats()
        g = gpu_fetch.GroupedFetch(art.store, art.part_keys, got, stats, group_bytes=group_bytes)
        ch = got.chunks
        assert (ch["src_offset"][1:] == ch["src_offset"][:-1] + ch["stored_len"][:-1]).all()  # back to back
        assert g.segment_ends[-1] == g.nbytes == int(ch["stored_len"].sum())
        g.start()
        g.wait_all()
        g.join()
        for i in range(len(ch)):
            a, n = int(want.chunks["src_offset"][i]), int(want.chunks["stored_len"][i])
            b = int(ch["src_offset"][i])
            assert got.data[b : b + n].tobytes() == want.data[a : a + n].tobytes(), (kw, i)
        assert stats.chunk_bytes == int(ch["stored_len"].sum())
        if group_bytes == 1:
            assert len(g.groups) == len(ch)


def test_wait_blocks_until_the_range_arrived(artifact, monkeypatch):
    import threading

    art = _open(artifact)
    b = _batch(art)
    gate = threading.Event()
    real = gpu_fetch._gather

    def slow_gather(src, src_off, dst, dst_off, lens):
        if int(dst_off[0]) > 0:  # every group but the first waits for the gate
            gate.wait(10)
        real(src, src_off, dst, dst_off, lens)

    monkeypatch.setattr(gpu_fetch, "_gather", slow_gather)
    g = gpu_fetch.GroupedFetch(art.store, art.part_keys, b, ReadStats(), group_bytes=2000)
    assert len(g.groups) >= 3
    g.start()
    g.wait(0, int(g.segment_ends[0]))  # the first group arrives on its own
    done = threading.Event()
    t = threading.Thread(target=lambda: (g.wait(0, g.nbytes), done.set()))
    t.start()
    assert not done.wait(0.3)  # the rest has not arrived
    gate.set()
    assert done.wait(10)
    t.join()
    g.join()


def test_read_device_fetches_in_groups_and_hashes_on_the_device(artifact, gpu_read, monkeypatch):
    hashed_on_host = []
    real_verify = nv.verify_checksums
    monkeypatch.setattr(nv, "verify_checksums", lambda *a: hashed_on_host.append(len(a[1])) or real_verify(*a))
    art = _open(artifact)
    for kw in ({}, {"columns": ["ts", "f0"], "start": 500_000}, {"series": [(1, 8), (2, 22)]}):
        assert_same_read(art, _open(artifact), gpu_read, kw, str(kw))
    assert not hashed_on_host
    for dev, kw in gpu_read.devices:
        assert kw["fetch"] is not None and len(kw["fetch"].groups) > 1
        names = [k[0] for k in dev.launches]
        assert "gts_xxh64" in names
        assert dev.host_buffers and all(b.released for b in dev.host_buffers)


def test_read_device_pageable_fetch_without_host_staging(artifact, gpu_read):
    gpu_read.device_cls = emu.EmuDevice  # no page-locked buffers: a pool buffer, staged copies
    art = _open(artifact)
    assert_same_read(art, _open(artifact), gpu_read, {}, "emu")


def test_small_batches_are_fetched_in_one_go(artifact, gpu_read, monkeypatch):
    monkeypatch.setattr(gpu_fetch, "FETCH_PROGRESSIVE_MIN_BYTES", 1 << 40)
    art = _open(artifact)
    assert_same_read(art, _open(artifact), gpu_read, {}, "small")
    assert all(kw.get("fetch") is None for _, kw in gpu_read.devices)


def _truncate_part(artifact, tmp_path):
    """A copy of the artifact whose first part file lost its last 100 bytes."""
    import shutil

    root, entry = artifact
    dst = tmp_path / "store"
    shutil.copytree(root, dst)
    art = gs.open_artifact(dst, entry=entry, cache=PageCache())
    part = art.store.path(art.part_keys[0])
    with open(part, "r+b") as f:
        f.truncate(os.path.getsize(part) - 100)
    return dst, entry


def test_a_failed_group_raises_the_cpu_paths_error(artifact, gpu_read, tmp_path):
    dst, entry = _truncate_part(artifact, tmp_path)
    art = gs.open_artifact(dst, entry=entry, cache=PageCache())
    cpu_art = gs.open_artifact(dst, entry=entry, cache=PageCache())
    with pytest.raises(gs.SamplesError) as cpu_info:
        cpu_art.read()
    with pytest.raises(gs.SamplesError) as gpu_info:
        gpu_read(art)
    assert type(gpu_info.value) is type(cpu_info.value) and str(gpu_info.value) == str(cpu_info.value)
    assert "shorter than its recorded size" in str(gpu_info.value)
    for dev, _ in gpu_read.devices:
        assert not dev.violations
        assert all(b.released for b in dev.host_buffers)


def test_device_gpu_read_uses_the_same_path(artifact, gpu_read, monkeypatch):
    """``read(device="gpu")`` decodes through the grouped fetch too (cuDF faked)."""
    calls = []
    monkeypatch.setattr(gpu_table, "require_cudf", lambda: None)
    monkeypatch.setattr(gpu_table.DeviceTable, "to_cudf",
                        lambda self, manifest=None, projection=None: calls.append(1) or self.to_arrow(manifest, projection))  # fmt: skip
    art = _open(artifact)
    got = art.read(device="gpu", columns=["ts", "f1"])
    assert calls and gpu_read.devices and gpu_read.devices[0][1]["fetch"] is not None
    assert_tables_equal(got, _open(artifact).read(columns=["ts", "f1"]))
