"""Small tables and the pure-Python answer a fan-out must give on them.

The answer comes from topicmatch._reference.ReferenceSublist (slow, plain),
never from the engine under test; the queue-group pick, which is the
engine's hash, is checked for its shape (one member of each matching group)
and separately for equality with the engine's own match_many on the driver."""
import collections
import random

from topicmatch import _reference as R

EVENT_SCHEMA = "event_id long, subject string, device string, payload string"
SUBS_SCHEMA = "sub_id long, filter string, queue string"

NATS_SUBS = [
    (1, "orders.*.created", None),
    (2, "orders.>", None),
    (3, "orders.eu.created", None),
    (4, ">", None),
    (5, "billing.*", None),
    (10, "orders.>", "workers"),          # NATS: one group "workers" across filters
    (11, "orders.*.created", "workers"),
    (12, "orders.eu.*", "workers"),
    (20, "orders.>", "audit"),
    (21, "orders.>", "audit"),
    (22, "orders.>", "audit"),
    (30, "never.matched", None),
]
NATS_SUBJECTS = [
    "orders.eu.created", "orders.us.created", "orders.eu.shipped", "orders", "billing.x",
    "billing", "x.y.z", "orders.eu.created", None, "orders..x", "a b", "orders.*", "", ".a",
]

MQTT_SUBS = [
    (1, "sport/+/score", None),
    (2, "sport/#", None),
    (3, "#", None),
    (4, "+/tennis/#", None),
    (5, "$SYS/#", None),
    (6, "a//b", None),
    (10, "$share/g1/sport/#", None),        # MQTT: a group is (name, filter)
    (11, "$share/g1/sport/#", None),
    (12, "$share/g1/sport/+/score", None),
    (13, "sport/tennis/+", "q2"),
    (14, "sport/tennis/+", "q2"),
]
MQTT_SUBJECTS = [
    "sport", "sport/tennis/score", "sport/golf/score", "$SYS/broker", "a//b", "/a", "a/",
    "x y/z", "sport/tennis/player1", None, "sport/+", "sport/#", "", "$SYS",
]


def events_rows(subjects, seed=0):
    rng = random.Random(seed)
    return [(i + 1, s, f"dev-{rng.randrange(6)}" if i % 7 else None, f"p{i}")
            for i, s in enumerate(subjects)]


def random_case(dialect, n_subs=40, n_events=300, seed=1):
    """-> (subs rows, subjects): random filters with wildcards and queue groups,
    subjects with ~5% nulls and ~5% invalid ones."""
    rng = random.Random(seed)
    if dialect == "nats":
        toks, one, rest, sep = ["a", "b", "c"], "*", ">", "."
        bad = ["a..b", "a b", "a.*", ">", "a.", ""]
    elif dialect == "amqp":      # '#' anywhere, empty words; only over-long keys are invalid
        toks, one, rest, sep = ["a", "b", "", "*x"], "*", "#", "."
        bad = ["k" * 256, "\u00e9" * 128]
    else:
        toks, one, rest, sep = ["a", "b", "", "$s"], "+", "#", "/"
        bad = ["a/+", "#", "a/#/b", "", "x+y"]
    subs = []
    for j in range(n_subs):
        ft = [rng.choice(toks + [one] + ([rest] if dialect == "amqp" else []))
              for _ in range(rng.randint(1, 4))]
        if rng.random() < 0.25:
            ft.append(rest)
        f = sep.join(ft)
        q = rng.choice(["q1", "q2"]) if rng.random() < 0.3 else None
        if dialect == "mqtt" and q and rng.random() < 0.5:
            f, q = f"$share/{q}/{f}", None
        if R.is_valid_filter(f, dialect):
            subs.append((100 + j, f, q))
    subjects = []
    for _ in range(n_events):
        r = rng.random()
        if r < 0.05:
            subjects.append(None)
        elif r < 0.10:
            subjects.append(rng.choice(bad))
        else:
            subjects.append(sep.join(rng.choice(toks) for _ in range(rng.randint(1, 4))))
    return subs, subjects


class Expected:
    """The reference answer for (subs, events) in one dialect."""

    def __init__(self, dialect, subs, events):
        self.dialect = dialect
        ref = R.ReferenceSublist(dialect)
        self.group_of = {}
        for sid, f, q in subs:
            ref.insert(f, sid, q)
            inner, share = R.split_share(f) if dialect == "mqtt" else (f, None)
            g = q or share
            if g is not None:
                self.group_of[sid] = (g, inner) if dialect == "mqtt" else (g, None)
        self.rejected, self.plain, self.groups = {}, {}, {}
        for event_id, subject, *_ in events:
            if subject is None:
                self.rejected[event_id] = "null subject"
            elif not R.is_valid_subject(subject, dialect):
                self.rejected[event_id] = "invalid"
            else:
                m = ref.match(subject)
                self.plain[event_id] = sorted(m.subs)
                self.groups[event_id] = {(q, f): sorted(members) for q, f, members in m.groups}

    def ids(self, event_id, queues):
        """The exact multiset for queues='all'/'none' (sorted)."""
        ids = list(self.plain[event_id])
        if queues == "all":
            for members in self.groups[event_id].values():
                ids.extend(members)
        return sorted(ids)

    def check(self, actual, queues):
        """actual: {event_id: list of sub ids} over the accepted events."""
        assert sorted(actual) == sorted(self.plain), "accepted events differ"
        for event_id, ids in actual.items():
            if queues != "pick":
                assert sorted(ids) == self.ids(event_id, queues), event_id
                continue
            plain = sorted(i for i in ids if i not in self.group_of)
            picked = [i for i in ids if i in self.group_of]
            assert plain == self.plain[event_id], event_id
            groups = self.groups[event_id]
            assert sorted(self.group_of[i] for i in picked) == sorted(groups), event_id
            for i in picked:
                assert i in groups[self.group_of[i]], (event_id, i)

    def counts(self, queues):
        delivered = sum(1 for e in self.plain
                        if self.plain[e] or (queues != "none" and self.groups[e]))
        return {"events": len(self.plain) + len(self.rejected), "delivered": delivered,
                "unmatched": len(self.plain) - delivered, "rejected": len(self.rejected)}


def rows_by_event(rows, explode):
    out = collections.defaultdict(list)
    for r in rows:
        if explode:
            out[r["event_id"]].append(r["sub_id"])
        else:
            out[r["event_id"]].extend(r["sub_ids"])
            out.setdefault(r["event_id"], [])
    return dict(out)
