"""Query engines over artifacts and regions, with the filters reaching the read.

* :func:`scan_polars` (:mod:`.polars`): a ``polars.LazyFrame`` over an IO plugin
  (``polars.io.plugins.register_io_source``) that turns the projection, the
  predicate on ``__table_id``/``__tsid``/the timestamp and ``n_rows`` into the
  read's ``columns``, ``series``/``tables`` and ``start``/``end``;
* :func:`arrow_dataset` (:mod:`.dataset`): a ``pyarrow.dataset.Dataset``
  whose ``scanner(columns=, filter=)`` DuckDB calls with its projection and
  filters (as Lance's datasets receive them);
* :mod:`.pushdown`: the filter algebra both share -- a predicate is reduced to
  a superset of its rows that a read's selection can express, and the engine's
  own filter then runs on the rows read, so results are always exact.

``Artifact.to_reader`` and ``Region.to_reader`` (a plain
``pyarrow.RecordBatchReader``) need none of this.  Polars and DuckDB are imported
only when used (the ``polars`` and ``duckdb`` extras).
"""

from __future__ import annotations


def scan_polars(source, **kw):
    """A ``polars.LazyFrame`` over ``source``; see :func:`gtsamples.integrations.polars.scan_polars`."""
    from .polars import scan_polars as _scan

    return _scan(source, **kw)


def arrow_dataset(source, **kw):
    """A ``pyarrow.dataset.Dataset`` over ``source``; see :func:`gtsamples.integrations.dataset.arrow_dataset`."""
    from .dataset import arrow_dataset as _ds

    return _ds(source, **kw)


__all__ = ["arrow_dataset", "scan_polars"]
