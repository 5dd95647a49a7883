"""Storage failures are gtsamples errors, classified as the hierarchy says: a store that
cannot be reached, or whose filesystem package is missing, is a StorageError; only a
reachable store answering "no such object" makes a missing object (CorruptArtifactError).
Real servers on 127.0.0.1 (a closed port, an HTTP server, moto's S3), no mocks."""

from __future__ import annotations

import importlib.util

import pytest

from gtsamples import open_artifact
from gtsamples.errors import CorruptArtifactError, StorageError
from gtsamples.storage import Store


def test_url_whose_file_system_is_not_installed():
    # open_artifact("gcs://...") without gcsfs raised fsspec's ImportError
    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed")
    for call in (lambda: Store("gcs://bucket/x"), lambda: open_artifact("gcs://bucket/x")):
        with pytest.raises(StorageError) as ei:
            call()
        assert str(ei.value).startswith("gcs://bucket/x: cannot open: ") and "gcsfs" in str(ei.value)
