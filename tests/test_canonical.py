"""Canonical index images and order-independent picks (issue 23).

An image written by to_bytes() places every record in one order (by home
slot, key and bytes: docs/FORMAT.md) and keeps the shaped filters where
the set's rule puts them, so it depends only on the subscription set
(tests/test_image_canonical.py holds the sets past the shape budget), and
a round trip gives the same bytes: a digest of the image identifies a
subscription set.
"""
import hashlib
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import topicmatch
from topicmatch import _reference as R
from examples import examples
from strategies import DIALECTS, subjects, subscriptions

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "golden")
PROPS = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _built(dialect, subs, how):
    sl = topicmatch.Sublist(dialect, cache_size=0 if how == "bulk" else 8)
    if how == "bulk":
        if subs:
            sl.insert_many([s[0] for s in subs], [s[1] for s in subs], [s[2] for s in subs])
    else:
        for f, i, q in subs:
            sl.insert(f, i, queue=q)
    return sl


@pytest.mark.parametrize("dialect", DIALECTS)
@PROPS
@given(data=st.data())
def test_equal_sets_give_equal_images_and_picks(dialect, data):
    subs = data.draw(st.lists(subscriptions(dialect), max_size=25), label="subs")
    perm = data.draw(st.permutations(subs), label="perm")
    extra = data.draw(st.lists(subscriptions(dialect), max_size=6), label="extra")
    a = _built(dialect, subs, "bulk")
    b = _built(dialect, perm, "one by one")
    # a history that ends with the same set: extra subscriptions come and go
    # (those already in the set stay)
    have = {R.ReferenceSublist(dialect)._key(*s) for s in subs}
    for f, i, q in extra:
        b.insert(f, i, queue=q)
    for f, i, q in extra:
        if R.ReferenceSublist(dialect)._key(f, i, q) not in have:
            b.discard(f, i, queue=q)
    assert len(a) == len(b)
    blob = a.to_bytes()
    assert b.to_bytes() == blob
    loaded = topicmatch.Sublist.from_bytes(blob)
    assert loaded.to_bytes() == blob                         # a round trip keeps the bytes
    assert topicmatch.Sublist.from_bytes(loaded.to_bytes()).to_bytes() == blob

    batch = data.draw(st.lists(subjects(dialect), min_size=1, max_size=8), label="batch")
    keys = [f"k{i}" for i in range(len(batch))]
    rows = [sorted(r.tolist()) for r in a.match_many(batch, keys=keys)]
    for other in (b, loaded):
        for threads in (1, 2):
            got = other.match_many(batch, keys=keys, threads=threads)
            assert [sorted(r.tolist()) for r in got] == rows


@pytest.mark.parametrize("name", sorted(f[:-4] for f in os.listdir(GOLDEN) if f.endswith(".fsb")))
def test_older_images_load_and_then_round_trip_canonically(name):
    """Golden images of earlier versions still load, and what this version
    writes for them round-trips to the same bytes.  (Version 1 kept every
    wildcard filter in the trie; the new image places them by the set's
    rule, as a fresh build does: tests/test_image_canonical.py.)"""
    with open(os.path.join(GOLDEN, name + ".fsb"), "rb") as f:
        old = f.read()
    sl = topicmatch.Sublist.from_bytes(old)
    again = sl.to_bytes()
    loaded = topicmatch.Sublist.from_bytes(again)
    assert loaded.to_bytes() == again
    assert len(loaded) == len(sl)


def test_image_digest_identifies_the_set():
    """The use the issue names: a digest of the image as the key of a set."""
    filters = [f"orders.{r}.{k}" for r in ("eu", "us", "ap") for k in ("created", "paid", "*")]
    filters += ["orders.>", "*.eu.*", ">"]
    one = topicmatch.Sublist("nats")
    one.insert_many(filters, list(range(len(filters))), ["w" if i % 3 else None for i in range(len(filters))])
    two = topicmatch.Sublist("nats")
    for i in reversed(range(len(filters))):
        two.insert(filters[i], i, queue="w" if i % 3 else None)
    d1 = hashlib.sha256(one.to_bytes()).hexdigest()
    assert d1 == hashlib.sha256(two.to_bytes()).hexdigest()
    assert d1 == hashlib.sha256(topicmatch.Sublist.from_bytes(one.to_bytes()).to_bytes()).hexdigest()
    two.insert("orders.eu.created", 999)
    assert hashlib.sha256(two.to_bytes()).hexdigest() != d1
