"""Large host buffers are reused once nothing refers to them, never before."""

from __future__ import annotations

import gc

import numpy as np
import pyarrow as pa
import pytest

from gtsamples import buffers

MB = 1 << 20


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(buffers, "_RECYCLER", buffers._Recycler())


def addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_released_block_is_reused():
    a = buffers.pool_array(4 * MB, np.uint8)
    a[:] = 7
    where = addr(a)
    del a
    assert buffers.retained_bytes() == 4 * MB
    b = buffers.pool_array((2, MB // 4), np.uint64)  # same bytes, another shape and type
    assert addr(b) == where and b.shape == (2, MB // 4) and b.flags.writeable and b.flags.c_contiguous
    assert buffers.retained_bytes() == 0


@pytest.mark.parametrize("holder", ["array", "view", "slice_of_view", "arrow_buffer", "arrow_table", "numpy_of_arrow"])
def test_block_in_use_is_never_handed_out(holder):
    a = buffers.pool_array(MB, np.uint64)  # 8 MiB
    a[:] = np.arange(MB, dtype=np.uint64)
    where = addr(a)
    if holder == "array":
        keep = a
    elif holder == "view":
        keep = a.view(np.float64)
    elif holder == "slice_of_view":
        keep = a.reshape(2, -1)[1][10:20]
    elif holder == "arrow_buffer":
        keep = pa.py_buffer(a)
    elif holder == "arrow_table":
        keep = pa.table({"x": pa.Array.from_buffers(pa.uint64(), MB, [None, pa.py_buffer(a)])})
    else:
        keep = pa.Array.from_buffers(pa.uint64(), MB, [None, pa.py_buffer(a)]).to_numpy()
    del a
    gc.collect()
    assert buffers.retained_bytes() == 0
    b = buffers.pool_array(MB, np.uint64)
    assert addr(b) != where
    b[:] = 0  # writing the new block leaves the one in use intact
    got = np.frombuffer(keep, np.uint64) if isinstance(keep, pa.Buffer) else keep
    if holder == "arrow_table":
        got = keep.column("x").to_numpy()
    want = np.arange(MB, dtype=np.uint64)
    if holder == "view":
        want = want.view(np.float64)
    elif holder == "slice_of_view":
        want = want.reshape(2, -1)[1][10:20]
    np.testing.assert_array_equal(got, want)
    del keep, got
    gc.collect()
    c = buffers.pool_array(MB, np.uint64)  # now free again
    assert addr(c) == where


def test_a_block_much_larger_than_the_request_is_not_taken():
    a = buffers.pool_array(16 * MB, np.uint8)
    where = addr(a)
    del a
    b = buffers.pool_array(4 * MB, np.uint8)  # 16 MiB > MAX_WASTE x 4 MiB
    assert addr(b) != where
    c = buffers.pool_array(9 * MB, np.uint8)
    assert addr(c) == where


def test_smallest_fitting_block_is_taken():
    a, b = buffers.pool_array(6 * MB, np.uint8), buffers.pool_array(4 * MB, np.uint8)
    small = addr(b)
    del a, b
    assert addr(buffers.pool_array(3 * MB, np.uint8)) == small


def test_retention_is_bounded_by_bytes(monkeypatch):
    monkeypatch.setattr(buffers, "RETAIN_MAX_BYTES", 5 * MB)
    blocks = [buffers.pool_array(2 * MB, np.uint8) for _ in range(4)]
    del blocks
    keep = buffers.pool_array(64 * MB, np.uint8)  # a request applies the budget
    assert buffers.retained_bytes() == 4 * MB  # the two most recent fit
    del keep


def test_retention_is_bounded_in_time(monkeypatch):
    a = buffers.pool_array(2 * MB, np.uint8)
    del a
    monkeypatch.setattr(buffers, "RETAIN_SECONDS", -1.0)
    b = buffers.pool_array(2 * MB, np.uint8)
    assert len(buffers._RECYCLER._blocks) == 1  # a's block was dropped, b got a new one
    del b
    assert buffers.retained_bytes() == 2 * MB  # b, released just now (the limit applies at the next request)
    keep = buffers.pool_array(MB, np.uint8)
    assert buffers.retained_bytes() == 0
    del keep


def test_trim_gives_released_blocks_back():
    a = buffers.pool_array(3 * MB, np.uint8)
    keep = buffers.pool_array(3 * MB, np.uint8)
    del a
    assert buffers.retained_bytes() == 3 * MB
    buffers.trim()
    assert buffers.retained_bytes() == 0
    keep[:] = 1  # a block in use stays usable
    del keep
    assert buffers.retained_bytes() == 3 * MB


def test_small_arrays_come_from_numpy():
    a = buffers.pool_array(100, np.float64)
    assert a.shape == (100,) and a.base is None
    del a
    assert buffers.retained_bytes() == 0
