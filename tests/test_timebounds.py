"""Time bounds (gtsamples.timebounds): the ISO-8601 grammar, every bound type
against the others, rounding, the unit ranges, and the printed form."""

from __future__ import annotations

import datetime as dt
import math
import sys
import zoneinfo
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from gtsamples.format import constants as C
from gtsamples.timebounds import PER_SECOND, format_time, instant, parse_iso, to_unit

UTC = dt.timezone.utc
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
UNITS = tuple(PER_SECOND)


def _micros(d: dt.datetime) -> Fraction:
    """Seconds since the epoch by timedelta arithmetic (an oracle independent of the module)."""
    d = d if d.tzinfo is not None else d.replace(tzinfo=UTC)
    return Fraction((d - EPOCH) // dt.timedelta(microseconds=1), 10**6)


MAY1 = Fraction(1714521600)  # 2024-05-01T00:00:00Z


@pytest.mark.parametrize("text, want", [
    ("2024-05-01", MAY1),
    ("2024-05-01T10", MAY1 + 36000),
    ("2024-05-01T10:30", MAY1 + 37800),
    ("2024-05-01 10:30:15", MAY1 + 37815),
    ("  2024-05-01T10:30:15  ", MAY1 + 37815),  # surrounding blanks, as int() allows
    ("2024-05-01T10:30:15.5", MAY1 + Fraction(75631, 2)),
    ("2024-05-01T10:30:15,25", MAY1 + Fraction(151261, 4)),  # ISO-8601's decimal comma
    ("2024-05-01T10:30:15.123456789", MAY1 + 37815 + Fraction(123456789, 10**9)),
    ("2024-05-01T10:30:15.1234567891234", MAY1 + 37815 + Fraction(1234567891234, 10**13)),
    ("2024-05-01T10:30Z", MAY1 + 37800),
    ("2024-05-01T10:30+02:00", MAY1 + 37800 - 7200),
    ("2024-05-01T10:30+0200", MAY1 + 37800 - 7200),
    ("2024-05-01T10:30+02", MAY1 + 37800 - 7200),
    ("2024-05-01T10:30:15.5-05:30", MAY1 + 37815 + 19800 + Fraction(1, 2)),  # fraction split off, offset kept
    ("2024-05-01T00:00:00+23:59", MAY1 - 86340),
    ("1969-12-31T23:59:59.999999999Z", Fraction(-1, 10**9)),
    ("2024-02-29", Fraction(1709164800)),
    ("2000-02-29", Fraction(951782400)),
    ("0000-01-01", Fraction(-62167219200)),  # year 0 (1 BC, proleptic Gregorian)
    ("9999-12-31T23:59:59.999999999999Z", Fraction(253402300799) + Fraction(10**12 - 1, 10**12)),
])
def test_iso_forms(text, want):
    assert parse_iso(text, "start") == want


@pytest.mark.parametrize("text", [
    "yesterday", "now", "NaT", "", "2024-5-1", "2024-0501", "2024-05", "2024-122", "2024-W18-3",
    "2024-05-01Z",  # an offset needs a time
    "2024-05-01T", "2024-05-01T1", "2024-05-01T10:3", "2024-05-01T10:30:15junk", "2024-05-01T10:30:15.",
    "2024-05-01T10.5",  # fractions of hours and minutes: not taken
    "2024-05-01T10:30:15+2", "2024-05-01T10:30+02:0", "2024-05-01_10:30", "２０２４-05-01",
    "2024-13-01", "2024-00-10", "2024-02-30", "2023-02-29", "1900-02-29", "2024-04-31", "2024-01-00",
    "2024-05-01T24:00", "2024-05-01T10:60", "2024-05-01T23:59:60", "2024-05-01T10:30+24:00",
])
def test_iso_refusals_name_the_parameter_and_the_forms(text):
    with pytest.raises(ValueError) as e:
        to_unit(text, "millisecond", "end")
    assert str(e.value) == (f"end={text!r}: not an ISO-8601 date or date-time (YYYY-MM-DD[(T| )hh[:mm[:ss[.fraction]]]]"
                            "[Z|±hh[:mm]], e.g. 2024-05-01 or 2024-05-01T12:30:00.5+02:00)")


def test_hostile_fractions_are_bounded():
    with pytest.raises(ValueError, match=r"^end='.*': the fraction has more than 100 digits$"):
        to_unit("2024-05-01T10:30:15." + "1" * 101, "millisecond", "end")
    assert parse_iso("2024-05-01T10:30:15." + "1" * 100) > MAY1 + 37815


@pytest.mark.parametrize("text", ["1700000000000", "+5", "-12", " 42 ", "2024", "20240501"])
def test_strings_of_digits_are_not_dates(text):
    """The CLI reads these as integers in the manifest unit; the API must not read them as dates."""
    with pytest.raises(ValueError, match=r"start=.* is a string of digits, not a date: pass an int"):
        to_unit(text, "millisecond", "start")


@given(hs.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30),
                    timezones=hs.one_of(hs.none(), hs.timezones(), hs.builds(
                        lambda m: dt.timezone(dt.timedelta(minutes=m)), hs.integers(-1439, 1439)))))
@settings(max_examples=300, deadline=None)
def test_isoformat_strings_and_datetimes_against_timedelta_arithmetic(d):
    """Python's own isoformat() output, for naive (UTC) and aware datetimes, in every unit."""
    want = _micros(d)
    assert instant(d) == want
    text = d.isoformat()
    if d.utcoffset() is not None and d.utcoffset() % dt.timedelta(minutes=1):
        return  # isoformat() writes seconds in historical offsets (LMT); ISO-8601 offsets have none
    assert parse_iso(text) == want
    assert parse_iso(text.replace("T", " ")) == want
    for unit in UNITS:
        v = math.ceil(want * PER_SECOND[unit])
        if C.I64_MIN <= v <= C.I64_MAX:
            assert to_unit(text, unit, "start") == v


#: What Python's fromisoformat reads on 3.10 and on 3.11+: this module reads the same
#: on every Python (Arrow parses), and keeps the digits fromisoformat drops.
SAME_EVERYWHERE = {
    "2024-05-01": MAY1,
    "2024-05-01 10:30": MAY1 + 37800,
    "2024-05-01T10:30Z": MAY1 + 37800,  # 3.10's fromisoformat refuses Z
    "2024-05-01T10:30:15,5": MAY1 + Fraction(75631, 2),
    "2024-05-01T10:30:15.1234567": MAY1 + 37815 + Fraction(1234567, 10**7),  # fromisoformat drops the 7
    "2024-05-01T10:30:15.123+0200": MAY1 + 37815 - 7200 + Fraction(123, 1000),
    "2024-05-01T10:30:15.123456+05:30": MAY1 + 37815 - 19800 + Fraction(123456, 10**6),
}


@pytest.mark.parametrize("text", SAME_EVERYWHERE)
def test_reads_the_same_on_any_python(text):
    got = parse_iso(text)
    assert got == SAME_EVERYWHERE[text]
    try:
        d = dt.datetime.fromisoformat(text)
    except ValueError:
        return
    assert math.floor(got * 10**6) == _micros(d) * 10**6  # fromisoformat truncates to microseconds


@given(hs.integers(C.I64_MIN, C.I64_MAX), hs.sampled_from(UNITS))
@settings(max_examples=400, deadline=None)
def test_format_time_round_trips(v, unit):
    """Every i64 prints; those in years 0000..9999 (all of them in nanoseconds) parse back."""
    s = format_time(v, unit)
    assert s.endswith("Z")
    if -62167219200 <= v // PER_SECOND[unit] < 253402300800:
        assert to_unit(s, unit, "start") == v


@given(hs.integers(dt.date(1, 1, 1).toordinal() - 719163, dt.date(9999, 12, 31).toordinal() - 719163),
       hs.integers(0, 86400 * 10**9 - 1))
@settings(max_examples=300, deadline=None)
def test_format_time_and_days_against_numpy(days, ns_of_day):
    for unit, code in (("second", "s"), ("millisecond", "ms"), ("microsecond", "us"), ("nanosecond", "ns")):
        per = PER_SECOND[unit]
        v = days * 86400 * per + ns_of_day * per // 10**9
        if C.I64_MIN <= v <= C.I64_MAX:
            assert format_time(v, unit) == np.datetime_as_string(np.datetime64(v, code), timezone="UTC")


def test_format_time_extremes():
    assert format_time(C.I64_MAX, "nanosecond") == "2262-04-11T23:47:16.854775807Z"
    assert format_time(C.I64_MIN, "nanosecond") == "1677-09-21T00:12:43.145224192Z"
    assert format_time(C.I64_MAX, "second") == "292277026596-12-04T15:30:07Z"
    assert format_time(C.I64_MIN, "second") == "-292277022657-01-27T08:29:52Z"
    assert format_time(-1, "millisecond") == "1969-12-31T23:59:59.999Z"
    assert format_time(0, "microsecond") == "1970-01-01T00:00:00.000000Z"


# --- to_unit over every bound type ------------------------------------------------------------

# 2024-05-01T08:00:00.123456789Z written every way: naive values are UTC, aware ones converted
PARIS = zoneinfo.ZoneInfo("Europe/Paris")  # UTC+2 on that day (summer time)


class _NoOffset(dt.tzinfo):
    """A tzinfo that knows no offset: Python counts its datetimes as naive."""

    def utcoffset(self, d):
        return None

    def dst(self, d):
        return None

    def tzname(self, d):
        return None


def _instants_ns():
    import pandas as pd

    return [
        "2024-05-01T08:00:00.123456789",
        "2024-05-01T08:00:00.123456789Z",
        "2024-05-01 10:00:00.123456789+02:00",
        "2024-05-01T03:30:00.123456789-0430",
        np.datetime64("2024-05-01T08:00:00.123456789"),
        np.datetime64(1714550400123456789, "ns"),
        pd.Timestamp("2024-05-01T08:00:00.123456789"),
        pd.Timestamp("2024-05-01T10:00:00.123456789", tz="Europe/Paris"),
        pd.Timestamp("2024-05-01T08:00:00.123456789", tz="UTC"),
        pa.array([1714550400123456789], pa.timestamp("ns")).cast(pa.timestamp("ns", tz="Asia/Tokyo"))[0],
    ]


def _instants_us():
    import pandas as pd

    return [
        "2024-05-01T08:00:00.123456",
        "2024-05-01T10:00:00.123456+02",
        dt.datetime(2024, 5, 1, 8, 0, 0, 123456),
        dt.datetime(2024, 5, 1, 8, 0, 0, 123456, tzinfo=_NoOffset()),  # naive (was "can't subtract offset-naive...")
        dt.datetime(2024, 5, 1, 8, 0, 0, 123456, tzinfo=UTC),
        dt.datetime(2024, 5, 1, 10, 0, 0, 123456, tzinfo=PARIS),
        dt.datetime(2024, 5, 1, 3, 30, 0, 123456, tzinfo=dt.timezone(-dt.timedelta(hours=4, minutes=30))),
        np.datetime64("2024-05-01T08:00:00.123456"),
        pd.Timestamp("2024-05-01T10:00:00.123456", tz="Europe/Paris"),
        pd.Timestamp("2024-05-01T10:00:00.123456+02:00").to_pydatetime(),
        pa.scalar(dt.datetime(2024, 5, 1, 8, 0, 0, 123456), pa.timestamp("us")),
    ]


@pytest.mark.parametrize("unit", UNITS)
def test_every_type_gives_the_same_integer(unit):
    pytest.importorskip("pandas")
    per = PER_SECOND[unit]
    base = 1714550400
    for values, frac in ((_instants_ns(), Fraction(123456789, 10**9)), (_instants_us(), Fraction(123456, 10**6))):
        want = math.ceil((base + frac) * per)
        got = [to_unit(v, unit, "start") for v in values]
        assert got == [want] * len(values), (unit, list(zip(map(repr, values), got)))


def test_nanosecond_strings_keep_every_digit():
    assert to_unit("2024-05-01T08:00:00.123456789Z", "nanosecond", "start") == 1714550400123456789
    assert to_unit("2024-05-01T08:00:00.000000001Z", "nanosecond", "start") == 1714550400000000001
    assert to_unit("1677-09-21T00:12:43.145224192Z", "nanosecond", "start") == C.I64_MIN
    assert to_unit("1677-09-21T00:12:43.1452241915Z", "nanosecond", "start") == C.I64_MIN  # rounded up into range
    assert to_unit("2262-04-11T23:47:16.854775807Z", "nanosecond", "end") == C.I64_MAX


def test_instants_round_up_so_half_open_bounds_are_exact():
    assert to_unit("2024-05-01T08:00:00.0000000001Z", "nanosecond", "start") == 1714550400000000001
    assert to_unit("2024-05-01T08:00:00.001Z", "second", "end") == 1714550401
    assert to_unit("1969-12-31T23:59:59.5Z", "second", "start") == 0
    assert to_unit("1969-12-31T23:59:58.5Z", "second", "start") == -1
    assert to_unit(np.datetime64("1970-01-01T00:00:01.000000000001", "ps"), "nanosecond", "start") == 10**9 + 1
    assert to_unit(np.datetime64("1970-01-01T00:00:01", "as"), "nanosecond", "start") == 10**9
    assert to_unit(dt.datetime(1969, 12, 31, 23, 59, 59, 1), "second", "start") == 0


def test_numpy_calendar_units_and_dates():
    assert to_unit(np.datetime64("2024", "Y"), "second", "start") == to_unit("2024-01-01", "second", "start")
    assert to_unit(np.datetime64("2024-05", "M"), "second", "start") == int(MAY1)
    assert to_unit(np.datetime64("1969-11", "M"), "second", "start") == to_unit("1969-11-01", "second", "start")
    assert to_unit(np.datetime64("2024-05-01", "D"), "millisecond", "start") == int(MAY1) * 1000
    assert to_unit(np.datetime64(2, "W"), "second", "start") == 14 * 86400
    assert to_unit(np.datetime64(3, "10m"), "second", "start") == 1800  # a multiple of a unit
    assert to_unit(dt.date(2024, 5, 1), "second", "end") == int(MAY1)  # a date is its midnight, UTC


@pytest.mark.parametrize("value, why", [
    ("2300-01-01", "outside the range of nanosecond timestamps (i64): 1677-09-21T00:12:43.145224192Z .. "
                   "2262-04-11T23:47:16.854775807Z"),
    ("2262-04-11T23:47:16.854775808Z", "outside the range of nanosecond timestamps"),
    ("1677-09-21T00:12:43.145224191Z", "outside the range of nanosecond timestamps"),
    (np.datetime64("2300-01-01"), "outside the range of nanosecond timestamps"),
    (dt.datetime(1600, 1, 1), "outside the range of nanosecond timestamps"),
    (np.datetime64("NaT"), "is NaT"),
    (np.datetime64("NaT", "ns"), "is NaT"),
    (pa.scalar(None, pa.timestamp("ms")), "is a null timestamp"),
    (2**63, "is outside the i64 range"),
    (-(2**63) - 1, "is outside the i64 range"),
])
def test_out_of_range_and_missing_values_are_value_errors_naming_the_bound(value, why):
    with pytest.raises(ValueError) as e:
        to_unit(value, "nanosecond", "end")
    assert str(e.value).startswith("end"), str(e.value)
    assert why in str(e.value)


def test_wider_units_take_wider_ranges():
    assert to_unit("2300-01-01", "microsecond", "start") == 10413792000 * 10**6
    assert to_unit("9999-12-31T23:59:59.5Z", "second", "end") == 253402300800
    assert to_unit("0000-01-01", "microsecond", "start") == -62167219200 * 10**6
    # 200,000 years = 500 Gregorian cycles of 146,097 days before year 0
    assert to_unit(np.datetime64("-200000-01-01"), "second", "start") == -62167219200 - 500 * 146097 * 86400


def test_pandas_nat_is_a_value_error():
    pd = pytest.importorskip("pandas")
    with pytest.raises(ValueError, match="start is NaT"):
        to_unit(pd.NaT, "millisecond", "start")


@pytest.mark.parametrize("value", [True, False, np.bool_(True), 1.5, 1700000000000.0, np.float64(3), Decimal(5),
                                   Fraction(1, 2), b"2024-05-01", [2024, 5, 1], dt.time(10, 30),
                                   # durations, though numpy's is an integer type (5 ns was read as 5 ms)
                                   np.timedelta64(5, "ns"), np.timedelta64(5, "ms"), np.timedelta64(1, "D"),
                                   np.timedelta64("NaT"), dt.timedelta(seconds=1)])
def test_other_types_stay_type_errors(value):
    with pytest.raises(TypeError, match="^start must be an integer in the manifest unit"):
        to_unit(value, "millisecond", "start")


def test_integers_stay_integers_in_the_manifest_unit():
    assert to_unit(1_700_000_000_000, "millisecond", "start") == 1_700_000_000_000
    assert to_unit(np.int64(-5), "nanosecond", "start") == -5
    assert to_unit(np.uint64(2**63 - 1), "second", "end") == C.I64_MAX
    assert to_unit(None, "second", "end") is None


# --- the readers over real artifacts, regions and Dask ---------------------------------------


def _forms(ns: int) -> list[tuple[str, object]]:
    """One instant (integer nanoseconds since the epoch, a whole microsecond) written every way."""
    import pandas as pd

    def iso(v):  # numpy's rendering, independent of the module under test
        return np.datetime_as_string(np.datetime64(v, "ns"))

    us = dt.timedelta(microseconds=ns // 1000)
    return [
        ("str", iso(ns)),
        ("str Z", iso(ns) + "Z"),
        ("str -05:00", iso(ns - 5 * 3600 * 10**9) + "-05:00"),
        ("str +0530", iso(ns + 19800 * 10**9) + "+0530"),
        ("numpy ns", np.datetime64(ns, "ns")),
        ("numpy us", np.datetime64(ns // 1000, "us")),
        ("pandas", pd.Timestamp(ns, unit="ns")),
        ("pandas Paris", pd.Timestamp(ns, unit="ns", tz="UTC").tz_convert("Europe/Paris")),
        ("pyarrow Tokyo", pa.scalar(ns, pa.timestamp("ns", tz="Asia/Tokyo"))),
        ("datetime", dt.datetime(1970, 1, 1) + us),
        ("datetime Paris", (EPOCH + us).astimezone(PARIS)),
    ]


@pytest.fixture(scope="module")
def demo_region(tmp_path_factory):
    """The demo's metrics as a millisecond and a nanosecond artifact, and as a region (one
    covered SST, one scanned), plus bounds: start on a row, end 1 us after a later row."""
    import pyarrow.compute as pc

    import gtsamples as gs
    from gtsamples.demo import synthetic_metrics

    root = tmp_path_factory.mktemp("bounds")
    ms = synthetic_metrics(n_series=6, rows_per_series=400)
    ns = ms.set_column(2, "ts", pc.cast(ms["ts"], pa.timestamp("ns")))
    arts = {}
    for unit, t, fid in (("millisecond", ms, "5a3c0000-0000-4000-8000-0000000000a1"),
                         ("nanosecond", ns, "5a3c0000-0000-4000-8000-0000000000a2")):
        e = gs.write_artifact(t, root / unit, region_id=9, source_file_id=fid, timestamp_column_id=0,
                              field_column_ids=[1, 2, 3, 4], row_limit=64)
        arts[unit] = gs.open_artifact(root / unit, entry=e)
    region = gs.create_region(root / "region", 9)
    region.add_sst(ms.slice(0, 1200))
    region.add_sst(ms.slice(1200))
    region.build(missing_only=True)
    region.add_sst(ms.slice(0, 600))  # uncovered: scanned
    ts = ms["ts"].cast(pa.int64()).to_numpy()
    start_ms, last_ms = int(ts[100]), int(ts[300])
    return arts, region, ms, start_ms, last_ms


def _cases(start_ms, last_ms):
    """(label, start, end) in every form, and the integer bounds per unit."""
    start, end = start_ms * 10**6, last_ms * 10**6 + 1000
    cases = [("int", None, None)] + [(f"{a[0]}", a[1], b[1]) for a, b in zip(_forms(start), _forms(end))]
    ints = {"millisecond": (start_ms, last_ms + 1), "nanosecond": (start, end)}  # end rounded up: row last_ms kept
    return cases, ints


def _oracle(t: pa.Table, lo: int, hi: int, per: int) -> pa.Table:
    import pyarrow.compute as pc

    v = pc.cast(t["ts"], pa.int64())
    return t.filter(pc.and_(pc.greater_equal(v, lo * per), pc.less(v, hi * per)))


def test_artifact_readers_give_the_same_rows_for_every_bound_type(demo_region):
    from .conftest import assert_tables_equal

    arts, _, ms, start_ms, last_ms = demo_region
    cases, ints = _cases(start_ms, last_ms)
    series = [(int(ms["__table_id"][0].as_py()), int(ms["__tsid"][0].as_py()))]
    for unit, art in arts.items():
        lo, hi = ints[unit]
        want = art.read(start=lo, end=hi)
        assert 0 < want.num_rows < art.manifest.num_rows
        assert_tables_equal(want, _oracle(art.read(), start_ms, last_ms + 1, 1 if unit == "millisecond" else 10**6))
        one = art.read(series=series, start=lo, end=hi)
        assert one.num_rows > 0
        for label, start, end in cases[1:]:
            assert to_unit(start, unit, "start") == lo and to_unit(end, unit, "end") == hi, (unit, label)
            assert_tables_equal(art.read(start=start, end=end), want)
            got, stats = art.read_with_stats(series=series, start=start, end=end)
            assert_tables_equal(got, one)
            batch, _ = art.fetch_batch(series=series, start=start, end=end)
            assert (batch.start, batch.end) == (lo, hi), (unit, label)
            assert_tables_equal(art.read(series=series, start=start, end=end, parts=[0]),
                                art.read(series=series, start=lo, end=hi, parts=[0]))


def test_region_readers_give_the_same_rows_for_every_bound_type(demo_region):
    from .conftest import assert_tables_equal

    _, region, ms, start_ms, last_ms = demo_region
    cases, ints = _cases(start_ms, last_ms)
    lo, hi = ints["millisecond"]
    want = region.read(start=lo, end=hi)
    want_dedup = region.read(start=lo, end=hi, dedup=True)
    assert 0 < want_dedup.num_rows < want.num_rows < region.num_rows
    for label, start, end in cases[1:]:
        assert_tables_equal(region.read(start=start, end=end), want)
        assert_tables_equal(region.read_with_stats(start=start, end=end, dedup=True)[0], want_dedup)
        sel = region.plan(start=start, end=end)["selection"]
        assert (sel.start, sel.end) == (lo, hi), label


def test_to_dask_gives_the_same_rows_for_every_bound_type(demo_region):
    pytest.importorskip("dask.dataframe")
    import gtsamples as gs

    arts, region, _, start_ms, last_ms = demo_region
    cases, ints = _cases(start_ms, last_ms)
    lo, hi = ints["millisecond"]
    want = region.read(start=lo, end=hi, columns=["__tsid", "ts"])
    paths = [arts["nanosecond"].location]
    want_paths = arts["nanosecond"].read(start=ints["nanosecond"][0], end=ints["nanosecond"][1], columns=["ts"])
    for label, start, end in cases:
        bounds = (lo, hi) if start is None else (start, end)
        got = gs.to_dask(region, start=bounds[0], end=bounds[1], columns=["__tsid", "ts"]).compute(scheduler="sync")
        np.testing.assert_array_equal(got["ts"].to_numpy().astype("datetime64[ms]").astype(np.int64),
                                      want["ts"].cast(pa.int64()).to_numpy(), err_msg=label)
        np.testing.assert_array_equal(got["__tsid"].to_numpy(), want["__tsid"].to_numpy())
        bounds = ints["nanosecond"] if start is None else (start, end)
        got = gs.to_dask(paths, start=bounds[0], end=bounds[1], columns=["ts"]).compute(scheduler="sync")
        assert got["ts"].to_numpy().astype("datetime64[ns]").astype(np.int64).tolist() == \
            want_paths["ts"].cast(pa.int64()).to_pylist(), label


def test_read_device_takes_the_same_bounds(demo_region):
    """On a GPU: read_device (CuPy columns, no cuDF) with every bound type."""
    try:
        from gtsamples.decode import gpu
    except ImportError as e:  # depends on the install
        pytest.skip(f"read_device needs the gpu extra ({e})")
    if not gpu.is_gpu_available():
        pytest.skip("read_device needs CuPy and a CUDA device")
    from .conftest import assert_tables_equal

    arts, _, _, start_ms, last_ms = demo_region
    cases, ints = _cases(start_ms, last_ms)
    for unit, art in arts.items():
        want = art.read(start=ints[unit][0], end=ints[unit][1])
        for label, start, end in cases[1:]:
            assert_tables_equal(art.read_device(start=start, end=end).to_arrow(), want)
