"""The spark: image's transfer between hosts, on loopback: speed and CPU.

    python bench/image_transfer.py [--prefixes 20] [--reps 5] [--dir DIR]

An image of light-like filters (bench/image.py's light_like: 2M filters at
--prefixes 20, some 200 MB) built with build_image, then moved the two ways
topicmatch.spark.image_inbox moves it, each --reps times:

    fetch   a host's fetch from the driver's ImageServer (fetch_from_driver:
            the server sendfile's it, the host receives it into its cache)
    inbox   a build task's send to the driver's Inbox (send: sendfile; the
            driver receives it into its cache)

Both ends run in this process, each on its own thread, so each end's CPU is
its thread's (RUSAGE_THREAD, Linux): the receiving end's is what the task
is about (a host's fetch competes with its build tasks for the cores), the
sending end's is printed beside it.  Each figure is the median of --reps:
wall time as MB/s, CPU as seconds per GB moved (user + system).  The
receiver's copy is removed between reps (not timed).  --dir holds the image
and the copies (default: a new temporary directory; /dev/shm keeps the
disk out of the figures).
"""
import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import topicmatch  # noqa: E402
from topicmatch.spark import image_inbox  # noqa: E402

LOCATION = "spark:topicmatch-bench-transfer.img"


def thread_cpu():
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return r.ru_utime + r.ru_stime


def build(path, prefixes):
    import numpy as np
    import pyarrow as pa
    from image import light_like
    filters, ids, queues, _ = light_like(prefixes)
    columns = (pa.array(filters, pa.string()), np.asarray(ids, dtype=np.int64),
               pa.array(queues, pa.string()))
    topicmatch.build_image(path, *columns, durable=False).close()
    print(f"{len(filters):,} light-like filters", flush=True)


class Timed:
    """Wraps a callable run on the other end's thread: its thread CPU."""

    def __init__(self, fn):
        self.fn = fn
        self.cpu = 0.0

    def __call__(self, *args, **kwargs):
        start = thread_cpu()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.cpu += thread_cpu() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prefixes", type=int, default=20)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()

    folder = tempfile.mkdtemp(prefix="topicmatch-transfer-", dir=args.dir)
    try:
        run(folder, args)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run(folder, args):
    src = os.path.join(folder, "built.img")
    build(src, args.prefixes)
    size = os.path.getsize(src)
    gb = size / 1e9
    print(f"image {size / 1e6:.1f} MB, {args.reps} reps each, medians", flush=True)

    # fetch: the server's end (ImageServer._serve) on its connection thread
    driver, host = os.path.join(folder, "driver"), os.path.join(folder, "host")
    os.mkdir(driver)
    os.mkdir(host)
    served = os.path.join(driver, LOCATION.split(":", 1)[1])
    shutil.copyfile(src, served)
    server = image_inbox.ImageServer("127.0.0.1")
    serve = Timed(server._serve)
    server._serve = serve
    server.offer(LOCATION, served)
    walls, recv_cpu, send_cpu = [], [], []
    try:
        for _ in range(args.reps):
            before = serve.cpu
            t0, c0 = time.perf_counter(), thread_cpu()
            local = image_inbox.fetch_from_driver(server.ticket, LOCATION, host)
            walls.append(time.perf_counter() - t0)
            recv_cpu.append(thread_cpu() - c0)
            send_cpu.append(serve.cpu - before)
            assert os.path.getsize(local) == size
            os.remove(local)
    finally:
        server.close()
    report("fetch (ImageServer -> fetch_from_driver)", size, gb, walls, recv_cpu, send_cpu)

    # inbox: the receiving end (Inbox._write) on its connection thread
    cache = os.path.join(folder, "inbox")
    os.mkdir(cache)
    walls, recv_cpu, send_cpu = [], [], []
    with image_inbox.Inbox("127.0.0.1", cache) as inbox:
        write = Timed(inbox._write)
        inbox._write = write
        for _ in range(args.reps):
            before = write.cpu
            t0, c0 = time.perf_counter(), thread_cpu()
            image_inbox.send(inbox.ticket, LOCATION, src)
            walls.append(time.perf_counter() - t0)
            send_cpu.append(thread_cpu() - c0)
            recv_cpu.append(write.cpu - before)
            local = inbox.received(LOCATION)
            assert os.path.getsize(local) == size
            os.remove(local)
    report("inbox (send -> Inbox)", size, gb, walls, recv_cpu, send_cpu)


def report(what, size, gb, walls, recv_cpu, send_cpu):
    wall = statistics.median(walls)
    print(f"{what}: {size / 1e6 / wall:7.0f} MB/s ({wall:.3f} s), "
          f"receiver {statistics.median(recv_cpu) / gb:.3f} CPU s/GB, "
          f"sender {statistics.median(send_cpu) / gb:.3f} CPU s/GB", flush=True)


if __name__ == "__main__":
    main()
