"""docs/embedding.md's examples (each marked `<!-- example: NAME -->`), run
as written:

* broker: it serves, a client connects, and `await broker.shutdown()` stops
  it -- the port is closed afterwards;
* prefork: workers started with "fork" and with "spawn" open one saved
  image with verify=False and answer exactly like the built index; on
  Linux each one's private memory grows by a small fraction of the file
  (its pages are shared), while a control that rebuilds the index in the
  worker grows by most of it;
* hot-swap: readers (threads, and a process that reopens the path) match
  while a writer saves new images over the path several times: no request
  fails, every answer is one whole set's, and the old index answers from
  its unlinked file until it is dropped;
* routing-image: topicmatch.amqtt's broker started from a routing image routes
  to paho clients that never subscribed (tests/test_amqtt_image.py has the
  rest).

Examples that other processes import are written to a module first (a
spawned worker imports its function by name).
"""
import asyncio
import collections
import gc
import importlib
import multiprocessing
import os
import re
import socket
import sys
import threading
import time

import pytest

from topicmatch import Sublist

pytestmark = pytest.mark.amqtt          # the examples serve amqtt's broker in-process

DOC = os.path.join(os.path.dirname(__file__), "..", "docs", "embedding.md")


def _example(name):
    text = open(DOC, encoding="utf-8").read()
    m = re.search(r"<!-- example: " + re.escape(name) + r" -->\s*```python\n(.*?)```", text, re.S)
    assert m, f"docs/embedding.md has no example {name!r}"
    return m.group(1)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_broker_example_starts_and_shuts_down():
    pytest.importorskip("amqtt", reason="the example needs amqtt (pip install 'topicmatch[amqtt]')")
    ns = {"__name__": "__doc_example__"}
    exec(compile(_example("broker"), "docs/embedding.md:broker", "exec"), ns)
    port = _free_port()

    async def run():
        stop = asyncio.Event()
        task = asyncio.create_task(ns["serve"](stop, f"127.0.0.1:{port}"))
        for _ in range(200):                       # until it listens
            try:
                _, w = await asyncio.open_connection("127.0.0.1", port)
                w.close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        else:
            pytest.fail("the broker never listened")
        stop.set()
        await asyncio.wait_for(task, 30)
        with pytest.raises(OSError):               # shut down: nothing listens
            await asyncio.open_connection("127.0.0.1", port)

    asyncio.run(run())


def _module(name, folder):
    """The example as an importable module (a spawned process imports its
    functions by name; spawn passes sys.path on)."""
    modname = "doc_example_" + name.replace("-", "_")
    (folder / (modname + ".py")).write_text(_example(name), encoding="utf-8")
    sys.path.insert(0, str(folder))
    sys.modules.pop(modname, None)
    importlib.invalidate_caches()
    return importlib.import_module(modname)


def _methods():
    return [m for m in ("fork", "spawn") if m in multiprocessing.get_all_start_methods()]


# -- prefork ------------------------------------------------------------------
N_SUBS = 200_000
N_SUBJECTS = 20_000
WORKERS = 3
SHARED_AT_MOST = 0.25        # of the file: a worker's private growth across open + matching
COPIED_AT_LEAST = 0.5        # of the file: the control's, which rebuilds the index


def _prefork_set():
    """200,000 NATS subscriptions: literal, '*' and '>' filters, some
    filters held twice, a tenth in queue groups; and 20,000 subjects over
    all of them (some matching nothing)."""
    filters, ids, queues = [], [], []
    for i in range(N_SUBS):
        k = i % 5
        filters.append((f"dev.{i}.status", f"dev.{i}.*.temp", f"site.{i % 500}.dev.{i}.>",
                        f"fleet.{i % 97}.*.cmd.{i}", f"dev.{i - 4}.status")[k])
        ids.append(i)
        queues.append(f"q{i % 3}" if i % 10 == 7 else None)
    subjects = []
    for j in range(N_SUBJECTS):
        i = (j * 7919) % N_SUBS
        if j % 8 == 0:
            subjects.append(f"none.{i}")
            continue
        subjects.append((f"dev.{i}.status", f"dev.{i}.x.temp", f"site.{i % 500}.dev.{i}.a.b",
                         f"fleet.{i % 97}.y.cmd.{i}", f"dev.{i - 4}.status")[i % 5])
    return filters, ids, queues, subjects


@pytest.fixture(scope="module")
def prefork(tmp_path_factory):
    folder = tmp_path_factory.mktemp("prefork")
    mod = _module("prefork", folder)
    filters, ids, queues, subjects = _prefork_set()
    built = Sublist("nats")
    built.insert_many(filters, ids, queues)
    del filters, ids, queues
    want = [(r.subs, r.groups) for r in map(built.match, subjects)]
    assert sum(1 for subs, groups in want if subs) > N_SUBJECTS // 2
    assert any(groups for subs, groups in want)
    yield mod, folder, built, subjects, want
    sys.path.remove(str(folder))


BATCH = 500                  # subjects per request


def _drive(workers, subjects, want):
    """Send each worker the subjects in batches (requests) and check every
    answer against want as it comes; [private growth] per worker, asked of
    all before any stops.  A forked worker shares this
    process's pages: a page written here after the fork is left to the
    workers (and counts as private to the last one mapping it), so nothing
    accumulates here and no worker exits before all have answered."""
    growth = []
    try:
        for at in range(0, len(subjects), BATCH):
            for _p, conn in workers:
                conn.send(subjects[at:at + BATCH])
            for k, (_p, conn) in enumerate(workers):
                got = conn.recv()
                if got != want[at:at + BATCH]:
                    first = next(i for i, (g, w) in enumerate(zip(got, want[at:])) if g != w)
                    pytest.fail(f"worker {k}: {subjects[at + first]!r} -> {got[first]}, "
                                f"the built index says {want[at + first]}")
        for _p, conn in workers:                    # asked while every worker is alive
            conn.send("private growth")
        growth = [conn.recv() for _p, conn in workers]
        for _p, conn in workers:
            conn.send(None)
    finally:
        for p, conn in workers:
            p.join(30)
            if p.is_alive():
                p.kill()
            conn.close()
    assert all(p.exitcode == 0 for p, _ in workers), [p.exitcode for p, _ in workers]
    return growth


@pytest.mark.parametrize("method", _methods())
def test_prefork_workers_answer_from_one_shared_image(prefork, method):
    """serve(): the parent saves and verifies; each worker opens the file
    with verify=False and answers every subject exactly as the built index
    (subs and groups, in order); on Linux each worker's private memory grows
    by under a quarter of the file across open and matching."""
    mod, folder, built, subjects, want = prefork
    path = folder / f"index-{method}.img"
    checked, workers = mod.serve(built, str(path), WORKERS, method)
    size = os.path.getsize(path)
    assert checked.stats()["mapped_bytes"] == size and len(checked) == N_SUBS
    growth = _drive(workers, subjects, want)
    print(f"\n{method}: image {size:,} bytes; private growth per worker "
          + ", ".join(f"{g:,} ({g / size:.1%})" for g in growth if g is not None))
    if mod.private_bytes() is None:
        return                                      # no /proc/self/smaps_rollup: answers only
    assert all(g < SHARED_AT_MOST * size for g in growth), (growth, size)
    del checked


def test_prefork_control_a_rebuilt_index_is_seen_as_private(prefork):
    """The measure can fail: the same worker on a version 2 file (which
    open() reads and rebuilds in the worker's own memory) grows by most of
    the image's size."""
    mod, folder, built, subjects, want = prefork
    if mod.private_bytes() is None:
        pytest.skip("private memory is read from Linux's /proc/self/smaps_rollup")
    image = folder / "control.img"
    built.save(str(image))
    v2 = folder / "control-v2.idx"
    v2.write_bytes(built.to_bytes(version=2))
    [growth] = _drive(mod.start_workers(str(v2), 1, _methods()[-1]), subjects, want)
    size = os.path.getsize(image)
    print(f"\ncontrol (version 2, rebuilt): private growth {growth:,} ({growth / size:.1%} of the image)")
    assert growth > COPIED_AT_LEAST * size, (growth, size)


# -- hot swap -----------------------------------------------------------------
VERSION = 1_000_000          # version v's ids are v * VERSION + i
SWAPS = 6


def _versioned(v, n=20_000):
    """Version v of a set: the same filters every time, ids v * VERSION + i."""
    sl = Sublist("nats")
    sl.insert_many([f"room.{i % 2000}.{'*' if i % 2 else i}" for i in range(n)],
                   [v * VERSION + i for i in range(n)])
    return sl


def _deleted_maps(path):
    """Mappings of path's old (unlinked) files in this process (Linux)."""
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if line.rstrip().endswith(str(path) + " (deleted)"))


@pytest.mark.skipif(sys.platform == "win32", reason="Windows cannot replace a mapped file (docs/embedding.md)")
def test_hot_swap_readers_see_one_whole_set_at_a_time(tmp_path):
    mod = _module("hot-swap", tmp_path)
    try:
        path = tmp_path / "routes.img"
        images = [_versioned(v) for v in range(SWAPS + 1)]
        subjects = [f"room.{j % 2000}.{j}" for j in range(0, 20_000, 7)]
        base = {s: [i for i in images[0].match(s).subs] for s in subjects}     # version 0's ids
        assert all(base[s] for s in subjects)
        images[0].save(str(path))
        router = mod.Router(str(path))
        old = router.index
        old_inode = os.stat(path).st_ino

        stop = threading.Event()
        seen = collections.Counter()
        problems = []

        def reader():
            last = 0
            k = 0
            while not stop.is_set() or k == 0:
                s = subjects[k % len(subjects)]
                k += 1
                try:
                    subs = router.match(s).subs
                except Exception as e:          # noqa: BLE001 -- no request may fail
                    problems.append(repr(e))
                    continue
                v = subs[0] // VERSION if subs else None
                if subs != [v * VERSION + i for i in base[s]]:
                    problems.append(("mixed or wrong", s, subs[:5]))
                elif v < last:
                    problems.append(("went back", s, last, v))
                else:
                    last = v
                    seen[v] += 1

        ctx = multiprocessing.get_context(_methods()[-1])
        pstop = ctx.Event()
        mine, theirs = ctx.Pipe()
        proc = ctx.Process(target=__import__("embedding_helpers").reopen_while_swapped,
                           args=(str(path), subjects[:50], pstop, theirs), daemon=True)
        proc.start()
        threads = [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        try:
            for v in range(1, SWAPS + 1):
                time.sleep(0.05)
                if v % 2:
                    mod.swap(router, images[v])                     # save over the path, reopen
                else:
                    tmp = tmp_path / ".routes.img.new"              # or: a file made elsewhere
                    tmp.write_bytes(images[v].to_bytes())
                    os.replace(tmp, path)
                    router.reload()
            time.sleep(0.05)
        finally:
            stop.set()
            pstop.set()
            for t in threads:
                t.join(60)
            opens, pversions, perrors = mine.recv() if mine.poll(60) else (0, [], ["no report"])
            proc.join(30)
        assert not problems, problems[:5]
        assert not perrors, perrors[:5]
        assert len(seen) >= 2 and max(seen) == SWAPS, seen       # the readers did see swaps
        assert opens >= 1 and pversions and set(pversions) <= set(range(SWAPS + 1))
        print(f"\nhot swap: {sum(seen.values()):,} thread matches over versions {sorted(seen)}; "
              f"reader process: {opens} opens, versions {pversions}")

        # The old index answers from the old, unlinked file until dropped.
        assert os.stat(path).st_ino != old_inode
        for s in subjects[:200]:
            assert old.match(s).subs == base[s]
        assert router.match(subjects[0]).subs == [SWAPS * VERSION + i for i in base[subjects[0]]]
        if os.path.exists("/proc/self/maps"):
            assert _deleted_maps(path) >= 1
            del old
            gc.collect()
            assert _deleted_maps(path) == 0              # dropped: its mapping (and file) is gone
    finally:
        sys.path.remove(str(tmp_path))


# -- the broker from a routing image ------------------------------------------
def test_the_routing_image_example_routes_without_subscribe(tmp_path):
    pytest.importorskip("amqtt", reason="the example needs amqtt (pip install 'topicmatch[amqtt]')")
    pytest.importorskip("paho.mqtt.client", reason="paho-mqtt not installed")
    from amqtt_harness import Client, settle
    ns = {"__name__": "__doc_example__"}
    exec(compile(_example("routing-image"), "docs/embedding.md:routing-image", "exec"), ns)
    path = str(tmp_path / "routes.img")
    assert ns["write_routes"](path) == 1001
    port = _free_port()
    loop = asyncio.new_event_loop()
    th = threading.Thread(target=loop.run_forever, daemon=True)
    th.start()
    stop = asyncio.Event()
    task = asyncio.run_coroutine_threadsafe(ns["serve"](path, stop, f"127.0.0.1:{port}"), loop)
    clients = []
    try:
        for _ in range(200):                         # until it listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=5).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            pytest.fail("the broker never listened")
        dev, ops, pub = (Client(port, cid) for cid in ("dev-7", "ops", "pub"))
        clients = [dev, ops, pub]
        for t, p in [("dev/7/cmd/reboot", "r"), ("dev/8/cmd/reboot", "r8"), ("dev/7/alarm", "a"),
                     ("dev/9/alarm", "a9"), ("elsewhere", "x")]:
            pub.publish(t, p, 1)
        want = {"dev-7": collections.Counter({("r", 1, False): 1}),
                "ops": collections.Counter({("a", 1, False): 1, ("a9", 1, False): 1})}
        assert settle([dev, ops], want) == want
    finally:
        for c in clients:
            c.close()
        loop.call_soon_threadsafe(stop.set)
        task.result(60)
        loop.call_soon_threadsafe(loop.stop)
        th.join(60)
