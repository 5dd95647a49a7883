"""Time bounds: what ``start=`` and ``end=`` accept, and how they print.

Every reader (``Artifact.read`` and its relatives, ``Region.read`` and its
relatives, ``gs.to_dask``) and the CLI's ``--start``/``--end`` turn a bound
into an integer in the manifest's timestamp unit with :func:`to_unit`:

* an ``int`` (or numpy integer) is already in the manifest unit;
* an ISO-8601 string (:func:`parse_iso`), a ``datetime.datetime`` or
  ``datetime.date``, a ``numpy.datetime64``, a ``pandas.Timestamp`` or a
  ``pyarrow`` timestamp scalar is an instant: without an offset (naive) it is
  UTC, with one it is converted.  It is rounded *up* to the unit, so the
  half-open ``[start, end)`` keeps exactly the rows at or after ``start`` and
  before ``end``.

Strings are parsed by Arrow's ISO-8601 parser (the one ``pyarrow`` uses to cast
strings to timestamps), to whole seconds; a decimal fraction of the second is
split off first and added exactly.  So every fraction digit keeps its value
whatever the unit (Arrow itself refuses digits finer than the target unit, and
``datetime.fromisoformat`` keeps microseconds), and years 0000-9999 parse for
every unit, leaving the range check to :func:`to_unit` (a nanosecond manifest
spans 1677-2262 only).  Instants are exact fractions of a second
(``fractions.Fraction``) until they are rounded to the unit.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import sys
from fractions import Fraction

import numpy as np

from .argcheck import is_integer
from .format import constants as C

#: Units of a manifest's timestamp column, as counts per second.
PER_SECOND = {"second": 1, "millisecond": 1_000, "microsecond": 1_000_000, "nanosecond": 1_000_000_000}
_DIGITS = {"second": 0, "millisecond": 3, "microsecond": 6, "nanosecond": 9}
_NP_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9, "ps": 10**12, "fs": 10**15, "as": 10**18}
_ARROW_UNIT = {"s": "second", "ms": "millisecond", "us": "microsecond", "ns": "nanosecond"}
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_SECOND = _dt.timedelta(seconds=1)
#: the fraction of the second, split off before Arrow parses the rest (``.`` or ``,``, as ISO-8601 allows)
_FRACTION = re.compile(r"(?<=[0-9]{2}:[0-9]{2}:[0-9]{2})[.,]([0-9]+)", re.ASCII)
_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)
_MAX_FRACTION_DIGITS = 100  # far past attoseconds; bounds the work on hostile input
_FORMS = "YYYY-MM-DD[(T| )hh[:mm[:ss[.fraction]]]][Z|±hh[:mm]], e.g. 2024-05-01 or 2024-05-01T12:30:00.5+02:00"


def parse_iso(text: str, name: str = "value") -> Fraction:
    """An ISO-8601 date or date-time as exact seconds since 1970-01-01T00:00Z:
    ``YYYY-MM-DD``, optionally followed by ``T`` or a space and ``hh``,
    ``hh:mm`` or ``hh:mm:ss[.fraction]`` (any number of fraction digits), and
    an offset ``Z``, ``±hh``, ``±hhmm`` or ``±hh:mm``; without an offset the
    time is UTC.  Raises ``ValueError`` naming ``name`` on anything else."""
    import pyarrow as pa

    s = text.strip()
    frac = Fraction(0)
    m = _FRACTION.search(s)
    if m is not None:
        digits = m[1]
        if len(digits) > _MAX_FRACTION_DIGITS:
            raise ValueError(f"{name}={text!r}: the fraction has more than {_MAX_FRACTION_DIGITS} digits")
        frac = Fraction(int(digits), 10 ** len(digits))
        s = s[: m.start()] + s[m.end():]
    arr = pa.array([s], pa.string())
    for tz in (None, "UTC"):  # Arrow casts strings without an offset to a naive type, those with one to a zoned one
        try:
            return arr.cast(pa.timestamp("s", tz))[0].value + frac
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
    raise ValueError(f"{name}={text!r}: not an ISO-8601 date or date-time ({_FORMS})")


def _datetime64_seconds(value: np.datetime64, name: str) -> Fraction:
    if np.isnat(value):
        raise ValueError(f"{name} is NaT")
    unit, count = np.datetime_data(value.dtype)
    if unit in ("Y", "M", "W", "D", "h", "m"):  # calendar and coarse units: exact in whole seconds
        return Fraction(int(value.astype("datetime64[s]").astype(np.int64)))
    return Fraction(int(value.astype(np.int64)) * count, _NP_PER_SECOND[unit])


def instant(value, name: str = "value") -> Fraction:
    """A string, datetime, numpy/pandas datetime or pyarrow timestamp scalar as
    exact seconds since 1970-01-01T00:00Z (naive = UTC).  ``TypeError`` for other types."""
    if isinstance(value, str):
        if _INTEGER.fullmatch(value.strip()):  # the CLI reads these as integers; a date here would disagree
            raise ValueError(f"{name}={value!r} is a string of digits, not a date: pass an int for a value in the "
                             f"manifest unit, or a date such as 2024-05-01")
        return parse_iso(value, name)
    pa = sys.modules.get("pyarrow")  # a pyarrow scalar implies pyarrow is loaded
    if pa is not None and isinstance(value, pa.TimestampScalar):
        if not value.is_valid:
            raise ValueError(f"{name} is a null timestamp")
        return Fraction(value.value, PER_SECOND[_ARROW_UNIT[value.type.unit]])
    if hasattr(value, "to_datetime64"):  # pandas.Timestamp (its UTC instant when tz-aware) and pandas.NaT
        value = value.to_datetime64()
    if isinstance(value, np.datetime64):
        return _datetime64_seconds(value, name)
    if isinstance(value, _dt.datetime):
        # naive (UTC) unless its offset is known: Python's own test of awareness, which a tzinfo
        # whose utcoffset() is None fails (subtracting the epoch would raise)
        d = value if value.utcoffset() is not None else value.replace(tzinfo=_dt.timezone.utc)
        delta = d - _EPOCH  # exact: days, seconds and microseconds, without astimezone's range limits
        return Fraction(delta // _dt.timedelta(microseconds=1), 1_000_000)
    if isinstance(value, _dt.date):  # its midnight, UTC, like the string "YYYY-MM-DD"
        return Fraction((value - _EPOCH.date()) // _dt.timedelta(days=1) * 86400)
    raise TypeError(f"{name} must be an integer in the manifest unit, an ISO-8601 string or a datetime "
                    f"(datetime, numpy.datetime64, pandas.Timestamp), not {type(value).__name__}")


def to_unit(value, unit: str, name: str) -> int | None:
    """A bound as an integer in the manifest ``unit`` (``None`` stays ``None``).

    Integers are taken as they are; instants (see :func:`instant`) are rounded
    up to the unit.  ``TypeError`` for booleans, floats, durations
    (``numpy.timedelta64``, an integer type to numpy) and other types;
    ``ValueError`` naming ``name`` for an invalid date, NaT, or a value outside
    the unit's i64 range.
    """
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer in the manifest unit or a datetime, not bool")
    if is_integer(value):  # (not a numpy.timedelta64: numpy's is an integer)
        v = int(value)
        if not C.I64_MIN <= v <= C.I64_MAX:
            raise ValueError(f"{name}={v} is outside the i64 range")
        return v
    v = math.ceil(instant(value, name) * PER_SECOND[unit])
    if not C.I64_MIN <= v <= C.I64_MAX:
        raise ValueError(f"{name}={value!r} is outside the range of {unit} timestamps (i64): "
                         f"{format_time(C.I64_MIN, unit)} .. {format_time(C.I64_MAX, unit)}")
    return v


def format_time(value: int, unit: str) -> str:
    """An integer in ``unit`` as an ISO-8601 UTC date-time with the unit's digits,
    e.g. ``2023-11-14T22:13:20.000Z`` (numpy renders the date, so every i64 of
    every unit prints, years past 9999 included)."""
    secs, sub = divmod(int(value), PER_SECOND[unit])
    days, sod = divmod(secs, 86400)
    date = np.datetime_as_string(np.datetime64(days, "D"))  # days, not seconds: i64 seconds' minimum is NaT
    frac = f".{sub:0{_DIGITS[unit]}d}" if unit != "second" else ""
    return f"{date}T{sod // 3600:02d}:{sod // 60 % 60:02d}:{sod % 60:02d}{frac}Z"
