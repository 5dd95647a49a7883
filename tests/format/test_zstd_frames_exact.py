"""``check_zstd_frames_exact``: which passing frames have a decoded size their
headers prove (the frames the GPU backend may hand to nvCOMP), with flags equal
to ``check_zstd_frames`` (the CPU backend's verdict) on every input."""

import numpy as np
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from gtsamples.format.zstd_frames import check_zstd_frames, check_zstd_frames_exact
from tests.decode._encode_ref import zstd_raw_frame

RNG = np.random.default_rng(11)
PAYLOAD = RNG.integers(0, 16, 40_000, dtype=np.uint8).tobytes()  # compressible: compressed blocks
D = len(PAYLOAD)


def verdicts(frames: list[bytes], declared: list[int]) -> tuple[list[int], list[bool], list[int]]:
    """(flags of the exact check, proven, flags of the CPU backend's check)."""
    data = np.frombuffer(b"".join(frames) or b"\0", np.uint8).copy()
    lens = np.array([len(f) for f in frames], np.uint32)
    offs = np.zeros(len(frames), np.uint64)
    offs[1:] = np.cumsum(lens[:-1], dtype=np.uint64)
    decl = np.array(declared, np.uint32)
    f_exact = np.zeros(len(frames), np.uint32)
    proven = np.zeros(len(frames), np.uint8)
    f_cpu = np.zeros(len(frames), np.uint32)
    check_zstd_frames_exact(data, offs, lens, decl, f_exact, proven)
    check_zstd_frames(data, offs, lens, decl, f_cpu)
    return f_exact.tolist(), proven.astype(bool).tolist(), f_cpu.tolist()


@pytest.mark.parametrize("checksum", [False, True])
def test_content_size_proves_the_size(checksum):
    f = zstandard.ZstdCompressor(level=3, write_checksum=checksum).compress(PAYLOAD)
    assert verdicts([f], [D]) == ([0], [True], [0])


def test_raw_and_rle_blocks_prove_the_size_without_content_size():
    raw = zstd_raw_frame(PAYLOAD[:300], single_segment=False)  # raw blocks, no content size
    rle = zstd_raw_frame(b"\x07" * 500, single_segment=False, block_type=1)
    assert zstandard.get_frame_parameters(raw).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert verdicts([raw, rle], [300, 500]) == ([0, 0], [True, True], [0, 0])


@pytest.mark.parametrize("extra", [0, 1, 64])
def test_compressed_blocks_without_content_size_pass_unproven(extra):
    """The size of a compressed block is only known by decompressing it: a frame
    holding ``extra`` bytes more than declared passes the bounds, unproven."""
    f = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(PAYLOAD + PAYLOAD[:extra])
    assert verdicts([f], [D]) == ([0], [False], [0])


def test_failing_frames_are_not_proven():
    good = zstandard.compress(PAYLOAD, 3)
    flags, proven, cpu = verdicts([good + b"x", good, good[:-2]], [D, D + 1, D])
    assert flags == cpu and all(flags) and proven == [False, False, False]


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_flags_equal_the_cpu_check_on_mutated_frames(data):
    kind = data.draw(st.sampled_from(["fcs", "no-fcs", "raw", "checksum"]))
    payload = PAYLOAD[: data.draw(st.integers(1, 3000))]
    if kind == "raw":
        f = bytearray(zstd_raw_frame(payload, single_segment=False))
    else:
        f = bytearray(zstandard.ZstdCompressor(level=3, write_content_size=kind != "no-fcs",
                                               write_checksum=kind == "checksum").compress(payload))  # fmt: skip
    for _ in range(data.draw(st.integers(0, 3))):
        f[data.draw(st.integers(0, len(f) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(1, len(f)))
    declared = len(payload) + data.draw(st.sampled_from([0, 0, 1, -1]))
    flags, proven, cpu = verdicts([bytes(f[:cut])], [max(declared, 0)])
    assert flags == cpu
    if proven[0]:
        assert flags == [0]
        params = zstandard.get_frame_parameters(bytes(f[:cut]))
        if params.content_size != zstandard.CONTENTSIZE_UNKNOWN:
            assert params.content_size == max(declared, 0)
