"""Two builds of topicmatch side by side, interleaved: the thread-scaling
figures of run_batch.py --threads for a base and a new source tree, in
one run, so that both see the same machine.

    python bench/ab_scaling.py BASE_SRC NEW_SRC [--threads 1,2,16] [--only light,hot1k,heavy] [--repeat 5]

BASE_SRC and NEW_SRC are directories holding a built topicmatch package
(e.g. a checkout's src/ after build_ext --inplace).  One worker process
per build loads each workload once; the driver asks them for one batch at
a time, alternating which build goes first (A B B A ...), every thread
count in every round.  Each batch is timed in its worker, with
getrusage(RUSAGE_SELF) deltas (user, system, voluntary and involuntary
context switches).  _set_batch_threading(cpus=) is set to the largest
thread count in both, so T is honoured past the machine's CPUs.  Prints
medians, each build's speed-up over the first thread count, and new/base.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

WORKER = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import pyarrow as pa
import topicmatch
from topicmatch import Sublist, _core
from workloads import dialect_of, load
_core._set_batch_threading(cpus=int(sys.argv[2]))
loaded = {}
print(json.dumps({"file": topicmatch.__file__}), flush=True)
for line in sys.stdin:
    name, t = line.split()
    t = int(t)
    if name not in loaded:
        loaded.clear()
        filters, ids, queues, pubs = load(name)
        sl = Sublist(dialect_of(name), cache_size=4096 if name.startswith("hot") else 0)
        sl.insert_many(filters, ids, queues)
        arrow = pa.array(pubs)
        del filters, ids, queues, pubs
        sl.match_many(arrow, queues="all", threads=int(sys.argv[2]))
        loaded[name] = (sl, arrow)
    sl, arrow = loaded[name]
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter_ns()
    b = sl.match_many(arrow, queues="all", threads=t)
    dt = time.perf_counter_ns() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    out = {"ns_per_row": dt / len(arrow), "user_ms": (r1.ru_utime - r0.ru_utime) * 1e3,
           "sys_ms": (r1.ru_stime - r0.ru_stime) * 1e3, "vol_cs": r1.ru_nvcsw - r0.ru_nvcsw,
           "invol_cs": r1.ru_nivcsw - r0.ru_nivcsw, "ids": len(b.sub_ids), "sum": int(b.sub_ids.sum())}
    del b
    print(json.dumps(out), flush=True)
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--threads", default="1,2,16")
    ap.add_argument("--only", default="light,hot1k,heavy")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    counts = [int(t) for t in a.threads.split(",")]
    names = a.only.split(",")
    env = dict(os.environ, PYTHONPATH=HERE)
    procs = {}
    for label, src in (("base", a.base), ("new", a.new)):
        p = subprocess.Popen([sys.executable, "-c", WORKER, os.path.abspath(src), str(max(counts))],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        procs[label] = p
        print(f"{label}: {json.loads(p.stdout.readline())['file']}", flush=True)
    print(f"load before: {os.getloadavg()}", flush=True)
    samples = {}
    order = ["base", "new"]
    for name in names:
        for r in range(a.repeat):
            for t in counts:
                for label in (order if r % 2 == 0 else order[::-1]):
                    p = procs[label]
                    p.stdin.write(f"{name} {t}\n")
                    p.stdin.flush()
                    samples.setdefault((label, name, t), []).append(json.loads(p.stdout.readline()))
    load_after = os.getloadavg()
    for p in procs.values():
        p.stdin.close()
        p.wait()
    rows = []
    print(f"{'workload':9s} {'T':>3s} {'build':5s} {'ns/row':>8s} {'speed-up':>8s} {'user ms':>8s} {'sys ms':>7s} "
          f"{'vol cs':>7s} {'invol cs':>8s} {'new/base':>8s}")
    for name in names:
        base_ns = {}
        for t in counts:
            for label in order:
                s = samples[(label, name, t)]
                med = {k: statistics.median(x[k] for x in s) for k in
                       ("ns_per_row", "user_ms", "sys_ms", "vol_cs", "invol_cs")}
                agree = len({(x["ids"], x["sum"]) for x in s} | {(y["ids"], y["sum"]) for y in
                                                                 samples[("base", name, counts[0])]}) == 1
                base_ns.setdefault((label, "t1"), med["ns_per_row"])
                if label == "base":
                    base_ns[t] = med["ns_per_row"]
                ratio = med["ns_per_row"] / base_ns[t]
                row = dict(workload=name, threads=t, build=label, speedup=base_ns[(label, "t1")] / med["ns_per_row"],
                           new_over_base_time=ratio, agree=agree, **med)
                rows.append(row)
                print(f"{name:9s} {t:3d} {label:5s} {med['ns_per_row']:8.1f} {row['speedup']:7.2f}x "
                      f"{med['user_ms']:8.1f} {med['sys_ms']:7.1f} {med['vol_cs']:7.0f} {med['invol_cs']:8.0f} "
                      f"{ratio:8.3f}{'' if agree else '  MISMATCH'}", flush=True)
    print(f"load after: {load_after}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
