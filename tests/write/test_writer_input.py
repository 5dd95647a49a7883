"""Writer input hardening, complementing test_validation.py (which covers argument
and schema errors, nulls/NaT in the fixed columns, unknown op types, order, names
and the 1,024-field limit): unwritable destinations and failures in the middle of
a write, nulls hidden in later chunks or behind slices, and odd Arrow layouts.

Every failure must be a clear error naming the path/column, and leave nothing
that looks like an artifact: no manifest.json, no part file, no temporary
directory, no generation directory.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pytest

import gtsamples as gs
from gtsamples.write import write_artifact

from .helpers import GEN, SRC, table

OK = dict(region_id=1, source_file_id=SRC, generation=GEN, timestamp_column_id=0, field_column_ids=[1])
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def artifact_like(root) -> list[str]:
    """Everything under ``root`` that looks like (part of) an artifact."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            if d.startswith(".tmp-") or d == GEN:
                found.append(os.path.join(dirpath, d))
        for f in filenames:
            if f == "manifest.json" or f.endswith(".samples"):
                found.append(os.path.join(dirpath, f))
    return found


# --- unwritable destinations ------------------------------------------------------------------


def test_store_root_is_a_file(tmp_path):
    f = tmp_path / "root"
    f.write_bytes(b"not a directory")
    with pytest.raises(OSError) as ei:
        write_artifact(table(1, 1, [0, 1]), f, **OK)
    assert ei.value.errno in (errno.ENOTDIR, errno.EEXIST)
    assert str(f) in str(ei.value)
    assert f.read_bytes() == b"not a directory"


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_path_component_is_a_file(tmp_path, depth):
    """<root>/<region>, <root>/<region>/samples or .../<source file> exists as a regular file."""
    parts = ["1", "samples", SRC][:depth]
    p = tmp_path.joinpath(*parts)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(b"x")
    with pytest.raises(OSError) as ei:
        write_artifact(table(1, 1, [0, 1]), tmp_path, **OK)
    assert ei.value.errno in (errno.ENOTDIR, errno.EEXIST)
    assert artifact_like(tmp_path) == []
    assert p.read_bytes() == b"x"


def test_generation_path_is_a_file(tmp_path):
    p = tmp_path / "1" / "samples" / SRC / GEN
    p.parent.mkdir(parents=True)
    p.write_bytes(b"x")
    with pytest.raises(FileExistsError):
        write_artifact(table(1, 1, [0, 1]), tmp_path, **OK)
    assert p.read_bytes() == b"x"
    assert os.listdir(p.parent) == [GEN]


def test_destination_in_proc_is_refused():
    root = "/proc/gtsamples-test-store"
    if not os.path.isdir("/proc/self"):
        pytest.skip("no /proc")
    with pytest.raises(OSError):
        write_artifact(table(1, 1, [0, 1]), root, **OK)
    assert not os.path.exists(root)


_FULL_DISK = textwrap.dedent("""
    import os, resource, signal, sys, json
    sys.path.insert(0, os.path.join(sys.argv[2], "src"))
    import numpy as np, pyarrow as pa
    from gtsamples.write import write_artifact
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # EFBIG instead of being killed
    n = 4000
    t = pa.table({"__table_id": pa.array(np.ones(n, np.uint32)), "__tsid": pa.array(np.ones(n, np.uint64)),
                  "ts": pa.array(np.arange(n) * 20 + (np.arange(n) ** 2) % 13, pa.timestamp("ms")),
                  "__sequence": pa.array(np.ones(n, np.uint64)), "__op_type": pa.array(np.ones(n, np.uint8)),
                  "v": pa.array(np.random.default_rng(0).normal(size=n))})
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[3]), resource.RLIM_INFINITY))
    try:
        write_artifact(t, sys.argv[1], region_id=1, source_file_id="@SRC@", generation="@GEN@",
                       timestamp_column_id=0, field_column_ids=[1], row_limit=500)
        print(json.dumps({"outcome": "written"}))
    except OSError as e:
        print(json.dumps({"outcome": type(e).__name__, "errno": e.errno, "msg": str(e)}))
""").replace("@SRC@", SRC).replace("@GEN@", GEN)


@pytest.mark.parametrize("limit", [200, 20_000])
def test_disk_full_mid_write_leaves_nothing(tmp_path, limit):
    """A write that fails with EFBIG (RLIMIT_FSIZE: a full disk in miniature) in the middle
    of a part file: OSError, and no part, manifest or temporary directory is left."""
    r = subprocess.run([sys.executable, "-c", _FULL_DISK, str(tmp_path), REPO, str(limit)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["outcome"] != "written", res
    assert res["errno"] == errno.EFBIG, res
    assert artifact_like(tmp_path) == [], artifact_like(tmp_path)
    # and the same generation can then be written for real
    write_artifact(table(1, 1, [0, 1]), tmp_path, **OK)


def test_fsspec_failure_mid_write_leaves_nothing():
    fsspec = pytest.importorskip("fsspec")
    from fsspec.implementations.memory import MemoryFileSystem

    class Flaky(MemoryFileSystem):
        protocol = "flakymem"
        opened = 0

        def _open(self, path, mode="rb", **kw):
            if "w" in mode:
                Flaky.opened += 1
                if Flaky.opened == 2:
                    raise OSError(errno.EIO, "injected write failure", path)
            return super()._open(path, mode, **kw)

    fsspec.register_implementation("flakymem", Flaky, clobber=True)
    fs = Flaky()
    t = table(1, 1, list(range(40)))
    with pytest.raises(OSError, match="injected"):
        write_artifact(t, "flakymem://store", row_limit=2, max_page_bytes=12 + 220, max_leaves_per_root=2, **OK)
    left = [p for p in fs.find("/store") if p.endswith((".samples", "manifest.json"))]
    assert left == []


# --- input data the schema checks cannot see ---------------------------------------------------


def test_null_in_a_later_chunk_of_a_fixed_column(tmp_path):
    ts = pa.chunked_array([pa.array([0, 1], pa.timestamp("ms")), pa.array([2, None], pa.timestamp("ms"))])
    t = table(1, 1, [0, 1, 2, 3]).set_column(2, "ts", ts)
    with pytest.raises(ValueError, match=r"column 2 'ts' row 3: null value"):
        write_artifact(t, tmp_path, **OK)
    assert os.listdir(tmp_path) == []


def test_null_outside_a_slice_is_not_an_error(tmp_path):
    """The Arrow validity bitmap of a slice starts at an offset: a null before the slice is not in the table."""
    seq = pa.array([None, 5, 5, 5], pa.uint64())
    t = table(1, 1, [9, 0, 1, 2]).set_column(3, "__sequence", seq).slice(1)
    e = write_artifact(t, tmp_path, **OK)
    got = gs.open_artifact(tmp_path, entry=e).read()
    assert got.column("__sequence").to_pylist() == [5, 5, 5]
    assert got.column("ts").cast(pa.int64()).to_pylist() == [0, 1, 2]


def test_field_nulls_behind_a_slice_offset(tmp_path):
    v = pa.array([1.0, None, 3.0, None, 5.0, 6.0, None, 8.0, 9.0, 10.0])
    t = table(1, 1, list(range(10)), fields={"v": v}).slice(3, 6)
    e = write_artifact(t, tmp_path, **OK)
    got = gs.open_artifact(tmp_path, entry=e).read()
    assert got.column("v").to_pylist() == [None, 5.0, 6.0, None, 8.0, 9.0]


def test_out_of_order_across_chunks(tmp_path):
    ts = pa.chunked_array([pa.array([0, 5], pa.timestamp("ms")), pa.array([4, 6], pa.timestamp("ms"))])
    t = table(1, 1, [0, 1, 2, 3]).set_column(2, "ts", ts)
    with pytest.raises(ValueError, match=r"row 2: column 'ts' value 4 follows 5"):
        write_artifact(t, tmp_path, **OK)
    assert os.listdir(tmp_path) == []


def test_dictionary_encoded_fixed_column(tmp_path):
    tid = pa.array([1, 1, 1], pa.uint32()).dictionary_encode()
    t = table(1, 1, [0, 1, 2]).set_column(0, "__table_id", tid)
    with pytest.raises(TypeError, match="column 0 '__table_id'"):
        write_artifact(t, tmp_path, **OK)
    assert os.listdir(tmp_path) == []


def test_large_string_field_type(tmp_path):
    t = table(1, 1, [0, 1], fields={"v": pa.array(["a", "b"])})
    with pytest.raises(TypeError, match="column 5 'v'"):
        write_artifact(t, tmp_path, **OK)
    assert os.listdir(tmp_path) == []


def test_nan_and_nat_distinction(tmp_path):
    """NaN in a field is a value (kept bit for bit); NaT in the timestamp is a null (refused)."""
    bits = np.array([0x7FF8_0000_0000_0001, 0xFFF0_0000_0000_0001], np.uint64)
    v = pa.array(bits.view(np.float64))
    e = write_artifact(table(1, 1, [0, 1], fields={"v": v}), tmp_path, **OK)
    got = gs.open_artifact(tmp_path, entry=e).read().column("v").to_numpy().view(np.uint64)
    np.testing.assert_array_equal(got, bits)
    nat = pa.array(np.array(["NaT", "2024-01-01"], dtype="datetime64[ms]"))
    with pytest.raises(ValueError, match="row 0: null value"):
        write_artifact(table(1, 1, [0, 1]).set_column(2, "ts", nat), tmp_path / "x", **OK)


def test_record_batch_input_and_empty_table(tmp_path):
    rb = table(1, 1, [0, 1, 2]).to_batches()[0]
    e = write_artifact(rb, tmp_path / "rb", **OK)
    assert gs.open_artifact(tmp_path / "rb", entry=e).read().num_rows == 3
    e = write_artifact(table(1, 1, []), tmp_path / "empty", **OK)
    assert gs.open_artifact(tmp_path / "empty", entry=e).read().num_rows == 0
