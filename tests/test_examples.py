"""Every notebook in examples/ runs on a real Jupyter kernel (nbclient + ipykernel).

Each runs twice: with the NAB archive of ``../shared`` (``$GTSAMPLES_SHARED``;
skipped when absent, as in a user's fresh clone) and without it, where it falls
back to the demo's synthetic metrics.  The kernel is this test run's interpreter
(a kernel spec written for ``sys.executable``, checked from inside the kernel),
its working directory and ``TMPDIR`` a scratch directory.  Any cell error fails.
Committed notebooks carry no outputs and no execution counts.
"""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

from .conftest import SHARED

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "examples").glob("*.ipynb"))
KERNEL = "gtsamples-test"
CELL_TIMEOUT_S = 300  # per cell: generous, this machine is shared and its speed varies 10x
# appended to the executed copy: what the kernel is and what the notebook used
PROBE = """
import json as _json, sys as _sys
print("PROBE " + _json.dumps({"executable": _sys.executable, "prefix": _sys.prefix,
                              "nab": NAB is not None, "frame": type(df).__module__.split(".")[0]}))
"""


def test_examples_exist():
    assert [p.name for p in NOTEBOOKS] == ["nab_analytics.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_without_outputs(path):
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [i for i, c in enumerate(nb.cells)
             if c.cell_type == "code" and (c.outputs or c.execution_count is not None)]
    assert not dirty, (f"{path.name}: code cells {dirty} carry outputs or execution counts: clear all outputs "
                       f"before committing (jupyter nbconvert --clear-output --inplace examples/{path.name})")


# the kernel, with faulthandler writing to a file: ipykernel sends fd 2 to the notebook, so a
# kernel that dies would otherwise take its last words with it
LAUNCHER = """
import faulthandler, sys
faulthandler.enable(open(sys.argv.pop(1), "w"), all_threads=True)
from ipykernel import kernelapp
kernelapp.launch_new_instance()
"""


def kernel_spec(tmp_path: pathlib.Path) -> pathlib.Path:
    """A kernel spec for this interpreter in a fresh JUPYTER_PATH entry."""
    d = tmp_path / "jupyter"
    spec = d / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "launch.py").write_text(LAUNCHER)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, str(spec / "launch.py"), str(tmp_path / "kernel-faults.log"),
                 "-f", "{connection_file}"],
        "display_name": "gtsamples tests", "language": "python"}))
    return d


@pytest.mark.parametrize("data", ["nab", "demo"])
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, data, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("matplotlib", reason="the plots extra")
    pytest.importorskip("pandas")
    if data == "nab":
        if not (SHARED / "data" / "nab-real.tar.xz").is_file():
            pytest.skip("../shared/data/nab-real.tar.xz is absent (a user's fresh clone)")
        monkeypatch.setenv("GTSAMPLES_SHARED", str(SHARED))
    else:
        monkeypatch.setenv("GTSAMPLES_SHARED", str(tmp_path / "no-shared"))
    scratch = tmp_path / "cwd"
    scratch.mkdir()
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_spec(tmp_path)))
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))

    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    client = nbclient.NotebookClient(nb, kernel_name=KERNEL, timeout=CELL_TIMEOUT_S, startup_timeout=120,
                                     resources={"metadata": {"path": str(scratch)}})
    try:
        client.execute()
    except nbclient.exceptions.DeadKernelError as e:
        faults = tmp_path / "kernel-faults.log"
        raise AssertionError(f"the kernel died; its faulthandler log:\n{faults.read_text() if faults.exists() else ''}"
                             ) from e
    finally:
        nbformat.write(nb, tmp_path / path.name)  # the executed copy, for a failure's post-mortem

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    probe = [line for o in outputs if o.get("name") == "stdout"
             for line in o.text.splitlines() if line.startswith("PROBE ")]
    assert len(probe) == 1, outputs[-3:]
    seen = json.loads(probe[0][len("PROBE "):])
    assert (seen["executable"], seen["prefix"]) == (sys.executable, sys.prefix)
    assert seen["nab"] == (data == "nab")
    from gtsamples.backends import get_backend

    assert seen["frame"] == ("cudf" if get_backend("auto").name == "gpu" else "pyarrow")
    stderr = "".join(o.text for o in outputs if o.get("name") == "stderr")
    assert "gtsamples" not in stderr, stderr  # e.g. an ArtifactSkippedWarning: the region must be whole
    assert any("image/png" in o.get("data", {}) for o in outputs), "the plot made no image"
