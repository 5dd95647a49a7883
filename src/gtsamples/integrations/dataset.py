"""``arrow_dataset``: a ``pyarrow.dataset.Dataset`` that DuckDB hands its filters to.

DuckDB scans a ``pyarrow.dataset.Dataset`` by calling its
``scanner(columns=, filter=)`` with the query's projection and the filters it
pushes (a ``pyarrow.compute.Expression``); Lance's datasets get DuckDB's filters
this way, by subclassing ``pyarrow.dataset.Dataset`` and overriding
``scanner``.  DuckDB then drops the columns that only its pushed filters need
(it trusts the scanner to apply them), so the scanner here reads those
columns too, applies the whole filter exactly (``pyarrow.dataset.Scanner``
over the batches read), and projects.

The filter's conditions on ``__table_id``, ``__tsid`` and the timestamp narrow
the read (:mod:`.pushdown`).  pyarrow exposes an expression's tree only as
text, so the filter is read from ``str(filter)``: comparisons ``(a op b)``,
``and``/``or``, ``is_in(x, {value_set=...})`` and ``if_else(...)``; anything
else, or text this module cannot parse, pushes nothing (the whole selection is
read and the filter still applied), never a wrong condition.
"""

from __future__ import annotations

import re
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from ..plan.split import DEFAULT_MAX_BYTES
from . import pushdown as P
from .source import Source, open_source

__all__ = ["SamplesDataset", "arrow_dataset", "filter_selection", "parse_expression"]

_BINARY = re.compile(r" (==|!=|<=|>=|<|>|and not|and|or|xor|\+|-|\*|/) ")
_CALL = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\((.*)\)$", re.S)
_INT = re.compile(r"^-?\d+$")
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d{1,9})?$")
_VALUE_SET = re.compile(r"value_set=([a-z0-9_]+(?:\[[a-z]+\])?):\[(.*?)\]", re.S)
_OPEN, _CLOSE = "([{", ")]}"


def _unquoted(text: str):
    """``(i, ch, depth)`` for each character of ``text`` outside quotes, ``depth``
    being the bracket depth after it."""
    depth, quote = 0, None
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        else:
            depth += (ch in _OPEN) - (ch in _CLOSE)
            yield i, ch, depth


def _top_level(text: str):
    """Positions of ``text`` outside brackets and quotes (depth 0)."""
    return (i for i, ch, depth in _unquoted(text) if depth == 0 and ch not in _OPEN + _CLOSE)


def _closes_at_end(text: str) -> bool:
    """Is ``text``'s first bracket closed by its last character?"""
    for i, ch, depth in _unquoted(text):
        if depth == 0 and ch in _CLOSE:
            return i == len(text) - 1
    return False


def _split_args(text: str) -> list[str]:
    cuts = [i for i in _top_level(text) if text[i] == ","]
    return [p.strip() for p in (text[a + 1:b] for a, b in zip([-1] + cuts, cuts + [len(text)]))]


def parse_expression(text: str, names) -> tuple:
    """``str(pyarrow.compute.Expression)`` as a tree: ``("field", name)``,
    ``("lit", text)`` or ``("call", function, [args], options text)``.  Binary
    operators become calls named by their symbol (``==``, ``and``, ``or``, ...).
    ``names``: the schema's column names (a bare word that is one is a field)."""
    text = text.strip()
    if text.startswith("(") and _closes_at_end(text):
        inner = text[1:-1]
        for i in _top_level(inner):
            m = _BINARY.match(inner, i) if inner[i] == " " else None
            if m:
                op = m.group(1)
                return ("call", op, [parse_expression(inner[:i], names), parse_expression(inner[m.end():], names)], "")
        return parse_expression(inner, names)
    m = _CALL.match(text)
    if m and _closes_at_end(text[len(m.group(1)):]):
        args = _split_args(m.group(2))
        opts = args.pop() if args and args[-1].startswith("{") else ""
        return ("call", m.group(1), [parse_expression(a, names) for a in args], opts)
    return ("field", text) if text in names else ("lit", text)


class _Translator:
    """A parsed filter as :class:`~.pushdown.Box` es."""

    def __init__(self, ts_name: str | None, ts_unit: str | None):
        self.ts_name, self.ts_unit = ts_name, ts_unit

    def boxes(self, node) -> tuple:
        if node[0] == "lit":
            return () if node[1] in ("false", "null[bool]") else P.ALL
        if node[0] != "call":
            return P.ALL
        _, fn, args, opts = node
        if fn in ("and", "and_kleene") and len(args) == 2:
            return P.conj(self.boxes(args[0]), self.boxes(args[1]))
        if fn in ("or", "or_kleene") and len(args) == 2:
            return P.disj(self.boxes(args[0]), self.boxes(args[1]))
        if fn == "if_else" and len(args) == 3:  # rows where (c and a) or (not c and b)
            return P.disj(P.conj(self.boxes(args[0]), self.boxes(args[1])), self.boxes(args[2]))
        if fn in ("==", "<", "<=", ">", ">=") and len(args) == 2:
            a, b = args
            if b[0] == "field" and a[0] == "lit":
                a, b, fn = b, a, P.flip(fn)
            if a[0] == "field" and b[0] == "lit":
                return self._compare(a[1], fn, b[1])
        if fn == "is_in" and len(args) == 1 and args[0][0] == "field":
            return self._is_in(args[0][1], opts)
        return P.ALL

    def _value(self, column: str, text: str):
        """A literal's value for ``column``: an int (IDs; the timestamp in its unit when an
        integer) or an exact fraction of the timestamp's unit; None when not understood."""
        text = text.strip()
        if _INT.match(text):
            return int(text)
        if column == self.ts_name and _TIMESTAMP.match(text):
            whole, _, frac = text.replace(" ", "T").partition(".")
            ns = int(np.datetime64(whole, "s").astype(np.int64)) * 10**9 + int((frac + "000000000")[:9] or 0)
            return P.to_unit_fraction(ns, self.ts_unit)
        return None

    def _compare(self, column: str, op: str, text: str) -> tuple:
        v = self._value(column, text)
        if v is None:
            return P.ALL
        if column == self.ts_name:
            return P.time_constraint(op, Fraction(v))
        return P.id_constraint(column, op, v) if isinstance(v, int) else P.ALL

    def _is_in(self, column: str, opts: str) -> tuple:
        m = _VALUE_SET.search(opts)
        if m is None or "..." in m.group(2):  # long value sets are printed cut short
            return P.ALL
        vals = [v.strip() for v in m.group(2).split(",") if v.strip() and v.strip() != "null"]
        parsed = [self._value(column, v) for v in vals]
        if any(v is None for v in parsed):
            return P.ALL
        if column == self.ts_name:
            out = ()
            for v in parsed:
                out = P.disj(out, P.time_constraint("==", Fraction(v)))
            return out
        return P.id_constraint(column, "in", parsed)


def _fields(node) -> set[str]:
    if node[0] == "field":
        return {node[1]}
    if node[0] == "call":
        return set().union(*(_fields(a) for a in node[2])) if node[2] else set()
    return set()


def filter_selection(expr, names, ts_name: str | None, ts_unit: str | None) -> tuple[dict, set[str] | None]:
    """For a ``pyarrow.compute.Expression`` (or None): the read arguments
    (``series``/``tables``/``start``/``end``) holding every row it keeps, and the
    columns it references (None when its text did not parse: read them all)."""
    if expr is None:
        return {}, set()
    try:
        tree = parse_expression(str(expr), set(names))
    except (ValueError, IndexError, RecursionError):
        return {}, None
    return P.selection_args(_Translator(ts_name, ts_unit).boxes(tree)), _fields(tree)


_NOT_SCANNED = ("a gtsamples SamplesDataset is read only through its own scanner(), to_table(), to_batches(), "
                "head(), take(), count_rows() and filter() (DuckDB calls scanner()); pyarrow's dataset machinery "
                "(Scanner.from_dataset, pyarrow.dataset.dataset([...]), Acero, join, sort_by, fragments) cannot "
                "read it: scan it to a table or a RecordBatchReader first")


class _Refuse(pafs.FileSystemHandler):
    """The file system of the placeholder fragment that stands for a :class:`SamplesDataset`
    in pyarrow's C++ dataset code: every access raises ``NotImplementedError`` saying how
    to read the dataset (without the placeholder that code dereferenced a null dataset)."""

    def __eq__(self, other):
        return isinstance(other, _Refuse)

    def __ne__(self, other):
        return not isinstance(other, _Refuse)

    def get_type_name(self):
        return "gtsamples"

    def normalize_path(self, path):
        return path

    def _refuse(self, *_args, **_kw):
        raise NotImplementedError(_NOT_SCANNED)

    get_file_info = get_file_info_selector = create_dir = delete_dir = delete_dir_contents = _refuse
    delete_root_dir_contents = delete_file = move = copy_file = _refuse
    open_input_stream = open_input_file = open_output_stream = open_append_stream = _refuse


class SamplesDataset(ds.FileSystemDataset):
    """A ``pyarrow.dataset.Dataset`` over an artifact or a region (see the module).

    Only what DuckDB and a plain scan use is provided: :attr:`schema`,
    :meth:`scanner`, :meth:`to_batches`, :meth:`to_table`, :meth:`head`,
    :meth:`take`, :meth:`count_rows` and :meth:`filter`.  Each scan reads afresh
    and once.  pyarrow's C++ dataset code (``Scanner.from_dataset``, a union of
    datasets, Acero's joins and sorts, fragments) sees a placeholder that raises
    ``NotImplementedError`` naming these methods."""

    def __init__(self, source: Source, row_filter=None):
        # pyarrow's dataset functions dereference the C++ dataset behind any Dataset: a
        # placeholder whose one fragment refuses every read, never a null pointer
        fmt, fs = ds.IpcFileFormat(), pafs.PyFileSystem(_Refuse())
        super().__init__([fmt.make_fragment("gtsamples-samples", filesystem=fs)], source.schema, fmt, fs)
        self._src = source
        self._row_filter = row_filter

    def filter(self, expression) -> "SamplesDataset":
        """This dataset with its rows restricted to ``expression`` (ANDed with the scans' filters)."""
        if not isinstance(expression, pc.Expression):
            raise TypeError(f"filter must be a pyarrow.compute.Expression, not {type(expression).__name__}")
        cur = self._row_filter
        return SamplesDataset(self._src, expression if cur is None else cur & expression)

    def get_fragments(self, filter=None):  # noqa: A002
        raise NotImplementedError(_NOT_SCANNED)

    @property
    def files(self):
        """There are no files to read: a tool that reads a FileSystemDataset's files itself is refused."""
        raise NotImplementedError(_NOT_SCANNED)

    def replace_schema(self, schema):
        raise NotImplementedError(_NOT_SCANNED)

    @property
    def schema(self) -> pa.Schema:
        return self._src.schema

    @property
    def source(self):
        """The :class:`~gtsamples.Artifact` or :class:`~gtsamples.Region` read."""
        return self._src.obj

    def scanner(self, columns=None, filter=None, batch_size=None, **_ignored) -> ds.Scanner:  # noqa: A002
        """A one-shot ``pyarrow.dataset.Scanner`` of ``columns`` (names; None: all)
        over the rows ``filter`` keeps, the filter narrowing the read first."""
        names = self._src.names
        if columns is not None:
            if isinstance(columns, (dict, str, bytes)) or not hasattr(columns, "__iter__"):
                raise TypeError(f"columns must be a list of column names, not {type(columns).__name__} "
                                "(expressions are not supported)")
            columns = list(columns)
            unknown = [c for c in columns if c not in names]
            if unknown:
                raise ValueError(f"unknown column(s) {', '.join(map(repr, unknown))}; the columns are {', '.join(names)}")
        if self._row_filter is not None:
            filter = self._row_filter if filter is None else self._row_filter & filter  # noqa: A001
        selection, refs = filter_selection(filter, names, self._src.ts_name, self._src.ts_unit)
        if columns is None or refs is None or not names:
            need = None
        else:
            want = set(columns) | refs
            need = [n for n in names if n in want] or [self._src.ts_name or names[0]]
        reader = self._src.reader(need, selection)
        kw = {} if batch_size is None else {"batch_size": batch_size}
        return ds.Scanner.from_batches(reader, columns=columns, filter=filter, **kw)

    def to_batches(self, columns=None, filter=None, **kw):  # noqa: A002
        return self.scanner(columns, filter, **kw).to_batches()

    def to_table(self, columns=None, filter=None, **kw) -> pa.Table:  # noqa: A002
        return self.scanner(columns, filter, **kw).to_table()

    def head(self, num_rows: int, columns=None, filter=None, **kw) -> pa.Table:  # noqa: A002
        return self.scanner(columns, filter, **kw).head(num_rows)

    def count_rows(self, filter=None, **kw) -> int:  # noqa: A002
        return self.scanner([], filter, **kw).count_rows()

    def __reduce__(self):  # pyarrow's own pickling would pickle the placeholder: the source is enough
        return SamplesDataset, (self._src, self._row_filter)

    def __repr__(self) -> str:
        return f"<gtsamples.SamplesDataset over {self._src.obj!r}>"


def arrow_dataset(source, *, entry=None, storage_options=None, max_bytes: int = DEFAULT_MAX_BYTES,
                  **read_kw) -> SamplesDataset:
    """``source`` (an :class:`~gtsamples.Artifact`, a :class:`~gtsamples.Region`, a
    generation directory, or a store root or URL with its catalog ``entry``) as a
    ``pyarrow.dataset.Dataset`` that DuckDB scans with its projection and filters
    pushed into the read: ``duckdb.sql("SELECT ... FROM ds WHERE ...")``.
    ``max_bytes`` and further keywords as for :func:`~gtsamples.integrations.polars.scan_polars`."""
    return SamplesDataset(open_source(source, entry=entry, storage_options=storage_options, max_bytes=max_bytes,
                                      read_kw=read_kw))
