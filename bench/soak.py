"""Soak: a long run of churn on a big index while readers match from threads.

    python bench/soak.py [--minutes 10] [--subs 1000000] [--churn 0.01]

One writer thread replaces --churn of the set per second (at 1M and 0.01:
10,000 inserts and 10,000 removes a second, in insert_many / remove_many
batches every 0.1 s); two threads run match_many over Arrow batches of
subjects and one runs match() in a loop, all on the same Sublist (with a
result cache, so cache invalidation is soaked too).  Checked, and the exit
status says whether it held:

* no call fails, in any thread;
* RSS stays within +-5% of its value at the end of the warm-up (--warmup
  seconds, default 10% of the run, at least 30 s);
* so does the malloc heap in use (glibc's mallinfo2(): uordblks + hblkhd,
  where there is glibc): the C core's live memory is in it, and free
  memory the allocator keeps is not.  With both figures, an RSS drift can
  be told apart: live memory growing (a leak) or the allocator keeping
  freed memory it cannot reuse (glibc gives each thread its own arena: the
  index built on the main thread and churned by the writer thread leaves
  holes in one arena while the other grows; MALLOC_ARENA_MAX=1 shows it);
* the end state equals a serial replay: the writer's operations are
  generated from a seed, so they are generated again and applied in order,
  on one thread, to a fresh Sublist; the two must serialize to the same
  bytes and answer a sample of subjects identically.

Not part of `make test` (it runs for minutes): run it by hand, niced on a
shared machine.  It prints its figures as it goes and a summary at the end.
"""
import argparse
import os
import random
import sys
import threading
import time

import pyarrow as pa

import topicmatch

VOCAB = [50, 100, 200, 500, 1000]       # distinct tokens per level, like the 'light' workload


def malloc_trim():
    """glibc's malloc_trim(0): give free heap memory back to the system
    (None where there is no glibc)."""
    try:
        import ctypes
        return ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        return None


def heap_bytes():
    """glibc's mallinfo2(): (in use, free but kept) bytes of the malloc heap,
    over all arenas, mmapped chunks counted as in use; None where there is
    no glibc (or one older than 2.33).  The C core allocates with malloc, so
    its live memory is inside "in use"; "free but kept" is what the
    allocator holds on to after free() and is part of RSS as far as it was
    ever touched.  (CPython's small objects and Arrow's buffers live in
    their own pools, outside both.)"""
    try:
        import ctypes

        class Mallinfo2(ctypes.Structure):
            _fields_ = [(n, ctypes.c_size_t) for n in (
                "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                "fsmblks", "uordblks", "fordblks", "keepcost")]
        f = ctypes.CDLL("libc.so.6").mallinfo2
        f.restype = Mallinfo2
        mi = f()
    except (OSError, AttributeError):
        return None
    return mi.uordblks + mi.hblkhd, mi.fordblks


def rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def token(rng, level):
    n = VOCAB[min(level, len(VOCAB) - 1)]
    return f"t{level}x{int(n * rng.random() ** 2)}"      # skewed: low numbers are frequent


def make_filter(rng):
    depth = rng.randint(3, 6)
    toks = [token(rng, i) for i in range(depth)]
    r = rng.random()
    if r < 0.10:
        toks[rng.randrange(1, depth)] = "*"
    elif r < 0.15:
        toks[-1] = ">"
    return ".".join(toks)


def make_subject(rng):
    return ".".join(token(rng, i) for i in range(rng.randint(3, 6)))


def operations(seed, nsubs, batch):
    """The writer's operations, the same for the same seed: first the
    initial bulk insert, then alternately a batch of inserts (new ids, on
    filters drawn from a pool, as subscribers share filters) and a batch of
    removes (random live subscriptions).

    The initial set is drawn from the pool the same way as the inserts
    (with replacement), so the churn does not change what the index holds
    in distribution: the live set is always nsubs independent draws.  (Had
    it been the pool itself, one subscription per pool filter, churn would
    turn that into a Poisson spread and the number of distinct filters --
    and with it the index's true size -- would fall by about a third
    during the run.)"""
    rng = random.Random(seed)
    pool = [make_filter(rng) for _ in range(nsubs)]
    live_f = [pool[rng.randrange(nsubs)] for _ in range(nsubs)]
    live_i = list(range(nsubs))
    next_id = nsubs
    yield "insert", list(live_f), list(live_i)
    while True:
        filters = [pool[rng.randrange(nsubs)] for _ in range(batch)]
        ids = list(range(next_id, next_id + batch))
        next_id += batch
        live_f.extend(filters)
        live_i.extend(ids)
        yield "insert", filters, ids
        rf, ri = [], []
        for _ in range(batch):
            k = rng.randrange(len(live_f))
            rf.append(live_f[k])
            ri.append(live_i[k])
            live_f[k] = live_f[-1]
            live_i[k] = live_i[-1]
            live_f.pop()
            live_i.pop()
        yield "remove", rf, ri


def apply(sl, op):
    kind, filters, ids = op
    if kind == "insert":
        n = sl.insert_many(filters, ids)
    else:
        n = sl.remove_many(filters, ids)
    if n != len(ids):
        raise AssertionError(f"{kind}_many changed {n} of {len(ids)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--subs", type=int, default=1_000_000)
    ap.add_argument("--churn", type=float, default=0.01, help="fraction of the set replaced per second")
    ap.add_argument("--warmup", type=float, default=None, help="seconds (default: 10%% of the run, >= 30)")
    ap.add_argument("--cache-size", type=int, default=4096)
    ap.add_argument("--batch-rows", type=int, default=10_000, help="subjects per match_many call")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tolerance", type=float, default=0.05, help="allowed RSS drift after warm-up")
    args = ap.parse_args()

    duration = args.minutes * 60
    warmup = args.warmup if args.warmup is not None else max(30.0, duration * 0.1)
    tick = 0.1
    batch = max(1, round(args.subs * args.churn * tick))     # per insert batch and per remove batch
    print(f"soak: {args.subs:,} subscriptions, churn {args.churn:.1%}/s = {batch / tick:,.0f} inserts "
          f"+ {batch / tick:,.0f} removes per second, {args.minutes:g} min (warm-up {warmup:.0f} s), "
          f"cache {args.cache_size}, 2 x match_many({args.batch_rows:,} rows) + 1 x match()", flush=True)

    srng = random.Random(args.seed + 1)
    pool = [make_subject(srng) for _ in range(200_000)]
    pool_arrow = pa.array(pool)

    sl = topicmatch.Sublist("nats", cache_size=args.cache_size)
    ops = operations(args.seed, args.subs, batch)
    t0 = time.perf_counter()
    apply(sl, next(ops))
    print(f"initial insert_many: {time.perf_counter() - t0:.1f} s, len {len(sl):,}, "
          f"memory_bytes {sl.stats()['memory_bytes'] / 2**20:.1f} MiB, RSS {rss_bytes() / 2**20:.0f} MiB", flush=True)

    stop = threading.Event()
    errors = []
    counts = {"batches": 1, "match_many_rows": 0, "match_many_ids": 0, "match": 0, "match_ids": 0}
    lock = threading.Lock()

    def guarded(fn):
        def run():
            try:
                fn()
            except BaseException as e:           # every failure counts, whatever it is
                errors.append(f"{threading.current_thread().name}: {type(e).__name__}: {e}")
                stop.set()
        return run

    latencies = []                   # seconds per insert_many / remove_many call

    @guarded
    def writer():
        start = time.perf_counter()
        done = 0
        while not stop.is_set():
            due = int((time.perf_counter() - start) / tick)
            if done >= due:
                time.sleep(tick / 4)
                continue
            for _ in range(2):          # one insert batch, then one remove batch
                op = next(ops)
                t = time.perf_counter()
                apply(sl, op)
                latencies.append(time.perf_counter() - t)
            done += 1
            with lock:
                counts["batches"] += 2

    def many_reader(seed):
        @guarded
        def run():
            rng = random.Random(seed)
            while not stop.is_set():
                start = rng.randrange(len(pool) - args.batch_rows)
                b = sl.match_many(pool_arrow.slice(start, args.batch_rows), queues="all")
                if len(b) != args.batch_rows or b.invalid.any() or b.offsets[-1] != len(b.sub_ids):
                    raise AssertionError("match_many returned an inconsistent batch")
                with lock:
                    counts["match_many_rows"] += args.batch_rows
                    counts["match_many_ids"] += len(b.sub_ids)
        return run

    @guarded
    def one_reader():
        rng = random.Random(args.seed + 7)
        while not stop.is_set():
            ids = 0
            for _ in range(1000):
                r = sl.match(pool[rng.randrange(len(pool))])
                ids += len(r.subs)
            with lock:
                counts["match"] += 1000
                counts["match_ids"] += ids

    threads = [threading.Thread(target=writer, name="writer"),
               threading.Thread(target=many_reader(11), name="match_many-1"),
               threading.Thread(target=many_reader(12), name="match_many-2"),
               threading.Thread(target=one_reader, name="match")]
    start = time.perf_counter()
    for t in threads:
        t.start()
    samples = []                     # (seconds, rss, heap in use, heap free but kept)
    last_print = 0.0
    prev = dict(counts)
    while not stop.is_set():
        el = time.perf_counter() - start
        if el >= duration:
            break
        hb = heap_bytes()
        samples.append((el, rss_bytes()) + (hb if hb else (None, None)))
        if el - last_print >= 60 or last_print == 0.0:
            with lock:
                now = dict(counts)
            span = el - last_print if last_print else el or 1.0
            st = sl.stats()
            heap = (f"heap in use {samples[-1][2] / 2**20:.0f} MiB, free kept {samples[-1][3] / 2**20:.0f} MiB  "
                    if samples[-1][2] is not None else "")
            print(f"  {el / 60:5.1f} min  len {len(sl):,}  RSS {samples[-1][1] / 2**20:.0f} MiB  {heap}"
                  f"memory_bytes {st['memory_bytes'] / 2**20:.1f} MiB  "
                  f"writes {(now['batches'] - prev['batches']) * batch / span:,.0f}/s  "
                  f"match_many {(now['match_many_rows'] - prev['match_many_rows']) / span:,.0f} rows/s  "
                  f"match {(now['match'] - prev['match']) / span:,.0f}/s", flush=True)
            prev, last_print = now, el
        time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    final_rss = rss_bytes()
    trimmed_final = rss_bytes() if malloc_trim() is not None else None

    # RSS after the warm-up, against its value when the warm-up ended
    after = [r for s, r, _, _ in samples if s >= warmup]
    ok = not errors
    if after:
        base = after[0]
        lo, hi = min(after), max(after)
        drift = max(hi / base - 1, 1 - lo / base)
        rss_ok = drift <= args.tolerance
    else:
        base = lo = hi = final_rss
        drift, rss_ok = 0.0, False
    ok &= rss_ok

    # the malloc heap in use after the warm-up, the same way
    heap_after = [(h, k) for s, _, h, k in samples if s >= warmup and h is not None]
    heap_line = None
    if heap_after:
        hbase = heap_after[0][0]
        hlo, hhi = min(h for h, _ in heap_after), max(h for h, _ in heap_after)
        hdrift = max(hhi / hbase - 1, 1 - hlo / hbase)
        heap_ok = hdrift <= args.tolerance
        ok &= heap_ok
        heap_line = (f"malloc heap in use after warm-up: start {hbase / 2**20:.0f} MiB, min {hlo / 2**20:.0f}, "
                     f"max {hhi / 2**20:.0f}, final {heap_after[-1][0] / 2**20:.0f} MiB: drift {hdrift:.1%} "
                     f"(limit {args.tolerance:.0%}) -> {'flat' if heap_ok else 'NOT FLAT'}; free but kept by "
                     f"malloc {heap_after[0][1] / 2**20:.0f} -> {heap_after[-1][1] / 2**20:.0f} MiB")
        if heap_ok and not rss_ok:
            heap_line += ("\n  (RSS moved but the heap in use did not: the difference is memory malloc keeps "
                          "after free(), not live memory; the RSS check still fails -- rerun with "
                          "MALLOC_ARENA_MAX=1 to see whether per-thread arenas are the cause)")

    # the serial replay: the same operations, in order, on one thread
    nbatches = counts["batches"]
    t1 = time.perf_counter()
    replay = topicmatch.Sublist("nats", cache_size=0)
    rops = operations(args.seed, args.subs, batch)
    for _ in range(nbatches):
        apply(replay, next(rops))
    same_len = len(replay) == len(sl)
    same_bytes = replay.to_bytes() == sl.to_bytes()
    sample = pa.array(pool[:50_000])
    a, b = sl.match_many(sample, queues="all"), replay.match_many(sample, queues="all")
    same_answers = (a.offsets == b.offsets).all() and (a.sub_ids == b.sub_ids).all()
    replay_s = time.perf_counter() - t1
    ok &= bool(same_len and same_bytes and same_answers)

    st = sl.stats()
    writes = (nbatches - 1) * batch
    print()
    print(f"ran {elapsed / 60:.1f} min: {writes:,} inserts + removes ({writes / elapsed:,.0f}/s; "
          f"target {2 * batch / tick:,.0f}/s), {counts['match_many_rows']:,} match_many rows "
          f"({counts['match_many_rows'] / elapsed:,.0f}/s, {counts['match_many_ids']:,} ids), "
          f"{counts['match']:,} match() calls ({counts['match'] / elapsed:,.0f}/s)")
    if latencies:
        lat = sorted(latencies)
        print(f"writer: {len(lat):,} calls of {batch:,} items, latency p50 {lat[len(lat) // 2] * 1e3:.1f} ms, "
              f"p99 {lat[int(len(lat) * 0.99)] * 1e3:.1f} ms, max {lat[-1] * 1e3:.1f} ms")
    print(f"final: len {len(sl):,}, memory_bytes {st['memory_bytes'] / 2**20:.1f} MiB, "
          f"cache hit rate {st['cache_hit_rate']:.1%}, generation {sl.generation:,}")
    print(f"RSS after warm-up ({warmup:.0f} s): start {base / 2**20:.0f} MiB, min {lo / 2**20:.0f}, "
          f"max {hi / 2**20:.0f}, final {final_rss / 2**20:.0f} MiB: drift {drift:.1%} "
          f"(limit {args.tolerance:.0%}) -> {'flat' if rss_ok else 'NOT FLAT'}")
    if heap_line:
        print(heap_line)
    if trimmed_final:
        print(f"RSS at the end after malloc_trim(0): {trimmed_final / 2**20:.0f} MiB ({trimmed_final / base - 1:+.1%} "
              f"against the start; what trimming gave back was free memory the allocator kept)")
    print(f"serial replay of {nbatches:,} batches ({replay_s:.0f} s): len {'equal' if same_len else 'DIFFERENT'}, "
          f"to_bytes {'identical' if same_bytes else 'DIFFERENT'}, answers on 50,000 subjects "
          f"{'identical' if same_answers else 'DIFFERENT'}")
    print(f"failed calls: {len(errors)}" + "".join(f"\n  {e}" for e in errors[:10]))
    print("SOAK OK" if ok else "SOAK FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
