"""A region query's plan, separate from its execution.

:meth:`Region.plan <gtsamples.region.Region.plan>` decides, from the catalog
alone (no I/O), which SSTs a query touches and how: each selected SST is a
:class:`PlannedSource` read from the artifact covering it, or scanned; the
others are pruned by their statistics.  :meth:`Region.read`,
:meth:`Region.iter_batches` and :func:`gtsamples.region.dask.to_dask` all run
such a plan (grouped CPU batches, GPU, streamed batches or Dask partitions).
"""

from __future__ import annotations

import dataclasses

from ..format.manifest import CatalogEntry
from ..plan import Selection
from .catalog import RegionSchema
from .dedup import KEY_COLUMNS

__all__ = ["PlannedSource", "RegionPlan", "SstFile", "needed_columns"]


@dataclasses.dataclass(frozen=True)
class SstFile:
    """One source SST as the catalog records it."""

    file_id: str
    path: str  # store-relative key, or an absolute path / URL
    size: int
    rows: int
    schema: dict
    stats: dict | None = None

    @classmethod
    def from_record(cls, rec: dict) -> "SstFile":
        return cls(rec["file_id"], rec["path"], int(rec["size"]), int(rec["rows"]), rec["schema"], rec.get("stats"))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class PlannedSource:
    """One selected SST of a plan: ``ordinal`` is its position in the region
    (catalog order); ``artifact`` the catalog entry of the artifact that serves
    it (None: the SST is scanned; the raw dict when the entry does not parse,
    and then reading falls back to the SST).  ``record``/``entry`` are the catalog's own
    documents (the region's memos key on them)."""

    ordinal: int
    sst: SstFile
    artifact: CatalogEntry | None
    record: dict = dataclasses.field(repr=False, compare=False)
    entry: dict | None = dataclasses.field(repr=False, compare=False, default=None)

    @property
    def covered(self) -> bool:
        return self.artifact is not None


@dataclasses.dataclass(frozen=True)
class RegionPlan:
    """Which SSTs a query reads and how, and which columns it needs.

    ``columns``: the output columns (region schema order); ``need``: the
    columns read from every source (``columns`` plus the last-write-wins keys
    with ``dedup``); ``sources``: the selected SSTs in region order;
    ``pruned``: file ids whose statistics exclude the selection.  Indexing by
    ``"selection"``, ``"covered"``, ``"uncovered"`` or ``"pruned"`` gives those
    (file ids as lists), as the plan dictionaries of earlier versions did.
    """

    selection: Selection
    columns: tuple[str, ...]
    need: tuple[str, ...]
    dedup: bool
    sources: tuple[PlannedSource, ...]
    pruned: tuple[str, ...]
    schema: RegionSchema | None = dataclasses.field(repr=False, default=None)

    @property
    def covered(self) -> tuple[str, ...]:
        """File ids read from artifacts, in region order."""
        return tuple(s.sst.file_id for s in self.sources if s.covered)

    @property
    def uncovered(self) -> tuple[str, ...]:
        """File ids scanned, in region order."""
        return tuple(s.sst.file_id for s in self.sources if not s.covered)

    def __getitem__(self, key: str):
        if key == "selection":
            return self.selection
        if key in ("covered", "uncovered", "pruned"):
            return list(getattr(self, key))
        raise KeyError(key)


def needed_columns(schema: RegionSchema, names, dedup: bool) -> tuple[str, ...]:
    """The columns read for output ``names``: with ``dedup`` also the
    last-write-wins keys (identity, timestamp, sequence, op type)."""
    if not dedup:
        return tuple(names)
    keys = set(KEY_COLUMNS) | {schema.ts_name}
    return tuple(n for n in schema.column_names if n in keys or n in names)
