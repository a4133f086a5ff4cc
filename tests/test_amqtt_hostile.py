"""topicmatch.amqtt.Broker against clients that send what the spec forbids.

Each finding of the adversarial review (issue 35) is a test here, on raw
sockets on 127.0.0.1 (paho refuses to send malformed packets), beside an
honest paho client whose deliveries are checked against
src/topicmatch/_reference.py.  Then a fuzz run: mutated and grammar-generated
packets, 20,000 per run (2,000 in a repeat run: the wheel round trip's
ci-repeat profile, tests/examples.py), its seed printed, bounded in time,
after which the broker must still be up, answer an honest probe exactly, and
hold nothing: index, the adapter's tables and amqtt's subscriptions all
empty.  TOPICMATCH_BROKER_FUZZ_PACKETS and TOPICMATCH_BROKER_FUZZ_SECONDS set
the bounds.
"""
import asyncio
import collections
import os
import random
import socket
import sys
import time
import uuid

import pytest

if sys.version_info < (3, 10):
    pytest.skip("amqtt needs Python >= 3.10 (topicmatch[amqtt] installs it only there)", allow_module_level=True)
pytest.importorskip("amqtt.broker", reason="amqtt not installed (pip install topicmatch[amqtt])")
pytest.importorskip("paho.mqtt.client", reason="paho-mqtt not installed")

# A broker in-process, on sockets (`make test` runs these with the server tests).
pytestmark = pytest.mark.amqtt

from topicmatch._reference import ReferenceSublist  # noqa: E402
from topicmatch.amqtt import Broker as FastBroker, malformed_subscribe  # noqa: E402
from amqtt_harness import WAIT, Client, Running, _recv_exact, _str, _varint, settle  # noqa: E402
from examples import examples  # noqa: E402

# The fuzz mostly waits (a connection that sent DISCONNECT is drained until
# the broker closes it, for up to 0.25 s): 20,000 packets take about 85 s at
# a few per cent of a core.  A repeat run (ci-repeat: the wheel round trip,
# which checks the wheel's build, not new inputs) sends a tenth, like every
# other randomized test there.
FUZZ_PACKETS = int(os.environ.get("TOPICMATCH_BROKER_FUZZ_PACKETS", examples(20000)))
FUZZ_SECONDS = float(os.environ.get("TOPICMATCH_BROKER_FUZZ_SECONDS", "120"))


@pytest.fixture(scope="module")
def broker():
    r = Running(FastBroker, anonymous=True)
    yield r
    r.close()


# -- packets -----------------------------------------------------------------------
def packet(first_byte, body):
    return bytes([first_byte]) + _varint(len(body)) + body


def connect_packet(client_id, clean=True, level=4, name="MQTT"):
    flags = 0x02 if clean else 0x00
    return packet(0x10, _str(name) + bytes([level, flags]) + (60).to_bytes(2, "big") + _str(client_id))


def subscribe_packet(pid, pairs, flags=0x02):
    return packet(0x80 | flags, pid.to_bytes(2, "big") + b"".join(_str(f) + bytes([q]) for f, q in pairs))


def unsubscribe_packet(pid, filters, flags=0x02):
    return packet(0xA0 | flags, pid.to_bytes(2, "big") + b"".join(_str(f) for f in filters))


def publish_packet(topic, payload, qos=0, pid=1, retain=False):
    head = 0x30 | (qos << 1) | (1 if retain else 0)
    return packet(head, _str(topic) + (pid.to_bytes(2, "big") if qos else b"") + payload)


def raw_connect(port, client_id, clean=True):
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    sock.sendall(connect_packet(client_id, clean))
    assert _recv_exact(sock, 4) == b"\x20\x02\x00\x00"      # CONNACK, accepted
    return sock


def closed_by_broker(sock, allowed=b""):
    """True when the broker closes the connection sending nothing more than
    `allowed` (no SUBACK): the answer MQTT 3.1.1 §4.8 gives a malformed
    packet.  amqtt acknowledges a PUBLISH before the broker sees it, so a
    malformed PUBLISH may get its PUBACK before the close."""
    sock.settimeout(WAIT)
    data = b""
    try:
        while True:
            chunk = sock.recv(64)
            if not chunk:
                break
            data += chunk
    except ConnectionResetError:
        pass
    finally:
        sock.close()
    return data == allowed


def run(broker, fn):
    async def call():
        return fn(broker.broker)
    return broker.call(call())


def tables(b):
    """Everything the adapter and amqtt keep per subscription: all empty
    when no session holds anything."""
    return {
        "index": len(b.routing_index),
        "holders": len(b._holders),
        "holder_by_sid": len(b._holder_by_sid),
        "rr": len(b._rr),
        "share_holders": len(b._share_holders),
        "subscriptions": {f: len(v) for f, v in b._subscriptions.items()},
    }


EMPTY = {"index": 0, "holders": 0, "holder_by_sid": 0, "rr": 0, "share_holders": 0, "subscriptions": {}}


def wait_empty(broker):
    deadline = time.monotonic() + WAIT
    while True:
        state = run(broker, tables)
        if state == EMPTY or time.monotonic() > deadline:
            return state
        time.sleep(0.05)


# -- finding 1: a requested QoS above 2 --------------------------------------------
@pytest.mark.parametrize("qos", [3, 8, 124, 0x80, 0xFF])
def test_subscribe_with_qos_above_2_closes_the_connection_and_changes_nothing(broker, qos):
    """The review's attack: `secret/#` at QoS 8 made the broker deliver
    `secret/password` to a victim subscribed only to `v/only` (sid << 2 |
    8 spilled into the session bits); QoS 124 raised KeyError in every
    `news/#` broadcast.  Now the packet closes the connection [MQTT-3.8.3-4]."""
    tag = uuid.uuid4().hex[:8]
    victim = Client(broker.port, f"{tag}-victim")
    honest = Client(broker.port, f"{tag}-honest")
    sender = Client(broker.port, f"{tag}-sender")
    try:
        assert victim.subscribe([(f"{tag}/v/only", 1)]) == [1]
        assert honest.subscribe([(f"{tag}/news/#", 0)]) == [0]
        before = run(broker, tables)
        attacker = raw_connect(broker.port, f"{tag}-attacker")
        attacker.sendall(subscribe_packet(9, [(f"{tag}/secret/#", qos), (f"{tag}/news/#", qos)]))
        assert closed_by_broker(attacker)
        assert run(broker, tables) == before
        sender.publish(f"{tag}/secret/password", "pw", 1)
        sender.publish(f"{tag}/news/today", "news", 1)
        want = {honest.id: collections.Counter({("news", 0, False): 1})}
        got = settle([victim, honest], want)
        assert got[victim.id] == collections.Counter()
        assert got[honest.id] == want[honest.id]
    finally:
        for c in (victim, honest, sender):
            c.close()


@pytest.mark.parametrize("name, pkt, allowed", [
    ("packet identifier 0", lambda t: subscribe_packet(0, [(f"{t}/a", 0)]), b""),
    ("no topic", lambda t: subscribe_packet(5, []), b""),
    ("flags 0000", lambda t: subscribe_packet(5, [(f"{t}/a", 0)], flags=0x00), b""),
    ("flags 0011", lambda t: subscribe_packet(5, [(f"{t}/a", 0)], flags=0x03), b""),
    ("unsubscribe packet identifier 0", lambda t: unsubscribe_packet(0, [f"{t}/a"]), b""),
    ("unsubscribe without topics", lambda t: unsubscribe_packet(5, []), b""),
    ("unsubscribe flags 0000", lambda t: unsubscribe_packet(5, [f"{t}/a"], flags=0x00), b""),
    ("publish QoS 1, packet identifier 0", lambda t: publish_packet(f"{t}/keep", b"x", qos=1, pid=0),
     b"\x40\x02\x00\x00"),
])
def test_malformed_packets_close_the_connection(broker, name, pkt, allowed):
    tag = uuid.uuid4().hex[:8]
    sock = raw_connect(broker.port, f"{tag}-bad")
    # A valid subscription first: the malformed packet must not touch it,
    # and the close must take it away (a clean session ends).
    sock.sendall(subscribe_packet(1, [(f"{tag}/keep", 1)]))
    assert _recv_exact(sock, 5) == b"\x90\x03\x00\x01\x01"
    sock.sendall(pkt(tag))
    # (a PUBLISH to its own filter: routed, it would come back before the close)
    assert closed_by_broker(sock, allowed), name
    assert wait_empty(broker) == EMPTY


def test_malformed_subscribe_names_the_problem():
    assert malformed_subscribe(1, [("a", 0), ("b", 2)]) is None
    assert "QoS 8" in malformed_subscribe(1, [("a", 8)])
    assert "MQTT-3.8.3-4" in malformed_subscribe(1, [("a", 3)])
    assert "packet identifier 0" in malformed_subscribe(0, [("a", 0)])
    assert "no topic filter" in malformed_subscribe(1, [])
    assert malformed_subscribe(1, [("a", True)]) is not None


def test_plugin_api_subscription_with_a_bad_qos_is_refused(broker):
    """amqtt's BrokerContext.add_subscription passes a QoS straight through:
    the adapter refuses one outside 0-2 and stores nothing."""
    tag = uuid.uuid4().hex[:8]
    c = Client(broker.port, f"{tag}-api")
    try:
        session = run(broker, lambda b: b._sessions[c.id][0])
        before = run(broker, tables)
        for q in (3, 8, -1, None, 1.0, True):
            assert broker.call(broker.broker.add_subscription((f"{tag}/x", q), session)) == 0x80
        assert run(broker, tables) == before
    finally:
        c.close()


# -- finding 1 (cont.): a colliding entry no longer removes someone else's --------
def test_attacker_disconnect_leaves_the_victim_subscribed(broker):
    tag = uuid.uuid4().hex[:8]
    victim = Client(broker.port, f"{tag}-victim")
    sender = Client(broker.port, f"{tag}-sender")
    try:
        assert victim.subscribe([(f"{tag}/t", 2)]) == [2]
        for qos in (6, 10, 0x42):            # each would have collided with a low sid
            attacker = raw_connect(broker.port, f"{tag}-att{qos}")
            attacker.sendall(subscribe_packet(3, [(f"{tag}/t", qos)]))
            assert closed_by_broker(attacker)
        sender.publish(f"{tag}/t", "still", 1)
        want = {victim.id: collections.Counter({("still", 1, False): 1})}
        assert settle([victim], want) == want
    finally:
        victim.close()
        sender.close()


# -- finding 2: the round-robin state goes with its last holder -------------------
def test_shared_group_cursors_do_not_outlive_their_subscriptions(broker):
    """The review saw `_rr` grow by 3,000 entries a round with no session
    left.  Now a group's cursor goes when its last holder unsubscribes or
    ends its session, and so does the holder."""
    tag = uuid.uuid4().hex[:8]
    sender = Client(broker.port, f"{tag}-sender")
    try:
        for rnd in range(3):
            members = [Client(broker.port, f"{tag}-m{rnd}-{i}") for i in range(2)]
            groups = [f"$share/g{rnd}-{k}/{tag}/r/+" for k in range(20)]
            for m in members:
                assert m.subscribe([(g, 1) for g in groups]) == [1] * len(groups)
            sender.publish(f"{tag}/r/x", "m", 1)
            deadline = time.monotonic() + WAIT     # 20 groups: one copy each, to one of the two
            while sum(len(m.got) for m in members) < 20 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert sum(len(m.take()) for m in members) == 20
            assert run(broker, lambda b: len(b._rr)) == 20
            members[0].unsubscribe(groups)        # UNSUBSCRIBE: the other member keeps them
            assert run(broker, lambda b: len(b._rr)) == 20
            members[1].close()                    # session end: the last holder
            members[0].close()
            state = wait_empty(broker)
            # Only the sender is left, and it holds nothing.
            assert state == EMPTY, state
    finally:
        sender.close()


# -- issue 47 D6: a PUBLISH that does not decode hides no packets -----------------
def _smuggled(tag):
    """A SUBSCRIBE, a PINGREQ and a PUBLISH, laid end to end: the payload of
    the undecodable PUBLISH.  Each one, if run, leaves a trace: a SUBACK and
    a filter in the tables, a PINGRESP, a message at the victim."""
    return (subscribe_packet(7, [(f"{tag}/smuggled/#", 1)]) + b"\xc0\x00"
            + publish_packet(f"{tag}/victim", b"smuggled", qos=0))


@pytest.mark.parametrize("name, pkt", [
    ("'#' in the topic", lambda t, inner: publish_packet(f"{t}/#", inner)),
    ("'+' in the topic", lambda t, inner: publish_packet(f"{t}/+/x", inner, qos=1, pid=4)),
    # A topic length that runs past the packet: the decoder would take the
    # packet identifier (and more) from the bytes that follow.
    ("topic longer than the packet", lambda t, inner: bytes([0x32, 4]) + (200).to_bytes(2, "big") + b"ab"
     + inner),
    # QoS 1 with no room for the packet identifier.
    ("no packet identifier", lambda t, inner: bytes([0x32, 3]) + _str("a") + inner),
    # Packets whose body amqtt would not read at all.
    ("PINGREQ with a body", lambda t, inner: packet(0xC0, inner)),
    ("DISCONNECT with a body", lambda t, inner: packet(0xE0, inner)),
    ("reserved type 15", lambda t, inner: packet(0xF0, inner)),
])
def test_undecodable_packet_closes_the_connection_before_its_bytes_run(broker, name, pkt):
    """The review's attack (issue 47 D6): amqtt's decoder raised on the
    wildcard topic before it read the payload, and its reader went on with
    the payload's bytes as packets: the smuggled SUBSCRIBE, PINGREQ and
    PUBLISH all ran, and another client received the smuggled message.
    Now 0 of them run and the connection is closed, with nothing sent back."""
    tag = uuid.uuid4().hex[:8]
    victim = Client(broker.port, f"{tag}-victim")
    try:
        assert victim.subscribe([(f"{tag}/victim", 0)]) == [0]
        before = run(broker, tables)
        attacker = raw_connect(broker.port, f"{tag}-attacker")
        attacker.sendall(pkt(tag, _smuggled(tag)))
        assert closed_by_broker(attacker), name           # no SUBACK, no PINGRESP
        assert wait_empty_but(broker, before) == before   # no smuggled filter
        # The victim's delivery path is still open: an honest message
        # arrives, and it is the only one.
        sender = Client(broker.port, f"{tag}-sender")
        try:
            sender.publish(f"{tag}/victim", "honest", 1)
            want = {victim.id: collections.Counter({("honest", 0, False): 1})}
            assert settle([victim], want) == want
        finally:
            sender.close()
    finally:
        victim.close()


def test_remaining_length_of_five_bytes_closes_the_connection(broker):
    tag = uuid.uuid4().hex[:8]
    sock = raw_connect(broker.port, f"{tag}-long")
    sock.sendall(b"\x30\xff\xff\xff\xff\x01" + b"\xc0\x00")
    assert closed_by_broker(sock)


@pytest.mark.parametrize("size", [0, 127, 128, 16_384, 2_097_152])
def test_packets_of_every_length_width_arrive_whole(broker, size):
    """The framing reader reads the remaining length itself: one to four
    bytes of it, and an empty payload, pass through intact."""
    tag = uuid.uuid4().hex[:8]
    sub, pub = Client(broker.port, f"{tag}-sub"), Client(broker.port, f"{tag}-pub")
    try:
        assert sub.subscribe([(f"{tag}/big", 1)]) == [1]
        payload = "".join(chr(97 + i % 26) for i in range(size))
        pub.publish(f"{tag}/big", payload, 1)
        want = {sub.id: collections.Counter({(payload, 1, False): 1})}
        assert settle([sub], want) == want
    finally:
        sub.close()
        pub.close()


def test_frame_reader_loses_nothing_to_a_cancelled_read():
    """amqtt reads each fixed header under wait_for (the keepalive): a
    timeout in the middle of a packet must leave the bytes read so far."""
    from topicmatch._amqtt_wire import _FrameReader
    from amqtt.adapters import StreamReaderAdapter
    from amqtt.codecs_amqtt import read_or_raise
    from amqtt.errors import NoDataError

    async def go():
        stream = asyncio.StreamReader()
        reader = _FrameReader(StreamReaderAdapter(stream), "test")
        pkt = publish_packet("a/b", b"x" * 300)
        stream.feed_data(pkt[:3])                        # type, both length bytes, half the body's first byte
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(reader.read(1), 0.05)
        stream.feed_data(pkt[3:] + b"\xc0\x00")
        got = await reader.read(1)
        while len(got) < len(pkt):
            got += await reader.read(1)
        assert got == pkt
        assert await reader.read(2) == b"\xc0\x00"     # the PINGREQ after it, framed apart
        stream.feed_eof()
        with pytest.raises(NoDataError):                   # end of file, as amqtt's reader sees it
            await read_or_raise(reader, 1)
    asyncio.run(go())


def wait_empty_but(broker, want):
    """The tables once they are back to `want` (the attacker's clean session
    has ended), or as they are at the deadline."""
    deadline = time.monotonic() + WAIT
    while True:
        state = run(broker, tables)
        if state == want or time.monotonic() > deadline:
            return state
        time.sleep(0.05)


# -- the fuzz run ------------------------------------------------------------------
TOPIC_WORDS = ["a", "b", "c", "", "$SYS", "$share", "sport", "+", "#", "x+y", "é", "a\x00b"]


def _topic(rng, wild):
    n = rng.randint(1, 4)
    words = [rng.choice(TOPIC_WORDS[:7] if not wild else TOPIC_WORDS) for _ in range(n)]
    if wild and rng.random() < 0.3:
        words[-1] = "#"
    if wild and rng.random() < 0.15:
        words = ["$share", rng.choice(["g", "h", ""])] + words
    return "/".join(words)


def grammar_packet(rng):
    """One packet a 3.1.1 client could send, fields drawn at random; a
    fifth of the QoS bytes and flags are out of range."""
    kind = rng.random()
    pid = rng.choice([rng.randint(1, 65535), 1, 0]) if rng.random() < 0.1 else rng.randint(1, 65535)
    bad = rng.random() < 0.2
    if kind < 0.4:
        pairs = [(_topic(rng, True), rng.choice([0, 1, 2]) if not bad else rng.randint(0, 255))
                 for _ in range(rng.randint(0 if bad else 1, 4))]
        return subscribe_packet(pid, pairs, flags=0x02 if not bad or rng.random() < 0.5 else rng.randint(0, 15))
    if kind < 0.6:
        return unsubscribe_packet(pid, [_topic(rng, True) for _ in range(rng.randint(0 if bad else 1, 3))],
                                  flags=0x02 if not bad or rng.random() < 0.5 else rng.randint(0, 15))
    if kind < 0.9:
        qos = rng.choice([0, 0, 1, 2, 3]) if bad else rng.choice([0, 1])
        return publish_packet(_topic(rng, bad), b"f", qos=qos, pid=pid, retain=rng.random() < 0.05)
    if kind < 0.95:
        return b"\xc0\x00"                                   # PINGREQ
    return connect_packet("again", level=rng.choice([3, 4, 5]))   # a second CONNECT [MQTT-3.1.0-2]


def mutate(rng, data):
    b = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        op = rng.random()
        if op < 0.5 and b:
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif op < 0.75 and b:
            del b[rng.randrange(len(b)):]
        else:
            b[rng.randrange(len(b) + 1):0] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
    return bytes(b)


def fuzz_connection(port, rng, client_id, clean):
    """CONNECT, then a burst of packets (about one in ten mutated); the
    number of packets the broker's socket took."""
    sent = 0
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            level = 4 if rng.random() < 0.95 else rng.choice([3, 5, 0, 255])
            sock.sendall(connect_packet(client_id, clean, level=level))
            sent += 1
            head = sock.recv(4)
            if level != 4 or len(head) < 4 or head[3] != 0:
                return sent              # refused: 3.1.1 (level 4) is the only version amqtt speaks
            for _ in range(rng.randint(1, 60)):
                pkt = grammar_packet(rng)
                if rng.random() < 0.1:
                    pkt = mutate(rng, pkt)
                sock.sendall(pkt)
                sent += 1
            if rng.random() < 0.3:
                return sent              # an abrupt close, no DISCONNECT: the session ends abnormally
            sock.sendall(b"\xe0\x00")                         # DISCONNECT
            sent += 1
            # Drain what the broker sends until it closes.  A mutated
            # packet may declare a length that swallows the DISCONNECT (the
            # broker then waits for bytes that never come): a short wait,
            # then our own close (the broker then ends the session).
            sock.settimeout(0.25)
            while sock.recv(65536):
                pass
    except OSError:
        pass                             # the broker closed a malformed connection mid-burst, or went quiet
    return sent


def honest_probe(broker, tag):
    """An honest subscriber and publisher: what arrives is exactly what the
    reference says (one copy per session at min(publish QoS, its best QoS))."""
    subs = [(f"{tag}/+/x", 1), (f"{tag}/#", 0), (f"{tag}/a/x", 2)]
    pubs = [(f"{tag}/a/x", "1", 1), (f"{tag}/b/x", "2", 1), (f"{tag}/b", "3", 0), (f"other/{tag}", "4", 1)]
    ref = ReferenceSublist("mqtt")
    for f, q in subs:
        ref.insert(f, q)
    want = collections.Counter()
    for topic, payload, q in pubs:
        hit = ref.match(topic).subs
        if hit:
            want[(payload, min(q, max(hit)), False)] += 1
    probe, sender = Client(broker.port, f"{tag}-probe"), Client(broker.port, f"{tag}-send")
    try:
        assert probe.subscribe(subs) == [q for _, q in subs]
        for topic, payload, q in pubs:
            sender.publish(topic, payload, q)
        assert settle([probe], {probe.id: want}) == {probe.id: want}
    finally:
        probe.close()
        sender.close()


def clear_retained(broker):
    topics = run(broker, lambda b: [t for t in b._retained_messages])
    if not topics:
        return
    c = Client(broker.port, f"{uuid.uuid4().hex[:8]}-clear")
    try:
        for t in topics:
            try:
                c.publish(t, "", 1, retain=True)       # an empty retained message deletes it
            except (ValueError, AssertionError):
                pass                                     # a topic paho won't send (U+0000): left to amqtt
    finally:
        c.close()


def test_broker_survives_mutated_and_generated_packets(broker):
    seed = int(os.environ.get("TOPICMATCH_BROKER_FUZZ_SEED", random.randrange(2 ** 32)))
    print(f"broker fuzz seed {seed} (TOPICMATCH_BROKER_FUZZ_SEED={seed} repeats it)")
    rng = random.Random(seed)
    ids = [f"fz{i}" for i in range(8)]
    sent, conns = 0, 0
    deadline = time.monotonic() + FUZZ_SECONDS
    while sent < FUZZ_PACKETS and time.monotonic() < deadline:
        # Now and then an id from a small pool, some persistent: sessions are
        # resumed and ended by a clean CONNECT (amqtt makes a client that
        # reconnects too quickly wait a second: the pool stays rare).
        pooled = rng.random() < 0.05
        cid = rng.choice(ids) if pooled else f"fz-{conns}"
        sent += fuzz_connection(broker.port, rng, cid, clean=not pooled or rng.random() < 0.5)
        conns += 1
    print(f"broker fuzz: {sent} packets over {conns} connections")
    assert sent >= min(FUZZ_PACKETS, 1000), f"only {sent} packets sent in {FUZZ_SECONDS} s"
    # A clean CONNECT for every pooled id ends its persistent session, and
    # empty retained messages clear what the fuzz retained (amqtt replays
    # retained messages on every CONNECT, for any filter anyone holds).
    for cid in ids:
        Client(broker.port, cid).close()
    clear_retained(broker)
    assert wait_empty(broker) == EMPTY
    # The broker is up and answers an honest client exactly, and is empty after.
    honest_probe(broker, uuid.uuid4().hex[:8])
    assert wait_empty(broker) == EMPTY

    def retained_in_step(b):
        b._retained_resync()
        return set(b._retained_ids) | b._retained_odd == set(b._retained_messages)
    assert run(broker, retained_in_step)
