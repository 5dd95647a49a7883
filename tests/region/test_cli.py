"""``gtsamples region {info,read,build,gc}``."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from gtsamples.cli import main
from gtsamples.region import create_region, open_region

from ..conftest import assert_tables_equal
from .conftest import REGION_ID, make_sst_table, oracle


@pytest.fixture
def root(tmp_path):
    rng = np.random.default_rng(51)
    r = create_region(tmp_path, REGION_ID)
    tables = [make_sst_table(rng, rows=200, ids=[(1, 5), (1, 6), (2, 5)]) for _ in range(2)]
    for t in tables:
        r.add_sst(t)
    return str(tmp_path), tables


def test_cli_build_info_read_gc(root, capsys, tmp_path):
    root, tables = root
    rid = str(REGION_ID)
    assert main(["region", "build", root, rid, "--workers", "2"]) == 0
    assert "published 2 artifact(s)" in capsys.readouterr().out
    assert main(["region", "build", root, rid]) == 0
    assert "published 0 artifact(s)" in capsys.readouterr().out
    assert main(["region", "info", root, rid, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["ssts"] == 2 and info["covered_ssts"] == 2 and info["catalog_version"] == 4
    assert main(["region", "info", root, rid]) == 0
    assert "2 covered by artifacts" in capsys.readouterr().out

    out = str(tmp_path / "one.parquet")
    assert main(["region", "read", root, rid, "--series", "1:5", "--series", "2:5", "--start", "3000",
                 "--end", "40000", "--columns", "ts,v", "-o", out]) == 0
    got = pq.read_table(out)
    want = oracle(tables, ["ts", "v"], [(1, 5), (2, 5)], None, 3000, 40000)
    assert_tables_equal(got, want.cast(got.schema))
    out = str(tmp_path / "dd.arrow")
    assert main(["region", "read", root, rid, "--table", "1", "--dedup", "-o", out]) == 0
    with pa.OSFile(out, "rb") as f:
        got = pa.ipc.open_file(f).read_all()
    want = open_region(root, REGION_ID).read(tables=[1], dedup=True)
    assert_tables_equal(got.cast(want.schema), want)
    out = str(tmp_path / "all.csv")
    assert main(["region", "read", root, rid, "-o", out]) == 0
    assert pcsv.read_csv(out).num_rows == sum(t.num_rows for t in tables)

    assert main(["region", "build", root, rid, "--all"]) == 0
    capsys.readouterr()
    assert main(["region", "gc", root, rid, "--grace", "0", "--expire-versions"]) == 0
    assert "2 generation(s)" in capsys.readouterr().out
    assert main(["region", "gc", root, rid, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["removed_generations"] == []


def test_cli_errors(root, capsys):
    root, _ = root
    assert main(["region", "info", root, "999"]) == 1
    assert "no catalog" in capsys.readouterr().err
    assert main(["region", "read", root, str(REGION_ID), "--columns", "nope", "-o", "x.parquet"]) == 2
    assert main(["region", "read", root, str(REGION_ID), "--series", "zz", "-o", "x.parquet"]) == 2


def test_info_prints_time_ranges_and_read_takes_iso_bounds(root, capsys, tmp_path):
    root, tables = root
    rid = str(REGION_ID)
    assert main(["region", "info", root, rid]) == 0
    lines = capsys.readouterr().out.splitlines()

    def iso(v):  # numpy's rendering, independent of gtsamples.timebounds
        return np.datetime_as_string(np.datetime64(v, "ms"), timezone="UTC")

    ts = [t["ts"].cast(pa.int64()).to_numpy() for t in tables]
    lo, hi = min(int(x.min()) for x in ts), max(int(x.max()) for x in ts)
    assert f"  time {iso(lo)} .. {iso(hi)}  [{lo}, {hi}] milliseconds" in lines
    region = open_region(root, REGION_ID)
    for sst, x in zip(region.ssts, ts):
        i = next(k for k, line in enumerate(lines) if line.startswith(f"  {sst.file_id}  rows"))
        assert f"rows {sst.rows:>12,}  size {sst.size:>14,}" in lines[i]
        assert lines[i + 1] == f"    time {iso(int(x.min()))} .. {iso(int(x.max()))}  [{x.min()}, {x.max()}] milliseconds"

    a, b = str(tmp_path / "a.arrow"), str(tmp_path / "b.arrow")
    assert main(["region", "read", root, rid, "--start", "3000", "--end", "40000", "-o", a]) == 0
    assert main(["region", "read", root, rid, "--start", "1970-01-01T00:00:03Z", "--end", "1970-01-01T01:00:40+01:00",
                 "-o", b]) == 0
    with pa.OSFile(a, "rb") as fa, pa.OSFile(b, "rb") as fb:
        want, got = pa.ipc.open_file(fa).read_all(), pa.ipc.open_file(fb).read_all()
    assert want.num_rows > 0
    assert_tables_equal(got, want)
    capsys.readouterr()
    assert main(["region", "read", root, rid, "--start", "1970-02-30", "-o", b]) == 2
    assert "argument --start: expected an integer in the timestamp unit or an ISO-8601 date-time: '1970-02-30': " \
           "not an ISO-8601 date or date-time" in capsys.readouterr().err


def test_info_without_rows_prints_no_time(tmp_path, capsys):
    r = create_region(tmp_path, REGION_ID)
    assert main(["region", "info", str(tmp_path), str(REGION_ID)]) == 0
    assert "  time " not in capsys.readouterr().out
    r.add_sst(make_sst_table(np.random.default_rng(5), rows=0))
    assert main(["region", "info", str(tmp_path), str(REGION_ID)]) == 0
    out = capsys.readouterr().out
    assert "1 SSTs, 0 rows" in out and "  time " not in out


def test_cli_build_compression_none(root, capsys):
    root, tables = root
    rid = str(REGION_ID)
    assert main(["region", "build", root, rid, "--compression", "none"]) == 0
    capsys.readouterr()
    r = open_region(root, REGION_ID)
    sizes = {e.file_id: e.file_size for e in r.artifacts}
    assert len(sizes) == 2
    got = r.read()
    assert_tables_equal(got, oracle(tables, None, None, None, None, None).cast(got.schema))
    assert main(["region", "build", root, rid, "--all"]) == 0  # the default: Zstd where smaller
    capsys.readouterr()
    r2 = open_region(root, REGION_ID)
    assert_tables_equal(r2.read(), got)
    assert all(e.file_size < sizes[e.file_id] for e in r2.artifacts)
    assert main(["region", "build", root, rid, "--all", "--compression-level", "23"]) == 2
    assert "compression_level: 23 is out of range" in capsys.readouterr().err
