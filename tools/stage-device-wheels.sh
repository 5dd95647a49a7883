#!/usr/bin/env bash
# Stage the wheels a GPU machine without network lacks into .whl/ at the project root
# (git-ignored): libnvcomp 6.0 (the C library gtsamples calls through ctypes; not the
# nvidia-nvcomp Python package, whose nvidia/__init__.py would shadow the nvidia namespace
# package) and zstandard, for CPython 3.12 on x86-64 Linux by default.  The GPU machine is
# expected to have CuPy (cuda13x), numba, pyarrow, numpy, pytest, xxhash and hypothesis;
# cuDF's wheel set (~387 MiB) is too big to carry.  benchmarks/device_check.sh installs
# exactly these two wheels (its NVCOMP_WHEEL pin must match the one below).
#
# Usage: bash tools/stage-device-wheels.sh [extra-requirement ...]
#        PYTHON_VERSION=3.11 bash tools/stage-device-wheels.sh    # another interpreter there
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "${PYTHON_VERSION:-3.12}" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl nvidia-libnvcomp-cu13==6.0.0.12 zstandard "$@"
du -sh .whl
ls .whl
cat <<'MSG'
Next: prove the run here with `bash benchmarks/device_check.sh --dry-run`, then copy the
checkout with .whl/ to the GPU machine and run `bash benchmarks/device_check.sh` there
(with OUT=<folder> for its summary.json and logs).
MSG
