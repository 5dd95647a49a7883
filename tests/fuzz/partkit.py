"""Test-only tools to take a part file apart and put it back together.

Independent of the reader (``gtsamples.format.pages``) on purpose: it parses
*valid* parts written by our writer (or the interop vectors) into a small
model, and rebuilds parts from a model with any choice of chunk/page
compression, page grouping and depth -- with correct offsets, lengths and
checksums.  The fuzz harness, the seed-corpus builder and the forged-size and
bad-file tests use it to make well-formed variants and *precisely* broken
files (every checksum fixed so the fault under test is the only one).

``fix_checksums`` repairs, best effort and without ever failing, every XXH64
a mutated part carries (chunks, leaves, internal root, trailer), so fuzzing
gets past the checksums into the structural and decoding rules.
"""

from __future__ import annotations

import dataclasses
import json
import struct

import numpy as np
import xxhash
import zstandard

from gtsamples.format import constants as C
from gtsamples.format import structs as S

_ZC = zstandard.ZstdCompressor(level=3)
_ZD = zstandard.ZstdDecompressor()


def xxh(b) -> int:
    return xxhash.xxh64_intdigest(bytes(b))


@dataclasses.dataclass
class Chunk:
    role: int
    column_id: int
    null_count: int
    encoding: int
    compression: int  # as stored in the source
    stored: bytes  # stored bytes as found
    decoded: bytes  # decoded bytes (== stored for compression 0)


@dataclasses.dataclass
class Block:
    table_id: int
    tsid: int
    min_timestamp: int
    max_timestamp: int
    ordinal: int
    row_count: int
    chunks: list[Chunk]


@dataclasses.dataclass
class PartModel:
    blocks: list[Block]
    leaves: list[list[int]]  # block indices per leaf, in order
    depth: int

    @property
    def first(self):
        b = self.blocks[0]
        return (b.table_id, b.tsid)

    @property
    def last(self):
        b = self.blocks[-1]
        return (b.table_id, b.tsid)


def _load(data: bytes, ref) -> bytes:
    off, n = int(ref["offset"]), int(ref["stored_len"])
    stored = data[off: off + n]
    if int(ref["compression"]) == C.COMP_ZSTD:
        return _ZD.decompress(stored, max_output_size=int(ref["decoded_len"]))
    return stored


def _parse_leaf(data: bytes, page: bytes) -> list[Block]:
    count = struct.unpack_from("<Q", page, 4)[0]
    pos = C.PAGE_PREFIX_SIZE
    out = []
    for _ in range(count):
        bp = np.frombuffer(page, S.BLOCK_PREFIX, count=1, offset=pos)[0]
        cc = int(bp["column_count"])
        cols = np.frombuffer(page, S.COLUMN_DESC, count=cc, offset=pos + C.BLOCK_PREFIX_SIZE)
        chunks = []
        for c in cols:
            r = c["ref"]
            off, n = int(r["offset"]), int(r["stored_len"])
            chunks.append(Chunk(int(c["role"]), int(c["column_id"]), int(c["null_count"]), int(r["encoding"]),
                                int(r["compression"]), data[off: off + n], _load(data, r)))
        out.append(Block(int(bp["table_id"]), int(bp["tsid"]), int(bp["min_timestamp"]), int(bp["max_timestamp"]),
                         int(bp["ordinal"]), int(bp["row_count"]), chunks))
        pos += C.BLOCK_PREFIX_SIZE + C.COLUMN_DESC_SIZE * cc
    assert pos == len(page), "trailing bytes in leaf"
    return out


def parse_part(data: bytes) -> PartModel:
    """Model of a *valid* part (no validation beyond what parsing needs)."""
    data = bytes(data)
    tr = np.frombuffer(data, S.TRAILER, count=1, offset=len(data) - C.TRAILER_SIZE)[0]
    depth = int(tr["depth"])
    root = _load(data, tr["root"]["ref"])
    blocks: list[Block] = []
    leaves: list[list[int]] = []
    if depth == 1:
        bl = _parse_leaf(data, root)
        leaves.append(list(range(len(bl))))
        blocks += bl
    else:
        count = struct.unpack_from("<Q", root, 4)[0]
        refs = np.frombuffer(root, S.PAGE_REF, count=count, offset=C.PAGE_PREFIX_SIZE)
        for r in refs:
            bl = _parse_leaf(data, _load(data, r["ref"]))
            leaves.append(list(range(len(blocks), len(blocks) + len(bl))))
            blocks += bl
    return PartModel(blocks, leaves, depth)


def _store(decoded: bytes, original_comp: int, original_stored: bytes, mode: str) -> tuple[bytes, int]:
    """Stored bytes and compression for ``mode``: keep | raw | zstd | auto."""
    if mode == "keep":
        return original_stored, original_comp
    if mode == "raw":
        return decoded, C.COMP_RAW
    z = _ZC.compress(decoded)
    if mode == "zstd":
        return z, C.COMP_ZSTD
    return (z, C.COMP_ZSTD) if len(z) < len(decoded) else (decoded, C.COMP_RAW)


def _page_ref(first, last, mn, mx, offset, stored, decoded, comp) -> np.ndarray:
    r = np.zeros(1, S.PAGE_REF)
    r["first_table_id"], r["first_tsid"] = first
    r["last_table_id"], r["last_tsid"] = last
    r["min_timestamp"], r["max_timestamp"] = mn, mx
    ref = r["ref"]
    ref["offset"], ref["stored_len"], ref["decoded_len"] = offset, len(stored), decoded
    ref["checksum"] = xxh(stored)
    ref["encoding"], ref["compression"] = C.META_ENC_PAGE, comp
    return r


def build_part(model: PartModel, chunks: str = "keep", pages: str = "auto") -> bytes:
    """Serialise ``model``: header, chunks in block order, leaves, optional internal root, trailer.

    ``chunks``/``pages``: keep (chunks only) | raw | zstd | auto.  ``model.depth``
    2 writes an internal root over ``model.leaves`` (depth 1 needs one leaf).
    """
    out = bytearray()
    h = np.zeros(1, S.HEADER)
    h["magic"], h["version"] = C.MAGIC, C.FILE_VERSION
    out += h.tobytes()
    descs: list[bytes] = []
    for b in model.blocks:
        p = np.zeros(1, S.BLOCK_PREFIX)
        p["table_id"], p["tsid"] = b.table_id, b.tsid
        p["min_timestamp"], p["max_timestamp"] = b.min_timestamp, b.max_timestamp
        p["ordinal"], p["row_count"], p["column_count"] = b.ordinal, b.row_count, len(b.chunks)
        d = bytearray(p.tobytes())
        for c in b.chunks:
            st, comp = _store(c.decoded, c.compression, c.stored, chunks)
            cd = np.zeros(1, S.COLUMN_DESC)
            cd["role"], cd["column_id"], cd["null_count"] = c.role, c.column_id, c.null_count
            r = cd["ref"]
            r["offset"], r["stored_len"], r["decoded_len"] = len(out), len(st), len(c.decoded)
            r["checksum"], r["encoding"], r["compression"] = xxh(st), c.encoding, comp
            out += st
            d += cd.tobytes()
        descs.append(bytes(d))
    payload_end = len(out)
    if model.depth == 1:
        assert len(model.leaves) == 1
    leaf_refs = []
    for idx in model.leaves:
        pre = np.zeros(1, S.PAGE_PREFIX)
        pre["kind"], pre["entry_count"] = C.PAGE_KIND_LEAF, len(idx)
        page = pre.tobytes() + b"".join(descs[i] for i in idx)
        st, comp = _store(page, 0, b"", pages)
        bl = [model.blocks[i] for i in idx]
        leaf_refs.append(_page_ref((bl[0].table_id, bl[0].tsid), (bl[-1].table_id, bl[-1].tsid),
                                   min(b.min_timestamp for b in bl), max(b.max_timestamp for b in bl),
                                   len(out), st, len(page), comp))
        out += st
    if model.depth == 1:
        root = leaf_refs[0]
    else:
        pre = np.zeros(1, S.PAGE_PREFIX)
        pre["kind"], pre["entry_count"] = C.PAGE_KIND_INTERNAL, len(leaf_refs)
        page = pre.tobytes() + b"".join(r.tobytes() for r in leaf_refs)
        st, comp = _store(page, 0, b"", pages)
        root = _page_ref(tuple(leaf_refs[0][["first_table_id", "first_tsid"]][0].tolist()),
                         tuple(leaf_refs[-1][["last_table_id", "last_tsid"]][0].tolist()),
                         min(int(r["min_timestamp"][0]) for r in leaf_refs),
                         max(int(r["max_timestamp"][0]) for r in leaf_refs), len(out), st, len(page), comp)
        out += st
    tr = np.zeros(1, S.TRAILER)
    tr["root"] = root
    tr["depth"], tr["version"] = model.depth, C.FILE_VERSION
    tr["file_length"] = len(out) + C.TRAILER_SIZE
    tr["payload_end"] = payload_end
    tr["magic"] = C.MAGIC
    tb = bytearray(tr.tobytes())
    struct.pack_into("<Q", tb, C.TRAILER_CHECKSUMMED, xxh(tb[: C.TRAILER_CHECKSUMMED]))
    out += tb
    return bytes(out)


def part_descriptor(model: PartModel, part_id: int, file_size: int) -> dict:
    return {
        "part_id": part_id,
        "file_size": file_size,
        "num_rows": sum(b.row_count for b in model.blocks),
        "num_blocks": len(model.blocks),
        "first": {"table_id": model.first[0], "tsid": model.first[1]},
        "last": {"table_id": model.last[0], "tsid": model.last[1]},
        "min_timestamp": min(b.min_timestamp for b in model.blocks),
        "max_timestamp": max(b.max_timestamp for b in model.blocks),
    }


# --- best-effort checksum repair of arbitrary (mutated) bytes -----------------------


def _fix_leaf(buf: bytearray, lo: int, hi: int, fix_chunks: bool) -> None:
    """Fix chunk checksums referenced by a raw leaf stored at ``buf[lo:hi]``."""
    if hi - lo < C.PAGE_PREFIX_SIZE:
        return
    count = struct.unpack_from("<Q", buf, lo + 4)[0]
    pos = lo + C.PAGE_PREFIX_SIZE
    for _ in range(min(count, 4096)):
        if pos + C.BLOCK_PREFIX_SIZE > hi:
            return
        cc = struct.unpack_from("<I", buf, pos + 40)[0]
        pos += C.BLOCK_PREFIX_SIZE
        for _ in range(min(cc, 4096)):
            if pos + C.COLUMN_DESC_SIZE > hi:
                return
            off, n = struct.unpack_from("<QI", buf, pos + 8)
            if fix_chunks and n and off + n <= len(buf):
                struct.pack_into("<Q", buf, pos + 8 + 16, xxh(buf[off: off + n]))
            pos += C.COLUMN_DESC_SIZE


def _ref_range(buf, at: int):
    """(offset, stored_len, compression) of the 32-byte payload reference at ``at``."""
    off, n, _dec, _ck, _enc, comp = struct.unpack_from("<QIIQHH", buf, at)
    return off, n, comp


def fix_checksums(data: bytes, fix_chunks: bool = True) -> bytes:
    """Recompute every checksum that can be located, innermost first. Never raises."""
    buf = bytearray(data)
    n = len(buf)
    if n < C.HEADER_SIZE + C.TRAILER_SIZE:
        return bytes(buf)
    t = n - C.TRAILER_SIZE
    root_ref_at = t + 40  # the payload reference inside the trailer's root page reference
    depth = struct.unpack_from("<I", buf, t + 72)[0]
    off, ln, comp = _ref_range(buf, root_ref_at)
    if ln and off + ln <= n:
        if comp == C.COMP_RAW:
            kind = struct.unpack_from("<I", buf, off)[0] if ln >= 4 else None
            if kind == C.PAGE_KIND_INTERNAL or (depth == 2 and kind != C.PAGE_KIND_LEAF):
                if ln >= C.PAGE_PREFIX_SIZE:
                    count = struct.unpack_from("<Q", buf, off + 4)[0]
                    for k in range(min(count, (ln - C.PAGE_PREFIX_SIZE) // C.PAGE_REF_SIZE)):
                        at = off + C.PAGE_PREFIX_SIZE + C.PAGE_REF_SIZE * k + 40
                        co, cl, cc = _ref_range(buf, at)
                        if cl and co + cl <= n:
                            if cc == C.COMP_RAW:
                                _fix_leaf(buf, co, co + cl, fix_chunks)
                            struct.pack_into("<Q", buf, at + 16, xxh(buf[co: co + cl]))
            else:
                _fix_leaf(buf, off, off + ln, fix_chunks)
        struct.pack_into("<Q", buf, root_ref_at + 16, xxh(buf[off: off + ln]))
    struct.pack_into("<Q", buf, t + C.TRAILER_CHECKSUMMED, xxh(buf[t: t + C.TRAILER_CHECKSUMMED]))
    return bytes(buf)


# --- artifacts on disk ----------------------------------------------------------------


def read_artifact_files(store_root, entry) -> tuple[bytes, list[bytes]]:
    """(manifest bytes, part bytes...) of an artifact written under ``store_root``."""
    import os

    entry = dict(entry)
    prefix = f"{entry['region_id']}/samples/{entry['file_id']}/{entry['generation']}/"
    d = os.path.join(os.fspath(store_root), prefix)
    with open(os.path.join(d, "manifest.json"), "rb") as f:
        manifest = f.read()
    m = json.loads(manifest)
    parts = []
    for p in m["files"]:
        with open(os.path.join(d, f"part-{p['part_id']}.samples"), "rb") as f:
            parts.append(f.read())
    return manifest, parts


def entry_for(manifest: dict, manifest_size: int) -> dict:
    prefix = f"{manifest['region_id']}/samples/{manifest['source_file_id']}/{manifest['generation']}/"
    objects = [{"path": prefix + "manifest.json", "file_size": manifest_size}] + [
        {"path": prefix + f"part-{p['part_id']}.samples", "file_size": p["file_size"]} for p in manifest["files"]
    ]
    return {
        "region_id": manifest["region_id"],
        "file_id": manifest["source_file_id"],
        "generation": manifest["generation"],
        "objects": objects,
        "file_size": sum(o["file_size"] for o in objects),
    }


def manifest_bytes(manifest: dict) -> bytes:
    return (json.dumps(manifest, indent=1) + "\n").encode()


def write_artifact_dir(store_root, manifest: dict, parts: list[bytes]) -> dict:
    """Write manifest + parts under ``store_root`` (sizes taken from ``parts``); return the entry."""
    import os

    manifest = json.loads(json.dumps(manifest))
    for p, data in zip(manifest["files"], parts):
        p["file_size"] = len(data)
    mb = manifest_bytes(manifest)
    prefix = f"{manifest['region_id']}/samples/{manifest['source_file_id']}/{manifest['generation']}/"
    d = os.path.join(os.fspath(store_root), prefix)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "manifest.json"), "wb") as f:
        f.write(mb)
    for i, data in enumerate(parts):
        with open(os.path.join(d, f"part-{i}.samples"), "wb") as f:
            f.write(data)
    return entry_for(manifest, len(mb))


# --- precise forgeries ------------------------------------------------------------------

#: Byte offsets inside the 112-byte trailer.
TR = {"first_table_id": 0, "first_tsid": 4, "last_table_id": 12, "last_tsid": 16, "min_timestamp": 24,
      "max_timestamp": 32, "offset": 40, "stored_len": 48, "decoded_len": 52, "checksum": 56, "encoding": 64,
      "compression": 66, "reserved": 68, "depth": 72, "version": 76, "file_length": 80, "payload_end": 88,
      "magic": 96, "checksum_trailer": 104}
#: Byte offsets inside a decoded page: prefix, first block prefix, its first column descriptor.
PG = {"kind": 0, "entry_count": 4, "b0_table_id": 12, "b0_tsid": 16, "b0_min": 24, "b0_max": 32, "b0_ordinal": 40,
      "b0_row_count": 48, "b0_column_count": 52, "c0_role": 56, "c0_column_id": 60, "c0_offset": 64,
      "c0_stored_len": 72, "c0_decoded_len": 76, "c0_checksum": 80, "c0_encoding": 88, "c0_compression": 90,
      "c0_reserved": 92, "c0_null_count": 96}
#: Internal page: first child reference's payload reference fields.
IP = {"kind": 0, "entry_count": 4, "r0_offset": 12 + 40, "r0_stored_len": 12 + 48, "r0_decoded_len": 12 + 52}
_FMT = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}
_WIDTH = {"first_table_id": 4, "last_table_id": 4, "stored_len": 4, "decoded_len": 4, "encoding": 2, "compression": 2,
          "reserved": 4, "depth": 4, "version": 4, "magic": 8, "kind": 4, "b0_table_id": 4, "b0_row_count": 4,
          "b0_column_count": 4, "c0_role": 4, "c0_column_id": 4, "c0_stored_len": 4, "c0_decoded_len": 4,
          "c0_encoding": 2, "c0_compression": 2, "c0_reserved": 4, "c0_null_count": 4, "r0_stored_len": 4,
          "r0_decoded_len": 4}


def patch(data: bytes, at: int, width: int, value: int) -> bytes:
    b = bytearray(data)
    struct.pack_into(_FMT[width], b, at, value & ((1 << (8 * width)) - 1))
    return bytes(b)


def root_offset(part: bytes) -> int:
    return struct.unpack_from("<Q", part, len(part) - C.TRAILER_SIZE + TR["offset"])[0]


def patch_trailer(part: bytes, field: str, value: int, fix: bool = True) -> bytes:
    out = patch(part, len(part) - C.TRAILER_SIZE + TR[field], _WIDTH.get(field, 8), value)
    return fix_checksums(out) if fix else out


def patch_root_page(part: bytes, field: str, value: int, fix: bool = True) -> bytes:
    """Patch a field of the (raw) root page: PG for a leaf root, IP for an internal root."""
    table = IP if field.startswith("r0_") else PG
    out = patch(part, root_offset(part) + table[field], _WIDTH.get(field, 8), value)
    return fix_checksums(out) if fix else out
