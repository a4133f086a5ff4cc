"""The engine-v2 layout: filters with wildcards live in one hash table per
shape, the rest (rare shapes past the budget, very deep filters, version 1
images) in the trie.  Every path is checked against the reference."""
import gc
import os
import random

import pytest

import topicmatch
from topicmatch import _reference as R

from isolated import run_isolated
from strategies import DIALECTS, ONE, REST, SEP, all_ids, norm

HERE = os.path.dirname(os.path.abspath(__file__))


def agree(sl, ref, subjects):
    for s in subjects:
        assert norm(sl.match(s)) == norm(ref.match(s)), s
        assert norm(sl.match(s, dedupe=True)) == norm(ref.match(s, dedupe=True)), s
        assert sl.has_interest(s) is ref.has_interest(s), s
        assert tuple(sl.num_interest(s)) == ref.num_interest(s), s
    b = sl.match_many(subjects, queues="all")
    for i, s in enumerate(subjects):
        assert sorted(b[i].tolist()) == sorted(all_ids(ref.match(s)).elements()), s


def both(sl_ref_pairs, f, i, q=None):
    for x in sl_ref_pairs:
        x.insert(f, i, queue=q) if isinstance(x, topicmatch.Sublist) else x.insert(f, i, q)


def many_shapes(dialect, n_tokens, count, rng):
    """count filters of n_tokens tokens with distinct one-wildcard masks."""
    sep, one = SEP[dialect], ONE[dialect]
    out = []
    for mask in range(1, 1 << n_tokens):
        toks = [one if (mask >> k) & 1 else rng.choice("ab") for k in range(n_tokens)]
        out.append(sep.join(toks))
        if len(out) == count:
            break
    return out


@pytest.mark.parametrize("dialect", DIALECTS)
def test_shapes_past_the_budget_go_to_the_trie(dialect):
    # 7 tokens give 127 one-wildcard masks: more shapes than the budget
    # (64 in all, 24 probed per subject length); the surplus lives in the trie
    rng = random.Random(5)
    sl, ref = topicmatch.Sublist(dialect), R.ReferenceSublist(dialect)
    filters = many_shapes(dialect, 7, 127, rng)
    for i, f in enumerate(filters):
        both((sl, ref), f, i)
    subjects = [SEP[dialect].join(rng.choice("abc") for _ in range(7)) for _ in range(200)]
    agree(sl, ref, subjects)
    # the same filters again are found wherever they went: nothing is added
    assert sl.insert_many(filters, list(range(len(filters)))) == 0
    # removing every other one, in a different order, keeps the answers right
    for i in sorted(range(0, len(filters), 2), key=lambda _: rng.random()):
        sl.remove(filters[i], i)
        ref.remove(filters[i], i)
    agree(sl, ref, subjects)
    # and a serialized image of the mixed layout answers the same
    agree(topicmatch.Sublist.from_bytes(sl.to_bytes()), ref, subjects)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_filters_deeper_than_a_shape_holds(dialect):
    sep, one, rest = SEP[dialect], ONE[dialect], REST[dialect]
    sl, ref = topicmatch.Sublist(dialect), R.ReferenceSublist(dialect)
    deep = ["a"] * 60
    f1 = sep.join(deep[:30] + [one] + deep[31:])
    f2 = sep.join(deep[:55]) + sep + rest
    f3 = sep.join([one] * 60)
    for i, f in enumerate([f1, f2, f3]):
        both((sl, ref), f, i, "g" if i == 2 else None)
    subjects = [sep.join(deep), sep.join(deep[:59] + ["b"]), sep.join(deep[:56]), sep.join(deep[:30] + ["x"] + deep[31:])]
    agree(sl, ref, subjects)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_literals_deeper_than_the_shape_mixes(dialect):
    # The literal table's key sums every token's mix; a subject computes the
    # first FS_SHAPE_MAX_TOKENS (48) of them for the shapes and adds the rest.
    sep = SEP[dialect]
    sl, ref = topicmatch.Sublist(dialect), R.ReferenceSublist(dialect)
    words = [f"w{i}" for i in range(70)]
    filters = [sep.join(words[:n]) for n in (47, 48, 49, 60, 70)]
    filters.append(sep.join(words[:59] + ["other"]))
    for i, f in enumerate(filters):
        both((sl, ref), f, i, "g" if i % 2 else None)
    subjects = filters + [sep.join(words[:n]) for n in (46, 50, 61, 69)]
    subjects.append(sep.join(words[:48] + ["x"] + words[49:60]))
    agree(sl, ref, subjects)
    agree(topicmatch.Sublist.from_bytes(sl.to_bytes()), ref, subjects)
    for i in range(0, len(filters), 2):
        sl.remove(filters[i], i)
        ref.remove(filters[i], i, None)
    agree(sl, ref, subjects)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_shape_churn(dialect):
    sep, one, rest = SEP[dialect], ONE[dialect], REST[dialect]
    sl, ref = topicmatch.Sublist(dialect, cache_size=16), R.ReferenceSublist(dialect)
    empty = sl.stats()["memory_bytes"]
    subjects = [f"a{sep}b", f"a{sep}b{sep}c", f"x{sep}b", "a"]
    agree(sl, ref, subjects)
    for round_ in range(3):
        # a shape appears with its first filter and vanishes with its last
        both((sl, ref), f"a{sep}{one}", 1)
        agree(sl, ref, subjects)
        both((sl, ref), f"{one}{sep}b", 2, "q")
        both((sl, ref), f"a{sep}{rest}", 3)
        agree(sl, ref, subjects)
        for f, i, q in [(f"a{sep}{one}", 1, None), (f"{one}{sep}b", 2, "q"), (f"a{sep}{rest}", 3, None)]:
            sl.remove(f, i, queue=q)
            ref.remove(f, i, q)
            agree(sl, ref, subjects)
    assert len(sl) == 0 and sl.stats()["memory_bytes"] >= empty


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_shape_appearing_between_batches_of_one_call(dialect):
    # match_many holds the read lock for 1,024 rows at a time: an insert from
    # another thread lands between chunks; rows after it see the new shape
    import threading
    sep, one = SEP[dialect], ONE[dialect]
    sl = topicmatch.Sublist(dialect)
    sl.insert(f"a{sep}b", 1)
    subjects = [f"a{sep}b"] * 200_000
    started = threading.Event()

    def writer():
        started.wait()
        sl.insert(f"{one}{sep}b", 2)

    t = threading.Thread(target=writer)
    t.start()
    started.set()
    b = sl.match_many(subjects, threads=2)
    t.join()
    # every row is either before the insert ([1]) or after it ([1, 2])
    for i in range(0, len(subjects), 997):
        assert sorted(b[i].tolist()) in ([1], [1, 2]), i
    assert sorted(sl.match_many([f"a{sep}b"])[0].tolist()) == [1, 2]


def test_version_1_images_still_load_and_change():
    # a version 1 image keeps its wildcard filters in the trie; inserting
    # them again finds them there instead of adding a second entry
    with open(os.path.join(HERE, "golden", "nats_small_v1.fsb"), "rb") as f:
        sl = topicmatch.Sublist.from_bytes(f.read())
    n = len(sl)
    assert sl.insert("orders.*.created", 3) is False
    assert sl.insert("orders.>", 4, queue="workers") is False
    sl.remove("orders.*.created", 3)
    assert 3 not in sl.match("orders.eu.created").subs
    assert sl.insert("orders.*.created", 3) is True
    assert len(sl) == n
    again = topicmatch.Sublist.from_bytes(sl.to_bytes())
    assert norm(again.match("orders.eu.created")) == norm(sl.match("orders.eu.created"))


# --------------------------------------------------------- dedupe

@pytest.mark.parametrize("dialect", DIALECTS)
def test_dedupe_delivers_each_subscriber_once(dialect):
    sep, one, rest = SEP[dialect], ONE[dialect], REST[dialect]
    sl = topicmatch.Sublist(dialect)
    # subscriber 7 holds three overlapping filters, subscriber 8 one
    for f in (f"a{sep}b", f"a{sep}{one}", f"a{sep}{rest}"):
        sl.insert(f, 7)
    sl.insert(f"a{sep}b", 8)
    sl.insert(f"a{sep}{one}", 9, queue="q")
    sl.insert(f"a{sep}{rest}", 9, queue="q")
    assert sorted(sl.match(f"a{sep}b").subs) == [7, 7, 7, 8]
    m = sl.match(f"a{sep}b", dedupe=True)
    assert sorted(m.subs) == [7, 8]
    for queues in ("all", "none", "pick"):
        for threads in (1, 2):
            row = sl.match_many([f"a{sep}b"] * 3, queues=queues, threads=threads, dedupe=True)[2].tolist()
            assert len(row) == len(set(row)) and {7, 8} <= set(row), (queues, row)
    # a long row takes the hash-set path
    for i in range(100):
        sl.insert(f"{one}{sep}b", 1000 + i % 60)
    row = sl.match_many([f"a{sep}b"], queues="all", dedupe=True)[0].tolist()
    assert sorted(row) == sorted({7, 8, 9} | {1000 + k for k in range(60)})


# --------------------------------------------------------- hardening (issue F1, F4, F5)

F1_MATCH = """
import gc, sys, topicmatch
sl = topicmatch.Sublist(); n = 5000
sl.insert_many(["a.b"] * n, range(n), [f"q{i}" for i in range(n)]); sl.insert("x.y", -1)
class B:
    def __init__(s): s.me = s
    def __del__(s): sl.{inner}
gc.set_threshold(100, 1, 1)
for _ in range(50):
    [B() for _ in range(30)]
    r = sl.match("a.b")
    assert r.subs == [] and len(r.groups) == n, (len(r.subs), len(r.groups))
    assert all(g[2] == [int(g[0][1:])] for g in r.groups)
print("ok")
"""


@pytest.mark.parametrize("inner", ['match("x.y")', 'match_many(["x.y", "a.b"])', 'has_interest("x.y")',
                                   'num_interest("a.b")'])
def test_gc_reentry_during_match_keeps_the_outer_result(inner):
    # F1: a __del__ run by the garbage collector while match() builds its
    # result calls back into the index on the same thread
    out = run_isolated(F1_MATCH.replace("{inner}", inner))
    assert out.strip().endswith("ok"), out


@pytest.mark.parametrize("dialect", DIALECTS)
def test_failed_insert_many_keeps_memory_bytes(dialect):
    # F5: the id array a failed batch grew is given back when it is undone
    sep = SEP[dialect]
    sl = topicmatch.Sublist(dialect)
    f = sep.join("cccc")
    sl.insert(f, 0)
    m = sl.stats()["memory_bytes"]
    with pytest.raises(ValueError):
        sl.insert_many([f, "bad\x00filter"], [-3, -3])
    assert sl.stats()["memory_bytes"] == m


@pytest.mark.parametrize("dialect", DIALECTS)
def test_memory_follows_the_live_set(dialect):
    # F4: tables shrink when they empty, so an emptied index is back to
    # (nearly) the memory of a new one
    sep, one, rest = SEP[dialect], ONE[dialect], REST[dialect]
    sl = topicmatch.Sublist(dialect)
    empty = sl.stats()["memory_bytes"]
    n = 60_000
    filters = []
    for i in range(n):
        k = i % 4
        base = [f"t{i % 97}", f"u{i}", f"v{i % 13}"]
        if k == 1:
            base[1] = one
            base.append(f"w{i}")
        elif k == 2:
            base.append(rest)
        elif k == 3:
            base = ["deep", f"d{i % 50}", f"e{i}", "x"]
        filters.append(sep.join(base))
    ids = list(range(n))
    sl.insert_many(filters, ids)
    full = sl.stats()["memory_bytes"]
    assert full > 50 * n
    sl.remove_many(filters, ids)
    assert len(sl) == 0
    left = sl.stats()["memory_bytes"] - empty
    assert left < 4096, left
    # and it grows and empties again the same way
    sl.insert_many(filters, ids)
    sl.remove_many(filters, ids)
    assert sl.stats()["memory_bytes"] - empty < 4096
