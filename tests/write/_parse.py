"""A tiny standalone parser/decoder for the tests of the writer.

Independent of the real reader (being written concurrently): it parses a part
with the contract's numpy dtypes, checks the structural rules the writer must
obey, and decodes every chunk with plain-Python reference decoders.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import xxhash
import zstandard

from gtsamples.format import constants as C
from gtsamples.format import structs as S

U64 = (1 << 64) - 1


# --- primitive decoders (plain Python, straight from the spec) ---------------


def read_uvarint(b: bytes, pos: int) -> tuple[int, int]:
    x = 0
    shift = 0
    start = pos
    while True:
        if pos >= len(b):
            raise ValueError("truncated varint")
        c = b[pos]
        pos += 1
        x |= (c & 0x7F) << shift
        if not c & 0x80:
            break
        shift += 7
        if pos - start >= 10:
            raise ValueError("varint too long")
    # the writer must emit the shortest form
    assert pos - start == max(1, (x.bit_length() + 6) // 7), ("non-shortest varint", b[start:pos])
    return x, pos


def unzigzag(u: int) -> int:
    return (u >> 1) ^ -(u & 1)


def to_i64(u: int) -> int:
    u &= U64
    return u - (1 << 64) if u >> 63 else u


def dec_ts(enc: int, b: bytes, n: int) -> list[int]:
    if enc == 1:
        assert len(b) == 16
        first, step = np.frombuffer(b, "<i8").tolist()
        assert step >= 0
        out = [first + i * step for i in range(n)]
        assert all(C.I64_MIN <= v <= C.I64_MAX for v in out)
        return out
    assert enc == 2
    first = int(np.frombuffer(b[:8], "<i8")[0])
    out = [first]
    pos = 8
    if n >= 2:
        z, pos = read_uvarint(b, pos)
        d = unzigzag(z)
        out.append(to_i64(first + d))
        for _ in range(n - 2):
            z, pos = read_uvarint(b, pos)
            d = to_i64(d + unzigzag(z))
            out.append(to_i64(out[-1] + d))
    assert pos == len(b), "trailing bytes"
    return out


def dec_seq(enc: int, b: bytes, n: int) -> list[int]:
    if enc == 3:
        assert len(b) == 8
        return [int(np.frombuffer(b, "<u8")[0])] * n
    assert enc == 4
    out = [int(np.frombuffer(b[:8], "<u8")[0])]
    pos = 8
    for _ in range(n - 1):
        z, pos = read_uvarint(b, pos)
        out.append((out[-1] + unzigzag(z)) & U64)
    assert pos == len(b), "trailing bytes"
    return out


def dec_op(enc: int, b: bytes, n: int) -> list[int]:
    if enc == 6:
        assert len(b) == 1
        return [b[0]] * n
    assert enc == 7 and len(b) == n
    return list(b)


def dec_f64(b: bytes, n: int, null_count: int) -> tuple[list[int | None], int]:
    """Bit patterns (or None for null); returns (values, validity kind)."""
    kind = b[0]
    pos = 1
    if kind == 0:
        assert null_count == 0
        valid = [True] * n
    else:
        assert kind == 1 and 0 < null_count < n
        nb = (n + 7) // 8
        bm = b[pos : pos + nb]
        pos += nb
        valid = [bool(bm[i // 8] >> (i % 8) & 1) for i in range(n)]
        assert valid.count(False) == null_count
        if n % 8:
            assert bm[-1] >> (n % 8) == 0, "unused validity bits must be zero"
    prev = int(np.frombuffer(b[pos : pos + 8], "<u8")[0])
    pos += 8
    vals: list[int | None] = []
    first = True
    for v in valid:
        if not v:
            vals.append(None)
            continue
        if first:
            first = False
        else:
            x, pos = read_uvarint(b, pos)
            prev ^= x
        vals.append(prev)
    assert pos == len(b), "trailing bytes"
    return vals, kind


# --- structure ----------------------------------------------------------------


@dataclasses.dataclass
class Chunk:
    role: int
    column_id: int
    ref: np.void
    null_count: int
    decoded: bytes
    stored: bytes


@dataclasses.dataclass
class Block:
    table_id: int
    tsid: int
    min_ts: int
    max_ts: int
    ordinal: int
    rows: int
    chunks: list[Chunk]
    leaf: int


@dataclasses.dataclass
class Part:
    depth: int
    file_length: int
    payload_end: int
    root: np.void
    leaves: list[np.void]  # page refs of the leaves (depth 2) or [root]
    leaf_decoded_sizes: list[int]
    blocks: list[Block]
    page_refs: list[np.void]  # every page ref (leaves, then root) in file order
    chunk_refs: list[np.void]


def _load(data: bytes, ref: np.void) -> bytes:
    off, sl, dl = int(ref["offset"]), int(ref["stored_len"]), int(ref["decoded_len"])
    assert sl > 0 and dl > 0
    assert int(ref["reserved"]) == 0
    stored = data[off : off + sl]
    assert len(stored) == sl
    assert xxhash.xxh64_intdigest(stored) == int(ref["checksum"])
    comp = int(ref["compression"])
    if comp == 0:
        assert sl == dl
        return stored
    assert comp == 1
    assert sl < dl, "zstd chosen only when strictly smaller"
    out = zstandard.ZstdDecompressor().decompress(stored, max_output_size=dl)
    assert len(out) == dl
    return out


def _check_compression_choice(decoded: bytes, ref: np.void) -> None:
    """The default writer: Zstd level 3 iff strictly smaller than raw."""
    z = zstandard.ZstdCompressor(level=3).compress(decoded)
    if len(z) < len(decoded):
        assert int(ref["compression"]) == 1, (len(z), len(decoded))
        assert int(ref["stored_len"]) == len(z)
    else:
        assert int(ref["compression"]) == 0


def _ref_bounds(r: np.void):
    return (
        (int(r["first_table_id"]), int(r["first_tsid"])),
        (int(r["last_table_id"]), int(r["last_tsid"])),
        int(r["min_timestamp"]),
        int(r["max_timestamp"]),
    )


def parse_part(data: bytes, check_compression: bool = False) -> Part:
    hdr = np.frombuffer(data[:16], S.HEADER)[0]
    assert hdr["magic"] == C.MAGIC and int(hdr["version"]) == 1 and int(hdr["reserved"]) == 0
    tr_bytes = data[-112:]
    tr = np.frombuffer(tr_bytes, S.TRAILER)[0]
    assert xxhash.xxh64_intdigest(tr_bytes[:104]) == int(tr["checksum"])
    assert tr["magic"] == C.MAGIC and int(tr["version"]) == 1
    assert int(tr["file_length"]) == len(data)
    depth = int(tr["depth"])
    assert depth in (1, 2)
    pe = int(tr["payload_end"])
    meta_end = len(data) - 112
    root = tr["root"]
    rref = root["ref"]
    assert int(rref["offset"]) + int(rref["stored_len"]) == meta_end, "root ends right before the trailer"
    assert int(rref["encoding"]) == 1

    def page(ref):
        assert pe <= int(ref["offset"]) and int(ref["offset"]) + int(ref["stored_len"]) <= meta_end
        assert int(ref["encoding"]) == C.META_ENC_PAGE
        b = _load(data, ref)
        if check_compression:
            _check_compression_choice(b, ref)
        assert len(b) <= C.MAX_PAGE_DECODED
        return b

    page_refs = []
    if depth == 1:
        leaves = [root]
    else:
        b = page(rref)
        pre = np.frombuffer(b[:12], S.PAGE_PREFIX)[0]
        assert int(pre["kind"]) == 1
        n = int(pre["entry_count"])
        assert 2 <= n <= C.MAX_INTERNAL_ENTRIES
        assert len(b) == 12 + 72 * n
        leaves = list(np.frombuffer(b[12:], S.PAGE_REF))
    blocks: list[Block] = []
    chunk_refs = []
    leaf_sizes = []
    prev_end = pe
    for li, lref in enumerate(leaves):
        r = lref["ref"]
        assert int(r["offset"]) >= prev_end, "children ordered and disjoint"
        prev_end = int(r["offset"]) + int(r["stored_len"])
        page_refs.append(lref)
        b = page(r)
        leaf_sizes.append(len(b))
        pre = np.frombuffer(b[:12], S.PAGE_PREFIX)[0]
        assert int(pre["kind"]) == 0
        n = int(pre["entry_count"])
        assert n >= 1
        pos = 12
        lb = []
        for _ in range(n):
            bp = np.frombuffer(b[pos : pos + 44], S.BLOCK_PREFIX)[0]
            pos += 44
            cc = int(bp["column_count"])
            cds = np.frombuffer(b[pos : pos + 44 * cc], S.COLUMN_DESC)
            pos += 44 * cc
            chunks = []
            for cd in cds:
                ref = cd["ref"]
                assert C.HEADER_SIZE <= int(ref["offset"]) and int(ref["offset"]) + int(ref["stored_len"]) <= pe
                dec = _load(data, ref)
                if check_compression:
                    _check_compression_choice(dec, ref)
                chunk_refs.append(ref)
                stored = data[int(ref["offset"]) : int(ref["offset"]) + int(ref["stored_len"])]
                chunks.append(Chunk(int(cd["role"]), int(cd["column_id"]), ref, int(cd["null_count"]), dec, stored))
            lb.append(
                Block(
                    int(bp["table_id"]), int(bp["tsid"]), int(bp["min_timestamp"]), int(bp["max_timestamp"]),
                    int(bp["ordinal"]), int(bp["row_count"]), chunks, li,
                )
            )
        assert pos == len(b), "no trailing bytes in a leaf"
        # derived bounds equal the reference's bounds
        derived = (
            (lb[0].table_id, lb[0].tsid),
            (lb[-1].table_id, lb[-1].tsid),
            min(x.min_ts for x in lb),
            max(x.max_ts for x in lb),
        )
        assert derived == _ref_bounds(lref), (derived, _ref_bounds(lref))
        blocks.extend(lb)
    if depth == 2:
        page_refs.append(root)
        assert prev_end <= int(rref["offset"])
        derived = (
            _ref_bounds(leaves[0])[0], _ref_bounds(leaves[-1])[1],
            min(_ref_bounds(x)[2] for x in leaves), max(_ref_bounds(x)[3] for x in leaves),
        )
        assert derived == _ref_bounds(root)
    # chunks physically ordered and disjoint, header .. payload_end fully used
    pos = C.HEADER_SIZE
    for r in chunk_refs:
        assert int(r["offset"]) == pos, "chunks are contiguous in block order"
        pos += int(r["stored_len"])
    assert pos == pe
    return Part(depth, len(data), pe, root, leaves, leaf_sizes, blocks, page_refs, chunk_refs)


def decode_block(blk: Block, field_ids: list[int]) -> dict:
    """Decode one block into python lists: ts, seq, op, fields {id: [bits|None]}."""
    ch = blk.chunks
    assert [c.role for c in ch[:3]] == [1, 2, 3]
    assert all(c.column_id == 0 for c in ch[1:3])
    assert all(c.null_count == 0 for c in ch[:3])
    n = blk.rows
    ts = dec_ts(int(ch[0].ref["encoding"]), ch[0].decoded, n)
    assert ts[0] == blk.min_ts and ts[-1] == blk.max_ts
    assert all(a <= b for a, b in zip(ts, ts[1:]))
    seq = dec_seq(int(ch[1].ref["encoding"]), ch[1].decoded, n)
    op = dec_op(int(ch[2].ref["encoding"]), ch[2].decoded, n)
    assert set(op) <= {0, 1}
    fields = {}
    order = []
    for c in ch[3:]:
        assert c.role == 4 and int(c.ref["encoding"]) == 5
        assert c.null_count < n
        vals, _ = dec_f64(c.decoded, n, c.null_count)
        fields[c.column_id] = vals
        order.append(field_ids.index(c.column_id))
    assert order == sorted(order) and len(set(order)) == len(order), "fields in manifest order"
    for fid in field_ids:
        fields.setdefault(fid, [None] * n)
    return {"ts": ts, "seq": seq, "op": op, "fields": fields}


def read_dir(gen_dir: str, check_compression: bool = False):
    """Parse a whole generation directory: (manifest dict, [Part])."""
    with open(os.path.join(gen_dir, "manifest.json"), "rb") as f:
        man = json.loads(f.read())
    parts = []
    for p in man["files"]:
        with open(os.path.join(gen_dir, f"part-{p['part_id']}.samples"), "rb") as f:
            data = f.read()
        assert len(data) == p["file_size"]
        part = parse_part(data, check_compression)
        # root bounds equal the manifest descriptor's
        (first, last, mn, mx) = _ref_bounds(part.root)
        assert first == (p["first"]["table_id"], p["first"]["tsid"])
        assert last == (p["last"]["table_id"], p["last"]["tsid"])
        assert (mn, mx) == (p["min_timestamp"], p["max_timestamp"])
        assert p["num_blocks"] == len(part.blocks)
        assert p["num_rows"] == sum(b.rows for b in part.blocks)
        parts.append(part)
    return man, parts


def read_rows(gen_dir: str, check_compression: bool = False):
    """Decode everything into column lists (fields as bit patterns or None)."""
    man, parts = read_dir(gen_dir, check_compression)
    field_ids = [f["column_id"] for f in man["fields"]]
    out = {"table_id": [], "tsid": [], "ts": [], "seq": [], "op": [], "fields": {i: [] for i in field_ids}}
    for part in parts:
        for blk in part.blocks:
            d = decode_block(blk, field_ids)
            out["table_id"] += [blk.table_id] * blk.rows
            out["tsid"] += [blk.tsid] * blk.rows
            out["ts"] += d["ts"]
            out["seq"] += d["seq"]
            out["op"] += d["op"]
            for fid in field_ids:
                out["fields"][fid] += d["fields"][fid]
    return man, parts, out


def describe(gen_dir: str) -> list:
    """Structure summary, comparable across writers (no Zstd bytes)."""
    man, parts = read_dir(gen_dir)
    out = []
    for part in parts:
        leaves = []
        for li in range(len(part.leaves)):
            leaves.append(
                [
                    (
                        b.table_id, b.tsid, b.min_ts, b.max_ts, b.ordinal, b.rows,
                        tuple((c.role, c.column_id, int(c.ref["encoding"]), int(c.ref["decoded_len"]), c.null_count)
                              for c in b.chunks),
                    )
                    for b in part.blocks
                    if b.leaf == li
                ]
            )
        out.append({"depth": part.depth, "leaves": leaves})
    return out
