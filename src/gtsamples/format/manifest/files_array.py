"""The ``files`` array of a large manifest read column-wise (F4): the same
document as :func:`.checks.load_strict_json` gives, with the array as
:class:`.checks.PartRows`, in bounded memory."""

from __future__ import annotations

import array
import json
import os
import re
from typing import Any

import numpy as np

from ...errors import CorruptArtifactError
from .. import constants as C
from .checks import (ID_KEYS, PART_KEYS, PART_RANGES, Broken, PartRows, check_duplicates, load_strict_json,
                     no_duplicates, part_row, reject_constant)
from .model import PART_COLUMNS, PART_DTYPE, PartDescriptor

# --- the files array, column-wise ------------------------------------------------------
#
# A manifest of many parts is mostly its ``files`` array: ~155 bytes per part, so
# up to ~430,000 parts under the 64 MiB limit.  Parsing it as Python objects
# (three dicts and ten ints per part, plus an object_pairs_hook call per dict)
# costs seconds and hundreds of MiB, so ``parse_manifest`` reads the array
# column-wise instead when the document is over SCAN_FILES_BYTES:
#
# * ``load_scanning_files`` finds the top-level ``"files": [`` and scans the
#   array (``_scan_files``); the rest of the document, with the array replaced by
#   a placeholder string, is parsed by ``json`` as before (``no_duplicates``).
# * ``_scan_files`` takes the first element's exact text as a template (the
#   element itself is parsed by ``json`` and must be a well-formed part object:
#   the eight keys, ``first``/``last`` with the two identity keys, integer values,
#   any key order, any whitespace).  Then, 1 MiB at a time, it checks that the text
#   is that template repeated -- identical bytes except that each integer may be
#   any run of ``0-9`` and ``-`` -- and hands the runs, comma-separated, to
#   ``json.loads`` as one flat array (which rejects whatever is not a JSON
#   number: ``01``, ``-``, ``1-2``).  The integers go straight into a
#   ``PART_DTYPE`` array: no per-part Python object.
# * Anything else (keys in another order than the first element's, changed
#   whitespace, escapes, a part that is not well-formed) continues element by
#   element from that chunk: each element is parsed by ``json`` (strict hook) and
#   made a row by ``part_row``, or its broken rule is kept; nothing else is retained.
#   The template's integers become rows only where each is within its column's
#   range (``PART_RANGES``); elsewhere their parts go through ``part_row`` too.
# * Any JSON-level error (syntax, duplicate key, NaN, depth) anywhere makes the
#   whole document be parsed once more by ``json`` keeping nothing
#   (``check_duplicates``), which raises the first error exactly as a plain
#   parse would.  Broken rules are raised only after the whole document is known
#   to be strict JSON: the result is the document a plain parse gives, with its
#   ``files`` as :class:`PartRows` (tests/format/test_manifest_files.py compares them).
#
# A valid 62 MiB manifest of 400k parts thus parses in ~0.6 s with ~120 bytes of memory per
# part beyond the document, against ~5 s and ~900 bytes per part object by object
# (benchmarks/FUZZING.md F4; tests/test_bad_files.py::test_manifest_400k_parts_bounded).


class _NotStrictJSON(Exception):
    """Raised inside the scan: the document is not strict JSON somewhere."""


def _json_key_pattern(key: str) -> bytes:
    """A regex for a JSON string literal spelling ``key`` (each character literal
    or as a ``\\uXXXX`` escape)."""
    out = []
    for ch in key:
        hexes = "".join(f"[{h}{h.upper()}]" if h.isalpha() else h for h in f"{ord(ch):04x}")
        out.append(f"(?:{re.escape(ch)}|\\\\u{hexes})")
    return ('"' + "".join(out) + '"').encode()


_WS = rb"[ \t\n\r]*"
_FILES_RE = re.compile(_json_key_pattern("files") + _WS + rb":" + _WS + rb"(\[)" + _WS)
_SEP_RE = re.compile(_WS + rb"," + _WS)
_SEP_TEXT_RE = re.compile(r"[ \t\n\r]*,[ \t\n\r]*")
_SEP_OR_CLOSE_RE = re.compile(r"[ \t\n\r]*([,\]])[ \t\n\r]*")
_TO_ZERO = bytes.maketrans(b"123456789-", b"0000000000")
_NOT_NUMERIC = bytes(b for b in range(256) if b not in b"0123456789-,")
_CHUNK = 1 << 20
_FLUSH_ROWS = 1 << 16
_TEMPLATE_WINDOW = 1 << 14


def _collapse(b: bytes) -> bytes:
    """``b`` with each run of ``0-9`` and ``-`` replaced by one ``0``."""
    x = np.frombuffer(b.translate(_TO_ZERO), np.uint8)
    if x.shape[0] < 2:
        return x.tobytes()
    d = x == 48
    keep = np.empty(x.shape[0], bool)
    keep[0] = True
    np.logical_and(d[1:], d[:-1], out=keep[1:])
    np.logical_not(keep[1:], out=keep[1:])
    return x[keep].tobytes()


def _hole_columns(pairs: Any) -> tuple[str, ...] | None:
    """For a part object parsed as nested pair lists: the column of each integer
    in text order, or None if it is not a well-formed part object."""
    if type(pairs) is not list or len(pairs) != len(PART_KEYS.names) or {k for k, _ in pairs} != PART_KEYS.required:
        return None
    cols = []
    for k, v in pairs:
        if k in ("first", "last"):
            if type(v) is not list or len(v) != 2 or {kk for kk, _ in v} != ID_KEYS.required:
                return None
            for kk, vv in v:
                if type(vv) is not int:
                    return None
                cols.append(f"{k}_{kk}")
        elif type(v) is not int:
            return None
        else:
            cols.append(k)
    return tuple(cols)


_PAIRS_SCAN = json.JSONDecoder(object_pairs_hook=list, parse_constant=reject_constant).scan_once
_STRICT_SCAN = json.JSONDecoder(object_pairs_hook=no_duplicates, parse_constant=reject_constant).scan_once


class _RowSink:
    """Collects rows until the first element that is not a well-formed part."""

    def __init__(self):
        self.buf = np.empty(0, PART_DTYPE)
        self.n = 0  # rows in buf
        self.pending: list[tuple] = []
        self.bad: Broken | None = None
        self.count = 0  # elements seen

    def reserve(self, rows: int) -> None:
        if rows > self.buf.shape[0]:
            buf = np.empty(rows, PART_DTYPE)
            buf[:self.n] = self.buf[:self.n]
            self.buf = buf

    def add_array(self, a: np.ndarray, count: int) -> None:
        self._flush()
        self.reserve(max(self.n + a.shape[0], 2 * self.buf.shape[0]) if self.n + a.shape[0] > self.buf.shape[0] else 0)
        self.buf[self.n:self.n + a.shape[0]] = a
        self.n += a.shape[0]
        self.count += count

    def add_element(self, el: Any) -> None:
        self.count += 1
        if self.bad is not None:
            return
        try:
            r = part_row(el)
        except Broken as e:
            self.bad = e
            return
        self.pending.append(r)
        if len(self.pending) >= _FLUSH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self.pending:
            a = np.array(self.pending, dtype=PART_DTYPE)
            self.pending = []
            self.count -= a.shape[0]
            self.add_array(a, a.shape[0])

    def parts(self) -> PartRows:
        self._flush()
        buf = self.buf
        if buf.shape[0] != self.n:
            buf.resize(self.n, refcheck=False)  # in place: nothing else refers to buf
        return PartRows(buf, self.bad, self.count)


def _chunk_rows(sink: _RowSink, vals: list, cols: tuple[str, ...], m: int) -> None:
    """The integers of ``m`` template parts (text order) into the sink."""
    if sink.bad is not None:
        sink.count += m
        return
    k = len(cols)
    a = None
    for code, dtype in (("Q", np.uint64), ("q", np.int64)):  # all of them as u64, else all as i64
        try:
            raw = np.frombuffer(array.array(code, vals), dtype=dtype).reshape(m, k)
        except OverflowError:
            continue
        if dtype is np.uint64:
            fits = all(int(raw[:, h].max()) <= C.I64_MAX for h, c in enumerate(cols) if c.endswith("timestamp"))
        else:
            fits = all(int(raw[:, h].min()) >= 0 for h, c in enumerate(cols) if not c.endswith("timestamp"))
        if fits:
            raw = raw.view(np.uint64)
            if cols != PART_COLUMNS:
                raw = raw[:, [cols.index(c) for c in PART_COLUMNS]]
            a = np.ascontiguousarray(raw).view(PART_DTYPE).reshape(m)
        break
    if a is None:  # u64 columns past i64 and negative timestamps both: column by column
        a = np.empty(m, PART_DTYPE)
        try:
            for h, name in enumerate(cols):
                a[name] = vals[h::k]
        except OverflowError:
            a = None
    if a is not None and not all(int(a[c].max()) <= hi for c, (_, hi, kind) in zip(PART_COLUMNS, PART_RANGES)
                                 if kind == "u32"):
        a = None
    if a is None:  # some value outside its range: element by element, each through part_row
        for t in range(m):
            r = tuple(dict(zip(cols, vals[t * k:(t + 1) * k]))[c] for c in PART_COLUMNS)
            sink.add_element(PartDescriptor.from_row(r).to_json_obj())
        return
    sink.add_array(a, m)


def _scan_files(data: bytes, start: int) -> tuple[PartRows, int]:
    """Scan the elements of the array whose first element (or ``]``) is at
    ``start``; return them and the position of the closing ``]``."""
    sink = _RowSink()
    if data[start:start + 1] == b"]":
        return sink.parts(), start
    close = data.find(b"]", start)  # where the array ends if its elements are part objects (they hold no "]")
    end = close
    if end > start and data[end - 1] in b" \t\n\r":
        end = start + len(data[start:close].rstrip(b" \t\n\r"))
    pos = start
    while close > 0:
        template = _template(data, pos, end)
        if template is not None:
            pos = _template_chunks(sink, data, pos, end, template)
            if pos >= end:
                return sink.parts(), close
        # element by element through about one chunk, then a template again
        pos, ok = _window_elements(sink, data, pos, end)
        if not ok:
            break
        if pos >= end:
            return sink.parts(), close
    return _text_elements(sink, data, pos)


def _template_chunks(sink: _RowSink, data: bytes, pos: int, end: int, template) -> int:
    """Template parts from ``pos``, a chunk at a time; where they stop (``>= end``: all)."""
    t0, sep, head, cols = template
    unit = t0 + sep
    k = len(cols)
    sink.reserve(sink.n + (end - pos + len(sep)) // len(unit))  # at most this many parts fit
    while pos < end:
        q = data.find(head, pos + _CHUNK, end) if pos + _CHUNK < end else -1
        if q < 0:
            q = end
        chunk = data[pos:q]
        c = _collapse(chunk)
        m, r = divmod(len(c) + len(sep), len(unit))
        if r or m == 0 or c != unit * (m - 1) + t0:
            return pos  # not the template
        try:
            vals = json.loads(b"[" + chunk.translate(None, _NOT_NUMERIC) + b"]")
        except ValueError:
            raise _NotStrictJSON from None
        if len(vals) != m * k:  # pragma: no cover - implied by the template check
            return pos
        _chunk_rows(sink, vals, cols, m)
        pos = q + len(sep)
    return pos


def _window_elements(sink: _RowSink, data: bytes, pos: int, end: int) -> tuple[int, bool]:
    """Elements one by one (``json``) from ``pos`` through about one chunk of
    ASCII text; return where the next element starts (``end``: the array is
    done) and True, or where to go on with ``_text_elements`` and False (not
    ASCII, an element running past the window, a JSON error)."""
    stop = min(end, pos + _CHUNK)
    w = data[pos:min(end, stop + _TEMPLATE_WINDOW)]
    if not w.isascii():
        return pos, False
    text = w.decode("ascii")
    i = 0
    while True:
        try:
            el, j = _STRICT_SCAN(text, i)
        except (StopIteration, ValueError, RecursionError):
            return pos + i, False
        if pos + j == end:
            sink.add_element(el)
            return end, True
        m = _SEP_TEXT_RE.match(text, j)
        if m is None or m.end() == len(text):
            return pos + i, False
        sink.add_element(el)
        i = m.end()
        if pos + i >= stop:
            return pos + i, True


def _text_elements(sink: _RowSink, data: bytes, pos: int) -> tuple[PartRows, int]:
    """Elements one by one (``json.scan_once``) from ``pos`` to the closing bracket."""
    text = data[pos:].decode("utf-8")
    i = 0
    while True:
        try:
            el, i = _STRICT_SCAN(text, i)
        except (StopIteration, ValueError, RecursionError):
            raise _NotStrictJSON from None
        sink.add_element(el)
        m = _SEP_OR_CLOSE_RE.match(text, i)
        if m is None:
            raise _NotStrictJSON
        if m.group(1) == "]":
            k = m.start(1)
            return sink.parts(), pos + (k if text.isascii() else len(text[:k].encode("utf-8")))
        i = m.end()


def _template(data: bytes, start: int, end: int):
    """The first element as a template: (collapsed text, separator, chunk-boundary
    marker, column of each integer), or None if it does not make one."""
    win = data[start:min(end, start + _TEMPLATE_WINDOW)]
    if not win.isascii():
        return None
    try:
        pairs, n0 = _PAIRS_SCAN(win.decode("ascii"), 0)
    except (StopIteration, ValueError, RecursionError):
        return None
    cols = _hole_columns(pairs)
    s0 = win[:n0]
    if cols is None or b"\\" in s0:  # escapes hold digits: not a template
        return None
    t0 = _collapse(s0)
    if t0.count(b"0") != len(cols):  # pragma: no cover - the integers are the only digits
        return None
    if start + n0 == end:
        sep = b","
    else:
        m = _SEP_RE.match(data, start + n0, end)
        if m is None:
            return None
        sep = m.group(0)
    first_key_end = s0.index(b'"', s0.index(b'"') + 1) + 1
    return t0, sep, sep + s0[:first_key_end], cols


def load_scanning_files(data: bytes, what: str) -> Any:
    """``load_strict_json`` for a manifest, with its ``files`` array as :class:`PartRows`
    (the same document and the same first error, see above)."""
    data = bytes(data)
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorruptArtifactError(f"{what}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
    m = _FILES_RE.search(data)
    if m is None:
        return load_strict_json(data, what)
    placeholder = "\0gtsamples-files-" + os.urandom(16).hex()
    try:
        parts, close = _scan_files(data, m.end())
        outer = data[:m.start(1)] + json.dumps(placeholder).encode() + data[close + 1:]
        doc = json.loads(outer.decode("utf-8"), object_pairs_hook=no_duplicates, parse_constant=reject_constant)
    except (_NotStrictJSON, ValueError, RecursionError):
        try:
            json.loads(data.decode("utf-8"), object_pairs_hook=check_duplicates, parse_constant=reject_constant)
        except (ValueError, RecursionError) as e:
            raise CorruptArtifactError(f"{what}: not strict JSON: {e}") from None
        return load_strict_json(data, what)  # pragma: no cover - the scan refused strict JSON
    if type(doc) is dict and doc.get("files") == placeholder:
        doc["files"] = parts
    # else the array scanned was not the top-level "files" but one nested before it:
    # a key no object but the top level may hold, refused before "files" is looked at.
    return doc


