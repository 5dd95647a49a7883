"""Locating, amalgamating and compiling the CUDA sources in ``kernels/``.

The kernels are CUDA C++ files shipped as package data and compiled at run time
with NVRTC through :class:`cupy.RawModule`.  Before compiling, every
``#include "..."`` is resolved here into one source string (headers have
``#pragma once``): NVRTC then needs no include path, and CuPy's on-disk kernel
cache, keyed on the source text and options, can never serve a binary built
from an older header.

Nothing here imports CuPy at module import time; only :func:`get_module` and
:func:`get_kernel` do.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from pathlib import Path

from ...runtime import ForkSafeLock

__all__ = [
    "KERNEL_SOURCES",
    "NVRTC_OPTIONS",
    "kernel_dir",
    "kernel_path",
    "amalgamate",
    "source_digest",
    "get_module",
    "get_kernel",
]

#: Entry-point file -> the extern "C" kernels it defines.
KERNEL_SOURCES: dict[str, tuple[str, ...]] = {
    "gts_timestamp.cu": ("gts_decode_timestamps", "gts_decode_timestamps_warp"),
    "gts_sequence.cu": ("gts_decode_sequences", "gts_check_sequence_order", "gts_decode_sequences_warp"),
    "gts_optype.cu": ("gts_decode_optypes", "gts_decode_optypes_warp"),
    "gts_float.cu": ("gts_decode_floats", "gts_decode_floats_warp"),
    "gts_identity.cu": ("gts_broadcast_identity",),
    "gts_status.cu": ("gts_fold_nvcomp_status",),
    "gts_trim.cu": ("gts_trim_ranges", "gts_scan_blocks", "gts_compact_columns", "gts_compact_masks"),
    "gts_xxh64.cu": ("gts_xxh64",),
}

#: Options given to NVRTC (CuPy adds ``-arch`` for the current device itself).
NVRTC_OPTIONS: tuple[str, ...] = ("-std=c++17",)

#: Where the sources live, in order: $GTSAMPLES_KERNEL_DIR, package data
#: ``gtsamples/kernels/`` (an installed wheel: pyproject maps the top-level
#: ``kernels/`` to the ``gtsamples.kernels`` package), the repository's ``kernels/``.
_ENV_DIR = "GTSAMPLES_KERNEL_DIR"
_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[ \t]*$', re.M)
_PRAGMA_ONCE_RE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+once[ \t]*$", re.M)


def _candidate_dirs() -> list[Path]:
    dirs = []
    env = os.environ.get(_ENV_DIR)
    if env:
        dirs.append(Path(env))
    here = Path(__file__).resolve()
    dirs.append(here.parents[2] / "kernels")  # package data gtsamples.kernels (pyproject package-dir)
    dirs.append(here.parents[4] / "kernels")  # <repo>/src/gtsamples/decode/gpu/nvrtc.py
    return dirs


def kernel_dir() -> Path:
    """The directory holding ``gts_*.cu`` and ``gts_*.cuh``."""
    for d in _candidate_dirs():
        if (d / "gts_types.cuh").is_file():
            return d
    raise FileNotFoundError(
        "gtsamples CUDA kernel sources not found; looked in "
        + ", ".join(str(d) for d in _candidate_dirs())
        + f" (set ${_ENV_DIR} to the directory holding gts_types.cuh)"
    )


def kernel_path(name: str) -> Path:
    return kernel_dir() / name


def amalgamate(name: str, directory: Path | None = None) -> str:
    """``name`` with every quoted include replaced by the header's text, once."""
    directory = directory or kernel_dir()
    seen: set[str] = set()

    def expand(fname: str, stack: tuple[str, ...]) -> str:
        if fname in stack:
            raise ValueError(f"include cycle: {' -> '.join(stack + (fname,))}")
        path = directory / fname
        text = path.read_text(encoding="utf-8")
        if _PRAGMA_ONCE_RE.search(text):
            if fname in seen:
                return ""
            seen.add(fname)
            text = _PRAGMA_ONCE_RE.sub("", text)

        def repl(m: re.Match) -> str:
            return f"// begin {m.group(1)}\n{expand(m.group(1), stack + (fname,))}\n// end {m.group(1)}"

        return _INCLUDE_RE.sub(repl, text)

    return expand(name, ())


@functools.lru_cache(maxsize=None)
def _source(name: str, directory: str) -> str:
    return amalgamate(name, Path(directory))


def source_digest(name: str) -> str:
    return hashlib.sha256(_source(name, str(kernel_dir())).encode()).hexdigest()[:16]


#: Compiled modules, kept for the process's life (kernels launched from them may be in flight).
_modules: dict[tuple, object] = {}
_MODULES_LOCK = ForkSafeLock()


def get_module(name: str, options: tuple[str, ...] = NVRTC_OPTIONS):
    """The compiled :class:`cupy.RawModule` of ``name``, cached per file,
    options, source text and device."""
    import cupy

    device = cupy.cuda.Device().id
    src = _source(name, str(kernel_dir()))
    key = (name, tuple(options), hashlib.sha256(src.encode()).digest(), device)
    mod = _modules.get(key)
    if mod is None:
        with _MODULES_LOCK:  # one module per key: a second one would be dropped (and unloaded) by the dict
            mod = _modules.get(key)
            if mod is None:
                mod = _modules[key] = cupy.RawModule(code=src, options=tuple(options))
    return mod


def get_kernel(name: str, function: str, options: tuple[str, ...] = NVRTC_OPTIONS):
    """One ``extern "C"`` kernel of ``name`` as a :class:`cupy.RawKernel`."""
    if function not in KERNEL_SOURCES.get(name, ()):
        raise KeyError(f"{function!r} is not an entry point of {name}")
    return get_module(name, options).get_function(function)
