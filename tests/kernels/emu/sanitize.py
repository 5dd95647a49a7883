"""``make kernels-sanitize``: the kernel emulator under AddressSanitizer +
UndefinedBehaviorSanitizer, under ThreadSanitizer (+ UBSan) and in its
initcheck build (shadow of written memory + UBSan), then the planted faults.

    .venv/bin/python -m tests.kernels.emu.sanitize [--builds address,thread,initcheck] [--jobs N]
                                                    [--plants all|none|NAME,...]

Every run tests the kernels and the package of the tree this file is in:
``GTSAMPLES_KERNEL_DIR`` is set to its ``kernels/`` (unless already set) and
its ``src/`` leads ``PYTHONPATH``, whatever editable install the interpreter has.

A sanitizer runtime must be the first library of its process, so it cannot be
dlopen()ed into a running interpreter: every run here is its own Python
process with the runtime in LD_PRELOAD (``detect_leaks=0``: CPython's own
allocations are no finding) and its reports written to a log
(``log_path``).  Each runs under ``setarch -R`` (no address randomization)
when that works: GCC 12's TSan, and its ASan on some kernels, cannot map
their shadow memory beside the randomized mappings of kernels with a high
vm.mmap_rnd_bits.

address  every kernel over the parity and corruption cases
         (tests/kernels/test_emulated_backend.py; test_gpu_safety.py and
         test_gpu_read_path.py: the same through the real nvCOMP binding
         code and the fetch path), the corruption catalogue's
         decode-stage cases, vectors and golden files
         (test_artifact_device.py) and the whole fuzz seed corpus
         (test_device_fuzz_seeds.py), GTS_EMU_FULL=1;
thread   blocks concurrent, shared memory per block: the same corpus
         (parity, corruption, driver safety, catalogue, vectors, golden files,
         every fuzz seed) and test_emu_races.py;
initcheck the same corpus with every load checked against a shadow of
         written bytes: shared memory unwritten at each block's start, `empty`
         global buffers unwritten until a kernel or the host writes them, and
         each decode chunk's output rows owned by its block or warp
         (tests/kernels/emu/emu_initcheck.h).

Plants (tests/kernels/plants/*.patch): each patch plants one GPU fault in a
copy of kernels/; its run (the build and tests its header names) must report
it.  A sanitizer that stops catching a class of fault fails here.

Each build prints ``sanitizer reports: N`` -- ASan / TSan reports in its logs
plus emulator faults (UBSan findings, misaligned accesses, barrier, warp and
deadlock faults, guard-zone and output-contract violations; the device logs
each to GTS_EMU_FAULT_LOG) -- and fails when N > 0 or a case fails.  Canaries
first prove that each build reports what it must: test_emu_faults.py passes
under it, and its runtime reports the deliberate faults of
emu_test_kernels.cuh (ASan: reads past an allocation, after its free and past
a shared array; TSan: a missing __syncthreads, two blocks writing one word)
and nothing for their controls.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
REPORT_MARK = {"address": "ERROR: AddressSanitizer", "thread": "WARNING: ThreadSanitizer", "initcheck": None}
PLANTS = ROOT / "tests" / "kernels" / "plants"

PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
CORPUS = [
    ("parity + corruption + driver safety", ["tests/kernels/test_emulated_backend.py",
                                             "tests/kernels/test_gpu_safety.py",
                                             "tests/kernels/test_gpu_read_path.py"]),
    ("fuzz seed corpus", ["tests/kernels/test_device_fuzz_seeds.py"]),
    ("corruption catalogue + vectors + golden", ["tests/kernels/test_artifact_device.py", "-k", "not nab"]),
]  # fmt: skip
CASES = {
    "address": CORPUS,
    "thread": CORPUS + [("races", ["tests/kernels/test_emu_races.py"])],
    "initcheck": CORPUS,
}
TITLE = {"address": "AddressSanitizer + UBSan", "thread": "ThreadSanitizer + UBSan",
         "initcheck": "initcheck (shadow memory) + UBSan"}  # fmt: skip


@dataclass
class Run:
    build: str
    label: str
    cmd: list[str]
    canary: bool = False
    plant: Path | None = None  # a planted fault: the run must report it
    log_dir: Path = field(default_factory=Path)
    rc: int | None = None
    seconds: float = 0.0
    output: str = ""

    def reports(self) -> tuple[int, int]:
        """(sanitizer runtime reports, emulator faults)."""
        mark = REPORT_MARK[self.build]
        runtime = sum(p.read_text(errors="replace").count(mark) for p in self.log_dir.glob("san.*")) if mark else 0
        faults = self.log_dir / "faults.log"
        emulator = len(faults.read_text().splitlines()) if faults.exists() else 0
        return runtime, emulator


def _setarch() -> list[str]:
    """``setarch <machine> -R`` (no ASLR) when it works here."""
    exe = shutil.which("setarch")
    if exe is None:
        return []
    cmd = [exe, platform.machine(), "-R"]
    return cmd if subprocess.run([*cmd, "true"], capture_output=True).returncode == 0 else []


def child_env(build: str, log_dir: Path, canary: bool = False, kernel_dir: Path | None = None) -> dict[str, str]:
    from tests.kernels import emu_device as emu

    env = dict(os.environ)
    env["GTS_EMU_SANITIZER"] = build
    env["GTS_EMU_FULL"] = "1"
    env["GTS_EMU_FAULT_LOG"] = str(log_dir / "faults.log")
    # this tree's package and kernels, not those of whatever checkout is installed
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if kernel_dir is not None:
        env["GTSAMPLES_KERNEL_DIR"] = str(kernel_dir)
    else:
        env.setdefault("GTSAMPLES_KERNEL_DIR", str(ROOT / "kernels"))
    if build == "initcheck":  # no sanitizer runtime: the emulator's own hooks
        return env
    env["LD_PRELOAD"] = emu.runtime_library(build)
    log = f"log_path={log_dir / 'san'}"
    if build == "address":
        env["ASAN_OPTIONS"] = f"{log}:detect_leaks=0:halt_on_error=0:detect_stack_use_after_return=0"
        if canary:  # several canaries fault at one source line: report each
            env["ASAN_OPTIONS"] += ":suppress_equal_pcs=0"
    else:
        # reports from CPython, numpy or pyarrow (not instrumented) are not ours
        # (exitcode=0: reports are counted from the log, the exit status is the tests')
        env["TSAN_OPTIONS"] = f"{log}:halt_on_error=0:exitcode=0:ignore_noninstrumented_modules=1"
    return env


def apply_plant(patch: Path, into: Path) -> Path:
    """A copy of this tree's kernels/ in ``into`` with ``patch`` applied."""
    shutil.copytree(ROOT / "kernels", into)
    r = subprocess.run(["patch", "-p1", "-s", "-f", "-d", str(into), "-i", str(patch)], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"plant {patch.name} does not apply: {r.stdout}{r.stderr}")
    return into


def plant_header(patch: Path) -> dict[str, str]:
    """The ``Key: value`` lines before the diff (Plant, Build, Tests)."""
    head = {}
    for line in patch.read_text().splitlines():
        if line.startswith("--- "):
            break
        if ": " in line:
            k, v = line.split(": ", 1)
            head[k.strip().lower()] = v.strip()
    return head


def plant_runs(select: str) -> list[Run]:
    if select == "none":
        return []
    names = None if select == "all" else set(select.split(","))
    runs = []
    for patch in sorted(PLANTS.glob("*.patch")):
        if names is not None and patch.stem not in names:
            continue
        h = plant_header(patch)
        tests = h["tests"].split(" -k ", 1)
        cmd = PYTEST + ["-x", *tests[0].split()] + (["-k", tests[1]] if len(tests) > 1 else [])
        runs.append(Run(h["build"], f"plant {patch.stem}", cmd, plant=patch))
    return runs


def execute(run: Run, setarch: list[str]) -> Run:
    kdir = apply_plant(run.plant, run.log_dir / "kernels") if run.plant else None
    env = child_env(run.build, run.log_dir, run.canary, kdir)
    cmd = setarch + run.cmd
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    run.rc, run.seconds, run.output = p.returncode, time.monotonic() - t0, p.stdout + p.stderr
    return run


# ----------------------------------------------------------------------------- canaries (run in a child)


def canary_main(build: str) -> int:
    """In a sanitized child: each deliberate fault adds a runtime report, each
    control adds none.  Prints one line per check; returns the failures."""
    import gc

    import numpy as np

    from tests.kernels import emu_device as emu

    u = np.uint32
    dev = emu.EmuDevice()
    failures = 0

    def check(label, expect_report, name, grid, block, *args):
        nonlocal failures
        before = emu.sanitizer_log_reports()
        try:
            emu.launch(name, grid, block, args)
            outcome = "ran"
        except emu.EmuFault as e:
            outcome = f"fault: {str(e)[:110]}"
        added = emu.sanitizer_log_reports() - before
        ok = (added > 0) == expect_report
        failures += not ok
        expected = "some" if expect_report else "none"
        print(f"  {'ok  ' if ok else 'FAIL'} {label}: {added} report(s) (expected {expected}); {outcome}")

    out = dev.zeros(256, np.uint32)
    if build == "address":
        p = dev.upload(np.arange(10, dtype=np.uint32))
        check("read past a device allocation", True, "emu_test_read_past", (1,), (32,), p, u(10), out)
        check("read at the allocation's end (control)", False, "emu_test_read_past", (1,), (32,), p, u(9), out)
        gone = dev.upload(np.arange(64, dtype=np.uint32))
        addr = np.uint64(gone.ctypes.data)
        del gone
        gc.collect()
        check("read after the allocation's free", True, "emu_test_read_past", (1,), (32,), addr, u(0), out)
        check("shared array overflow", True, "emu_test_shared_overflow", (1,), (65,), out)
        check("shared array in bounds (control)", False, "emu_test_shared_overflow", (1,), (64,), out)
    else:
        check("missing __syncthreads", True, "emu_test_race", (4,), (64,), dev.zeros(8, np.uint32), u(0))
        check("blocks writing one word", True, "emu_test_race", (4,), (64,), dev.zeros(8, np.uint32), u(1))
        check("with the barrier (control)", False, "emu_test_race", (4,), (64,), dev.zeros(8, np.uint32), u(2))
    return failures


# ----------------------------------------------------------------------------- driver


def build_libraries(builds: list[str]) -> None:
    from tests.kernels import emu_device as emu

    if not builds:
        return
    with cf.ThreadPoolExecutor(len(builds)) as pool:
        for b, path in zip(builds, pool.map(emu.build_library, builds)):
            print(f"{b}: {path}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--builds", default="address,thread,initcheck")
    ap.add_argument("--plants", default="all", help="all, none or plant names (tests/kernels/plants/NAME.patch)")
    ap.add_argument("--jobs", type=int, default=max(2, min(4, os.cpu_count() or 2)))
    ap.add_argument("--canary", choices=sorted(REPORT_MARK), help=argparse.SUPPRESS)  # (in a child)
    args = ap.parse_args(argv)
    if args.canary:
        return 1 if canary_main(args.canary) else 0

    t0 = time.monotonic()
    builds = [b for b in args.builds.split(",") if b]
    print(f"kernels: {os.environ.get('GTSAMPLES_KERNEL_DIR') or ROOT / 'kernels'}; package: {ROOT / 'src'}")
    os.environ.setdefault("GTSAMPLES_KERNEL_DIR", str(ROOT / "kernels"))
    build_libraries(builds)
    print(f"built in {time.monotonic() - t0:.0f} s")
    setarch = _setarch()
    work = Path(tempfile.mkdtemp(prefix="gtsamples-sanitize-"))
    runs: list[Run] = []
    for b in builds:
        for label, tests in CASES[b]:
            runs.append(Run(b, label, PYTEST + tests))
        faults = ["tests/kernels/test_emu_faults.py"] + (["tests/kernels/test_emu_initcheck.py"] if b == "initcheck" else [])
        runs.append(Run(b, "canary: fault tests", PYTEST + faults, canary=True))
        if REPORT_MARK[b]:
            runs.append(Run(b, "canary: sanitizer reports", [sys.executable, "-m", "tests.kernels.emu.sanitize",
                                                              "--canary", b], canary=True))  # fmt: skip
    plants = plant_runs(args.plants)
    runs += plants
    for i, r in enumerate(runs):
        r.log_dir = work / f"{i}-{r.build}"
        r.log_dir.mkdir()
    with cf.ThreadPoolExecutor(args.jobs) as pool:  # the long cases first, then the canaries, then the plants
        runs.sort(key=lambda r: (r.plant is not None, r.canary))
        done = list(pool.map(lambda r: execute(r, setarch), runs))

    failed = False
    for b in builds:
        print(f"\n== {b} build ({TITLE[b]})")
        runtime = emulator = 0
        for r in (r for r in done if r.build == b and r.plant is None):
            lines = r.output.rstrip().splitlines() or ["(no output)"]
            rt, em = r.reports()
            ok = r.rc == 0
            checks = [line for line in lines if line.startswith("  ")] if r.label.endswith("reports") else []
            print(f"{'ok  ' if ok else 'FAIL'} {r.label} [{r.seconds:.0f} s]: " + (
                f"{len(checks)} checks" if checks else lines[-1]))
            if checks:
                print("\n".join(checks))
            if not r.canary:
                runtime, emulator = runtime + rt, emulator + em
                if rt or em:
                    print(f"     {rt} runtime reports, {em} emulator faults; logs in {r.log_dir}")
            if not ok:
                failed = True
                if not checks:
                    print("\n".join("     | " + line for line in lines[-40:]))
        n = runtime + emulator
        print(f"{b}: sanitizer reports: {n} ({runtime} {TITLE[b].split()[0]}, {emulator} emulator faults)")
        failed |= n > 0
    if plants:
        print("\n== plants (each must be reported)")
        caught = 0
        for r in plants:
            rt, em = r.reports()
            ok = rt + em > 0
            caught += ok
            first = ""
            faults = r.log_dir / "faults.log"
            if em and faults.exists():
                first = faults.read_text().splitlines()[0][:150]
            elif rt:
                first = f"{rt} {TITLE[r.build].split()[0]} report(s)"
            print(f"{'ok  ' if ok else 'FAIL'} {r.plant.stem} [{r.build}, {r.seconds:.0f} s]: "
                  f"{rt + em} report(s){'; ' + first if first else ''}")  # fmt: skip
            if not ok:
                failed = True
                print("\n".join("     | " + line for line in r.output.rstrip().splitlines()[-15:]))
        print(f"plants caught: {caught} of {len(plants)}")
    print(f"\nkernels-sanitize: {'FAILED' if failed else 'passed'} in {time.monotonic() - t0:.0f} s (logs: {work})")
    if not failed:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
