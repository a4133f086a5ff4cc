"""The standard workloads of shared/bench: generate (once, deterministic)
and load them, and the exact expected totals to check results against."""
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.environ.get("FASTSUB_BENCH_DATA", os.path.join(HERE, "data"))
GEN_ALL = os.path.join(HERE, "..", "..", "shared", "bench", "gen_all.sh")

# pairs, checksum = sum (i+1)*(j+1) mod 2**64 over matching (publish i, sub line j)
EXPECTED = {
    "heavy": (81_551_407, 2012621305491370395),
    "light": (793_101, 19458958429878153),
    "hot1k": (774_549, 19155802289201197),
    "hot4k": (780_644, 19235339710960507),
    "light-mqtt": (793_101, 19458958429878153),
}
SUBS_OF = {"hot1k": "light", "hot4k": "light"}


def ensure_data():
    if not os.path.exists(os.path.join(DATA, "light-mqtt", "pubs.txt")):
        gen = os.environ.get("FASTSUB_GEN_ALL", GEN_ALL)
        print(f"generating workloads into {DATA} ...", file=sys.stderr)
        subprocess.run(["sh", gen, DATA], check=True)


def load(name):
    """-> (filters, sub_ids, queues, publishes) of a standard workload."""
    ensure_data()
    filters, ids, queues = [], [], []
    with open(os.path.join(DATA, name, "subs.txt")) as f:
        for j, line in enumerate(f):
            parts = line.split()
            filters.append(parts[0])
            queues.append(parts[1] if len(parts) > 1 else None)
            ids.append(j)
    with open(os.path.join(DATA, name, "pubs.txt")) as f:
        pubs = f.read().split("\n")
    if pubs and pubs[-1] == "":
        pubs.pop()
    return filters, ids, queues, pubs


def dialect_of(name):
    return "mqtt" if name.endswith("mqtt") else "nats"


def calibration():
    """How fast this (shared, noisy) machine is right now: ns per iteration
    of an empty Python loop, printed beside the figures so runs compare."""
    xs = list(range(1_000_000))
    best = None
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for _x in xs:
            pass
        dt = (time.perf_counter_ns() - t0) / len(xs)
        best = dt if best is None else min(best, dt)
    return best
