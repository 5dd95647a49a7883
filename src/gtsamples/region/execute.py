"""One region read: a :class:`~gtsamples.region.plan.RegionPlan` run whole
(:meth:`Region.execute <gtsamples.region.Region.execute>`).  The covered sources are
opened, navigated and decoded in groups of artifacts (one batch each on the CPU, one
read each on the GPU), the others scanned; the pieces are concatenated in region
order."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa

from ..artifact import Artifact
from ..backends import Backend
from ..errors import SamplesError, warn_skipped
from ..format import constants as C
from ..plan import PartNames, Projection, Query, build_batch
from ..plan.navigator import Navigation
from ..storage import ReadStats
from . import sst as _sst
from .context import ReadContext, skip_note
from .dedup import dedup_frame
from .plan import RegionPlan
from .threads import pmap as _pmap  # the local pmap of execute_plan wraps it


class _Navigated(NamedTuple):
    """A covered source opened, checked and navigated (decoded later, in a group),
    with the rows of its selected blocks when navigation counted them (else None)."""

    artifact: Artifact
    leaves: list
    rows: int | None = None


class _Decoded(NamedTuple):
    """A covered source already read whole (the GPU reads artifacts one by one)."""

    table: object


_new = tuple.__new__  # a named tuple from its values, without its keyword-argument __new__ (made per artifact)

#: Marks a task whose rows are in the piece of an earlier task (one table per decoded run).
_IN_PREVIOUS = object()


#: Artifacts opened from storage (not cached) and navigated together, whose leaf pages then
#: load in the background while the next ones open; artifacts already open join the current
#: group (navigating one costs a few cache lookups, cheaper in one batch for all of them).
NAVIGATION_GROUP = 16
#: Groups never exceed this many decoded bytes (bounded memory per batch).
GROUP_BUDGET_BYTES = 256 * 1024 * 1024


class _Grouper:
    """Consecutive navigated artifacts ``(task index, artifact, leaves)`` into groups
    decoded as one batch each: same timestamp column and fields, and at most
    :data:`GROUP_BUDGET_BYTES` (estimated from the selected blocks' rows)."""

    def __init__(self):
        self.cur: list = []
        self.size = 0
        self.key = None

    def add(self, item, rows: int | None = None) -> list:
        """Add an artifact (``rows``: its selected blocks' rows, when known); return
        the groups this closed."""
        _i, art, leaves = item
        m = art.manifest
        key = (m.timestamp, m.fields)
        if rows is None:
            rows = 0
            for sl in leaves:  # decoded size estimate: the selected blocks' rows
                rows += int(np.dot(sl.page.blocks["row_count"], sl.mask))
        d = rows * (17 + 8 * len(m.fields))
        out = []
        if self.cur and (key != self.key or self.size + d > GROUP_BUDGET_BYTES):
            out.append(self.cur)
            self.cur, self.size = [], 0
        self.cur.append(item)
        self.key = key
        self.size += d
        return out

    def flush(self) -> list:
        out = [self.cur] if self.cur else []
        self.cur, self.size = [], 0
        return out


def execute_plan(ctx: ReadContext, plan: RegionPlan, backend: Backend, strict: bool, max_workers: int | None):
    """:meth:`Region.execute <gtsamples.region.Region.execute>`: ``(frame, ReadStats)``."""
    stats = ReadStats()
    if plan.schema is None:
        return backend.empty(pa.schema([])), stats
    names, need, sel, dedup = plan.columns, plan.need, plan.selection, plan.dedup
    need_schema = ctx.schema.arrow_schema(need)
    sources = plan.sources
    tasks = [(src.record, src.entry) for src in sources]
    if max_workers is None:
        max_workers = ctx.default_workers()

    def pmap(fn, items):
        return _pmap(fn, items, max_workers)

    n = len(tasks)
    pieces: list = [None] * n
    if max_workers <= 1:  # one thread: every task counts into the query's own (one object per
        task_stats = [stats] * n  # task, each made and added in the end, cost ~1 us a task)
    else:
        task_stats = [ReadStats() for _ in range(n)]
    notes: list = [None] * n

    def skipped(i, e):
        if strict:
            raise e
        notes[i] = skip_note(*tasks[i], e)

    # covered plan: open + check + navigate per artifact, then one batch per group
    # of artifacts: built, fetched and decoded once
    def prepare(i):
        st = task_stats[i]
        try:
            art = ctx.usable_artifact(sources[i], need, st)
            if not backend.merges_artifacts:  # pragma: no cover - needs a GPU
                rs = ReadStats()
                piece = art.run(Query(need, sel), backend, rs)
                st.add(rs)
                return i, _Decoded(backend.conform(piece, need_schema))
            return i, _Navigated(art, art.navigate(sel, st))
        except SamplesError as e:
            skipped(i, e)
            return i, None

    # groups of navigated artifacts: each built, fetched and decoded as one batch
    grouper = _Grouper()
    groups: list = []
    covered_idx = [i for i in range(n) if tasks[i][1] is not None]
    # the version's warm index first (every page cached: one pass, on any store), else navigated
    warm = ctx.warm_index(need) if backend.merges_artifacts and ctx.warm_index is not None else None
    results = _navigate_warm(warm, sources, covered_idx, task_stats, sel) if warm is not None else None
    if results is None and backend.merges_artifacts and max_workers <= 1:
        results = _navigate_together(ctx, sources, covered_idx, task_stats, need, sel, skipped, warm)
    elif results is None:
        results = pmap(prepare, covered_idx)
        if warm is not None:
            warm.register([(sources[i], res.artifact, res.leaves) for i, res in results if isinstance(res, _Navigated)])
    for i, res in results:
        if res is None:
            continue
        if isinstance(res, _Decoded):
            pieces[i] = res.table
        else:
            groups += grouper.add((i, res.artifact, res.leaves), res.rows)
    groups += grouper.flush()
    group_stats = ReadStats()
    task_stats.append(group_stats)
    for g in groups:
        got = _decode_group_tables(ctx, g, need, sel, group_stats, backend)
        if got is None:  # one by one: the bad artifacts fall back to their SSTs
            got = _decode_one_by_one(ctx, g, need, sel, skipped, group_stats, backend)
        for run, table in got:
            pieces[run[0]] = table
            for i in run[1:]:
                pieces[i] = _IN_PREVIOUS  # rows already in the piece of run[0]

    # uncovered plan (and fallbacks)
    def scan(i):
        rec = tasks[i][0]
        piece = _sst.scan_sst(rec, ctx.store, ctx.schema, sel, need, task_stats[i], ctx.cache)
        return i, backend.from_arrow(piece)

    for i, piece in pmap(scan, [i for i in range(n) if pieces[i] is None]):
        pieces[i] = piece
    for i in range(n):
        if notes[i] is not None:
            warn_skipped(notes[i], 5)  # the caller of Region.read
    for st in {id(st): st for st in task_stats if st is not stats}.values():
        stats.add(st)
    out = backend.concat([x for x in pieces if x is not _IN_PREVIOUS], need_schema)
    if dedup:
        out = backend.select(dedup_frame(out, ctx.schema.ts_name), names)
    return out, stats


def _navigate_warm(warm, sources, covered_idx, task_stats, sel) -> list | None:
    """The covered artifacts navigated from the version's warm index
    (:mod:`gtsamples.plan.warm`) when it holds them all and every page they need is
    cached: ``[(task index, _Navigated(artifact, leaves, rows))]``, each task's cache
    hits counted as navigating counts them; else None."""
    got = warm.navigate([sources[i].ordinal for i in covered_idx], sel)
    if got is None:
        return None
    out = []
    for i, art, leaves, rows, hits in zip(covered_idx, *got):
        task_stats[i].cache_hits += hits
        out.append((i, _new(_Navigated, (art, leaves, rows))))
    return out


def _navigate_together(ctx: ReadContext, sources, covered_idx, task_stats, need, sel, skipped, warm=None) -> list:
    """The covered artifacts opened, checked and navigated together: each navigation
    step for all of them at once (:class:`~gtsamples.plan.navigator.Navigation`:
    the leaves and errors of each navigated alone), in groups whose leaf pages
    load on a helper thread while the next group opens.  ``[(task index,
    _Navigated(artifact, leaves))]``; the others are ``skipped`` in region order
    (as one by one: ``strict`` raises the first).  What was found is registered in
    ``warm`` (the version's :class:`~gtsamples.plan.warm.WarmIndex`, or None)."""
    nav = Navigation(sel)
    opened, errors, group_start, cold = [], {}, 0, 0
    cached = ctx.cached_artifacts([sources[i] for i in covered_idx])
    for i, art in zip(covered_idx, cached):
        st = task_stats[i]
        misses = st.cache_misses
        try:
            opened.append((i, ctx.usable_artifact(sources[i], need, st, art)))
        except SamplesError as e:
            errors[i] = e
        cold += st.cache_misses != misses
        if cold >= NAVIGATION_GROUP:
            nav.add([a for _, a in opened[group_start:]], [task_stats[k] for k, _ in opened[group_start:]])
            group_start, cold = len(opened), 0
    nav.add([a for _, a in opened[group_start:]], [task_stats[k] for k, _ in opened[group_start:]])
    results = []
    for (i, art), leaves, rows in zip(opened, nav.finish(), nav.selected_rows):
        if isinstance(leaves, SamplesError):
            errors[i] = leaves
        else:
            results.append((i, _Navigated(art, leaves, rows)))
    if warm is not None and results:
        warm.register([(sources[i], res.artifact, res.leaves) for i, res in results])
    for i in sorted(errors):
        skipped(i, errors[i])
    return results


def _decode_group_tables(ctx: ReadContext, group, need, sel, stats, backend: Backend):
    """A group's merged batch built, fetched and decoded: ``[(task indices, table)]``
    in task order (the rows of consecutive tasks come as one table), or None when
    some artifact's chunks cannot be fetched or decoded (:func:`_decode_one_by_one`
    then finds the bad ones)."""
    got = _decode_group(ctx, group, need, sel, stats, backend)
    if got is None:
        return None
    return list(_group_tables(ctx, group, *got, need, backend))


def _decode_one_by_one(ctx: ReadContext, group, need, sel, skipped, stats, backend: Backend) -> list:
    """A failed group's artifacts read one by one (:meth:`Artifact.plan`), so only
    the bad ones fall back to their SSTs, with the error naming the artifact."""
    out = []
    for i, art, _leaves in group:
        try:
            table = art.run(Query(need, sel), backend, stats)
            out.append(([i], backend.conform(table, ctx.schema.arrow_schema(need))))
        except SamplesError as e:
            skipped(i, e)
    return out


def _decode_group(ctx: ReadContext, group, need, sel, stats, backend: Backend):
    """(batch, projection, columns, the artifact of each of the batch's parts) of a
    group's merged batch, or None when some artifact's chunks cannot be fetched or decoded."""
    m0 = group[0][1].manifest
    projection = Projection.build(m0, need)
    leaves, leaf_parts, keys, parts, owner = [], [], [], [], []
    for g, (i, art, sls) in enumerate(group):  # the batch's parts: each artifact's, numbered in order
        local: dict[int, int] = {}
        for sl in sls:
            p = local.get(sl.part)
            if p is None:
                p = local[sl.part] = len(keys)
                keys.append(art.part_key(sl.part))
                parts.append((art, sl.part))
                owner.append(g)
            leaf_parts.append(p)
        leaves += sls
    names = PartNames(len(parts), lambda k: f"{parts[k][0].location}/{C.part_file_name(parts[k][1])}")
    fetched = ReadStats()
    try:
        batch = build_batch(leaves, m0, sel, projection, source=f"region {ctx.region_id}", part_names=names,
                            leaf_parts=leaf_parts)
        batch.part_artifact = np.asarray(owner, np.int64)
        # threads: the decoder's own thresholds (decode/cpu/parallel.py), as for one artifact
        cols = backend.fetch_decode(ctx.store, keys, batch, fetched)
    except SamplesError:
        # the artifacts are read again one by one, and their chunks counted then:
        # only the I/O of this attempt counts here
        stats.bytes_read += fetched.bytes_read
        stats.requests += fetched.requests
        return None
    stats.add(fetched)
    return batch, projection, cols, owner


def _rows_per_artifact(batch, owner: list, n: int) -> np.ndarray:
    """The decoded rows of each of a group's ``n`` artifacts, before trimming (``owner``:
    the artifact of each of the batch's parts)."""
    if not owner:
        return np.zeros(n, np.int64)
    blocks = batch.blocks
    return np.bincount(np.array(owner, dtype=np.int64)[blocks["part"].astype(np.int64)],
                       weights=blocks["rows"].astype(np.float64), minlength=n).astype(np.int64)


def _group_tables(ctx: ReadContext, group, batch, projection, cols, owner, need, backend: Backend):
    """A decoded group as tables: one per run of consecutive task indices (``owner``: the
    artifact of each of the batch's parts, for the rows of each run)."""
    table = backend.conform(backend.assemble(group[0][1].manifest, projection, batch, cols),
                            ctx.schema.arrow_schema(need))
    idx = [item[0] for item in group]
    cuts = [k for k in range(1, len(idx)) if idx[k] != idx[k - 1] + 1]
    if not cuts:
        yield idx, table
        return
    rows = _rows_per_artifact(batch, owner, len(group))
    if batch.needs_trim:  # rows kept after the [start, end) trim, per artifact
        from ..batch import row_mask

        kept = np.concatenate([[0], np.cumsum(row_mask(cols.timestamp, batch.start, batch.end),
                                              dtype=np.int64)])
        ends = np.cumsum(rows)
        rows = kept[ends] - kept[ends - rows]
    off = 0
    for lo, hi in zip([0] + cuts, cuts + [len(idx)]):
        c = int(rows[lo:hi].sum())
        yield idx[lo:hi], backend.slice(table, off, c)
        off += c
