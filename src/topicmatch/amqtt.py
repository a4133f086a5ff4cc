"""amqtt's MQTT 3.1.1 broker, routing through a topicmatch Sublist.

    pip install "topicmatch[amqtt]"

    from topicmatch.amqtt import Broker          # a drop-in for amqtt.broker.Broker
    broker = Broker({"listeners": {"default": {"type": "tcp", "bind": "127.0.0.1:1883"}}})
    await broker.start()

Stock amqtt (0.12) routes a publish by testing the topic against every
subscription filter in Python, replays retained messages to a new
subscription by testing every retained topic, and walks every filter when a
session ends.  This subclass keeps amqtt's own bookkeeping (the
``subscriptions`` dict its plugins read, sessions, authentication, plugins,
retained storage, its refusal of client publishes to ``$`` topics) and
replaces only those three loops:

* **Publish**: one ``Sublist.match(topic, dedupe=True)``.  Each session
  subscribes under one id per QoS level (``sid << 2 | qos``), so the
  de-duplicated result holds at most three ids per session; the highest QoS
  wins and the session gets ONE copy at ``min(message QoS, that QoS)``
  (MQTT 3.1.1 §3.3.5).  Stock amqtt sends one copy per matching filter, each
  at the subscription's QoS whatever the publish QoS: here the spec is
  followed instead.  The message QoS is the PUBLISH packet's QoS, or the QoS
  an internal broadcast forces (a will message, a plugin's
  ``broadcast_message``): stock delivers those at the forced QoS, here they
  are capped by the subscription's QoS like any publish.
* **Re-subscribe**: SUBSCRIBE to a filter the session already holds replaces
  its QoS (§3.8.4); stock keeps the first QoS while acknowledging the new one.
* **Session end** (clean-session CONNECT, expiry, the session monitor): the
  session's own filters are removed, found from a per-session table, not by
  scanning every filter.  A persistent session keeps its filters and ids
  while offline; a clean-session CONNECT drops them.
* **Retained messages for a new subscription**: retained topics are kept as
  literal filters in a second Sublist; a wildcard filter asks it with
  ``reverse_match`` (only the retained topics the filter matches come back),
  a filter without wildcards is a dict lookup.
* **Malformed packets** (MQTT 3.1.1 §4.8: the server closes the network
  connection): a SUBSCRIBE or UNSUBSCRIBE with packet identifier 0, no
  topic, a requested QoS byte other than 0, 1 or 2 [MQTT-3.8.3-4], or fixed
  header flags other than ``0010`` [MQTT-3.8.1-1, 3.10.1-1]; a PUBLISH at
  QoS 3 [MQTT-3.3.1-4] or at QoS 1/2 with packet identifier 0.  The packet
  changes nothing and gets no acknowledgement (stock amqtt grants such a QoS
  as it came).  A PUBLISH that amqtt refuses by closing the connection (an
  empty or ``$`` topic) closes it for real: stock amqtt leaves the socket
  open and the session, filters included, behind for good.  Nothing a client
  sends is packed into another value without a range check: the routing ids
  ``sid << 2 | qos`` are built from session ids the adapter issues and a QoS
  of 0-2 only.
* **Packet framing**: every packet is read whole (its fixed header and the
  remaining length it declares) and decoded by amqtt's own decoder before
  amqtt's reader sees a byte of it.  A packet that does not decode (a
  wildcard in a PUBLISH topic, a length that runs past the packet, a
  reserved type) or that decodes to fewer bytes than it declares (a PINGREQ
  with a body) closes the connection, and none of its bytes is read as a
  packet.  Stock amqtt drops such a packet where its decoder stopped and
  reads the rest as packets: a SUBSCRIBE, PINGREQ or PUBLISH hidden in the
  payload of a wildcard PUBLISH ran, past any proxy that frames MQTT.  Each
  packet is decoded twice (here, then by amqtt), a Python-level cost per
  packet on top of amqtt's own.
* **Filters**: anything ``topicmatch.is_valid_filter(f, "mqtt")`` refuses (the
  empty filter, U+0000, more than 65,535 bytes, a malformed ``$share/``) is
  refused with SUBACK 0x80 on top of amqtt's own refusals; nothing is stored.
* **``$share/GROUP/filter``** (MQTT 5 shared subscriptions; amqtt 0.12
  treats it as a plain filter whose first level is ``$share``, which no
  client may publish to): served as a shared subscription, an extension.
  Each matching group gets one copy, sent to one member chosen round-robin
  among its connected sessions (else an offline one, which queues it as
  amqtt queues any QoS>0 message for a persistent session); a session also
  holding a matching non-shared filter gets that copy too, as in MQTT 5
  §4.8.2.  No retained messages are sent to a shared subscription (MQTT 5
  §3.8.4).

**Static routes from an image** (``topicmatch.amqtt.RoutingImage``, an amqtt
plugin entry): ``"plugins": {"topicmatch.amqtt.RoutingImage": {"image": PATH}}``
starts the routing index from a file written by ``save_routing_image(PATH,
{client_id: [(filter, qos), ...]})`` instead of from empty.  The file is
opened with ``Sublist.open`` (mapped, not rebuilt); SUBSCRIBEs go to the
opened index's live part.  A static route belongs to a client id, not to a
session: whichever session holds that client id gets the messages, like a
subscription made on every CONNECT, capped and de-duplicated with the
session's own subscriptions (one copy at the highest QoS).  Routes are the
image's: a client cannot UNSUBSCRIBE from them, and no retained messages are
sent for them (there is no SUBSCRIBE).  Ids: a static route is
``-k << 2 | qos`` for the k-th client of the image (live sessions are
``sid << 2 | qos`` with sid >= 1); ids whose low bits are 3 are the image's
own table (its version marker, and ``$topicmatch/amqtt/client/<hex of the
client id>`` -> ``-k << 2 | 3``), looked up once per CONNECT.  A missing,
unreadable, corrupt or foreign file (another dialect, or no routing table)
makes ``start()`` raise ``RoutingImageError`` naming the path and the problem.

Left as amqtt does it (not routing): on every CONNECT amqtt replays, at QoS
0, the retained messages matching ANY filter held in the broker, by any
session, once per such filter (amqtt 0.12 ``_handle_client_session``); the
spec sends retained messages only on SUBSCRIBE.  The replay goes through the
topicmatch lookup above but its loop over the broker's filters is amqtt's.

Tested against amqtt 0.12.1 (``topicmatch[amqtt]`` pins ``>=0.12.1,<0.13``): the
overridden methods are amqtt internals.
"""
from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import itertools
import logging
import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from amqtt.broker import Broker as _AmqttBroker
from amqtt.contexts import Action
from amqtt.mqtt.constants import QOS_1, QOS_2
from amqtt.plugins.base import BasePlugin

from topicmatch._amqtt_wire import (_FrameReader, _is_packet_id, _is_qos, malformed_subscribe,
                                     malformed_unsubscribe)
from topicmatch._core import (InvalidSubjectError, Sublist, TopicmatchValueError,
                              is_valid_filter, subject_matches)

__all__ = ["Broker", "RoutingImage", "RoutingImageError", "save_routing_image", "ROUTING_IMAGE_VERSION"]

_REFUSED = 0x80          # SUBACK return code "failure" (MQTT 3.1.1 §3.9.3)
_SUBSCRIBE_FLAGS = 0x02  # fixed header flags of SUBSCRIBE and UNSUBSCRIBE [MQTT-3.8.1-1, 3.10.1-1]
_SHARE = "$share/"

_log = logging.getLogger(__name__)


def _share_key(topic_filter: str) -> Optional[Tuple[str, str]]:
    """``$share/G/f`` -> (G, f), the key topicmatch reports the group under;
    None for a plain filter.  Only called on filters is_valid_filter took."""
    if not topic_filter.startswith(_SHARE):
        return None
    group, _, rest = topic_filter[len(_SHARE):].partition("/")
    return group, rest

# -- the routing image: static routes per client id ----------------------------
ROUTING_IMAGE_VERSION = 1                       # the layout below; a reader refuses others
_TABLE = 3                                      # low bits of an id that is no route
_MARK = "$topicmatch/amqtt/routing-image"          # -> ROUTING_IMAGE_VERSION << 2 | 3
_CLIENT = "$topicmatch/amqtt/client/"              # + hex(client id, UTF-8) -> -k << 2 | 3


class RoutingImageError(TopicmatchValueError):
    """A routing image that cannot be used (missing, unreadable, corrupt, of
    another dialect or layout), or a bad RoutingImage configuration; the
    message names the path and the problem.  A TopicmatchError, as every
    error the package raises on its own account; a ValueError, as before."""


def _client_key(client_id: str) -> Optional[str]:
    """The image's table entry for client_id; None if it cannot be one
    (a filter has at most 65,535 bytes)."""
    key = _CLIENT + client_id.encode("utf-8", "surrogatepass").hex()
    return key if len(key) <= 0xFFFF else None


def save_routing_image(path: "os.PathLike[str] | str",
                       routes: Mapping[str, Iterable[Tuple[str, int]]], *, mode: Optional[int] = None) -> int:
    """Write ``routes`` ({client id: [(filter, QoS 0-2), ...]}) to ``path``
    as a routing image for ``RoutingImage`` (atomically: ``Sublist.save``
    writes a temporary file and renames it over path; the file's mode is
    ``Sublist.save``'s: what open() would give, or ``mode``).  Returns the number
    of routes written.  Raises ValueError (nothing written) for an empty
    client id, an invalid MQTT filter, a ``$share/`` filter (shared
    subscriptions are made by SUBSCRIBE only) or a QoS outside 0-2."""
    filters: List[str] = [_MARK]
    ids: List[int] = [ROUTING_IMAGE_VERSION << 2 | _TABLE]
    n = 0
    for k, (client_id, pairs) in enumerate(routes.items(), 1):
        if not isinstance(client_id, str) or not client_id:
            raise TopicmatchValueError(f"client id {client_id!r}: a static route needs a non-empty client id string")
        key = _client_key(client_id)
        if key is None:
            raise TopicmatchValueError(f"client id of {len(client_id)} characters is too long for a routing image")
        filters.append(key)
        ids.append(-k << 2 | _TABLE)
        for entry in pairs:
            if not (isinstance(entry, tuple) and len(entry) == 2):
                raise TopicmatchValueError(f"client {client_id!r}: {entry!r} is no (filter, QoS) pair")
            f, q = entry
            if not isinstance(f, str) or not is_valid_filter(f, "mqtt"):
                raise TopicmatchValueError(f"client {client_id!r}: {f!r} is no valid MQTT filter")
            if f.startswith(_SHARE):
                raise TopicmatchValueError(f"client {client_id!r}: {f!r}: shared subscriptions are not static routes")
            if not _is_qos(q):
                raise TopicmatchValueError(f"client {client_id!r}, filter {f!r}: QoS {q!r} is not 0, 1 or 2")
            filters.append(f)
            ids.append(-k << 2 | q)
            n += 1
    index = Sublist("mqtt")
    index.insert_many(filters, ids)
    index.save(path, mode=mode)
    return n


def _open_routing_image(path: str, verify: bool) -> Sublist:
    """Sublist.open(path) checked to be a routing image of this layout."""
    where = f"topicmatch.amqtt routing image {path!r}"
    try:
        index = Sublist.open(path, verify=verify)
    except FileNotFoundError as e:
        raise RoutingImageError(f"{where}: no such file") from e
    except OSError as e:
        raise RoutingImageError(f"{where}: cannot be read: {e.strerror or e}") from e
    except ValueError as e:
        # topicmatch's own message starts with the path (quoted or not): keep the problem.
        why = str(e)
        for prefix in (repr(path) + ": ", path + ": "):
            if why.startswith(prefix):
                why = why[len(prefix):]
                break
        raise RoutingImageError(f"{where}: not a usable topicmatch image: {why}") from e
    if index.dialect != "mqtt":
        raise RoutingImageError(f"{where}: a {index.dialect!r} index; the broker routes MQTT topics "
                                f"(write the file with topicmatch.amqtt.save_routing_image)")
    try:
        marks = [x for x in index.match(_MARK).subs if x > 0 and x & 3 == _TABLE]
    except ValueError as e:              # damage found by the first match (verify=False)
        raise RoutingImageError(f"{where}: {e}") from e
    if not marks:
        raise RoutingImageError(f"{where}: an MQTT index without the routing table "
                                f"(write the file with topicmatch.amqtt.save_routing_image)")
    version = marks[0] >> 2
    if version != ROUTING_IMAGE_VERSION:
        raise RoutingImageError(f"{where}: routing image layout {version}; this topicmatch reads "
                                f"layout {ROUTING_IMAGE_VERSION}")
    return index


# The QoS of the PUBLISH packet being handled.  amqtt's _handle_message_delivery
# calls _broadcast_message without it; each client's message loop is its own
# task, so a context variable carries it from one to the other without two
# clients' publishes ever seeing each other's value.
_publish_qos: contextvars.ContextVar[Optional[int]] = contextvars.ContextVar("topicmatch_publish_qos", default=None)


class _SnapshotDict(dict):
    """amqtt's subscriptions dict, iterated over a snapshot of its keys.

    On every CONNECT amqtt loops ``for topic in self._subscriptions`` and
    awaits a retained-message send inside the loop; another connection's
    SUBSCRIBE or UNSUBSCRIBE adds or drops a filter meanwhile, and the loop
    dies with "dictionary changed size during iteration", taking the
    connecting client's session with it (stock amqtt too, found by the broker
    fuzz test).  The loop is already O(filters); the snapshot keeps it so."""

    def __iter__(self):  # type: ignore[override]
        return iter(list(super().keys()))


class _Holder:
    """One client id's subscriptions: its session and {filter: granted QoS}."""
    __slots__ = ("sid", "session", "filters")

    def __init__(self, sid: int, session: Any) -> None:
        self.sid = sid
        self.session = session
        self.filters: Dict[str, int] = {}


class Broker(_AmqttBroker):
    """amqtt's ``Broker`` with topicmatch routing (see the module docstring).

    Same constructor and configuration as ``amqtt.broker.Broker``.
    ``routing_index`` is the Sublist of live subscriptions (read it, don't
    change it); ``retained_index`` holds the retained topics."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fs_reset(Sublist("mqtt"))

    # -- state -------------------------------------------------------------
    def _routing_image_config(self) -> Optional["RoutingImage.Config"]:
        for plugin in self.plugins_manager.plugins:
            if isinstance(plugin, RoutingImage):
                return plugin.config
        return None

    def _fs_reset(self, routing_index: Sublist, static_routes: bool = False) -> None:
        if type(self._subscriptions) is dict:
            self._subscriptions = _SnapshotDict(self._subscriptions)
        self.routing_index = routing_index
        # Static routes (a routing image): -k -> client id, filled on CONNECT.
        self._has_image = static_routes
        self._static_clients: Dict[int, str] = {}
        self._holders: Dict[str, _Holder] = {}       # client_id -> holder
        self._holder_by_sid: Dict[int, _Holder] = {}
        self._next_sid = itertools.count(1)
        # Round-robin cursor per shared group (group, filter), kept only
        # while some session holds that $share filter: _share_holders counts them.
        self._rr: Dict[Tuple[str, Optional[str]], int] = {}
        self._share_holders: Dict[Tuple[str, str], int] = {}
        self.retained_index = Sublist("mqtt")
        self._retained_ids: Dict[str, int] = {}      # topic -> id in retained_index
        self._retained_odd: set = set()              # topics that are no literal filter ("$share/...")
        self._next_rid = itertools.count(1)

    async def start(self) -> None:
        # amqtt's start() empties its subscriptions and retained messages: so
        # do we.  With a RoutingImage entry the routing index starts from the
        # image, opened (and checked) again on every start: a bad file raises
        # RoutingImageError here, before anything listens.
        cfg = self._routing_image_config()
        if cfg is None:
            self._fs_reset(Sublist("mqtt"))
        else:
            self._fs_reset(_open_routing_image(cfg.image, cfg.verify), static_routes=True)
        await super().start()

    async def _authenticate(self, session: Any, listener: Any) -> bool:
        # Before CONNACK: from the moment the client may expect messages, its
        # static routes (if the image has any for its client id) reach it.
        ok = await super()._authenticate(session, listener)
        if ok and self._has_image:
            self._attach_static(session.client_id)
        return bool(ok)

    def _attach_static(self, client_id: Any) -> None:
        key = _client_key(client_id) if isinstance(client_id, str) and client_id else None
        if key is None:
            return           # no table entry can name this client
        for x in self.routing_index.match(key).subs:
            if x < 0 and x & 3 == _TABLE:
                self._static_clients[x >> 2] = client_id

    # -- subscribe / unsubscribe / session end -----------------------------
    async def add_subscription(self, subscription: Tuple[str, int], session: Any) -> int:
        topic_filter, requested = subscription
        if not isinstance(topic_filter, str) or not is_valid_filter(topic_filter, "mqtt"):
            return _REFUSED          # amqtt's refusal; neither index nor amqtt's dict changes
        if not _is_qos(requested):
            # A packet never gets here (_handle_subscription closes the
            # connection first); amqtt's plugin API (BrokerContext.add_subscription) can.
            return _REFUSED
        granted = await super().add_subscription(subscription, session)
        if granted == _REFUSED:
            return granted
        if not _is_qos(granted):
            # amqtt's "max-qos" setting can lower the QoS to anything it holds:
            # what goes into an id must be 0-2, so undo amqtt's entry and refuse.
            super()._del_subscription(topic_filter, session)
            if not self._subscriptions.get(topic_filter, True):
                del self._subscriptions[topic_filter]
            return _REFUSED
        holder = self._holders.get(session.client_id)
        if holder is None:
            holder = _Holder(next(self._next_sid), session)
            self._holders[session.client_id] = holder
            self._holder_by_sid[holder.sid] = holder
        holder.session = session
        old = holder.filters.get(topic_filter)
        if old != granted:
            if old is not None:
                self.routing_index.remove(topic_filter, holder.sid << 2 | old)
                # amqtt kept the first QoS in its own dict: §3.8.4 says the new one replaces it.
                entries = self._subscriptions.get(topic_filter, [])
                for i, (s, _q) in enumerate(entries):
                    if s.client_id == session.client_id:
                        entries[i] = (s, granted)
            self.routing_index.insert(topic_filter, holder.sid << 2 | granted)
            holder.filters[topic_filter] = granted
            if old is None:
                key = _share_key(topic_filter)
                if key is not None:
                    self._share_holders[key] = self._share_holders.get(key, 0) + 1
        return granted

    def _forget(self, holder: _Holder, topic_filter: str) -> None:
        """The holder no longer holds topic_filter: drop the shared group's
        cursor with its last holder, and the holder with its last filter."""
        key = _share_key(topic_filter)
        if key is not None:
            left = self._share_holders.get(key, 0) - 1
            if left > 0:
                self._share_holders[key] = left
            else:
                self._share_holders.pop(key, None)
                self._rr.pop(key, None)
        if not holder.filters and self._holders.get(holder.session.client_id) is holder:
            del self._holders[holder.session.client_id]
            del self._holder_by_sid[holder.sid]

    def _del_subscription(self, a_filter: str, session: Any) -> int:
        deleted = super()._del_subscription(a_filter, session)
        if deleted and not self._subscriptions.get(a_filter, True):
            # amqtt leaves an emptied filter's list behind on UNSUBSCRIBE (and
            # walks every filter on each CONNECT): drop it, as its session end does.
            del self._subscriptions[a_filter]
        holder = self._holders.get(session.client_id)
        if holder is not None:
            qos = holder.filters.pop(a_filter, None)
            if qos is not None:
                self.routing_index.remove(a_filter, holder.sid << 2 | qos)
                self._forget(holder, a_filter)
        return deleted

    async def _del_all_subscriptions(self, session: Any) -> None:
        # The session's own filters only: no walk over every filter in the broker.
        holder = self._holders.pop(session.client_id, None)
        if holder is None:
            return
        del self._holder_by_sid[holder.sid]
        filters = list(holder.filters.items())
        holder.filters.clear()
        for f, _q in filters:
            super()._del_subscription(f, session)
            if not self._subscriptions.get(f, True):
                del self._subscriptions[f]      # amqtt drops emptied filters here too
            self._forget(holder, f)
        self.routing_index.remove_many([f for f, _ in filters], [holder.sid << 2 | q for _, q in filters])

    # -- malformed packets ---------------------------------------------------
    async def _client_connected(self, listener_name: str, reader: Any, writer: Any) -> None:
        # Every listener (TCP, websockets, external) comes through here:
        # amqtt reads the CONNECT and every later packet through the framing
        # reader (see _FrameReader).
        try:
            peer = writer.get_peer_info()
        except Exception:              # a writer without peer info: amqtt refuses it itself
            peer = None
        await super()._client_connected(listener_name, _FrameReader(reader, peer), writer)

    async def _close_malformed(self, session: Any, handler: Any, what: str) -> None:
        # MQTT 3.1.1 §4.8: a malformed packet closes the network connection.
        # The disconnect waiter fires, and amqtt's message loop ends the
        # connection as for any close without DISCONNECT (its will included).
        _log.warning("topicmatch.amqtt: client %r sent a malformed %s; closing the connection",
                     getattr(session, "client_id", None), what)
        await handler.handle_connection_closed()

    def _guard_packets(self, session: Any, handler: Any) -> None:
        """Check the fixed header of every SUBSCRIBE and UNSUBSCRIBE this
        connection's handler reads from now on (amqtt's reader takes any flags)."""
        if getattr(handler, "_topicmatch_guarded", False):
            return
        handler._topicmatch_guarded = True
        for name, kind in (("handle_subscribe", "SUBSCRIBE"), ("handle_unsubscribe", "UNSUBSCRIBE")):
            original = getattr(handler, name)

            async def checked(packet: Any, _original: Any = original, _kind: str = kind) -> None:
                flags = getattr(getattr(packet, "fixed_header", None), "flags", None)
                if flags != _SUBSCRIBE_FLAGS:
                    await self._close_malformed(session, handler, f"{_kind} (fixed header flags {flags!r})")
                    return
                await _original(packet)
            setattr(handler, name, checked)

    async def _client_message_loop(self, client_session: Any, handler: Any) -> None:
        self._guard_packets(client_session, handler)
        await super()._client_message_loop(client_session, handler)

    async def _checked(self, kind: str, check: Any, session: Any, handler: Any, waiter: Any, handle: Any) -> None:
        """amqtt's handling of a SUBSCRIBE or UNSUBSCRIBE (handle), after its
        content passed check; a malformed one closes the connection instead."""
        packet = waiter.result()
        why = check(getattr(packet, "packet_id", None), getattr(packet, "topics", None))
        if why is not None:
            await self._close_malformed(session, handler, f"{kind} ({why})")
            return
        await handle(session, handler, waiter)

    async def _handle_subscription(self, client_session: Any, handler: Any, subscribe_waiter: Any) -> None:
        await self._checked("SUBSCRIBE", malformed_subscribe, client_session, handler, subscribe_waiter,
                            super()._handle_subscription)

    async def _handle_unsubscription(self, client_session: Any, handler: Any, unsubscribe_waiter: Any) -> None:
        await self._checked("UNSUBSCRIBE", malformed_unsubscribe, client_session, handler, unsubscribe_waiter,
                            super()._handle_unsubscription)

    # -- publish -----------------------------------------------------------
    async def _handle_message_delivery(self, client_session: Any, handler: Any, wait_deliver: Any) -> bool:
        app_message = wait_deliver.result()
        qos = getattr(app_message, "qos", None)
        if qos is not None and not _is_qos(qos):
            await self._close_malformed(client_session, handler, f"PUBLISH (QoS {qos!r}) [MQTT-3.3.1-4]")
            return True
        if qos and not _is_packet_id(getattr(app_message, "packet_id", None)):
            await self._close_malformed(client_session, handler, "PUBLISH (QoS > 0, packet identifier 0)")
            return True
        token = _publish_qos.set(qos)
        try:
            keep = await super()._handle_message_delivery(client_session, handler, wait_deliver)
        finally:
            _publish_qos.reset(token)
        if not keep:
            # amqtt answers a PUBLISH to an empty or '$' topic (a wildcard
            # one never gets here: _FrameReader refuses it) with
            # False, "closing connection", and its message loop then only
            # breaks: the socket stays open and the session, its filters
            # included, stays behind for good.  Close it for real instead.
            await handler.handle_connection_closed()
        return True

    async def _broadcast_message(self, session: Any, topic: Optional[str], data: Any,
                                 force_qos: Optional[int] = None) -> None:
        # amqtt's queue entry, plus the PUBLISH packet's QoS when there is one.
        entry: Dict[str, Any] = {"session": session, "topic": topic, "data": data}
        if force_qos is not None:
            entry["qos"] = force_qos
        else:
            pq = _publish_qos.get()
            if pq is not None:
                entry["publish_qos"] = pq
        await self._broadcast_queue.put(entry)

    def route(self, topic: str) -> List[Tuple[Any, int]]:
        """[(session, granted QoS)] that a publish on ``topic`` goes to: one
        ``match(topic, dedupe=True)``, one entry per non-shared subscriber
        (its highest QoS) plus one member per matching shared group.  Empty
        for a topic topicmatch refuses."""
        try:
            r = self.routing_index.match(topic, dedupe=True)
        except (InvalidSubjectError, TypeError):
            return []
        # One entry per session (its highest QoS), whether its filters are its
        # own (sid > 0) or the routing image's static routes for its client id.
        best: Dict[str, Tuple[Any, int]] = {}
        for x in r.subs:
            sid, q = x >> 2, x & 3
            if q == _TABLE:
                continue                          # the image's own table, no route
            if sid > 0:
                session = self._holder_by_sid[sid].session
            else:
                cid = self._static_clients.get(sid)
                entry = self._sessions.get(cid) if cid is not None else None
                if entry is None:
                    continue                      # that client has no session now
                session = entry[0]
            held = best.get(session.client_id)
            if held is None or held[1] < q:
                best[session.client_id] = (session, q)
        out = list(best.values())
        for group, gfilter, members in r.groups:
            out.append(self._pick_member(group, gfilter, members))
        return out

    def _pick_member(self, group: str, gfilter: Optional[str], members: List[int]) -> Tuple[Any, int]:
        # Round-robin over the members in id order, skipping offline sessions
        # while a connected one exists.
        members = sorted(members)
        key = (group, gfilter)
        start = self._rr.get(key, 0)
        n = len(members)
        chosen = members[start % n]
        for k in range(n):
            x = members[(start + k) % n]
            if self._holder_by_sid[x >> 2].session.transitions.state == "connected":
                chosen = x
                start += k
                break
        self._rr[key] = (start + 1) % n
        return self._holder_by_sid[chosen >> 2].session, chosen & 3

    async def _run_broadcast(self, running_tasks: Any) -> None:
        broadcast = await self._broadcast_queue.get()
        topic = broadcast["topic"]
        if "qos" in broadcast:
            msg_qos: Optional[int] = broadcast["qos"]
        else:
            msg_qos = broadcast.get("publish_qos")
        filtering = self.plugins_manager.is_topic_filtering_enabled()
        for target, sub_qos in self.route(topic):
            qos = sub_qos if msg_qos is None else min(msg_qos, sub_qos)
            if filtering and not await self._topic_filtering(target, topic=topic, action=Action.RECEIVE):
                continue
            connected = target.transitions.state == "connected"
            if not connected:
                # amqtt's rule [MQTT-3.1.2.4]: a persistent, non-anonymous
                # session that is offline queues QoS 1/2 messages; the rest are dropped.
                if not target.clean_session and qos in (QOS_1, QOS_2) and not target.is_anonymous:
                    await self._retain_broadcast_message(broadcast, qos, target)
                continue
            handler = self._get_handler(target)
            if handler is not None:
                running_tasks.append(asyncio.ensure_future(
                    handler.mqtt_publish(topic, broadcast["data"], qos, retain=False)))

    # -- retained messages -------------------------------------------------
    async def retain_message(self, source_session: Any, topic_name: Optional[str], data: Any,
                             qos: Optional[int] = None) -> None:
        await super().retain_message(source_session, topic_name, data, qos)
        if topic_name is not None:
            self._retained_sync(topic_name)

    def _retained_sync(self, topic: str) -> None:
        """Put the retained index in step with amqtt's dict for one topic."""
        held = topic in self._retained_messages
        known = topic in self._retained_ids or topic in self._retained_odd
        if held and not known:
            if is_valid_filter(topic, "mqtt") and not topic.startswith("$share/"):
                rid = next(self._next_rid)
                self.retained_index.insert(topic, rid)
                self._retained_ids[topic] = rid
            else:
                self._retained_odd.add(topic)
        elif known and not held:
            rid = self._retained_ids.pop(topic, None)
            if rid is not None:
                self.retained_index.remove(topic, rid)
            self._retained_odd.discard(topic)

    def _retained_resync(self) -> None:
        # amqtt's persistence plugin fills the retained dict directly and
        # shutdown() empties it: when the sizes disagree, walk both once.
        if len(self._retained_messages) == len(self._retained_ids) + len(self._retained_odd):
            return
        for t in [*self._retained_ids, *self._retained_odd]:
            self._retained_sync(t)
        for t in list(self._retained_messages):
            self._retained_sync(t)

    def retained_for(self, topic_filter: str) -> List[str]:
        """The retained topics ``topic_filter`` matches (none for ``$share/``)."""
        if not self._retained_messages or topic_filter.startswith("$share/"):
            return []
        self._retained_resync()
        if "+" not in topic_filter and "#" not in topic_filter:
            # A filter without wildcards names one topic: a dict lookup.
            return [topic_filter] if topic_filter in self._retained_messages else []
        try:
            hits = self.retained_index.reverse_match(topic_filter)
        except (InvalidSubjectError, TypeError):
            return []
        # A retained topic is stored as itself, a literal filter: it
        # intersects topic_filter exactly when topic_filter matches it.
        found = [t for t, _rid, _q in hits]
        found += [t for t in self._retained_odd if self._matches(t, topic_filter)]
        return found

    async def _publish_retained_messages_for_subscription(self, subscription: Tuple[str, int], session: Any) -> None:
        topic_filter, qos = subscription
        topics = self.retained_for(topic_filter)
        handler = self._get_handler(session) if topics else None
        if handler is None:
            return
        tasks = []
        for t in topics:
            msg = self._retained_messages.get(t)
            if msg is not None:
                tasks.append(asyncio.ensure_future(handler.mqtt_publish(
                    msg.topic, msg.data, min(qos, msg.qos if msg.qos is not None else qos), retain=True)))
        if tasks:
            await asyncio.wait(tasks)

    def _matches(self, topic: str, a_filter: str) -> bool:
        """MQTT 3.1.1 §4.7 through topicmatch (``$share/G/f`` matches as ``f``)."""
        try:
            return subject_matches(a_filter, topic, "mqtt")
        except (InvalidSubjectError, TypeError):
            return False


class RoutingImage(BasePlugin):
    """The amqtt plugin entry that starts ``topicmatch.amqtt.Broker``'s routing
    index from a routing image (``save_routing_image``)::

        "plugins": {"topicmatch.amqtt.RoutingImage": {"image": "/srv/routes.img"}}

    Options: ``image`` (the file's path, required), ``verify`` (default
    true: check the whole file once on start; false: O(1), for files this
    library wrote).  The broker opens the file on every ``start()``; the
    plugin itself only carries the checked configuration.  Only
    ``topicmatch.amqtt.Broker`` can use it: stock amqtt refuses to load it."""

    @dataclasses.dataclass
    class Config:
        image: Any = None
        verify: Any = True

        def __post_init__(self) -> None:
            where = "topicmatch.amqtt.RoutingImage"
            if not isinstance(self.image, (str, os.PathLike)) or not os.fspath(self.image):
                raise RoutingImageError(f"{where}: 'image' must be the path of a routing image, "
                                        f"not {self.image!r}")
            self.image = os.fspath(self.image)
            if type(self.verify) is not bool:
                raise RoutingImageError(f"{where} ({self.image!r}): 'verify' must be true or false, "
                                        f"not {self.verify!r}")

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        broker = getattr(context, "_broker_instance", None)
        if not isinstance(broker, Broker):
            raise RoutingImageError("topicmatch.amqtt.RoutingImage routes through topicmatch.amqtt.Broker, "
                                    f"not {type(broker).__name__}")
