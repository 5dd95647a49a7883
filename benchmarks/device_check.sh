#!/usr/bin/env bash
# One-shot check of the GPU backend on a GPU machine without network
# (an H200 lent for ~15 minutes).  Run from the repository root:
#     bash benchmarks/device_check.sh            # results also under ${OUT:-benchmarks/out}
# 1. installs the wheels staged in .whl/ by ../shared/tools/stage-device-wheels.sh
#    (nvCOMP 6.0, zstandard) into .site; PYTHONPATH = .site:src:.
# 2. prints versions (GPU, CuPy, NVRTC, libnvcomp),
# 3. runs the GPU tests (tests/gpu: backend parity, and test_gpu_artifacts.py:
#    read_device / read(device="gpu") == the CPU read on the vectors, golden
#    artifacts, NAB data and decode-stage corruption cases) and the host-side
#    kernel tests,
# 4. runs compute-sanitizer memcheck over a parity/corruption subset (if present),
# 5. runs the short GPU benchmark,
# 6. prints a short table last.
# Every step has its own timeout; the whole script stays well inside 8 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/benchmarks/out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
T0=$(date +%s)
step() { echo; echo "=== $* ($(( $(date +%s) - T0 )) s)"; }

step "install staged wheels"
if ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target .site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
else
  echo "no .whl/ (run ../shared/tools/stage-device-wheels.sh first); using what is installed"
fi
export PYTHONPATH=$ROOT/.site:$ROOT/src:$ROOT${PYTHONPATH:+:$PYTHONPATH}
export NUMBA_CACHE_DIR=${NUMBA_CACHE_DIR:-$OUT/numba-cache}
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-$OUT/cupy-cache}

step "versions"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2
timeout 60 $PY - <<'PY' 2>&1 | tee "$OUT/versions.txt"
import sys, platform
print("python", platform.python_version())
try:
    import cupy
    print("cupy", cupy.__version__, "devices", cupy.cuda.runtime.getDeviceCount(),
          "runtime", cupy.cuda.runtime.runtimeGetVersion(), "driver", cupy.cuda.runtime.driverGetVersion())
    print("nvrtc", cupy.cuda.nvrtc.getVersion())
except Exception as e:
    print("cupy: FAILED", repr(e))
try:
    from gtsamples.decode import nvcomp
    lib = nvcomp.load_nvcomp()
    print("libnvcomp", lib.version, "cudart", lib.cudart_version, "alignment", lib.alignment)
except Exception as e:
    print("libnvcomp: FAILED", repr(e))
try:
    import cudf
    print("cudf", cudf.__version__)
except Exception as e:
    print("cudf: not importable", e.__class__.__name__)
PY

step "GPU tests"
timeout 300 $PY -m pytest -q -p no:cacheprovider -o addopts="" -rs \
  tests/gpu tests/gpu/test_gpu_artifacts.py tests/kernels/test_sources.py tests/kernels/test_gpu_host.py \
  --junitxml="$OUT/gpu-tests.xml" 2>&1 | tee "$OUT/gpu-tests.txt" | tail -25
TESTS_RC=${PIPESTATUS[0]}

SAN="skipped (compute-sanitizer not found)"
if command -v compute-sanitizer >/dev/null 2>&1; then
  step "compute-sanitizer memcheck (subset)"
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 99 --launch-timeout 60 \
    $PY -m pytest -q -p no:cacheprovider -o addopts="" -x tests/gpu/test_gpu_backend.py tests/gpu/test_gpu_artifacts.py \
    -k "parity_random_batches and 0 or corruption_same_error_as_cpu and raw or trimming or overlapped_staging" \
    2>&1 | tee "$OUT/memcheck.txt" | tail -8
  SAN_RC=${PIPESTATUS[0]}
  SAN="rc=$SAN_RC $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.txt" | tail -1)"
fi

step "GPU benchmark (quick)"
rm -f "$OUT/bench.jsonl"
timeout 200 $PY benchmarks/bench_gpu.py --quick --json "$OUT/bench.jsonl" 2>&1 | tee "$OUT/bench.txt" | tail -12
BENCH_RC=${PIPESTATUS[0]}

step "summary"
echo "tests:     rc=$TESTS_RC  $(grep -E '[0-9]+ (passed|failed)' "$OUT/gpu-tests.txt" | tail -1)"
$PY - "$OUT/gpu-tests.xml" <<'PY' 2>/dev/null
import collections, sys, xml.etree.ElementTree as ET
per = collections.defaultdict(collections.Counter)
for tc in ET.parse(sys.argv[1]).iter("testcase"):
    kind = next((c.tag for c in tc if c.tag in ("failure", "error", "skipped")), "passed")
    per[(tc.get("classname") or tc.get("name") or "?").rsplit(".", 1)[-1]][kind] += 1
for name, c in sorted(per.items()):
    print(f"  {name:<24} " + " ".join(f"{k} {v}" for k, v in sorted(c.items())))
PY
echo "memcheck:  $SAN"
echo "benchmark: rc=$BENCH_RC  (json: $OUT/bench.jsonl)"
grep -A20 -E '^ *fields +rows' "$OUT/bench.txt" | head -20
echo "elapsed $(( $(date +%s) - T0 )) s"
[ "$TESTS_RC" = 0 ] && [ "$BENCH_RC" = 0 ]
