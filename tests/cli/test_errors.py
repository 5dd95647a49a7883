"""Bad arguments and paths on the command line: one ``error:`` line on stderr and a
non-zero exit status (2 for a bad argument or path), never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

import gtsamples as gs
from gtsamples import cli

from ..region.conftest import REGION_ID, make_sst_table

FILE_ID = "00000000-0000-4000-8000-00000000beef"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """An artifact store (root, entry file, generation directory), its source SST and a region."""
    root = tmp_path_factory.mktemp("cli-errors")
    table = make_sst_table(np.random.default_rng(3), rows=600, series=3)
    entry = gs.write_artifact(table, root / "store", region_id=7, source_file_id=FILE_ID, timestamp_column_id=0,
                              field_column_ids=[1, 2], row_limit=50)
    (root / "entry.json").write_text(json.dumps(entry.to_dict()))
    pq.write_table(table, root / "sst.parquet")
    r = gs.region.create_region(root / "regions", REGION_ID)
    r.add_sst(table)
    return {"root": root, "store": str(root / "store"), "entry": str(root / "entry.json"),
            "gen": gs.open_artifact(root / "store", entry=entry).location, "sst": str(root / "sst.parquet"),
            "regions": str(root / "regions")}


def _fails(capsys, argv, code=2):
    """Run ``argv``: its exit status is ``code`` and stderr one ``error:`` line, returned."""
    assert cli.main(argv) == code
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def test_entry_that_is_a_directory_or_not_json(store, capsys):
    # a directory raised IsADirectoryError out of main (a traceback)
    err = _fails(capsys, ["inspect", store["store"], "--entry", str(store["root"])])
    assert err == f"error: --entry {store['root']}: Is a directory"
    # a binary file said only "'utf-8' codec can't decode byte ...", naming no file
    for cmd in ("inspect", "validate"):
        err = _fails(capsys, [cmd, store["store"], "--entry", store["sst"]])
        assert err.startswith(f"error: --entry {store['sst']}: not a JSON catalog entry")
    err = _fails(capsys, ["inspect", store["store"], "--entry", str(store["root"] / "missing.json")])
    assert err.endswith("missing.json: No such file or directory")
    assert cli.main(["inspect", store["store"], "--entry", store["entry"]]) == 0


def test_build_into_a_file_or_from_a_missing_source(store, capsys):
    # OUT_DIR a file raised NotADirectoryError out of main (a traceback)
    argv = ["build", store["sst"], store["sst"], "--region-id", "7", "--file-id", FILE_ID, "--no-progress"]
    assert _fails(capsys, argv) == f"error: {store['sst']}/7: Not a directory"
    missing = str(store["root"] / "nope.parquet")  # the message was the bare path
    argv = ["build", missing, str(store["root"] / "out"), "--region-id", "7", "--file-id", FILE_ID, "--no-progress"]
    assert _fails(capsys, argv) == f"error: {missing}: no such file or directory"


@pytest.mark.parametrize("region", [False, True])
def test_output_that_is_a_directory_or_in_a_missing_one(store, tmp_path, capsys, region):
    head = ["region", "read", store["regions"], str(REGION_ID)] if region else ["read", store["gen"]]
    (tmp_path / "d.parquet").mkdir()
    # a directory was found only when the finished file was renamed onto it (IsADirectoryError, a traceback)
    err = _fails(capsys, head + ["--no-progress", "-o", str(tmp_path / "d.parquet")])
    assert err == f"error: output {str(tmp_path / 'd.parquet')!r} is a directory"
    out = tmp_path / "missing" / "o.arrow"  # named pyarrow's temporary .part file
    err = _fails(capsys, head + ["--no-progress", "-o", str(out)])
    assert err == f"error: output {str(out)!r}: directory {str(out.parent)!r} does not exist"
    assert os.listdir(tmp_path) == ["d.parquet"] and not os.listdir(tmp_path / "d.parquet")


@pytest.mark.parametrize("region", [False, True])
def test_columns_naming_no_column_and_spaces(store, tmp_path, capsys, region):
    head = ["region", "read", store["regions"], str(REGION_ID)] if region else ["read", store["gen"]]
    out = tmp_path / "o.parquet"
    for bad in (",", " , ", ""):  # "," wrote a table of no columns (artifact) after decoding every block
        err = _fails(capsys, head + ["--columns", bad, "--no-progress", "-o", str(out)])
        assert f"--columns {bad!r} names no column" in err
    assert not out.exists()
    # spaces around names are dropped by both reads (the artifact read said "unknown column ' v'")
    assert cli.main(head + ["--columns", "ts, v", "--no-progress", "-o", str(out)]) == 0
    assert pq.read_table(out).schema.names == ["ts", "v"]


def test_max_bytes_beyond_int64_is_a_usage_error(store, tmp_path, capsys):
    # 99999999999999999999999G raised OverflowError from the reader (a traceback)
    for bad in ("99999999999999999999999G", str(1 << 63), "4294967297G"):
        assert cli.main(["read", store["gen"], "--max-bytes", bad, "-o", str(tmp_path / "o.arrow")]) == 2
        assert "argument --max-bytes: at most 4294967296G (2**62 bytes)" in capsys.readouterr().err
    assert cli.main(["read", store["gen"], "--max-bytes", "4294967296G", "--no-progress",
                     "-o", str(tmp_path / "o.arrow")]) == 0


@pytest.mark.parametrize("argv", [["--series", "0"], ["--series", "-5"], ["--rows-per-series", "-1"],
                                  ["--rows-per-series", "x"]])
def test_demo_sizes_must_be_positive(capsys, argv):
    # --series 0 raised IndexError (a traceback), -5 numpy's "negative dimensions are not allowed"
    assert cli.main(["demo"] + argv) == 2
    assert f"argument {argv[0]}: expected a positive integer, got {argv[1]!r}" in capsys.readouterr().err


def test_module_prints_no_traceback(store):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [os.path.dirname(gs.__path__[0]),
                                                                     os.environ.get("PYTHONPATH", "")] if p))
    r = subprocess.run([sys.executable, "-m", "gtsamples", "inspect", store["store"], "--entry", str(store["root"])],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2 and r.stderr == f"error: --entry {store['root']}: Is a directory\n", r.stderr


def test_url_whose_file_system_is_not_installed(capsys):
    # gcs:// without gcsfs raised fsspec's ImportError out of main (a traceback); the store
    # now raises a StorageError (exit 1: the URL cannot be read) naming the URL and the package
    import importlib.util

    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed")
    for argv in (["inspect", "gcs://bucket/gen"], ["region", "info", "gcs://bucket", "5"]):
        err = _fails(capsys, argv, code=1)
        assert err.startswith("error: StorageError: gcs://bucket") and "gcsfs" in err, err


def test_interrupt_is_one_line_and_leaves_no_output(store, tmp_path, capsys, monkeypatch):
    # Ctrl-C during a read printed KeyboardInterrupt's traceback
    from gtsamples.cli import common

    def interrupted(self, table):
        raise KeyboardInterrupt

    monkeypatch.setattr(common.StreamWriter, "write", interrupted)
    assert cli.main(["read", store["gen"], "--no-progress", "-o", str(tmp_path / "o.parquet")]) == 130
    assert capsys.readouterr().err == "interrupted\n"
    assert os.listdir(tmp_path) == []
