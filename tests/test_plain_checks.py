"""The checks and figures moved out of the Cython layer into plain Python
(issue 46: _args.ssize / cache_size / image_version / depth, _imagefiles
verify_level / contiguous / describe, _stats.as_dict), at the branches the
API's own tests do not reach: counts beyond a C ssize_t, a version that a C
int would have cut to 3, the derived figures of stats() with and without
lookups."""
import sys

import pytest

import topicmatch
from topicmatch import _args, _imagefiles, _stats


@pytest.mark.parametrize("n", [sys.maxsize + 1, -sys.maxsize - 2, 1 << 70])
def test_counts_beyond_a_c_ssize_are_overflow_errors(n):
    # the words Cython's conversion used when it took these arguments
    for call in (lambda: topicmatch.Sublist("nats", cache_size=n),
                 lambda: topicmatch.Sublist("nats").match_many(["a"], threads=n),
                 lambda: topicmatch._core.route_keys(["a"], depth=n)):
        with pytest.raises(OverflowError, match="^Python int too large to convert to C ssize_t$") as e:
            call()
        assert isinstance(e.value, topicmatch.TopicmatchError)


def test_a_version_is_checked_before_it_becomes_a_c_int():
    sl = topicmatch.Sublist("nats")
    sl.insert("a.b", 1)
    # (2**32 + 3 was cut to 3 by the C int it was stored in: an image came back)
    for v in ((1 << 32) + 3, (1 << 32) + 2, -1, 5):
        with pytest.raises(ValueError, match=rf"^version must be 2, 3 or 4, not {v}$"):
            sl.to_bytes(version=v)
    assert _args.image_version(2) == 2
    with pytest.raises(TypeError, match="^version must be int, not bool$"):
        sl.to_bytes(version=True)


def test_depth_bounds():
    for d in (0, 99):
        with pytest.raises(ValueError, match=rf"^depth must be an integer from 1 to \d+, not {d}$"):
            topicmatch._core.route_keys(["a"], depth=d)
    assert _args.depth(3, 8) == 3


def test_cache_size_takes_index_and_refuses_negative():
    class Two:
        def __index__(self):
            return 2
    assert _args.cache_size(Two()) == 2
    with pytest.raises(ValueError, match="^cache_size must be >= 0, not -1$"):
        _args.cache_size(-1)


def test_verify_level_and_contiguous():
    assert _imagefiles.verify_level("checksum") == "checksum"
    assert _imagefiles.verify_level(1) is True and _imagefiles.verify_level([]) is False
    with pytest.raises(ValueError, match="^verify must be True, False or 'checksum', not 'all'$"):
        _imagefiles.verify_level("all")
    b = b"abcdef"
    assert _imagefiles.contiguous(b) is b
    assert _imagefiles.contiguous(memoryview(b)[::2]) == b"ace"
    with pytest.raises(TypeError, match="^data must be a bytes-like object, not int$"):
        _imagefiles.contiguous(3)
    assert _imagefiles.describe("/x.img", b, 6) == "'/x.img'"
    assert _imagefiles.describe(None, b, 6) == "<bytes of 6 bytes>"


def _counters(**kw):
    st = dict.fromkeys(("subscriptions", "nodes", "memory_bytes", "mapped_bytes", "live_subscriptions",
                        "live_bytes", "inserts", "removes", "matches", "fanout_total", "fanout_max",
                        "generation"), 0)
    st["cache"] = dict.fromkeys(("entries", "capacity", "hits", "misses", "bytes"), 0)
    for k, v in kw.items():
        (st["cache"] if k.startswith("cache_") else st)[k.removeprefix("cache_")] = v
    return st


def test_stats_derived_figures():
    d = _stats.as_dict(_counters())
    assert d["cache_hit_rate"] == 0.0 and d["avg_fanout"] == 0.0
    d = _stats.as_dict(_counters(cache_hits=3, cache_misses=1, matches=4, fanout_total=10, fanout_max=7))
    assert d["cache_hit_rate"] == 0.75 and d["avg_fanout"] == 2.5 and d["max_fanout"] == 7
    assert d["cache_hits"] == 3 and d["cache_misses"] == 1


def test_stats_keys_are_the_apis():
    sl = topicmatch.Sublist("nats", cache_size=4)
    sl.insert("a.*", 1)
    sl.match("a.b")
    sl.match("a.b")
    st = sl.stats()
    assert set(st) == set(_stats.as_dict(_counters()))
    assert st["subscriptions"] == 1 and st["matches"] == 2 and st["cache_capacity"] >= 4
