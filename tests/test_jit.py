"""The kernels' compile cache (gtsamples.jit) and `gtsamples warmup`.

Each test runs fresh processes on a copy of the package: a read-only install (not writable
by the process: chmod, or another user when the tests run as root), a home directory of
its own and no NUMBA_CACHE_DIR.  They call one small kernel, so that a cold compile costs
seconds, not the half minute of a whole read; tests/test_cli.py's warm-up test covers the
read and demo paths.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "gtsamples"

# one kernel (plan.split's batch grouping), then what this process compiled
PROBE = """
import json, numpy as np, gtsamples
from gtsamples import jit
from gtsamples.plan import split
assert gtsamples.__file__.startswith(%r), gtsamples.__file__
ids = split._group_ids(np.array([5, 5, 5], np.int64), 10)
print(json.dumps({"compiled": [k for k, _ in jit.compiled()], "ids": [int(i) for i in ids]}))
"""


@pytest.fixture
def install():
    """A copy of the package (no caches) under a world-readable temporary folder, and a
    home; ``make(read_only)`` freezes the copy.  Removed afterwards."""
    top = Path(tempfile.mkdtemp(prefix="gts-jit-"))
    top.chmod(0o755)
    site, home = top / "site", top / "home"
    shutil.copytree(SRC, site / "gtsamples", ignore=shutil.ignore_patterns("__pycache__", "_jitcache"))
    home.mkdir()
    for p in (top, site, home):
        p.chmod(0o777 if p == home else 0o755)
    for p in site.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)

    def freeze():
        for p in [site, *site.rglob("*")]:
            if p.is_dir():
                p.chmod(0o555)
    yield site, home, freeze
    for p in [site, *site.rglob("*")]:
        if p.is_dir():
            p.chmod(stat.S_IRWXU)
    shutil.rmtree(top, ignore_errors=True)


def _run(site: Path, home: Path, user: list[str], **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_CACHE_DIR", "GTSAMPLES_CACHE_DIR", "XDG_CACHE_HOME", "COVERAGE_PROCESS_START",
                        "NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES")}
    env.update(HOME=str(home), PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1", **extra)
    r = subprocess.run([*user, sys.executable, "-c", PROBE % str(site)], env=env, cwd=str(home),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["ids"] == [0, 0, 1]
    return out


def _files(path: Path) -> list[str]:
    return sorted(p.name for p in path.rglob("*.nb[ic]")) if path.exists() else []


def test_a_read_only_install_compiles_once_then_loads_from_the_users_cache(install, other_user):
    site, home, freeze = install
    freeze()
    user = other_user
    first = _run(site, home, user)
    assert "gtsamples.plan.split._group_ids" in first["compiled"]
    assert _files(site / "gtsamples" / "_jitcache") == []  # nothing written into the install
    saved = _files(home / ".cache" / "gtsamples")
    assert any(n.startswith("split._group_ids") for n in saved), saved
    assert _run(site, home, user)["compiled"] == []  # the next process loads it


def test_a_cache_warmed_at_install_time_serves_a_read_only_copy(install, other_user):
    site, home, freeze = install
    user = other_user
    # install time: the package is writable (root or the installing user), the cache goes in it
    assert "gtsamples.plan.split._group_ids" in _run(site, home, [])["compiled"]
    assert any(n.startswith("split._group_ids") for n in _files(site / "gtsamples" / "_jitcache"))
    shutil.rmtree(home / ".cache", ignore_errors=True)
    # moved elsewhere (an image layer, a wheel): the stamp is the sources' content, not the path
    moved = site.with_name("moved")
    site.rename(moved)
    freeze_moved = [moved, *moved.rglob("*")]
    for p in freeze_moved:
        if p.is_dir():
            p.chmod(0o555)
    try:
        assert _run(moved, home, user)["compiled"] == []
        assert _files(home / ".cache" / "gtsamples") == []
    finally:
        for p in freeze_moved:
            if p.is_dir():
                p.chmod(stat.S_IRWXU)
        moved.rename(site)


def test_portable_entries_serve_any_cpu_of_the_architecture(install, other_user):
    """An image warmed with NUMBA_CPU_NAME=generic: a process on the host's own CPU target
    finds no entry for its CPU and loads the portable one instead of compiling."""
    site, home, freeze = install
    assert _run(site, home, [], NUMBA_CPU_NAME="generic")["compiled"]
    freeze()
    shutil.rmtree(home / ".cache", ignore_errors=True)
    assert _run(site, home, other_user)["compiled"] == []


def test_an_edited_source_retires_the_cache(install):
    site, home, _ = install
    assert _run(site, home, [])["compiled"]
    assert _run(site, home, [])["compiled"] == []
    intr = site / "gtsamples" / "decode" / "cpu" / "intrinsics.py"  # not the kernel's own file
    intr.write_text(intr.read_text() + "\n# edited\n")
    assert "gtsamples.plan.split._group_ids" in _run(site, home, [])["compiled"]


def test_every_kernel_is_cached_by_gtsamples_jit():
    """No kernel uses numba's own cache (``cache=True``): each ``@njit`` is jit.njit."""
    import importlib

    from gtsamples import jit

    declared = 0
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        assert "cache=True" not in text.replace("``cache=True``", ""), path
        if "\n@njit(" in text:
            declared += text.count("\n@njit(")
            importlib.import_module(".".join(("gtsamples", *path.relative_to(SRC).with_suffix("").parts)))
    kernels = jit.kernels()
    assert len(kernels) == declared
    assert all(isinstance(d.stats.cache_path, str) for d in kernels)


def test_after_warmup_the_demo_and_a_read_compile_nothing(tmp_path):
    """`gtsamples warmup` (what make setup and the Docker images run) covers the demo, the
    CLI's read and a region's series reads: fresh processes after it compile no kernel."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES")}
    env["GTSAMPLES_CACHE_DIR"] = str(tmp_path / "user-cache")
    r = subprocess.run([sys.executable, "-m", "gtsamples", "warmup"], env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0 and "gtsamples warmup:" in r.stdout, r.stderr[-3000:]
    code = """
import json, sys
from gtsamples.cli import main
from gtsamples import jit
import gtsamples as gs
from gtsamples.demo import synthetic_metrics
assert main(["demo", "--device", "cpu", "--series", "30", "--rows-per-series", "700"]) == 0
e = gs.write_artifact(synthetic_metrics(5, 300), sys.argv[1], region_id=1,
                      source_file_id="5a3c0000-0000-4000-8000-000000000001", timestamp_column_id=0,
                      field_column_ids=[1, 2, 3, 4])
gen = sys.argv[1] + "/" + e.objects[0].path.rsplit("/", 1)[0]
assert main(["read", gen, "-o", sys.argv[1] + "/out.parquet", "--no-progress"]) == 0
assert main(["validate", gen]) == 0
from gtsamples.region import create_region
r = create_region(sys.argv[1] + "/region", 4398046511104)
t = synthetic_metrics(6, 400)
r.replace_ssts(add=[t.slice(0, t.num_rows // 2), t.slice(t.num_rows // 2)])
r.build(verify=None, max_page_bytes=1024)
first = (int(t["__table_id"][0].as_py()), int(t["__tsid"][0].as_py()))
for _ in range(2):  # navigated, then from the warm index
    assert r.read(series=[first], start=0).num_rows > 0
print(json.dumps(jit.compiled()))
"""
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == []


def test_portable_keys_fall_back_to_the_baseline_only_for_the_hosts_own_target(monkeypatch):
    import numba

    from gtsamples import jit

    key = ("sig", ("x86_64-unknown-linux-gnu", "skylake", "+avx2"), ("code", "closure"))
    monkeypatch.setattr(numba.config, "CPU_NAME", None)
    keys = jit.portable_keys(key)
    assert keys[-1] == ("sig", ("x86_64-unknown-linux-gnu", "generic", ""), ("code", "closure"))
    assert [k[1][1] for k in keys] in (["generic"], ["x86-64-v3", "generic"])
    monkeypatch.setattr(numba.config, "CPU_NAME", "generic")  # a warm-up for a portable target
    assert jit.portable_keys(key) == []
    assert jit.slow_pext("znver2") and not jit.slow_pext("znver3") and not jit.slow_pext("x86-64-v3")
