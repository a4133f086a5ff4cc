"""The index as a mapped image (format version 3): exactness.

An image -- from to_bytes() or a saved file, opened with verify=True or
verify=False, with or without a result cache -- answers exactly as the
index it was written from and as topicmatch._reference: every match /
match_many row in the defined order (docs/guide.md, "The order of a row"),
has_interest, num_interest, reverse_match, len.  An opened index keeps
changing through its live part and still answers for its current set,
before and after it is saved and opened again; another process opens what
one saved; every kind of buffer is either read in place or copied as the
docstrings say; versions 1 and 2 still load; and the image is
deterministic (an unchanged opened image writes its own bytes; NATS and
MQTT sets give one image whatever the insertion order).

The comparisons are exact (lists, in order).  image_helpers.py holds the
answer collectors (observed / expected), shared with the spawned child.
"""
import copy
import gc
import mmap
import multiprocessing
import os
import pickle
import random
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.stateful import invariant, rule

import topicmatch
from topicmatch import _reference as R

from examples import examples, steps
from image_codec import Image
from image_helpers import (BAD_FILTER, build, child_build_and_save, child_open_and_answer, diff, expected,
                           inner, observed, reference, verdict)
from strategies import ALL_DIALECTS, ONE, REST, SEP, filters, rows, subjects, subscriptions, tiny_thread_blocks
from test_properties import make_machine

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "golden")
PROPS = settings(max_examples=examples(40), deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

def check(e, got, want, what=""):
    assert got == want, (what, diff(got, want))


def has_interest_ok(e, s, want):
    return e.has_interest(s) is want


def subject_for(dialect, f):
    """A subject that filter f (inner form) matches, or None."""
    toks = [] if dialect == "amqp" and f == "" else f.split(SEP[dialect])
    out = []
    for t in toks:
        if t == ONE[dialect] or t == REST[dialect]:
            out.append("a")
        else:
            out.append(t)
    s = SEP[dialect].join(out)
    return s if R.is_valid_subject(s, dialect) else None


@st.composite
def probe_sets(draw, dialect, subs):
    """(subjects, batch, keys, reverse filters): random subjects, subjects
    that stored filters match, a batch with invalid rows and None, keys
    with None (the subject then), reverse queries incl. stored filters."""
    subj = draw(st.lists(subjects(dialect), min_size=1, max_size=6))
    subj += [s for s in (subject_for(dialect, inner(dialect, f)) for f, _, _ in subs[:5]) if s is not None]
    subj = list(dict.fromkeys(subj))
    batch = draw(st.lists(rows(dialect), min_size=1, max_size=8)) + subj[:4]
    keys = draw(st.lists(st.sampled_from([None, "k1", "k2", "\u00e9"]), min_size=len(batch), max_size=len(batch)))
    rf = draw(st.lists(filters(dialect), max_size=3)) + [f for f, _, _ in subs[:2]] + [REST[dialect]]
    return subj, batch, keys, list(dict.fromkeys(rf))


def opened_all(blob, folder, name="img.fsb"):
    """The image opened every way: (label, index) for bytes and a saved
    file, verify=True/"checksum"/False, cache_size 0 and 4."""
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(blob)
    out = []
    for verify in (True, "checksum", False):
        for cache in (0, 4):
            out.append((f"from_bytes(verify={verify}, cache_size={cache})",
                        topicmatch.Sublist.from_bytes(blob, verify=verify, cache_size=cache)))
            out.append((f"open(verify={verify}, cache_size={cache})",
                        topicmatch.Sublist.open(path, verify=verify, cache_size=cache)))
    return out


def assert_fresh_image_stats(e, blob):
    st_ = e.stats()
    assert st_["mapped_bytes"] == len(blob)
    assert st_["live_subscriptions"] == 0 and st_["live_bytes"] == 0
    assert st_["inserts"] == 0 and st_["removes"] == 0
    assert st_["subscriptions"] == len(e)


# ============================================================ 1. exactness

@pytest.mark.parametrize("dialect", ALL_DIALECTS)
@PROPS
@given(data=st.data())
def test_image_answers_exactly(dialect, data):
    subs = data.draw(st.lists(subscriptions(dialect), max_size=30), label="subs")
    built, ref = build(dialect, subs), reference(dialect, subs)
    probes = data.draw(probe_sets(dialect, subs), label="probes")
    want = expected(ref, probes)
    check(built, observed(built, probes), want, "built")
    assert built.stats()["mapped_bytes"] == 0
    blob = built.to_bytes()
    with tempfile.TemporaryDirectory() as folder:
        for label, e in opened_all(blob, folder):
            assert e.dialect == dialect
            for rnd in (1, 2):          # the second time from the cache, where there is one
                check(e, observed(e, probes), want, (label, rnd))
            # threaded batches over the image: the same rows
            batch = probes[1]
            with tiny_thread_blocks(1):
                for q in ("all", "pick"):
                    b = e.match_many(batch, queues=q, threads=3)
                    assert [None if b.invalid[i] else b[i].tolist() for i in range(len(batch))] == \
                        want["many", q, False, False], label
            # matching changed nothing: no insert, the image still its own bytes
            assert_fresh_image_stats(e, blob)
            assert e.to_bytes() == blob, label


# ============================================================ 2. mutations

@st.composite
def operations(draw, dialect, pool):
    """A list of operations on an index: single and bulk, on subscriptions
    of the image (removing and re-adding them, in either MQTT form) and
    new ones (removing never-present ones too), bulk ones with a bad row."""
    def one():
        if pool and draw(st.booleans()):
            f, i, q = draw(st.sampled_from(pool))
            if dialect == "mqtt" and draw(st.booleans()):     # the other spelling of the same subscription
                if q is not None:
                    f, q = f"$share/{q}/{f}", None
                elif f.startswith("$share/"):
                    f, q = R.split_share(f)
            return f, i, q
        return draw(subscriptions(dialect))

    ops = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["insert", "insert", "remove", "discard", "discard",
                                     "insert_many", "remove_many", "bad_many"]))
        if kind in ("insert", "remove", "discard"):
            ops.append((kind, one()))
        else:
            subs = [one() for _ in range(draw(st.integers(0, 5)))]
            if kind == "bad_many":
                ops.append((kind, subs, draw(st.booleans()), draw(st.integers(0, len(subs)))))
            else:
                ops.append((kind, subs))
    return ops


class World:
    """A built index, opened images and the reference, receiving the same
    operations; the model of the live part (which filters were changed)."""

    def __init__(self, dialect, subs, blob, folder):
        self.dialect = dialect
        self.ref = reference(dialect, subs)
        self.built = build(dialect, subs)
        path = os.path.join(folder, "mut.fsb")
        with open(path, "wb") as f:
            f.write(blob)
        self.images = [topicmatch.Sublist.from_bytes(blob),
                       topicmatch.Sublist.from_bytes(blob, verify=False, cache_size=4),
                       topicmatch.Sublist.open(path, cache_size=4)]
        self.engines = [self.built] + self.images
        self.gens = [e.generation for e in self.engines]
        self.built_counts = self.counts(self.built)
        self.inserts = self.removes = 0
        self.touched, self.maybe = set(), set()

    @staticmethod
    def counts(e):
        st_ = e.stats()
        return st_["inserts"], st_["removes"]

    def apply(self, op):
        kind = op[0]
        if kind in ("insert", "remove", "discard"):
            f, i, q = op[1]
            self.touched.add(inner(self.dialect, f))
            if kind == "remove":
                present = self.ref.discard(f, i, queue=q)
                for e in self.engines:
                    if present:
                        e.remove(f, i, queue=q)
                    else:
                        with pytest.raises(KeyError):
                            e.remove(f, i, queue=q)
                got = [present] * len(self.engines)
            else:
                present = getattr(self.ref, kind)(f, i, queue=q)
                got = [getattr(e, kind)(f, i, queue=q) for e in self.engines]
            assert got == [present] * len(self.engines), op
            n, removing = int(present), kind != "insert"
        elif kind in ("insert_many", "remove_many"):
            fs, ids, qs = ([s[k] for s in op[1]] for k in range(3))
            self.touched.update(inner(self.dialect, f) for f in fs)
            n = getattr(self.ref, kind)(fs, ids, qs)
            assert [getattr(e, kind)(fs, ids, qs) for e in self.engines] == [n] * len(self.engines), op
            removing = kind == "remove_many"
        else:                                           # a bulk call with one bad row: changes nothing
            _, subs, removing, at = op
            fs, ids, qs = ([s[k] for s in subs] for k in range(3))
            fs.insert(at, BAD_FILTER[self.dialect])
            ids.insert(at, 7)
            qs.insert(at, None)
            for e in self.engines:
                with pytest.raises(topicmatch.InvalidSubjectError):
                    (e.remove_many if removing else e.insert_many)(fs, ids, qs)
            if not removing:    # rows before the bad one may have been moved to the live part
                self.maybe.update(inner(self.dialect, f) for f in fs[:at])
            n = 0
        if removing:
            self.removes += n
        else:
            self.inserts += n
        for k, e in enumerate(self.engines):
            g = e.generation
            assert (g > self.gens[k]) if n else (g >= self.gens[k]), (op, k)
            self.gens[k] = g

    def live_bounds(self):
        held = [inner(self.dialect, f) for f, _, _ in self.ref._subs]
        lo = sum(f in self.touched for f in held)
        hi = sum(f in self.touched or f in self.maybe for f in held)
        return lo, hi

    def check_quick(self, subjects_):
        lo, hi = self.live_bounds()
        for k, e in enumerate(self.engines):
            assert len(e) == len(self.ref) == e.stats()["subscriptions"]
            st_ = e.stats()
            if e is self.built:
                assert st_["mapped_bytes"] == 0 and st_["live_subscriptions"] == 0
                bi, br = self.built_counts
                assert (st_["inserts"] - bi, st_["removes"] - br) == (self.inserts, self.removes)
            else:
                assert st_["mapped_bytes"] > 0
                assert (st_["inserts"], st_["removes"]) == (self.inserts, self.removes)
                assert lo <= st_["live_subscriptions"] <= hi, (k, lo, st_["live_subscriptions"], hi)
        for s in subjects_:
            m = self.ref.match(s)
            want_has, want_num = self.ref.has_interest(s), self.ref.num_interest(s)
            for e in self.engines:
                got = e.match(s)
                assert (got.subs, got.groups) == (m.subs, m.groups), s
                assert tuple(e.num_interest(s)) == want_num, s
                assert has_interest_ok(e, s, want_has), s


@pytest.mark.parametrize("dialect", ALL_DIALECTS)
@PROPS
@given(data=st.data())
def test_opened_image_changes_like_a_built_index(dialect, data):
    subs = data.draw(st.lists(subscriptions(dialect), max_size=25), label="subs")
    blob = build(dialect, subs).to_bytes()
    ops = data.draw(operations(dialect, subs), label="ops")
    probes = data.draw(probe_sets(dialect, subs + [s for op in ops for s in (op[1] if isinstance(op[1], list)
                                                                              else [op[1]])]), label="probes")
    with tempfile.TemporaryDirectory() as folder:
        w = World(dialect, subs, blob, folder)
        for e in w.images:
            assert_fresh_image_stats(e, blob)
        for op in ops:
            w.apply(op)
            w.check_quick(probes[0][:3])
        want = expected(w.ref, probes)
        for k, e in enumerate(w.engines):
            check(e, observed(e, probes), want, ("after the operations", k, ops))
        # A subscription the operations added and the index still holds is
        # in the live part.  (An insert undone by a remove leaves it empty:
        # insert '#' then remove it, with 'a' in the image.)
        added = {w.ref._key(f, i, q) for op in ops if op[0] in ("insert", "insert_many")
                 for f, i, q in (op[1] if isinstance(op[1], list) else [op[1]])}
        if (added - {w.ref._key(f, i, q) for f, i, q in subs}) & w.ref._subs:
            assert all(e.stats()["live_subscriptions"] > 0 for e in w.images)

        # saved and opened again: the merged set, no live part, no inserts
        images = set()
        for k, e in enumerate(w.engines):
            path = os.path.join(folder, f"saved{k}.fsb")
            e.save(path)
            with open(path, "rb") as f:
                saved = f.read()
            assert saved == e.to_bytes()
            images.add(saved)
            for again in (topicmatch.Sublist.open(path), topicmatch.Sublist.from_bytes(saved, verify=False, cache_size=4)):
                check(again, observed(again, probes), want, ("saved and opened again", k))
                assert_fresh_image_stats(again, saved)
                # and it goes on changing: remove everything, the empty set remains
                for f, q, i in sorted(w.ref._subs, key=repr):
                    again.remove(f, i, queue=q)
                assert len(again) == 0 and again.reverse_match(REST[dialect]) == []
                assert again.to_bytes() == topicmatch.Sublist(dialect).to_bytes()
        if dialect != "amqp":
            # one set, one image: the built index, every changed image, and
            # a fresh build of the reference's set
            images.add(build(dialect, sorted(((f, i, q) for f, q, i in w.ref._subs), key=repr)).to_bytes())
            assert len(images) == 1


@pytest.mark.parametrize("dialect", ALL_DIALECTS)
def test_open_and_matching_insert_nothing(dialect):
    sep, one, rest = SEP[dialect], ONE[dialect], REST[dialect]
    subs = [(f"a{sep}b", 1, None), (f"a{sep}{one}", 2, None), (f"a{sep}{rest}", 3, "q"),
            (f"{one}{sep}b", 4, "r"), (rest, 5, None), (f"a{sep}b", 6, "q")]
    sl = build(dialect, subs)
    blob = sl.to_bytes()
    ss = [f"a{sep}b", f"b{sep}b", "a", f"x{sep}y{sep}z"]
    with tempfile.TemporaryDirectory() as folder:
        for label, e in opened_all(blob, folder):
            for _ in range(3):
                for s in ss:
                    e.match(s)
                    e.match(s, dedupe=True)
                    e.has_interest(s)
                    e.num_interest(s)
                e.reverse_match(rest)
                for q in ("all", "none", "pick"):
                    e.match_many(ss, queues=q, keys=["k"] * len(ss))
                with tiny_thread_blocks(1):
                    e.match_many(ss * 4, threads=4)
            st_ = e.stats()
            assert st_["inserts"] == 0 and st_["removes"] == 0 and st_["generation"] == 0, label
            assert st_["live_subscriptions"] == 0 and st_["live_bytes"] == 0, label
            assert st_["mapped_bytes"] == len(blob) and st_["matches"] > 0, label
            # a no-op change (absent id, present subscription) still answers the same
            assert e.discard(f"a{sep}b", 99) is False
            assert e.insert(f"a{sep}b", 1) is False
            assert e.stats()["inserts"] == 0 and len(e) == len(subs), label
            for s in ss:
                assert e.match(s).subs == sl.match(s).subs and e.match(s).groups == sl.match(s).groups


@pytest.mark.parametrize("dialect", ALL_DIALECTS)
def test_live_part_holds_each_changed_filter_whole(dialect):
    """The changes the live part takes, step by step: a filter changed is
    copied out whole (its other subscriptions, groups too); a filter
    removed from the image and re-added; a never-present one removed."""
    sep, one, rest = SEP[dialect], ONE[dialect], REST[dialect]
    f1, f2, f3 = f"a{sep}{one}", f"a{sep}b", f"{one}{sep}{rest}"
    subs = [(f1, 1, None), (f1, 2, None), (f1, 3, "q"), (f2, 4, None), (f3, 5, "g"), (f3, 6, "g")]
    built, ref = build(dialect, subs), reference(dialect, subs)
    e = topicmatch.Sublist.from_bytes(built.to_bytes())
    probe = [f"a{sep}b", f"a{sep}c", f"b{sep}c{sep}d", "a"]

    def same(live):
        assert e.stats()["live_subscriptions"] == live
        for s in probe:
            m, b, r = e.match(s), built.match(s), ref.match(s)
            assert (m.subs, m.groups) == (b.subs, b.groups) == (r.subs, r.groups), s
            assert e.match_many([s], queues="all")[0].tolist() == R.batch_row(r, "all", dialect=dialect,
                                                                               dedupe=dialect == "amqp")
            assert tuple(e.num_interest(s)) == ref.num_interest(s), s
        for q in (rest, f1, f3):
            assert e.reverse_match(q) == ref.reverse_match(q), q

    same(0)
    for x in (e, built, ref):
        x.remove(f1, 2)                             # f1 moves: 1 and 3 go with it
    same(2)
    for x in (e, built, ref):
        x.insert(f1, 2)                             # re-added
    same(3)
    for x in (e, built, ref):
        assert x.discard(f"b{sep}never", 9) is False    # never present: nothing moves
    same(3)
    for x in (e, built, ref):
        assert x.remove_many([f2, f2, f"z{sep}z"], [4, 4, 1]) == 1
    same(3)                                         # f2 moved, and is empty now
    for x in (e, built, ref):
        assert x.insert_many([f3, f2, f2], [7, 4, 8], ["g", None, None]) == 3
    same(3 + 3 + 2)                                 # f3 moved (5, 6, 7); f2 holds 4, 8
    assert e.stats()["inserts"] == 4 and e.stats()["removes"] == 2
    assert len(e) == len(ref) == len(built)
    out = topicmatch.Sublist.from_bytes(e.to_bytes())
    assert out.stats()["live_subscriptions"] == 0
    for s in probe:
        r = ref.match(s)
        assert (out.match(s).subs, out.match(s).groups) == (r.subs, r.groups)
    if dialect != "amqp":
        assert e.to_bytes() == built.to_bytes()


@pytest.mark.parametrize("dialect", ALL_DIALECTS)
def test_readers_see_one_state_or_the_other_while_the_live_part_changes(dialect):
    """Threads match an opened image while another toggles a subscription
    on a filter of the image (moved to the live part at the first change):
    every answer is exactly the one before or the one after."""
    import threading
    sep, one = SEP[dialect], ONE[dialect]
    subs = [(f"a{sep}b", 1, None), (f"a{sep}{one}", 2, "q"), (f"{one}{sep}b", 3, None), (f"a{sep}{one}", 4, None)]
    e = topicmatch.Sublist.from_bytes(build(dialect, subs).to_bytes(), cache_size=4)
    s = f"a{sep}b"
    without = ([1, 3, 4], [("q", f"a{sep}{one}" if dialect == "mqtt" else None, [2])])
    with_x = ([1, 3, 4, 9], without[1])
    rows_ok = {(1, 3, 4, 2), (1, 3, 4, 9, 2)}       # plain ids ascending, then the group's
    stop, bad = threading.Event(), []

    def reader():
        while not stop.is_set():
            m = e.match(s)
            if (m.subs, m.groups) not in (without, with_x):
                bad.append((m.subs, m.groups))
            row = tuple(e.match_many([s, s], queues="all")[1].tolist())
            if row not in rows_ok:
                bad.append(row)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(300):
            e.insert(f"a{sep}{one}", 9)
            e.discard(f"a{sep}{one}", 9)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not bad, bad[:3]
    assert (e.match(s).subs, e.match(s).groups) == without and e.stats()["live_subscriptions"] == 2


# ============================================================ has_interest past a masked entry

@pytest.mark.parametrize("dialect", ALL_DIALECTS)
def test_has_interest_sees_past_a_masked_entry(dialect):
    # has_interest stops at the first matching table entry: on a changed
    # image that entry may have moved to the live part (found by these tests).
    sep, one = SEP[dialect], ONE[dialect]
    sl = topicmatch.Sublist(dialect)
    sl.insert(f"a{sep}b", 1)          # the literal table: found first
    sl.insert(f"a{sep}{one}", 2)      # a shape table: found after it
    e = topicmatch.Sublist.from_bytes(sl.to_bytes())
    e.remove(f"a{sep}b", 1)           # a{sep}b moves to the live part, empty there
    assert e.match(f"a{sep}b").subs == [2]
    assert e.num_interest(f"a{sep}b") == (1, 0)
    assert e.has_interest(f"a{sep}b") is True


# ============================================================ 3. the state machine, reopening

def make_image_machine(dialect):
    Base = make_machine(dialect)

    class ImageMachine(Base):
        """test_properties' machine, whose engines are now and then
        replaced by their own image -- bytes or a saved file, verified or
        not -- and go on being changed and asked."""

        def __init__(self):
            super().__init__()
            self.folder = tempfile.mkdtemp(prefix="topicmatch-img-")
            self.saves = 0

        def teardown(self):
            self.engines = []
            gc.collect()
            shutil.rmtree(self.folder, ignore_errors=True)

        @rule(k=st.integers(0, 1), how=st.sampled_from(["bytes", "bytes-unverified", "file", "file-unverified",
                                                        "memoryview"]))
        def reopen(self, k, how):
            e = self.engines[k]
            cache = 4 if k == 1 else 0
            if how.startswith("file"):
                self.saves += 1
                path = os.path.join(self.folder, f"s{self.saves % 3}.fsb")   # saved over older files too
                e.save(path)
                new = topicmatch.Sublist.open(path, verify=how == "file", cache_size=cache)
                with open(path, "rb") as f:
                    blob = f.read()
            else:
                blob = e.to_bytes()
                data = memoryview(blob) if how == "memoryview" else blob
                new = topicmatch.Sublist.from_bytes(data, verify=how != "bytes-unverified", cache_size=cache)
            assert_fresh_image_stats(new, blob)
            assert len(new) == len(self.ref)
            self.engines[k] = new
            self.gens[k] = new.generation

        @rule(s=subjects(dialect))
        def has_interest(self, s):
            want = self.ref.has_interest(s)
            for e in self.engines:
                assert has_interest_ok(e, s, want), s

        @invariant()
        def stats_agree(self):
            for e in self.engines:
                st_ = e.stats()
                assert st_["subscriptions"] == len(self.ref)
                assert 0 <= st_["live_subscriptions"] <= len(self.ref)
                if st_["mapped_bytes"] == 0:
                    assert st_["live_subscriptions"] == 0 and st_["live_bytes"] == 0
                elif st_["live_bytes"] == 0:            # opened, and not changed since
                    assert st_["inserts"] == 0 and st_["removes"] == 0

    ImageMachine.__name__ = ImageMachine.__qualname__ = f"ImageMachine_{dialect}"
    return ImageMachine


STATEFUL = settings(max_examples=examples(25), stateful_step_count=steps(30), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

TestNatsImageMachine = make_image_machine("nats").TestCase
TestNatsImageMachine.settings = STATEFUL
TestMqttImageMachine = make_image_machine("mqtt").TestCase
TestMqttImageMachine.settings = STATEFUL
TestAmqpImageMachine = make_image_machine("amqp").TestCase
TestAmqpImageMachine.settings = STATEFUL


# ============================================================ 4. another process

def _sample(dialect, seed, n=60):
    rnd = random.Random(seed)
    toks = ["a", "b", "c", "$x", "\u00e9"]
    sep, one, rest = SEP[dialect], ONE[dialect], REST[dialect]
    subs = []
    for i in range(n):
        t = [rnd.choice(toks + [one]) for _ in range(rnd.randint(1, 3))]
        if rnd.random() < 0.3:
            t.append(rest)
        f = sep.join(t)
        q = rnd.choice([None, None, "q", "r"])
        if dialect == "mqtt" and q and rnd.random() < 0.5:
            f, q = f"$share/{q}/{f}", None
        subs.append((f, rnd.randint(-3, 20), q))
    ss = sorted({sep.join(rnd.choice(toks[:4]) for _ in range(rnd.randint(1, 4))) for _ in range(30)})
    ss = [s for s in ss if R.is_valid_subject(s, dialect)]
    keys = [rnd.choice([None, "k"]) for _ in ss]
    return subs, (ss, ss + [None], keys + [None], [rest, f"a{sep}{one}", subs[0][0]])


def test_image_saved_by_one_process_opened_by_another():
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as folder, ctx.Pool(1) as pool:
        for n, dialect in enumerate(ALL_DIALECTS):
            subs, probes = _sample(dialect, n)
            want = expected(reference(dialect, subs), probes)
            # saved in the child, opened here
            path = os.path.join(folder, f"child-{dialect}.fsb")
            theirs = pool.apply(child_build_and_save, (dialect, subs, path, probes))
            assert theirs == want
            mine = topicmatch.Sublist.open(path)
            assert mine.dialect == dialect
            check(mine, observed(mine, probes), want, "opened here")
            with open(path, "rb") as f:
                assert f.read() == mine.to_bytes()
            if dialect != "amqp":
                assert mine.to_bytes() == build(dialect, subs).to_bytes()
            # saved here (changed since opening: the merged set), opened in the child
            mine.insert(subs[0][0], 1000, queue=subs[0][2])
            mine.discard(*subs[1][:2], queue=subs[1][2])
            ref = reference(dialect, subs)
            ref.insert(subs[0][0], 1000, queue=subs[0][2])
            ref.discard(*subs[1][:2], queue=subs[1][2])
            path2 = os.path.join(folder, f"parent-{dialect}.fsb")
            mine.save(path2)
            got, blob, mapped, inserts, d = pool.apply(child_open_and_answer, (path2, probes))
            assert d == dialect and mapped == len(blob) and inserts == 0
            assert got == expected(ref, probes)
            assert blob == mine.to_bytes()


# ============================================================ 5. buffers and older versions

def _addr(buf):
    np = pytest.importorskip("numpy")
    return np.frombuffer(buf, dtype=np.uint8).__array_interface__["data"][0]


def _small(dialect):
    sep, one, rest = SEP[dialect], ONE[dialect], REST[dialect]
    subs = [(f"a{sep}b", 1, None), (f"a{sep}{one}", 2, "q"), (f"a{sep}{rest}", 3, None), (f"c{sep}d", 4, None)]
    return subs, [f"a{sep}b", f"a{sep}x", f"c{sep}d", "zz"]


def _answers(e, ss):
    return [(e.match(s).subs, e.match(s).groups, tuple(e.num_interest(s))) for s in ss], len(e)


@pytest.mark.parametrize("dialect", ALL_DIALECTS)
def test_buffers_read_in_place_or_copied(dialect):
    subs, ss = _small(dialect)
    sl = build(dialect, subs)
    want = _answers(sl, ss)
    blob = sl.to_bytes()

    # bytes: read in place
    e = topicmatch.Sublist.from_bytes(blob)
    assert _answers(e, ss) == want and e.stats()["mapped_bytes"] == len(blob)

    # a memoryview of bytes, 8-byte aligned: read in place, so the view
    # stays exported for as long as the index lives
    for start in range(8, 16):
        big = b"\0" * start + blob + b"tail"
        mv = memoryview(big)[start:start + len(blob)]
        if _addr(mv) % 8 == 0:
            break
        mv.release()
    assert _addr(mv) % 8 == 0
    e = topicmatch.Sublist.from_bytes(mv)
    assert _answers(e, ss) == want and e.stats()["mapped_bytes"] == len(blob)
    with pytest.raises(BufferError):
        mv.release()
    del e
    gc.collect()
    mv.release()

    # misaligned slices of a larger buffer: copied (the view can go at once)
    for off in range(1, 8):
        mv = memoryview(b"\0" * (start + off) + blob)[start + off:]
        if _addr(mv) % 8 == 0:
            mv.release()
            continue
        e = topicmatch.Sublist.from_bytes(mv, cache_size=2)
        mv.release()
        assert _answers(e, ss) == want and e.to_bytes() == blob
        assert e.stats()["mapped_bytes"] == len(blob)

    # a bytearray: copied, so changing it afterwards changes nothing
    ba = bytearray(blob)
    e = topicmatch.Sublist.from_bytes(ba)
    ba[:] = bytes(len(ba))
    ba.extend(b"x" * 100)               # not exported either
    assert _answers(e, ss) == want and e.to_bytes() == blob

    # a writable mmap: copied, and it can be closed under the index
    anon = mmap.mmap(-1, len(blob))
    anon[:] = blob
    e = topicmatch.Sublist.from_bytes(anon)
    anon[:] = bytes(len(blob))
    anon.close()
    assert _answers(e, ss) == want

    # a read-only mmap of a file the caller mapped: its file can still be
    # rewritten under it, so it is copied (and can be closed at once);
    # Sublist.open reads its own mapping in place (tests/test_image_open.py)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "i.fsb")
        sl.save(path)
        with open(path, "rb") as f:
            ro = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        e = topicmatch.Sublist.from_bytes(ro, verify=False)
        ro.close()
        assert _answers(e, ss) == want and e.stats()["mapped_bytes"] == len(blob)

        # Sublist.open: the file replaced by a save while open -- the open
        # index keeps answering for the file it mapped, a new open sees the new one
        e = topicmatch.Sublist.open(path)
        other = build(dialect, subs[:1])
        other.save(path)
        assert _answers(e, ss) == want
        assert _answers(topicmatch.Sublist.open(path), ss) == _answers(other, ss)


@pytest.mark.parametrize("dialect", ALL_DIALECTS)
def test_opened_index_saves_over_its_own_file_pickles_and_copies(dialect):
    subs, ss = _small(dialect)
    sl = build(dialect, subs)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "self.fsb")
        sl.save(path)
        e = topicmatch.Sublist.open(path, cache_size=8)
        e.save(path)                                    # unchanged, over the file it maps
        assert _answers(e, ss) == _answers(sl, ss)
        for x in (e, sl):
            x.insert(subs[0][0], 77, queue=subs[0][2])
            x.discard(*subs[3][:2], queue=subs[3][2])
        e.save(path)                                    # changed, over the file it maps
        assert _answers(e, ss) == _answers(sl, ss)      # the old mapping still serves it
        again = topicmatch.Sublist.open(path)
        assert _answers(again, ss) == _answers(sl, ss)
        assert again.stats()["live_subscriptions"] == 0
        for other in [pickle.loads(pickle.dumps(e, protocol=p)) for p in range(pickle.HIGHEST_PROTOCOL + 1)] + \
                     [copy.copy(e), copy.deepcopy(e)]:
            assert other is not e and _answers(other, ss) == _answers(sl, ss)
            assert other.stats()["cache_capacity"] >= 8
            assert other.stats()["mapped_bytes"] > 0 and other.stats()["live_subscriptions"] == 0
            if dialect != "amqp":
                assert other.to_bytes() == sl.to_bytes()


@pytest.mark.parametrize("dialect", ALL_DIALECTS)
def test_version_2_loads_and_opens(dialect):
    subs, ss = _small(dialect)
    sl = build(dialect, subs)
    want = _answers(sl, ss)
    v2 = sl.to_bytes(version=2)
    assert v2[8:10] == b"\x02\x00" and sl.to_bytes()[8:10] == b"\x04\x00"
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "v2.fsb")
        with open(path, "wb") as f:
            f.write(v2)
        for e in (topicmatch.Sublist.from_bytes(v2), topicmatch.Sublist.from_bytes(bytearray(v2)),
                  topicmatch.Sublist.open(path), topicmatch.Sublist.open(path, verify=False, cache_size=4)):
            assert e.dialect == dialect and _answers(e, ss) == want
            assert e.stats()["mapped_bytes"] == 0       # rebuilt, not mapped
            assert e.to_bytes(version=2) == v2
            if dialect != "amqp":
                assert e.to_bytes() == sl.to_bytes()
        # an opened image (changed or not) writes version 2 too
        img = topicmatch.Sublist.from_bytes(sl.to_bytes())
        if dialect != "amqp":
            assert img.to_bytes(version=2) == v2
        img.insert(subs[0][0], 50)
        sl.insert(subs[0][0], 50)
        assert _answers(topicmatch.Sublist.from_bytes(img.to_bytes(version=2)), ss) == _answers(sl, ss)
    for bad in (1, 5, 0):
        with pytest.raises(ValueError):
            sl.to_bytes(version=bad)


@pytest.mark.parametrize("name", ["nats_small_v1", "mqtt_small_v1", "nats_small", "mqtt_small", "amqp_small"])
def test_golden_versions_1_and_2_open(name):
    path = os.path.join(GOLDEN, name + ".fsb")
    with open(path, "rb") as f:
        old = f.read()
    a, b = topicmatch.Sublist.from_bytes(old), topicmatch.Sublist.open(path)
    assert a.stats()["mapped_bytes"] == b.stats()["mapped_bytes"] == 0
    img = a.to_bytes()
    c = topicmatch.Sublist.from_bytes(img)
    assert c.stats()["mapped_bytes"] == len(img)
    d = a.dialect
    rest, one, sep = REST[d], ONE[d], SEP[d]
    ss = ["a", f"a{sep}b", f"a{sep}b{sep}c", f"$x{sep}a", f"b{sep}a"]
    for e in (b, c):
        assert len(e) == len(a) and e.dialect == d
        assert _answers(e, ss) == _answers(a, ss)
        assert e.reverse_match(rest) == a.reverse_match(rest)
        assert e.reverse_match(f"{one}{sep}{one}") == a.reverse_match(f"{one}{sep}{one}")


# ============================================================ 6. determinism

@pytest.mark.parametrize("dialect", ALL_DIALECTS)
@PROPS
@given(data=st.data())
def test_unchanged_image_is_its_own_image(dialect, data):
    subs = data.draw(st.lists(subscriptions(dialect), max_size=30), label="subs")
    blob = build(dialect, subs).to_bytes()
    e = topicmatch.Sublist.from_bytes(blob, verify=data.draw(st.booleans()))
    assert e.to_bytes() == blob
    assert topicmatch.Sublist.from_bytes(e.to_bytes()).to_bytes() == blob
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "a.fsb")
        e.save(path)
        o = topicmatch.Sublist.open(path)
        assert o.to_bytes() == blob
        o.save(os.path.join(folder, "b.fsb"))
        with open(os.path.join(folder, "b.fsb"), "rb") as f:
            assert f.read() == blob
    # changed and changed back: NATS and MQTT write the same image again
    if subs:
        f, i, q = subs[0]
        e.discard(f, i, queue=q)
        e.insert(f, i, queue=q)
        e.insert(f, 12345, queue=q)
        e.discard(f, 12345, queue=q)
        if dialect != "amqp":
            assert e.to_bytes() == blob


def test_changed_image_with_a_share_group_on_a_share_filter_writes():
    """MQTT "$share/g/$share/x/+" is the group g on the filter "$share/x/+",
    which inserts take only in that form (a queue and a "$share/" filter
    together are refused): the thaw of an opened image holding it (the
    write of a changed image, to_bytes(version=2)) re-inserts it so, and
    does not call the image damaged.  The golden MQTT image holds one."""
    a = topicmatch.Sublist(dialect="mqtt")
    a.insert("$share/g/$share/x/+", 14)
    a.insert("$share/g/$share/x/+", 15)
    a.insert("$share/h/a/+", 16)
    a.insert("a/b", 17)
    blob = a.to_bytes()
    e = topicmatch.Sublist.from_bytes(blob)
    assert e.to_bytes(version=2) == a.to_bytes(version=2)
    e.insert("q/r", 1)
    e.discard("q/r", 1)
    assert e.to_bytes() == blob
    assert e.match("$share/x/y").groups == [("g", "$share/x/+", [14, 15])]
    with open(os.path.join(GOLDEN, "mqtt_small_v3.fsb"), "rb") as f:
        golden = topicmatch.Sublist.from_bytes(f.read())
    assert len(topicmatch.Sublist.from_bytes(golden.to_bytes(version=2))) == len(golden)


@pytest.mark.parametrize("dialect", ["nats", "mqtt"])
@PROPS
@given(data=st.data())
def test_image_depends_only_on_the_set(dialect, data):
    """NATS and MQTT sets of these filters (at most 4 tokens: no shape
    budget overflow, no trie placement) give one image whatever the
    insertion order, and whatever was inserted and removed on the way."""
    subs = data.draw(st.lists(subscriptions(dialect), max_size=30), label="subs")
    order = data.draw(st.permutations(subs), label="order")
    extra = data.draw(st.lists(subscriptions(dialect), max_size=10), label="extra")
    a = build(dialect, subs)
    b = topicmatch.Sublist(dialect)
    for f, i, q in extra + order:
        b.insert(f, i, queue=q)
    ref = reference(dialect, subs)
    absent = [x for x in extra if ref._key(*x) not in ref._subs]     # in the set only on the way
    b.remove_many(*([x[k] for x in absent] for k in range(3)))
    c = topicmatch.Sublist.from_bytes(build(dialect, list(reversed(subs))).to_bytes())
    c.insert_many(*([x[k] for x in extra] for k in range(3)))
    for f, i, q in absent:
        c.discard(f, i, queue=q)
    assert len(a) == len(b) == len(c) == len(ref)
    assert a.to_bytes() == b.to_bytes() == c.to_bytes()


# ============================================================ a larger workload

@pytest.mark.parametrize("dialect", ALL_DIALECTS)
def test_larger_index_with_shape_overflow_and_deep_filters(dialect):
    """Thousands of subscriptions, wide tables, more than 64 filter shapes
    (the rest in the trie), filters of more than 48 tokens: the image,
    opened and changed, answers as the built index does."""
    rnd = random.Random(7)
    sep, one, rest = SEP[dialect], ONE[dialect], REST[dialect]
    subs = []
    for j in range(3000):
        n = rnd.randint(1, 9)
        toks = [f"t{rnd.randint(0, 40)}" if rnd.random() < 0.8 else one for _ in range(n)]
        if rnd.random() < 0.2:
            toks.append(rest)
        if dialect == "amqp" and rnd.random() < 0.1:
            toks.insert(rnd.randint(0, len(toks)), "#")
        q = f"q{j % 3}" if j % 11 == 0 else None
        subs.append((sep.join(toks), j % 1500, q))
    for j in range(5):                                    # deep: 60 tokens
        subs.append((sep.join([one] * 30 + [f"d{j}"] * 30), 5000 + j, None))
    sl = build(dialect, subs)
    blob = sl.to_bytes()
    ss = []
    for f, _, _ in subs[::25]:
        s = subject_for(dialect, f)
        if s is not None:
            ss.append(s)
    ss += [sep.join(["x"] * 30 + ["d1"] * 30), sep.join(f"t{rnd.randint(0, 40)}" for _ in range(5))]
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "big.fsb")
        sl.save(path)
        e = topicmatch.Sublist.open(path, verify=True, cache_size=64)
        e2 = topicmatch.Sublist.from_bytes(blob, verify=False)
        for x in (e, e2):
            for q in ("all", "pick", "none"):
                got, want = x.match_many(ss, queues=q), sl.match_many(ss, queues=q)
                assert got.offsets.tolist() == want.offsets.tolist() and got.sub_ids.tolist() == want.sub_ids.tolist()
            for s in ss[:40]:
                assert x.match(s).groups == sl.match(s).groups and x.has_interest(s) == sl.has_interest(s)
            assert x.reverse_match(sep.join([one] * 3)) == sl.reverse_match(sep.join([one] * 3))
        # change a tenth of it through the live part
        for f, i, q in subs[::10]:
            for x in (e, sl):
                x.discard(f, i, queue=q)
        for f, i, q in subs[::13]:
            for x in (e, sl):
                x.insert(f, i + 10000, queue=q)
        assert len(e) == len(sl)
        for q in ("all", "pick"):
            got, want = e.match_many(ss, queues=q), sl.match_many(ss, queues=q)
            assert got.offsets.tolist() == want.offsets.tolist() and got.sub_ids.tolist() == want.sub_ids.tolist()
        # a sample against the reference too
        ref = R.ReferenceSublist(dialect)
        for f, i, q in subs:
            ref.insert(f, i, queue=q)
        for f, i, q in subs[::10]:
            ref.discard(f, i, queue=q)
        for f, i, q in subs[::13]:
            ref.insert(f, i + 10000, queue=q)
        for s in ss[:12]:
            r, m = ref.match(s), e.match(s)
            assert (m.subs, m.groups) == (r.subs, r.groups), s
        again = topicmatch.Sublist.from_bytes(e.to_bytes())
        got, want = again.match_many(ss, queues="all"), sl.match_many(ss, queues="all")
        assert got.sub_ids.tolist() == want.sub_ids.tolist()


# ============================================================ the documented invariants

def test_every_image_reason_is_documented():
    """Every reason the image's reader (fs_image.c) and verifier
    (fs_image_verify.c) can refuse an image with is in docs/FORMAT.md's
    "Invariants of an image", and every reason listed there is one it gives
    (its own, and those of the entry checks it shares with the version 2
    loader, fs_entry.h: every string there outside comments and includes)."""
    import re
    root = os.path.join(HERE, "..")
    src = ""
    for name in ("fs_image.c", "fs_image_verify.c"):
        with open(os.path.join(root, "csrc", "serial", name), encoding="utf-8") as f:
            src += f.read()
    with open(os.path.join(root, "csrc", "serial", "fs_entry.h"), encoding="utf-8") as f:
        shared = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
    shared_reasons = {r for line in shared.splitlines() if not line.startswith("#include")
                      for r in re.findall(r'"([^"]+)"', line)}
    with open(os.path.join(root, "docs", "FORMAT.md"), encoding="utf-8") as f:
        doc = f.read()
    sec = doc[doc.index("## Invariants of an image"):doc.index("**Not checked**")]
    listed = set(re.findall(r"`([^`]+)`", " ".join(sec.split())))
    listed -= {"verify=True", "ValueError(\"corrupt topicmatch index: <reason> at byte <offset>\")", "$share/"}
    given = {r for line in src.splitlines() if re.search(r"vbad\(|FAIL\(|reason = |why = |return \"", line)
             for r in re.findall(r'"([^"]+)"', line)} | shared_reasons
    assert given, "no reasons found in fs_image.c and fs_image_verify.c"
    assert given - listed == set(), "reasons the image's reader gives that FORMAT.md does not list"
    assert listed - given == set(), "reasons FORMAT.md lists that the image's reader never gives"


def _literal_slots(data):
    """The literal table of an image: its capacity, and its entries as
    (home slot, hash, check word, filter bytes, node offset, slot)."""
    img = Image(data)
    L = img.lit_level
    toks = {n.off: n.tok for n in img.entries}
    return L.cap, [(h & (L.cap - 1), h, ln, toks[node], node, (at - L.slots) // 16)
                   for at, h, ln, node in L.slot_list]


@pytest.mark.parametrize("dialect", ALL_DIALECTS)
def test_table_at_its_capacity_and_one_left_larger_write_one_image(dialect):
    """The writer reads a table at the capacity it writes it at cluster by
    cluster, sorting each alone (csrc/serial/fs_image_write.c,
    entries_by_cluster: which slots are full does not depend on the order
    of insertion), and a table left larger by removals by bucketing its
    entries (entries_by_bucket).  Both give the one image: here a
    64-slot literal table with a cluster of 18 entries that wraps round
    its end (into 8 more from slot 14) and one of 20 in its middle
    (sorted by merging past 16),
    built in several orders, and the same set left in a 256-slot table
    by removing 150 others."""
    pool = topicmatch.Sublist(dialect)
    pool.insert_many([f"t{i}" for i in range(3000)], list(range(3000)))
    _, slots = _literal_slots(pool.to_bytes())
    key = {e[3].decode(): e[1] for e in slots}
    end = sorted(t for t, h in key.items() if (h & 63) >= 60)[:18]
    mid = sorted(t for t, h in key.items() if 30 <= (h & 63) < 34)[:20]
    rest = sorted(t for t, h in key.items() if 14 <= (h & 63) < 21)[:8]
    extra = sorted(t for t in key if t not in set(end + mid + rest))[:150]
    flts = end + mid + rest
    assert len(flts) == 46 and len(extra) == 150
    rng = random.Random(11)
    images = []
    for _ in range(3):
        rng.shuffle(flts)
        sl = topicmatch.Sublist(dialect)
        for f in flts:
            sl.insert(f, int(f[1:]))
        images.append(sl.to_bytes())
    larger = topicmatch.Sublist(dialect)
    mixed = flts + extra
    rng.shuffle(mixed)
    larger.insert_many(mixed, [int(f[1:]) for f in mixed])
    larger.remove_many(extra, [int(f[1:]) for f in extra])
    assert larger.stats()["memory_bytes"] > sl.stats()["memory_bytes"]    # its table stayed larger
    images.append(larger.to_bytes())
    assert all(b == images[0] for b in images)
    cap, entries = _literal_slots(images[0])
    assert cap == 64 and len(entries) == 46
    assert sum(e[0] >= 60 and e[5] < 60 for e in entries) >= 10, "the crowded cluster did not wrap"
    run = sorted(e[5] for e in entries if 30 <= e[0] < 34)
    assert run == list(range(run[0], run[0] + 20)), "the middle cluster is not one run"
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "t.img")
        larger.save(path)
        with open(path, "rb") as f:
            assert f.read() == images[0]


@pytest.mark.parametrize("dialect", ALL_DIALECTS)
def test_tables_are_written_in_one_order_whatever_the_insertion_order(dialect):
    """The writer places a table's entries by home slot, then key, then
    bytes (csrc/serial/fs_image_write.c, sorted_entries), sorting each cluster
    of the table by insertion when short and by merging past 16 entries.
    Here 18 entries have their homes in the table's last four slots, so
    that their cluster wraps round the end (placed by fs_slot_place, not
    in order):
    the image is the same whatever order the filters were inserted in, its
    nodes lie in writing order, an opened image writes back its own bytes,
    and it answers as the reference does."""
    # the keys of 3,000 one-token filters, read from an image of them all
    pool = topicmatch.Sublist(dialect)
    pool.insert_many([f"t{i}" for i in range(3000)], list(range(3000)))
    _, slots = _literal_slots(pool.to_bytes())
    key = {e[3].decode(): e[1] for e in slots}
    # 40 entries: capacity 64, 16 buckets of four homes; bucket 15 is homes 60-63
    crowd = sorted(t for t, h in key.items() if (h & 63) >> 2 == 15)[:18]
    rest = sorted(t for t, h in key.items() if (h & 63) >> 2 != 15)[:22]
    assert len(crowd) == 18 and len(rest) == 22
    flts = crowd + rest
    want = None
    rng = random.Random(7)
    for _ in range(4):
        rng.shuffle(flts)
        sl = topicmatch.Sublist(dialect)
        for f in flts:
            sl.insert(f, int(f[1:]))
        got = sl.to_bytes()
        if want is None:
            want = got
        assert got == want
    cap, entries = _literal_slots(want)
    assert cap == 64 and len(entries) == 40
    by_order = [e[4] for e in sorted(entries, key=lambda e: e[:4])]
    assert by_order == sorted(e[4] for e in entries), "nodes not laid out in writing order"
    assert sum(e[0] >= 60 and e[5] < 60 for e in entries) >= 14, "the crowded cluster did not wrap"
    opened = topicmatch.Sublist.from_bytes(want)
    assert opened.to_bytes() == want
    for f in flts + ["t3001", "nope"]:
        assert list(opened.match(f).subs) == ([int(f[1:])] if f in flts else []), f


def test_full_check_on_threads_gives_the_one_thread_verdict():
    """open(verify=True) of a large image cuts its tables among threads and
    sums the checksum beside them (csrc/serial/fs_image_verify.c, verify_threads);
    where anything is wrong it checks again in one thread, so that the
    error is the one the order of the checks gives.  Here on an image with
    units enough for every thread: good; its ids out of order in the
    middle of the literal table (resealed); two slots naming one node;
    a flipped byte the checksum catches."""
    flts = [f"a{i}.b{i % 97}" for i in range(60_000)] + [f"w{i}.*.x" for i in range(20_000)]
    sl = topicmatch.Sublist("nats")
    sl.insert_many(flts + flts[:500], list(range(len(flts))) + [10**9 + i for i in range(500)])
    good = sl.to_bytes()
    assert verdict(good, True) == verdict(good, False) == "opened"
    img = Image(good)
    lit = [n for n in img.entries if len(n.ids) >= 2 and n.tok.startswith(b"a")]
    n = lit[len(lit) // 2]
    disordered = Image(good)
    disordered.put64(n.ids_off, n.ids[1])
    disordered.put64(n.ids_off + 8, n.ids[0])
    twice = Image(good)
    L = twice.lit_level
    twice.put64(L.slot_list[30_000][0] + 8, L.slot_list[100][3])    # slot 30,000 names slot 100's node
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 1
    for bad, why in ((disordered.seal(), "ids not in strictly increasing order"),
                     (twice.seal(), "node reached twice"),
                     (bytes(flipped), "checksum mismatch")):
        alone, threaded = verdict(bad, False), verdict(bad, True)
        assert why in alone, alone
        assert threaded == alone
