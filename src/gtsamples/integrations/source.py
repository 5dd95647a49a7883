"""What the integrations read: an Artifact, a Region, or a path opened as an artifact."""

from __future__ import annotations

import inspect
import os

import pyarrow as pa

from ..artifact import Artifact, open_artifact
from ..backends import CPU, get_backend
from ..errors import SamplesError
from ..frames import arrow_schema
from ..plan.split import DEFAULT_MAX_BYTES, check_max_bytes
from ..region import Region, open_region

__all__ = ["Source", "open_source"]

_SELECTION_ARGS = ("columns", "series", "tables", "start", "end")


class Source:
    """An artifact or a region as the integrations see it: its full Arrow schema,
    its timestamp column and unit, and a batched read of a selection."""

    def __init__(self, obj, max_bytes: int = DEFAULT_MAX_BYTES, read_kw: dict | None = None):
        self.obj = obj
        self.max_bytes = check_max_bytes(max_bytes)  # (a huge one is capped there)
        self.read_kw = dict(read_kw or {})
        fixed = [k for k in _SELECTION_ARGS if k in self.read_kw]
        if fixed:
            raise TypeError(f"{', '.join(fixed)} cannot be fixed here: the query's projection and filters choose them")
        # the fixed keywords are the reader's (to_reader: the CPU), checked now rather than at the first query
        if "device" in self.read_kw and _on_cpu(self.read_kw["device"]):
            del self.read_kw["device"]
        kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        allowed = [n for n, p in inspect.signature(obj.to_reader).parameters.items()
                   if p.kind in kinds and n not in _SELECTION_ARGS and n != "max_bytes"]
        unknown = [k for k in self.read_kw if k not in allowed]
        if unknown:
            why = " (the integrations read on the CPU: device='cpu' only)" if "device" in unknown else ""
            raise TypeError(f"unexpected keyword argument(s) {', '.join(map(repr, unknown))}{why}; "
                            f"{type(obj).__name__} sources take {', '.join(allowed)}")
        if isinstance(obj, Artifact):
            self.schema = arrow_schema(obj.manifest)
        else:
            self.schema = obj.arrow_schema()
        ts = [f for f in self.schema if pa.types.is_timestamp(f.type)]
        self.ts_name = ts[0].name if ts else None
        self.ts_unit = ts[0].type.unit if ts else None

    def __reduce__(self):
        """Pickled as how to open it again (an open artifact or region holds locks and
        caches): the artifact's store, entry or generation path; the region's store,
        ID and catalog version."""
        obj = self.obj
        if isinstance(obj, Artifact):
            opts = obj.store.storage_options or None
            if obj.entry is not None:
                how = ("artifact", obj.store.root, obj.entry.to_dict(), opts)
            else:
                how = ("artifact", obj.location, None, opts)
        else:
            how = ("region", obj.root, obj.region_id, obj.storage_options or None, obj.version)
        return _reopen, (how, self.max_bytes, self.read_kw)

    @property
    def names(self) -> list[str]:
        return self.schema.names

    def batches(self, columns, selection: dict, max_bytes: int | None = None):
        """``iter_batches`` of ``columns`` (schema order; None: all) over ``selection``
        (``series``/``tables``/``start``/``end``), on the CPU, in batches of
        ``max_bytes`` (at most the source's)."""
        mb = self.max_bytes if max_bytes is None else min(self.max_bytes, max_bytes)
        return self.obj.iter_batches(columns, max_bytes=mb, **selection, **self.read_kw)

    def reader(self, columns, selection: dict) -> pa.RecordBatchReader:
        """:meth:`batches` as the source's ``to_reader``."""
        return self.obj.to_reader(columns, max_bytes=self.max_bytes, **selection, **self.read_kw)


def _on_cpu(device) -> bool:
    """Does ``device`` pick the CPU backend (the one the integrations read with)?"""
    try:
        return get_backend(device) is CPU
    except (ValueError, SamplesError):  # unknown, or a GPU this install cannot use
        return False


def _reopen(how: tuple, max_bytes: int, read_kw: dict) -> Source:
    if how[0] == "artifact":
        _, path, entry, opts = how
        return Source(open_artifact(path, entry=entry, storage_options=opts), max_bytes, read_kw)
    _, root, region_id, opts, version = how
    return Source(open_region(root, region_id, opts, version=version), max_bytes, read_kw)


def open_source(source, *, entry=None, storage_options=None, max_bytes: int = DEFAULT_MAX_BYTES,
                read_kw: dict | None = None) -> Source:
    """``source`` (an :class:`~gtsamples.Artifact`, a :class:`~gtsamples.Region`, a
    generation directory, or a store root or URL with its catalog ``entry``) as a
    :class:`Source`.  ``read_kw``: further ``iter_batches`` arguments, fixed for
    every read (``dedup``, ``strict``, ``use_artifacts`` for a region; ``parts``
    for an artifact)."""
    if isinstance(source, (Artifact, Region)):
        if entry is not None or storage_options is not None:
            raise TypeError("entry and storage_options apply to a path; this source is already open")
        obj = source
    elif isinstance(source, (str, os.PathLike)):
        obj = open_artifact(os.fspath(source), entry=entry, storage_options=storage_options)
    else:
        raise TypeError(f"source must be an Artifact, a Region or a path, not {type(source).__name__}")
    return Source(obj, max_bytes, read_kw)
