"""Forged sizes, counts and lengths (up to 2**64 - 1) are refused before any
allocation or read of that size -- measured, not assumed.

Every case builds a valid artifact (our writer, relaid with raw pages so each
field can be patched), forges one size/count/length field with every checksum
repaired (so the forged field is the only fault), and asserts:

* the error class and the rule named in the message;
* the tracemalloc peak of the failing call (Python objects and numpy buffers)
  is below ``PEAK_LIMIT`` (a few MiB; the valid artifact itself reads in well
  under 1 MiB);
* the process RSS high-water mark grows by less than ``RSS_LIMIT_MB``
  (catches native allocations tracemalloc cannot see: zstd, numba).

Each case runs once before the measurement (numba compilation, imports and
lazy module state are not the case's allocations).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import resource
import tracemalloc

import numpy as np
import pyarrow as pa
import pytest
import zstandard

import gtsamples as gs
from gtsamples.format import constants as C

from .fuzz import partkit

U64 = (1 << 64) - 1
U32 = (1 << 32) - 1
PEAK_LIMIT = 4 * 2**20
RSS_LIMIT_MB = 64
REGION, FILE_ID, GEN = 4398046511104, "5a3c0000-0000-4000-8000-00000000f001", "5a3c0000-0000-4000-8000-00000000f002"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """(manifest dict, [PartModel]) of a small valid artifact: 2 series, 2 fields, nulls, 4 blocks."""
    tmp = tmp_path_factory.mktemp("base")
    n = 12
    t = pa.table({
        "__table_id": pa.array([7] * n, pa.uint32()),
        "__tsid": pa.array([42] * 6 + [43] * 6, pa.uint64()),
        "ts": pa.array(list(range(0, 6000, 1000)) * 2, pa.timestamp("ms")),
        "__sequence": pa.array([5] * n, pa.uint64()),
        "__op_type": pa.array([1] * n, pa.uint8()),
        "a": pa.array(np.arange(n, dtype=np.float64), mask=np.arange(n) % 4 == 1),
        "b": pa.array(np.arange(n, dtype=np.float64) * 0.5),
    })
    entry = gs.write_artifact(t, tmp, region_id=REGION, source_file_id=FILE_ID, generation=GEN,
                              timestamp_column_id=0, field_column_ids=[1, 2], row_limit=3)
    mb, parts = partkit.read_artifact_files(tmp, entry)
    return json.loads(mb), [partkit.parse_part(p) for p in parts]


def _write(root: pathlib.Path, manifest: dict, parts: list[bytes], keep_sizes=False):
    m = json.loads(json.dumps(manifest))
    if not keep_sizes:
        for p, data in zip(m["files"], parts):
            p["file_size"] = len(data)
    mb = partkit.manifest_bytes(m)
    entry = partkit.entry_for(m, len(mb))
    d = root / entry["objects"][0]["path"].rsplit("/", 1)[0]
    d.mkdir(parents=True, exist_ok=True)
    (d / "manifest.json").write_bytes(mb)
    for i, data in enumerate(parts):
        (d / f"part-{i}.samples").write_bytes(data)
    return d, entry


def build(base, tmp_path, depth=1, pages="raw", part_fn=None, manifest_fn=None, entry_fn=None, chunk0=None):
    manifest, models = base
    models = [partkit.PartModel(list(m.blocks), m.leaves, m.depth) for m in models]
    if chunk0 is not None:  # (column k of block 0, stored bytes, compression): decoded length unchanged
        k, stored, comp = chunk0
        b = models[0].blocks[0]
        chunks = list(b.chunks)
        chunks[k] = dataclasses.replace(chunks[k], stored=stored, compression=comp)
        models[0].blocks[0] = dataclasses.replace(b, chunks=chunks)
    if depth == 2:
        m = models[0]
        models[0] = partkit.PartModel(m.blocks, [[0], list(range(1, len(m.blocks)))], 2)
    parts = [partkit.build_part(m, chunks="raw" if chunk0 is None else "keep", pages=pages) for m in models]
    if part_fn is not None:
        parts = [part_fn(parts[0])] + parts[1:]
    manifest = json.loads(json.dumps(manifest))
    for p, data in zip(manifest["files"], parts):
        p["file_size"] = len(data)
    keep = False
    if manifest_fn is not None:
        manifest_fn(manifest)
        keep = True
    d, entry = _write(tmp_path, manifest, parts, keep_sizes=keep)
    if entry_fn is not None:
        entry_fn(entry)
    return tmp_path, d, entry


def measure(call):
    """(exception, tracemalloc peak bytes, RSS high-water growth MiB) of ``call`` (which must raise)."""
    try:
        call()  # warm-up
    except Exception:  # noqa: BLE001
        pass
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tracemalloc.start()
    tracemalloc.reset_peak()
    base_mem = tracemalloc.get_traced_memory()[0]
    exc = None
    try:
        call()
    except Exception as e:  # noqa: BLE001
        exc = e
    peak = tracemalloc.get_traced_memory()[1] - base_mem
    tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - rss0
    return exc, peak, rss


def _col(k: int, field: str) -> tuple[int, int]:
    """(offset inside a leaf page, width) of column descriptor k of block 0."""
    rel = {"role": (0, 4), "column_id": (4, 4), "offset": (8, 8), "stored_len": (16, 4), "decoded_len": (20, 4),
           "encoding": (32, 2), "compression": (34, 2), "null_count": (40, 4)}[field]
    return 56 + 44 * k + rel[0], rel[1]


def patch_col(k, field, value):
    def f(part):
        at, w = _col(k, field)
        return partkit.fix_checksums(partkit.patch(part, partkit.root_offset(part) + at, w, value))
    return f


def raw_frame(payload: bytes, fcs: int | None, fcs_bytes: int = 8) -> bytes:
    """One Zstd frame of raw blocks; FCS field of ``fcs_bytes`` (single segment) or none (window 1 MiB)."""
    out = bytearray(b"\x28\xb5\x2f\xfd")
    if fcs is None:
        out += bytes([0x00, (10 << 3)])  # no FCS, window descriptor: 2**(10+10) = 1 MiB
    else:
        flag = {1: 0, 2: 1, 4: 2, 8: 3}[fcs_bytes]
        out.append((flag << 6) | (1 << 5))
        out += (fcs - (256 if fcs_bytes == 2 else 0)).to_bytes(fcs_bytes, "little")
    out += ((len(payload) << 3) | 1).to_bytes(3, "little") + payload
    return bytes(out)


def rle_bomb(n_blocks: int, block: int = 128 << 10) -> bytes:
    """A frame without content size whose RLE blocks expand to ``n_blocks * block`` bytes."""
    out = bytearray(b"\x28\xb5\x2f\xfd\x00" + bytes([(13 << 3)]))  # window 8 MiB
    for i in range(n_blocks):
        last = 1 if i == n_blocks - 1 else 0
        out += ((block << 3) | (1 << 1) | last).to_bytes(3, "little") + b"\x00"
    return bytes(out)


def zstd_no_size(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=3, write_content_size=False).compress(data)


def read_entry(root, d, entry):
    return lambda: gs.open_artifact(root, entry=entry).read()


def read_dir(root, d, entry):
    return lambda: gs.open_artifact(d).read()


def inspect_entry(root, d, entry):
    return lambda: gs.open_artifact(root, entry=entry).inspect()


CORRUPT, UNSUP, MISMATCH = gs.CorruptArtifactError, gs.UnsupportedError, gs.CatalogMismatchError

# (id, build kwargs, call, expected class, rule regex)
CASES = [
    # --- manifest and catalog entry --------------------------------------------------
    ("manifest part file_size 2**40", dict(manifest_fn=lambda m: m["files"][0].update(file_size=1 << 40)),
     read_entry, CORRUPT, r"shorter than its recorded size"),
    ("manifest part file_size 2**63-1", dict(manifest_fn=lambda m: m["files"][0].update(file_size=(1 << 63) - 1)),
     read_entry, CORRUPT, r"shorter than its recorded size"),
    ("manifest num_rows/num_blocks 2**64-1",
     dict(manifest_fn=lambda m: m["files"][0].update(num_rows=U64, num_blocks=U64)),
     read_entry, CORRUPT, r"part holds .* manifest part descriptor says 18446744073709551615 blocks"),
    ("manifest num_rows 2**64-1 (inspect)",
     dict(manifest_fn=lambda m: m["files"][0].update(num_rows=U64, num_blocks=U64)),
     inspect_entry, CORRUPT, r"part holds"),
    ("manifest num_rows > num_blocks * 8192", dict(manifest_fn=lambda m: m["files"][0].update(num_rows=U64)),
     read_entry, CORRUPT, r"exceeds num_blocks"),
    ("manifest part file_size 2**64 (out of u64)",
     dict(manifest_fn=lambda m: m["files"][0].update(file_size=1 << 64)), read_entry, CORRUPT, r"out of range for u64"),
    ("entry manifest size 2**64-1",
     dict(entry_fn=lambda e: (e["objects"][0].update(file_size=U64 - sum(o["file_size"] for o in e["objects"][1:])),
                              e.update(file_size=U64))),
     read_entry, CORRUPT, r"exceeds the manifest limit"),
    ("entry part size 2**64-1",
     dict(entry_fn=lambda e: (e["objects"][1].update(file_size=U64 - sum(o["file_size"] for i, o in enumerate(e["objects"]) if i != 1)),
                              e.update(file_size=U64))),
     read_entry, MISMATCH, r"file_size"),
    ("entry file_size sum overflows u64",
     dict(entry_fn=lambda e: (e["objects"][1].update(file_size=U64), e.update(file_size=U64))),
     read_entry, MISMATCH, r"not the sum of the object sizes"),
    # --- trailer ------------------------------------------------------------------------
    ("trailer file_length 2**64-1", dict(part_fn=lambda p: partkit.patch_trailer(p, "file_length", U64)),
     read_entry, CORRUPT, r"trailer file length 18446744073709551615 differs"),
    ("trailer payload_end 2**64-1", dict(part_fn=lambda p: partkit.patch_trailer(p, "payload_end", U64)),
     read_entry, CORRUPT, r"payload_end 18446744073709551615 lies outside"),
    ("trailer root offset 2**64-1", dict(part_fn=lambda p: partkit.patch_trailer(p, "offset", U64)),
     read_entry, CORRUPT, r"overflows u64"),
    ("trailer root offset 2**64-16", dict(part_fn=lambda p: partkit.patch_trailer(p, "offset", U64 - 15)),
     read_entry, CORRUPT, r"overflows u64|outside the metadata area"),
    ("trailer root stored_len 2**32-1", dict(part_fn=lambda p: partkit.patch_trailer(p, "stored_len", U32)),
     read_entry, CORRUPT, r"outside the metadata area"),
    ("trailer root decoded_len 2**32-1 (zstd)",
     dict(part_fn=lambda p: partkit.patch_trailer(partkit.patch_trailer(p, "compression", 1), "decoded_len", U32)),
     read_entry, CORRUPT, r"page decoded length 4294967295 exceeds 65536"),
    ("trailer depth 2**32-1", dict(part_fn=lambda p: partkit.patch_trailer(p, "depth", U32)),
     read_entry, UNSUP, r"index depth 4294967295 is not supported"),
    # --- pages ----------------------------------------------------------------------------
    ("leaf entry_count 2**64-1", dict(part_fn=lambda p: partkit.patch_root_page(p, "entry_count", U64)),
     read_entry, CORRUPT, r"entry_count 18446744073709551615 cannot fit"),
    ("leaf entry_count 2**63", dict(part_fn=lambda p: partkit.patch_root_page(p, "entry_count", 1 << 63)),
     read_entry, CORRUPT, r"cannot fit"),
    ("block row_count 2**32-1", dict(part_fn=lambda p: partkit.patch_root_page(p, "b0_row_count", U32)),
     read_entry, CORRUPT, r"row count 4294967295 exceeds the cap"),
    ("block column_count 2**32-1", dict(part_fn=lambda p: partkit.patch_root_page(p, "b0_column_count", U32)),
     read_entry, CORRUPT, r"runs past the end"),
    ("internal entry_count 2**64-1",
     dict(depth=2, part_fn=lambda p: partkit.patch_root_page(p, "entry_count", U64)),
     read_entry, CORRUPT, r"internal page with entry_count 18446744073709551615"),
    ("internal child offset 2**64-1", dict(depth=2, part_fn=lambda p: partkit.patch_root_page(p, "r0_offset", U64)),
     read_entry, CORRUPT, r"overflows u64"),
    ("internal child stored_len 2**32-1",
     dict(depth=2, part_fn=lambda p: partkit.patch_root_page(p, "r0_stored_len", U32)),
     read_entry, CORRUPT, r"outside the metadata area|page stored length"),
    ("internal child decoded_len 2**32-1",
     dict(depth=2, part_fn=lambda p: partkit.patch_root_page(p, "r0_decoded_len", U32)),
     read_entry, CORRUPT, r"compression 0 requires equal lengths|exceeds 65536"),
    # --- chunk references -------------------------------------------------------------------
    ("chunk offset 2**64-1", dict(part_fn=patch_col(0, "offset", U64)), read_entry, CORRUPT, r"overflows u64"),
    ("chunk offset 2**64-16", dict(part_fn=patch_col(0, "offset", U64 - 15)), read_entry, CORRUPT,
     r"overflows u64|outside the column area"),
    ("chunk stored_len 2**32-1", dict(part_fn=patch_col(0, "stored_len", U32)), read_entry, CORRUPT,
     r"outside the column area"),
    ("chunk decoded_len 2**32-1 (zstd)",
     dict(part_fn=lambda p: patch_col(0, "decoded_len", U32)(patch_col(0, "compression", 1)(p))),
     read_entry, CORRUPT, r"chunk decoded length 4294967295 exceeds 1048576"),
    ("field null_count 2**32-1", dict(part_fn=patch_col(3, "null_count", U32)), read_entry, CORRUPT,
     r"null_count < row_count"),
    # --- Zstd frames claiming more than declared --------------------------------------------
    ("zstd chunk content size 2**64-1",
     dict(chunk0=(0, raw_frame(b"\x00" * 16, U64), 1)),
     read_entry, CORRUPT, r"DECODED_LENGTH_MISMATCH|ZSTD_FRAME_INVALID"),
    ("zstd chunk RLE bomb 12.5 MiB declared 16 B",
     dict(chunk0=(0, rle_bomb(100), 1)),
     read_entry, CORRUPT, r"DECODED_LENGTH_MISMATCH"),
    ("zstd root page without content size expanding to 16 MiB", dict(pages="zstd"), None, CORRUPT,
     r"Zstd|decompress"),
]


def _bomb_page(base, tmp_path):
    """Depth-1 part whose root page is a Zstd frame (no content size) of 16 MiB, declared 65,536 bytes."""
    manifest, models = base
    part = partkit.build_part(models[0], chunks="raw", pages="raw")
    r = partkit.root_offset(part)
    t = len(part) - C.TRAILER_SIZE
    page = part[r:t]
    bomb = zstd_no_size(page + b"\x00" * (16 * 2**20 - len(page)))
    new = bytearray(part[:r] + bomb + part[t:])
    new = partkit.patch(bytes(new), len(new) - C.TRAILER_SIZE + partkit.TR["stored_len"], 4, len(bomb))
    new = partkit.patch(new, len(new) - C.TRAILER_SIZE + partkit.TR["decoded_len"], 4, 65536)
    new = partkit.patch(new, len(new) - C.TRAILER_SIZE + partkit.TR["compression"], 2, 1)
    new = partkit.patch(new, len(new) - C.TRAILER_SIZE + partkit.TR["file_length"], 8, len(new))
    new = partkit.fix_checksums(new)
    m = json.loads(json.dumps(manifest))
    m["files"][0]["file_size"] = len(new)
    d, entry = _write(tmp_path, m, [new] + [partkit.build_part(x, chunks="raw", pages="raw") for x in models[1:]])
    return tmp_path, d, entry


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_forged_size_refused_without_allocation(base, tmp_path, case):
    name, kw, call, cls, rule = case
    if call is None:
        root, d, entry = _bomb_page(base, tmp_path)
        call = read_entry
    else:
        root, d, entry = build(base, tmp_path, **kw)
    exc, peak, rss = measure(call(root, d, entry))
    print(f"\nFORGED {name}: {type(exc).__name__}; tracemalloc peak {peak / 1024:.1f} KiB; RSS +{rss:.1f} MiB")
    assert exc is not None, f"{name}: no error"
    assert isinstance(exc, cls), f"{name}: {type(exc).__name__}: {exc}"
    assert pytest.importorskip("re").search(rule, str(exc)), f"{name}: rule not named: {exc}"
    assert peak < PEAK_LIMIT, f"{name}: tracemalloc peak {peak / 2**20:.1f} MiB"
    assert rss < RSS_LIMIT_MB, f"{name}: RSS high-water grew {rss:.0f} MiB"


def test_valid_base_reads(base, tmp_path):
    root, d, entry = build(base, tmp_path)
    assert gs.open_artifact(root, entry=entry).read().num_rows == 12
    root2, d2, entry2 = build(base, tmp_path / "d2", depth=2)
    assert gs.open_artifact(root2, entry=entry2).read().num_rows == 12
    assert gs.open_artifact(root2, entry=entry2).inspect()["parts"][0]["depth"] == 2


def test_manifest_at_the_size_limit_allocates_at_most_the_limit(base, tmp_path):
    """An entry recording a 64 MiB manifest (the spec's limit) for a small object: the
    reader may allocate the recorded size (allowed), never more, and fails on the short read."""
    root, d, entry = build(base, tmp_path, entry_fn=lambda e: (
        e["objects"][0].update(file_size=C.MAX_MANIFEST_BYTES),
        e.update(file_size=sum(o["file_size"] for o in e["objects"]))))
    exc, peak, rss = measure(read_entry(root, d, entry))
    assert isinstance(exc, gs.CorruptArtifactError) and "shorter than its recorded size" in str(exc)
    assert peak <= C.MAX_MANIFEST_BYTES + PEAK_LIMIT


def test_manifest_over_the_limit_refused_before_reading(base, tmp_path):
    root, d, entry = build(base, tmp_path, entry_fn=lambda e: (
        e["objects"][0].update(file_size=C.MAX_MANIFEST_BYTES + 1),
        e.update(file_size=sum(o["file_size"] for o in e["objects"]))))
    exc, peak, rss = measure(read_entry(root, d, entry))
    assert isinstance(exc, gs.CorruptArtifactError) and "exceeds the manifest limit" in str(exc)
    assert peak < PEAK_LIMIT


# --- findings F1-F3 (benchmarks/FUZZING.md; fixed in storage.py during the campaign) -----------


@pytest.mark.parametrize("size", [U64, (1 << 63) + 112])
def test_part_size_beyond_off_t_is_corrupt(base, tmp_path, size):
    """F2: was os.preadv OverflowError for a trailer offset >= 2**63."""
    root, d, entry = build(base, tmp_path, manifest_fn=lambda m: m["files"][0].update(file_size=size))
    exc, peak, rss = measure(read_dir(root, d, entry))
    assert isinstance(exc, gs.CorruptArtifactError), repr(exc)
    assert peak < PEAK_LIMIT


def test_part_size_at_off_t_max_is_corrupt(base, tmp_path):
    """F3: was preadv EINVAL surfacing as the base SamplesError."""
    root, d, entry = build(base, tmp_path, manifest_fn=lambda m: m["files"][0].update(file_size=1 << 63))
    exc, peak, rss = measure(read_dir(root, d, entry))
    assert isinstance(exc, gs.CorruptArtifactError), repr(exc)


def test_open_generation_dir_allocates_little(base, tmp_path):
    """F1: was a 64 MiB + 1 buffer (f.read(limit + 1)) for every manifest opened without an entry."""
    root, d, entry = build(base, tmp_path)
    gs.open_artifact(d)
    tracemalloc.start()
    tracemalloc.reset_peak()
    b0 = tracemalloc.get_traced_memory()[0]
    gs.open_artifact(d)
    peak = tracemalloc.get_traced_memory()[1] - b0
    tracemalloc.stop()
    assert peak < PEAK_LIMIT, f"open_artifact(generation dir) peak {peak / 2**20:.1f} MiB"
