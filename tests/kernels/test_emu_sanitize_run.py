"""``make kernels-sanitize``'s driver (tests/kernels/emu/sanitize.py): the
environment of its sanitized processes and the count it prints as
``sanitizer reports: N``.  (The runs themselves are that target.)"""

from __future__ import annotations

import os

import pytest

emu = pytest.importorskip("tests.kernels.emu_device")
if emu.compiler() is None:  # pragma: no cover
    pytest.skip("no C++ compiler for the kernel emulator", allow_module_level=True)

from tests.kernels.emu import sanitize  # noqa: E402


@pytest.mark.parametrize("build,runtime,var", [("address", "libasan.so", "ASAN_OPTIONS"),
                                               ("thread", "libtsan.so", "TSAN_OPTIONS")])  # fmt: skip
def test_child_environment(build, runtime, var, tmp_path):
    env = sanitize.child_env(build, tmp_path)
    assert env["LD_PRELOAD"].endswith(runtime) and env["GTS_EMU_SANITIZER"] == build
    assert env["GTS_EMU_FULL"] == "1" and env["GTS_EMU_FAULT_LOG"] == str(tmp_path / "faults.log")
    opts = dict(o.split("=", 1) for o in env[var].split(":"))
    assert opts["log_path"] == str(tmp_path / "san") and opts["halt_on_error"] == "0"
    if build == "address":
        assert opts["detect_leaks"] == "0" and "suppress_equal_pcs" not in opts
        assert "suppress_equal_pcs=0" in sanitize.child_env(build, tmp_path, canary=True)[var]
    else:
        assert opts["ignore_noninstrumented_modules"] == "1" and opts["exitcode"] == "0"


def test_initcheck_environment_has_no_runtime_and_this_trees_kernels(tmp_path, monkeypatch):
    monkeypatch.delenv("GTSAMPLES_KERNEL_DIR", raising=False)
    env = sanitize.child_env("initcheck", tmp_path)
    assert "LD_PRELOAD" not in env or env["LD_PRELOAD"] == os.environ.get("LD_PRELOAD")
    assert env["GTS_EMU_SANITIZER"] == "initcheck" and env["GTS_EMU_FAULT_LOG"] == str(tmp_path / "faults.log")
    assert env["GTSAMPLES_KERNEL_DIR"] == str(sanitize.ROOT / "kernels")
    assert env["PYTHONPATH"].split(os.pathsep)[:2] == [str(sanitize.ROOT / "src"), str(sanitize.ROOT)]
    planted = sanitize.child_env("thread", tmp_path, kernel_dir=tmp_path / "k")
    assert planted["GTSAMPLES_KERNEL_DIR"] == str(tmp_path / "k")


def test_emulator_compiles_the_kernels_of_its_own_tree(monkeypatch, tmp_path):
    monkeypatch.delenv("GTSAMPLES_KERNEL_DIR", raising=False)
    assert emu.kernel_dir() == sanitize.ROOT / "kernels"
    monkeypatch.setenv("GTSAMPLES_KERNEL_DIR", str(tmp_path))
    assert emu.kernel_dir() == tmp_path


@pytest.mark.parametrize("build", ["address", "thread", "initcheck"])
def test_reports_count_runtime_reports_and_emulator_faults(build, tmp_path):
    run = sanitize.Run(build, "x", [], log_dir=tmp_path)
    assert run.reports() == (0, 0)
    mark = sanitize.REPORT_MARK[build]
    if mark is None:  # initcheck: no runtime, every report is an emulator fault
        (tmp_path / "faults.log").write_text("k, block (0, 0), thread 1: uninitialised shared memory\n")
        assert run.reports() == (0, 1)
        return
    (tmp_path / "san.101").write_text(f"=={mark}: one\n...\n=={mark}: two\n")
    (tmp_path / "san.102").write_text(f"{mark}: three\n")
    (tmp_path / "faults.log").write_text("k, block (0, 0), thread 1: misaligned address\nk2: deadlock\n")
    assert run.reports() == (3, 2)
    other = sanitize.REPORT_MARK["thread" if build == "address" else "address"]
    (tmp_path / "san.103").write_text(other)  # the other runtime's mark is not this build's report
    assert run.reports() == (3, 2)
