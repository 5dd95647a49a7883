"""gtsamples.backends: get_backend(device) for "cpu", "gpu", "auto" and anything else."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import gtsamples as gs
from gtsamples import backends
from gtsamples.decode.gpu import table as gpu_table
from gtsamples.decode import gpu
from gtsamples.storage import ReadStats
from tests.conftest import assert_tables_equal
from tests.gpu import artifact_cases as A


def test_cpu_backend_decode_then_assemble_is_the_read():
    b = backends.get_backend("cpu")
    assert b.name == "cpu" and b is backends.CPU and backends.get_backend(b) is b
    b.require()  # the CPU backend runs anywhere
    art = A.open_case(A.VECTORS[0])
    stats = ReadStats()
    query = art.query(["value"])
    batch = art.build(query, art.plan(query, stats))  # planned: nothing fetched or decoded yet
    assert batch.data.size == 0 and stats.chunks_decoded == 0 and stats.chunk_bytes == 0
    decoded = b.fetch_decode(art.store, art.part_keys, batch, stats)  # the one place stats count a decode
    assert (stats.blocks_decoded, stats.chunks_decoded) == (len(batch.blocks), len(batch.chunks))
    got = b.assemble(art.manifest, query.projection_for(art.manifest), batch, decoded)
    assert_tables_equal(got, art.read(columns=["value"]))
    fetched, _ = art.fetch_batch(["value"])
    assert_tables_equal(b.assemble(art.manifest, query.projection_for(art.manifest), fetched, b.decode(fetched)), got)


def test_cpu_backend_owns_its_output_type():
    import pyarrow as pa

    b = backends.CPU
    art = A.open_case(A.VECTORS[0])
    whole = art.read()
    schema = whole.schema
    assert b.empty(schema).schema == schema and b.empty(schema).num_rows == 0
    assert b.concat([], schema).equals(b.empty(schema))
    assert_tables_equal(b.concat([whole.slice(0, 3), whole.slice(3)], schema), whole)
    unit = b.stream_unit(whole)
    assert isinstance(unit, pa.RecordBatch) and unit.num_rows == whole.num_rows
    names = [schema.names[2], schema.names[0]]
    assert b.select(whole, names).column_names == names
    # conform: the schema's order and exact types (a RecordBatch too)
    loose = pa.table({n: whole.column(n).cast(pa.int64()) if n == "__table_id" else whole.column(n)
                      for n in reversed(schema.names)})
    assert b.conform(loose, schema).schema == schema
    assert b.conform(unit, schema).schema == schema


@pytest.mark.parametrize("device", ["GPU", "cuda", "", None, "cpu ", ["cpu"], ("gpu",), b"cpu",
                                    # numpy compared these elementwise: accepted as "cpu", or its
                                    # 'truth value of an array ... is ambiguous'
                                    np.array(["cpu"]), np.array("cpu"), np.array(["gpu", "cpu"]), np.array([])])
def test_unknown_devices_are_a_value_error(device):
    with pytest.raises(ValueError, match=r"device must be one of \('cpu', 'gpu', 'auto'\), not "):
        backends.get_backend(device)


def test_gpu_backend_is_named_without_device_work(monkeypatch):
    monkeypatch.setattr(gpu, "is_gpu_available", lambda require_nvcomp=True: pytest.fail("probed the device"))
    assert backends.get_backend("gpu") is backends.GPU and backends.GPU.name == "gpu"


def test_gpu_without_cudf_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "cudf", None)  # import cudf -> ImportError
    monkeypatch.setitem(sys.modules, "pylibcudf", None)
    with pytest.raises(gpu_table.CudfUnavailableError, match="cuDF is not installed") as info:
        backends.get_backend("gpu").require()
    assert isinstance(info.value, gs.UnsupportedError)


def test_gpu_without_a_device_says_so(monkeypatch):
    monkeypatch.setattr(gpu, "is_gpu_available", lambda require_nvcomp=True: False)
    with pytest.raises(gs.UnsupportedError, match=r"needs CuPy and a CUDA device.*use device='cpu'") as info:
        backends.get_backend("gpu").require(cudf=False)
    assert "pip install 'gtsamples[gpu]'" in str(info.value)  # what to install


@pytest.mark.parametrize("available", [False, True])
def test_auto_picks_the_gpu_only_when_it_can_return_a_cudf_frame(monkeypatch, available):
    monkeypatch.setattr(gpu, "is_gpu_available", lambda require_nvcomp=True: available)
    monkeypatch.setattr(backends.importlib.util, "find_spec", lambda name: object() if name == "cudf" else None)
    assert backends.get_backend("auto").name == ("gpu" if available else "cpu")
    monkeypatch.setattr(backends.importlib.util, "find_spec", lambda name: None)  # no cuDF
    assert backends.get_backend("auto").name == "cpu"


class PandasBackend(backends.CpuBackend):
    """An output type added outside the package (docs/architecture.md, "Add an output
    type"): the CPU decode, frames as pandas DataFrames."""

    def assemble(self, manifest, projection, batch, decoded):
        return super().assemble(manifest, projection, batch, decoded).to_pandas()

    def stream_unit(self, frame):
        return backends.Backend.stream_unit(self, frame)

    def from_arrow(self, table):
        return super().from_arrow(table).to_pandas()

    def conform(self, frame, schema):
        return self.from_arrow(frame) if not hasattr(frame, "iloc") else frame[list(schema.names)]

    def select(self, frame, names):
        return frame[list(names)]

    def slice(self, frame, offset, length):
        return frame.iloc[offset:offset + length].reset_index(drop=True)

    def concat(self, frames, schema):
        import pandas as pd

        return pd.concat(frames, ignore_index=True) if frames else self.empty(schema)

    def empty(self, schema):
        return schema.empty_table().to_pandas()


PANDAS = PandasBackend("cpu")


def test_an_output_type_is_one_backend_subclass():
    import pandas as pd

    art = A.open_case(A.VECTORS[0])
    got = art.read(device=PANDAS, columns=["value"], start=2)
    assert isinstance(got, pd.DataFrame)
    pd.testing.assert_frame_equal(got, art.read(columns=["value"], start=2).to_pandas())
    batches = list(art.iter_batches(device=PANDAS, max_bytes=1))
    assert batches and all(isinstance(b, pd.DataFrame) for b in batches)
    pd.testing.assert_frame_equal(pd.concat(batches, ignore_index=True), art.read().to_pandas())
