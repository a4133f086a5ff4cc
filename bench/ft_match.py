"""match() from T threads on one Sublist: calls per second, T against 1.

    python bench/ft_match.py [--filters 10000] [--cache 4096] [--hot 1000]
                             [--calls 200000] [--threads 1,2] [--rounds 5]

Meant for a free-threaded CPython (make test-ft builds one; run it with
build/ft-venv/bin/python and PYTHONPATH=build/ft/src): there the GIL stays
off (the module declares itself GIL-free) and T threads can match at once.
Each thread makes its own subject strings and binds sl.match itself, so the
only object the threads share is the index: what is measured is whether a
match() writes a line other threads read.  Prints ns per call (wall time
over all calls), the speed-up over one thread, and the threads' CPU time per
call (a line that threads take turns with shows there as CPU time, even on
a machine too busy for wall time to show the speed-up), median of --rounds."""
import argparse
import statistics
import sys
import sysconfig
import threading
import time

import topicmatch


def build(nfilters, cache):
    sl = topicmatch.Sublist(cache_size=cache)
    filters = [f"svc.{i % 300}.{i}.*" if i % 4 == 0 else f"svc.{i % 300}.{i}.evt" for i in range(nfilters)]
    sl.insert_many(filters, list(range(nfilters)))
    return sl


def run(sl, threads, calls, hot, nfilters):
    barrier = threading.Barrier(threads + 1)
    done = threading.Barrier(threads + 1)
    cpu = [0.0] * threads

    def worker(t):
        # this thread's own strings (in free-threaded CPython an object's
        # reference count is cheap only for the thread that made it)
        # the same hot set in every thread: the working set stays `hot`
        # subjects whatever T (a cached workload's does)
        subjects = [f"svc.{k % 300}.{(k * 37) % nfilters}.evt" for k in range(hot)]
        match = sl.match
        n = calls // threads
        barrier.wait()
        c0 = time.thread_time()
        for _ in range(n // hot):
            for s in subjects:
                match(s)
        cpu[t] = time.thread_time() - c0
        done.wait()

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    done.wait()
    wall = time.perf_counter() - t0
    for t in ts:
        t.join()
    ncalls = (calls // threads // hot) * hot * threads
    return wall / ncalls * 1e9, sum(cpu) / ncalls * 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--filters", type=int, default=10_000)
    ap.add_argument("--cache", type=int, default=4096)
    ap.add_argument("--hot", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=400_000)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--gc-off", action="store_true",
                    help="gc.disable() while measuring (a free-threaded collection stops every thread)")
    a = ap.parse_args()
    if a.gc_off:
        import gc
        gc.disable()
    gil = sys._is_gil_enabled() if hasattr(sys, "_is_gil_enabled") else True
    print(f"python {sys.version.split()[0]} free-threaded={bool(sysconfig.get_config_var('Py_GIL_DISABLED'))} "
          f"gil={'on' if gil else 'off'}; {a.filters} filters, cache {a.cache}, {a.hot} hot subjects")
    sl = build(a.filters, a.cache)
    ts = [int(x) for x in a.threads.split(",")]
    res = {t: [] for t in ts}
    run(sl, 1, a.calls // 4, a.hot, a.filters)       # warm the cache
    for _ in range(a.rounds):                          # interleaved
        for t in ts:
            res[t].append(run(sl, t, a.calls, a.hot, a.filters))
    base = statistics.median(w for w, c in res[ts[0]])
    for t in ts:
        med = statistics.median(w for w, c in res[t])
        cpu = statistics.median(c for w, c in res[t])
        print(f"T={t}: {med:7.1f} ns/call wall (all calls), speed-up {base / med:.2f}x; "
              f"{cpu:6.1f} ns CPU per call   [{', '.join(f'{w:.0f}' for w, c in res[t])}]")
    st = sl.stats()
    print(f"cache hits {st['cache_hits']}, misses {st['cache_misses']}, matches {st['matches']}")


if __name__ == "__main__":
    main()
