"""The backend registry: ``get_backend(device)`` for a ``device`` argument.

A :class:`Backend` names how a read decodes and what frame it returns:

* ``cpu``: plan + fetch, ``gtsamples.decode.cpu.decode_batch`` (numba +
  libzstd) -> numpy columns, ``gtsamples.frames.to_arrow`` -> ``pyarrow.Table``;
* ``gpu``: plan + a fetch in groups copied to the device as it arrives,
  ``gtsamples.decode.gpu.decode_batch_gpu`` (XXH64, nvCOMP, CUDA kernels) ->
  a :class:`~gtsamples.frames_gpu.DeviceTable`, ``DeviceTable.to_cudf`` ->
  ``cudf.DataFrame``;
* ``auto``: the GPU backend when cuDF imports and a CUDA device is usable,
  else the CPU backend.

Nothing GPU-side is imported until a GPU backend is asked for; the device
checks look ``gtsamples.decode.gpu.is_gpu_available`` up at call time.
"""

from __future__ import annotations

import dataclasses
import importlib.util

from . import runtime
from .errors import UnsupportedError

__all__ = ["DEVICES", "Backend", "CpuBackend", "GpuBackend", "get_backend"]

#: what a ``device`` argument may be
DEVICES = ("cpu", "gpu", "auto")


@dataclasses.dataclass(frozen=True)
class Backend:
    """How a read decodes a batch and assembles its frame (``name``: "cpu" or "gpu")."""

    name: str

    def require(self) -> None:
        """Raise :class:`~gtsamples.errors.UnsupportedError` (naming what to
        install or use instead) unless this backend can run here; called
        before any I/O or device work."""

    def decode_batch(self, batch, **kw):
        """The decoded columns of one fetched :class:`~gtsamples.batch.ChunkBatch`."""
        raise NotImplementedError

    def to_frame(self, manifest, projection, batch, decoded):
        """The frame of one decoded batch, with the exact logical schema."""
        raise NotImplementedError

    def read(self, artifact, columns, series, tables, start, end, stats, *, parts=None):
        """Plan, fetch, decode and assemble one artifact read (``stats``: a
        :class:`~gtsamples.storage.ReadStats` filled on the way)."""
        batch, projection = artifact.plan(columns, series, tables, start, end, stats, parts=parts)
        return self.to_frame(artifact.manifest, projection, batch, self.decode_batch(batch))


class CpuBackend(Backend):
    def decode_batch(self, batch, **kw):
        from .decode import cpu

        return cpu.decode_batch(batch, **kw)

    def to_frame(self, manifest, projection, batch, decoded):
        from . import frames

        return frames.to_arrow(manifest, projection, batch, decoded)


class GpuBackend(Backend):
    def require(self, cudf: bool = True) -> None:
        """Not in a child forked after CUDA was initialised (use spawn), then cuDF
        (``cudf=False``: a read that returns the DeviceTable), then CuPy and a CUDA device."""
        runtime.check_cuda()  # a child forked after CUDA was initialised: say so (CUDA would hang or fail)
        if cudf:
            from . import frames_gpu

            frames_gpu.require_cudf()
        if not _gpu().is_gpu_available(require_nvcomp=False):
            from .decode.nvcomp import GPU_EXTRA_HINT

            raise UnsupportedError("GPU decoding needs CuPy and a CUDA device; none is usable here "
                                   f"(CuPy and libnvcomp: {GPU_EXTRA_HINT}; or use device='cpu')")  # fmt: skip

    def decode_batch(self, batch, **kw):
        return _gpu().decode_batch_gpu(batch, **kw)

    def to_frame(self, manifest, projection, batch, decoded):
        return decoded.to_cudf(manifest, projection)

    def read_device(self, artifact, columns, series, tables, start, end, stats, *, parts=None):
        """The read's :class:`~gtsamples.frames_gpu.DeviceTable` and projection:
        the fetch in groups overlaps the copy to the device, XXH64 on it."""
        from .decode import gpu_fetch

        return gpu_fetch.read_artifact(artifact, columns, series, tables, start, end, stats, parts=parts)

    def read(self, artifact, columns, series, tables, start, end, stats, *, parts=None):
        table, projection = self.read_device(artifact, columns, series, tables, start, end, stats, parts=parts)
        return self.to_frame(artifact.manifest, projection, None, table)


CPU = CpuBackend("cpu")
GPU = GpuBackend("gpu")


def _gpu():
    try:
        from .decode import gpu
    except ImportError as e:  # pragma: no cover - depends on the install
        raise UnsupportedError(f"device='gpu' needs the gpu extra (pip install 'gtsamples[gpu]'): {e}") from None
    return gpu


def get_backend(device: str) -> Backend:
    """The backend a ``device`` argument picks: "cpu", "gpu", or "auto" (the
    GPU when it can return its cudf.DataFrame).  Unknown devices are a
    ``ValueError``; whether "gpu" can run here is :meth:`Backend.require`'s
    question (asked before any I/O)."""
    if device not in DEVICES:
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
