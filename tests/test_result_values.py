"""MatchResult and BatchResult are values (issue 48 item 3).

`sl.match("a.b") == sl.match("a.b")` was False although the repr,
`MatchResult(subs=[1], groups=[])`, reads as a value; BatchResult alike.
Now both compare by value, whatever path made them (a list of subjects, an
Arrow column plain or dictionary-encoded, a live index, an image in memory
or mapped from a file, a cache); BatchResult (read-only arrays) hashes,
MatchResult (whose lists are the caller's to change) does not; and for a
small result, equal reprs and equal values are the same thing.
"""
import os
import tempfile

import pytest
from hypothesis import given, settings, strategies as st

import topicmatch
from examples import examples
from strategies import ALL_DIALECTS, rows, subjects, subscriptions

np = pytest.importorskip("numpy")


def _index(dialect, subs, cache_size=0):
    sl = topicmatch.Sublist(dialect, cache_size=cache_size)
    for f, i, q in subs:
        sl.insert(f, i, queue=q)
    return sl


def _paths(dialect, subs, folder):
    """The same subscriptions behind every path an answer comes from: live,
    cached, an image in memory, an image mapped from a file."""
    live = _index(dialect, subs)
    path = os.path.join(folder, f"{dialect}.img")
    live.save(path)
    return {"live": live, "cached": _index(dialect, subs, cache_size=64),
            "from_bytes": topicmatch.Sublist.from_bytes(live.to_bytes()),
            "open": topicmatch.Sublist.open(path)}


def _rows(b):
    """A BatchResult's rows as plain values: None where invalid, else its ids."""
    return [None if b.invalid[i] else b[i].tolist() for i in range(len(b))]


@st.composite
def cases(draw):
    dialect = draw(st.sampled_from(ALL_DIALECTS))
    subs = draw(st.lists(subscriptions(dialect), max_size=12))
    batch = draw(st.lists(rows(dialect), max_size=12))
    return dialect, subs, batch


# "pick" chooses a member of each group per call: only "all" and "none"
# give one answer for one row on every path.
@settings(max_examples=examples(150), deadline=None)
@given(cases(), st.sampled_from(["all", "none"]))
def test_equal_rows_compare_equal_across_list_arrow_and_image(case, queues):
    pa = pytest.importorskip("pyarrow")
    dialect, subs, batch = case
    with tempfile.TemporaryDirectory() as folder:
        paths = _paths(dialect, subs, folder)
        results = []
        for name, sl in paths.items():
            results.append((name, "list", sl.match_many(batch, queues=queues)))
            try:
                column = pa.array(batch, type=pa.string())
            except (pa.ArrowInvalid, UnicodeEncodeError):
                continue                  # a lone surrogate is no Arrow string
            results.append((name, "arrow", sl.match_many(column, queues=queues)))
            results.append((name, "dictionary", sl.match_many(column.dictionary_encode(), queues=queues)))
        first = results[0][2]
        for name, kind, b in results:
            assert b == first and not (b != first), (name, kind, _rows(b), _rows(first))
            assert hash(b) == hash(first), (name, kind)
            assert repr(b) == repr(first), (name, kind)
            assert _rows(b) == _rows(first)
        # One row per subject: match() on every path, equal to each other
        # and to the batch's row.
        for s in batch:
            if not isinstance(s, str) or not topicmatch.is_valid_subject(s, dialect):
                continue
            answers = [sl.match(s) for sl in paths.values()]
            for m in answers:
                assert m == answers[0] and not (m != answers[0])
                assert repr(m) == repr(answers[0])


@settings(max_examples=examples(200), deadline=None)
@given(st.sampled_from(ALL_DIALECTS).flatmap(
    lambda d: st.tuples(st.just(d), st.lists(subscriptions(d), max_size=10), subjects(d), subjects(d))))
def test_match_results_are_equal_exactly_when_their_values_are(case):
    dialect, subs, s1, s2 = case
    sl = _index(dialect, subs)
    a, b = sl.match(s1), sl.match(s2)
    same = (a.subs, a.groups) == (b.subs, b.groups)
    assert (a == b) is same and (a != b) is (not same)
    assert (repr(a) == repr(b)) is same          # the repr shows exactly what is compared
    c = sl.match(s1, dedupe=True)
    assert (a == c) is ((a.subs, a.groups) == (c.subs, c.groups))


@settings(max_examples=examples(200), deadline=None)
@given(st.sampled_from(ALL_DIALECTS).flatmap(
    lambda d: st.tuples(st.just(d), st.lists(subscriptions(d), max_size=10),
                        st.lists(rows(d), max_size=8), st.lists(rows(d), max_size=8))))
def test_batch_results_are_equal_exactly_when_their_rows_are(case):
    dialect, subs, one, two = case
    sl = _index(dialect, subs)
    a, b = sl.match_many(one, queues="all"), sl.match_many(two, queues="all")
    same = _rows(a) == _rows(b)
    assert (a == b) is same and (a != b) is (not same)
    assert (repr(a) == repr(b)) is same          # small: every row is shown
    if same:
        assert hash(a) == hash(b)


def test_results_compare_with_nothing_else():
    sl = _index("nats", [("a.b", 1, None), ("a.*", 2, "q")])
    m = sl.match("a.b")
    assert m != (m.subs, m.groups) and m != [1] and m is not None and m != object()
    b = sl.match_many(["a.b"])
    assert b != [[1]] and b != b.sub_ids.tolist()
    with pytest.raises(TypeError, match="unhashable"):
        hash(m)                                    # its lists are the caller's: no hash
    assert {b, sl.match_many(["a.b"])} == {b}      # a value: one entry in a set


def test_a_match_result_changed_by_its_caller_compares_as_changed():
    sl = _index("nats", [("a.b", 1, None)])
    m, n = sl.match("a.b"), sl.match("a.b")
    assert m == n
    m.subs.append(7)
    assert m != n and repr(m) != repr(n)


def test_batch_result_arrays_are_read_only():
    b = _index("nats", [("a.b", 1, None)]).match_many(["a.b", "x"])
    h = hash(b)
    for arr in (b.offsets, b.sub_ids, b.invalid):
        with pytest.raises(ValueError, match="read-only"):
            arr[0] = 1
    assert hash(b) == h


@pytest.mark.parametrize("n", [0, 1, 2, 7, 8, 9, 15, 16, 17, 31])
@pytest.mark.parametrize("odd_at", [None, 0, "last", "middle"])
def test_queue_names_and_filters_come_back_as_inserted(n, odd_at):
    """A group's name (and an MQTT group's filter) is made from the core's
    bytes by match(): ASCII of two bytes or more is copied whole (a word at a
    time tested for a byte over 127, then the tail byte by byte), anything
    else decoded.  A non-ASCII character at the start, the end or within a
    word of a name of each length must come back as inserted, not as bytes
    copied into an ASCII str."""
    name = [chr(ord("a") + i % 26) for i in range(n)]
    if odd_at is not None and n:
        i = {0: 0, "last": n - 1, "middle": n // 2}[odd_at]
        name[i] = "é" if i % 2 else "\u20ac"
    name = "".join(name) or "q"            # an empty queue is no queue
    nats = topicmatch.Sublist("nats")
    nats.insert("a.b", 1, queue=name)
    nats.insert("a.*", 2, queue=name)
    assert nats.match("a.b").groups == [(name, None, [1, 2])]
    mqtt = topicmatch.Sublist("mqtt")
    flt = "a/" + name.replace("/", "x")
    mqtt.insert(f"$share/{name}/{flt}", 3)
    got = mqtt.match(flt).groups
    assert got == [(name, flt, [3])]
    assert all(type(s) is str for s in got[0][:2])
