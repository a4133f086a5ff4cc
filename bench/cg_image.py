"""Instructions of writing and opening an image, per subscription, under
callgrind.

    .venv/bin/python bench/cg_image.py [--prefixes 3] [--ops to_bytes,save,open,insert_many]
                                       [--threads 1] [--keep DIR]

bench/image.py's light-like filters under --prefixes first tokens (100,000
a prefix) are built uncounted (callgrind's instrumentation off,
bench/cg_toggle.c, as in bench/instructions.py), then the operation alone
is counted:
  to_bytes     to_bytes()
  save         save(path) into a temporary folder
  open         open(path) with the full check (verify on) of an image saved
               uncounted, its pages read in first by an unchecked open, the
               opened index freed outside the count.  --threads 1 (the
               default) keeps the check in one thread
               (topicmatch._core._set_image_parallel_min above the image's
               size), so the count is the whole check's work whatever the
               machine's cores; the threaded check's total is about the
               same, spread over the threads
  build        topicmatch.build_image(path, ...) of the same columns, one
               thread, not durable (the bulk builder, no index built)
  insert_many  insert_many of the same columns into a new index (the
               ratios' denominator)
Per-function counts: callgrind_annotate on the --keep'd output files.
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

OPS = ("to_bytes", "save", "open", "build", "insert_many")

CHILD = r"""
import ctypes, gc, os, sys
sys.path.insert(0, {here!r})
from image import light_like
import numpy as np, pyarrow as pa
import topicmatch
from topicmatch import _core
lib = ctypes.CDLL({lib!r})
fs, ids, qs, _ = light_like({prefixes})
cols = (pa.array(fs, pa.string()), np.asarray(ids, dtype=np.int64), pa.array(qs, pa.string()))
sl = topicmatch.Sublist()
sl.insert_many(*cols)
op, path = {op!r}, os.path.join({folder!r}, "x.img")
if op == "open":
    sl.save(path)
    del sl
    if {threads} == 1:
        _core._set_image_parallel_min(1 << 62)
    topicmatch.Sublist.open(path, verify=False)       # the file's pages read in, uncounted
gc.collect()
gc.disable()
lib.cg_start()
if op == "to_bytes":
    b = sl.to_bytes()
elif op == "save":
    sl.save(path)
elif op == "open":
    opened = topicmatch.Sublist.open(path)
elif op == "build":
    built = topicmatch.build_image(path, *cols, threads=1, durable=False)
elif op == "insert_many":
    built = topicmatch.Sublist()
    built.insert_many(*cols)         # freed after the count
lib.cg_stop()
if op == "open":
    assert len(opened) == len(fs), (len(opened), len(fs))
if op == "build":
    assert open(path, "rb").read() == sl.to_bytes()
print(len(fs))
"""


def count(op, prefixes, threads, lib, folder, keep):
    """-> (instructions counted, subscriptions) of one op in a child under callgrind."""
    out = os.path.join(keep or folder, f"callgrind.{op}.out")
    src = CHILD.format(here=HERE, lib=lib, prefixes=prefixes, op=op, folder=folder, threads=threads)
    p = subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                        sys.executable, "-c", src], capture_output=True, text=True)
    if p.returncode:
        sys.exit(p.stderr[-2000:])
    n = int(p.stdout.split()[-1])
    total = 0
    with open(out) as f:
        for line in f:
            m = re.match(r"(?:summary|totals):\s+(\d+)", line)
            if m:
                total = int(m.group(1))
    return total, n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prefixes", type=int, default=3)
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--threads", type=int, default=1, help="open: 1, the check in one thread; else the machine's")
    ap.add_argument("--keep", default=None, help="folder to keep callgrind's output files in")
    args = ap.parse_args()
    ops = [o for o in args.ops.split(",") if o]
    unknown = [o for o in ops if o not in OPS]
    if unknown:
        sys.exit(f"unknown --ops {unknown}: choose from {', '.join(OPS)}")
    check_valgrind()
    lib = toggle_lib()
    counts = {}
    with tempfile.TemporaryDirectory() as folder:
        for op in ops:
            counts[op] = count(op, args.prefixes, args.threads, lib, folder, args.keep)
    base = counts.get("insert_many")
    for op, (total, n) in counts.items():
        ratio = f"   {total / base[0]:.3f} x insert_many" if base and op != "insert_many" else ""
        print(f"{op:12} {total:>14,} instructions   {total / n:8.1f} a subscription ({n:,}){ratio}")


if __name__ == "__main__":
    main()
