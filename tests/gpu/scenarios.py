"""Backend-parity scenarios shared by the GPU tests (real device, tests/gpu)
and the emulated-device tests (kernels on the host, tests/kernels).

Each check runs ``gtsamples.decode.gpu.decode_batch_gpu`` with a given device
object and compares with (a) the rows the batch was built from and (b) the
CPU backend, bit for bit; failures must match the CPU backend's error class,
first-chunk flags and per-chunk flag words.
"""

from __future__ import annotations

import struct

import numpy as np

from gtsamples.batch import FIRST_FIELD_SLOT, row_mask
from gtsamples.decode import cpu, gpu
from gtsamples.errors import SamplesError
from tests.gpu.batchgen import BlockSpec, build_batch, compress, random_blocks, uvarint, xxh64

POISON = 0xA5


def host_columns(dt) -> dict:
    """DeviceTable -> {name: numpy} (fields: (values, validity)), on the host."""
    out = {}
    n = dt.num_rows
    for c in dt.columns:
        data = c.data if isinstance(c.data, np.ndarray) else c.data.get()
        data = np.asarray(data)[:n]
        if c.nullable:
            words = c.mask if isinstance(c.mask, np.ndarray) else c.mask.get()
            bits = np.unpackbits(np.asarray(words).view(np.uint8), bitorder="little").astype(bool)
            valid = bits[:n]
            assert not bits[n:].any(), f"{c.name}: mask bits set past the last row"
            assert c.null_count == int(n - valid.sum()), f"{c.name}: null_count"
            out[c.name] = (data.view(np.float64), valid)
        else:
            out[c.name] = data
    return out


def cpu_columns(batch) -> dict:
    """The CPU backend's rows, trimmed like frames.to_arrow, in the same shape."""
    cols = cpu.decode_batch(batch, threads=1)
    rows = batch.blocks["rows"].astype(np.int64)
    table_id = np.repeat(batch.blocks["table_id"], rows)
    tsid = np.repeat(batch.blocks["tsid"], rows)
    out = {"__table_id": table_id, "__tsid": tsid, "timestamp": cols.timestamp}
    if batch.want_sequence:
        out["__sequence"] = cols.sequence
    if batch.want_op_type:
        out["__op_type"] = cols.op_type
    for k, name in enumerate(batch.field_names):
        out[name] = (cols.values[k], cols.validity[k])
    if batch.needs_trim:
        m = row_mask(cols.timestamp, batch.start, batch.end)
        out = {k: (v[0][m], v[1][m]) if isinstance(v, tuple) else v[m] for k, v in out.items()}
    return out


def assert_same(got: dict, want: dict, what: str = "") -> None:
    assert list(got) == list(want), (what, list(got), list(want))
    for name, w in want.items():
        g = got[name]
        if isinstance(w, tuple):
            np.testing.assert_array_equal(g[1], w[1], err_msg=f"{what} validity of {name}")
            np.testing.assert_array_equal(g[0].view(np.uint64), np.asarray(w[0]).view(np.uint64),
                                          err_msg=f"{what} bits of {name}")  # fmt: skip
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{what} {name}")


def decode(batch, device, **kw):
    return gpu.decode_batch_gpu(batch, _device=device, poison=POISON, **kw)


def check_parity(built, device, **kw) -> None:
    """GPU == the rows built == the CPU backend."""
    dt = decode(built.batch, device, **kw)
    got = host_columns(dt)
    assert_same(got, built.expected_trimmed, "vs built rows:")
    assert_same(got, cpu_columns(built.batch), "vs CPU backend:")


def check_same_error(batch, device, **kw) -> None:
    """Both backends fail alike (or both succeed with equal rows)."""
    try:
        want = cpu_columns(batch)
        cpu_err = None
    except SamplesError as e:
        cpu_err = e
    try:
        got = host_columns(decode(batch, device, **kw))
        gpu_err = None
    except SamplesError as e:
        gpu_err = e
    if cpu_err is None:
        assert gpu_err is None, f"GPU raised {gpu_err!r}, CPU decoded"
        assert_same(got, want, "vs CPU backend:")
        return
    assert gpu_err is not None, f"CPU raised {cpu_err!r}, GPU decoded"
    assert type(gpu_err) is type(cpu_err), (gpu_err, cpu_err)
    assert gpu_err.flags == cpu_err.flags, (gpu_err.flags.describe(), cpu_err.flags.describe())
    np.testing.assert_array_equal(gpu_err.chunk_flags, cpu_err.chunk_flags)


# ----------------------------------------------------------------------------- batches


def random_built(seed: int, n_blocks=5, n_fields=3, max_rows=300, **kw):
    rng = np.random.default_rng(seed)
    names = tuple(f"f{k}" for k in range(n_fields))
    return build_batch(random_blocks(rng, n_blocks, n_fields, max_rows=max_rows), names, **kw)


def trimmed_built(seed: int, where: str, **kw):
    rng = np.random.default_rng(seed)
    blocks = random_blocks(rng, 5, 2, max_rows=200, ts_kind="dod")
    ts = np.concatenate([b.ts for b in blocks])
    lo, hi = int(ts.min()), int(ts.max())
    if where == "inside":
        start, end = int(np.quantile(ts, 0.3)), int(np.quantile(ts, 0.7))
    elif where == "start_only":
        start, end = int(np.median(ts)), None
    elif where == "end_only":
        start, end = None, int(np.median(ts))
    elif where == "nothing":
        start, end = hi + 1, hi + 10
    else:  # everything: bounds outside the data
        start, end = lo, hi + 1
    return build_batch(blocks, ("a", "b"), start=start, end=end, **kw)


def single_block(seed: int, rows: int, n_fields: int = 1, nulls: bool = True):
    rng = np.random.default_rng(seed)
    ts = np.cumsum(rng.integers(0, 100, rows)).astype(np.int64) + 1000
    seq = rng.integers(0, 1 << 63, rows, dtype=np.uint64)
    ops = rng.integers(0, 2, rows).astype(np.uint8)
    fields = []
    for _ in range(n_fields):
        valid = rng.random(rows) < 0.7 if nulls else np.ones(rows, bool)
        valid[0] = True
        fields.append((rng.normal(size=rows), valid))
    return [BlockSpec(1, 7, ts, seq, ops, fields)]


# ----------------------------------------------------------------------------- corruption (encoded bytes; checksums recomputed)

ROLE_SLOT = {"ts": 0, "seq": 1, "op": 2, "f": FIRST_FIELD_SLOT}


def _replace(slot_want, fn):
    def mutate(ci, slot, raw):
        return fn(raw) if slot == slot_want else raw

    return mutate


def corruption_cases():
    """(name, blocks-builder kwargs, mutate(ci, slot, raw) -> raw, post(batch))."""
    p8 = lambda v: struct.pack("<q", v)  # noqa: E731
    cases = [
        ("ts1_bad_length", _replace(0, lambda r: struct.pack("<qq", 1000, 3) + b"\0")),
        ("ts1_negative_step", _replace(0, lambda r: struct.pack("<qq", 1000, -1))),
        ("ts1_overflow", _replace(0, lambda r: struct.pack("<qq", (1 << 63) - 5, 1 << 40))),
        ("ts1_bounds", _replace(0, lambda r: struct.pack("<qq", 999, 0))),
        ("ts2_short", _replace(0, lambda r: b"\1\2\3")),
        ("ts2_truncated", _replace(0, lambda r: r[:-1] + b"\x80")),
        ("ts2_overflow_long", _replace(0, lambda r: r[:8] + b"\xff" * 11 + r[8:])),
        ("ts2_overflow_tenth", _replace(0, lambda r: r[:8] + b"\x80" * 9 + b"\x02" + r[8:])),
        ("ts2_trailing", _replace(0, lambda r: r + b"\x00")),
        ("ts2_decreasing", _replace(0, lambda r: r[:8] + uvarint(1) + r[9:])),  # first delta -1
        ("ts2_bounds", _replace(0, lambda r: p8(struct.unpack("<q", r[:8])[0] + 1) + r[8:])),
        ("seq3_bad_length", _replace(1, lambda r: b"\0" * 9)),
        ("seq4_short", _replace(1, lambda r: b"\0" * 7)),
        ("seq4_trailing", _replace(1, lambda r: r + b"\x05")),
        ("seq4_truncated", _replace(1, lambda r: r[:-1])),
        ("op6_bad_length", _replace(2, lambda r: b"\1\1")),
        ("op6_invalid", _replace(2, lambda r: b"\2")),
        ("op7_invalid", _replace(2, lambda r: bytes([1] * (len(r) - 1) + [9]))),
        ("f_kind", _replace(FIRST_FIELD_SLOT, lambda r: b"\2" + r[1:])),
        ("f_short", _replace(FIRST_FIELD_SLOT, lambda r: r[:5])),
        ("f_trailing", _replace(FIRST_FIELD_SLOT, lambda r: r + b"\x01")),
        ("f_truncated", _replace(FIRST_FIELD_SLOT, lambda r: r[:-1] + b"\x81")),
        ("f_padding", lambda ci, slot, raw: raw),  # see corrupted_batch
    ]
    return cases


def corrupted_batch(name, mutate, seed=11, rows=37, compression="mixed"):
    blocks = single_block(seed, rows, n_fields=1, nulls=True)
    if name.startswith("ts1"):
        blocks[0].ts = np.arange(rows, dtype=np.int64) * 3 + 1000
    if name.startswith("ts2"):  # one-byte ZigZag deltas, not a constant step
        blocks[0].ts = 1000 + np.cumsum(np.random.default_rng(seed).integers(0, 50, rows)).astype(np.int64)
    if name.startswith("seq3"):
        blocks[0].seq = np.full(rows, 5, np.uint64)
    if name.startswith("op6"):
        blocks[0].ops = np.ones(rows, np.uint8)
    built = build_batch(blocks, ("f",), mutate=mutate, compression=compression)
    b = built.batch
    if name == "f_padding":  # set an unused high bit of the bitmap's last byte
        i = int(np.flatnonzero(b.chunks["slot"] == FIRST_FIELD_SLOT)[0])
        _rewrite_chunk(b, i, lambda r: r[: 1 + (rows + 7) // 8 - 1] + bytes([r[(rows + 7) // 8] | 0x80]) +
                       r[1 + (rows + 7) // 8:])  # fmt: skip
    return b


def _rewrite_chunk(b, i, fn):
    """Re-encode chunk i's raw bytes (stored raw), fixing lengths and checksum."""
    import zstandard

    ch = b.chunks
    o, n = int(ch["src_offset"][i]), int(ch["stored_len"][i])
    stored = b.data[o : o + n].tobytes()
    raw = zstandard.ZstdDecompressor().decompress(stored) if ch["compression"][i] == 1 else stored
    new = fn(raw)
    data = bytearray(b.data.tobytes())
    ch["src_offset"][i] = len(data)
    ch["stored_len"][i] = ch["decoded_len"][i] = len(new)
    ch["compression"][i] = 0
    ch["checksum"][i] = xxh64(new)
    data += new
    b.data = np.frombuffer(bytes(data), np.uint8).copy()


def descriptor_cases():
    """Corruptions the bytes cannot show: wrong null counts, bounds, codecs."""

    def nulls_kind0(b):
        i = int(np.flatnonzero(b.chunks["slot"] == FIRST_FIELD_SLOT)[0])
        b.chunks["null_count"][i] = 1

    def nulls_bitmap(b):
        i = int(np.flatnonzero(b.chunks["slot"] == FIRST_FIELD_SLOT)[1])
        b.chunks["null_count"][i] += 1

    def min_ts(b):
        b.chunks["min_timestamp"][0] -= 1

    def checksum(b):
        b.chunks["checksum"][3] ^= 1 << 7

    def unknown_comp(b):
        b.chunks["compression"][1] = 5

    def unknown_enc(b):
        b.chunks["encoding"][4] = 77

    def two_bad(b):
        checksum(b)
        nulls_bitmap(b)

    return [("nulls_kind0", nulls_kind0), ("nulls_bitmap", nulls_bitmap), ("min_ts", min_ts),
            ("checksum", checksum), ("unknown_comp", unknown_comp), ("unknown_enc", unknown_enc),
            ("two_bad", two_bad)]  # fmt: skip


def descriptor_batch(seed=12):
    rng = np.random.default_rng(seed)
    rows = 50
    mk = lambda t0, valid: BlockSpec(1, 9, np.arange(rows, dtype=np.int64) * 2 + t0,  # noqa: E731
                                     rng.integers(0, 9, rows).astype(np.uint64), np.ones(rows, np.uint8),
                                     [(rng.normal(size=rows), valid)])  # fmt: skip
    valid = rng.random(rows) < 0.6
    valid[0] = True
    return build_batch([mk(0, np.ones(rows, bool)), mk(1000, valid)], ("f",), compression="mixed").batch


# ----------------------------------------------------------------------------- the sequence order rule
# "Sequences are nonincreasing within equal timestamps, including across parts."
# Blocks without fields: chunk 3k is block k's timestamps, 3k + 1 its sequences.


def _seq_block(ts, seq, tsid=7):
    ts, seq = np.asarray(ts, np.int64), np.asarray(seq, np.uint64)
    return BlockSpec(1, tsid, ts, seq, np.ones(len(ts), np.uint8), [])


def _long_ties(rows, bad_row):
    """``rows`` rows at 4 timestamps, sequences descending within each; one increase at ``bad_row``."""
    ts = np.repeat(np.arange(4, dtype=np.int64) * 10, -(-rows // 4))[:rows]
    seq = np.arange(rows, 0, -1).astype(np.uint64) + np.uint64(2**63)
    if bad_row is not None:
        seq[bad_row] = seq[bad_row - 1] + np.uint64(1)
    return ts, seq


def sequence_order_cases():
    """(name, batch builder, {chunk index: True when it must carry SEQUENCE_ORDER}).
    The builder returns a ChunkBatch; every other chunk must carry no SEQUENCE_ORDER."""
    U = 2**64 - 1
    trailing = lambda ci_want: lambda ci, slot, raw: raw + b"\0" if ci == ci_want else raw  # noqa: E731

    def two_blocks(first_seq, boundary_seq, mutate=None, same_artifact=True, tsid2=7):
        a = _seq_block([1, 2, 5, 5], [9, 9, 8, first_seq])
        b = _seq_block([5, 6, 7], [boundary_seq, 3, 3], tsid=tsid2)
        batch = build_batch([a, b], (), mutate=mutate, compression="raw").batch
        if not same_artifact:  # block 1 from a second artifact's part (a region's merged group)
            batch.blocks["part"][1] = 1
            batch.chunks["part"][batch.chunks["block"] == 1] = 1
            batch.part_artifact = np.array([0, 1])
        return batch

    def long_block(bad_row, rows=1100):
        ts, seq = _long_ties(rows, bad_row)
        return build_batch([_seq_block(ts, seq)], (), compression="mixed").batch

    return [
        ("in_block", lambda: build_batch([_seq_block([3, 3, 3], [5, 4, 6])], (), compression="raw").batch, {1}),
        ("in_block_u64", lambda: build_batch([_seq_block([3, 3], [0, U])], (), compression="raw").batch, {1}),
        ("in_block_valid_wrap", lambda: build_batch([_seq_block([3, 3, 4], [U, 0, 7])], (), compression="raw").batch,
         set()),
        ("in_block_ts_failed", lambda: build_batch([_seq_block([3, 3, 3], [5, 4, 6])], (), mutate=trailing(0),
                                                   compression="raw").batch, set()),
        ("in_block_long_tail", lambda: long_block(1099), {1}),  # past the first CUDA block's rows
        ("in_block_long_8way", lambda: long_block(301), {1}),  # inside the CPU's 8-varints-at-once path
        ("in_block_long_valid", lambda: long_block(None), set()),
        ("across_blocks", lambda: two_blocks(4, 5), {4}),
        ("across_blocks_equal_ok", lambda: two_blocks(4, 4), set()),
        ("across_blocks_u64", lambda: two_blocks(0, U), {4}),
        ("across_blocks_prev_ts_failed", lambda: two_blocks(4, 5, mutate=trailing(0)), set()),
        ("across_blocks_prev_seq_failed", lambda: two_blocks(4, 5, mutate=trailing(1)), set()),
        ("across_blocks_own_ts_failed", lambda: two_blocks(4, 5, mutate=trailing(3)), set()),
        ("across_blocks_other_series_ok", lambda: two_blocks(4, 5, tsid2=8), set()),
        ("across_artifacts_ok", lambda: two_blocks(4, 5, same_artifact=False), set()),
        ("both", lambda: build_batch([_seq_block([1, 5, 5], [9, 4, 6]), _seq_block([5, 5], [7, 7])], (),
                                     compression="raw").batch, {1, 4}),
    ]


def check_sequence_order_flags(batch, must: set) -> None:
    """The CPU backend's SEQUENCE_ORDER bits are exactly on chunks ``must``; an error
    names the rule, a clean batch decodes."""
    from gtsamples.errors import CorruptArtifactError, DecodeErrorFlag

    bit = np.uint32(DecodeErrorFlag.SEQUENCE_ORDER)
    try:
        cpu.decode_batch(batch, threads=1)
        flags = np.zeros(len(batch.chunks), np.uint32)
    except SamplesError as e:
        flags = e.chunk_flags
        if must and not (flags & ~bit).any():
            assert type(e) is CorruptArtifactError and "sequences must be nonincreasing" in str(e), e
    assert set(np.flatnonzero(flags & bit).tolist()) == must, flags
