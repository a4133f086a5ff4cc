"""Check the exact totals of the standard workloads (bench/README.md) with
the installed or in-place topicmatch: every matching (publish line i,
subscription line j) pair, queue members included, and the checksum
sum (i+1)*(j+1) mod 2**64.  Generates the workloads first if they are missing
(and checks their md5).

    python bench/check_totals.py [light hot1k ...] [--all]

Default: the small workloads (light, hot1k, hot4k, light-mqtt: ~0.8M pairs
each); --all adds heavy (81.5M pairs).  Exit status 1 on any mismatch.
"""
import argparse
import sys
import time

import numpy as np

from topicmatch import Sublist

from workloads import EXPECTED, dialect_of, ensure_data, load, verify

MASK = (1 << 64) - 1
SMALL = ["light", "hot1k", "hot4k", "light-mqtt"]
CHUNK = 100_000


def totals(name, threads=1):
    """-> (pairs, checksum) of workload `name`, matched in chunks so that
    even heavy's 81.5M pairs never sit in memory at once."""
    filters, ids, queues, pubs = load(name)
    sl = Sublist(dialect_of(name))
    sl.insert_many(filters, ids, queues)
    pairs = checksum = 0
    for start in range(0, len(pubs), CHUNK):
        b = sl.match_many(pubs[start:start + CHUNK], queues="all", threads=threads)
        if b.invalid.any():
            raise AssertionError(f"{name}: publish line {start + int(np.argmax(b.invalid))} "
                                 "rejected as invalid")
        counts = np.diff(b.offsets)
        rows = np.repeat(np.arange(start + 1, start + len(b) + 1, dtype=np.uint64), counts)
        # uint64 arithmetic wraps modulo 2**64, which is the checksum's definition
        checksum = (checksum + int((rows * (b.sub_ids.astype(np.uint64) + np.uint64(1)))
                                   .sum(dtype=np.uint64))) & MASK
        pairs += len(b.sub_ids)
    return pairs, checksum


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workloads", nargs="*")
    ap.add_argument("--all", action="store_true", help="every workload, heavy included")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    names = a.workloads or (list(EXPECTED) if a.all else SMALL)
    ensure_data(names)
    for name in names:
        verify(name)                      # the files are the standard ones (md5)
    ok = True
    for name in names:
        t0 = time.perf_counter()
        got = totals(name, a.threads)
        good = got == EXPECTED[name]
        ok &= good
        print(f"{name:11s} pairs {got[0]:>11,} checksum {got[1]:>20}  "
              + ("OK" if good else f"MISMATCH: expected {EXPECTED[name][0]:,} {EXPECTED[name][1]}")
              + f"  ({time.perf_counter() - t0:.1f} s)", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
