"""Zstd chunks around nvCOMP, on the host: nvCOMP's failures reclassified as
the CPU backend's, and the frames nvCOMP must not get decompressed here."""

from __future__ import annotations

import numpy as np

from ...batch import ChunkBatch
from ...errors import DecodeErrorFlag
from . import nvcomp as _nv


def reclassify_zstd_failures(batch: ChunkBatch, jobs: _nv.ZstdJobs, st: np.ndarray, actual: np.ndarray,
                             flags: np.ndarray, notes: dict[int, str] | None = None) -> dict[int, str]:  # fmt: skip
    """Error path only: a chunk nvCOMP failed on (bad status or wrong size) gets
    the flag and message the CPU backend's decompressor gives it (libzstd
    decides ``ZSTD_DECOMPRESS_FAILED`` vs ``DECODED_LENGTH_MISMATCH``), so both
    backends raise alike.  Updates ``flags`` in place; returns message details.
    nvCOMP's own status goes to ``notes`` (the error's ``device_detail``), and
    into the message only for a frame the CPU decompressor accepts."""
    failed = np.flatnonzero((st != _nv.NVCOMP_SUCCESS) | (actual != jobs.declared))
    detail: dict[int, str] = {}
    if failed.size == 0:
        return detail
    import zstandard

    from ..cpu import decompress_chunk  # the CPU backend's exact classification

    dctx = zstandard.ZstdDecompressor()
    mv = memoryview(np.ascontiguousarray(batch.data, dtype=np.uint8))
    ch = batch.chunks
    for k in failed.tolist():
        i = int(jobs.chunk[k])
        o, n = int(ch["src_offset"][i]), int(ch["stored_len"][i])
        _, f, msg = decompress_chunk(mv[o : o + n], int(ch["decoded_len"][i]), dctx=dctx, detail=True)
        nv = f"nvCOMP status {int(st[k])} ({_nv.NVCOMP_STATUS_NAMES.get(int(st[k]), '?')}), {int(actual[k])} bytes"
        if notes is not None:
            notes[i] = nv
        if f:
            flags[i] = f
            if msg:
                detail[i] = msg
        else:  # the CPU decodes it, nvCOMP cannot: keep nvCOMP's verdict
            detail[i] = f"{nv}; the CPU decompressor accepts this frame"
    return detail


def decode_unproven_frames(batch: ChunkBatch, idx: np.ndarray, flags: np.ndarray, detail: dict[int, str],
                           verify_checksums: bool) -> dict[int, bytes]:  # fmt: skip
    """Chunks ``idx`` passed the frame check, but their headers do not prove
    their decoded size (no content size, compressed blocks): nvCOMP, whose
    output bound is not guaranteed, must not get them.  They are decompressed
    here exactly as the CPU backend does (its decompressor, capacity = the
    declared length), after their checksum when the device would hash them
    (``verify_checksums``): the CPU order.  Failures are ORed into ``flags``
    with the CPU's messages in ``detail``; returns ``{chunk: decoded bytes}``
    for the device's decoded buffer."""
    out: dict[int, bytes] = {}
    if idx.size == 0:
        return out
    ch = batch.chunks
    off = ch["src_offset"].astype(np.uint64)
    stored = ch["stored_len"].astype(np.uint64)
    if verify_checksums:
        ok = _nv.verify_checksums(batch.data, off[idx], stored[idx], ch["checksum"][idx])
        flags[idx[~ok]] |= np.uint32(DecodeErrorFlag.CHECKSUM_MISMATCH)
        idx = idx[ok]
    import zstandard

    from ..cpu import decompress_chunk

    dctx = zstandard.ZstdDecompressor()
    mv = memoryview(np.ascontiguousarray(batch.data, dtype=np.uint8))
    for i in idx.tolist():
        o, n = int(off[i]), int(stored[i])
        data, f, msg = decompress_chunk(mv[o : o + n], int(ch["decoded_len"][i]), dctx=dctx, detail=True)
        if f:
            flags[i] |= np.uint32(f)
            if msg:
                detail[i] = msg
        else:
            out[i] = data
    return out

