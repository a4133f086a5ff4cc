"""Stock amqtt vs topicmatch.amqtt.Broker: publish throughput and
publish-to-delivery latency at growing subscription counts, with real
paho-mqtt clients on loopback.  A benchmark, not a test (bench/README.md).

    python bench/bench_amqtt.py                       # 100, 1k, 10k, 100k subscriptions
    python bench/bench_amqtt.py --counts 1000,10000 --publishes 2000

Workload: N distinct filters spread round-robin over --sessions subscriber
sessions (one paho client each), a third each of the shapes dev/<i>/+/temp,
dev/<i>/# and dev/<i>/status, the shape of per-device telemetry.  Every
publish (QoS 0, 64-byte payload) is on a topic that exactly one filter
matches, chosen at random, so each broker delivers exactly one copy of it.

Each (broker, N) runs in a fresh broker process (the broker is single-threaded
asyncio Python; the clients run in this process):
  throughput  --publishes messages sent back to back; delivered / (last
              delivery - first send).  Stock amqtt at 100k gets --stock-cap
              publishes only: it tests every filter per publish and would
              take minutes.
  latency     then messages paced at --lat-rate (200/s), or at half the
              measured throughput when that is lower (a saturated broker's
              latency is just its queue); p50/p99 of delivery time - send time.
The largest N sustaining 1,000 publishes/s is the largest tested N whose
throughput is at least 1,000/s, and the crossing interpolated (linearly in
time per publish) up to the next tested N that falls short.
"""
import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import sys
import threading
import time

import paho.mqtt.client as mqtt

WAIT = 300.0


# -- the broker process ---------------------------------------------------------
def _serve(kind, conn):
    if kind == "topicmatch":
        from topicmatch.amqtt import Broker
    else:
        from amqtt.broker import Broker
    import logging
    logging.disable(logging.WARNING)     # amqtt logs every dropped connection

    async def main():
        b = Broker({"listeners": {"default": {"type": "tcp", "bind": "127.0.0.1:0"}},
                    "plugins": {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}}})
        await b.start()
        conn.send(b._servers["default"].instance.sockets[0].getsockname()[1])
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)   # until told to stop
        await b.shutdown()
    asyncio.run(main())


# -- clients --------------------------------------------------------------------
class Sink:
    """What all subscriber clients received: (seq, latency ns)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.got = []
        self.last = 0

    def on_message(self, c, u, m):
        now = time.monotonic_ns()
        seq, sent = m.payload[:40].split(b":")[:2]
        with self.cond:
            self.got.append((int(seq), now - int(sent)))
            self.last = now
            self.cond.notify_all()

    def wait(self, n, timeout):
        with self.cond:
            self.cond.wait_for(lambda: len(self.got) >= n, timeout)
            return len(self.got)

    def reset(self):
        with self.cond:
            self.got, self.last = [], 0


def connect(port, cid, on_message=None):
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid, clean_session=True)
    ev = threading.Event()
    c.on_connect = lambda *a: ev.set()
    if on_message:
        c.on_message = on_message
    c.connect("127.0.0.1", port, keepalive=600)
    c.loop_start()
    if not ev.wait(WAIT):
        raise RuntimeError(f"{cid}: no CONNACK")
    return c


def subscribe_all(client, filters, batch=500):
    pending = set()
    done = threading.Condition()

    def on_sub(c, u, mid, rcs, props=None):
        with done:
            pending.discard(mid)
            done.notify_all()
    client.on_subscribe = on_sub
    for i in range(0, len(filters), batch):
        with done:
            _, mid = client.subscribe([(f, 0) for f in filters[i:i + batch]])
            pending.add(mid)
    with done:
        if not done.wait_for(lambda: not pending, WAIT):
            raise RuntimeError("SUBACKs missing")


def workload(n):
    """(filters, topics): topics[i] is matched by filters[i] and by no other."""
    filters = [(f"dev/{i}/+/temp", f"dev/{i}/status", f"dev/{i}/#")[i % 3] for i in range(n)]
    topics = [(f"dev/{i}/room/temp", f"dev/{i}/status", f"dev/{i}/a/b")[i % 3] for i in range(n)]
    return filters, topics


def payload(seq):
    head = f"{seq}:{time.monotonic_ns()}:".encode()
    return head + b"x" * (64 - len(head))


def run_one(kind, n, sessions, publishes, rng, lat_rate):
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_serve, args=(kind, child), daemon=True)
    proc.start()
    port = parent.recv()
    sink = Sink()
    clients = []
    try:
        filters, topics = workload(n)
        t0 = time.monotonic()
        subs = [connect(port, f"{kind}-s{j}", sink.on_message) for j in range(min(sessions, n))]
        clients += subs
        for j, c in enumerate(subs):
            subscribe_all(c, filters[j::len(subs)])
        setup = time.monotonic() - t0
        pub = connect(port, f"{kind}-pub")
        clients.append(pub)

        # throughput: back to back
        picks = [rng.randrange(n) for _ in range(publishes)]
        sink.reset()
        first = time.monotonic_ns()
        for seq, i in enumerate(picks):
            pub.publish(topics[i], payload(seq), qos=0)
        got = sink.wait(publishes, WAIT)
        elapsed = (sink.last - first) / 1e9 if got else float("inf")
        tput = got / elapsed if got else 0.0

        # latency: paced
        rate = min(lat_rate, tput / 2) if tput else 1.0
        count = max(10, min(publishes, int(rate * 2)))
        sink.reset()
        time.sleep(0.5)
        start = time.monotonic()
        for seq in range(count):
            target = start + seq / rate
            delay = target - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            pub.publish(topics[rng.randrange(n)], payload(seq), qos=0)
        got2 = sink.wait(count, WAIT)
        lat = sorted(x for _, x in sink.got)
        p50 = lat[len(lat) // 2] / 1e6 if lat else float("nan")
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] / 1e6 if lat else float("nan")
        return {"broker": kind, "subs": n, "sessions": len(subs), "setup_s": round(setup, 1),
                "publishes": publishes, "delivered": got, "throughput": round(tput, 1),
                "lat_rate": round(rate, 1), "lat_n": got2, "p50_ms": round(p50, 2), "p99_ms": round(p99, 2)}
    finally:
        for c in clients:
            c.disconnect()
            c.loop_stop()
        parent.send("stop")
        proc.join(30)
        if proc.is_alive():
            proc.terminate()


def retained_lookup(n, reps=20):
    """Microseconds to find the retained topics a new subscription matches,
    with n retained topics (the workload's topics): stock amqtt tests every
    retained topic; topicmatch asks the retained index (reverse_match), or looks
    a filter without wildcards up in the dict.  In process, no clients."""
    from amqtt.broker import Broker as Stock
    from topicmatch.amqtt import Broker as Fast

    async def build():
        cfg = {"listeners": {"default": {"type": "tcp", "bind": "127.0.0.1:0"}}, "plugins": {}}
        fast, stock = Fast(cfg), Stock(cfg)
        for t in workload(n)[1]:
            await fast.retain_message(None, t, b"x", 0)
        stock._retained_messages.update(fast._retained_messages)
        return fast, stock
    fast, stock = asyncio.run(build())
    out = []
    for f in ("dev/7/status", "dev/7/#", "dev/+/status", "+/+/+/temp"):
        t0 = time.perf_counter()
        for _ in range(reps):
            a = [t for t in stock._retained_messages if stock._matches(t, f)]
        t1 = time.perf_counter()
        for _ in range(reps):
            b = fast.retained_for(f)
        t2 = time.perf_counter()
        for _ in range(reps):
            c = fast.retained_index.reverse_match(f)
        t3 = time.perf_counter()
        assert sorted(a) == sorted(b) and len(c) == len(b), f
        out.append((f, len(b), (t1 - t0) / reps * 1e6, (t2 - t1) / reps * 1e6, (t3 - t2) / reps * 1e6))
    return out


def sustained(rows, kind):
    """The largest tested count with throughput >= 1,000/s and, when a larger
    tested count falls short, the crossing interpolated linearly in time per
    publish between the two (stock amqtt's cost is a + b*N)."""
    mine = sorted((r["subs"], r["throughput"]) for r in rows if r["broker"] == kind)
    ok = [(n, t) for n, t in mine if t >= 1000]
    if not ok:
        return "none of the tested counts"
    n0, t0 = ok[-1]
    above = [(n, t) for n, t in mine if n > n0 and t < 1000]
    if not above:
        return f"{n0:,} subscriptions (the largest tested)"
    n1, t1 = above[0]
    s0, s1 = 1 / t0, 1 / t1
    cross = n0 + (1e-3 - s0) * (n1 - n0) / (s1 - s0)
    return f"{n0:,} subscriptions measured, about {cross:,.0f} interpolated ({t1:,.0f}/s at {n1:,})"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--counts", default="100,1000,10000,100000")
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--publishes", type=int, default=3000)
    ap.add_argument("--stock-cap", type=int, default=30,
                    help="publishes for stock amqtt at >= 100k subscriptions (about 2/s there)")
    ap.add_argument("--lat-rate", type=float, default=200.0,
                    help="publishes/s of the latency run (lower when half the throughput is lower)")
    ap.add_argument("--brokers", default="amqtt,topicmatch")
    ap.add_argument("--retained", type=int, default=100000,
                    help="retained topics for the retained-lookup comparison (0: skip it)")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    import amqtt
    print(f"amqtt {amqtt.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs; "
          f"{a.sessions} subscriber sessions, QoS 0, 64-byte payloads", flush=True)
    rows = []
    hdr = f"{'broker':8} {'subs':>7} {'msgs/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'at /s':>6} {'setup s':>7}"
    print(hdr, flush=True)
    for n in [int(x) for x in a.counts.split(",")]:
        for kind in a.brokers.split(","):
            pubs = a.publishes
            if kind == "amqtt":
                pubs = min(pubs, max(a.stock_cap, int(3e6 / max(n, 1))))  # a few seconds each
            r = run_one(kind, n, a.sessions, pubs, random.Random(a.seed), a.lat_rate)
            rows.append(r)
            print(f"{kind:8} {n:>7} {r['throughput']:>9.1f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} "
                  f"{r['lat_rate']:>6.0f} {r['setup_s']:>7.1f}"
                  + ("" if r["delivered"] == r["publishes"] else f"  (only {r['delivered']}/{r['publishes']} delivered)"),
                  flush=True)
    print()
    for kind in a.brokers.split(","):
        print(f"{kind}: sustains 1,000 publishes/s up to {sustained(rows, kind)}")
    if a.retained:
        print()
        print(f"retained lookup for a new subscription, {a.retained:,} retained topics (us per lookup)")
        print(f"{'filter':14} {'found':>6} {'stock scan':>11} {'topicmatch':>9} {'reverse_match':>14}")
        for f, k, us_stock, us_fast, us_rm in retained_lookup(a.retained):
            print(f"{f:14} {k:>6} {us_stock:>11.1f} {us_fast:>9.1f} {us_rm:>14.1f}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
