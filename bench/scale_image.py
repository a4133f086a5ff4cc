"""100M subscriptions on one machine: build, save, open and match an image.

    python bench/scale_image.py [--prefixes 1000] [--dir DIR] [--workers 2]
                                [--build both|insert_many|build_image] [--threads N]

Filters: the light workload's 100k (bench/workloads.py) under --prefixes
first tokens ("p0.<filter>" ...; 1000 gives 100M), inserted a prefix at a
time so that the input never exists whole in Python.  Steps, each in its
own process so that each peak RSS is its own (docs/scale.md reports them):

    build+save   insert_many chunk by chunk, then save() (the image file)
    build_image  topicmatch.build_image of the same rows, straight from
                 columns: an Arrow string column of one chunk a prefix
                 (made a prefix at a time), the ids a numpy array, the
                 queues light's column repeated, on --threads threads (the
                 same bytes as save()'s, compared when both run).  Its
                 columns are the whole input at once: about 100 bytes a
                 row with its working memory (the specs, 40 a row, its
                 rows and items), beside the file's pages
    open+match   Sublist.open(verify=False) and match_many of light's
                 publishes under random prefixes, in --workers processes
                 at once (their private memory is what they add to the
                 shared, mapped file)
    verify       Sublist.open(verify=True): the full check, once
"""
import argparse
import filecmp
import multiprocessing
import os
import random
import resource
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import workloads  # noqa: E402

import topicmatch  # noqa: E402


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def private_mib():
    total = 0
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1])
    return total / 1024


def build_and_save(prefixes, path, q):
    filters, _, queues, _ = workloads.load("light")
    n = len(filters)
    sl = topicmatch.Sublist()
    t = time.perf_counter()
    for k in range(prefixes):
        fs = [f"p{k}.{f}" for f in filters]
        sl.insert_many(fs, range(k * n, (k + 1) * n), queues)
        if k % 50 == 49:
            print(f"  {(k + 1) * n:,} filters, {time.perf_counter() - t:.0f} s, "
                  f"peak RSS {peak_rss_mib():,.0f} MiB", flush=True)
    t_build = time.perf_counter() - t
    mem = sl.stats()["memory_bytes"]
    t = time.perf_counter()
    sl.save(path)
    q.put(("build+save", len(sl), t_build, time.perf_counter() - t, mem, peak_rss_mib()))


def build_image(prefixes, path, threads, q):
    import numpy as np
    import pyarrow as pa
    filters, _, queues, _ = workloads.load("light")
    n = len(filters)
    t = time.perf_counter()
    chunks = [pa.array([f"p{k}.{f}" for f in filters], pa.string()) for k in range(prefixes)]
    fcol = pa.chunked_array(chunks, pa.string())
    qcol = pa.chunked_array([pa.array(queues, pa.string())] * prefixes, pa.string())
    ids = np.arange(prefixes * n, dtype=np.int64)
    t_cols = time.perf_counter() - t
    rss_cols = peak_rss_mib()
    t = time.perf_counter()
    sl = topicmatch.build_image(path, fcol, ids, qcol, threads=threads, durable=False)
    t_build = time.perf_counter() - t
    q.put(("build_image", len(sl), t_cols, t_build, rss_cols, peak_rss_mib()))


def open_and_match(path, prefixes, seed, q):
    _, _, _, pubs = workloads.load("light")
    rnd = random.Random(seed)
    subjects = [f"p{rnd.randrange(prefixes)}.{p}" for p in pubs]
    before = private_mib()
    t = time.perf_counter()
    sl = topicmatch.Sublist.open(path, verify=False)
    t_open = time.perf_counter() - t
    t = time.perf_counter()
    res = sl.match_many(subjects, queues="all")
    t_match = time.perf_counter() - t
    q.put(("open+match", len(subjects), t_open, t_match, int(sum(res.counts())),
           private_mib() - before, peak_rss_mib(), sl.stats()["inserts"]))


def verify(path, q):
    t = time.perf_counter()
    sl = topicmatch.Sublist.open(path, verify=True)
    q.put(("verify", len(sl), time.perf_counter() - t, peak_rss_mib()))


def run(target, *args):
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=target, args=args + (q,))
    p.start()
    out = q.get()
    p.join()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prefixes", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--build", choices=("both", "insert_many", "build_image"), default="both",
                    help="how the image is made: insert_many + save(), build_image from columns, or both "
                         "(compared; the steps after open insert_many's)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="build_image's threads")
    args = ap.parse_args()
    folder = args.dir or tempfile.mkdtemp(prefix="topicmatch-scale-")
    path = os.path.join(folder, "scale.fsb")
    bpath = os.path.join(folder, "scale-bulk.fsb")
    t0 = time.perf_counter()
    gib = 1024 ** 3
    if args.build in ("both", "insert_many"):
        _, n, t_build, t_save, mem, rss = run(build_and_save, args.prefixes, path)
        size = os.path.getsize(path)
        print(f"build   {n:,} subscriptions: insert_many {t_build:,.1f} s, index {mem / gib:.2f} GiB, "
              f"save {t_save:,.1f} s, file {size / gib:.2f} GiB, peak RSS {rss / 1024:.2f} GiB", flush=True)
    if args.build in ("both", "build_image"):
        _, n, t_cols, t_bulk, rss_cols, rss = run(build_image, args.prefixes, bpath, args.threads)
        bsize = os.path.getsize(bpath)
        same = ""
        if args.build == "both":
            same = ", the same bytes as save()'s" if filecmp.cmp(path, bpath, shallow=False) else \
                ", NOT the bytes save() wrote"
        print(f"build   {n:,} subscriptions: build_image {t_bulk:,.1f} s on {args.threads} threads "
              f"(columns made in {t_cols:,.1f} s, peak RSS {rss_cols / 1024:.2f} GiB), file {bsize / gib:.2f} GiB, "
              f"peak RSS {rss / 1024:.2f} GiB{same}", flush=True)
        if args.build == "both":
            os.unlink(bpath)
        else:
            path, size = bpath, bsize
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=open_and_match, args=(path, args.prefixes, i, q)) for i in range(args.workers)]
    for p in ps:
        p.start()
    got = [q.get() for _ in ps]
    for p in ps:
        p.join()
    for _, ns, t_open, t_match, ids, priv, rss, inserts in got:
        print(f"worker  open {t_open * 1000:.2f} ms, match_many {ns:,} subjects {t_match:.2f} s "
              f"({ns / t_match / 1e6:.2f} M/s, {ids:,} ids), private {priv:,.0f} MiB, "
              f"peak RSS {rss:,.0f} MiB, inserts {inserts}", flush=True)
    _, _, t_verify, rss = run(verify, path)
    print(f"verify  {t_verify:,.1f} s, peak RSS {rss / 1024:.2f} GiB")
    print(f"total   {time.perf_counter() - t0:,.0f} s; disk {size / gib:.2f} GiB in {path}")


if __name__ == "__main__":
    main()
