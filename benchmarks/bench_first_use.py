"""First use: a read in a fresh process, cold and warm, beside pyarrow's, in one run.

    python benchmarks/bench_first_use.py [--series 20] [--rows-per-series 1000] [--rounds 3]

Writes a synthetic artifact (``--series`` x ``--rows-per-series`` rows, 20,000 by
default) and the same rows as Parquet (zstd), then times fresh processes (wall clock,
interpreter start to exit, as a user's command sees it), interleaved round by round:

* ``cold``: a copy of the package that nothing has compiled for (no package cache, an
  empty user cache): what a read costs when nothing warmed the install;
* ``fresh install``: a copy of the package on which ``gtsamples warmup`` ran once (what
  ``make setup`` and the Docker images do at install time), then made read-only, with an
  empty user cache: the first read in a fresh environment;
* ``warm``: the same install, after a first read (nothing left to compile);
* ``import``: ``import gtsamples`` alone;
* ``pyarrow``: ``pyarrow.parquet.read_table`` of the same rows in a fresh process.

Each gtsamples process reads the whole artifact (``open_artifact(...).read()``) and
reports how many kernel specialisations it compiled (``gtsamples.jit.compiled()``).
``--cold-rounds`` (default 1) limits the cold runs, about 25 s each.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "gtsamples"

READ = """
import time; t0 = time.perf_counter()
import gtsamples as gs
t1 = time.perf_counter()
t = gs.open_artifact({gen!r}).read()
t2 = time.perf_counter()
from gtsamples import jit
import json; print(json.dumps({{"import_s": t1 - t0, "read_s": t2 - t1, "rows": t.num_rows,
                                 "compiled": len(jit.compiled()), "file": gs.__file__}}))
"""
IMPORT = """
import time; t0 = time.perf_counter()
import gtsamples
import json; print(json.dumps({"import_s": time.perf_counter() - t0}))
"""
PYARROW = """
import time; t0 = time.perf_counter()
import pyarrow.parquet as pq
t = pq.read_table({path!r})
import json; print(json.dumps({{"read_s": time.perf_counter() - t0, "rows": t.num_rows}}))
"""


def _env(site: Path | None, cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env["GTSAMPLES_CACHE_DIR"] = str(cache)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if site is not None:
        env["PYTHONPATH"] = str(site)
    return env


def _timed(code: str, env: dict) -> dict:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    if r.returncode:
        raise RuntimeError(r.stderr[-3000:])
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["wall_s"] = wall
    return out


def _install(top: Path, name: str) -> Path:
    site = top / name
    shutil.copytree(PACKAGE, site / "gtsamples", ignore=shutil.ignore_patterns("__pycache__", "_jitcache"))
    return site


def _freeze(site: Path) -> None:
    for p in [site, *site.rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)


def _thaw(site: Path) -> None:
    for p in [site, *site.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--series", type=int, default=20)
    ap.add_argument("--rows-per-series", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cold-rounds", type=int, default=1)
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args(argv)

    import pyarrow.parquet as pq

    import gtsamples as gs
    from gtsamples.demo import FIELDS, synthetic_metrics

    top = Path(tempfile.mkdtemp(prefix="gts-first-use-"))
    try:
        table = synthetic_metrics(args.series, args.rows_per_series)
        entry = gs.write_artifact(table, str(top / "store"), region_id=4398046511104,
                                  source_file_id=str(uuid.uuid4()), timestamp_column_id=0,
                                  field_column_ids=list(range(1, len(FIELDS) + 1)))
        gen = str(top / "store" / Path(entry.objects[0].path).parent)
        parquet = str(top / "rows.parquet")
        pq.write_table(table, parquet, compression="zstd")

        installed = _install(top, "installed")  # the install-time step, then read-only
        t0 = time.perf_counter()
        w = subprocess.run([sys.executable, "-m", "gtsamples", "warmup"], env=_env(installed, top / "warmup-cache"),
                           capture_output=True, text=True, timeout=1800)
        if w.returncode:
            raise RuntimeError(w.stderr[-3000:])
        warmup_s = time.perf_counter() - t0
        _freeze(installed)

        runs: dict[str, list[dict]] = {k: [] for k in ("cold", "fresh install", "warm", "import", "pyarrow")}
        for r in range(args.rounds):
            if r < args.cold_rounds:
                bare = _install(top, f"bare-{r}")
                runs["cold"].append(_timed(READ.format(gen=gen), _env(bare, top / f"cold-cache-{r}")))
                assert runs["cold"][-1]["file"].startswith(str(bare))
            fresh_cache = top / f"fresh-cache-{r}"
            runs["fresh install"].append(_timed(READ.format(gen=gen), _env(installed, fresh_cache)))
            assert runs["fresh install"][-1]["file"].startswith(str(installed))
            runs["pyarrow"].append(_timed(PYARROW.format(path=parquet), _env(None, fresh_cache)))
            runs["warm"].append(_timed(READ.format(gen=gen), _env(installed, fresh_cache)))
            runs["import"].append(_timed(IMPORT, _env(installed, fresh_cache)))

        base = statistics.median(x["wall_s"] for x in runs["pyarrow"])
        print(f"first use: {table.num_rows:,} rows ({args.series} series), {args.rounds} rounds, "
              f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}; "
              f"install-time warm-up (gtsamples warmup): {warmup_s:.1f} s")
        print(f"{'fresh process':<16}{'wall (median)':>15}{'min':>9}{'max':>9}{'in-process':>12}{'compiled':>10}"
              f"{'x pyarrow':>11}")
        summary = {}
        for name, xs in runs.items():
            if not xs:
                continue
            walls = [x["wall_s"] for x in xs]
            inner = statistics.median(x.get("read_s", x.get("import_s", 0.0)) for x in xs)
            comp = max((x.get("compiled", 0) for x in xs), default=0)
            med = statistics.median(walls)
            summary[name] = {"wall_median_s": med, "wall_min_s": min(walls), "wall_max_s": max(walls),
                             "in_process_s": inner, "compiled": comp, "x_pyarrow": med / base, "n": len(xs)}
            print(f"{name:<16}{med:>14.2f}s{min(walls):>8.2f}s{max(walls):>8.2f}s{inner:>11.3f}s{comp:>10}"
                  f"{med / base:>10.1f}x")
        print("(in-process: the read alone, or the import alone; compiled: kernel specialisations the "
              "process compiled)")
        if args.json:
            Path(args.json).write_text(json.dumps({"rows": table.num_rows, "warmup_s": warmup_s,
                                                   "summary": summary, "runs": runs}, indent=1))
    finally:
        for p in top.iterdir():
            if p.is_dir() and p.name != "store":
                _thaw(p)
        shutil.rmtree(top, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
