"""A structural model of a columnar-samples artifact, for corruption tests.

``ArtifactModel.load(store_root, entry)`` parses every part into a tree of
:class:`Leaf` / :class:`Internal` pages holding :class:`Block` s and their
:class:`Column` s (the chunk's *encoded* bytes, i.e. after decompression),
plus the manifest as a JSON object and the catalog entry as a dict.  A test
mutates exactly one thing, then ``ArtifactModel.write(dest)`` rebuilds every
part and recomputes everything derived from it, so that only the mutated rule
is broken:

* chunk offsets (laid out in descriptor order from byte 16), stored and decoded
  lengths, XXH64 checksums (of the bytes a reference finally points at);
* block ``column_count``; page prefixes (kind, entry count);
* page references and their bounds (a leaf's from its blocks, an internal
  page's from its children's final references), metadata layout (children
  before parents, the root last, ending at the trailer);
* the trailer (depth = tree height, file length, ``payload_end``, checksum);
* the manifest's part descriptors (file size, rows, blocks, bounds = the final
  root reference's) and the catalog entry's object sizes and their sum.

Hooks, by stage (each is ``None`` unless a test sets it):

=========================  ===================================================
``Column.encoded``         the chunk's encoded bytes (recompressed when changed)
``Column.stored``          explicit stored bytes (e.g. a forged Zstd frame)
``Column.ref``             payload-reference field overrides (offset, stored_len,
                           decoded_len, checksum, encoding, compression, reserved)
``Column.role/column_id/null_count/encoding/compression``  descriptor fields
``Block.<prefix field>``   table_id, tsid, min/max_timestamp, ordinal, row_count;
                           ``Block.column_count`` overrides the derived count
``Page.ref``               page-reference overrides in the parent (or trailer):
                           bounds (first_table_id, first_tsid, last_table_id,
                           last_tsid, min_timestamp, max_timestamp) and the
                           payload-reference fields
``Page.kind/entry_count``  decoded prefix overrides
``Page.on_decoded``        ``bytes -> bytes`` on the decoded page (leaf or internal)
``Page.on_stored``         ``bytes -> bytes`` on the stored page (after compression)
``Page.compression``       0 (default: pages are re-stored raw) or 1 (Zstd)
``Part.header``            the 16 header bytes (a bytearray)
``Part.trailer``           trailer field overrides before the checksum (depth,
                           version, file_length, payload_end, magic)
``Part.trailer_checksum``  trailer checksum override
``Part.payload_pad``       bytes between the last chunk and ``payload_end``
``Part.meta_pad``          bytes at the start of the metadata area
``Part.tail_pad``          bytes between the root page and the trailer
``Part.physical_order``    ``list[key] -> list[key]``: chunk placement order
``Part.aliases``           ``{key: other_key | (other_key, start, length)}``: the
                           chunk is not stored; its reference points at (a
                           sub-range of) another chunk's bytes
``Part.page_order``        ``list[Page] -> list[Page]``: metadata placement order
``Part.on_bytes``          ``bytes -> bytes`` on the final part file
``ArtifactModel.on_manifest``  ``dict -> dict | bytes | other`` (other: mutated in place)
``ArtifactModel.on_entry``     ``dict -> dict | other`` (other: mutated in place)
=========================  ===================================================

An override value may be a callable: it gets the derived reference dict (for
``Part.trailer``: a dict with root, depth, file_length and payload_end).

A chunk key is ``(block_index, column_index)`` with blocks numbered across the
part's leaves in order (``Part.blocks()``).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import struct
from typing import Any, Callable

import numpy as np
import xxhash
import zstandard

from gtsamples.format import constants as C
from gtsamples.format import structs as S

__all__ = [
    "ArtifactModel", "Part", "Leaf", "Internal", "Column", "Block",
    "uvarint", "zigzag", "enc_ts", "enc_ts_const", "enc_ts_dod", "enc_seq", "enc_seq_const", "enc_seq_delta",
    "enc_f64", "enc_op", "zstd", "zstd_frame", "set_block_rows", "set_timestamps", "decode_column",
]

REF_FIELDS = ("offset", "stored_len", "decoded_len", "checksum", "encoding", "compression", "reserved")
BOUND_FIELDS = ("first_table_id", "first_tsid", "last_table_id", "last_tsid", "min_timestamp", "max_timestamp")
PREFIX_FIELDS = ("table_id", "tsid", "min_timestamp", "max_timestamp", "ordinal", "row_count")
U64 = (1 << 64) - 1


def xxh(b) -> int:
    return xxhash.xxh64_intdigest(bytes(b))


def zstd(b: bytes, level: int = 3) -> bytes:
    return zstandard.ZstdCompressor(level=level).compress(bytes(b))


def _unzstd(b: bytes, n: int) -> bytes:
    return zstandard.ZstdDecompressor().decompress(bytes(b), max_output_size=n)


# =============================================================================
# model
# =============================================================================


@dataclasses.dataclass(eq=False)
class Column:
    role: int
    column_id: int
    encoding: int
    compression: int
    null_count: int
    encoded: bytes
    stored: bytes | None = None
    ref: dict = dataclasses.field(default_factory=dict)
    _loaded: tuple | None = dataclasses.field(default=None, repr=False)

    def stored_bytes(self) -> bytes:
        if self.stored is not None:
            return bytes(self.stored)
        if self._loaded is not None and self._loaded[0] == self.encoded and self._loaded[1] == self.compression:
            return self._loaded[2]
        if self.compression == C.COMP_ZSTD:
            return zstd(self.encoded)
        return bytes(self.encoded)


@dataclasses.dataclass(eq=False)
class Block:
    table_id: int
    tsid: int
    min_timestamp: int
    max_timestamp: int
    ordinal: int
    row_count: int
    columns: list[Column]
    column_count: int | None = None

    @property
    def identity(self) -> tuple[int, int]:
        return (self.table_id, self.tsid)

    def col(self, role: int, column_id: int | None = None) -> Column:
        for c in self.columns:
            if c.role == role and (column_id is None or c.column_id == column_id):
                return c
        raise KeyError((role, column_id))

    def field(self, column_id: int) -> Column | None:
        for c in self.columns:
            if c.role == C.ROLE_FIELD and c.column_id == column_id:
                return c
        return None

    @property
    def ts(self) -> Column:
        return self.col(C.ROLE_TIMESTAMP)

    @property
    def seq(self) -> Column:
        return self.col(C.ROLE_SEQUENCE)

    @property
    def op(self) -> Column:
        return self.col(C.ROLE_OP_TYPE)


@dataclasses.dataclass(eq=False)
class Page:
    ref: dict = dataclasses.field(default_factory=dict)
    compression: int = C.COMP_RAW
    kind: int | None = None
    entry_count: int | None = None
    on_decoded: Callable[[bytes], bytes] | None = None
    on_stored: Callable[[bytes], bytes] | None = None
    stored: bytes | None = None


@dataclasses.dataclass(eq=False)
class Leaf(Page):
    blocks: list[Block] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(eq=False)
class Internal(Page):
    children: list[Page] = dataclasses.field(default_factory=list)


def _height(p: Page) -> int:
    return 1 if isinstance(p, Leaf) else 1 + max(_height(c) for c in p.children)


def _leaves(p: Page) -> list[Leaf]:
    if isinstance(p, Leaf):
        return [p]
    out = []
    for c in p.children:
        out.extend(_leaves(c))
    return out


def _post_order(p: Page) -> list[Page]:
    if isinstance(p, Leaf):
        return [p]
    out = []
    for c in p.children:
        out.extend(_post_order(c))
    return out + [p]


@dataclasses.dataclass(eq=False)
class Part:
    header: bytearray
    root: Page
    depth: int | None = None
    trailer: dict = dataclasses.field(default_factory=dict)
    trailer_checksum: int | None = None
    payload_pad: bytes = b""
    meta_pad: bytes = b""
    tail_pad: bytes = b""
    physical_order: Callable[[list], list] | None = None
    aliases: dict = dataclasses.field(default_factory=dict)
    page_order: Callable[[list], list] | None = None
    on_bytes: Callable[[bytes], bytes] | None = None

    def leaves(self) -> list[Leaf]:
        return _leaves(self.root)

    def blocks(self) -> list[Block]:
        return [b for lf in self.leaves() for b in lf.blocks]

    def chunk_keys(self) -> list[tuple[int, int]]:
        return [(bi, ci) for bi, b in enumerate(self.blocks()) for ci in range(len(b.columns))]

    def key_of(self, col: Column) -> tuple[int, int]:
        for bi, b in enumerate(self.blocks()):
            for ci, c in enumerate(b.columns):
                if c is col:
                    return (bi, ci)
        raise KeyError(col)

    # -- build ---------------------------------------------------------------------
    def build(self) -> tuple[bytes, dict, int, int]:
        """(part bytes, final root reference dict, rows, blocks)."""
        buf = bytearray(self.header)
        blocks = self.blocks()
        keys = self.chunk_keys()
        cols = {(bi, ci): c for bi, b in enumerate(blocks) for ci, c in enumerate(b.columns)}
        placed = [k for k in keys if k not in self.aliases]
        order = list(self.physical_order(list(placed))) if self.physical_order else placed
        assert sorted(order) == sorted(placed), "physical_order must be a permutation"
        loc: dict = {}
        stored_of: dict = {}
        for k in order:
            s = cols[k].stored_bytes()
            stored_of[k] = s
            loc[k] = (len(buf), len(s))
            buf += s
        for k, target in self.aliases.items():
            if isinstance(target[0], tuple):  # (key, start, length): a sub-range of another chunk
                tk, start, n = target
                loc[k] = (loc[tk][0] + start, n)
                stored_of[k] = stored_of[tk][start: start + n]
            else:
                loc[k] = loc[target]
                stored_of[k] = stored_of[target]
        buf += self.payload_pad
        payload_end = len(buf)

        def checksum_for(r: dict, own: bytes) -> int:
            off, n = int(r["offset"]), int(r["stored_len"])
            if 0 <= off and off + n <= len(buf):
                return xxh(buf[off: off + n])
            return xxh(own)

        col_ref: dict = {}
        for k in keys:
            c = cols[k]
            off, n = loc[k]
            r = dict(offset=off, stored_len=n, decoded_len=len(c.encoded), checksum=None,
                     encoding=c.encoding, compression=c.compression, reserved=0)
            _apply(r, c.ref, checksum_for, stored_of[k])
            col_ref[id(c)] = r

        # metadata
        buf += self.meta_pad
        pages = _post_order(self.root)
        root = pages[-1]
        order_p = list(self.page_order(list(pages))) if self.page_order else pages
        assert set(map(id, order_p)) == set(map(id, pages)), "page_order must be a permutation"
        final_ref: dict = {}

        def block_bytes(b: Block) -> bytes:
            p = np.zeros(1, S.BLOCK_PREFIX)
            for f in PREFIX_FIELDS:
                p[f] = getattr(b, f)
            p["column_count"] = len(b.columns) if b.column_count is None else b.column_count
            out = p.tobytes()
            for c in b.columns:
                d = np.zeros(1, S.COLUMN_DESC)
                d["role"] = c.role
                d["column_id"] = c.column_id
                r = col_ref[id(c)]
                for f in REF_FIELDS:
                    d["ref"][f] = r[f]
                d["null_count"] = c.null_count
                out += d.tobytes()
            return out

        def bounds(pg: Page) -> dict:
            if isinstance(pg, Leaf):
                bs = pg.blocks
                return dict(first_table_id=bs[0].table_id, first_tsid=bs[0].tsid,
                            last_table_id=bs[-1].table_id, last_tsid=bs[-1].tsid,
                            min_timestamp=min(b.min_timestamp for b in bs),
                            max_timestamp=max(b.max_timestamp for b in bs))
            rs = [final_ref[id(c)] for c in pg.children]
            return dict(first_table_id=rs[0]["first_table_id"], first_tsid=rs[0]["first_tsid"],
                        last_table_id=rs[-1]["last_table_id"], last_tsid=rs[-1]["last_tsid"],
                        min_timestamp=min(r["min_timestamp"] for r in rs),
                        max_timestamp=max(r["max_timestamp"] for r in rs))

        for pg in order_p:
            if isinstance(pg, Leaf):
                body = b"".join(block_bytes(b) for b in pg.blocks)
                kind, count = C.PAGE_KIND_LEAF, len(pg.blocks)
            else:
                missing = [c for c in pg.children if id(c) not in final_ref]
                assert not missing, "page_order must place children before their parent"
                body = b"".join(page_ref_bytes(final_ref[id(c)]) for c in pg.children)
                kind, count = C.PAGE_KIND_INTERNAL, len(pg.children)
            pre = np.zeros(1, S.PAGE_PREFIX)
            pre["kind"] = kind if pg.kind is None else pg.kind
            pre["entry_count"] = count if pg.entry_count is None else pg.entry_count
            decoded = pre.tobytes() + body
            if pg.on_decoded:
                decoded = pg.on_decoded(decoded)
            if pg.stored is not None:
                stored = bytes(pg.stored)
            elif pg.compression == C.COMP_ZSTD:
                stored = zstd(decoded)
            else:
                stored = decoded
            if pg.on_stored:
                stored = pg.on_stored(stored)
            r = bounds(pg)
            r.update(offset=len(buf), stored_len=len(stored), decoded_len=len(decoded), checksum=None,
                     encoding=C.META_ENC_PAGE, compression=pg.compression, reserved=0)
            buf += stored
            _apply(r, pg.ref, checksum_for, stored)
            final_ref[id(pg)] = r
        buf += self.tail_pad
        root_ref = final_ref[id(root)]
        tr = np.zeros(1, S.TRAILER)
        _fill_page_ref(tr["root"], root_ref)
        tr["depth"] = _height(self.root) if self.depth is None else self.depth
        tr["version"] = C.FILE_VERSION
        tr["file_length"] = len(buf) + C.TRAILER_SIZE
        tr["payload_end"] = payload_end
        tr["magic"] = C.MAGIC
        base = dict(root=dict(root_ref), depth=int(tr["depth"][0]), file_length=int(tr["file_length"][0]),
                    payload_end=payload_end)
        for k, v in self.trailer.items():
            tr[k] = v(base) if callable(v) else v
        tb = tr.tobytes()
        tr["checksum"] = xxh(tb[: C.TRAILER_CHECKSUMMED]) if self.trailer_checksum is None else self.trailer_checksum
        buf += tr.tobytes()
        out = bytes(buf)
        if self.on_bytes:
            out = self.on_bytes(out)
        return out, root_ref, sum(b.row_count for b in blocks), len(blocks)


def _apply(r: dict, overrides: dict, checksum_for, own: bytes) -> None:
    """Apply overrides to a derived reference, then checksum the bytes it finally points at
    (unless the checksum itself is overridden).  A callable override gets the derived
    reference (before overrides, checksum included)."""
    base = dict(r)
    base["checksum"] = checksum_for(r, own)
    for k, v in overrides.items():
        assert k in r, f"unknown reference field {k!r}"
        if k != "checksum":
            r[k] = v(base) if callable(v) else v
    r["checksum"] = checksum_for(r, own)
    if "checksum" in overrides:
        v = overrides["checksum"]
        r["checksum"] = v(base) if callable(v) else v


def _fill_page_ref(rec, r: dict) -> None:
    for f in BOUND_FIELDS:
        rec[f] = r[f]
    for f in REF_FIELDS:
        rec["ref"][f] = r[f]


def page_ref_bytes(r: dict) -> bytes:
    a = np.zeros(1, S.PAGE_REF)
    _fill_page_ref(a, r)
    return a.tobytes()


# =============================================================================
# loading
# =============================================================================


def _ref_dict(rec) -> dict:
    d = {f: int(rec[f]) for f in BOUND_FIELDS} if "first_tsid" in rec.dtype.names else {}
    r = rec["ref"] if "ref" in rec.dtype.names else rec
    d.update({f: int(r[f]) for f in REF_FIELDS})
    return d


def _load_payload(data: bytes, r: dict) -> tuple[bytes, bytes]:
    stored = data[r["offset"]: r["offset"] + r["stored_len"]]
    assert len(stored) == r["stored_len"]
    if r["compression"] == C.COMP_ZSTD:
        return stored, _unzstd(stored, r["decoded_len"])
    return stored, stored


def _load_page(data: bytes, r: dict) -> Page:
    stored, dec = _load_payload(data, r)
    kind, count = (int(x) for x in np.frombuffer(dec, S.PAGE_PREFIX, count=1)[0])
    if kind == C.PAGE_KIND_INTERNAL:
        recs = np.frombuffer(dec, S.PAGE_REF, offset=C.PAGE_PREFIX_SIZE, count=count)
        return Internal(children=[_load_page(data, _ref_dict(x)) for x in recs])
    assert kind == C.PAGE_KIND_LEAF
    pos = C.PAGE_PREFIX_SIZE
    blocks = []
    for _ in range(count):
        p = np.frombuffer(dec, S.BLOCK_PREFIX, offset=pos, count=1)[0]
        cc = int(p["column_count"])
        descs = np.frombuffer(dec, S.COLUMN_DESC, offset=pos + C.BLOCK_PREFIX_SIZE, count=cc)
        cols = []
        for d in descs:
            cr = _ref_dict(d["ref"])
            cs, ce = _load_payload(data, cr)
            cols.append(Column(int(d["role"]), int(d["column_id"]), cr["encoding"], cr["compression"],
                               int(d["null_count"]), ce, _loaded=(ce, cr["compression"], cs)))
        blocks.append(Block(*(int(p[f]) for f in PREFIX_FIELDS), columns=cols))
        pos += C.BLOCK_PREFIX_SIZE + C.COLUMN_DESC_SIZE * cc
    assert pos == len(dec)
    return Leaf(blocks=blocks)


def load_part(data: bytes) -> Part:
    tr = np.frombuffer(data[-C.TRAILER_SIZE:], S.TRAILER)[0]
    root = _load_page(data, _ref_dict(tr["root"]))
    assert _height(root) == int(tr["depth"])
    return Part(header=bytearray(data[: C.HEADER_SIZE]), root=root)


@dataclasses.dataclass(eq=False)
class ArtifactModel:
    manifest: dict
    entry: dict
    parts: list[Part]
    on_manifest: Callable[[dict], Any] | None = None
    on_entry: Callable[[dict], Any] | None = None
    sync_manifest: bool = True

    @property
    def prefix(self) -> str:
        e = self.entry
        return f"{e['region_id']}/samples/{e['file_id']}/{e['generation']}/"

    @property
    def field_ids(self) -> list[int]:
        return [f["column_id"] for f in self.manifest["fields"]]

    @classmethod
    def load(cls, store_root, entry) -> "ArtifactModel":
        entry = dict(entry.to_dict() if hasattr(entry, "to_dict") else copy.deepcopy(entry))
        entry.pop("created_at", None)
        m = cls({}, entry, [])
        base = os.path.join(os.fspath(store_root), m.prefix)
        with open(os.path.join(base, C.MANIFEST_NAME), "rb") as f:
            m.manifest = json.loads(f.read())
        for p in m.manifest["files"]:
            with open(os.path.join(base, C.part_file_name(p["part_id"])), "rb") as f:
                m.parts.append(load_part(f.read()))
        return m

    def write(self, dest_root) -> tuple[str, dict]:
        """Rebuild everything into ``dest_root``; returns ``(dest_root, entry dict)``."""
        built = [p.build() for p in self.parts]
        man = copy.deepcopy(self.manifest)
        if self.sync_manifest:
            assert len(man["files"]) == len(built), "keep manifest files and model parts in step"
            for f, (data, r, rows, nblocks) in zip(man["files"], built):
                f.update(file_size=len(data), num_rows=rows, num_blocks=nblocks,
                         first={"table_id": r["first_table_id"], "tsid": r["first_tsid"]},
                         last={"table_id": r["last_table_id"], "tsid": r["last_tsid"]},
                         min_timestamp=r["min_timestamp"], max_timestamp=r["max_timestamp"])
        if self.on_manifest:
            res = self.on_manifest(man)
            man = res if isinstance(res, (dict, bytes, bytearray)) else man
        mbytes = man if isinstance(man, (bytes, bytearray)) else (json.dumps(man, indent=1) + "\n").encode()
        prefix = self.prefix
        entry = copy.deepcopy(self.entry)
        entry["objects"] = [{"path": prefix + C.MANIFEST_NAME, "file_size": len(mbytes)}] + [
            {"path": prefix + C.part_file_name(i), "file_size": len(d[0])} for i, d in enumerate(built)
        ]
        entry["file_size"] = sum(o["file_size"] for o in entry["objects"])
        if self.on_entry:
            res = self.on_entry(entry)
            entry = res if isinstance(res, dict) else entry
        base = os.path.join(os.fspath(dest_root), prefix)
        os.makedirs(base, exist_ok=True)
        with open(os.path.join(base, C.MANIFEST_NAME), "wb") as f:
            f.write(mbytes)
        for i, (data, *_rest) in enumerate(built):
            with open(os.path.join(base, C.part_file_name(i)), "wb") as f:
                f.write(data)
        return os.fspath(dest_root), entry

    def generation_dir(self, dest_root) -> str:
        return os.path.join(os.fspath(dest_root), self.prefix)


# =============================================================================
# encoders (straight from the spec, plain Python)
# =============================================================================


def uvarint(v: int) -> bytes:
    assert 0 <= v <= U64
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def zigzag(x: int) -> int:
    x = ((x + (1 << 63)) % (1 << 64)) - (1 << 63)  # as i64
    return ((x << 1) ^ (x >> 63)) & U64


def _i64(u: int) -> int:
    u &= U64
    return u - (1 << 64) if u >> 63 else u


def enc_ts_const(first: int, step: int) -> bytes:
    return struct.pack("<qq", first, step)


def enc_ts_dod(ts) -> bytes:
    ts = [int(t) for t in ts]
    out = struct.pack("<q", ts[0])
    if len(ts) >= 2:
        d = (ts[1] - ts[0]) & U64
        out += uvarint(zigzag(d))
        for i in range(2, len(ts)):
            nd = (ts[i] - ts[i - 1]) & U64
            out += uvarint(zigzag((nd - d) & U64))
            d = nd
    return out


def enc_ts(ts) -> tuple[int, bytes]:
    """The spec's choice: encoding 1 when one nonnegative representable step fits, else 2."""
    ts = [int(t) for t in ts]
    if len(ts) == 1:
        return C.ENC_TS_CONSTANT_STEP, enc_ts_const(ts[0], 0)
    steps = {ts[i + 1] - ts[i] for i in range(len(ts) - 1)}
    if len(steps) == 1:
        (s,) = steps
        if 0 <= s <= C.I64_MAX:
            return C.ENC_TS_CONSTANT_STEP, enc_ts_const(ts[0], s)
    return C.ENC_TS_DELTA_OF_DELTA, enc_ts_dod(ts)


def enc_seq_const(v: int) -> bytes:
    return struct.pack("<Q", v)


def enc_seq_delta(seq) -> bytes:
    seq = [int(s) for s in seq]
    out = struct.pack("<Q", seq[0])
    for i in range(1, len(seq)):
        out += uvarint(zigzag((seq[i] - seq[i - 1]) & U64))
    return out


def enc_seq(seq) -> tuple[int, bytes]:
    seq = [int(s) for s in seq]
    if len(set(seq)) == 1:
        return C.ENC_SEQ_CONSTANT, enc_seq_const(seq[0])
    return C.ENC_SEQ_DELTA, enc_seq_delta(seq)


def enc_op(ops) -> tuple[int, bytes]:
    ops = [int(o) for o in ops]
    if len(set(ops)) == 1:
        return C.ENC_OP_CONSTANT, bytes([ops[0]])
    return C.ENC_OP_RAW, bytes(ops)


def _bits(v) -> int:
    if isinstance(v, float):
        return struct.unpack("<Q", struct.pack("<d", v))[0]
    return int(v)  # already a u64 bit pattern


def enc_f64(values, valid=None, kind: int | None = None) -> tuple[bytes, int]:
    """(encoding-5 bytes, null count); ``values`` are floats or u64 bit patterns."""
    n = len(values)
    valid = [True] * n if valid is None else [bool(x) for x in valid]
    nulls = n - sum(valid)
    if kind is None:
        kind = 0 if nulls == 0 else 1
    out = bytearray([kind])
    if kind == 1:
        bm = bytearray((n + 7) // 8)
        for i, ok in enumerate(valid):
            if ok:
                bm[i >> 3] |= 1 << (i & 7)
        out += bm
    nn = [_bits(v) for v, ok in zip(values, valid) if ok]
    out += struct.pack("<Q", nn[0])
    for a, b in zip(nn, nn[1:]):
        out += uvarint(a ^ b)
    return bytes(out), nulls


def zstd_frame(payload: bytes, *, fcs: int | None = None, fcs_bytes: int = 8, window_exp: int = 10,
               checksum: bool = False) -> bytes:
    """One hand-made Zstd frame of raw blocks; ``fcs`` (any value) is written in an
    ``fcs_bytes``-byte Frame_Content_Size field, or omitted when None."""
    flag = {None: 0, 2: 1, 4: 2, 8: 3}[None if fcs is None else fcs_bytes]
    fhd = (flag << 6) | (int(checksum) << 2)  # not single-segment: a window descriptor follows
    out = bytearray(b"\x28\xb5\x2f\xfd") + bytes([fhd, window_exp << 3])
    if fcs is not None:
        out += (fcs - 256 if fcs_bytes == 2 else fcs).to_bytes(fcs_bytes, "little")
    blocks = [payload[i: i + (1 << window_exp)] for i in range(0, len(payload), 1 << window_exp)] or [b""]
    for i, blk in enumerate(blocks):
        h = (len(blk) << 3) | (0 << 1) | int(i == len(blocks) - 1)
        out += h.to_bytes(3, "little") + blk
    if checksum:
        out += (xxhash.xxh64_intdigest(payload) & 0xFFFFFFFF).to_bytes(4, "little")
    return bytes(out)


def zstd_no_content_size(payload: bytes) -> bytes:
    """A real Zstd frame (libzstd, level 3) without Frame_Content_Size whose first block
    is a compressed one: its decoded size is in no header, so only decoding finds it."""
    frame = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(bytes(payload))
    h = int.from_bytes(frame[6:9], "little")  # magic 4, descriptor 1, window 1: the first block header
    assert frame[4] >> 6 == 0 and (h >> 1) & 3 == 2, "expected no content size and a compressed first block"
    return frame


# =============================================================================
# block helpers
# =============================================================================


def set_timestamps(block: Block, ts) -> None:
    """Replace a block's timestamp chunk (stored raw) and its min/max (row count unchanged)."""
    assert len(ts) == block.row_count
    enc, b = enc_ts(ts)
    c = block.ts
    c.encoding, c.encoded, c.compression, c.stored = enc, b, C.COMP_RAW, None
    block.min_timestamp, block.max_timestamp = int(ts[0]), int(ts[-1])


def set_block_rows(block: Block, ts, seq, op, fields: dict, field_ids: list[int], ts_id: int) -> None:
    """Replace every chunk of ``block`` (raw, spec encodings) with the given rows.

    ``fields``: column_id -> (values, valid or None); all-null or absent fields are omitted.
    """
    n = len(ts)
    te, tb = enc_ts(ts)
    se, sb = enc_seq(seq)
    oe, ob = enc_op(op)
    cols = [Column(C.ROLE_TIMESTAMP, ts_id, te, 0, 0, tb), Column(C.ROLE_SEQUENCE, 0, se, 0, 0, sb),
            Column(C.ROLE_OP_TYPE, 0, oe, 0, 0, ob)]
    for fid in field_ids:
        if fid not in fields:
            continue
        vals, valid = fields[fid]
        if valid is not None and not any(valid):
            continue
        b, nulls = enc_f64(vals, valid)
        cols.append(Column(C.ROLE_FIELD, fid, C.ENC_F64_XOR, 0, nulls, b))
    block.columns = cols
    block.row_count = n
    block.min_timestamp, block.max_timestamp = int(ts[0]), int(ts[-1])
    block.column_count = None


def decode_column(c: Column, rows: int):
    """Plain-Python decode of a (valid) chunk's encoded bytes, for tests that edit values."""
    b = c.encoded
    if c.encoding == 1:
        first, step = struct.unpack("<qq", b)
        return [first + i * step for i in range(rows)]
    if c.encoding in (2, 4):
        first = struct.unpack("<Q", b[:8])[0]
        vals, pos = [first], 8
        d = 0
        for _ in range(rows - 1):
            x, shift = 0, 0
            while True:
                byte = b[pos]
                pos += 1
                x |= (byte & 0x7F) << shift
                shift += 7
                if byte < 0x80:
                    break
            z = (x >> 1) ^ (-(x & 1) & U64)
            if c.encoding == 2:
                d = (d + z) & U64
                vals.append((vals[-1] + d) & U64)
            else:
                vals.append((vals[-1] + z) & U64)
        return [_i64(v) for v in vals] if c.encoding == 2 else vals
    if c.encoding == 3:
        return [struct.unpack("<Q", b)[0]] * rows
    if c.encoding == 6:
        return [b[0]] * rows
    if c.encoding == 7:
        return list(b)
    raise ValueError(c.encoding)
