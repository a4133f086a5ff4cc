"""topicmatch.amqtt.Broker: amqtt's broker routing through a Sublist, checked
with real paho-mqtt clients on loopback against src/topicmatch/_reference.py,
and the same scenario against stock amqtt to show where the two differ.
The harness (a broker in a thread, a recording paho client, packets written
by hand) is tests/amqtt_harness.py; hostile clients are
tests/test_amqtt_hostile.py.
"""
import asyncio
import collections
import itertools
import sys
import threading
import time
import uuid

import pytest

if sys.version_info < (3, 10):
    pytest.skip("amqtt needs Python >= 3.10 (topicmatch[amqtt] installs it only there)", allow_module_level=True)
amqtt_broker = pytest.importorskip("amqtt.broker", reason="amqtt not installed (pip install topicmatch[amqtt])")
mqtt = pytest.importorskip("paho.mqtt.client", reason="paho-mqtt not installed")

# A broker in-process, on sockets (`make test` runs these with the server tests).
pytestmark = pytest.mark.amqtt

from hypothesis import HealthCheck, Phase, given, settings, strategies as st  # noqa: E402

from topicmatch._reference import ReferenceSublist  # noqa: E402
from topicmatch.amqtt import Broker as FastBroker  # noqa: E402
from amqtt_harness import (  # noqa: E402
    SETTLE, WAIT, Client, Running, _recv_exact, _str, _varint, norm, raw_suback, settle,
)

StockBroker = amqtt_broker.Broker


@pytest.fixture(scope="module")
def fast():
    r = Running(FastBroker, anonymous=False)
    yield r
    r.close()


# -- the models: both built on _reference --------------------------------------
class Model:
    """Who holds which filter at which QoS, in a ReferenceSublist; ids encode
    (client index, QoS) as the adapter does."""

    def __init__(self, ids):
        self.ids = list(ids)
        self.ref = ReferenceSublist("mqtt")
        self.held = {}     # (client, filter) -> qos

    def sub(self, cid, f, q):
        old = self.held.pop((cid, f), None)
        if old is not None:
            self.ref.remove(f, self.ids.index(cid) * 4 + old)
        self.ref.insert(f, self.ids.index(cid) * 4 + q)
        self.held[(cid, f)] = q

    def unsub(self, cid, f):
        q = self.held.pop((cid, f), None)
        if q is not None:
            self.ref.remove(f, self.ids.index(cid) * 4 + q)

    def spec(self, topic, qos):
        """MQTT 3.1.1 §3.3.5: one copy per session, at min(publish QoS, its
        highest matching QoS): {client: [qos]}."""
        best = {}
        for x in self.ref.match(topic, dedupe=True).subs:
            cid = self.ids[x // 4]
            best[cid] = max(best.get(cid, 0), x % 4)
        return {cid: [min(qos, q)] for cid, q in best.items()}

    def stock(self, topic, qos):
        """amqtt 0.12: one copy per matching filter, at the filter's QoS."""
        out = collections.defaultdict(list)
        for x in self.ref.match(topic).subs:
            out[self.ids[x // 4]].append(x % 4)
        return dict(out)


def expect(model, kind, pubs, online, retain=False):
    """Counter per client of (payload, qos, retain) for publishes [(topic,
    payload, qos)] to the clients in `online`."""
    exp = collections.defaultdict(collections.Counter)
    for topic, payload, qos in pubs:
        for cid, qs in getattr(model, kind)(topic, qos).items():
            if cid in online:
                for q in qs:
                    exp[cid][(payload, q, retain)] += 1
    return exp


# -- amqtt's own matching cases, as data --------------------------------------
# From amqtt's tests/test_broker.py (test_matches_multi_level_wildcard,
# test_matches_single_level_wildcard), plus the §4.7.2 '$' rule.
MATCH_CASES = [
    ("sport/tennis/player1/#", "sport/tennis", False),
    ("sport/tennis/player1/#", "sport/tennis/", False),
    ("sport/tennis/player1/#", "sport/tennis/player1", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", True),
    ("sport/tennis/+", "sport/tennis", False),
    ("sport/tennis/+", "sport/tennis/player1/", False),
    ("sport/tennis/+", "sport/tennis/player1/ranking", False),
    ("sport/tennis/+", "sport/tennis/", True),
    ("sport/tennis/+", "sport/tennis/player1", True),
    ("sport/tennis/+", "sport/tennis/player2", True),
    ("sport/#", "sport", True),
    ("#", "$SYS/uptime", False),
    ("+/uptime", "$SYS/uptime", False),
    ("$SYS/#", "$SYS/uptime", True),
    ("+/+", "/finance", True),
    ("/+", "/finance", True),
    ("+", "/finance", False),
]


def test_matches_cases_follow_the_spec_and_reference():
    async def make():
        return FastBroker({"listeners": {"default": {"type": "tcp", "bind": "127.0.0.1:0"}}, "plugins": {}})
    loop = asyncio.new_event_loop()
    try:
        b = loop.run_until_complete(make())
        for f, topic, want in MATCH_CASES:
            r = ReferenceSublist("mqtt")
            r.insert(f, 1)
            ref_says = bool(r.match(topic).subs)
            assert ref_says == want, (f, topic)
            assert b._matches(topic, f) == want, (f, topic)
        # Filters topicmatch refuses match nothing (amqtt would try them literally).
        assert not b._matches("a", "")
        assert not b._matches("a/\x00", "a/+")
    finally:
        loop.close()


def test_matcher_agrees_with_stock_amqtt_and_the_reference_on_valid_filters():
    """Every valid filter and topic of up to three levels over a, b, '' (and
    '$x', '+', '#'): the adapter's _matches, stock amqtt's and _reference
    agree.  (Stock also tries filters the spec refuses, such as '' -- the
    adapter refuses those on SUBSCRIBE; see the bad-input test.)"""
    from topicmatch._reference import is_valid_filter, subject_matches

    async def make():
        cfg = {"listeners": {"default": {"type": "tcp", "bind": "127.0.0.1:0"}}, "plugins": {}}
        return FastBroker(cfg), StockBroker(cfg)
    loop = asyncio.new_event_loop()
    try:
        fast_b, stock_b = loop.run_until_complete(make())
    finally:
        loop.close()
    words = lambda alphabet: {"/".join(t) for n in (1, 2, 3) for t in itertools.product(alphabet, repeat=n)}
    filters = [f for f in sorted(words(["a", "b", "", "+", "#", "$x"])) if is_valid_filter(f, "mqtt")]
    topics = [t for t in sorted(words(["a", "b", "", "$x"])) if t]
    checked = 0
    for f in filters:
        for t in topics:
            want = subject_matches(f, t, "mqtt")
            assert fast_b._matches(t, f) == want, (f, t)
            assert stock_b._matches(t, f) == want, (f, t)
            checked += want
    assert checked > 900      # the grammar does produce matches (996), wildcard ones included


# -- the main scenario: one against topicmatch and the same against stock -----------
FILTERS = [  # overlapping, per client: (filter, qos)
    [("sport/#", 1), ("sport/+", 0), ("#", 0)],
    [("sport", 0), ("sport/tennis/+", 1), ("+/tennis/#", 1)],
    [("sport/tennis/player1", 0), ("sport/tennis/player1", 1), ("+/+/+", 0)],   # re-subscribe: QoS 1 replaces 0
    [("+", 1), ("+/+", 0), ("finance/#", 1), ("$SYS/#", 1)],
    [("#", 1), ("+/#", 0)],
    [("/+", 1), ("+/", 0), ("finance", 0)],
]
TOPICS = ["sport", "sport/tennis", "sport/tennis/player1", "sport/tennis/player1/score",
          "finance", "finance/eur", "/finance", "sport/", "a/b/c", "x"]


def scenario(running, kind):
    """Subscribe, stream, unsubscribe mid-stream, drop and restore a
    persistent session, retained messages on subscribe.  `kind` names the
    model the broker must follow exactly ("spec" or "stock")."""
    tag = uuid.uuid4().hex[:8]
    ids = [f"{tag}-c{i}" for i in range(len(FILTERS))]
    model = Model(ids)
    # Client 4 is persistent (its session outlives the connection).
    clients = [Client(running.port, cid, clean=(i != 4)) for i, cid in enumerate(ids)]
    pub = Client(running.port, f"{tag}-pub")
    seq = itertools.count()
    try:
        for c, pairs in zip(clients, FILTERS):
            if kind == "stock" and c is clients[2]:
                pairs = pairs[:1] + pairs[2:]   # stock keeps the first QoS on re-subscribe: not compared here
            for f, q in pairs:
                assert c.subscribe([(f, q)]) == [q]
                model.sub(c.id, f, q)
        online = set(ids)

        def stream(qoses=(0, 1)):
            pubs = []
            for t in TOPICS:
                for q in qoses:
                    p = f"m{next(seq)}"
                    pub.publish(t, p, q)
                    pubs.append((t, p, q))
            return pubs

        # 1. A stream, QoS 0 and 1.
        pubs = stream()
        # An internal broadcast to a '$' topic: only '$SYS/#' gets it, never '#' or '+/...'.
        running.call(running.broker.internal_message_broadcast("$SYS/load", b"s0", 1))
        pubs.append(("$SYS/load", "s0", 1))
        exp = expect(model, kind, pubs, online)
        assert norm(settle(clients, exp)) == norm(exp)

        # 2. Unsubscribe in the middle of a stream: what follows the UNSUBACK follows the new state.
        clients[0].unsubscribe(["#", "sport/+"])
        model.unsub(ids[0], "#")
        model.unsub(ids[0], "sport/+")
        exp = expect(model, kind, stream(), online)
        assert norm(settle(clients, exp)) == norm(exp)

        # 3. The persistent session goes away; amqtt queues what its filters
        # would get at QoS > 0, and replays it (retain flag set, amqtt's
        # habit) when it comes back.  Its subscriptions come back too.
        clients[4].close()
        running_sessions = running.broker._sessions
        deadline = time.monotonic() + WAIT
        while running_sessions[ids[4]][0].transitions.state == "connected":
            assert time.monotonic() < deadline, "session never went offline"
            time.sleep(0.05)
        online.discard(ids[4])
        pubs = stream()
        exp = expect(model, kind, pubs, online)
        assert norm(settle([c for c in clients if c.id in online], exp)) == norm(exp)
        queued = expect(model, kind, pubs, {ids[4]}, retain=True)[ids[4]]
        queued = collections.Counter({k: n for k, n in queued.items() if k[1] > 0})
        clients[4] = Client(running.port, ids[4], clean=False)
        online.add(ids[4])
        assert settle([clients[4]], {ids[4]: queued}) == {ids[4]: queued}
        exp = expect(model, kind, stream(), online)
        assert norm(settle(clients, exp)) == norm(exp)

        # 4. Retained messages reach a NEW subscription once per retained topic it matches.
        # (The new client connects first: amqtt replays retained messages on
        # every CONNECT for every filter in the broker, a habit left as is.)
        newc = Client(running.port, f"{tag}-new")
        clients.append(newc)
        retained = {"sport/tennis": "r1", "sport/tennis/player1": "r2", "finance": "r3"}
        for t, p in retained.items():
            pub.publish(t, p, 1, retain=True)
        exp = expect(model, kind, [(t, p, 1) for t, p in retained.items()], online)
        assert norm(settle(clients, exp)) == norm(exp)
        assert newc.subscribe([("sport/#", 1)]) == [1]
        want = collections.Counter({(p, 1, True): 1 for t, p in retained.items() if t.startswith("sport")})
        assert settle([newc], {newc.id: want}) == {newc.id: want}
        assert newc.subscribe([("+", 0)]) == [0]
        want = collections.Counter({("r3", 0, True): 1})
        assert settle([newc], {newc.id: want}) == {newc.id: want}
        if kind == "spec":
            assert set(running.broker._retained_ids) == set(retained)
        # Clearing retained topics (empty retained payload) takes them out of
        # the retained index, and out of the way of the tests that follow.
        for t in retained:
            pub.publish(t, b"", 1, retain=True)
        time.sleep(SETTLE)
        for c in clients:
            c.take()
        return model
    finally:
        for c in clients + [pub]:
            c.close()


def test_routing_follows_the_spec_and_reference(fast):
    scenario(fast, "spec")
    b = fast.broker

    async def state():   # read on the broker's loop, not while it changes
        held = {(f, s.client_id) for f, subs in b._subscriptions.items() for s, _ in subs}
        mine = {(f, h.session.client_id) for h in b._holders.values() for f in h.filters}
        return held, mine, len(b.routing_index), set(b._retained_ids)
    # The index and amqtt's own dict agree, and the cleared retained topic is gone.
    held, mine, n, retained = fast.call(state())
    assert held == mine
    assert n == len(mine)
    assert retained == set()


def test_stock_amqtt_differs_only_in_duplicates_and_qos():
    """The same scenario against stock amqtt follows the 'stock' model
    exactly, and that model delivers to the same (client, message) pairs as
    the spec model: the two differ in copies and QoS, nowhere else."""
    running = Running(StockBroker, anonymous=False)
    try:
        scenario(running, "stock")
    finally:
        running.close()
    ids = [str(i) for i in range(len(FILTERS))]
    m = Model(ids)
    for cid, pairs in zip(ids, FILTERS):
        for f, q in pairs:
            m.sub(cid, f, q)
    dup = qos_diff = 0
    for t in TOPICS:
        for q in (0, 1):
            spec, stock = m.spec(t, q), m.stock(t, q)
            assert spec.keys() == stock.keys(), t
            dup += sum(len(v) - 1 for v in stock.values())
            qos_diff += sum(max(stock[c]) != spec[c][0] for c in spec)
    assert dup > 0 and qos_diff > 0     # the scenario does exercise both differences


# -- Hypothesis: generated subscription sets against the reference -------------
LEVELS = ["a", "b", ""]
filter_st = st.lists(st.sampled_from(LEVELS + ["+"]), min_size=1, max_size=3).flatmap(
    lambda lv: st.sampled_from(["/".join(lv), "/".join(lv + ["#"]), "#"])).filter(bool)
topic_st = st.lists(st.sampled_from(LEVELS), min_size=1, max_size=3).map("/".join).filter(bool)


# No shrinking: each example runs real clients, and a failure prints the
# whole example (subscriptions, topics) anyway.
@settings(max_examples=int(__import__("os").environ.get("AMQTT_EXAMPLES", "4")), deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                               HealthCheck.too_slow])
@given(subs=st.lists(st.lists(st.tuples(filter_st, st.sampled_from([0, 1])), min_size=1, max_size=4),
                     min_size=2, max_size=5),
       topics=st.lists(st.tuples(topic_st, st.sampled_from([0, 1])), min_size=1, max_size=8))
def test_generated_subscription_sets(fast, subs, topics):
    tag = uuid.uuid4().hex[:8]
    ids = [f"{tag}-h{i}" for i in range(len(subs))]
    model = Model(ids)
    clients = [Client(fast.port, cid) for cid in ids]
    pub = Client(fast.port, f"{tag}-pub")
    try:
        for c, pairs in zip(clients, subs):
            for f, q in pairs:
                assert c.subscribe([(f, q)]) == [q]
                model.sub(c.id, f, q)
        pubs = []
        for i, (t, q) in enumerate(topics):
            pub.publish(t, f"g{i}", q)
            pubs.append((t, f"g{i}", q))
        exp = expect(model, "spec", pubs, set(ids))
        assert norm(settle(clients, exp)) == norm(exp)
    finally:
        for c in clients + [pub]:
            c.close()


# -- shared subscriptions (the extension) ---------------------------------------
def test_share_group_gets_one_copy_per_message(fast):
    tag = uuid.uuid4().hex[:8]
    members = [Client(fast.port, f"{tag}-s{i}") for i in range(3)]
    plain = Client(fast.port, f"{tag}-plain")
    pub = Client(fast.port, f"{tag}-pub")
    try:
        for m in members:
            assert m.subscribe([(f"$share/g{tag}/job/+", 1)]) == [1]
        # A member also holding a plain matching filter gets that copy as well (MQTT 5 §4.8.2).
        assert members[0].subscribe([("job/#", 0)]) == [0]
        assert plain.subscribe([("job/#", 1)]) == [1]
        n = 9
        for i in range(n):
            pub.publish("job/x", f"j{i}", 1)
        plain.wait_count(n)
        members[0].wait_count(n)     # its plain copies at least
        deadline = time.monotonic() + WAIT
        while sum(len(m.got) for m in members) < 2 * n:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(SETTLE)
        shared = collections.Counter()
        for i, m in enumerate(members):
            for p, q, r in m.take():
                if not (i == 0 and q == 0):     # members[0]'s plain copies come at QoS 0
                    shared[p] += 1
        assert shared == collections.Counter({f"j{i}": 1 for i in range(n)})
        assert sorted(p for p, _, _ in plain.take()) == sorted(f"j{i}" for i in range(n))
    finally:
        for c in members + [plain, pub]:
            c.close()


# -- bad input and session end -----------------------------------------------------
def test_invalid_filters_are_refused_and_change_nothing(fast):
    b = fast.broker

    async def state():
        return len(b.routing_index), {k: [(s.client_id, q) for s, q in v] for k, v in b._subscriptions.items()}

    def settled():
        """The broker's state once it holds still: the sessions of the
        tests before this one (the broker is the module's) may still be
        ending, and one that ends between the two reads below would look
        like a change made by the refused filters."""
        last, same, deadline = fast.call(state()), 0, time.monotonic() + 10
        while same < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
            now = fast.call(state())
            same = same + 1 if now == last else 0
            last = now
        return last
    cid = f"{uuid.uuid4().hex[:8]}-bad"
    before = settled()
    # amqtt's own refusals, and those topicmatch adds (the empty filter, U+0000,
    # a malformed $share) get the same SUBACK 0x80; the valid one beside them is granted.
    bad = ["a/#/b", "a#", "sport+", "+x/y", "", "a/\x00", "$share//x", "$share/g"]
    assert raw_suback(fast.port, cid, bad + ["ok/+"]) == [0x80] * len(bad) + [0]
    after = fast.call(state())
    assert after[0] == before[0] + 1
    assert {k: v for k, v in after[1].items() if k != "ok/+"} == before[1]


class CountingDict(dict):
    """amqtt's subscriptions dict, counting walks over every filter."""
    walks = 0

    def __iter__(self):
        CountingDict.walks += 1
        return super().__iter__()

    def items(self):
        CountingDict.walks += 1
        return super().items()

    def keys(self):
        CountingDict.walks += 1
        return super().keys()


def test_session_end_touches_only_its_own_filters(fast):
    b = fast.broker
    tag = uuid.uuid4().hex[:8]
    c = Client(fast.port, f"{tag}-end", clean=False)
    other = Client(fast.port, f"{tag}-other")
    try:
        assert c.subscribe([("e/1", 0), ("e/+", 1), ("#", 0)]) == [0, 1, 0]
        assert other.subscribe([("e/+", 0)]) == [0]
        n = len(b.routing_index)
        session = b._sessions[c.id][0]

        async def end():
            b._subscriptions = CountingDict(b._subscriptions)
            CountingDict.walks = 0
            await b._del_all_subscriptions(session)
            return CountingDict.walks
        assert fast.call(end()) == 0
        assert len(b.routing_index) == n - 3
        assert [s.client_id for s, _ in b._subscriptions["e/+"]] == [other.id]
        assert "e/1" not in b._subscriptions
        assert c.id not in b._holders
    finally:
        c.close()
        other.close()


# -- the retained index against the reference (no network) ----------------------
retained_topic_st = st.lists(st.sampled_from(LEVELS + ["$SYS", "c"]), min_size=1, max_size=4).map("/".join).filter(bool)
retained_filter_st = st.one_of(filter_st, retained_topic_st,
                               retained_topic_st.map(lambda t: t + "/#"), st.just("$SYS/+"))


@pytest.fixture(scope="module")
def offline_broker():
    loop = asyncio.new_event_loop()

    async def make():
        return FastBroker({"listeners": {"default": {"type": "tcp", "bind": "127.0.0.1:0"}}, "plugins": {}})
    yield loop, loop.run_until_complete(make())
    loop.close()


@settings(max_examples=int(__import__("os").environ.get("AMQTT_EXAMPLES", "60")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stored=st.lists(retained_topic_st, max_size=8, unique=True),
       cleared=st.lists(retained_topic_st, max_size=3),
       direct=st.lists(retained_topic_st, max_size=3, unique=True),
       filters=st.lists(retained_filter_st, min_size=1, max_size=5))
def test_retained_lookup_matches_the_reference(offline_broker, stored, cleared, direct, filters):
    loop, b = offline_broker
    for t in list(b._retained_messages):
        loop.run_until_complete(b.retain_message(None, t, b"", 0))
    for t in stored:
        loop.run_until_complete(b.retain_message(None, t, b"x", 1))
    for t in cleared:          # an empty retained payload clears the topic
        loop.run_until_complete(b.retain_message(None, t, b"", 1))
    for t in direct:           # as amqtt's persistence plugin restores them: straight into the dict
        b._retained_messages[t] = amqtt_broker.RetainedApplicationMessage(None, t, b"y", 0)
    held = set(b._retained_messages)
    assert held == (set(stored) - set(cleared)) | set(direct)
    for f in filters:
        want = sorted(t for t in held if _ref_matches(f, t))
        assert sorted(b.retained_for(f)) == want, f


def _ref_matches(f, topic):
    r = ReferenceSublist("mqtt")
    r.insert(f, 1)
    return bool(r.match(topic).subs)


def test_clean_session_connect_drops_the_old_subscriptions(fast):
    b = fast.broker
    cid = f"{uuid.uuid4().hex[:8]}-restore"
    c = Client(fast.port, cid, clean=False)
    assert c.subscribe([("r/+", 1), ("r/#", 0)]) == [1, 0]
    c.close()
    # Persistent: reconnecting without clean session keeps both filters routed.
    c = Client(fast.port, cid, clean=False)
    # (Other tests' sessions may hold "#" too: only this client's routes count.)
    assert [(s.client_id, q) for s, q in fast.call(_route(b, "r/x")) if s.client_id == cid] == [(cid, 1)]
    c.close()
    # Clean session: amqtt deletes the old session, and the index follows.
    c = Client(fast.port, cid, clean=True)
    try:
        assert [s for s, _ in fast.call(_route(b, "r/x")) if s.client_id == cid] == []
        assert cid not in b._holders
        assert not [f for f, subs in fast.call(_subs(b)).items() if cid in subs]
    finally:
        c.close()


async def _route(b, topic):
    return b.route(topic)


async def _subs(b):
    return {f: [s.client_id for s, _ in v] for f, v in b._subscriptions.items()}


def test_will_message_is_capped_by_the_subscription_qos(fast):
    """A will (QoS 1 here) reaches a QoS 0 subscriber at QoS 0 (stock amqtt:
    at the will's QoS whatever the subscription's)."""
    import socket
    tag = uuid.uuid4().hex[:8]
    low, high = Client(fast.port, f"{tag}-low"), Client(fast.port, f"{tag}-high")
    try:
        assert low.subscribe([(f"will/{tag}", 0)]) == [0]
        assert high.subscribe([(f"will/{tag}", 1)]) == [1]
        sock = socket.create_connection(("127.0.0.1", fast.port), timeout=WAIT)
        # CONNECT: clean session, will flag, will QoS 1, username.
        body = (_str("MQTT") + bytes([4, 0x02 | 0x04 | 0x08 | 0x80]) + (60).to_bytes(2, "big")
                + _str(f"{tag}-dying") + _str(f"will/{tag}") + _str("bye") + _str("user"))
        sock.sendall(b"\x10" + _varint(len(body)) + body)
        assert _recv_exact(sock, 4)[:2] == b"\x20\x02"
        sock.close()             # no DISCONNECT: the broker publishes the will
        want_low = {low.id: collections.Counter({("bye", 0, False): 1})}
        want_high = {high.id: collections.Counter({("bye", 1, False): 1})}
        assert settle([low], want_low) == want_low
        assert settle([high], want_high) == want_high
    finally:
        low.close()
        high.close()
