"""Engine benchmark on the standard workloads: insert_many, match(),
has_interest() and num_interest() per publish (the call alone, from
Python), memory per subscription, and the
exact totals checked in a separate pass.

    .venv/bin/python bench/run_engine.py [light heavy ...] [--repeat N]

Prints medians over --repeat runs (the machines are noisy)."""
import argparse
import gc
import os
import statistics
import sys
import time

from fastsub import Sublist

from workloads import EXPECTED, calibration, dialect_of, load

MASK = (1 << 64) - 1



def rss_kb():
    """Resident set in kB (Linux); 0 where /proc does not exist."""
    if not os.path.exists("/proc/self/status"):
        return 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def run(name, repeat):
    filters, ids, queues, pubs = load(name)
    n = len(filters)
    ins, mat, hi, ni, rss = [], [], [], [], None
    for r in range(repeat):
        gc.collect()
        before = rss_kb()
        sl = Sublist(dialect_of(name))
        t0 = time.perf_counter_ns()
        sl.insert_many(filters, ids, queues)
        ins.append((time.perf_counter_ns() - t0) / n)
        if r == 0:            # later rounds reuse the memory freed by the first
            rss = (rss_kb() - before) * 1024 / n
        mem = sl.stats()["memory_bytes"] / n
        match = sl.match
        t0 = time.perf_counter_ns()
        for p in pubs:
            match(p)
        mat.append((time.perf_counter_ns() - t0) / len(pubs))
        has = sl.has_interest
        t0 = time.perf_counter_ns()
        for p in pubs:
            has(p)
        hi.append((time.perf_counter_ns() - t0) / len(pubs))
        num = sl.num_interest
        t0 = time.perf_counter_ns()
        for p in pubs:
            num(p)
        ni.append((time.perf_counter_ns() - t0) / len(pubs))
        if r < repeat - 1:
            del sl
    # the exact totals, from one more pass (not timed)
    pairs = checksum = 0
    for i, p in enumerate(pubs):
        m = sl.match(p)
        for j in m.subs:
            checksum += (i + 1) * (j + 1)
        pairs += len(m.subs)
        for _, _, members in m.groups:
            pairs += len(members)
            for j in members:
                checksum += (i + 1) * (j + 1)
    checksum &= MASK
    ok = (pairs, checksum) == EXPECTED[name]
    print(f"{name:11s} insert_many {statistics.median(ins):6.0f} ns/sub   "
          f"match() {statistics.median(mat):6.0f} ns/call   "
          f"has_interest() {statistics.median(hi):6.0f} ns/call   "
          f"num_interest() {statistics.median(ni):6.0f} ns/call   "
          f"memory_bytes {mem:6.1f} B/sub (RSS growth {rss:6.1f} B/sub)   "
          f"pairs {pairs} checksum {checksum} {'OK' if ok else 'MISMATCH expected %s' % (EXPECTED[name],)}")
    return ok


def run_cached(name, repeat):
    """match() per call on a hot workload with the result cache on."""
    filters, ids, queues, pubs = load(name)
    sl = Sublist(dialect_of(name), cache_size=4096)
    sl.insert_many(filters, ids, queues)
    match = sl.match
    for p in pubs[:100_000]:
        match(p)                      # warm the cache
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        for p in pubs:
            match(p)
        times.append((time.perf_counter_ns() - t0) / len(pubs))
    st = sl.stats()
    print(f"{name:11s} cached match() {statistics.median(times):6.0f} ns/call   "
          f"hit rate {st['cache_hit_rate']:.4f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workloads", nargs="*", default=["light", "heavy", "light-mqtt", "hot1k"])
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    print(f"calibration: empty Python loop {calibration():.1f} ns/iteration")
    ok = all([run(w, a.repeat) for w in a.workloads if not w.startswith("hot")])
    for w in a.workloads:
        if w.startswith("hot"):
            run_cached(w, a.repeat)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
