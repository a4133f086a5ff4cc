"""The tokenizer's two paths give the same answers at every length that
crosses their boundaries.

On x86-64 a subject or filter of at most 63 bytes is classified 16 bytes at
a time and cut at its separators; a longer string, or one with any byte
that needs a closer look (non-ASCII, controls, wildcard characters, empty
NATS tokens), takes the word-at-a-time loop, which also hashes tokens of 8
bytes and more differently from shorter ones.  These checks walk lengths 1
to 80 -- the 8- and 16-byte blocks and the 63-byte limit -- with token
lengths around 8:

- every odd byte at every position gives the same validity as the
  reference, and the same error (reason and byte offset) as the same
  string behind a 64-byte first token, which the long-string loop reads;
- matching an index of filters cut from those strings agrees with the
  reference (a token hashed differently by the two paths would miss)."""
import random

import pytest
from examples import examples

import topicmatch
from topicmatch import InvalidSubjectError, Sublist
from topicmatch import _reference as R

SEP = {"nats": ".", "mqtt": "/", "amqp": "."}
ONE = {"nats": "*", "mqtt": "+", "amqp": "*"}
REST = {"nats": ">", "mqtt": "#", "amqp": "#"}
# Bytes each path must look at closely: separators (empty tokens),
# wildcard characters, NUL, whitespace and other controls, non-ASCII.
ODD = [".", "/", "*", ">", "+", "#", "\x00", " ", "\t", "\x01", "\x7f", "é", "€", "$"]
TOKEN_LENGTHS = [1, 2, 3, 6, 7, 8, 9, 12, 15, 16, 17]


def _token(rng, n):
    return "".join(rng.choice("abcxyz019_-") for _ in range(n))


def _string(rng, dialect, length):
    """A valid literal string of exactly `length` characters (all ASCII)."""
    sep, out = SEP[dialect], ""
    while len(out) < length:
        out += (sep if out else "") + _token(rng, rng.choice(TOKEN_LENGTHS))
    out = out[:length]
    if dialect == "nats":       # no empty token at the cut end
        out = out.rstrip(sep)
        out += "q" * (length - len(out))
    return out


def _error(fn, s):
    try:
        fn(s)
    except InvalidSubjectError as e:
        return e.reason, e.position
    return None


@pytest.mark.parametrize("dialect", ["nats", "mqtt", "amqp"])
def test_odd_bytes_at_every_position(dialect):
    rng = random.Random(7)
    prefix = "p" * 64 + SEP[dialect]     # the long-string loop, same tokens after it
    shift = len(prefix)
    sl_short, sl_long = Sublist(dialect), Sublist(dialect)
    checked = 0
    for length in range(1, 81):
        base = _string(rng, dialect, length)
        for pos in range(length):
            for odd in ODD:
                s = base[:pos] + odd + base[pos + 1:]
                for kind in ("subject", "filter"):
                    valid = getattr(topicmatch, f"is_valid_{kind}")
                    assert valid(s, dialect) == getattr(R, f"is_valid_{kind}")(s, dialect), (kind, s)
                    if kind == "filter" and s.startswith("$share/"):
                        continue            # a share prefix is not a token of the filter
                    long_s = prefix + s
                    if kind == "subject":
                        a, b = _error(sl_short.match, s), _error(sl_long.match, long_s)
                    else:
                        a = _error(lambda f: sl_short.reverse_match(f), s)
                        b = _error(lambda f: sl_long.reverse_match(f), long_s)
                    if a is None or b is None:
                        assert (a is None) == (b is None), (kind, s, a, b)
                    else:
                        assert (a[0], a[1]) == (b[0], b[1] - shift), (kind, s, a, b)
                    checked += 1
    assert checked == 80 * 81 // 2 * len(ODD) * 2


@pytest.mark.parametrize("dialect", ["nats", "mqtt", "amqp"])
def test_matching_across_lengths(dialect):
    rng = random.Random(11)
    sep = SEP[dialect]
    # 40 subjects of each length (5 in the repeat runs: the sanitizers'
    # pass is there for the engine's reads, and the pure-Python reference,
    # which checks each subject against every filter, is most of the time)
    subjects = [_string(rng, dialect, length) for length in range(1, 81) for _ in range(examples(40))]
    engine, ref = Sublist(dialect), R.ReferenceSublist(dialect)
    for i, s in enumerate(subjects[::3]):
        toks = s.split(sep)
        roll = rng.random()
        if roll < 0.4:
            f = s                                           # literal
        elif roll < 0.8:                                    # one-level wildcards
            f = sep.join(ONE[dialect] if rng.random() < 0.3 else t for t in toks)
        else:                                               # a rest wildcard
            f = sep.join(toks[:rng.randrange(len(toks))] + [REST[dialect]])
        engine.insert(f, i)
        ref.insert(f, i)
    for s in subjects:
        got, want = engine.match(s), ref.match(s)
        assert sorted(got.subs) == sorted(want.subs), s
