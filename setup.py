"""The wheel carries the CPU kernels compiled (``gtsamples/_jitcache/``), so that a plain
``pip install gtsamples`` reads without compiling (docs/architecture.md, "Compiled kernels").

Everything else is in pyproject.toml.  When ``build_py`` builds the package for a wheel
(``pip install .``, ``pip wheel .``, ``python -m build``; not for an editable install,
which ``make setup`` warms), it runs ``gtsamples warmup --portable`` on the built copy in
``build/lib``: the kernels for x86-64-v3 and the architecture's baseline land in its
``_jitcache/``, which the wheel then holds.  The entries serve the Python minor version
and the numba version that built the wheel (the build environment's, see
``[build-system] requires``); any other version compiles on first use as without them.

``GTSAMPLES_BUILD_NO_WARMUP=1`` skips the warm-up (a fast build, a wheel that compiles on
first use).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py


class build_py_warm(build_py):
    """``build_py``, then the portable warm-up on the built package (wheels only)."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        cache = os.path.join(self.build_lib, "gtsamples", "_jitcache")
        shutil.rmtree(cache, ignore_errors=True)  # an earlier build's, left in build/lib
        if os.environ.get("GTSAMPLES_BUILD_NO_WARMUP", "") not in ("", "0"):
            return
        self.announce(f"gtsamples: compiling the CPU kernels into {cache} (GTSAMPLES_BUILD_NO_WARMUP=1 skips)", 2)
        with tempfile.TemporaryDirectory(prefix="gtsamples-build-") as tmp:
            # the built copy first on the path; an empty user cache (else kernels already in
            # the builder's own cache would load from there and never reach the package's);
            # no bytecode written into the package; the portable targets only
            drop = ("NUMBA_CACHE_DIR", "NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "NUMBA_DISABLE_JIT",
                    "COVERAGE_PROCESS_START")
            env = {k: v for k, v in os.environ.items() if k not in drop}
            # (pip's isolated build environment reaches the child through PYTHONPATH: kept)
            path = [os.path.abspath(self.build_lib), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
            env.update(PYTHONPATH=os.pathsep.join(path), GTSAMPLES_CACHE_DIR=os.path.join(tmp, "user"),
                       PYTHONDONTWRITEBYTECODE="1")
            subprocess.run([sys.executable, "-m", "gtsamples", "warmup", "--portable"], env=env, cwd=tmp, check=True)
        if not any(name.endswith(".nbi") for _, _, names in os.walk(cache) for name in names):
            raise RuntimeError(f"gtsamples: the warm-up wrote no kernel into {cache}")


setup(cmdclass={"build_py": build_py_warm})
