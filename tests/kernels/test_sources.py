"""The CUDA sources: they compile for sm_90 (nvcc and NVRTC), and the headers
mirror the Python contract (flags, descriptor layouts)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from gtsamples.decode import gpu
from gtsamples.decode.gpu import nvrtc as kernels
from gtsamples.errors import DecodeErrorFlag

KDIR = kernels.kernel_dir()
CU_FILES = sorted(p.name for p in KDIR.glob("*.cu"))
NVCC = shutil.which("nvcc")


def test_every_cu_file_is_registered():
    assert CU_FILES == sorted(kernels.KERNEL_SOURCES)


def test_every_kernel_is_extern_c():
    # (that every other function is __device__ is enforced by the nvcc builds below:
    # nvcc rejects a host function called from a kernel, NVRTC under CuPy would not)
    for name, entries in kernels.KERNEL_SOURCES.items():
        src = kernels.amalgamate(name)
        for e in entries:
            assert re.search(r'extern "C" __global__ void(?: __launch_bounds__\([^)]*\))?\s+' + e + r"\(", src), e


def test_amalgamation_resolves_every_include_once():
    for name in CU_FILES:
        src = kernels.amalgamate(name)
        assert '#include "' not in src
        assert "#pragma once" not in src
        assert src.count("struct GtsChunk {") == 1
        assert src.count("#define GTS_FLAG_CHECKSUM_MISMATCH") <= 1


def test_error_header_mirrors_decode_error_flag():
    text = (KDIR / "gts_errors.cuh").read_text()
    found = {}
    for m in re.finditer(r"#define GTS_FLAG_(\w+)\s+\(?(\w+)(?:\s*<<\s*(\d+)\))?", text):
        name, base, shift = m.group(1), m.group(2), m.group(3)
        value = int(base.rstrip("u"), 0) << int(shift) if shift else int(base.rstrip("u"), 0)
        found[name] = value
    expected = {name: int(f.value) for name, f in DecodeErrorFlag.__members__.items()}
    assert found == expected


def _parse_struct(text: str, name: str) -> list[tuple[str, str, int]]:
    body = re.search(r"struct " + name + r" \{(.*?)\n\};", text, re.S).group(1)
    fields = []
    for m in re.finditer(r"^\s*(u8|u16|u32|u64|i32|i64)\s+(\w+);\s*//\s*(\d+)", body, re.M):
        fields.append((m.group(2), m.group(1), int(m.group(3))))
    return fields


@pytest.mark.parametrize(
    "struct,dtype",
    [
        ("GtsChunk", gpu.CHUNK_DESC_DTYPE),
        ("GtsBlock", gpu.BLOCK_DESC_DTYPE),
        ("GtsCopyCol", gpu.COPY_COL_DTYPE),
        ("GtsMaskCol", gpu.MASK_COL_DTYPE),
        ("GtsHashJob", gpu.HASH_JOB_DTYPE),
        ("GtsSeqOrder", gpu.SEQ_ORDER_DTYPE),
    ],
)
def test_descriptor_structs_mirror_numpy_dtypes(struct, dtype):
    text = (KDIR / "gts_types.cuh").read_text()
    fields = _parse_struct(text, struct)
    sizes = {"u8": 1, "u16": 2, "u32": 4, "u64": 8, "i32": 4, "i64": 8}
    off = 0
    for fname, ctype, comment_off in fields:
        off = (off + sizes[ctype] - 1) // sizes[ctype] * sizes[ctype]  # natural alignment
        assert comment_off == off, (struct, fname)
        assert dtype.fields[fname][1] == off, (struct, fname)
        assert dtype.fields[fname][0].itemsize == sizes[ctype]
        assert dtype.fields[fname][0].kind == ("i" if ctype[0] == "i" else "u"), (struct, fname)
        off += sizes[ctype]
    assert [f[0] for f in fields] == list(dtype.names)
    size = re.search(r"sizeof\(" + struct + r"\) == (\d+)", text).group(1)
    assert int(size) == dtype.itemsize == (off + 7) // 8 * 8


def test_python_mirrors_of_header_constants():
    t = (KDIR / "gts_types.cuh").read_text()
    assert f"#define GTS_BLOCK {gpu.GTS_BLOCK}" in t
    assert "#define GTS_ENC_NULL_FILL 0xffff" in t and gpu.ENC_NULL_FILL == 0xFFFF
    assert "#define GTS_NO_CHUNK 0xffffffffu" in t and gpu.NO_CHUNK == 0xFFFFFFFF
    assert f"#define GTS_HASH_PAD {gpu.HASH_PAD}" in (KDIR / "gts_xxh64.cuh").read_text()
    assert "#define GTS_WARPS (GTS_BLOCK / 32)" in t and gpu.GTS_WARPS == gpu.GTS_BLOCK // 32
    assert f"#define GTS_WARP_MAX_ROWS {gpu.GTS_WARP_MAX_ROWS}u" in (KDIR / "gts_warp.cuh").read_text()
    assert 0 <= gpu.host_plan.WARP_MAX_ROWS <= gpu.GTS_WARP_MAX_ROWS


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
@pytest.mark.parametrize("name", CU_FILES)
def test_nvcc_ptx_sm90(name, tmp_path):
    r = subprocess.run(
        [NVCC, "-std=c++17", "-arch=sm_90", f"-I{KDIR}", "--ptx", "-o", str(tmp_path / "k.ptx"), str(KDIR / name)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    ptx = (tmp_path / "k.ptx").read_text()
    for entry in kernels.KERNEL_SOURCES[name]:
        assert f".entry {entry}(" in ptx


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
@pytest.mark.parametrize("name", CU_FILES)
def test_nvcc_cubin_sm90_no_warnings_no_spills(name, tmp_path):
    r = subprocess.run(
        [NVCC, "-std=c++17", "-arch=sm_90", f"-I{KDIR}", "-cubin", "-Werror", "all-warnings",
         "-Xptxas", "-warn-spills,-warn-lmem-usage", "-o", str(tmp_path / "k.cubin"), str(KDIR / name)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "k.cubin").stat().st_size > 0


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        return None
    try:
        err, *_ = nvrtc.nvrtcVersion()
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return None
    except Exception:  # libnvrtc missing
        return None
    return nvrtc


@pytest.mark.parametrize("name", CU_FILES)
def test_nvrtc_compiles_amalgamated_source(name):
    nvrtc = _nvrtc()
    if nvrtc is None:
        pytest.skip("cuda.bindings.nvrtc (cuda-bindings + nvidia-cuda-nvrtc) not importable")
    src = kernels.amalgamate(name)
    err, prog = nvrtc.nvrtcCreateProgram(src.encode(), name.encode(), 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    try:
        # the options CuPy's RawModule uses (cupy/cuda/compiler.py) plus ours
        opts = [o.encode() for o in kernels.NVRTC_OPTIONS] + [
            b"-arch=sm_90", b"--device-as-default-execution-space", b"-ftz=true"
        ]
        (res,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        _, n = nvrtc.nvrtcGetProgramLogSize(prog)
        # a fresh writable buffer: ``b" " * 1`` is CPython's cached one-byte
        # object, and NVRTC writing its NUL into it turns every b" " in the
        # process into b"\x00" (it broke unrelated tests that run later)
        log = bytearray(max(n, 1))
        nvrtc.nvrtcGetProgramLog(prog, log)
        assert res == nvrtc.nvrtcResult.NVRTC_SUCCESS, bytes(log).decode(errors="replace")
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        assert size > 0
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
