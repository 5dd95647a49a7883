"""``make stress``: the scenarios of tests/concurrency/scenarios.py in many fresh processes.

    python -m tests.concurrency.stress [--warm 100] [--cold 100] [--children 20] [--dask 20] [--cluster 20]

* ``--warm N``: N processes of 4 barrier threads (first calls) on a warm numba cache;
* ``--cold N``: N such processes, each on its own empty numba cache (each compiles every
  kernel it needs: ~30 s of CPU each), one of the 5 threads computing the Dask frame;
* ``--children N``: N parents that read then start a fork, a forkserver and a spawn child
  (every stage on numba's threads: thresholds lowered); the children's times are compared;
* ``--dask N``: N processes computing the Dask frame on Dask's threads, cold caches;
* ``--cluster N``: N LocalClusters of 2 worker processes x 2 threads, cold caches.

Prints one line per kind: runs, crashes (signals), hangs (no exit in the timeout), wrong
results (or errors), and times; exits 1 if any run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(scenario: str, data: Path, cache: Path | None, args=(), timeout: float = 600) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    env["PYTHONPATH"] = str(ROOT)
    if cache is not None:  # numba's cache and both of gtsamples.jit's (see tests/test_first_calls.py)
        env.update(NUMBA_CACHE_DIR=str(cache), GTSAMPLES_CACHE_DIR=str(cache / "user"),
                   GTS_SCENARIO_JITCACHE=str(cache / "package"))
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "tests.concurrency.scenarios", scenario, str(data), *args], cwd=ROOT,
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        return {"outcome": "hang", "wall": timeout}
    secs = time.perf_counter() - t0
    if p.returncode < 0:
        return {"outcome": "crash", "signal": -p.returncode, "wall": secs, "err": err[-400:]}
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    res = json.loads(lines[-1]) if lines else {"ok": False, "wrong": [err[-400:]]}
    res.update(outcome="ok" if res["ok"] and p.returncode == 0 else "wrong", wall=secs)
    return res


def report(kind: str, results: list[dict], extra: str = "") -> bool:
    n = len(results)
    count = {o: sum(r["outcome"] == o for r in results) for o in ("crash", "hang", "wrong")}
    secs = [r["wall"] for r in results]
    med = statistics.median(secs) if secs else 0.0
    print(f"{kind}: {n} runs, {count['crash']} crashes, {count['hang']} hangs, {count['wrong']} wrong; "
          f"median {med:.1f} s per process{extra}", flush=True)
    for r in results:
        if r["outcome"] != "ok":
            print("   ", {k: v for k, v in r.items() if k in ("outcome", "signal", "wrong", "err")}, flush=True)
    return not any(count.values())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--warm", type=int, default=100)
    ap.add_argument("--cold", type=int, default=100)
    ap.add_argument("--children", type=int, default=20)
    ap.add_argument("--dask", type=int, default=20)
    ap.add_argument("--cluster", type=int, default=20)
    ap.add_argument("--threads", type=int, default=4)
    a = ap.parse_args(argv)
    ok = True
    with tempfile.TemporaryDirectory(prefix="gts-stress-") as tmp:
        tmp = Path(tmp)
        data, warm = tmp / "data", tmp / "warm-cache"
        subprocess.run([sys.executable, "-m", "tests.concurrency.scenarios", "prepare", str(data)], cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True,
                       stdout=subprocess.DEVNULL)
        run("threads", data, warm)  # the read kernels into the warm cache

        def cold_cache(k: int, kind: str) -> Path:
            return tmp / f"cold-{kind}-{k}"

        targs = ["--threads", str(a.threads)]
        if a.warm:
            ok &= report(f"threads x{a.threads}, warm cache", [run("threads", data, warm, targs) for _ in range(a.warm)])
        if a.cold:
            ok &= report(f"threads x{a.threads} + dask, cold cache",
                         [run("threads", data, cold_cache(k, "t"), [*targs, "--with-dask"]) for k in range(a.cold)])
        if a.children:
            res = [run("children", data, warm, ["--low-thresholds"]) for _ in range(a.children)]
            times = {m: [r["seconds"][m] for r in res if "seconds" in r and m in r.get("seconds", {})]
                     for m in ("fork", "forkserver", "spawn")}
            slow = sum(1 for r in res if isinstance(r.get("seconds"), dict) and "fork" in r["seconds"]
                       and r["seconds"]["fork"] > 2 * r["seconds"].get("spawn", float("inf")))
            med = ", ".join(f"{m} {statistics.median(v):.2f} s" for m, v in times.items() if v)
            ok &= report("fork/forkserver/spawn children after a parent read", res,
                         f"; child median: {med}; fork child slower than 2x its spawn sibling: {slow}")
            ok &= slow == 0
        if a.dask:
            ok &= report("dask threads scheduler, cold cache",
                         [run("dask-threads", data, cold_cache(k, "d")) for k in range(a.dask)])
        if a.cluster:
            ok &= report("dask LocalCluster 2 processes x 2 threads, cold cache",
                         [run("dask-cluster", data, cold_cache(k, "c")) for k in range(a.cluster)])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
