"""``Artifact.iter_batches(device="gpu")`` on the host emulator: each batch is a
block subset through the GPU read path (grouped fetch, device XXH64, emulated
nvCOMP), a DeviceTable without cuDF; the batches equal the CPU read, and the
quick corruption catalogue streams one block per batch with the CPU read's
error (class, flags, message; ``chunk_flags`` are per batch, so shorter).  The same on a real GPU: tests/gpu/."""

from __future__ import annotations

import pyarrow as pa
import pytest

import gtsamples as gs
from gtsamples.decode.gpu import table as gpu_table
from tests.conftest import assert_tables_equal
from tests.corruption import test_rules as R
from tests.corruption.test_rules import written  # noqa: F401  (module fixture)
from tests.kernels.test_gpu_read_path import _CATALOGUE, _open, artifact, gpu_read  # noqa: F401  (fixtures)


def _stream_gpu(art, **kw):
    """(host table of the streamed DeviceTables, batch count, error)."""
    tables, err = [], None
    try:
        for b in art.iter_batches(device="gpu", **kw):
            assert isinstance(b, gpu_table.DeviceTable)
            tables.append(b.to_arrow())
    except gs.SamplesError as e:
        err = e
    return tables, err


@pytest.mark.parametrize("max_bytes", [1, 20_000, 1 << 40])
@pytest.mark.parametrize("kw", [{}, {"columns": ["ts", "f1"], "start": 200_000},
                                {"series": [(1, 8), (2, 29)], "end": 700_000}, {"start": 10**12}])
def test_streamed_on_the_gpu_path_is_the_cpu_read(artifact, gpu_read, max_bytes, kw):  # noqa: F811
    art = _open(artifact)
    want = _open(artifact).read(**kw)
    tables, err = _stream_gpu(art, max_bytes=max_bytes, **kw)
    assert err is None and tables
    if want.num_rows == 0:
        assert len(tables) == 1
    if max_bytes == 1 and want.num_rows:
        assert len(tables) > 3
    assert_tables_equal(pa.concat_tables(tables), want)


@pytest.mark.parametrize("case", [c for c in _CATALOGUE if c in R.CASES], ids=lambda c: c.id)
def test_catalogue_streams_alike_on_the_gpu_path(case, gpu_read, written, tmp_path):  # noqa: F811
    _, root, entry, gen_dir = R.build(case, written, tmp_path)
    open_fn = R.opener(root, entry, gen_dir, case.gen_dir)
    try:
        art = open_fn()
    except gs.SamplesError:
        return  # does not open: nothing streams
    try:
        want, cpu_err = open_fn().read(**case.read_kw), None
    except gs.SamplesError as e:
        want, cpu_err = None, e
    tables, err = _stream_gpu(art, max_bytes=1, **case.read_kw)
    if cpu_err is None:
        assert err is None, f"{case.id}: {err!r}"
        assert_tables_equal(pa.concat_tables(tables), want)
        return
    assert err is not None, f"{case.id}: the CPU read raised {cpu_err!r}, the GPU stream did not"
    assert (type(err), str(err), getattr(err, "flags", None)) == (type(cpu_err), str(cpu_err),
                                                                 getattr(cpu_err, "flags", None))
