"""Batch benchmark on the standard workloads, exact totals checked.

    .venv/bin/python bench/run_batch.py [--repeat 5] [--only light,heavy,...]

Reports, as medians of --repeat runs taken in this one process:
  * match_many ns/subject (and ns per returned id) for light, heavy, hot1k,
    hot4k, light-mqtt at threads=1 and threads=2 (heavy: 1, 2, 4 and 8),
    from a Python list and from a pyarrow StringArray, and each speed-up
    over threads=1 (configurations interleaved round by round);
  * the cache hit rate on hot1k / hot4k (cache_size=4096);
  * churn: 1% inserts/removes interleaved with match_many on hot4k, hit
    rate and ns/subject with and without churn;
  * from_bytes vs insert_many load time of the light index;
  * paho-mqtt's pure-Python MQTTMatcher vs match() and match_many on
    light-mqtt (a sample of the publishes, it is slow).
"""
import argparse
import statistics
import sys
import time

import numpy as np
import pyarrow as pa

from fastsub import Sublist

from workloads import EXPECTED, calibration, dialect_of, load

MASK = (1 << 64) - 1



def checksum(b):
    rows = np.repeat(np.arange(1, len(b) + 1, dtype=np.uint64), np.diff(b.offsets).astype(np.int64))
    return int((rows * (b.sub_ids.astype(np.uint64) + np.uint64(1))).sum(dtype=np.uint64)) & MASK


def timed(fn, repeat):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        out = fn()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times), out


# heavy writes ~650 MB of ids: the figure that shows whether threads scale
# when the output, not the matching, is the work.
THREADS = {"heavy": (1, 2, 4, 8)}


def bench_workload(name, repeat, cache_size):
    filters, ids, queues, pubs = load(name)
    sl = Sublist(dialect_of(name), cache_size=cache_size)
    sl.insert_many(filters, ids, queues)
    arrow = pa.array(pubs)
    n = len(pubs)
    sources = (("list", pubs), ("arrow", arrow))
    counts = THREADS.get(name, (1, 2))
    # Every configuration once per round, rounds interleaved: the medians
    # then share the machine's moods, and their ratios are fair.
    times = {(src, th): [] for src, _ in sources for th in counts}
    ids_out = {}
    for _ in range(repeat):
        for src_name, src in sources:
            for th in counts:
                t0 = time.perf_counter_ns()
                b = sl.match_many(src, queues="all", threads=th)
                times[(src_name, th)].append(time.perf_counter_ns() - t0)
                if (src_name, th) not in ids_out:
                    got = (len(b.sub_ids), checksum(b))
                    ids_out[(src_name, th)] = (len(b.sub_ids),
                                               "ok" if got == EXPECTED[name] else f"MISMATCH {got} != {EXPECTED[name]}")
                del b
    res = {}
    for src_name, _ in sources:
        for th in counts:
            t = statistics.median(times[(src_name, th)])
            nids, ok = ids_out[(src_name, th)]
            res[(src_name, th)] = t / n
            print(f"  {name:10s} {src_name:5s} threads={th}: {t / n:7.1f} ns/subject "
                  f"{t / max(1, nids):6.2f} ns/id  speed-up {res[(src_name, 1)] / res[(src_name, th)]:4.2f}x  "
                  f"totals {ok}")
    if cache_size:
        st = sl.stats()
        print(f"  {name:10s} cache: {st['cache_entries']} entries, hit rate {st['cache_hit_rate']:.4f}")
    return sl, pubs


def bench_churn(repeat):
    name = "hot4k"
    filters, ids, queues, pubs = load(name)
    arrow = pa.array(pubs)
    for churn in (False, True):
        sl = Sublist("nats", cache_size=4096)
        sl.insert_many(filters, ids, queues)
        sl.match_many(arrow[:100_000])                  # warm the cache
        before = sl.stats()
        rng = np.random.default_rng(7)
        block = 10_000                                  # 1% churn: 100 changes per 10k subjects
        t0 = time.perf_counter_ns()
        for start in range(0, len(pubs), block):
            if churn:
                for j in rng.integers(0, len(filters), 50):
                    j = int(j)
                    sl.remove(filters[j], ids[j], queue=queues[j])
                    sl.insert(filters[j], ids[j], queue=queues[j])
            sl.match_many(arrow.slice(start, block))
        dt = time.perf_counter_ns() - t0
        st = sl.stats()
        hits = st["cache_hits"] - before["cache_hits"]
        misses = st["cache_misses"] - before["cache_misses"]
        print(f"  churn={'1%' if churn else 'no':3s} hot4k: {dt / len(pubs):6.1f} ns/subject, "
              f"hit rate {hits / (hits + misses):.4f}, cache entries {st['cache_entries']}")


def bench_load(repeat):
    filters, ids, queues, _ = load("light")
    t_ins, sl = timed(lambda: _built(filters, ids, queues), repeat)
    try:
        blob = sl.to_bytes()
    except NotImplementedError:
        print("  to_bytes not available")
        return
    t_load, sl2 = timed(lambda: Sublist.from_bytes(blob), repeat)
    n = len(filters)
    print(f"  light: insert_many {t_ins / n:6.1f} ns/sub, from_bytes {t_load / n:6.1f} ns/sub "
          f"({t_ins / t_load:.1f}x faster), blob {len(blob) / n:.1f} bytes/sub")


def _built(filters, ids, queues):
    sl = Sublist("nats")
    sl.insert_many(filters, ids, queues)
    return sl


def bench_paho(repeat):
    try:
        from paho.mqtt.matcher import MQTTMatcher
    except ImportError:
        print("  paho-mqtt not installed")
        return
    filters, ids, queues, pubs = load("light-mqtt")
    m = MQTTMatcher()
    for f, i in zip(filters, ids):
        try:
            m[f].append(i)
        except KeyError:
            m[f] = [i]
    sample = pubs[:50_000]
    def paho_loop():
        for p in sample:
            for _ in m.iter_match(p):
                pass

    def match_loop():
        for p in sample:
            match(p)

    t_paho, _ = timed(paho_loop, max(1, repeat // 2))
    sl = Sublist("mqtt")
    sl.insert_many(filters, ids, queues)
    match = sl.match
    t_match, _ = timed(match_loop, repeat)
    arrow = pa.array(sample)
    t_many, _ = timed(lambda: sl.match_many(arrow, queues="all"), repeat)
    n = len(sample)
    print(f"  light-mqtt: paho MQTTMatcher {t_paho / n:7.0f} ns/match, fastsub match() {t_match / n:6.0f} ns "
          f"({t_paho / t_match:.0f}x), match_many {t_many / n:6.1f} ns/subject ({t_paho / t_many:.0f}x)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", default="light,heavy,hot1k,hot4k,light-mqtt,churn,load,paho")
    a = ap.parse_args()
    parts = a.only.split(",")
    print(f"fastsub match_many benchmark (medians of {a.repeat}); "
          f"calibration: empty Python loop {calibration():.1f} ns/iteration")
    for name in ("light", "heavy", "hot1k", "hot4k", "light-mqtt"):
        if name in parts:
            bench_workload(name, a.repeat, 4096 if name.startswith("hot") else 0)
    if "churn" in parts:
        bench_churn(a.repeat)
    if "load" in parts:
        bench_load(a.repeat)
    if "paho" in parts:
        bench_paho(a.repeat)


if __name__ == "__main__":
    sys.exit(main())
