"""Test helper: encode known rows into a ChunkBatch, chunk by chunk, per the spec.

Independent of the project's writer: small, per-value Python encoders for
encodings 1-7 and compressions 0/1, so GPU and host tests can build batches
(and corrupt them on purpose) with exactly known contents.

A batch is described by ``BlockSpec`` objects; ``build_batch`` lays their
chunks out in physical order in one ``data`` buffer, fills CHUNK_DTYPE /
BLOCK_DTYPE, and returns the batch plus the expected output table (before and
after trimming) as plain numpy columns.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Callable, Sequence

import numpy as np

from gtsamples.batch import BLOCK_DTYPE, CHUNK_DTYPE, FIRST_FIELD_SLOT, ChunkBatch, row_mask

M64 = (1 << 64) - 1


def uvarint(v: int) -> bytes:
    v &= M64
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def zigzag(x: int) -> int:
    x = ((x + (1 << 63)) & M64) - (1 << 63)  # as i64
    return ((x << 1) ^ (x >> 63)) & M64


def s64(x: int) -> int:
    x &= M64
    return x - (1 << 64) if x >> 63 else x


def encode_timestamps(ts: Sequence[int], force: int | None = None) -> tuple[int, bytes]:
    ts = [int(t) for t in ts]
    n = len(ts)
    diffs = [ts[i + 1] - ts[i] for i in range(n - 1)]
    const = n == 1 or (len(set(diffs)) == 1 and 0 <= diffs[0] <= (1 << 63) - 1)
    enc = force or (1 if const else 2)
    if enc == 1:
        step = 0 if n == 1 else diffs[0]
        return 1, struct.pack("<qq", ts[0], step)
    out = bytearray(struct.pack("<q", ts[0]))
    if n >= 2:
        deltas = [(ts[i + 1] - ts[i]) & M64 for i in range(n - 1)]
        out += uvarint(zigzag(s64(deltas[0])))
        for i in range(1, len(deltas)):
            out += uvarint(zigzag(s64(deltas[i] - deltas[i - 1])))
    return 2, bytes(out)


def encode_sequences(seq: Sequence[int], force: int | None = None) -> tuple[int, bytes]:
    seq = [int(s) & M64 for s in seq]
    enc = force or (3 if len(set(seq)) == 1 else 4)
    if enc == 3:
        return 3, struct.pack("<Q", seq[0])
    out = bytearray(struct.pack("<Q", seq[0]))
    for i in range(1, len(seq)):
        out += uvarint(zigzag(s64(seq[i] - seq[i - 1])))
    return 4, bytes(out)


def encode_ops(ops: Sequence[int], force: int | None = None) -> tuple[int, bytes]:
    ops = [int(o) for o in ops]
    enc = force or (6 if len(set(ops)) == 1 else 7)
    return (6, bytes([ops[0]])) if enc == 6 else (7, bytes(ops))


def encode_floats(bits: np.ndarray, valid: np.ndarray) -> bytes:
    """bits: uint64 bit patterns per row; valid: bool per row (>= 1 valid)."""
    n = len(bits)
    nulls = int(n - valid.sum())
    out = bytearray()
    if nulls == 0:
        out.append(0)
    else:
        out.append(1)
        bm = np.packbits(valid.astype(np.uint8), bitorder="little")
        out += bm.tobytes()
    vals = [int(b) for b in bits[valid]]
    out += struct.pack("<Q", vals[0])
    for i in range(1, len(vals)):
        out += uvarint(vals[i] ^ vals[i - 1])
    return bytes(out)


def compress(raw: bytes, level: int = 3, **kw) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=level, **kw).compress(raw)


def xxh64(b: bytes) -> int:
    import xxhash

    return xxhash.xxh64_intdigest(b)


@dataclasses.dataclass
class BlockSpec:
    table_id: int
    tsid: int
    ts: np.ndarray  # int64
    seq: np.ndarray  # uint64
    ops: np.ndarray  # uint8
    fields: list  # per projected field: (float64 values, bool validity) or None (omitted)


@dataclasses.dataclass
class Built:
    batch: ChunkBatch
    expected: dict  # column name -> numpy array (untrimmed); fields: (values, validity)
    expected_trimmed: dict

    def expected_for(self):
        return self.expected_trimmed


#: mutate(chunk_index, role_slot, encoded) -> encoded  (before compression; checksum recomputed)
Mutator = Callable[[int, int, bytes], bytes]


def build_batch(
    blocks: Sequence[BlockSpec],
    field_names: Sequence[str],
    *,
    compression: str | Callable[[int], int] = "mixed",
    start: int | None = None,
    end: int | None = None,
    want_sequence: bool = True,
    want_op_type: bool = True,
    mutate: Mutator | None = None,
    leading_gap: int = 3,
) -> Built:
    """Encode ``blocks`` into one ChunkBatch.

    ``compression``: "raw", "zstd", "mixed" (zstd when strictly smaller, like
    the writer) or a function of the chunk index.
    """
    chunk_rows = []
    data = bytearray(b"\xAA" * leading_gap)  # chunks at odd offsets on purpose
    block_rows = []
    out_row = 0
    ordinal, prev_identity = 0, None
    for bi, b in enumerate(blocks):
        n = len(b.ts)
        # ordinals count a series' blocks, as in a file (rules across blocks use them)
        ordinal = ordinal + 1 if (b.table_id, b.tsid) == prev_identity else 0
        prev_identity = (b.table_id, b.tsid)
        trim = 0
        if start is not None and int(b.ts.min()) < start:
            trim = 1
        if end is not None and int(b.ts.max()) >= end:
            trim = 1
        block_rows.append((0, 0, bi, b.table_id, b.tsid, int(b.ts[0]), int(b.ts[-1]), ordinal, n, out_row, trim))
        cols = []
        e, raw = encode_timestamps(b.ts)
        cols.append((1, 0, e, raw, 0, 0))
        if want_sequence:
            e, raw = encode_sequences(b.seq)
            cols.append((2, 1, e, raw, 0, 0))
        if want_op_type:
            e, raw = encode_ops(b.ops)
            cols.append((3, 2, e, raw, 0, 0))
        for k, f in enumerate(b.fields):
            if f is None:
                continue
            vals, valid = f
            raw = encode_floats(np.asarray(vals, dtype=np.float64).view(np.uint64), np.asarray(valid, bool))
            cols.append((4, FIRST_FIELD_SLOT + k, 5, raw, int(n - np.count_nonzero(valid)), 100 + k))
        for role, slot, enc, raw, nulls, col_id in cols:
            ci = len(chunk_rows)
            if mutate is not None:
                raw = mutate(ci, slot, raw)
            if callable(compression):
                comp = compression(ci)
            elif compression == "raw":
                comp = 0
            elif compression == "zstd":
                comp = 1
            else:
                comp = 1 if len(compress(raw)) < len(raw) else 0
            stored = compress(raw) if comp == 1 else raw
            off = len(data)
            data += stored
            data += b"\x55" * (ci % 3)  # gaps between chunks
            chunk_rows.append(
                (0, bi, 16 + off, len(stored), len(raw), xxh64(stored), enc, comp, role, slot, col_id, n, nulls,
                 out_row, off, int(b.ts[0]), int(b.ts[-1]))
            )  # fmt: skip
        out_row += n
    chunks = np.array(chunk_rows, dtype=CHUNK_DTYPE) if chunk_rows else np.zeros(0, CHUNK_DTYPE)
    blocks_arr = np.array(block_rows, dtype=BLOCK_DTYPE) if block_rows else np.zeros(0, BLOCK_DTYPE)
    batch = ChunkBatch(
        chunks=chunks,
        blocks=blocks_arr,
        data=np.frombuffer(bytes(data), dtype=np.uint8).copy(),
        n_rows=out_row,
        field_names=tuple(field_names),
        want_sequence=want_sequence,
        want_op_type=want_op_type,
        start=start,
        end=end,
        source="test",
        part_names=("part-0.samples",),
    )
    exp = expected_columns(blocks, field_names, want_sequence, want_op_type)
    mask = row_mask(exp["timestamp"], start, end)
    trimmed = {k: ((v[0][mask], v[1][mask]) if isinstance(v, tuple) else v[mask]) for k, v in exp.items()}
    return Built(batch, exp, trimmed)


def expected_columns(blocks, field_names, want_sequence=True, want_op_type=True) -> dict:
    if not blocks:
        z = np.zeros(0)
        out = {"__table_id": z.astype(np.uint32), "__tsid": z.astype(np.uint64), "timestamp": z.astype(np.int64)}
        if want_sequence:
            out["__sequence"] = z.astype(np.uint64)
        if want_op_type:
            out["__op_type"] = z.astype(np.uint8)
        for name in field_names:
            out[name] = (z.astype(np.float64), z.astype(bool))
        return out
    out = {
        "__table_id": np.concatenate([np.full(len(b.ts), b.table_id, np.uint32) for b in blocks]),
        "__tsid": np.concatenate([np.full(len(b.ts), b.tsid, np.uint64) for b in blocks]),
        "timestamp": np.concatenate([np.asarray(b.ts, np.int64) for b in blocks]),
    }
    if want_sequence:
        out["__sequence"] = np.concatenate([np.asarray(b.seq, np.uint64) for b in blocks])
    if want_op_type:
        out["__op_type"] = np.concatenate([np.asarray(b.ops, np.uint8) for b in blocks])
    for k, name in enumerate(field_names):
        vals, valid = [], []
        for b in blocks:
            f = b.fields[k]
            if f is None:
                vals.append(np.zeros(len(b.ts), np.float64))
                valid.append(np.zeros(len(b.ts), bool))
            else:
                v = np.asarray(f[0], np.float64).copy()
                m = np.asarray(f[1], bool)
                v.view(np.uint64)[~m] = 0  # null rows hold +0.0
                vals.append(v)
                valid.append(m)
        out[name] = (np.concatenate(vals), np.concatenate(valid))
    return out


def random_blocks(rng: np.random.Generator, n_blocks: int, n_fields: int, max_rows: int = 300,
                  ts_kind: str = "mixed") -> list[BlockSpec]:  # fmt: skip
    """Valid blocks in spec order with awkward values: wrapping sequences, NaN
    payloads, -0.0, subnormals, nulls, omitted fields, constant steps."""
    blocks = []
    tsid = int(rng.integers(0, 1 << 62))
    t0 = int(rng.integers(-(1 << 40), 1 << 40))
    for _ in range(n_blocks):
        if rng.random() < 0.5:
            tsid += int(rng.integers(1, 5))
            t0 = int(rng.integers(-(1 << 40), 1 << 40))
        n = int(rng.integers(1, max_rows + 1))
        kind = ts_kind if ts_kind != "mixed" else str(rng.choice(["const", "dod", "dup", "jumpy"]))
        if kind == "const":
            ts = t0 + np.arange(n, dtype=np.int64) * int(rng.integers(0, 1000))
        elif kind == "dup":
            ts = np.full(n, t0, dtype=np.int64)
        elif kind == "jumpy":
            ts = t0 + np.cumsum(rng.integers(0, 1 << 40, n, dtype=np.int64) * (rng.random(n) < 0.3))
        else:
            ts = t0 + np.cumsum(rng.integers(0, 5000, n, dtype=np.int64))
        ts = np.asarray(ts, dtype=np.int64)
        t0 = int(ts[-1])
        if rng.random() < 0.3:
            seq = np.full(n, rng.integers(0, 1 << 63, dtype=np.uint64), dtype=np.uint64)
        else:
            seq = rng.integers(0, 1 << 64, n, dtype=np.uint64, endpoint=False)
        ops = np.full(n, 1, np.uint8) if rng.random() < 0.5 else rng.integers(0, 2, n).astype(np.uint8)
        fields = []
        for _f in range(n_fields):
            r = rng.random()
            if r < 0.15:
                fields.append(None)
                continue
            bits = rng.integers(0, 1 << 64, n, dtype=np.uint64, endpoint=False)
            pick = rng.random(n)
            special = np.array([0x8000000000000000, 0x7FF8000000000001, 0xFFF0000000000000, 0x1, 0x7FF0000000000000],
                               dtype=np.uint64)  # fmt: skip
            bits = np.where(pick < 0.1, special[rng.integers(0, len(special), n)], bits)
            smooth = (np.cumsum(rng.normal(size=n)) * 10).astype(np.float64).view(np.uint64)
            bits = np.where(pick > 0.5, smooth, bits)
            valid = rng.random(n) < (0.7 if r < 0.6 else 1.1)
            if not valid.any():
                valid[int(rng.integers(0, n))] = True
            fields.append((bits.view(np.float64), valid))
        blocks.append(BlockSpec(int(rng.integers(1, 3)), tsid, ts, seq, ops, fields))
    blocks.sort(key=lambda b: (b.table_id, b.tsid, int(b.ts[0])))
    # keep timestamps nondecreasing across same-series blocks, and spec order
    _order_sequences(blocks)
    return blocks


def _order_sequences(blocks: list[BlockSpec]) -> None:
    """Make sequences nonincreasing within equal timestamps of one series, across
    block boundaries too (the spec's row order), by permuting each run's values:
    the extremes and wrapping deltas stay, only their order changes."""
    if not blocks:
        return
    lengths = [len(b.ts) for b in blocks]
    table = np.concatenate([np.full(n, b.table_id, np.int64) for b, n in zip(blocks, lengths)])
    tsid = np.concatenate([np.full(n, b.tsid, np.uint64) for b, n in zip(blocks, lengths)])
    ts = np.concatenate([np.asarray(b.ts, np.int64) for b in blocks])
    seq = np.concatenate([np.asarray(b.seq, np.uint64) for b in blocks])
    new_run = np.ones(len(ts), bool)
    new_run[1:] = (table[1:] != table[:-1]) | (tsid[1:] != tsid[:-1]) | (ts[1:] != ts[:-1])
    run = np.cumsum(new_run)
    seq = seq[np.lexsort((~seq, run))]  # ~seq ascending == seq descending
    starts = np.cumsum([0, *lengths])
    for k, b in enumerate(blocks):
        blocks[k] = dataclasses.replace(b, seq=seq[starts[k] : starts[k + 1]].copy())
