"""The GPU decode driver: :func:`decode_batch_gpu`, one ChunkBatch to one
:class:`~gtsamples.decode.gpu.table.DeviceTable` (see the package docstring
for the stages)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ...batch import (
    SLOT_OP_TYPE,
    SLOT_SEQUENCE,
    SLOT_TIMESTAMP,
    ChunkBatch,
    add_sequence_order_detail,
    raise_for_flags,
)
from ...errors import DecodeErrorFlag
from . import nvcomp as _nv
from .device import CupyDevice
from .host_plan import (
    block_descs,
    build_host_plan,
    check_layout,
    chunk_source_addresses,
    field_slot_names,
    fill_chunk_descs,
    hash_jobs,
    nvcomp_jobs,
    pack_sections,
    sequence_order_jobs,
)
from .layout import (
    CHUNK_DESC_DTYPE,
    COPY_COL_DTYPE,
    GRID_CAP,
    GTS_BLOCK,
    GTS_WARPS,
    HASH_PAD,
    KIND_KERNELS,
    MASK_COL_DTYPE,
)
from .table import DeviceColumn, DeviceTable, mask_words
from .transfers import H2D_MODES, plan_transfers, segment_waits
from .zstd import decode_unproven_frames, reclassify_zstd_failures


def _launch_grid(n: int) -> int:
    return max(1, min(n, GRID_CAP))


def _allocate(dev, n: int, dtype, poison: int | None):
    return dev.empty(n, dtype) if poison is None else dev.filled(n, dtype, poison)


#: Slack after the decoded buffer's last chunk (one Zstd block), in case a
#: decompressor writes past its capacity despite the checks.
DECODED_SLACK = 128 << 10


def _require_nvcomp(dev) -> None:
    """Zstd chunks need libnvcomp: :class:`gtsamples.decode.gpu.nvcomp.NvcompUnavailableError`
    (an ``UnsupportedError`` naming the ``gpu`` extra) before any device work."""
    get = getattr(dev, "nvcomp", None)
    if get is not None:
        get()


def decode_batch_gpu(
    batch: ChunkBatch,
    *,
    timestamp_name: str | None = None,
    timestamp_unit: str | None = None,
    hash_on: str = "device",
    temp_budget: int = _nv.DEFAULT_TEMP_BUDGET,
    device_data: Any = None,
    poison: int | None = None,
    timings: bool = False,
    h2d: str = "auto",
    fetch: Any = None,
    _device: Any = None,
) -> DeviceTable:
    """Decode every chunk of ``batch`` on the current CUDA device; trim to
    ``[start, end)`` when the batch says so.

    ``timestamp_name`` / ``timestamp_unit`` name the timestamp column (default
    ``"timestamp"`` / ``"nanosecond"``; ``DeviceTable.to_cudf(manifest, ...)``
    renames it from the manifest).  ``hash_on``: ``"device"`` (the gts_xxh64
    kernel; then one sync, so that no chunk with a bad checksum reaches
    nvCOMP) or ``"host"`` (xxhash on the CPU before any copy: lets the copy of
    the stored bytes overlap nvCOMP on large batches).  ``device_data``: the
    batch's stored bytes already on the device (CuPy uint8, ``len(data) + 16``
    bytes at least).  ``fetch``: a :class:`gtsamples.decode.gpu.fetch.GroupedFetch`
    whose stored bytes are still being read (``batch.data`` is set here): each
    range is copied to the device once it has arrived, while the host plans
    (when the device lends a page-locked buffer for them, ``batch.data`` is
    emptied on return: the buffer goes back to its pool).
    ``poison``: fill byte of every output buffer (tests prove every element is
    written).  ``timings``: record stage times (ms) in
    ``DeviceTable.timings`` (``h2d_copy``: the staged copies on the copy
    stream; ``host_*``: host stages, ``host_device_wait`` the time this thread
    was blocked on the device; ``wall``).  ``h2d``: how the stored bytes reach the device
    (:func:`plan_transfers`): ``"auto"`` stages them through pooled pinned
    memory from :data:`PINNED_MIN_BYTES` and, from :data:`OVERLAP_MIN_BYTES`
    with more than one nvCOMP sub-batch (host hashing), overlaps the copy of
    sub-batch ``k + 1``'s frames with the decompression of sub-batch ``k``.

    Only frames whose decoded size the headers prove go to nvCOMP; the others
    are decompressed on the host as the CPU backend does
    (:func:`decode_unproven_frames`).  Raises what the CPU backend raises for
    the same batch (:func:`gtsamples.batch.raise_for_flags`: same class, flags
    and message); nvCOMP's statuses of failed chunks are in the error's
    ``device_detail``.
    """
    if hash_on not in ("host", "device"):
        raise ValueError("hash_on must be 'host' or 'device'")
    if h2d not in H2D_MODES:
        raise ValueError(f"h2d must be one of {H2D_MODES}, not {h2d!r}")
    if fetch is not None and device_data is not None:
        raise ValueError("fetch and device_data exclude each other")
    dev = _device if _device is not None else CupyDevice()
    timer = dev.timer(timings)
    ts_name = timestamp_name or getattr(batch, "timestamp_name", None) or "timestamp"
    unit = timestamp_unit or getattr(batch, "timestamp_unit", None) or "nanosecond"
    unit = {"second": "s", "millisecond": "ms", "microsecond": "us", "nanosecond": "ns"}.get(unit, unit)

    with timer.host_stage("layout"):
        check_layout(batch)
    held = _Held()
    try:
        table_id, tsid, cols, masks, null_counts, n_rows = _decode(
            batch, dev, timer, held, hash_on, temp_budget, device_data, poison, h2d, fetch)
    finally:
        _settle(dev, held.staging, held.keep, held.host_buf, fetch)
        if held.host_buf is not None:  # lent by the pool: the batch no longer holds it
            batch.data = np.zeros(0, np.uint8)
    return _assemble(batch, timer, ts_name, unit, table_id, tsid, cols, masks, null_counts, n_rows)


@dataclasses.dataclass
class _Held:
    """What :func:`_settle` gives back on every way out of a decode: the
    page-locked host buffer lent by the pool, the staged copy, and the device
    buffers an enqueued copy or call may still use."""

    host_buf: Any = None
    staging: Any = None
    keep: list = dataclasses.field(default_factory=list)


def _decode(batch: ChunkBatch, dev, timer, held: _Held, hash_on, temp_budget, device_data, poison, h2d, fetch):
    """The stages of :func:`decode_batch_gpu` between the layout check and the
    assembly: ``(table_id, tsid, cols, masks, null_counts, n_rows)``."""
    n_rows = int(batch.n_rows)
    keep = held.keep
    with timer.host_stage("plan"):
        data_len, desc_flags, detail, plan, z_align, repack, tplan = _plan_stage(
            batch, dev, held, hash_on, temp_budget, device_data, h2d, fetch)
    d_stored, events = _start_copy(batch, dev, timer, held, data_len, tplan, device_data, fetch)
    timer.mark("h2d")
    d_decoded = dev.empty(max(plan.decoded_bytes, 16) + DECODED_SLACK, np.uint8)
    keep.append(d_decoded)
    cols, masks = _allocate_outputs(batch, dev, n_rows, poison)

    # ---- the tables that need no payload byte: one upload, while the bytes travel
    stored_base = dev.ptr(d_stored)
    with timer.host_stage("tables"):
        chunk_src = chunk_source_addresses(batch, plan, stored_base, dev.ptr(d_decoded))
        descs = fill_chunk_descs(
            batch, plan, chunk_src,
            {s: dev.ptr(a) for s, a in cols.items()}, {s: dev.ptr(m) for s, m in masks.items()},
        )  # fmt: skip
        sections = {"descs": descs, "blocks": block_descs(batch)}
        if hash_on == "device":
            sections["hash"] = hash_jobs(batch, stored_base)
        order_jobs = sequence_order_jobs(batch)
        if len(order_jobs):
            sections["seqorder"] = order_jobs
        table_buf, layout = pack_sections(sections)
    d_tables = dev.upload(table_buf)
    keep.append(d_tables)

    def section(name: str, dtype) -> Any:
        o, nbytes = layout[name]
        return d_tables[o : o + nbytes].view(dtype)

    d_blocks = section("blocks", np.uint8)
    timer.mark("upload")

    # ---- payload checks on the host: checksums (host hashing), frames, sizes
    if fetch is not None:
        with timer.host_stage("fetch_wait"):
            fetch.wait_all()
    with timer.host_stage("precheck"):
        to_nvcomp, jobs, host_decoded, status_buf, slayout = _payload_checks(
            batch, plan, desc_flags, detail, chunk_src, stored_base, hash_on)
    d_words = dev.upload(status_buf)
    keep.append(d_words)
    d_status = d_words[slayout["status"][0] : sum(slayout["status"])].view(np.uint32)
    d_summary = d_words[slayout["summary"][0] : sum(slayout["summary"])].view(np.uint64)
    d_nv = d_words[slayout["nvcomp"][0] : sum(slayout["nvcomp"])].view(np.uint64)
    dec_at = dict(zip(plan.zstd.tolist(), plan.dec_offset.tolist()))
    for i, data in host_decoded.items():  # rare: frames only the host may decompress
        o = dec_at[i]
        dev.copy_in(d_decoded[o : o + len(data)], np.frombuffer(data, np.uint8))

    # ---- checksums on the device (then one sync: no bad checksum reaches nvCOMP)
    n_hash = len(sections.get("hash", ()))
    if n_hash:
        jobs, d_nv = _hash_on_device(batch, dev, timer, keep, events, section, n_hash, d_status, d_summary, jobs, d_nv,
                                     plan, chunk_src, stored_base, to_nvcomp)  # fmt: skip
        timer.mark("hash")

    # ---- nvCOMP, statuses folded into the status words on the device
    jobs, nv_out = _run_nvcomp(batch, dev, keep, events, jobs, d_nv, stored_base, repack, z_align, tplan, temp_budget,
                               d_status, d_summary)  # fmt: skip
    dev.wait(events[-1])  # the column kernels read raw chunks from the stored bytes
    timer.mark("nvcomp")

    _launch_decode_kernels(dev, plan, section, order_jobs, cols, d_status, d_summary)
    timer.mark("decode")

    # ---- trimming, part 1: each block's kept range, placement, kept total -> summary[1]
    n_blocks = len(batch.blocks)
    trimming = batch.needs_trim and n_blocks > 0
    if trimming:
        keep_lo, keep_n, new_out = _trim_ranges(batch, dev, d_blocks, cols, d_summary)
        timer.mark("trim")
    ident = dev.kernel("gts_identity.cu", "gts_broadcast_identity")
    null = np.uint64(0)

    def identity(n_out: int, placement: tuple) -> tuple[Any, Any]:
        return _identity(dev, ident, d_blocks, n_blocks, poison, n_out, placement)

    if not trimming:
        table_id, tsid = identity(n_rows, (null, null))

    # ---- the one check per batch: flag word + kept rows in one 16-byte copy
    with timer.host_stage("device_wait"):
        summary = dev.to_host(d_summary)
    # the device has passed every copy and call so far; what follows reads the block table
    keep[:] = [d_tables] + ([keep_lo, keep_n, new_out] if trimming else [])
    if summary[0]:
        _raise_for_device_flags(batch, dev, timer, d_status, detail, nv_out, jobs, cols)
    null_counts = plan.null_counts

    # ---- trimming, part 2: compaction (only when rows were dropped)
    if trimming:
        kept = int(summary[1])
        if kept == n_rows:
            table_id, tsid = identity(n_rows, (null, null))
        else:
            n_rows = kept
            new_cols = {s: _allocate(dev, n_rows, a.dtype, poison) for s, a in cols.items()}
            new_masks = {s: dev.zeros(mask_words(n_rows), np.uint32) for s in masks}
            table_id, tsid = identity(n_rows, (new_out, keep_n))
            null_counts = _compact(dev, timer, keep, d_blocks, n_blocks, keep_lo, keep_n, new_out, cols, masks,
                                   new_cols, new_masks, n_rows)  # fmt: skip
            cols, masks = new_cols, new_masks
        timer.mark("compact")
    return table_id, tsid, cols, masks, null_counts, n_rows


def _plan_stage(batch: ChunkBatch, dev, held: _Held, hash_on, temp_budget, device_data, h2d, fetch):
    """Descriptor checks and plans: no payload byte needed yet.  Returns
    ``(data_len, desc_flags, detail, plan, z_align, repack, tplan)``."""
    ch = batch.chunks
    if fetch is not None:
        held.host_buf = getattr(dev, "host_staging", lambda n: None)(fetch.nbytes)
        fetch.start(held.host_buf.array if held.host_buf is not None else None)  # sets batch.data
    data_len = len(batch.data)
    limits, codec = _nv.limit_and_codec_flags(ch, data_len)
    desc_flags = limits | codec
    detail = _nv.bad_length_detail(ch, data_len, limits)
    plan = build_host_plan(batch, desc_flags)  # plan.zstd: every Zstd chunk that may decode
    if plan.zstd.size:
        _require_nvcomp(dev)
    z_lo = ch["src_offset"][plan.zstd].astype(np.int64)
    z_hi = z_lo + ch["stored_len"][plan.zstd].astype(np.int64)
    z_align = dev.zstd_input_alignment() if plan.zstd.size else 1
    repack = bool(plan.zstd.size) and _nv.stored_chunks_need_repack(z_lo.astype(np.uint64), z_align)
    # overlap only when nvCOMP reads the staged bytes sub-batch by sub-batch
    # (device hashing and repacked frames need every byte first)
    can_overlap = hash_on == "host" and not repack and device_data is None
    subbatches = dev.zstd_plan(ch["decoded_len"][plan.zstd].astype(np.uint64), temp_budget) \
        if plan.zstd.size and can_overlap else []  # fmt: skip
    tplan = plan_transfers(data_len, z_lo, z_hi, subbatches, h2d,
                           segment_ends=None if fetch is None else fetch.segment_ends,
                           direct=held.host_buf is not None)  # fmt: skip
    return data_len, desc_flags, detail, plan, z_align, repack, tplan


def _start_copy(batch: ChunkBatch, dev, timer, held: _Held, data_len: int, tplan, device_data, fetch):
    """The device buffer of the stored bytes; their copy starts (in the
    background when staged).  Returns ``(d_stored, events)``: ``events[k]``
    waits for copy segment ``k`` (``events[-1]``: every stored byte)."""
    events: Any = [None]
    if device_data is None:
        d_stored = dev.empty(data_len + HASH_PAD, np.uint8)
        held.keep.append(d_stored)
        d_stored[data_len:] = 0
        if data_len and tplan.pinned:
            kw = {} if fetch is None else {"arrivals": fetch}
            events, span = dev.stage_h2d(d_stored, batch.data, tplan, timing=bool(getattr(timer, "enabled", False)),
                                         **kw)  # fmt: skip
            held.staging = events
            if span is not None:
                timer.span("h2d_copy", span)
        elif data_len:
            if fetch is not None:
                with timer.host_stage("fetch_wait"):
                    fetch.wait_all()
            dev.copy_in(d_stored[:data_len], np.ascontiguousarray(batch.data, dtype=np.uint8))
    else:
        d_stored = device_data
        if d_stored.size < len(batch.data) + HASH_PAD:
            raise ValueError("device_data must hold the stored bytes plus 16 bytes of padding")
    return d_stored, events


def _allocate_outputs(batch: ChunkBatch, dev, n_rows: int, poison):
    """The output columns and field validity masks by column slot."""
    cols: dict[int, Any] = {SLOT_TIMESTAMP: _allocate(dev, n_rows, np.int64, poison)}
    if batch.want_sequence:
        cols[SLOT_SEQUENCE] = _allocate(dev, n_rows, np.uint64, poison)
    if batch.want_op_type:
        cols[SLOT_OP_TYPE] = _allocate(dev, n_rows, np.uint8, poison)
    masks: dict[int, Any] = {}
    for slot, _ in field_slot_names(batch):
        cols[slot] = _allocate(dev, n_rows, np.float64, poison)
        masks[slot] = dev.zeros(mask_words(n_rows), np.uint32)
    return cols, masks


def _payload_checks(batch: ChunkBatch, plan, desc_flags, detail, chunk_src, stored_base: int, hash_on: str):
    """Checksums (host hashing), frames and sizes on the host; the frames only
    the host may decompress, decompressed.  Returns ``(to_nvcomp, jobs,
    host_decoded, status_buf, slayout)``: the status words, the summary and
    the nvCOMP table packed for one upload."""
    ch = batch.chunks
    n_chunks, n_rows = len(ch), int(batch.n_rows)
    flags0 = desc_flags.copy()
    proven = _nv.frame_verdicts(ch, batch.data, flags0, checksums=(hash_on == "host"))
    ok_z = plan.zstd[flags0[plan.zstd] == 0]
    unproven = ok_z[~proven[ok_z]]
    host_decoded = decode_unproven_frames(batch, unproven, flags0, detail, verify_checksums=(hash_on == "device"))
    to_nvcomp = ok_z[proven[ok_z]]
    jobs = nvcomp_jobs(batch, plan, chunk_src, stored_base, subset=to_nvcomp)
    status_buf, slayout = pack_sections({
        "status": flags0,
        "summary": np.array([int(np.bitwise_or.reduce(flags0)) if n_chunks else 0, n_rows], np.uint64),
        "nvcomp": _nv.pointer_table(jobs.src_ptr, jobs.src_bytes, jobs.dst_ptr, jobs.declared, jobs.chunk),
    })  # fmt: skip
    return to_nvcomp, jobs, host_decoded, status_buf, slayout


def _hash_on_device(batch: ChunkBatch, dev, timer, keep: list, events, section, n_hash: int, d_status, d_summary,
                    jobs, d_nv, plan, chunk_src, stored_base: int, to_nvcomp):  # fmt: skip
    """gts_xxh64 over every chunk, then one sync: chunks with a bad checksum
    leave the nvCOMP jobs.  Returns ``(jobs, d_nv)``."""
    dev.wait(events[-1])  # every stored byte
    k = dev.kernel("gts_xxh64.cu", "gts_xxh64")
    k(((4 * n_hash + GTS_BLOCK - 1) // GTS_BLOCK,), (GTS_BLOCK,),
      (section("hash", np.uint8), np.uint32(n_hash), d_status, d_summary))  # fmt: skip
    if len(jobs):
        with timer.host_stage("device_wait"):
            bad = dev.to_host(d_status) != 0
        keep_jobs = ~bad[jobs.chunk.astype(np.int64)]
        if not keep_jobs.all():
            jobs = nvcomp_jobs(batch, plan, chunk_src, stored_base, subset=to_nvcomp[keep_jobs])
            d_nv = dev.upload(_nv.pointer_table(jobs.src_ptr, jobs.src_bytes, jobs.dst_ptr, jobs.declared,
                                                jobs.chunk))  # fmt: skip
            keep.append(d_nv)
    return jobs, d_nv


def _run_nvcomp(batch: ChunkBatch, dev, keep: list, events, jobs, d_nv, stored_base: int, repack: bool, z_align: int,
                tplan, temp_budget: int, d_status, d_summary):  # fmt: skip
    """nVCOMP over the jobs (repacked first when this libnvcomp wants aligned
    inputs; sub-batch by sub-batch as the copy segments arrive when
    overlapping), statuses folded into the status words on the device.
    Returns ``(jobs, nv_out)`` (``nv_out``: None when there was no job)."""
    nv_out = None
    if len(jobs):
        n_jobs = len(jobs)
        src_off = jobs.src_ptr - np.uint64(stored_base)
        if repack:
            # this libnvcomp wants aligned inputs: repack the frames (host copy, one upload)
            offs, total = _nv.aligned_offsets(jobs.src_bytes, z_align)
            packed = np.zeros(max(total, 1), np.uint8)
            for o, so, nb in zip(offs.tolist(), src_off.tolist(), jobs.src_bytes.tolist()):
                packed[o : o + nb] = batch.data[so : so + nb]
            d_packed = dev.upload(packed)
            keep.append(d_packed)
            jobs = dataclasses.replace(jobs, src_ptr=np.uint64(dev.ptr(d_packed)) + offs)
            d_nv = dev.upload(_nv.pointer_table(jobs.src_ptr, jobs.src_bytes, jobs.dst_ptr, jobs.declared,
                                                jobs.chunk))  # fmt: skip
            keep.append(d_nv)
        if tplan.overlap and not repack:
            # sub-batch k starts once the segment holding its frames has arrived;
            # the copies of later segments continue on the copy stream meanwhile
            subbatches = dev.zstd_plan(jobs.declared, temp_budget)
            waits = segment_waits(tplan, (src_off + jobs.src_bytes).astype(np.int64), subbatches)

            def before(k: int) -> None:
                dev.wait(events[int(waits[k])])

            nv_out = dev.zstd(jobs, d_nv, temp_budget, plan=subbatches, before=before)
        else:
            dev.wait(events[-1])
            nv_out = dev.zstd(jobs, d_nv, temp_budget)
        tab = d_nv.reshape(len(_nv.TABLE_ROWS), n_jobs)
        dev.kernel("gts_status.cu", "gts_fold_nvcomp_status")(
            (_launch_grid((n_jobs + GTS_BLOCK - 1) // GTS_BLOCK),), (GTS_BLOCK,),
            (tab[_nv.TABLE_ROWS.index("chunk")], tab[_nv.TABLE_ROWS.index("dst_capacity")], nv_out[1],
             nv_out[0], np.uint32(n_jobs), d_status, d_summary),
        )  # fmt: skip
    return jobs, nv_out


def _launch_decode_kernels(dev, plan, section, order_jobs, cols, d_status, d_summary) -> None:
    """The decode kernels per column kind for the whole batch: one launch for the
    chunks a warp decodes, one for the rest; then the sequence order check (after
    every sequence chunk is written)."""
    d_descs = section("descs", np.uint8)
    for kind, (a, b) in enumerate(plan.kind_ranges):
        fname, block_kernel, warp_kernel = KIND_KERNELS[kind]
        m = plan.warp_ends[kind]
        if m > a:  # short chunks, one per warp
            dev.kernel(fname, warp_kernel)((-(-(m - a) // GTS_WARPS),), (GTS_BLOCK,),
                                           (d_descs[a * CHUNK_DESC_DTYPE.itemsize :], np.uint32(m - a), d_status,
                                            d_summary))  # fmt: skip
        if b > m:
            dev.kernel(fname, block_kernel)((b - m,), (GTS_BLOCK,),
                                            (d_descs[m * CHUNK_DESC_DTYPE.itemsize :], d_status, d_summary))  # fmt: skip
    if len(order_jobs):  # after every sequence chunk is written
        dev.kernel("gts_sequence.cu", "gts_check_sequence_order")(
            (_launch_grid(len(order_jobs)),), (GTS_BLOCK,),
            (section("seqorder", np.uint8), np.uint32(len(order_jobs)), cols[SLOT_TIMESTAMP], cols[SLOT_SEQUENCE],
             d_status, d_summary),
        )  # fmt: skip


def _trim_ranges(batch: ChunkBatch, dev, d_blocks, cols, d_summary):
    """Trimming, part 1: each block's kept range and placement, the kept total
    into ``summary[1]``.  Returns ``(keep_lo, keep_n, new_out)``."""
    n_blocks = len(batch.blocks)
    keep_lo = dev.empty(n_blocks, np.uint32)
    keep_n = dev.empty(n_blocks, np.uint64)
    new_out = dev.empty(n_blocks, np.uint64)
    dev.kernel("gts_trim.cu", "gts_trim_ranges")(
        (_launch_grid((n_blocks + GTS_BLOCK - 1) // GTS_BLOCK),), (GTS_BLOCK,),
        (d_blocks, np.uint32(n_blocks), cols[SLOT_TIMESTAMP],
         np.uint32(batch.start is not None), np.int64(0 if batch.start is None else batch.start),
         np.uint32(batch.end is not None), np.int64(0 if batch.end is None else batch.end),
         keep_lo, keep_n),
    )  # fmt: skip
    dev.kernel("gts_trim.cu", "gts_scan_blocks")((1,), (GTS_BLOCK,),
                                                 (keep_n, np.uint32(n_blocks), new_out, d_summary))  # fmt: skip
    return keep_lo, keep_n, new_out


def _identity(dev, ident, d_blocks, n_blocks: int, poison, n_out: int, placement: tuple) -> tuple[Any, Any]:
    """``__table_id`` and ``__tsid`` broadcast from the block table (kernel
    ``ident``) at their final placement (``placement``: the compaction's
    (new_out, keep_n), or nulls)."""
    tid = _allocate(dev, n_out, np.uint32, poison)
    tsid = _allocate(dev, n_out, np.uint64, poison)
    if n_blocks and n_out:
        ident((_launch_grid(n_blocks),), (GTS_BLOCK,), (d_blocks, np.uint32(n_blocks), *placement, tid, tsid))
    return tid, tsid


def _raise_for_device_flags(batch: ChunkBatch, dev, timer, d_status, detail, nv_out, jobs, cols) -> None:
    """The batch flag word is set: raise exactly what the CPU backend raises
    (nvCOMP's statuses in the error's ``device_detail``)."""
    with timer.host_stage("device_wait"):
        flags = dev.to_host(d_status).copy()
    notes: dict[int, str] = {}
    if nv_out is not None:
        with timer.host_stage("device_wait"):
            st_h, actual_h = dev.to_host(nv_out[0]), dev.to_host(nv_out[1])
        detail.update(reclassify_zstd_failures(batch, jobs, st_h, actual_h, flags, notes))
    if (flags & np.uint32(DecodeErrorFlag.SEQUENCE_ORDER)).any():
        add_sequence_order_detail(batch, flags, detail, cols[SLOT_TIMESTAMP], cols[SLOT_SEQUENCE])
    try:
        raise_for_flags(batch, flags, {i: m for i, m in detail.items() if flags[i]} or None)
    except Exception as e:
        e.device_detail = notes  # type: ignore[attr-defined]
        raise


def _compact(dev, timer, keep: list, d_blocks, n_blocks: int, keep_lo, keep_n, new_out, cols, masks, new_cols,
             new_masks, n_rows: int):  # fmt: skip
    """Trimming, part 2 (rows were dropped): the kept rows of every column and
    mask, compacted into ``new_cols`` / ``new_masks``.  Returns the fields'
    null counts."""
    null_counts = np.zeros(len(masks), dtype=np.uint64)
    if n_rows:
        cc = np.zeros(len(cols), dtype=COPY_COL_DTYPE)
        for i, s in enumerate(cols):
            cc[i] = (dev.ptr(cols[s]), dev.ptr(new_cols[s]), cols[s].dtype.itemsize, 0)
        grid_x = _launch_grid(n_blocks)
        d_cc = dev.upload(cc.view(np.uint8))
        keep.append(d_cc)
        dev.kernel("gts_trim.cu", "gts_compact_columns")(
            (grid_x, len(cols)), (GTS_BLOCK,),
            (d_blocks, np.uint32(n_blocks), keep_lo, keep_n, new_out, d_cc),
        )  # fmt: skip
        if masks:
            mc = np.zeros(len(masks), dtype=MASK_COL_DTYPE)
            for i, s in enumerate(masks):
                mc[i] = (dev.ptr(masks[s]), dev.ptr(new_masks[s]))
            valid = dev.zeros(len(masks), np.uint64)
            d_mc = dev.upload(mc.view(np.uint8))
            keep.append(d_mc)
            dev.kernel("gts_trim.cu", "gts_compact_masks")(
                (grid_x, len(masks)), (GTS_BLOCK,),
                (d_blocks, np.uint32(n_blocks), keep_lo, keep_n, new_out, d_mc, valid),
            )  # fmt: skip
            with timer.host_stage("device_wait"):
                null_counts = np.uint64(n_rows) - dev.to_host(valid)
    return null_counts


def _assemble(batch: ChunkBatch, timer, ts_name: str, unit: str, table_id, tsid, cols, masks, null_counts,
              n_rows: int) -> DeviceTable:  # fmt: skip
    out = [
        DeviceColumn("__table_id", "uint32", table_id),
        DeviceColumn("__tsid", "uint64", tsid),
        DeviceColumn(ts_name, f"timestamp[{unit}]", cols[SLOT_TIMESTAMP]),
    ]
    if batch.want_sequence:
        out.append(DeviceColumn("__sequence", "uint64", cols[SLOT_SEQUENCE]))
    if batch.want_op_type:
        out.append(DeviceColumn("__op_type", "uint8", cols[SLOT_OP_TYPE]))
    for k, (slot, name) in enumerate(field_slot_names(batch)):
        out.append(DeviceColumn(name, "float64", cols[slot], mask=masks[slot], null_count=int(null_counts[k]),
                                nullable=True))  # fmt: skip
    timer.mark("assembly")
    return DeviceTable(out, n_rows, timings=timer.result())


def _settle(dev, staging, keep: list, host_buf, fetch=None) -> None:
    """On every way out: the fetch threads and the background copy have
    stopped, the compute stream is ordered after the copies enqueued (their
    destination may be reused by it), buffers an enqueued copy or call may still
    use stay alive until the device has passed them, and the page-locked host
    buffer goes back to its pool once nothing reads or writes it."""
    if fetch is not None:
        fetch.join()
    last = None
    join = getattr(staging, "join", None)
    if join is not None:
        join()
        last = staging.last_recorded
        if last is not None:
            dev.wait(last)
    if keep:
        dev.keep_until_done(tuple(keep))
    if host_buf is not None:
        host_buf.release(last)
