"""Many Python threads on one Sublist, Ctrl-C inside match_many, and the GIL.

The stress test gives every writer thread its own sub ids, so each writer's
log replays on its own (every return value it saw must be what a serial
replay gives) and the final index is the union of the replays.  Readers
check that nothing they saw was impossible: every id belongs to a
subscription some writer may insert whose filter matches the subject, and a
bulk insert or remove is seen all at once or not at all."""
import _thread
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import numpy as np
import pytest

import topicmatch
from topicmatch import InvalidSubjectError
from topicmatch import _reference as R
from strategies import norm, norm_reverse

pa = pytest.importorskip("pyarrow", reason="these tests feed Arrow columns; pyarrow has no wheels for some platforms (musllinux)")

SEP = {"nats": ".", "mqtt": "/"}
ONE = {"nats": "*", "mqtt": "+"}
REST = {"nats": ">", "mqtt": "#"}
TOKENS = {"nats": ["a", "b", "c", "$d"], "mqtt": ["a", "b", "", "$d"]}
N_WRITERS = 3
ATOMIC = list(range(9000, 9010))          # inserted and removed only ten at a time
STRESS_SECONDS = 2.0


def universe(dialect, seed):
    """Each writer's pool of (filter argument, sub_id, queue argument), and
    the subjects readers ask about."""
    rnd = random.Random(seed)
    toks, sep = TOKENS[dialect], SEP[dialect]
    pools = []
    for t in range(N_WRITERS):
        pool = []
        for j in range(40):
            f = ""
            while not f:
                ft = [rnd.choice(toks + [ONE[dialect]]) for _ in range(rnd.randint(1, 3))]
                if rnd.random() < 0.25:
                    ft.append(REST[dialect])
                f = sep.join(ft)
            q = rnd.choice([None, None, "q", "r"])
            if dialect == "mqtt" and q and rnd.random() < 0.5:
                f, q = f"$share/{q}/{f}", None
            pool.append((f, 1000 * t + j % 25, q))
        pools.append(pool)
    subjects = sorted({sep.join(rnd.choice(toks) for _ in range(rnd.randint(1, 4))) for _ in range(60)})
    subjects = [s for s in subjects if R.is_valid_subject(s, dialect)]
    return pools, subjects


def canonical(f, q, dialect):
    """(filter, queue) as stored: MQTT '$share/G/f' is (f, G)."""
    if dialect == "mqtt":
        inner, g = R.split_share(f)
        if g is not None:
            return inner, g
    return f, q


class Possible:
    """What any reader may ever see for a subject, given every subscription
    any writer can insert."""

    def __init__(self, dialect, pools):
        self.dialect = dialect
        self.subs = {(canonical(f, q, dialect), i) for pool in pools for f, i, q in pool}
        self.subs |= {((REST[dialect], None), i) for i in ATOMIC}
        self.ids = {i for _, i in self.subs}
        self._memo = {}

    def of(self, s):
        if s not in self._memo:
            plain, groups = Counter(), {}
            for (f, q), i in self.subs:
                if not R.subject_matches(f, s, self.dialect):
                    continue
                if q is None:
                    plain[i] += 1
                else:
                    key = (q, None if self.dialect == "nats" else f)
                    groups.setdefault(key, Counter())[i] += 1
            every = plain + sum(groups.values(), Counter())
            self._memo[s] = (plain, groups, every)
        return self._memo[s]

    def check_match(self, s, m):
        plain, groups, _ = self.of(s)
        assert not Counter(m.subs) - plain, (s, m)
        seen = set()
        for q, f, members in m.groups:
            assert members, (s, m)                      # no empty groups
            assert (q, f) not in seen, (s, m)           # one entry per group
            seen.add((q, f))
            assert (q, f) in groups and not Counter(members) - groups[(q, f)], (s, m)
        n_atomic = sum(1 for i in m.subs if i in ATOMIC)
        assert n_atomic in (0, len(ATOMIC)), (s, m)     # a bulk change is all or nothing

    def check_interest(self, s, n):
        plain, groups, _ = self.of(s)
        assert 0 <= n[0] <= sum(plain.values()) and 0 <= n[1] <= sum(sum(g.values()) for g in groups.values())


class Writer:
    def __init__(self, sl, pool, seed):
        self.sl, self.pool, self.rnd = sl, pool, random.Random(seed)
        self.log = []

    def step(self):
        rnd, sl = self.rnd, self.sl
        op = rnd.choice(["insert", "insert", "discard", "remove", "insert_many", "remove_many"])
        if op in ("insert_many", "remove_many"):
            batch = rnd.sample(self.pool, rnd.randint(1, 8))
            args = ([b[0] for b in batch], [b[1] for b in batch], [b[2] for b in batch])
            res = getattr(sl, op)(*args)
        else:
            f, i, q = rnd.choice(self.pool)
            args = (f, i, q)
            try:
                res = getattr(sl, op)(f, i, queue=q)
            except KeyError:
                res = "KeyError"
        self.log.append((op, args, res))

    def replay(self, dialect):
        """Every result this writer saw equals a serial replay of its own log."""
        ref = R.ReferenceSublist(dialect)
        for op, args, res in self.log:
            if op in ("insert_many", "remove_many"):
                want = getattr(ref, op)(*args)
            elif op == "remove":
                want = None if ref.discard(args[0], args[1], queue=args[2]) else "KeyError"
            else:
                want = getattr(ref, op)(args[0], args[1], queue=args[2])
            assert res == want, (op, args, res, want)
        return ref


def atomic_writer(sl, dialect, stop, counts):
    f = REST[dialect]
    present = False
    while not stop.is_set():
        if present:
            assert sl.remove_many([f] * len(ATOMIC), ATOMIC) == len(ATOMIC)
        else:
            # a failed bulk insert (bad last row) must not show half of itself
            with pytest.raises(InvalidSubjectError):
                sl.insert_many([f] * len(ATOMIC) + ["a" + SEP[dialect] + REST[dialect] + SEP[dialect] + "b"],
                               ATOMIC + [1])
            assert sl.insert_many([f] * len(ATOMIC), ATOMIC) == len(ATOMIC)
        present = not present
        counts["atomic"] += 1
    if present:
        sl.remove_many([f] * len(ATOMIC), ATOMIC)


def run_threads(targets, seconds):
    stop = threading.Event()
    errors = []

    def wrap(fn):
        def run():
            try:
                fn(stop)
            except BaseException as e:          # reported by the main thread
                errors.append(e)
                stop.set()
        return run

    threads = [threading.Thread(target=wrap(fn), daemon=True) for fn in targets]
    for t in threads:
        t.start()
    stop.wait(seconds)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a thread is stuck (deadlock?)"
    if errors:
        raise errors[0]


@pytest.mark.parametrize("dialect,cache_size", [("nats", 0), ("nats", 64), ("mqtt", 16)])
def test_concurrent_writers_and_readers(dialect, cache_size):
    pools, subjects = universe(dialect, seed=len(dialect) * 100 + cache_size)
    sl = topicmatch.Sublist(dialect, cache_size=cache_size)
    possible = Possible(dialect, pools)
    writers = [Writer(sl, pools[t], seed=t) for t in range(N_WRITERS)]
    counts = Counter()
    invalid_rows = {"nats": ["a..b", "a.*", ""], "mqtt": ["a/+", "#", ""]}[dialect]
    rows = [subjects[k % len(subjects)] for k in range(33000)]        # > 2 chunks: native threads
    for k in range(0, len(rows), 1000):
        rows[k] = invalid_rows[(k // 1000) % 3]
    rows[7] = None
    arrow_rows = pa.array(rows)
    want_invalid = np.array([r is None or r in invalid_rows for r in rows])
    row_subject = np.array([subjects.index(r) if r in subjects else -1 for r in rows])
    possible_ids = np.array(sorted(possible.ids))
    max_count = np.array([sum(possible.of(s)[2].values()) for s in subjects])
    atomic_ids = np.array(ATOMIC)
    for s in subjects:
        possible.of(s)

    def writer(w):
        def run(stop):
            while not stop.is_set():
                w.step()
                counts["writes"] += 1
        return run

    def matcher(stop):
        rnd = random.Random(1)
        while not stop.is_set():
            s = rnd.choice(subjects)
            possible.check_match(s, sl.match(s))
            possible.check_interest(s, sl.num_interest(s))
            assert isinstance(sl.has_interest(s), bool)
            counts["matches"] += 1

    def batcher(stop):
        k = 0
        while not stop.is_set():
            queues = ("all", "pick")[k % 2]
            b = sl.match_many(arrow_rows if k % 3 else rows, queues=queues, threads=2)
            k += 1
            assert len(b) == len(rows) and b.offsets[-1] == len(b.sub_ids)
            assert (b.invalid == want_invalid).all()
            assert np.isin(b.sub_ids, possible_ids).all()            # no garbage ids
            counts_ = np.diff(b.offsets)
            valid = row_subject >= 0
            assert (counts_[valid] <= max_count[row_subject[valid]]).all()
            if queues == "all":
                hits = np.concatenate([[0], np.cumsum(np.isin(b.sub_ids, atomic_ids))])
                per_row = hits[b.offsets[1:]] - hits[b.offsets[:-1]]
                assert np.isin(per_row, [0, len(ATOMIC)]).all()
                for i in random.Random(k).sample(range(len(rows)), 200):
                    if valid[i]:
                        assert not Counter(b[i].tolist()) - possible.of(rows[i])[2], (i, rows[i])
            counts["batches"] += 1

    def other_reader(stop):
        rnd = random.Random(2)
        filters = [f for pool in pools for f, _, _ in pool]
        while not stop.is_set():
            f = rnd.choice(filters)
            for row in sl.reverse_match(f):
                (rf, ri, rq) = row
                assert ((rf, rq), ri) in possible.subs, row
            st_ = sl.stats()
            assert st_["cache_entries"] <= st_["cache_capacity"]
            assert len(sl) >= 0
            counts["others"] += 1

    targets = [writer(w) for w in writers] + [matcher, batcher, other_reader,
                                              lambda stop: atomic_writer(sl, dialect, stop, counts)]
    run_threads(targets, STRESS_SECONDS)
    assert min(counts["writes"], counts["matches"], counts["batches"], counts["others"],
               counts["atomic"]) > 0, counts

    # the final index is the union of each writer's serial replay
    final = R.ReferenceSublist(dialect)
    for w in writers:
        final._subs |= w.replay(dialect)._subs
    assert len(sl) == len(final)
    # (the cache is checked first: a stale entry from the stress would show here)
    b = sl.match_many(subjects, queues="all", threads=2)
    for k, s in enumerate(subjects):
        assert norm(sl.match(s)) == norm(final.match(s)), s
        assert tuple(sl.num_interest(s)) == final.num_interest(s), s
        r = final.match(s)
        assert sorted(b[k].tolist()) == sorted(r.subs + [i for _, _, m in r.groups for i in m])
    for f in sorted({f for pool in pools for f, _, _ in pool})[:30]:
        assert norm_reverse(sl.reverse_match(f)) == norm_reverse(final.reverse_match(f)), f
    fresh = topicmatch.Sublist(dialect)
    for f, q, i in final._subs:
        fresh.insert(f, i, queue=q)
    big = rows * 2
    for queues in ("all", "pick", "none"):
        x = sl.match_many(big, queues=queues, threads=2)
        y = fresh.match_many(big, queues=queues)
        assert (x.offsets == y.offsets).all() and (x.invalid == y.invalid).all()
        assert all(sorted(x[i].tolist()) == sorted(y[i].tolist()) for i in range(0, len(big), 101))


# --- Ctrl-C and the GIL ------------------------------------------------------------------

def slow_index():
    """Every subject walks 2**8 trie nodes and matches one subscription, so a
    row is slow to match but produces little output."""
    sl = topicmatch.Sublist("nats")
    for mask in range(256):
        toks = ["*" if mask >> k & 1 else "a" for k in range(8)]
        sl.insert(".".join(toks + ["z"]), mask)
    sl.insert("a.a.a.a.a.a.a.a.y", 999)
    return sl


def same_rows(n, subject=b"a.a.a.a.a.a.a.a.y"):
    """An Arrow column of n copies of one subject, built without a Python list."""
    offsets = np.arange(0, len(subject) * (n + 1), len(subject), dtype=np.int64)
    return pa.Array.from_buffers(pa.large_string(), n,
                                 [None, pa.py_buffer(offsets), pa.py_buffer(subject * n)])


def rows_for(sl, seconds, threads):
    """Rows for a batch of about `seconds`, from the fastest of three timed
    runs: a first run's one-time costs, or another job slowing one run,
    would make the batch short enough to end before the test acts on it."""
    n = 20000
    col = same_rows(n)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        sl.match_many(col, threads=threads)
        times.append(time.perf_counter() - t0)
    per_row = min(times) / n
    return max(100000, min(int(seconds / per_row), 20_000_000)), per_row


def still_usable(sl):
    # a writer must get the lock (a read lock left held would hang it)
    done = threading.Event()

    def write():
        sl.insert("after.ctrl.c", 7)
        sl.remove("after.ctrl.c", 7)
        done.set()

    t = threading.Thread(target=write, daemon=True)
    t.start()
    t.join(timeout=10)
    assert done.is_set(), "insert blocked after an interrupted match_many"
    assert sl.match("a.a.a.a.a.a.a.a.y").subs == [999]
    col = same_rows(40000)
    one = sl.match_many(col, threads=1)
    two = sl.match_many(col, threads=2)
    assert one.sub_ids.tolist() == [999] * 40000
    assert (one.offsets == two.offsets).all() and (one.sub_ids == two.sub_ids).all()


@pytest.mark.parametrize("threads", [1, 2])
def test_ctrl_c_interrupts_match_many(threads):
    sl = slow_index()
    n, per_row = rows_for(sl, 4.0, threads)
    col = same_rows(n)
    full = n * per_row
    returned = False
    # The "Ctrl-C" comes from the kernel (an interval timer's SIGALRM whose
    # handler raises KeyboardInterrupt, as SIGINT's does), not from a Python
    # thread: on a loaded machine a timer thread may not get the interpreter
    # lock before the batch ends, and the test then checked nothing.  Where
    # there is no setitimer (Windows), a timer thread interrupts main.
    alarm = hasattr(signal, "setitimer")
    if alarm:
        def on_alarm(signum, frame):
            raise KeyboardInterrupt
        old = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, 0.2)
    else:
        timer = threading.Timer(0.2, _thread.interrupt_main)
    t0 = time.perf_counter()
    try:
        if not alarm:
            timer.start()
        sl.match_many(col, threads=threads)
        returned = True
        time.sleep(full + 5)           # the interrupt lands here if the call ignored it
    except KeyboardInterrupt:
        elapsed = time.perf_counter() - t0
    finally:
        if alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        else:
            timer.cancel()
            timer.join()
    assert not returned, "match_many ran to the end instead of raising KeyboardInterrupt"
    assert elapsed < 0.2 + 0.5 * full, (elapsed, full)
    still_usable(sl)


def test_match_many_releases_the_gil():
    sl = slow_index()
    n, per_row = rows_for(sl, 1.0, 1)
    col = same_rows(n)
    started, done = threading.Event(), threading.Event()

    def work():
        started.set()
        sl.match_many(col)
        done.set()

    t = threading.Thread(target=work)
    t.start()
    started.wait()
    spins = 0
    t0 = time.perf_counter()
    while not done.is_set():
        spins += 1
    waited = time.perf_counter() - t0
    t.join()
    # with the GIL held for the whole call this loop would barely run
    assert spins > 20000 * max(waited, 0.1), (spins, waited)


def test_match_waits_for_a_writer_without_the_gil():
    """match() walks with the GIL held (shorter than letting it go), but it
    never waits with it: where a writer holds the index -- one insert_many,
    one write lock -- it lets go of the GIL before waiting, so the other
    Python threads run meanwhile.  (Holding it, this thread's loop would
    get no turn for the rest of the insert.)"""
    def rows(n):                      # Arrow: insert_many holds no GIL past its start
        return pa.array([f"w.{i}.x" for i in range(n)]), np.arange(n, dtype=np.int64)

    n = 100000
    few = rows(n)
    # An insert of about 1.5 s, timed on the second of two (the first pays
    # the process's first touches: timed on it, n once came out small
    # enough that every round's insert had ended 0.3 s in).
    for _ in range(2):
        t0 = time.perf_counter()
        topicmatch.Sublist("nats").insert_many(*few, None)
        took = time.perf_counter() - t0
    n = max(n, int(1.5 * n / max(took, 1e-3)))
    filters, ids = rows(n)

    def one_round():
        """(how long match() took, this thread's loop turns meanwhile)."""
        sl = topicmatch.Sublist("nats")
        sl.insert("a.b", 1)
        matched, waits, spins = [], [], [0]

        def matcher():
            time.sleep(0.3)             # the writer is inside insert_many's C part by now
            t, before = time.perf_counter(), spins[0]
            matched.append(sl.match("a.b").subs)
            waits.append((time.perf_counter() - t, spins[0] - before))

        threads = [threading.Thread(target=sl.insert_many, args=(filters, ids, None)),
                   threading.Thread(target=matcher)]
        for t in threads:
            t.start()
        while threads[0].is_alive() or threads[1].is_alive():
            spins[0] += 1
        for t in threads:
            t.join()
        assert matched == [[1]] and len(sl) == n + 1
        return waits[0]

    # Counted, not timed: on a loaded machine the loop may get few turns
    # while match() waits, but some (a largest gap against the whole run
    # once failed there).  A round whose match() found the insert done
    # already, or not begun, proves nothing: up to three are run for one
    # that waited.
    rounds = []
    while len(rounds) < 3 and not any(waited >= 0.1 for waited, _ in rounds):
        rounds.append(one_round())
    assert any(waited >= 0.1 for waited, _ in rounds), rounds
    assert all(during > 0 for waited, during in rounds if waited >= 0.1), rounds


def _task_count():
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")
def test_batches_start_no_threads_after_the_first():
    """The batch's workers are the process's pool, which outlives the
    batch: once one batch has run at a thread count, batches at that count
    or below create no thread (the process's thread count, /proc/self/task,
    stays the same), and give the same answer."""
    from topicmatch import _core
    sl = topicmatch.Sublist("nats")
    sl.insert_many([f"a.{i}.*" for i in range(200)] + ["a.>"], list(range(201)))
    col = pa.array([f"a.{i % 300}.x" for i in range(20000)])
    saved = _core._set_batch_threading(min_rows_per_thread=1, cpus=8)
    try:
        want = sl.match_many(col, threads=1)
        first = sl.match_many(col, threads=8)
        before = _task_count()
        pool = _core._pool_status()
        assert pool[0] >= 8
        for threads in (8, 2, 5, 8, 3, 8) * 3:
            got = sl.match_many(col, threads=threads)
            assert (got.offsets == want.offsets).all() and (got.sub_ids == want.sub_ids).all()
        assert _task_count() == before
        assert _core._pool_status()[0] == pool[0]
        assert (first.sub_ids == want.sub_ids).all()
    finally:
        _core._set_batch_threading(**saved)


def test_an_idle_pool_uses_no_cpu():
    """Between batches the pool's workers are parked (a condition
    variable), not spinning: over a second of idleness the process uses
    next to no CPU time (all threads counted)."""
    from topicmatch import _core
    sl = topicmatch.Sublist("nats")
    sl.insert_many([f"a.{i}.*" for i in range(50)], list(range(50)))
    col = pa.array([f"a.{i % 60}.x" for i in range(20000)])
    saved = _core._set_batch_threading(min_rows_per_thread=1, cpus=8)
    try:
        sl.match_many(col, threads=8)
    finally:
        _core._set_batch_threading(**saved)
    assert _core._pool_status()[0] >= 8
    time.sleep(0.05)                          # the workers reach their condition variable
    cpu0, t0 = time.process_time(), time.perf_counter()
    time.sleep(1.0)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    assert cpu < 0.05 * wall, (cpu, wall)
    threads, idle = _core._pool_status()
    assert idle == threads, (threads, idle)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_crowded_workers_leave_and_lose_no_row():
    """More workers than processors (a child process held to one
    processor, eight workers asked for and allowed by the thread policy's
    processor count): workers that wait for the processor more than they
    run stop claiming blocks, down to one a processor (fs_batch.c,
    crowded_out), and every row still gets one thread's answer.  A second
    child on as many processors as workers leaves no worker."""
    code = r"""
import os, sys
import pyarrow as pa
import topicmatch
from topicmatch import _core
ncpu = int(sys.argv[1])
os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:ncpu])   # before the pool's threads start
sl = topicmatch.Sublist("nats")
sl.insert_many([f"a.{i}.*" for i in range(2000)] + ["a.>", "*.*.x"], list(range(2002)))
col = pa.array([f"a.{i % 3000}.x" if i % 97 else None for i in range(300000)])
want = sl.match_many(col, threads=1)
_core._set_batch_threading(min_rows_per_thread=1, cpus=8)
before = _core._workers_crowded_out()
for _ in range(3):
    got = sl.match_many(col, threads=8)
    assert (got.offsets == want.offsets).all() and (got.sub_ids == want.sub_ids).all()
    assert (got.invalid == want.invalid).all()
print(_core._workers_crowded_out() - before)
"""
    def left(ncpu):
        out = subprocess.run([sys.executable, "-c", code, str(ncpu)], capture_output=True, text=True,
                             timeout=600)
        assert out.returncode == 0, out.stderr
        return int(out.stdout.split()[-1])
    assert left(1) > 0
    if len(os.sched_getaffinity(0)) >= 8:
        assert left(8) == 0
