"""CPU decode backend (gtsamples.decode.cpu): round trips, error flags, bounds safety."""

import struct

import numpy as np
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gtsamples.batch import DecodedColumns
from gtsamples.decode import cpu
from gtsamples.format import libzstd
from gtsamples.errors import CorruptArtifactError, DecodeErrorFlag, SamplesError, UnsupportedError
from tests.decode._encode_ref import (
    Block,
    Chunk,
    block_of,
    enc_f64_xor,
    enc_seq_delta,
    enc_ts_dod,
    encode_uvarint,
    f64_bits,
    make_batch,
    zigzag_array,
)
from tests.gpu import scenarios as S

F = DecodeErrorFlag
I64_MIN = -(1 << 63)
I64_MAX = (1 << 63) - 1
U64_MAX = (1 << 64) - 1
RNG = np.random.default_rng(1234)

SPECIAL_BITS = np.array(
    [
        0x7FF0000000000001,  # signalling NaN, payload 1
        0x7FF8000000000000,  # quiet NaN
        0xFFF8DEADBEEF0001,  # negative NaN with payload
        0x7FFFFFFFFFFFFFFF,  # NaN, all payload bits
        0x8000000000000000,  # -0.0
        0x0000000000000000,  # +0.0
        0x7FF0000000000000,  # +inf
        0xFFF0000000000000,  # -inf
        0x0000000000000001,  # smallest subnormal
        0x000FFFFFFFFFFFFF,  # largest subnormal
        0x800FFFFFFFFFFFFF,  # negative subnormal
        0x7FEFFFFFFFFFFFFF,  # max finite
        0x3FF0000000000000,  # 1.0
    ],
    dtype=np.uint64,
)


def decode(blocks, **kw) -> DecodedColumns:
    threads = kw.pop("threads", None)
    return cpu.decode_batch(make_batch(blocks, **kw), threads=threads)


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint64)


def check_block(cols: DecodedColumns, row0: int, ts, seq=None, ops=None, fields=()):
    n = len(ts)
    np.testing.assert_array_equal(cols.timestamp[row0 : row0 + n], np.asarray(ts, np.int64))
    if seq is not None:
        np.testing.assert_array_equal(cols.sequence[row0 : row0 + n], np.asarray(seq, np.uint64))
    if ops is not None:
        np.testing.assert_array_equal(cols.op_type[row0 : row0 + n], np.asarray(ops, np.uint8))
    for k, values, valid in fields:
        vb = f64_bits(values)
        v = np.ones(n, bool) if valid is None else np.asarray(valid, bool)
        np.testing.assert_array_equal(cols.validity[k][row0 : row0 + n], v)
        np.testing.assert_array_equal(bits(cols.values[k][row0 : row0 + n]), np.where(v, vb, np.uint64(0)))


# =============================================================================
# Round trips
# =============================================================================

@pytest.mark.parametrize("compression", [0, 1])
@pytest.mark.parametrize("rows", [1, 2, 7, 8, 9, 1000, 8192])
def test_roundtrip_all_encodings(rows, compression):
    ts = np.sort(RNG.integers(-(10**12), 10**12, rows)).astype(np.int64)
    seq = RNG.integers(0, 2**63, rows, dtype=np.uint64) * np.uint64(2)
    ops = RNG.integers(0, 2, rows).astype(np.uint8)
    v0 = RNG.normal(size=rows)
    valid0 = RNG.random(rows) < 0.7
    if rows > 1:
        valid0[0] = True
        valid0[-1] = False
    fields = [(0, v0, valid0 if rows > 1 else None), (1, RNG.normal(size=rows) * 1e300, None)]
    blk = block_of(ts, seq, ops, fields, compression=compression)
    cols = decode([blk])
    check_block(cols, 0, ts, seq, ops, fields)
    assert cols.sequence.dtype == np.uint64 and cols.op_type.dtype == np.uint8
    assert all(v.dtype == np.float64 for v in cols.values) and all(v.dtype == np.bool_ for v in cols.validity)


def test_constant_encodings_chosen_and_decoded():
    ts = np.arange(8192, dtype=np.int64) * 15 + 7
    blk = block_of(ts, np.full(8192, U64_MAX, np.uint64), np.zeros(8192, np.uint8))
    assert [c.encoding for c in blk.chunks] == [1, 3, 6]
    cols = decode([blk])
    check_block(cols, 0, ts, np.full(8192, U64_MAX, np.uint64), np.zeros(8192, np.uint8))


def test_singleton_and_repeated_timestamps():
    cols = decode([block_of([I64_MIN]), block_of([I64_MAX]), block_of([5, 5, 5, 5])])
    np.testing.assert_array_equal(cols.timestamp, [I64_MIN, I64_MAX, 5, 5, 5, 5])


def test_ts_constant_extremes():
    # exactly reaching I64_MAX is fine; one past overflows (tested below)
    n = 8192
    step = (I64_MAX - I64_MIN) // (n - 1)
    first = I64_MAX - step * (n - 1)
    blk = Block(n, first, I64_MAX, [Chunk(0, 1, struct.pack("<qq", first, step))])
    cols = decode([blk], want_sequence=False, want_op_type=False)
    assert cols.sequence is None and cols.op_type is None
    assert cols.timestamp[0] == first and cols.timestamp[-1] == I64_MAX
    assert (np.diff(cols.timestamp.astype(object)) == step).all()
    # step I64_MAX from I64_MIN, two rows
    blk = Block(2, I64_MIN, -1, [Chunk(0, 1, struct.pack("<qq", I64_MIN, I64_MAX))])
    cols = decode([blk], want_sequence=False, want_op_type=False)
    np.testing.assert_array_equal(cols.timestamp, [I64_MIN, -1])


def test_ts_dod_wrapping_extremes():
    ts = np.array([I64_MIN, I64_MIN, -1, 0, I64_MAX - 1, I64_MAX, I64_MAX], dtype=np.int64)
    # deltas up to 2**63 - 1 and delta differences wrap across the full range
    blk = block_of(ts, fields=[(0, np.zeros(len(ts)), None)])
    assert blk.chunks[0].encoding == 2
    cols = decode([blk])
    np.testing.assert_array_equal(cols.timestamp, ts)
    ts2 = np.array([I64_MIN, I64_MAX], dtype=np.int64)  # delta 2**64 - 1 wraps
    cols = decode([block_of(ts2, fields=[(0, np.zeros(2), None)])])
    np.testing.assert_array_equal(cols.timestamp, ts2)


def test_seq_delta_extremes():
    seq = np.array([0, U64_MAX, 0, 1 << 63, (1 << 63) - 1, U64_MAX, U64_MAX, 1, 0], dtype=np.uint64)
    n = len(seq)
    blk = block_of(np.arange(n), seq)
    assert blk.chunks[1].encoding == 4
    cols = decode([blk])
    np.testing.assert_array_equal(cols.sequence, seq)


def test_float_special_bits_exact():
    vals = np.concatenate([SPECIAL_BITS, SPECIAL_BITS[::-1], RNG.integers(0, U64_MAX, 100, dtype=np.uint64,
                                                                            endpoint=True)])
    n = len(vals)
    valid = np.ones(n, bool)
    valid[::3] = False
    fields = [(0, vals, None), (1, vals, valid)]
    for compression in (0, 1):
        cols = decode([block_of(np.arange(n), fields=fields, compression=compression)])
        check_block(cols, 0, np.arange(n), fields=fields)
        # null is not NaN: nulls hold 0 bits, NaN rows are valid
        assert not np.isnan(cols.values[1][~valid]).any()


@pytest.mark.parametrize("rows", [2, 8, 9, 8192])
def test_sparse_validity(rows):
    vals = RNG.normal(size=rows)
    for pattern in ("first", "last", "single_mid", "alternate", "all_but_one"):
        valid = np.zeros(rows, bool)
        if pattern == "first":
            valid[0] = True
        elif pattern == "last":
            valid[-1] = True
        elif pattern == "single_mid":
            valid[rows // 2] = True
        elif pattern == "alternate":
            valid[::2] = True
        else:
            valid[:] = True
            valid[rows // 3] = False
        if valid.all():
            continue
        fields = [(0, vals, valid)]
        cols = decode([block_of(np.arange(rows), fields=fields)])
        check_block(cols, 0, np.arange(rows), fields=fields)


def test_multi_block_with_omitted_field_chunks():
    b0 = block_of(np.arange(10), fields=[(0, np.arange(10.0), None), (2, -np.arange(10.0), None)], tsid=1)
    b1 = block_of(np.arange(100, 105), fields=[(1, np.full(5, 2.5), None)], tsid=2)  # fields 0, 2 omitted
    b2 = block_of(np.arange(3) + 7, compression=1, fields=[(2, np.array([1.0, np.nan, 3.0]), [True, False, True])])
    cols = decode([b0, b1, b2], field_names=("a", "b", "c"))
    assert len(cols.timestamp) == 18
    np.testing.assert_array_equal(cols.timestamp, np.concatenate([np.arange(10), np.arange(100, 105), [7, 8, 9]]))
    np.testing.assert_array_equal(cols.validity[0], [True] * 10 + [False] * 8)
    np.testing.assert_array_equal(cols.validity[1], [False] * 10 + [True] * 5 + [False] * 3)
    np.testing.assert_array_equal(cols.validity[2], [True] * 10 + [False] * 5 + [True, False, True])
    assert (bits(cols.values[1][:10]) == 0).all() and (bits(cols.values[0][10:]) == 0).all()
    np.testing.assert_array_equal(cols.values[2][15:], [1.0, 0.0, 3.0])


def test_unwanted_sequence_and_op_chunks_are_skipped():
    blk = block_of(np.arange(4), fields=[(0, np.ones(4), None)])
    blk.chunks[1] = Chunk(1, 99, b"garbage", checksum=1)  # would be unsupported and corrupt
    blk.chunks[2] = Chunk(2, 7, b"\x07\x07\x07", compression=5)
    cols = decode([blk], want_sequence=False, want_op_type=False)
    assert cols.sequence is None and cols.op_type is None
    np.testing.assert_array_equal(cols.values[0], np.ones(4))


def test_readonly_and_noncontiguous_data():
    batch = make_batch([block_of(np.arange(5), fields=[(0, np.arange(5.0), None)], compression=1)])
    ro = batch.data.copy()
    ro.flags.writeable = False
    batch.data = ro
    np.testing.assert_array_equal(cpu.decode_batch(batch).values[0], np.arange(5.0))
    assert batch.data is ro
    wide = np.zeros(2 * ro.size, np.uint8)
    wide[::2] = ro
    batch.data = wide[::2]
    np.testing.assert_array_equal(cpu.decode_batch(batch).values[0], np.arange(5.0))


def test_empty_batch():
    cols = decode([])
    assert cols.timestamp.shape == (0,) and cols.values == [] and cols.sequence.shape == (0,)


@pytest.mark.parametrize("threads", ["2", 1.5, True, np.bool_(True), np.timedelta64(2, "ns"), [2]])
def test_threads_that_are_not_integers_are_refused(threads):
    """int() took '2', truncated 1.5 and read True as one thread (on any read below the
    parallel thresholds nothing looked at the value at all)."""
    batch = make_batch([block_of(np.arange(10))])
    for fn in (cpu.decode_batch, cpu.decode_batch_flags):
        with pytest.raises(TypeError, match=r"^threads must be a number of threads \(an integer; None or <= 0"):
            fn(batch, threads=threads)
    assert cpu.decode_batch(batch, threads=np.int64(1)).timestamp.tolist() == list(range(10))
    assert cpu.decode_batch(batch, threads=0).timestamp.tolist() == list(range(10))

def test_threads_and_windows_agree(monkeypatch):
    blocks = [
        block_of(np.cumsum(RNG.integers(0, 1000, 8192)), fields=[(0, RNG.normal(size=8192), RNG.random(8192) < .9)],
                 compression=1)
        for _ in range(12)
    ]
    batch = make_batch(blocks)
    ref = cpu.decode_batch(batch, threads=1)
    for name in ("PARALLEL_ZSTD_MIN_BYTES", "PARALLEL_MIN_ITEMS", "PARALLEL_MIN_VALUES", "PARALLEL_HASH_MIN_BYTES"):
        monkeypatch.setattr(cpu.parallel, name, 0)  # exercise the parallel paths
    for window, tasks in ((cpu.window.WINDOW_BYTES, cpu.parallel.TASKS_PER_THREAD), (3000, 1), (100_000, 16)):
        monkeypatch.setattr(cpu.window, "WINDOW_BYTES", window)  # 3000: one chunk per window, widened
        monkeypatch.setattr(cpu.parallel, "TASKS_PER_THREAD", tasks)
        for threads in (None, 2, 64):
            got = cpu.decode_batch(batch, threads=threads)
            np.testing.assert_array_equal(got.timestamp, ref.timestamp)
            np.testing.assert_array_equal(got.sequence, ref.sequence)
            np.testing.assert_array_equal(got.op_type, ref.op_type)
            np.testing.assert_array_equal(bits(got.values[0]), bits(ref.values[0]))
            np.testing.assert_array_equal(got.validity[0], ref.validity[0])
    assert set(cpu.last_stats()) >= {"prepare", "decode", "decompress", "kernel", "finish", "total"}


def test_noncanonical_varints_accepted():
    # first delta 1 written as 10 bytes; second delta difference 0 as "80 00"
    payload = struct.pack("<q", 10) + b"\x82" + b"\x80" * 8 + b"\x00" + b"\x80\x00"
    blk = Block(3, 10, 12, [Chunk(0, 2, payload)])
    cols = decode([blk], want_sequence=False, want_op_type=False)
    np.testing.assert_array_equal(cols.timestamp, [10, 11, 12])


def test_decode_chunk_bytes():
    np.testing.assert_array_equal(cpu.decode_chunk_bytes(1, struct.pack("<qq", -5, 2), 3), [-5, -3, -1])
    np.testing.assert_array_equal(cpu.decode_chunk_bytes(2, enc_ts_dod([1, 4, 4]), 3, min_ts=1, max_ts=4),
                                  [1, 4, 4])
    np.testing.assert_array_equal(cpu.decode_chunk_bytes(4, enc_seq_delta([3, 2, 1]), 3), [3, 2, 1])
    np.testing.assert_array_equal(cpu.decode_chunk_bytes(7, b"\x00\x01", 2), [0, 1])
    p = zstandard.compress(enc_f64_xor([1.5, 0.0], [True, False]) + b"", 3)
    v, m = cpu.decode_chunk_bytes(5, p, 2, 1, compression=1, decoded_len=len(enc_f64_xor([1.5, 0.0], [1, 0])))
    np.testing.assert_array_equal(m, [True, False])
    np.testing.assert_array_equal(v, [1.5, 0.0])
    with pytest.raises(CorruptArtifactError, match="TIMESTAMP_BOUNDS"):
        cpu.decode_chunk_bytes(1, struct.pack("<qq", -5, 2), 3, min_ts=-5, max_ts=0)
    with pytest.raises(UnsupportedError, match="UNSUPPORTED_ENCODING"):
        cpu.decode_chunk_bytes(42, b"\x00", 1)


def test_batch_invariants_are_checked():
    batch = make_batch([block_of(np.arange(4), fields=[(0, np.ones(4), None)])])
    batch.n_rows = 3
    with pytest.raises(ValueError, match="exceed n_rows"):
        cpu.decode_batch(batch)
    batch = make_batch([block_of(np.arange(4), fields=[(0, np.ones(4), None)])])
    batch.field_names = ()
    with pytest.raises(ValueError, match="projected fields"):
        cpu.decode_batch(batch)


# =============================================================================
# Error flags: each one triggered alone, with its exception class and name
# =============================================================================

def ts_block(payload: bytes, rows: int, lo: int, hi: int, enc: int = 2, **chunk_kw) -> Block:
    return Block(rows, lo, hi, [Chunk(0, enc, payload, **chunk_kw)])


def seq_block(payload: bytes, rows: int, enc: int = 4) -> Block:
    return Block(rows, 0, rows - 1, [Chunk(0, 1, struct.pack("<qq", 0, 1)), Chunk(1, enc, payload)])


def seq_block_at(ts: int, payload: bytes, rows: int, enc: int = 4) -> Block:
    """A sequence chunk under ``rows`` equal timestamps (the order rule applies to every pair)."""
    return Block(rows, ts, ts, [Chunk(0, 1, struct.pack("<qq", ts, 0)), Chunk(1, enc, payload)])


def op_block(payload: bytes, rows: int, enc: int = 7) -> Block:
    return Block(rows, 0, rows - 1, [Chunk(0, 1, struct.pack("<qq", 0, 1)), Chunk(2, enc, payload)])


def f_block(payload: bytes, rows: int, nulls: int, **kw) -> Block:
    return Block(rows, 0, rows - 1, [Chunk(0, 1, struct.pack("<qq", 0, 1)), Chunk(3, 5, payload, nulls, **kw)])


def _i64(x):
    return struct.pack("<q", x)


def _u64(x):
    return struct.pack("<Q", x)


GOOD_F = enc_f64_xor(np.arange(5.0))
CASES = {
    # name: (block, flag)
    "checksum": (f_block(GOOD_F, 5, 0, checksum=12345), F.CHECKSUM_MISMATCH),
    "checksum_zstd": (f_block(GOOD_F, 5, 0, compression=1, checksum=1), F.CHECKSUM_MISMATCH),
    "frame_invalid": (f_block(GOOD_F, 5, 0, compression=1, stored=zstandard.compress(GOOD_F) + b"\0"),
                      F.ZSTD_FRAME_INVALID),
    "raw_length_mismatch": (f_block(GOOD_F, 5, 0, decoded_len=len(GOOD_F) + 1), F.DECODED_LENGTH_MISMATCH),
    "zstd_length_mismatch": (f_block(GOOD_F, 5, 0, compression=1, decoded_len=len(GOOD_F) - 1),
                             F.DECODED_LENGTH_MISMATCH),
    "zstd_failed": (f_block(GOOD_F, 5, 0, compression=1,
                            stored=zstandard.ZstdCompressor(write_checksum=True).compress(GOOD_F)[:-4] + b"\0\0\0\0"),
                    F.ZSTD_DECOMPRESS_FAILED),
    "unsupported_compression": (f_block(GOOD_F, 5, 0, compression=2), F.UNSUPPORTED_COMPRESSION),
    "unsupported_compression_max": (f_block(GOOD_F, 5, 0, compression=0xFFFF), F.UNSUPPORTED_COMPRESSION),
    "unsupported_encoding": (Block(5, 0, 4, [Chunk(0, 1, struct.pack("<qq", 0, 1)), Chunk(3, 8, GOOD_F)]),
                             F.UNSUPPORTED_ENCODING),
    "unsupported_encoding_0": (Block(5, 0, 4, [Chunk(0, 1, struct.pack("<qq", 0, 1)), Chunk(3, 0, GOOD_F)]),
                               F.UNSUPPORTED_ENCODING),
    "unsupported_encoding_zstd": (Block(5, 0, 4, [Chunk(0, 1, struct.pack("<qq", 0, 1)),
                                                  Chunk(3, 0xFFFF, GOOD_F, compression=1)]),
                                  F.UNSUPPORTED_ENCODING),
    "varint_truncated_ts": (ts_block(_i64(0) + b"\x80", 2, 0, 0), F.VARINT_TRUNCATED),
    "varint_truncated_ts_missing": (ts_block(_i64(0) + b"\x02", 3, 0, 2), F.VARINT_TRUNCATED),
    "varint_truncated_seq": (seq_block(_u64(7) + b"\xff\xff", 2), F.VARINT_TRUNCATED),
    "varint_truncated_f": (f_block(b"\x00" + _u64(0) + b"\x01\x01\x01", 5, 0), F.VARINT_TRUNCATED),
    "varint_overflow_10th": (ts_block(_i64(0) + b"\x80" * 9 + b"\x02", 2, 0, 0), F.VARINT_OVERFLOW),
    "varint_overflow_11": (seq_block(_u64(7) + b"\x80" * 10 + b"\x00", 2), F.VARINT_OVERFLOW),
    "varint_overflow_f": (f_block(b"\x00" + _u64(0) + b"\xff" * 10, 2, 0), F.VARINT_OVERFLOW),
    "trailing_ts": (ts_block(enc_ts_dod([1, 2, 4]) + b"\x00", 3, 1, 4), F.TRAILING_BYTES),
    "trailing_ts_single": (ts_block(_i64(3) + b"\x00", 1, 3, 3), F.TRAILING_BYTES),
    "trailing_seq": (seq_block(enc_seq_delta([5, 4]) + b"\x00", 2), F.TRAILING_BYTES),
    "trailing_f": (f_block(GOOD_F + b"\x00", 5, 0), F.TRAILING_BYTES),
    "trailing_f_bitmap": (f_block(enc_f64_xor(np.arange(5.0), [1, 0, 1, 1, 1]) + b"\x01", 5, 1),
                          F.TRAILING_BYTES),
    "bad_length_ts_const": (ts_block(struct.pack("<qq", 0, 1)[:15], 2, 0, 1, enc=1), F.BAD_LENGTH),
    "bad_length_ts_const_long": (ts_block(struct.pack("<qq", 0, 1) + b"\0", 2, 0, 1, enc=1), F.BAD_LENGTH),
    "bad_length_ts_dod": (ts_block(b"\x00" * 7, 1, 0, 0), F.BAD_LENGTH),
    "bad_length_seq_const": (seq_block(b"\x00" * 9, 2, enc=3), F.BAD_LENGTH),
    "bad_length_seq_delta": (seq_block(b"\x00" * 7, 1, enc=4), F.BAD_LENGTH),
    "bad_length_op_const": (op_block(b"\x01\x01", 2, enc=6), F.BAD_LENGTH),
    "bad_length_op_raw": (op_block(b"\x01\x01", 3, enc=7), F.BAD_LENGTH),
    "bad_length_f_kind0": (f_block(b"\x00" + b"\x00" * 7, 1, 0), F.BAD_LENGTH),
    "bad_length_f_bitmap": (f_block(b"\x01\x01" + b"\x00" * 7, 2, 1), F.BAD_LENGTH),
    "bad_length_f_empty": (f_block(b"", 1, 0), F.BAD_LENGTH),
    "ts_overflow": (ts_block(struct.pack("<qq", I64_MAX - 5, 3), 3, I64_MAX - 5, I64_MAX, enc=1),
                    F.TIMESTAMP_OVERFLOW),
    "ts_overflow_neg_first": (ts_block(struct.pack("<qq", -1, I64_MAX), 3, -1, I64_MAX, enc=1),
                              F.TIMESTAMP_OVERFLOW),
    "ts_decreasing": (ts_block(enc_ts_dod([5, 3]), 2, 5, 3), F.TIMESTAMP_DECREASING),
    "ts_decreasing_wrap": (ts_block(enc_ts_dod([I64_MAX, I64_MIN]), 2, I64_MAX, I64_MIN), F.TIMESTAMP_DECREASING),
    "ts_bounds_min": (ts_block(enc_ts_dod([1, 2, 4]), 3, 0, 4), F.TIMESTAMP_BOUNDS),
    "ts_bounds_max": (ts_block(enc_ts_dod([1, 2, 4]), 3, 1, 5), F.TIMESTAMP_BOUNDS),
    "ts_bounds_const": (ts_block(struct.pack("<qq", 1, 2), 3, 1, 4, enc=1), F.TIMESTAMP_BOUNDS),
    "validity_kind": (f_block(b"\x02" + GOOD_F[1:], 5, 0), F.VALIDITY_KIND),
    "validity_kind_ff": (f_block(b"\xff" + GOOD_F[1:], 5, 0), F.VALIDITY_KIND),
    "null_count_kind0": (f_block(GOOD_F, 5, 1), F.NULL_COUNT_MISMATCH),
    "null_count_kind1_zero": (f_block(b"\x01\x1f" + _u64(0) + b"\x00" * 4, 5, 0), F.NULL_COUNT_MISMATCH),
    "null_count_kind1_all": (f_block(b"\x01\x00" + _u64(0), 5, 5), F.NULL_COUNT_MISMATCH),
    "null_count_bitmap": (f_block(b"\x01\x0f" + _u64(0) + b"\x00" * 3, 5, 2), F.NULL_COUNT_MISMATCH),
    "validity_padding": (f_block(b"\x01\x4f" + _u64(0) + b"\x00" * 3, 5, 1), F.VALIDITY_PADDING),
    "op_invalid_const": (op_block(b"\x02", 3, enc=6), F.OP_TYPE_INVALID),
    "op_invalid_raw": (op_block(b"\x01\x00\xff", 3, enc=7), F.OP_TYPE_INVALID),
    "negative_step": (ts_block(struct.pack("<qq", 10, -1), 2, 10, 9, enc=1), F.NEGATIVE_STEP),
    "negative_step_min": (ts_block(struct.pack("<qq", 0, I64_MIN), 1, 0, 0, enc=1), F.NEGATIVE_STEP),
    "sequence_order": (seq_block_at(9, enc_seq_delta([5, 5, 4, 6]), 4), F.SEQUENCE_ORDER),
    # u64 order: 0 -> 2^64-1 is an increase (a ZigZag delta of -1), in the 8-at-a-time path too
    "sequence_order_u64": (seq_block_at(9, enc_seq_delta([30, 29, 28, 27, 26, 0] + [2**64 - k for k in range(1, 15)]),
                                        20), F.SEQUENCE_ORDER),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_error_flag(name):
    blk, flag = CASES[name]
    good = block_of(np.arange(blk.rows), fields=[(0, np.arange(float(blk.rows)), None)])
    batch = make_batch([good, blk])
    with pytest.raises(SamplesError) as ei:
        cpu.decode_batch(batch)
    err = ei.value
    expected_cls = UnsupportedError if flag in (F.UNSUPPORTED_ENCODING, F.UNSUPPORTED_COMPRESSION) else \
        CorruptArtifactError
    assert type(err) is expected_cls, (type(err), str(err))
    assert err.flags == flag, f"{err.flags!r} != {flag!r}: {err}"
    assert flag.name in str(err)
    assert "block 1" in str(err) and "mem://test/part-0.samples" in str(err)
    # exactly one chunk flagged, in the second block
    bad = np.flatnonzero(err.chunk_flags)
    assert bad.tolist() == [len(good.chunks) + len(blk.chunks) - 1]


def test_every_backend_flag_has_a_case():
    covered = {flag for _, flag in CASES.values()}
    assert covered == {f for f in F if f}, {f for f in F if f} - covered


def test_several_bad_chunks_reported():
    blk1, _ = CASES["ts_decreasing"]
    blk2, _ = CASES["op_invalid_raw"]
    with pytest.raises(CorruptArtifactError, match="2 chunks failed") as ei:
        cpu.decode_batch(make_batch([blk1, blk2]))
    assert ei.value.flags == F.TIMESTAMP_DECREASING


@pytest.mark.parametrize("lib", ["libzstd", "python-zstandard"])
def test_checksum_failure_is_not_decompressed(monkeypatch, lib):
    blk, _ = CASES["checksum_zstd"]
    calls = []
    if lib == "libzstd":
        if libzstd.get() is None:
            pytest.skip("no libzstd loads here")
        # the range and window loops as Python, so their libzstd call can be watched
        monkeypatch.setattr(cpu.window, "decode_range", cpu.window.decode_range.py_func)
        monkeypatch.setattr(cpu.window, "decompress_window", cpu.window.decompress_window.py_func)
        watched = libzstd.zstd_decompress_into  # the Python body: a ctypes call
        monkeypatch.setattr(cpu.window, "zstd_decompress_into", lambda *a: calls.append(a) or watched(*a))
    else:
        monkeypatch.setenv(libzstd.ENV_VAR, "off")
        watched = cpu.window.decompress_one
        monkeypatch.setattr(cpu.window, "decompress_one", lambda *a: calls.append(a) or watched(*a))
    with pytest.raises(CorruptArtifactError, match="CHECKSUM_MISMATCH"):
        cpu.decode_batch(make_batch([blk]))
    assert calls == []
    good = make_batch([block_of(np.arange(600), compression=1)])
    assert cpu.decode_batch(good).timestamp.shape == (600,)
    assert calls, "the watched decompressor is the one decode_batch uses"


def test_stored_range_outside_buffer():
    batch = make_batch([block_of(np.arange(3), fields=[(0, np.ones(3), None)])])
    batch.chunks["src_offset"][-1] = len(batch.data) - 2
    with pytest.raises(CorruptArtifactError, match="BAD_LENGTH") as ei:
        cpu.decode_batch(batch)
    assert "outside the fetched buffer" in str(ei.value)


def test_oversized_chunk_declared():
    batch = make_batch([block_of(np.arange(3), fields=[(0, np.ones(3), None)])])
    batch.chunks["decoded_len"][-1] = (1 << 20) + 1
    with pytest.raises(CorruptArtifactError, match="BAD_LENGTH"):
        cpu.decode_batch(batch)


# =============================================================================
# Bounds safety: whatever the bytes say, nothing outside the chunk's rows changes
# =============================================================================

def _check_in_bounds(enc, payload, rows, nulls, lo, hi):
    """Decode one chunk between two padding blocks; nothing outside its rows may change."""
    slot = {1: 0, 2: 0, 3: 1, 4: 1, 6: 2, 7: 2}.get(enc, 3)
    pad = Block(3, 0, 2, [Chunk(0, 1, struct.pack("<qq", 0, 1))])
    blk = Block(rows, lo, hi, [Chunk(slot, enc, payload, null_count=nulls if slot == 3 else 0)])
    batch = make_batch([pad, blk, pad], field_names=("a", "b"))
    cols, flags, detail = cpu.decode_batch_flags(batch, threads=1)
    outside = [0, 1, 2, 3 + rows, 4 + rows, 5 + rows]
    if slot == 1:
        assert (cols.sequence[outside] == 0).all()
    if slot == 2:
        assert (cols.op_type[outside] == 0).all()
    if slot == 3:
        for k in (0, 1):
            assert (bits(cols.values[k])[outside] == 0).all()
            assert not cols.validity[k][outside].any()
        assert not cols.validity[1].any()
        assert set(np.unique(cols.validity[0].view(np.uint8)).tolist()) <= {0, 1}
    np.testing.assert_array_equal(cols.timestamp[:3], [0, 1, 2])
    np.testing.assert_array_equal(cols.timestamp[3 + rows:], [0, 1, 2])
    assert flags[[0, 2]].tolist() == [0, 0]
    if flags.any():
        with pytest.raises(SamplesError):
            cpu.decode_batch(batch, threads=1)
    else:
        cpu.decode_batch(batch, threads=1)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    enc=st.integers(0, 8),
    payload=st.binary(max_size=64),
    rows=st.integers(1, 40),
    nulls=st.integers(0, 41),
    lo=st.sampled_from([0, -1, I64_MIN, I64_MAX]),
    hi=st.sampled_from([0, 1, 39, I64_MAX]),
)
def test_garbage_stays_in_bounds(enc, payload, rows, nulls, lo, hi):
    _check_in_bounds(enc, payload, rows, nulls, lo, hi)


def _valid_chunk(enc, rows, rng):
    """(payload, null_count, min_ts, max_ts) of a valid chunk of encoding ``enc``."""
    if enc == 1:
        first, step = int(rng.integers(-1000, 1000)), int(rng.integers(0, 5))
        return struct.pack("<qq", first, step), 0, first, first + step * (rows - 1)
    if enc == 2:
        ts = np.sort(rng.integers(-(2**62), 2**62, rows))
        return enc_ts_dod(ts), 0, int(ts[0]), int(ts[-1])
    if enc == 3:
        return struct.pack("<Q", int(rng.integers(0, 2**63))), 0, 0, 0
    if enc == 4:
        return enc_seq_delta(rng.integers(0, 2**64 - 1, rows, dtype=np.uint64, endpoint=True)), 0, 0, 0
    if enc == 5:
        valid = rng.random(rows) < 0.6
        valid[0] = True
        if valid.all() or rows == 1:
            valid[:] = True
        vals = rng.integers(0, 2**64 - 1, rows, dtype=np.uint64, endpoint=True)
        return enc_f64_xor(vals, valid), int(rows - valid.sum()), 0, 0
    if enc == 6:
        return bytes([int(rng.integers(0, 2))]), 0, 0, 0
    return rng.integers(0, 2, rows).astype(np.uint8).tobytes(), 0, 0, 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    enc=st.integers(1, 7),
    rows=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4),
    cut=st.integers(-3, 3),
    drift=st.sampled_from([0, 0, 0, -1, 1]),
)
def test_mutated_chunks_stay_in_bounds(enc, rows, seed, edits, cut, drift):
    rng = np.random.default_rng(seed)
    payload, nulls, lo, hi = _valid_chunk(enc, rows, rng)
    b = bytearray(payload)
    for pos, val in edits:
        b[pos % len(b)] = val
    if cut < 0:
        del b[cut:]
    elif cut > 0:
        b += bytes(rng.integers(0, 256, cut, dtype=np.uint8))
    _check_in_bounds(enc, bytes(b), max(1, rows + drift), max(0, nulls + drift), lo, hi)


# =============================================================================
# Property tests: codec round trips through the backend
# =============================================================================

PROP = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
u64s = st.integers(0, U64_MAX)


@PROP
@given(st.lists(st.tuples(u64s, st.booleans()), min_size=1, max_size=300), st.booleans())
def test_float_xor_roundtrip_property(items, compress):
    vals = np.array([v for v, _ in items], dtype=np.uint64)
    valid = np.array([m for _, m in items], dtype=bool)
    if not valid.any():
        valid[len(valid) // 2] = True
    fields = [(0, vals, valid)]
    cols = decode([block_of(np.arange(len(vals)), fields=fields, compression=int(compress))])
    check_block(cols, 0, np.arange(len(vals)), fields=fields)


@PROP
@given(st.lists(st.integers(I64_MIN, I64_MAX), min_size=1, max_size=300))
def test_ts_dod_roundtrip_property(values):
    ts = np.sort(np.array(values, dtype=np.int64))
    blk = block_of(ts)
    blk.chunks[0] = Chunk(0, 2, enc_ts_dod(ts))
    cols = decode([blk])
    np.testing.assert_array_equal(cols.timestamp, ts)


def _values_of(kind: str, n: int, seed: int) -> np.ndarray:
    """Float bit patterns whose XOR varints are long (random bits, sign or exponent
    changes: 9-10 bytes), short (1-2 bytes), or a mix of both."""
    rng = np.random.default_rng(seed)
    if kind == "random":
        return rng.integers(0, U64_MAX, n, dtype=np.uint64, endpoint=True)
    if kind == "sign":
        return (rng.normal(size=n) * np.where(np.arange(n) % 2, -1.0, 1.0)).view(np.uint64)
    if kind == "exponent":
        return (2.0 ** rng.integers(-60, 60, n) * 1.5).view(np.uint64)
    if kind == "short":
        return np.repeat(rng.integers(1, 5, n // 16 + 1).astype(np.float64), 16)[:n].view(np.uint64)
    return np.where(rng.random(n) < 0.5, _values_of("random", n, seed), _values_of("short", n, seed))


@PROP
@given(st.lists(st.tuples(st.integers(1, 150), st.booleans()), min_size=1, max_size=10),
       st.sampled_from(["random", "sign", "exponent", "short", "mixed"]), st.integers(0, 2**32), st.booleans())
def test_float_xor_null_runs_property(runs, kind, seed, compress):
    """Runs of nulls and values (whole 64-row validity words of either, trailing nulls)
    over long and short varints: both float decoders (masked for >= 3 bytes per value)."""
    valid = np.concatenate([np.full(n, v, dtype=bool) for n, v in runs])
    valid[seed % valid.size] = True  # a stored chunk has at least one value
    vals = _values_of(kind, valid.size, seed)
    fields = [(0, vals, None if valid.all() else valid)]
    cols = decode([block_of(np.arange(valid.size), fields=fields, compression=int(compress))])
    check_block(cols, 0, np.arange(valid.size), fields=fields)


@pytest.mark.parametrize("kind", ["random", "short"])
def test_float_decoder_choice_boundary(kind):
    """Chains shorter and longer than one masked window (72 bytes), of long and short varints."""
    for rows in (2, 9, 10, 11, 64, 65, 200):
        vals = _values_of(kind, rows, rows)
        for valid in (None, np.arange(rows) % 3 != 1):
            if valid is not None and valid.all():
                continue
            fields = [(0, vals, valid)]
            check_block(decode([block_of(np.arange(rows), fields=fields)]), 0, np.arange(rows), fields=fields)


@PROP
@given(st.lists(u64s, min_size=1, max_size=300))
def test_seq_delta_roundtrip_property(values):
    seq = np.array(values, dtype=np.uint64)
    blk = block_of(np.arange(len(seq)), seq)
    blk.chunks[1] = Chunk(1, 4, enc_seq_delta(seq))
    cols = decode([blk])
    np.testing.assert_array_equal(cols.sequence, seq)


@PROP
@given(st.integers(I64_MIN, I64_MAX), st.integers(0, I64_MAX), st.integers(1, 8192))
def test_ts_constant_property(first, step, rows):
    last = first + step * (rows - 1)
    blk = Block(rows, first, last if last <= I64_MAX else 0, [Chunk(0, 1, struct.pack("<qq", first, step))])
    if last > I64_MAX:
        with pytest.raises(CorruptArtifactError, match="TIMESTAMP_OVERFLOW"):
            decode([blk], want_sequence=False, want_op_type=False)
    else:
        cols = decode([blk], want_sequence=False, want_op_type=False)
        assert cols.timestamp[0] == first and cols.timestamp[-1] == last
        if rows > 1:
            assert int(cols.timestamp[1]) - int(cols.timestamp[0]) == step


def test_zigzag_helper_matches_reference():
    from gtsamples.format.varint import zigzag_encode

    xs = np.array([0, -1, 1, I64_MIN, I64_MAX], dtype=np.int64)
    assert zigzag_array(xs).tolist() == [zigzag_encode(int(x)) for x in xs]
    assert encode_uvarint(0) == b"\x00"


# =============================================================================
# Arrow validity bitmaps: blocks at any bit offset, decoded on several threads
# =============================================================================

@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    shapes=st.lists(st.tuples(st.integers(1, 40), st.sampled_from(["omit", "valid", "sparse", "one"])),
                    min_size=1, max_size=24),
    window=st.sampled_from([3000, 1 << 19]),
    seed=st.integers(0, 2**32 - 1),
)
def test_bitmaps_across_unaligned_blocks(monkeypatch, shapes, window, seed):
    """Blocks of 1..40 rows put chunk ranges at every bit offset of the shared bitmap
    bytes; whatever the thread split, each row's bit equals its chunk's, omitted
    chunks read as null, padding bits past the last row are zero, and the null
    count is exact (a field with no null has no bitmap)."""
    for name in ("PARALLEL_ZSTD_MIN_BYTES", "PARALLEL_MIN_ITEMS", "PARALLEL_MIN_VALUES", "PARALLEL_HASH_MIN_BYTES"):
        monkeypatch.setattr(cpu.parallel, name, 0)
    monkeypatch.setattr(cpu.window, "WINDOW_BYTES", window)
    rng = np.random.default_rng(seed)
    blocks, want_valid, want_bits = [], [], []
    t = 0
    for rows, kind in shapes:
        vals = rng.normal(size=rows)
        if kind == "omit":
            fields, valid = [], np.zeros(rows, bool)
        else:
            valid = np.ones(rows, bool)
            if kind == "sparse" and rows > 1:
                valid = rng.random(rows) < 0.5
                valid[rng.integers(rows)] = True
                if valid.all():
                    valid[0] = False
            elif kind == "one" and rows > 1:
                valid[:] = False
                valid[rng.integers(rows)] = True
            fields = [(0, vals, None if valid.all() else valid)]
        blocks.append(block_of(np.arange(rows) + t, fields=fields, compression=int(rng.integers(2))))
        t += rows
        want_valid.append(valid)
        want_bits.append(np.where(valid, f64_bits(vals), 0))
    valid = np.concatenate(want_valid)
    for threads in (1, 2):
        cols = decode(blocks, threads=threads, field_names=("a",))
        np.testing.assert_array_equal(cols.validity[0], valid)
        assert cols.null_counts[0] == int((~valid).sum())
        np.testing.assert_array_equal(bits(cols.values[0]), np.concatenate(want_bits).astype(np.uint64))
        bm = cols.bitmaps[0]
        if valid.all():
            assert bm is None
        else:
            assert bm.shape == ((valid.size + 7) // 8,)
            np.testing.assert_array_equal(bm, np.packbits(valid, bitorder="little"))  # padding bits zero


@pytest.mark.parametrize("name,make,must", S.sequence_order_cases(), ids=[c[0] for c in S.sequence_order_cases()])
def test_sequence_order_rule_cpu(name, make, must):
    """The order rule within and across blocks, on the chunks the rule names (the
    emulated GPU backend runs the same cases in tests/kernels)."""
    S.check_sequence_order_flags(make(), must)


def test_checks_on_the_decode_threads_flag_the_same_chunks(monkeypatch):
    """The checksum and frame checks run per chunk on the thread that decompresses it,
    window by window: with the parallel paths forced and windows of one chunk, the same
    chunks get the same flags as one thread, and only those."""
    import xxhash

    blocks = [
        block_of(np.cumsum(RNG.integers(0, 1000, 2048)), fields=[(0, RNG.normal(size=2048), RNG.random(2048) < .9)],
                 compression=1)
        for _ in range(8)
    ]
    batch = make_batch(blocks)
    ch = batch.chunks
    zstd = np.flatnonzero(ch["compression"] == 1)
    bad_sum, bad_frame = int(zstd[3]), int(zstd[-2])
    ch["checksum"][bad_sum] ^= 1  # a checksum mismatch
    data = batch.data
    o = int(ch["src_offset"][bad_frame])
    data[o] ^= 0xFF  # not a Zstd frame any more, with a checksum that matches the bytes
    ch["checksum"][bad_frame] = xxhash.xxh64_intdigest(data[o: o + int(ch["stored_len"][bad_frame])].tobytes())
    _, ref, _ = cpu.decode_batch_flags(batch, threads=1)
    assert np.flatnonzero(ref).tolist() == sorted([bad_sum, bad_frame])
    assert ref[bad_sum] == DecodeErrorFlag.CHECKSUM_MISMATCH and ref[bad_frame] == DecodeErrorFlag.ZSTD_FRAME_INVALID
    for name in ("PARALLEL_ZSTD_MIN_BYTES", "PARALLEL_MIN_ITEMS", "PARALLEL_MIN_VALUES", "PARALLEL_HASH_MIN_BYTES"):
        monkeypatch.setattr(cpu.parallel, name, 0)
    for window in (cpu.window.WINDOW_BYTES, 3000):
        monkeypatch.setattr(cpu.window, "WINDOW_BYTES", window)
        for threads in (2, 64):
            _, flags, _ = cpu.decode_batch_flags(batch, threads=threads)
            np.testing.assert_array_equal(flags, ref)
    with pytest.raises(CorruptArtifactError, match="CHECKSUM_MISMATCH"):
        cpu.decode_batch(batch)
