"""The wheel carries every package: pyproject.toml lists them by hand (kernels/ is mapped
into gtsamples.kernels), so a new subpackage missing from the list would install
without it while an editable install -- what the suite runs on -- still finds it
(gtsamples.plan and gtsamples.cli were missing once)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

import pytest

tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ (tomllib)")

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_every_package_under_src_is_listed_in_pyproject():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(conf["tool"]["setuptools"]["packages"])
    src = ROOT / "src"
    found = {".".join(p.parent.relative_to(src).parts) for p in src.rglob("__init__.py")}
    assert found, "no packages found under src/"
    assert found - listed == set(), "packages under src/ missing from [tool.setuptools] packages"
    assert listed - found == {"gtsamples.kernels"}, "listed packages that do not exist"


# --- the wheel carries the compiled kernels (setup.py; issue 24) ---------------------------

def _build_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_CACHE_DIR", "GTSAMPLES_CACHE_DIR", "XDG_CACHE_HOME", "COVERAGE_PROCESS_START",
                        "NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "GTSAMPLES_BUILD_NO_WARMUP")}
    env.update(extra)
    return env


def _wheel(out: pathlib.Path, **env: str) -> pathlib.Path:
    """``pip wheel`` of a copy of the project (a build/ of its own, no egg-info in the
    checkout) in the suite's environment, into ``out``: no build isolation (the isolated
    build environment's installs take a minute more; they are the same packages)."""
    src = out / "project"
    src.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("src", "kernels"):
        shutil.copytree(ROOT / name, src / name,
                        ignore=shutil.ignore_patterns("__pycache__", "_jitcache", "*.egg-info"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "-w", str(out), str(src)],
                       env=_build_env(**env), capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = out.glob("gtsamples-*.whl")
    return wheel


def _chmod_tree(top: pathlib.Path, mode: int) -> None:
    """Folders to ``mode``, files readable by all (read-only where ``mode`` is)."""
    for p in [top, *top.rglob("*")]:
        p.chmod(mode if p.is_dir() else (mode & 0o644) | 0o444)


def _cache_entries(wheel: pathlib.Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        return [n for n in z.namelist() if n.startswith("gtsamples/_jitcache/")]


def test_a_wheel_built_with_gtsamples_build_no_warmup_has_no_compiled_kernels(tmp_path):
    # not even those an earlier build left in build/lib (pip builds in the project's folder)
    stale = tmp_path / "project" / "build" / "lib" / "gtsamples" / "_jitcache" / "m"
    stale.mkdir(parents=True)
    (stale / "k-1.py311.nbi").write_bytes(b"")
    wheel = _wheel(tmp_path, GTSAMPLES_BUILD_NO_WARMUP="1")
    assert _cache_entries(wheel) == []
    with zipfile.ZipFile(wheel) as z:
        assert "gtsamples/jit.py" in z.namelist()


PROBE = """
import json, sys, uuid
import gtsamples as gs
from gtsamples import jit
from gtsamples.cli import main
from gtsamples.demo import synthetic_metrics
assert gs.__file__.startswith(sys.argv[2]), gs.__file__
t = synthetic_metrics(8, 500)
e = gs.write_artifact(t, sys.argv[1] + "/art", region_id=1, source_file_id=str(uuid.uuid4()),
                      timestamp_column_id=0, field_column_ids=[1, 2, 3, 4])
gen = sys.argv[1] + "/art/" + e.objects[0].path.rsplit("/", 1)[0]
art = gs.open_artifact(gen)
assert art.read().num_rows == t.num_rows
first = (int(t["__table_id"][0].as_py()), int(t["__tsid"][0].as_py()))
assert art.read(series=[first], columns=["__tsid", "ts", "cpu_usage"]).num_rows > 0
assert sum(b.num_rows for b in art.iter_batches(max_bytes=1 << 14)) == t.num_rows
assert main(["read", gen, "-o", sys.argv[1] + "/out.parquet", "--no-progress"]) == 0
print(json.dumps(jit.compiled()))
"""


@pytest.mark.slow
def test_a_plain_install_of_the_wheel_reads_without_compiling(tmp_path, request, other_user):
    """The wheel's build runs the portable warm-up (a minute or two): installed (not
    editable), read-only, with an empty home and no NUMBA_CACHE_DIR, a write, a read, a
    series query, streamed batches and the CLI's read compile no kernel."""
    wheel = _wheel(tmp_path)
    entries = _cache_entries(wheel)
    assert any(n.endswith(".nbi") for n in entries) and any(n.endswith(".nbc") for n in entries), entries
    with zipfile.ZipFile(wheel) as z:
        assert not [n for n in z.namelist() if n.endswith(".pyc")]  # the warm-up wrote no bytecode
    top = pathlib.Path(tempfile.mkdtemp(prefix="gts-wheel-"))  # world-traversable, unlike tmp_path
    request.addfinalizer(lambda: (_chmod_tree(top, 0o755), shutil.rmtree(top, ignore_errors=True)))
    site, home = top / "site", top / "home"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    home.mkdir()
    top.chmod(0o755)
    home.chmod(0o777)
    _chmod_tree(site, 0o555)
    user = other_user  # root writes through chmod: read as another user
    env = _build_env(HOME=str(home), PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run([*user, sys.executable, "-c", PROBE, str(home), str(site)], env=env, cwd=str(home),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == []
    assert not [p for p in home.rglob("*") if p.suffix in (".nbi", ".nbc")]  # nothing saved in the user's cache


def test_the_build_requires_every_runtime_dependency():
    """setup.py runs the warm-up (imports gtsamples, writes and reads an artifact) in the
    build environment: [build-system] requires what [project] dependencies list."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert set(conf["project"]["dependencies"]) <= set(conf["build-system"]["requires"])
