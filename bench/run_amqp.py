"""The AMQP dialect against the NATS dialect, in one run (issue "AMQP").

    .venv/bin/python bench/run_amqp.py [--repeat 7]

1. `light` written in AMQP syntax: NATS's `a.b.>` (one or more tokens) is
   AMQP's `a.b.*.#` exactly, `*` is `*`, subjects are unchanged; queue
   groups merge by name in both.  Each sub_id is one subscription line, so
   AMQP's once-per-sub_id rule changes nothing and both must reproduce
   light's exact totals.  match_many(queues="all", threads=1) from a Python
   list, NATS and AMQP interleaved, median ns/subject of --repeat runs and
   their ratio (target: AMQP within 1.2x of NATS).
2. The many-'#' worst case: a binding of 30 '#' (plus a word that never
   comes, so no early success) and '#' interleaved with words, against a
   routing key of 255 bytes of one-letter words (128 words) -- RabbitMQ
   3.10.8 took 16.6 s for one publish of '#.#.#.#' against 128 words.
   subject_matches, match() and match_many, median ns per call.
"""
import argparse
import statistics
import time

from topicmatch import Sublist, subject_matches

from workloads import EXPECTED, calibration, load
from run_batch import checksum


def to_amqp(f):
    return f[:-1] + "*.#" if f == ">" or f.endswith(".>") else f


def median_ns(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times)


def bench_light(repeat):
    filters, ids, queues, pubs = load("light")
    nats = Sublist("nats")
    nats.insert_many(filters, ids, queues)
    amqp = Sublist("amqp")
    amqp.insert_many([to_amqp(f) for f in filters], ids, queues)
    for name, sl in (("nats", nats), ("amqp", amqp)):
        b = sl.match_many(pubs, queues="all")
        got = (len(b.sub_ids), checksum(b))
        assert got == EXPECTED["light"], (name, got, EXPECTED["light"])
    n = len(pubs)
    times = {"nats": [], "amqp": []}
    for _ in range(repeat):          # interleaved: both see the same machine
        for name, sl in (("nats", nats), ("amqp", amqp)):
            t0 = time.perf_counter_ns()
            sl.match_many(pubs, queues="all", threads=1)
            times[name].append((time.perf_counter_ns() - t0) / n)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"light, match_many threads=1, {n:,} subjects, totals exact in both dialects:")
    for k in ("nats", "amqp"):
        print(f"  {k}: median {med[k]:6.1f} ns/subject  (runs: {', '.join(f'{x:.0f}' for x in times[k])})")
    print(f"  amqp / nats = {med['amqp'] / med['nats']:.3f}  (target <= 1.2)")
    st = amqp.stats()
    print(f"  memory: nats {nats.stats()['memory_bytes'] / len(nats):.0f} B/sub, "
          f"amqp {st['memory_bytes'] / len(amqp):.0f} B/sub")


def bench_many_hashes(repeat):
    rk = ".".join(["a"] * 128)                       # 255 bytes
    assert len(rk.encode()) == 255
    never = ".".join(["#"] * 30) + ".b"              # 30 '#', then a word that never comes
    mixed = ".".join(["#", "a"] * 15)                # '#' and words interleaved
    always = ".".join(["#"] * 30)
    print("many '#' against 255 bytes of one-letter words (128 words):")
    for label, f in (("30 '#' + 'b' (no match)", never), ("'#.a' x 15", mixed), ("30 '#'", always)):
        want = f is not never
        assert subject_matches(f, rk, dialect="amqp") is want
        t = median_ns(lambda: [subject_matches(f, rk, dialect="amqp") for _ in range(100)], repeat) / 100
        print(f"  subject_matches {label:26s}: {t / 1000:8.1f} us/call")
    sl = Sublist("amqp")
    sl.insert(never, 1)
    sl.insert(mixed, 2)
    sl.insert(always, 3)
    # and an index with many multi-'#' bindings of the same vocabulary
    for k in range(1, 200):
        sl.insert(".".join(["#"] * (k % 7 + 2) + ["a"] * (k % 5) + ["#", "b" if k % 3 else "a"]), 100 + k)
    assert sorted(sl.match(rk).subs)[:2] == [2, 3]
    t = median_ns(lambda: [sl.match(rk) for _ in range(100)], repeat) / 100
    print(f"  match() on an index of {len(sl)} multi-'#' bindings: {t / 1000:8.1f} us/call "
          f"({len(sl.match(rk).subs)} matches)")
    keys = [rk] * 1000
    t = median_ns(lambda: sl.match_many(keys), repeat) / len(keys)
    print(f"  match_many, same index, 1,000 such keys: {t / 1000:8.1f} us/key")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    print(f"calibration: {calibration():.1f} ns per empty Python loop iteration")
    bench_light(args.repeat)
    bench_many_hashes(args.repeat)


if __name__ == "__main__":
    main()
