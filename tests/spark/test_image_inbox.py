"""The driver's inbox for spark: images (topicmatch.spark.image_inbox), without
Spark: a task's image arrives whole and checked, or not at all, over the
socket or (a Spark Connect client) as rows of the task's result; nothing
without the call's secret is written; a name cannot steer where it goes."""
import os

import pyarrow as pa
import pytest

import topicmatch

from topicmatch.spark.image_inbox import Inbox, send


def _image(tmp_path, n=5):
    sl = topicmatch.Sublist()
    for i in range(n):
        sl.insert(f"a.{i}", i)
    path = str(tmp_path / "built.img")
    sl.save(path)
    return path


def _kept(cache):
    return sorted(n for n in os.listdir(cache))


def test_an_image_arrives_checked_and_in_place(tmp_path):
    src = _image(tmp_path)
    cache = tmp_path / "driver"
    cache.mkdir()
    with Inbox("127.0.0.1", str(cache)) as inbox:
        assert inbox.received("spark:topicmatch-nats-x.img") is None
        send(inbox.ticket, "spark:topicmatch-nats-x.img", src)
        # (send returns once the driver has it: no wait, no race)
        local = inbox.received("spark:topicmatch-nats-x.img")
        assert local == str(cache / "topicmatch-nats-x.img")
        assert open(local, "rb").read() == open(src, "rb").read()
        # a retried task's second copy replaces the first whole
        send(inbox.ticket, "spark:topicmatch-nats-x.img", src)
    assert _kept(cache) == ["topicmatch-nats-x.img"]
    assert sorted(topicmatch.Sublist.open(local).match("a.3").subs) == [3]


def test_without_the_secret_nothing_is_written(tmp_path):
    src = _image(tmp_path)
    cache = tmp_path / "driver"
    cache.mkdir()
    with Inbox("127.0.0.1", str(cache)) as inbox:
        host, port, secret = inbox.ticket
        with pytest.raises(RuntimeError, match="did not take the image"):
            send((host, port, bytes(32)), "spark:topicmatch-nats-x.img", src)
        assert inbox.received("spark:topicmatch-nats-x.img") is None
    assert _kept(cache) == []


@pytest.mark.parametrize("location", ["spark:../escape.img", "spark:sub/dir.img", "spark:.hidden.img",
                                      "spark:no-suffix", "/abs/path.img"])
def test_a_name_cannot_steer_where_it_goes(tmp_path, location):
    src = _image(tmp_path)
    cache = tmp_path / "driver"
    cache.mkdir()
    with Inbox("127.0.0.1", str(cache)) as inbox:
        with pytest.raises(RuntimeError, match="did not take the image"):
            send(inbox.ticket, location, src)
        with pytest.raises(ValueError, match="not a spark: image name"):
            inbox.received(location)
    assert _kept(cache) == []
    assert not (tmp_path / "escape.img").exists()


def test_a_damaged_image_is_refused_and_not_kept(tmp_path):
    src = _image(tmp_path)
    data = bytearray(open(src, "rb").read())
    data[len(data) // 2] ^= 0xFF
    bad = tmp_path / "bad.img"
    bad.write_bytes(bytes(data))
    cache = tmp_path / "driver"
    cache.mkdir()
    with Inbox("127.0.0.1", str(cache)) as inbox:
        with pytest.raises(RuntimeError, match="did not take the image"):
            send(inbox.ticket, "spark:topicmatch-nats-bad.img", str(bad))
        with pytest.raises(ValueError, match="was refused"):
            inbox.received("spark:topicmatch-nats-bad.img")
    assert _kept(cache) == []


@pytest.mark.parametrize("piece", [3, 11])
def test_an_image_read_in_pieces_of_one_reused_buffer_arrives_whole(tmp_path, monkeypatch, piece):
    """The socket's pieces are views of one buffer that each read overwrites:
    each is summed and written before the next read (pieces of fewer bytes
    than the checksum's last eight, held back across pieces, and of more)."""
    from topicmatch.spark import image_inbox
    monkeypatch.setattr(image_inbox, "_PIECE", piece)
    src = _image(tmp_path, n=40)
    cache = tmp_path / "driver"
    cache.mkdir()
    with Inbox("127.0.0.1", str(cache)) as inbox:
        send(inbox.ticket, "spark:topicmatch-nats-x.img", src)
        local = inbox.received("spark:topicmatch-nats-x.img")
    assert open(local, "rb").read() == open(src, "rb").read()
    server = image_inbox.ImageServer("127.0.0.1")
    server.offer("spark:topicmatch-nats-x.img", local)
    host = tmp_path / "host"
    host.mkdir()
    try:
        got = image_inbox.fetch_from_driver(server.ticket, "spark:topicmatch-nats-x.img", str(host))
    finally:
        server.close()
    assert open(got, "rb").read() == open(src, "rb").read()


def test_short_writes_are_written_on(tmp_path, monkeypatch):
    """A write that takes only part of a piece (a signal, a nearly full
    disk) is followed by one for the rest: the file is whole."""
    from topicmatch.spark import image_inbox
    src = _image(tmp_path, n=40)
    data = open(src, "rb").read()
    cache = tmp_path / "driver"
    cache.mkdir()
    real_write, calls = os.write, []

    def short_write(fd, piece):
        calls.append(len(piece))
        return real_write(fd, memoryview(piece)[:5])
    monkeypatch.setattr(image_inbox.os, "write", short_write)
    local = image_inbox.receive([data[:100], data[100:]], "spark:topicmatch-nats-x.img", str(cache))
    monkeypatch.undo()
    assert open(local, "rb").read() == data
    assert len(calls) == -(-100 // 5) + -(-(len(data) - 100) // 5)


@pytest.mark.parametrize("piece", [3, 1 << 20])
def test_a_sender_that_stops_mid_image_leaves_nothing(tmp_path, monkeypatch, piece):
    """The size announced, then only part of the image, then the connection
    closed: refused with the bytes missing said, no file kept (in one read,
    or over many of the reused buffer)."""
    import socket
    from topicmatch.spark import image_inbox
    monkeypatch.setattr(image_inbox, "_PIECE", piece)
    src = _image(tmp_path, n=40)
    data = open(src, "rb").read()
    half = len(data) // 2
    cache = tmp_path / "driver"
    cache.mkdir()
    location = "spark:topicmatch-nats-x.img"
    name = location.encode()
    with Inbox("127.0.0.1", str(cache)) as inbox:
        host, port, secret = inbox.ticket
        with socket.create_connection((host, port), timeout=30) as conn:
            conn.sendall(secret + image_inbox._HEADER.pack(len(name), len(data)) + name + data[:half])
            conn.shutdown(socket.SHUT_WR)
            assert conn.recv(1) == image_inbox._FAILED
        with pytest.raises(ValueError, match=f"was refused: the sender closed with "
                                             f"{len(data) - half} of {len(data)} bytes to come"):
            inbox.received(location)
    assert _kept(cache) == []


@pytest.mark.parametrize("piece", [3, 1 << 20])
def test_a_driver_that_stops_mid_image_leaves_nothing(tmp_path, monkeypatch, piece):
    """The fetch's side of the same: the driver's answer and size, part of
    the image, then the connection closed: ConnectionError, no copy kept."""
    import socket
    import threading
    from topicmatch.spark import image_inbox
    monkeypatch.setattr(image_inbox, "_PIECE", piece)
    src = _image(tmp_path, n=40)
    data = open(src, "rb").read()
    half = len(data) // 2
    location = "spark:topicmatch-nats-x.img"
    listener = socket.create_server(("127.0.0.1", 0))
    secret = bytes(range(32))

    def driver():
        conn, _ = listener.accept()
        with conn:
            image_inbox._read_exactly(conn, len(secret) + 2 + len(location))
            conn.sendall(image_inbox._OK + image_inbox._SIZE.pack(len(data)) + data[:half])
    serving = threading.Thread(target=driver, daemon=True)
    serving.start()
    host = tmp_path / "host"
    host.mkdir()
    try:
        with pytest.raises(ConnectionError, match=f"the sender closed with {len(data) - half} "
                                                  f"of {len(data)} bytes to come"):
            image_inbox.fetch_from_driver(("127.0.0.1", listener.getsockname()[1], secret),
                                          location, str(host))
    finally:
        serving.join(timeout=30)
        listener.close()
    assert [n for n in _kept(host) if not n.endswith(".lock")] == []


# -- the driver's image server: a host fetches what it lacks, once -------------

def _served(tmp_path, src, location="spark:topicmatch-nats-x.img"):
    """An ImageServer offering the driver's copy of src at location."""
    from topicmatch.spark.image_inbox import ImageServer
    driver = tmp_path / "driver"
    driver.mkdir(exist_ok=True)
    local = driver / location.split(":", 1)[1]
    local.write_bytes(open(src, "rb").read())
    server = ImageServer("127.0.0.1")
    server.offer(location, str(local))
    return server, local


def _fetches(log):
    """[(name, cache_dir)] of the fetch lines fetch_from_driver logged."""
    if not os.path.exists(log):
        return []
    with open(log) as f:
        lines = [ln.rstrip("\n").split(" ", 4) for ln in f]
    return [(ln[0], ln[4]) for ln in lines if len(ln) == 5 and ln[2] == "fetch"]


def test_a_host_fetches_an_image_it_lacks_once(tmp_path, monkeypatch):
    from topicmatch.spark.image_inbox import fetch_from_driver
    from topicmatch.spark.ship import LOAD_LOG_ENV
    log = tmp_path / "loads.log"
    monkeypatch.setenv(LOAD_LOG_ENV, str(log))
    src = _image(tmp_path)
    server, _ = _served(tmp_path, src)
    host = tmp_path / "host"
    host.mkdir()
    try:
        got = fetch_from_driver(server.ticket, "spark:topicmatch-nats-x.img", str(host))
        assert got == str(host / "topicmatch-nats-x.img")
        assert open(got, "rb").read() == open(src, "rb").read()
        assert sorted(topicmatch.Sublist.open(got).match("a.3").subs) == [3]
    finally:
        server.close()
    # the host's copy is used from now on: no second fetch (the server is gone)
    assert fetch_from_driver(server.ticket, "spark:topicmatch-nats-x.img", str(host)) == got
    assert _fetches(log) == [("topicmatch-nats-x", str(host))]
    assert _kept(host) == ["topicmatch-nats-x.img", "topicmatch-nats-x.img.lock"]


def test_a_host_that_holds_an_image_never_asks(tmp_path):
    """Its own build (or an earlier fetch) in the host's directory: nothing
    is asked of the driver, whose server is not even there."""
    from topicmatch.spark.image_inbox import fetch_from_driver
    src = _image(tmp_path)
    host = tmp_path / "host"
    host.mkdir()
    (host / "topicmatch-nats-x.img").write_bytes(open(src, "rb").read())
    assert fetch_from_driver(("127.0.0.1", 1, bytes(32)), "spark:topicmatch-nats-x.img",
                             str(host)) == str(host / "topicmatch-nats-x.img")


def test_the_server_gives_nothing_without_the_secret_or_the_offer(tmp_path):
    from topicmatch.spark.image_inbox import fetch_from_driver
    src = _image(tmp_path)
    server, _ = _served(tmp_path, src)
    host = tmp_path / "host"
    host.mkdir()
    try:
        h, port, _ = server.ticket
        with pytest.raises(RuntimeError, match="does not serve the image"):
            fetch_from_driver((h, port, bytes(32)), "spark:topicmatch-nats-x.img", str(host))
        # offered images only: another name in the driver's directory is not served
        (tmp_path / "driver" / "topicmatch-nats-y.img").write_bytes(open(src, "rb").read())
        with pytest.raises(RuntimeError, match="does not serve the image"):
            fetch_from_driver(server.ticket, "spark:topicmatch-nats-y.img", str(host))
        with pytest.raises(ValueError, match="not a spark: image name"):
            server.offer("spark:../escape.img", src)
    finally:
        server.close()
    assert [n for n in _kept(host) if not n.endswith(".lock")] == []


def test_a_copy_damaged_on_the_way_is_refused_and_not_kept(tmp_path):
    from topicmatch.spark.image_inbox import fetch_from_driver
    src = _image(tmp_path)
    server, local = _served(tmp_path, src)
    data = bytearray(local.read_bytes())
    data[len(data) // 2] ^= 0xFF
    local.write_bytes(bytes(data))
    host = tmp_path / "host"
    host.mkdir()
    try:
        with pytest.raises(ValueError):
            fetch_from_driver(server.ticket, "spark:topicmatch-nats-x.img", str(host))
    finally:
        server.close()
    assert [n for n in _kept(host) if not n.endswith(".lock")] == []


# -- Spark Connect: the image as rows of the task's result --------------------

def _schema():
    from topicmatch.spark.images import _RESULT_SCHEMA
    return _RESULT_SCHEMA


class _Frame:
    """What RowInbox.rows_of reads of a job: its rows, as they come."""

    def __init__(self, batches):
        self.batches = list(batches)

    def toLocalIterator(self):
        for b in self.batches:
            yield from b.to_pylist()


def _task_rows(src, location, status="built"):
    """A task's result for a Connect client: the image's pieces, then its row."""
    from topicmatch.spark.image_inbox import ROWS, as_rows
    from topicmatch.spark.images import _result
    return list(as_rows(ROWS, status, location, src, _schema())) + [_result(status, location)]


def test_an_image_returned_as_rows_arrives_checked_and_in_place(tmp_path, monkeypatch):
    from topicmatch.spark import image_inbox
    from topicmatch.spark.image_inbox import RowInbox, as_rows
    monkeypatch.setattr(image_inbox, "ROW_BYTES", 100)
    src = _image(tmp_path, n=40)
    cache = tmp_path / "driver"
    cache.mkdir()
    batches = _task_rows(src, "spark:topicmatch-nats-x.img")
    assert len(batches) - 1 == -(-os.path.getsize(src) // 100) > 2     # pieces of ROW_BYTES
    # (a found image too; a missing one, another ticket, a location not spark:: no piece)
    found = _task_rows(src, "spark:topicmatch-nats-y.img", status="ok")
    assert not list(as_rows(image_inbox.ROWS, "missing", "spark:a.img", src, _schema()))
    assert not list(as_rows(("h", 1, b""), "built", "spark:a.img", src, _schema()))
    assert not list(as_rows(image_inbox.ROWS, "built", "/abs/a.img", src, _schema()))
    inbox = RowInbox(str(cache))
    rows = inbox.rows_of(_Frame(batches + found))
    # the result rows alone come back, the images are in the cache
    assert [(r["status"], r["path"]) for r in rows] == [("built", "spark:topicmatch-nats-x.img"),
                                                        ("ok", "spark:topicmatch-nats-y.img")]
    for name in ("x", "y"):
        local = inbox.received(f"spark:topicmatch-nats-{name}.img")
        assert local == str(cache / f"topicmatch-nats-{name}.img")
        assert open(local, "rb").read() == open(src, "rb").read()
    assert _kept(cache) == ["topicmatch-nats-x.img", "topicmatch-nats-y.img"]


@pytest.mark.parametrize("spoil", ["flip", "gap", "name"])
def test_a_damaged_or_incomplete_image_in_rows_is_refused_and_not_kept(tmp_path, monkeypatch, spoil):
    from topicmatch.spark import image_inbox
    from topicmatch.spark.image_inbox import RowInbox
    monkeypatch.setattr(image_inbox, "ROW_BYTES", 100)
    src = _image(tmp_path, n=40)
    cache = tmp_path / "driver"
    cache.mkdir()
    location = "spark:../escape.img" if spoil == "name" else "spark:topicmatch-nats-x.img"
    batches = _task_rows(src, location)
    if spoil == "flip":
        rows = batches[1].to_pylist()
        data = bytearray(rows[0]["data"])
        data[7] ^= 0xFF
        batches[1] = batches[1].set_column(batches[1].schema.get_field_index("data"), "data",
                                           pa.array([bytes(data)], pa.binary()))
    elif spoil == "gap":
        del batches[1]
    with pytest.raises(ValueError, match="returned to the client was refused"):
        RowInbox(str(cache)).rows_of(_Frame(batches))
    assert _kept(cache) == []
    assert not (tmp_path / "escape.img").exists()


def test_the_servers_result_limit_is_named_with_the_fix(tmp_path):
    """A job whose images exceed the Connect server's spark.driver.maxResultSize:
    one error naming the setting and image_dir=; any other error as it is."""
    from topicmatch.spark.image_inbox import RowInbox

    class Failing:
        def __init__(self, text):
            self.text = text

        def toLocalIterator(self):
            raise RuntimeError(self.text)
            yield

    text = ("Job aborted\nTotal size of serialized results of 3 tasks (1100.0 MiB) is bigger "
            "than spark.driver.maxResultSize (1024.0 MiB)\n\tat ...")
    with pytest.raises(RuntimeError, match=r"maxResultSize \(1024.0 MiB\).*image_dir="):
        RowInbox(str(tmp_path)).rows_of(Failing(text))
    with pytest.raises(RuntimeError, match="^executor lost$"):
        RowInbox(str(tmp_path)).rows_of(Failing("executor lost"))


# -- the server's life: no polling, a clean close, its ticket in a closure ------

def test_the_server_waits_without_polling_and_closes_at_once(tmp_path):
    """The accept blocks (no timeout to wake up for while the driver
    lives), and close() ends its thread at once, twice harmlessly; a
    fetch after the close is refused, never hung."""
    import time
    from topicmatch.spark.image_inbox import fetch_from_driver
    src = _image(tmp_path)
    server, _ = _served(tmp_path, src)
    assert server._server.gettimeout() is None
    assert server._accepting.is_alive()
    t0 = time.perf_counter()
    server.close()
    assert time.perf_counter() - t0 < 1.0
    assert not server._accepting.is_alive()
    server.close()
    host = tmp_path / "host"
    host.mkdir()
    with pytest.raises(OSError):
        fetch_from_driver(server.ticket, "spark:topicmatch-nats-x.img", str(host))


def test_a_closed_accept_that_no_connection_wakes_still_ends(tmp_path, monkeypatch):
    """Should the connection that wakes the accept fail, shutting the
    listening socket down ends the thread."""
    import time
    from topicmatch.spark import image_inbox
    server, _ = _served(tmp_path, _image(tmp_path))

    def refused(*a, **k):
        raise ConnectionRefusedError("no")
    monkeypatch.setattr(image_inbox.socket, "create_connection", refused)
    t0 = time.perf_counter()
    server.close()
    assert not server._accepting.is_alive()
    assert time.perf_counter() - t0 < 5
    assert server._server.fileno() == -1


@pytest.mark.parametrize("protocol", [2, 3, 4, 5, "cloudpickle"])
def test_the_source_travels_in_a_closure(protocol):
    """FromDriver pickles by its module path and its slot (no __reduce__ of
    its own), by pickle and by the cloudpickle that ships task closures."""
    import pickle
    from topicmatch.spark.image_inbox import FromDriver
    src = FromDriver(("127.0.0.1", 4242, b"s" * 32))
    if protocol == "cloudpickle":
        from pyspark import cloudpickle
        got = pickle.loads(cloudpickle.dumps(lambda: src))()
    else:
        got = pickle.loads(pickle.dumps(src, protocol=protocol))
    assert type(got) is FromDriver and got.ticket == src.ticket
    assert not hasattr(got, "__dict__")


# -- prefetch: a host fetches what the others build while the job runs -----------

def test_an_image_is_offered_as_soon_as_it_arrives(tmp_path):
    """The inbox hands each image on (to the driver's server) when it is in
    place, not when the job ends; one refused is never handed on."""
    src = _image(tmp_path)
    cache = tmp_path / "driver"
    cache.mkdir()
    got = []
    with Inbox("127.0.0.1", str(cache), on_received=lambda loc, local: got.append((loc, local))) \
            as inbox:
        send(inbox.ticket, "spark:topicmatch-nats-x.img", src)
        assert got == [("spark:topicmatch-nats-x.img", str(cache / "topicmatch-nats-x.img"))]
        data = bytearray(open(src, "rb").read())
        data[len(data) // 2] ^= 0xFF
        bad = tmp_path / "bad.img"
        bad.write_bytes(bytes(data))
        with pytest.raises(RuntimeError):
            send(inbox.ticket, "spark:topicmatch-nats-y.img", str(bad))
    assert len(got) == 1


def test_prefetch_fetches_each_image_once_as_it_is_served(tmp_path, monkeypatch):
    """prefetch (after a build task): a thread fetches the images this host
    lacks as the driver comes to serve them, once each; one this host holds
    (it built it) is never fetched; a second prefetch of the same set in
    the process starts no second thread; the thread ends once it has all."""
    import threading
    import time

    from topicmatch.spark import image_inbox
    from topicmatch.spark.image_inbox import FromDriver, ImageServer, prefetch
    from topicmatch.spark.ship import LOAD_LOG_ENV
    log = tmp_path / "loads.log"
    monkeypatch.setenv(LOAD_LOG_ENV, str(log))
    src = _image(tmp_path)
    driver = tmp_path / "driver"
    driver.mkdir()
    host = tmp_path / "host"
    host.mkdir()
    names = ["topicmatch-nats-a", "topicmatch-nats-b", "topicmatch-nats-own"]
    for n in names:
        (driver / (n + ".img")).write_bytes(open(src, "rb").read())
    (host / "topicmatch-nats-own.img").write_bytes(open(src, "rb").read())   # built here
    locations = ["spark:" + n + ".img" for n in names]
    server = ImageServer("127.0.0.1")
    try:
        server.offer(locations[0], str(driver / (names[0] + ".img")))
        before = set(threading.enumerate())
        prefetch(FromDriver(server.ticket), locations, str(host))
        prefetch(FromDriver(server.ticket), locations, str(host))
        started = [t for t in set(threading.enumerate()) - before
                   if t.name == "topicmatch-image-prefetch"]
        assert len(started) == 1
        deadline = time.monotonic() + 10
        while not (host / "topicmatch-nats-a.img").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert (host / "topicmatch-nats-a.img").exists()
        assert not (host / "topicmatch-nats-b.img").exists()    # not served yet: waited for
        server.offer(locations[1], str(driver / (names[1] + ".img")))
        started[0].join(timeout=10)
        assert not started[0].is_alive()
    finally:
        server.close()
    assert sorted(_fetches(log)) == [("topicmatch-nats-a", str(host)),
                                     ("topicmatch-nats-b", str(host))]
    assert open(host / "topicmatch-nats-b.img", "rb").read() == open(src, "rb").read()
    assert image_inbox.PREFETCH_WAIT_S > 0


def test_prefetch_ends_when_the_driver_is_gone(tmp_path):
    import threading

    from topicmatch.spark.image_inbox import FromDriver, ImageServer, prefetch
    server = ImageServer("127.0.0.1")
    server.close()
    before = set(threading.enumerate())
    prefetch(FromDriver(server.ticket), ["spark:topicmatch-nats-gone.img"], str(tmp_path))
    for t in set(threading.enumerate()) - before:
        t.join(timeout=10)
        assert not t.is_alive()
    assert not (tmp_path / "topicmatch-nats-gone.img").exists()
