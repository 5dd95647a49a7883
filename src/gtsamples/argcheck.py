"""What the public API takes as an integer argument, and as a collection of items,
decided in one place.

An integer argument is a Python ``int`` or a numpy integer, except three values that
Python or numpy count as integers and that are always a caller's mistake here: ``bool``
and ``numpy.bool_`` (``True`` is not a count of 1), and ``numpy.timedelta64``, which numpy
makes a subclass of ``numpy.signedinteger`` (a duration is neither a count, nor an
identity, nor an instant; ``int()`` would read ``np.timedelta64(5, 'D')`` as 5).  Floats
and strings are not integers either (``int()`` would truncate or parse them).  Each
caller raises its own message, which names its argument and what it counts.

A collection argument (``columns``, ``series``, ``tables``, ``parts``) is an iterable of
items, except values that iterate but are not collections of items: a string or bytes-like
object (``"ab"`` would be read as the names ``"a"`` and ``"b"``, ``b"ab"`` as the values 97
and 98) and a 0-d numpy array (it has ``__iter__``, and iterating it raises numpy's error).
"""

from __future__ import annotations

import numpy as np

__all__ = ["is_integer", "is_items"]

_INTEGER_TYPES = (int, np.integer)
_NOT_INTEGERS = (bool, np.bool_, np.timedelta64)
_NOT_ITEMS = (str, bytes, bytearray, memoryview)


def is_integer(v) -> bool:
    """True when ``v`` is an integer argument (see the module's note)."""
    return isinstance(v, _INTEGER_TYPES) and not isinstance(v, _NOT_INTEGERS)


def is_items(v) -> bool:
    """True when ``v`` is a collection argument, an iterable of items (see the module's note)."""
    return hasattr(v, "__iter__") and not isinstance(v, _NOT_ITEMS) and getattr(v, "ndim", 1) != 0
