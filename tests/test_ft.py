"""match() from many threads, the rule for letting go of the GIL, and --
on a free-threaded CPython (`make test-ft`) -- that the module keeps the
GIL off by its own declaration.

The same file runs on an ordinary CPython: there the free-threading checks
skip and the others test the two paths of match() (the GIL held for a
cached answer or a small index, let go for a walk of a big one) and the
exact counts of stats() under threads."""
import os
import subprocess
import sys
import sysconfig
import threading

import pytest

import topicmatch
from topicmatch import _reference as R

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
BIG = 1000


@pytest.fixture(params=[False, True], ids=["walk-keeps-gil", "walk-releases-gil"])
def walk_releases_gil(request):
    """match()'s two paths: the walk with the GIL held (the default: it is
    let go only to wait for a writer), and every walk without it after a
    cache-only look-up (_set_walk_releases_gil, the testing hook)."""
    old = topicmatch._core._set_walk_releases_gil(request.param)
    yield request.param
    topicmatch._core._set_walk_releases_gil(old)


@pytest.mark.skipif(not FREE_THREADED, reason="needs a free-threaded CPython (make test-ft)")
def test_importing_keeps_the_gil_off():
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    code = ("import sys, warnings; warnings.simplefilter('error');"
            "import topicmatch, topicmatch._core; print(sys._is_gil_enabled())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.skipif(not FREE_THREADED, reason="needs a free-threaded CPython (make test-ft)")
def test_this_run_has_the_gil_off():
    assert not sys._is_gil_enabled()
    assert "PYTHON_GIL" not in os.environ


def _index(n, cache_size):
    sl = topicmatch.Sublist(cache_size=cache_size)
    filters = [f"svc.{i % 97}.{i}" if i % 3 else f"svc.{i % 97}.*" for i in range(n)]
    sl.insert_many(filters, list(range(n)))
    return sl, list(zip(filters, range(n), [None] * n))


@pytest.mark.parametrize("n", [10, BIG, 5 * BIG])
@pytest.mark.parametrize("cache_size", [0, 64])
def test_both_paths_answer_as_the_reference(n, cache_size, walk_releases_gil):
    """The walk with the GIL held, and (walk_releases_gil) a miss walked
    without it after a cache-only look-up with it."""
    sl, subs = _index(n, cache_size)
    subjects = [f"svc.{i % 97}.{i}" for i in range(0, n, max(1, n // 40))] + ["svc.1.x", "none"]
    want = {s: sorted(i for f, i, q in subs if R.subject_matches(f, s, "nats")) for s in subjects}
    for _ in range(2):                      # the second round hits the cache
        for s in subjects:
            assert sl.match(s).subs == want[s]


@pytest.mark.parametrize("cache_size", [0, 64])
def test_stats_count_each_call_once(cache_size, walk_releases_gil):
    """A cache-only look-up that found nothing and was retried with the
    walk counts once: hits + misses and matches are the calls made."""
    sl, _ = _index(5 * BIG, cache_size)
    subjects = [f"svc.{i % 97}.{i}" for i in range(0, 2000, 3)]
    for s in subjects * 3:
        sl.match(s)
    st = sl.stats()
    assert st["matches"] == 3 * len(subjects)
    if cache_size:
        assert st["cache_hits"] + st["cache_misses"] == 3 * len(subjects)


@pytest.mark.parametrize("n", [10, 5 * BIG])
def test_threads_matching_beside_a_writer(n, walk_releases_gil):
    """8 threads call match() (the cache on) while a writer toggles a
    matching filter: every answer is the stable one, with or without the
    toggled id; stats() counts exactly the calls made."""
    sl, subs = _index(n, 256)
    subjects = [f"svc.{i % 97}.{i}" for i in range(0, n, max(1, n // 30))]
    want = {s: sorted(i for f, i, q in subs if R.subject_matches(f, s, "nats")) for s in subjects}
    before = sl.stats()
    stop = threading.Event()
    bad = []
    calls = [0] * 8

    def writer():
        while not stop.is_set():
            sl.insert("svc.>", -1)
            sl.remove("svc.>", -1)

    def reader(t):
        match = sl.match
        for r in range(30):
            for s in subjects:
                got = match(s).subs
                calls[t] += 1
                if [i for i in got if i != -1] != want[s]:
                    bad.append((s, got))

    w = threading.Thread(target=writer)
    w.start()
    rs = [threading.Thread(target=reader, args=(t,)) for t in range(8)]
    for t in rs:
        t.start()
    for t in rs:
        t.join()
    stop.set()
    w.join()
    assert not bad
    after = sl.stats()
    assert after["matches"] - before["matches"] == sum(calls)
    looked_up = lambda st: st["cache_hits"] + st["cache_misses"]
    assert looked_up(after) - looked_up(before) == sum(calls)


def test_match_results_shared_between_threads():
    """Two threads asking one MatchResult for its empty lists at once get
    the same list (free-threaded: a critical section makes the test and the
    set one step)."""
    sl = topicmatch.Sublist()
    for _ in range(200):
        m = sl.match("nothing.here")
        got = []
        barrier = threading.Barrier(4)

        def ask():
            barrier.wait()
            got.append((id(m.subs), id(m.groups)))

        ts = [threading.Thread(target=ask) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert len(set(got)) == 1
