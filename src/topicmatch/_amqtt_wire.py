"""The wire for topicmatch.amqtt's broker: what a well-formed packet is.

* Framing: each packet is read whole and decoded by amqtt's own classes
  before amqtt's reader sees a byte of it, so that a packet amqtt's decoder
  refuses part-way (a wildcard in a PUBLISH topic) closes the connection
  instead of leaving its payload to be read as the next packets.
* The content checks of SUBSCRIBE and UNSUBSCRIBE (MQTT 3.1.1 §3.8, §3.10).

Its own module: the broker's routing (amqtt.py) and the wire are two jobs."""
from __future__ import annotations

import logging
from typing import Any, Optional

from amqtt.adapters import ReaderAdapter
from amqtt.errors import MQTTError
from amqtt.mqtt import packet_class
from amqtt.mqtt.packet import MQTTFixedHeader

_log = logging.getLogger("topicmatch.amqtt")

_QOS_LEVELS = (0, 1, 2)  # the only QoS values a packet may carry (MQTT 3.1.1 §4.3)


def _is_qos(q: Any) -> bool:
    # bool is an int subclass: True is no QoS byte a packet decodes to.
    return type(q) is int and q in _QOS_LEVELS


def _is_packet_id(pid: Any) -> bool:
    return type(pid) is int and 1 <= pid <= 0xFFFF    # [MQTT-2.3.1-1]


def malformed_subscribe(packet_id: Any, topics: Any) -> Optional[str]:
    """Why a SUBSCRIBE's content is malformed (MQTT 3.1.1 §3.8), or None."""
    if not _is_packet_id(packet_id):
        return f"packet identifier {packet_id!r} [MQTT-2.3.1-1]"
    if not topics:
        return "no topic filter [MQTT-3.8.3-3]"
    for entry in topics:
        if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str)):
            return f"topic entry {entry!r} is no (filter, QoS) pair"
        if not _is_qos(entry[1]):
            return f"requested QoS {entry[1]!r} for {entry[0]!r} [MQTT-3.8.3-4]"
    return None


def malformed_unsubscribe(packet_id: Any, topics: Any) -> Optional[str]:
    """Why an UNSUBSCRIBE's content is malformed (MQTT 3.1.1 §3.10), or None."""
    if not _is_packet_id(packet_id):
        return f"packet identifier {packet_id!r} [MQTT-2.3.1-1]"
    if not topics:
        return "no topic filter [MQTT-3.10.3-2]"
    if not all(isinstance(t, str) for t in topics):
        return "a topic filter that is no string"
    return None


class _FrameReader:
    """A connection's reader that hands amqtt whole packets that decode.

    (amqtt's ReaderAdapter by its methods, read and feed_eof, not by
    subclassing: amqtt checks no reader's class, and an ABC from a package
    without type information reads to stubtest as a metaclass that differs.)

    amqtt reads a packet's fixed header, then decodes its body field by
    field straight from the socket; when a field is refused (a wildcard in a
    PUBLISH topic) it drops the packet where the decoder stopped and reads
    the rest as the next packets.  Here each packet is read whole first (the
    fixed header, then exactly the remaining length it declares), decoded by
    amqtt's own classes from memory, and must use up exactly its length.
    Only then does amqtt's reader get its bytes, from the buffer, never
    across the packet's end: amqtt's decoder is the same code on the same
    bytes, so its reads end where the packet ends.  A packet that fails
    raises MQTTError (amqtt's reader logs it), and from then on the reader is
    at end of file: amqtt ends the connection as for a client that went
    away, its will message included, and no byte after the packet's fixed
    header is ever parsed as a packet.

    State lives on the instance, not across an await in one call: amqtt
    reads a fixed header under ``wait_for`` (the keepalive), and a timeout
    that cancels the read mid-packet must lose nothing.
    """

    def __init__(self, inner: ReaderAdapter, peer: Any) -> None:
        self._inner = inner
        self._peer = peer
        self._head = bytearray()         # the fixed header read so far
        self._frame = b""                # the packet amqtt is reading
        self._pos = 0                    # how much of it amqtt has read
        self._dead = False

    def _refuse(self, why: str) -> "MQTTError":
        self._dead = True
        self._frame, self._pos = b"", 0
        _log.warning("topicmatch.amqtt: client at %s sent a malformed packet (%s); closing the connection",
                     self._peer, why)
        return MQTTError(f"malformed packet: {why}")

    async def _next_frame(self) -> bool:
        """Read, check and buffer the next packet; False at end of file."""
        head = self._head                # the type byte, then the length's bytes
        while len(head) < 2 or head[-1] & 0x80 and len(head) < 5:
            b = await self._inner.read(1)
            if not b:
                return False
            head += b
        if head[-1] & 0x80:
            # Four length bytes at most [MQTT-2.2.3]; amqtt checks this too.
            raise self._refuse("a remaining length of more than four bytes")
        length, shift = 0, 0
        for b in head[1:]:
            length |= (b & 0x7F) << shift
            shift += 7
        body = await self._inner.read(length) if length else b""
        if len(body) < length:
            return False                 # the client went away mid-packet
        frame = bytes(head) + body
        head.clear()
        fixed = MQTTFixedHeader(frame[0] >> 4, frame[0] & 0x0F, length)
        source = _BytesReader(body)
        try:
            await packet_class(fixed).from_stream(source, fixed_header=fixed)
        except Exception as e:           # whatever amqtt's decoder raises: the packet is malformed
            raise self._refuse(f"type {fixed.packet_type}, {length} bytes: "
                               f"{type(e).__name__}: {e}") from None
        if source.short:
            raise self._refuse(f"type {fixed.packet_type}: its fields run past its {length} bytes")
        if source.pos != length:
            raise self._refuse(f"type {fixed.packet_type}: {length - source.pos} bytes "
                               f"after its fields")
        self._frame, self._pos = frame, 0
        return True

    async def read(self, n: int = -1) -> bytes:
        if self._dead:
            return b""
        if self._pos == len(self._frame) and not await self._next_frame():
            return b""
        left = len(self._frame) - self._pos
        if n < 0:
            n = left
        if n > left:
            # amqtt's decoder read further than the one run on the same
            # bytes: never let it take the next packet's bytes.
            raise self._refuse(f"amqtt read {n} bytes, {left} left in the packet")
        out = self._frame[self._pos:self._pos + n]
        self._pos += n
        return out

    def feed_eof(self) -> None:
        self._inner.feed_eof()


class _BytesReader:
    """One packet's body for amqtt's decoder: reads past its end come back
    short (amqtt's read_or_raise makes that an error) and are noted."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self.pos = 0
        self.short = False

    async def read(self, n: int = -1) -> bytes:
        end = len(self._data) if n < 0 else self.pos + n
        if end > len(self._data):
            self.short = True
        out = self._data[self.pos:end]
        self.pos += len(out)
        return out

    def feed_eof(self) -> None:
        pass
