"""The wheel carries every package: pyproject.toml lists them by hand (kernels/ is mapped
into gtsamples.kernels), so a new subpackage missing from the list would install
without it while an editable install -- what the suite runs on -- still finds it
(gtsamples.plan and gtsamples.cli were missing once)."""

from __future__ import annotations

import pathlib

import pytest

tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ (tomllib)")

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_every_package_under_src_is_listed_in_pyproject():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(conf["tool"]["setuptools"]["packages"])
    src = ROOT / "src"
    found = {".".join(p.parent.relative_to(src).parts) for p in src.rglob("__init__.py")}
    assert found, "no packages found under src/"
    assert found - listed == set(), "packages under src/ missing from [tool.setuptools] packages"
    assert listed - found == {"gtsamples.kernels"}, "listed packages that do not exist"
