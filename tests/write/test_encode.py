"""Encoder unit tests: bytes written out by hand from the spec."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from gtsamples.format import constants as C
from gtsamples.write import encode as E

I64_MIN, I64_MAX, U64_MAX = C.I64_MIN, C.I64_MAX, C.U64_MAX


def le(x: int) -> bytes:
    return (x & U64_MAX).to_bytes(8, "little")


def fbits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


# --- primitives --------------------------------------------------------------


@pytest.mark.parametrize(
    "x, z", [(0, 0), (-1, 1), (1, 2), (-2, 3), (2, 4), (I64_MAX, U64_MAX - 1), (I64_MIN, U64_MAX)]
)
def test_zigzag(x, z):
    assert E.zigzag(x) == z


@pytest.mark.parametrize(
    "x, b",
    [
        (0, "00"),
        (1, "01"),
        (127, "7f"),
        (128, "8001"),
        (300, "ac02"),
        (16383, "ff7f"),
        (16384, "808001"),
        (U64_MAX, "ffffffffffffffffff01"),
    ],
)
def test_uvarint_shortest(x, b):
    assert E.uvarint(x) == bytes.fromhex(b)


# --- timestamps ----------------------------------------------------------------


def test_ts_constant_step():
    assert E.encode_timestamps([100, 110, 120]) == (1, bytes.fromhex("6400000000000000" "0a00000000000000"))


def test_ts_singleton_uses_step_zero():
    assert E.encode_timestamps([-5]) == (1, bytes.fromhex("fbffffffffffffff" "0000000000000000"))


def test_ts_repeated_is_constant_step_zero():
    assert E.encode_timestamps([7, 7, 7]) == (1, le(7) + le(0))


def test_ts_delta_of_delta():
    # deltas 10, 15: first 0, zigzag(10)=20=0x14, zigzag(15-10)=10=0x0a
    assert E.encode_timestamps([0, 10, 25]) == (2, bytes(8) + bytes.fromhex("140a"))


def test_ts_delta_of_delta_multibyte_and_negative_dd():
    # deltas 1, 300, 0: zigzag(1)=2; dd=299 -> zigzag 598 = d6 04; dd=-300 -> zigzag 599 = d7 04
    assert E.encode_timestamps([0, 1, 301, 301]) == (2, bytes(8) + bytes.fromhex("02d604d704"))


def test_ts_two_rows_are_constant_step():
    assert E.encode_timestamps([3, 1000]) == (1, le(3) + le(997))


def test_ts_negative_step_uses_2():
    # 10 -> 5: step -5 is negative; first 10, zigzag(-5)=9
    assert E.encode_timestamps([10, 5]) == (2, le(10) + bytes.fromhex("09"))


def test_ts_overflowing_step_uses_2():
    # difference 2^64 - 1 is not a representable i64: wrapping delta is -1 -> zigzag 1
    assert E.encode_timestamps([I64_MIN, I64_MAX]) == (2, bytes.fromhex("0000000000000080") + bytes.fromhex("01"))


def test_ts_constant_large_step_representable():
    # step exactly I64_MAX is representable: encoding 1
    assert E.encode_timestamps([-1, I64_MAX - 1]) == (1, le(-1) + le(I64_MAX))


def test_ts_unequal_steps_use_2():
    assert E.encode_timestamps([0, 1, 2, 4])[0] == 2


# --- sequences -----------------------------------------------------------------


def test_seq_constant():
    assert E.encode_sequences([7, 7, 7]) == (3, bytes.fromhex("0700000000000000"))
    assert E.encode_sequences([U64_MAX]) == (3, b"\xff" * 8)


def test_seq_delta():
    # 10, 9, 9, 12: diffs -1, 0, 3 -> zigzag 1, 0, 6
    assert E.encode_sequences([10, 9, 9, 12]) == (4, le(10) + bytes.fromhex("010006"))


def test_seq_delta_wraps():
    # 0 -> 2^64-1: wrapping difference 2^64-1 = -1 -> zigzag 1; back: +1 -> 2
    assert E.encode_sequences([0, U64_MAX, 0]) == (4, le(0) + bytes.fromhex("0102"))


def test_seq_delta_full_range():
    # difference 2^63 as i64 is I64_MIN -> zigzag U64_MAX (ten bytes)
    assert E.encode_sequences([0, 1 << 63]) == (4, le(0) + bytes.fromhex("ffffffffffffffffff01"))


# --- operation types -------------------------------------------------------------


def test_op_constant_and_raw():
    assert E.encode_op_types([1, 1, 1]) == (6, b"\x01")
    assert E.encode_op_types([0]) == (6, b"\x00")
    assert E.encode_op_types([1, 0, 1]) == (7, b"\x01\x00\x01")


# --- nullable float64 ---------------------------------------------------------------


def test_f64_all_valid():
    # 1.0, 1.0, 2.0: kind 0; bits(1.0) LE; xor 0 -> 00; 1.0^2.0 = 0x7ff0000000000000
    got = E.encode_f64([1.0, 1.0, 2.0])
    want = bytes.fromhex("00" "000000000000f03f" "00" "80808080808080f87f")
    assert got == (want, 0)


def test_f64_bitmap_and_xor_with_previous_non_null():
    # rows: null, 1.0, null, 3.0 -> bitmap 0b1010; xor(3.0, 1.0) skips the null
    x = fbits(3.0) ^ fbits(1.0)
    got = E.encode_f64([None, 1.0, None, 3.0])
    assert got == (bytes.fromhex("01" "0a" "000000000000f03f") + E.uvarint(x), 2)
    assert x == 0x7FF8000000000000
    assert E.uvarint(x) == bytes.fromhex("80808080808080fc7f")


def test_f64_bitmap_two_bytes_high_bits_zero():
    vals = [None] * 8 + [0.5]
    got, nulls = E.encode_f64(vals)
    assert nulls == 8
    assert got == bytes.fromhex("01" "0001" "000000000000e03f")


def test_f64_all_null_is_omitted():
    assert E.encode_f64([None, None]) == (None, 2)


def test_f64_preserves_bits():
    nan_payload = 0x7FF8_0000_DEAD_BEEF
    got, _ = E.encode_f64([0.0, -0.0, nan_payload])
    # first 0.0; xor -0.0 = sign bit (ten bytes); xor(nan, -0.0) = nan ^ sign
    want = bytes(8) + E.uvarint(1 << 63) + E.uvarint(nan_payload ^ (1 << 63))
    assert got == b"\x00" + want
    assert E.uvarint(1 << 63) == bytes.fromhex("80808080808080808001")


def test_f64_accepts_numpy_bits_and_infinities():
    got, _ = E.encode_f64([np.uint64(fbits(math.inf)), -math.inf])
    assert got == b"\x00" + le(fbits(math.inf)) + E.uvarint(1 << 63)


# --- kernels agree with the reference (on single blocks) ---------------------------


def _kernel_chunks(ts, seq, op, vals, valid):
    """Encode one block with the numba kernels: ([(enc, bytes)] * 3, (field bytes|None, nulls))."""
    ts = np.asarray(ts, np.int64)
    seq = np.asarray(seq, np.uint64)
    op = np.asarray(op, np.uint8)
    n = len(ts)
    starts = np.array([0], np.int64)
    counts = np.array([n], np.int64)
    valid = np.asarray(valid, bool)
    nulls = np.array([[n - int(valid.sum())]], np.int64)
    w = E.worst_sizes(counts, nulls)[0]
    offs = np.array([[0, w[0], w[0] + w[1]]], np.int64)
    out = np.full(int(w[:3].sum()) + 16, 0xEE, np.uint8)
    enc = np.zeros((1, 3), np.uint16)
    size = np.zeros((1, 3), np.int64)
    E.encode_fixed(ts, ts.view(np.uint64), seq, op, starts, counts, offs, out, enc, size)
    o = offs[0]
    assert all(size[0, i] <= w[i] for i in range(3))
    fixed = [(int(enc[0, i]), out[o[i] : o[i] + size[0, i]].tobytes()) for i in range(3)]
    bits = np.asarray(vals, np.float64).view(np.uint64)
    bm = np.packbits(valid, bitorder="little")
    # a bit offset of 3 exercises Arrow offsets
    bm3 = np.packbits(np.r_[np.zeros(3, bool), valid], bitorder="little")
    nl = np.zeros(1, np.int64)
    E.null_counts(bm3, 3, starts, counts, nl)
    assert nl[0] == nulls[0, 0]
    variants = [(bm, 0, True), (bm3, 3, True)]
    if valid.all():
        variants.append((np.zeros(1, np.uint8), 0, False))
    res = []
    for b, bo, has in variants:
        fsz = np.zeros(1, np.int64)
        fout = np.full(int(w[3]) + 16, 0xEE, np.uint8)
        E.encode_field(bits, b, bo, has, starts, counts, nulls[:, 0].copy(), np.zeros(1, np.int64), fout, fsz)
        assert fsz[0] <= w[3]
        res.append((fout[: fsz[0]].tobytes() if fsz[0] else None, int(nulls[0, 0])))
    # all-fields kernel (columns by address): the same bytes
    for b, bo in ((bm, 0), (bm3, 3)):
        ptrs = np.array([bits.ctypes.data, bits.ctypes.data], np.uint64)
        bptrs = np.array([b.ctypes.data, 0 if valid.all() else b.ctypes.data], np.uint64)
        bos = np.array([bo, bo], np.int64)
        nl2 = np.zeros((1, 2), np.int64)
        E.null_counts_all(bptrs, bos, n, starts, counts, nl2)
        assert nl2.tolist() == [[nulls[0, 0], nulls[0, 0]]]
        fout = np.full(2 * int(w[3]) + 16, 0xEE, np.uint8)
        fsz = np.zeros((1, 2), np.int64)
        E.encode_fields(ptrs, bptrs, bos, n, starts, counts, nl2, np.array([[0, w[3]]], np.int64), fout, fsz)
        for k in range(2):
            got = fout[k * w[3] : k * w[3] + fsz[0, k]].tobytes() if fsz[0, k] else None
            res.append((got, int(nl2[0, k])))
    assert all(r == res[0] for r in res)
    return fixed, res[0]


@pytest.mark.parametrize(
    "ts",
    [
        [5],
        [1, 2, 3],
        [0, 10, 25],
        [10, 5],
        [I64_MIN, I64_MAX],
        [I64_MIN, 0, I64_MAX],
        [-1, I64_MAX - 1],
        [3, 3, 3, 3],
        [0, 1, 301, 301, 10**15],
    ],
)
def test_kernel_timestamps_match_reference(ts):
    n = len(ts)
    fixed, _ = _kernel_chunks(ts, [1] * n, [1] * n, [0.0] * n, [True] * n)
    assert fixed[0] == E.encode_timestamps(ts)


@pytest.mark.parametrize("seq", [[7], [7, 7], [10, 9, 9, 12], [0, U64_MAX, 0], [0, 1 << 63], [U64_MAX, 0, 5]])
def test_kernel_sequences_match_reference(seq):
    n = len(seq)
    fixed, _ = _kernel_chunks(list(range(n)), seq, [1] * n, [0.0] * n, [True] * n)
    assert fixed[1] == E.encode_sequences(seq)


@pytest.mark.parametrize("op", [[1], [0, 0], [1, 0, 1], [0, 1]])
def test_kernel_ops_match_reference(op):
    n = len(op)
    fixed, _ = _kernel_chunks(list(range(n)), [1] * n, op, [0.0] * n, [True] * n)
    assert fixed[2] == E.encode_op_types(op)


@pytest.mark.parametrize(
    "vals, valid",
    [
        ([1.0, 1.0, 2.0], [True, True, True]),
        ([0.0, 1.0, 0.0, 3.0], [False, True, False, True]),
        ([0.0] * 9, [False] * 8 + [True]),
        ([1.0, 2.0], [False, False]),
        ([0.0, -0.0, math.nan, math.inf, -math.inf, 5e-324], [True] * 6),
        (list(np.linspace(-3, 3, 17)), [i % 3 != 0 for i in range(17)]),
    ],
)
def test_kernel_f64_match_reference(vals, valid):
    n = len(vals)
    _, f = _kernel_chunks(list(range(n)), [1] * n, [1] * n, vals, valid)
    assert f == E.encode_f64([v if ok else None for v, ok in zip(vals, valid)])


def test_pack_leaves_greedy():
    d = np.array([220, 220, 220, 176, 220], np.int64)
    leaf, part = E.pack_leaves(d, 12 + 220 + 220, 2)
    assert leaf.tolist() == [0, 0, 1, 1, 2]
    assert part.tolist() == [0, 0, 0, 0, 1]
    leaf, part = E.pack_leaves(d, 12 + 220 + 220 + 220, 910)
    assert leaf.tolist() == [0, 0, 0, 1, 1]
    assert part.tolist() == [0] * 5


def test_split_blocks():
    tid = np.array([1, 1, 1, 1, 1, 2, 2], np.uint32)
    tsid = np.array([5, 5, 5, 6, 6, 5, 5], np.uint64)
    s, c, o = E.split_blocks(tid, tsid, 2)
    assert s.tolist() == [0, 2, 3, 5]
    assert c.tolist() == [2, 1, 2, 2]
    assert o.tolist() == [0, 1, 0, 0]


# --- property: kernels == reference on arbitrary blocks ------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_i64 = st.integers(I64_MIN, I64_MAX)
_u64 = st.integers(0, U64_MAX)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(_i64, _u64, st.integers(0, 1), _u64, st.booleans()), min_size=1, max_size=40),
    st.booleans(),
)
def test_kernels_match_reference_property(rows, sorted_ts):
    ts = [r[0] for r in rows]
    if sorted_ts:
        ts.sort()
    seq = [r[1] for r in rows]
    op = [r[2] for r in rows]
    bits = np.array([r[3] for r in rows], np.uint64)
    valid = [r[4] for r in rows]
    fixed, f = _kernel_chunks(ts, seq, op, bits.view(np.float64), valid)
    assert fixed[0] == E.encode_timestamps(ts)
    assert fixed[1] == E.encode_sequences(seq)
    assert fixed[2] == E.encode_op_types(op)
    assert f == E.encode_f64([int(b) if ok else None for b, ok in zip(bits, valid)])
