"""Engine benchmark on the standard workloads: insert_many, match() per
publish, exact totals checked, memory per subscription.

    .venv/bin/python bench/run_engine.py [light heavy ...] [--repeat N]

Prints medians over --repeat runs (the machines are noisy)."""
import argparse
import gc
import statistics
import sys
import time

from fastsub import Sublist

from workloads import EXPECTED, dialect_of, load

MASK = (1 << 64) - 1


def rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def run(name, repeat):
    filters, ids, queues, pubs = load(name)
    n = len(filters)
    ins, mat, mem, rss = [], [], None, None
    pairs = checksum = None
    for _ in range(repeat):
        gc.collect()
        before = rss_kb()
        sl = Sublist(dialect_of(name))
        t0 = time.perf_counter_ns()
        sl.insert_many(filters, ids, queues)
        ins.append((time.perf_counter_ns() - t0) / n)
        rss = (rss_kb() - before) * 1024 / n
        mem = sl.stats()["memory_bytes"] / n
        match = sl.match
        pairs = checksum = 0
        t0 = time.perf_counter_ns()
        for i, p in enumerate(pubs):
            r = match(p)
            for j in r.subs:
                checksum += (i + 1) * (j + 1)
            pairs += len(r.subs)
            for _, _, members in r.groups:
                pairs += len(members)
                for j in members:
                    checksum += (i + 1) * (j + 1)
        mat.append((time.perf_counter_ns() - t0) / len(pubs))
        checksum &= MASK
        del sl
    ok = (pairs, checksum) == EXPECTED[name]
    print(f"{name:11s} insert_many {statistics.median(ins):7.0f} ns/sub   "
          f"match() loop {statistics.median(mat):7.0f} ns/publish (incl. Python checksum loop)   "
          f"memory_bytes {mem:6.1f} B/sub (RSS delta {rss:6.1f})   "
          f"pairs {pairs} checksum {checksum} {'OK' if ok else 'MISMATCH expected %s' % (EXPECTED[name],)}")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workloads", nargs="*", default=["light", "heavy", "light-mqtt"])
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    ok = all([run(w, a.repeat) for w in a.workloads])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
