"""Structural Zstd frame check (gtsamples.format.zstd_frames) and its use in the CPU backend."""

import struct

import numpy as np
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from gtsamples.decode import cpu
from gtsamples.format.zstd_frames import MAX_WINDOW_SIZE, check_zstd_frame, check_zstd_frames
from gtsamples.errors import CorruptArtifactError, DecodeErrorFlag, SamplesError
from tests.decode._encode_ref import Block, Chunk, make_batch, zstd_raw_frame

F = DecodeErrorFlag
OK = F.NONE
INVALID = F.ZSTD_FRAME_INVALID
LENGTH = F.DECODED_LENGTH_MISMATCH

RNG = np.random.default_rng(7)
PAYLOAD = RNG.integers(0, 16, 40_000, dtype=np.uint8).tobytes()
D = len(PAYLOAD)


def frame(**kw) -> bytes:
    return zstandard.ZstdCompressor(**kw).compress(PAYLOAD)


@pytest.mark.parametrize("level", [-5, 1, 3, 19])
@pytest.mark.parametrize("checksum", [False, True])
def test_real_frames_pass(level, checksum):
    f = frame(level=level, write_checksum=checksum)
    assert check_zstd_frame(f, D) == OK
    assert check_zstd_frame(memoryview(f), D) == OK
    assert check_zstd_frame(np.frombuffer(f, np.uint8), D) == OK


@pytest.mark.parametrize("n", [1, 2, 255, 256, 257, 65791, 65792, 70_000, 131_072, 131_073, 1 << 20])
def test_real_frames_sizes(n):
    data = RNG.integers(0, 3, n, dtype=np.uint8).tobytes()
    f = zstandard.compress(data, 3)
    assert check_zstd_frame(f, n) == OK
    assert check_zstd_frame(f, n + 1) == LENGTH
    assert check_zstd_frame(f, n - 1) == LENGTH


def test_incompressible_and_rle_frames():
    noise = RNG.integers(0, 256, 300_000, dtype=np.uint8).tobytes()  # raw blocks
    assert check_zstd_frame(zstandard.compress(noise, 3), len(noise)) == OK
    zeros = bytes(300_000)  # RLE blocks
    assert check_zstd_frame(zstandard.compress(zeros, 3), len(zeros)) == OK


def test_no_content_size_with_declared_size_ok():
    f = frame(level=3, write_content_size=False)
    assert zstandard.get_frame_parameters(f).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert check_zstd_frame(f, D) == OK


def test_forged_content_size_1tib():
    f = zstd_raw_frame(b"abc", fcs=1 << 40, single_segment=False, window_exp=0)
    assert check_zstd_frame(f, 3) == LENGTH
    # single-segment form: window = FCS = 1 TiB, still reported as the size mismatch
    f = zstd_raw_frame(b"abc", fcs=1 << 40)
    assert check_zstd_frame(f, 3) == LENGTH


@pytest.mark.parametrize("fcs_size", [1, 2, 4, 8])
def test_content_size_field_sizes(fcs_size):
    payload = PAYLOAD[:300] if fcs_size != 1 else PAYLOAD[:200]
    f = zstd_raw_frame(payload, fcs_size=fcs_size, fcs=len(payload))
    assert check_zstd_frame(f, len(payload)) == OK
    assert check_zstd_frame(f, len(payload) + 1) == LENGTH
    assert zstandard.ZstdDecompressor().decompress(f) == payload


def test_fcs_differs_from_declared():
    f = frame(level=3)
    assert check_zstd_frame(f, D - 1) == LENGTH
    assert check_zstd_frame(f, D + 100) == LENGTH


def test_two_frames_and_trailing_junk():
    f = frame(level=3)
    assert check_zstd_frame(f + f, D) == INVALID
    assert check_zstd_frame(f + b"\x00\x00", D) == INVALID
    assert check_zstd_frame(f + b"\x00", D) == INVALID


def test_skippable_frame():
    f = frame(level=3)
    skippable = struct.pack("<II", 0x184D2A50, 4) + b"junk"
    assert check_zstd_frame(skippable + f, D) == INVALID
    assert check_zstd_frame(f + skippable, D) == INVALID
    assert check_zstd_frame(skippable, 4) == INVALID


def test_truncated_frames():
    for f in (frame(level=3), frame(level=3, write_checksum=True), zstd_raw_frame(PAYLOAD[:1000])):
        for cut in range(len(f)):
            assert check_zstd_frame(f[:cut], D if len(f) > 2000 else 1000) != OK, cut


def test_bad_magic():
    f = bytearray(frame(level=3))
    f[0] ^= 1
    assert check_zstd_frame(bytes(f), D) == INVALID


@pytest.mark.parametrize("dict_flag", [1, 2, 3])
def test_dictionary_id_rejected(dict_flag):
    assert check_zstd_frame(zstd_raw_frame(PAYLOAD[:100], dict_flag=dict_flag), 100) == INVALID


def test_real_dictionary_frame_rejected():
    samples = [bytes(RNG.integers(0, 8, 200, dtype=np.uint8)) for _ in range(200)]
    d = zstandard.train_dictionary(4096, samples)
    f = zstandard.ZstdCompressor(dict_data=d).compress(samples[0])
    assert check_zstd_frame(f, 200) == INVALID


def test_reserved_bit_and_block_type():
    assert check_zstd_frame(zstd_raw_frame(PAYLOAD[:100], reserved=True), 100) == INVALID
    assert check_zstd_frame(zstd_raw_frame(PAYLOAD[:100], block_type=3), 100) == INVALID
    assert check_zstd_frame(zstd_raw_frame(PAYLOAD[:100]), 100) == OK
    assert check_zstd_frame(zstd_raw_frame(PAYLOAD[:100], block_type=1), 100) == OK


def test_window_limit():
    # non-single-segment, no FCS: window 2**(10+exp)
    exp_ok = (MAX_WINDOW_SIZE.bit_length() - 1) - 10
    assert check_zstd_frame(zstd_raw_frame(PAYLOAD[:100], single_segment=False, window_exp=exp_ok), 100) == OK
    f = zstd_raw_frame(PAYLOAD[:100], single_segment=False, window_exp=exp_ok + 1)
    assert check_zstd_frame(f, 100) == INVALID
    f = zstd_raw_frame(PAYLOAD[:100], single_segment=False, window_exp=31)
    assert check_zstd_frame(f, 100) == INVALID


def test_block_larger_than_window():
    # window 1 KiB, one raw block of 2000 bytes
    f = zstd_raw_frame(PAYLOAD[:2000], single_segment=False, window_exp=0)
    assert check_zstd_frame(f, 2000) == INVALID
    # single segment: window = FCS; the block may not exceed it
    f = bytearray(zstd_raw_frame(PAYLOAD[:300], fcs_size=2))
    f[5:7] = struct.pack("<H", 299 - 256)
    assert check_zstd_frame(bytes(f), 299) == INVALID


def test_block_larger_than_128k():
    f = bytearray(zstd_raw_frame(PAYLOAD[:100], single_segment=False, window_exp=10))
    h = 1 | (0 << 1) | (((128 << 10) + 1) << 3)
    f[6:9] = struct.pack("<I", h)[:3]
    assert check_zstd_frame(bytes(f) + bytes(128 << 10), (128 << 10) + 1) == INVALID


def test_output_bounds():
    f = zstd_raw_frame(PAYLOAD[:100], single_segment=False, window_exp=0)  # no FCS, raw 100 B
    assert check_zstd_frame(f, 100) == OK
    assert check_zstd_frame(f, 101) == LENGTH  # upper bound 100 < declared
    assert check_zstd_frame(f, 99) == LENGTH  # raw bytes alone exceed declared
    f = zstd_raw_frame(PAYLOAD[:100], single_segment=False, window_exp=0, block_type=1)  # RLE 100
    assert check_zstd_frame(f, 100) == OK
    assert check_zstd_frame(f, 101) == LENGTH


def test_batch_ranges_and_flags_ored():
    f = frame(level=3)
    data = np.frombuffer(f + f + b"xx", np.uint8)
    offs = np.array([0, len(f), 2 * len(f), 1 << 63, len(data) - 1], np.uint64)
    lens = np.array([len(f), len(f), 2, 1, 5], np.uint32)
    decl = np.full(5, D, np.uint32)
    flags = np.array([0, 1 << 20, 0, 0, 0], np.uint32)
    check_zstd_frames(data, offs, lens, decl, flags)
    assert flags.tolist() == [0, 1 << 20, INVALID, INVALID, INVALID]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_mutated_frames_never_crash(data):
    f = bytearray(frame(level=3, write_checksum=data.draw(st.booleans())))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(f) - 1))
        f[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(f)))
    flag = check_zstd_frame(bytes(f[:cut]), D)
    assert flag in (OK, INVALID, LENGTH)


# --- through the CPU backend ----------------------------------------------------

def _float_block(stored: bytes, declared: int, rows: int = 5) -> Block:
    ts = Chunk(0, 1, struct.pack("<qq", 0, 1))
    return Block(rows, 0, rows - 1, [ts, Chunk(3, 5, b"", compression=1, stored=stored, decoded_len=declared)])


def _payload(rows=5):
    from tests.decode._encode_ref import enc_f64_xor

    return enc_f64_xor(np.arange(rows, dtype=np.float64))


def _decode(blocks, **kw):
    return cpu.decode_batch(make_batch(blocks, want_sequence=False, want_op_type=False), **kw)


@pytest.mark.parametrize(
    "case, expected",
    [
        ("forged_fcs", LENGTH),
        ("fcs_ne_declared", LENGTH),
        ("two_frames", INVALID),
        ("junk", INVALID),
        ("skippable", INVALID),
        ("truncated", INVALID),
        ("dictionary", INVALID),
        ("nofcs_longer", LENGTH),
        ("nofcs_shorter", LENGTH),
        ("bad_content_checksum", F.ZSTD_DECOMPRESS_FAILED),
    ],
)
def test_backend_zstd_faults(case, expected):
    p = _payload()
    n = len(p)
    good = zstandard.compress(p, 3)
    nofcs = zstandard.ZstdCompressor(write_content_size=False).compress(p)
    stored, declared = {
        "forged_fcs": (zstd_raw_frame(p, fcs=1 << 40, single_segment=False), n),
        "fcs_ne_declared": (good, n + 8),
        "two_frames": (good + good, n),
        "junk": (good + b"\x00\x01", n),
        "skippable": (struct.pack("<II", 0x184D2A50, 0) + good, n),
        "truncated": (good[:-1], n),
        "dictionary": (zstd_raw_frame(p, dict_flag=1), n),
        "nofcs_longer": (nofcs, n - 1),
        "nofcs_shorter": (nofcs, n + 1),
        "bad_content_checksum": (None, n),
    }[case]
    if stored is None:
        f = bytearray(zstandard.ZstdCompressor(write_checksum=True).compress(p))
        f[-1] ^= 0xFF
        stored = bytes(f)
    with pytest.raises(CorruptArtifactError) as ei:
        _decode([_float_block(good, n), _float_block(stored, declared)])
    assert ei.value.flags == expected, ei.value.flags
    assert expected.name in str(ei.value)
    assert ei.value.chunk_flags.tolist() == [0, 0, 0, int(expected)]


def test_backend_zstd_ok_without_fcs_and_with_checksum():
    p = _payload(300)
    blocks = [
        _float_block(zstandard.ZstdCompressor(write_content_size=False).compress(p), len(p), 300),
        _float_block(zstandard.ZstdCompressor(write_checksum=True, level=19).compress(p), len(p), 300),
        _float_block(zstd_raw_frame(p, fcs_size=8), len(p), 300),
    ]
    cols = _decode(blocks)
    np.testing.assert_array_equal(cols.values[0], np.tile(np.arange(300.0), 3))


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_backend_mutated_frames_only_samples_errors(data):
    p = _payload(64)
    f = bytearray(zstandard.ZstdCompressor(write_checksum=data.draw(st.booleans())).compress(p))
    for _ in range(data.draw(st.integers(1, 3))):
        f[data.draw(st.integers(0, len(f) - 1))] = data.draw(st.integers(0, 255))
    declared = data.draw(st.sampled_from([len(p), len(p) - 1, len(p) + 1, 1 << 20]))
    try:
        _decode([_float_block(bytes(f), declared, 64)], threads=1)
    except SamplesError:
        pass
