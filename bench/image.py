"""The image as the index: build, save, open and match, on light-like filters.

    python bench/image.py [--prefixes 20] [--reps 3] [--workers 4]

The filter set is the standard light workload's (bench/workloads.py) under
--prefixes first tokens ("p0.<filter>" ... "p19.<filter>": 2M filters at
20), the subjects light's publishes under random prefixes; insert_many is
given them as Arrow string columns and an int64 numpy array of ids.
Everything is measured in one run, each figure the median of --reps, and
reported as ratios to insert_many of the same filters (docs/benchmarks.md,
"The image"):

    build_image(path), 1 thread / insert_many  target <= 0.25
    build_image(path), 2 threads / 1 thread    target <= 0.55
    save(path) / insert_many                   target <= 0.30
    to_bytes() / insert_many                   (the same writer, into memory)
    open(path) (verify) / insert_many          target <= 0.05
    open(path, verify=False) / insert_many     target <= 0.01
    match_many, opened / built                 target <= 1.10
    private memory per process / file size     target <= 0.15, with --workers
                                               processes opening one file

Private memory is the growth of Private_Clean + Private_Dirty in
/proc/self/smaps_rollup across open and matching, in each worker (Linux).

Then the floors under those targets, in the same run and folder
(bench/image_floors.py): the file's pages on 1 and 2 threads, tokenizing
every filter once, a write + fsync of the image's bytes, and the
checksum (open(verify="checksum")) on 1 thread and on all.  Each is one
kind of work timed alone; a figure cannot go below the floors of the work
it must do (the tokenizing: with this library's tokenizer).
"""
import argparse
import gc
import multiprocessing
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import image_floors  # noqa: E402
import workloads  # noqa: E402

import topicmatch  # noqa: E402


def light_like(prefixes, seed=1):
    filters, _, queues, pubs = workloads.load("light")
    fs, qs = [], []
    for k in range(prefixes):
        fs.extend(f"p{k}.{f}" for f in filters)
        qs.extend(queues)
    rnd = random.Random(seed)
    subjects = [f"p{rnd.randrange(prefixes)}.{p}" for p in pubs]
    return fs, list(range(len(fs))), qs, subjects


def private_kb():
    """Private_Clean + Private_Dirty of this process, in KiB (Linux)."""
    total = 0
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1])
    return total


def _worker(path, subjects, q):
    gc.collect()
    before = private_kb()
    sl = topicmatch.Sublist.open(path, verify=False)
    res = sl.match_many(subjects, queues="all")
    total = int(sum(res.counts()))
    after = private_kb()
    q.put((after - before, total, sl.stats()["inserts"]))


def median_time(fn, reps):
    times = []
    out = None
    for _ in range(reps):
        gc.collect()
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prefixes", type=int, default=20)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--worker-subjects", type=int, default=100_000,
                    help="subjects each worker matches (its working memory grows with them)")
    ap.add_argument("--dir", default=None, help="where the image file goes (default: a temporary folder)")
    ap.add_argument("--markdown", default=None,
                    help="also write the figures as a markdown section to this file "
                         "(docs/benchmarks/image.md: bench/report.py includes it in docs/benchmarks.md)")
    args = ap.parse_args()

    filters, ids, queues, subjects = light_like(args.prefixes)
    print(f"{len(filters):,} light-like filters, {len(subjects):,} subjects", flush=True)

    import numpy as np
    import pyarrow as pa
    columns = (pa.array(filters, pa.string()), np.asarray(ids, dtype=np.int64), pa.array(queues, pa.string()))

    def build():
        sl = topicmatch.Sublist()
        sl.insert_many(*columns)
        return sl

    t_build, built = median_time(build, args.reps)
    folder = args.dir or tempfile.mkdtemp(prefix="topicmatch-image-")
    path = os.path.join(folder, "light.fsb")
    t_save, _ = median_time(lambda: built.save(path), args.reps)
    size = os.path.getsize(path)
    t_bytes, blob = median_time(built.to_bytes, args.reps)
    with open(path, "rb") as f:
        assert f.read() == blob, "save() and to_bytes() wrote different images"
    # the bulk builder: the same image straight from the columns (not
    # durable: no fsync, so that the disk's flush is not in the ratio)
    bpath = os.path.join(folder, "bulk.fsb")

    def bulk(threads):
        return lambda: topicmatch.build_image(bpath, *columns, threads=threads, durable=False).close()
    t_bulk1, _ = median_time(bulk(1), args.reps)
    t_bulk2, _ = median_time(bulk(2), args.reps)
    with open(bpath, "rb") as f:
        assert f.read() == blob, "build_image() and to_bytes() wrote different images"
    os.unlink(bpath)
    del blob
    v2 = built.to_bytes(version=2)
    t_v2, _ = median_time(lambda: topicmatch.Sublist.from_bytes(v2), args.reps)
    del v2
    t_open, opened = median_time(lambda: topicmatch.Sublist.open(path), args.reps)
    t_open_nv, opened_nv = median_time(lambda: topicmatch.Sublist.open(path, verify=False), args.reps)
    # the floors under the targets, in this folder (bench/image_floors.py)
    f_sum = image_floors.checksum(path, None, args.reps)
    f_sum1 = image_floors.checksum(path, 1, args.reps)
    with open(path, "rb") as f:
        image_bytes = f.read()
    f_pages1 = image_floors.pages(folder, size, 1, args.reps)
    f_pages2 = image_floors.pages(folder, size, 2, args.reps)
    f_write = image_floors.durable_write(folder, image_bytes, args.reps)
    f_tok = image_floors.tokenize(columns[0], args.reps)
    del image_bytes
    assert opened.stats()["inserts"] == 0 and len(opened) == len(built)

    def m(sl):
        return lambda: sl.match_many(subjects, queues="all")
    # interleaved, so that drift on a shared machine falls on both alike
    tb, to = [], []
    for _ in range(args.reps):
        tb.append(median_time(m(built), 1)[0])
        to.append(median_time(m(opened_nv), 1)[0])
    t_mb, t_mo = statistics.median(tb), statistics.median(to)
    rb, ro = built.match_many(subjects, queues="all"), opened_nv.match_many(subjects, queues="all")
    assert [list(x) for x in rb] == [list(x) for x in ro], "opened answers differ from built"
    total = int(sum(rb.counts()))

    priv = []
    # A pre-fork server forks before it builds its own state: drop this
    # process's 2M-filter lists and freeze what is left, so that a forked
    # worker copies what it touches of its parent's heap, not a collector
    # pass over millions of objects.
    work = subjects[:args.worker_subjects]
    ids_n = range(len(filters))
    del filters, ids, queues, columns, built, opened, rb, ro
    gc.collect()
    gc.freeze()
    if args.workers and os.path.exists("/proc/self/smaps_rollup"):
        for method in ("fork", "spawn"):
            ctx = multiprocessing.get_context(method)
            q = ctx.Queue()
            ps = [ctx.Process(target=_worker, args=(path, work, q)) for _ in range(args.workers)]
            for p in ps:
                p.start()
            got = [q.get() for _ in ps]
            for p in ps:
                p.join()
            assert all(g[1] == got[0][1] and g[2] == 0 for g in got), got
            priv.append((method, [g[0] for g in got]))

    mb = 1024 * 1024
    lines = [
        f"build (insert_many)        {t_build:8.3f} s",
        f"build_image, 1 thread      {t_bulk1:8.3f} s   {t_bulk1 / t_build:6.3f} x insert_many  (target <= 0.25)",
        f"build_image, 2 threads     {t_bulk2:8.3f} s   {t_bulk2 / t_bulk1:6.3f} x 1 thread     (target <= 0.55)",
        f"save                       {t_save:8.3f} s   {t_save / t_build:6.3f} x insert_many  (target <= 0.30), "
        f"file {size / mb:,.1f} MiB",
        f"to_bytes                   {t_bytes:8.3f} s   {t_bytes / t_build:6.3f} x insert_many",
        f"from_bytes(version 2)      {t_v2:8.3f} s   {t_v2 / t_build:6.3f} x insert_many (rebuilds)",
        f"open (verify)              {t_open:8.3f} s   {t_open / t_build:6.3f} x insert_many  (target <= 0.05)",
        f"open (verify=False)        {t_open_nv:8.6f} s {t_open_nv / t_build:8.5f} x insert_many  (target <= 0.01)",
        f"match_many built           {t_mb:8.3f} s   {len(subjects) / t_mb / 1e6:5.2f} M subjects/s, {total:,} ids",
        f"match_many opened          {t_mo:8.3f} s   {t_mo / t_mb:6.3f} x built  (target <= 1.10)",
        f"private growth per worker across open + match_many of {len(work):,} subjects:",
    ]
    floors = [("the file's pages, 1 thread", f_pages1, "x insert_many", t_build),
              ("the file's pages, 2 threads", f_pages2, "x 1 thread", f_pages1),
              ("tokenizing every filter once", f_tok, "x insert_many", t_build),
              ("write + fsync of the image", f_write, "x insert_many", t_build),
              ("the checksum, 1 thread", f_sum1, "x insert_many", t_build),
              ('the checksum (verify="checksum")', f_sum, "x insert_many", t_build)]
    floor_lines = ["floors (what any writer or check of this file pays here; bench/image_floors.py):"]
    for name, t, unit, of in floors:
        floor_lines.append(f"{name:33s}{t:8.3f} s   {t / of:6.3f} {unit}" if t is not None and of
                           else f"{name:33s}     n/a (no MADV_POPULATE_WRITE)")
    for method, kb in priv:
        worst = max(kb) * 1024
        lines.append(f"private growth, {args.workers} x {method:5s}  "
                     f"{', '.join(f'{k / 1024:.1f}' for k in kb)} MiB   worst {worst / size:.3f} x file  (target <= 0.15)")
    lines.extend(floor_lines)
    print("\n".join(lines))
    if args.markdown:
        rows = [("`build_image(path)`, 1 thread / `insert_many`", f"{t_bulk1 / t_build:.3f}", "<= 0.25"),
                ("`build_image(path)`, 2 threads / 1 thread", f"{t_bulk2 / t_bulk1:.3f}", "<= 0.55"),
                ("`save(path)` / `insert_many`", f"{t_save / t_build:.3f}", "<= 0.30"),
                ("`to_bytes()` / `insert_many`", f"{t_bytes / t_build:.3f}", ""),
                ("`open(path)` (verify) / `insert_many`", f"{t_open / t_build:.3f}", "<= 0.05"),
                ("`open(path, verify=False)` / `insert_many`", f"{t_open_nv / t_build:.5f}", "<= 0.01"),
                ("`match_many`, opened / built", f"{t_mo / t_mb:.3f}", "<= 1.10")]
        for method, kb in priv:
            rows.append((f"private memory added per process, {args.workers} {method} workers / file",
                         f"{max(kb) * 1024 / size:.3f}", "<= 0.15"))
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write("## The image\n\n")
            f.write(f"`python bench/image.py --prefixes {args.prefixes} --reps {args.reps} --workers {args.workers}`: "
                    f"{len(ids_n):,} light-like filters (light's under {args.prefixes} first tokens), "
                    f"{len(subjects):,} subjects, medians of {args.reps}, one run "
                    f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}).\n\n")
            f.write("| figure | measured | target |\n|---|---:|---:|\n")
            for r in rows:
                f.write(f"| {r[0]} | {r[1]} | {r[2]} |\n")
            f.write("\nThe floors under them, in the same run and folder (`bench/image_floors.py`): what any "
                    "code that writes or checks a file of this size pays here.\n\n"
                    "| floor | seconds | ratio |\n|---|---:|---:|\n")
            for name, t, unit, of in floors:
                f.write(f"| {name} | {t:.3f} | {t / of:.3f} {unit} |\n" if t is not None and of
                        else f"| {name} | n/a | |\n")
            f.write("\n```\n" + "\n".join(lines) + "\n```\n")
    if not args.dir:            # (its 216 MiB image; a --dir is the caller's)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
