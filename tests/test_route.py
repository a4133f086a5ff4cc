"""route_keys, the sharded fan-out's router (csrc/rules/fs_route.c; docs/design.md,
'Why the sharded fan-out is exact'), checked against the pure-Python reference.

The property that makes the sharded fan-out exact: whenever a filter
matches a subject, either the filter is replicated (ROUTE_ANY: every shard
holds it) or the subject is routed to the filter's key.  Subjects shorter
than d tokens (the AMQP empty key has none) are ROUTE_ANY; invalid and null
rows are told apart."""
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from examples import examples
from topicmatch import _reference as R
from topicmatch._core import ROUTE_ANY, ROUTE_INVALID, ROUTE_KEYED, ROUTE_NULL, route_keys, route_split
from strategies import ALL_DIALECTS, filters, subjects


def _route(values, dialect, depth, filters=False):
    keys, kinds = route_keys(values, dialect, depth, filters=filters)
    return list(zip(kinds.tolist(), keys.tolist()))


@pytest.mark.parametrize("dialect", ALL_DIALECTS)
@settings(max_examples=examples(400), deadline=None)
@given(data=st.data(), depth=st.integers(1, 4))
def test_a_matching_pair_meets_in_one_shard(dialect, data, depth):
    fs = data.draw(st.lists(filters(dialect), min_size=1, max_size=8))
    ss = data.draw(st.lists(subjects(dialect), min_size=1, max_size=8))
    froutes = _route(fs, dialect, depth, filters=True)
    sroutes = _route(ss, dialect, depth)
    for f, (fk, fkey) in zip(fs, froutes):
        assert fk in (ROUTE_KEYED, ROUTE_ANY)
        for s, (sk, skey) in zip(ss, sroutes):
            assert sk in (ROUTE_KEYED, ROUTE_ANY)
            if fk == ROUTE_KEYED and R.subject_matches(f, s, dialect):
                assert (sk, skey) == (ROUTE_KEYED, fkey), (f, s, depth)
    # the same keys from a chunked Arrow column
    chunked = pa.chunked_array([pa.array(ss[:1], pa.string()), pa.array(ss[1:], pa.string())])
    assert _route(chunked, dialect, depth) == sroutes


@pytest.mark.parametrize("dialect, depth, cases", [
    ("nats", 2, [("a.b", ROUTE_KEYED), ("a.b.c", ROUTE_KEYED), ("a", ROUTE_ANY)]),
    ("mqtt", 2, [("a/", ROUTE_KEYED), ("/a", ROUTE_KEYED), ("a", ROUTE_ANY)]),
    ("amqp", 1, [("", ROUTE_ANY), ("a", ROUTE_KEYED), ("*.#", ROUTE_KEYED)]),
])
def test_subject_kinds(dialect, depth, cases):
    got = _route([s for s, _ in cases], dialect, depth)
    assert [k for k, _ in got] == [k for _, k in cases]


def test_filter_kinds_and_the_share_prefix():
    got = _route(["a.b.>", "a.*.c", "a", "*.b", ">", None, "a..b", "a.b"], "nats", 2, filters=True)
    assert [k for k, _ in got] == [ROUTE_KEYED, ROUTE_ANY, ROUTE_ANY, ROUTE_ANY, ROUTE_ANY,
                                   ROUTE_NULL, ROUTE_INVALID, ROUTE_KEYED]
    assert got[0][1] == got[7][1] == _route(["a.b.x"], "nats", 2)[0][1]
    # MQTT: "$share/G/f" routes as f; a filter ending in '#' keeps its parent's key
    share, plain, parent = _route(["$share/g/a/b/#", "a/b/#", "a/b"], "mqtt", 2, filters=True)
    assert share == plain == parent and plain[0] == ROUTE_KEYED
    assert _route(["a/b"], "mqtt", 2)[0] == plain
    # AMQP: '#' among the first words replicates ('#' may match zero words)
    assert [k for k, _ in _route(["a.#", "#.b", "a.b.#"], "amqp", 2, filters=True)] == \
        [ROUTE_ANY, ROUTE_ANY, ROUTE_KEYED]


def test_keys_are_stable_and_spread():
    """Keys are non-negative, spread over shards, and fixed: the driver, the
    executors and another machine must agree (these values are pinned; a
    change would send events and filters of one run to different shards if
    two builds ever met in one cluster)."""
    assert route_keys(["orders.eu"], "nats", 1)[0].tolist() == [416231822545541734]
    assert route_keys(["a/b/c"], "mqtt", 2)[0].tolist() == [8543435277440106538]
    keys, kinds = route_keys([f"k{i}.x" for i in range(4096)], "nats", 1)
    assert (kinds == ROUTE_KEYED).all() and (keys >= 0).all()
    assert len(set((keys % 64).tolist())) == 64
    assert route_keys(["orders.eu"], "nats", 1)[0].tolist() == \
        route_keys(["orders.>"], "nats", 1, filters=True)[0].tolist()


def test_bad_arguments():
    with pytest.raises(ValueError, match="depth"):
        route_keys(["a"], "nats", 0)
    with pytest.raises(ValueError, match="depth"):
        route_keys(["a"], "nats", 17)
    with pytest.raises(ValueError):
        route_keys(["a"], "xmpp", 1)
    with pytest.raises(TypeError):
        route_keys("a.b", "nats", 1)


def test_keys_are_sparks_xxhash64_of_the_prefix():
    """A key is Spark SQL's xxhash64 of the value's first d tokens as they
    stand in it (XXH64 of those UTF-8 bytes, seed 42: what
    `xxhash64(substring_index(v, sep, d))` gives), sign bit cleared, so the
    JVM can route subjects itself (tests/spark/test_route_column.py); here
    against the plain-Python XXH64."""
    from xxh64 import xxh64

    def spark_hash(text):
        return xxh64(text.encode(), 42) & (2 ** 63 - 1)
    assert route_keys(["orders.eu.x"], "nats", 2)[0].tolist() == [spark_hash("orders.eu")]
    assert route_keys(["é/日本//x"], "mqtt", 3)[0].tolist() == [spark_hash("é/日本/")]
    assert route_keys(["$share/g/a/b/c"], "mqtt", 2, filters=True)[0].tolist() == [spark_hash("a/b")]
    # shorter than the depth: the whole value (AMQP's empty key: no byte)
    assert route_keys(["a.b"], "nats", 3)[0].tolist() == [spark_hash("a.b")]
    assert route_keys([""], "amqp", 2)[0].tolist() == [spark_hash("")]
    assert route_split("nats") == (".", "*", ">", False, None)
    assert route_split("mqtt") == ("/", "+", "#", False, "$share/")
    assert route_split("amqp") == (".", "*", "#", True, None)
