"""The standard workloads (bench/README.md): generate them (once,
deterministic, with bench/gen_workload.py), load them, and the exact expected
totals to check results against.

    python bench/workloads.py [DIR]      # generate all five under DIR (default bench/data)

Everything lives in this directory: nothing outside the repository is read.
"""
import hashlib
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.environ.get("TOPICMATCH_BENCH_DATA", os.path.join(HERE, "data"))
GENERATOR = os.path.join(HERE, "gen_workload.py")

_LIGHT = ["--vocab", "50,100,200,500,1000", "--zipf", "0.5", "--fwc-min-depth", "2"]

# name: (gen_workload.py arguments, md5 of subs.txt, md5 of pubs.txt)
WORKLOADS = {
    "heavy": ([], "f6a199c53b8564672a802ff1a6e306e8", "ea80f8b78cbdabe07ed88a1e350df8c5"),
    "light": (_LIGHT, "19276ff1e92040eee7f00f255801befb", "c1252babc6f23519daa07944d2f443fe"),
    "hot1k": (_LIGHT + ["--distinct-pubs", "1000"],
              "19276ff1e92040eee7f00f255801befb", "88a7528ae52290a4f809d33a8db0d821"),
    "hot4k": (_LIGHT + ["--distinct-pubs", "4096"],
              "19276ff1e92040eee7f00f255801befb", "316358b8a2ca90357660146aa55acce4"),
    "light-mqtt": (_LIGHT + ["--dialect", "mqtt"],
                   "19823bdda02405fa128789140b3c6939", "05b1a151ef77d636465c3c5603ed7444"),
}

# pairs, checksum = sum (i+1)*(j+1) mod 2**64 over matching (publish i, sub line j),
# queue members included (queues="all"); from the NATS server's own sublist
EXPECTED = {
    "heavy": (81_551_407, 2012621305491370395),
    "light": (793_101, 19458958429878153),
    "hot1k": (774_549, 19155802289201197),
    "hot4k": (780_644, 19235339710960507),
    "light-mqtt": (793_101, 19458958429878153),
}
SUBS_OF = {"hot1k": "light", "hot4k": "light"}


def _md5(path):
    h = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def generate(name, data=None, check=True):
    """Write DATA/name/{subs,pubs}.txt with the in-repository generator; with
    check, verify their md5 against the table (a changed generator fails)."""
    data = data or DATA
    out = os.path.join(data, name)
    os.makedirs(out, exist_ok=True)
    args, subs_md5, pubs_md5 = WORKLOADS[name]
    subprocess.run([sys.executable, GENERATOR, "--out", out, *args], check=True,
                   stdout=subprocess.DEVNULL)
    if check:
        verify(name, data)


def verify(name, data=None):
    out = os.path.join(data or DATA, name)
    _, subs_md5, pubs_md5 = WORKLOADS[name]
    for fname, want in (("subs.txt", subs_md5), ("pubs.txt", pubs_md5)):
        got = _md5(os.path.join(out, fname))
        if got != want:
            raise RuntimeError(f"{os.path.join(out, fname)}: md5 {got}, expected {want} "
                               "(bench/README.md): the generator no longer reproduces the workload")


def ensure_data(names=None, data=None):
    """Generate the named workloads (all by default) that are missing."""
    data = data or DATA
    for name in names or WORKLOADS:
        if not os.path.exists(os.path.join(data, name, "pubs.txt")):
            print(f"generating workload {name} into {data} ...", file=sys.stderr, flush=True)
            generate(name, data)


def load(name):
    """-> (filters, sub_ids, queues, publishes) of a standard workload."""
    ensure_data([name])
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


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else DATA
    for w in WORKLOADS:
        generate(w, target)
        print(f"{w}: {os.path.join(target, w)} (md5 ok)")
