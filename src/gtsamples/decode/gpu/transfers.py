"""How the stored bytes reach the device (pure numpy): pageable or pinned
copies, copy segments, and which segment each nvCOMP sub-batch waits for."""

from __future__ import annotations

import dataclasses

import numpy as np

# ----------------------------------------------------------------------------- H2D planning (pure numpy)

#: Largest piece copied through one pinned staging slot (and the slot size cap).
PINNED_SLOT_BYTES = 8 << 20
#: Pinned slots per device, reused across calls: at most
#: ``PINNED_MAX_SLOTS * PINNED_SLOT_BYTES`` (64 MiB) of page-locked host memory.
#: Slots are filled by as many threads, so host copies run in parallel.
PINNED_MAX_SLOTS = 8
#: Largest batch (stored bytes) fetched straight into one pooled page-locked
#: buffer (:class:`PinnedHostPool`) and copied to the device from there, without
#: the staging slots; larger batches go through the slots.
PINNED_BATCH_MAX_BYTES = 1 << 30
#: Page-locked bytes the pool of whole-batch buffers may hold per device.
PINNED_POOL_MAX_BYTES = 2 << 30
#: Stored bytes below which one plain (pageable) copy is used: pinning does not pay.
PINNED_MIN_BYTES = 4 << 20
#: Stored bytes below which H2D is not overlapped with nvCOMP (one wait before it).
OVERLAP_MIN_BYTES = 64 << 20
#: Smallest copy segment when overlapping (smaller ones merge with the next).
MIN_SEGMENT_BYTES = 8 << 20
_MIB = 1 << 20

#: ``decode_batch_gpu(h2d=...)`` choices
H2D_MODES = ("auto", "pageable", "pinned", "overlap")


@dataclasses.dataclass
class TransferPlan:
    """How ``batch.data`` reaches the device.

    The bytes are cut into ``segments`` (contiguous, in order, covering
    ``[0, data_len)``); each segment is copied as one or more ``pieces`` (at
    most one pinned slot each) on a copy stream, and an event is recorded after
    its last piece.  nvCOMP sub-batch ``k`` waits for segment ``wait[k]``
    (every frame it reads lies below that segment's end); everything after
    nvCOMP waits for the last segment.
    """

    segments: np.ndarray  # int64 (m, 2) [lo, hi); m >= 1
    pieces: np.ndarray  # int64 (p, 2) [lo, hi), copy order
    piece_segment: np.ndarray  # int64 (p,) segment of each piece
    wait: np.ndarray  # int64 per nvCOMP sub-batch: the segment it waits for
    pinned: bool  # staged through pinned slots (else one pageable copy)
    overlap: bool  # more than one segment, sub-batches wait for their own
    slot_bytes: int  # size of the pinned slots this plan uses (0: not pinned)
    n_slots: int  # pinned slots used in rotation (0: not pinned)
    direct: bool = False  # the host bytes are page-locked already: copied from there, no slots

    @property
    def nbytes(self) -> int:
        return int(self.segments[-1, 1]) if len(self.segments) else 0


def subbatch_byte_needs(job_hi: np.ndarray, subbatches: list[tuple[int, int]]) -> np.ndarray:
    """For each nvCOMP sub-batch, the end of the stored bytes it reads: every
    earlier segment must have arrived too (copies are in order), so this is the
    running maximum of each sub-batch's largest frame end."""
    if not subbatches:
        return np.zeros(0, dtype=np.int64)
    job_hi = np.asarray(job_hi, dtype=np.int64)
    starts = np.array([a for a, _ in subbatches], dtype=np.int64)
    need = np.maximum.reduceat(job_hi, starts)
    return np.maximum.accumulate(need)


def pinned_slot_size(max_piece: int, slot_bytes: int | None = None) -> int:
    """Pinned slot size for pieces of at most ``max_piece`` bytes: rounded up to
    1 MiB (slots are reused by later, slightly larger batches), capped at
    ``slot_bytes``."""
    cap = PINNED_SLOT_BYTES if slot_bytes is None else int(slot_bytes)
    if max_piece <= 0:
        return 0
    return int(max(max_piece, min(cap, -(-max_piece // _MIB) * _MIB)))


def plan_transfers(
    data_len: int,
    job_lo: np.ndarray,
    job_hi: np.ndarray,
    subbatches: list[tuple[int, int]],
    mode: str = "auto",
    *,
    slot_bytes: int | None = None,
    max_slots: int | None = None,
    pinned_min: int | None = None,
    overlap_min: int | None = None,
    min_segment: int | None = None,
    segment_ends: np.ndarray | None = None,
    direct: bool = False,
) -> TransferPlan:
    """Plan the H2D copy of ``batch.data`` (``data_len`` bytes).

    ``job_lo`` / ``job_hi``: stored byte range of each nvCOMP job, in job
    order; ``subbatches``: the nvCOMP sub-batches ``[a, b)`` over the jobs.
    ``mode``: ``"auto"`` (pinned from :data:`PINNED_MIN_BYTES`, overlapped
    from :data:`OVERLAP_MIN_BYTES` with at least two sub-batches),
    ``"pageable"`` (one plain copy), ``"pinned"`` (staged, no overlap),
    ``"overlap"`` (staged, overlapped whenever there are two sub-batches).
    Module constants are the defaults of the keyword limits.

    ``segment_ends``: the segments when the bytes arrive on the host piece by
    piece (a fetch in groups, :mod:`gtsamples.decode.gpu.fetch`): one event per
    arriving range, so its copy starts while later ones are still read;
    staged (pinned) whatever the size unless ``mode`` is ``"pageable"``.
    ``direct``: the host bytes are page-locked (copied without slots).
    """
    if mode not in H2D_MODES:
        raise ValueError(f"h2d must be one of {H2D_MODES}, not {mode!r}")
    slot_bytes = PINNED_SLOT_BYTES if slot_bytes is None else int(slot_bytes)
    max_slots = PINNED_MAX_SLOTS if max_slots is None else int(max_slots)
    pinned_min = PINNED_MIN_BYTES if pinned_min is None else int(pinned_min)
    overlap_min = OVERLAP_MIN_BYTES if overlap_min is None else int(overlap_min)
    min_segment = MIN_SEGMENT_BYTES if min_segment is None else int(min_segment)
    if slot_bytes < 1 or max_slots < 1:
        raise ValueError("slot_bytes and max_slots must be positive")
    data_len = int(data_len)
    n_sub = len(subbatches)
    if mode == "auto":
        pinned = data_len >= pinned_min or segment_ends is not None
        overlap = pinned and data_len >= overlap_min
    else:
        pinned = mode in ("pinned", "overlap")
        overlap = mode == "overlap"
    pinned = pinned and data_len > 0
    overlap = overlap and pinned and n_sub >= 2

    ends: list[int] = []
    if pinned and segment_ends is not None:
        ends = [int(e) for e in np.unique(np.asarray(segment_ends, dtype=np.int64)) if 0 < e < data_len]
        ends.append(data_len)
    elif overlap:
        cut = np.minimum(subbatch_byte_needs(job_hi, subbatches), data_len)
        start = 0
        for c in np.unique(cut).tolist():
            if c - start >= max(min_segment, 1):
                ends.append(int(c))
                start = int(c)
        if data_len > start:
            if ends and data_len - start < min_segment:
                ends[-1] = data_len  # a small tail joins the last segment: one transfer fewer
            else:
                ends.append(data_len)
    if not ends:
        ends = [data_len]
    e = np.array(ends, dtype=np.int64)
    segments = np.stack([np.concatenate([[0], e[:-1]]), e], axis=1)
    if n_sub and len(segments) > 1:
        cut = subbatch_byte_needs(job_hi, subbatches)
        wait = np.minimum(np.searchsorted(e, cut, side="left"), len(e) - 1).astype(np.int64)
    else:
        wait = np.full(n_sub, len(segments) - 1, dtype=np.int64)

    pieces, owner = [], []
    for k, (lo, hi) in enumerate(segments.tolist()):
        if hi <= lo:
            continue
        n = -(-(hi - lo) // slot_bytes) if pinned else 1
        cuts = lo + ((hi - lo) * np.arange(n + 1, dtype=np.int64)) // n
        pieces.append(np.stack([cuts[:-1], cuts[1:]], axis=1))
        owner.append(np.full(n, k, dtype=np.int64))
    pieces_a = np.concatenate(pieces) if pieces else np.zeros((0, 2), dtype=np.int64)
    owner_a = np.concatenate(owner) if owner else np.zeros(0, dtype=np.int64)
    max_piece = int((pieces_a[:, 1] - pieces_a[:, 0]).max()) if len(pieces_a) else 0
    return TransferPlan(
        segments=segments,
        pieces=pieces_a,
        piece_segment=owner_a,
        wait=wait,
        pinned=pinned,
        overlap=len(segments) > 1 and n_sub >= 2,
        slot_bytes=pinned_slot_size(max_piece, slot_bytes) if pinned else 0,
        n_slots=min(max_slots, len(pieces_a)) if pinned else 0,
        direct=bool(direct and pinned),
    )


def segment_waits(tp: TransferPlan, job_hi: np.ndarray, subbatches: list[tuple[int, int]]) -> np.ndarray:
    """The segment of ``tp`` each nvCOMP sub-batch waits for, for sub-batches
    planned after ``tp`` (the jobs left once the frames were checked)."""
    if not subbatches:
        return np.zeros(0, dtype=np.int64)
    ends = tp.segments[:, 1]
    need = subbatch_byte_needs(job_hi, subbatches)
    return np.minimum(np.searchsorted(ends, need, side="left"), len(ends) - 1).astype(np.int64)
