"""What letting go of the GIL around match()'s walk costs, by index size:
the figures behind match()'s rule of walking with the GIL held
(docs/design.md, "When match() lets go of the GIL").

    python bench/match_release.py [--sizes 1000,10000,100000,1000000]
                                  [--calls 100000] [--rounds 7] [--busy]

For each size, no cache, one thread: match() over the same subjects with
the GIL kept (_set_walk_releases_gil(False)) and let go for every walk (True),
the two interleaved, median CPU ns per call (thread time: steadier than
wall time on a shared machine) of --rounds.

--busy: the same beside a second Python thread that only counts (the usual
case in a threaded server: some other thread wants the GIL), wall ns per
call: a release hands that thread the GIL, and the matcher waits for it to
come back."""
import argparse
import statistics
import threading
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


def once(sl, subjects, calls, clock=time.thread_time):
    match = sl.match
    reps = max(1, calls // len(subjects))
    t0 = clock()
    for _ in range(reps):
        for s in subjects:
            match(s)
    return (clock() - t0) / (reps * len(subjects)) * 1e9


class Busy:
    """A second Python thread that wants the GIL for as long as it runs."""

    def __enter__(self):
        self.stop = False
        self.t = threading.Thread(target=self._spin, daemon=True)
        self.t.start()
        return self

    def _spin(self):
        n = 0
        while not self.stop:
            n += 1

    def __exit__(self, *exc):
        self.stop = True
        self.t.join()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000,1000000")
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--busy", action="store_true", help="beside a busy Python thread, wall time")
    a = ap.parse_args()
    clock = time.perf_counter if a.busy else time.thread_time
    old = _core._set_walk_releases_gil(False)
    try:
        if a.busy:
            print("beside a busy Python thread, wall ns per call")
        print("| filters | GIL kept (ns/call) | GIL let go (ns/call) | cost of the release |")
        print("|---:|---:|---:|---:|")
        for n in [int(x) for x in a.sizes.split(",")]:
            sl, subjects = build(n)
            once(sl, subjects, a.calls)                 # warm-up
            kept, freed = [], []
            for _ in range(a.rounds):
                for rule, out in ((False, kept), (True, freed)):
                    _core._set_walk_releases_gil(rule)
                    if a.busy:
                        with Busy():
                            out.append(once(sl, subjects, a.calls, clock))
                    else:
                        out.append(once(sl, subjects, a.calls, clock))
            k, f = statistics.median(kept), statistics.median(freed)
            print(f"| {n:,} | {k:.0f} | {f:.0f} | {f - k:+.0f} ns ({(f - k) / k:+.0%}) |", flush=True)
    finally:
        _core._set_walk_releases_gil(old)


if __name__ == "__main__":
    main()
