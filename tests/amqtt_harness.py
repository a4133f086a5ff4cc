"""The harness of the amqtt tests: a broker in a thread of its own, a
paho client that records what it receives, and MQTT 3.1.1 packets written
byte by byte for what paho refuses to send.

Every wait has a generous deadline and asserts on what arrived, never on how
long it took.  Each broker binds port 0 and runs its own asyncio loop in a
thread (paho's clients are threaded).
"""
import asyncio
import collections
import socket
import threading
import time

import paho.mqtt.client as mqtt

WAIT = 60.0          # seconds: a deadline for a loaded machine, never a measurement
SETTLE = 0.5         # quiet time after the expected count, to catch duplicates


# -- a broker in a thread ----------------------------------------------------
class Running:
    def __init__(self, cls, anonymous=True, plugins=None):
        """plugins: more amqtt plugin entries ({dotted path: options})."""
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        config = {
            "listeners": {"default": {"type": "tcp", "bind": "127.0.0.1:0"}},
            # No $SYS plugin, no loggers: only routing is under test.  Without
            # anonymous access, sessions with a username are persistent ones
            # amqtt queues QoS>0 messages for while they are offline.
            "plugins": {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": anonymous},
                        **(plugins or {})},
        }

        async def make():
            b = cls(config)
            await b.start()
            return b
        self.broker = self.call(make())
        self.port = self.broker._servers["default"].instance.sockets[0].getsockname()[1]

    def call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(WAIT)

    def close(self):
        async def drain():
            # Connection handlers still parked on their sockets: cancel them,
            # so the loop stops with nothing pending.
            me = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not me]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        try:
            self.call(self.broker.shutdown())
            self.call(drain())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(WAIT)


# -- a paho client that records what it receives ------------------------------
class Client:
    def __init__(self, port, client_id, clean=True):
        self.id = client_id
        self.got = []                      # (payload, qos, retain)
        self.cond = threading.Condition()
        self.acks = {}                     # mid -> [reason code values]
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=clean)
        self.c.username_pw_set("user")
        self.c.on_message = self._on_message
        self.c.on_subscribe = self._on_sub
        self.c.on_unsubscribe = self._on_unsub
        self.c.on_publish = self._on_pub
        self.c.on_connect = self._on_connect
        self.connected = False
        self.c.connect("127.0.0.1", port, keepalive=60)
        self.c.loop_start()
        self._wait(lambda: self.connected, "CONNACK")

    def _on_connect(self, c, u, flags, rc, props=None):
        with self.cond:
            self.connected = True
            self.cond.notify_all()

    def _on_message(self, c, u, m):
        with self.cond:
            self.got.append((m.payload.decode("utf-8", "replace"), m.qos, bool(m.retain)))
            self.cond.notify_all()

    def _on_sub(self, c, u, mid, rcs, props=None):
        with self.cond:
            self.acks[mid] = [int(getattr(x, "value", x)) for x in rcs]
            self.cond.notify_all()

    def _on_unsub(self, c, u, mid, rcs=None, props=None):
        with self.cond:
            self.acks[mid] = []
            self.cond.notify_all()

    def _on_pub(self, c, u, mid, rc=None, props=None):
        with self.cond:
            self.acks[("pub", mid)] = True
            self.cond.notify_all()

    def _wait(self, pred, what):
        with self.cond:
            if not self.cond.wait_for(pred, WAIT):
                raise AssertionError(f"{self.id}: no {what} within {WAIT} s")

    def subscribe(self, pairs):
        """[(filter, qos)] -> granted codes, after the SUBACK."""
        _, mid = self.c.subscribe(list(pairs))
        self._wait(lambda: mid in self.acks, "SUBACK")
        return self.acks[mid]

    def unsubscribe(self, filters):
        _, mid = self.c.unsubscribe(list(filters))
        self._wait(lambda: mid in self.acks, "UNSUBACK")

    def publish(self, topic, payload, qos, retain=False):
        info = self.c.publish(topic, payload, qos=qos, retain=retain)
        if qos:   # QoS 1: the PUBACK means the broker took it
            self._wait(lambda: ("pub", info.mid) in self.acks, "PUBACK")

    def wait_count(self, n):
        self._wait(lambda: len(self.got) >= n, f"{n} messages (got {len(self.got)})")

    def take(self):
        with self.cond:
            out, self.got = self.got, []
        return out

    def close(self):
        self.c.disconnect()
        self.c.loop_stop()


def settle(clients, expected):
    """Wait until each client has its expected count, then a little more to
    catch extras; return {client_id: Counter((payload, qos, retain))}."""
    for c in clients:
        c.wait_count(sum(expected.get(c.id, collections.Counter()).values()))
    time.sleep(SETTLE)
    return {c.id: collections.Counter(c.take()) for c in clients}


def norm(d):
    return {k: v for k, v in d.items() if v}


# -- packets written by hand ----------------------------------------------------
def _varint(n):
    out = bytearray()
    while True:
        n, b = n >> 7, n & 0x7F
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _str(s):
    b = s.encode("utf-8", "surrogatepass") if isinstance(s, str) else s
    return len(b).to_bytes(2, "big") + b


def _recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        assert chunk, "broker closed the connection"
        buf += chunk
    return buf


def raw_suback(port, client_id, filters):
    """SUBSCRIBE over a bare socket (paho refuses to send invalid filters);
    the SUBACK's return codes."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as sock:
        body = _str("MQTT") + bytes([4, 0x82]) + (60).to_bytes(2, "big") + _str(client_id) + _str("user")
        sock.sendall(b"\x10" + _varint(len(body)) + body)
        assert _recv_exact(sock, 4)[:2] == b"\x20\x02"            # CONNACK
        body = (7).to_bytes(2, "big") + b"".join(_str(f) + b"\x00" for f in filters)
        sock.sendall(b"\x82" + _varint(len(body)) + body)
        head = _recv_exact(sock, 2)
        assert head[0] == 0x90, head
        rest = _recv_exact(sock, head[1])
        sock.sendall(b"\xe0\x00")                                 # DISCONNECT
        return list(rest[2:])
