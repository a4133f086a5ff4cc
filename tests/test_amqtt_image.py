"""topicmatch.amqtt.Broker started from a routing image (the RoutingImage plugin
entry, docs/embedding.md "One image, many processes"): static routes per
client id, written by save_routing_image and mapped with Sublist.open,
checked with real paho-mqtt clients on loopback against a model built on
topicmatch._reference; and every bad configuration refused on start with the
path and the problem.  The harness is tests/amqtt_harness.py.
"""
import asyncio
import collections
import os
import sys
import uuid

import pytest

if sys.version_info < (3, 10):
    pytest.skip("amqtt needs Python >= 3.10 (topicmatch[amqtt] installs it only there)", allow_module_level=True)
amqtt_broker = pytest.importorskip("amqtt.broker", reason="amqtt not installed (pip install topicmatch[amqtt])")
pytest.importorskip("paho.mqtt.client", reason="paho-mqtt not installed")

import topicmatch  # noqa: E402
from topicmatch._reference import subject_matches  # noqa: E402
from topicmatch.amqtt import (  # noqa: E402
    ROUTING_IMAGE_VERSION, Broker, RoutingImageError, save_routing_image,
)
from amqtt_harness import Client, Running, norm, settle  # noqa: E402

pytestmark = pytest.mark.amqtt          # serves amqtt's broker in-process

PLUGIN = "topicmatch.amqtt.RoutingImage"
ANON = {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": False}}


def expected(routes, held, pubs, online):
    """{client: Counter((payload, qos, retain))}: one copy per session at
    min(publish QoS, the highest QoS among its matching filters), static
    routes (routes) and its own subscriptions (held) together."""
    exp = collections.defaultdict(collections.Counter)
    for topic, payload, qos in pubs:
        for cid in online:
            qs = [q for f, q in [*routes.get(cid, []), *held.get(cid, {}).items()] if subject_matches(f, topic, "mqtt")]
            if qs:
                exp[cid][(payload, min(qos, max(qs)), False)] += 1
    return exp


def test_static_routes_from_an_image_reach_their_clients(tmp_path):
    """Clients named in the image get their static routes without
    SUBSCRIBE, de-duplicated with their own subscriptions (one copy, highest
    QoS); SUBSCRIBEs go to the opened index's live part; a persistent
    session queues QoS 1 static traffic while offline; UNSUBSCRIBE leaves a
    static route alone; the image's own table routes nothing."""
    tag = uuid.uuid4().hex[:8]
    dev, ops, other = f"{tag}-dev/1", f"{tag}-ops", f"{tag}-other"     # a '/' in a client id is fine
    routes = {
        dev: [("dev/1/cmd/#", 1), ("fleet/+/all", 0)],
        ops: [("dev/+/cmd/#", 0), ("dev/+/alarm", 1), ("fleet/#", 1)],
        f"{tag}-never": [("#", 1)],                   # never connects: routes to no one
    }
    path = tmp_path / "routes.img"
    assert save_routing_image(path, routes) == 6
    running = Running(Broker, anonymous=False, plugins={PLUGIN: {"image": str(path)}})
    clients = []
    try:
        index = running.broker.routing_index
        assert index.stats()["mapped_bytes"] == os.path.getsize(path)    # mapped, not rebuilt
        assert index.stats()["live_subscriptions"] == 0
        in_image = len(index)                 # the marker, one entry per client, the routes
        assert in_image == 1 + 3 + 6
        d = Client(running.port, dev, clean=False)        # persistent: queues while offline
        o = Client(running.port, ops)
        x = Client(running.port, other)                   # not in the image
        pub = Client(running.port, f"{tag}-pub")
        clients = [d, o, x, pub]
        held = {ops: {"dev/1/cmd/reboot": 1}, other: {"fleet/#": 0}}
        for c in (o, x):
            for f, q in held[c.id].items():
                assert c.subscribe([(f, q)]) == [q]
        # SUBSCRIBE went to the live part (fleet/# is in the image too: its
        # image entry moves there whole, so count the index, not the part).
        assert len(index) == in_image + 2 and index.stats()["live_subscriptions"] >= 2
        pubs = [("dev/1/cmd/reboot", "p1", 1), ("dev/2/cmd/x", "p2", 1), ("dev/2/alarm", "p3", 0),
                ("fleet/eu/all", "p4", 1), ("fleet/eu/all", "p5", 0), ("nothing/here", "p6", 1)]
        for t, p, q in pubs:
            pub.publish(t, p, q)
        online = [dev, ops, other]
        got = settle([d, o, x], expected(routes, held, pubs, online))
        assert norm(got) == norm(expected(routes, held, pubs, online))
        assert got[ops][("p1", 1, False)] == 1            # static QoS 0 + own QoS 1: one copy at 1

        # UNSUBSCRIBE from a static filter: the route stays (it is the image's).
        o.unsubscribe(["dev/+/cmd/#", "dev/1/cmd/reboot"])
        held[ops] = {}
        assert len(index) == in_image + 1
        # The image's own table is no route, even for a topic that names it.
        assert running.broker.route("$topicmatch/amqtt/routing-image") == []
        assert running.broker.route("$topicmatch/amqtt/client/" + dev.encode().hex()) == []

        # dev goes offline: its persistent session queues the QoS 1 copy.
        d.close()
        pubs = [("dev/1/cmd/stop", "q1", 1), ("dev/1/cmd/stop", "q2", 0), ("dev/3/cmd/a", "q3", 1)]
        for t, p, q in pubs:
            pub.publish(t, p, q)
        got = settle([o, x], expected(routes, held, pubs, [ops, other]))
        assert norm(got) == norm(expected(routes, held, pubs, [ops, other]))
        d = Client(running.port, dev, clean=False)
        clients[0] = d
        queued = {dev: collections.Counter({("q1", 1, True): 1})}   # amqtt sets retain on a queued copy
        assert settle([d], queued) == queued
    finally:
        for c in clients:
            c.close()
        running.close()


def test_a_new_image_is_read_on_the_next_start(tmp_path):
    """start() opens the file again: save a new image over the path (an
    atomic rename) and restart, and the new routes are the ones served."""
    path = tmp_path / "routes.img"
    save_routing_image(path, {"a": [("x/+", 1)]})

    async def run():
        b = Broker({"listeners": {"default": {"type": "tcp", "bind": "127.0.0.1:0"}},
                    "plugins": {**ANON, PLUGIN: {"image": str(path), "verify": False}}})
        await b.start()
        first = len(b.routing_index)
        await b.shutdown()
        save_routing_image(path, {"a": [("x/+", 1)], "b": [("y", 0), ("z/#", 2)]})
        await b.start()
        second = len(b.routing_index)
        await b.shutdown()
        return first, second
    assert asyncio.run(run()) == (1 + 2, 1 + 2 + 3)        # the marker, one entry per client, the routes


# -- bad configuration --------------------------------------------------------
def _start(options, cls=Broker):
    """Construct and start a broker with the RoutingImage entry; return the
    exception it raised (None if it started: it is shut down again)."""
    async def run():
        try:
            b = cls({"listeners": {"default": {"type": "tcp", "bind": "127.0.0.1:0"}},
                     "plugins": {**ANON, PLUGIN: options}})
            await b.start()
        except Exception as e:              # noqa: BLE001 -- the error is what is tested
            return e
        await b.shutdown()
        return None
    return asyncio.run(run())


def _bad_files(tmp_path):
    good = tmp_path / "good.img"
    save_routing_image(good, {"a": [("x/+", 1), ("y/#", 0)]})
    data = good.read_bytes()
    files = {}

    def put(name, content):
        p = tmp_path / name
        p.write_bytes(content)
        files[name] = p
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    put("flipped.img", bytes(flipped))
    put("truncated.img", data[: len(data) // 2])
    put("empty.img", b"")
    put("text.img", b"listeners: {}\n" * 10)
    nats = topicmatch.Sublist("nats")
    nats.insert("x.*", 1)
    nats.save(tmp_path / "nats.img")
    files["nats.img"] = tmp_path / "nats.img"
    plain = topicmatch.Sublist("mqtt")
    plain.insert("x/+", 1)
    plain.save(tmp_path / "plain.img")                 # MQTT, but no routing table
    files["plain.img"] = tmp_path / "plain.img"
    future = topicmatch.Sublist("mqtt")
    future.insert("$topicmatch/amqtt/routing-image", (ROUTING_IMAGE_VERSION + 1) << 2 | 3)
    future.save(tmp_path / "future.img")
    files["future.img"] = tmp_path / "future.img"
    return good, files


BAD = {  # file -> what the message must say
    "missing.img": "no such file",
    "flipped.img": "corrupt topicmatch index",
    "truncated.img": "corrupt topicmatch index",
    "empty.img": "empty file",
    "text.img": "not a topicmatch image",
    "nats.img": "a 'nats' index; the broker routes MQTT topics",
    "plain.img": "an MQTT index without the routing table",
    "future.img": f"routing image layout {ROUTING_IMAGE_VERSION + 1}; this topicmatch reads layout {ROUTING_IMAGE_VERSION}",
}


def test_bad_files_are_refused_on_start_with_the_path_and_the_problem(tmp_path):
    good, files = _bad_files(tmp_path)
    assert _start({"image": str(good)}) is None
    for name, why in BAD.items():
        path = str(files.get(name, tmp_path / name))
        for verify in (True, False):
            if name == "flipped.img" and not verify:
                continue           # verify=False trusts the body: that is what verify=True is for
            e = _start({"image": path, "verify": verify})
            assert isinstance(e, RoutingImageError), (name, verify, e)
            # Under the package's base error (issue 48 item 4), and a ValueError as before.
            assert isinstance(e, topicmatch.TopicmatchError) and isinstance(e, ValueError)
            msg = str(e)
            assert repr(path) in msg and why in msg, (name, verify, msg)
    # A folder is no file: refused at once, as Sublist.open refuses it
    e = _start({"image": str(tmp_path)})
    assert isinstance(e, RoutingImageError) and repr(str(tmp_path)) in str(e), e
    assert "a directory, not a topicmatch index file" in str(e), e


def test_bad_options_are_refused_when_the_broker_is_made(tmp_path):
    cases = [
        ({}, "'image' must be the path of a routing image, not None"),
        ({"image": ""}, "'image' must be the path of a routing image, not ''"),
        ({"image": 5}, "'image' must be the path of a routing image, not 5"),
        ({"image": "r.img", "verify": "yes"}, "('r.img'): 'verify' must be true or false, not 'yes'"),
    ]
    for options, why in cases:
        e = _start(options)
        assert isinstance(e, RoutingImageError) and why in str(e), (options, e)
        assert isinstance(e, topicmatch.TopicmatchError) and isinstance(e, ValueError)
    # A misspelt option: amqtt's own strict configuration check refuses it.
    e = _start({"image": "r.img", "verfy": True})
    assert type(e).__name__ == "PluginLoadError" and "verfy" in str(e.__cause__), e
    # Stock amqtt's broker cannot use the entry: refused, not ignored.
    e = _start({"image": "r.img"}, cls=amqtt_broker.Broker)
    assert type(e).__name__ == "PluginInitError"
    assert "routes through topicmatch.amqtt.Broker, not Broker" in str(e.__cause__), e.__cause__


def test_save_routing_image_refuses_what_cannot_be_a_static_route(tmp_path):
    path = tmp_path / "r.img"
    cases = [
        ({"": [("a", 0)]}, "a static route needs a non-empty client id"),
        ({"c": [("a/#/b", 0)]}, "is no valid MQTT filter"),
        ({"c": [("", 0)]}, "is no valid MQTT filter"),
        ({"c": [("$share/g/a", 0)]}, "shared subscriptions are not static routes"),
        ({"c": [("a", 3)]}, "QoS 3 is not 0, 1 or 2"),
        ({"c": [("a", True)]}, "QoS True is not 0, 1 or 2"),
        ({"c": ["a"]}, "is no (filter, QoS) pair"),
    ]
    for routes, why in cases:
        with pytest.raises(ValueError, match=None) as e:
            save_routing_image(path, routes)
        assert why in str(e.value), (routes, e.value)
        assert not path.exists()              # nothing written
