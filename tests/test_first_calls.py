"""A new user's first calls, in fresh processes: threads, forked/forkserver/spawned children,
Dask (threads and a LocalCluster of processes), region builds from user threads, each
numba threading layer available here.

Each test runs a scenario of tests/concurrency/scenarios.py in a fresh Python process and
checks its exit (a crash is a signal, a hang the timeout) and its rows (digests recorded by
``prepare``).  One numba cache directory is made for the module: the first two scenarios
start on it cold (empty, run side by side: their first calls race numba loading and
compiling kernels), every later one finds it warm.  ``make stress`` runs the same scenarios
hundreds of times (tests/concurrency/stress.py).

On the code before tests/test_runtime.py's fixes these failed: the barrier threads died
(SIGSEGV / SIGABRT: libzstd loaded by several threads at once, the losers' decompression
contexts freed under running kernels), the fork child hung (it waited on the parent's
thread pool), and the ``workqueue`` layer aborted ("Concurrent access").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 300


def _env(cache: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    # both kernel caches in ``cache``: numba's own and gtsamples.jit's (the package's one too,
    # which ``make setup`` warms: the scenario points it at ``cache/package``)
    env.update(NUMBA_CACHE_DIR=str(cache), GTSAMPLES_CACHE_DIR=str(cache / "user"),
               GTS_SCENARIO_JITCACHE=str(cache / "package"), PYTHONPATH=str(ROOT), **extra)
    return env


def _start(scenario: str, data: Path, cache: Path, *args: str, **env) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.concurrency.scenarios", scenario, str(data), *args],
                            cwd=ROOT, env=_env(cache, **env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _wait(p: subprocess.Popen, timeout: float = TIMEOUT) -> tuple[int | None, str, str]:
    """(exit code, or None on a hang; stdout; stderr)."""
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return None, out, err
    return p.returncode, out, err


def _check(done: tuple[int | None, str, str], timeout: float = TIMEOUT) -> dict:
    rc, out, err = done
    assert rc is not None, f"hang: no exit in {timeout} s\n{err[-3000:]}"
    assert rc >= 0, f"killed by signal {-rc}\n{err[-3000:]}"
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    assert lines, f"exit {rc}, no result\n{err[-3000:]}"
    res = json.loads(lines[-1])
    assert res["ok"] and rc == 0, f"{res['wrong']}\n{err[-3000:]}"
    return res


def _run(scenario: str, data: Path, cache: Path, *args: str, **env) -> dict:
    return _check(_wait(_start(scenario, data, cache, *args, **env)))


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """The scenarios' artifact, regions and expected digests (prepared in this process)."""
    from tests.concurrency import scenarios

    d = tmp_path_factory.mktemp("first_calls")
    scenarios.prepare(d, n_series=40, rows=10_000)
    return d


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("numba_cache")


@pytest.fixture(scope="module")
def cold(data, cache) -> tuple:
    """The cold-cache process: 4 barrier threads making their first calls, and a fifth
    computing the README's Dask frame on Dask's threads scheduler (its default without a
    ``distributed`` client), all on the empty cache (one compile serves both)."""
    assert not any(cache.iterdir())
    return _wait(_start("threads", data, cache, "--threads", "4", "--with-dask"))


def test_barrier_threads_and_dask_threads_first_calls_cold_cache(cold):
    """Each thread's first read, one-series read, validate, region dedup read and streamed
    read (in a different order per thread), beside a Dask compute, on an empty numba cache."""
    _check(cold)


def test_barrier_threads_first_calls_warm_cache(cold, data, cache):
    _run("threads", data, cache, "--threads", "8")


def test_fork_forkserver_spawn_children_after_a_parent_read(cold, data, cache):
    """Every stage on numba's threads and the decode pool (thresholds lowered) in the parent,
    which then starts a child of each method: each reads right, none hangs."""
    res = _run("children", data, cache, "--low-thresholds", "--child-timeout", "60")
    assert set(res["seconds"]) == {"fork", "forkserver", "spawn"}


def test_fork_child_of_a_parent_that_never_read(cold, data, cache):
    _run("children", data, cache, "--methods", "fork", "--no-parent-read", "--child-timeout", "60")


def test_dask_local_cluster_two_processes_two_threads(cold, data, cache):
    pytest.importorskip("distributed")
    _run("dask-cluster", data, cache)


def test_region_build_and_reads_from_user_threads(cold, data, cache):
    """A region build (2 threads) from a user thread beside 3 reading threads (numba's
    default cache here: its writer kernels are warm from this session's own writes)."""
    p = subprocess.run([sys.executable, "-m", "tests.concurrency.scenarios", "build", str(data)], cwd=ROOT,
                       env={k: v for k, v in _env(cache).items()
                            if k not in ("NUMBA_CACHE_DIR", "GTSAMPLES_CACHE_DIR", "GTS_SCENARIO_JITCACHE")}, capture_output=True,
                       text=True, timeout=TIMEOUT)
    _check((p.returncode, p.stdout, p.stderr))


def _tbb_loads() -> bool:
    lib = ROOT / ".venv" / "lib"
    env = dict(os.environ, NUMBA_THREADING_LAYER="tbb", LD_LIBRARY_PATH=f"{lib}:{os.environ.get('LD_LIBRARY_PATH', '')}")
    code = ("import numba, numpy as np\n"
            "f = numba.njit(parallel=True)(lambda a: a.sum())\n"
            "f(np.ones(4)); print(numba.threading_layer())")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    return p.returncode == 0 and p.stdout.strip() == "tbb"


@pytest.mark.parametrize("layer", ["workqueue", "omp", "tbb"])
def test_each_threading_layer(layer, cold, data, cache):
    """Barrier threads with every stage on numba's threads, then a fork child, under each
    layer forced through NUMBA_THREADING_LAYER (workqueue: concurrent prange kernels abort
    the process unless serialised; GNU OpenMP: a fork child must use the serial kernels)."""
    env = {"NUMBA_THREADING_LAYER": layer}
    if layer == "tbb":
        if not _tbb_loads():
            pytest.skip("numba's TBB layer does not load here (pip install tbb)")
        env["LD_LIBRARY_PATH"] = f"{ROOT / '.venv' / 'lib'}:{os.environ.get('LD_LIBRARY_PATH', '')}"
    res = _run("threads", data, cache, "--threads", "4", "--low-thresholds", "--fork-child", **env)
    assert res["layer"] == layer and "fork" in res["seconds"]
