"""save() and to_bytes() of a built index write a large keyed table on the
process's threads, its pages made ready on a thread beside its sort
(csrc/serial/fs_image_write.c, table_threads and ready_beside_sort): the
bytes are the one-thread writer's, byte for byte.  The tuning table's
image_write_par_entries (csrc/api/fs_tuning.h) forces that path on a small
index, column_cpus as if the process had several processors, and the
image_write_threaded counter shows the path was taken."""
import os
import random

import pytest

import topicmatch
from topicmatch import _core
from topicmatch._dialects import DIALECTS
from image_helpers import build


@pytest.fixture
def threaded():
    """Set(n): tables of n entries or more written on threads (0: none),
    as if the process had 4 processors; the settings restored after."""
    old = (_core._tuning("image_write_par_entries"), _core._tuning("column_cpus"))
    _core._tuning("column_cpus", 4)

    def set_to(n):
        _core._tuning("image_write_par_entries", n)

    yield set_to
    _core._tuning("image_write_par_entries", old[0])
    _core._tuning("column_cpus", old[1])


def _filters(dialect, rnd, n):
    """n rows: literal filters of 1-5 tokens (some long, so entries differ in
    size), wildcard filters of a few shapes (their tables) and some for the
    trie, a filter repeated with many ids, queue groups of several members."""
    sep, one, rest = {"nats": (".", "*", ">"), "mqtt": ("/", "+", "#"), "amqp": (".", "*", "#")}[dialect]
    rows = []
    for i in range(n):
        toks = [rnd.choice(["a", "b", f"c{rnd.randrange(300)}", "d" * rnd.randrange(1, 40)])
                for _ in range(rnd.randrange(1, 6))]
        r = rnd.random()
        if r < 0.15:
            toks[rnd.randrange(len(toks))] = one                # a shape's table
        elif r < 0.2:
            toks.append(rest)                                   # the trie
        q = f"g{rnd.randrange(5)}" if rnd.random() < 0.25 else None
        rows.append((sep.join(toks), rnd.randrange(1 << 40), q))
    rows += [("hot" + sep + "x", i, None) for i in range(300)]  # many ids
    rows += [("hot" + sep + "y", i, f"q{i % 7}") for i in range(200)]  # groups of many members
    return rows


def _written(sl, tmp_path, name):
    path = os.path.join(tmp_path, name)
    sl.save(path, durable=False)
    with open(path, "rb") as f:
        return sl.to_bytes(), f.read()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_threaded_writer_writes_the_one_thread_bytes(dialect, threaded, tmp_path):
    sl = build(dialect, _filters(dialect, random.Random(dialect), 6000))
    threaded(0)
    want, saved = _written(sl, tmp_path, "one.img")
    assert saved == want
    for n in (1, 7, 100, 1000, 1 << 40):    # every table threaded (chunks of one entry up), ..., none
        before = _core._tuning("image_write_threaded")
        threaded(n)
        got, saved = _written(sl, tmp_path, f"t{n}.img")
        assert got == want and saved == want, n
        threads = _core._tuning("image_write_threaded") - before
        assert threads == 0 if n == 1 << 40 else threads >= 2, (n, threads)    # to_bytes' and save's
    again = topicmatch.Sublist.from_bytes(want)
    assert again.match("hot" + {"mqtt": "/"}.get(dialect, ".") + "x").subs == list(range(300))


def test_threaded_writer_into_a_room_too_small(threaded):
    # to_bytes' room outgrown before a table (the writer moves to memory of
    # its own), inside one (the chunks past the room written by the caller,
    # after the threads' parts), at its last bytes: the bytes the same.
    sl = build("nats", _filters("nats", random.Random(3), 3000))
    threaded(0)
    want = sl.to_bytes()
    threaded(10)
    try:
        for room in (4096, len(want) // 2, len(want) - 5000, len(want) - 8, len(want)):
            _core._tuning("image_room", room)
            assert sl.to_bytes() == want, room
    finally:
        _core._tuning("image_room", -1)


def test_threaded_writer_out_of_memory_is_clean(threaded, tmp_path):
    # Every allocation of a threaded to_bytes and save failed in turn: a
    # clean MemoryError, and the index writes the same bytes after.
    sl = build("amqp", _filters("amqp", random.Random(5), 400))
    threaded(0)
    want = sl.to_bytes()
    threaded(10)
    assert sl.to_bytes() == want            # the pool's workers started, outside the count
    path = os.path.join(tmp_path, "oom.img")
    for op in (sl.to_bytes, lambda: sl.save(path, durable=False)):
        n, failed = 1, 0
        while True:
            _core._tuning("alloc_fail_nth", n)
            try:
                op()
            except MemoryError:
                failed += 1
                assert _core._tuning("alloc_failed") == 1
            else:
                assert _core._tuning("alloc_failed") == 0
                break
            finally:
                _core._tuning("alloc_fail_nth", 0)
            n += 1
        assert failed >= 3, "no allocation failure was injected"
    assert sl.to_bytes() == want
    with open(path, "rb") as f:
        assert f.read() == want
