"""The full check's one pass over a table entry's filter
(csrc/serial/fs_entry_key.c): verify=True proves most entries' filters
well formed and keyed without the tokenizer, from what their table says
their tokens must be, and hands every other filter to the tokenizer, which
names the fault.

Each case changes bytes of one stored filter (same length, the checksum
made to fit) and says what each dialect's verdict must be: where the new
bytes are not a valid filter of the entry's table, the check that refuses
them ("invalid filter in a table", "wildcard filter in the literal table",
"filter in the wrong shape's table"); where they are (a byte one dialect
allows and another refuses, UTF-8 the pass leaves to the tokenizer), the
key check after it ("entry's key does not match its filter": the key is
still the old filter's).  A pass that let a bad byte through would give
the key's message instead of the filter's, and one that refused a good
filter for good would give the filter's: each case fails one way.  Every
image is opened in one thread and on threads (tests/image_helpers.py's
verdict), which must agree."""
import pytest

import topicmatch
import image_codec as C
from image_helpers import verdict

DIALECTS = ("nats", "mqtt", "amqp")
SEP = {"nats": ".", "mqtt": "/", "amqp": "."}
ONE = {"nats": "*", "mqtt": "+", "amqp": "*"}
REST = {"nats": ">", "mqtt": "#", "amqp": "#"}

INVALID = "invalid filter in a table"
KEY = "entry's key does not match its filter"
WILD = "wildcard filter in the literal table"
SHAPE = "filter in the wrong shape's table"


def spell(d, template):
    """A filter written with s, o, r for the dialect's separator and
    wildcards."""
    return template.format(s=SEP[d], o=ONE[d], r=REST[d])


# Filters the pass keys itself (short ASCII: literal, with tokens of 8 and
# more bytes, empty ones where the dialect has them, a shape's) and ones it
# leaves to the tokenizer (UTF-8, a NATS control byte, longer than a mask).
VALID = ["orders{s}eu{s}created", "organisations{s}europe{s}x", "ab{s}c", "a{s}bc", "ab{s}{o}",
         "xy{s}{o}{s}zw{s}{r}", "{r}", "{o}{s}b", "caf\u00e9{s}x", "p{s}" + "long" * 20, "t" * 63, "u" * 64]
EXTRA = {"nats": ["a\x01b{s}c"],
         "mqtt": ["a{s}{s}b", "{s}lead", "trail{s}", "$SYS{s}x", "{s}{o}"],
         "amqp": ["", "a{s}{s}b", "{s}", "nul\x00{s}x", "a{s}{r}{s}b"]}


def filters(d):
    return [spell(d, t) for t in VALID + EXTRA[d]]


def image(d):
    sl = topicmatch.Sublist(d)
    for i, f in enumerate(filters(d)):
        sl.insert(f, i)
    return sl.to_bytes()


def forge(d, template, at, new):
    """The image with the stored filter spelled by template changed at byte
    at to the bytes new (str: spelled too)."""
    img = C.Image(image(d))
    n = img.entry(spell(d, template))
    new = spell(d, new).encode() if isinstance(new, str) else new
    img.b[n.off + 32 + at:n.off + 32 + at + len(new)] = new
    return img.seal()


def expect(nats, mqtt=None, amqp=None):
    return {"nats": nats, "mqtt": mqtt or nats, "amqp": amqp or mqtt or nats}


LIT = "orders{s}eu{s}created"      # orders 0-5, separator 6, e 7, u 8, separator 9
CASES = [
    # the literal table: bytes
    ("a byte not UTF-8", LIT, 7, b"\xff", expect(INVALID)),
    ("UTF-8 (the tokenizer's to check)", LIT, 7, "\u00e9", expect(KEY)),
    ("a NUL byte", LIT, 7, b"\0", expect(INVALID, INVALID, KEY)),
    ("a space", LIT, 7, b" ", expect(INVALID, KEY)),
    ("a control byte", LIT, 7, b"\x01", expect(KEY)),
    ("a one-level wildcard character inside a token", LIT, 8, "{o}", expect(KEY, INVALID, KEY)),
    ("a rest wildcard character inside a token", LIT, 8, "{r}", expect(KEY, INVALID, KEY)),
    # the literal table: tokens
    ("an empty token", LIT, 7, "{s}", expect(INVALID, KEY)),
    ("an empty first token", LIT, 0, "{s}", expect(INVALID, KEY)),
    ("an empty last token", LIT, 16, "{s}", expect(INVALID, KEY)),
    ("a one-level wildcard", "ab{s}c", 3, "{o}", expect(WILD)),
    ("a rest wildcard, last", "ab{s}c", 3, "{r}", expect(WILD)),
    ("a rest wildcard, first", "a{s}bc", 0, "{r}", expect(INVALID, INVALID, WILD)),
    ("a long token's byte", "organisations{s}europe{s}x", 11, b"\xff", expect(INVALID)),
    ("a long token's byte changed", "organisations{s}europe{s}x", 11, b"N", expect(KEY)),
    # a shape's table
    ("a shape's wildcard made a literal", "ab{s}{o}", 3, "z", expect(SHAPE)),
    ("a shape's literal made a wildcard", "{o}{s}b", 2, "{o}", expect(SHAPE)),
    ("a byte not UTF-8 in a shape's literal", "ab{s}{o}", 0, b"\xff", expect(INVALID)),
    ("a wildcard character inside a shape's literal", "ab{s}{o}", 1, "{o}", expect(KEY, INVALID, KEY)),
    ("an empty token in a shape's entry", "ab{s}{o}", 1, "{s}", expect(INVALID, SHAPE)),
    ("a shape's rest wildcard moved before the end", "xy{s}{o}{s}zw{s}{r}", 5, "{r}{s}zw",
     expect(INVALID, INVALID, SHAPE)),
    ("a shape's one-level wildcard made a rest", "xy{s}{o}{s}zw{s}{r}", 3, "{r}", expect(INVALID, INVALID, SHAPE)),
    ("a shape's rest wildcard made a one-level", "xy{s}{o}{s}zw{s}{r}", 8, "{o}", expect(SHAPE)),
    ("a shape's rest wildcard made a literal", "xy{s}{o}{s}zw{s}{r}", 8, "z", expect(SHAPE)),
    ("a lone rest wildcard made a literal", "{r}", 0, "z", expect(SHAPE)),
]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_stored_filter_opens(dialect):
    data = image(dialect)
    assert verdict(data, False) == verdict(data, True) == "opened"
    sl = topicmatch.Sublist.from_bytes(data, verify=True)
    assert len(sl) == len(filters(dialect))
    for i, f in enumerate(filters(dialect)):
        if ONE[dialect] not in f.split(SEP[dialect]) and REST[dialect] not in f.split(SEP[dialect]):
            assert i in list(sl.match(f).subs), f


@pytest.mark.parametrize("name,template,at,new,want", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_changed_filter_is_refused_for_what_it_breaks(dialect, name, template, at, new, want):
    data = forge(dialect, template, at, new)
    one, threads = verdict(data, False), verdict(data, True)
    assert one == threads
    assert one.startswith(f"corrupt topicmatch index: {want[dialect]} at byte "), one


def second_entry(d, template, first):
    """The image with a copy of the entry of the filter spelled by template
    (a second node of the same filter, key and id) in the first empty slot
    its lookup reaches after the entry; first: the copy in the entry's
    slot and the entry in that one."""
    img = C.Image(image(d))
    n = img.entry(spell(d, template))
    size = 32 + C.tok_alloc(n.toklen)
    copy = img.append(size)
    img.b[copy:copy + size] = img.b[n.off:n.off + size]
    L = img.table_of(n)
    s = img.slot_of(n)
    i = (s - L.slots) // 16
    while img.u("<Q", L.slots + 16 * i + 8):
        i = (i + 1) % L.cap
    t = L.slots + 16 * i
    img.b[t:t + 16] = img.b[s:s + 16]
    img.put64((s if first else t) + 8, copy)
    return img.seal()


@pytest.mark.parametrize("template", ["orders{s}eu{s}created", "ab{s}{o}"])
@pytest.mark.parametrize("first", [False, True], ids=["after", "before"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_second_entry_of_one_filter_is_not_where_its_key_leads(dialect, template, first):
    """The lookup an entry must pass stops at the first slot holding its
    filter, not at its own: the later of two nodes of one filter is
    refused, whichever of them comes first."""
    data = second_entry(dialect, template, first)
    one, threads = verdict(data, False), verdict(data, True)
    assert one == threads
    assert one.startswith("corrupt topicmatch index: entry not where its key leads at byte "), one
