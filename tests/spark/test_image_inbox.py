"""The driver's inbox for spark: images (topicmatch.spark.image_inbox), without
Spark: a task's image arrives whole and checked, or not at all; nothing
without the call's secret is written; a name cannot steer where it goes."""
import os

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
