"""The backends: one object per device and output type, from ``get_backend(device)``.

A :class:`Backend` decodes a fetched :class:`~gtsamples.batch.ChunkBatch` and
assembles its own output type, with that type's ``concat``, ``empty`` and
conversions; it imports what it needs, lazily:

* :data:`CPU` -- ``gtsamples.decode.cpu`` (numba + libzstd) -> numpy columns,
  ``gtsamples.frames.to_arrow`` -> ``pyarrow.Table``;
* :data:`GPU` -- a fetch in groups copied to the device as it arrives,
  ``gtsamples.decode.gpu.decode_batch_gpu`` (XXH64, nvCOMP, CUDA kernels) ->
  a :class:`~gtsamples.decode.gpu.table.DeviceTable`, wrapped as a
  ``cudf.DataFrame``;
* :data:`DEVICE_TABLE` -- the GPU decode without cuDF: the ``DeviceTable``
  itself (``Artifact.read_device``, and a GPU stream when cuDF is missing).

``device`` strings ("cpu", "gpu", "auto") are resolved here, once, by
:func:`get_backend`; nothing above this module compares them.  Nothing GPU-side
is imported until a GPU backend is asked for; the device checks look
``gtsamples.decode.gpu.is_gpu_available`` up at call time.
"""

from __future__ import annotations

import dataclasses
import importlib.util

from . import runtime
from .errors import UnsupportedError

__all__ = ["CPU", "DEVICES", "DEVICE_TABLE", "GPU", "Backend", "CpuBackend", "DeviceTableBackend", "GpuBackend",
           "get_backend"]

#: what a ``device`` argument may be
DEVICES = ("cpu", "gpu", "auto")


@dataclasses.dataclass(frozen=True)
class Backend:
    """How a read decodes a batch and what it returns (``name``: the device, "cpu"
    or "gpu", for messages and for the processes a Dask read starts)."""

    name: str
    #: A region may decode several artifacts' blocks as one merged batch (else it
    #: reads its artifacts one by one).
    merges_artifacts = False

    def require(self) -> None:
        """Raise :class:`~gtsamples.errors.UnsupportedError` (naming what to
        install or use instead) unless this backend can run here; called
        before any I/O or device work."""

    def stream_backend(self) -> "Backend":
        """The backend of a streamed read (``iter_batches``): this one, or the
        DeviceTable one when the GPU cannot wrap its tables in cuDF."""
        return self

    # -- the pipeline's last two steps
    def decode(self, batch, **kw):
        """The decoded columns of one fetched :class:`~gtsamples.batch.ChunkBatch`."""
        raise NotImplementedError

    def fetch_decode(self, store, part_keys, batch, stats, **kw):
        """Fetch ``batch`` (:func:`gtsamples.plan.fetch_batch`) and :meth:`decode` it;
        its blocks and chunks are counted in ``stats`` once decoded (the one place
        a read counts them)."""
        from .plan import fetch_batch

        fetch_batch(store, part_keys, batch, stats)
        return _counted(stats, batch, self.decode(batch, **kw))

    def assemble(self, manifest, projection, batch, decoded):
        """The frame of one decoded batch, with the exact logical schema."""
        raise NotImplementedError

    # -- the output type
    def stream_unit(self, frame):
        """A frame (or a ``pyarrow`` table / batch) as one streamed batch."""
        return self.from_arrow(frame) if _is_arrow(frame) else frame

    def from_arrow(self, table):
        """A ``pyarrow.Table`` (or ``RecordBatch``) as this backend's frame."""
        raise NotImplementedError

    def conform(self, frame, schema):
        """``frame`` restricted to the columns of the ``pyarrow.Schema`` ``schema``
        in its order (and, on the host, cast to its exact types)."""
        return frame[list(schema.names)]

    def select(self, frame, names):
        """The columns ``names`` of ``frame``, in that order."""
        return frame[list(names)]

    def slice(self, frame, offset: int, length: int):
        """Rows ``[offset, offset + length)`` of ``frame`` (a view where the type has them)."""
        return frame.iloc[offset:offset + length]

    def concat(self, frames, schema):
        """Conformed frames as one; none: :meth:`empty`."""
        raise NotImplementedError

    def empty(self, schema):
        """A frame with no rows and the columns of ``schema``."""
        raise NotImplementedError

    def dataframe(self, table):
        """A ``pyarrow.Table`` as the device's DataFrame library's frame (pandas,
        cuDF): a Dask partition."""
        raise NotImplementedError

    def require_dask(self) -> None:
        """Import what Dask needs to hold this backend's partitions."""


def _counted(stats, batch, decoded):
    """``decoded``, once ``batch``'s blocks and chunks are counted in ``stats``."""
    stats.blocks_decoded += int(batch.blocks.shape[0])
    stats.chunks_decoded += int(batch.chunks.shape[0])
    return decoded


def _is_arrow(frame) -> bool:
    import pyarrow as pa

    return isinstance(frame, (pa.Table, pa.RecordBatch))


class CpuBackend(Backend):
    """numba + libzstd on the host; ``pyarrow.Table`` frames, ``RecordBatch`` stream units."""

    merges_artifacts = True

    def decode(self, batch, **kw):
        from .decode import cpu

        return cpu.decode_batch(batch, **kw)

    def assemble(self, manifest, projection, batch, decoded):
        from . import frames

        return frames.to_arrow(manifest, projection, batch, decoded)

    def stream_unit(self, frame):
        import pyarrow as pa

        if isinstance(frame, pa.RecordBatch):
            return frame
        from .frames import one_batch

        return one_batch(frame)

    def from_arrow(self, table):
        import pyarrow as pa

        return pa.Table.from_batches([table]) if isinstance(table, pa.RecordBatch) else table

    def conform(self, frame, schema):
        import pyarrow as pa

        frame = self.from_arrow(frame)
        names = list(schema.names)
        if frame.schema.names == names and frame.schema == schema:
            return frame
        return pa.Table.from_arrays([frame.column(n).cast(schema.field(n).type) for n in names], schema=schema)

    def select(self, frame, names):
        return frame.select(list(names))

    def slice(self, frame, offset: int, length: int):
        return frame.slice(offset, length)

    def concat(self, frames, schema):
        import pyarrow as pa

        if not frames:
            return self.empty(schema)
        return pa.concat_tables(frames) if len(frames) > 1 else frames[0]

    def empty(self, schema):
        return schema.empty_table()

    def dataframe(self, table):
        import pandas as pd
        import pyarrow as pa

        # nullable floats as Arrow-backed columns (nulls stay nulls); the rest numpy
        return table.to_pandas(types_mapper=lambda t: pd.ArrowDtype(t) if pa.types.is_floating(t) else None,
                               coerce_temporal_nanoseconds=False)


class GpuBackend(Backend):
    """CuPy + nvCOMP + CUDA kernels on the device; ``cudf.DataFrame`` frames."""

    def require(self, cudf: bool = True) -> None:
        """Not in a child forked after CUDA was initialised (use spawn), then cuDF
        (``cudf=False``: a read that returns the DeviceTable), then CuPy and a CUDA device."""
        runtime.check_cuda()  # a child forked after CUDA was initialised: say so (CUDA would hang or fail)
        if cudf:
            from .decode.gpu.table import require_cudf

            require_cudf()
        if not _gpu().is_gpu_available(require_nvcomp=False):
            from .decode.gpu.nvcomp import GPU_EXTRA_HINT

            raise UnsupportedError("GPU decoding needs CuPy and a CUDA device; none is usable here "
                                   f"(CuPy and libnvcomp: {GPU_EXTRA_HINT}; or use device='cpu')")  # fmt: skip

    def stream_backend(self) -> Backend:
        from .decode.gpu.table import CudfUnavailableError, require_cudf

        runtime.check_cuda()  # before cuDF is imported (a forked child after CUDA was initialised)
        try:
            require_cudf()
        except CudfUnavailableError:
            return DEVICE_TABLE
        return self  # pragma: no cover - needs cuDF

    def decode(self, batch, **kw):
        return _gpu().decode_batch_gpu(batch, **kw)

    def fetch_decode(self, store, part_keys, batch, stats, **kw):
        """The fetch in groups overlapped with the copy to the device, XXH64 on it."""
        from .decode.gpu import fetch as gpu_fetch

        return _counted(stats, batch, gpu_fetch.fetch_and_decode(store, part_keys, batch, stats, **kw))

    def assemble(self, manifest, projection, batch, decoded):  # pragma: no cover - needs cuDF
        return decoded.to_cudf(manifest, projection)

    def from_arrow(self, table):  # pragma: no cover - needs cuDF
        import cudf
        import pyarrow as pa

        return cudf.DataFrame.from_arrow(pa.Table.from_batches([table]) if isinstance(table, pa.RecordBatch) else table)

    def concat(self, frames, schema):  # pragma: no cover - needs cuDF
        import cudf

        if not frames:
            return self.empty(schema)
        return cudf.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]

    def empty(self, schema):  # pragma: no cover - needs cuDF
        import cudf

        return cudf.DataFrame.from_arrow(schema.empty_table()) if len(schema) else cudf.DataFrame()

    def dataframe(self, table):  # pragma: no cover - needs cuDF
        return self.from_arrow(table)

    def require_dask(self) -> None:  # pragma: no cover - needs dask-cudf
        __import__("dask_cudf")  # registers the cudf backend with dask


class DeviceTableBackend(GpuBackend):
    """The GPU decode without cuDF: :class:`~gtsamples.decode.gpu.table.DeviceTable` frames."""

    def require(self, cudf: bool = False) -> None:
        super().require(cudf=cudf)

    def stream_backend(self) -> Backend:
        return self

    def assemble(self, manifest, projection, batch, decoded):
        return decoded.select(manifest, projection)

    def stream_unit(self, frame):
        return frame

    def from_arrow(self, table):
        raise UnsupportedError("a DeviceTable is made by the GPU decoder, not from Arrow data (install cuDF)")

    def conform(self, frame, schema):
        return frame.select(None, _Names(tuple(schema.names)))

    def select(self, frame, names):
        return frame.select(None, _Names(tuple(names)))

    def concat(self, frames, schema):
        if len(frames) == 1:
            return frames[0]
        raise UnsupportedError("DeviceTables are not concatenated (install cuDF for device='gpu' frames)")

    def empty(self, schema):
        from .decode.gpu.table import DeviceTable

        if len(schema):
            raise UnsupportedError("an empty DeviceTable has no columns (install cuDF for device='gpu' frames)")
        return DeviceTable([], 0)

    def dataframe(self, table):
        raise UnsupportedError("Dask partitions on the GPU are cuDF frames (install cuDF)")


@dataclasses.dataclass(frozen=True)
class _Names:
    """A projection's shape for :meth:`DeviceTable.select`: just the names."""

    names: tuple[str, ...]


CPU = CpuBackend("cpu")
GPU = GpuBackend("gpu")
DEVICE_TABLE = DeviceTableBackend("gpu")


def _gpu():
    try:
        from .decode import gpu
    except ImportError as e:  # pragma: no cover - depends on the install
        raise UnsupportedError(f"device='gpu' needs the gpu extra (pip install 'gtsamples[gpu]'): {e}") from None
    return gpu


def get_backend(device) -> Backend:
    """The backend a ``device`` argument picks: "cpu", "gpu", or "auto" (the
    GPU when it can return its cudf.DataFrame); a :class:`Backend` is itself.
    Unknown devices are a ``ValueError``; whether "gpu" can run here is
    :meth:`Backend.require`'s question (asked before any I/O)."""
    if isinstance(device, Backend):
        return device
    # (a str first: numpy's array(["cpu"]) == "cpu" compared elementwise, and passed)
    if not isinstance(device, str) or device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, not {device!r}")
    if device == "cpu":
        return CPU
    if device == "auto":
        try:
            gpu = _gpu()
        except UnsupportedError:  # pragma: no cover - depends on the install
            return CPU
        return GPU if importlib.util.find_spec("cudf") is not None and gpu.is_gpu_available() else CPU
    _gpu()
    return GPU
