"""gtsamples.argcheck: what the public API takes as an integer argument and as a collection of items."""

import numpy as np
import pytest

from gtsamples.argcheck import is_integer, is_items


@pytest.mark.parametrize("v", [0, -1, 2**70, np.int8(-3), np.uint64(2**64 - 1), np.intc(5)])
def test_integers(v):
    assert is_integer(v)


@pytest.mark.parametrize("v", [True, False, np.bool_(True), np.timedelta64(5, "ns"), np.timedelta64("NaT"),
                               1.0, np.float64(2), "3", b"3", None, 3 + 0j, np.array(4), np.datetime64(1, "s")])
def test_not_integers(v):
    """Bools and numpy's timedelta64 count as integers to Python and numpy; a 0-d array is
    an array."""
    assert not is_integer(v)


@pytest.mark.parametrize("v", [[], ["a"], ("a", "b"), {"a"}, {"a": 1}, range(3), iter([1]), (x for x in []),
                               np.array([1, 2]), np.array(["a"])])
def test_items(v):
    assert is_items(v)


@pytest.mark.parametrize("v", ["ab", b"ab", bytearray(b"ab"), memoryview(b"ab"), np.array(4), np.array("a"), 5,
                               np.int64(5), True, np.bool_(True), np.timedelta64(5, "ns"), None, 1.5])
def test_not_items(v):
    """Strings and bytes-like objects iterate over characters or byte values, a 0-d array
    raises when iterated: none is a collection of items."""
    assert not is_items(v)
