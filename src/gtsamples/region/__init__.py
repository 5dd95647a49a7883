"""The region layer: source SSTs, a copy-on-write catalog of artifacts covering them,
covered/uncovered read plans with fallback, the last-write-wins view, atomic
publish, garbage collection and Dask partitions (docs/architecture.md).
"""

from __future__ import annotations

from .catalog import CatalogError, CommitConflict, RegionSchema
from .plan import PlannedSource, RegionPlan, SstFile
from .region import Region, UnusableArtifactError, create_region, open_region


def to_dask(region_or_paths, columns=None, series=None, tables=None, start=None, end=None, dedup=False,
            device="cpu", **kw):
    """A dask DataFrame over a region (or artifact directories / Parquet SSTs); see :mod:`gtsamples.region.dask`."""
    from .dask import to_dask as _to_dask

    return _to_dask(region_or_paths, columns=columns, series=series, tables=tables, start=start, end=end,
                    dedup=dedup, device=device, **kw)


__all__ = ["CatalogError", "CommitConflict", "PlannedSource", "Region", "RegionPlan", "RegionSchema", "SstFile",
           "UnusableArtifactError", "create_region", "open_region", "to_dask"]
