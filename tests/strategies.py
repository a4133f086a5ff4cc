"""Hypothesis strategies and checks shared by the property, batch, cache and
thread tests.

Token alphabets are tiny so that random filters and subjects match each
other; they include '$' tokens, MQTT empty levels, a non-ASCII token, queue
groups and MQTT '$share/G/f'; AMQP adds the empty key, empty words, '#'
anywhere (often several) and routing keys holding '*' and '#' as words."""
from collections import Counter

from hypothesis import assume, strategies as st

from topicmatch import _reference as R

DIALECTS = ["nats", "mqtt"]
ALL_DIALECTS = DIALECTS + ["amqp"]    # the tests that know AMQP's rules use this
SEP = {"nats": ".", "mqtt": "/", "amqp": "."}
ONE = {"nats": "*", "mqtt": "+", "amqp": "*"}
REST = {"nats": ">", "mqtt": "#", "amqp": "#"}
LITERALS = {"nats": ["a", "b", "$x", "\u00e9"], "mqtt": ["a", "b", "$x", "", "\u00e9"],
            "amqp": ["a", "b", "", "\u00e9"]}
# words only a routing key has: '*' and '#' are plain words there
SUBJECT_ONLY = {"nats": [], "mqtt": [], "amqp": ["*", "#", "a*"]}
QUEUES = [None, None, "q", "r"]
SUB_IDS = [0, 1, 2, 3, -1, 2 ** 63 - 1, -(2 ** 63)]

# characters that make strings valid, invalid, or interesting
FUZZ_CHARS = {
    "nats": ["a", "b", ".", ".", "*", ">", "$", " ", "\t", "\x00", "\u00e9", "/", "+", "#", "\ud800"],
    "mqtt": ["a", "b", "/", "/", "+", "#", "$", " ", "\x00", "\u00e9", ".", "*", ">", "\ud800"],
    "amqp": ["a", "b", ".", ".", "*", "#", "$", " ", "\x00", "\u00e9", "/", "+", ">", "\ud800"],
}


def subjects(dialect):
    """Valid subjects (MQTT: empty levels included; AMQP: the empty key too)."""
    if dialect == "amqp":
        return st.lists(st.sampled_from(LITERALS[dialect] + SUBJECT_ONLY[dialect]),
                        max_size=5).map(".".join)
    return (st.lists(st.sampled_from(LITERALS[dialect]), min_size=1, max_size=4)
            .map(SEP[dialect].join).filter(bool))


@st.composite
def filters(draw, dialect):
    if dialect == "amqp":       # '#' anywhere, any number of times; "" is a binding key
        toks = draw(st.lists(st.sampled_from(LITERALS[dialect] + ["*", "*", "#", "#"]), max_size=5))
        return ".".join(toks)
    toks = draw(st.lists(st.sampled_from(LITERALS[dialect] + [ONE[dialect]] * 2), max_size=3))
    if not toks or draw(st.integers(0, 2)) == 0:
        toks.append(REST[dialect])
    f = SEP[dialect].join(toks)
    assume(f != "")
    return f


@st.composite
def subscriptions(draw, dialect, ids=st.sampled_from(SUB_IDS)):
    """(filter argument, sub_id, queue argument) as passed to insert()."""
    f = draw(filters(dialect))
    q = draw(st.sampled_from(QUEUES))
    i = draw(ids)
    if dialect == "mqtt" and q is not None and draw(st.booleans()):
        return f"$share/{q}/{f}", i, None
    return f, i, q


def fuzz(dialect):
    """Short strings that are often invalid subjects (wildcards, NUL,
    whitespace, empty tokens, lone surrogates)."""
    s = st.lists(st.sampled_from(FUZZ_CHARS[dialect]), max_size=8).map("".join)
    if dialect == "mqtt":
        s = st.one_of(s, s.map(lambda t: "$share/" + t), s.map(lambda t: "$share/g/" + t))
    if dialect == "amqp":       # around the 255-byte limit
        s = st.one_of(s, st.tuples(s, st.integers(28, 130)).map(lambda p: (p[0] or "a") * p[1]))
    return s


def rows(dialect):
    """One row of a match_many batch: mostly valid subjects, some invalid
    strings and None (a row of another type is a TypeError: test_bad_input)."""
    return st.one_of(
        subjects(dialect), subjects(dialect), subjects(dialect),
        fuzz(dialect),
        st.none(),
    )


def norm(r):
    return (sorted(r.subs), sorted(((q, f, sorted(m)) for q, f, m in r.groups), key=repr))


def norm_reverse(rows):
    return sorted((tuple(t) for t in rows), key=repr)


def valid_subject(s, dialect):
    """The reference's verdict on a batch row: non-str rows are invalid."""
    return isinstance(s, str) and R.is_valid_subject(s, dialect)


def all_ids(m):
    """queues="all": plain ids plus every group member, as a multiset."""
    return Counter(m.subs) + Counter(i for _, _, members in m.groups for i in members)


def is_one_per_group(row, m):
    """queues="pick": row == m.subs + exactly one member of each group (as a
    multiset; ids may repeat across groups, so this is a bipartite match)."""
    rest = Counter(row)
    rest.subtract(Counter(m.subs))
    if any(v < 0 for v in rest.values()):
        return False
    left = list(rest.elements())
    groups = [set(members) for _, _, members in m.groups]
    if len(left) != len(groups):
        return False
    owner = {}                                   # slot in left -> group index

    def augment(g, seen):
        for k, x in enumerate(left):
            if x in groups[g] and k not in seen:
                seen.add(k)
                if k not in owner or augment(owner[k], seen):
                    owner[k] = g
                    return True
        return False

    return all(augment(g, set()) for g in range(len(groups)))


class tiny_thread_blocks:
    """with tiny_thread_blocks(block_rows): match_many with threads=N > 1
    takes the threaded path even for a batch of a few rows -- cut into
    blocks of block_rows that up to N threads (as if the machine had 4
    CPUs) claim and place in turn, a Python list's rows handed to them as
    they are converted, block_rows + 1 at a time -- instead of matching it
    on one thread, as it does below 16,384 rows per thread."""

    def __init__(self, block_rows=1):
        self.block_rows = block_rows

    def __enter__(self):
        from topicmatch import _core
        self.saved = _core._set_batch_threading(min_rows_per_thread=1, block_rows=self.block_rows, cpus=4,
                                                 feed_rows=self.block_rows + 1)
        return self

    def __exit__(self, *exc):
        from topicmatch import _core
        _core._set_batch_threading(**self.saved)
