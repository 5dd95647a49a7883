"""The `gtsamples` command line: exit codes, outputs, and the demo."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

import gtsamples as gs
from gtsamples.cli import main

from .conftest import DATA, assert_tables_equal

VEC = DATA / "vectors" / "v02_basic_every_encoding"


def _gen_dir(vec):
    entry = json.loads((vec / "entry.json").read_text())
    return vec / "store" / entry["objects"][0]["path"].rsplit("/", 1)[0]


def test_inspect_text_and_json(capsys):
    assert main(["inspect", str(_gen_dir(VEC))]) == 0
    out = capsys.readouterr().out
    assert "17 rows" in out and "depth 1" in out and "timestamp:enc2/raw" in out
    assert main(["inspect", str(VEC / "store"), "--entry", str(VEC / "entry.json"), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["rows"] == 17 and s["parts"][0]["depth"] == 1


def test_inspect_prints_time_bounds_as_utc_date_times_beside_the_integers(capsys):
    g3 = DATA / "golden" / "g3_multipart"  # nanosecond unit, bounds on both sides of the epoch
    assert main(["inspect", str(g3 / "store"), "--entry", str(g3 / "entry.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    m = gs.open_artifact(g3 / "store", entry=json.loads((g3 / "entry.json").read_text())).manifest
    assert m.timestamp.unit == "nanosecond"

    def iso(v):  # numpy's rendering, an oracle independent of gtsamples.timebounds
        return np.datetime_as_string(np.datetime64(v, "ns"), timezone="UTC")

    lo, hi = min(p.min_timestamp for p in m.files), max(p.max_timestamp for p in m.files)
    assert f"  time {iso(lo)} .. {iso(hi)}  [{lo}, {hi}] nanoseconds" in lines
    assert "  time 1969-12-31T23:59:59.999980000Z .. 1970-01-01T00:00:00.000209007Z  [-20000, 209007] nanoseconds" in lines
    for p in m.files:
        i = next(k for k, line in enumerate(lines) if line.startswith(f"  part {p.part_id}:"))
        assert lines[i + 1] == f"    time {iso(p.min_timestamp)} .. {iso(p.max_timestamp)}  " \
                               f"[{p.min_timestamp}, {p.max_timestamp}] nanoseconds"


def test_inspect_of_an_artifact_without_rows_prints_no_time(tmp_path, capsys):
    t = ipc.open_file(str(VEC / "expected.arrow")).read_all().slice(0, 0)
    entry = gs.write_artifact(t, tmp_path, region_id=42, source_file_id="5a3c0000-0000-4000-8000-00000000000a",
                              timestamp_column_id=10, field_column_ids=[11, 12])
    (tmp_path / "entry.json").write_text(json.dumps(entry.to_dict()))
    assert main(["inspect", str(tmp_path), "--entry", str(tmp_path / "entry.json")]) == 0
    out = capsys.readouterr().out
    assert "0 rows in 0 blocks, 0 part(s)" in out and "  time " not in out


def test_read_takes_iso_bounds_like_the_api(tmp_path, capsys):
    """--start/--end: an integer in the manifest unit, or an ISO-8601 date-time (UTC unless offset)."""
    as_int, as_iso = tmp_path / "int.arrow", tmp_path / "iso.arrow"
    assert main(["read", str(_gen_dir(VEC)), "--start", "100", "--end", "201", "-o", str(as_int)]) == 0
    assert main(["read", str(_gen_dir(VEC)), "--start", "1970-01-01T00:00:00.100Z",
                 "--end", "1970-01-01T02:00:00.2001+02:00", "-o", str(as_iso)]) == 0  # 200.1 ms: rounded up to 201
    want = ipc.open_file(str(as_int)).read_all()
    assert want.num_rows > 0
    assert_tables_equal(ipc.open_file(str(as_iso)).read_all(), want)
    assert_tables_equal(want, gs.open_artifact(_gen_dir(VEC)).read(start="1970-01-01T00:00:00.1", end=201))
    capsys.readouterr()
    assert main(["read", str(_gen_dir(VEC)), "--start", "1970-13-01", "-o", str(as_iso)]) == 2
    err = capsys.readouterr().err
    assert "argument --start: expected an integer in the timestamp unit or an ISO-8601 date-time: " \
           "'1970-13-01': not an ISO-8601 date or date-time" in err
    assert main(["read", str(_gen_dir(VEC)), "--end", "tomorrow", "-o", str(as_iso)]) == 2
    assert "argument --end: expected an integer" in capsys.readouterr().err
    # expanded years are not taken (ISO-8601 needs an agreement for them; Arrow reads 0000..9999)
    assert main(["read", str(_gen_dir(VEC)), "--end", "+300000000-01-01", "-o", str(as_iso)]) == 2
    assert "'+300000000-01-01': not an ISO-8601 date or date-time" in capsys.readouterr().err


def test_validate_exit_codes(tmp_path, capsys):
    assert main(["validate", str(_gen_dir(VEC))]) == 0
    bad = tmp_path / "gen"
    shutil.copytree(_gen_dir(VEC), bad)
    part = bad / "part-0.samples"
    b = bytearray(part.read_bytes())
    b[40] ^= 0xFF  # inside the column area: a chunk checksum fails
    part.write_bytes(bytes(b))
    assert main(["validate", str(bad)]) == 1
    assert "INVALID: CorruptArtifactError" in capsys.readouterr().err
    assert main(["validate"]) == 2  # usage error
    assert main(["frobnicate"]) == 2


@pytest.mark.parametrize("ext", [".parquet", ".arrow", ".csv"])
def test_read_selection_to_file(tmp_path, ext):
    out = tmp_path / f"out{ext}"
    rc = main(["read", str(_gen_dir(VEC)), "--series", "1:101", "--start", "100", "--end", "201",
               "--no-progress", "-o", str(out)])
    assert rc == 0
    want = ipc.open_file(str(VEC / "query1.arrow")).read_all()
    if ext == ".parquet":
        assert_tables_equal(pq.read_table(out), want)
    elif ext == ".arrow":
        assert_tables_equal(ipc.open_file(str(out)).read_all(), want)
    else:
        assert len(out.read_text().strip().splitlines()) == want.num_rows + 1


def test_read_columns_and_bad_extension(tmp_path):
    out = tmp_path / "o.arrow"
    assert main(["read", str(_gen_dir(VEC)), "--columns", "ts,w", "-o", str(out)]) == 0
    t = ipc.open_file(str(out)).read_all()
    assert t.schema.names == ["ts", "w"] and t.num_rows == 17
    assert main(["read", str(_gen_dir(VEC)), "-o", str(tmp_path / "o.txt")]) == 2
    assert main(["read", str(_gen_dir(VEC)), "--columns", "nope", "-o", str(out)]) == 2
    assert main(["read", str(_gen_dir(VEC)), "--series", "1-101", "-o", str(out)]) == 2


def test_build_from_parquet_round_trips(tmp_path, capsys):
    want = ipc.open_file(str(VEC / "expected.arrow")).read_all()
    src = tmp_path / "sst.parquet"
    pq.write_table(want, src)
    fid = "5a3c0000-0000-4000-8000-00000000000a"
    gen = "5a3c0000-0000-4000-8000-00000000000b"
    rc = main(["build", str(src), str(tmp_path / "store"), "--region-id", "42", "--file-id", fid,
               "--generation", gen, "--row-limit", "4", "--no-progress"])
    assert rc == 0
    entry = json.loads(capsys.readouterr().out)
    assert entry["generation"] == gen and entry["region_id"] == 42
    art = gs.open_artifact(tmp_path / "store", entry=entry)
    assert_tables_equal(art.read(), want)
    # the same generation again is refused, with a usage-style error (exit 2)
    assert main(["build", str(src), str(tmp_path / "store"), "--region-id", "42", "--file-id", fid,
                 "--generation", gen]) in (1, 2)


def test_build_compression_options(tmp_path, capsys):
    from .write import _parse
    from .write.helpers import series_table

    want = series_table(6, 300, 2, null_frac=0.1, seed=3)
    src = tmp_path / "sst.parquet"
    pq.write_table(want, src)
    fid = "5a3c0000-0000-4000-8000-00000000000a"
    comps = {}
    for opts in (["--compression", "none"], ["--compression-level", "-5"], []):
        store = tmp_path / ("store" + "".join(opts))
        assert main(["build", str(src), str(store), "--region-id", "42", "--file-id", fid, "--no-progress",
                     *opts]) == 0
        entry = json.loads(capsys.readouterr().out)
        assert_tables_equal(gs.open_artifact(store, entry=entry).read(), want)
        _, parts = _parse.read_dir(str(store / entry["objects"][0]["path"].rsplit("/", 1)[0]))
        comps[" ".join(opts)] = {int(c.ref["compression"]) for p in parts for b in p.blocks for c in b.chunks}
    assert comps == {"--compression none": {0}, "--compression-level -5": {0, 1}, "": {0, 1}}
    # bad values: a usage error (argparse) and the writer's own message, both exit 2
    assert main(["build", str(src), str(tmp_path / "x"), "--region-id", "42", "--file-id", fid,
                 "--compression", "lz4"]) == 2
    assert main(["build", str(src), str(tmp_path / "x"), "--region-id", "42", "--file-id", fid,
                 "--compression-level", "0", "--no-progress"]) == 2
    assert "compression_level: 0 is not a level" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").rglob("manifest.json"))


def test_module_entry_point_runs_demo_small():
    r = subprocess.run([sys.executable, "-m", "gtsamples", "demo", "--series", "5", "--rows-per-series", "300",
                        "--device", "cpu"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "1,500" in r.stdout and "bytes/sample" in r.stdout and "M rows/s" in r.stdout
