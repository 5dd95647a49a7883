"""gs.arrow_dataset called the ways pyarrow allows but the dataset does not serve: a clear error, never a crash."""

import json
import os
import subprocess
import sys
import textwrap

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

import gtsamples as gs
from tests.conftest import assert_tables_equal

# Each call is made in a child process: before the fix every one of them dereferenced the
# null C++ dataset behind the SamplesDataset and killed the process (SIGSEGV).
_CHILD = textwrap.dedent("""
    import json, sys
    import pyarrow.acero as ac
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    import gtsamples as gs

    root, entry = sys.argv[1], json.loads(sys.argv[2])
    d = gs.arrow_dataset(gs.open_artifact(root, entry=entry))
    calls = {
        "Scanner.from_dataset": lambda: ds.Scanner.from_dataset(d).to_table(),
        "dataset([d, d])": lambda: ds.dataset([d, d]).to_table(),
        "acero scan": lambda: ac.Declaration("scan", ac.ScanNodeOptions(d)).to_table(),
        "sort_by": lambda: d.sort_by("ts").to_table(),
        "join": lambda: d.join(d, "ts").to_table(),
        "replace_schema": lambda: d.replace_schema(d.schema),
        "get_fragments": lambda: list(d.get_fragments()),
        "files": lambda: d.files,
    }
    for name, call in calls.items():
        try:
            call()
            print(name, "returned", flush=True)
        except NotImplementedError as e:
            print(name, "refused", "scanner()" in str(e), flush=True)
        except Exception as e:
            print(name, "raised", type(e).__name__, flush=True)
""")


def test_pyarrow_dataset_machinery_is_refused_not_crashed(art_dir):
    root, entry = art_dir
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [os.path.dirname(gs.__path__[0]),
                                                                     os.environ.get("PYTHONPATH", "")] if p))
    r = subprocess.run([sys.executable, "-c", _CHILD, root, json.dumps(entry.to_dict())], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-2000:])
    lines = r.stdout.splitlines()
    assert len(lines) == 8 and all(line.endswith("refused True") for line in lines), r.stdout


def test_filter_restricts_the_rows_and_combines_with_a_scan_filter(art):
    whole = art.read()
    d = gs.arrow_dataset(art, max_bytes=16 << 10)
    one = d.filter(pc.field("__table_id") == 1)
    assert isinstance(one, gs.integrations.dataset.SamplesDataset) and one.schema == d.schema
    assert_tables_equal(one.to_table(), whole.filter(pc.field("__table_id") == 1))
    both = one.filter(pc.field("cpu_usage") > 50)
    want = whole.filter((pc.field("__table_id") == 1) & (pc.field("cpu_usage") > 50))
    assert_tables_equal(both.to_table(), want)
    assert one.count_rows(filter=pc.field("cpu_usage") > 50) == want.num_rows > 0
    assert_tables_equal(d.to_table(), whole)  # the original is unchanged
    import pickle

    assert_tables_equal(pickle.loads(pickle.dumps(both)).to_table(), want)
    with pytest.raises(TypeError, match="Expression"):
        d.filter("__table_id = 1")


@pytest.mark.parametrize("columns", ["ts", b"ts", 3])
def test_columns_must_be_a_list_of_names(art, columns):
    d = gs.arrow_dataset(art)
    with pytest.raises(TypeError, match="columns must be a list of column names"):  # "ts" was read as 't', 's'
        d.to_table(columns=columns)
    assert d.to_table(columns=("ts",)).schema.names == ["ts"]  # any sequence of names


def test_dataset_over_a_region_without_ssts(tmp_path):
    empty = gs.arrow_dataset(gs.create_region(str(tmp_path), 9))
    assert empty.count_rows() == 0  # was an IndexError
    assert empty.to_table(columns=[]).num_rows == 0
    assert empty.to_table().num_rows == 0 and empty.schema == pa.schema([])
    assert isinstance(empty, ds.Dataset)
