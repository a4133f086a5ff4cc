"""Instruction counts per operation on the standard workloads, under
valgrind's callgrind: repeatable where wall-clock times on a shared
2-core machine are not.

    .venv/bin/python bench/callgrind.py [--ops match_many,match,...]
                                        [--workloads light,heavy,hot1k]
                                        [--rows N]

Every count is a difference of two runs: a child process does the set-up
(load the workload, insert, warm up) and then the measured operation once
or three times over the same N publishes; (Ir(3) - Ir(1)) / (2 N) is the
operation's cost per row, and everything the two runs share (interpreter
start-up, loading, inserting, the warm-up) cancels.  The garbage collector
is off while measuring: a collection's timing differs between the runs.  That includes the
Python call itself, which is what the per-call figures are about.

Operations:
  match_many   Sublist.match_many over a list of N subjects, queues="all",
               threads=1 (per subject; the list's conversion included)
  match_many_arrow
               the same over a pyarrow StringArray of them (the matching
               alone: Arrow is read in place)
  match        Sublist.match(s) from a Python loop (per call)
  floor        the same loop calling str.encode, a builtin method that
               returns a new object: the floor of "a Python call that
               returns a result" that match() is compared with
  insert_many  insert_many of N filters into an index that already holds
               the workload's others (per filter)
  OP_image     OP (match_many, match, ...) on the same index opened from its
               image (Sublist.from_bytes(sl.to_bytes()): matched in place)
  OP_mapped    OP on the same image saved to a file and mapped
               (Sublist.open(path, verify=False)): what a call on an opened
               file adds, its guard's check included (csrc/base/fs_fault.h)
Workloads: light, heavy (no cache), hot1k (cache_size=4096, warmed).

valgrind is a Debian package: `make valgrind` installs it when missing.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import gc, sys
sys.path.insert(0, {here!r})
from topicmatch import Sublist
from workloads import load, dialect_of
op, name, rows, reps = {op!r}, {name!r}, {rows}, {reps}
filters, ids, queues, pubs = load(name)
cache = 4096 if name.startswith("hot") else 0
sl = Sublist(dialect_of(name), cache_size=cache)
if op == "insert_many":
    sl.insert_many(filters[rows * 3:], ids[rows * 3:], queues[rows * 3:])
else:
    sl.insert_many(filters, ids, queues)
if op.endswith("_image"):            # the same index, opened from its image
    sl = Sublist.from_bytes(sl.to_bytes(), cache_size=cache)
    op = op[:-len("_image")]
elif op.endswith("_mapped"):         # the same image as a file, mapped (Sublist.open)
    import os, tempfile
    folder = tempfile.TemporaryDirectory()
    sl.save(os.path.join(folder.name, "index.img"))
    sl = Sublist.open(os.path.join(folder.name, "index.img"), verify=False, cache_size=cache)
    op = op[:-len("_mapped")]
pubs = pubs[:rows]
if op == "match_many_arrow":
    import pyarrow as pa
    arr = pa.array(pubs)
match = sl.match
for p in pubs:                       # warm-up: fills the cache, touches pages
    match(p)
sl.match_many(pubs, queues="all", threads=1)
gc.collect()
gc.disable()                         # a collection's timing would differ between the runs
for r in range(reps):
    if op == "match_many":
        sl.match_many(pubs, queues="all", threads=1)
    elif op == "match_many_arrow":
        sl.match_many(arr, queues="all", threads=1)
    elif op == "match":
        for p in pubs:
            match(p)
    elif op == "floor":
        for p in pubs:
            p.encode()
    elif op == "insert_many":
        a = rows * r
        sl.insert_many(filters[a:a + rows], ids[a:a + rows], queues[a:a + rows])
"""


def instructions(op, name, rows, reps):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
               sys.executable, "-c",
               CHILD.format(here=HERE, op=op, name=name, rows=rows, reps=reps)]
        # numpy's OpenBLAS threads spin while idle: their instructions would
        # differ between the two runs.
        env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"callgrind run failed ({' '.join(cmd[:3])} ...):\n{p.stderr[-3000:]}")
        with open(out) as f:
            for line in f:
                m = re.match(r"(?:summary|totals):\s+(\d+)", line)
                if m:
                    return int(m.group(1))
    sys.exit("callgrind wrote no totals")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default="match_many,match_many_arrow,match,floor,insert_many")
    ap.add_argument("--workloads", default="light,heavy,hot1k")
    ap.add_argument("--rows", type=int, default=5000)
    a = ap.parse_args()
    if subprocess.run(["sh", "-c", "command -v valgrind"], capture_output=True).returncode:
        sys.exit("valgrind is not installed: `make valgrind` installs it (Debian)")
    print(f"{'op':12s} {'workload':9s} {'instructions/row':>17s}   (rows={a.rows}, Ir(3)-Ir(1) / 2 rows)")
    for op in a.ops.split(","):
        for name in a.workloads.split(","):
            if op in ("insert_many", "floor") and name.startswith("hot"):
                continue          # hot1k's filters are light's
            one = instructions(op, name, a.rows, 1)
            three = instructions(op, name, a.rows, 3)
            print(f"{op:12s} {name:9s} {(three - one) / (2 * a.rows):17.1f}", flush=True)


if __name__ == "__main__":
    main()
