"""topicmatch.build_image, the bulk builder (issue 44, item 1): the image
written straight from insert_many's columns is byte for byte the one
insert_many + to_bytes gives, in every dialect, for every input kind; the
opened index answers as the reference does; a bad row raises what
insert_many raises and leaves no file."""
import os
import tempfile

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

import topicmatch
from topicmatch import Sublist, _core, _reference as R
from image_codec import Image
from strategies import ALL_DIALECTS, ONE, REST, SEP, norm, subjects, subscriptions


def built_bytes(filters, ids, queues=None, dialect="nats"):
    sl = Sublist(dialect)
    sl.insert_many(filters, ids, queues)
    return sl.to_bytes()


def bulk(folder, filters, ids, queues=None, dialect="nats", threads=1):
    """build_image into folder/x.img: (its bytes, the opened index)."""
    path = os.path.join(folder, "x.img")
    sl = topicmatch.build_image(path, filters, ids, queues, dialect=dialect, threads=threads)
    with open(path, "rb") as f:
        return f.read(), sl


def assert_same(filters, ids, queues=None, dialect="nats", threads=1):
    want = built_bytes(filters, ids, queues, dialect)
    with tempfile.TemporaryDirectory() as d:
        got, sl = bulk(d, filters, ids, queues, dialect, threads)
        sl.close()
    assert got == want


def columns(subs):
    return [f for f, _, _ in subs], [i for _, i, _ in subs], [q for _, _, q in subs]


@pytest.mark.parametrize("dialect", ALL_DIALECTS)
@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_bytes_equal_insert_many_and_answers_equal_reference(dialect, data):
    subs = data.draw(st.lists(subscriptions(dialect), max_size=40))
    subs += data.draw(st.lists(st.sampled_from(subs), max_size=10)) if subs else []    # duplicates
    fs, ids, qs = columns(subs)
    threads = data.draw(st.sampled_from([1, 2, 3, 4]))
    want = built_bytes(fs, ids, qs, dialect)
    ref = R.ReferenceSublist(dialect)
    ref.insert_many(fs, ids, qs)
    with tempfile.TemporaryDirectory() as d:
        got, sl = bulk(d, fs, ids, qs, dialect, threads)
        assert got == want
        assert len(sl) == len(ref)
        for s in data.draw(st.lists(subjects(dialect), min_size=1, max_size=8)):
            assert norm(sl.match(s)) == norm(ref.match(s)), s
            assert sl.num_interest(s) == ref.num_interest(s)
        sl.close()


def _shape_filters(dialect, n):
    """n filters of as many shapes: a wildcard at every position pattern of
    up to 8 tokens, far more shapes than the budget (64 shapes, 24 probed
    per subject length) keeps, in an order that interleaves them."""
    sep, one, rest = SEP[dialect], ONE[dialect], REST[dialect]
    out = []
    for k in range(n):
        toks = [one if (k >> i) & 1 else f"t{i}" for i in range(3 + k % 6)]
        if k % 3 == 0:
            toks.append(rest)
        if one not in toks and rest not in toks:
            toks[0] = one
        out.append(sep.join(toks))
    return out


@pytest.mark.parametrize("dialect", ALL_DIALECTS)
def test_shapes_past_the_budget_kept_by_the_sets_rule(dialect):
    """Past the shape budget, the shapes that get tables are the set's
    rule's (fs_shapes_choose), not the first rows': the builder's bytes are
    insert_many + to_bytes's (which places by the rule) in any row order,
    and some shaped filters are in the trie."""
    fs = _shape_filters(dialect, 300)
    fs = fs + fs[::7] + [f.replace("t1", "u") for f in fs[:50]]
    ids = list(range(len(fs)))
    qs = [None if i % 4 else "q" for i in ids]
    assert_same(fs, ids, qs, dialect)
    assert_same(fs[::-1], ids, qs[::-1], dialect)
    assert_same(fs[1::2] + fs[::2], ids, qs[1::2] + qs[::2], dialect)
    sl = Sublist(dialect)
    sl.insert_many(fs, ids, qs)
    assert sl.stats()["nodes"] > 0          # shapes not kept: their filters in the trie


@pytest.mark.parametrize("dialect", ALL_DIALECTS)
def test_shaped_filters_under_a_deeper_filters_trie_path(dialect):
    """A filter with a kept shape whose trie path a deeper filter (too
    deep for a shape, or AMQP's '#' before the end) makes is in its shape's
    table whichever row comes first: the bytes are insert_many's in either
    order."""
    sep, one = SEP[dialect], ONE[dialect]
    deep = sep.join(["a", one] + [f"d{i}" for i in range(60)])     # too deep for a shape: the trie
    fs = [sep.join(["z", one]),            # shape (2, {1})
          sep.join(["b", one]),            # before the trie path below
          deep, deep.replace("a", "b", 1),
          sep.join(["a", one]),            # after it
          sep.join(["b", one]),
          sep.join(["a", one])]
    ids = [1, 2, 3, 4, 5, 6, 7]
    assert_same(fs, ids, None, dialect)
    assert_same(fs[::-1], ids, None, dialect)
    in_tables = {e.tok for e in Image(built_bytes(fs, ids, None, dialect)).entries}
    assert {sep.join(["a", one]).encode(), sep.join(["b", one]).encode()} <= in_tables
    if dialect == "amqp":                  # '#' before the end: the trie, always
        g = ["a.#.b", "a.#", "a.*", "a.#.b.#", "x.#", "a.#", "#.a", "#"]
        assert_same(g, list(range(len(g))), None, dialect)
        assert_same(g[::-1], list(range(len(g))), None, dialect)
        assert {b"a.#", b"#"} <= {e.tok for e in Image(built_bytes(g, list(range(len(g))), None, dialect)).entries}


@pytest.mark.parametrize("dialect", ALL_DIALECTS)
def test_empty_and_one_row(dialect):
    assert_same([], [], None, dialect)
    assert_same(["a"], [5], None, dialect)
    assert_same(["a"], [5], ["q"], dialect)
    assert_same([SEP[dialect].join(["a", ONE[dialect]])], [-1], None, dialect)


def test_every_input_kind_gives_the_same_bytes():
    fs = [f"p{i % 7}.x.{i % 13}" if i % 5 else f"p{i % 7}.*.{i % 3}" for i in range(3000)]
    ids = list(range(3000))
    qs = [None if i % 3 else f"q{i % 4}" for i in ids]
    want = built_bytes(fs, ids, qs)
    kinds = [
        (fs, ids, qs),
        (tuple(fs), np.asarray(ids, dtype=np.int64), qs),
        (pa.array(fs, pa.string()), pa.array(ids, pa.int64()), pa.array(qs, pa.string())),
        (pa.array(fs, pa.large_string()), np.asarray(ids, dtype=np.int32), pa.array(qs, pa.large_string())),
        (pa.array(fs, pa.string_view()), ids, pa.array(qs, pa.string_view())),
        (pa.array(fs).dictionary_encode(), ids, pa.array(qs).dictionary_encode()),
        (pa.chunked_array([fs[:1000], fs[1000:]]), ids, pa.chunked_array([qs[:7], qs[7:]])),
    ]
    with tempfile.TemporaryDirectory() as d:
        for f, i, q in kinds:
            for threads in (1, 2, None):
                got, sl = bulk(d, f, i, q, threads=threads)
                sl.close()
                assert got == want, (type(f), threads)


def test_large_input_on_threads():
    """More rows than one parse chunk on every thread, duplicates across
    chunks, shared groups: the same bytes at every thread count."""
    n = 40_000
    fs = [f"s{i % 997}.{'*' if i % 11 == 0 else i % 50}.e" for i in range(n)]
    ids = [i % 3001 for i in range(n)]
    qs = [None if i % 6 else f"g{i % 5}" for i in range(n)]
    want = built_bytes(fs, ids, qs)
    with tempfile.TemporaryDirectory() as d:
        for threads in (1, 2, 3, 4):
            got, sl = bulk(d, pa.array(fs), np.asarray(ids), pa.array(qs), threads=threads)
            assert len(sl) == len(set(zip(fs, ids, qs)))
            sl.close()
            assert got == want
    # a shape's table past the size written on threads (8,192 entries), its
    # filters repeated with other ids and groups (entries of several rows)
    fs = [f"s{i % 20000}.*.e" if i % 4 else f"s{i % 20000}.>" for i in range(50_000)]
    ids = [i % 7 for i in range(50_000)]
    qs = [None if i % 3 else f"g{i % 2}" for i in range(50_000)]
    want = built_bytes(fs, ids, qs)
    with tempfile.TemporaryDirectory() as d:
        for threads in (1, 2, 4):
            got, sl = bulk(d, fs, ids, qs, threads=threads)
            sl.close()
            assert got == want


def _outcome(fn):
    try:
        fn()
    except Exception as e:      # noqa: BLE001 -- compared whole, below
        return type(e), str(e), getattr(e, "row", None)
    return None


def assert_same_error(filters, ids, queues=None, dialect="nats"):
    """build_image raises what insert_many raises, and leaves no file."""
    want = _outcome(lambda: Sublist(dialect).insert_many(filters, ids, queues))
    assert want is not None
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "x.img")
        with open(path, "wb") as f:
            f.write(b"old")
        got = _outcome(lambda: topicmatch.build_image(path, filters, ids, queues, dialect=dialect))
        assert sorted(os.listdir(d)) == ["x.img"]
        with open(path, "rb") as f:
            assert f.read() == b"old"
        got2 = _outcome(lambda: topicmatch.build_image(os.path.join(d, "y.img"), filters, ids, queues,
                                                       dialect=dialect, threads=2))
        assert sorted(os.listdir(d)) == ["x.img"]
    assert got == want
    assert got2 == want
    return got


@pytest.mark.parametrize("dialect", ALL_DIALECTS)
@pytest.mark.parametrize("k", [0, 1, 4095, 4096, 9000])
def test_bad_row_k_raises_as_insert_many_and_leaves_no_file(dialect, k):
    good = [SEP[dialect].join(["a", str(i)]) for i in range(10_000)]
    bad = {"nats": "a..b", "mqtt": "a/#/b", "amqp": "x" * 300}[dialect]
    fs = list(good)
    fs[k] = bad
    fs[k + 500] = bad                   # a later bad row: the first is reported
    err = assert_same_error(fs, list(range(len(fs))), None, dialect)
    assert err[0] is topicmatch.InvalidSubjectError and err[2] == k
    assert_same_error(pa.array(fs), np.arange(len(fs)), None, dialect)


def test_bad_queues_and_shares_raise_as_insert_many():
    assert_same_error(["a", "b"], [1, 2], [None, "bad q"], "nats")
    assert_same_error(["a", "$share/g/b"], [1, 2], [None, "q"], "mqtt")
    assert_same_error(["a", "$share//b"], [1, 2], None, "mqtt")
    assert_same_error(["a", "b"], [1, 2], [None, "a/b"], "mqtt")


def test_hostile_columns_raise_as_insert_many():
    assert_same_error(pa.array(["a", None, "b"]), [1, 2, 3])                  # a null filter
    # a null filter in every Arrow form the builder reads in place (no spec
    # array: fs_strings_first_null finds it), past whole bytes of the
    # validity bitmap, before an invalid row: the null is named first
    fs = [f"a.{i}" for i in range(40)]
    fs[3] = "a..b"
    fs[29] = None
    for col in (pa.array(fs), pa.array(fs, pa.large_string()), pa.array(fs, pa.string_view()),
                pa.array(fs).dictionary_encode(), pa.chunked_array([fs[:17], fs[17:]]),
                pa.array(fs).slice(5)):
        n = len(col)
        err = assert_same_error(col, np.arange(n), pa.array(["q"] * n))
        assert err[0] is topicmatch.TopicmatchTypeError and str(n - 40 + 29) in err[1], err
    assert_same_error(["a", 5], [1, 2])                                        # not a str
    assert_same_error(["a", "b"], [1, True])                                   # a bool id
    assert_same_error(["a", "b"], [1, 2 ** 63])                                # outside int64
    assert_same_error(["a", "\ud800"], [1, 2])                                 # a lone surrogate
    assert_same_error(["a", "b"], [1])                                         # lengths differ
    assert_same_error("a.b", [1])                                              # a single str
    # invalid UTF-8 in an Arrow string column's bytes
    data = b"a.b" + b"\xff\xfe"
    col = pa.Array.from_buffers(pa.string(), 2, [None, pa.py_buffer(np.array([0, 3, 5], np.int32).tobytes()),
                                                 pa.py_buffer(data)])
    assert issubclass(assert_same_error(col, [1, 2])[0], ValueError)
    # offsets past the data, and offsets going backwards: changed after
    # pyarrow validated them (tests/test_arrow_reader.py's way)
    for offs in ([0, 3, 99], [0, 3, 1]):
        o = np.zeros(3, np.int32)
        col = pa.Array.from_buffers(pa.string(), 2, [None, pa.py_buffer(o), pa.py_buffer(b"a.bcd")])
        o[:] = offs
        err = assert_same_error(col, [1, 2])
        assert issubclass(err[0], ValueError) and err[1].startswith("filters"), err


def test_arguments():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "x.img")
        with pytest.raises(ValueError, match="threads must be >= 1"):
            topicmatch.build_image(path, ["a"], [1], threads=0)
        with pytest.raises(TypeError, match="threads must be int"):
            topicmatch.build_image(path, ["a"], [1], threads="2")
        for huge in (2 ** 70, -2 ** 70):        # past the C count it becomes, as match_many's
            with pytest.raises(OverflowError):
                topicmatch.build_image(path, ["a"], [1], threads=huge)
            with pytest.raises(OverflowError):
                topicmatch.Sublist().match_many(["a"], threads=huge)
        with pytest.raises(ValueError, match="dialect must be"):
            topicmatch.build_image(path, ["a"], [1], dialect="zmq")
        assert os.listdir(d) == []
        sl = topicmatch.build_image(path, ["a.*"], [1], durable=False)
        assert sl.match("a.b").subs == [1] and sl.stats()["mapped_bytes"] == os.path.getsize(path)
        sl.close()
        assert Sublist.open(path).to_bytes() == built_bytes(["a.*"], [1])
        assert sorted(os.listdir(d)) == ["x.img"]
    with pytest.raises(OSError):
        topicmatch.build_image("/nonexistent-dir/x.img", ["a"], [1])


def test_out_of_memory_is_clean():
    """Every allocation of a small build made to fail in turn: MemoryError,
    no file, and the next build equal; at least one failure was injected."""
    fs = ["a.b", "a.*", "a.>", "c", "a.b", "x.*.y.>"] + [".".join(["d", "*"] + ["e"] * 50)]
    ids = [1, 2, 3, 4, 5, 6, 7]
    qs = [None, "q", None, "r", "q", None, None]
    want = built_bytes(fs, ids, qs)
    injected = 0
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "x.img")
        for nth in range(1, 400):
            _core._fault_inject(nth)
            try:
                sl = topicmatch.build_image(path, fs, ids, qs, threads=1)
            except MemoryError:
                sl = None
            hit = _core._fault_status()[1]
            _core._fault_inject(0)
            if sl is None:             # no file, or (opening it failed) the whole image
                injected += 1
                assert os.listdir(d) in ([], ["x.img"])
                if os.path.exists(path):
                    with open(path, "rb") as f:
                        assert f.read() == want
                    os.unlink(path)
                continue
            sl.close()
            os.unlink(path)
            if hit == 0:
                break
        got, sl = bulk(d, fs, ids, qs)
        sl.close()
    assert injected > 5
    assert got == want
