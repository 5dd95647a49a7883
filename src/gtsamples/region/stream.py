"""Streamed region reads: a :class:`~gtsamples.region.plan.RegionPlan` run in bounded memory.

Every planned source is a stream of tables in file order: a covered SST its
artifact's :meth:`~gtsamples.Artifact.iter_batches`, an uncovered one Parquet's
batched reader (:func:`gtsamples.region.sst.iter_sst`).  An artifact that
cannot serve (found when it is opened, or in a later batch) is skipped with an
:class:`~gtsamples.ArtifactSkippedWarning` as :meth:`Region.read` skips it, and
its SST is scanned from the first row the artifact did not give (an artifact
holds its SST's rows in the SST's order).

Without ``dedup`` the sources follow each other in region order, so the
batches are :meth:`Region.read`'s rows in its order.  With ``dedup`` every
source is sorted by (identity, timestamp, sequence descending) -- the spec's
row order, which SSTs are checked for when added -- so a k-way merge gives the
last-write-wins view: the rows of every key below the smallest last key any
unfinished source has buffered are complete; they are deduplicated
(:func:`gtsamples.region.dedup.dedup_arrow`, region order breaking ties as in
a whole read) and yielded, and the sources holding that smallest key read on.
Each source then buffers at most about two batches of ``max_bytes / sources``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..backends import CPU, Backend
from ..errors import SamplesError
from ..plan import Query
from ..plan.split import output_row_bytes
from ..storage import ReadStats
from . import sst as _sst
from .context import ReadContext, warn_skipped_artifact
from .dedup import dedup_arrow
from .plan import PlannedSource, RegionPlan

__all__ = ["iter_plan"]


def iter_plan(ctx: ReadContext, plan: RegionPlan, max_bytes: int, backend: Backend, strict: bool,
              stats: ReadStats):
    """The batches of ``plan`` (see the module docstring), as ``backend`` streams
    them: ``pyarrow.RecordBatch`` on the CPU, ``cudf.DataFrame`` on the GPU.
    ``stats``: the :class:`ReadStats` the stream adds to as it goes."""
    if plan.schema is None:
        yield backend.stream_unit(pa.RecordBatch.from_pylist([], schema=pa.schema([])))
        return
    out_schema = plan.schema.arrow_schema(plan.columns)
    emitted = False
    if plan.dedup:
        batches = _merge_dedup(ctx, plan, max_bytes, strict, stats)
    else:
        batches = (b for src in plan.sources
                   for b in _source_tables(ctx, plan, src, max_bytes, backend, strict, stats))
    for b in batches:
        if len(b):
            emitted = True
            yield backend.stream_unit(b)
    if not emitted:
        yield backend.stream_unit(out_schema.empty_table())


def _source_tables(ctx: ReadContext, plan: RegionPlan, src: PlannedSource, max_bytes: int, backend: Backend,
                   strict: bool, stats: ReadStats):
    """One source's rows as ``backend``'s frames, file order, columns ``plan.need``
    in the region's schema."""
    sel, need = plan.selection, plan.need
    need_schema = plan.schema.arrow_schema(need)
    done = 0  # rows the artifact gave before it failed
    if src.covered:
        try:
            art = ctx.usable_artifact(src, need, stats)
            for b in art.stream(Query(need, sel), backend, max_bytes, stats):
                if len(b):
                    done += len(b)
                    yield backend.conform(b, need_schema)
            return
        except SamplesError as e:
            if strict:
                raise
            warn_skipped_artifact(src.record, src.entry, e, 3)
    max_rows = max(1, max_bytes // output_row_bytes(need, plan.schema.ts_name))
    for t in _sst.iter_sst(src.record, ctx.store, plan.schema, sel, need, stats, ctx.cache, max_rows=max_rows):
        if done:  # rows the artifact already gave
            k = min(done, t.num_rows)
            done -= k
            t = t.slice(k)
            if not t.num_rows:
                continue
        yield backend.from_arrow(t)


class _Buffer:
    """A source's buffered rows (one table) and their key columns."""

    def __init__(self, stream, ts_name: str):
        self.stream = stream
        self.ts_name = ts_name
        self.table: pa.Table | None = None
        self.keys = (np.zeros(0, np.uint32), np.zeros(0, np.uint64), np.zeros(0, np.int64))
        self.done = False

    def __len__(self) -> int:
        return 0 if self.table is None else self.table.num_rows

    def refill(self) -> None:
        """Read the source's next non-empty table (or mark it done)."""
        for t in self.stream:
            if not t.num_rows:
                continue
            tid = np.asarray(t.column("__table_id").to_numpy())
            tsid = np.asarray(t.column("__tsid").to_numpy())
            ts = np.asarray(t.column(self.ts_name).cast(pa.int64()).to_numpy())
            self.table = t if self.table is None or not len(self) else pa.concat_tables([self.table, t])
            k = self.keys
            self.keys = (np.concatenate([k[0], tid]), np.concatenate([k[1], tsid]), np.concatenate([k[2], ts]))
            return
        self.done = True

    def last_key(self) -> tuple[int, int, int]:
        return int(self.keys[0][-1]), int(self.keys[1][-1]), int(self.keys[2][-1])

    def take_below(self, key) -> pa.Table | None:
        """Remove and return the rows whose (identity, timestamp) is below ``key``
        (a prefix: the rows are sorted); None: all rows (``key`` None)."""
        n = len(self)
        if key is None:
            c = n
        else:
            tid, tsid, ts = self.keys
            k0, k1, k2 = key
            below = (tid < k0) | ((tid == k0) & ((tsid < k1) | ((tsid == k1) & (ts < k2))))
            c = int(np.count_nonzero(below))
        if c == 0:
            return None
        out = self.table.slice(0, c)
        self.table = self.table.slice(c)
        self.keys = tuple(a[c:] for a in self.keys)
        return out


def _merge_dedup(ctx: ReadContext, plan: RegionPlan, max_bytes: int, strict: bool, stats: ReadStats):
    """The k-way merge of the sources into last-write-wins batches (host tables:
    the sources are read on the CPU)."""
    ts_name = plan.schema.ts_name
    names = list(plan.columns)
    per_source = max(1, max_bytes // max(1, len(plan.sources)))
    bufs = [_Buffer(_source_tables(ctx, plan, src, per_source, CPU, strict, stats), ts_name)
            for src in plan.sources]
    out_rows = max(1, max_bytes // output_row_bytes(plan.columns, ts_name))
    for b in bufs:
        b.refill()
    while True:
        for b in bufs:  # an unfinished source must show a key
            while not b.done and not len(b):
                b.refill()
        live = [b for b in bufs if not b.done and len(b)]
        frontier = min((b.last_key() for b in live), default=None)
        pieces = [p for p in (b.take_below(frontier) for b in bufs if len(b)) if p is not None]
        if pieces:
            merged = dedup_arrow(pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0], ts_name).select(names)
            for lo in range(0, merged.num_rows, out_rows):
                yield merged.slice(lo, out_rows)
        if frontier is None:
            return
        for b in live:  # the sources holding the smallest key read on
            if b.last_key() == frontier:
                b.refill()
