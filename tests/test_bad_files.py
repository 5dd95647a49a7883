"""Kept bad files: every input that ever broke the reader's promise, with the
error class and rule it must produce (tests/data/bad/README.md).

A case whose bug is still open carries ``open_finding`` in its case.json and
runs as a strict xfail: when the bug is fixed the xfail turns into a failure,
and the entry's ``open_finding`` is set to null.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

import gtsamples as gs

from .conftest import DATA

BAD = DATA / "bad"
CASES = sorted(p for p in BAD.iterdir() if p.is_dir() and (p / "case.json").exists() and (p / "manifest.json").exists())


def _params():
    for d in CASES:
        case = json.loads((d / "case.json").read_text())
        marks = []
        if case.get("open_finding"):
            marks.append(pytest.mark.xfail(strict=True, reason=case["open_finding"]))
        yield pytest.param(d, case, id=d.name, marks=marks)


@pytest.mark.parametrize("d,case", list(_params()))
def test_bad_file(d, case):
    cls = getattr(gs, case["error"])
    with pytest.raises(gs.SamplesError) as ei:
        art = gs.open_artifact(d)
        call = case.get("call", "read")
        if call == "read":
            art.read(**case.get("kwargs", {}))
        elif call == "inspect":
            art.inspect()
        elif call == "navigate_many":  # a region's batched navigation (its kernels, its libzstd)
            from gtsamples.plan.navigator import navigate_many
            from gtsamples.plan import Selection
            from gtsamples.storage import ReadStats

            res = navigate_many([art], Selection(), [ReadStats()])[0]
            if isinstance(res, gs.SamplesError):
                raise res
        else:
            art.validate()
    assert isinstance(ei.value, cls), f"{type(ei.value).__name__}: {ei.value}"
    assert re.search(case["rule"], str(ei.value)), str(ei.value)


def test_readme_lists_every_case():
    readme = (BAD / "README.md").read_text()
    for d in CASES:
        assert f"`{d.name}`" in readme, d.name
    assert "`manifest_400k_parts`" in readme


# --- F4: a manifest within the 64 MiB limit that takes seconds and hundreds of MiB --------

_CHILD = textwrap.dedent("""
    import json, os, resource, sys, time
    import gtsamples as gs
    d = sys.argv[1]
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    try:
        gs.open_artifact(d).read()
        outcome = "rows"
    except gs.SamplesError as e:
        outcome = type(e).__name__
    dt = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - rss0
    print(json.dumps({"outcome": outcome, "seconds": dt, "rss_mb": rss}))
""")


def many_parts_manifest(n_parts: int) -> bytes:
    """A valid manifest of ``n_parts`` one-block parts (none of the part objects exist)."""
    head = ('{"format":"columnar-samples","version":1,"region_id":1,'
            '"source_file_id":"5a3c0000-0000-4000-8000-000000000001",'
            '"generation":"5a3c0000-0000-4000-8000-000000000002",'
            '"timestamp":{"column_id":0,"name":"ts","unit":"millisecond"},'
            '"fields":[{"column_id":1,"name":"v","type":"float64","nullable":true}],"files":[')
    part = ('{"part_id":%d,"file_size":128,"num_rows":1,"num_blocks":1,"first":{"table_id":1,"tsid":1},'
            '"last":{"table_id":1,"tsid":1},"min_timestamp":0,"max_timestamp":0}')
    return (head + ",".join(part % i for i in range(n_parts)) + "]}").encode()


def _open_read_in_child(tmp_path, data: bytes) -> dict:
    assert len(data) <= 64 * 2**20
    (tmp_path / "manifest.json").write_bytes(data)
    try:
        r = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path)], capture_output=True, text=True,
                           timeout=10, env=dict(os.environ, NUMBA_NUM_THREADS="1"))
    except subprocess.TimeoutExpired:
        pytest.fail("open_artifact + read of a 62 MiB manifest ran past 10 s (budget: 2 s)")
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_manifest_400k_parts_bounded(tmp_path):
    """F4: the files array is read column-wise (format/manifest.py ``_scan_files``)."""
    res = _open_read_in_child(tmp_path, many_parts_manifest(400_000))
    assert res["outcome"] != "rows"
    assert res["seconds"] <= 2.0, res
    assert res["rss_mb"] <= 256, res


@pytest.mark.slow
def test_manifest_400k_parts_last_one_invalid_bounded(tmp_path):
    """The same manifest with its last part broken: the error names that part, as fast."""
    data = many_parts_manifest(400_000).replace(b'{"part_id":399999,"file_size":128,"num_rows":1,',
                                                b'{"part_id":399999,"file_size":128,"num_rows":0,')
    res = _open_read_in_child(tmp_path, data)
    assert res["outcome"] == "CorruptArtifactError", res
    assert res["seconds"] <= 2.0, res
    assert res["rss_mb"] <= 256, res


@pytest.mark.parametrize("batch_bytes", [1, 256 << 20])  # a group per leaf (the cut between parts), or one
def test_validate_finds_the_sequence_order_across_its_groups(batch_bytes):
    """validate() decodes in groups; the rule across the cut between two groups is the
    decoder's, as within a group (one place: the decoder, handed the cut's two blocks)."""
    d = BAD / "sequence_increase_across_parts"
    case = json.loads((d / "case.json").read_text())
    with pytest.raises(gs.CorruptArtifactError) as ei:
        gs.open_artifact(d).validate(batch_bytes=batch_bytes)
    assert ei.value.flags & gs.DecodeErrorFlag.SEQUENCE_ORDER
    assert re.search(case["rule"], str(ei.value)), str(ei.value)


@pytest.mark.parametrize("batch_bytes", [0, -5, "1M", 1.5, True])
def test_validate_refuses_a_batch_size_that_is_not_a_positive_integer(batch_bytes):
    """Before: 0 and -5 validated one leaf per group, "1M" raised a bare '>=' comparison error."""
    art = gs.open_artifact(BAD / "sequence_increase_across_parts")
    with pytest.raises(ValueError, match=f"batch_bytes must be a positive integer .*, not {re.escape(repr(batch_bytes))}"):
        art.validate(batch_bytes=batch_bytes)
