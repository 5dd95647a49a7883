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
    "create_region",
    "open_artifact",
    "open_region",
    "read_artifact",
    "to_dask",
    "write_artifact",
]
