"""Reference LEB128 varint and ZigZag codecs (gtsamples.format.varint)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtsamples.errors import CorruptArtifactError
from gtsamples.format.varint import (
    decode_uvarint,
    encode_uvarint,
    encode_uvarint_array,
    zigzag_decode,
    zigzag_encode,
)

U64_MAX = (1 << 64) - 1
I64_MIN = -(1 << 63)
I64_MAX = (1 << 63) - 1

FAST = settings(max_examples=200, deadline=None)


@pytest.mark.parametrize(
    "value, encoded",
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (300, b"\xac\x02"),
        (16383, b"\xff\x7f"),
        (16384, b"\x80\x80\x01"),
        (1 << 63, b"\x80" * 9 + b"\x01"),
        (U64_MAX, b"\xff" * 9 + b"\x01"),
    ],
)
def test_known_encodings(value, encoded):
    assert encode_uvarint(value) == encoded
    assert decode_uvarint(encoded) == (value, len(encoded))
    assert decode_uvarint(b"\x55" + encoded + b"\x99", 1) == (value, 1 + len(encoded))


def test_non_shortest_accepted():
    assert decode_uvarint(b"\x80\x00") == (0, 2)
    assert decode_uvarint(b"\x81\x80\x80\x00") == (1, 4)
    assert decode_uvarint(b"\x80" * 9 + b"\x00") == (0, 10)


@pytest.mark.parametrize(
    "buf, pos, what",
    [
        (b"", 0, "truncated"),
        (b"\x80", 0, "truncated"),
        (b"\x01\xff\xff", 1, "truncated"),
        (b"\x80" * 9, 0, "truncated"),
        (b"\x80" * 9 + b"\x02", 0, "overflow"),
        (b"\xff" * 9 + b"\x7f", 0, "overflow"),
        (b"\x80" * 10 + b"\x00", 0, "overflow"),  # eleven bytes
        (b"\xff" * 9 + b"\x81\x00", 0, "overflow"),
    ],
)
def test_decode_rejects(buf, pos, what):
    with pytest.raises(CorruptArtifactError, match=what):
        decode_uvarint(buf, pos)


@pytest.mark.parametrize(
    "signed, unsigned",
    [(0, 0), (-1, 1), (1, 2), (-2, 3), (2, 4), (I64_MAX, U64_MAX - 1), (I64_MIN, U64_MAX)],
)
def test_zigzag_known(signed, unsigned):
    assert zigzag_encode(signed) == unsigned
    assert zigzag_decode(unsigned) == signed


def test_range_errors():
    for bad in (-1, U64_MAX + 1):
        with pytest.raises(ValueError):
            encode_uvarint(bad)
        with pytest.raises(ValueError):
            zigzag_decode(bad)
    for bad in (I64_MIN - 1, I64_MAX + 1):
        with pytest.raises(ValueError):
            zigzag_encode(bad)


@FAST
@given(st.integers(0, U64_MAX))
def test_uvarint_roundtrip(v):
    enc = encode_uvarint(v)
    assert 1 <= len(enc) <= 10
    assert decode_uvarint(enc) == (v, len(enc))
    # shortest: the last byte is nonzero unless the value is zero
    assert enc[-1] != 0 or v == 0


@FAST
@given(st.integers(I64_MIN, I64_MAX))
def test_zigzag_roundtrip(v):
    z = zigzag_encode(v)
    assert 0 <= z <= U64_MAX
    assert zigzag_decode(z) == v
    assert z == (2 * v if v >= 0 else -2 * v - 1)


@FAST
@given(st.lists(st.integers(0, U64_MAX), max_size=50))
def test_array_encoder_matches_scalar(values):
    import numpy as np

    assert encode_uvarint_array(np.array(values, dtype=np.uint64)) == b"".join(map(encode_uvarint, values))


@FAST
@given(st.binary(max_size=12), st.integers(0, 12))
def test_decode_never_raises_other_errors(buf, pos):
    try:
        v, p = decode_uvarint(buf, pos)
    except CorruptArtifactError:
        return
    assert 0 <= v <= U64_MAX and pos < p <= min(len(buf), pos + 10)
