"""Filter pushdown: a query engine's predicate reduced to a read's selection.

A predicate is translated (by :mod:`.polars` or :mod:`.arrow_dataset`) into a
union of :class:`Box` es, each a conjunction of constraints on ``__table_id``,
``__tsid`` and the timestamp that a :class:`~gtsamples.plan.Selection` can
express.  Whatever a translator does not understand becomes the unconstrained
box, so the union always holds every row the predicate keeps (a superset); the
engine's own filter then runs on the rows read, so the result is exact and the
pushdown only decides how much is read.  :func:`selection_args` folds the union
into one selection: ``series`` (every box names its tables and tsids), else
``tables``, and the hull ``[start, end)`` of the boxes' time intervals.
"""

from __future__ import annotations

import dataclasses
import itertools
from fractions import Fraction

__all__ = ["ALL", "Box", "IdRange", "MAX_BOXES", "MAX_IDS", "conj", "disj", "id_constraint", "selection_args",
           "time_constraint", "to_unit_fraction"]

#: Boxes kept by a union or an intersection before they are merged into their hull.
MAX_BOXES = 64
#: An identifier range is enumerated into a set when it holds at most this many values
#: (and a series set is formed when it holds at most MAX_IDS ** 2 pairs).
MAX_IDS = 4096

_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_UNIT_NS = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
_OPS = ("==", "<", "<=", ">", ">=")
_FLIP = {"==": "==", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


@dataclasses.dataclass(frozen=True)
class IdRange:
    """The inclusive interval ``[lo, hi]`` of identifiers."""

    lo: int
    hi: int


def _ids_and(a, b):
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, frozenset) and isinstance(b, frozenset):
        return a & b
    if isinstance(a, IdRange) and isinstance(b, IdRange):
        return IdRange(max(a.lo, b.lo), min(a.hi, b.hi))
    s, r = (a, b) if isinstance(a, frozenset) else (b, a)
    return frozenset(v for v in s if r.lo <= v <= r.hi)


def _ids_empty(a) -> bool:
    return (isinstance(a, frozenset) and not a) or (isinstance(a, IdRange) and a.lo > a.hi)


def _ids_hull(items):
    if any(a is None for a in items):
        return None
    if all(isinstance(a, frozenset) for a in items):
        return frozenset().union(*items)
    los = [min(a) if isinstance(a, frozenset) else a.lo for a in items if not _ids_empty(a)]
    his = [max(a) if isinstance(a, frozenset) else a.hi for a in items if not _ids_empty(a)]
    return IdRange(min(los), max(his)) if los else frozenset()


@dataclasses.dataclass(frozen=True)
class Box:
    """Rows whose table ID, tsid and timestamp meet every constraint: an ID
    constraint is None (any), a frozenset or an :class:`IdRange`; the time is
    the half-open ``[lo, hi)`` in the source's unit (None: unbounded)."""

    tables: object = None
    tsids: object = None
    lo: int | None = None
    hi: int | None = None

    def __and__(self, other: "Box") -> "Box":
        lo = self.lo if other.lo is None else other.lo if self.lo is None else max(self.lo, other.lo)
        hi = self.hi if other.hi is None else other.hi if self.hi is None else min(self.hi, other.hi)
        return Box(_ids_and(self.tables, other.tables), _ids_and(self.tsids, other.tsids), lo, hi)

    @property
    def empty(self) -> bool:
        return _ids_empty(self.tables) or _ids_empty(self.tsids) or (
            self.lo is not None and self.hi is not None and self.lo >= self.hi)


ALL = (Box(),)  # the predicate nothing is known about: every row


def _hull(boxes) -> tuple[Box, ...]:
    if not boxes:
        return ()
    lo = None if any(b.lo is None for b in boxes) else min(b.lo for b in boxes)
    hi = None if any(b.hi is None for b in boxes) else max(b.hi for b in boxes)
    return (Box(_ids_hull([b.tables for b in boxes]), _ids_hull([b.tsids for b in boxes]), lo, hi),)


def _bounded(boxes) -> tuple[Box, ...]:
    boxes = tuple(b for b in boxes if not b.empty)
    return boxes if len(boxes) <= MAX_BOXES else _hull(boxes)


def conj(a, b) -> tuple[Box, ...]:
    """The boxes of ``a AND b`` (their pairwise intersections)."""
    return _bounded(x & y for x, y in itertools.product(a, b))


def disj(a, b) -> tuple[Box, ...]:
    """The boxes of ``a OR b``."""
    return _bounded(tuple(a) + tuple(b))


def id_constraint(column: str, op: str, value) -> tuple[Box, ...]:
    """``column op value`` for ``__table_id``/``__tsid`` (``op`` one of ``==``,
    ``<``, ``<=``, ``>``, ``>=``, ``in`` with a list, ``between`` with
    ``(lo, hi)`` inclusive); ALL for anything else."""
    key = {"__table_id": "tables", "__tsid": "tsids"}.get(column)
    if key is None:
        return ALL
    if op == "in":
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return ALL
        ids = frozenset(value)
    elif op == "between":
        lo, hi = value
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi)):
            return ALL
        ids = IdRange(lo, hi)
    elif isinstance(value, int) and not isinstance(value, bool) and op in _OPS:
        big = 1 << 64
        ids = {"==": frozenset([value]), "<": IdRange(-1, value - 1), "<=": IdRange(-1, value),
               ">": IdRange(value + 1, big), ">=": IdRange(value, big)}[op]
    else:
        return ALL
    return _bounded((Box(**{key: ids}),))


def to_unit_fraction(value_ns: Fraction | int, unit: str) -> Fraction:
    """An instant in nanoseconds as an exact fraction of ``unit`` (``s``, ``ms``, ``us``, ``ns``)."""
    return Fraction(value_ns) / _UNIT_NS[unit]


def time_constraint(op: str, value: Fraction | int) -> tuple[Box, ...]:
    """``ts op value`` with ``value`` in the source's unit.  An exact integer is
    taken exactly; a fractional one widens the interval by a unit on each side
    (an engine may round the literal either way before comparing)."""
    if op not in _OPS:
        return ALL
    value = Fraction(value)
    if value.denominator == 1:
        x = int(value)
        lo, hi = {"==": (x, x + 1), "<": (None, x), "<=": (None, x + 1), ">": (x + 1, None),
                  ">=": (x, None)}[op]
    else:
        f = value.numerator // value.denominator
        lo, hi = {"==": (f, f + 2), "<": (None, f + 2), "<=": (None, f + 2), ">": (f, None),
                  ">=": (f, None)}[op]
    return _bounded((Box(lo=lo, hi=hi),))


def flip(op: str) -> str:
    """``a op b`` as ``b flip(op) a``."""
    return _FLIP[op]


def _finite(ids):
    if isinstance(ids, IdRange):
        return frozenset(range(max(ids.lo, 0), ids.hi + 1)) if ids.hi - ids.lo < MAX_IDS else None
    return ids


def selection_args(boxes) -> dict:
    """The read arguments (``series``, ``tables``, ``start``, ``end``) of the
    smallest selection that holds the union of ``boxes``: an empty union is an
    empty selection (``tables=[]``)."""
    boxes = [b for b in boxes if not b.empty]
    if not boxes:
        return {"tables": []}
    out: dict = {}
    tables = [_finite(b.tables) for b in boxes]
    tsids = [_finite(b.tsids) for b in boxes]
    if all(t is not None for t in tables):
        if all(s is not None for s in tsids) and sum(len(t) * len(s) for t, s in zip(tables, tsids)) <= MAX_IDS ** 2:
            out["series"] = sorted({p for t, s in zip(tables, tsids) for p in itertools.product(t, s)
                                    if 0 <= p[0] < 1 << 32 and 0 <= p[1] < 1 << 64})
        else:
            out["tables"] = sorted({t for ts in tables for t in ts if 0 <= t < 1 << 32})
    start = min(b.lo for b in boxes) if all(b.lo is not None for b in boxes) else None
    end = max(b.hi for b in boxes) if all(b.hi is not None for b in boxes) else None
    if (start is not None and start > _I64_MAX) or (end is not None and end <= _I64_MIN):
        return {"tables": []}  # no timestamp (an i64) is in [start, end)
    if start is not None and start > _I64_MIN:
        out["start"] = start
    if end is not None and end <= _I64_MAX:
        out["end"] = end
    return out
