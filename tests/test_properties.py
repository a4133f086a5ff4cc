"""Hypothesis: the C engine against the pure-Python reference, all dialects.

Token alphabets are tiny on purpose so that random filters and subjects
actually match each other, and include the awkward cases: wildcards, '$'
tokens, MQTT empty levels, queue groups and MQTT '$share/G/f'."""
import os
import tempfile
from collections import Counter

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import topicmatch
from topicmatch import InvalidSubjectError
from topicmatch import _reference as R

from examples import examples, steps
from strategies import (tiny_thread_blocks, ALL_DIALECTS as DIALECTS, ONE, QUEUES, REST, SEP, SUB_IDS, all_ids, filters, fuzz,
                        is_one_per_group, norm, norm_reverse, subjects, subscriptions)

PROPS = settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- stateless properties -----------------------------------------------------

@pytest.mark.parametrize("dialect", DIALECTS)
@PROPS
@given(data=st.data())
def test_subject_matches_agrees(dialect, data):
    f = data.draw(filters(dialect))
    s = data.draw(subjects(dialect))
    assert topicmatch.subject_matches(f, s, dialect) is R.subject_matches(f, s, dialect)


@pytest.mark.parametrize("dialect", DIALECTS)
@PROPS
@given(data=st.data())
def test_validity_agrees(dialect, data):
    s = data.draw(fuzz(dialect))
    vs, vf = R.is_valid_subject(s, dialect), R.is_valid_filter(s, dialect)
    assert topicmatch.is_valid_subject(s, dialect) is vs
    assert topicmatch.is_valid_filter(s, dialect) is vf
    f = data.draw(st.one_of(fuzz(dialect), filters(dialect)))
    try:
        want = R.subject_matches(f, s, dialect)
    except ValueError:
        with pytest.raises(InvalidSubjectError):
            topicmatch.subject_matches(f, s, dialect)
    else:
        assert topicmatch.subject_matches(f, s, dialect) is want


# Strings across several 8-byte words, which the tokenizer scans a word at
# a time: tokens ending at, before and after a word boundary, and the bytes
# it must stop at (an allowed NATS control byte, DEL, non-ASCII, NUL,
# spaces, wildcards).
LONG_PIECES = ["abcdefg", "abc", "a", "", "*", ">", "+", "#", "\x01", "\x7f", " ", "\u00e9", "\x00"]


@pytest.mark.parametrize("dialect", DIALECTS)
@PROPS
@given(data=st.data())
def test_long_strings_agree(dialect, data):
    pieces = st.lists(st.sampled_from(LONG_PIECES + [SEP[dialect]] * 3), max_size=12).map("".join)
    s = data.draw(pieces)
    vs, vf = R.is_valid_subject(s, dialect), R.is_valid_filter(s, dialect)
    assert topicmatch.is_valid_subject(s, dialect) is vs
    assert topicmatch.is_valid_filter(s, dialect) is vf
    f = data.draw(st.one_of(pieces, st.just(s)))
    if vs and R.is_valid_filter(f, dialect):
        assert topicmatch.subject_matches(f, s, dialect) is R.subject_matches(f, s, dialect)
        sl = topicmatch.Sublist(dialect)
        sl.insert(f, 1)
        assert (1 in sl.match(s).subs) is R.subject_matches(f, s, dialect)


@pytest.mark.parametrize("dialect", DIALECTS)
@PROPS
@given(data=st.data())
def test_reference_intersection_is_complete(dialect, data):
    # The reference's filters_intersect checks its own witness (so it never
    # over-reports); here: whenever a subject matches both, it says so.
    f1, f2 = data.draw(filters(dialect)), data.draw(filters(dialect))
    s = data.draw(subjects(dialect))
    both = R.subject_matches(f1, s, dialect) and R.subject_matches(f2, s, dialect)
    got = R.filters_intersect(f1, f2, dialect)
    assert got is R.filters_intersect(f2, f1, dialect)
    if both:
        assert got


@pytest.mark.parametrize("dialect", DIALECTS)
@PROPS
@given(data=st.data())
def test_reverse_match_is_intersection(dialect, data):
    f1, f2 = data.draw(filters(dialect)), data.draw(filters(dialect))
    sl = topicmatch.Sublist(dialect)
    sl.insert(f2, 1)
    want = [(f2, 1, None)] if R.filters_intersect(f1, f2, dialect) else []
    assert norm_reverse(sl.reverse_match(f1)) == want


@pytest.mark.parametrize("dialect", DIALECTS)
@settings(max_examples=examples(100), deadline=None)
@given(data=st.data())
def test_bulk_index_agrees(dialect, data):
    subs = data.draw(st.lists(subscriptions(dialect), max_size=40))
    sl, ref = topicmatch.Sublist(dialect), R.ReferenceSublist(dialect)
    fs, ids, qs = ([s[k] for s in subs] for k in range(3))
    assert sl.insert_many(fs, ids, qs) == ref.insert_many(fs, ids, qs)
    assert len(sl) == len(ref)
    for s in data.draw(st.lists(subjects(dialect), min_size=1, max_size=10)):
        assert norm(sl.match(s)) == norm(ref.match(s)), s
        assert tuple(sl.num_interest(s)) == ref.num_interest(s)
    for f in data.draw(st.lists(filters(dialect), min_size=1, max_size=5)):
        assert norm_reverse(sl.reverse_match(f)) == norm_reverse(ref.reverse_match(f)), f


# --- stateful -----------------------------------------------------------------

def make_machine(dialect):
    bad_filter = {"nats": "a..b", "mqtt": "a/#/b", "amqp": "x" * 256}[dialect]
    always_dedupe = dialect == "amqp"     # AMQP: once per sub_id, the rule

    class SublistMachine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.ref = R.ReferenceSublist(dialect)
            # uncached, and a tiny cache so that eviction and invalidation both happen
            self.engines = [topicmatch.Sublist(dialect), topicmatch.Sublist(dialect, cache_size=4)]
            self.gens = [e.generation for e in self.engines]

        def _check_generation(self, changed):
            for k, e in enumerate(self.engines):
                g = e.generation
                assert g > self.gens[k] if changed else g >= self.gens[k]
                self.gens[k] = g

        @rule(sub=subscriptions(dialect))
        def insert(self, sub):
            f, i, q = sub
            want = self.ref.insert(f, i, queue=q)
            for e in self.engines:
                assert e.insert(f, i, queue=q) is want
            self._check_generation(want)

        @rule(sub=subscriptions(dialect))
        def remove(self, sub):
            f, i, q = sub
            try:
                self.ref.remove(f, i, queue=q)
                present = True
            except KeyError:
                present = False
            for e in self.engines:
                if present:
                    e.remove(f, i, queue=q)
                else:
                    with pytest.raises(KeyError):
                        e.remove(f, i, queue=q)
            self._check_generation(present)

        @precondition(lambda self: len(self.ref) > 0)
        @rule(data=st.data())
        def remove_existing(self, data):
            f, q, i = data.draw(st.sampled_from(sorted(self.ref._subs, key=repr)))
            if dialect == "mqtt" and q is not None and data.draw(st.booleans()):
                f, q = f"$share/{q}/{f}", None
            self.ref.remove(f, i, queue=q)
            for e in self.engines:
                e.remove(f, i, queue=q)
            self._check_generation(True)

        @rule(sub=subscriptions(dialect))
        def discard(self, sub):
            f, i, q = sub
            want = self.ref.discard(f, i, queue=q)
            for e in self.engines:
                assert e.discard(f, i, queue=q) is want
            self._check_generation(want)

        @rule(subs=st.lists(subscriptions(dialect), max_size=4), remove=st.booleans())
        def many(self, subs, remove):
            fs, ids, qs = ([s[k] for s in subs] for k in range(3))
            name = "remove_many" if remove else "insert_many"
            want = getattr(self.ref, name)(fs, ids, qs)
            for e in self.engines:
                assert getattr(e, name)(fs, ids, qs) == want
            self._check_generation(want > 0)

        @rule(subs=st.lists(subscriptions(dialect), max_size=4), remove=st.booleans(),
              at=st.integers(0, 4))
        def many_with_a_bad_row(self, subs, remove, at):
            fs, ids, qs = ([s[k] for s in subs] for k in range(3))
            at = min(at, len(fs))
            fs.insert(at, bad_filter)
            ids.insert(at, 1)
            qs.insert(at, None)
            name = "remove_many" if remove else "insert_many"
            with pytest.raises(ValueError):
                getattr(self.ref, name)(fs, ids, qs)
            for e in self.engines:
                with pytest.raises(InvalidSubjectError):
                    getattr(e, name)(fs, ids, qs)
            self._check_generation(False)

        # Results are compared in order: the row's order (README) is the
        # reference's, whatever the history of inserts, removes and images.
        @rule(s=subjects(dialect))
        def match(self, s):
            want = self.ref.match(s)
            for e in self.engines:
                m = e.match(s)
                assert (m.subs, m.groups) == (want.subs, want.groups), s

        @rule(s=subjects(dialect))
        def match_dedupe(self, s):
            want = self.ref.match(s, dedupe=True)
            for e in self.engines:
                m = e.match(s, dedupe=True)
                assert (m.subs, m.groups) == (want.subs, want.groups), s

        @rule(ss=st.lists(subjects(dialect), max_size=6), queues=st.sampled_from(["all", "none", "pick"]),
              threads=st.integers(1, 4), dedupe=st.booleans(), block_rows=st.integers(1, 3))
        def match_many(self, ss, queues, threads, dedupe, block_rows):
            dedupe = dedupe or always_dedupe
            for e in self.engines:
                # threads > 1: the threaded path itself, its blocks of
                # block_rows claimed and placed in turn by up to 4 threads
                with tiny_thread_blocks(block_rows):
                    b = e.match_many(ss, queues=queues, threads=threads, dedupe=dedupe)
                for i, s in enumerate(ss):
                    m = self.ref.match(s)
                    row = b[i].tolist()
                    assert row == R.batch_row(m, queues, key=s, dialect=dialect, dedupe=dedupe), (s, row)
                    if queues == "none":
                        assert row == sorted(row), (s, row)      # plain ids ascending
                    if queues == "all" and not dedupe:
                        assert Counter(row) == all_ids(m), (s, row)
                    elif queues == "pick" and not dedupe:
                        assert is_one_per_group(row, m), (s, row, m)
                        assert sorted(row) == R.picked_row(m, s, dialect), (s, row, m)

        @rule()
        def round_trip(self):
            # the uncached engine is replaced by its own serialized image,
            # and the next steps go on changing and asking the loaded one
            self.engines[0] = topicmatch.Sublist.from_bytes(self.engines[0].to_bytes())
            self.gens[0] = self.engines[0].generation

        @rule(threads=st.integers(1, 3), reverse=st.booleans())
        def bulk_rebuild(self, threads, reverse):
            # the uncached engine is replaced by an image of the reference's
            # set written by the bulk builder (in some row order), byte for
            # byte the image insert_many of those rows gives; the next
            # steps change and ask the opened image
            rows = list(self.ref)[::-1] if reverse else list(self.ref)
            fs, qs, ids = [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
            want = topicmatch.Sublist(dialect)
            want.insert_many(fs, ids, qs)
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "bulk.img")
                built = topicmatch.build_image(path, fs, ids, qs, dialect=dialect, threads=threads)
                with open(path, "rb") as f:
                    assert f.read() == want.to_bytes()
                self.engines[0] = topicmatch.Sublist.from_bytes(built.to_bytes())
                built.close()
            self.gens[0] = self.engines[0].generation

        @rule(ss=st.lists(subjects(dialect), min_size=1, max_size=6), threads=st.integers(1, 4),
              block_rows=st.integers(1, 3))
        def round_trip_compare(self, ss, threads, block_rows):
            # each engine's image, loaded, answers with the same arrays, in
            # the same order, as the engine it was written from
            for e in self.engines:
                loaded = topicmatch.Sublist.from_bytes(e.to_bytes(), cache_size=4)
                for queues in ("all", "none", "pick"):
                    for dedupe in (False, True) if not always_dedupe else (True,):
                        want = e.match_many(ss, queues=queues, dedupe=dedupe)
                        with tiny_thread_blocks(block_rows):
                            got = loaded.match_many(ss, queues=queues, threads=threads, dedupe=dedupe)
                        assert got.offsets.tolist() == want.offsets.tolist()
                        assert got.sub_ids.tolist() == want.sub_ids.tolist(), (ss, queues, dedupe)
                for s in ss:
                    a, b = e.match(s), loaded.match(s)
                    assert (a.subs, a.groups) == (b.subs, b.groups), s

        @rule(s=subjects(dialect))
        def has_interest(self, s):
            want = self.ref.has_interest(s)
            for e in self.engines:
                assert e.has_interest(s) is want, s

        @rule(s=subjects(dialect))
        def num_interest(self, s):
            want = self.ref.num_interest(s)
            for e in self.engines:
                assert tuple(e.num_interest(s)) == want, s

        @rule(f=filters(dialect))
        def reverse_match(self, f):
            want = self.ref.reverse_match(f)
            for e in self.engines:
                assert e.reverse_match(f) == want, f

        @invariant()
        def same_len(self):
            for e in self.engines:
                assert len(e) == len(self.ref)

    SublistMachine.__name__ = SublistMachine.__qualname__ = f"SublistMachine_{dialect}"
    return SublistMachine


STATEFUL = settings(max_examples=examples(100), stateful_step_count=steps(50), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

TestNatsStateMachine = make_machine("nats").TestCase
TestNatsStateMachine.settings = STATEFUL
TestMqttStateMachine = make_machine("mqtt").TestCase
TestMqttStateMachine.settings = STATEFUL
TestAmqpStateMachine = make_machine("amqp").TestCase
TestAmqpStateMachine.settings = STATEFUL


@settings(max_examples=examples(200), deadline=None)
@given(data=st.data())
def test_amqp_many_hashes_agree(data):
    """Bindings dense in '#' against longer routing keys: the (node,
    position) walk, the DP and the reference's state search agree."""
    words = st.sampled_from(["a", "b", ""])
    toks = data.draw(st.lists(st.one_of(words, st.just("#"), st.just("#"), st.just("*")),
                              min_size=1, max_size=12))
    f = ".".join(toks)
    s = ".".join(data.draw(st.lists(words, max_size=30)))
    want = R.subject_matches(f, s, "amqp")
    assert topicmatch.subject_matches(f, s, "amqp") is want
    sl = topicmatch.Sublist("amqp")
    sl.insert(f, 1)
    sl.insert(f + ".#", 2)
    sl.insert("#." + f, 2)
    ref = R.ReferenceSublist("amqp")
    for ff, i in [(f, 1), (f + ".#", 2), ("#." + f, 2)]:
        ref.insert(ff, i)
    assert norm(sl.match(s)) == norm(ref.match(s))
    row = sl.match_many([s])[0].tolist()
    assert row == ref.match(s).subs                  # once per sub_id, in the row's order
