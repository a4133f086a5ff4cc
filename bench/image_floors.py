"""The floors under bench/image.py's targets: what any code that writes or
checks an image file of this size pays on this machine, measured in the
same run and the same folder as the figures they bound.  Each function
gives the median seconds of `reps` runs.

    pages(folder, size, threads)  a new file of `size` bytes made writable
                                  through a shared mapping, every page
                                  (MADV_POPULATE_WRITE, the writers' own
                                  call; split in halves on two threads):
                                  the kernel's work for the file's pages,
                                  before a byte is written
    durable_write(folder, data)   data written to a new file and fsync'd:
                                  a durable save's disk, for these bytes
    checksum(path, cpus)          open(path, verify="checksum"): the image's
                                  checksum summed, on cpus threads (None:
                                  every CPU), as every writer sums it
    tokenize(filters)             every filter tokenized once, on one
                                  thread (route_keys, the sharded fan-out's
                                  router: the tokenizer every build runs,
                                  and one hash a row)

A builder, a save or a check cannot cost less than the floors of the work
it must do (tokenize: with this library's tokenizer); docs/benchmarks.md
("The image") reads the targets against them.  Linux only (pages needs
the madvise of Linux 5.14); elsewhere pages is None.
"""
import ctypes
import mmap
import os
import statistics
import sys
import threading
import time

import topicmatch
from topicmatch import _tuning
from topicmatch._core import route_keys

MADV_POPULATE_WRITE = 23        # <linux/mman.h>


def _madvise():
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)      # (ctypes lets the GIL go for the call)
    fn = libc.madvise
    fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    fn.restype = ctypes.c_int
    return fn


def _median(fn, reps):
    times = []
    for _ in range(reps):
        times.append(fn())
    return statistics.median(times)


def pages(folder, size, threads, reps):
    """Median seconds to make a new file's `size` bytes writable pages, on
    `threads` threads (1 or 2); None where the system has no such call."""
    madvise = _madvise()
    if madvise is None:
        return None
    size = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
    path = os.path.join(folder, "floor-pages.tmp")

    def once():
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, size)
            m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        base = ctypes.addressof(ctypes.c_char.from_buffer(m))
        half = size // 2 // mmap.PAGESIZE * mmap.PAGESIZE
        parts = [(base, size)] if threads == 1 else [(base, half), (base + half, size - half)]
        failed = []

        def populate(at, n):
            if madvise(at, n, MADV_POPULATE_WRITE) != 0:
                failed.append(ctypes.get_errno())
        t = time.perf_counter()
        others = [threading.Thread(target=populate, args=p) for p in parts[1:]]
        for th in others:
            th.start()
        populate(*parts[0])
        for th in others:
            th.join()
        took = time.perf_counter() - t
        del base
        m.close()
        os.unlink(path)
        if failed:
            raise OSError(failed[0], f"madvise(MADV_POPULATE_WRITE): {os.strerror(failed[0])}")
        return took
    try:
        return _median(once, reps)
    except OSError:             # a kernel before 5.14
        return None


def durable_write(folder, data, reps):
    """Median seconds to write `data` to a new file in folder and fsync it."""
    path = os.path.join(folder, "floor-write.tmp")
    view = memoryview(data)

    def once():
        t = time.perf_counter()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            at = 0
            while at < len(view):
                at += os.write(fd, view[at:at + (8 << 20)])
            os.fsync(fd)
        finally:
            os.close(fd)
        took = time.perf_counter() - t
        os.unlink(path)
        return took
    return _median(once, reps)


def tokenize(filters, reps):
    """Median seconds to tokenize every filter of the column once."""
    def once():
        t = time.perf_counter()
        route_keys(filters, "nats", 1, filters=True)
        return time.perf_counter() - t
    return _median(once, reps)


def checksum(path, cpus, reps):
    """Median seconds of open(path, verify="checksum") with the process
    counted as having `cpus` CPUs (None: as it has)."""
    old = _tuning._set_batch_threading(cpus=cpus or 0)

    def once():
        t = time.perf_counter()
        topicmatch.Sublist.open(path, verify="checksum").close()
        return time.perf_counter() - t
    try:
        return _median(once, reps)
    finally:
        _tuning._set_batch_threading(**old)
