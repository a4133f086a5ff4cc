"""Memory follows the live set: insert N subscriptions, remove them all,
and compare memory_bytes and RSS with an empty index's (issue: "an emptied
index keeps its memory").

    .venv/bin/python bench/churn_memory.py [--subs 10000000] [--batch 1000000]

The subscriptions are generated batch by batch (the same batch again for
the removal), in light's mix: mostly literal filters, some with a '*' at
one of three positions, some ending in '>' -- so the literal table, several
shape tables and the trie all grow and must all shrink.  RSS is read from
/proc/self/status (Linux) before, at the peak and after the removal, then
again after glibc's malloc_trim(0), which hands freed heap pages back.
"""
import argparse
import ctypes
import ctypes.util
import os
import sys
import time

from topicmatch import Sublist


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def malloc_trim():
    """glibc's malloc_trim(0); False where there is no glibc."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        return bool(libc.malloc_trim(0)) or True
    except (OSError, AttributeError):
        return False


def batch(start, n):
    """Filters for subscription ids start .. start+n-1 (deterministic)."""
    out = []
    for i in range(start, start + n):
        k = i % 20
        a, b, c = f"t{i % 50}", f"d{(i // 50) % 1000}", f"x{i}"
        if k < 14:
            out.append(f"{a}.{b}.{c}.created")
        elif k < 16:
            out.append(f"{a}.*.{c}.created")
        elif k < 18:
            out.append(f"{a}.{b}.*.{c}")
        else:
            out.append(f"{a}.{b}.{c}.>")
    return out


def in_batches(op, verb, total, size):
    """op(filters, ids) over every batch, with progress; the seconds taken."""
    t0 = time.perf_counter()
    for start in range(0, total, size):
        n = min(size, total - start)
        op(batch(start, n), range(start, start + n))
        print(f"\r  {verb} {start + n:,}", end="", flush=True)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--subs", type=int, default=10_000_000)
    ap.add_argument("--batch", type=int, default=1_000_000)
    a = ap.parse_args()
    if not os.path.exists("/proc/self/status"):
        sys.exit("churn_memory.py reads RSS from /proc/self/status (Linux)")
    empty_bytes = Sublist("nats").stats()["memory_bytes"]
    sl = Sublist("nats")
    # The start is taken once Python has held (and dropped) one batch of
    # filter strings, so that its own allocator's high-water mark is not
    # counted against the index.
    warm = batch(0, a.batch)
    del warm
    malloc_trim()
    rss0 = rss_mb()
    t_ins = in_batches(sl.insert_many, "inserted", a.subs, a.batch)
    peak_bytes, rss_peak = sl.stats()["memory_bytes"], rss_mb()
    print(f"\n  {len(sl):,} subscriptions: memory_bytes {peak_bytes / 2**20:,.1f} MiB "
          f"({peak_bytes / a.subs:.1f} B/sub), RSS {rss_peak:,.0f} MB, insert {t_ins:.1f} s")
    t_rm = in_batches(sl.remove_many, "removed", a.subs, a.batch)
    st = sl.stats()
    rss_after = rss_mb()
    trimmed = malloc_trim()
    rss_trim = rss_mb()
    print(f"\n  after removing all ({t_rm:.1f} s): len {len(sl)}, memory_bytes {st['memory_bytes']:,} "
          f"(an empty index: {empty_bytes:,}; difference {st['memory_bytes'] - empty_bytes:+,} bytes)")
    print(f"  RSS: start {rss0:,.0f} MB, peak {rss_peak:,.0f} MB, after removal {rss_after:,.0f} MB, "
          f"after malloc_trim {rss_trim:,.0f} MB ({(rss_trim - rss0) / rss0 * 100:+.1f}% of the start)"
          + ("" if trimmed else " (no glibc malloc_trim here)"))
    ok = len(sl) == 0 and st["memory_bytes"] - empty_bytes < 4096 and rss_trim <= rss0 * 1.10
    print("OK" if ok else "NOT OK: memory did not follow the live set")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
