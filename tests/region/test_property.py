"""Property: whatever artifacts exist, are used, or are corrupted, a region read returns
the same rows (no row lost or duplicated), equal to an independent oracle."""

from __future__ import annotations

import tempfile
import warnings

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gtsamples as gs
from gtsamples import cache as gcache
from gtsamples.region import create_region

from ..conftest import assert_tables_equal
from .conftest import REGION_ID, corrupt_artifact, dedup_oracle, make_sst_table, oracle, rows_of

CORRUPTIONS = ("chunk", "truncate", "manifest", "missing")


@st.composite
def region_case(draw):
    n = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**32 - 1))
    rows = [draw(st.integers(0, 150)) for _ in range(n)]
    built = [draw(st.booleans()) for _ in range(n)]
    corrupt = [draw(st.sampled_from((None, None) + CORRUPTIONS)) for _ in range(n)]
    fields = draw(st.sampled_from([("v",), ("v", "w"), ("a", "b", "c")]))
    columns = draw(st.one_of(st.none(), st.lists(st.sampled_from(("ts", "__sequence", "__op_type") + fields),
                                                  min_size=1, unique=True)))
    start = draw(st.one_of(st.none(), st.integers(-5, 40).map(lambda x: x * 1000)))
    end = draw(st.one_of(st.none(), st.integers(-5, 60).map(lambda x: x * 1000)))
    subset_seed = draw(st.integers(0, 1000))
    series_k = draw(st.one_of(st.none(), st.integers(0, 5)))
    tables = draw(st.one_of(st.none(), st.lists(st.sampled_from([1, 2, 3]), max_size=2)))
    row_group = draw(st.sampled_from([7, 64, 65536]))
    return dict(seed=seed, rows=rows, built=built, corrupt=corrupt, fields=fields, columns=columns, start=start,
                end=end, subset_seed=subset_seed, series_k=series_k, tables=tables, row_group=row_group)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=region_case())
def test_reads_identical_whatever_the_artifacts(case):
    rng = np.random.default_rng(case["seed"])
    with tempfile.TemporaryDirectory() as root:
        r = create_region(root, REGION_ID)
        tables = [make_sst_table(rng, rows=n, series=3, fields=case["fields"], ts_range=30) for n in case["rows"]]
        for t in tables:
            r.add_sst(t, row_group_size=case["row_group"])
        ids = [s.file_id for s in r.ssts]
        to_build = [f for f, b in zip(ids, case["built"]) if b]
        if to_build:
            r.build(file_ids=to_build, verify=None)
        for fid, how in zip(ids, case["corrupt"]):
            e = r.coverage()[fid]
            if e is not None and how is not None and r.ssts[ids.index(fid)].rows > 0:
                corrupt_artifact(root, e, how)
        gcache.default_cache().clear()

        all_ids = sorted({(int(a), int(b)) for t in tables
                          for a, b in zip(t["__table_id"].to_numpy(), t["__tsid"].to_numpy())})
        series = None
        if case["series_k"] is not None:
            pick = np.random.default_rng(case["subset_seed"]).permutation(len(all_ids))[: case["series_k"]]
            series = [all_ids[i] for i in sorted(pick)] + [(3, 999_999)]
        q = dict(columns=case["columns"], series=series, tables=case["tables"], start=case["start"], end=case["end"])
        want = oracle(tables, **{"columns": q["columns"], "series": series, "tbls": q["tables"],
                                 "start": q["start"], "end": q["end"]})
        coin = np.random.default_rng(case["subset_seed"]).random(len(ids))
        subset = [f for f, c in zip(ids, coin) if c < 0.5]
        results = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", gs.ArtifactSkippedWarning)
            for use in (True, False, subset):
                results.append(r.read(**q, use_artifacts=use))
            dd = [r.read(**{**q, "columns": None}, dedup=True, use_artifacts=use) for use in (True, False)]
        for got in results:
            assert_tables_equal(got, want.cast(got.schema))
        full = oracle(tables, None, series, q["tables"], q["start"], q["end"])
        expect = dedup_oracle(full)
        assert rows_of(dd[0]) == expect and rows_of(dd[1]) == expect
