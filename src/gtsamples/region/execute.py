"""One region read: a :class:`~gtsamples.region.plan.RegionPlan` run whole
(:meth:`Region.execute <gtsamples.region.Region.execute>`).  The covered sources are
opened, navigated and decoded in groups of artifacts (one batch each on the CPU, one
read each on the GPU), the others scanned; the pieces are concatenated in region
order."""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from ..artifact import Artifact
from ..backends import get_backend
from ..errors import ArtifactSkippedWarning, SamplesError
from ..plan.navigator import Navigation
from ..storage import ReadStats
from . import sst as _sst
from .dedup import dedup_arrow, dedup_cudf
from .plan import RegionPlan
from .region import LOCAL_WORKERS, REMOTE_WORKERS, skip_note
from .threads import pmap as _pmap  # the local pmap of execute_plan wraps it


class _Navigated(NamedTuple):
    """A covered source opened, checked and navigated (decoded later, in a group)."""

    artifact: Artifact
    leaves: list


class _Decoded(NamedTuple):
    """A covered source already read whole (the GPU reads artifacts one by one)."""

    table: object


#: Marks a task whose rows are in the piece of an earlier task (one table per decoded run).
_IN_PREVIOUS = object()


#: Artifacts opened and navigated together, whose leaf pages then load in the background.
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

    def add(self, item) -> list:
        """Add an artifact; return the groups this closed."""
        _i, art, leaves = item
        m = art.manifest
        key = (m.timestamp, m.fields)
        d = 0
        for sl in leaves:  # decoded size estimate: the selected blocks' rows
            d += int(np.dot(sl.page.blocks["row_count"], sl.mask))
        d *= 17 + 8 * len(m.fields)
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


def execute_plan(region, plan: RegionPlan, device: str, strict: bool, max_workers: int | None):
    """:meth:`Region.execute <gtsamples.region.Region.execute>`: ``(table, ReadStats)``."""
    backend = get_backend(device).name
    stats = ReadStats()
    if plan.schema is None:
        out = pa.schema([]).empty_table()
        if backend == "gpu":  # pragma: no cover - needs a GPU
            import cudf

            out = cudf.DataFrame()
        region.last_stats = stats
        return out, stats
    names, need, sel, dedup = plan.columns, plan.need, plan.selection, plan.dedup
    tasks = [(src.record, src.entry) for src in plan.sources]
    if max_workers is None:
        max_workers = LOCAL_WORKERS if region.store.is_local else REMOTE_WORKERS

    def pmap(fn, items):
        return _pmap(fn, items, max_workers)

    n = len(tasks)
    pieces: list = [None] * n
    task_stats = [ReadStats() for _ in range(n)]
    notes: list = [None] * n

    def skipped(i, e):
        if strict:
            raise e
        notes[i] = skip_note(*tasks[i], e)

    # covered plan: open + check + navigate per artifact, then one batch per group
    # of artifacts: built, fetched and decoded once
    def prepare(i):
        rec, entry = tasks[i]
        st = task_stats[i]
        try:
            art = region._artifact(entry, st)
            region._check_usable(art, rec, need)
            if backend == "gpu":  # pragma: no cover - needs a GPU
                piece, rs = art.read_with_stats(columns=need, series=sel.series, tables=sel.tables,
                                                start=sel.start, end=sel.end, device="gpu")
                st.add(rs)
                return i, _Decoded(region._normalise(piece, need, backend))
            return i, _Navigated(art, art.navigate(sel, st))
        except SamplesError as e:
            skipped(i, e)
            return i, None

    # groups of navigated artifacts: each built, fetched and decoded as one batch
    grouper = _Grouper()
    groups: list = []
    covered_idx = [i for i in range(n) if tasks[i][1] is not None]
    if backend == "cpu" and max_workers <= 1:
        results = _navigate_together(region, tasks, covered_idx, task_stats, need, sel, skipped)
    else:
        results = pmap(prepare, covered_idx)
    for i, res in results:
        if res is None:
            continue
        if isinstance(res, _Decoded):
            pieces[i] = res.table
        else:
            groups += grouper.add((i, res.artifact, res.leaves))
    groups += grouper.flush()
    group_stats = ReadStats()
    task_stats.append(group_stats)
    for g in groups:
        got = region._decode_group_tables(g, need, sel, group_stats)
        if got is None:  # one by one: the bad artifacts fall back to their SSTs
            got = region._decode_one_by_one(g, need, sel, skipped, group_stats)
        for run, table in got:
            pieces[run[0]] = table
            for i in run[1:]:
                pieces[i] = _IN_PREVIOUS  # rows already in the piece of run[0]

    # uncovered plan (and fallbacks)
    def scan(i):
        rec = tasks[i][0]
        piece = _sst.scan_sst(rec, region.store, region.schema, sel, need, task_stats[i], region.cache)
        if backend == "gpu":  # pragma: no cover - needs a GPU
            import cudf

            piece = cudf.DataFrame.from_arrow(piece)
        return i, piece

    for i, piece in pmap(scan, [i for i in range(n) if pieces[i] is None]):
        pieces[i] = piece
    for i in range(n):
        if notes[i] is not None:
            warnings.warn(notes[i], ArtifactSkippedWarning, stacklevel=5)  # the caller of Region.read
    for st in task_stats:
        stats.add(st)
    out = region._concat([x for x in pieces if x is not _IN_PREVIOUS], need, backend)
    if dedup:
        if backend == "gpu":  # pragma: no cover - needs a GPU
            out = dedup_cudf(out, region.schema.ts_name)[list(names)]
        else:
            out = dedup_arrow(out, region.schema.ts_name).select(list(names))
    region.last_stats = stats
    return out, stats


def _navigate_together(region, tasks, covered_idx, task_stats, need, sel, skipped) -> list:
    """The covered artifacts opened, checked and navigated together: each navigation
    step for all of them at once (:class:`~gtsamples.plan.navigator.Navigation`:
    the leaves and errors of each navigated alone), in groups whose leaf pages
    load on a helper thread while the next group opens.  ``[(task index,
    _Navigated(artifact, leaves))]``; the others are ``skipped`` in region order
    (as one by one: ``strict`` raises the first)."""
    nav = Navigation(sel)
    opened, errors, group_start = [], {}, 0
    for i in covered_idx:
        rec, entry = tasks[i]
        try:
            art = region._artifact(entry, task_stats[i])
            region._check_usable(art, rec, need)
            opened.append((i, art))
        except SamplesError as e:
            errors[i] = e
        if len(opened) - group_start >= NAVIGATION_GROUP:
            nav.add([a for _, a in opened[group_start:]], [task_stats[k] for k, _ in opened[group_start:]])
            group_start = len(opened)
    nav.add([a for _, a in opened[group_start:]], [task_stats[k] for k, _ in opened[group_start:]])
    results = []
    for (i, art), leaves in zip(opened, nav.finish()):
        if isinstance(leaves, SamplesError):
            errors[i] = leaves
        else:
            results.append((i, _Navigated(art, leaves)))
    for i in sorted(errors):
        skipped(i, errors[i])
    return results
