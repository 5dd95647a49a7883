"""Host side of the GPU backend, with numpy only (no CuPy, no GPU): pre-checks
(equal to the CPU backend's flags), device tables, sub-batching, nvCOMP result
decoding, the DeviceTable's Arrow view, H2D transfer planning and the pinned
staging ring (over a fake CuPy)."""

from __future__ import annotations

import ctypes
import dataclasses
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
import zstandard

from gtsamples.batch import FIRST_FIELD_SLOT
from gtsamples.decode import gpu
from gtsamples.decode.gpu import nvrtc as kernels
from gtsamples.decode.gpu import transfers
from gtsamples.decode.gpu import nvcomp as nv
from gtsamples.errors import CorruptArtifactError, DecodeErrorFlag, UnsupportedError
from gtsamples.decode.gpu.table import CudfUnavailableError, DeviceColumn, DeviceTable, mask_words
from tests.gpu.batchgen import BlockSpec, build_batch, compress, random_blocks, xxh64

F = DecodeErrorFlag
FIELDS = ("a", "b", "c")


def _batch(seed=0, n_blocks=6, compression="mixed", **kw):
    rng = np.random.default_rng(seed)
    return build_batch(random_blocks(rng, n_blocks, len(FIELDS), max_rows=120), FIELDS, compression=compression, **kw)


def _cpu_flags(batch):
    from gtsamples.decode import cpu

    _, flags, _ = cpu.decode_batch_flags(batch, threads=1)
    return flags


# ----------------------------------------------------------------------------- pre-checks == CPU backend


def _corrupt_cases():
    """(name, function(batch) -> None mutating the batch in place)."""

    def flip_stored(b, i=1):
        b.data[b.chunks["src_offset"][i] + 2] ^= 0x40

    def unknown_comp(b, i=2):
        b.chunks["compression"][i] = 7

    def unknown_comp_and_bad_sum(b, i=2):
        b.chunks["compression"][i] = 9
        b.chunks["checksum"][i] ^= 1

    def unknown_enc(b, i=0):
        b.chunks["encoding"][i] = 42

    def raw_len(b):
        i = int(np.flatnonzero(b.chunks["compression"] == 0)[0])
        b.chunks["decoded_len"][i] += 1

    def zstd_declared(b):
        i = int(np.flatnonzero(b.chunks["compression"] == 1)[0])
        b.chunks["decoded_len"][i] -= 1

    def zstd_magic(b):
        i = int(np.flatnonzero(b.chunks["compression"] == 1)[0])
        o = int(b.chunks["src_offset"][i])
        b.data[o] ^= 0xFF
        b.chunks["checksum"][i] = xxh64(b.data[o : o + int(b.chunks["stored_len"][i])].tobytes())

    def zstd_magic_bad_sum(b):
        i = int(np.flatnonzero(b.chunks["compression"] == 1)[0])
        b.data[int(b.chunks["src_offset"][i])] ^= 0xFF

    def too_big(b, i=3):
        b.chunks["decoded_len"][i] = (1 << 20) + 1

    def outside(b, i=4):
        b.chunks["src_offset"][i] = len(b.data)

    return [
        ("flip_stored", flip_stored),
        ("unknown_comp", unknown_comp),
        ("unknown_comp_and_bad_sum", unknown_comp_and_bad_sum),
        ("unknown_enc", unknown_enc),
        ("raw_len", raw_len),
        ("zstd_declared", zstd_declared),
        ("zstd_magic", zstd_magic),
        ("zstd_magic_bad_sum", zstd_magic_bad_sum),
        ("too_big", too_big),
        ("outside", outside),
    ]


@pytest.mark.parametrize("name,corrupt", _corrupt_cases())
def test_precheck_flags_equal_cpu_backend(name, corrupt):
    b = _batch(seed=3, n_blocks=4).batch
    assert (b.chunks["compression"] == 1).any() and (b.chunks["compression"] == 0).any()
    corrupt(b)
    pre = nv.precheck(b.chunks, b.data)
    cpu = _cpu_flags(b)
    assert pre.any(), name
    bad = pre != 0
    np.testing.assert_array_equal(pre[bad], cpu[bad])
    pre_stage = F.CHECKSUM_MISMATCH | F.UNSUPPORTED_COMPRESSION | F.UNSUPPORTED_ENCODING | F.ZSTD_FRAME_INVALID
    assert not (cpu[~bad] & np.uint32(pre_stage)).any()


@pytest.mark.parametrize("name,corrupt", _corrupt_cases())
def test_device_hash_words_reproduce_cpu_flags(name, corrupt):
    """Device hashing: host flags without checksums, then (per chunk the kernel
    finds mismatching) the status word becomes on_mismatch -> the CPU's flags."""
    b = _batch(seed=3, n_blocks=4).batch
    corrupt(b)
    full = nv.precheck(b.chunks, b.data, checksums=True)
    status = nv.precheck(b.chunks, b.data, checksums=False)
    hashed, on_mismatch = nv.hash_mismatch_words(b.chunks, len(b.data))
    ok = nv.verify_checksums(b.data, b.chunks["src_offset"][hashed].astype(np.uint64),
                             b.chunks["stored_len"][hashed].astype(np.uint64), b.chunks["checksum"][hashed])  # fmt: skip
    status[hashed[~ok]] = on_mismatch[~ok]  # what gts_xxh64 does
    np.testing.assert_array_equal(status, full)


def test_precheck_clean_batch_is_all_zero():
    b = _batch(seed=5).batch
    assert not nv.precheck(b.chunks, b.data).any()
    assert not nv.precheck(b.chunks, b.data, checksums=False).any()


def test_reclassify_zstd_failures_matches_cpu_decompressor():
    # a frame without a content size that decodes to fewer bytes than declared,
    # and one that decodes to more: nvCOMP reports (0, short) and (12, n)
    raw = bytes(range(200)) * 3
    frame = compress(raw, write_content_size=False)
    rng = np.random.default_rng(0)
    blocks = random_blocks(rng, 2, 1, max_rows=50)
    built = build_batch(blocks, ("a",), compression="raw")
    b = built.batch
    data = bytearray(b.data.tobytes())
    ch = b.chunks
    for i, declared in ((0, len(raw) + 10), (1, len(raw) - 10)):
        ch["src_offset"][i] = len(data)
        ch["stored_len"][i] = len(frame)
        ch["decoded_len"][i] = declared
        ch["compression"][i] = 1
        ch["checksum"][i] = xxh64(frame)
        data += frame
    b.data = np.frombuffer(bytes(data), np.uint8).copy()
    jobs = nv.ZstdJobs(np.zeros(2, np.uint64), ch["stored_len"][:2].astype(np.uint64), np.zeros(2, np.uint64),
                       ch["decoded_len"][:2].astype(np.uint64), np.arange(2, dtype=np.uint64))  # fmt: skip
    flags = np.zeros(len(ch), np.uint32)
    flags[:2] = nv.result_flags(np.array([0, 12]), np.array([len(raw), len(raw) - 10]), jobs.declared)
    detail = gpu.reclassify_zstd_failures(b, jobs, np.array([0, 12], np.int32),
                                          np.array([len(raw), len(raw) - 10], np.uint64), flags)  # fmt: skip
    cpu = _cpu_flags(b)
    np.testing.assert_array_equal(flags[:2], cpu[:2])
    assert set(detail) == {0, 1}


# ----------------------------------------------------------------------------- device tables


def test_check_layout_accepts_generated_and_rejects_broken():
    b = _batch(seed=1).batch
    gpu.check_layout(b)
    broken = dataclasses.replace(b, n_rows=b.n_rows + 1)
    with pytest.raises(gpu.BatchLayoutError):
        gpu.check_layout(broken)
    ch = b.chunks.copy()
    ch["slot"][1] = 0  # second timestamp chunk for block 0
    with pytest.raises(gpu.BatchLayoutError):
        gpu.check_layout(dataclasses.replace(b, chunks=ch))
    bl = b.blocks.copy()
    bl["out_row"][-1] += 1
    with pytest.raises(gpu.BatchLayoutError):
        gpu.check_layout(dataclasses.replace(b, blocks=bl))


def test_host_plan_groups_descriptors_by_kind_and_synthesizes_null_fills():
    built = _batch(seed=2, n_blocks=8)
    b = built.batch
    pre = nv.precheck(b.chunks, b.data)
    plan = gpu.build_host_plan(b, pre)
    nb, nf = len(b.blocks), len(b.field_names)
    ranges = plan.kind_ranges
    assert ranges[0] == (0, nb) and ranges[1] == (nb, 2 * nb) and ranges[2] == (2 * nb, 3 * nb)
    assert ranges[3] == (3 * nb, plan.desc_chunk.size) and plan.desc_chunk.size == 3 * nb + nb * nf
    # every (block, slot) exactly once; real chunks point at themselves
    key = plan.desc_block * b.n_slots + plan.desc_slot
    assert np.unique(key).size == key.size
    real = plan.desc_chunk >= 0
    np.testing.assert_array_equal(b.chunks["block"][plan.desc_chunk[real]], plan.desc_block[real])
    np.testing.assert_array_equal(b.chunks["slot"][plan.desc_chunk[real]], plan.desc_slot[real])
    assert (plan.desc_slot[~real] >= FIRST_FIELD_SLOT).all()
    # null counts: descriptors + omitted rows == expected validity
    for k, name in enumerate(FIELDS):
        assert int(plan.null_counts[k]) == int((~built.expected[name][1]).sum())
    # decoded buffer: zstd chunks at 16-byte aligned, non-overlapping offsets
    dl = b.chunks["decoded_len"][plan.zstd].astype(np.uint64)
    assert (plan.dec_offset % 16 == 0).all()
    assert (plan.dec_offset[1:] >= plan.dec_offset[:-1] + dl[:-1]).all()
    assert plan.decoded_bytes >= int(plan.dec_offset[-1] + dl[-1])


def test_chunk_descriptors_carry_addresses_and_placement():
    b = _batch(seed=4, n_blocks=5).batch
    pre = nv.precheck(b.chunks, b.data)
    plan = gpu.build_host_plan(b, pre)
    stored, decoded = 0x7F0000000000, 0x7E0000000000
    src = gpu.chunk_source_addresses(b, plan, stored, decoded)
    cols = {s: 0x100000000 * (s + 1) for s in range(b.n_slots)}
    masks = {s: 0x900000000 * (s + 1) for s in range(FIRST_FIELD_SLOT, b.n_slots)}
    d = gpu.fill_chunk_descs(b, plan, src, cols, masks)
    ch = b.chunks
    real = plan.desc_chunk >= 0
    ci = plan.desc_chunk[real]
    raw = ch["compression"][ci] == 0
    np.testing.assert_array_equal(d["src"][real][raw], stored + ch["src_offset"][ci][raw].astype(np.uint64))
    z = np.searchsorted(plan.zstd, ci[~raw])
    np.testing.assert_array_equal(d["src"][real][~raw], decoded + plan.dec_offset[z])
    np.testing.assert_array_equal(d["len"][real], ch["decoded_len"][ci])
    np.testing.assert_array_equal(d["chunk"][real], ci)
    np.testing.assert_array_equal(d["encoding"][real], ch["encoding"][ci])
    np.testing.assert_array_equal(d["out_row"], b.blocks["out_row"][plan.desc_block])
    np.testing.assert_array_equal(d["dst"], [cols[s] for s in plan.desc_slot])
    assert (d["chunk"][~real] == gpu.NO_CHUNK).all() and (d["encoding"][~real] == gpu.ENC_NULL_FILL).all()
    np.testing.assert_array_equal(d["null_count"][~real], d["rows"][~real])
    f = plan.desc_slot >= FIRST_FIELD_SLOT
    np.testing.assert_array_equal(d["mask"][f], [masks[s] for s in plan.desc_slot[f]])
    assert (d["mask"][~f] == 0).all()


def test_hash_jobs_skip_bad_length_chunks():
    b = _batch(seed=6).batch
    b.chunks["decoded_len"][2] = (1 << 20) + 5
    j = gpu.hash_jobs(b, 1000)
    assert 2 not in j["chunk"].tolist() and len(j) == len(b.chunks) - 1
    np.testing.assert_array_equal(j["src"], 1000 + b.chunks["src_offset"][j["chunk"]].astype(np.uint64))
    assert (j["on_mismatch"] & np.uint32(F.CHECKSUM_MISMATCH)).all()


def test_pack_sections_aligns_and_copies():
    a = np.arange(3, dtype=np.uint32)
    bl = np.zeros(2, gpu.BLOCK_DESC_DTYPE)
    bl["tsid"] = [5, 7]
    buf, layout = gpu.pack_sections({"a": a, "b": bl, "empty": np.zeros(0, np.uint64)})
    assert all(off % 16 == 0 for off, _ in layout.values())
    o, n = layout["a"]
    np.testing.assert_array_equal(buf[o : o + n].view(np.uint32), a)
    o, n = layout["b"]
    np.testing.assert_array_equal(buf[o : o + n].view(gpu.BLOCK_DESC_DTYPE)["tsid"], [5, 7])


# ----------------------------------------------------------------------------- nvCOMP planning


def test_aligned_offsets():
    off, total = nv.aligned_offsets(np.array([1, 16, 17, 3]), 16)
    assert off.tolist() == [0, 16, 32, 64] and total == 80
    assert nv.aligned_offsets(np.array([], np.uint64), 16)[1] == 0


def test_pointer_table_rows_are_contiguous_columns():
    t = nv.pointer_table(np.array([1, 2]), np.array([3, 4]), np.array([5, 6]), np.array([7, 8]), np.array([9, 10]))
    assert t.shape == (5, 2) and t.flags.c_contiguous and t.dtype == np.uint64
    assert t[nv.TABLE_ROWS.index("dst_ptr")].tolist() == [5, 6]
    assert t[nv.TABLE_ROWS.index("dst_capacity")].tolist() == [7, 8]


@pytest.mark.parametrize("budget", [1 << 20, 8 << 20, 64 << 20, 1 << 40])
def test_plan_subbatches_fits_budget_and_is_maximal(budget):
    rng = np.random.default_rng(budget & 0xFFFF)
    declared = rng.integers(1, 1 << 20, 3000).astype(np.uint64)
    fn = nv.estimate_temp_bytes
    plan = nv.plan_subbatches(declared, budget, fn)
    assert plan[0][0] == 0 and plan[-1][1] == len(declared)
    assert all(a < b for a, b in plan) and all(plan[i][1] == plan[i + 1][0] for i in range(len(plan) - 1))
    for a, b in plan:
        d = declared[a:b]
        t = fn(b - a, int(d.max()), int(d.sum()))
        assert t <= budget or b - a == 1
        if b < len(declared):
            d2 = declared[a : b + 1]
            assert fn(b + 1 - a, int(d2.max()), int(d2.sum())) > budget


def test_plan_subbatches_with_the_real_library():
    try:
        lib = nv.load_nvcomp()
    except nv.NvcompError as e:
        pytest.skip(f"libnvcomp not installed: {e}")
    declared = np.full(20000, 40000, np.uint64)
    plan = nv.plan_subbatches(declared, 256 << 20, lambda c, m, t: lib.temp_size(c, m, t))
    assert len(plan) > 1
    for a, b in plan:
        assert lib.temp_size(b - a, 40000, 40000 * (b - a)) <= 256 << 20
    # the decompressor's own planning (what the GPU backend's H2D plan follows), no GPU needed
    assert nv.BatchedZstdDecompressor(lib, temp_budget=256 << 20).plan(declared, stream=0) == plan


def test_nvcomp_binding_loads_and_sizes_temp_without_a_gpu():
    try:
        lib = nv.load_nvcomp()
    except nv.NvcompError as e:
        pytest.skip(f"libnvcomp not installed: {e}")
    assert lib.major in (5, 6) and lib.version // 1000 == lib.major
    assert lib.alignment[0] >= 1 and lib.alignment[2] >= 1
    small = lib.temp_size(1, 65536, 65536)
    big = lib.temp_size(100000, 65536, 1 << 30)
    assert 0 < small < big
    assert big <= nv.estimate_temp_bytes(100000, 65536, 1 << 30) * 1.1
    assert lib.status_string(0) and lib.status_string(12)


def test_result_flags():
    st = np.array([0, 0, 12, 15, 0])
    actual = np.array([10, 9, 10, 0, 0], np.uint64)
    declared = np.array([10, 10, 10, 10, 0], np.uint64)
    f = nv.result_flags(st, actual, declared)
    assert f.tolist() == [0, F.DECODED_LENGTH_MISMATCH, F.ZSTD_DECOMPRESS_FAILED, F.ZSTD_DECOMPRESS_FAILED, 0]


def test_repack_needed_only_for_misaligned_inputs():
    assert not nv.stored_chunks_need_repack([1, 3, 5], 1)
    assert nv.stored_chunks_need_repack([0, 8, 13], 8)
    assert not nv.stored_chunks_need_repack([0, 8, 16], 8)


# ----------------------------------------------------------------------------- imports and availability


def test_importing_the_gpu_backend_imports_no_cupy_and_no_cudf():
    code = ("import sys; import gtsamples, gtsamples.decode.gpu, gtsamples.decode.gpu.nvcomp, gtsamples.decode.gpu.fetch, gtsamples.decode.gpu.nvrtc, gtsamples.backends;"
            "assert 'cupy' not in sys.modules and 'cudf' not in sys.modules, sorted(sys.modules)")  # fmt: skip
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_is_gpu_available_is_false_without_a_device():
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            pytest.skip("a GPU is present")
    except Exception:
        pass
    assert gpu.is_gpu_available() is False


def test_kernel_dir_env_override(tmp_path, monkeypatch):
    (tmp_path / "gts_types.cuh").write_text("#pragma once\n")
    monkeypatch.setenv("GTSAMPLES_KERNEL_DIR", str(tmp_path))
    assert kernels.kernel_dir() == tmp_path
    (tmp_path / "x.cu").write_text('#include "gts_types.cuh"\n#include "gts_types.cuh"\nint y;\n')
    assert kernels.amalgamate("x.cu").count("// begin gts_types.cuh") == 2  # second expands to nothing
    (tmp_path / "c1.cuh").write_text('#include "c2.cuh"\n')
    (tmp_path / "c2.cuh").write_text('#include "c1.cuh"\n')
    with pytest.raises(ValueError, match="cycle"):
        kernels.amalgamate("c1.cuh")


# ----------------------------------------------------------------------------- DeviceTable (numpy-backed)


def _device_table_from_expected(exp, n_rows):
    cols = [
        DeviceColumn("__table_id", "uint32", exp["__table_id"]),
        DeviceColumn("__tsid", "uint64", exp["__tsid"]),
        DeviceColumn("timestamp", "timestamp[ns]", exp["timestamp"]),
        DeviceColumn("__sequence", "uint64", exp["__sequence"]),
        DeviceColumn("__op_type", "uint8", exp["__op_type"]),
    ]
    for name in FIELDS:
        vals, valid = exp[name]
        words = np.zeros(mask_words(n_rows), np.uint32)
        packed = np.packbits(valid.astype(np.uint8), bitorder="little")
        words.view(np.uint8)[: packed.size] = packed
        cols.append(DeviceColumn(name, "float64", vals, words, int((~valid).sum()), True))
    return DeviceTable(cols, n_rows)


def test_device_table_to_arrow_has_the_logical_schema_and_values():
    built = _batch(seed=7)
    exp = built.expected
    t = _device_table_from_expected(exp, built.batch.n_rows).to_arrow()
    assert t.schema.names == ["__table_id", "__tsid", "timestamp", "__sequence", "__op_type", *FIELDS]
    assert [f.nullable for f in t.schema] == [False] * 5 + [True] * 3
    assert t.schema.field("timestamp").type == pa.timestamp("ns")
    np.testing.assert_array_equal(t.column("__tsid").to_numpy(), exp["__tsid"])
    for name in FIELDS:
        col = t.column(name).combine_chunks()
        np.testing.assert_array_equal(col.is_valid().to_numpy(zero_copy_only=False), exp[name][1])
        got = col.fill_null(0.0).to_numpy(zero_copy_only=False).view(np.uint64)
        np.testing.assert_array_equal(np.where(exp[name][1], got, 0), exp[name][0].view(np.uint64))


def test_device_table_select_renames_timestamp_and_projects():
    built = _batch(seed=8)
    dt = _device_table_from_expected(built.expected, built.batch.n_rows)
    ts = type("TS", (), {"name": "ts", "arrow_unit": "ms"})()
    manifest = type("M", (), {"timestamp": ts})()
    proj = type("P", (), {"names": ("ts", "b", "__tsid")})()
    t = dt.to_arrow(manifest, proj)
    assert t.schema.names == ["ts", "b", "__tsid"]
    assert t.schema.field("ts").type == pa.timestamp("ms")


def test_to_cudf_without_cudf_points_at_the_device_table():
    try:
        import cudf  # noqa: F401

        pytest.skip("cudf is installed")
    except ImportError:
        pass
    dt = DeviceTable([], 0)
    with pytest.raises(CudfUnavailableError, match="DeviceTable"):
        dt.to_cudf()


def test_mask_words_padding():
    assert mask_words(0) == 0 and mask_words(1) == 16 and mask_words(512) == 16 and mask_words(513) == 32


# ----------------------------------------------------------------------------- CPU error-path helper


def test_decompress_chunk_is_the_cpu_backends_classification():
    from gtsamples.decode import cpu

    raw = bytes(range(256)) * 8
    frame = compress(raw)
    assert cpu.decompress_chunk(frame, len(raw)) == (raw, 0)
    assert cpu.decompress_chunk(memoryview(frame), len(raw), detail=True) == (raw, 0, "")
    assert cpu.decompress_chunk(np.frombuffer(frame, np.uint8), len(raw))[1] == 0
    no_fcs = compress(raw, write_content_size=False)
    assert cpu.decompress_chunk(no_fcs, len(raw) + 1) == (None, int(F.DECODED_LENGTH_MISMATCH))
    assert cpu.decompress_chunk(no_fcs, len(raw) - 1)[1] == F.DECODED_LENGTH_MISMATCH
    out, flag, msg = cpu.decompress_chunk(b"\x28\xb5\x2f\xfd" + b"\xff" * 9, 10, detail=True)
    assert out is None and flag == F.ZSTD_DECOMPRESS_FAILED and msg.startswith("zstd:")
    dctx = zstandard.ZstdDecompressor()
    assert cpu.decompress_chunk(frame, len(raw), dctx=dctx)[0] == raw


# ----------------------------------------------------------------------------- H2D planning


def _jobs(rng, n_chunks, data_len):
    """Frames laid out in order in a buffer of data_len bytes (gaps for raw chunks)."""
    lens = rng.integers(1000, 60_000, n_chunks)
    starts = np.sort(rng.choice(data_len - 60_000, n_chunks, replace=False))
    lo = starts.astype(np.int64)
    hi = np.minimum(lo + lens, data_len).astype(np.int64)
    declared = (3 * (hi - lo)).astype(np.uint64)
    return lo, hi, declared


def _check_tiling(tp, data_len):
    seg = tp.segments
    assert seg[0, 0] == 0 and seg[-1, 1] == data_len and (seg[1:, 0] == seg[:-1, 1]).all()
    if data_len:
        p = tp.pieces
        assert p[0, 0] == 0 and p[-1, 1] == data_len and (p[1:, 0] == p[:-1, 1]).all() and (p[:, 1] > p[:, 0]).all()
        for k, (lo, hi) in enumerate(seg.tolist()):
            mine = p[tp.piece_segment == k]
            assert mine[0, 0] == lo and mine[-1, 1] == hi
        assert (np.diff(tp.piece_segment) >= 0).all()


def test_plan_transfers_small_batches_use_one_pageable_copy():
    tp = gpu.plan_transfers(100_000, np.array([0]), np.array([50_000]), [(0, 1)])
    assert not tp.pinned and not tp.overlap and tp.n_slots == 0 and tp.slot_bytes == 0
    assert tp.pieces.tolist() == [[0, 100_000]] and tp.wait.tolist() == [0]
    _check_tiling(tp, 100_000)
    empty = gpu.plan_transfers(0, np.zeros(0), np.zeros(0), [])
    assert not empty.pinned and len(empty.pieces) == 0 and empty.segments.tolist() == [[0, 0]]


@pytest.mark.parametrize("data_len", [transfers.PINNED_MIN_BYTES, 10 << 20, 200 << 20 | 12345])
def test_plan_transfers_pinned_pieces_fit_bounded_slots(data_len):
    tp = gpu.plan_transfers(data_len, np.zeros(0), np.zeros(0), [], "pinned")
    assert tp.pinned and not tp.overlap
    _check_tiling(tp, data_len)
    sizes = tp.pieces[:, 1] - tp.pieces[:, 0]
    assert sizes.max() <= tp.slot_bytes <= transfers.PINNED_SLOT_BYTES
    assert sizes.max() - sizes.min() <= 1  # balanced: no tiny last transfer
    assert len(tp.pieces) == -(-data_len // transfers.PINNED_SLOT_BYTES)  # as few transfers as the slots allow
    assert 1 <= tp.n_slots <= transfers.PINNED_MAX_SLOTS and tp.n_slots <= len(tp.pieces)
    assert tp.slot_bytes % (1 << 20) == 0 or tp.slot_bytes == transfers.PINNED_SLOT_BYTES
    assert tp.n_slots * tp.slot_bytes <= transfers.PINNED_MAX_SLOTS * transfers.PINNED_SLOT_BYTES


def test_pinned_slot_size():
    mib = 1 << 20
    assert gpu.pinned_slot_size(0) == 0
    assert gpu.pinned_slot_size(1) == mib
    assert gpu.pinned_slot_size(mib + 1) == 2 * mib
    assert gpu.pinned_slot_size(transfers.PINNED_SLOT_BYTES) == transfers.PINNED_SLOT_BYTES
    assert gpu.pinned_slot_size(3000, slot_bytes=4096) == 4096
    assert gpu.pinned_slot_size(5000, slot_bytes=4096) == 5000  # never smaller than the piece


@pytest.mark.parametrize("seed", range(4))
def test_plan_transfers_overlap_segments_cover_each_subbatch(seed):
    rng = np.random.default_rng(seed)
    data_len = int(rng.integers(300, 900)) << 20
    lo, hi, declared = _jobs(rng, 8000, data_len)
    sub = nv.plan_subbatches(declared, 256 << 20, nv.estimate_temp_bytes)
    assert len(sub) >= 2
    tp = gpu.plan_transfers(data_len, lo, hi, sub)  # auto: large enough to overlap
    assert tp.pinned and tp.overlap and len(tp.segments) >= 2
    _check_tiling(tp, data_len)
    assert len(tp.wait) == len(sub) and (np.diff(tp.wait) >= 0).all()
    assert tp.wait[0] < len(tp.segments) - 1  # the first sub-batch need not wait for everything
    need = gpu.subbatch_byte_needs(hi, sub)
    for k, (a, b) in enumerate(sub):
        assert hi[a:b].max() <= need[k] <= tp.segments[tp.wait[k], 1], k  # its frames have arrived
        assert tp.wait[k] == 0 or tp.segments[tp.wait[k] - 1, 1] < need[k], k  # and it waits no longer
    seg_len = tp.segments[:, 1] - tp.segments[:, 0]
    assert (seg_len[:-1] >= transfers.MIN_SEGMENT_BYTES).all()
    assert len(tp.segments) <= len(sub) + 1
    assert (tp.pieces[:, 1] - tp.pieces[:, 0]).max() <= tp.slot_bytes <= transfers.PINNED_SLOT_BYTES


def test_plan_transfers_overlap_only_where_it_pays():
    rng = np.random.default_rng(9)
    data_len = 40 << 20
    lo, hi, declared = _jobs(rng, 2000, data_len)
    sub = nv.plan_subbatches(declared, 64 << 20, nv.estimate_temp_bytes)
    assert len(sub) >= 2
    assert not gpu.plan_transfers(data_len, lo, hi, sub).overlap  # auto: below OVERLAP_MIN_BYTES
    assert gpu.plan_transfers(data_len, lo, hi, sub, "overlap").overlap
    assert not gpu.plan_transfers(data_len, lo, hi, [(0, len(lo))], "overlap").overlap
    assert not gpu.plan_transfers(data_len, lo, hi, sub, "pinned").overlap
    assert not gpu.plan_transfers(data_len, lo, hi, sub, "pageable").pinned
    big = 100 << 20
    assert not gpu.plan_transfers(big, lo, hi, [(0, len(lo))]).overlap  # one sub-batch: nothing to overlap
    with pytest.raises(ValueError, match="h2d"):
        gpu.plan_transfers(big, lo, hi, sub, "async")


def test_plan_transfers_unsorted_frames_wait_for_the_running_maximum():
    # sub-batch 0 reads a frame near the end: sub-batch 1 cannot start earlier than that
    lo = np.array([0, 90 << 20, 10 << 20, 20 << 20], np.int64)
    hi = lo + (1 << 20)
    sub = [(0, 2), (2, 3), (3, 4)]
    np.testing.assert_array_equal(gpu.subbatch_byte_needs(hi, sub), [91 << 20, 91 << 20, 91 << 20])
    tp = gpu.plan_transfers(100 << 20, lo, hi, sub, "overlap")
    _check_tiling(tp, 100 << 20)
    for k, (a, b) in enumerate(sub):
        assert hi[: b].max() <= tp.segments[tp.wait[k], 1]


class _FakeCupy:
    """Just enough of CuPy for PinnedStaging: memcpyAsync copies at once,
    events remember the order of the operations, pinned memory is a bytearray."""

    def __init__(self):
        fake = self
        self.ops: list = []
        self.allocs: list[int] = []

        class Event:
            def __init__(self, disable_timing=False):
                self.recorded_after = None

            def record(self, stream=None):
                # position among the coordinating thread's operations (filler threads sync concurrently)
                self.recorded_after = sum(op[0] != "sync" for op in fake.ops)
                fake.ops.append(("record", self))

            def synchronize(self):
                fake.ops.append(("sync", self))

        class Stream:
            def __init__(self, non_blocking=False):
                self.ptr = 0x5EED
                self.non_blocking = non_blocking

            def wait_event(self, ev):
                fake.ops.append(("stream_wait", ev))

        def memcpy_async(dst, src, n, kind, stream):
            assert kind == 1 and stream == 0x5EED
            ctypes.memmove(dst, src, n)
            fake.ops.append(("memcpy", dst, n))

        def alloc_pinned_memory(n):
            fake.allocs.append(n)
            return bytearray(n)

        runtime = type("rt", (), {"memcpyAsync": staticmethod(memcpy_async), "memcpyHostToDevice": 1})
        self.cuda = type("cuda", (), {
            "Event": Event, "Stream": Stream, "runtime": runtime,
            "alloc_pinned_memory": staticmethod(alloc_pinned_memory),
            "get_current_stream": staticmethod(lambda: Stream()),
        })  # fmt: skip



def test_pinned_staging_copies_every_piece_through_a_bounded_ring():
    fake = _FakeCupy()
    st = gpu.PinnedStaging(fake)
    rng = np.random.default_rng(3)
    host = rng.integers(0, 256, 100_000, dtype=np.uint8)
    lo = np.array([0, 30_000, 60_000, 90_000], np.int64)
    tp = gpu.plan_transfers(len(host), lo, lo + 5_000, [(0, 1), (1, 2), (2, 3), (3, 4)], "overlap",
                            slot_bytes=7_000, max_slots=3, min_segment=1)  # fmt: skip
    assert tp.overlap and len(tp.segments) >= 3 and tp.n_slots == 3
    dst = np.zeros(len(host) + 16, np.uint8)
    events, span = st.copy(dst.ctypes.data, host, tp, timing=False)
    np.testing.assert_array_equal(dst[: len(host)], host)
    assert span is None and len(events) == len(tp.segments) and all(e is not None for e in events)
    # the copy stream first waits for the compute stream (stream-ordered reuse of the destination)
    assert fake.ops[0][0] == "record" and fake.ops[1][0] == "stream_wait"
    # one event per piece; a segment's event is its last piece's
    main = [op for op in fake.ops if op[0] != "sync"]
    assert len([op for op in main if op[0] == "memcpy"]) == len(tp.pieces)
    for seg, ev in enumerate(events):
        last_piece = int(np.flatnonzero(tp.piece_segment == seg)[-1])
        assert ev.recorded_after == [i for i, op in enumerate(main) if op[0] == "memcpy"][last_piece] + 1
    memcpys = [i for i, op in enumerate(fake.ops) if op[0] == "memcpy"]
    # bounded pinned memory: n_slots slots of slot_bytes, and a slot is reused
    # only after the event of the copy that last read it
    assert fake.allocs == [tp.slot_bytes] * tp.n_slots and tp.slot_bytes <= 7_000
    syncs = [i for i, op in enumerate(fake.ops) if op[0] == "sync"]
    assert len(syncs) == len(tp.pieces) - tp.n_slots
    for k, i in enumerate(syncs):
        piece = k + tp.n_slots
        assert i < memcpys[piece]  # waited before overwriting the slot
    # reused across calls: no new pinned allocation for a plan that fits
    st.copy(dst.ctypes.data, host, tp)
    assert len(fake.allocs) == tp.n_slots
