"""Reference LEB128 varint and ZigZag codecs ("Encodings and compression").

Unsigned varints are base-128 (LEB128): seven data bits per byte, least
significant group first, high bit set on every byte but the last.  Writers emit
the shortest form.  Readers reject

* truncation (the buffer ends while the continuation bit is set),
* more than ten bytes, and
* a tenth byte greater than 1 (bits past 2**64 - 1),

and *accept* non-shortest forms (docs/format.md, "Our readings of the open points").

ZigZag maps signed i64 ``x`` to ``((x as u64) << 1) ^ ((x >> 63) as u64)``.

These are plain-Python reference implementations used by tests and as
documentation; the decode kernels in ``gtsamples.decode`` implement the same
rules in numba/CUDA.  :func:`encode_uvarint_array` is a vectorised numpy
encoder for building test and benchmark data.
"""

from __future__ import annotations

from ..errors import CorruptArtifactError
from .constants import MAX_VARINT_BYTES, U64_MAX

__all__ = [
    "encode_uvarint",
    "decode_uvarint",
    "zigzag_encode",
    "zigzag_decode",
    "encode_uvarint_array",
]

_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1


def encode_uvarint(value: int) -> bytes:
    """Shortest LEB128 encoding of an unsigned 64-bit integer."""
    if not 0 <= value <= U64_MAX:
        raise ValueError(f"uvarint value out of u64 range: {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_uvarint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Decode one uvarint at ``buf[pos]``; return ``(value, new_pos)``.

    Raises :class:`CorruptArtifactError` on truncation, on more than ten bytes
    and on a tenth byte greater than 1.  Non-shortest encodings are accepted.
    """
    end = len(buf)
    value = 0
    for i in range(MAX_VARINT_BYTES):
        p = pos + i
        if p >= end:
            raise CorruptArtifactError(
                f"varint truncated at byte {p}: buffer ends after {i} continuation byte(s) (length {end})"
            )
        b = buf[p]
        if i == MAX_VARINT_BYTES - 1 and b > 1:
            raise CorruptArtifactError(
                f"varint overflow at byte {p}: tenth byte is {b:#04x}, expected at most 0x01"
            )
        value |= (b & 0x7F) << (7 * i)
        if b < 0x80:
            return value, p + 1
    # unreachable: a tenth byte <= 1 has no continuation bit
    raise AssertionError("unreachable")  # pragma: no cover


def zigzag_encode(value: int) -> int:
    """ZigZag-map a signed i64 to u64."""
    if not _I64_MIN <= value <= _I64_MAX:
        raise ValueError(f"zigzag value out of i64 range: {value}")
    return ((value << 1) ^ (value >> 63)) & U64_MAX


def zigzag_decode(value: int) -> int:
    """Inverse of :func:`zigzag_encode`: u64 to signed i64."""
    if not 0 <= value <= U64_MAX:
        raise ValueError(f"zigzag value out of u64 range: {value}")
    return (value >> 1) ^ -(value & 1)


def encode_uvarint_array(values) -> bytes:
    """Shortest LEB128 encodings of a uint64 array, concatenated (vectorised)."""
    import numpy as np

    v = np.ascontiguousarray(values, dtype=np.uint64)
    if v.size == 0:
        return b""
    nbytes = np.ones(v.shape, dtype=np.int64)
    for k in range(1, MAX_VARINT_BYTES):
        nbytes += v >= np.uint64(1 << (7 * k))
    ends = np.cumsum(nbytes)
    starts = ends - nbytes
    out = np.empty(int(ends[-1]), dtype=np.uint8)
    for k in range(MAX_VARINT_BYTES):
        sel = nbytes > k
        if not sel.any():
            break
        group = (v[sel] >> np.uint64(7 * k)) & np.uint64(0x7F)
        cont = (nbytes[sel] > k + 1).astype(np.uint64) << np.uint64(7)
        out[starts[sel] + k] = (group | cont).astype(np.uint8)
    return out.tobytes()
