"""Differential tests: the real brokers on loopback against topicmatch.

nats-server and mosquitto are started once per session (tests/brokers.py).
Each test subscribes a few hundred seeded, generated filters, publishes a few
hundred literal subjects, collects what the broker delivered, and compares it
with what ``topicmatch.Sublist`` (the C engine) -- and, as a cross-check of the
harness, the pure-Python ``ReferenceSublist`` -- match for the same subject.
A second pair of tests checks that the broker refuses a filter exactly when
``is_valid_filter`` says it is invalid.

Known broker deviations (topicmatch follows the specification; the generators
skip these cases explicitly, see the comments where they are skipped):
  - mosquitto 2.0 never delivers to a shared subscription whose filter starts
    with '$' ('$share/g/$SYS/#', '$share/g/$x/a');
  - mosquitto refuses client publishes to '$SYS/...' topics;
  - mosquitto 2.0 is lax on the '$share' syntax (see MOSQUITTO_SHARE_SYNTAX).
"""
from __future__ import annotations

import importlib.util
import random
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

try:
    from . import brokers
except ImportError:
    import brokers

# the session fixtures that start the brokers
mosquitto_server = brokers.mosquitto_server
nats_server = brokers.nats_server

pytestmark = pytest.mark.brokers

SEED = 20240611
N_SUBS = 300
N_PUBS = 300
SRC = Path(__file__).resolve().parent.parent / "src"


# --------------------------------------------------------------------------
# implementations under test


def _import_topicmatch():
    try:
        import topicmatch
    except ModuleNotFoundError as e:
        if e.name != "topicmatch":
            raise
        sys.path.insert(0, str(SRC))  # not installed: use the source tree
        import topicmatch
    return topicmatch


def _load_reference():
    try:
        from topicmatch import _reference
        return _reference
    except ImportError:
        # topicmatch/__init__ needs the compiled core; the reference does not
        spec = importlib.util.spec_from_file_location(
            "topicmatch_reference_standalone", SRC / "topicmatch" / "_reference.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod


@pytest.fixture(params=["engine", "reference"])
def impl(request):
    if request.param == "engine":
        topicmatch = _import_topicmatch()
        if not hasattr(topicmatch, "Sublist"):
            pytest.fail(f"topicmatch.Sublist missing (engine not built?) in {topicmatch.__path__}")
        return SimpleNamespace(name="engine", Sublist=topicmatch.Sublist,
                               is_valid_filter=topicmatch.is_valid_filter)
    ref = _load_reference()
    return SimpleNamespace(name="reference", Sublist=ref.ReferenceSublist,
                           is_valid_filter=ref.is_valid_filter)


def _report(problems, what):
    if problems:
        shown = "\n  ".join(problems[:40])
        more = f"\n  ... and {len(problems) - 40} more" if len(problems) > 40 else ""
        pytest.fail(f"{len(problems)} disagreement(s) {what}:\n  {shown}{more}", pytrace=False)


@dataclass
class Run:
    """What was subscribed, what was published, what the broker delivered."""
    subs: list = field(default_factory=list)      # (sub_id, filter as sent, queue/group, inner filter)
    pubs: list = field(default_factory=list)      # subjects / topics, index = payload
    delivered: dict = field(default_factory=lambda: defaultdict(list))  # pub index -> [sub_id]


def _compare(run: Run, sl, dialect: str) -> list:
    """Per publish: plain ids == r.subs; delivered groups == r.groups, and the
    member the broker picked is one of topicmatch's members for that group."""
    group_of = {sid: (q if dialect == "nats" else (q, inner))
                for sid, _, q, inner in run.subs if q is not None}
    problems = []
    for i, subject in enumerate(run.pubs):
        r = sl.match(subject)
        got = run.delivered.get(i, [])
        plain = {s for s in got if s not in group_of}
        if plain != set(r.subs) or len(r.subs) != len(set(r.subs)):
            problems.append(f"{subject!r}: broker delivered to plain subs {sorted(plain)}, "
                            f"topicmatch .subs={sorted(r.subs)}; "
                            f"broker-only {_filters(run, plain - set(r.subs))}, "
                            f"topicmatch-only {_filters(run, set(r.subs) - plain)}")
        picked = defaultdict(list)
        for s in got:
            if s in group_of:
                picked[group_of[s]].append(s)
        expected = {}
        for q, f, members in r.groups:
            key = q if dialect == "nats" else (q, f)
            if dialect == "nats" and f is not None:
                problems.append(f"{subject!r}: NATS group {q!r} has filter {f!r}, expected None")
            if key in expected:
                problems.append(f"{subject!r}: topicmatch lists group {key!r} twice in .groups")
            expected[key] = set(members)
        if set(picked) != set(expected):
            problems.append(f"{subject!r}: broker delivered to groups {sorted(picked)}, "
                            f"topicmatch .groups={sorted(expected)}")
        for key, sids in picked.items():
            if len(sids) != 1:
                problems.append(f"{subject!r}: broker delivered group {key!r} to {sids} (expected one)")
            if key in expected and not set(sids) <= expected[key]:
                problems.append(f"{subject!r}: broker picked {sids} {_filters(run, sids)} in group "
                                f"{key!r}, not among topicmatch's members {sorted(expected[key])}")
    return problems


def _filters(run, sids):
    by_id = {sid: (f, q) for sid, f, q, _ in run.subs}
    return [by_id[s] for s in sorted(sids)]


# --------------------------------------------------------------------------
# NATS

NATS_TOKENS = ["a", "b", "c", "d"]
# nats-server takes these as literal tokens (only a whole-token '*' / '>' is a wildcard)
NATS_ODD_TOKENS = ["a*b", "x>", ">x", "*a", "$SYS", "$x"]
NATS_QUEUES = ["q1", "q2", "q3"]
NATS_SENTINEL = "topicmatch_sentinel"


def _nats_token(rng):
    return rng.choice(NATS_ODD_TOKENS) if rng.random() < 0.06 else rng.choice(NATS_TOKENS)


def _nats_subject(rng):
    return ".".join(_nats_token(rng) for _ in range(rng.randint(1, 5)))


def _nats_filter(rng):
    toks = ["*" if rng.random() < 0.3 else _nats_token(rng) for _ in range(rng.randint(1, 4))]
    if rng.random() < 0.3:
        toks.append(">")
    return ".".join(toks)


def _nats_instance(rng, f):
    """A subject that filter f matches."""
    out = []
    for t in f.split("."):
        if t == "*":
            out.append(_nats_token(rng))
        elif t == ">":
            out.extend(_nats_token(rng) for _ in range(rng.randint(1, 2)))
        else:
            out.append(t)
    return ".".join(out)


@pytest.fixture(scope="module")
def nats_run(nats_server):
    rng = random.Random(SEED)
    run = Run()
    filters = ["*", ">", "a.>", "a.*", "*.*", "a", "a.b", "$SYS.>", "a*b.>", "x>"]
    filters += [_nats_filter(rng) for _ in range(N_SUBS - len(filters))]
    for sid, f in enumerate(filters, start=1):
        q = rng.choice(NATS_QUEUES) if rng.random() < 0.3 else None
        run.subs.append((sid, f, q, f))
    # one queue group with a member on several overlapping filters
    for f in ["a.>", "a.*", ">", "*.b", "a.b", "*"]:
        sid = len(run.subs) + 1
        run.subs.append((sid, f, "workers", f))
    run.pubs = [_nats_subject(rng) if rng.random() < 0.4 else _nats_instance(rng, rng.choice(filters))
                for _ in range(N_PUBS)]
    run.pubs += ["a", "a.b", "a*b.c", "x>", "$SYS.a", "b.c.d.a.b"]

    sentinel_sid = 10_000_000
    conns = [brokers.NatsConn(nats_server, f"sub{k}") for k in range(3)]
    pub = brokers.NatsConn(nats_server, "pub")
    try:
        by_conn = defaultdict(list)
        for sid, f, q, _ in run.subs:
            by_conn[sid % len(conns)].append(f"SUB {f} {q} {sid}" if q else f"SUB {f} {sid}")
        for k, c in enumerate(conns):
            c.send(*by_conn[k], f"SUB {NATS_SENTINEL} {sentinel_sid}")
            errs = c.flush()
            assert not errs, f"nats-server refused a generated (valid) filter: {errs}"
        pub.send(*(f"PUB {s} {len(str(i))}\r\n{i}" for i, s in enumerate(run.pubs)),
                 f"PUB {NATS_SENTINEL} 0\r\n")
        assert pub.flush() == []
        for c in conns:
            # the publisher's PONG means every PUB was processed and its MSGs queued
            # to the subscriber connections, ahead of the PONG answering this PING
            seen_sentinel = False
            for ev in c.flush():
                assert ev[0] == "MSG", f"unexpected {ev}"
                _, subject, sid, _, payload = ev
                if subject == NATS_SENTINEL:  # also matched by '>' and '*' filters
                    seen_sentinel |= sid == sentinel_sid
                    continue
                assert not seen_sentinel, "a delivery after the sentinel"
                i = int(payload)
                assert subject == run.pubs[i], (subject, i)
                run.delivered[i].append(sid)
            assert seen_sentinel
    finally:
        for c in conns + [pub]:
            c.close()
    for i, sids in run.delivered.items():
        dup = [s for s, n in Counter(sids).items() if n > 1]
        assert not dup, f"nats-server delivered {run.pubs[i]!r} twice to sid(s) {dup}"
    assert sum(map(len, run.delivered.values())) > N_PUBS, "too few deliveries: generator broken?"
    return run


def test_nats_deliveries(impl, nats_run):
    sl = impl.Sublist("nats")
    problems = []
    for sid, f, q, _ in nats_run.subs:
        if not impl.is_valid_filter(f, "nats"):
            problems.append(f"nats-server accepted filter {f!r}, is_valid_filter says invalid")
        sl.insert(f, sid, queue=q)
    problems += _compare(nats_run, sl, "nats")
    _report(problems, f"between nats-server and topicmatch {impl.name}")


NATS_PROBES = [
    "a..b", "a.>.b", ".a", "a.", ".", "..", ">.a", ">.>", "*.>.a", "a.>.*", "a.>.",
    "*..a", "a.b.>.c", "a*b", "x>", ">x", "*a", "$SYS", "$SYS.>", "a.*.>", ">", "*",
    "*.*", "a.**", "a.>>", "a.b*.c", "a.*b", "$", "$.*",
]


@pytest.fixture(scope="module")
def nats_probes(nats_server):
    """{filter: refused?} as nats-server decides (-ERR 'Invalid Subject')."""
    rng = random.Random(SEED + 1)
    probes = list(NATS_PROBES)
    for _ in range(300):
        # no whitespace and no empty filter: those break the protocol line itself
        probes.append("".join(rng.choice("ab.*>$") for _ in range(rng.randint(1, 7))))
    probes = list(dict.fromkeys(probes))
    conn = brokers.NatsConn(nats_server, "probe")
    try:
        # every probe gets its own sid: a SUB reusing a live sid is ignored unchecked
        lines = []
        for sid, f in enumerate(probes, start=1):
            lines += [f"SUB {f} {sid}", "PING"]
        conn.send(*lines)
        result = {}
        for f in probes:
            errs = []
            while True:
                ev = conn.read_event()
                if ev[0] == "PONG":
                    break
                assert ev[0] == "ERR", f"probe {f!r}: unexpected {ev}"
                errs.append(ev[1])
            assert errs in ([], ["Invalid Subject"]), f"probe {f!r}: {errs}"
            result[f] = bool(errs)
    finally:
        conn.close()
    assert any(result.values()) and not all(result.values())
    return result


def test_nats_invalid_filters(impl, nats_probes):
    problems = [f"{f!r}: nats-server {'refuses' if refused else 'accepts'} it, "
                f"is_valid_filter(..., 'nats') = {impl.is_valid_filter(f, 'nats')}"
                for f, refused in nats_probes.items()
                if refused == impl.is_valid_filter(f, "nats")]
    _report(problems, f"between nats-server and topicmatch {impl.name} on filter validity")


# --------------------------------------------------------------------------
# MQTT

MQTT_LEVELS = ["a", "b", "c", ""]  # '' = empty level: 'a//b', '/a', 'a/'
MQTT_GROUPS = ["g1", "g2"]
MQTT_SENTINEL = "topicmatch_sentinel"
MQTT_SENTINEL_ID = 268_435_455  # largest Subscription Identifier
N_MQTT_CLIENTS = 4


def _mqtt_level(rng):
    return rng.choices(MQTT_LEVELS, weights=[3, 3, 2, 2])[0]


def _mqtt_first(rng):
    # '$x' topics: filters starting with '+'/'#' must not match them.
    # '$SYS' topics are never generated: mosquitto refuses client publishes to $SYS/...
    return "$x" if rng.random() < 0.12 else _mqtt_level(rng)


def _mqtt_topic(rng):
    while True:
        t = "/".join([_mqtt_first(rng)] + [_mqtt_level(rng) for _ in range(rng.randint(0, 3))])
        if t:  # a PUBLISH topic cannot be empty
            return t


def _mqtt_filter(rng):
    while True:
        levels = [_mqtt_first(rng)] + [_mqtt_level(rng) for _ in range(rng.randint(0, 3))]
        levels = ["+" if rng.random() < 0.3 else t for t in levels]
        if rng.random() < 0.3:
            levels.append("#")
        f = "/".join(levels)
        if f:  # the empty filter is invalid (probed in test_mqtt_invalid_filters)
            return f


def _mqtt_instance(rng, f):
    out = []
    for t in f.split("/"):
        if t == "+":
            out.append(_mqtt_level(rng))
        elif t == "#":
            out.extend(_mqtt_level(rng) for _ in range(rng.randint(0, 2)))
        else:
            out.append(t)
    t = "/".join(out)
    return t if t and not t.startswith("$SYS") else _mqtt_topic(rng)


@pytest.fixture(scope="module")
def mqtt_run(mosquitto_server):
    rng = random.Random(SEED + 2)
    run = Run()
    taken = set()  # (client, filter as sent): re-subscribing replaces the subscription

    def add(client, sent, group, inner):
        if (client, sent) in taken:
            return
        taken.add((client, sent))
        sid = len(run.subs) + 1
        run.subs.append((sid, sent, group, inner))
        placement.append(client)

    placement = []  # client index of run.subs[k]
    fixed = ["#", "+", "+/#", "a/#", "a/+", "+/+", "a//b", "/a", "a/", "/", "//", "/#", "+/a",
             "$x/#", "$x/a", "$x/+", "+/+/+", "a/b/c/#", "$SYS/#"]
    filters = fixed + [_mqtt_filter(rng) for _ in range(N_SUBS - len(fixed))]
    for f in filters:
        # mosquitto 2.0 never delivers to a shared subscription whose filter starts
        # with '$' (known broker deviation): only plain subscriptions for those.
        if rng.random() < 0.25 and not f.startswith("$"):
            g = rng.choice(MQTT_GROUPS)
            for client in rng.sample(range(N_MQTT_CLIENTS), rng.randint(2, 3)):
                add(client, f"$share/{g}/{f}", g, f)
        else:
            add(rng.randrange(N_MQTT_CLIENTS), f, None, f)
    # mosquitto refuses client publishes to $SYS/... (known broker deviation): none generated
    run.pubs = [_mqtt_topic(rng) if rng.random() < 0.4 else _mqtt_instance(rng, rng.choice(filters))
                for _ in range(N_PUBS)]
    run.pubs += ["a", "a/", "/a", "/", "//", "a//b", "$x", "$x/a", "$x/", "a/b/c"]

    clients = [brokers.MqttConn(mosquitto_server, f"topicmatch-sub{k}") for k in range(N_MQTT_CLIENTS)]
    pub = brokers.MqttConn(mosquitto_server, "topicmatch-pub")
    try:
        pids = defaultdict(list)
        for (sid, sent, _, _), client in zip(run.subs, placement):
            pids[client].append((clients[client].send_subscribe(sent, sid), sent))
        for k, c in enumerate(clients):
            pids[k].append((c.send_subscribe(MQTT_SENTINEL, MQTT_SENTINEL_ID), MQTT_SENTINEL))
            for pid, sent in pids[k]:
                rc = c.read_suback(pid)
                assert rc == 0, f"mosquitto refused generated filter {sent!r}: reason code {rc}"
        for i, t in enumerate(run.pubs):
            pub.publish(t, str(i).encode())
        pub.publish(MQTT_SENTINEL, b"")
        for c in clients:
            # QoS 0 to one client keeps publish order: the sentinel comes last
            while True:
                topic, payload, ids = c.read_publish()
                if topic == MQTT_SENTINEL:
                    if MQTT_SENTINEL_ID in ids:
                        break
                    continue  # '#' or '+' matching the sentinel
                i = int(payload)
                assert topic == run.pubs[i], (topic, i)
                assert ids, f"delivery of {topic!r} without a Subscription Identifier"
                run.delivered[i].extend(ids)
    finally:
        for c in clients + [pub]:
            c.close()
    for i, sids in run.delivered.items():
        dup = [s for s, n in Counter(sids).items() if n > 1]
        assert not dup, f"mosquitto delivered {run.pubs[i]!r} twice to subscription(s) {dup}"
    assert sum(map(len, run.delivered.values())) > N_PUBS, "too few deliveries: generator broken?"
    return run


def test_mqtt_deliveries(impl, mqtt_run):
    sl = impl.Sublist("mqtt")
    problems = []
    for sid, sent, group, inner in mqtt_run.subs:
        if not impl.is_valid_filter(sent, "mqtt"):
            problems.append(f"mosquitto accepted filter {sent!r}, is_valid_filter says invalid")
        if group is not None and sid % 2:
            sl.insert(inner, sid, queue=group)  # the two spellings of a shared subscription
        else:
            sl.insert(sent, sid)
    problems += _compare(mqtt_run, sl, "mqtt")
    _report(problems, f"between mosquitto and topicmatch {impl.name}")


MQTT_PROBES = [
    "a/#/b", "a+", "#a", "a/b#", "a/+b", "+a/b", "##", "++", "a/#/", "#/", "#/#", "",
    "a", "#", "+", "/", "//", "+/+", "/#", "a//b", "$", "$x/#", "$SYS/#", "a/$",
    "$share/g/a", "$share/g/#", "$share/g/+/b", "$share/g/$SYS/#", "$share/g/a/#/b",
    "$share/g+/a", "$share/g#/a", "$share/g/a+", "$sharex/a", "$shared/g/a", "$Share/g/a",
]


def mosquitto_share_syntax_deviation(f: str) -> bool:
    """Known mosquitto 2.0 laxness on shared-subscription syntax: it checks
    '$share/...' as if it were a plain filter, so it accepts '$share/g' (no
    filter), '$share/g/' (empty filter), '$share//a' (empty share name) and
    '$share/+/a' (wildcard as share name), all of which MQTT 5 §4.8.2
    forbids; and it refuses the plain filter '$share' (which does not start
    with '$share/').  topicmatch follows the specification: not compared."""
    if f == "$share":
        return True
    if not f.startswith("$share/"):
        return False
    parts = f.split("/", 2)
    return len(parts) < 3 or parts[1] in ("", "+", "#") or parts[2] == ""


@pytest.fixture(scope="module")
def mqtt_probes(mosquitto_server):
    """{filter: refused?}: mosquitto refuses with a SUBACK reason code >= 0x80
    or, for a malformed filter, by closing the connection."""
    rng = random.Random(SEED + 3)
    probes = list(MQTT_PROBES)
    for _ in range(250):
        probes.append("".join(rng.choice("ab/+#$") for _ in range(rng.randint(1, 6))))
    for _ in range(50):
        probes.append("$share/" + "".join(rng.choice("ab/+#") for _ in range(rng.randint(0, 5))))
    probes = list(dict.fromkeys(probes))
    result, conn = {}, None
    try:
        for f in probes:
            if mosquitto_share_syntax_deviation(f):
                continue
            if conn is None or conn.closed:
                conn = brokers.MqttConn(mosquitto_server, "topicmatch-probe")
            rc = conn.subscribe(f, 1)
            result[f] = rc is None or rc >= 0x80
    finally:
        if conn is not None:
            conn.close()
    assert any(result.values()) and not all(result.values())
    return result


def test_mqtt_invalid_filters(impl, mqtt_probes):
    problems = [f"{f!r}: mosquitto {'refuses' if refused else 'accepts'} it, "
                f"is_valid_filter(..., 'mqtt') = {impl.is_valid_filter(f, 'mqtt')}"
                for f, refused in mqtt_probes.items()
                if refused == impl.is_valid_filter(f, "mqtt")]
    _report(problems, f"between mosquitto and topicmatch {impl.name} on filter validity")
