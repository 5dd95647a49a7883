"""One FileId rule (``format/manifest/model.py`` ``is_file_id``: a lowercase hyphenated
UUID, matched whole): the manifest, the catalog entry, the region catalog and the
writer refuse the same strings.  The region catalog once used ``re.match`` with
``^...$``, which let a FileId followed by "\\n" through."""

from __future__ import annotations

import json

import pytest

import gtsamples as gs
from gtsamples.format.manifest import is_file_id, parse_catalog_entry, parse_manifest
from gtsamples.region.catalog import CatalogError, check_doc, empty_doc

from ..test_bad_files import many_parts_manifest

GOOD = "5a3c0000-0000-4000-8000-000000000001"
BAD = [GOOD + "\n", GOOD + "\r\n", "\n" + GOOD, GOOD.upper(), GOOD.replace("-", ""), GOOD[:-1], GOOD + "0", "",
       "{" + GOOD + "}", GOOD.replace("5a3c", "5a3g")]


def test_is_file_id():
    assert is_file_id(GOOD) and is_file_id("00000000-0000-0000-0000-000000000000")
    for s in BAD + [None, 1, b"5a3c0000-0000-4000-8000-000000000001"]:
        assert not is_file_id(s), s


@pytest.mark.parametrize("bad", BAD)
def test_manifest_catalog_entry_and_region_catalog_refuse_the_same(bad):
    doc = json.loads(many_parts_manifest(1))
    doc["source_file_id"] = bad
    with pytest.raises(gs.CorruptArtifactError, match=r"manifest.json: source_file_id: .* is not a FileId"):
        parse_manifest(json.dumps(doc).encode())
    entry = {"region_id": 1, "file_id": bad, "generation": GOOD, "objects": [], "file_size": 0}
    with pytest.raises(gs.CorruptArtifactError, match=r"catalog entry: file_id: .* is not a FileId"):
        parse_catalog_entry(entry)
    cat = empty_doc(1, None)
    cat["ssts"] = [{"file_id": bad, "path": "x.parquet", "size": 1, "rows": 1, "schema": None}]
    with pytest.raises(CatalogError, match=r"v1.json: ssts\[0\].file_id .* is not a FileId"):
        check_doc(cat, "v1.json")
    cat["ssts"][0]["file_id"] = GOOD
    assert check_doc(cat, "v1.json") is cat


def test_writer_refuses_a_file_id_with_a_newline(tmp_path):
    import pyarrow as pa

    t = pa.table({"__table_id": pa.array([1], pa.uint32()), "__tsid": pa.array([1], pa.uint64()),
                  "ts": pa.array([0], pa.timestamp("ms")), "__sequence": pa.array([1], pa.uint64()),
                  "__op_type": pa.array([1], pa.uint8()), "v": pa.array([1.0])})
    with pytest.raises(ValueError, match="is not a FileId"):
        gs.write_artifact(t, tmp_path, region_id=1, source_file_id=GOOD + "\n", timestamp_column_id=0,
                          field_column_ids=[1])
