"""Instructions of opening an image with the full check (open(path), verify
on), per subscription, under callgrind.

    .venv/bin/python bench/cg_image_open.py [--prefixes 3] [--threads 1] [--keep DIR]

bench/image.py's light-like filters under --prefixes first tokens (100,000
a prefix) are built and saved uncounted (callgrind's instrumentation off,
bench/cg_toggle.c), then open(path) alone is counted, and the opened index
freed outside the count.  --threads 1 (the default) keeps the check in one
thread (topicmatch._core._set_image_parallel_min above the image's size),
so the count is the whole check's work, whatever the machine's cores; the
threaded check's total is about the same, spread over the threads.
Per-function counts: callgrind_annotate on the --keep'd output file.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from instructions import check_valgrind, toggle_lib  # noqa: E402

CHILD = r"""
import ctypes, gc, os, sys
sys.path.insert(0, {here!r})
from image import light_like
import numpy as np, pyarrow as pa
import topicmatch
from topicmatch import _core
lib = ctypes.CDLL({lib!r})
fs, ids, qs, _ = light_like({prefixes})
sl = topicmatch.Sublist()
sl.insert_many(pa.array(fs, pa.string()), np.asarray(ids, dtype=np.int64), pa.array(qs, pa.string()))
path = os.path.join({folder!r}, "x.img")
sl.save(path)
del sl
if {threads} == 1:
    _core._set_image_parallel_min(1 << 62)
opened = topicmatch.Sublist.open(path, verify=False)      # the file's pages read in, uncounted
del opened
gc.collect()
gc.disable()
lib.cg_start()
opened = topicmatch.Sublist.open(path)
lib.cg_stop()
print(len(opened), len(fs))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prefixes", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="1: the check in one thread; else the machine's")
    ap.add_argument("--keep", default=None, help="folder to keep callgrind's output file in")
    args = ap.parse_args()
    check_valgrind()
    lib = toggle_lib()
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(args.keep or folder, "callgrind.open.out")
        src = CHILD.format(here=HERE, lib=lib, prefixes=args.prefixes, folder=folder, threads=args.threads)
        p = subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                            sys.executable, "-c", src], capture_output=True, text=True)
        if p.returncode:
            sys.exit(p.stderr[-2000:])
        subs, n = map(int, p.stdout.split()[-2:])
        assert subs == n, (subs, n)
        total = 0
        with open(out) as f:
            for line in f:
                m = re.match(r"(?:summary|totals):\s+(\d+)", line)
                if m:
                    total = int(m.group(1))
        print(f"open (verify) {total:>14,} instructions   {total / n:8.1f} a subscription ({n:,})")


if __name__ == "__main__":
    main()
