"""A short fuzz run as part of the test suite (the campaign is ``make fuzz``).

Runs every target through ``tests.fuzz.run`` with atheris when it is
installed (coverage-guided, instrumented), else with the deterministic
random-mutation engine over the same targets and mutator -- never silently
nothing: the execution count of every target is asserted.
"""

import functools
import json

import pytest

from tests.fuzz import corpus, run, targets
from tests.fuzz.known_findings import KNOWN_OPEN

RUNS_PER_TARGET = 2000


@functools.lru_cache(maxsize=1)
def _quick_seeds():
    return corpus.build_seeds(quick=True)


def _engine():
    try:
        import atheris  # noqa: F401

        return "atheris"
    except ImportError:
        return "random"


def test_fuzz_smoke(tmp_path):
    n = corpus.write_seeds(tmp_path / "seeds", quick=True)
    assert n >= 20
    engine = _engine()
    n_targets = len(run.TARGET_NAMES)
    rc = run.main(["--runs", str(n_targets * RUNS_PER_TARGET), "--jobs", "2", "--engine", engine,
                   "--out", str(tmp_path)])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["engine"] == engine
    for t in run.TARGET_NAMES:
        s = summary["targets"][t]
        assert s["execs"] >= RUNS_PER_TARGET, (t, s)
        new = [f for f in summary["details"][t] if f.get("signature") not in KNOWN_OPEN]
        assert not new, new
    assert summary["total_execs"] >= n_targets * RUNS_PER_TARGET


def test_container_roundtrip_and_garbage():
    data = targets.pack(7, b"12345678", b"{}", b"[]", [b"a", b"bc"])
    assert targets.unpack(data) == (7, b"12345678", b"{}", b"[]", [b"a", b"bc"])
    # any bytes are a valid input: the targets answer with a SamplesError class name, never raise
    for junk in (b"", b"\x07", b"\xff" * 40, data[:-1], data + b"\x00" * 9):
        for fn in targets.TARGETS.values():
            assert isinstance(fn(junk), str)


@pytest.mark.parametrize("name", list(targets.TARGETS))
def test_seeds_read(name):
    """Every seed shape is a valid artifact for every target."""
    for seed_name, data in _quick_seeds()[::4]:
        assert targets.TARGETS[name](data) == "ok", seed_name


def test_campaign_findings_are_those_appended_since_its_start(tmp_path):
    """findings.jsonl outlives campaigns: an earlier campaign's finding neither counts
    in a new campaign's summary nor stops its workers recording the same signature."""
    fj = tmp_path / "findings.jsonl"
    old = {"target": "read", "signature": "E@x.py:1", "input": "a"}
    fj.write_text(json.dumps(old) + "\n")
    start = fj.stat().st_size
    assert run.campaign_findings(tmp_path, 0) == [old]
    assert run.campaign_findings(tmp_path, start) == []
    new = {"target": "read", "signature": "E@x.py:1", "input": "b"}
    with open(fj, "a") as f:
        f.write(json.dumps(new) + "\n")
    assert run.campaign_findings(tmp_path, start) == [new]
    assert run.campaign_findings(tmp_path / "absent", 0) == []
