"""Batch benchmark on the standard workloads, exact totals checked.

    .venv/bin/python bench/run_batch.py [--repeat 5] [--only light,heavy,...]
    .venv/bin/python bench/run_batch.py --threads 1,2,4,8,16 [--only light,hot1k,heavy,light1m]

--threads T1,T2,...: the scaling table instead (scaling_table below): for
each workload, match_many over a pyarrow column at each thread count --
honoured even past the machine's CPUs (_set_batch_threading(cpus=) set to
the largest) -- with ns/row, the speed-up over the first count, and per
batch the user and system CPU time and the voluntary and involuntary
context switches (getrusage(RUSAGE_SELF) deltas around each call: every
thread of the process).  Thread counts interleaved round by round, medians
of --repeat.  light1m (light10m, ...) is light's generator at 1M (10M, ...)
filters (made on first use under bench/data/light1m, ~10 s per million
here; no expected totals: every count must agree).
--json FILE also writes the rows.  bench/scaling.sh runs it from a wheel.

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
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa

from topicmatch import Sublist

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
    print(f"  light-mqtt: paho MQTTMatcher {t_paho / n:7.0f} ns/match, topicmatch match() {t_match / n:6.0f} ns "
          f"({t_paho / t_match:.0f}x), match_many {t_many / n:6.1f} ns/subject ({t_paho / t_many:.0f}x)")


# light's generator arguments (workloads.WORKLOADS["light"]), at N million
# filters for the workload named lightNm (light1m, light10m).
LIGHT_ARGS = ["--vocab", "50,100,200,500,1000", "--zipf", "0.5", "--fwc-min-depth", "2"]
LIGHT_BIG = re.compile(r"light([1-9][0-9]*)m")


def load_scaling(name):
    """(filters, ids, queues, publishes, expected totals or None)."""
    big = LIGHT_BIG.fullmatch(name)
    if big is None:
        return (*load(name), EXPECTED[name])
    import workloads
    out = os.path.join(workloads.DATA, name)
    if not os.path.exists(os.path.join(out, "pubs.txt")):
        os.makedirs(out, exist_ok=True)
        print(f"generating {name} into {out} ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, workloads.GENERATOR, "--out", out, *LIGHT_ARGS,
                        "--subs", str(int(big.group(1)) * 1_000_000)], check=True,
                       stdout=subprocess.DEVNULL)
    filters, ids, queues = [], [], []
    with open(os.path.join(out, "subs.txt")) as f:
        for j, line in enumerate(f):
            parts = line.split()
            filters.append(parts[0])
            queues.append(parts[1] if len(parts) > 1 else None)
            ids.append(j)
    with open(os.path.join(out, "pubs.txt")) as f:
        pubs = f.read().split("\n")
    if pubs and pubs[-1] == "":
        pubs.pop()
    return filters, ids, queues, pubs, None


def scaling_table(names, counts, repeat, json_path=None):
    """match_many over an Arrow column at each thread count: ns/row,
    speed-up, CPU and context switches per batch (getrusage deltas)."""
    from topicmatch import _core
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count()
    try:
        load_avg = "load %.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        load_avg = "load ?"
    print(f"scaling: {cpus} CPUs, threads {','.join(map(str, counts))}, medians of {repeat}, {load_avg}")
    saved = _core._set_batch_threading(cpus=max(counts))
    rows = []
    try:
        for name in names:
            filters, ids, queues, pubs, expected = load_scaling(name)
            sl = Sublist(dialect_of(name), cache_size=4096 if name.startswith("hot") else 0)
            sl.insert_many(filters, ids, queues)
            del filters, ids, queues
            arrow = pa.array(pubs)
            n = len(pubs)
            del pubs
            sl.match_many(arrow, queues="all", threads=max(counts))    # the pool, the kept buffer, the cache
            samples = {t: [] for t in counts}
            totals = {}
            for _ in range(repeat):
                for t in counts:
                    r0 = resource.getrusage(resource.RUSAGE_SELF)
                    t0 = time.perf_counter_ns()
                    b = sl.match_many(arrow, queues="all", threads=t)
                    dt = time.perf_counter_ns() - t0
                    r1 = resource.getrusage(resource.RUSAGE_SELF)
                    samples[t].append((dt, r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime,
                                       r1.ru_nvcsw - r0.ru_nvcsw, r1.ru_nivcsw - r0.ru_nivcsw))
                    if t not in totals:
                        totals[t] = (len(b.sub_ids), checksum(b))
                    del b
            base = None
            print(f"  {'workload':9s} {'T':>3s} {'ns/row':>8s} {'speed-up':>8s} {'user ms':>8s} {'sys ms':>7s} "
                  f"{'vol cs':>7s} {'invol cs':>8s}  totals")
            for t in counts:
                med = [statistics.median(x[k] for x in samples[t]) for k in range(5)]
                ns = med[0] / n
                base = base or ns
                ok = ("ok" if expected is None or totals[t] == expected else f"MISMATCH {totals[t]} != {expected}")
                if totals[t] != totals[counts[0]]:
                    ok = f"MISMATCH {totals[t]} != {totals[counts[0]]} (T={counts[0]})"
                row = {"workload": name, "rows": n, "threads": t, "ns_per_row": ns, "speedup": base / ns,
                       "user_ms": med[1] * 1e3, "sys_ms": med[2] * 1e3, "vol_cs": med[3], "invol_cs": med[4],
                       "totals": ok}
                rows.append(row)
                print(f"  {name:9s} {t:3d} {ns:8.1f} {base / ns:7.2f}x {row['user_ms']:8.1f} {row['sys_ms']:7.1f} "
                      f"{med[3]:7.0f} {med[4]:8.0f}  {ok}", flush=True)
            del sl, arrow
            if json_path:       # after each workload: a run cut short keeps what it measured
                with open(json_path, "w") as f:
                    json.dump({"cpus": cpus, "load": load_avg, "repeat": repeat, "rows": rows}, f, indent=1)
    finally:
        _core._set_batch_threading(**saved)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", default=None,
                    help="default: light,heavy,hot1k,hot4k,light-mqtt,churn,load,paho "
                         "(with --threads: light,hot1k,heavy)")
    ap.add_argument("--threads", default=None, help="e.g. 1,2,4,8,16: the scaling table")
    ap.add_argument("--json", default=None, help="with --threads: write the rows here")
    a = ap.parse_args()
    if a.threads:
        counts = [int(t) for t in a.threads.split(",")]
        scaling_table((a.only or "light,hot1k,heavy").split(","), counts, a.repeat, a.json)
        return 0
    parts = (a.only or "light,heavy,hot1k,hot4k,light-mqtt,churn,load,paho").split(",")
    print(f"topicmatch match_many benchmark (medians of {a.repeat}); "
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
