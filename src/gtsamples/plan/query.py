"""A read's arguments as one value: :class:`Query`, built and checked once.

``Artifact.read``, ``read_device``, ``iter_batches``, ``to_reader`` and a
region's executors all take ``columns, series, tables, start, end, parts``; a
:class:`Query` holds them normalised (the selection in the artifact's timestamp
unit: :class:`~gtsamples.plan.selection.Selection`) and is what the read
pipeline passes down: Query -> plan (navigate, metadata only) -> fetch ->
decode -> assemble.
"""

from __future__ import annotations

import dataclasses

from ..argcheck import is_integer, is_items
from .leaves import Projection
from .selection import Selection

__all__ = ["Query", "part_indices"]


@dataclasses.dataclass(frozen=True)
class Query:
    """What one read selects.  ``columns``: the names asked for (None: all);
    ``selection``: series, tables and ``[start, end)`` (in the artifact's unit);
    ``parts``: part indices, sorted and unique (None: every part);
    ``projection``: the columns checked against a manifest, when built for one."""

    columns: tuple[str, ...] | None = None
    selection: Selection = Selection()
    parts: tuple[int, ...] | None = None
    projection: Projection | None = dataclasses.field(default=None, compare=False)

    @classmethod
    def build(cls, columns=None, series=None, tables=None, start=None, end=None, parts=None, *,
              manifest=None, unit: str | None = None, location: str = "") -> "Query":
        """The query of a reader's arguments, checked: the columns against
        ``manifest`` (when given), the selection (bounds converted to ``unit``, by
        default the manifest's), the parts against the manifest's part count."""
        projection = None if manifest is None else Projection.build(manifest, columns)
        if columns is not None:
            columns = (columns,) if isinstance(columns, str) else tuple(columns)
        if unit is None:
            unit = "millisecond" if manifest is None else manifest.timestamp.unit
        selection = Selection.build(series, tables, start, end, unit)
        n_parts = None if manifest is None else len(manifest.files)
        return cls(columns, selection, part_indices(parts, n_parts, location), projection)

    def projection_for(self, manifest) -> Projection:
        """The query's :class:`Projection` over ``manifest``."""
        if self.projection is not None:
            return self.projection
        return Projection.build(manifest, self.columns)


def part_indices(parts, n_parts: int | None = None, location: str = "") -> tuple[int, ...] | None:
    """``parts`` (part indices, i.e. part IDs) checked, sorted, deduplicated; None: all.
    ``n_parts``: how many parts the artifact at ``location`` has (None: unchecked)."""
    if parts is None:
        return None
    if is_integer(parts):
        parts = [parts]
    elif not is_items(parts):  # (a bool or a timedelta64 is neither an index nor iterable)
        raise TypeError(f"parts must be part indices (an integer or an iterable of them), not {parts!r}")
    out = set()
    for k in parts:
        if not is_integer(k):
            raise TypeError(f"parts must be part indices (integers), not {type(k).__name__}")
        if n_parts is not None and not 0 <= k < n_parts:
            raise ValueError(f"part {int(k)} does not exist: {location} has {n_parts} part(s)")
        out.add(int(k))
    return tuple(sorted(out))
