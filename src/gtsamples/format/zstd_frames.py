"""Structural check of Zstd frames before decompression (RFC 8878 section 3.1.1).

Shared by the CPU backend and the GPU backend's host-side pre-check: it needs
numpy and numba only, never a GPU library.  Decompressors are not trusted with
hostile frames (python-zstandard ignores ``max_output_size`` when a content size
is present and accepts trailing junk; nvCOMP has undefined behaviour on corrupt
input), so every compression-1 chunk is walked here first.  Rules
(docs/format.md, "Our readings of the open points"):

* exactly one frame: magic ``28 B5 2F FD`` (skippable frames rejected), and the
  frame (blocks and optional 4-byte checksum) ends exactly at the stored length;
* frame header descriptor: reserved bit 3 clear, ``Dictionary_ID_flag`` 0;
* window: ``base = 1 << (10 + exponent)``, ``window = base + (base >> 3) *
  mantissa``, single-segment frames have ``window = FCS``; ``window <= 8 MiB``;
* ``Frame_Content_Size`` field of 0/1, 2 (value + 256), 4 or 8 bytes; when
  present it must equal the declared decoded length;
* block headers (3 bytes LE): ``last = h & 1``, ``type = (h >> 1) & 3`` (3 is
  reserved), ``size = h >> 3`` with ``size <= min(window, 128 KiB)``; raw
  blocks consume ``size`` bytes, RLE blocks 1, compressed blocks ``size``;
* output bounds: ``sum(raw + RLE sizes) <= declared <= sum(raw + RLE sizes) +
  min(window, 128 KiB) per compressed block``.

Faults set :data:`ZSTD_FRAME_INVALID`; a content size or output bound that
cannot match the declared length sets :data:`DECODED_LENGTH_MISMATCH`.  The
walk stops at the first fault, so exactly one of the two bits is set.

The bounds do not prove the decoded size of a frame without a content size that
holds compressed blocks: :func:`check_zstd_frames_exact` says which passing
frames have a size the headers prove (the GPU backend hands only those to nvCOMP).
"""

from __future__ import annotations

import numba
import numpy as np

from ..errors import DecodeErrorFlag
from ..jit import njit

__all__ = ["check_zstd_frames", "check_zstd_frames_serial", "check_zstd_frames_exact", "check_zstd_frame", "MAX_WINDOW_SIZE"]

#: Integer values of the flags this module sets (numba cannot use IntFlag).
ZSTD_FRAME_INVALID = int(DecodeErrorFlag.ZSTD_FRAME_INVALID)
DECODED_LENGTH_MISMATCH = int(DecodeErrorFlag.DECODED_LENGTH_MISMATCH)

#: Largest accepted window (chunks decode to at most 1 MiB).
MAX_WINDOW_SIZE = 8 << 20
#: RFC 8878 Block_Maximum_Size cap.
MAX_BLOCK_SIZE = 128 << 10


@njit(nogil=True)
def _walk(data, start, length, declared):
    """``(flag word, exact)`` for the frame at ``data[start:start+length]``:
    flag 0 = OK; ``exact`` when the headers alone prove that the frame decodes
    to exactly ``declared`` bytes (see :func:`check_zstd_frames_exact`)."""
    end = start + length
    p = start
    # Magic 28 B5 2F FD + frame header descriptor.
    if length < 5:
        return ZSTD_FRAME_INVALID, False
    if data[p] != 0x28 or data[p + 1] != 0xB5 or data[p + 2] != 0x2F or data[p + 3] != 0xFD:
        return ZSTD_FRAME_INVALID, False
    fhd = np.int64(data[p + 4])
    p += 5
    fcs_flag = fhd >> 6
    single_segment = (fhd >> 5) & 1
    reserved = (fhd >> 3) & 1
    has_checksum = (fhd >> 2) & 1
    did_flag = fhd & 3
    if reserved != 0 or did_flag != 0:
        return ZSTD_FRAME_INVALID, False
    window = np.int64(0)
    if single_segment == 0:
        if p >= end:
            return ZSTD_FRAME_INVALID, False
        wd = np.int64(data[p])
        p += 1
        exponent = wd >> 3
        mantissa = wd & 7
        if exponent > 31:  # 10 + exponent > 41: far beyond any limit
            return ZSTD_FRAME_INVALID, False
        base = np.int64(1) << (10 + exponent)
        window = base + (base >> 3) * mantissa
    if fcs_flag == 0:
        fcs_size = 1 if single_segment else 0
    elif fcs_flag == 1:
        fcs_size = 2
    elif fcs_flag == 2:
        fcs_size = 4
    else:
        fcs_size = 8
    if p + fcs_size > end:
        return ZSTD_FRAME_INVALID, False
    has_fcs = fcs_size > 0
    fcs = np.uint64(0)
    for k in range(fcs_size):
        fcs |= np.uint64(data[p + k]) << np.uint64(8 * k)
    if fcs_size == 2:
        fcs += np.uint64(256)
    p += fcs_size
    if has_fcs and fcs != np.uint64(declared):
        return DECODED_LENGTH_MISMATCH, False
    if single_segment:
        window = np.int64(declared)  # == FCS, checked above
    if window > MAX_WINDOW_SIZE:
        return ZSTD_FRAME_INVALID, False
    block_max = window if window < MAX_BLOCK_SIZE else MAX_BLOCK_SIZE
    lower = np.int64(0)  # bytes the raw and RLE blocks certainly produce
    upper = np.int64(0)  # most bytes all blocks can produce
    compressed = False  # a compressed block: its output size is not in the headers
    while True:
        if p + 3 > end:
            return ZSTD_FRAME_INVALID, False
        h = np.int64(data[p]) | (np.int64(data[p + 1]) << 8) | (np.int64(data[p + 2]) << 16)
        p += 3
        last = h & 1
        btype = (h >> 1) & 3
        bsize = h >> 3
        if btype == 3 or bsize > block_max:
            return ZSTD_FRAME_INVALID, False
        if btype == 0:  # raw
            consumed = bsize
            lower += bsize
            upper += bsize
        elif btype == 1:  # RLE
            consumed = np.int64(1)
            lower += bsize
            upper += bsize
        else:  # compressed
            consumed = bsize
            upper += block_max
            compressed = True
        if consumed > end - p:
            return ZSTD_FRAME_INVALID, False
        p += consumed
        if lower > declared:
            return DECODED_LENGTH_MISMATCH, False
        if last:
            break
    if has_checksum:
        if end - p < 4:
            return ZSTD_FRAME_INVALID, False
        p += 4
    if p != end:  # a second frame or junk
        return ZSTD_FRAME_INVALID, False
    if upper < declared:
        return DECODED_LENGTH_MISMATCH, False
    # the content size equals declared (checked above), or raw and RLE blocks
    # only, whose sizes are exact: lower == upper == declared
    return 0, has_fcs or not compressed


@njit(nogil=True)
def _check_one(data, start, length, declared):
    """Flag word (0 = OK) for the frame at ``data[start:start+length]``."""
    return _walk(data, start, length, declared)[0]


check_one_frame = _check_one  # (public: the navigator's page loads call it from their kernels)


@njit(nogil=True, inline="always")
def _check_into(data, offsets, lengths, declared, flags_out, i):
    """:func:`check_zstd_frames`' work for frame ``i``."""
    size = np.int64(data.shape[0])
    start = np.int64(offsets[i])
    length = np.int64(lengths[i])
    if offsets[i] > np.uint64(size) or start + length > size:
        f = ZSTD_FRAME_INVALID
    else:
        f = _check_one(data, start, length, np.int64(declared[i]))
    if f != 0:
        flags_out[i] |= np.uint32(f)


@njit(parallel=True, nogil=True)
def check_zstd_frames(data, offsets, lengths, declared, flags_out):
    """Check frame ``i`` at ``data[offsets[i]:offsets[i]+lengths[i]]`` against ``declared[i]``.

    ``data`` uint8[::1], ``offsets`` uint64[::1], ``lengths`` uint32[::1],
    ``declared`` uint32[::1], ``flags_out`` uint32[::1].  ORs
    ``ZSTD_FRAME_INVALID`` or ``DECODED_LENGTH_MISMATCH`` into ``flags_out[i]``.
    A range outside ``data`` is flagged ``ZSTD_FRAME_INVALID`` (never read).
    Other dtypes work but compile (and cache) another specialization (~1 s):
    pass exactly these, with a writeable ``data``.  Runs on numba's threads;
    :func:`check_zstd_frames_serial` is the same on the calling thread alone.
    """
    for i in numba.prange(offsets.shape[0]):
        _check_into(data, offsets, lengths, declared, flags_out, i)


@njit(nogil=True)
def check_zstd_frames_serial(data, offsets, lengths, declared, flags_out):
    """:func:`check_zstd_frames` on the calling thread: for a few frames, where starting
    numba's thread pool costs more than the checks (tens of microseconds)."""
    for i in range(offsets.shape[0]):
        _check_into(data, offsets, lengths, declared, flags_out, i)


@njit(parallel=True, nogil=True)
def check_zstd_frames_exact(data, offsets, lengths, declared, flags_out, exact_out):
    """:func:`check_zstd_frames`, also setting ``exact_out[i]`` (uint8) to 1 when
    frame ``i`` passes and its headers prove it decodes to exactly ``declared[i]``
    bytes: a ``Frame_Content_Size`` (equal to ``declared``, or it would not pass),
    or raw and RLE blocks only (their sizes are exact).  A frame without a content
    size holding a compressed block passes when ``declared`` is within its bounds,
    but only decompressing it tells its size: a decompressor whose output bound
    is not guaranteed (nvCOMP) must not get it.  Flags are those of
    :func:`check_zstd_frames`."""
    n = offsets.shape[0]
    size = np.int64(data.shape[0])
    for i in numba.prange(n):
        start = np.int64(offsets[i])
        length = np.int64(lengths[i])
        exact = False
        if offsets[i] > np.uint64(size) or start + length > size:
            f = ZSTD_FRAME_INVALID
        else:
            f, exact = _walk(data, start, length, np.int64(declared[i]))
        if f != 0:
            flags_out[i] |= np.uint32(f)
        exact_out[i] = 1 if exact else 0


def _as_u8(buf) -> np.ndarray:
    """Writeable C-contiguous uint8 array (copies read-only input, e.g. ``bytes``).

    Always passing the same array types keeps one cached numba specialization.
    """
    if isinstance(buf, np.ndarray):
        a = np.ascontiguousarray(buf.reshape(-1).view(np.uint8))
    else:
        a = np.frombuffer(buf, dtype=np.uint8)
    return a if a.flags.writeable else a.copy()


def check_zstd_frame(buf, declared: int) -> DecodeErrorFlag:
    """Check one compression-1 payload (e.g. a metadata page) against its declared length.

    Returns ``DecodeErrorFlag.NONE`` when decompressing with capacity
    ``declared`` is safe to attempt.
    """
    data = _as_u8(buf)
    if not 0 <= declared <= 0xFFFFFFFF:
        return DecodeErrorFlag.DECODED_LENGTH_MISMATCH
    flags = np.zeros(1, dtype=np.uint32)
    check_zstd_frames_serial(
        data,
        np.zeros(1, dtype=np.uint64),
        np.array([data.shape[0]], dtype=np.uint32),
        np.array([declared], dtype=np.uint32),
        flags,
    )
    return DecodeErrorFlag(int(flags[0]))
