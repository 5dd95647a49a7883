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


def test_all_file_ids_is_the_same_rule():
    """The column-wise check of many FileIds (catalog versions) says what is_file_id
    says of each: one character changed, dropped or added anywhere, non-strings."""
    import random
    import uuid

    from gtsamples.format.manifest import all_file_ids

    rnd = random.Random(29)
    alphabet = "0123456789abcdefABCDEF-g\n é\x00"
    for _ in range(5000):
        ids = [str(uuid.UUID(int=rnd.getrandbits(128), version=4)) for _ in range(rnd.randrange(4))]
        if ids and rnd.random() < 0.7:
            j = rnd.randrange(len(ids))
            s = list(ids[j])
            op = rnd.randrange(3)
            if op == 0:
                s[rnd.randrange(36)] = rnd.choice(alphabet)
            elif op == 1:
                del s[rnd.randrange(36)]
            else:
                s.insert(rnd.randrange(37), rnd.choice(alphabet))
            ids[j] = "".join(s)
        if rnd.random() < 0.05:
            ids.append(rnd.choice([None, 5, b"0" * 36]))
        assert all_file_ids(ids) == all(is_file_id(x) for x in ids), ids


def test_file_ids_distinct_is_exact():
    """The sorted 64-bit folds of many FileIds say "no FileId twice" exactly: a repeat
    anywhere is found, and two different FileIds whose folds collide are told apart."""
    import random
    import uuid

    from gtsamples.format.manifest import file_ids_distinct, file_ids_text_ok

    rnd = random.Random(30)
    for n in (0, 1, 2, 3, 50):
        ids = [str(uuid.UUID(int=rnd.getrandbits(128), version=4)) for _ in range(n)]
        assert file_ids_text_ok("".join(ids), n) and file_ids_distinct("".join(ids), n)
        if n >= 2:
            i, j = rnd.sample(range(n), 2)
            twice = list(ids)
            twice[i] = ids[j]
            assert not file_ids_distinct("".join(twice), n)

    def fid(hi: int, lo: int) -> str:
        return str(uuid.UUID(int=(hi << 64) | lo))

    c = 0x9E3779B97F4A7C15  # the fold: hi ^ lo * c; (x, 0) and (x ^ c, 1) fold alike
    x = 0x0123456789ABCDEF
    pair = [fid(x, 0), fid(x ^ c, 1)]
    assert file_ids_text_ok("".join(pair), 2) and file_ids_distinct("".join(pair), 2)
    assert not file_ids_distinct("".join(pair + [pair[0]]), 3)
    assert not file_ids_text_ok("".join(pair)[:-1] + "G", 2) and not file_ids_text_ok("".join(pair), 3)
