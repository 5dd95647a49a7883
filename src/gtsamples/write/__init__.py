"""The spec's default writer and its column encoders."""

from .writer import WriteOptions, parse_write_options, write_artifact, write_artifact_from_parquet

__all__ = ["write_artifact", "write_artifact_from_parquet", "parse_write_options", "WriteOptions"]
