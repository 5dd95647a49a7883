#!/usr/bin/env bash
# Line coverage of format/, plan.py and the CPU decoders, numba kernels included.
#
#   bash benchmarks/coverage.sh            # suite (JIT on) + kernel pass (NUMBA_DISABLE_JIT=1)
#   bash benchmarks/coverage.sh --corpus   # also replay the fuzz corpus (.fuzz/) in both modes
#
# numba-compiled functions run as machine code, so coverage.py never sees their
# lines.  Inside the suite, tests/decode/test_kernels_as_python.py runs the read
# kernels' py_func (so `make test` reports them); this script adds a pass of the
# kernel-driving tests with NUMBA_DISABLE_JIT=1 and, with --corpus, the fuzz
# corpus replayed in both modes, then reports the modules issue 5 names.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
INCLUDE='*/gtsamples/format/*,*/gtsamples/plan/*,*/gtsamples/decode/cpu/*'
# (tests that write artifacts at run time cannot run here: the writer's numba intrinsics have no
# pure-Python form; tests/decode/test_kernels_as_python.py covers the read kernels inside the suite)
KERNEL_TESTS=(tests/decode tests/format tests/test_bad_files.py tests/test_vectors.py tests/test_navigation.py)
rm -f .coverage .coverage.*
export NUMBA_NUM_THREADS=${NUMBA_NUM_THREADS:-2}
echo "== pass 1: the whole suite, JIT on"
$PY -m pytest -q -p no:cacheprovider -m "not slow" --cov=gtsamples --cov-report= || true
$PY -m coverage report --include="$INCLUDE" | tail -n 30  # (a row per module, 21)
echo "== pass 2: kernel tests with NUMBA_DISABLE_JIT=1 (appended)"
existing=()
for t in "${KERNEL_TESTS[@]}"; do [ -e "$t" ] && existing+=("$t"); done
NUMBA_DISABLE_JIT=1 $PY -m pytest -q -p no:cacheprovider -m "not slow" -W ignore::RuntimeWarning \
    --cov=gtsamples --cov-append --cov-report= "${existing[@]}" || true
if [ "${1:-}" = "--corpus" ] && [ -d .fuzz/seeds ]; then
    echo "== pass 3: fuzz corpus replay (JIT on and off, appended)"
    $PY -m coverage run -a -m tests.fuzz.replay --no-tracemalloc > /dev/null
    NUMBA_DISABLE_JIT=1 $PY -W ignore::RuntimeWarning -m coverage run -a -m tests.fuzz.replay --no-tracemalloc --limit 1500 > /dev/null
fi
echo "== combined"
$PY -m coverage report -m --include="$INCLUDE"
