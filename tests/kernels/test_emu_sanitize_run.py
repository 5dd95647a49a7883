"""``make kernels-sanitize``'s driver (tests/kernels/emu/sanitize.py): the
environment of its sanitized processes and the count it prints as
``sanitizer reports: N``.  (The runs themselves are that target.)"""

from __future__ import annotations

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


@pytest.mark.parametrize("build", ["address", "thread"])
def test_reports_count_runtime_reports_and_emulator_faults(build, tmp_path):
    run = sanitize.Run(build, "x", [], log_dir=tmp_path)
    assert run.reports() == (0, 0)
    mark = sanitize.REPORT_MARK[build]
    (tmp_path / "san.101").write_text(f"=={mark}: one\n...\n=={mark}: two\n")
    (tmp_path / "san.102").write_text(f"{mark}: three\n")
    (tmp_path / "faults.log").write_text("k, block (0, 0), thread 1: misaligned address\nk2: deadlock\n")
    assert run.reports() == (3, 2)
    other = sanitize.REPORT_MARK["thread" if build == "address" else "address"]
    (tmp_path / "san.103").write_text(other)  # the other runtime's mark is not this build's report
    assert run.reports() == (3, 2)
