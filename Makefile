# The two commands in README.md: `make demo` and `make test`.
# Both create .venv with the project and its test extras on first use, then compile the
# CPU kernels into the package's cache (`gtsamples warmup`, about half a minute).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.gtsamples-installed
EXTRAS ?= test,dask,s3,progress,kernels-test,plots,integrations
PYTEST_ARGS ?=

.PHONY: setup demo test test-fast stress fuzz bench clean kernels-check kernels-sanitize

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "gtsamples needs Python 3.10+")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[$(EXTRAS)]'
	$(BIN)/gtsamples warmup
	@touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/gtsamples demo --device auto

# lint-imports: the layer contract in pyproject.toml ([tool.importlinter]; src/ on the path
# because grimp reads the package's files, not the editable install's finder)
test: $(STAMP)
	PYTHONPATH=src $(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -q --cov=gtsamples --cov-report=term $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -x -m "not slow" $(PYTEST_ARGS)

# Concurrency in fresh processes, the long version of tests/test_first_calls.py (not part of
# `make test`): 100 warm + 100 cold-cache processes of 4 barrier threads, 20 parents with
# fork/forkserver/spawn children, 20 cold Dask threads runs, 20 cold LocalClusters.  The
# cold runs compile every kernel (~30 s of CPU each): hours on a small machine.
# STRESS_ARGS="--warm 20 --cold 5" runs fewer.
stress: $(STAMP)
	$(BIN)/python -m tests.concurrency.stress $(STRESS_ARGS)

kernels-check:
	nvcc -std=c++17 -arch=sm_90 -Ikernels --ptx -odir /tmp kernels/*.cu

# Every kernel on the host emulator under ASan + UBSan, under TSan and in the
# initcheck build, over the whole corpus, then the planted faults of
# tests/kernels/plants (see tests/kernels/emu/sanitize.py); prints
# "sanitizer reports: N" per build and fails on any report or missed plant.
kernels-sanitize: $(STAMP)
	$(BIN)/python -m tests.kernels.emu.sanitize

fuzz: $(STAMP)
	$(BIN)/python -m pip install -q atheris
	$(BIN)/python -m tests.fuzz.run --runs $${FUZZ_RUNS:-1000000}

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_cpu.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build dist src/*.egg-info src/gtsamples/_jitcache
