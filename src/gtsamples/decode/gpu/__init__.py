"""GPU backend: ChunkBatch -> DeviceTable (CuPy columns), bit-identical to the CPU backend.

Pipeline for one batch (on CuPy's current stream; staged copies on a copy stream)::

    host   check_layout; the checks that need no payload byte (lengths, codecs);
           nvCOMP sub-batches and the H2D plan (plan_transfers)
    H2D    stored bytes (unless already on the device: ``device_data``), from a
           background thread: one pageable copy for small batches; else through
           a bounded, reused ring of pinned host slots filled by several threads
           (or straight from a pooled page-locked buffer the fetch landed in:
           gpu/fetch.py), in segments with an event each; a fetch in groups
           (``fetch``) is copied group by group as it arrives
    host   meanwhile: every device table that needs no payload byte, one upload;
           then (the bytes on the host) the Zstd frame check (and XXH64 with
           ``hash_on="host"``); frames whose decoded size the headers do not
           prove are decompressed here as the CPU backend does, never by nvCOMP;
           status words and the nvCOMP table, one upload
    [hash] gts_xxh64 on the device (the default ``hash_on="device"``; then one
           sync, so that no chunk with a bad checksum reaches nvCOMP)
    nvCOMP batched Zstd into one decoded buffer (with slack at its end),
           sub-batched to a temp budget; with host hashing, sub-batch k waits
           only for the segment holding its frames, so the copy of sub-batch
           k+1's frames overlaps the decompression of k (large batches);
           gts_fold_nvcomp_status folds statuses / actual sizes into the
           per-chunk status words on the device; temp memory and tables stay
           alive until the stream has run the calls (``keep_until_done``)
    decode per column kind for the whole batch, one launch for the chunks of at
           most WARP_MAX_ROWS rows (one per warp) and one for the rest (one
           CUDA block per chunk): timestamps, sequences, op types, fields (+
           omitted all-null fields as synthesized null-fill descriptors)
    trim   [start, end): gts_trim_ranges + gts_scan_blocks
    sync   ONE 16-byte copy: batch flag word + kept row count.  Flags set ->
           per-chunk status words come back and gtsamples.batch.raise_for_flags
           raises exactly what the CPU backend raises (class, flags, message).
    trim   gts_compact_columns / gts_compact_masks when rows were dropped
    ident  gts_broadcast_identity (__table_id, __tsid) at the final placement

Everything before the first CuPy call is a pure function over numpy arrays so it
can be tested without a GPU.  Importing this module does not import CuPy.

Modules: ``layout`` (mirrors of kernels/gts_types.cuh), ``host_plan`` (the
host-side checks and descriptor tables), ``transfers`` (the H2D plan and its
tunables, e.g. ``transfers.PINNED_SLOT_BYTES``), ``staging`` (pinned staging
ring, page-locked buffer pool), ``device`` (:class:`CupyDevice`,
:func:`is_gpu_available`), ``zstd`` (host side of nvCOMP's Zstd), ``driver``
(:func:`decode_batch_gpu`), ``table`` (:class:`DeviceTable`, the output).
This package re-exports their public names except the tunables, which are
read where they live (patch ``transfers`` and ``host_plan.WARP_MAX_ROWS``, not
this package).
"""

from __future__ import annotations

from .device import CupyDevice, is_gpu_available
from .driver import DECODED_SLACK, decode_batch_gpu
from .host_plan import (  # fmt: skip
    BatchLayoutError, HostPlan, block_descs, build_host_plan, check_layout, chunk_source_addresses,
    field_slot_names, fill_chunk_descs, hash_jobs, host_null_counts, missing_field_slots, nvcomp_jobs,
    pack_sections, sequence_order_jobs,
)
from .layout import (  # fmt: skip
    BLOCK_DESC_DTYPE, CHUNK_DESC_DTYPE, COPY_COL_DTYPE, DECODED_ALIGN, ENC_NULL_FILL, GRID_CAP, GTS_BLOCK,
    GTS_WARP_MAX_ROWS, GTS_WARPS, HASH_JOB_DTYPE, HASH_PAD, KIND_FIELD, KIND_KERNELS, KIND_OP_TYPE, KIND_SEQUENCE, KIND_TIMESTAMP,
    MASK_COL_DTYPE, NO_CHUNK, SECTION_ALIGN, SEQ_ORDER_DTYPE,
)
from .staging import PinnedHostPool, PinnedStaging, SegmentEvents
from .table import DeviceColumn, DeviceTable
from .transfers import H2D_MODES, TransferPlan, pinned_slot_size, plan_transfers, segment_waits, subbatch_byte_needs
from .zstd import decode_unproven_frames, reclassify_zstd_failures

__all__ = [
    "CupyDevice",
    "is_gpu_available",
    "DECODED_SLACK",
    "decode_batch_gpu",
    "BatchLayoutError",
    "HostPlan",
    "block_descs",
    "build_host_plan",
    "check_layout",
    "chunk_source_addresses",
    "field_slot_names",
    "fill_chunk_descs",
    "hash_jobs",
    "host_null_counts",
    "missing_field_slots",
    "nvcomp_jobs",
    "pack_sections",
    "sequence_order_jobs",
    "BLOCK_DESC_DTYPE",
    "CHUNK_DESC_DTYPE",
    "COPY_COL_DTYPE",
    "DECODED_ALIGN",
    "ENC_NULL_FILL",
    "GRID_CAP",
    "GTS_BLOCK",
    "GTS_WARP_MAX_ROWS",
    "GTS_WARPS",
    "HASH_JOB_DTYPE",
    "HASH_PAD",
    "KIND_FIELD",
    "KIND_KERNELS",
    "KIND_OP_TYPE",
    "KIND_SEQUENCE",
    "KIND_TIMESTAMP",
    "MASK_COL_DTYPE",
    "NO_CHUNK",
    "SECTION_ALIGN",
    "SEQ_ORDER_DTYPE",
    "PinnedHostPool",
    "PinnedStaging",
    "SegmentEvents",
    "DeviceColumn",
    "DeviceTable",
    "H2D_MODES",
    "TransferPlan",
    "pinned_slot_size",
    "plan_transfers",
    "segment_waits",
    "subbatch_byte_needs",
    "decode_unproven_frames",
    "reclassify_zstd_failures",
]
