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

Instants are exact fractions of a second since the epoch (``fractions.Fraction``):
nanosecond (and finer) digits keep their value whatever the unit, and a value
outside the unit's i64 range is refused instead of wrapping.

The string grammar is this module's own, not ``datetime.fromisoformat`` or
``numpy.datetime64``: Python 3.10's ``fromisoformat`` refuses ``Z``, basic and
week forms that 3.11 accepts, both keep only microseconds, and numpy silently
overflows on finer-than-nanosecond fractions of present-day dates and reads
``"20240501"`` as the year 20,240,501 (tests/test_timebounds.py checks this module
against fromisoformat, numpy and timedelta arithmetic).
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import sys
from fractions import Fraction

import numpy as np

from .format import constants as C

#: Units of a manifest's timestamp column, as counts per second.
PER_SECOND = {"second": 1, "millisecond": 1_000, "microsecond": 1_000_000, "nanosecond": 1_000_000_000}
_DIGITS = {"second": 0, "millisecond": 3, "microsecond": 6, "nanosecond": 9}
_EPOCH_ORDINAL = _dt.date(1970, 1, 1).toordinal()
_ARROW_UNIT = {"s": "second", "ms": "millisecond", "us": "microsecond", "ns": "nanosecond"}
#: numpy datetime64 units as seconds (Y and M are calendar units, handled apart).
_NP_UNIT = {"W": Fraction(604800), "D": Fraction(86400), "h": Fraction(3600), "m": Fraction(60), "s": Fraction(1),
            "ms": Fraction(1, 10**3), "us": Fraction(1, 10**6), "ns": Fraction(1, 10**9),
            "ps": Fraction(1, 10**12), "fs": Fraction(1, 10**15), "as": Fraction(1, 10**18)}

_ISO = re.compile(
    r"(?:(?P<y>[+-]\d{4,15}|\d{4})-(?:"  # extended; expanded years are signed (15 digits: past any i64)
    r"(?P<m>\d{2})(?:-(?P<d>\d{2}))?"  # YYYY-MM-DD, YYYY-MM
    r"|(?P<o>\d{3})"  # YYYY-DDD
    r"|W(?P<w>\d{2})(?:-(?P<wd>\d))?)"  # YYYY-Www-D, YYYY-Www
    r"|(?P<by>\d{4})(?:"  # basic: four-digit years only
    r"(?P<bm>\d{2})(?P<bd>\d{2})|(?P<bo>\d{3})|W(?P<bw>\d{2})(?P<bwd>\d)?))"
    r"(?:[Tt ](?P<time>[^Zz+-]*)(?P<tz>[Zz]|[+-]\d{2}(?::?\d{2}(?::?\d{2})?)?)?)?",
    re.ASCII,
)
_TIME = [re.compile(t + r"(?:[.,](?P<f>\d+))?", re.ASCII) for t in (
    r"(?P<h>\d{2})(?::(?P<mi>\d{2})(?::(?P<s>\d{2}))?)?",  # hh:mm:ss
    r"(?P<h>\d{2})(?:(?P<mi>\d{2})(?P<s>\d{2})?)?",  # hhmmss
)]
# seconds in an offset are not ISO-8601, but Python's isoformat() writes them for historical zones
_TZ = re.compile(r"(?P<sign>[+-])(?P<h>\d{2})(?::?(?P<m>\d{2})(?::?(?P<s>\d{2}))?)?", re.ASCII)
_INTEGER = re.compile(r"[+-]?\d+", re.ASCII)
_MAX_FRACTION_DIGITS = 100  # far past attoseconds; bounds the work on hostile input
_EXAMPLES = "e.g. 2024-05-01, 2024-05-01T12:30Z, 2024-05-01 14:30:00.123456789+02:00"


def _leap(y: int) -> bool:
    return y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)


def _month_days(y: int, m: int) -> int:
    return 29 if m == 2 and _leap(y) else (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)[m - 1]


def days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date, for any year
    (H. Hinnant's ``days_from_civil``; Python ints do not overflow)."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m - 3 if m > 2 else m + 9) + 2) // 5 + d - 1
    return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468


def civil_from_days(z: int) -> tuple[int, int, int]:
    """The inverse of :func:`days_from_civil`: (year, month, day)."""
    z += 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (m <= 2), m, d


def _week_date_days(y: int, w: int, wd: int) -> int:
    """Days since the epoch of ISO week date (year, week, weekday 1=Monday)."""
    jan4 = days_from_civil(y, 1, 4)
    monday1 = jan4 - (jan4 + 3) % 7  # 1970-01-01 was a Thursday: (days + 3) % 7 is Monday=0
    return monday1 + 7 * (w - 1) + wd - 1


def _weeks_in_year(y: int) -> int:
    return 53 if _week_date_days(y + 1, 1, 1) - _week_date_days(y, 1, 1) == 371 else 52


class _Bad(ValueError):
    pass


def _field(value: int, lo: int, hi: int, what: str) -> int:
    if not lo <= value <= hi:
        raise _Bad(f"{what} is {value}, outside {lo}..{hi}")
    return value


def _date_days(g: dict) -> int:
    y = int(g["y"] or g["by"])
    o, w, wd = g["o"] or g["bo"], g["w"] or g["bw"], g["wd"] or g["bwd"]
    if o is not None:
        return days_from_civil(y, 1, 1) + _field(int(o), 1, 366 if _leap(y) else 365, f"the day of year {y}") - 1
    if w is not None:
        w = _field(int(w), 1, _weeks_in_year(y), f"the ISO week of {y}")
        return _week_date_days(y, w, _field(int(wd or 1), 1, 7, "the weekday"))
    m = _field(int(g["m"] or g["bm"]), 1, 12, "the month")
    d = g["d"] or g["bd"]
    return days_from_civil(y, m, 1 if d is None else _field(int(d), 1, _month_days(y, m), f"the day of {y:04d}-{m:02d}"))


def _time_seconds(text: str) -> Fraction:
    for pattern in _TIME:
        t = pattern.fullmatch(text)
        if t is not None:
            break
    else:
        raise _Bad(f"time {text!r} is not hh[:mm[:ss]][.fraction]")
    h = _field(int(t["h"]), 0, 23, "the hour")
    mi = _field(int(t["mi"] or 0), 0, 59, "the minute")
    s = _field(int(t["s"] or 0), 0, 59, "the second")  # no leap seconds: the manifest's clock has none
    secs = Fraction(h * 3600 + mi * 60 + s)
    if t["f"] is not None:  # a decimal fraction of the last component written
        if len(t["f"]) > _MAX_FRACTION_DIGITS:
            raise _Bad(f"the fraction has more than {_MAX_FRACTION_DIGITS} digits")
        scale = 1 if t["s"] is not None else 60 if t["mi"] is not None else 3600
        secs += Fraction(int(t["f"]) * scale, 10 ** len(t["f"]))
    return secs


def parse_iso(text: str, name: str = "value") -> Fraction:
    """An ISO-8601 date or date-time as exact seconds since 1970-01-01T00:00Z.

    Dates: ``YYYY-MM-DD``, ``YYYY-MM`` (its first day), ``YYYY-DDD`` (ordinal),
    ``YYYY-Www[-D]`` (week), the basic forms ``YYYYMMDD``, ``YYYYDDD``,
    ``YYYYWwwD``, and signed expanded years (``+12024-05-01``, ``-0001-01-01``).
    Times follow after ``T`` (or ``t`` or a space): ``hh``, ``hh:mm``,
    ``hh:mm:ss`` or ``hhmmss``, the last component with an optional decimal
    fraction of any length (``.`` or ``,``).  An offset (``Z``, ``±hh``,
    ``±hh:mm``, ``±hhmm``; also ``±hh:mm:ss``, which ``isoformat()`` writes for
    historical zones) may follow a time; without one the time is UTC.
    Hour 24 and leap seconds are refused.  Raises ``ValueError`` naming
    ``name`` on anything else.
    """
    s = text.strip()
    g = _ISO.fullmatch(s)
    try:
        if g is None:
            raise _Bad(f"not an ISO-8601 date or date-time ({_EXAMPLES})")
        secs = Fraction(_date_days(g.groupdict()) * 86400)
        if g["time"] is not None:
            secs += _time_seconds(g["time"])
        if g["tz"] is not None and g["tz"] not in ("Z", "z"):
            z = _TZ.fullmatch(g["tz"])
            off = (_field(int(z["h"]), 0, 23, "the offset hour") * 3600
                   + _field(int(z["m"] or 0), 0, 59, "the offset minute") * 60)
            if z["s"] is not None:
                off += _field(int(z["s"]), 0, 59, "the offset second")
            secs -= off if z["sign"] == "+" else -off  # local time minus its offset is UTC
    except _Bad as e:
        raise ValueError(f"{name}={text!r}: {e}") from None
    return secs


def _datetime_seconds(value: _dt.datetime) -> Fraction:
    """Exact seconds since the epoch (naive = UTC); no astimezone, which fails near years 1 and 9999."""
    days = value.toordinal() - _EPOCH_ORDINAL
    us = ((days * 86400 + value.hour * 3600 + value.minute * 60 + value.second) * 1_000_000 + value.microsecond)
    off = value.utcoffset()
    if off is not None:
        us -= (off.days * 86400 + off.seconds) * 1_000_000 + off.microseconds
    return Fraction(us, 1_000_000)


def _datetime64_seconds(value: np.datetime64, name: str) -> Fraction:
    if np.isnat(value):
        raise ValueError(f"{name} is NaT")
    unit, count = np.datetime_data(value.dtype)
    n = int(value.astype(np.int64)) * count
    if unit == "Y":
        return Fraction(days_from_civil(1970 + n, 1, 1) * 86400)
    if unit == "M":
        y, m = divmod(n, 12)
        return Fraction(days_from_civil(1970 + y, m + 1, 1) * 86400)
    return n * _NP_UNIT[unit]


def instant(value, name: str = "value") -> Fraction:
    """A string, datetime, numpy/pandas datetime or pyarrow timestamp scalar as
    exact seconds since 1970-01-01T00:00Z (naive = UTC).  ``TypeError`` for other types."""
    if isinstance(value, str):
        if _INTEGER.fullmatch(value.strip()):  # the CLI reads these as integers; a date here would disagree
            raise ValueError(f"{name}={value!r} is a string of digits, not a date: pass an int for a value in the "
                             f"manifest unit, or a date such as 2024-05-01")
        return parse_iso(value, name)
    pa = sys.modules.get("pyarrow")  # a pyarrow scalar implies pyarrow is loaded; do not import it for the CLI
    if pa is not None and isinstance(value, pa.TimestampScalar):
        if not value.is_valid:
            raise ValueError(f"{name} is a null timestamp")
        return Fraction(value.value, PER_SECOND[_ARROW_UNIT[value.type.unit]])
    if hasattr(value, "to_datetime64"):  # pandas.Timestamp (its UTC instant when tz-aware) and pandas.NaT
        value = value.to_datetime64()
    if isinstance(value, np.datetime64):
        return _datetime64_seconds(value, name)
    if isinstance(value, _dt.datetime):
        return _datetime_seconds(value)
    if isinstance(value, _dt.date):  # its midnight, UTC, like the string "YYYY-MM-DD"
        return Fraction((value.toordinal() - _EPOCH_ORDINAL) * 86400)
    raise TypeError(f"{name} must be an integer in the manifest unit, an ISO-8601 string or a datetime "
                    f"(datetime, numpy.datetime64, pandas.Timestamp), not {type(value).__name__}")


def to_unit(value, unit: str, name: str) -> int | None:
    """A bound as an integer in the manifest ``unit`` (``None`` stays ``None``).

    Integers are taken as they are; instants (see :func:`instant`) are rounded
    up to the unit.  ``TypeError`` for booleans, floats and other types;
    ``ValueError`` naming ``name`` for an invalid date, NaT, or a value outside
    the unit's i64 range.
    """
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer in the manifest unit or a datetime, not bool")
    if isinstance(value, (int, np.integer)):
        v = int(value)
        if not C.I64_MIN <= v <= C.I64_MAX:
            raise ValueError(f"{name}={v} is outside the i64 range")
        return v
    per = PER_SECOND[unit]
    v = math.ceil(instant(value, name) * per)
    if not C.I64_MIN <= v <= C.I64_MAX:
        raise ValueError(f"{name}={value!r} is outside the range of {unit} timestamps (i64): "
                         f"{format_time(C.I64_MIN, unit)} .. {format_time(C.I64_MAX, unit)}")
    return v


def format_time(value: int, unit: str) -> str:
    """An integer in ``unit`` as an ISO-8601 UTC date-time with the unit's digits,
    e.g. ``2023-11-14T22:13:20.000Z``; years outside 0..9999 are signed."""
    per = PER_SECOND[unit]
    secs, sub = divmod(int(value), per)
    days, sod = divmod(secs, 86400)
    y, m, d = civil_from_days(days)
    year = f"{y:04d}" if 0 <= y <= 9999 else f"{y:+05d}"
    frac = f".{sub:0{_DIGITS[unit]}d}" if per > 1 else ""
    return f"{year}-{m:02d}-{d:02d}T{sod // 3600:02d}:{sod // 60 % 60:02d}:{sod % 60:02d}{frac}Z"
