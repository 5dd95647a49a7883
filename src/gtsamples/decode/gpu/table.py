"""Device-resident output of the GPU backend, and its cuDF / Arrow views.

A :class:`DeviceTable` holds the decoded columns as CuPy arrays and the field
validity as Arrow-layout masks (uint32 words, bit i = row i, LSB first,
allocated to a multiple of 64 bytes with a zero tail, as libcudf requires).

* :meth:`DeviceTable.to_cudf` wraps them into a ``cudf.DataFrame`` without
  copying (``pylibcudf.Column`` over ``gpumemoryview`` spans, then
  ``cudf.DataFrame.from_pylibcudf``); the frame keeps the CuPy buffers alive.
* :meth:`DeviceTable.to_arrow` copies them to the host as a ``pyarrow.Table``
  with the exact logical schema (first five columns non-null).

Importing this module imports neither CuPy nor cuDF.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator

import numpy as np

from ...errors import UnsupportedError

__all__ = ["DeviceColumn", "DeviceTable", "CudfUnavailableError", "require_cudf", "mask_words", "LOGICAL_TYPES"]

#: DeviceColumn.kind -> (numpy dtype of the data buffer, pylibcudf TypeId name)
LOGICAL_TYPES = {
    "uint8": ("u1", "UINT8"),
    "uint32": ("u4", "UINT32"),
    "uint64": ("u8", "UINT64"),
    "float64": ("f8", "FLOAT64"),
    "timestamp[s]": ("i8", "TIMESTAMP_SECONDS"),
    "timestamp[ms]": ("i8", "TIMESTAMP_MILLISECONDS"),
    "timestamp[us]": ("i8", "TIMESTAMP_MICROSECONDS"),
    "timestamp[ns]": ("i8", "TIMESTAMP_NANOSECONDS"),
}


class CudfUnavailableError(UnsupportedError, ImportError):
    """cuDF is not installed (or does not import); the decoded columns are still
    available as a :class:`DeviceTable` (``Artifact.read_device()``)."""


def _cudf_missing(reason: BaseException) -> CudfUnavailableError:
    what = "is not installed" if isinstance(reason, ImportError) else "could not be imported"
    return CudfUnavailableError(
        f"device='gpu' returns a cudf.DataFrame, but cuDF {what} ({reason.__class__.__name__}: {reason}). "
        "Decode on the GPU without cuDF with Artifact.read_device(columns, series, tables, start, end): it "
        "returns a gtsamples.decode.gpu.table.DeviceTable of CuPy columns (table[name].data, .mask, .null_count), "
        "and DeviceTable.to_arrow() copies it to a pyarrow.Table. For DataFrames install cudf-cu13."
    )


def require_cudf():
    """``(cudf, pylibcudf)``, imported; :class:`CudfUnavailableError` (a
    :class:`gtsamples.SamplesError`) when they cannot be.  Touches no GPU
    memory, so callers check before any decoding."""
    try:
        import cudf
        import pylibcudf
    except Exception as e:  # ImportError, or a broken install failing at import time
        raise _cudf_missing(e) from e
    return cudf, pylibcudf


def mask_words(n_rows: int) -> int:
    """uint32 words of an Arrow/libcudf validity mask for ``n_rows`` rows,
    padded to 64 bytes (``cudf.bitmask_allocation_size_bytes``)."""
    return ((n_rows + 511) // 512) * 16


@dataclasses.dataclass
class DeviceColumn:
    name: str
    kind: str  # a key of LOGICAL_TYPES
    data: Any  # CuPy array, len >= num_rows
    mask: Any = None  # CuPy uint32 words or None (no nulls possible)
    null_count: int = 0
    nullable: bool = False

    def arrow_type(self):
        import pyarrow as pa

        if self.kind.startswith("timestamp["):
            return pa.timestamp(self.kind[len("timestamp[") : -1])
        return {"uint8": pa.uint8(), "uint32": pa.uint32(), "uint64": pa.uint64(), "float64": pa.float64()}[self.kind]


@dataclasses.dataclass
class DeviceTable:
    """Columns on the device, in the logical schema's order."""

    columns: list[DeviceColumn]
    num_rows: int
    #: stage timings in milliseconds, when the decode was asked to record them
    timings: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def __len__(self) -> int:
        return self.num_rows

    def __iter__(self) -> Iterator[DeviceColumn]:
        return iter(self.columns)

    def __getitem__(self, name: str) -> DeviceColumn:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def nbytes(self) -> int:
        """Bytes of the logical output (data + validity), for throughput figures."""
        n = self.num_rows
        total = 0
        for c in self.columns:
            total += n * np.dtype(LOGICAL_TYPES[c.kind][0]).itemsize
            if c.nullable:
                total += (n + 7) // 8
        return total

    def select(self, manifest=None, projection=None) -> "DeviceTable":
        """The table with the manifest's timestamp name and unit, restricted to
        ``projection.names`` in that order (both optional); shares buffers."""
        cols = list(self.columns)
        if manifest is not None:
            ts = manifest.timestamp
            cols = [
                dataclasses.replace(c, name=ts.name, kind=f"timestamp[{ts.arrow_unit}]")
                if c.kind.startswith("timestamp[") else c
                for c in cols
            ]  # fmt: skip
        if projection is not None:
            by_name = {c.name: c for c in cols}
            missing = [n for n in projection.names if n not in by_name]
            if missing:
                raise KeyError(f"decoded table lacks projected columns {missing}")
            cols = [by_name[n] for n in projection.names]
        return DeviceTable(cols, self.num_rows, self.timings)

    # ------------------------------------------------------------------ cuDF
    def to_cudf(self, manifest=None, projection=None):
        """A ``cudf.DataFrame`` over these buffers (no copy).  ``manifest`` /
        ``projection`` as in :meth:`select`."""
        if manifest is not None or projection is not None:
            return self.select(manifest, projection).to_cudf()
        cudf, plc = require_cudf()
        if self.num_rows > 2**31 - 1:
            raise ValueError(f"{self.num_rows} rows exceed cuDF's column size limit (2^31 - 1)")
        cols = [self._plc_column(plc, c) for c in self.columns]
        table = plc.Table(cols)
        return cudf.DataFrame.from_pylibcudf(table, metadata={"columns": self.names})

    def _plc_column(self, plc, c: DeviceColumn):
        n = self.num_rows
        dtype = plc.DataType(getattr(plc.TypeId, LOGICAL_TYPES[c.kind][1]))
        data = plc.gpumemoryview(c.data[:n]) if n else None
        mask = None
        null_count = 0
        if c.mask is not None and c.null_count > 0 and n:
            mask = plc.gpumemoryview(c.mask)
            null_count = int(c.null_count)
        return plc.Column(dtype, n, data, mask, null_count, 0, [])

    # ------------------------------------------------------------------ Arrow
    def to_arrow(self, manifest=None, projection=None):
        """A ``pyarrow.Table`` copy on the host, with the logical schema.
        ``manifest`` / ``projection`` as in :meth:`select`."""
        import pyarrow as pa

        if manifest is not None or projection is not None:
            return self.select(manifest, projection).to_arrow()

        n = self.num_rows
        arrays, fields = [], []
        for c in self.columns:
            typ = c.arrow_type()
            host = _to_host(c.data)[:n]
            np_dtype = np.dtype(LOGICAL_TYPES[c.kind][0])
            host = np.ascontiguousarray(host).view(np_dtype)
            validity = None
            null_count = 0
            if c.mask is not None and c.null_count > 0:
                words = _to_host(c.mask)
                validity = pa.py_buffer(np.ascontiguousarray(words, dtype="<u4").tobytes()[: (n + 7) // 8])
                null_count = int(c.null_count)
            arr = pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(host.tobytes())], null_count=null_count)
            arrays.append(arr)
            fields.append(pa.field(c.name, typ, nullable=c.nullable))
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _to_host(a) -> np.ndarray:
    if isinstance(a, np.ndarray):
        return a
    get = getattr(a, "get", None)
    if get is not None:
        return get()
    return np.asarray(a)
