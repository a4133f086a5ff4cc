"""Every error, as a table: wrong types, invalid subjects and filters, ids out of
range, absent subscriptions, and hostile sizes.  A failed call must leave the
index unchanged.  The nastiest inputs run in a subprocess, so a crash fails
one test instead of killing pytest.

The same checks run against the pure-Python reference (which raises plain
ValueError where the engine raises InvalidSubjectError)."""
import re

import pytest

from isolated import run_isolated

import topicmatch
from topicmatch import InvalidSubjectError, Sublist
from topicmatch import _reference as R


IMPLS = {
    # name: (Sublist factory, module with subject_matches/is_valid_*, invalid-input error)
    "engine": (Sublist, topicmatch, InvalidSubjectError),
    "reference": (R.ReferenceSublist, R, ValueError),
}


def test_invalid_subject_error_is_value_error():
    assert issubclass(InvalidSubjectError, ValueError)
    assert issubclass(InvalidSubjectError, topicmatch.TopicmatchError) if hasattr(topicmatch, "TopicmatchError") else True


# --- wrong types ----------------------------------------------------------------

NOT_STR = [b"a", None, 1, ["a"], bytearray(b"a")]
NOT_ID = ["1", 1.5, None, b"1", [1]]
NOT_QUEUE = [b"q", 1, ["q"]]


def _type_rows():
    rows = []
    for x in NOT_STR:
        rows += [("insert", (x, 1), {}), ("remove", (x, 1), {}), ("discard", (x, 1), {}),
                 ("match", (x,), {}), ("has_interest", (x,), {}), ("num_interest", (x,), {}),
                 ("reverse_match", (x,), {}), ("insert_many", ([x], [1]), {}),
                 ("remove_many", ([x], [1]), {}),
                 ("subject_matches", (x, "a"), {}), ("subject_matches", ("a", x), {}),
                 ("is_valid_subject", (x,), {}), ("is_valid_filter", (x,), {})]
    for x in NOT_ID:
        rows += [("insert", ("a", x), {}), ("remove", ("a", x), {}), ("discard", ("a", x), {}),
                 ("insert_many", (["a"], [x]), {}), ("remove_many", (["a"], [x]), {})]
    for x in NOT_QUEUE:
        rows += [("insert", ("a", 1), {"queue": x}), ("remove", ("a", 1), {"queue": x}),
                 ("discard", ("a", 1), {"queue": x}), ("insert_many", (["a"], [1], [x]), {}),
                 ("remove_many", (["a"], [1], [x]), {})]
    return rows


TYPE_ROWS = _type_rows()


def _call(impl, dialect, method, args, kwargs):
    make, mod, _ = IMPLS[impl]
    if method in ("subject_matches", "is_valid_subject", "is_valid_filter"):
        return getattr(mod, method)(*args, dialect=dialect, **kwargs)
    sl = make(dialect)
    sl.insert("a", 1)
    return getattr(sl, method)(*args, **kwargs)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dialect", ["nats", "mqtt"])
@pytest.mark.parametrize("method,args,kwargs", TYPE_ROWS,
                         ids=[f"{m}{a!r}{k or ''}" for m, a, k in TYPE_ROWS])
def test_wrong_type(impl, dialect, method, args, kwargs):
    with pytest.raises(TypeError):
        _call(impl, dialect, method, args, kwargs)


# --- invalid subjects and filters -------------------------------------------------

EMPTY = r"empty"
WS = r"whitespace|space|blank"
NUL = r"\bnul\b|null|\\x00|zero byte|u\+0000"
WILD = r"wildcard"
NOT_LAST = r"last|end|final|wildcard"
PARTIAL = r"wildcard|level|whole"
LONG = r"long|length|65535|65536|bytes|size|limit"
SURROGATE = r"surrogate|utf-?8|encod|unicode"
SHARE = r"share|group|filter|empty"

# (dialect, "subject" | "filter", input, pattern the message must match)
INVALID_ROWS = [
    ("nats", "subject", "", EMPTY),
    ("nats", "subject", ".", EMPTY),
    ("nats", "subject", "a.", EMPTY),
    ("nats", "subject", ".a", EMPTY),
    ("nats", "subject", "a..b", EMPTY),
    ("nats", "subject", "a b", WS),
    ("nats", "subject", "a\tb", WS),
    ("nats", "subject", "a\nb", WS),
    ("nats", "subject", "a\rb", WS),
    ("nats", "subject", "a\fb", WS),
    ("nats", "subject", "*", WILD),
    ("nats", "subject", ">", WILD),
    ("nats", "subject", "a.*", WILD),
    ("nats", "subject", "a.>", WILD),
    ("nats", "subject", "*.a", WILD),
    ("nats", "filter", "", EMPTY),
    ("nats", "filter", "a..b", EMPTY),
    ("nats", "filter", ".a", EMPTY),
    ("nats", "filter", "a.", EMPTY),
    ("nats", "filter", "a.>.", EMPTY + "|" + NOT_LAST),   # two problems: either may be named
    ("nats", "filter", " ", WS),
    ("nats", "filter", "a.\t", WS),
    ("nats", "filter", "a.>.b", NOT_LAST),
    ("nats", "filter", ">.a", NOT_LAST),
    ("nats", "filter", ">.>", NOT_LAST),
    ("mqtt", "subject", "", EMPTY),
    ("mqtt", "subject", "+", WILD),
    ("mqtt", "subject", "#", WILD),
    ("mqtt", "subject", "a/+", WILD),
    ("mqtt", "subject", "a/#", WILD),
    ("mqtt", "subject", "a+", WILD),
    ("mqtt", "subject", "a#b/c", WILD),
    ("mqtt", "filter", "", EMPTY),
    ("mqtt", "filter", "a+", PARTIAL),
    ("mqtt", "filter", "+a", PARTIAL),
    ("mqtt", "filter", "a#", PARTIAL),
    ("mqtt", "filter", "a+/b", PARTIAL),
    ("mqtt", "filter", "a/b#", PARTIAL),
    ("mqtt", "filter", "#/a", NOT_LAST),
    ("mqtt", "filter", "a/#/b", NOT_LAST),
    ("mqtt", "filter", "#/#", NOT_LAST),
    ("mqtt", "filter", "$share/G", SHARE),
    ("mqtt", "filter", "$share/G/", SHARE),
    ("mqtt", "filter", "$share//a", SHARE),
    ("mqtt", "filter", "$share/G+/a", SHARE),
    ("mqtt", "filter", "$share/G#/a", SHARE),
    ("mqtt", "filter", "$share/G/a+", PARTIAL),
    ("mqtt", "filter", "$share/G/#/a", NOT_LAST),
]

# Hostile inputs: (dialect, kind, Python expression for the input, pattern).
# Checked in a subprocess (test_nasty_inputs_in_subprocess).
NASTY_ROWS = []
for _d, _sep in (("nats", "."), ("mqtt", "/")):
    for _kind in ("subject", "filter"):
        NASTY_ROWS += [
            (_d, _kind, r'"a\x00b"', NUL),
            (_d, _kind, r'"\x00"', NUL),
            (_d, _kind, r'"a%s\ud800"' % _sep, SURROGATE),
            (_d, _kind, r'"\udfff"', SURROGATE),
            (_d, _kind, '"a" * 65536', LONG),
            (_d, _kind, r'"\u00e9" * 32768', LONG),           # 32,768 chars, 65,536 bytes
            (_d, _kind, '"%s".join(["a"] * 32768) + "%sa"' % (_sep, _sep), LONG),
            (_d, _kind, '"a" * (1 << 20)', LONG),
            (_d, _kind, '"%s".join(["a"] * (1 << 19))' % _sep, LONG),
        ]
NASTY_ROWS += [
    ("nats", "subject", '"a." * 32767 + "aa"', LONG),               # 65,536 bytes
    ("mqtt", "subject", '"/" * 65536', LONG),
    ("mqtt", "filter", '"+/" * 32768', LONG),
    ("mqtt", "filter", '"$share/" + "g" * 65536 + "/a"', LONG),
]


def check_invalid(impl, dialect, kind, s, pattern):
    """Every entry point taking a `kind` must reject s with a message naming it and the problem."""
    make, mod, exc = IMPLS[impl]
    sl = make(dialect)
    sl.insert("a", 1)
    if kind == "subject":
        calls = [lambda: sl.match(s), lambda: sl.has_interest(s), lambda: sl.num_interest(s),
                 lambda: mod.subject_matches("a", s, dialect)]
        assert mod.is_valid_subject(s, dialect) is False
    else:
        calls = [lambda: sl.insert(s, 2), lambda: sl.remove(s, 1), lambda: sl.discard(s, 1),
                 lambda: sl.reverse_match(s), lambda: mod.subject_matches(s, "a", dialect),
                 lambda: sl.insert_many(["b", s], [2, 2]), lambda: sl.remove_many(["a", s], [1, 1])]
        if not s.startswith("$share/"):
            calls.append(lambda: sl.insert(s, 2, queue="q"))
        assert mod.is_valid_filter(s, dialect) is False
    r = repr(s)
    shown = r if len(r) <= 200 else r[:30]
    for call in calls:
        with pytest.raises(exc) as info:
            call()
        e = info.value
        assert not isinstance(e, UnicodeError), f"raw {type(e).__name__} for {r[:60]}"
        msg = str(e)
        assert shown in msg, f"message does not show the input {r[:60]}: {msg[:300]!r}"
        assert re.search(pattern, msg, re.I), f"message does not name the problem ({pattern}): {msg[:300]!r}"
    assert len(sl) == 1 and list(sl.match("a").subs) == [1]    # unchanged


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dialect,kind,s,pattern", INVALID_ROWS,
                         ids=[f"{d}-{k}-{s!r}" for d, k, s, _ in INVALID_ROWS])
def test_invalid(impl, dialect, kind, s, pattern):
    check_invalid(impl, dialect, kind, s, pattern)


def test_error_attributes():
    with pytest.raises(InvalidSubjectError) as info:
        Sublist("nats").match("a..b")
    e = info.value
    assert e.subject == "a..b"
    assert isinstance(e.reason, str) and e.reason and e.reason in str(e)


@pytest.mark.parametrize("impl", IMPLS)
def test_nasty_inputs_in_subprocess(impl):
    out = run_isolated(f"""
        import test_bad_input as T
        for d, kind, expr, pattern in T.NASTY_ROWS:
            print(d, kind, expr, flush=True)
            T.check_invalid({impl!r}, d, kind, eval(expr), pattern)
        print("ok")
    """)
    assert out.endswith("ok\n")


# --- queue names ----------------------------------------------------------------

BAD_QUEUES = [("nats", ""), ("nats", "a b"), ("nats", "a\tb"), ("nats", "q\x00"),
              ("mqtt", ""), ("mqtt", "a/b"), ("mqtt", "a+"), ("mqtt", "a#"), ("mqtt", "q\x00")]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dialect,q", BAD_QUEUES, ids=[f"{d}-{q!r}" for d, q in BAD_QUEUES])
def test_bad_queue_name(impl, dialect, q):
    make = IMPLS[impl][0]
    sl = make(dialect)
    sl.insert("a", 1)
    for call in (lambda: sl.insert("a", 2, queue=q), lambda: sl.remove("a", 1, queue=q),
                 lambda: sl.discard("a", 1, queue=q), lambda: sl.insert_many(["b", "a"], [1, 2], [None, q])):
        with pytest.raises(ValueError):
            call()
    assert len(sl) == 1


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dialect", ["nats", "mqtt"])
def test_queue_name_length_limit(impl, dialect):
    # 65,535 UTF-8 bytes is the longest queue name, counted in bytes, not
    # characters (the reference once accepted any length: issue 9, F6).
    make = IMPLS[impl][0]
    sl = make(dialect)
    longest = ["q" * 65535, "\u00e9" * 32767 + "q", "\u20ac" * 21845]
    too_long = ["q" * 65536, "\u00e9" * 32768, "\u20ac" * 21845 + "q", "q" * 200000]
    for i, q in enumerate(longest):
        assert len(q.encode()) == 65535
        assert sl.insert("a", i, queue=q)
    for q in too_long:
        for call in (lambda: sl.insert("a", 9, queue=q), lambda: sl.discard("a", 0, queue=q),
                     lambda: sl.insert_many(["b", "a"], [1, 2], [None, q])):
            with pytest.raises(ValueError, match="queue"):
                call()
    if dialect == "mqtt":       # the same limit through "$share/GROUP/filter"
        with pytest.raises(ValueError):
            sl.insert("$share/" + "g" * 65530 + "/a", 1)
    assert len(sl) == 3
    for i, q in enumerate(longest):
        assert sl.discard("a", i, queue=q)
    assert len(sl) == 0


@pytest.mark.parametrize("impl", IMPLS)
def test_share_and_queue_together(impl):
    make, _, exc = IMPLS[impl]
    sl = make("mqtt")
    for call in (lambda: sl.insert("$share/G/a", 1, queue="G"),
                 lambda: sl.insert("$share/G/a", 1, queue="H"),
                 lambda: sl.remove("$share/G/a", 1, queue="G"),
                 lambda: sl.discard("$share/G/a", 1, queue="G"),
                 lambda: sl.insert_many(["a", "$share/G/a"], [1, 1], [None, "G"])):
        with pytest.raises(exc) as info:
            call()
        assert re.search(r"share|queue", str(info.value), re.I)
    assert len(sl) == 0


# --- sub_id range ---------------------------------------------------------------

@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("bad", [2 ** 63, -(2 ** 63) - 1, 2 ** 100, -(2 ** 100)])
def test_sub_id_overflow(impl, bad):
    make = IMPLS[impl][0]
    sl = make("nats")
    sl.insert("a", 1)
    for call in (lambda: sl.insert("a", bad), lambda: sl.remove("a", bad), lambda: sl.discard("a", bad),
                 lambda: sl.insert("a", bad, queue="q"), lambda: sl.insert_many(["b", "a"], [1, bad]),
                 lambda: sl.remove_many(["a", "a"], [1, bad])):
        with pytest.raises(OverflowError):
            call()
    assert len(sl) == 1 and list(sl.match("a").subs) == [1]


# --- absent subscriptions -------------------------------------------------------

@pytest.mark.parametrize("impl", IMPLS)
def test_remove_absent(impl):
    make = IMPLS[impl][0]
    sl = make("nats")
    sl.insert("a.*", 1)
    sl.insert("a.*", 2, queue="q")
    for args, kw in [(("a.b", 1), {}), (("a.*", 3), {}), (("a.*", 1), {"queue": "q"}),
                     (("a.*", 2), {}), (("a.*", 2), {"queue": "r"}), (("a.>", 1), {})]:
        with pytest.raises(KeyError):
            sl.remove(*args, **kw)
        assert sl.discard(*args, **kw) is False
    assert sl.remove_many(["a.b", "a.*"], [1, 3]) == 0
    assert len(sl) == 2
    sl.remove("a.*", 1)
    with pytest.raises(KeyError):
        sl.remove("a.*", 1)
    sl = make("mqtt")
    sl.insert("a", 1, queue="H")
    with pytest.raises(KeyError):
        sl.remove("$share/G/a", 1)
    with pytest.raises(KeyError):
        sl.remove("a", 1)
    sl.remove("$share/H/a", 1)
    assert len(sl) == 0


# --- a failed call leaves the index unchanged ------------------------------------

def _snapshot(sl, dialect):
    subjects = ["a.b", "a", "x.y.z"] if dialect == "nats" else ["a/b", "a", "$x/y", "/"]
    norm = lambda r: (sorted(r.subs), sorted(((q, f, sorted(m)) for q, f, m in r.groups), key=repr))
    return (len(sl), [norm(sl.match(s)) for s in subjects],
            sorted((tuple(t) for t in sl.reverse_match(">" if dialect == "nats" else "#")), key=repr))


def _failing_calls(sl, dialect):
    bad = "a..b" if dialect == "nats" else "a/#/b"
    return [
        lambda: sl.insert(bad, 9),
        lambda: sl.insert("b", "9"),
        lambda: sl.insert("b", 2 ** 63),
        lambda: sl.insert("b", 9, queue=""),
        lambda: sl.insert(b"b", 9),
        lambda: sl.remove(bad, 1),
        lambda: sl.remove("a", 12345),
        lambda: sl.insert_many(["b", "c", bad], [9, 9, 9]),
        lambda: sl.insert_many(["b", bad, "c"], [9, 9, 9]),
        lambda: sl.insert_many(["b", "c"], [9, 2 ** 63]),
        lambda: sl.insert_many(["b", "c"], [9, "9"]),
        lambda: sl.insert_many(["b", "c"], [9, 9], [None, ""]),
        lambda: sl.insert_many(["b", 3], [9, 9]),
        lambda: sl.insert_many(["b", "c"], [9]),
        lambda: sl.remove_many(["a", bad], [1, 1]),
        lambda: sl.remove_many(["a", "a"], [1, 2 ** 63]),
        lambda: sl.remove_many(["a", "a"], [1, None]),
        lambda: sl.remove_many(["a", "a"], [1]),
    ]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dialect", ["nats", "mqtt"])
@pytest.mark.parametrize("cache_size", [0, 16])
def test_failed_call_leaves_index_unchanged(impl, dialect, cache_size):
    make = IMPLS[impl][0]
    sl = make(dialect) if impl == "reference" else make(dialect, cache_size=cache_size)
    wild = "a.*" if dialect == "nats" else "a/+"
    for i, (f, q) in enumerate([("a", None), (wild, None), (wild, "q"), ("a", "q")]):
        sl.insert(f, i, queue=q)
    sl.insert("a", 1)                                       # id 1 under "a" too
    before = _snapshot(sl, dialect)
    gen = getattr(sl, "generation", None)
    for k, call in enumerate(_failing_calls(sl, dialect)):
        with pytest.raises((ValueError, TypeError, OverflowError, KeyError)):
            call()
        assert _snapshot(sl, dialect) == before, f"call #{k} changed the index"
        assert getattr(sl, "generation", None) == gen, f"call #{k} changed the generation"


# --- sizes that are valid -----------------------------------------------------------

@pytest.mark.parametrize("impl", IMPLS)
def test_longest_valid_and_deepest(impl):
    """65,535 bytes is valid; 32,768-token filters insert, match, reverse-match and
    free without recursing on the C stack."""
    out = run_isolated(f"""
        import test_bad_input as T
        make, mod, exc = T.IMPLS[{impl!r}]
        def norm(r):
            return sorted(r.subs), sorted(((q, f, sorted(m)) for q, f, m in r.groups), key=repr)
        for d, sep, one, rest in (("nats", ".", "*", ">"), ("mqtt", "/", "+", "#")):
            lit = sep.join(["a"] * 32768)                   # 65,535 bytes, 32,768 tokens
            assert len(lit.encode()) == 65535
            ones = sep.join([one] * 32768)
            tail = sep.join([one] * 32767 + [rest])
            wide = "\\u00e9" * 32767 + "a"                  # 65,535 bytes in 2-byte chars
            for s in (lit, wide):
                assert mod.is_valid_subject(s, d) and mod.is_valid_filter(s, d), (d, s[:10])
            for f in (ones, tail):
                assert mod.is_valid_filter(f, d) and not mod.is_valid_subject(f, d), (d, f[:10])
            assert mod.subject_matches(ones, lit, d) and mod.subject_matches(tail, lit, d)
            assert not mod.subject_matches(ones, "a", d)
            sl = make(d)
            assert sl.insert(lit, 1) and sl.insert(ones, 2) and sl.insert(tail, 3)
            assert sl.insert(tail, 4, queue="g") and sl.insert(wide, 5)
            assert norm(sl.match(lit)) == ([1, 2, 3], [("g", None if d == "nats" else tail, [4])]), d
            assert norm(sl.match(wide)) == ([5], []), d
            assert tuple(sl.num_interest(lit)) == (3, 1) and sl.has_interest(lit)
            short = sep.join(["a"] * 32767)
            want_short = ([3], [("g", None if d == "nats" else tail, [4])]) if d == "mqtt" else ([], [])
            assert norm(sl.match(short)) == want_short, d   # "#" takes zero levels, ">" needs one
            got = sorted((tuple(t) for t in sl.reverse_match(ones)), key=repr)
            assert got == sorted([(lit, 1, None), (ones, 2, None), (tail, 3, None), (tail, 4, "g")], key=repr), d
            got = sorted((tuple(t) for t in sl.reverse_match(lit)), key=repr)
            assert got == sorted([(lit, 1, None), (ones, 2, None), (tail, 3, None), (tail, 4, "g")], key=repr), d
            if d == "mqtt":
                empties = "/" * 65535                       # 65,536 empty levels
                assert sl.insert(empties, 6)
                assert norm(sl.match(empties)) == ([3, 6], [("g", tail, [4])])
                assert sl.insert("#", 7) and sl.insert("+/" * 32767 + "+", 8)
                assert norm(sl.match(lit))[0] == [1, 2, 3, 7, 8]
            sl.remove(ones, 2)
            assert norm(sl.match(lit))[0] == ([1, 3] if d == "nats" else [1, 3, 7, 8])
            # many deep chains, then let the destructor free them
            sl2 = make(d)
            for i in range(8):
                sl2.insert(sep.join(["a"] * (32768 - i)), i)
                sl2.insert(sep.join([one] * (32768 - i)), 100 + i)
            assert norm(sl2.match(lit))[0] == [0, 100]
            del sl, sl2
            print(d, "ok", flush=True)
        print("done")
    """)
    assert out.endswith("done\n")


# --- constructor and dialect arguments ------------------------------------------------

def test_bad_constructor_arguments():
    with pytest.raises(ValueError):
        Sublist(dialect="bogus")
    with pytest.raises(ValueError):
        Sublist(dialect="NATS ")
    with pytest.raises((TypeError, ValueError)):
        Sublist(dialect=None)
    with pytest.raises(ValueError):
        Sublist(cache_size=-1)
    with pytest.raises(TypeError):
        Sublist(cache_size="1")
    with pytest.raises(TypeError):
        Sublist("nats", 16)                                   # options are keyword-only
    with pytest.raises(ValueError):
        R.ReferenceSublist(dialect="bogus")


@pytest.mark.parametrize("impl", IMPLS)
def test_bad_dialect_in_functions(impl):
    mod = IMPLS[impl][1]
    with pytest.raises(ValueError):
        mod.subject_matches("a", "a", "bogus")
    with pytest.raises(ValueError):
        mod.is_valid_subject("a", "bogus")
    with pytest.raises(ValueError):
        mod.is_valid_filter("a", "bogus")


# --- argument types, alike across the API (issue 34) -------------------------------
#
# A wrong type is a TypeError naming the argument, and the row for a column
# ("filters[1] must be str, not bytes"); bytes are refused everywhere (str
# is text; pyarrow's binary columns likewise); a bool is not an id; a single
# str where a sequence is expected is refused, not taken character by
# character.  Only None and invalid strings are data (null / invalid rows).

pa = pytest.importorskip("pyarrow")
np = pytest.importorskip("numpy")


def _engine():
    sl = Sublist("nats")
    sl.insert("x.y", 9)
    return sl


# (call on an index holding x.y -> 9, exact message)
ARGUMENT_ROWS = [
    # a single str (or bytes) where a sequence is expected
    (lambda sl: sl.insert_many("abc", [1, 2, 3]), "filters must be a sequence of str, not a single str"),
    (lambda sl: sl.remove_many("abc", [1, 2, 3]), "filters must be a sequence of str, not a single str"),
    (lambda sl: sl.insert_many(b"abc", [1, 2, 3]), "filters must be a sequence of str, not a single bytes"),
    (lambda sl: sl.insert_many(["a"], "1"), "sub_ids must be a sequence of int, not a single str"),
    (lambda sl: sl.insert_many(["a"], [1], "q"), "queues must be a sequence of str or None, not a single str"),
    (lambda sl: sl.insert_many(pa.array(["a"]), "1"), "sub_ids must be a sequence of int, not a single str"),
    (lambda sl: sl.insert_many(pa.array(["a"]), [1], "q"),
     "queues must be a sequence of str or None, not a single str"),
    (lambda sl: sl.insert_many(5, [1]), "filters must be a sequence of str, not int"),
    (lambda sl: sl.insert_many(["a"], 1), "sub_ids must be a sequence of int, not int"),
    (lambda sl: sl.match_many("a.b"), "subjects must be a sequence of str, not a single str"),
    (lambda sl: sl.match_many(["a.b"], keys="k"), "keys must be a sequence of str, not a single str"),
    (lambda sl: topicmatch._core.route_keys("a.b"), "values must be a sequence of str, not a single str"),
    # a bool is not an id
    (lambda sl: sl.insert("foo", True), "sub_id must be int, not bool"),
    (lambda sl: sl.insert("foo", False, queue="q"), "sub_id must be int, not bool"),
    (lambda sl: sl.remove("x.y", True), "sub_id must be int, not bool"),
    (lambda sl: sl.discard("x.y", np.True_), "sub_id must be int, not bool"),
    (lambda sl: sl.insert_many(["a", "b"], [1, True]), "sub_ids[1] must be int, not bool"),
    (lambda sl: sl.remove_many(["x.y"], [True]), "sub_ids[0] must be int, not bool"),
    (lambda sl: sl.insert_many(["a"], np.array([True])), "sub_ids[0] must be int, not bool"),
    (lambda sl: sl.insert_many(pa.array(["a"]), np.array([True])),
     "sub_ids must be an integer array, not one of dtype bool"),
    (lambda sl: sl.insert_many(pa.array(["a"]), pa.array([True])),
     "sub_ids must be an integer Arrow array, not bool"),
    (lambda sl: sl.insert_many(pa.array(["a", "b"]), [1, True]), "sub_ids[1] must be int, not bool"),
    # a wrong type in a row names the argument and the row
    (lambda sl: sl.match_many(["a.b", 5]), "subjects[1] must be str or None, not int"),
    (lambda sl: sl.match_many(["a.b", None, b"a.b"]), "subjects[2] must be str or None, not bytes"),
    (lambda sl: sl.match_many(np.array(["a.b", 5], dtype=object)), "subjects[1] must be str or None, not int"),
    (lambda sl: sl.match_many(["a.b"] * 3, keys=["k", None, 7]), "keys[2] must be str or None, not int"),
    (lambda sl: topicmatch._core.route_keys(["a", 1.5]), "values[1] must be str or None, not float"),
    (lambda sl: sl.insert_many(["a", b"b"], [1, 2]), "filters[1] must be str, not bytes"),
    (lambda sl: sl.insert_many(["a", None], [1, 2]), "filters[1] must be str, not None"),
    (lambda sl: sl.insert_many(["a", "b"], [1, "2"]), "sub_ids[1] must be int, not str"),
    (lambda sl: sl.insert_many(["a", "b"], [1, 2], [None, b"q"]), "queues[1] must be str or None, not bytes"),
    (lambda sl: sl.remove_many(["a", "b"], [1, 2], ["q", 3]), "queues[1] must be str or None, not int"),
    (lambda sl: sl.insert_many(pa.array(["a", "b"]), [1, 2], ["q", b"q"]), "queues[1] must be str or None, not bytes"),
    (lambda sl: sl.insert_many(["a", 3], [1, 2], pa.array(["q", None])), "filters[1] must be str, not int"),
    # scalars: the argument by name, bytes refused like any non-str
    (lambda sl: sl.insert(b"a", 1), "filter must be str, not bytes"),
    (lambda sl: sl.insert("a", 1, queue=b"q"), "queue must be str or None, not bytes"),
    (lambda sl: sl.match(b"a"), "subject must be str, not bytes"),
    (lambda sl: sl.has_interest(None), "subject must be str, not None"),
    (lambda sl: sl.num_interest(1), "subject must be str, not int"),
    (lambda sl: sl.reverse_match(b"a.*"), "filter must be str, not bytes"),
    # other arguments
    (lambda sl: sl.match_many(["a"], threads="2"), "threads must be int, not str"),
    (lambda sl: sl.match_many(["a"], threads=True), "threads must be int, not bool"),
    (lambda sl: sl.match_many(["a"], queues=["q"]), "queues must be 'pick', 'all' or 'none', not list"),
    (lambda sl: topicmatch._core.route_keys(["a"], depth="1"), "depth must be int, not str"),
    (lambda sl: Sublist(cache_size=True), "cache_size must be int, not bool"),
    (lambda sl: Sublist(5), "dialect must be str ('nats', 'mqtt' or 'amqp'), not int"),
    # Arrow: binary is not text
    (lambda sl: sl.match_many(pa.array([b"a.b"], pa.binary())),
     "subjects must be an Arrow column of string, large_string, string_view or dictionary<string>, not binary"),
    (lambda sl: sl.insert_many(pa.array([b"a"], pa.large_binary()), [1]),
     "filters must be an Arrow column of string, large_string, string_view or dictionary<string>, not large_binary"),
    (lambda sl: topicmatch._core.route_keys(pa.array([b"a"]).dictionary_encode()),
     "values must be an Arrow column of string, large_string, string_view or dictionary<string>, "
     "not dictionary<values=binary, indices=int32, ordered=0>"),
]


@pytest.mark.parametrize("call,message", ARGUMENT_ROWS, ids=[m for _, m in ARGUMENT_ROWS])
def test_argument_types_name_the_argument_and_change_nothing(call, message):
    sl = _engine()
    before = sl.to_bytes()
    with pytest.raises(TypeError) as e:
        call(sl)
    assert str(e.value) == message
    assert sl.to_bytes() == before


def test_the_issue_34_repros():
    sl = Sublist("nats")
    with pytest.raises(TypeError, match="filters"):
        sl.insert_many("abc", [1, 2, 3])         # stored a, b and c
    with pytest.raises(TypeError, match="sub_id"):
        sl.insert("foo", True)                   # stored id 1
    assert len(sl) == 0
    with pytest.raises(TypeError, match=r"subjects\[1\]"):
        sl.match_many(["a.b", 5])                # an invalid row, silently
    # what stays data: None and invalid strings are rows, flagged
    b = sl.match_many(["a.b", None, "a..b", "a.\ud800"])
    assert b.invalid.tolist() == [False, True, True, True]


def test_ints_of_other_types_are_still_ids():
    sl = Sublist("nats")
    assert sl.insert("a", np.int64(3)) and sl.insert("b", np.uint8(4))
    assert sl.insert_many(["c", "d"], [np.int32(5), 6]) == 2
    assert sl.insert_many(["e"], np.array([7], np.uint16)) == 1
    assert sorted(sl.match(s).subs[0] for s in "abcde") == [3, 4, 5, 6, 7]


@pytest.mark.parametrize("kind, bad, reason", [
    ("list", "b..c", "empty token"), ("list", "\udc80", "not valid UTF-8"), ("arrow", "b..c", "empty token")])
def test_a_batch_names_its_bad_row_as_an_attribute(kind, bad, reason):
    """insert_many and remove_many give the bad item's index as
    InvalidSubjectError.row (what the Spark layer reports), not only in the
    message; the subject, reason and position survive the batch's wrapping.
    (An Arrow column cannot hold a lone surrogate, and invalid UTF-8 in one
    is refused whole when it is read, naming the row in its message.)"""
    filters = ["a", "a.b", bad, "c"]
    if kind == "arrow":
        filters = pytest.importorskip("pyarrow").array(filters)
    sl = Sublist()
    for call in (sl.insert_many, sl.remove_many):
        with pytest.raises(InvalidSubjectError) as ei:
            call(filters, [1, 2, 3, 4])
        e = ei.value
        assert e.row == 2 and str(e).startswith("item 2: ") and e.subject == bad and e.reason == reason
    assert len(sl) == 0
    with pytest.raises(InvalidSubjectError) as ei:
        sl.match("a..b")
    assert ei.value.row is None


def test_the_image_format_version_is_the_cores():
    import struct
    from topicmatch._core import IMAGE_FORMAT_VERSION
    assert struct.unpack_from("<H", Sublist().to_bytes(), 8)[0] == IMAGE_FORMAT_VERSION



class _ClearsWhenRead:
    """An id whose __index__ empties a list (the one it sits in)."""

    def __init__(self, value, victim):
        self.value, self.victim = value, victim

    def __index__(self):
        self.victim.clear()
        return self.value


def _stored(sl, filters):
    return [(f, list(r.subs), [tuple(g) for g in r.groups]) for f in filters for r in [sl.match(f)]]


@pytest.mark.parametrize("queues", [None, "list", "generator"])
def test_insert_many_ids_changed_while_read(queues):
    # insert_many reads a list of sub_ids in place until a row needs Python
    # code (an __index__; a queues generator runs before any id is read):
    # what it inserts is the list as it was given, and a list emptied
    # meanwhile is never read past its end.
    filters = ["a.1", "a.2", "a.3", "a.4", "a.5"]
    qlist = [None, "q", None, "q", None]
    ids = [1, 2, 0, 4, 5]
    ids[2] = _ClearsWhenRead(3, ids)
    if queues == "generator":
        ids = [1, 2, 3, 4, 5]
        qs = (ids.clear() or q for q in qlist)
    else:
        qs = qlist if queues == "list" else None
    sl = Sublist()
    assert sl.insert_many(filters, ids, qs) == 5
    want = Sublist()
    for f, i, q in zip(filters, [1, 2, 3, 4, 5], qlist if queues else [None] * 5):
        want.insert(f, i, queue=q)
    assert _stored(sl, filters) == _stored(want, filters)
