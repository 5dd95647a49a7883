"""The metadata page cache (gtsamples.cache)."""

from gtsamples.cache import PageCache


def test_get_many_is_get_of_each_key_under_one_lock():
    """``get_many`` answers as ``get`` does key by key: the values (None where absent),
    the hit and miss counts, and each hit moved to the recent end (evicted last)."""
    c = PageCache(300)
    for k in "abc":
        c.put(k, k.upper(), 100)
    assert c.get_many(["c", "x", "a", "a"]) == ["C", None, "A", "A"]
    assert (c.hits, c.misses) == (3, 1)
    assert c.get_many([]) == []
    c.put("d", "D", 100)  # evicts the least recent: b (a and c were hit)
    assert c.get_many(["b", "a", "c", "d"]) == [None, "A", "C", "D"]
    assert (c.hits, c.misses) == (6, 2)


def test_get_many_can_leave_misses_to_the_loads():
    """``count_misses=False`` counts the hits only: the lookups that then load the
    missing keys (``get_or_load``) count those misses, once."""
    c = PageCache(300)
    c.put("a", "A", 100)
    assert c.get_many(["a", "x"], count_misses=False) == ["A", None]
    assert (c.hits, c.misses) == (1, 0)
    assert c.get_or_load("x", lambda: ("X", 100)) == "X"
    assert (c.hits, c.misses) == (1, 1)


def test_get_all_answers_only_when_every_key_is_cached():
    """``get_all``: the values when every key is cached (hits counted, each moved to the
    recent end); None when one is absent, and then nothing counted or moved."""
    c = PageCache(300)
    for k in "abc":
        c.put(k, k.upper(), 100)
    assert c.get_all(["a", "x"]) is None
    assert (c.hits, c.misses) == (0, 0)
    c.put("d", "D", 100)  # evicts a: the failed lookup did not make it recent
    assert c.peek("a") is None and c.removals == 1
    assert c.get_all(["b", "c"]) == ["B", "C"] and (c.hits, c.misses) == (2, 0)
    c.put("e", "E", 100)  # evicts d, the least recent now
    assert c.get_all(["d"]) is None and c.get_all(["b", "c", "e"]) == ["B", "C", "E"]
    assert c.get_all([]) == []


class _EqualsEverything:
    def __eq__(self, other):  # (a value whose __eq__ says it is None)
        return True


def test_hits_are_counted_without_comparing_values():
    """Values are never compared with None to count hits (a value's __eq__ may say
    anything; a dataclass's runs Python code per value)."""
    c = PageCache(300)
    c.put("a", _EqualsEverything(), 100)
    assert len(c.get_many(["a", "b"], count_misses=True)) == 2
    assert (c.hits, c.misses) == (1, 1)
    assert c.get_all(["a"]) is not None and c.hits == 2


def test_removals_count_evictions_replacements_and_clears():
    """``removals`` moves whenever a cached value stops being cached."""
    c = PageCache(200)
    c.put("a", "A", 100)
    c.put("b", "B", 100)
    assert c.removals == 0
    c.put("a", "A2", 100)  # replaced
    assert c.removals == 1
    c.put("c", "C", 100)  # evicts b
    assert c.removals == 2 and c.peek("b") is None
    c.clear()
    assert c.removals == 4
    c.clear()
    assert c.removals == 4  # (nothing left to remove)
    c.put("x", "X", 500)  # larger than the cache: never cached, nothing removed
    assert c.removals == 4 and c.peek("x") is None


def test_cache_size_must_be_an_integer_number_of_bytes():
    """Before: NaN raised int()'s 'cannot convert float NaN to integer', "1G" a bare '<'
    comparison error; numpy integers are taken."""
    import numpy as np
    import pytest

    from gtsamples import cache as gcache

    # (np.timedelta64 before: taken by operator.index as its count of units)
    for bad in (float("nan"), 1.5, "1G", True, None, np.bool_(True), np.timedelta64(4096, "ns")):
        with pytest.raises(TypeError, match=f"max_bytes must be an integer number of bytes, not "
                                            f"{type(bad).__name__}"):
            PageCache(bad)
        with pytest.raises(TypeError, match="max_bytes must be an integer number of bytes"):
            gcache.set_cache_size(bad)
    with pytest.raises(ValueError, match=r"max_bytes must be >= 0 \(0 disables caching\), not -1"):
        PageCache(-1)
    assert PageCache(np.int64(4096)).max_bytes == 4096 and type(PageCache(np.uint32(0)).max_bytes) is int
