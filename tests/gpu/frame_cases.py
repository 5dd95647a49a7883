"""Shared by the emulated (tests/kernels/test_gpu_safety.py) and the real-device
(tests/gpu/test_gpu_read_path.py) tests: batches whose Zstd frame has no content
size and holds compressed blocks (its decoded size is not in the headers, so
it must never reach nvCOMP), and the backend comparison down to the message."""

from __future__ import annotations

import numpy as np
import zstandard

from gtsamples.batch import FIRST_FIELD_SLOT
from gtsamples.errors import SamplesError
from tests.gpu import scenarios as S
from tests.gpu.batchgen import BlockSpec, build_batch, xxh64


def no_fcs(raw: bytes, level: int = 3) -> bytes:
    """A Zstd frame without Frame_Content_Size (compressed blocks for compressible input)."""
    return zstandard.ZstdCompressor(level=level, write_content_size=False).compress(raw)


def _repetitive_block(rows: int = 400, seed: int = 3) -> list[BlockSpec]:
    """One block whose field compresses well (Zstd compressed blocks, not raw ones)."""
    rng = np.random.default_rng(seed)
    ts = 1000 + np.arange(rows, dtype=np.int64) * 10
    vals = np.repeat(rng.normal(size=rows // 40 + 1), 40)[:rows]
    valid = np.ones(rows, bool)
    valid[7::11] = False
    return [BlockSpec(1, 7, ts, np.arange(rows, 0, -1).astype(np.uint64), np.ones(rows, np.uint8), [(vals, valid)])]


def _field_chunk(b) -> int:
    return int(np.flatnonzero(b.chunks["slot"] == FIRST_FIELD_SLOT)[0])


def restore(b, i: int, frame: bytes, *, checksum: int | None = None) -> None:
    """Chunk ``i`` stored as ``frame`` (compression 1), declared length unchanged."""
    ch = b.chunks
    ch["src_offset"][i] = len(b.data)
    ch["stored_len"][i] = len(frame)
    ch["compression"][i] = 1
    ch["checksum"][i] = xxh64(frame) if checksum is None else checksum
    b.data = np.concatenate([b.data, np.frombuffer(frame, np.uint8)])


def raw_of(b, i: int) -> bytes:
    o, n = int(b.chunks["src_offset"][i]), int(b.chunks["stored_len"][i])
    stored = b.data[o : o + n].tobytes()
    return zstandard.ZstdDecompressor().decompress(stored) if b.chunks["compression"][i] == 1 else stored


def _flip_in_compressed_block(frame: bytes) -> bytes:
    """A byte inside the first compressed block's payload changed (the structure stays valid)."""
    p = 4 + 1 + 1  # magic, descriptor, window (no content size, not single-segment)
    h = int.from_bytes(frame[p : p + 3], "little")
    assert (h >> 1) & 3 == 2, "expected a compressed block"
    size = h >> 3
    out = bytearray(frame)
    out[p + 3 + size // 2] ^= 0x5A
    return bytes(out)


def unproven_case(name: str):
    """(batch, the chunk whose frame has no content size and compressed blocks)."""
    b = build_batch(_repetitive_block(), ("f",), compression="raw").batch
    i = _field_chunk(b)
    raw = raw_of(b, i)
    if name == "exact":
        frame = no_fcs(raw)
    elif name == "more":  # holds more content than declared
        frame = no_fcs(raw + b"\0" * 64)
    elif name == "much-more":  # more than a whole Zstd block past the capacity (no RLE block)
        frame = no_fcs(raw + (raw * (200_000 // len(raw) + 1))[:200_000])
    elif name == "less":
        frame = no_fcs(raw[:-1])
    elif name == "corrupt-block":
        frame = _flip_in_compressed_block(no_fcs(raw))
    elif name == "more-bad-checksum":  # the checksum is verified first: only CHECKSUM_MISMATCH
        frame = no_fcs(raw + b"\0" * 64)
        restore(b, i, frame, checksum=xxh64(frame) ^ 1)
        return b, i
    else:
        raise KeyError(name)
    restore(b, i, frame)
    return b, i


UNPROVEN = ["exact", "more", "much-more", "less", "corrupt-block", "more-bad-checksum"]


def check_same_as_cpu(batch, device, **kw) -> None:
    """Rows equal, or the same error class, flags, per-chunk flags and message."""
    try:
        want = S.cpu_columns(batch)
        cpu_err = None
    except SamplesError as e:
        cpu_err = e
    try:
        got = S.host_columns(S.decode(batch, device, **kw))
        gpu_err = None
    except SamplesError as e:
        gpu_err = e
    if cpu_err is None:
        assert gpu_err is None, f"GPU raised {gpu_err!r}, CPU decoded"
        S.assert_same(got, want, "vs CPU backend:")
        return
    assert gpu_err is not None, f"CPU raised {cpu_err!r}, GPU decoded"
    assert type(gpu_err) is type(cpu_err), (gpu_err, cpu_err)
    assert gpu_err.flags == cpu_err.flags, (gpu_err.flags.describe(), cpu_err.flags.describe())
    np.testing.assert_array_equal(gpu_err.chunk_flags, cpu_err.chunk_flags)
    assert str(gpu_err) == str(cpu_err)
