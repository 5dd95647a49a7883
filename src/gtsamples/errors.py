"""The gtsamples error hierarchy and the decode-stage error flags.

Every error the library raises on bad input is a :class:`SamplesError`.  The
messages name the object (path, part, page or block ordinal, column), the rule
broken, and the observed and expected values.

Decode-stage failures are first computed as per-chunk :class:`DecodeErrorFlag`
words by a backend (numba on the CPU, CUDA kernels on the GPU); the host checks
them once per batch and raises one of the exceptions below.  The numeric values
are mirrored by ``kernels/gts_errors.cuh`` and must never change.
"""

from __future__ import annotations

import enum
import warnings

__all__ = [
    "SamplesError",
    "CorruptArtifactError",
    "CatalogMismatchError",
    "UnsupportedError",
    "StorageError",
    "ArtifactSkippedWarning",
    "DecodeErrorFlag",
    "UNSUPPORTED_FLAGS",
]


class SamplesError(Exception):
    """Base of everything gtsamples raises on bad input."""


class CorruptArtifactError(SamplesError, ValueError):
    """Bytes or metadata break a rule of the columnar-samples spec."""


class CatalogMismatchError(CorruptArtifactError):
    """The manifest or the object list disagrees with the catalog entry."""


class UnsupportedError(SamplesError, NotImplementedError):
    """Unknown version, depth, role, codec or encoding that would have to be decoded."""


class StorageError(SamplesError, OSError):
    """The store failed to read, write, list or remove an object (an I/O error, or a
    remote error still failing after retries); the message names the object."""


class ArtifactSkippedWarning(UserWarning):
    """A region read skipped an artifact it cannot use and scanned its SST instead."""


class DecodeErrorFlag(enum.IntFlag):
    """Per-chunk decode failure bits, shared by the CPU and GPU backends.

    Mirrored bit for bit in ``kernels/gts_errors.cuh``.
    """

    NONE = 0
    #: XXH64 of the stored bytes differs from the reference's checksum.
    CHECKSUM_MISMATCH = 1 << 0
    #: The Zstd frame is malformed: bad magic, reserved bits, dictionary,
    #: window too large, more than one frame, trailing bytes, truncation.
    ZSTD_FRAME_INVALID = 1 << 1
    #: The frame's content size (or the decompressor's output) is not the
    #: declared decoded length.
    DECODED_LENGTH_MISMATCH = 1 << 2
    #: The decompressor reported corrupt data.
    ZSTD_DECOMPRESS_FAILED = 1 << 3
    #: Compression ID the reader does not know (unsupported, not corrupt).
    UNSUPPORTED_COMPRESSION = 1 << 4
    #: Column encoding ID the reader does not know (unsupported, not corrupt).
    UNSUPPORTED_ENCODING = 1 << 5
    #: A varint runs past the end of the chunk.
    VARINT_TRUNCATED = 1 << 6
    #: A varint is longer than ten bytes, or its tenth byte is greater than 1.
    VARINT_OVERFLOW = 1 << 7
    #: Bytes remain after the expected values.
    TRAILING_BYTES = 1 << 8
    #: A fixed-width encoding has the wrong length, or the chunk is too short
    #: for its fixed prefix (first value, validity bitmap).
    BAD_LENGTH = 1 << 9
    #: Encoding 1 reconstruction overflows i64 (checked addition).
    TIMESTAMP_OVERFLOW = 1 << 10
    #: Decoded timestamps decrease (signed comparison).
    TIMESTAMP_DECREASING = 1 << 11
    #: First/last decoded timestamp differs from the block's min/max.
    TIMESTAMP_BOUNDS = 1 << 12
    #: Validity kind is neither 0 nor 1.
    VALIDITY_KIND = 1 << 13
    #: Null count disagrees with the validity (kind 0 with nulls, kind 1 outside
    #: (0, rows), or the bitmap's unset bits differ from the null count).
    NULL_COUNT_MISMATCH = 1 << 14
    #: Unused high bits of the bitmap's final byte are not zero.
    VALIDITY_PADDING = 1 << 15
    #: An operation type is neither 0 (delete) nor 1 (put).
    OP_TYPE_INVALID = 1 << 16
    #: Encoding 1 step is negative.
    NEGATIVE_STEP = 1 << 17
    #: A sequence increases between two rows of one series with equal timestamps
    #: (within the block, or from the last row of the series' previous block).
    SEQUENCE_ORDER = 1 << 18

    def describe(self) -> str:
        """``'CHECKSUM_MISMATCH|TRAILING_BYTES'`` style names of the set bits."""
        names = [f.name for f in DecodeErrorFlag if f and f in self and f.name]
        return "|".join(names) if names else "NONE"


#: Flags that make a failure an :class:`UnsupportedError` rather than corruption.
UNSUPPORTED_FLAGS = DecodeErrorFlag.UNSUPPORTED_COMPRESSION | DecodeErrorFlag.UNSUPPORTED_ENCODING

#: Human descriptions used in error messages; one per flag.
FLAG_RULES = {
    DecodeErrorFlag.CHECKSUM_MISMATCH: "XXH64 of the stored bytes must equal the reference checksum",
    DecodeErrorFlag.ZSTD_FRAME_INVALID: "compression 1 is exactly one well-formed Zstd frame ending at the stored length",
    DecodeErrorFlag.DECODED_LENGTH_MISMATCH: "decompression must yield exactly the declared decoded length",
    DecodeErrorFlag.ZSTD_DECOMPRESS_FAILED: "the Zstd frame must decompress",
    DecodeErrorFlag.UNSUPPORTED_COMPRESSION: "unknown compression ID",
    DecodeErrorFlag.UNSUPPORTED_ENCODING: "unknown column encoding ID",
    DecodeErrorFlag.VARINT_TRUNCATED: "varints must not be truncated",
    DecodeErrorFlag.VARINT_OVERFLOW: "varints have at most ten bytes and a tenth byte of at most 1",
    DecodeErrorFlag.TRAILING_BYTES: "no trailing bytes after the expected values",
    DecodeErrorFlag.BAD_LENGTH: "the encoded length must match the encoding's fixed layout",
    DecodeErrorFlag.TIMESTAMP_OVERFLOW: "encoding 1 reconstruction uses checked i64 addition",
    DecodeErrorFlag.TIMESTAMP_DECREASING: "timestamps must be nondecreasing",
    DecodeErrorFlag.TIMESTAMP_BOUNDS: "first/last timestamps must equal the block's min/max",
    DecodeErrorFlag.VALIDITY_KIND: "validity kind must be 0 or 1",
    DecodeErrorFlag.NULL_COUNT_MISMATCH: "null count must agree with the validity",
    DecodeErrorFlag.VALIDITY_PADDING: "unused high bits of the validity bitmap must be zero",
    DecodeErrorFlag.OP_TYPE_INVALID: "operation types must be 0 (delete) or 1 (put)",
    DecodeErrorFlag.NEGATIVE_STEP: "encoding 1 step must be nonnegative",
    DecodeErrorFlag.SEQUENCE_ORDER: "sequences must be nonincreasing within equal timestamps of a series",
}


def warn_skipped(message: str, stacklevel: int = 1) -> None:
    """The one way an artifact skipped (its SST scanned instead) is reported: an
    :class:`ArtifactSkippedWarning`.  ``stacklevel`` as ``warnings.warn`` takes it
    where this function is called."""
    warnings.warn(message, ArtifactSkippedWarning, stacklevel=stacklevel + 1)
