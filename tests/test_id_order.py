"""One order for a row's ids, on every path (docs/guide.md, "The order of a row").

A row depends only on the set of subscriptions that match: the plain
subscriptions' ids ascending by value (an id on two matching filters twice,
side by side), then the queue groups by (queue bytes, filter bytes) -- NATS
and AMQP: one group per queue name --, each group's members ascending.  Not
on insertion order, removals, the cache, threads, an image round trip or
sharding: every comparison here is exact (lists and arrays, not sets),
against another build of the same set, against the rows of shards merged
by value, and against src/topicmatch/_reference.py, which restates the order
independently."""
import heapq
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import topicmatch
from topicmatch import _reference as R

from examples import examples
from strategies import ALL_DIALECTS, subjects, subscriptions, tiny_thread_blocks

MODES = ["all", "none", "pick"]


def rows(b):
    return [b[i].tolist() for i in range(len(b))]


def test_minimal_case_round_trip():
    """Queue groups come by name, not in the order they were made: the same
    before and after to_bytes()/from_bytes() (which stores them by name)."""
    sl = topicmatch.Sublist("nats")
    sl.insert("a.a", -2, queue="q2")
    sl.insert("a.a", 1, queue="q1")
    loaded = topicmatch.Sublist.from_bytes(sl.to_bytes())
    for e in (sl, loaded):
        assert e.match_many(["a.a"], queues="all")[0].tolist() == [1, -2]
        assert e.match("a.a").groups == [("q1", None, [1]), ("q2", None, [-2])]


def test_plain_ids_ascending():
    """Plain ids from several nodes (literal table, shapes, trie) come
    ascending by value, whichever filter holds them; an id on two matching
    filters comes twice, side by side (once with dedupe)."""
    subs = [("a.b", 9), ("a.b", 3), ("a.*", 7), (">", 5), ("a.>", 1), ("*.b", 2), ("*.*", 8),
            ("*.*", 3)]
    want = [1, 2, 3, 3, 5, 7, 8, 9]
    for seed in range(6):
        order = subs[:]
        random.Random(seed).shuffle(order)
        sl = topicmatch.Sublist("nats")
        for f, i in order:
            sl.insert(f, i)
        assert sl.match("a.b").subs == want
        assert sl.match("a.b", dedupe=True).subs == sorted(set(want))
        assert sl.match_many(["a.b"])[0].tolist() == want
        assert sl.match_many(["a.b"], dedupe=True)[0].tolist() == sorted(set(want))
        ref = R.ReferenceSublist("nats")
        ref.insert_many([f for f, _ in order], [i for _, i in order])
        assert ref.match("a.b").subs == want



@pytest.mark.parametrize("dialect,sep,one", [("nats", ".", "*"), ("mqtt", "/", "+")])
def test_dedupe_of_a_long_answer_keeps_first_occurrences(dialect, sep, one):
    """match(dedupe=True) is C's dedupe (fs_ids_dedupe, fs_result_dedupe):
    a set past 48 ids, a short scan below; both keep each id's first
    occurrence, in the row's order, in subs and in each group's members,
    as the reference and match_many(dedupe=True) do."""
    sl = topicmatch.Sublist(dialect)
    ref = R.ReferenceSublist(dialect)
    rows = []
    for i in range(70):
        rows += [(f"a{sep}b", i, None), (f"a{sep}{one}", i, None), (f"a{sep}{one}", i % 9, "q")]
        rows += [(f"a{sep}b", 100 + i % 5, "q")]
    for f, i, q in rows:
        sl.insert(f, i, queue=q)
        ref.insert(f, i, queue=q)
    for e in (sl, topicmatch.Sublist.from_bytes(sl.to_bytes())):
        got, want = e.match(f"a{sep}b", dedupe=True), ref.match(f"a{sep}b", dedupe=True)
        assert got.subs == want.subs == list(range(70))
        assert got.groups == want.groups
        assert all(len(set(m)) == len(m) for _, _, m in got.groups)
        assert e.match_many([f"a{sep}b"], dedupe=True, queues="all")[0].tolist() == R.batch_row(
            want, "all", key=f"a{sep}b", dialect=dialect, dedupe=True)
    small = topicmatch.Sublist(dialect)
    for f in (f"a{sep}b", f"a{sep}{one}"):
        small.insert_many([f] * 5, [5, 3, 9, 1, 7])
    assert small.match(f"a{sep}b").subs == [1, 1, 3, 3, 5, 5, 7, 7, 9, 9]
    assert small.match(f"a{sep}b", dedupe=True).subs == [1, 3, 5, 7, 9]

# The shapes of a row's plain ids that fs_hits_plain treats apart: one
# node; a big node and a few others (each placed by binary search); a big
# node and up to 64 others (merged); more (every node merged in place);
# more than 16 nodes (sorted); equal-sized nodes; repeats across nodes;
# the extremes of int64.
LO, HI = -(2 ** 63), 2 ** 63 - 1
SHAPES = {
    "one": [list(range(0, 100, 3))],
    "big+1": [list(range(0, 100, 3)), [50]],
    "big+1 first": [list(range(10, 100, 3)), [-5]],
    "big+1 last": [list(range(10, 100, 3)), [500]],
    "big+8": [list(range(0, 300, 3))] + [[7 * k + 1, 7 * k + 2] for k in range(4)],
    "big+9": [list(range(0, 300, 3))] + [[31 * k + 1] for k in range(9)],
    "big+64": [list(range(0, 300, 3))] + [list(range(k, 200, 25)) for k in range(8)],
    "big+65": [list(range(0, 300, 3))] + [list(range(k, 200, 24)) for k in range(8)] + [[4]],
    "two equal": [list(range(0, 40, 2)), list(range(1, 40, 2))],
    "repeats": [list(range(0, 50, 2)), list(range(0, 50, 4)), [0, 48], [LO, 6, HI]],
    "20 nodes": [[k, 100 - k] for k in range(20)] + [list(range(0, 100, 7))],
    "extremes": [[LO, -1, 0, HI], [LO, HI], [LO + 1, HI - 1]],
    # the merge from both ends (9 to 256 others), at its edges
    "big+9 extremes": [[LO, -3, 0, 5, HI], [LO, 0, HI], [LO, 1, HI], [HI], [LO], [LO + 1, HI - 1]],
    "big+9 extremes, big first": [[LO] + list(range(-9, 9)) + [HI], [LO, HI], [LO, 5, HI], [LO], [HI],
                                  [LO + 1, HI - 1]],
    "big+9 below": [list(range(1000, 1100))] + [[-k] for k in range(9)],
    "big+9 above": [list(range(1000, 1101))] + [[5000 + k] for k in range(9)],
    "big+10 around": [list(range(1000, 1100))] + [[-k, 9000 + k] for k in range(5)],
    "big+256": [list(range(0, 900, 3))] + [list(range(k, 1024, 4)) for k in range(4)],
    "big+257": [list(range(0, 900, 3))] + [list(range(k, 1024, 4)) for k in range(4)] + [[HI]],
}


def _forms(subject):
    """Every NATS filter that matches subject: each token kept or '*', and
    each prefix of those followed by '>' -- 31 for four tokens."""
    toks = subject.split(".")
    full = [[]]
    for t in toks:
        full = [f + [x] for f in full for x in (t, "*")]
    out = [".".join(f) for f in full]
    for k in range(len(toks)):
        out += sorted({".".join(f[:k] + [">"]) for f in full})
    return out


@pytest.fixture(params=["simd", "scalar"])
def merge_form(request):
    """The merge of a row's ids in both its forms: AVX2 where the processor
    has it, and the scalar one, which a machine with AVX2 would otherwise
    never run (fs_merge_simd)."""
    old = topicmatch._core._set_merge_simd(request.param == "simd")
    yield request.param
    topicmatch._core._set_merge_simd(old)


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("cache_size", [0, 8])
def test_plain_merge_shapes(shape, cache_size, merge_form):
    """Run k of the shape is the ids of one matching filter of a.b.c.d, in
    both forms of the merge."""
    forms = _forms("a.b.c.d")
    assert len(forms) == 31
    fs, ids = [], []
    for k, run in enumerate(SHAPES[shape]):
        fs += [forms[k]] * len(run)
        ids += run
    order = list(range(len(fs)))
    random.Random(7).shuffle(order)
    fs, ids = [fs[j] for j in order], [ids[j] for j in order]
    sl = topicmatch.Sublist("nats", cache_size=cache_size)
    assert sl.insert_many(fs, ids) == len(fs)
    ref = R.ReferenceSublist("nats")
    ref.insert_many(fs, ids)
    want = ref.match("a.b.c.d").subs
    assert want == sorted(want) and len(want) == len(fs)
    for _ in range(2):                 # the second: from the cache, where there is one
        assert sl.match("a.b.c.d").subs == want
        assert sl.match("a.b.c.d", dedupe=True).subs == sorted(set(want))
    assert sl.match_many(["a.b.c.d", "x.y", "a.b.c.d"])[0].tolist() == want
    assert sl.match_many(["a.b.c.d", "x.y", "a.b.c.d"])[2].tolist() == want
    assert sl.match_many(["a.b.c.d"], dedupe=True)[0].tolist() == sorted(set(want))
    assert topicmatch.Sublist.from_bytes(sl.to_bytes()).match_many(["a.b.c.d"])[0].tolist() == want


def test_mqtt_groups_by_name_then_filter():
    sl = topicmatch.Sublist("mqtt")
    sl.insert("$share/g/a/#", 4)
    sl.insert("a/+", 3, queue="g")
    sl.insert("a/b", 2, queue="g")
    sl.insert("+/b", 1, queue="h")
    sl.insert("+/b", 0, queue="a")
    assert sl.match("a/b").groups == [("a", "+/b", [0]), ("g", "a/#", [4]), ("g", "a/+", [3]),
                                      ("g", "a/b", [2]), ("h", "+/b", [1])]
    assert sl.match_many(["a/b"], queues="all")[0].tolist() == [0, 4, 3, 2, 1]


def test_merged_group_members_ascending():
    """NATS: one group per name across filters, its members merged."""
    sl = topicmatch.Sublist("nats")
    for f, i in [("a.b", 5), ("a.*", 2), ("a.>", 9), ("*.b", 1), ("a.b", 3)]:
        sl.insert(f, i, queue="q")
    assert sl.match("a.b").groups == [("q", None, [1, 2, 3, 5, 9])]
    assert sl.match_many(["a.b"], queues="all")[0].tolist() == [1, 2, 3, 5, 9]


@pytest.mark.parametrize("dialect", ["nats", "amqp"])
@pytest.mark.parametrize("per_node", [3, 20])
def test_two_nodes_groups_merge_by_name(dialect, per_node):
    """A row where two filters hold queue groups, in a dialect that merges
    them by name: their two name-ordered lists merged, a shared name one
    group of both's members -- match() (fs_row_groups), match_many's direct
    emit (fs_group_pair) and an opened image's, against the reference.
    per_node 20: 40 groups, past the 32 that fs_row_groups once ordered by
    insertion and sorted otherwise."""
    rng = random.Random(per_node)
    names = [f"q{k:02d}" for k in range(2 * per_node)]
    shared = set(rng.sample(names, per_node // 2))
    a = sorted(set(rng.sample(names, per_node)) | shared)
    b = sorted(set(rng.sample(names, per_node)) | shared)
    subs = [("x.y", q, 1000 + k) for k, q in enumerate(a)] + [("x.*", q, 2000 + k) for k, q in enumerate(b)]
    subs += [("x.y", None, 7), ("x.*", None, 3)]
    rng.shuffle(subs)
    sl, ref = topicmatch.Sublist(dialect), R.ReferenceSublist(dialect)
    for f, q, i in subs:
        sl.insert(f, i, queue=q)
        ref.insert(f, i, queue=q)
    want = ref.match("x.y")
    assert len(want.groups) == len(set(a) | set(b))
    opened = topicmatch.Sublist.from_bytes(sl.to_bytes())
    for index in (sl, opened):
        got = index.match("x.y")
        assert (got.subs, got.groups) == (want.subs, want.groups)
        for mode in MODES:
            got = index.match_many(["x.y", "x.y"], keys=["k", "j"], queues=mode)
            assert got[0].tolist() == R.batch_row(want, mode, "k", dialect, dedupe=dialect == "amqp")
            assert got[1].tolist() == R.batch_row(want, mode, "j", dialect, dedupe=dialect == "amqp")


def test_removal_keeps_the_order():
    """Removing a group from a node keeps the others in name order."""
    a, b = topicmatch.Sublist("nats"), topicmatch.Sublist("nats")
    for q in ["z", "c", "m", "a"]:
        a.insert("x", ord(q), queue=q)
    a.remove("x", ord("c"), queue="c")
    for q in ["m", "a", "z"]:
        b.insert("x", ord(q), queue=q)
    assert a.match("x").groups == b.match("x").groups == [
        ("a", None, [97]), ("m", None, [109]), ("z", None, [122])]


def test_many_nodes_sorted():
    """More matching filters than are ordered by insertion (16): sorted all
    the same."""
    sl = topicmatch.Sublist("nats")
    filters = [f"a.{'*' if k % 2 else 'b'}.>" if k < 2 else f"a.b.c{k}" for k in range(40)]
    rng = random.Random(1)
    subs = [("a.>", k) for k in range(3)] + [(f, 100 + k) for k, f in enumerate(filters)]
    wild = [("*.b.c7", 50), ("a.*.c7", 51), ("*.*.c7", 52), ("a.b.*", 53), ("*.b.*", 54),
            ("*.*.*", 55), ("a.*.*", 56), (">", 57), ("*.>", 58), ("a.b.>", 59), ("*.b.>", 60),
            ("a.*.>", 61), ("*.*.>", 62), ("a.>", 63), ("a.b.c7", 64), ("a.b.c7", 65), ("*.b.c7", 66),
            ("a.*.c7", 67)]
    subs += wild
    rng.shuffle(subs)
    sl.insert_many([f for f, _ in subs], [i for _, i in subs])
    ref = R.ReferenceSublist("nats")
    ref.insert_many([f for f, _ in subs], [i for _, i in subs])
    assert sl.match("a.b.c7").subs == ref.match("a.b.c7").subs
    assert sl.match_many(["a.b.c7"])[0].tolist() == ref.match("a.b.c7").subs


@pytest.mark.parametrize("dialect", ALL_DIALECTS)
def test_reverse_match_order(dialect):
    sep, one = {"nats": (".", "*"), "mqtt": ("/", "+"), "amqp": (".", "*")}[dialect]
    subs = [(f"b{sep}a", 2, None), (f"a{sep}{one}", 7, "q"), (f"a{sep}{one}", 3, None),
            (f"a{sep}b", 1, "r"), (f"a{sep}b", 1, "p"), (f"a{sep}b", 0, None)]
    for seed in range(4):
        order = subs[:]
        random.Random(seed).shuffle(order)
        sl, ref = topicmatch.Sublist(dialect), R.ReferenceSublist(dialect)
        for f, i, q in order:
            sl.insert(f, i, queue=q)
            ref.insert(f, i, queue=q)
        got = sl.reverse_match(f"{one}{sep}{one}")
        assert got == ref.reverse_match(f"{one}{sep}{one}")
        assert got == [(f"a{sep}{one}", 3, None), (f"a{sep}{one}", 7, "q"), (f"a{sep}b", 0, None),
                       (f"a{sep}b", 1, "p"), (f"a{sep}b", 1, "r"), (f"b{sep}a", 2, None)]


# --- Hypothesis: the same set, built in different ways ------------------------

@st.composite
def builds(draw, dialect):
    """A set of subscriptions, and a second insertion order of it with some
    extra subscriptions inserted and removed on the way."""
    subs = draw(st.lists(subscriptions(dialect), max_size=30))
    other = draw(st.permutations(subs))
    extra = draw(st.lists(subscriptions(dialect), max_size=6))
    return subs, other, extra


def _build(dialect, subs, extra=(), cache_size=0):
    sl = topicmatch.Sublist(dialect, cache_size=cache_size)
    for f, i, q in subs:
        sl.insert(f, i, queue=q)
    for f, i, q in extra:                # inserted, then removed again (if new)
        if sl.insert(f, i, queue=q):
            sl.remove(f, i, queue=q)
    return sl


@pytest.mark.parametrize("dialect", ALL_DIALECTS)
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_same_set_same_rows(dialect, data):
    subs, other, extra = data.draw(builds(dialect))
    ss = data.draw(st.lists(subjects(dialect), min_size=1, max_size=8))
    ref = R.ReferenceSublist(dialect)
    for f, i, q in subs:
        ref.insert(f, i, queue=q)
    first = _build(dialect, subs)
    engines = [first, _build(dialect, other, extra), _build(dialect, other, extra, cache_size=4),
               topicmatch.Sublist.from_bytes(first.to_bytes()),
               topicmatch.Sublist.from_bytes(_build(dialect, other, extra).to_bytes(), cache_size=4)]
    for s in ss:
        for dedupe in (False, True):
            want = ref.match(s, dedupe=dedupe)
            for e in engines:
                for _ in range(2):      # the second: from the cache, where there is one
                    m = e.match(s, dedupe=dedupe)
                    assert (m.subs, m.groups) == (want.subs, want.groups), (s, dedupe)
    keys = data.draw(st.one_of(st.none(), st.lists(st.sampled_from(["k", "l", "m"]),
                                                    min_size=len(ss), max_size=len(ss))))
    threads = data.draw(st.integers(1, 4))
    block_rows = data.draw(st.integers(1, 3))
    for queues in MODES:
        for dedupe in (False, True):
            dd = dedupe or dialect == "amqp"
            want = [R.batch_row(ref.match(s), queues, key=s if keys is None else keys[k],
                                dialect=dialect, dedupe=dd) for k, s in enumerate(ss)]
            for e in engines:
                got = rows(e.match_many(ss, keys=keys, queues=queues, dedupe=dedupe))
                assert got == want, (queues, dedupe)
                with tiny_thread_blocks(block_rows):
                    got = rows(e.match_many(ss, keys=keys, queues=queues, threads=threads, dedupe=dedupe))
                assert got == want, (queues, dedupe, threads, block_rows)


@pytest.mark.parametrize("dialect", ALL_DIALECTS)
@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_shards_merge_by_value(dialect, data):
    """The sharded fan-out's rule: cut the subscriptions into shards, match
    each, and the plain rows merged by value are the unsharded row."""
    subs = list(dict.fromkeys(data.draw(st.lists(subscriptions(dialect), max_size=40))))
    nshards = data.draw(st.integers(1, 4))
    ss = data.draw(st.lists(subjects(dialect), min_size=1, max_size=6))
    whole = _build(dialect, subs)
    shards = [_build(dialect, [x for k, x in enumerate(subs) if k % nshards == n]) for n in range(nshards)]
    for dedupe in (False, True):
        want = rows(whole.match_many(ss, queues="none", dedupe=dedupe))
        parts = [rows(sh.match_many(ss, queues="none", dedupe=dedupe)) for sh in shards]
        for i in range(len(ss)):
            merged = list(heapq.merge(*(p[i] for p in parts)))
            if dedupe or dialect == "amqp":
                merged = list(dict.fromkeys(merged))
            assert want[i] == merged == sorted(want[i]), (ss[i], dedupe)
