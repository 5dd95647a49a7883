"""GPU tests: marked ``gpu`` and skipped (never passed) without a usable GPU.

The test modules import without CuPy (tests take CuPy from the ``cp``
fixture), so they collect everywhere and skip per test: collection here shows
what a GPU machine would run (``benchmarks/device_check.sh --dry-run``).
The marker is registered in pyproject.toml too.
"""

import os

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU with CuPy (and libnvcomp for Zstd); skipped otherwise")


def _gpu_reason() -> str | None:
    try:
        import cupy
    except Exception as e:  # noqa: BLE001
        return f"CuPy not importable ({e.__class__.__name__})"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
    except Exception as e:  # noqa: BLE001
        return f"no CUDA device ({e.__class__.__name__})"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _gpu_reason()
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.gpu)
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"GPU test: {reason}"))


@pytest.fixture(scope="session")
def cp():
    """The CuPy module, imported when a test runs (items skip above without it)."""
    import cupy

    return cupy
