"""One image for one set (issue 44, item 2).

An image depends only on the set of subscriptions, byte for byte, however
the index was made: insert_many in any order, inserts one by one, a
history of inserts and removals that ends with the set, an image opened
(from_bytes, open) and changed, then to_bytes() or save(); or no index at
all: build_image's columns, in any order, with rows repeated.  The filters
with a shape sit where one rule puts them (fs_shapes_choose,
csrc/index/fs_index.h; docs/FORMAT.md "One image for one set"), which
this file restates in plain Python (`kept_shapes`) and checks against the
shapes an image holds (read by tests/image_codec.py, not the library).

The strategies add what made placement depend on order: more shapes than
the budget (64 shapes, 24 probed per subject length), AMQP '#' filters
whose trie paths pass through a shorter shaped filter ("a.#" under
"a.#.b"), removals, and queue groups.
"""
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import topicmatch
from examples import examples
from image_codec import Image
from strategies import ALL_DIALECTS, ONE, REST, SEP, subscriptions

PROPS = settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])

SHAPE_MAX, SHAPE_MAX_PROBES, SHAPE_MAX_TOKENS = 64, 24, 48


# -- the rule, restated ----------------------------------------------------------------------

def shape_of(dialect, f):
    """(ntoks, rest, onemask) of filter f, or None (a literal, too deep, or
    an AMQP '#' before the last word)."""
    if dialect == "mqtt" and f.startswith("$share/"):
        f = f.split("/", 2)[2]
    toks = f.split(SEP[dialect])
    rest = int(toks[-1] == REST[dialect])
    ntoks = len(toks) - rest
    if ntoks > SHAPE_MAX_TOKENS or REST[dialect] in toks[:ntoks]:
        return None
    mask = sum(1 << i for i, t in enumerate(toks[:ntoks]) if t == ONE[dialect])
    return (ntoks, rest, mask) if mask or rest else None


def kept_shapes(dialect, filters):
    """The shapes that get tables: in order of (token count, rest, mask),
    each one that fits beside those kept before it."""
    shapes = sorted({s for s in (shape_of(dialect, f) for f in filters) if s})
    zero_plus = dialect != "nats"            # MQTT and AMQP '#' match zero levels too
    first_k = 0 if dialect == "amqp" else 1  # AMQP's empty key has zero words

    def applies(shape, k):
        ntoks, rest, _ = shape
        return ntoks == k if not rest else (ntoks <= k if zero_plus else ntoks < k)

    kept = []
    for s in shapes:
        ks = [k for k in range(first_k, SHAPE_MAX_TOKENS + 2) if applies(s, k)]
        if len(kept) < SHAPE_MAX and all(sum(applies(o, k) for o in kept) < SHAPE_MAX_PROBES for k in ks):
            kept.append(s)
    return kept


def image_shapes(blob):
    return [(sh.ntoks, sh.rest, sh.onemask) for sh in Image(blob).shapes]


# -- strategies ------------------------------------------------------------------------------

@st.composite
def wide_filters(draw, dialect):
    """Filters of many shapes: up to 9 tokens, each a literal or the
    one-level wildcard, some ending in the rest wildcard."""
    n = draw(st.integers(1, 9))
    mask = draw(st.integers(0, (1 << n) - 1))
    toks = [ONE[dialect] if (mask >> i) & 1 else draw(st.sampled_from(["a", "b"])) for i in range(n)]
    if draw(st.booleans()) or not mask:
        toks.append(REST[dialect])
    return SEP[dialect].join(toks)


@st.composite
def overlapping(draw, dialect):
    """A filter with a shape and a longer one whose trie path passes
    through it (AMQP: a '#' before the end; elsewhere: deeper than the
    shapes go)."""
    short = draw(wide_filters(dialect))
    if dialect == "amqp":
        if not short.endswith("#"):
            short += ".#"
        longer = short + "." + draw(st.sampled_from(["a", "b", "*", "#"]))
    else:
        if short.endswith(REST[dialect]):
            short = short[:-2] or ONE[dialect]
        longer = SEP[dialect].join([short] + ["a"] * (SHAPE_MAX_TOKENS + 1))
    return [short, longer]


@st.composite
def sets(draw, dialect):
    """A list of distinct subscriptions (filter, id, queue)."""
    plain = draw(st.lists(subscriptions(dialect), max_size=20))
    wide = draw(st.lists(wide_filters(dialect), max_size=120))
    pairs = draw(st.lists(overlapping(dialect), max_size=4))
    ids = st.sampled_from([1, 2, -3])
    queues = st.sampled_from([None, None, "q"])
    subs = plain + [(f, draw(ids), draw(queues)) for f in wide + [f for p in pairs for f in p]]
    seen, out = set(), []
    for s in subs:
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


# -- helpers ---------------------------------------------------------------------------------

def bulk(dialect, subs):
    sl = topicmatch.Sublist(dialect)
    if subs:
        sl.insert_many([s[0] for s in subs], [s[1] for s in subs], [s[2] for s in subs])
    return sl


def saved(sl, tmp_path, name):
    path = os.path.join(tmp_path, name)
    sl.save(path)
    with open(path, "rb") as f:
        return f.read()


def built_image(dialect, subs, tmp_path, threads=1):
    """The bytes build_image writes for the rows subs (and the opened
    index's to_bytes(), which must be the same)."""
    path = os.path.join(tmp_path, "built")
    sl = topicmatch.build_image(path, [s[0] for s in subs], [s[1] for s in subs], [s[2] for s in subs],
                                dialect=dialect, threads=threads)
    try:
        with open(path, "rb") as f:
            blob = f.read()
        assert sl.to_bytes() == blob
    finally:
        sl.close()
    return blob


# -- tests -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dialect", ALL_DIALECTS)
@PROPS
@given(data=st.data())
def test_one_image_for_one_set(dialect, data, tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("img"))
    subs = data.draw(sets(dialect), label="subs")
    rnd = random.Random(data.draw(st.integers(0, 2 ** 32 - 1), label="seed"))
    extra = data.draw(st.lists(wide_filters(dialect), max_size=40), label="extra")

    want = bulk(dialect, subs)
    blob = want.to_bytes()
    assert image_shapes(blob) == kept_shapes(dialect, [f for f, _, _ in subs])
    assert saved(want, tmp, "want") == blob
    v2 = want.to_bytes(version=2)

    # insert_many in another order
    order = subs[:]
    rnd.shuffle(order)
    ways = {"insert_many shuffled": bulk(dialect, order)}

    # one by one, with subscriptions that come and go (shapes that take the
    # budget first, then leave; removed members of the set, inserted again)
    one = topicmatch.Sublist(dialect)
    gone = list(dict.fromkeys((f, 7, None) for f in extra if (f, 7, None) not in set(subs)))
    history = [("+", s) for s in order + gone] + [("-", s) for s in gone]
    history += [op for s in rnd.sample(order, len(order) // 3) for op in (("-", s), ("+", s))]
    for op, (f, i, q) in history:
        if op == "+":
            one.insert(f, i, queue=q)
        else:
            one.remove(f, i, queue=q)
    ways["one by one, with removals"] = one

    # an image of part of the set, opened, then changed into the set
    cut = len(order) // 2
    part = bulk(dialect, order[:cut] + gone)
    for how in ("from_bytes", "open"):
        if how == "open":
            part.save(os.path.join(tmp, "part"))
            opened = topicmatch.Sublist.open(os.path.join(tmp, "part"), verify=True)
        else:
            opened = topicmatch.Sublist.from_bytes(part.to_bytes())
        for f, i, q in order[cut:]:
            opened.insert(f, i, queue=q)
        for f, i, q in gone:
            opened.remove(f, i, queue=q)
        ways["opened (%s), then changed" % how] = opened

    for how, sl in ways.items():
        assert len(sl) == len(want), how
        assert sl.to_bytes() == blob, how
        assert saved(sl, tmp, "got") == blob, how
        assert sl.to_bytes(version=2) == v2, how

    # no index: build_image, from the rows in the first order, in the
    # other, and in a third with rows repeated (threads: 1 or 2)
    again = order + rnd.sample(order, len(order) // 4)
    rnd.shuffle(again)
    threads = data.draw(st.sampled_from([1, 2]), label="threads")
    for how, rows in (("subs", subs), ("shuffled", order), ("repeated", again)):
        assert built_image(dialect, rows, tmp, threads) == blob, "build_image " + how
    # the image's own round trips keep the bytes
    assert topicmatch.Sublist.from_bytes(blob).to_bytes() == blob
    assert topicmatch.Sublist.from_bytes(v2).to_bytes() == blob


@pytest.mark.parametrize("dialect", ALL_DIALECTS)
def test_more_shapes_than_the_budget_in_two_orders(dialect, tmp_path):
    """255 eight-token shapes (every mask of one-level wildcards): inserted
    in mask order and the reverse, the same image, holding the first 24
    shapes of the canonical order (all probed by subjects of 8 tokens)."""
    sep, one = SEP[dialect], ONE[dialect]
    subs = [(sep.join(one if (m >> k) & 1 else "a" for k in range(8)), m, None) for m in range(1, 256)]
    a, b = bulk(dialect, subs), bulk(dialect, subs[::-1])
    blob = a.to_bytes()
    assert b.to_bytes() == blob
    assert built_image(dialect, subs, str(tmp_path)) == blob
    assert built_image(dialect, subs[::-1], str(tmp_path)) == blob
    assert image_shapes(blob) == [(8, 0, m) for m in range(1, SHAPE_MAX_PROBES + 1)]
    assert image_shapes(blob) == kept_shapes(dialect, [f for f, _, _ in subs])
    # the first shapes leave: the next ones in the order take their place
    for f, i, q in subs[:10]:
        b.remove(f, i, queue=q)
    assert image_shapes(b.to_bytes()) == [(8, 0, m) for m in range(11, SHAPE_MAX_PROBES + 11)]
    assert b.to_bytes() == bulk(dialect, subs[10:]).to_bytes()


@pytest.mark.parametrize("pair", [("a.#", "a.#.b"), ("#", "#.b"), ("a.*", "a.*.#.b"), ("*.#", "*.#.#")])
def test_amqp_hash_overlaps_in_either_order(pair, tmp_path):
    """AMQP: a filter with a shape and a longer one whose trie path passes
    through its node: the shorter one is in its shape's table either way."""
    short, longer = pair
    subs = [(short, 1, None), (longer, 2, "q")]
    blob = bulk("amqp", subs).to_bytes()
    assert bulk("amqp", subs[::-1]).to_bytes() == blob
    assert built_image("amqp", subs, str(tmp_path)) == blob
    assert built_image("amqp", subs[::-1], str(tmp_path)) == blob
    img = Image(blob)
    assert short.encode() in [e.tok for e in img.entries]
    sl = bulk("amqp", subs[::-1])
    sl.remove(longer, 2, queue="q")
    assert sl.to_bytes() == bulk("amqp", subs[:1]).to_bytes()


GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")


@pytest.mark.parametrize("name", sorted(f[:-4] for f in os.listdir(GOLDEN)
                                        if f.endswith(".fsb") and not f.endswith(("_v3.fsb", "_v4.fsb"))))
def test_version_1_and_2_blobs_load_into_the_sets_image(name):
    """A version 1 blob keeps every wildcard filter in the trie and a
    version 2 one the shapes its writer made: loaded, either writes the
    image of its set, as a fresh build of the same subscriptions does
    (read back by test_serial's own codec, not the library)."""
    from test_serial import decode, subscriptions_of
    with open(os.path.join(GOLDEN, name + ".fsb"), "rb") as f:
        old = f.read()
    dialect, _, literals, root = decode(old)
    subs = [(f.decode(), i, q.decode() if q is not None else None)
            for f, i, q in subscriptions_of(dialect, literals, root)]
    fresh = topicmatch.Sublist(dialect)
    for f, i, q in subs:
        if dialect == "mqtt" and q is not None and f.startswith("$share/"):
            f, q = f"$share/{q}/{f}", None   # a group on a '$share/' filter inserts so
        fresh.insert(f, i, queue=q)
    assert topicmatch.Sublist.from_bytes(old).to_bytes() == fresh.to_bytes()


@pytest.mark.parametrize("room", [0, 1, 1024, 5000, None])
def test_to_bytes_when_the_image_outgrows_its_room(room):
    """to_bytes() writes the image straight into the bytes object it
    returns, made at the index's estimate of the size; an image that
    outgrows it (room: that object made smaller) moves to memory of the
    writer's own part way and is copied: the same bytes either way, for a
    built index, an unchanged opened image and a changed one."""
    from topicmatch import _core
    subs = [(f"a.{i}.*", i, "q" if i % 3 else None) for i in range(300)] + [("b.>", 7, None)]
    built = bulk("nats", subs)
    want = built.to_bytes()
    opened = topicmatch.Sublist.from_bytes(want)
    changed = topicmatch.Sublist.from_bytes(want)
    changed.insert("c.*", 9)
    changed.remove("c.*", 9)
    old = _core._set_image_bytes_room(-1 if room is None else room)
    try:
        got = [built.to_bytes(), opened.to_bytes(), changed.to_bytes()]
    finally:
        _core._set_image_bytes_room(old)
    assert got == [want] * 3
    assert len(want) > 5000
