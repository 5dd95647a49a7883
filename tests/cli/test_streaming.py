"""The reading commands stream: ``gtsamples read`` and ``gtsamples region read``
write Parquet, Arrow IPC or CSV batch by batch from ``iter_batches``
(``--max-bytes``), the progress bar advances per batch, a failed read leaves
no output; one command table, which the library layers never import."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

import gtsamples as gs
from gtsamples import cli
from gtsamples.cache import PageCache
from gtsamples.cli import common

from ..conftest import assert_tables_equal
from ..region.conftest import REGION_ID, flip_byte, make_sst_table

FILE_ID = "00000000-0000-4000-8000-00000000cafe"


@pytest.fixture(scope="module")
def artifact_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli-stream")
    table = make_sst_table(np.random.default_rng(21), rows=3000, series=5, ts_range=1000)
    entry = gs.write_artifact(table, root, region_id=7, source_file_id=FILE_ID, timestamp_column_id=0,
                              field_column_ids=[1, 2], row_limit=50)
    return gs.open_artifact(root, entry=entry, cache=PageCache()).location


def _read_back(path) -> pa.Table:
    ext = os.path.splitext(str(path))[1]
    if ext == ".parquet":
        return pq.read_table(path)
    if ext == ".csv":
        return pcsv.read_csv(path)
    return ipc.open_file(str(path)).read_all()


def _count_batches(monkeypatch):
    """Count the batches ``write_stream`` writes (and their rows)."""
    seen = []
    real = common.StreamWriter.write

    def spy(self, table):
        seen.append(table.num_rows)
        return real(self, table)

    monkeypatch.setattr(common.StreamWriter, "write", spy)
    return seen


@pytest.mark.parametrize("ext", [".parquet", ".arrow"])
def test_read_streams_batches_to_the_file(artifact_dir, tmp_path, monkeypatch, ext):
    seen = _count_batches(monkeypatch)
    out = tmp_path / f"o{ext}"
    assert cli.main(["read", artifact_dir, "--max-bytes", "4K", "--start", "100000", "--no-progress",
                     "-o", str(out)]) == 0
    want = gs.open_artifact(artifact_dir).read(start=100000)
    assert len(seen) > 5 and sum(seen) == want.num_rows
    assert_tables_equal(_read_back(out), want)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".part")]


def test_csv_output_holds_every_row(artifact_dir, tmp_path):
    out = tmp_path / "o.csv"
    assert cli.main(["read", artifact_dir, "--columns", "__tsid,v", "--max-bytes", "1000", "-o", str(out)]) == 0
    got = pcsv.read_csv(out)
    want = gs.open_artifact(artifact_dir).read(columns=["__tsid", "v"])
    assert got.num_rows == want.num_rows and got.column_names == ["__tsid", "v"]
    assert got.column("__tsid").cast(pa.uint64()).equals(want.column("__tsid"))


def test_progress_bar_counts_rows_per_batch(artifact_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(common, "progress_enabled", lambda args: True)
    from gtsamples.cli import artifact as cli_artifact

    monkeypatch.setattr(cli_artifact, "progress_enabled", lambda args: True)
    import tqdm

    updates = []
    real = tqdm.tqdm.update

    def spy(self, n=1):
        updates.append(n)
        return real(self, n)

    monkeypatch.setattr(tqdm.tqdm, "update", spy)
    assert cli.main(["read", artifact_dir, "--max-bytes", "8192", "-o", str(tmp_path / "o.arrow")]) == 0
    n = gs.open_artifact(artifact_dir).manifest.num_rows
    assert len(updates) > 3 and sum(updates) == n
    err = capsys.readouterr().err
    assert "rows" in err and "MiB" in err


def test_max_bytes_argument_errors(artifact_dir, tmp_path, capsys):
    for bad in ("0", "-3", "lots", "1.5M", ""):
        assert cli.main(["read", artifact_dir, "--max-bytes", bad, "-o", str(tmp_path / "o.arrow")]) == 2
        assert "argument --max-bytes: expected a positive number of bytes" in capsys.readouterr().err
    assert common._max_bytes("64M") == 64 << 20 and common._max_bytes("2KiB") == 2048
    assert common._max_bytes("3g") == 3 << 30 and common._max_bytes("100") == 100


def test_failed_read_leaves_no_output(tmp_path, capsys):
    src = make_sst_table(np.random.default_rng(2), rows=2000, series=3)
    entry = gs.write_artifact(src, tmp_path, region_id=7, source_file_id=FILE_ID, timestamp_column_id=0,
                              field_column_ids=[1, 2], row_limit=40)
    art = gs.open_artifact(tmp_path, entry=entry, cache=PageCache())
    from gtsamples.plan import Selection

    last = art.navigate(Selection())[-1]
    flip_byte(os.path.join(art.location, "part-0.samples"), int(last.page.columns["ref"]["offset"][-1]) + 1)
    out = tmp_path / "o.parquet"
    assert cli.main(["read", art.location, "--max-bytes", "1", "--no-progress", "-o", str(out)]) == 1
    assert "CorruptArtifactError" in capsys.readouterr().err
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if p.endswith(".part")]


def test_bad_extension_is_refused_before_reading(tmp_path, capsys):
    assert cli.main(["read", str(tmp_path / "does-not-exist"), "-o", str(tmp_path / "o.txt")]) == 2
    assert "extension must be .parquet, .arrow or .csv" in capsys.readouterr().err


@pytest.mark.parametrize("ext", [".parquet", ".arrow", ".csv"])
def test_region_read_streams_with_dedup(tmp_path, monkeypatch, ext):
    rng = np.random.default_rng(9)
    r = gs.region.create_region(tmp_path / "store", REGION_ID)
    for k in range(3):
        r.add_sst(make_sst_table(rng, rows=800, ids=[(1, 5), (1, 6), (2, 5)], ts_range=200, seq_base=k))
    r.build(file_ids=[r.ssts[1].file_id])
    seen = _count_batches(monkeypatch)
    out = tmp_path / f"o{ext}"
    assert cli.main(["region", "read", str(tmp_path / "store"), str(REGION_ID), "--dedup", "--max-bytes", "2K",
                     "--no-progress", "-o", str(out)]) == 0
    want = r.read(dedup=True)
    assert len(seen) > 3 and sum(seen) == want.num_rows
    if ext == ".csv":
        assert _read_back(out).num_rows == want.num_rows
    else:
        assert_tables_equal(_read_back(out), want)


def test_one_command_table():
    names = [c.name for c in cli.COMMANDS]
    assert names == ["inspect", "validate", "read", "build", "demo", "warmup", "region"]
    region = next(c for c in cli.COMMANDS if c.name == "region")
    assert [c.name for c in region.subcommands] == ["info", "read", "build", "gc"]
    sub = next(a for a in cli.build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    assert list(sub.choices) == names


def test_the_library_never_imports_the_cli():
    code = ("import sys, gtsamples, gtsamples.region, gtsamples.region.dask, gtsamples.region.stream; "
            "print(sorted(m for m in sys.modules if m.startswith('gtsamples.cli')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_module_and_entry_point_run_the_table(tmp_path):
    out = subprocess.run([sys.executable, "-m", "gtsamples", "region", "info", str(tmp_path), "1"],
                         capture_output=True, text=True)
    assert out.returncode == 1 and "has no catalog" in out.stderr


def _bars(monkeypatch, *modules):
    """Progress on, and the tqdm bars the commands make (their total and final count)."""
    import tqdm

    for m in modules:
        monkeypatch.setattr(m, "progress_enabled", lambda args: True)
    made = []
    real_close = tqdm.tqdm.close

    def close(self):
        made.append((self.total, self.n, str(self)))
        return real_close(self)

    monkeypatch.setattr(tqdm.tqdm, "close", close)
    return made


def test_progress_bar_has_the_plans_total(artifact_dir, tmp_path, monkeypatch, capsys):
    from gtsamples.cli import artifact as cli_artifact

    bars = _bars(monkeypatch, common, cli_artifact)
    n = gs.open_artifact(artifact_dir).manifest.num_rows
    assert cli.main(["read", artifact_dir, "--max-bytes", "8192", "-o", str(tmp_path / "o.arrow")]) == 0
    assert bars[-1][:2] == (n, n) and "100%" in bars[-1][2]
    err = capsys.readouterr().err
    assert "100%" in err and "<" in err  # percentage, elapsed<remaining
    # a time range trims rows of the edge blocks: the total is the planned blocks' rows, the bar ends at 100%
    assert cli.main(["read", artifact_dir, "--start", "100000", "--max-bytes", "8192",
                     "-o", str(tmp_path / "p.arrow")]) == 0
    got = ipc.open_file(str(tmp_path / "p.arrow")).read_all().num_rows
    assert bars[-1][:2] == (got, got) and got < n


def test_region_progress_bar_has_the_plans_total(tmp_path, monkeypatch):
    from gtsamples.cli import region as cli_region

    reg = gs.create_region(str(tmp_path / "r"), REGION_ID)
    rng = np.random.default_rng(3)
    reg.add_sst(make_sst_table(rng, rows=300))
    reg.build()
    reg.add_sst(make_sst_table(rng, rows=200))  # scanned
    bars = _bars(monkeypatch, common, cli_region)
    assert cli.main(["region", "read", str(tmp_path / "r"), str(REGION_ID), "--max-bytes", "2048",
                     "-o", str(tmp_path / "o.parquet")]) == 0
    assert bars[-1][:2] == (reg.num_rows, reg.num_rows) and reg.num_rows == 500
    assert cli.main(["region", "read", str(tmp_path / "r"), str(REGION_ID), "--table", "1",
                     "-o", str(tmp_path / "t.parquet")]) == 0
    got = pq.read_table(str(tmp_path / "t.parquet")).num_rows
    assert bars[-1][:2] == (got, got) and 0 < got < 500
