"""gtsamples: read and write Mito columnar-samples artifacts, on GPUs (cuDF) and CPUs (pyarrow)."""

from __future__ import annotations

import os as _os

# numba's OpenMP layer spins idle threads by default, which makes every small
# parallel launch cost milliseconds on a busy machine; a library should not spin.
_os.environ.setdefault("OMP_WAIT_POLICY", "passive")

from .artifact import Artifact, open_artifact, read_artifact
from .errors import (
    ArtifactSkippedWarning,
    CatalogMismatchError,
    CorruptArtifactError,
    DecodeErrorFlag,
    SamplesError,
    StorageError,
    UnsupportedError,
)
from .format.manifest import CatalogEntry, Manifest
from .region import Region, create_region, open_region, to_dask
from .storage import ReadStats

__version__ = "0.1.0"


def write_artifact(table, store_root, **kw) -> CatalogEntry:
    """Write ``table`` as an artifact under ``store_root``; see :func:`gtsamples.write.write_artifact`."""
    from .write import write_artifact as _write

    return _write(table, store_root, **kw)


def scan_polars(source, **kw):
    """A ``polars.LazyFrame`` over an artifact or region, the query's projection,
    filters and ``n_rows`` pushed into the read; see
    :func:`gtsamples.integrations.polars.scan_polars` (the ``polars`` extra)."""
    from .integrations import scan_polars as _scan

    return _scan(source, **kw)


def arrow_dataset(source, **kw):
    """A ``pyarrow.dataset.Dataset`` over an artifact or region whose scans (DuckDB's
    included) push their projection and filters into the read; see
    :func:`gtsamples.integrations.dataset.arrow_dataset`."""
    from .integrations import arrow_dataset as _ds

    return _ds(source, **kw)


__all__ = [
    "Artifact",
    "ArtifactSkippedWarning",
    "CatalogEntry",
    "CatalogMismatchError",
    "CorruptArtifactError",
    "DecodeErrorFlag",
    "Manifest",
    "ReadStats",
    "SamplesError",
    "StorageError",
    "UnsupportedError",
    "Region",
    "arrow_dataset",
    "create_region",
    "open_artifact",
    "open_region",
    "read_artifact",
    "scan_polars",
    "to_dask",
    "write_artifact",
]
