"""CPU decode backend: XXH64 -> batched Zstd -> numba column kernels.

:func:`decode_batch` decodes a whole :class:`~gtsamples.batch.ChunkBatch` at
once into untrimmed host columns, every step batch-wide, each chunk's
failures collected as a :class:`~gtsamples.errors.DecodeErrorFlag` word; the
host raises once, through :func:`gtsamples.batch.raise_for_flags`, for the
first bad chunk.

The modules, from the spec's rules up (each mirrors the ``kernels/gts_*.cuh``
file of the same family on the GPU side; callers import only downwards):

* :mod:`.flags` -- the failure bits as plain ints, made from ``DecodeErrorFlag``;
* :mod:`.intrinsics` -- unaligned little-endian loads, trailing zeros, ``pext``;
* :mod:`.parallel` -- the thread driver: threads per stage, the pool, ranges;
* :mod:`.varint` -- LEB128 and ZigZag;
* :mod:`.xxh64` -- checksums of the stored chunks;
* :mod:`.timestamp`, :mod:`.sequence`, :mod:`.floats`, :mod:`.optype` -- the
  column encodings 1-2, 3-4, 5 and 6-7; :mod:`.identity` -- ``__table_id``
  and ``__tsid`` from the block table;
* :mod:`.chunks` -- one pass over a range of chunks, each to its decoder;
* :mod:`.window` -- the Zstd window driver;
* :mod:`.pipeline` -- :func:`decode_batch`, step by step.

The numba kernels are declared with :func:`gtsamples.jit.njit`: cached once per
installation, and stamped with a hash of all the package's sources, so that an edit
to a module other kernels inline (intrinsics, varint, a decoder) recompiles them.
"""

from __future__ import annotations

from ...buffers import pool_array
from .chunks import decode_chunks_range
from .identity import identity_columns
from .pipeline import decode_batch, decode_batch_flags, decode_chunk_bytes, last_stats
from .window import decompress_chunk

__all__ = [
    "decode_batch",
    "decode_batch_flags",
    "decode_chunk_bytes",
    "decode_chunks_range",
    "identity_columns",
    "decompress_chunk",
    "last_stats",
    "pool_array",
]
