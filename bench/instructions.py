"""The instruction-count gate: instructions per row of the standard
operations, counted by valgrind's callgrind, against a committed baseline.

    .venv/bin/python bench/instructions.py            # check (make bench-instructions)
    .venv/bin/python bench/instructions.py --update   # rewrite the baseline
                                                      # (make bench-instructions-update)

What is counted is bench/callgrind.py's figure, (Ir(3) - Ir(1)) / (2 rows):
the cost per row of the second and third of three passes of an operation
over the same `rows` publishes (filters for insert_many), after the same
set-up and warm-up.  This script counts those two passes directly instead of
taking the difference of two processes: the child runs under callgrind with
its instrumentation off (--instr-atstart=no) and switches it on just before
the second pass and off after the third (bench/cg_toggle.c, through
ctypes), so the set-up -- Python's start, loading the workload, inserting
its 100,000 filters -- runs at valgrind's uninstrumented speed and is not
counted at all.  The switch's own cost (the two calls through ctypes,
measured on an empty pass) is subtracted.  One process per count instead
of two, each several times faster (the two methods agree:
bench/README.md, "The instruction gate").

Each count is measured `--runs` times (3), each in a fresh process, and the
median is compared with the baseline (bench/instructions.json).  A count
more than its tolerance above the baseline fails the gate; the table says
which.  The tolerances are in the baseline file (per operation, with a
default), chosen from the measured run-to-run spread of the median of three.

The build measured is the one `import topicmatch` finds, which for the
repository's venv is the in-place build of `make build`: setup.py's release
flags (-O3 -g0 -DNDEBUG, with -fvisibility=hidden and the strict warnings
for csrc/), the same as the wheel's (a wheel is built from the sdist by the
same setup.py with no TOPICMATCH_* switch; auditwheel's --strip removes
symbols, not code).  The gate refuses a build that carries debug sections or
sanitizer/coverage instrumentation (a TOPICMATCH_DEBUG, _SANITIZE, _TSAN,
_COVERAGE or _SYMBOLS build): its counts are not the release build's.

A change that needs more instructions rewrites the baseline in the same
commit (--update, which keeps the tolerances), with the reason in the
commit message.  A count that drops well below its baseline is reported
(not a failure): rewrite the baseline then too, so that the gate keeps the
gain.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BASELINE = os.path.join(HERE, "instructions.json")
TOGGLE_SRC = os.path.join(HERE, "cg_toggle.c")
TOGGLE_LIB = os.path.join(ROOT, "build", "callgrind", "cg_toggle.so")

# The standard operations (issue 45): insert_many has no hot1k count, since
# hot1k's filters are light's.
DEFAULT_OPS = ("match_many", "match", "insert_many")
DEFAULT_WORKLOADS = ("light", "heavy", "hot1k")
DEFAULT_ROWS = 3000
DEFAULT_TOLERANCE = {"default": 0.03}
UPDATE_COMMAND = "make bench-instructions-update  (= .venv/bin/python bench/instructions.py --update)"

CHILD = r"""
import ctypes, gc, os, sys
# glibc's mmap threshold fixed (M_MMAP_THRESHOLD, -3): left dynamic, it
# rises after a large block is freed, so whether match_many's result
# buffers grow in place (mremap) or by copying depended on what the
# process had freed before -- loading modules from bytecode or from
# source moved match_many heavy's count by 16%
ctypes.CDLL(None).mallopt(-3, 128 * 1024)
sys.path.insert(0, {here!r})
import topicmatch
from topicmatch import Sublist
from workloads import load, dialect_of
print("topicmatch:", os.path.realpath(topicmatch._core.__file__), flush=True)
cg = ctypes.CDLL({lib!r})
op, name, rows = {op!r}, {name!r}, {rows}
if op == "empty":                    # the calibration: the switch and the loop alone
    for r in range(3):
        if r == 1:
            cg.cg_start()
    cg.cg_stop()
    raise SystemExit(0)
# all of the workload, as bench/callgrind.py loads it, though only `rows`
# publishes are used: the allocator's state after loading 1M subjects moves
# match_many heavy's count by some 20% (its result buffers)
filters, ids, queues, pubs = load(name)
pubs = pubs[:rows]
cache = 4096 if name.startswith("hot") else 0
sl = Sublist(dialect_of(name), cache_size=cache)
if op == "insert_many":
    sl.insert_many(filters[rows * 3:], ids[rows * 3:], queues[rows * 3:])
else:
    sl.insert_many(filters, ids, queues)
match = sl.match
for p in pubs:                       # warm-up: fills the cache, touches pages
    match(p)
sl.match_many(pubs, queues="all", threads=1)
gc.collect()
gc.disable()                         # a collection's timing would differ between the runs
for r in range(3):                   # passes 2 and 3 are counted
    if r == 1:
        cg.cg_start()
    if op == "match_many":
        sl.match_many(pubs, queues="all", threads=1)
    elif op == "match":
        for p in pubs:
            match(p)
    elif op == "insert_many":
        a = rows * r
        sl.insert_many(filters[a:a + rows], ids[a:a + rows], queues[a:a + rows])
    else:
        raise SystemExit("unknown op " + op)
cg.cg_stop()
"""


def combos(ops, workloads):
    return [(op, w) for op in ops for w in workloads if not (op == "insert_many" and w.startswith("hot"))]


# ---------------------------------------------------------------- comparing

def compare(baseline, now, tolerance):
    """baseline, now: {op: {workload: instructions per row}}; tolerance:
    {"default": fraction, op: fraction, "op/workload": fraction}.
    -> (rows, failed): one row per baseline count, (op, workload, base,
    now, change, tol, verdict), verdict one of "ok", "FAIL" (grew beyond
    tol), "lower" (dropped beyond tol), "missing" (not measured: a
    failure)."""
    rows, failed = [], False
    for op in baseline:
        for w, base in baseline[op].items():
            tol = tolerance.get(f"{op}/{w}", tolerance.get(op, tolerance.get("default", 0.03)))
            cur = now.get(op, {}).get(w)
            if cur is None:
                rows.append((op, w, base, None, None, tol, "missing"))
                failed = True
                continue
            change = cur / base - 1
            slack = 1e-9                     # 103 against 100 is +3%, not over 3%
            verdict = "FAIL" if change > tol + slack else "lower" if change < -tol - slack else "ok"
            failed |= verdict == "FAIL"
            rows.append((op, w, base, cur, change, tol, verdict))
    return rows, failed


def table(rows):
    out = [f"{'op':12s} {'workload':9s} {'baseline':>10s} {'now':>10s} {'change':>8s} {'tolerance':>9s}  verdict"]
    for op, w, base, cur, change, tol, verdict in rows:
        now_s = "-" if cur is None else f"{cur:,.1f}"
        ch_s = "-" if change is None else f"{change * 100:+.1f}%"
        out.append(f"{op:12s} {w:9s} {base:10,.1f} {now_s:>10s} {ch_s:>8s} {tol * 100:8.1f}%  {verdict}")
    return "\n".join(out)


def shown(path):
    rel = os.path.relpath(os.path.abspath(path), ROOT)
    return path if rel.startswith("..") else rel


def verdict_text(rows, failed, path):
    lines = []
    grown = [r for r in rows if r[6] in ("FAIL", "missing")]
    lower = [r for r in rows if r[6] == "lower"]
    if failed:
        lines.append(f"instruction gate FAILED: {len(grown)} of {len(rows)} counts above their baseline's "
                     f"tolerance ({shown(path)}).")
        lines.append("Find where they went (valgrind --tool=callgrind, callgrind_annotate, base against head).  "
                     "If the growth is meant (a feature that needs the instructions), rewrite the baseline "
                     "in the same commit, with the reason in the commit message:")
        lines.append(f"    {UPDATE_COMMAND}")
    else:
        lines.append(f"instruction gate passed: {len(rows)} counts within their tolerance.")
    if lower:
        lines.append(f"{len(lower)} count(s) dropped below the baseline by more than the tolerance: rewrite "
                     f"the baseline so that the gate keeps the gain ({UPDATE_COMMAND}).")
    return "\n".join(lines)


# ---------------------------------------------------------------- measuring

def check_valgrind():
    if not shutil.which("valgrind"):
        sys.exit("valgrind is not installed: `make valgrind` installs it (Debian)")


def toggle_lib():
    """Compile bench/cg_toggle.c into build/callgrind/ when missing or older."""
    if os.path.exists(TOGGLE_LIB) and os.path.getmtime(TOGGLE_LIB) >= os.path.getmtime(TOGGLE_SRC):
        return TOGGLE_LIB
    os.makedirs(os.path.dirname(TOGGLE_LIB), exist_ok=True)
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()
    tmp = TOGGLE_LIB + f".{os.getpid()}"
    p = subprocess.run(cc + ["-O2", "-shared", "-fPIC", "-o", tmp, TOGGLE_SRC], capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"could not build {TOGGLE_SRC} (it needs <valgrind/callgrind.h>, which the Debian "
                 f"package valgrind ships):\n{p.stderr}")
    os.replace(tmp, TOGGLE_LIB)
    return TOGGLE_LIB


def release_build():
    """-> path of the topicmatch._core this interpreter imports, after
    checking that it is a release build (no debug sections, no sanitizer or
    coverage instrumentation)."""
    p = subprocess.run([sys.executable, "-c", "import os, topicmatch._core as c; print(os.path.realpath(c.__file__))"],
                       capture_output=True, text=True, cwd=HERE)
    if p.returncode:
        sys.exit(f"cannot import topicmatch (run `make build` first):\n{p.stderr[-2000:]}")
    so = p.stdout.strip()
    with open(so, "rb") as f:
        data = f.read()
    marks = [m.decode() for m in (b"\0.debug_info\0", b"__asan_init", b"__tsan_init", b"__gcov_") if m in data]
    if marks:
        sys.exit(f"{so} is not the release build (it carries {', '.join(m.strip(chr(0)) for m in marks)}): "
                 "the gate counts the release build's instructions.  `make build` with no TOPICMATCH_* "
                 "switch set (rm -rf build/temp.* first) makes it.")
    return so


def measure(op, name, rows, lib, so=None):
    """Instructions per row of op on workload name: passes 2 and 3 of three."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
               sys.executable, "-c", CHILD.format(here=HERE, lib=lib, op=op, name=name, rows=rows)]
        # numpy's OpenBLAS threads spin while idle (bench/callgrind.py)
        env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"callgrind run failed ({op} {name}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
        seen = re.search(r"^topicmatch: (.*)$", p.stdout, re.M)
        if so and (not seen or seen.group(1) != so):
            sys.exit(f"the child measured {seen and seen.group(1)}, not {so}")
        total = None
        with open(out) as f:
            for line in f:
                m = re.match(r"(?:summary|totals):\s+(\d+)", line)
                if m:
                    total = int(m.group(1))
        if not total:
            sys.exit(f"callgrind counted nothing for {op} {name} (was the instrumentation switched on?)")
        return total / (2 * rows)


def measure_all(pairs, rows, runs, log=print, jobs=None):
    """-> ({op: {workload: median}}, {op: {workload: [runs]}}, overhead),
    each count less the overhead: what the switch itself costs (the calls
    through ctypes around the two passes), measured on an empty pass.
    `jobs` callgrind processes at a time (default: one per core): a count
    does not depend on what else runs, only the time does."""
    check_valgrind()
    lib = toggle_lib()
    so = release_build()
    jobs = jobs or os.cpu_count() or 1
    log(f"measuring {so} (rows={rows}, median of {runs} runs, {jobs} callgrind at a time)")
    sys.path.insert(0, HERE)
    from workloads import ensure_data
    ensure_data(sorted({w for _, w in pairs}))      # generated here, not under valgrind
    t = time.time()
    with ThreadPoolExecutor(jobs) as pool:
        runs_of = {key: [pool.submit(measure, key[0], key[1], rows, lib, so) for _ in range(runs)]
                   for key in [("empty", "-")] + list(pairs)}
        got = {key: [f.result() for f in fs] for key, fs in runs_of.items()}
    overhead = statistics.median(got[("empty", "-")])
    log(f"  the switch's own cost, subtracted: {overhead * 2 * rows:,.0f} instructions ({overhead:.2f} a row)")
    counts, raw = {}, {}
    for op, w in pairs:
        vals = [v - overhead for v in got[(op, w)]]
        med = statistics.median(vals)
        counts.setdefault(op, {})[w] = round(med, 1)
        raw.setdefault(op, {})[w] = [round(v, 1) for v in vals]
        log(f"  {op:12s} {w:9s} {med:10,.1f}   runs {', '.join(f'{v:,.1f}' for v in vals)}")
    log(f"  ({time.time() - t:.0f} s)")
    return counts, raw, round(overhead, 2)


def environment():
    def version(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True).stdout.splitlines()[0].strip()
        except (OSError, IndexError):
            return None
    # (the compiler behind a launcher such as CI's "ccache gcc")
    cc = [w for w in (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()
          if os.path.basename(w) != "ccache"][0]
    try:
        import Cython
        cython = Cython.__version__
    except ImportError:
        cython = None
    return {"python": platform.python_version(), "cc": version([cc, "--version"]), "cython": cython,
            "valgrind": version(["valgrind", "--version"]), "machine": platform.machine()}


def git_commit():
    def git(*a):
        return subprocess.run(["git", *a], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    head = git("rev-parse", "HEAD")
    # csrc/, src/ or setup.py changed against HEAD: the counts are of HEAD
    # plus those changes (the commit that rewrites the baseline)
    dirty = git("status", "--porcelain", "--", "csrc", "src", "setup.py")
    return head + ("+uncommitted" if dirty else "") if head else None


BUILD_FLAGS = ("setup.py release (make build; the wheel's): csrc/ -O3 -g0 -DNDEBUG -std=c11 -fvisibility=hidden "
               "-fPIC -D_GNU_SOURCE -pthread with -Wall -Wextra -Wconversion -Wshadow -Werror; the Cython "
               "extension -O3 -g0 -DNDEBUG; after Python's own CFLAGS")


# ---------------------------------------------------------------- the command

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--update", action="store_true", help="measure and rewrite the baseline file")
    ap.add_argument("--baseline", default=BASELINE, help="baseline file (default bench/instructions.json)")
    ap.add_argument("--runs", type=int, default=3, help="runs per count; the median is taken (default 3)")
    ap.add_argument("--jobs", type=int, default=None,
                    help="callgrind processes at a time (default: one per core; the counts do not change)")
    ap.add_argument("--ops", help=f"with --update: operations (default {','.join(DEFAULT_OPS)}, or the file's)")
    ap.add_argument("--workloads", help=f"with --update: workloads (default {','.join(DEFAULT_WORKLOADS)}, or the file's)")
    ap.add_argument("--rows", type=int, help=f"with --update: rows per pass (default {DEFAULT_ROWS}, or the file's)")
    ap.add_argument("--counts", help="compare this JSON file's counts ({op: {workload: n}}, or a baseline "
                                     "file's) instead of measuring: for testing the comparison")
    a = ap.parse_args(argv)
    t0 = time.time()

    old = None
    if os.path.exists(a.baseline):
        with open(a.baseline) as f:
            old = json.load(f)

    if a.update:
        if old and not (a.ops or a.workloads):      # the file's counts, re-measured
            pairs = [(op, w) for op in old["counts"] for w in old["counts"][op]]
        else:
            pairs = combos(a.ops.split(",") if a.ops else DEFAULT_OPS,
                           a.workloads.split(",") if a.workloads else DEFAULT_WORKLOADS)
        rows = a.rows or (old["rows"] if old else DEFAULT_ROWS)
        counts, raw, overhead = measure_all(pairs, rows, a.runs, jobs=a.jobs)
        new = {
            "about": "Instructions per row (callgrind) of the standard operations, the median of `runs` runs: "
                     "bench/instructions.py checks against these (make bench-instructions) and rewrites "
                     "them (make bench-instructions-update). tolerance: how far above its baseline a count "
                     "may be, per op (or op/workload), else default.",
            "commit": git_commit(),
            "date": datetime.date.today().isoformat(),
            "build": BUILD_FLAGS,
            "environment": environment(),
            "rows": rows,
            "runs": a.runs,
            "tolerance": old["tolerance"] if old else DEFAULT_TOLERANCE,
            "counts": counts,
            "all_runs": raw,
            "switch_overhead_per_row": overhead,
        }
        with open(a.baseline + ".tmp", "w") as f:
            json.dump(new, f, indent=2)
            f.write("\n")
        os.replace(a.baseline + ".tmp", a.baseline)
        if old:
            rows_, _ = compare(old["counts"], counts, new["tolerance"])
            print("against the previous baseline:")
            print(table(rows_))
        print(f"wrote {a.baseline} ({time.time() - t0:.0f} s)")
        return 0

    if old is None:
        sys.exit(f"no baseline at {a.baseline}: `{UPDATE_COMMAND}` records one")
    if a.counts:
        with open(a.counts) as f:
            c = json.load(f)
        now = c.get("counts", c)
    else:
        now, _, _ = measure_all([(op, w) for op in old["counts"] for w in old["counts"][op]],
                             old["rows"], a.runs, jobs=a.jobs)
    rows_, failed = compare(old["counts"], now, old.get("tolerance", DEFAULT_TOLERANCE))
    print(f"baseline: {shown(a.baseline)}, commit {old.get('commit')}, {old.get('date')}")
    env_now, env_base = environment(), old.get("environment", {})
    differ = [f"{k} {env_base.get(k)} -> {env_now.get(k)}" for k in env_now if env_base.get(k) != env_now.get(k)]
    if differ and not a.counts:
        print("note: the toolchain differs from the baseline's (" + "; ".join(differ) + "): "
              "counts may move with it; re-record the baseline on purpose if so")
    print(table(rows_))
    print(verdict_text(rows_, failed, a.baseline))
    print(f"({time.time() - t0:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
