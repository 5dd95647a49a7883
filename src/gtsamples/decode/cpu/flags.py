"""Per-chunk decode failure bits as plain ints, generated from :class:`~gtsamples.errors.DecodeErrorFlag`.

Spec ("Payload reference", "Encodings and compression"): every rule a chunk
can break while it is checked, decompressed or decoded has one bit; the host
raises once per batch for the first flagged chunk
(:func:`gtsamples.batch.raise_for_flags`).

numba types an ``IntFlag`` member as an enum member it cannot OR or compare
with integers, so the kernels use plain ints: one module-level int per
``DecodeErrorFlag`` member, with its name and value, made here from the enum
(never written out by hand), which numba freezes into the code at compile
time.  ``kernels/gts_errors.cuh`` defines the same bits for the GPU
(``tests/kernels/test_sources.py`` compares it with the enum).
"""

from __future__ import annotations

from ...errors import DecodeErrorFlag

globals().update({name: int(flag) for name, flag in DecodeErrorFlag.__members__.items()})

#: Flags the timestamp and sequence decoders raise only after writing every row of the chunk.
ROWS_WRITTEN_FLAGS = int(DecodeErrorFlag.TIMESTAMP_BOUNDS | DecodeErrorFlag.TIMESTAMP_DECREASING
                         | DecodeErrorFlag.SEQUENCE_ORDER)

__all__ = [*DecodeErrorFlag.__members__, "ROWS_WRITTEN_FLAGS"]
