"""The GPU read path from artifact files: fetch overlapped with the copy to the device.

``Artifact.read_device`` / ``read(device="gpu")`` navigate, build the batch,
and then, instead of fetching every chunk before any GPU work, hand the batch
to :func:`gtsamples.decode.gpu.decode_batch_gpu` with a :class:`GroupedFetch`:

* the chunks are cut into groups of about :data:`FETCH_GROUP_BYTES` stored
  bytes (chunk boundaries, file order), each fetched on a helper thread by the
  ordinary :func:`gtsamples.plan.fetch_batch` (same reads, same errors);
* every group's chunk bytes are gathered, back to back in chunk order, into one
  host buffer (pooled page-locked memory when it fits:
  ``CupyDevice.host_staging``), so the chunks' positions (``src_offset``) are
  known before any byte arrives and the device tables are built meanwhile;
* the copy to the device follows group by group (:meth:`GroupedFetch.wait`),
  the host frame check runs once every group is in.

A failed group (a short or missing object, chunks that overlap in their file)
makes the read fetch the whole batch as the CPU path does
(:func:`gtsamples.plan.fetch_batch`), which raises the CPU path's exact error.
Batches under :data:`FETCH_PROGRESSIVE_MIN_BYTES` are fetched in one go first.

Importing this module imports neither CuPy nor a GPU library.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ...batch import ChunkBatch
from ...buffers import pool_array
from ...threadpools import LazyThreadPool

__all__ = [
    "FETCH_GROUP_BYTES",
    "FETCH_PROGRESSIVE_MIN_BYTES",
    "FETCH_THREADS",
    "FetchFailed",
    "GroupedFetch",
    "fetch_and_decode",
]

#: Stored bytes per fetch group (the unit of the fetch/copy pipeline).
FETCH_GROUP_BYTES = 16 << 20
#: Batches with fewer stored bytes are fetched in one go before decoding.
FETCH_PROGRESSIVE_MIN_BYTES = 8 << 20
#: Threads reading groups at once (shared by every read of the process).
FETCH_THREADS = min(8, os.cpu_count() or 1)

#: The fetch threads (one pool for the process; a forked child makes its own).
_POOL = LazyThreadPool("gts-fetch", max(1, FETCH_THREADS))


def _pool() -> ThreadPoolExecutor:
    return _POOL.get()


class FetchFailed(Exception):
    """A group's fetch failed (``__cause__``: what it raised); the read then
    fetches the whole batch to raise the CPU path's error."""


def _overlapping_neighbours(chunks: np.ndarray) -> bool:
    """Chunks of one part that are not physically ordered and disjoint (the
    rule ``fetch_batch`` enforces over the whole batch; a group sees only its
    own pairs, so such a batch is fetched whole)."""
    if len(chunks) < 2:
        return False
    off = chunks["file_offset"]
    end = off + chunks["stored_len"].astype(np.uint64)
    return bool(((chunks["part"][1:] == chunks["part"][:-1]) & (off[1:] < end[:-1])).any())


class GroupedFetch:
    """Fetch ``batch``'s chunks group by group on helper threads into one host
    buffer, chunk ``i`` at ``batch.chunks["src_offset"][i]`` (set here: back
    to back in chunk order).  :meth:`start` begins; :meth:`wait` blocks until a
    byte range has arrived; :attr:`segment_ends` are the groups' ends (the copy
    to the device waits for each in turn)."""

    def __init__(self, store, part_keys, batch: ChunkBatch, stats, group_bytes: int | None = None):
        self.store, self.part_keys, self.batch, self.stats = store, part_keys, batch, stats
        self.chunks = batch.chunks.copy()  # the file positions (src_offset is rewritten below)
        lens = batch.chunks["stored_len"].astype(np.int64)
        n = lens.size
        start = np.zeros(n, np.int64)
        if n:
            np.cumsum(lens[:-1], out=start[1:])
        self.nbytes = int(start[-1] + lens[-1]) if n else 0
        target = max(1, int(FETCH_GROUP_BYTES if group_bytes is None else group_bytes))
        first = np.flatnonzero(np.r_[True, np.diff(start // target) > 0]) if n else np.zeros(0, np.int64)
        self.groups = [(int(a), int(b)) for a, b in zip(first.tolist(), np.r_[first[1:], n].tolist())]
        self.starts = start
        self.lens = lens
        ends = [int(start[b - 1] + lens[b - 1]) for _, b in self.groups]
        self.segment_ends = np.array(ends, dtype=np.int64)
        self._group_lo = np.array([int(start[a]) for a, _ in self.groups], dtype=np.int64)
        self._done = [False] * len(self.groups)
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self._futures: list = []
        self._group_stats: list = [None] * len(self.groups)
        batch.chunks["src_offset"] = start.astype(batch.chunks["src_offset"].dtype)

    @classmethod
    def plan(cls, store, part_keys, batch: ChunkBatch, stats, group_bytes: int | None = None) -> "GroupedFetch | None":
        """A grouped fetch for ``batch``, or None when one plain fetch is the
        better (small batches) or the exact (overlapping chunks) way."""
        ch = batch.chunks
        total = int(ch["stored_len"].sum(dtype=np.uint64)) if len(ch) else 0
        if total < FETCH_PROGRESSIVE_MIN_BYTES or _overlapping_neighbours(ch):
            return None
        return cls(store, part_keys, batch, stats, group_bytes)

    # ---- fetching
    def start(self, buffer: np.ndarray | None = None) -> None:
        """Fetch into ``buffer`` (at least :attr:`nbytes` uint8; default a new
        pool buffer), which becomes ``batch.data``."""
        if buffer is None:
            buffer = pool_array(self.nbytes, np.uint8)
        if buffer.size < self.nbytes:
            raise ValueError(f"host buffer of {buffer.size} bytes for {self.nbytes}")
        self.batch.data = buffer[: self.nbytes]
        pool = _pool()
        self._futures = [pool.submit(self._fetch_group, g) for g in range(len(self.groups))]

    def _fetch_group(self, g: int) -> None:
        from ...plan import fetch_batch
        from ...storage import ReadStats

        try:
            with self._cond:
                if self._error is not None:  # another group failed: the read refetches anyway
                    return
            a, b = self.groups[g]
            sub = dataclasses.replace(self.batch, chunks=self.chunks[a:b].copy(), data=np.zeros(0, np.uint8))
            st = ReadStats()
            fetch_batch(self.store, self.part_keys, sub, st)
            _gather(sub.data, sub.chunks["src_offset"].astype(np.int64), self.batch.data, self.starts[a:b],
                    self.lens[a:b])  # fmt: skip
            self._group_stats[g] = st
            with self._cond:
                self._done[g] = True
                self._cond.notify_all()
        except BaseException as e:  # reported to the waiters
            with self._cond:
                if self._error is None:
                    self._error = e
                self._cond.notify_all()

    def wait(self, lo: int, hi: int) -> None:
        """Block until bytes ``[lo, hi)`` of ``batch.data`` have arrived;
        :class:`FetchFailed` when a group could not be fetched."""
        if hi <= lo or not self.groups:
            return
        g0 = max(int(np.searchsorted(self._group_lo, lo, side="right")) - 1, 0)
        g1 = int(np.searchsorted(self._group_lo, hi, side="left"))
        with self._cond:
            while self._error is None and not all(self._done[g0:g1]):
                self._cond.wait()
            if self._error is not None:
                raise FetchFailed(f"fetching chunks failed: {self._error}") from self._error

    def wait_all(self) -> None:
        self.wait(0, self.nbytes)

    def join(self) -> None:
        """Wait for every group task to end (also after a failure), then add
        the groups' read statistics to the read's."""
        for f in self._futures:
            f.exception()
        for st in self._group_stats:
            if st is not None:
                self.stats.add(st)
        self._group_stats = [None] * len(self.groups)


def _gather(src: np.ndarray, src_off: np.ndarray, dst: np.ndarray, dst_off: np.ndarray, lens: np.ndarray) -> None:
    """``dst[dst_off[i]:+lens[i]] = src[src_off[i]:+lens[i]]``, one copy per run
    of chunks adjacent on both sides (usually the whole group: chunks of a part
    lie back to back unless columns are left out)."""
    n = lens.size
    if n == 0:
        return
    brk = np.r_[True, (src_off[1:] != src_off[:-1] + lens[:-1]) | (dst_off[1:] != dst_off[:-1] + lens[:-1])]
    first = np.flatnonzero(brk)
    last = np.r_[first[1:], n] - 1
    for a, z in zip(first.tolist(), last.tolist()):
        s, d = int(src_off[a]), int(dst_off[a])
        m = int(dst_off[z] + lens[z]) - d
        dst[d : d + m] = src[s : s + m]  # numpy copies without the GIL


def fetch_and_decode(store, part_keys, batch: ChunkBatch, stats, **decode_kw):
    """Fetch ``batch`` (overlapped with the copy to the device when it is large
    enough) and decode it on the GPU: a :class:`gtsamples.decode.gpu.table.DeviceTable`.
    Errors are the CPU path's: a fetch error exactly as :func:`~gtsamples.plan.fetch_batch`
    raises it for the whole batch, decode errors as the CPU backend's."""
    from ...plan import fetch_batch
    from .. import gpu  # the package's decode_batch_gpu (what the tests' emulated device patches)

    fetch = GroupedFetch.plan(store, part_keys, batch, stats)
    if fetch is None:
        fetch_batch(store, part_keys, batch, stats)
        return gpu.decode_batch_gpu(batch, **decode_kw)
    try:
        try:
            return gpu.decode_batch_gpu(batch, fetch=fetch, **decode_kw)
        finally:
            fetch.join()
    except FetchFailed:
        pass
    # a group failed: the whole batch as the CPU path fetches it (raises its error)
    fetch_batch(store, part_keys, batch, stats)
    return gpu.decode_batch_gpu(batch, **decode_kw)


def read_artifact(art, columns=None, series=None, tables=None, start=None, end=None, stats=None, *, parts=None,
                  **decode_kw):  # fmt: skip
    """``Artifact.read_device``'s work: navigate, build the batch, then
    :func:`fetch_and_decode`.  Returns ``(DeviceTable, Projection)``; the table
    still has the backend's column names (``DeviceTable.select`` /
    ``to_cudf(manifest, projection)`` apply the manifest's).  ``stats``: the
    read's :class:`gtsamples.storage.ReadStats`, as :meth:`Artifact.plan` counts."""
    from ...plan import Projection, Selection, build_batch
    from ...storage import ReadStats

    stats = stats if stats is not None else ReadStats()
    m = art.manifest
    projection = Projection.build(m, columns)
    sel = Selection.build(series, tables, start, end, m.timestamp.unit)
    leaves = art.navigate(sel, stats, parts=parts)
    batch = build_batch(leaves, m, sel, projection, source=art.location)
    stats.blocks_decoded += int(batch.blocks.shape[0])
    stats.chunks_decoded += int(batch.chunks.shape[0])
    return fetch_and_decode(art.store, art.part_keys, batch, stats, **decode_kw), projection
