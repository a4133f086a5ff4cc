"""Engine benchmark on the standard workloads: insert_many, match(),
has_interest() and num_interest() per publish (the call alone, from
Python), memory per subscription, and the
exact totals checked in a separate pass.

    .venv/bin/python bench/run_engine.py [light heavy ...] [--repeat N]

Prints medians over --repeat runs (the machines are noisy), then the
per-call summary of issue 22 from the same run, so ratios can be taken:
match() light, match() hot1k cached, insert_many light, and the floor
they are compared with -- the same loop calling p.encode(), a builtin
that returns a new object (the cheapest "Python call that returns a
result").  "match()+read" also reads the result's subs and groups, which
match() builds lazily when there are none (groups)."""
import argparse
import gc
import os
import statistics
import sys
import time

from topicmatch import Sublist

from workloads import EXPECTED, calibration, dialect_of, load

MASK = (1 << 64) - 1
SUMMARY = {}          # (workload, row) -> median ns, for the summary


def loop_ns(fn, pubs):
    """ns per call of fn(p) over pubs, the loop included."""
    t0 = time.perf_counter_ns()
    for p in pubs:
        fn(p)
    return (time.perf_counter_ns() - t0) / len(pubs)


def floor_ns(pubs):
    """The floor: the same loop calling p.encode()."""
    t0 = time.perf_counter_ns()
    for p in pubs:
        p.encode()
    return (time.perf_counter_ns() - t0) / len(pubs)


def read_ns(match, pubs):
    """match(p) with its result read (subs and groups)."""
    t0 = time.perf_counter_ns()
    for p in pubs:
        r = match(p)
        r.subs
        r.groups
    return (time.perf_counter_ns() - t0) / len(pubs)



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
    ins, mat, hi, ni, fl, rd, rss = [], [], [], [], [], [], None
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
        fl.append(floor_ns(pubs))
        mat.append(loop_ns(match, pubs))
        rd.append(read_ns(match, pubs))
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
    SUMMARY[name, "floor"] = statistics.median(fl)
    SUMMARY[name, "match"] = statistics.median(mat)
    SUMMARY[name, "read"] = statistics.median(rd)
    SUMMARY[name, "insert_many"] = statistics.median(ins)
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
    times, fl, rd = [], [], []
    for _ in range(repeat):
        fl.append(floor_ns(pubs))
        times.append(loop_ns(match, pubs))
        rd.append(read_ns(match, pubs))
    st = sl.stats()
    SUMMARY[name, "floor"] = statistics.median(fl)
    SUMMARY[name, "match"] = statistics.median(times)
    SUMMARY[name, "read"] = statistics.median(rd)
    print(f"{name:11s} cached match() {statistics.median(times):6.0f} ns/call   "
          f"hit rate {st['cache_hit_rate']:.4f}")


def summary():
    """The per-call figures of issue 22, from this run."""
    rows = []
    for w in ("light", "hot1k"):
        if (w, "match") in SUMMARY:
            f, m, r = SUMMARY[w, "floor"], SUMMARY[w, "match"], SUMMARY[w, "read"]
            what = "match() light" if w == "light" else "match() hot1k cached"
            rows.append(f"  {what:22s} {m:6.0f} ns/call  (floor {f:4.0f}: x{m / f:4.1f}, +{m - f:4.0f} ns;"
                        f"  match()+read {r:4.0f})")
    if ("light", "insert_many") in SUMMARY:
        rows.append(f"  {'insert_many light':22s} {SUMMARY['light', 'insert_many']:6.0f} ns/sub")
    if rows:
        print("per call (issue 22), medians of this run; floor: the same loop calling p.encode()")
        print("\n".join(rows))


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
    summary()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
