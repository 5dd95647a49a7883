"""``make kernels-sanitize``: the kernel emulator under AddressSanitizer +
UndefinedBehaviorSanitizer and under ThreadSanitizer (+ UBSan).

    .venv/bin/python -m tests.kernels.emu.sanitize [--builds address,thread] [--jobs N]

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
thread   blocks concurrent, shared memory per block: the same parity and
         corruption cases, and test_emu_races.py.

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
REPORT_MARK = {"address": "ERROR: AddressSanitizer", "thread": "WARNING: ThreadSanitizer"}

PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
CASES = {
    "address": [
        ("parity + corruption + fuzz seeds + driver safety", ["tests/kernels/test_emulated_backend.py",
                                                              "tests/kernels/test_device_fuzz_seeds.py",
                                                              "tests/kernels/test_gpu_safety.py",
                                                              "tests/kernels/test_gpu_read_path.py"]),
        ("corruption catalogue + vectors + golden", ["tests/kernels/test_artifact_device.py", "-k", "not nab"]),
    ],
    "thread": [
        ("parity + corruption + races", ["tests/kernels/test_emulated_backend.py", "tests/kernels/test_emu_races.py"]),
    ],
}  # fmt: skip
TITLE = {"address": "AddressSanitizer + UBSan", "thread": "ThreadSanitizer + UBSan"}


@dataclass
class Run:
    build: str
    label: str
    cmd: list[str]
    canary: bool = False
    log_dir: Path = field(default_factory=Path)
    rc: int | None = None
    seconds: float = 0.0
    output: str = ""

    def reports(self) -> tuple[int, int]:
        """(sanitizer runtime reports, emulator faults)."""
        runtime = sum(p.read_text(errors="replace").count(REPORT_MARK[self.build])
                      for p in self.log_dir.glob("san.*"))  # fmt: skip
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


def child_env(build: str, log_dir: Path, canary: bool = False) -> dict[str, str]:
    from tests.kernels import emu_device as emu

    env = dict(os.environ)
    env["LD_PRELOAD"] = emu.runtime_library(build)
    env["GTS_EMU_SANITIZER"] = build
    env["GTS_EMU_FULL"] = "1"
    env["GTS_EMU_FAULT_LOG"] = str(log_dir / "faults.log")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
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


def execute(run: Run, setarch: list[str]) -> Run:
    env = child_env(run.build, run.log_dir, run.canary)
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

    with cf.ThreadPoolExecutor(len(builds)) as pool:
        for b, path in zip(builds, pool.map(emu.build_library, builds)):
            print(f"{b}: {path}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--builds", default="address,thread")
    ap.add_argument("--jobs", type=int, default=max(2, min(4, os.cpu_count() or 2)))
    ap.add_argument("--canary", choices=sorted(REPORT_MARK), help=argparse.SUPPRESS)  # (in a child)
    args = ap.parse_args(argv)
    if args.canary:
        return 1 if canary_main(args.canary) else 0

    t0 = time.monotonic()
    builds = [b for b in args.builds.split(",") if b]
    build_libraries(builds)
    print(f"built in {time.monotonic() - t0:.0f} s")
    setarch = _setarch()
    work = Path(tempfile.mkdtemp(prefix="gtsamples-sanitize-"))
    runs: list[Run] = []
    for b in builds:
        for label, tests in CASES[b]:
            runs.append(Run(b, label, PYTEST + tests))
        runs.append(Run(b, "canary: fault tests", PYTEST + ["tests/kernels/test_emu_faults.py"], canary=True))
        runs.append(Run(b, "canary: sanitizer reports", [sys.executable, "-m", "tests.kernels.emu.sanitize",
                                                          "--canary", b], canary=True))  # fmt: skip
    for i, r in enumerate(runs):
        r.log_dir = work / f"{i}-{r.build}"
        r.log_dir.mkdir()
    with cf.ThreadPoolExecutor(args.jobs) as pool:  # the long case runs first, then the canaries
        runs.sort(key=lambda r: r.canary)
        done = list(pool.map(lambda r: execute(r, setarch), runs))

    failed = False
    for b in builds:
        print(f"\n== {b} build ({TITLE[b]})")
        runtime = emulator = 0
        for r in (r for r in done if r.build == b):
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
    print(f"\nkernels-sanitize: {'FAILED' if failed else 'passed'} in {time.monotonic() - t0:.0f} s (logs: {work})")
    if not failed:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
