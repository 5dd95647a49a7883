"""The spec's default writer and its column encoders."""

from .writer import write_artifact, write_artifact_from_parquet

__all__ = ["write_artifact", "write_artifact_from_parquet"]
