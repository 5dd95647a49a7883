"""``scan_polars``: a ``polars.LazyFrame`` over an artifact or a region.

Built on ``polars.io.plugins.register_io_source``: Polars calls the source with
the query's projection (``with_columns``), its predicate, ``n_rows`` and a
batch size.  The projection becomes the read's ``columns``; the predicate's
conditions on ``__table_id``, ``__tsid`` and the timestamp (``==``, ``is_in``,
``<``/``<=``/``>``/``>=``, ``is_between`` and their ``&``/``|``, literals as
integers, datetimes or dates) become ``series``/``tables`` and ``start``/``end``
(:mod:`.pushdown`).  A plugin that accepts the predicate must apply it, so the
whole predicate then filters every batch read: the pushdown only narrows what
is read, and the result is the one Polars gives on a full read.  ``n_rows``
stops the read once that many rows passed the predicate; ``batch_size`` bounds
the rows of each frame handed to Polars.

The predicate arrives as a Polars expression, read here through its JSON
serialization (``Expr.meta.serialize``); a node this module does not know is
taken as "any row" (nothing pushed for it), never as a condition.
"""

from __future__ import annotations

import io
import json
import pyarrow as pa

from ..plan.split import DEFAULT_MAX_BYTES
from . import pushdown as P
from .source import Source, open_source

__all__ = ["predicate_selection", "scan_polars"]

_POLARS_UNIT = {"Nanoseconds": "ns", "Microseconds": "us", "Milliseconds": "ms"}
_CMP = {"Eq": "==", "Lt": "<", "LtEq": "<=", "Gt": ">", "GtEq": ">="}
_INT_SCALARS = ("Int8", "Int16", "Int32", "Int64", "Int128", "UInt8", "UInt16", "UInt32", "UInt64", "UInt128")
_NS_PER_DAY = 86_400 * 10**9
_MIN_HEAD_BYTES, _HEAD_ROW_BYTES = 64 << 10, 128  # batch bytes for head(n) without a predicate


def _list_values(raw) -> list | None:
    """A list literal's values (Polars stores a Series as Arrow IPC bytes)."""
    try:
        with pa.ipc.open_stream(io.BytesIO(bytes(raw))) as r:
            col = r.read_all().column(0)
    except (pa.ArrowException, ValueError, TypeError):
        return None
    if pa.types.is_timestamp(col.type):
        unit = col.type.unit
        return [None if v is None else ("ns", v * _ns(unit)) for v in col.cast(pa.int64()).to_pylist()]
    if pa.types.is_integer(col.type):
        return col.to_pylist()
    return None


def _fits(v: int, kind: str) -> bool:
    """Does Polars integer type ``kind`` (``Int32``, ``UInt64``, ...) hold ``v``?"""
    bits = int(kind.lstrip("UInt"))
    return 0 <= v < 1 << bits if kind.startswith("U") else -(1 << (bits - 1)) <= v < 1 << (bits - 1)


def _ns(unit: str) -> int:
    return {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}[unit]


def _literal(node):
    """A literal node as ``("int", n)``, ``("ns", instant in ns)``, ``("list", [...])``, or None."""
    if "Cast" in node:  # a literal cast to a datetime: an integer in that unit
        inner, dtype = node["Cast"].get("expr", {}), node["Cast"].get("dtype", {})
        lit = _literal(inner)
        dt = dtype.get("Literal", {}) if isinstance(dtype, dict) else {}
        if lit and lit[0] == "int" and isinstance(dt, dict) and "Datetime" in dt:
            unit = _POLARS_UNIT.get(dt["Datetime"][0])
            return ("ns", lit[1] * _ns(unit)) if unit else None
        kind = dt if isinstance(dt, str) else next(iter(dt), None) if isinstance(dt, dict) and len(dt) == 1 else None
        if lit and lit[0] == "int" and kind in _INT_SCALARS and _fits(lit[1], kind):
            return lit  # an integer cast to an integer type that holds it: the same value
        return None
    lit = node.get("Literal")
    if not isinstance(lit, dict):
        return None
    if "Dyn" in lit:
        v = lit["Dyn"].get("Int") if isinstance(lit["Dyn"], dict) else None
        return ("int", v) if isinstance(v, int) and not isinstance(v, bool) else None
    sc = lit.get("Scalar")
    if not isinstance(sc, dict) or len(sc) != 1:
        return None
    (kind, v), = sc.items()
    if kind in _INT_SCALARS and isinstance(v, int) and not isinstance(v, bool):
        return ("int", v)
    if kind == "Datetime" and isinstance(v, list) and _POLARS_UNIT.get(v[1]):
        return ("ns", v[0] * _ns(_POLARS_UNIT[v[1]]))
    if kind == "Date" and isinstance(v, int):
        return ("ns", v * _NS_PER_DAY)
    if kind == "List":
        vals = _list_values(v)
        return None if vals is None else ("list", vals)
    return None


class _Translator:
    """A Polars predicate (its JSON tree) as :class:`~.pushdown.Box` es over a source's columns."""

    def __init__(self, ts_name: str | None, ts_unit: str | None):
        self.ts_name, self.ts_unit = ts_name, ts_unit

    def boxes(self, node) -> tuple:
        if not isinstance(node, dict) or len(node) != 1:
            return P.ALL
        (kind, body), = node.items()
        if kind == "BinaryExpr":
            return self._binary(body)
        if kind == "Function":
            return self._function(body)
        if kind == "Literal" and isinstance(body, dict) and body.get("Scalar") == {"Boolean": False}:
            return ()  # keeps no row
        return P.ALL

    def _binary(self, body) -> tuple:
        op = body.get("op")
        if op in ("And", "LogicalAnd"):
            return P.conj(self.boxes(body.get("left")), self.boxes(body.get("right")))
        if op in ("Or", "LogicalOr"):
            return P.disj(self.boxes(body.get("left")), self.boxes(body.get("right")))
        cmp = _CMP.get(op)
        if cmp is None:
            return P.ALL
        left, right = body.get("left", {}), body.get("right", {})
        if isinstance(right, dict) and "Column" in right and not (isinstance(left, dict) and "Column" in left):
            left, right, cmp = right, left, P.flip(cmp)
        col = left.get("Column") if isinstance(left, dict) else None
        lit = _literal(right) if isinstance(right, dict) else None
        return self._compare(col, cmp, lit)

    def _compare(self, col, cmp, lit) -> tuple:
        if col is None or lit is None:
            return P.ALL
        if col == self.ts_name:
            if lit[0] == "int":  # an integer compared with the timestamp: in its unit
                return P.time_constraint(cmp, lit[1])
            if lit[0] == "ns":
                return P.time_constraint(cmp, P.to_unit_fraction(lit[1], self.ts_unit))
            return P.ALL
        if lit[0] == "int":
            return P.id_constraint(col, cmp, lit[1])
        return P.ALL

    def _function(self, body) -> tuple:
        fn = body.get("function", {})
        args = body.get("input", [])
        boolean = fn.get("Boolean") if isinstance(fn, dict) else None
        if not isinstance(boolean, dict) or not args or not isinstance(args[0], dict):
            return P.ALL  # "Not" and every other function: nothing pushed
        col = args[0].get("Column")
        if col is None:
            return P.ALL
        if "IsIn" in boolean and len(args) == 2:
            lit = _literal(args[1])
            if lit is None or lit[0] != "list":
                return P.ALL
            vals = [v for v in lit[1] if v is not None]
            return self._is_in(col, vals)
        if "IsBetween" in boolean and len(args) == 3:
            closed = boolean["IsBetween"].get("closed", "Both")
            lo_op = ">=" if closed in ("Both", "Left") else ">"
            hi_op = "<=" if closed in ("Both", "Right") else "<"
            return P.conj(self._compare(col, lo_op, _literal(args[1])), self._compare(col, hi_op, _literal(args[2])))
        return P.ALL

    def _is_in(self, col, vals) -> tuple:
        if col == self.ts_name:
            out = ()
            for v in vals:
                lit = ("ns", v[1]) if isinstance(v, tuple) else ("int", v)
                out = P.disj(out, self._compare(col, "==", lit))
            return out
        if all(isinstance(v, int) for v in vals):
            return P.id_constraint(col, "in", vals)
        return P.ALL


def predicate_selection(predicate, ts_name: str | None, ts_unit: str | None) -> dict:
    """The read arguments (``series``/``tables``/``start``/``end``) that hold every
    row ``predicate`` (a ``polars.Expr``, or None) keeps, for a source whose
    timestamp column is ``ts_name`` in Arrow unit ``ts_unit``."""
    if predicate is None:
        return {}
    try:
        tree = json.loads(predicate.meta.serialize(format="json"))
    except Exception:  # noqa: BLE001 - an expression Polars cannot serialize: push nothing
        return {}
    return P.selection_args(_Translator(ts_name, ts_unit).boxes(tree))


def _frames(src: Source, with_columns, predicate, n_rows, batch_size):
    """The IO plugin's generator: read, filter with the whole predicate, project, cut."""
    import polars as pl

    selection = predicate_selection(predicate, src.ts_name, src.ts_unit)
    need = None
    if with_columns is not None or predicate is not None:
        want = set(src.names if with_columns is None else with_columns)
        if predicate is not None:
            want |= set(predicate.meta.root_names())
        need = [n for n in src.names if n in want] or [src.ts_name or src.names[0]]
    left = n_rows
    # without a predicate the first n_rows rows are the answer: batches of about their size
    # (a block is the unit), not of max_bytes
    small = None if n_rows is None or predicate is not None else max(_MIN_HEAD_BYTES, n_rows * _HEAD_ROW_BYTES)
    for batch in src.batches(need, selection, small):
        df = pl.from_arrow(batch)
        if predicate is not None:
            df = df.filter(predicate)
        if with_columns is not None:
            df = df.select(with_columns)
        if left is not None:
            df = df.head(left)
            left -= df.height
        step = batch_size if batch_size and batch_size > 0 else max(df.height, 1)
        for k in range(0, df.height, step):
            yield df.slice(k, step)
        if left is not None and left <= 0:
            return


def scan_polars(source, *, entry=None, storage_options=None, max_bytes: int = DEFAULT_MAX_BYTES, **read_kw):
    """A ``polars.LazyFrame`` of ``source``'s rows (those of ``read()``, in its order).

    ``source``: an :class:`~gtsamples.Artifact`, a :class:`~gtsamples.Region`, a
    generation directory, or a store root or URL with its catalog ``entry``
    (``storage_options`` for fsspec).  ``max_bytes``: decoded bytes per batch read
    (as ``iter_batches``).  Further keywords are ``iter_batches``' (``dedup=``,
    ``strict=`` for a region, ``parts=`` for an artifact), fixed for every
    collect; the selection itself comes from the query.  The LazyFrame can be
    collected many times (each collect reads again, pushing down that query's
    projection, predicate and ``n_rows``)."""
    import polars as pl
    from polars.io.plugins import register_io_source

    src = open_source(source, entry=entry, storage_options=storage_options, max_bytes=max_bytes, read_kw=read_kw)
    schema = pl.from_arrow(src.schema.empty_table()).schema

    def io_source(with_columns, predicate, n_rows, batch_size):
        return _frames(src, with_columns, predicate, n_rows, batch_size)

    return register_io_source(io_source, schema=schema, is_pure=True, explain_name="gtsamples",
                              explain_detail=repr(src.obj))
