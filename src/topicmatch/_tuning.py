"""The core's settings and counters for tests and measurements
(csrc/api/fs_tuning.h), each under the name the tests and benchmarks call
(topicmatch._core names them too).  None is for production use: each is
process-wide, and set while no other thread calls the core."""
from topicmatch import _core

__all__ = ["_set_walk_releases_gil", "_set_image_parallel_min", "_set_merge_simd", "_set_batch_threading",
           "_set_image_bytes_room", "_pool_status", "_workers_crowded_out", "_fault_inject", "_fault_status",
           "_mapping_faults", "_idpool_status"]


def _set_walk_releases_gil(on):
    """Every match() walk lets go of the GIL (True), or keeps it and lets go
    only to wait for a writer (False, the default).  Returns the previous
    setting."""
    return bool(_core._tuning("match_cache_only_first", 1 if on else 0))


def _set_image_parallel_min(n):
    """A full check of an image of n bytes or more (open(verify=True),
    from_bytes) runs on threads, the checksum beside the tables (0: every
    image).  Returns the previous n."""
    return _core._tuning("image_parallel_min", n)


def _set_merge_simd(on):
    """Whether the merge of a row's ids from several filters uses its AVX2
    form where the processor has it (on, the default) or its scalar form
    (off).  Returns the previous setting."""
    return bool(_core._tuning("merge_simd", 1 if on else 0))


def _set_batch_threading(min_rows_per_thread=None, block_rows=None, cpus=None, feed_rows=None):
    """Cut batches for threads at min_rows_per_thread rows per thread
    (default 16,384), in blocks of block_rows (0: sized as the batch runs,
    from what the rows cost), as if the process had cpus CPUs (0: as it
    has; build_image and a full image check count them so too), a Python
    list's rows handed to the threads feed_rows at a time (default 8,192).
    Returns the previous settings, as a dict to pass back."""
    given = {"min_rows_per_thread": (min_rows_per_thread, 1), "block_rows": (block_rows, 0),
             "cpus": (cpus, 0), "feed_rows": (feed_rows, 1)}
    old = {}
    for key, (value, least) in given.items():
        old[key] = _core._tuning("column_" + key, None if value is None else max(least, int(value)))
    return old


def _set_image_bytes_room(n):
    """to_bytes() writes the image into a bytes object of n bytes (-1: the
    index's own estimate, fs_image_size_hint), so that a test can make it
    too small.  Returns the previous n."""
    return _core._tuning("image_room", n)


def _pool_status():
    """(threads, idle) of the process's batch worker pool
    (csrc/batch/fs_pool.h): how many threads it has started, and how many
    are parked waiting for work now."""
    return (_core._tuning("pool_threads"), _core._tuning("pool_idle"))


def _workers_crowded_out():
    """How many batch workers of this process have stopped claiming
    blocks, crowded out by their batch's other threads (more threads than
    processors; csrc/batch/fs_batch.c, crowded_out)."""
    return _core._tuning("workers_crowded_out")


def _fault_inject(nth):
    """Make the nth allocation of the C core from now fail (0 turns it
    off); for the fault-injection tests."""
    _core._tuning("alloc_fail_nth", nth)


def _fault_status():
    """(allocations attempted, failures injected) since the last
    _fault_inject call."""
    return (_core._tuning("alloc_counted"), _core._tuning("alloc_failed"))


def _mapping_faults():
    """How many faults in a mapped image file cut shorter under its index
    were turned into zeros in this process (csrc/base/fs_fault.h)."""
    return _core._tuning("mapping_faults")


def _idpool_status():
    """(buffers kept, bytes kept) by match_many's output pool."""
    return (_core._tuning("idpool_buffers"), _core._tuning("idpool_bytes"))
