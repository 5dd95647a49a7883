"""Small reference encoders for the decode tests and benchmarks.

Independent of ``gtsamples.write`` on purpose: these follow the spec text
("Encodings and compression") directly, vectorised with numpy.  They can also
build *invalid* chunks (any bytes, any declared counts) for corruption tests.
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import xxhash
import zstandard

from gtsamples.batch import BLOCK_DTYPE, CHUNK_DTYPE, FIRST_FIELD_SLOT, ChunkBatch
from gtsamples.format.varint import encode_uvarint, encode_uvarint_array



def zigzag_array(x: np.ndarray) -> np.ndarray:
    """ZigZag of an int64 (or bit-reinterpreted uint64) array -> uint64."""
    s = np.ascontiguousarray(x).view(np.int64)
    return ((s << 1) ^ (s >> 63)).view(np.uint64)


def enc_ts_constant(first: int, step: int) -> bytes:
    return struct.pack("<qq", first, step)


def enc_ts_dod(ts) -> bytes:
    u = np.ascontiguousarray(ts, dtype=np.int64).view(np.uint64)
    out = u[:1].tobytes()
    if u.size >= 2:
        d = u[1:] - u[:-1]  # wrapping
        dd = np.empty_like(d)
        dd[0] = d[0]
        dd[1:] = d[1:] - d[:-1]
        out += encode_uvarint_array(zigzag_array(dd))
    return out


def enc_seq_constant(value: int) -> bytes:
    return struct.pack("<Q", value)


def enc_seq_delta(seq) -> bytes:
    u = np.ascontiguousarray(seq, dtype=np.uint64)
    out = u[:1].tobytes()
    if u.size >= 2:
        out += encode_uvarint_array(zigzag_array(u[1:] - u[:-1]))
    return out


def enc_op_constant(op: int) -> bytes:
    return bytes([op])


def enc_op_raw(ops) -> bytes:
    return np.ascontiguousarray(ops, dtype=np.uint8).tobytes()


def f64_bits(values) -> np.ndarray:
    a = np.ascontiguousarray(values)
    if a.dtype == np.float64:
        return a.view(np.uint64)
    return a.astype(np.uint64)


def enc_f64_xor(values, valid=None) -> bytes:
    """``values``: float64 array or uint64 bit patterns (all rows); ``valid``: bool or None."""
    bits = f64_bits(values)
    if valid is None or np.all(valid):
        out = b"\x00"
        nn = bits
    else:
        valid = np.asarray(valid, dtype=bool)
        out = b"\x01" + np.packbits(valid, bitorder="little").tobytes()
        nn = bits[valid]
    out += nn[:1].tobytes()
    if nn.size >= 2:
        out += encode_uvarint_array(nn[1:] ^ nn[:-1])
    return out


def zstd_compress(payload: bytes, level: int = 3, **kw) -> bytes:
    return zstandard.ZstdCompressor(level=level, **kw).compress(payload)


# --- raw frame builders (for corruption tests) -------------------------------

def zstd_raw_frame(
    payload: bytes,
    *,
    fcs: int | None = None,
    fcs_size: int | None = None,
    single_segment: bool = True,
    window_exp: int = 10,
    checksum: bool = False,
    dict_flag: int = 0,
    reserved: bool = False,
    block_type: int = 0,
) -> bytes:
    """One Zstd frame of raw blocks (or an RLE/reserved block type) built by hand."""
    if fcs is None and single_segment:
        fcs = len(payload)
    if fcs is None:
        fcs_flag, fcs_bytes = 0, b""
    else:
        if fcs_size is None:
            fcs_size = 1 if (fcs < 256 and single_segment) else 2 if 256 <= fcs < 65792 else 4 if fcs < 1 << 32 else 8
        if fcs_size == 1:
            fcs_flag, fcs_bytes = 0, struct.pack("<B", fcs)
        elif fcs_size == 2:
            fcs_flag, fcs_bytes = 1, struct.pack("<H", fcs - 256)
        elif fcs_size == 4:
            fcs_flag, fcs_bytes = 2, struct.pack("<I", fcs)
        else:
            fcs_flag, fcs_bytes = 3, struct.pack("<Q", fcs)
    fhd = (fcs_flag << 6) | (int(single_segment) << 5) | (int(reserved) << 3) | (int(checksum) << 2) | dict_flag
    out = b"\x28\xb5\x2f\xfd" + bytes([fhd])
    if not single_segment:
        out += bytes([window_exp << 3])
    out += {0: b"", 1: b"\x01", 2: b"\x01\x00", 3: b"\x01\x00\x00\x00"}[dict_flag]
    out += fcs_bytes
    blocks = [payload[i : i + (128 << 10)] for i in range(0, len(payload), 128 << 10)] or [b""]
    for k, b in enumerate(blocks):
        last = int(k == len(blocks) - 1)
        if block_type == 1:  # RLE of the first byte
            h = last | (1 << 1) | (len(b) << 3)
            out += struct.pack("<I", h)[:3] + b[:1]
        else:
            h = last | (block_type << 1) | (len(b) << 3)
            out += struct.pack("<I", h)[:3] + b
    if checksum:
        out += struct.pack("<I", xxhash.xxh64_intdigest(payload) & 0xFFFFFFFF)
    return out


# --- batches -------------------------------------------------------------------

@dataclasses.dataclass
class Chunk:
    slot: int
    encoding: int
    payload: bytes  # encoded bytes (before compression)
    null_count: int = 0
    compression: int = 0
    stored: bytes | None = None  # override the stored bytes (after compression)
    decoded_len: int | None = None  # override the declared decoded length
    checksum: int | None = None  # override the checksum

    def stored_bytes(self) -> bytes:
        if self.stored is not None:
            return self.stored
        if self.compression == 1:
            return zstd_compress(self.payload)
        return self.payload


@dataclasses.dataclass
class Block:
    rows: int
    min_ts: int
    max_ts: int
    chunks: list
    table_id: int = 1
    tsid: int = 1


ROLE_OF_SLOT = {0: 1, 1: 2, 2: 3}


def make_batch(blocks, field_names=None, want_sequence=True, want_op_type=True, gap: int = 0) -> ChunkBatch:
    """Lay out ``blocks`` (file order) into a ChunkBatch with correct checksums."""
    n_fields = 0
    for b in blocks:
        for c in b.chunks:
            if c.slot >= FIRST_FIELD_SLOT:
                n_fields = max(n_fields, c.slot - FIRST_FIELD_SLOT + 1)
    if field_names is None:
        field_names = tuple(f"f{k}" for k in range(n_fields))
    n_chunks = sum(len(b.chunks) for b in blocks)
    chunks = np.zeros(n_chunks, dtype=CHUNK_DTYPE)
    btab = np.zeros(len(blocks), dtype=BLOCK_DTYPE)
    parts = []
    pos = 0
    out_row = 0
    i = 0
    for bi, b in enumerate(blocks):
        btab[bi] = (0, 0, bi, b.table_id, b.tsid, b.min_ts, b.max_ts, bi, b.rows, out_row, 0)
        for c in b.chunks:
            stored = c.stored_bytes()
            parts.append(stored + b"\xee" * gap)
            decoded = len(c.payload) if c.decoded_len is None else c.decoded_len
            checksum = xxhash.xxh64_intdigest(stored) if c.checksum is None else c.checksum
            role = ROLE_OF_SLOT.get(c.slot, 4)
            chunks[i] = (
                0, bi, 16 + pos, len(stored), decoded, checksum, c.encoding, c.compression, role,
                c.slot, 0 if c.slot < 3 else 100 + c.slot, b.rows, c.null_count, out_row, pos,
                b.min_ts, b.max_ts,
            )
            pos += len(stored) + gap
            i += 1
        out_row += b.rows
    data = np.frombuffer(b"".join(parts), dtype=np.uint8).copy()
    return ChunkBatch(
        chunks=chunks,
        blocks=btab,
        data=data,
        n_rows=out_row,
        field_names=tuple(field_names),
        want_sequence=want_sequence,
        want_op_type=want_op_type,
        source="mem://test",
        part_names=("part-0.samples",),
    )


def ts_chunk(ts, compression=0, force_dod=False) -> Chunk:
    ts = np.asarray(ts, dtype=np.int64)
    if not force_dod:
        if ts.size == 1:
            return Chunk(0, 1, enc_ts_constant(int(ts[0]), 0), compression=compression)
        d = np.diff(ts)
        if (d == d[0]).all() and d[0] >= 0:
            return Chunk(0, 1, enc_ts_constant(int(ts[0]), int(d[0])), compression=compression)
    return Chunk(0, 2, enc_ts_dod(ts), compression=compression)


def seq_chunk(seq, compression=0) -> Chunk:
    seq = np.asarray(seq, dtype=np.uint64)
    if (seq == seq[0]).all():
        return Chunk(1, 3, enc_seq_constant(int(seq[0])), compression=compression)
    return Chunk(1, 4, enc_seq_delta(seq), compression=compression)


def op_chunk(ops, compression=0) -> Chunk:
    ops = np.asarray(ops, dtype=np.uint8)
    if (ops == ops[0]).all():
        return Chunk(2, 6, enc_op_constant(int(ops[0])), compression=compression)
    return Chunk(2, 7, enc_op_raw(ops), compression=compression)


def field_chunk(k, values, valid=None, compression=0) -> Chunk:
    nulls = 0 if valid is None else int(np.size(valid) - np.count_nonzero(valid))
    return Chunk(FIRST_FIELD_SLOT + k, 5, enc_f64_xor(values, valid), null_count=nulls, compression=compression)


def block_of(ts, seq=None, ops=None, fields=(), compression=0, **kw) -> Block:
    """A complete block: ``fields`` is a list of ``(k, values, valid)`` (valid None = all valid)."""
    ts = np.asarray(ts, dtype=np.int64)
    n = ts.size
    if seq is None:
        seq = np.arange(n, dtype=np.uint64)[::-1] + np.uint64(1)
    if ops is None:
        ops = np.ones(n, dtype=np.uint8)
    chunks = [ts_chunk(ts, compression), seq_chunk(seq, compression), op_chunk(ops, compression)]
    for k, values, valid in fields:
        chunks.append(field_chunk(k, values, valid, compression))
    return Block(n, int(ts[0]), int(ts[-1]), chunks, **kw)


__all__ = [
    "Block", "Chunk", "block_of", "make_batch", "enc_ts_constant", "enc_ts_dod", "enc_seq_constant",
    "enc_seq_delta", "enc_op_constant", "enc_op_raw", "enc_f64_xor", "zstd_compress", "zstd_raw_frame",
    "zigzag_array", "encode_uvarint", "ts_chunk", "seq_chunk", "op_chunk", "field_chunk", "f64_bits",
]
