"""The part-file rules, checked once in numba kernels, against the rule-by-rule reference.

``gtsamples.format.pages`` checks headers, trailers, page references, internal
and leaf pages, block boundaries and first ordinals in numba functions that
return a rule code; the message comes from the code (``format/rules.py``).
``tests/format/reference.py`` writes every rule out in Python and numpy.  Here
both must reach the same verdict and, for a broken rule, the same error class
and message: on random and mutated records, on every corruption case of
``tests/corruption`` and on random mutations of whole artifacts (navigation
through the navigator against the reference's own navigation, read statistics
included).
"""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import gtsamples as gs
from gtsamples.cache import PageCache
from gtsamples.errors import SamplesError
from gtsamples.format import constants as C
from gtsamples.format import pages
from gtsamples.format import rules as R
from gtsamples.format.manifest import PART_DTYPE
from gtsamples.storage import ReadStats

from ..corruption import kit
from ..corruption.test_rules import CASES, _random_mutation, build
from ..corruption.test_rules import written  # noqa: F401 - the fixture artifacts (a pytest fixture)
from ..fuzz.targets import navigation_outcome
from ..test_navigate_many import SELECTIONS as NAV_SELECTIONS
from . import reference

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")

_PAGE_REF = struct.Struct("<IQIQqqQIIQHHI")


def _outcome(fn):
    try:
        res = fn()
    except SamplesError as e:
        return ("error", type(e).__name__, str(e))
    return ("ok", res)


class _Part:
    """A manifest part descriptor (the fields the trailer is checked against)."""

    def __init__(self, row):
        self.first = (int(row["first_table_id"]), int(row["first_tsid"]))
        self.last = (int(row["last_table_id"]), int(row["last_tsid"]))
        self.min_timestamp = int(row["min_timestamp"])
        self.max_timestamp = int(row["max_timestamp"])


# --- trailers and headers ----------------------------------------------------------------

_U32 = hs.one_of(hs.sampled_from([0, 1, 2, 7, (1 << 31), (1 << 32) - 1]), hs.integers(0, (1 << 32) - 1))
_U64 = hs.one_of(hs.sampled_from([0, 1, 16, 100, 112, 4096, (1 << 63), (1 << 64) - 1]),
                 hs.integers(0, (1 << 64) - 1))
_I64 = hs.one_of(hs.sampled_from([-(1 << 63), -1, 0, 1, 5, (1 << 63) - 1]), hs.integers(-(1 << 63), (1 << 63) - 1))


def _trailer_bytes(root: tuple, depth: int, version: int, file_length: int, payload_end: int, magic: bytes,
                   checksum: int | None) -> bytes:
    body = _PAGE_REF.pack(*root) + struct.pack("<IIQQ8s", depth, version, file_length, payload_end, magic)
    return body + struct.pack("<Q", pages.xxh64(body) if checksum is None else checksum)


def _valid_head(size: int = 4096):
    """A valid (header, trailer, size, part descriptor row) with a root of 200 bytes."""
    root = (1, 5, 2, 9, -10, 20, size - 112 - 200, 200, 300, 7, 1, 1, 0)
    trailer = _trailer_bytes(root, 2, 1, size, 1000, C.MAGIC, None)
    row = np.zeros(1, PART_DTYPE)[0]
    for k, v in zip(("first_table_id", "first_tsid", "last_table_id", "last_tsid", "min_timestamp", "max_timestamp"),
                    root[:6]):
        row[k] = v
    return struct.pack("<8sII", C.MAGIC, 1, 0), trailer, size, row


def _both_heads(header, trailer, size, row):
    fast = _outcome(lambda: pages.parse_head(header, trailer, size, row, "part-0.samples"))

    def slow():
        t = reference.parse_trailer(trailer, size, _Part(row), "part-0.samples")
        reference.parse_header(header, "part-0.samples")
        return t

    return fast, _outcome(slow)


def test_valid_head():
    fast, slow = _both_heads(*_valid_head())
    assert fast == slow and fast[0] == "ok"


def _mutated_head(field: int, value: int, fix_checksum: bool, size: int):
    """A valid part head with one field of its trailer (0-18), header (19-21) or part
    descriptor (22-27) set to ``value`` (wrapped to the field's width)."""
    header, trailer, size, row = _valid_head(size)
    root = list(_PAGE_REF.unpack(trailer[:72]))
    tail = list(struct.unpack("<IIQQ8sQ", trailer[72:]))
    head = list(struct.unpack("<8sII", header))
    u64, i64 = value % (1 << 64), (value + (1 << 63)) % (1 << 64) - (1 << 63)
    if field < 13:
        fmt = "IQIQqqQIIQHHI"[field]
        root[field] = value % (1 << (8 * struct.calcsize(fmt))) if fmt.isupper() else i64
    elif field < 19:
        k = field - 13
        tail[k] = value % (1 << 32) if k < 2 else u64.to_bytes(8, "little") if k == 4 else u64
    elif field < 22:
        k = field - 19
        head[k] = u64.to_bytes(8, "little") if k == 0 else value % (1 << 32)
    else:
        name = ("first_table_id", "first_tsid", "last_table_id", "last_tsid", "min_timestamp", "max_timestamp")[field - 22]
        row[name] = i64 if name.endswith("timestamp") else value % (1 << 32 if "table" in name else 1 << 64)
    trailer = _trailer_bytes(tuple(root), *tail[:5], None if fix_checksum else tail[5])
    return struct.pack("<8sII", *head), trailer, size, row


@settings(max_examples=600, deadline=None)
@given(field=hs.integers(0, 27), value=hs.one_of(_U64, _I64), fix_checksum=hs.booleans(),
       size=hs.sampled_from([4096, 8192]))
def test_heads_equal_reference(field, value, fix_checksum, size):
    """One field of a valid trailer, header or part descriptor changed (the trailer
    checksum recomputed or not): the kernel's verdict and message are the reference's."""
    fast, slow = _both_heads(*_mutated_head(field, value, fix_checksum, size))
    assert fast == slow


def test_heads_reach_every_rule():
    """Every field set to edge values: the verdicts are the reference's, and they reach
    every rule of the trailer, its root reference and the header."""
    seen = set()
    for field in range(28):
        for value in (0, 1, 2, 16, 999, 3784, 4096, 1 << 31, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, -1):
            for fix in (True, False):
                fast, slow = _both_heads(*_mutated_head(field, value, fix, 4096))
                assert fast == slow, (field, value, fix)
                if fast[0] == "error":
                    seen.add(fast[2].split(": ", 1)[1][:24])
    assert len(seen) >= 18, sorted(seen)


# --- internal pages ----------------------------------------------------------------------


def _internal_page(children: list[tuple]) -> bytes:
    return struct.pack("<IQ", C.PAGE_KIND_INTERNAL, len(children)) + b"".join(_PAGE_REF.pack(*c) for c in children)


def _valid_internal(n: int = 4):
    children = []
    off = 1000
    for i in range(n):
        children.append((1, 10 * i, 1, 10 * i + 5, 100 * i, 100 * i + 50, off, 64, 128, 0, 1, i % 2, 0))
        off += 64
    for i, c in enumerate(children):  # raw children: equal lengths
        if c[11] == 0:
            children[i] = c[:7] + (64, 64) + c[9:]
    ref = pages.PageRef((1, 0), (1, 10 * (n - 1) + 5), 0, 100 * (n - 1) + 50, off + 100, 12 + 72 * n,
                        12 + 72 * n, 0, 1, 0, 0)
    return children, ref


def _both_internal(data, ref, area):
    fast = _outcome(lambda: pages.parse_internal_page(data, ref, area, "root page"))
    slow = _outcome(lambda: reference.parse_internal_page(data, ref, area, "root page"))
    return fast, slow


@settings(max_examples=600, deadline=None)
@given(n=hs.integers(1, 5), child=hs.integers(0, 4), field=hs.integers(0, 12), value=hs.one_of(_U64, _I64),
       cut=hs.sampled_from([0, 0, 0, 1, 4, 72, -1, -5]), kind=hs.sampled_from([1, 1, 1, 0, 2]),
       count=hs.sampled_from([None, None, 0, 1, 911, (1 << 64) - 1]))
def test_internal_pages_equal_reference(n, child, field, value, cut, kind, count):
    children, ref = _valid_internal(n)
    c = list(children[child % n])
    fmt = "IQIQqqQIIQHHI"[field]
    c[field] = (int(value) % (1 << (8 * struct.calcsize(fmt))) if fmt.isupper()
                else (int(value) + (1 << 63)) % (1 << 64) - (1 << 63))
    children[child % n] = tuple(c)
    data = bytearray(_internal_page(children))
    data[0:4] = struct.pack("<I", kind)
    if count is not None:
        data[4:12] = struct.pack("<Q", count)
    data = bytes(data[:len(data) - cut] if cut > 0 else data + bytes(-cut))
    fast, slow = _both_internal(data, ref, (900, ref.offset + ref.stored_len))
    assert fast == slow


def test_valid_internal_page():
    children, ref = _valid_internal()
    fast, slow = _both_internal(_internal_page(children), ref, (900, 5000))
    assert fast == slow and fast[0] == "ok" and len(fast[1]) == 4


# --- boundaries and first ordinals -------------------------------------------------------


def _leaf_of(blocks: list[tuple], chunk_offsets: tuple[int, int] = (100, 200)) -> pages.LeafPage:
    b = np.zeros(len(blocks), pages.BLOCK_PREFIX)
    for i, (tid, tsid, mn, mx, ordn) in enumerate(blocks):
        b[i] = (tid, tsid, mn, mx, ordn, 1, 3)
    cols = np.zeros(3 * len(blocks), pages.COLUMN_DESC)
    cols["ref"]["offset"] = np.linspace(*chunk_offsets, 3 * len(blocks)).astype(np.uint64)
    cols["ref"]["stored_len"] = 8
    return pages.LeafPage(b, cols, np.arange(len(blocks), dtype=np.int64) * 3)


_BLOCK = hs.tuples(hs.integers(0, 3), hs.integers(0, 3), hs.integers(-3, 3), hs.integers(-3, 3),
                   hs.sampled_from([0, 1, 2, 3, (1 << 64) - 1]))


@settings(max_examples=500, deadline=None)
@given(a=_BLOCK, b=_BLOCK, same_part=hs.booleans(), gap=hs.integers(-20, 20), prev=hs.one_of(hs.none(), hs.tuples(
    hs.integers(0, 3), hs.integers(0, 3))))
def test_boundaries_and_first_ordinals_equal_reference(a, b, same_part, gap, prev):
    pa, pb = _leaf_of([a], (100, 200)), _leaf_of([b], (208 + gap, 300))
    fast = _outcome(lambda: pages.check_boundary(pa, pb, "leaf 1", same_part))
    slow = _outcome(lambda: reference.check_boundary(pa, pb, "leaf 1", same_part))
    assert fast == slow
    page = _first_block_page(b)
    got = _outcome(lambda: pages.parse_leaf_page(page, _ref_of(b), _Manifest(), (16, 1 << 20), "leaf 0",
                                                 check_first=True, prev_last=prev))
    want = _outcome(lambda: reference.check_first_ordinal(_leaf_of([b]), prev, "leaf 0"))
    assert got[0] == want[0] and got[1:] == want[1:] if want[0] == "error" else got[0] == "ok"


class _Field:
    column_id = 1


class _Timestamp:
    column_id = 0


class _Manifest:
    fields = (_Field(),)
    timestamp = _Timestamp()


def _first_block_page(b) -> bytes:
    """A one-block leaf page holding block ``b`` (time, sequence and operation chunks)."""
    tid, tsid, mn, mx, ordn = b
    mn, mx = min(mn, mx), max(mn, mx)
    out = struct.pack("<IQ", C.PAGE_KIND_LEAF, 1) + struct.pack("<IQqqQII", tid, tsid, mn, mx, ordn, 1, 3)
    for role, enc in ((1, 1), (2, 3), (3, 6)):
        out += struct.pack("<IIQIIQHHII", role, 0, 100 * role, 8, 8, 0, enc, 0, 0, 0)
    return out


def _ref_of(b) -> pages.PageRef:
    tid, tsid, mn, mx, _o = b
    return pages.PageRef((tid, tsid), (tid, tsid), min(mn, mx), max(mn, mx), 0, 1, 1, 0, 1, 0, 0)


def test_every_rule_code_has_a_message():
    codes = {v for k, v in vars(R).items() if k.isupper() and isinstance(v, int) and k not in ("N_VALS", "OK")
             and not k.startswith(("R_", "_"))}
    assert len(codes) >= 60
    for code in codes - {R.PAGE_ZSTD}:  # (a Zstd page's message is python-zstandard's diagnosis)
        for at in (-1, 0, 3):
            e = R.rule_error(code, "obj", at, [1] * R.N_VALS)
            assert isinstance(e, (gs.CorruptArtifactError, gs.UnsupportedError)) and str(e).startswith("obj")


# --- whole artifacts: the navigator against the reference's navigation ---------------------

SELECTIONS = NAV_SELECTIONS[:5]


def _compare(root, entry, sels=SELECTIONS) -> set:
    seen = set()
    for sel in sels:
        art = gs.open_artifact(root, entry=entry, cache=PageCache())
        want_stats, got_stats = ReadStats(), ReadStats()
        try:
            want = navigation_outcome(reference.navigate(art, sel, want_stats))
        except SamplesError as e:
            want = navigation_outcome(e)
        try:
            got = navigation_outcome(gs.open_artifact(root, entry=entry, cache=PageCache()).navigate(sel, got_stats))
        except SamplesError as e:
            got = navigation_outcome(e)
        assert got == want, (sel, got[:3], want[:3])
        if want[0] == "ok":
            assert got_stats == want_stats, sel
        seen.add(want[0])
    return seen


META_CASES = [c for c in CASES if c.stage != "open" and not c.gen_dir]


@pytest.mark.parametrize("case", META_CASES, ids=[c.id for c in META_CASES])
def test_corruption_cases_equal_reference(case, written, tmp_path):
    _table, root, entry, _gen = build(case, written, tmp_path)
    try:
        gs.open_artifact(root, entry=entry, cache=PageCache())
    except SamplesError:
        pytest.skip("fails to open")
    seen = _compare(root, entry)
    if case.err is not None and case.stage == "meta":
        assert "error" in seen


@pytest.mark.parametrize("seed", range(3))
def test_random_mutations_equal_reference(seed, written, tmp_path):
    rng = random.Random(500 + seed)
    seen = set()
    for i in range(25):
        name = rng.choice(["multi", "flat", "wide"])
        _, root, entry = written[name]
        m = kit.ArtifactModel.load(root, entry)
        _random_mutation(rng, m)
        out_root, out_entry = m.write(tmp_path / f"s{i}")
        try:
            gs.open_artifact(out_root, entry=out_entry, cache=PageCache())
        except SamplesError:
            continue
        seen |= _compare(out_root, out_entry, SELECTIONS[:2])
    assert "ok" in seen
