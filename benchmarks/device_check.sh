#!/usr/bin/env bash
# One-shot check of the GPU backend on a GPU machine without network (an H200 lent
# for ~15 minutes, at most 600 s a command), and a dry run of the same without a GPU.
# From the repository root:
#
#   bash tools/stage-device-wheels.sh              # here, with network: libnvcomp + zstandard -> .whl/
#   bash benchmarks/device_check.sh --dry-run     # here, no GPU: everything but GPU execution
#   then the device call it prints:  command "GTS_COMMIT=<commit> bash benchmarks/device_check.sh",
#                                    carry [".whl"], timeout_s 400
#
# Steps, each under `timeout`: SIGINT at its limit (pytest then still writes its report),
# SIGKILL a grace later.  Seconds, limit + grace; with two 5+1 s checks between steps (git
# diff, the sanitizer's refusal) the worst case is 310 + 37 + 12 = 359 <= 360, checked below:
#   install 15+3  pip installs exactly the two staged wheels, nvidia_libnvcomp_cu13-6.0.0.12-*.whl
#                 and zstandard-*.whl (what stage-device-wheels.sh downloads), with --no-index
#                 --no-deps into a temporary --target; then a fresh interpreter must import
#                 zstandard and load libnvcomp from there.  No staged wheels: stop at once.
#   versions 15+3 GPU, driver, CUDA runtime, CuPy, NVRTC, libnvcomp, cuDF -> versions.json
#   tests 160+15 pytest tests/gpu tests/kernels/test_sources.py tests/kernels/test_gpu_host.py
#                 (each path once: pytest 8 given a folder and a file in it collects only the file)
#   bench    65+3 benchmarks/bench_gpu.py --quick (4 fields, 1M and 10M rows: batches and files) --json bench.jsonl
#   memcheck 45+10 compute-sanitizer memcheck over a subset (-k below); last; skipped when absent
#                 and when it refuses the device (it did on gVisor machines)
#   summary  10+3 summary.json and the tables; from an EXIT trap, so also after a timeout
# --dry-run: the same install (for the GPU machine's Python 3.12 when this one differs:
#   pip's tag check, then the installed files; DEVICE_PYTHON overrides 3.12), versions, and
#   instead of GPU execution: collects exactly what the tests step would run, prints
#   "gpu tests collected: N", fails when N < the file-by-file count or when the memcheck -k
#   selects nothing; bench_gpu.py --dry-run --no-cpu on one small size; the summary.  No GPU.
#
# $OUT (default benchmarks/out) gets at most 6 files: summary.json, log.txt (every step's
# full output), versions.json, gpu-tests.xml (junit), bench.jsonl.  numba and CuPy caches
# go to /tmp.  summary.json keys (null where not measured): device, driver, cuda_runtime,
# cupy, nvcomp (versions step); commit ($GTS_COMMIT, else `git rev-parse` when the tree is a
# git checkout of its own, else "unknown": .git may not travel to the GPU machine);
# tests_passed/failed/skipped (junit; failed counts errors); memcheck_errors (compute-
# sanitizer's ERROR SUMMARY, null if not run); and from bench.jsonl's 4-field records at
# the largest row count present: decoded_gbps_hbm = device_GBps, copy_gbps = copy_GBps,
# cpu_speedup = speedup of the "scan" record; decoded_gbps_from_files = files_GBps and
# host_share = host_share of the "files" record.  Also mode, steps, tests_by_file.
# A GPU run commits it as benchmarks/device-runs/<date>-<commit>.json (see the README there).
#
# Environment: PYTHON (python3; a dry run: the checkout's .venv/bin/python when there is
# one), OUT, DEVICE_CHECK_WHEELS (.whl), GTS_COMMIT, DEVICE_PYTHON, DEVICE_CHECK_T_<STEP>
# (timeouts, within the 360 s).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
case "${1:-}" in
  --dry-run) MODE=dry-run ;;
  "") MODE=device ;;
  *) echo "usage: bash benchmarks/device_check.sh [--dry-run]" >&2; exit 2 ;;
esac
PY=${PYTHON:-python3}
if [ "$MODE" = dry-run ]; then  # it collects the tests and runs bench_gpu.py: the CPU stack (numba,
  # pyarrow) `make setup` installs in .venv, used unless PYTHON says otherwise (the GPU machine has its own)
  [ -z "${PYTHON:-}" ] && [ -x "$ROOT/.venv/bin/python" ] && PY=$ROOT/.venv/bin/python
  if ! "$PY" -c 'import numba, pyarrow' 2>/dev/null; then
    echo "device_check --dry-run: $PY cannot import numba and pyarrow; run \`make setup\` (.venv) or set PYTHON" >&2
    exit 2
  fi
fi
OUT=${OUT:-$ROOT/benchmarks/out}
WHEELS=${DEVICE_CHECK_WHEELS:-$ROOT/.whl}
NVCOMP_WHEEL=nvidia_libnvcomp_cu13-6.0.0.12  # = stage-device-wheels.sh and pyproject's kernels-test pin
DEVICE_PYTHON=${DEVICE_PYTHON:-3.12}

T_INSTALL=${DEVICE_CHECK_T_INSTALL:-15}
T_VERSIONS=${DEVICE_CHECK_T_VERSIONS:-15}
T_TESTS=${DEVICE_CHECK_T_TESTS:-160}
T_BENCH=${DEVICE_CHECK_T_BENCH:-65}
T_MEMCHECK=${DEVICE_CHECK_T_MEMCHECK:-45}
T_SUMMARY=${DEVICE_CHECK_T_SUMMARY:-10}
GRACE=3 GRACE_TESTS=15 GRACE_MEMCHECK=10  # pytest needs seconds after SIGINT to finish its report
T_CHECK=5  # +1 s grace, each of: git diff (commit), the sanitizer's refusal
WORST=$(( T_INSTALL + T_VERSIONS + T_TESTS + T_BENCH + T_MEMCHECK + T_SUMMARY
          + 4 * GRACE + GRACE_TESTS + GRACE_MEMCHECK + 2 * (T_CHECK + 1) ))
if (( WORST > 360 )); then
  echo "step timeouts add up to $WORST s (with grace): over 360 s" >&2; exit 2
fi

PYTEST_OPTS=(-q -p no:cacheprovider -o addopts= -rs --durations=15)
TEST_PATHS=(tests/gpu tests/kernels/test_sources.py tests/kernels/test_gpu_host.py)
MEMCHECK_PATHS=(tests/gpu/test_gpu_backend.py tests/gpu/test_gpu_artifacts.py)
MEMCHECK_K="parity_random_batches and 0 or corruption_same_error_as_cpu and raw or trimming or overlapped_staging"

commit_id() {  # only a checkout of its own: a copy inside another repository must not report that one's HEAD
  if [ -n "${GTS_COMMIT:-}" ]; then echo "$GTS_COMMIT"; return; fi
  local top c
  top=$(git -C "$ROOT" rev-parse --show-toplevel 2>/dev/null) && [ "$top" -ef "$ROOT" ] \
    && c=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null) || { echo unknown; return; }
  timeout -k 1 "$T_CHECK" git -C "$ROOT" diff --quiet HEAD 2>/dev/null || c="$c-dirty"
  echo "$c"
}
COMMIT=$(commit_id)

# the staged wheels: exactly one of each, else stop before anything runs
shopt -s nullglob
NV=("$WHEELS"/"$NVCOMP_WHEEL"-*.whl)
ZS=("$WHEELS"/zstandard-*.whl)
shopt -u nullglob
if (( ${#NV[@]} != 1 || ${#ZS[@]} != 1 )); then
  cat >&2 <<EOF
device_check: need exactly one $NVCOMP_WHEEL-*.whl and one zstandard-*.whl in $WHEELS
(found ${#NV[@]} and ${#ZS[@]}); without them every nvCOMP test fails at import.  Stage them
here (with network) and carry them:
  bash tools/stage-device-wheels.sh
  bash benchmarks/device_check.sh --dry-run
  device call: command "bash benchmarks/device_check.sh", carry [".whl"]
EOF
  exit 2
fi

mkdir -p "$OUT"
rm -f "$OUT"/{summary.json,log.txt,versions.json,gpu-tests.xml,bench.jsonl}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gts-device-check.XXXXXX")
SITE=$WORK/site
STEPS=$WORK/steps.tsv
: > "$STEPS"
export NUMBA_CACHE_DIR=${NUMBA_CACHE_DIR:-/tmp/gts-numba-cache}
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/gts-cupy-cache}
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
CROSS=0  # dry run only (untimed): this Python is not the GPU machine's
if [ "$MODE" = dry-run ]; then
  PYVER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  [ "$PYVER" != "$DEVICE_PYTHON" ] && CROSS=1
fi
START=$SECONDS

record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$STEPS"; }

# run_step NAME TIMEOUT GRACE TAIL CMD...: full output to log.txt and $WORK/NAME.txt, its tail here
run_step() {
  local name=$1 t=$2 grace=$3 tail_n=$4 t0=$SECONDS rc status
  shift 4
  echo; echo "=== $name (timeout $t s; at $(( SECONDS - START )) s)"
  printf '\n=== %s: %s\n' "$name" "$*" >> "$OUT/log.txt"
  timeout -s INT -k "$grace" "$t" "$@" 2>&1 | tee -a "$OUT/log.txt" > "$WORK/$name.txt"
  rc=${PIPESTATUS[0]}
  tail -n "$tail_n" "$WORK/$name.txt"
  case $rc in
    0) status=ok ;;
    124|137) status="timed out after $t s" ;;
    *) status="failed (rc $rc)" ;;
  esac
  record "$name" "$status" "$rc" "$(( SECONDS - t0 ))"
  return "$rc"
}

SUMMARY_DONE=0
summary() {
  SUMMARY_DONE=1
  echo
  timeout -k "$GRACE" "$T_SUMMARY" "$PY" benchmarks/device_check.py summary --out-dir "$OUT" --steps "$STEPS" \
    --memcheck "$WORK/memcheck.txt" --commit "$COMMIT" --mode "$MODE" 2>&1 | tee -a "$OUT/log.txt"
  local n
  n=$(find "$OUT" -type f | wc -l)
  (( n <= 6 )) || echo "WARNING: $OUT holds $n files; only 8 come back from the GPU machine"
  echo "elapsed $(( SECONDS - START )) s (worst case $WORST s)"
}
finish() {
  local rc=$?
  trap - EXIT INT TERM
  [ "$SUMMARY_DONE" = 1 ] || summary
  rm -rf "$WORK"
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "device_check ($MODE), commit $COMMIT; worst case $WORST s; out $OUT"
INSTALL_ARGS=(--site "$SITE")
(( CROSS )) && INSTALL_ARGS+=(--device-python "$DEVICE_PYTHON")
run_step install "$T_INSTALL" "$GRACE" 20 "$PY" benchmarks/device_check.py install "${INSTALL_ARGS[@]}" "${NV[0]}" "${ZS[0]}" \
  || exit 1
if (( CROSS )); then  # the cp312 extension modules cannot import here: this environment's serve
  export PYTHONPATH=$ROOT/src:$ROOT${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$SITE:$ROOT/src:$ROOT${PYTHONPATH:+:$PYTHONPATH}
fi

run_step versions "$T_VERSIONS" "$GRACE" 30 "$PY" benchmarks/device_check.py versions "$OUT/versions.json"

FAILED=0
if [ "$MODE" = device ]; then
  run_step tests "$T_TESTS" "$GRACE_TESTS" 40 "$PY" -m pytest "${PYTEST_OPTS[@]}" --junitxml="$OUT/gpu-tests.xml" "${TEST_PATHS[@]}" \
    || FAILED=1
  run_step bench "$T_BENCH" "$GRACE" 12 "$PY" benchmarks/bench_gpu.py --quick --json "$OUT/bench.jsonl" || FAILED=1
  SAN=$(command -v compute-sanitizer || ls "${CUDA_HOME:-/usr/local/cuda}"/bin/compute-sanitizer 2>/dev/null)
  if [ -z "$SAN" ]; then
    echo; echo "=== memcheck: skipped (compute-sanitizer not found)"
    record memcheck "skipped: compute-sanitizer not found" - 0
  else
    run_step memcheck "$T_MEMCHECK" "$GRACE_MEMCHECK" 10 "$SAN" --tool memcheck --error-exitcode 99 --launch-timeout 30 \
      "$PY" -m pytest "${PYTEST_OPTS[@]}" -x "${MEMCHECK_PATHS[@]}" -k "$MEMCHECK_K"
    rc=$?
    if timeout -k 1 "$T_CHECK" "$PY" benchmarks/device_check.py refused "$WORK/memcheck.txt"; then
      last=$(tail -n 1 "$STEPS")
      sed -i '$d' "$STEPS"  # a refusal is a fact about the machine, not a finding about the code
      record memcheck "skipped: refused the device" "$rc" "${last##*$'\t'}"
    elif (( rc != 0 )); then
      FAILED=1
    fi
  fi
else
  run_step tests "$T_TESTS" "$GRACE_TESTS" 30 "$PY" benchmarks/device_check.py collect --opts="${PYTEST_OPTS[*]}" \
    --paths "${TEST_PATHS[@]}" --memcheck-paths "${MEMCHECK_PATHS[@]}" --memcheck-k "$MEMCHECK_K" || FAILED=1
  # the benchmark's flags and JSON lines on one small size (--quick's batches take ~20 s to build here)
  run_step bench "$T_BENCH" "$GRACE" 6 "$PY" benchmarks/bench_gpu.py --dry-run --no-cpu --sizes 1e5 --fields 4 --repeat 1 \
    --json "$OUT/bench.jsonl" || FAILED=1
  record memcheck "skipped: dry run (-k count in tests)" - 0
fi

summary
if [ "$MODE" = dry-run ] && (( ! FAILED )); then
  echo
  [ "$WHEELS" -ef "$ROOT/.whl" ] || echo "dry run passed on the wheels in $WHEELS; the device run reads .whl/: stage it first"
  echo "dry run passed; the device call: command \"GTS_COMMIT=$COMMIT bash benchmarks/device_check.sh\","
  echo "  carry [\".whl\"], timeout_s 400"
fi
exit "$FAILED"
