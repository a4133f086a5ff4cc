"""Instructions of writing an image, per subscription, under callgrind.

    .venv/bin/python bench/cg_image_write.py [--prefixes 3] [--ops to_bytes,save,insert_many]

bench/image.py's light-like filters under --prefixes first tokens (100,000
a prefix) are built uncounted (callgrind's instrumentation off, as in
bench/instructions.py), then the operation alone is counted: to_bytes(),
save(path) into a temporary folder, or insert_many of the same columns into
a new index (the ratio's denominator).  Per-function counts: run
callgrind_annotate on the --keep'd output files.
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
lib = ctypes.CDLL({lib!r})
fs, ids, qs, _ = light_like({prefixes})
cols = (pa.array(fs, pa.string()), np.asarray(ids, dtype=np.int64), pa.array(qs, pa.string()))
sl = topicmatch.Sublist()
sl.insert_many(*cols)
gc.collect()
gc.disable()
op = {op!r}
lib.cg_start()
if op == "to_bytes":
    b = sl.to_bytes()
elif op == "save":
    sl.save(os.path.join({folder!r}, "x.img"))
elif op == "insert_many":
    built = topicmatch.Sublist()
    built.insert_many(*cols)         # freed after the count
lib.cg_stop()
print(len(fs))
"""


def count(op, prefixes, lib, folder, keep):
    out = os.path.join(keep or folder, f"callgrind.{op}.out")
    src = CHILD.format(here=HERE, lib=lib, prefixes=prefixes, op=op, folder=folder)
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
    ap.add_argument("--ops", default="to_bytes,save,insert_many")
    ap.add_argument("--keep", default=None, help="folder to keep callgrind's output files in")
    args = ap.parse_args()
    check_valgrind()
    lib = toggle_lib()
    with tempfile.TemporaryDirectory() as folder:
        for op in args.ops.split(","):
            total, n = count(op, args.prefixes, lib, folder, args.keep)
            print(f"{op:12s} {total:>14,} instructions   {total / n:8.1f} a subscription ({n:,})", flush=True)


if __name__ == "__main__":
    main()
