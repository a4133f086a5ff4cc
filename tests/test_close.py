"""Sublist.close() and ``with`` (issue 48, item 5): close() frees the index
at once -- an opened image's mapping included --, every call after it
raises ClosedError (a TopicmatchError and a ValueError) without touching
freed memory, a second close() does nothing, and close() while other
threads are inside calls waits for them.  Run under ASan by
`make test-sanitize` (a use after free is a report there, not luck)."""
import os
import pickle
import signal
import sys
import threading
import time

import pytest

import topicmatch
from topicmatch import ClosedError, Sublist, TopicmatchError

LINUX = sys.platform.startswith("linux")


def _filled(cache_size=0):
    sl = Sublist("nats", cache_size=cache_size)
    sl.insert_many([f"a.{i}.*" for i in range(200)] + ["a.>"], list(range(200)) + [999])
    sl.insert("q.x", 5, queue="g")
    return sl


def _kinds(tmp_path):
    """A plain index, a cached one, one over bytes and one over a mapped file."""
    plain = _filled()
    path = tmp_path / "idx.img"
    plain.save(path)
    return {
        "plain": plain,
        "cached": _filled(cache_size=64),
        "from_bytes": Sublist.from_bytes(plain.to_bytes(), cache_size=16),
        "open": Sublist.open(path),
    }


# Every public method, with arguments it accepts on an open index.
CALLS = {
    "insert": lambda sl, p: sl.insert("b.c", 1),
    "insert queue": lambda sl, p: sl.insert("b.c", 1, queue="g"),
    "discard": lambda sl, p: sl.discard("a.1.*", 1),
    "remove": lambda sl, p: sl.remove("a.1.*", 1),
    "insert_many": lambda sl, p: sl.insert_many(["b.c", "b.d"], [1, 2]),
    "insert_many queues": lambda sl, p: sl.insert_many(["b.c"], [1], ["g"]),
    "remove_many": lambda sl, p: sl.remove_many(["a.1.*"], [1]),
    "match": lambda sl, p: sl.match("a.1.x"),
    "match dedupe": lambda sl, p: sl.match("a.1.x", dedupe=True),
    "match_many": lambda sl, p: sl.match_many(["a.1.x", "a.2.y"]),
    "match_many threads": lambda sl, p: sl.match_many([f"a.{i % 300}.x" for i in range(20000)], threads=2),
    "match_many keys": lambda sl, p: sl.match_many(["q.x"], keys=["k"], queues="pick"),
    "num_interest": lambda sl, p: sl.num_interest("a.1.x"),
    "has_interest": lambda sl, p: sl.has_interest("a.1.x"),
    "reverse_match": lambda sl, p: sl.reverse_match("a.*.x"),
    "stats": lambda sl, p: sl.stats(),
    "len": lambda sl, p: len(sl),
    "bool": lambda sl, p: bool(sl),
    "generation": lambda sl, p: sl.generation,
    "to_bytes": lambda sl, p: sl.to_bytes(),
    "to_bytes v2": lambda sl, p: sl.to_bytes(version=2),
    "save": lambda sl, p: sl.save(p / "out.img"),
    "pickle": lambda sl, p: pickle.dumps(sl),
    "with": lambda sl, p: sl.__enter__(),
}


def test_closed_error_is_a_topicmatch_error_and_a_value_error():
    assert issubclass(ClosedError, TopicmatchError) and issubclass(ClosedError, ValueError)
    assert topicmatch.ClosedError is ClosedError and "ClosedError" in topicmatch.__all__


@pytest.mark.parametrize("call", sorted(CALLS))
def test_every_call_after_close_raises_closed_error(tmp_path, call):
    for kind, sl in _kinds(tmp_path).items():
        out = tmp_path / kind
        out.mkdir()
        CALLS[call](sl, out)                 # works while open
        sl.close()
        assert sl.closed
        with pytest.raises(ClosedError, match=r"^this topicmatch.Sublist \(nats\) is closed: ") as e:
            CALLS[call](sl, out)
        assert isinstance(e.value, ValueError)
        # nothing was written for a closed index (save() makes its temporary
        # file only once it knows it can write)
        if call == "save":
            assert sorted(os.listdir(out)) == ["out.img"]
            (out / "out.img").unlink()
            with pytest.raises(ClosedError):
                sl.save(out / "out.img")
            assert os.listdir(out) == []


def test_the_error_names_an_opened_image(tmp_path):
    path = tmp_path / "idx.img"
    _filled().save(path)
    sl = Sublist.open(path)
    sl.close()
    with pytest.raises(ClosedError, match=r"let go of its image '.*idx\.img'"):
        sl.match("a.1.x")


def test_bad_arguments_after_close_say_closed_for_bulk_calls():
    sl = _filled()
    sl.close()
    with pytest.raises(ClosedError):
        sl.insert_many("not a list", [1])       # the closed index is said first


def test_also_may_not_be_closed():
    a, b = _filled(), _filled()
    b.close()
    with pytest.raises(ClosedError):
        a.match_many(["a.1.x"], also=b)
    # a is still usable, and not left held: close() does not wait forever
    assert a.match_many(["a.1.x"]).sub_ids.tolist() == [1, 999]
    a.close()
    assert a.closed


def test_repr_and_dialect_after_close():
    sl = Sublist("mqtt")
    sl.insert("a/#", 1)
    assert repr(sl) == "<topicmatch.Sublist dialect='mqtt' subscriptions=1>"
    sl.close()
    assert repr(sl) == "<topicmatch.Sublist dialect='mqtt' closed>"
    assert sl.dialect == "mqtt"


def test_close_twice_is_a_no_op(tmp_path):
    for sl in _kinds(tmp_path).values():
        assert not sl.closed
        assert sl.close() is None
        assert sl.close() is None
        assert sl.closed
        with pytest.raises(ClosedError):
            sl.match("a.1.x")


def test_with_block_closes(tmp_path):
    path = tmp_path / "idx.img"
    _filled().save(path)
    with Sublist.open(path) as sl:
        assert not sl.closed
        assert sl.match("a.7.x").subs == [7, 999]
    assert sl.closed
    with pytest.raises(ClosedError):
        sl.match("a.7.x")
    with Sublist("amqp", cache_size=8) as sl:
        sl.insert("a.#", 1)
        assert sl.match("a.b.c").subs == [1]
    assert sl.closed


def test_with_block_closes_on_an_exception_and_lets_it_through():
    with pytest.raises(KeyError):
        with _filled() as sl:
            raise KeyError("x")
    assert sl.closed


def test_with_a_closed_index_refuses():
    sl = _filled()
    sl.close()
    with pytest.raises(ClosedError):
        with sl:
            pass


def _mapped(path):
    """Is the file at path mapped into this process?"""
    want = os.path.realpath(path)
    with open("/proc/self/maps") as f:
        return any(line.rstrip("\n").endswith(" " + want) or line.rstrip("\n").endswith(want + " (deleted)")
                   for line in f)


@pytest.mark.skipif(not LINUX, reason="reads /proc/self/maps")
def test_close_unmaps_the_file_at_once(tmp_path):
    path = tmp_path / "idx.img"
    _filled().save(path)
    sl = Sublist.open(path, cache_size=32)
    keep = sl                                   # another reference: close() does not wait for the GC
    assert sl.match("a.3.x").subs == [3, 999]
    assert _mapped(path)
    sl.close()
    assert not _mapped(path)
    assert keep.closed


def test_the_file_can_be_deleted_and_replaced_after_close(tmp_path):
    path = tmp_path / "idx.img"
    _filled().save(path)
    sl = Sublist.open(path)
    assert sl.match("a.3.x").subs == [3, 999]
    sl.close()
    os.remove(path)
    assert not path.exists()
    new = Sublist()
    new.insert("a.3.x", 42)
    new.save(path)
    with Sublist.open(path) as again:
        assert again.match("a.3.x").subs == [42]
    # a file replaced in place (not renamed over) after close harms nothing:
    # the closed index no longer reads it
    sl2 = Sublist.open(path)
    sl2.close()
    with open(path, "r+b") as f:
        f.truncate(16)
    with pytest.raises(ClosedError):
        sl2.match("a.3.x")


def test_close_lets_go_of_the_callers_buffer():
    blob = _filled().to_bytes()
    view = memoryview(blob)
    sl = Sublist.from_bytes(view)               # bytes: matched in place, the view held
    assert sl.match("a.3.x").subs == [3, 999]
    with pytest.raises(BufferError):
        view.release()                          # exported to the index
    sl.close()
    view.release()                              # no export left


def _closing_under_threads(sl, work, nthreads=4, run_s=0.3):
    """nthreads threads each call work(sl) until it raises; the main thread
    closes sl meanwhile.  Each thread must end on ClosedError, every answer
    before it right.  Returns the calls made."""
    errors, calls = [], [0] * nthreads
    started = threading.Barrier(nthreads + 1)

    def run(k):
        started.wait()
        try:
            while True:
                work(sl)
                calls[k] += 1
        except ClosedError:
            pass
        except BaseException as e:              # pragma: no cover - the failure shown
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(nthreads)]
    for t in threads:
        t.start()
    started.wait()
    time.sleep(run_s)
    sl.close()
    assert sl.closed
    for t in threads:
        t.join(60)
        assert not t.is_alive()
    assert errors == []
    return sum(calls)


def _check_match(sl):
    assert sl.match("a.5.x").subs == [5, 999]
    assert sl.match("q.x").groups == [("g", None, [5])]


def _check_batch(sl):
    b = sl.match_many([f"a.{i % 200}.x" for i in range(3000)], threads=2)
    assert len(b) == 3000 and b[7].tolist() == [7, 999]


def _check_mixed(sl):
    assert sl.has_interest("a.9.y")
    assert sl.num_interest("a.9.y") == (2, 0)
    assert sorted(sl.reverse_match("a.9.y")) == [("a.9.*", 9, None), ("a.>", 999, None)]
    assert sl.stats()["subscriptions"] == 202


@pytest.mark.parametrize("work", [_check_match, _check_batch, _check_mixed], ids=["match", "batch", "mixed"])
@pytest.mark.parametrize("kind", ["plain", "cached", "from_bytes", "open"])
def test_close_while_threads_call(tmp_path, kind, work):
    sl = _kinds(tmp_path)[kind]
    # walks of this small index keep the GIL unless told otherwise: let it
    # go for every walk, so that the threads are inside C while close() runs
    old = topicmatch._core._set_walk_releases_gil(True)
    try:
        assert _closing_under_threads(sl, work) > 0
    finally:
        topicmatch._core._set_walk_releases_gil(old)


def test_close_while_writers_and_cached_readers(tmp_path):
    sl = _filled(cache_size=32)
    n = [0]

    def work(s):
        n[0] += 1
        s.insert(f"w.{n[0] % 50}", n[0] % 7)
        s.discard(f"w.{(n[0] + 25) % 50}", (n[0] + 25) % 7)
        assert s.match("a.3.x").subs == [3, 999]
        s.match(f"w.{n[0] % 50}")

    _closing_under_threads(sl, work)


def test_close_waits_for_a_batch_in_flight():
    """A match_many of many rows on two threads, started before close():
    it completes with every row right (close() waited for it), or it had
    not started and raises ClosedError."""
    sl = _filled(cache_size=256)
    rows = [f"a.{i % 200}.x" for i in range(200_000)]
    got = {}

    def run():
        try:
            got["result"] = sl.match_many(rows, threads=2)
        except ClosedError as e:
            got["error"] = e

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.02)
    sl.close()
    t.join(60)
    assert sl.closed and not t.is_alive()
    if "result" in got:
        b = got["result"]
        assert len(b) == len(rows)
        assert b.counts().tolist() == [2] * len(rows)
        assert b[123].tolist() == [123, 999]
    else:
        assert isinstance(got["error"], ClosedError)


def test_close_from_many_threads_at_once(tmp_path):
    for sl in _kinds(tmp_path).values():
        barrier = threading.Barrier(4)
        errors = []

        def run():
            barrier.wait()
            try:
                sl.close()
                assert sl.closed
            except BaseException as e:          # pragma: no cover - the failure shown
                errors.append(e)

        threads = [threading.Thread(target=run) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert errors == []
        with pytest.raises(ClosedError):
            sl.match("a.1.x")


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs setitimer")
def test_close_from_inside_a_call_refuses_instead_of_waiting_for_itself():
    """A signal handler runs inside match_many (between its checks of
    Ctrl-C, the index held): a close() there would wait for its own caller
    forever.  It refuses, and the index closes once the call is over."""
    sl = _filled()
    other = _filled()
    rows = [f"a.{i % 200}.x" for i in range(300_000)]
    seen = []

    def handler(signum, frame):
        if seen:
            return
        other.close()                           # not in a call: closes
        try:
            sl.close()
        except TopicmatchError as e:
            seen.append(e)

    old = signal.signal(signal.SIGALRM, handler)
    try:
        for _ in range(20):
            signal.setitimer(signal.ITIMER_REAL, 0.005)
            b = sl.match_many(rows, threads=2)
            signal.setitimer(signal.ITIMER_REAL, 0)
            if seen:
                break
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    if not seen:
        pytest.skip("the timer never fired inside match_many")
    assert type(seen[0]) is topicmatch.TopicmatchRuntimeError      # a RuntimeError, as a thread's join() of itself
    assert "close() refused" in str(seen[0])
    assert not sl.closed and other.closed
    assert b.counts().tolist() == [2] * len(rows)
    sl.close()
    assert sl.closed
