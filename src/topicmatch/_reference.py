"""A slow, plainly correct, pure-Python matcher: the oracle the C engine is tested against.

No trie and no cleverness: a ReferenceSublist is a set of subscriptions
(filter, queue, sub_id), and every query compares token lists one
subscription at a time.  The rules are those of docs/design.md's "The dialects" section:

NATS  separator ".", "*" one whole token, ">" one or more tokens (last only);
      empty tokens, whitespace (" \\t\\n\\r\\f") and NUL are invalid; a subject
      may not contain a whole-token "*" or ">" ("a*b" and "x>" are literals).
MQTT  separator "/", "+" one whole level, "#" zero or more levels (last only);
      empty levels are valid; a topic may not contain "+" or "#" at all; a
      filter whose first level is "+" or "#" never matches a topic starting
      with "$"; "$share/GROUP/filter" is (filter, queue=GROUP).
Both  non-empty, at most 65,535 UTF-8 bytes, no U+0000, no lone surrogates.
AMQP  (RabbitMQ topic exchanges) separator ".", words may be empty; in a
      binding key a whole word "*" is exactly one word and a whole word "#"
      zero or more words, anywhere and any number of times; "" is the key of
      zero words; at most 255 UTF-8 bytes, any character (U+0000 too);
      groups merge by name as in NATS; each sub_id at most once per key.

The order of a row (match's subs and groups, match_many's rows): the plain
sub_ids ascending by value (an id on two matching filters twice, side by
side; once with dedupe), then the groups by (queue, filter) -- compared as
UTF-8 bytes, the inner filter for MQTT; NATS, AMQP: by queue alone, one
group per name --, each group's members ascending.  match_many's row is
that list (queues="all"), the plain part ("none"), or the plain part then
one pick per group in group order ("pick"); dedupe keeps each id's first
occurrence.  reverse_match: by (filter, plain before queued, queue,
sub_id).  Written here from that definition, not from the engine's code.

Queue picks (match_many's queues="pick"): for each matching group, every
member gets a weight from (the row's key -- its own or the subject --, the
group, the member's sub_id) and the heaviest member is delivered, the
smaller sub_id on a tie.  So the pick depends only on the set of members
(rendezvous hashing).  The hashes are restated here from their definitions,
not called from the C engine, so a change to either shows as a mismatch.
"""
from collections import namedtuple

__all__ = [
    "ReferenceSublist", "MatchResult", "subject_matches", "filters_intersect",
    "is_valid_subject", "is_valid_filter", "validate_subject", "validate_filter",
    "split_share",
    "pick_member", "picked_row", "batch_row",
]

MAX_BYTES = 65535
INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
NATS_WHITESPACE = " \t\n\r\f"
AMQP_MAX_BYTES = 255
_SEP = {"nats": ".", "mqtt": "/", "amqp": "."}
_ONE = {"nats": "*", "mqtt": "+", "amqp": "*"}
_REST = {"nats": ">", "mqtt": "#", "amqp": "#"}

MatchResult = namedtuple("MatchResult", ["subs", "groups"])


_M64 = (1 << 64) - 1


def _hash32(data):
    """The engine's token hash of a byte string (64-bit words, little-endian,
    then a final mix; the top 32 bits)."""
    n = len(data)
    h = 0x9E3779B97F4A7C15 ^ n
    whole = n - n % 8
    for i in range(0, whole, 8):
        h = ((h ^ int.from_bytes(data[i:i + 8], "little")) * 0xBF58476D1CE4E5B9) & _M64
        h ^= h >> 31
    h = ((h ^ int.from_bytes(data[whole:], "little")) * 0x94D049BB133111EB) & _M64
    h ^= h >> 32
    h = (h * 0xBF58476D1CE4E5B9) & _M64
    return h >> 32


def _fmix64(x):
    """MurmurHash3's 64-bit finalizer."""
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & _M64
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & _M64
    x ^= x >> 33
    return x


def _group_key(queue, filter, dialect):
    """A group's identity for picks: its name's hash; MQTT folds in the hash
    of each level of its filter, last level first."""
    h = _hash32(queue.encode("utf-8", "surrogatepass"))
    if dialect == "mqtt":
        for level in reversed(filter.split("/")):
            h = ((h ^ _hash32(level.encode("utf-8", "surrogatepass"))) * 0x9E3779B97F4A7C15) & _M64
    return (h ^ (h >> 32)) & 0xFFFFFFFF


def pick_member(key, queue, filter, members, dialect="nats"):
    """The member queues="pick" delivers for a group (queue, filter) whose
    matching members are `members` (any order, repeats allowed), for a row
    whose pick key is `key` (the row's key, or else its subject)."""
    if not members:
        raise ValueError("a group has at least one member")
    seed = _fmix64((_hash32(key.encode("utf-8", "surrogatepass")) << 32)
                   | _group_key(queue, filter, dialect))
    return max(set(members),
               key=lambda i: (_fmix64(seed ^ ((i * 0x9E3779B97F4A7C15) & _M64)), -i))


def picked_row(m, key, dialect="nats", dedupe=False):
    """A match_many row under queues="pick", as a sorted list of ids, from a
    match result m (plain ids, then one member per group); dedupe drops
    repeats after the picks, as match_many(dedupe=True) does."""
    row = list(m.subs) + [pick_member(key, q, f, members, dialect) for q, f, members in m.groups]
    return sorted(set(row)) if dedupe else sorted(row)


def batch_row(m, queues="all", key=None, dialect="nats", dedupe=False):
    """The exact match_many row for a match result m (in the row's order):
    queues "all", "none" or "pick" (key: the row's pick key, its own or the
    subject); dedupe keeps the first occurrence of each id."""
    row = list(m.subs)
    if queues == "all":
        row += [i for _, _, members in m.groups for i in members]
    elif queues == "pick":
        row += [pick_member(key, q, f, members, dialect) for q, f, members in m.groups]
    return list(dict.fromkeys(row)) if dedupe else row


def _utf8(s):
    return s.encode("utf-8", "surrogatepass")


def _sep(dialect):
    if dialect not in _SEP:
        raise ValueError(f"unknown dialect {dialect!r}: expected 'nats', 'mqtt' or 'amqp'")
    return _SEP[dialect]


def _shown(s):
    r = repr(s)
    return r if len(r) <= 200 else r[:200] + "..."


def _check_str(s, what, max_bytes):
    """Type, encoding and length in bytes: the rules every dialect shares."""
    if not isinstance(s, str):
        raise TypeError(f"{what} must be str, not {type(s).__name__}")
    try:
        n = len(s.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"invalid {what} {_shown(s)}: not encodable as UTF-8 (lone surrogate)")
    if n > max_bytes:
        raise ValueError(f"invalid {what} {_shown(s)}: too long ({n} bytes > {max_bytes})")


def _check_common(s, what):
    """NATS and MQTT: the shared rules, then no NUL and not empty."""
    _check_str(s, what, MAX_BYTES)
    if "\x00" in s:
        raise ValueError(f"invalid {what} {_shown(s)}: contains NUL at {s.index(chr(0))}")
    if s == "":
        raise ValueError(f"invalid {what} {_shown(s)}: empty")


def _check_amqp(s, what):
    """AMQP keys: the shared rules with 255 bytes; anything else goes."""
    _check_str(s, what, AMQP_MAX_BYTES)


def _words(s, dialect):
    """The tokens of a subject or filter: AMQP's "" has none."""
    if dialect == "amqp" and s == "":
        return []
    return s.split(_SEP[dialect])


def split_share(f):
    """MQTT: '$share/G/f' -> (f, 'G'); any other filter -> (f, None). Raises ValueError."""
    if not f.startswith("$share/"):
        return f, None
    parts = f.split("/", 2)
    if len(parts) < 3 or parts[2] == "":
        raise ValueError(f"invalid filter {_shown(f)}: shared subscription without a filter")
    group = parts[1]
    if group == "" or "+" in group or "#" in group:
        raise ValueError(f"invalid filter {_shown(f)}: bad shared subscription group name {group!r}")
    return parts[2], group


def validate_subject(s, dialect="nats"):
    """Raise TypeError / ValueError (with the reason) unless s is a valid literal subject."""
    sep = _sep(dialect)
    if dialect == "amqp":
        _check_amqp(s, "subject")
        return
    _check_common(s, "subject")
    if dialect == "nats":
        for c in NATS_WHITESPACE:
            if c in s:
                raise ValueError(f"invalid subject {_shown(s)}: whitespace at {s.index(c)}")
        for i, t in enumerate(s.split(sep)):
            if t == "":
                raise ValueError(f"invalid subject {_shown(s)}: empty token {i}")
            if t in ("*", ">"):
                raise ValueError(f"invalid subject {_shown(s)}: wildcard in subject (token {i})")
    else:
        for c in "+#":
            if c in s:
                raise ValueError(f"invalid subject {_shown(s)}: wildcard {c!r} in topic at {s.index(c)}")


def validate_filter(f, dialect="nats"):
    """Raise TypeError / ValueError (with the reason) unless f is a valid filter.

    For MQTT, '$share/G/filter' is accepted."""
    sep = _sep(dialect)
    if dialect == "amqp":
        _check_amqp(f, "filter")
        return
    _check_common(f, "filter")
    if dialect == "nats":
        for c in NATS_WHITESPACE:
            if c in f:
                raise ValueError(f"invalid filter {_shown(f)}: whitespace at {f.index(c)}")
        tokens = f.split(sep)
        for i, t in enumerate(tokens):
            if t == "":
                raise ValueError(f"invalid filter {_shown(f)}: empty token {i}")
            if t == ">" and i != len(tokens) - 1:
                raise ValueError(f"invalid filter {_shown(f)}: '>' not last (token {i})")
    else:
        inner, _ = split_share(f)
        tokens = inner.split(sep)
        for i, t in enumerate(tokens):
            if t not in ("+", "#") and ("+" in t or "#" in t):
                raise ValueError(f"invalid filter {_shown(f)}: wildcard not a whole level (level {i})")
            if t == "#" and i != len(tokens) - 1:
                raise ValueError(f"invalid filter {_shown(f)}: '#' not last (level {i})")


def validate_queue(q, dialect="nats"):
    if q is None:
        return
    if not isinstance(q, str):
        raise TypeError(f"queue must be str or None, not {type(q).__name__}")
    bad = {"nats": NATS_WHITESPACE + "\x00", "mqtt": "/+#\x00", "amqp": "\x00"}[dialect]
    if q == "" or any(c in q for c in bad):
        raise ValueError(f"invalid queue name {_shown(q)}")
    try:
        n = len(q.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"invalid queue name {_shown(q)}: not encodable as UTF-8")
    if n > MAX_BYTES:
        raise ValueError(f"invalid queue name {_shown(q)}: too long ({n} bytes > {MAX_BYTES})")


def validate_sub_id(sub_id):
    if not isinstance(sub_id, int):
        raise TypeError(f"sub_id must be int, not {type(sub_id).__name__}")
    if not INT64_MIN <= sub_id <= INT64_MAX:
        raise OverflowError(f"sub_id {sub_id} outside signed 64-bit range")


def _valid(check, s, dialect):
    _sep(dialect)  # an unknown dialect is an error, not "invalid"
    try:
        check(s, dialect)
        return True
    except ValueError:
        return False


def is_valid_subject(s, dialect="nats"):
    return _valid(validate_subject, s, dialect)


def is_valid_filter(f, dialect="nats"):
    return _valid(validate_filter, f, dialect)


def _amqp_match(ftoks, stoks):
    """Can the binding words ftoks produce the routing words stoks?  The
    set of (i, j) = (binding words used, routing words matched) pairs
    reachable from (0, 0): each pair at most once, so no exponential
    backtracking however many '#'."""
    todo, seen = [(0, 0)], {(0, 0)}
    while todo:
        i, j = todo.pop()
        if i == len(ftoks):
            if j == len(stoks):
                return True
            continue
        f = ftoks[i]
        nxt = []
        if f == "#":
            nxt.append((i + 1, j))                 # '#' takes no more words
            if j < len(stoks):
                nxt.append((i, j + 1))             # '#' takes one more word
        elif j < len(stoks) and (f == "*" or f == stoks[j]):
            nxt.append((i + 1, j + 1))
        for st in nxt:
            if st not in seen:
                seen.add(st)
                todo.append(st)
    return False


def _tokens_match(ftoks, stoks, dialect):
    """Plain token-list comparison; both lists already valid."""
    if dialect == "amqp":
        return _amqp_match(ftoks, stoks)
    one, rest = _ONE[dialect], _REST[dialect]
    if dialect == "mqtt" and stoks[0].startswith("$") and ftoks[0] in (one, rest):
        return False
    for i, ft in enumerate(ftoks):
        if ft == rest:
            # NATS '>' needs at least one more token; MQTT '#' takes zero or more.
            return len(stoks) > i if dialect == "nats" else len(stoks) >= i
        if i >= len(stoks):
            return False
        if ft != one and ft != stoks[i]:
            return False
    return len(ftoks) == len(stoks)


def _inner(f, dialect):
    return split_share(f)[0] if dialect == "mqtt" else f


def subject_matches(filter, subject, dialect="nats"):
    validate_filter(filter, dialect)
    validate_subject(subject, dialect)
    return _tokens_match(_words(_inner(filter, dialect), dialect), _words(subject, dialect), dialect)


def _witness(f1, f2, dialect):
    """A subject (token list) both filters might match, or None if none can exist.

    Where a level is free, pick "a": a valid token that is never a '$' topic."""
    one, rest = _ONE[dialect], _REST[dialect]

    def fill(toks):  # any subject the remaining tokens match (a rest wildcard takes one token)
        return [("a" if t in (one, rest) else t) for t in toks]

    out = []
    i = 0
    while True:
        a = f1[i] if i < len(f1) else None
        b = f2[i] if i < len(f2) else None
        if a is None and b is None:
            return out
        if a == rest or b == rest:
            other = f2 if a == rest else f1
            if i < len(other):
                return out + fill(other[i:])
            # the other filter ended here: only MQTT's '#' may take zero levels
            return out if dialect == "mqtt" else None
        if a is None or b is None:
            return None
        if a == one:
            out.append("a" if b == one else b)
        elif b == one or a == b:
            out.append(a)
        else:
            return None
        i += 1


def _amqp_witness(f1, f2):
    """The shortest routing key (word list, fewest bytes) that both bindings
    match, or None: a cheapest-first search over pairs of positions (i, j).
    A free word is the empty word; a word costs its bytes plus a separator."""
    import heapq
    start, goal = (0, 0), (len(f1), len(f2))
    best = {start: 0}
    todo = [(0, start, ())]
    while todo:
        cost, (i, j), words = heapq.heappop(todo)
        if cost > best.get((i, j), cost):
            continue
        if (i, j) == goal:
            return list(words)
        a = f1[i] if i < len(f1) else None
        b = f2[j] if j < len(f2) else None
        moves = []
        if a == "#":
            moves.append(((i + 1, j), None))             # '#' takes no word
        if b == "#":
            moves.append(((i, j + 1), None))
        if a is not None and b is not None:
            lit_a, lit_b = a not in ("*", "#"), b not in ("*", "#")
            if not (lit_a and lit_b and a != b):
                word = a if lit_a else b if lit_b else ""
                moves.append(((i if a == "#" else i + 1, j if b == "#" else j + 1), word))
        for st, w in moves:
            c = cost + (0 if w is None else len(w.encode("utf-8")) + 1)
            if st != (i, j) and c < best.get(st, c + 1):
                best[st] = c
                heapq.heappush(todo, (c, st, words if w is None else words + (w,)))
    return None


def _intersect_tokens(t1, t2, dialect):
    if dialect == "amqp":
        w = _amqp_witness(t1, t2)
        return (w is not None and is_valid_subject(".".join(w), "amqp")
                and _amqp_match(t1, w) and _amqp_match(t2, w))
    w = _witness(t1, t2, dialect)
    if w is None:
        return False
    # The witness is only a candidate; keep the answer honest by checking it.
    return (is_valid_subject(_SEP[dialect].join(w), dialect)
            and _tokens_match(t1, w, dialect) and _tokens_match(t2, w, dialect))


def filters_intersect(f1, f2, dialect="nats"):
    """True if some valid subject matches both filters (exact)."""
    validate_filter(f1, dialect)
    validate_filter(f2, dialect)
    return _intersect_tokens(_words(_inner(f1, dialect), dialect), _words(_inner(f2, dialect), dialect), dialect)


class ReferenceSublist:
    """A set of (filter, queue, sub_id); every query scans it."""

    def __init__(self, dialect="nats"):
        _sep(dialect)
        self.dialect = dialect
        self._subs = set()

    def _key(self, filter, sub_id, queue):
        validate_filter(filter, self.dialect)
        validate_sub_id(sub_id)
        validate_queue(queue, self.dialect)
        if self.dialect == "mqtt":
            inner, group = split_share(filter)
            if group is not None:
                if queue is not None:
                    raise ValueError(f"invalid filter {_shown(filter)}: both $share and queue= given")
                filter, queue = inner, group
        return (filter, queue, sub_id)

    def insert(self, filter, sub_id, queue=None):
        key = self._key(filter, sub_id, queue)
        new = key not in self._subs
        self._subs.add(key)
        return new

    def discard(self, filter, sub_id, queue=None):
        key = self._key(filter, sub_id, queue)
        present = key in self._subs
        self._subs.discard(key)
        return present

    def remove(self, filter, sub_id, queue=None):
        if not self.discard(filter, sub_id, queue):
            raise KeyError((filter, sub_id, queue))

    def _keys(self, filters, sub_ids, queues):
        filters, sub_ids = list(filters), list(sub_ids)
        queues = [None] * len(filters) if queues is None else list(queues)
        if not len(filters) == len(sub_ids) == len(queues):
            raise ValueError("filters, sub_ids and queues must have the same length")
        return [self._key(f, i, q) for f, i, q in zip(filters, sub_ids, queues)]

    def insert_many(self, filters, sub_ids, queues=None):
        n = 0
        for key in self._keys(filters, sub_ids, queues):  # validates all first
            n += key not in self._subs
            self._subs.add(key)
        return n

    def remove_many(self, filters, sub_ids, queues=None):
        n = 0
        for key in self._keys(filters, sub_ids, queues):
            n += key in self._subs
            self._subs.discard(key)
        return n

    def __len__(self):
        return len(self._subs)

    def __iter__(self):
        return iter(sorted(self._subs, key=repr))

    def match(self, subject, dedupe=False):
        """dedupe: each id at most once in subs and in each group."""
        validate_subject(subject, self.dialect)
        stoks = _words(subject, self.dialect)
        dedupe = dedupe or self.dialect == "amqp"    # AMQP: once per sub_id, always
        plain, groups = [], {}
        for f, q, i in self._subs:
            if not _tokens_match(_words(f, self.dialect), stoks, self.dialect):
                continue
            if q is None:
                plain.append(i)
            else:
                gkey = (q, f) if self.dialect == "mqtt" else (q, None)
                groups.setdefault(gkey, []).append(i)
        # The row's order: plain ids ascending; groups by (queue bytes,
        # filter bytes), members ascending; dedupe: each id once.
        subs = sorted(set(plain)) if dedupe else sorted(plain)
        order = sorted(groups, key=lambda g: (_utf8(g[0]), _utf8(g[1] or "")))
        return MatchResult(subs, [(q, f, sorted(set(groups[q, f])) if dedupe else sorted(groups[q, f]))
                                  for q, f in order])

    def num_interest(self, subject):
        r = self.match(subject)
        return (len(r.subs), sum(len(m) for _, _, m in r.groups))

    def has_interest(self, subject):
        return self.num_interest(subject) != (0, 0)

    def reverse_match(self, filter):
        validate_filter(filter, self.dialect)
        toks = _words(_inner(filter, self.dialect), self.dialect)
        return sorted(((f, i, q) for f, q, i in self._subs
                       if _intersect_tokens(toks, _words(f, self.dialect), self.dialect)),
                      key=lambda t: (_utf8(t[0]), t[2] is not None, _utf8(t[2] or ""), t[1]))
