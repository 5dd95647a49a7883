"""benchmarks/device_check.sh and its Python half, without a GPU.

The script's dry run runs here on stand-in wheels: the venv's own installed
nvidia-libnvcomp-cu13 and zstandard repacked as wheels (same files, this
interpreter's tags), since a fresh clone has no staged .whl/ and no network.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata as md
import io
import json
import math
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from benchmarks import device_check as dc
from tests.conftest import SHARED

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "device_check.sh"
NVCOMP_DIST = "nvidia-libnvcomp-cu13"


# ----------------------------------------------------------------------------- stand-in wheels


def _wheel_tag(dist: md.Distribution) -> str:
    tags = [ln.split(":", 1)[1].strip() for ln in (dist.read_text("WHEEL") or "").splitlines() if ln.startswith("Tag:")]
    if not tags:
        pytest.skip(f"{dist.metadata['Name']}: installed without a WHEEL tag")
    parts = [sorted({t.split("-")[i] for t in tags}) for i in range(3)]
    return "-".join(".".join(p) for p in parts)


def repack_wheel(name: str, out: Path) -> Path:
    """The installed distribution ``name`` as a wheel: its RECORD's files,
    a fresh RECORD, the installer's own files left out."""
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        pytest.skip(f"{name} is not installed (the kernels-test extra)")
    site = Path(dist.locate_file(""))
    norm = re.sub(r"[-_.]+", "_", dist.metadata["Name"]).lower()
    info = f"{norm}-{dist.version}.dist-info"
    path = out / f"{norm}-{dist.version}-{_wheel_tag(dist)}.whl"
    record = io.StringIO()
    rows = csv.writer(record, lineterminator="\n")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:  # stored: 30 MB in a second
        for f in dist.files or ():
            rel = f.as_posix()
            if rel.startswith("..") or "__pycache__" in rel or rel.endswith(".pyc"):
                continue
            if Path(rel).parent.name.endswith(".dist-info") and Path(rel).name in (
                "RECORD", "INSTALLER", "REQUESTED", "direct_url.json"):  # fmt: skip
                continue
            data = (site / rel).read_bytes()
            z.writestr(rel, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.writerow([rel, f"sha256={digest}", len(data)])
        rows.writerow([f"{info}/RECORD", "", ""])
        z.writestr(f"{info}/RECORD", record.getvalue())
    return path


@pytest.fixture(scope="module")
def standin_wheels(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("whl")
    for name in (NVCOMP_DIST, "zstandard"):
        repack_wheel(name, d)
    return d


def _run(args, tmp_path, wheels, timeout=240, **env):
    """The script with ``env`` over the defaults (a value of None: the variable unset)."""
    e = dict(os.environ)
    e.pop("PYTHONPATH", None)
    e.pop("GTS_COMMIT", None)
    e.update({"PYTHON": sys.executable, "OUT": str(tmp_path / "out"), "DEVICE_CHECK_WHEELS": str(wheels),
              "DEVICE_PYTHON": "%d.%d" % sys.version_info[:2], "TMPDIR": str(tmp_path), **env})  # fmt: skip
    e = {k: v for k, v in e.items() if v is not None}
    r = subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, env=e, capture_output=True, text=True,
                       timeout=timeout)  # fmt: skip
    return r, r.stdout + r.stderr


# ----------------------------------------------------------------------------- the script


def test_dry_run_collects_what_the_device_run_would(standin_wheels, tmp_path):
    r, out = _run(["--dry-run"], tmp_path, standin_wheels)
    assert r.returncode == 0, out[-6000:]
    site = re.search(r"--target (\S+)", out).group(1)
    assert re.search(rf"zstandard\s+{re.escape(site)}/zstandard/", out), out
    assert re.search(rf"libnvcomp\s+{re.escape(site)}/nvidia/libnvcomp/lib64/libnvcomp.so", out), out
    assert "NOT FROM" not in out
    n = int(re.search(r"^gpu tests collected: (\d+)$", out, re.M).group(1))
    counts, total = re.search(r"^file by file: ([\d + ]+) = (\d+)$", out, re.M).groups()
    assert n == int(total) == sum(int(c) for c in counts.split(" + "))
    per_file = dict(re.findall(r"^  (tests/\S+\.py)\s+(\d+)$", out, re.M))
    gpu_files = {str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "gpu").glob("test_*.py")}
    assert gpu_files <= set(per_file) and all(int(per_file[f]) > 0 for f in gpu_files), per_file
    assert int(re.search(r"^memcheck -k selects: (\d+)$", out, re.M).group(1)) > 0
    worst = int(re.search(r"worst case (\d+) s", out).group(1))
    assert worst <= 360
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert len(files) <= 6 and "summary.json" in files, files
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert set(dc.SUMMARY_KEYS) <= set(s) and s["mode"] == "dry-run"
    assert not list(tmp_path.glob("gts-device-check.*")), "the temporary site stays behind"


def test_without_staged_wheels_the_device_run_stops_at_once(tmp_path):
    (tmp_path / "empty").mkdir()
    r, out = _run([], tmp_path, tmp_path / "empty", timeout=30)
    assert r.returncode == 2
    assert "stage-device-wheels.sh" in out and 'carry [".whl"]' in out
    assert not (tmp_path / "out").exists()


def test_step_timeouts_over_360_s_are_refused(tmp_path):
    r, out = _run(["--dry-run"], tmp_path, tmp_path, timeout=30, DEVICE_CHECK_T_TESTS="300")
    assert r.returncode == 2 and "over 360 s" in out


def _python_without_the_stack(d: Path) -> Path:
    """An executable that runs this interpreter without site-packages: no numba, no pyarrow."""
    d.mkdir(exist_ok=True)
    exe = d / "python3"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    exe.chmod(0o755)
    return exe


def test_dry_run_without_numba_and_pyarrow_stops_at_once(tmp_path):
    r, out = _run(["--dry-run"], tmp_path, tmp_path, timeout=60,
                  PYTHON=str(_python_without_the_stack(tmp_path / "bin")))
    assert r.returncode == 2
    assert "cannot import numba and pyarrow" in out and "make setup" in out, out
    assert not (tmp_path / "out").exists()


def test_dry_run_takes_the_checkouts_venv_by_default(standin_wheels, tmp_path):
    """PYTHON unset, and a python3 first on PATH without the CPU stack: the dry run
    passes, on .venv/bin/python."""
    if not os.access(ROOT / ".venv" / "bin" / "python", os.X_OK):
        pytest.skip("no .venv in this checkout (make setup makes it)")
    bin_dir = _python_without_the_stack(tmp_path / "bin").parent
    r, out = _run(["--dry-run"], tmp_path, standin_wheels, PYTHON=None,
                  PATH=f"{bin_dir}:{os.environ.get('PATH', '')}")
    assert r.returncode == 0, out[-4000:]
    assert "dry run passed" in out and f"$ {ROOT}/.venv/bin/python -m pytest" in out, out[-4000:]


def test_summary_prints_after_a_step_times_out(standin_wheels, tmp_path):
    """The device path here (no GPU): the tests step killed after 1 s still
    leaves the summary table, summary.json and the step's status."""
    r, out = _run([], tmp_path, standin_wheels, DEVICE_CHECK_T_TESTS="1", DEVICE_CHECK_T_MEMCHECK="1",
                  GTS_COMMIT="abc123")  # fmt: skip
    assert r.returncode != 0
    assert re.search(r"tests\s+timed out after 1 s", out), out[-4000:]
    assert "== device check summary (device, commit abc123)" in out
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["commit"] == "abc123" and s["decoded_gbps_hbm"] is None
    assert [x["step"] for x in s["steps"]][:3] == ["install", "versions", "tests"]


def test_nvcomp_pin_matches_pyproject_and_staging_script():
    pin = re.search(r"^NVCOMP_WHEEL=nvidia_libnvcomp_cu13-(\S+)", SCRIPT.read_text(), re.M).group(1)
    assert f'"nvidia-libnvcomp-cu13=={pin}"' in (ROOT / "pyproject.toml").read_text()
    assert f"nvidia-libnvcomp-cu13=={pin}" in (ROOT / "tools" / "stage-device-wheels.sh").read_text()
    stage = SHARED / "tools" / "stage-device-wheels.sh"  # the workplace's copy, where present
    if stage.is_file():
        assert f"nvidia-libnvcomp-cu13=={pin}" in stage.read_text()


# ----------------------------------------------------------------------------- summary


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.gpu.test_gpu_backend" name="test_a[0]"/>
<testcase classname="tests.gpu.test_gpu_backend" name="test_a[1]"><failure message="x"/></testcase>
<testcase classname="tests.gpu.test_gpu_backend" name="test_b"><skipped message="no cudf"/></testcase>
<testcase classname="tests.gpu.test_gpu_artifacts" name="test_c"/>
<testcase classname="tests.kernels.test_gpu_host.TestRing" name="test_d"><error message="setup"/></testcase>
</testsuite></testsuites>"""


def _bench(**kw):
    rec = {"fields": 4, "rows": 10_000_000, "query": "scan", "batch_rows": 10_081_680, "device_GBps": 812.5,
           "kernels_GBps": 1500.0, "copy_GBps": 4300.0, "copy_out_GBps": 2150.0, "speedup": 95.0, "cpu_s": 1.2,
           "device_ms": 0.76, "stages_ms": {"nvcomp": 0.3}}  # fmt: skip
    rec.update(kw)
    return json.dumps(rec)


def _inputs(tmp_path, bench_lines, memcheck="========= ERROR SUMMARY: 0 errors\n"):
    (tmp_path / "gpu-tests.xml").write_text(JUNIT)
    (tmp_path / "bench.jsonl").write_text("\n".join(bench_lines) + "\n")
    (tmp_path / "versions.json").write_text(json.dumps(
        {"device": "NVIDIA H200", "driver": "580.159.03", "cuda_runtime": "13.0", "cupy": "14.2.0",
         "nvcomp": "6.0.0"}))  # fmt: skip
    (tmp_path / "memcheck.txt").write_text(memcheck)
    (tmp_path / "steps.tsv").write_text("install\tok\t0\t4\ntests\ttimed out after 170 s\t124\t173\n")
    return dict(junit=tmp_path / "gpu-tests.xml", bench=tmp_path / "bench.jsonl",
                versions=tmp_path / "versions.json", memcheck=tmp_path / "memcheck.txt", commit="f7dabf4",
                steps=tmp_path / "steps.tsv")  # fmt: skip


def test_summary_maps_the_reports(tmp_path):
    lines = [
        _bench(rows=1_000_000, device_GBps=111.0),  # smaller: not the one
        _bench(fields=1, rows=100_000_000, device_GBps=1.0),  # other field count
        _bench(query="series", device_GBps=2.0),
        _bench(),
        _bench(query="files", files_GBps=25.5, host_share=0.375, device_GBps=None),
        _bench(query="files", rows=1_000_000, files_GBps=3.0, host_share=0.9),
    ]
    s = dc.build_summary(**_inputs(tmp_path, lines))
    assert list(s)[: len(dc.SUMMARY_KEYS)] == list(dc.SUMMARY_KEYS)
    assert {k: s[k] for k in dc.SUMMARY_KEYS} == {
        "device": "NVIDIA H200", "driver": "580.159.03", "cuda_runtime": "13.0", "cupy": "14.2.0",
        "nvcomp": "6.0.0", "commit": "f7dabf4", "tests_passed": 2, "tests_failed": 2, "tests_skipped": 1,
        "memcheck_errors": 0, "decoded_gbps_hbm": 812.5, "decoded_gbps_from_files": 25.5, "copy_gbps": 4300.0,
        "cpu_speedup": 95.0, "host_share": 0.375,
    }  # fmt: skip
    assert s["tests_by_file"] == {
        "tests/gpu/test_gpu_artifacts.py": {"passed": 1},
        "tests/gpu/test_gpu_backend.py": {"passed": 1, "failed": 1, "skipped": 1},
        "tests/kernels/test_gpu_host.py": {"failed": 1},
    }
    assert s["steps"][1] == {"step": "tests", "status": "timed out after 170 s", "rc": "124", "seconds": "173"}
    text = dc.format_summary(s)
    assert re.search(r"tests/gpu/test_gpu_backend.py\s+1\s+1\s+1", text)
    assert "HBM 812.5" in text and "host share 0.38" in text


def test_summary_of_nothing_is_nulls(tmp_path):
    """Steps that never ran or were killed: missing, empty or truncated files."""
    (tmp_path / "gpu-tests.xml").write_text("<testsuites><testsuite><testcase classname=")  # killed mid-write
    (tmp_path / "bench.jsonl").write_text('{"fields": 4, "rows": 10, "query": "scan", "device_GBps": NaN}\n{"fie')
    (tmp_path / "versions.json").write_text("")
    s = dc.build_summary(junit=tmp_path / "gpu-tests.xml", bench=tmp_path / "bench.jsonl",
                         versions=tmp_path / "versions.json", memcheck=tmp_path / "absent.txt", commit="")  # fmt: skip
    assert all(s[k] is None for k in dc.SUMMARY_KEYS if k != "commit"), s
    assert s["commit"] == "unknown" and s["tests_by_file"] is None and s["steps"] == []
    json.dumps(s, allow_nan=False)
    assert "no report" in dc.format_summary(s)
    s2 = dc.build_summary(junit=tmp_path / "x", bench=tmp_path / "x", versions=tmp_path / "x",
                          memcheck=tmp_path / "x", commit=None, steps=tmp_path / "x")  # fmt: skip
    assert all(s2[k] is None for k in dc.SUMMARY_KEYS if k != "commit")


@pytest.mark.parametrize(
    "text,want",
    [
        ("========= ERROR SUMMARY: 0 errors\n", 0),
        ("========= Invalid __global__ write of size 4 bytes\n...\n========= ERROR SUMMARY: 3 errors\n", 3),
        ("========= ERROR SUMMARY: 1 error\n", 1),
        ("========= Error: Device not supported\n========= ERROR SUMMARY: 0 errors\n", None),  # refused
        ("===== partial output, killed\n", None),
    ],
)
def test_memcheck_count(tmp_path, text, want):
    (tmp_path / "m.txt").write_text(text)
    assert dc.read_memcheck(tmp_path / "m.txt") == want
    assert dc.sanitizer_refused(tmp_path / "m.txt") == ("not supported" in text)


def test_summary_command_writes_summary_json(tmp_path):
    kw = _inputs(tmp_path, [_bench(speedup=float("nan"))])
    rc = dc.main(["summary", "--out-dir", str(tmp_path), "--steps", str(kw["steps"]), "--memcheck",
                  str(kw["memcheck"]), "--commit", "abc"])  # fmt: skip
    assert rc == 0
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["cpu_speedup"] is None and s["decoded_gbps_hbm"] == 812.5 and s["commit"] == "abc"
    assert not math.isnan(s["copy_gbps"])


def test_collect_files_expands_folders_like_pytest():
    files = dc.collect_files(["tests/gpu", "tests/kernels/test_sources.py"])
    assert files[-1] == "tests/kernels/test_sources.py"
    assert {"tests/gpu/test_gpu_backend.py", "tests/gpu/test_gpu_artifacts.py"} <= set(files)
    assert not any(f.endswith(("conftest.py", "scenarios.py")) for f in files)
    assert dc.named_twice(files) == []
    # the old device_check.sh's paths: pytest 8 then ran only test_gpu_artifacts.py of tests/gpu
    old = dc.collect_files(["tests/gpu", "tests/gpu/test_gpu_artifacts.py", "tests/kernels/test_sources.py"])
    assert dc.named_twice(old) == ["tests/gpu/test_gpu_artifacts.py"]


def test_k_terms_counts_each_or_term():
    ids = ["t.py::test_parity_random_batches[0]", "t.py::test_parity_random_batches[1]",
           "t.py::test_trimming[inside]", "a.py::test_corruption_same_error_as_cpu[raw-x]"]  # fmt: skip
    expr = "parity_random_batches and 0 or corruption_same_error_as_cpu and raw or trimming or overlapped_staging"
    assert dc.k_terms(expr, ids) == {"parity_random_batches and 0": 1, "corruption_same_error_as_cpu and raw": 1,
                                     "trimming": 1, "overlapped_staging": 0}  # fmt: skip
    assert dc.k_terms("not slow", ids) is None
