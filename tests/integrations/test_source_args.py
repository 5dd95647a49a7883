"""scan_polars and arrow_dataset check their fixed arguments when made, not at the first query."""

import pytest

import gtsamples as gs
from tests.conftest import assert_tables_equal


def _scan_polars(*args, **kw):
    pytest.importorskip("polars")  # the polars extra
    return gs.scan_polars(*args, **kw)


MAKERS = [pytest.param(gs.arrow_dataset, id="arrow_dataset"), pytest.param(_scan_polars, id="scan_polars")]


@pytest.mark.parametrize("make", MAKERS)
@pytest.mark.parametrize("bad", [0, -1, 1.5, "1M", None, True])
def test_bad_max_bytes_is_refused_when_made(art, region, make, bad):
    for src in (art, region):
        with pytest.raises(ValueError, match="max_bytes must be a positive integer"):
            make(src, max_bytes=bad)  # was accepted, to fail at the first collect or scan


@pytest.mark.parametrize("make", MAKERS)
def test_unknown_keywords_are_refused_when_made(art, region, make):
    with pytest.raises(TypeError, match=r"'bogus'.*Artifact sources take parts, stats"):
        make(art, bogus=1)
    with pytest.raises(TypeError, match=r"'dedup'.*Artifact sources take"):
        make(art, dedup=True)  # a region's keyword
    with pytest.raises(TypeError, match=r"'parts'.*Region sources take dedup, strict, use_artifacts"):
        make(region, parts=[0])
    with pytest.raises(TypeError, match=r"'device'.*CPU"):
        make(region, device="gpu")  # scan_polars handed Polars cuDF frames; arrow_dataset failed at the scan


def test_device_cpu_and_huge_max_bytes_are_taken(art, region):
    assert_tables_equal(gs.arrow_dataset(art, device="cpu").to_table(), art.read())
    for src in (art, region):  # beyond int64: OverflowError at the scan, now one batch per unit
        assert_tables_equal(gs.arrow_dataset(src, max_bytes=10**30).to_table(), src.read())
    pl = pytest.importorskip("polars")
    assert gs.scan_polars(art, device="cpu").collect().equals(pl.from_arrow(art.read()))
    for src in (art, region):
        assert gs.scan_polars(src, max_bytes=1 << 64).collect().equals(pl.from_arrow(src.read()))
