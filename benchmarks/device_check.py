"""The Python half of benchmarks/device_check.sh (see its header for the steps).

  install  --site DIR [--device-python X.Y] WHEEL...   pip-install the staged wheels, check imports
  imports  --site DIR                                  (install's check, in a fresh interpreter)
  versions FILE                                        GPU, driver, CUDA runtime, CuPy, libnvcomp -> FILE
  collect  --opts=... --paths P... --memcheck-paths P... --memcheck-k EXPR
                                                       what the tests step would run (dry run)
  refused  FILE                                        exit 0 if compute-sanitizer refused the device
  summary  --out-dir DIR --steps FILE --memcheck FILE --commit C --mode M
                                                       summary.json + tables, never a crash

Only the standard library at import time: ``summary`` must work whatever else
failed (missing or truncated files give nulls).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SUMMARY_KEYS = (
    "device", "driver", "cuda_runtime", "cupy", "nvcomp", "commit",
    "tests_passed", "tests_failed", "tests_skipped", "memcheck_errors",
    "decoded_gbps_hbm", "decoded_gbps_from_files", "copy_gbps", "cpu_speedup", "host_share",
)  # fmt: skip

#: The records the summary reads from bench_gpu.py's JSON lines.
BENCH_FIELDS = 4

#: The platforms of ../shared/tools/stage-device-wheels.sh (the GPU machine's).
DEVICE_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
                    "manylinux_2_17_x86_64", "manylinux2014_x86_64")  # fmt: skip

#: compute-sanitizer's words when it cannot instrument the device (seen on gVisor machines).
SANITIZER_REFUSED = re.compile(r"Device not supported")


# ----------------------------------------------------------------------------- install


def _minor(v: str) -> str:
    return ".".join(v.split(".")[:2])


def cmd_install(args) -> int:
    """Installs exactly the given wheels into ``--site`` and checks that a fresh
    interpreter with the device run's PYTHONPATH imports zstandard and loads
    libnvcomp from there.  When this interpreter is not the GPU machine's
    (``--device-python``; dry run only), pip installs for that one instead
    (its tag check is the one the GPU machine's pip makes) and the check is on
    the installed files: their extension modules cannot import here."""
    here = _minor(platform.python_version())
    cross = args.device_python and _minor(args.device_python) != here
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index", "--no-deps",
           "--no-compile", "--no-cache-dir", "--target", args.site]  # fmt: skip
    if cross:
        cmd += ["--python-version", args.device_python, "--implementation", "cp", "--only-binary=:all:"]
        for p in DEVICE_PLATFORMS:
            cmd += ["--platform", p]
    cmd += args.wheels
    print("$", " ".join(cmd), flush=True)
    if subprocess.run(cmd).returncode != 0:
        print("wheel install failed")
        return 1
    if cross:
        return _check_installed_files(Path(args.site), args.device_python)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([args.site, str(ROOT / "src"), str(ROOT)]))
    return subprocess.run([sys.executable, __file__, "imports", "--site", args.site], env=env).returncode


def cmd_imports(args) -> int:
    site = Path(args.site).resolve()
    bad = 0

    def under_site(what: str, path: str | None) -> None:
        nonlocal bad
        inside = path is not None and Path(path).resolve().is_relative_to(site)
        print(f"{what:<11} {path}" + ("" if inside else f"   NOT FROM {site}"))
        bad += not inside

    try:
        import zstandard

        under_site("zstandard", zstandard.__file__)
        print(f"{'':<11} zstandard {zstandard.__version__}, libzstd {zstandard.ZSTD_VERSION}")
    except Exception as e:  # noqa: BLE001
        print("zstandard: import FAILED", repr(e))
        bad += 1
    try:
        from gtsamples.decode.gpu import nvcomp

        lib = nvcomp.load_nvcomp()
        under_site("libnvcomp", getattr(lib.lib, "_name", None))
        print(f"{'':<11} libnvcomp {_nvcomp_version(lib.version)}, cudart {lib.cudart_version}")
    except Exception as e:  # noqa: BLE001
        print("libnvcomp: load FAILED", repr(e))
        bad += 1
    return 1 if bad else 0


def _check_installed_files(site: Path, device_python: str) -> int:
    import ctypes

    tag = "cpython-" + _minor(device_python).replace(".", "")
    print(f"python here {platform.python_version()}, the GPU machine's {device_python}: checking the files "
          f"installed for it; imports and collection below use this environment's zstandard and libnvcomp")  # fmt: skip
    bad = 0
    ext = sorted(p.name for p in (site / "zstandard").glob(f"*.{tag}-*.so"))
    print("zstandard  ", ext or f"NO {tag} extension module")
    bad += not ext
    so = site / "nvidia" / "libnvcomp" / "lib64" / "libnvcomp.so.6"
    try:
        ctypes.CDLL(str(so))
        print("libnvcomp  ", so, "loads")
    except OSError as e:
        print("libnvcomp  ", so, "does NOT load:", e)
        bad += 1
    return 1 if bad else 0


def _nvcomp_version(v) -> str | None:
    try:
        v = int(v)
    except (TypeError, ValueError):
        return None
    return f"{v // 1000}.{v % 1000 // 100}.{v % 100}"


def _cuda_version(v) -> str | None:
    try:
        v = int(v)
    except (TypeError, ValueError):
        return None
    return f"{v // 1000}.{v % 1000 // 10}"


# ----------------------------------------------------------------------------- versions


def cmd_versions(args) -> int:
    """Everything is caught: a missing GPU or library is a finding, not a failure."""
    v: dict = {"python": platform.python_version()}
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            r = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=10)  # fmt: skip
            first = r.stdout.strip().splitlines()[0] if r.stdout.strip() else ""
            parts = [p.strip() for p in first.split(",")]
            if r.returncode == 0 and len(parts) == 3:
                v["device"], v["driver"], v["gpu_memory"] = parts
            else:
                v["nvidia_smi"] = (r.stdout + r.stderr).strip()[:300]
        except Exception as e:  # noqa: BLE001
            v["nvidia_smi"] = repr(e)
    else:
        v["nvidia_smi"] = "not found"
    try:
        import cupy

        rt = cupy.cuda.runtime
        v["cupy"] = cupy.__version__
        v["cuda_runtime"] = _cuda_version(rt.runtimeGetVersion())
        v["cuda_driver_api"] = _cuda_version(rt.driverGetVersion())
        v["devices"] = rt.getDeviceCount()
        v["nvrtc"] = ".".join(map(str, cupy.cuda.nvrtc.getVersion()))
        if "device" not in v:
            v["device"] = rt.getDeviceProperties(0)["name"].decode()
    except Exception as e:  # noqa: BLE001
        v["cupy_error"] = repr(e)[:300]
    try:
        from gtsamples.decode.gpu import nvcomp

        lib = nvcomp.load_nvcomp()
        v["nvcomp"] = _nvcomp_version(lib.version)
        v["nvcomp_cudart"] = lib.cudart_version
        v["nvcomp_path"] = getattr(lib.lib, "_name", None)
    except Exception as e:  # noqa: BLE001
        v["nvcomp_error"] = repr(e)[:300]
    for mod in ("numba", "numpy", "pyarrow", "zstandard", "pytest", "cudf"):
        try:
            v[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001
            v[mod] = f"not importable ({e.__class__.__name__})"
    for k, x in v.items():
        print(f"{k:<16} {x}")
    Path(args.file).write_text(json.dumps(v, indent=1) + "\n")
    return 0


# ----------------------------------------------------------------------------- collect


def collect_files(paths) -> list[str]:
    """The test files under ``paths`` as pytest finds them (python_files defaults)."""
    out = []
    for p in paths:
        q = ROOT / p
        if q.is_dir():
            found = {f for pat in ("test_*.py", "*_test.py") for f in q.rglob(pat)}
            out += sorted(str(f.relative_to(ROOT)) for f in found)
        else:
            out.append(p)
    return out


def named_twice(files) -> list[str]:
    return sorted({f for f in files if files.count(f) > 1})


class _Items:
    def __init__(self):
        self.ids: list[str] = []

    def pytest_collection_finish(self, session):
        self.ids = [item.nodeid for item in session.items]


def _collect_in_process(opts, paths) -> tuple[int, list[str], str]:
    """(exit code, node ids, output) of one in-process collection."""
    import pytest

    items = _Items()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = pytest.main([*opts, "--collect-only", "-q", *paths], plugins=[items])
    return int(rc), items.ids, buf.getvalue()


def k_terms(expr: str, ids) -> dict[str, int] | None:
    """Selected tests per ``or`` term of a -k made of plain words joined by
    ``and``/``or`` (node-id substrings, close to pytest's keyword match), so a
    renamed test that drops out of one term shows; None for other forms."""
    if re.search(r"\bnot\b|[()]", expr):
        return None
    terms = [t.strip() for t in re.split(r"\bor\b", expr)]
    return {t: sum(all(w in i for w in re.split(r"\s+and\s+", t)) for i in ids) for t in terms}


def cmd_collect(args) -> int:
    """N = what the tests step's exact command collects (its own process);
    then each file alone (one process: the imports are shared, collection is
    per call) and the memcheck selection.  Fails when N is below the per-file
    sum (pytest 8 collects only the file when given a folder and a file in it),
    when a file collects nothing, or when the memcheck -k selects nothing."""
    opts = args.opts.split()
    cmd = [sys.executable, "-m", "pytest", *opts, "--collect-only", *args.paths]
    print("$", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"(\d+) tests? collected", r.stdout)
    n = int(m.group(1)) if m else 0
    if r.returncode != 0 or not m:
        print(r.stdout[-4000:], r.stderr[-2000:])
        print(f"collection FAILED (pytest rc {r.returncode})")
        return 1
    bad = 0
    files = collect_files(args.paths)
    twice = named_twice(files)
    if twice:
        print(f"FAILED: named twice in the test paths (pytest 8 then drops the rest of the folder): {twice}")
        bad += 1
    per_file = []
    for f in dict.fromkeys(files):
        rc, ids, out = _collect_in_process(opts, [f])
        k = len(ids)
        per_file.append((f, k))
        if rc != 0 or k == 0:
            print(out[-3000:])
            print(f"{f}: collected {k} (rc {rc}): FAILED")
            bad += 1
    total = sum(k for _, k in per_file)
    for f, k in per_file:
        print(f"  {f:<40} {k:>5}")
    print(f"gpu tests collected: {n}")
    print(f"file by file: {' + '.join(str(k) for _, k in per_file)} = {total}")
    if n < total:
        print(f"FAILED: the tests step collects {n} < {total} file by file (a path named twice?)")
        bad += 1
    rc, ids, out = _collect_in_process(opts, ["-k", args.memcheck_k, *args.memcheck_paths])
    terms = k_terms(args.memcheck_k, ids)
    print(f"memcheck -k selects: {len(ids)}")
    for t, k in (terms or {}).items():
        print(f"  {k:>4}  {t}")
    if rc != 0 or not ids or (terms and not all(terms.values())):
        print(out[-3000:])
        print("FAILED: the memcheck -k expression (or one of its terms) selects no test")
        bad += 1
    return 1 if bad else 0


# ----------------------------------------------------------------------------- summary


def _finite(x):
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def read_junit(path) -> dict[str, collections.Counter] | None:
    """{test file: Counter(passed, failed, skipped)}, or None when there is no
    readable report (the tests step did not run or was killed)."""
    try:
        tree = ET.parse(path)
    except (OSError, ET.ParseError):
        return None
    per: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for tc in tree.iter("testcase"):
        tags = {c.tag for c in tc}
        kind = "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"
        per[_junit_file(tc.get("classname") or "")][kind] += 1
    return dict(per)


def _junit_file(classname: str) -> str:
    """tests.gpu.test_x.TestClass -> tests/gpu/test_x.py"""
    parts = classname.split(".")
    for i in range(len(parts) - 1, -1, -1):
        if parts[i].startswith("test_") or parts[i].endswith("_test"):
            return "/".join(parts[: i + 1]) + ".py"
    return classname or "?"


def _text(path) -> str:
    """The file's text, "" when it is missing (its step did not run)."""
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def read_bench(path) -> list[dict]:
    """bench_gpu.py's records; unreadable lines (a killed run) are dropped."""
    out = []
    for line in _text(path).splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def pick_bench(records, query: str) -> dict:
    """The ``query`` record with BENCH_FIELDS fields at the largest row count
    (the last such record if several), or {}."""
    cands = [r for r in records if r.get("fields") == BENCH_FIELDS and r.get("query") == query
             and isinstance(r.get("rows"), (int, float))]  # fmt: skip
    if not cands:
        return {}
    top = max(r["rows"] for r in cands)
    return [r for r in cands if r["rows"] == top][-1]


def read_memcheck(path) -> int | None:
    """compute-sanitizer's error count, or None when it did not run to its
    summary (absent, refused the device, timed out before the end)."""
    if sanitizer_refused(path):
        return None
    m = re.findall(r"ERROR SUMMARY: (\d+) errors?", _text(path))
    return int(m[-1]) if m else None


def sanitizer_refused(path) -> bool:
    return bool(SANITIZER_REFUSED.search(_text(path)))


def cmd_refused(args) -> int:
    return 0 if sanitizer_refused(args.file) else 1


def read_steps(path) -> list[dict]:
    """device_check.sh's step records: name, status, rc, seconds (tab separated)."""
    out = []
    for line in _text(path).splitlines():
        f = line.split("\t")
        if len(f) == 4:
            out.append({"step": f[0], "status": f[1], "rc": f[2], "seconds": f[3]})
    return out


def build_summary(*, junit, bench, versions, memcheck, commit, steps=None, mode="device") -> dict:
    try:
        v = json.loads(_text(versions))
    except ValueError:
        v = {}
    if not isinstance(v, dict):
        v = {}
    per = read_junit(junit)
    tot = sum(per.values(), collections.Counter()) if per is not None else None
    recs = read_bench(bench)
    scan, files = pick_bench(recs, "scan"), pick_bench(recs, "files")
    s = {
        "device": v.get("device"),
        "driver": v.get("driver"),
        "cuda_runtime": v.get("cuda_runtime"),
        "cupy": v.get("cupy"),
        "nvcomp": v.get("nvcomp"),
        "commit": commit or "unknown",
        "tests_passed": tot["passed"] if tot is not None else None,
        "tests_failed": tot["failed"] if tot is not None else None,
        "tests_skipped": tot["skipped"] if tot is not None else None,
        "memcheck_errors": read_memcheck(memcheck),
        "decoded_gbps_hbm": _finite(scan.get("device_GBps")),
        "decoded_gbps_from_files": _finite(files.get("files_GBps")),
        "copy_gbps": _finite(scan.get("copy_GBps")),
        "cpu_speedup": _finite(scan.get("speedup")),
        "host_share": _finite(files.get("host_share")),
        "mode": mode,
        "tests_by_file": {f: dict(c) for f, c in sorted(per.items())} if per is not None else None,
        "steps": read_steps(steps) if steps else [],
    }
    return s


def format_summary(s: dict) -> str:
    out = [f"== device check summary ({s['mode']}, commit {s['commit']})", ""]
    if s["steps"]:
        out.append(f"  {'step':<10} {'status':<38} {'s':>5}")
        out += [f"  {r['step']:<10} {r['status']:<38} {r['seconds']:>5}" for r in s["steps"]]
        out.append("")
    if s["tests_by_file"] is None:
        out.append("  tests: no report (not run, or killed before pytest wrote it)")
    else:
        out.append(f"  {'test file':<40} {'passed':>7} {'failed':>7} {'skipped':>7}")
        for f, c in s["tests_by_file"].items():
            out.append(f"  {f:<40} {c.get('passed', 0):>7} {c.get('failed', 0):>7} {c.get('skipped', 0):>7}")
        out.append(f"  {'total':<40} {s['tests_passed']:>7} {s['tests_failed']:>7} {s['tests_skipped']:>7}")
    out.append("")

    def f(x, fmt="{:.1f}"):
        return "-" if x is None else fmt.format(x)

    out.append(f"  device {s['device'] or '-'}  driver {s['driver'] or '-'}  CUDA runtime {s['cuda_runtime'] or '-'}"
               f"  CuPy {s['cupy'] or '-'}  nvCOMP {s['nvcomp'] or '-'}")  # fmt: skip
    out.append(f"  decoded GB/s: HBM {f(s['decoded_gbps_hbm'])}  from files {f(s['decoded_gbps_from_files'])}"
               f"  (copy {f(s['copy_gbps'])})  CPU speedup {f(s['cpu_speedup'])}"
               f"  host share {f(s['host_share'], '{:.2f}')}")  # fmt: skip
    out.append(f"  memcheck errors: {f(s['memcheck_errors'], '{}')}")
    return "\n".join(out)


def cmd_summary(args) -> int:
    d = Path(args.out_dir)
    s = build_summary(junit=d / "gpu-tests.xml", bench=d / "bench.jsonl", versions=d / "versions.json",
                      memcheck=args.memcheck, commit=args.commit, steps=args.steps, mode=args.mode)  # fmt: skip
    (d / "summary.json").write_text(json.dumps(s, indent=1) + "\n")
    print(format_summary(s))
    print(f"\n  -> {d / 'summary.json'}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("install")
    p.add_argument("--site", required=True)
    p.add_argument("--device-python", help="the GPU machine's X.Y, when this one differs (dry run)")
    p.add_argument("wheels", nargs="+")
    p = sub.add_parser("imports")
    p.add_argument("--site", required=True)
    p = sub.add_parser("versions")
    p.add_argument("file")
    p = sub.add_parser("collect")
    p.add_argument("--opts", default="")
    p.add_argument("--paths", nargs="+", required=True)
    p.add_argument("--memcheck-paths", nargs="+", required=True)
    p.add_argument("--memcheck-k", required=True)
    p = sub.add_parser("summary")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--steps")
    p.add_argument("--memcheck", default="")
    p.add_argument("--commit", default="unknown")
    p.add_argument("--mode", default="device")
    p = sub.add_parser("refused", help="exit 0 when FILE shows compute-sanitizer refusing the device")
    p.add_argument("file")
    args = ap.parse_args(argv)
    return {"install": cmd_install, "imports": cmd_imports, "versions": cmd_versions, "collect": cmd_collect,
            "summary": cmd_summary, "refused": cmd_refused}[args.cmd](args)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
