"""``Artifact.read(..., parts=...)``: reading some parts of an artifact (one Dask
partition per part).  Concatenating the parts' reads gives the whole read; each
part is checked as in a whole read (its first block against the previous
part's last identity, from the manifest), shares the whole read's page cache
entries, and reads nothing of the other parts."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import gtsamples as gs
from gtsamples.cache import PageCache
from gtsamples.plan import Selection

from .conftest import assert_tables_equal
from .corruption import kit
from .corruption.fixtures import FIXTURES, write_fixture

QUERIES = [{}, {"series": [(1, 6)]}, {"tables": [2, 4], "columns": ["ts", "__sequence"]},
           {"start": 1_030_000, "end": 1_100_000}, {"series": [(9, 9)]}]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = {}
    for name in FIXTURES:
        root = tmp_path_factory.mktemp(f"parts-{name}")
        table, entry = write_fixture(name, root)
        out[name] = (table, str(root), entry)
    return out


def _open(written, name, cache=None):
    _table, root, entry = written[name]
    return gs.open_artifact(root, entry=entry, cache=cache if cache is not None else PageCache())


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_parts_concatenate_to_the_whole_read(written, name):
    art = _open(written, name)
    n = len(art.manifest.files)
    for q in QUERIES:
        whole = art.read(**q)
        pieces = [_open(written, name).read(**q, parts=[k]) for k in range(n)]
        assert_tables_equal(pa.concat_tables(pieces), whole)
        assert_tables_equal(art.read(**q, parts=range(n)), whole)


def test_part_rows_and_order(written):
    """Part 1 alone: exactly its rows (it starts inside series (1, 6): ordinal 1 is fine);
    parts given out of order or repeated read in file order."""
    table = written["multi"][0]
    art = _open(written, "multi")
    rows = art.manifest.files.column("num_rows").tolist()
    assert len(rows) == 3
    got = art.read(parts=1)
    assert_tables_equal(got, table.slice(rows[0], rows[1]))
    assert_tables_equal(art.read(parts=[2, 0, 2]), pa.concat_tables([table.slice(0, rows[0]),
                                                                      table.slice(rows[0] + rows[1])]))
    assert art.read(parts=[]).num_rows == 0
    batch, _proj = art.fetch_batch(parts=[2])
    assert set(batch.chunks["part"].tolist()) == {2}
    assert {sl.part for sl in art.navigate(Selection(), parts=[0, 2])} == {0, 2}


def test_bad_part_arguments(written):
    art = _open(written, "multi")
    with pytest.raises(ValueError, match=r"part 3 does not exist: .* has 3 part\(s\)"):
        art.read(parts=[3])
    with pytest.raises(ValueError, match=r"part -1 does not exist"):
        art.read(parts=[-1])
    # (before: np.timedelta64(1) read part 1, and a 0-d array raised numpy's 'iteration over a 0-d array')
    # (bytearray(b"\x01") and memoryview(b"\x00\x02") were read as parts 1, and 0 and 2: their byte values)
    for bad in (["0"], [1.0], [True], True, np.timedelta64(1, "ns"), [np.timedelta64(1, "ns")], np.array(1),
                np.bool_(False), bytearray(b"\x01"), memoryview(b"\x00\x02")):
        with pytest.raises(TypeError, match=r"parts must be part indices"):
            art.read(parts=bad)


def test_part_key_takes_only_part_indices(written):
    """part_key(-1) was numpy's last part (and kept under the key -1), 5 numpy's 'index 5 is
    out of bounds for axis 0', '0' 'no field of name 0'."""
    art = _open(written, "multi")
    assert art.part_keys == [art.part_key(i) for i in range(3)] and art.part_key(np.int64(2)) == art.part_keys[2]
    for bad in (3, -1):
        with pytest.raises(IndexError, match=rf"^part {bad} does not exist: .* has 3 part\(s\)$"):
            art.part_key(bad)
    for bad in ("0", 1.0, True, np.timedelta64(1, "ns")):
        with pytest.raises(TypeError, match=r"^part index must be an integer, not "):
            art.part_key(bad)

def test_a_part_reads_only_itself_and_shares_the_cache(written):
    cache = PageCache()
    art = _open(written, "multi", cache)
    _t, st1 = art.read_with_stats(parts=[1])
    full = _open(written, "multi", PageCache())
    _t, st_all = full.read_with_stats()
    assert 0 < st1.pages_loaded < st_all.pages_loaded and st1.bytes_read < st_all.bytes_read
    # the whole read afterwards: part 1's pages come from the cache, the others are loaded
    _t, st = _open(written, "multi", cache).read_with_stats()
    assert st.cache_hits > 0 and st.pages_loaded == st_all.pages_loaded - st1.pages_loaded
    # and part 1 again: everything cached
    _t, st = _open(written, "multi", cache).read_with_stats(parts=[1])
    assert st.pages_loaded == 0 and st.metadata_bytes == 0


def test_a_corrupt_part_fails_only_its_own_read(written, tmp_path):
    table, root, entry = written["multi"]
    m = kit.ArtifactModel.load(root, entry)
    m.parts[2].trailer_checksum = 12345
    out_root, out_entry = m.write(tmp_path / "store")
    art = gs.open_artifact(out_root, entry=out_entry, cache=PageCache())
    rows = art.manifest.files.column("num_rows").tolist()
    assert_tables_equal(art.read(parts=[0, 1]), table.slice(0, rows[0] + rows[1]))
    with pytest.raises(gs.CorruptArtifactError, match=r"part-2.samples: trailer checksum"):
        art.read(parts=[2])
    with pytest.raises(gs.CorruptArtifactError, match=r"part-2.samples: trailer checksum"):
        art.read()


def test_first_block_is_checked_against_the_previous_part(written, tmp_path):
    """Part 1 starts inside series (1, 6) with ordinal 1, which is right only because
    part 0 ends with (1, 6): read alone, part 1 is checked against part 0's last
    identity as the manifest records it.  Here the manifest says part 0 ends with
    (1, 5), so part 1 alone fails (and part 0's root no longer matches its bounds)."""
    import json
    import shutil

    _table, root, entry = written["multi"]
    out = tmp_path / "store"
    shutil.copytree(root, out)
    prefix = f"{entry['region_id']}/samples/{entry['file_id']}/{entry['generation']}/"
    mpath = out / prefix / "manifest.json"
    doc = json.loads(mpath.read_bytes())
    assert doc["files"][0]["last"] == {"table_id": 1, "tsid": 6} and doc["files"][1]["first"] == {"table_id": 1, "tsid": 6}
    doc["files"][0]["last"]["tsid"] = 5
    data = gs.open_artifact(root, entry=entry).manifest.to_json_bytes()
    new = json.dumps(doc, indent=2).encode()
    assert len(new) == len(data)  # same size: the catalog entry still matches
    mpath.write_bytes(new)
    art = gs.open_artifact(str(out), entry=entry, cache=PageCache())
    with pytest.raises(gs.CorruptArtifactError, match=r"part-1.samples leaf 0 block 0 \(table 1, tsid 6\): the identity's "
                                                      r"first block must have ordinal 0, found 1"):
        art.read(parts=[1])
    with pytest.raises(gs.CorruptArtifactError, match=r"part-0.samples: root bounds"):
        art.read(parts=[0])
    assert art.read(parts=[2]).num_rows > 0
