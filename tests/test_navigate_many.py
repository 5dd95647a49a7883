"""The navigator over many artifacts at once (a region's covered plan, every step for
all artifacts together: ``navigate_many``) against the same artifacts navigated one
by one (``Artifact.navigate``, a batch of one): the same leaves and selected blocks,
the same error (class and message), the same read statistics and page cache entries
-- on every corruption case of ``tests/corruption`` that gets past opening, on
seeded random mutations, and on lists mixing good and bad artifacts and artifacts
of different field layouts; through every page-loading path (libzstd here or on the
helper thread, python-zstandard, the kernels run as Python)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import gtsamples as gs
from gtsamples.cache import PageCache
from gtsamples.plan.navigator import Navigation, navigate_many
from gtsamples.plan import Selection
from gtsamples.storage import ReadStats

from .conftest import kernels_as_python
from .corruption import kit
from .corruption.fixtures import FIXTURES, write_fixture
from .corruption.test_rules import CASES, _random_mutation, build
from .fuzz.targets import navigation_outcome

# (numpy scalar wrap-around when the kernels run as Python: XXH64's multiplications)
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")

SELECTIONS = [
    Selection(),
    Selection.build(series=[(1, 5)]),
    Selection.build(series=[(1, 6), (4, 1)], start=0, end=10_000),
    Selection.build(tables=[2, 3]),
    Selection.build(start=1_064_000),
    Selection.build(series=[(9, 9)]),
    Selection.build(series=[]),
]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = {}
    for name in FIXTURES:
        root = tmp_path_factory.mktemp(f"nav-{name}")
        table, entry = write_fixture(name, root)
        out[name] = (table, str(root), entry)
    return out


def _open(root, entry):
    return gs.open_artifact(root, entry=entry, cache=PageCache())


def _one(art, sel):
    st = ReadStats()
    try:
        res = art.navigate(sel, st)
    except gs.SamplesError as e:
        res = e
    return navigation_outcome(res), st


def _cache_state(art):
    c = art.cache
    return sorted((k[3:], type(v[0]).__name__) for k, v in c._items.items())


def _compare(arts_a, arts_b, sel):
    """arts_a navigated one by one, arts_b (the same artifacts, fresh caches) together."""
    want = [_one(a, sel) for a in arts_a]
    stats = [ReadStats() for _ in arts_b]
    got = navigate_many(arts_b, sel, stats)
    for k, (a, b, res, st) in enumerate(zip(arts_a, arts_b, got, stats)):
        assert navigation_outcome(res) == want[k][0], (k, sel)
        if want[k][0][0] == "ok":
            assert st == want[k][1], (k, sel)
            assert _cache_state(b) == _cache_state(a)
    return [w[0][0] for w in want]


@pytest.fixture(params=["libzstd", "libzstd-helper", "python-zstandard", "kernels-as-python"])
def pages_path(request, monkeypatch):
    """Leaf pages decompressed and checked by the numba kernel here (libzstd; small
    loads), on the helper thread (every load there), or page by page here when no
    libzstd loads (root pages then decompressed by python-zstandard before the root
    kernel checks them); or navigate's kernels (heads, roots, pages) run as Python
    (their ``py_func``: the same source interpreted, a second implementation of
    each rule, against ``Artifact.navigate``'s)."""
    from gtsamples.plan import loading

    if request.param == "python-zstandard":
        from gtsamples.format import libzstd

        monkeypatch.setattr(libzstd, "get", lambda: None)
    elif request.param == "libzstd-helper":
        monkeypatch.setattr(loading, "HELPER_PAGE_BYTES", 0)
    elif request.param == "kernels-as-python":
        from gtsamples.format import zstd_frames
        from gtsamples.format import pages
        from gtsamples.plan import selection

        swapped = kernels_as_python(monkeypatch, loading, zstd_frames, pages, selection)  # (the kernels' callees too)
        assert {"heads_rules", "_roots_kernel", "_leaves_kernel", "ref_rule", "selects_range", "internal_page_rules",
                "leaf_page_rules"} <= swapped
    return request.param


def test_valid_fixtures(written, pages_path):
    """Every fixture (several field layouts, depth 1 and 2) in one batch, and each alone."""
    roots = [written[name][1:] for name in FIXTURES]
    for sel in SELECTIONS:
        want = [_one(_open(root, entry), sel) for root, entry in roots]
        stats = [ReadStats() for _ in roots]
        got = navigate_many([_open(root, entry) for root, entry in roots], sel, stats)
        for k, name in enumerate(FIXTURES):
            assert navigation_outcome(got[k]) == want[k][0] and want[k][0][0] == "ok", (name, sel)
            assert stats[k] == want[k][1], (name, sel)


def test_cached_parts_and_leaves(written):
    """A second navigation finds parts and leaves in the cache: same leaves, hits counted."""
    _, root, entry = written["multi"]
    a, b = _open(root, entry), _open(root, entry)
    for sel in SELECTIONS:
        _compare([a], [b], sel)
    for sel in SELECTIONS:
        _compare([a], [b], sel)


META_CASES = [c for c in CASES if c.stage != "open" and not c.gen_dir]


@pytest.mark.parametrize("case", META_CASES, ids=[c.id for c in META_CASES])
def test_corruption_cases(case, written, tmp_path):
    _table, root, entry, _gen = build(case, written, tmp_path)
    try:
        _open(root, entry)
    except gs.SamplesError:
        pytest.skip("fails to open")
    outcomes = set()
    for sel in SELECTIONS[:5]:
        outcomes.update(_compare([_open(root, entry)], [_open(root, entry)], sel))
    if case.err is not None and case.stage == "meta":
        assert "error" in outcomes


def test_mixed_good_and_bad_artifacts(written, tmp_path, pages_path):
    """Good and corrupt artifacts in one call: each gets its own outcome."""
    rng = random.Random(3)
    arts = []
    for i in range(12):
        name = rng.choice(["multi", "flat"])
        _, root, entry = written[name]
        if i % 3:
            m = kit.ArtifactModel.load(root, entry)
            _random_mutation(rng, m)
            root, entry = m.write(tmp_path / f"s{i}")
        arts.append((root, entry))
    ok = []
    for root, entry in arts:
        try:
            _open(root, entry)
            ok.append((root, entry))
        except gs.SamplesError:
            pass
    seen = set()
    for sel in SELECTIONS:
        seen.update(_compare([_open(*x) for x in ok], [_open(*x) for x in ok], sel))
    assert seen == {"ok", "error"}


@pytest.mark.parametrize("seed", range(4))
def test_random_mutations(seed, written, tmp_path, pages_path):
    rng = random.Random(100 + seed)
    for i in range(20):
        name = rng.choice(["multi", "flat"])
        _, root, entry = written[name]
        m = kit.ArtifactModel.load(root, entry)
        _random_mutation(rng, m)
        out_root, out_entry = m.write(tmp_path / f"s{i}")
        try:
            _open(out_root, out_entry)
        except gs.SamplesError:
            continue
        for sel in (SELECTIONS[0], SELECTIONS[1]):
            _compare([_open(out_root, out_entry)], [_open(out_root, out_entry)], sel)


def test_empty_selection_and_no_artifacts(written):
    _, root, entry = written["multi"]
    assert navigate_many([], Selection(), []) == []
    assert navigate_many([_open(root, entry)], Selection.build(series=[]), [ReadStats()]) == [[]]


def test_groups_added_one_by_one(written, tmp_path):
    """Navigation.add per group (a region opens artifacts group by group): the same
    outcome per artifact as one navigate_many call."""

    rng = random.Random(9)
    arts = []
    for i in range(9):
        name = rng.choice(["multi", "flat", "wide"])
        _, root, entry = written[name]
        if i % 4 == 3:
            m = kit.ArtifactModel.load(root, entry)
            _random_mutation(rng, m)
            root, entry = m.write(tmp_path / f"g{i}")
        try:
            _open(root, entry)
        except gs.SamplesError:
            continue
        arts.append((root, entry))
    for sel in SELECTIONS:
        want = [_one(_open(*x), sel)[0] for x in arts]
        nav = Navigation(sel)
        for lo in range(0, len(arts), 2):
            nav.add([_open(*x) for x in arts[lo:lo + 2]], [ReadStats() for _ in arts[lo:lo + 2]])
        assert [navigation_outcome(r) for r in nav.finish()] == want


_IDS = hs.tuples(hs.integers(0, 4), hs.integers(0, 6))  # small: collisions and edges are common
_TS = hs.integers(-3, 3)


@settings(max_examples=400, deadline=None)
@given(series=hs.one_of(hs.none(), hs.lists(_IDS, max_size=4)),
       tables=hs.one_of(hs.none(), hs.lists(hs.integers(0, 4), max_size=3)),
       start=hs.one_of(hs.none(), _TS), end=hs.one_of(hs.none(), _TS),
       a=_IDS, b=_IDS, t=hs.tuples(_TS, _TS))
def test_root_kernel_selects_children_as_selection_selects(series, tables, start, end, a, b, t):
    """The root kernel's choice of children (``selects_range``, compiled) is
    ``Selection.selects`` for any page bounds and any selection."""
    from gtsamples.plan.selection import selects_range as _range_selected

    sel = Selection.build(series=series, tables=tables, start=start, end=end)
    first, last = min(a, b), max(a, b)
    mn, mx = min(t), max(t)
    want = sel.selects(first, last, mn, mx)
    got = _range_selected(np.uint64(first[0]), np.uint64(first[1]), np.uint64(last[0]), np.uint64(last[1]),
                          np.int64(mn), np.int64(mx), *sel.kernel_args)
    assert bool(got) == want, (sel, first, last, mn, mx)
