"""The planted faults of ``make kernels-sanitize`` (tests/kernels/plants/):
each still applies to this tree's kernels, names a build that runs and tests
that exist, and together they cover every class of fault the emulator claims
to catch.  (Whether each is *reported* is that target's job: it compiles a
sanitized library per plant.)"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.kernels.emu import sanitize

PATCHES = sorted(sanitize.PLANTS.glob("*.patch"))
needs_patch = pytest.mark.skipif(shutil.which("patch") is None, reason="no patch(1)")


def test_every_class_has_a_plant():
    builds = {sanitize.plant_header(p)["build"] for p in PATCHES}
    assert len(PATCHES) >= 12 and builds == {"address", "thread", "initcheck"}
    text = " ".join(sanitize.plant_header(p)["plant"] for p in PATCHES)
    for what in ("past an output", "misaligned", "skip", "mask leaves out", "half-warp", "shared-memory race",
                 "each arm", "__shared__", "without its reset", "`empty`", "previous chunk", "status word"):  # fmt: skip
        assert what in text, what


@needs_patch
@pytest.mark.parametrize("patch", PATCHES, ids=[p.stem for p in PATCHES])
def test_plant_applies_to_this_tree(patch, tmp_path):
    h = sanitize.plant_header(patch)
    assert h["build"] in sanitize.REPORT_MARK
    for path in h["tests"].split(" -k ")[0].split():
        assert (sanitize.ROOT / path).is_file(), path
    kdir = sanitize.apply_plant(patch, tmp_path / "kernels")
    changed = subprocess.run(["diff", "-r", "-q", str(sanitize.ROOT / "kernels"), str(kdir)], capture_output=True,
                             text=True).stdout.splitlines()  # fmt: skip
    assert len(changed) == 1, changed  # one file, changed


@needs_patch
def test_a_stale_plant_is_an_error(tmp_path):
    bad = tmp_path / "stale.patch"
    bad.write_text("Plant: x\nBuild: address\nTests: tests/kernels/test_plants.py\n\n--- a/gts_scan.cuh\n"
                   "+++ b/gts_scan.cuh\n@@ -1,1 +1,1 @@\n-no such line\n+another line\n")  # fmt: skip
    with pytest.raises(RuntimeError, match="does not apply"):
        sanitize.apply_plant(bad, tmp_path / "kernels")
