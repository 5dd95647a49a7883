"""Run a fuzz campaign over the CPU read path.

    python -m tests.fuzz.run --runs N [--target T] [--jobs J] [--engine atheris|random]
                             [--max-time S] [--chunk C] [--out DIR]

(``make fuzz`` runs ``--runs $FUZZ_RUNS``, default 1,000,000.)

``--runs`` is the total number of executions, split evenly over the selected
targets (``inspect``, ``read``, ``select``, ``navigate``; default all four).  Each target
runs in its own worker process (``--jobs`` at a time), with
``NUMBA_NUM_THREADS=1`` (one core per worker; numba's parallel launch costs
milliseconds per kernel on tiny batches otherwise).

Engines
-------
``atheris`` (default when installed): libFuzzer, coverage-guided through
bytecode instrumentation of every pure-Python function in ``gtsamples``
(numba kernels run natively and are not instrumented), with the
structure-aware custom mutator of :mod:`tests.fuzz.targets`.  The corpus
grows in ``<out>/corpus/<target>`` (seeds from :mod:`tests.fuzz.corpus` in
``<out>/seeds``), crashes land in ``<out>/crashes/<target>/``.

``random``: a deterministic (seeded) loop of the same custom mutator over the
seeds, without coverage feedback -- the fallback when atheris is absent.

Per-input limits (a violation is a finding, the input is saved)
----------------------------------------------------------------
* time: libFuzzer ``-timeout=2`` kills a hung input; the harness also raises
  when an input *finishes* after more than 2 s.
* memory: the Python + numba + pyarrow baseline RSS (~190 MiB after warm-up)
  leaves no room under libFuzzer's absolute ``-rss_limit_mb=256``, and
  ``-malloc_limit_mb`` needs sanitizer malloc hooks that a stock CPython
  build does not have.  So the harness checks an RSS *delta*: after every
  input, ``VmHWM`` (the process high-water mark, reset at the baseline) minus the baseline
  measured after warm-up must stay <= 256 MiB -- any input that ever touched
  256 MiB more than the baseline is caught on the input that did it.  RSS
  misses untouched allocations (a huge ``calloc``), so every 64th input
  also runs under ``tracemalloc`` (Python and numpy buffers) and its traced
  peak must stay <= 256 MiB; ``tests/fuzz/replay.py`` re-runs the whole
  corpus with tracemalloc on every input.  libFuzzer's own
  ``-rss_limit_mb`` is set to baseline + 512 MiB as a backstop.
* an instrumented worker's RSS creeps up ~2 KiB per execution (atheris and
  libFuzzer bookkeeping; the same inputs in an uninstrumented loop stay
  flat), so workers run ``--chunk`` executions (default 40,000) and are
  restarted with the grown corpus, which also re-arms the RSS baseline.

Findings (any exception but a ``SamplesError``, a failed oracle, a broken
limit) are saved once per signature (exception type + innermost gtsamples
frame) as ``<out>/crashes/<target>/crash-<sha1>`` with a ``.txt`` traceback,
listed in ``<out>/findings.jsonl``, and the campaign goes on.

Prints a JSON summary (executions and findings per target) as its last line.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
TARGET_NAMES = ("inspect", "read", "select", "navigate")
TIME_LIMIT_S = 2.0
MEM_LIMIT_MB = 256
TRACEMALLOC_EVERY = 64
MAX_LEN = 1 << 16
#: Executions per worker process.  An atheris-instrumented worker's RSS grows
#: ~2 KiB per execution (atheris/libFuzzer bookkeeping: an uninstrumented loop
#: over the same inputs stays flat), which would trip the RSS-delta limit after
#: ~100k executions; restarting keeps the corpus and resets the baseline.
CHUNK = 40_000


def _maxrss_mb() -> float:
    """This process's RSS high-water mark (``VmHWM``).

    Not ``ru_maxrss``: Linux keeps that across ``execve``, so a worker started
    by a large parent (a long pytest run) would inherit the parent's peak.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:  # pragma: no cover - not Linux
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _reset_hwm() -> None:
    """Reset ``VmHWM`` to the current RSS (Linux ``clear_refs`` 5); no-op elsewhere."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:  # pragma: no cover - not Linux
        pass


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:  # pragma: no cover - not Linux
        return _maxrss_mb()



#: Where this campaign's lines of ``findings.jsonl`` start (the file outlives campaigns).
FINDINGS_FROM_ENV = "GTS_FUZZ_FINDINGS_FROM"


def campaign_findings(out: pathlib.Path, start: int) -> list[dict]:
    """The records of ``<out>/findings.jsonl`` from byte ``start`` on."""
    fj = out / "findings.jsonl"
    if not fj.exists():
        return []
    with open(fj, "rb") as f:
        f.seek(start)
        return [json.loads(ln) for ln in f.read().decode().splitlines() if ln.strip()]

class LimitExceeded(AssertionError):
    pass


def signature(exc: BaseException) -> str:
    """Dedup key of a finding: exception type + the innermost gtsamples (else harness) frame."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    where = "?"
    for fr in reversed(frames):
        if "/gtsamples/" in fr.filename:
            where = f"{fr.filename.split('/src/')[-1]}:{fr.lineno}"
            break
    else:
        if frames:
            where = f"{frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}"
    msg = str(exc).split("\n")[0]
    if isinstance(exc, AssertionError):  # oracle failures: keep the kind of message, not its numbers
        msg = re.sub(r"[0-9]+", "N", msg)[:80]
    else:
        msg = ""
    return f"{type(exc).__name__}@{where}{(': ' + msg) if msg else ''}"


class Checked:
    """Wraps a target with the per-input limits, counts executions, records findings.

    A finding (any exception other than the target's own ``SamplesError``
    handling, or a broken limit) is saved once per :func:`signature` under
    ``crash_dir`` (input + traceback) and appended to ``findings.jsonl``;
    the campaign then goes on (atheris' own crash path cannot write the
    input without sanitizer hooks, and one easy finding must not stop the
    search for the others).
    """

    def __init__(self, fn, stats_path: pathlib.Path | None, trace_every: int = TRACEMALLOC_EVERY,
                 crash_dir: pathlib.Path | None = None, target: str = ""):
        self.fn = fn
        self.stats_path = stats_path
        self.trace_every = trace_every
        self.crash_dir = crash_dir
        self.target = target
        self.execs = 0
        self.outcomes: dict[str, int] = {}
        self.signatures: dict[str, int] = {}
        self.max_seconds = 0.0
        self.max_traced_mb = 0.0
        _reset_hwm()
        self.baseline_mb = _rss_mb()
        self.max_rss_delta_mb = 0.0
        self.t_start = time.time()
        self.known: set[str] = set()
        if crash_dir is not None:  # signatures saved by earlier workers of this campaign
            start = int(os.environ.get(FINDINGS_FROM_ENV, "0"))
            self.known = {rec["signature"] for rec in campaign_findings(crash_dir.parent.parent, start)
                          if rec.get("target") == target}

    def rebase(self):
        _reset_hwm()  # warm-up peaks (numba compiles on a cold cache) are not an input's
        self.baseline_mb = _rss_mb()

    def _finding(self, data: bytes, exc: BaseException) -> None:
        import hashlib
        import traceback

        sig = signature(exc)
        self.outcomes["finding"] = self.outcomes.get("finding", 0) + 1
        first = sig not in self.signatures and sig not in self.known
        self.signatures[sig] = self.signatures.get(sig, 0) + 1
        if first and self.crash_dir is not None:
            name = self.crash_dir / ("crash-" + hashlib.sha1(data).hexdigest())
            name.write_bytes(data)
            name.with_suffix(".txt").write_text(sig + "\n\n" + "".join(traceback.format_exception(exc)))
            with open(self.crash_dir.parent.parent / "findings.jsonl", "a") as f:
                f.write(json.dumps({"target": self.target, "signature": sig, "input": str(name),
                                    "exec": self.execs, "pid": os.getpid()}) + "\n")
            print(f"FINDING {self.target}: {sig} -> {name}", flush=True)
        self.flush()

    def __call__(self, data: bytes):
        import tracemalloc

        self.execs += 1
        if self.execs == 1:  # libFuzzer's own setup (counters, corpus) is done: measure from here
            self.rebase()
        trace = self.trace_every and self.execs % self.trace_every == 0
        if trace:
            tracemalloc.start()
        t0 = time.perf_counter()
        out = None
        try:
            out = self.fn(data)
        except Exception as e:  # noqa: BLE001 - a finding
            self._finding(data, e)
        finally:
            if trace:
                peak = tracemalloc.get_traced_memory()[1] / 2**20
                tracemalloc.stop()
        dt = time.perf_counter() - t0
        if out is not None:
            self.outcomes[out] = self.outcomes.get(out, 0) + 1
        self.max_seconds = max(self.max_seconds, dt)
        delta = _maxrss_mb() - self.baseline_mb
        self.max_rss_delta_mb = max(self.max_rss_delta_mb, delta)
        if trace:
            self.max_traced_mb = max(self.max_traced_mb, peak)
        if self.execs % 256 == 0:
            self.flush()
        try:
            if dt > TIME_LIMIT_S:
                raise LimitExceeded(f"input took {dt:.2f} s (limit {TIME_LIMIT_S} s)")
            if delta > MEM_LIMIT_MB:
                self.baseline_mb = _maxrss_mb()  # report once per jump, then re-arm
                raise LimitExceeded(f"RSS high-water mark grew {delta:.0f} MiB over the baseline (limit {MEM_LIMIT_MB} MiB)")
            if trace and peak > MEM_LIMIT_MB:
                raise LimitExceeded(f"tracemalloc peak {peak:.0f} MiB (limit {MEM_LIMIT_MB} MiB)")
        except LimitExceeded as e:
            self._finding(data, e)
        return out

    def summary(self) -> dict:
        return {
            "execs": self.execs,
            "seconds": round(time.time() - self.t_start, 1),
            "outcomes": self.outcomes,
            "finding_signatures": self.signatures,
            "max_input_seconds": round(self.max_seconds, 4),
            "max_rss_delta_mb": round(self.max_rss_delta_mb, 1),
            "max_sampled_tracemalloc_mb": round(self.max_traced_mb, 2),
            "baseline_rss_mb": round(self.baseline_mb, 1),
        }

    def flush(self):
        if self.stats_path is not None:
            tmp = self.stats_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.summary()))
            os.replace(tmp, self.stats_path)


# --- instrumentation ---------------------------------------------------------------------


def _import_all():
    import importlib
    import pkgutil

    mods = ["gtsamples", "gtsamples.errors", "gtsamples.format.constants", "gtsamples.format.structs",
            "gtsamples.format.manifest", "gtsamples.format.pages", "gtsamples.format.varint", "gtsamples.storage",
            "gtsamples.storage.store", "gtsamples.storage.local", "gtsamples.storage.remote",
            "gtsamples.cache", "gtsamples.batch", "gtsamples.plan", "gtsamples.plan.selection", "gtsamples.plan.leaves",
            "gtsamples.plan.loading", "gtsamples.plan.navigator", "gtsamples.format.rules", "gtsamples.format.zstd",
            "gtsamples.artifact", "gtsamples.frames",
            "gtsamples.decode.cpu", "gtsamples.format.zstd_frames"]
    cpu = importlib.import_module("gtsamples.decode.cpu")
    mods += [info.name for info in pkgutil.iter_modules(cpu.__path__, cpu.__name__ + ".")]
    return [importlib.import_module(m) for m in mods]


def instrument_gtsamples(atheris) -> int:
    """Instrument every plain Python function and method of gtsamples (not numba dispatchers)."""
    import types

    n = 0
    seen = set()

    def inst(f):
        nonlocal n
        if isinstance(f, types.FunctionType) and id(f) not in seen and f.__module__.startswith("gtsamples"):
            seen.add(id(f))
            atheris.instrument_func(f)
            n += 1

    for mod in _import_all():
        for obj in list(vars(mod).values()):
            if isinstance(obj, types.FunctionType):
                inst(obj)
            elif isinstance(obj, type) and obj.__module__ == mod.__name__:
                for v in vars(obj).values():
                    if isinstance(v, (staticmethod, classmethod)):
                        inst(v.__func__)
                    elif isinstance(v, property):
                        for g in (v.fget, v.fset):
                            inst(g)
                    else:
                        inst(v)
    return n


# --- worker ------------------------------------------------------------------------------


def _seeds(out: pathlib.Path) -> pathlib.Path:
    d = out / "seeds"
    if not d.is_dir() or not any(d.iterdir()):
        from .corpus import write_seeds

        write_seeds(d)
    return d


def worker(args) -> None:
    out = pathlib.Path(args.out)
    target = args.target
    seeds_dir = _seeds(out)
    corpus = out / "corpus" / target
    crashes = out / "crashes" / target
    corpus.mkdir(parents=True, exist_ok=True)
    crashes.mkdir(parents=True, exist_ok=True)
    stats_path = out / f"stats-{target}-{os.getpid()}.json"

    if args.engine == "atheris":
        import atheris

        _import_all()
        n_inst = instrument_gtsamples(atheris)
    from . import targets as T

    fn = T.TARGETS[target]
    seeds = [p.read_bytes() for p in sorted(seeds_dir.iterdir())]
    for s in seeds:  # warm-up: numba compile/cache load, imports, zstd contexts
        fn(s)
    checked = Checked(fn, stats_path, crash_dir=crashes, target=target)
    checked.rebase()

    if args.engine == "random":
        import random

        rng = random.Random(args.seed)
        pool = list(seeds)
        while checked.execs < args.runs:
            if args.max_time and time.time() - checked.t_start > args.max_time:
                break
            data = pool[checked.execs % len(pool)] if checked.execs < len(pool) else T.mutate(
                rng.choice(pool), MAX_LEN, rng.randrange(1 << 32))
            checked(data)
        checked.flush()
        s = checked.summary()
        s.update(target=target, engine="random")
        print(json.dumps(s), flush=True)
        return

    def custom_mutator(data, max_size, seed):
        return T.mutate(data, max_size, seed, lib_mutate=atheris.Mutate)

    libfuzzer_args = [
        sys.argv[0],
        str(corpus),
        str(seeds_dir),
        f"-runs={args.runs}",
        f"-timeout={int(TIME_LIMIT_S)}",
        f"-rss_limit_mb={int(checked.baseline_mb + 2 * MEM_LIMIT_MB)}",
        f"-malloc_limit_mb={MEM_LIMIT_MB}",
        f"-max_len={MAX_LEN}",
        f"-artifact_prefix={crashes}/",
        f"-seed={args.seed}",
        "-print_final_stats=1",
        "-reload=0",
    ]
    if args.max_time:
        libfuzzer_args.append(f"-max_total_time={int(args.max_time)}")
    print(f"worker {target}: {n_inst} functions instrumented, baseline RSS {checked.baseline_mb:.0f} MiB", flush=True)
    atheris.Setup(libfuzzer_args, checked, custom_mutator=custom_mutator)
    atheris.Fuzz()


# --- parent ----------------------------------------------------------------------------


def _pid_execs(out: pathlib.Path, target: str, pid: int, log_text: str) -> int:
    """Executions of one worker: libFuzzer's exact "Done N runs", else the stats file."""
    n = 0
    p = out / f"stats-{target}-{pid}.json"
    if p.exists():
        n = json.loads(p.read_text())["execs"]
    for ln in log_text.splitlines():
        if ln.startswith("Done ") and " runs in " in ln:
            n = max(n, int(ln.split()[1]))
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, required=True, help="total executions, split over the targets")
    ap.add_argument("--target", choices=TARGET_NAMES, action="append", help="repeatable; default all")
    ap.add_argument("--jobs", type=int, default=min(len(TARGET_NAMES), os.cpu_count() or 1),
                    help="worker processes at a time (default: one per core, at most one per target)")
    ap.add_argument("--engine", choices=("atheris", "random"), default=None)
    ap.add_argument("--max-time", type=float, default=0, help="wall seconds for the whole campaign (0: no limit)")
    ap.add_argument("--chunk", type=int, default=CHUNK,
                    help="executions per worker process; the worker is restarted (corpus kept) after each chunk")
    ap.add_argument("--out", default=str(ROOT / ".fuzz"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-restarts", type=int, default=25, help="restarts after findings, per target")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.engine is None:
        try:
            import atheris  # noqa: F401

            args.engine = "atheris"
        except ImportError:
            args.engine = "random"
    if args.worker:
        args.target = args.target[0]
        worker(args)
        return 0

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    _seeds(out)
    targets = args.target or list(TARGET_NAMES)
    per = {t: args.runs // len(targets) + (1 if i < args.runs % len(targets) else 0) for i, t in enumerate(targets)}
    env = dict(os.environ, NUMBA_NUM_THREADS="1", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for k in [k for k in env if k.startswith("COV_CORE_")]:  # no pytest-cov tracing in the workers: it
        del env[k]  # slows them down and its growing data would read as an RSS leak of the target
    state = {t: {"done": 0, "findings": [], "restarts": 0, "chunks": 0, "proc": None, "log": None} for t in targets}
    pending = list(targets)
    running: list[str] = []
    t0 = time.time()
    fj = out / "findings.jsonl"  # kept across campaigns: count only what this one appends
    env[FINDINGS_FROM_ENV] = str(fj.stat().st_size if fj.exists() else 0)

    def start(t):
        st = state[t]
        n = min(per[t] - st["done"], args.chunk)
        log = open(out / f"log-{t}.txt", "a")
        log.write(f"\n=== chunk {st['chunks']} of {t}: {n} runs (done {st['done']}) ===\n")
        log.flush()
        cmd = [sys.executable, "-m", "tests.fuzz.run", "--worker", "--target", t, "--runs", str(n),
               "--engine", args.engine, "--out", str(out), "--seed", str(args.seed + 7919 * st["chunks"])]
        if args.max_time:
            cmd += ["--max-time", str(max(1, int(args.max_time - (time.time() - t0))))]
        st["proc"] = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        st["log"] = log
        st["log_start"] = log.tell()
        st["chunks"] += 1

    while pending or running:
        while pending and len(running) < max(1, args.jobs):
            t = pending.pop(0)
            start(t)
            running.append(t)
        time.sleep(0.2)
        for t in list(running):
            st = state[t]
            rc = st["proc"].poll()
            if rc is None:
                continue
            st["log"].close()
            running.remove(t)
            with open(out / f"log-{t}.txt", "rb") as f:
                f.seek(st["log_start"])
                text = f.read().decode(errors="replace")
            made = _pid_execs(out, t, st["proc"].pid, text)
            st["done"] += made
            if rc != 0:
                crash = [ln for ln in text.splitlines() if "Test unit written to" in ln]
                st["findings"].append({"rc": rc, "artifact": crash[-1].split()[-1] if crash else None,
                                       "tail": text.strip().splitlines()[-40:]})
                st["restarts"] += 1
                print(f"FINDING in {t}: rc {rc}, {crash[-1] if crash else 'no artifact'}", flush=True)
            timed_out = args.max_time and time.time() - t0 >= args.max_time
            more = st["done"] < per[t] and made > 0 and not timed_out
            if more and (rc == 0 or (args.engine == "atheris" and st["restarts"] <= args.max_restarts)):
                pending.append(t)
    found: dict[str, dict] = {}
    for rec in campaign_findings(out, int(env[FINDINGS_FROM_ENV])):
        if rec["target"] in state:
            found.setdefault(rec["target"], {}).setdefault(rec["signature"], rec["input"])
    for t in targets:
        st = state[t]
        st["findings"] += [{"signature": k, "input": v} for k, v in found.get(t, {}).items()]
    summary = {
        "engine": args.engine,
        "wall_seconds": round(time.time() - t0, 1),
        "targets": {t: {"execs": state[t]["done"], "requested": per[t], "findings": len(state[t]["findings"]),
                        "worker_chunks": state[t]["chunks"], "restarts_after_findings": state[t]["restarts"]}
                    for t in targets},
        "total_execs": sum(state[t]["done"] for t in targets),
    }
    (out / "summary.json").write_text(json.dumps({**summary, "details": {t: state[t]["findings"] for t in targets}},
                                                 indent=1, default=str))
    print(json.dumps(summary), flush=True)
    return 1 if any(state[t]["findings"] for t in targets) else 0


if __name__ == "__main__":
    sys.exit(main())
