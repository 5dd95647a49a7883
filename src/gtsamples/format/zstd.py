"""Zstd pages: one frame per page, decompressed to exactly its declared length.

Metadata pages of compression 1 are one Zstd frame each; the frame header is
checked (magic, no dictionary, window within :data:`MAX_ZSTD_WINDOW`, content
size equal to the declared length when present) before python-zstandard
decompresses it with bounded output.  The navigator decompresses pages with the
same libzstd from numba kernels, after the decoder's structural frame check;
:func:`zstd_page_error` names what is wrong with a frame it refused.
"""

from __future__ import annotations

import threading

import zstandard

from ..errors import CorruptArtifactError
from . import constants as C

#: Largest Zstd window accepted for pages and chunks (a v1 writer never needs more
#: than the 1 MiB chunk limit; this bounds the decoder's allocation).
MAX_ZSTD_WINDOW = 8 * 1024 * 1024
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def zstd_frame_content_size(frame: bytes, what: str) -> int | None:
    """Validate the frame header cheaply; return the content size if present."""
    if frame[:4] != _ZSTD_MAGIC:
        raise CorruptArtifactError(
            f"{what}: compression 1 requires one Zstd frame; magic is {bytes(frame[:4]).hex()}, expected 28b52ffd"
        )
    try:
        params = zstandard.get_frame_parameters(frame)
    except zstandard.ZstdError as e:
        raise CorruptArtifactError(f"{what}: malformed Zstd frame header: {e}") from None
    if params.dict_id != 0:
        raise CorruptArtifactError(f"{what}: Zstd frame requires dictionary {params.dict_id}; dictionaries are not allowed")
    if params.window_size > MAX_ZSTD_WINDOW:
        raise CorruptArtifactError(
            f"{what}: Zstd window {params.window_size} bytes exceeds the {MAX_ZSTD_WINDOW}-byte limit"
        )
    cs = params.content_size
    return None if cs == zstandard.CONTENTSIZE_UNKNOWN else int(cs)


_DCTX = threading.local()


def _decompressor():
    d = getattr(_DCTX, "d", None)
    if d is None:
        d = _DCTX.d = zstandard.ZstdDecompressor(max_window_size=MAX_ZSTD_WINDOW)
    return d


def decompress_exact(stored, declared: int, limit: int, what: str) -> bytes:
    """Zstd-decompress one frame into exactly ``declared`` bytes, bounded output."""
    if declared > limit:
        raise CorruptArtifactError(f"{what}: decoded length {declared} exceeds the limit of {limit} bytes")
    stored = bytes(stored)
    cs = zstd_frame_content_size(stored, what)
    if cs is not None and cs != declared:
        raise CorruptArtifactError(
            f"{what}: Zstd frame content size {cs} differs from the declared decoded length {declared}"
        )
    try:
        out = _decompressor().decompress(stored, max_output_size=declared, allow_extra_data=False)
    except zstandard.ZstdError as e:
        raise CorruptArtifactError(f"{what}: Zstd decompression failed: {e}") from None
    if len(out) != declared:
        raise CorruptArtifactError(f"{what}: decompressed to {len(out)} bytes, expected exactly {declared}")
    return out


def zstd_page_error(stored, declared: int, what: str) -> CorruptArtifactError:
    """The error of a Zstd page that the decoder's frame check or libzstd refused:
    python-zstandard's diagnosis of the frame (the same library, through
    :func:`decompress_exact`), or a plain one should it accept the frame."""
    try:
        decompress_exact(stored, declared, C.MAX_PAGE_DECODED, what)
    except CorruptArtifactError as e:
        return e
    return CorruptArtifactError(f"{what}: Zstd decompression failed: the frame is not one Zstd frame decoding to "
                                f"exactly the declared {declared} bytes")
