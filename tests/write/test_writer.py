"""The default writer: structure, encoding choice, splits, packing, parts, publishing."""

from __future__ import annotations

import json
import math
import os
import pathlib
import struct
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
import zstandard

from gtsamples import storage
from gtsamples.format import constants as C
from gtsamples.format.manifest import CatalogEntry, parse_catalog_entry, parse_manifest
from gtsamples.write import encode as E
from gtsamples.write import writer as W

from . import _parse
from .helpers import GEN, REGION, SRC, TS_ID, series_table, table, write

HERE = pathlib.Path(__file__).resolve().parent
VECTORS = HERE.parent / "data" / "vectors"
if not VECTORS.is_dir():  # pragma: no cover
    VECTORS = HERE.parents[2] / "shared" / "vectors"


def blocks_of(gen_dir):
    _, parts = _parse.read_dir(gen_dir, check_compression=True)
    return parts, [b for p in parts for b in p.blocks]


def chunk_encodings(blk):
    return [(c.role, c.column_id, int(c.ref["encoding"]), c.null_count) for c in blk.chunks]


def assert_roundtrip(gen_dir, t: pa.Table, check_compression: bool = True):
    """Our standalone decoder gives back exactly the input rows (bit for bit); with
    ``check_compression``, each chunk and page compressed as the default writer does."""
    man, parts, rows = _parse.read_rows(gen_dir, check_compression=check_compression)
    assert rows["table_id"] == t.column(0).to_pylist()
    assert rows["tsid"] == t.column(1).to_pylist()
    assert rows["ts"] == t.column(2).cast(pa.int64()).to_pylist()
    assert rows["seq"] == t.column(3).to_pylist()
    assert rows["op"] == t.column(4).to_pylist()
    for f, fid in zip(man["fields"], rows["fields"]):
        col = t.column(f["name"]).combine_chunks()
        valid = col.is_valid().to_numpy(zero_copy_only=False)
        bits = col.fill_null(0.0).to_numpy(zero_copy_only=False).view(np.uint64)
        want = [int(b) if ok else None for b, ok in zip(bits, valid)]
        assert rows["fields"][fid] == want, f["name"]
    return man, parts


# --- interop vectors: same rows and knobs -> the same bytes ------------------------


def _load_arrow(p):
    with pa.memory_map(str(p)) as f:
        return ipc.open_file(f).read_all()


@pytest.mark.parametrize(
    "case, kw",
    [
        ("v01_basic_single_field", {}),
        ("v02_basic_every_encoding", {"row_limit": 4}),
        ("v18_series_across_parts", {"row_limit": 2, "max_leaves_per_root": 2, "max_page_bytes": 232}),
    ],
)
def test_vectors_reproduced(tmp_path, case, kw):
    vec = VECTORS / case
    want_dir = next((vec / "store").glob("*/samples/*/*"))
    man = json.loads((want_dir / "manifest.json").read_text())
    t = _load_arrow(vec / "expected.arrow")
    e, got_dir = write(
        tmp_path, t, gen=man["generation"], field_ids=[f["column_id"] for f in man["fields"]],
        region_id=man["region_id"], source_file_id=man["source_file_id"],
        timestamp_column_id=man["timestamp"]["column_id"], **kw,
    )
    assert _parse.describe(got_dir) == _parse.describe(str(want_dir))
    # the manifest is byte-identical too (same canonical JSON as the independent writer)
    assert pathlib.Path(got_dir, "manifest.json").read_bytes() == (want_dir / "manifest.json").read_bytes()
    _, got_parts = _parse.read_dir(got_dir)
    _, want_parts = _parse.read_dir(str(want_dir))
    same_zstd = True
    for gp, wp in zip(got_parts, want_parts):
        for gb, wb in zip(gp.blocks, wp.blocks):
            assert [c.decoded for c in gb.chunks] == [c.decoded for c in wb.chunks]
            for c in wb.chunks:
                if int(c.ref["compression"]) == C.COMP_ZSTD:
                    same_zstd &= zstandard.ZstdCompressor(level=3).compress(c.decoded) == c.stored
    if same_zstd:  # the same Zstd output as theirs: then the very same bytes
        for p in man["files"]:
            name = f"part-{p['part_id']}.samples"
            assert pathlib.Path(got_dir, name).read_bytes() == (want_dir / name).read_bytes()
    entry = json.loads((vec / "entry.json").read_text())
    assert [o.path for o in e.objects] == [o["path"] for o in entry["objects"]]
    assert [o.file_size for o in e.objects] == [o["file_size"] for o in entry["objects"]]
    assert e.file_size == entry["file_size"]


def test_vector_navigation_example_rows(tmp_path):
    vec = VECTORS / "v23_navigation_example"
    t = _load_arrow(vec / "expected.arrow")
    _, d = write(tmp_path, t, row_limit=3)
    assert_roundtrip(d, t)
    _, blocks = blocks_of(d)
    assert [(b.tsid, b.ordinal, b.min_ts, b.max_ts) for b in blocks] == [
        (42, 0, 0, 100), (42, 1, 100, 200), (43, 0, 0, 50), (43, 1, 50, 80)
    ]


# --- encoding choice -------------------------------------------------------------------


def test_encoding_choice_per_block(tmp_path):
    t = table(
        tid=1,
        tsid=[1] * 4 + [2] * 4 + [3] * 2,
        ts=[0, 10, 20, 30, 0, 10, 25, 25, -5, 2**40],
        seq=[5, 5, 5, 5, 9, 8, 7, 7, 3, 3],
        op=[1, 1, 1, 1, 1, 0, 1, 1, 0, 0],
        fields={
            "a": [1.0, 2.0, 3.0, 4.0, None, 1.0, None, 2.0, None, None],
            "b": [None] * 4 + [0.5] * 4 + [-0.0, math.nan],
        },
    )
    _, d = write(tmp_path, t)
    assert_roundtrip(d, t)
    _, blocks = blocks_of(d)
    assert [chunk_encodings(b) for b in blocks] == [
        [(1, TS_ID, 1, 0), (2, 0, 3, 0), (3, 0, 6, 0), (4, 1, 5, 0)],  # b all null: omitted
        [(1, TS_ID, 2, 0), (2, 0, 4, 0), (3, 0, 7, 0), (4, 1, 5, 2), (4, 2, 5, 0)],
        [(1, TS_ID, 1, 0), (2, 0, 3, 0), (3, 0, 6, 0), (4, 2, 5, 0)],  # a all null: omitted
    ]
    # validity kinds: kind 0 without nulls, kind 1 with
    assert blocks[0].chunks[3].decoded[0] == 0
    assert blocks[1].chunks[3].decoded[0] == 1
    assert blocks[1].chunks[4].decoded[0] == 0
    # exact chunk bytes equal the reference encoders
    for blk, lo in zip(blocks, (0, 4, 8)):
        hi = lo + blk.rows
        ts = t.column(2).cast(pa.int64()).to_pylist()[lo:hi]
        assert (int(blk.chunks[0].ref["encoding"]), blk.chunks[0].decoded) == E.encode_timestamps(ts)
        assert (int(blk.chunks[1].ref["encoding"]), blk.chunks[1].decoded) == E.encode_sequences(
            t.column(3).to_pylist()[lo:hi])
        assert (int(blk.chunks[2].ref["encoding"]), blk.chunks[2].decoded) == E.encode_op_types(
            t.column(4).to_pylist()[lo:hi])


@pytest.mark.parametrize(
    "ts, enc",
    [
        ([7], 1),
        ([7, 7, 7], 1),
        ([0, 5, 10], 1),
        ([0, 5, 11], 2),
        ([C.I64_MIN, C.I64_MAX], 2),  # step 2^64-1 does not fit an i64
        ([C.I64_MIN, -1], 1),  # step 2^63-1 = I64_MAX fits
        ([C.I64_MIN, 0], 2),  # step 2^63 does not
        ([C.I64_MIN, 0, C.I64_MAX], 2),
    ],
)
def test_timestamp_encoding_choice(tmp_path, ts, enc):
    t = table(1, 1, ts)
    _, d = write(tmp_path, t)
    _, blocks = blocks_of(d)
    assert int(blocks[0].chunks[0].ref["encoding"]) == enc
    assert_roundtrip(d, t)


def test_float_bits_preserved(tmp_path):
    nan_payload = struct.unpack("<d", struct.pack("<Q", 0x7FF0_0000_0000_0001))[0]
    vals = [0.0, -0.0, math.nan, nan_payload, math.inf, -math.inf, 5e-324, None, 1.5]
    t = table(1, 1, list(range(len(vals))), fields={"v": pa.array(
        np.array([0.0 if v is None else v for v in vals]), mask=np.array([v is None for v in vals]))})
    _, d = write(tmp_path, t)
    man, parts, rows = _parse.read_rows(d)
    got = rows["fields"][1]
    assert got[3] == 0x7FF0_0000_0000_0001
    assert got[1] == 1 << 63
    assert got[7] is None
    assert_roundtrip(d, t)


def test_sliced_and_chunked_input(tmp_path):
    base = series_table(3, 50, 2, null_frac=0.3, seed=4)
    # slice at an odd offset (bitmap bit offsets), then re-chunk
    t = base.slice(3, 140)
    t = pa.concat_tables([t.slice(0, 61), t.slice(61)])
    assert t.column(5).num_chunks == 2
    _, d = write(tmp_path, t, row_limit=7)
    assert_roundtrip(d, t)
    rb = base.slice(0, 30).to_batches()[0]
    _, d2 = write(tmp_path / "rb", rb)
    assert_roundtrip(d2, base.slice(0, 30))


# --- block splits ---------------------------------------------------------------------------


def test_split_at_row_limit_and_identity(tmp_path):
    t = table(1, [1] * 10 + [2] * 3, list(range(10)) + [0, 0, 0])
    _, d = write(tmp_path, t, row_limit=4)
    _, blocks = blocks_of(d)
    assert [(b.tsid, b.rows, b.ordinal) for b in blocks] == [(1, 4, 0), (1, 4, 1), (1, 2, 2), (2, 3, 0)]
    assert [(b.min_ts, b.max_ts) for b in blocks] == [(0, 3), (4, 7), (8, 9), (0, 0)]


def test_no_other_splits(tmp_path):
    # huge time gaps, op/sequence changes and null runs do not split a block
    t = table(1, 1, [0, 1, 10**12, 10**15], seq=[9, 1, 7, 0], op=[0, 1, 0, 1],
              fields={"v": [None, None, 1.0, None]})
    _, d = write(tmp_path, t)
    _, blocks = blocks_of(d)
    assert [b.rows for b in blocks] == [4]


def test_table_id_distinguishes_identities(tmp_path):
    t = table([1, 1, 2, 2], 42, [0, 1, 0, 1])
    _, d = write(tmp_path, t)
    _, blocks = blocks_of(d)
    assert [(b.table_id, b.tsid, b.ordinal) for b in blocks] == [(1, 42, 0), (2, 42, 0)]


def test_split_at_formula_cap_one_field(tmp_path):
    assert C.max_block_rows(1) == 8192
    n = 8192 * 2 + 1
    t = table(1, 1, list(range(n)))
    _, d = write(tmp_path, t)
    _, blocks = blocks_of(d)
    assert [b.rows for b in blocks] == [8192, 8192, 1]
    assert [b.ordinal for b in blocks] == [0, 1, 2]


def test_split_at_formula_cap_1024_fields(tmp_path):
    assert C.max_block_rows(1024) == 31
    assert C.block_decoded_size(31, 1024) <= C.MAX_BLOCK_DECODED_BYTES < C.block_decoded_size(32, 1024)
    n = 63
    rng = np.random.default_rng(1)
    fields = {f"f{i}": pa.array(rng.standard_normal(n)) for i in range(1024)}
    fields["f5"] = pa.array([None] * n, pa.float64())  # all-null field still counts
    t = table(1, 1, list(range(n)), fields=fields)
    _, d = write(tmp_path, t, row_limit=8192, timestamp_column_id=0)
    parts, blocks = blocks_of(d)
    assert [b.rows for b in blocks] == [31, 31, 1]
    assert all(len(b.chunks) == 3 + 1023 for b in blocks)
    # widest descriptors: 44 + 44 * 1026 = 45,188 bytes; one per leaf (two do not fit)
    assert [p.depth for p in parts] == [2]
    assert parts[0].leaf_decoded_sizes == [12 + 44 + 44 * 1026] * 3
    assert_roundtrip(d, t)


def test_row_limit_lower_than_formula(tmp_path):
    t = table(1, 1, list(range(20)), fields={"a": [1.0] * 20, "b": [2.0] * 20})
    _, d = write(tmp_path, t, row_limit=1)
    _, blocks = blocks_of(d)
    assert [b.rows for b in blocks] == [1] * 20
    assert [b.ordinal for b in blocks] == list(range(20))


# --- leaf packing, depth 2, part rolling ------------------------------------------------------

DESC1 = 44 + 44 * 4  # one present field: 220 bytes


@pytest.mark.parametrize(
    "max_page, per_leaf",
    [(12 + DESC1, 1), (12 + 2 * DESC1 - 1, 1), (12 + 2 * DESC1, 2), (12 + 3 * DESC1 - 1, 2), (12 + 3 * DESC1, 3)],
)
def test_leaf_packing_boundaries(tmp_path, max_page, per_leaf):
    t = table(1, 1, list(range(7)))
    _, d = write(tmp_path, t, row_limit=1, max_page_bytes=max_page)
    parts, blocks = blocks_of(d)
    assert len(parts) == 1
    sizes = parts[0].leaf_decoded_sizes
    want = [per_leaf] * (7 // per_leaf) + ([7 % per_leaf] if 7 % per_leaf else [])
    assert sizes == [12 + DESC1 * k for k in want]
    assert all(s <= max_page for s in sizes)
    assert parts[0].depth == 2


def test_leaf_packing_mixed_descriptor_sizes(tmp_path):
    # block descriptors of 220 (field present) and 176 bytes (field all null, omitted)
    vals = [1.0, None, None, 2.0, None, 3.0]
    t = table(1, 1, list(range(6)), fields={"v": vals})
    _, d = write(tmp_path, t, row_limit=1, max_page_bytes=12 + 220 + 176)
    parts, blocks = blocks_of(d)
    assert [len(b.chunks) for b in blocks] == [4, 3, 3, 4, 3, 4]
    # greedy: [220,176] [176,220] [176,220]
    assert parts[0].leaf_decoded_sizes == [12 + 220 + 176, 12 + 176 + 220, 12 + 176 + 220]


def test_single_leaf_is_depth_1_root(tmp_path):
    t = table(1, 1, list(range(100)))
    _, d = write(tmp_path, t, row_limit=3)
    parts, blocks = blocks_of(d)
    assert parts[0].depth == 1 and len(blocks) == 34
    assert parts[0].leaf_decoded_sizes == [12 + 34 * DESC1]


def test_spec_page_limit_packs_297_descriptors(tmp_path):
    n = (65536 - 12) // DESC1 + 1  # 298 blocks: 297 fit in one leaf
    t = table(1, 1, list(range(n)))
    _, d = write(tmp_path, t, row_limit=1, max_page_bytes=65536)
    parts, _ = blocks_of(d)
    assert parts[0].depth == 2
    assert parts[0].leaf_decoded_sizes == [12 + 297 * DESC1, 12 + DESC1]


def test_default_page_limit_is_16_kib(tmp_path):
    per_leaf = (C.WRITER_PAGE_BYTES - 12) // DESC1  # 74 descriptors
    assert C.WRITER_PAGE_BYTES == 16384 and per_leaf == 74
    t = table(1, 1, list(range(per_leaf + 1)))
    _, d = write(tmp_path, t, row_limit=1)
    parts, _ = blocks_of(d)
    assert parts[0].depth == 2
    assert parts[0].leaf_decoded_sizes == [12 + per_leaf * DESC1, 12 + DESC1]


def test_default_page_limit_grows_to_hold_the_widest_descriptor(tmp_path):
    """A table whose one block descriptor passes 16 KiB gets leaves of one descriptor
    (the smallest valid page) by default; asked for 16 KiB explicitly, it is refused."""
    nf = 400
    desc = C.block_desc_size(nf)
    assert 12 + desc > C.WRITER_PAGE_BYTES
    cols = {"__table_id": pa.array([1, 1], pa.uint32()), "__tsid": pa.array([1, 1], pa.uint64()),
            "ts": pa.array([1, 2], pa.timestamp("ms")), "__sequence": pa.array([2, 1], pa.uint64()),
            "__op_type": pa.array([1, 1], pa.uint8())}
    cols.update({f"f{k}": pa.array([1.0, 2.0]) for k in range(nf)})
    t = pa.table(cols)
    kw = dict(region_id=1, source_file_id=str(uuid.uuid4()), timestamp_column_id=0,
              field_column_ids=list(range(1, nf + 1)), row_limit=1)
    e = W.write_artifact(t, tmp_path, **kw)
    parts, _ = blocks_of(tmp_path / e.prefix)
    assert parts[0].depth == 2 and parts[0].leaf_decoded_sizes == [12 + desc, 12 + desc]
    with pytest.raises(ValueError, match="max_page_bytes: 16384 is out of range"):
        W.write_artifact(t, tmp_path / "b", max_page_bytes=16384, **kw)


def test_depth2_root_and_page_bounds(tmp_path):
    # series 1 at [100, 400], series 2 at [0, 50]: envelopes are true min/max
    t = table(1, [1] * 4 + [2] * 2, [100, 200, 300, 400, 0, 50])
    e, d = write(tmp_path, t, row_limit=2, max_page_bytes=12 + 2 * DESC1)
    parts, blocks = blocks_of(d)
    p = parts[0]
    assert p.depth == 2 and len(p.leaves) == 2
    rr = p.root
    assert (int(rr["min_timestamp"]), int(rr["max_timestamp"])) == (0, 400)
    # leaf 0: blocks [100,200], [300,400]; leaf 1: [0,50]
    l0, l1 = p.leaves
    assert (int(l0["min_timestamp"]), int(l0["max_timestamp"])) == (100, 400)
    assert (int(l1["first_tsid"]), int(l1["min_timestamp"]), int(l1["max_timestamp"])) == (2, 0, 50)
    # the internal root holds 12 + 72 * N decoded bytes and ends right before the trailer
    assert int(rr["ref"]["decoded_len"]) == 12 + 72 * 2
    man = json.loads(pathlib.Path(d, "manifest.json").read_text())
    assert (man["files"][0]["min_timestamp"], man["files"][0]["max_timestamp"]) == (0, 400)


def test_part_rolling_small_max_leaves(tmp_path):
    t = table(1, [1] * 7 + [2] * 4, list(range(7)) + [0, 5, 5, 9])
    e, d = write(tmp_path, t, row_limit=2, max_page_bytes=12 + DESC1, max_leaves_per_root=2)
    parts, blocks = blocks_of(d)
    # blocks (tsid, rows): (1,2)(1,2)(1,2)(1,1)(2,2)(2,2) -> parts of 2 leaves
    assert [len(p.blocks) for p in parts] == [2, 2, 2]
    assert [p.depth for p in parts] == [2, 2, 2]
    assert [(b.tsid, b.ordinal) for b in blocks] == [(1, 0), (1, 1), (1, 2), (1, 3), (2, 0), (2, 1)]
    man = json.loads(pathlib.Path(d, "manifest.json").read_text())
    assert [(f["first"]["tsid"], f["last"]["tsid"]) for f in man["files"]] == [(1, 1), (1, 1), (2, 2)]
    assert [(f["min_timestamp"], f["max_timestamp"]) for f in man["files"]] == [(0, 3), (4, 6), (0, 9)]
    assert [o.path.rsplit("/", 1)[1] for o in e.objects] == [
        "manifest.json", "part-0.samples", "part-1.samples", "part-2.samples"]
    assert_roundtrip(d, t)


def test_part_rolls_before_the_911th_leaf(tmp_path):
    n = 911 + 5
    t = table(1, 1, list(range(n)))
    e, d = write(tmp_path, t, row_limit=1, max_page_bytes=12 + DESC1)
    parts, blocks = blocks_of(d)
    assert [len(p.leaves) for p in parts] == [910, 6]
    assert [p.depth for p in parts] == [2, 2]
    assert int(parts[0].root["ref"]["decoded_len"]) == 12 + 72 * 910 == 65532
    # ordinals continue across the part boundary
    assert [b.ordinal for b in blocks] == list(range(n))
    man = json.loads(pathlib.Path(d, "manifest.json").read_text())
    assert man["files"][0]["last"] == man["files"][1]["first"] == {"table_id": 1, "tsid": 1}
    assert (man["files"][1]["min_timestamp"], man["files"][1]["max_timestamp"]) == (910, 915)


def test_roll_leaves_single_leaf_part(tmp_path):
    n = 3
    t = table(1, 1, list(range(n)))
    _, d = write(tmp_path, t, row_limit=1, max_page_bytes=12 + DESC1, max_leaves_per_root=2)
    parts, _ = blocks_of(d)
    assert [p.depth for p in parts] == [2, 1]


def test_part_time_bounds_over_all_blocks(tmp_path):
    # first block [100,200], last block [10,20]: bounds are [0, 900], not [100, 20]
    t = table(1, [1, 1, 2, 2, 3, 3], [100, 200, 0, 900, 10, 20])
    e, d = write(tmp_path, t)
    man = json.loads(pathlib.Path(d, "manifest.json").read_text())
    f = man["files"][0]
    assert (f["min_timestamp"], f["max_timestamp"]) == (0, 900)
    assert f["first"] == {"table_id": 1, "tsid": 1} and f["last"] == {"table_id": 1, "tsid": 3}
    assert (f["num_rows"], f["num_blocks"]) == (6, 3)


def test_many_batches_and_threads(tmp_path, monkeypatch):
    # tiny batches: many compress calls, double-buffered raw areas, overlapping writes
    monkeypatch.setattr(W, "BATCH_BYTES", 4096)
    t = series_table(40, 300, 3, null_frac=0.2, seed=7)
    _, d = write(tmp_path, t, row_limit=64, max_page_bytes=12 + 44 * 7 * 3, max_leaves_per_root=5)
    parts, blocks = blocks_of(d)
    assert len(parts) > 3
    assert_roundtrip(d, t)


def test_thread_pool_compression_fallback(tmp_path, monkeypatch):
    monkeypatch.setattr(W._Compressor, "USE_MULTI", False)
    monkeypatch.setattr(W, "BATCH_BYTES", 8192)
    t = series_table(6, 200, 2, null_frac=0.1, seed=8)
    _, d = write(tmp_path, t, row_limit=50)
    assert_roundtrip(d, t)


def _refs(parts):
    """Every chunk's and page's reference of ``parts``."""
    return ([c.ref for p in parts for b in p.blocks for c in b.chunks]
            + [r["ref"] for p in parts for r in p.page_refs] + [p.root["ref"] for p in parts])


def test_compression_none_stores_every_chunk_and_page_raw(tmp_path):
    t = series_table(30, 400, 3, null_frac=0.1, seed=9)
    _, d = write(tmp_path / "raw", t, compression=None, row_limit=100, max_page_bytes=12 + 44 * 7 * 4)
    _, dz = write(tmp_path / "zstd", t, row_limit=100, max_page_bytes=12 + 44 * 7 * 4)
    man, parts = assert_roundtrip(d, t, check_compression=False)
    assert any(p.depth == 2 for p in parts)  # an internal root page too
    refs = _refs(parts)
    assert {int(r["compression"]) for r in refs} == {C.COMP_RAW}
    assert all(int(r["stored_len"]) == int(r["decoded_len"]) for r in refs)
    zparts, _ = blocks_of(dz)
    assert C.COMP_ZSTD in {int(r["compression"]) for r in _refs(zparts)}  # the default compresses these
    size = sum(p.file_length for p in parts)
    assert size > sum(p.file_length for p in zparts)
    # the same rows through the reader
    from gtsamples.artifact import open_artifact

    assert open_artifact(d).read().equals(open_artifact(dz).read())


@pytest.mark.parametrize("level", [C.WRITER_ZSTD_MIN_LEVEL, -5, -1, 1, 19, C.WRITER_ZSTD_MAX_LEVEL])
def test_compression_level_is_the_frames_level(tmp_path, level):
    t = series_table(8, 300, 2, null_frac=0.1, seed=10)
    _, d = write(tmp_path, t, compression_level=level, row_limit=100)
    _, parts = assert_roundtrip(d, t, check_compression=False)
    with open(os.path.join(d, "part-0.samples"), "rb") as f:
        data = f.read()
    n_zstd = 0
    for blk in parts[0].blocks:
        for c in blk.chunks:  # stored as the level's frame where strictly smaller, else raw
            z = zstandard.ZstdCompressor(level=level).compress(c.decoded)
            if len(z) < len(c.decoded):
                assert int(c.ref["compression"]) == C.COMP_ZSTD
                off = int(c.ref["offset"])
                assert data[off: off + int(c.ref["stored_len"])] == z
                n_zstd += 1
            else:
                assert int(c.ref["compression"]) == C.COMP_RAW
    assert n_zstd > 0 or level == C.WRITER_ZSTD_MIN_LEVEL  # (the fastest level saves nothing here)


def test_compression_level_bounds_are_libzstds():
    assert C.WRITER_ZSTD_MAX_LEVEL == zstandard.MAX_COMPRESSION_LEVEL
    import ctypes

    from gtsamples.format import libzstd

    lib = libzstd.get()
    if lib is None:  # pragma: no cover - python-zstandard without exported symbols, no system libzstd
        pytest.skip("no libzstd to ask")
    raw = lib._lib
    raw.ZSTD_minCLevel.restype = ctypes.c_int
    raw.ZSTD_maxCLevel.restype = ctypes.c_int
    assert (raw.ZSTD_minCLevel(), raw.ZSTD_maxCLevel()) == (C.WRITER_ZSTD_MIN_LEVEL, C.WRITER_ZSTD_MAX_LEVEL)


def test_random_tables_roundtrip(tmp_path):
    rng = np.random.default_rng(11)
    for i in range(12):
        nser = int(rng.integers(1, 6))
        lens = rng.integers(1, 40, nser)
        tid = np.repeat(np.arange(nser, dtype=np.uint32) // 2, lens)
        tsid = np.repeat(np.arange(nser, dtype=np.uint64) * np.uint64(3) % np.uint64(5) + np.uint64(10**18), lens)
        order = np.lexsort((tsid, tid))
        tid, tsid = tid[order], tsid[order]
        n = len(tid)
        ts = np.sort(rng.integers(-(2**62), 2**62, n)) if i % 2 else np.cumsum(rng.integers(0, 3, n)) - 5
        seq = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
        # sequences nonincreasing within equal timestamps (per identity)
        key = np.lexsort((-seq.astype(np.float64), ts, tsid, tid))
        ts, seq = ts[key], seq[key]
        # exact fix-up of float ties: sort seq descending inside equal (id, ts) groups
        df_key = np.lexsort((np.iinfo(np.uint64).max - seq, ts, tsid, tid))
        ts, seq = ts[df_key], seq[df_key]
        nf = int(rng.integers(1, 4))
        fields = {}
        for f in range(nf):
            v = rng.standard_normal(n) * 10.0 ** rng.integers(-5, 5)
            mask = rng.random(n) < rng.choice([0.0, 0.3, 1.0])
            fields[f"f{f}"] = pa.array(v, mask=mask)
        t = table(tid.tolist(), tsid.tolist(), ts.tolist(), seq=seq.tolist(),
                  op=rng.integers(0, 2, n).astype(np.uint8).tolist(), fields=fields, unit="ns")
        _, d = write(tmp_path / str(i), t, row_limit=int(rng.integers(1, 20)))
        assert_roundtrip(d, t)


# --- compression -----------------------------------------------------------------------------


def test_zstd_only_when_strictly_smaller(tmp_path):
    n = 4000
    rng = np.random.default_rng(3)
    noise = rng.integers(0, 2**64 - 1, 2, dtype=np.uint64, endpoint=True).view(np.float64)
    t = table(1, [1] * n + [2] * 2, list(range(n)) + [0, 7], seq=list(range(n, 0, -1)) + [5, 1],
              fields={"v": pa.array(np.r_[np.zeros(n), noise])})
    _, d = write(tmp_path, t)
    _, blocks = blocks_of(d)  # check_compression: zstd iff strictly smaller, for every chunk/page
    big = {c.role: int(c.ref["compression"]) for c in blocks[0].chunks}
    small = {c.role: int(c.ref["compression"]) for c in blocks[1].chunks}
    assert big[4] == C.COMP_ZSTD  # 3,999 zero varints compress
    assert big[2] == C.COMP_ZSTD  # 3,999 identical 0x01 varints
    assert small[4] == C.COMP_RAW  # 19 bytes of noise: a frame is not smaller
    assert small[3] == C.COMP_RAW  # one byte


def test_zstd_equal_size_stays_raw(monkeypatch, tmp_path):
    # a compressor whose frames are exactly as long as the input must not be chosen
    comp = W._Compressor(3)
    real = zstandard.ZstdCompressor(level=3)

    class Same:
        def compress(self, data):
            z = real.compress(data)
            return z if len(z) < len(data) else bytes(len(data))

    comp.cctx = Same()
    assert comp.one(b"x" * 10) == (b"x" * 10, C.COMP_RAW)
    assert comp.one(b"\x00" * 100)[1] == C.COMP_ZSTD


# --- manifest, entry, empty artifact -----------------------------------------------------------


def test_manifest_and_entry(tmp_path):
    t = table(3, 9, [1, 2, 3], unit="us", ts_name="greptime_timestamp", fields={"cpu": [1.0, 2.0, 3.0], "mem": [None] * 3})
    e, d = write(tmp_path, t, field_ids=[7, 3], timestamp_column_id=0)
    assert isinstance(e, CatalogEntry)
    raw = pathlib.Path(d, "manifest.json").read_bytes()
    m = parse_manifest(raw)
    assert m.timestamp.name == "greptime_timestamp" and m.timestamp.unit == "microsecond" and m.timestamp.column_id == 0
    assert [(f.column_id, f.name) for f in m.fields] == [(7, "cpu"), (3, "mem")]
    assert (m.region_id, m.source_file_id, m.generation) == (REGION, SRC, GEN)
    entry = parse_catalog_entry(e.to_dict())
    assert entry.objects[0].path == f"{REGION}/samples/{SRC}/{GEN}/manifest.json"
    assert entry.objects[0].file_size == len(raw)
    assert entry.file_size == sum(o.file_size for o in entry.objects)
    for o in entry.objects:
        assert (tmp_path / o.path).stat().st_size == o.file_size
    assert e["created_at"].endswith("Z")
    assert sorted(os.listdir(tmp_path / f"{REGION}/samples/{SRC}")) == [GEN]  # no temp dir left


@pytest.mark.parametrize("unit, name", [("s", "second"), ("ms", "millisecond"), ("us", "microsecond"), ("ns", "nanosecond")])
def test_units(tmp_path, unit, name):
    _, d = write(tmp_path, table(1, 1, [0, 1], unit=unit))
    assert json.loads(pathlib.Path(d, "manifest.json").read_text())["timestamp"]["unit"] == name


def test_empty_artifact(tmp_path):
    t = table(1, 1, [], fields={"a": [], "b": []})
    e, d = write(tmp_path, t)
    assert sorted(os.listdir(d)) == ["manifest.json"]
    man = json.loads(pathlib.Path(d, "manifest.json").read_text())
    assert man["files"] == [] and [f["name"] for f in man["fields"]] == ["a", "b"]
    assert len(e.objects) == 1 and e.file_size == e.objects[0].file_size


def test_generation_defaults_to_new_uuid(tmp_path):
    from gtsamples.write import write_artifact

    t = table(1, 1, [0])
    e1 = write_artifact(t, tmp_path, region_id=1, source_file_id=SRC, timestamp_column_id=0, field_column_ids=[1])
    e2 = write_artifact(t, tmp_path, region_id=1, source_file_id=SRC, timestamp_column_id=0, field_column_ids=[1])
    assert e1.generation != e2.generation
    assert parse_catalog_entry(e1.to_dict()).generation == e1.generation


# --- atomic publish ------------------------------------------------------------------------------


def _gen_parent(root):
    return pathlib.Path(root) / str(REGION) / "samples" / SRC


def test_refuses_to_overwrite(tmp_path):
    t = table(1, 1, [0, 1])
    e, d = write(tmp_path, t)
    before = {p.name: p.read_bytes() for p in pathlib.Path(d).iterdir()}
    with pytest.raises(FileExistsError):
        write(tmp_path, table(1, 1, [5, 6, 7]))
    assert {p.name: p.read_bytes() for p in pathlib.Path(d).iterdir()} == before
    assert sorted(os.listdir(_gen_parent(tmp_path))) == [GEN]


def test_refuses_generation_created_during_write(tmp_path, monkeypatch):
    real = W._write_parts

    def racing(sink, *a, **kw):
        out = real(sink, *a, **kw)
        os.mkdir(_gen_parent(tmp_path) / GEN)  # an (empty) directory appears meanwhile
        return out

    monkeypatch.setattr(W, "_write_parts", racing)
    with pytest.raises(FileExistsError):
        write(tmp_path, table(1, 1, [0, 1]))
    assert os.listdir(_gen_parent(tmp_path)) == [GEN]
    assert os.listdir(_gen_parent(tmp_path) / GEN) == []


@pytest.mark.parametrize("where", ["second_part", "metadata", "manifest"])
def test_failure_mid_write_removes_temp_dir(tmp_path, monkeypatch, where):
    class Boom(RuntimeError):
        pass

    seen = []
    if where == "second_part":
        real = W._write_part

        def fail(sink, plan, part_id, *a, **kw):
            seen.append(part_id)
            if part_id == 1:
                # something of this part is on disk already
                obj = sink.open("part-1.samples")
                obj.write([b"partial"])
                obj.discard()
                raise Boom()
            return real(sink, plan, part_id, *a, **kw)

        monkeypatch.setattr(W, "_write_part", fail)
    elif where == "metadata":
        def fail(*a, **kw):
            tmp = [p for p in os.listdir(_gen_parent(tmp_path)) if p.startswith(".tmp-")]
            seen.append(tmp)
            raise Boom()

        monkeypatch.setattr(W, "_metadata", fail)
    else:
        real_open = storage.LocalPublication.open

        def fail(self, name):
            if name == "manifest.json":
                seen.append(sorted(os.listdir(self.tmp)))
                raise Boom()
            return real_open(self, name)

        monkeypatch.setattr(storage.LocalPublication, "open", fail)
    t = table(1, 1, list(range(6)))
    with pytest.raises(Boom):
        write(tmp_path, t, row_limit=1, max_page_bytes=12 + DESC1, max_leaves_per_root=2)
    assert seen
    if where == "metadata":
        assert len(seen[0]) == 1  # the temp dir existed while writing
    if where == "manifest":
        assert seen[0] == ["part-0.samples", "part-1.samples", "part-2.samples"]
    assert os.listdir(_gen_parent(tmp_path)) == []  # no temp dir, no generation
    # a later write of the same generation succeeds
    monkeypatch.undo()
    write(tmp_path, t)


def test_fsspec_memory_store():
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    root = "memory://gts-write-test"
    t = series_table(3, 20, 2, null_frac=0.2)
    e, _ = write(root, t, row_limit=8, max_page_bytes=12 + 44 * 6 * 2, max_leaves_per_root=2)
    for o in e.objects:
        assert fs.size(f"/gts-write-test/{o.path}") == o.file_size
    man = json.loads(fs.cat(f"/gts-write-test/{e.objects[0].path}"))
    assert len(man["files"]) == len(e.objects) - 1 >= 2
    for o in e.objects[1:]:
        _parse.parse_part(fs.cat(f"/gts-write-test/{o.path}"), check_compression=True)
    with pytest.raises(FileExistsError):
        write(root, t)
    fs.rm("/gts-write-test", recursive=True)


# --- Parquet entry point -----------------------------------------------------------------------


def test_write_artifact_from_parquet(tmp_path):
    import pyarrow.parquet as pq

    t = series_table(2, 10, 2)
    # a column order different from the stored schema
    shuffled = t.select(["f1", "ts", "__op_type", "__tsid", "f0", "__table_id", "__sequence"])
    src = tmp_path / "sst.parquet"
    pq.write_table(shuffled, src)
    e = W.write_artifact_from_parquet(src, tmp_path / "store", REGION, SRC, GEN)
    d = tmp_path / "store" / e.prefix
    man = json.loads((d / "manifest.json").read_text())
    assert man["timestamp"]["column_id"] == 0
    assert [(f["column_id"], f["name"]) for f in man["fields"]] == [(1, "f1"), (2, "f0")]
    assert_roundtrip(str(d), t.select(["__table_id", "__tsid", "ts", "__sequence", "__op_type", "f1", "f0"]))
    pq.write_table(t.append_column("tag", pa.array(["x"] * t.num_rows)), tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match="tag"):
        W.write_artifact_from_parquet(tmp_path / "bad.parquet", tmp_path / "store", REGION, SRC)


def test_write_artifact_from_parquet_refuses_a_file_that_is_no_readable_parquet(tmp_path):
    """Before: pyarrow's ArrowInvalid ('Parquet magic bytes not found') or, for a damaged
    footer, a bare OSError ("Couldn't deserialize thrift"); now the base SamplesError naming
    the file, as a damaged SST in a region.  A missing file stays FileNotFoundError."""
    import pyarrow.parquet as pq

    from gtsamples.errors import SamplesError

    src = tmp_path / "sst.parquet"
    pq.write_table(series_table(2, 10, 2), src)
    good = src.read_bytes()
    footer = int.from_bytes(good[-8:-4], "little")
    damaged = bytearray(good)
    for i in range(len(good) - 8 - footer, len(good) - 8):
        damaged[i] ^= 0x5A
    for name, data in (("text", b"hello world" * 10), ("truncated", good[: len(good) // 2]),
                       ("footer", bytes(damaged))):
        bad = tmp_path / f"{name}.parquet"
        bad.write_bytes(data)
        with pytest.raises(SamplesError, match=f"{name}.parquet: not a readable Parquet file") as info:
            W.write_artifact_from_parquet(bad, tmp_path / "store", REGION, SRC, GEN)
        assert type(info.value) is SamplesError
    with pytest.raises(FileNotFoundError):
        W.write_artifact_from_parquet(tmp_path / "missing.parquet", tmp_path / "store", REGION, SRC, GEN)
    assert not (tmp_path / "store").exists()  # nothing written
