"""What letting go of the GIL around match()'s walk costs one thread, by
index size: the figures behind FS_WALK_RELEASE_MIN (csrc/match/fs_match.c).

    python bench/match_release.py [--sizes 1000,10000,100000,1000000]
                                  [--calls 100000] [--rounds 7]

For each size, no cache, one thread: match() over the same subjects with
the GIL kept (_set_walk_release_min(None)) and let go for every walk (0),
the two interleaved, median CPU ns per call (thread time: steadier than
wall time on a shared machine) of --rounds.  The release is worth
having where its cost is a small share of the walk: another thread (a
batch, a writer, a second matcher) then runs during the walk."""
import argparse
import statistics
import time

import topicmatch
from topicmatch import _core


def build(n):
    sl = topicmatch.Sublist()
    # light-like: mostly literal filters, a quarter with one wildcard
    filters = [f"svc.{i % 1000}.{i}.*" if i % 4 == 0 else f"svc.{i % 1000}.{i}.evt" for i in range(n)]
    sl.insert_many(filters, list(range(n)))
    subjects = [f"svc.{(k * 7919) % 1000}.{(k * 7919) % n}.evt" for k in range(4096)]
    subjects += [f"svc.{k % 1000}.none.evt" for k in range(1024)]          # misses
    return sl, subjects


def once(sl, subjects, calls):
    match = sl.match
    reps = max(1, calls // len(subjects))
    t0 = time.thread_time()
    for _ in range(reps):
        for s in subjects:
            match(s)
    return (time.thread_time() - t0) / (reps * len(subjects)) * 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000,1000000")
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    old = _core._set_walk_release_min(None)
    try:
        print("| filters | GIL kept (ns/call) | GIL let go (ns/call) | cost of the release |")
        print("|---:|---:|---:|---:|")
        for n in [int(x) for x in a.sizes.split(",")]:
            sl, subjects = build(n)
            once(sl, subjects, a.calls)                 # warm-up
            kept, freed = [], []
            for _ in range(a.rounds):
                _core._set_walk_release_min(None)
                kept.append(once(sl, subjects, a.calls))
                _core._set_walk_release_min(0)
                freed.append(once(sl, subjects, a.calls))
            k, f = statistics.median(kept), statistics.median(freed)
            print(f"| {n:,} | {k:.0f} | {f:.0f} | {f - k:+.0f} ns ({(f - k) / k:+.0%}) |", flush=True)
    finally:
        _core._set_walk_release_min(old)


if __name__ == "__main__":
    main()
