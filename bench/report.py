"""`make bench-report`: run the benchmarks and write docs/benchmarks.md with
PNG plots (matplotlib) in docs/benchmarks/, every figure with the command that
made it and the machine it ran on.

    python bench/report.py [--quick] [--huge] [--no-spark] [--repeat 3] [--out docs]

Figures:
  1. match_many ns/subject (and index bytes/subscription) against the number
     of subscriptions: 10k ... 1M of light's shape (--huge adds 3M and 10M);
  2. match_many ns/subject against threads, light and heavy;
  3. topicmatch (match_many, match()) against paho-mqtt's MQTTMatcher and a
     naive Python loop over the filters, light-mqtt's shape, 1k-100k subs;
  4. the Spark fan-out against Spark's identity mapInArrow pass
     (bench/bench_spark.py; skipped with the reason when PySpark or Java is
     missing, or with --no-spark).
Before timing, the standard workloads' exact totals are checked
(bench/check_totals.py).  The default run takes a few minutes; --quick
shrinks every sample for a smoke run.  Raw figures go to
docs/benchmarks/results.json.
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
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

import topicmatch  # noqa: E402
from topicmatch import Sublist  # noqa: E402

import workloads  # noqa: E402
from check_totals import SMALL, totals  # noqa: E402
from workloads import EXPECTED, calibration, load  # noqa: E402

SCALE_SUBS = [10_000, 30_000, 100_000, 300_000, 1_000_000]
HUGE_SUBS = [3_000_000, 10_000_000]


# ------------------------------------------------------------------ helpers

def timed(fn, repeat):
    """-> (median ns, every run's ns, the last result)."""
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        out = fn()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times), times, out


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no",
                                "--", "csrc", "src"], capture_output=True, text=True).stdout.strip()
        commit += " (with uncommitted changes to csrc/ or src/)" if dirty else ""
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    try:
        load1 = f"{os.getloadavg()[0]:.2f}"
    except OSError:
        load1 = "?"
    return {
        "cpu": cpu, "cores": os.cpu_count(), "system": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "topicmatch": topicmatch.__version__, "commit": commit,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "loadavg_at_start": load1,
    }


def scale_workload(nsubs, npubs):
    """light's shape with nsubs subscriptions and npubs publishes (generated once)."""
    name = f"scale-{nsubs}-{npubs}"
    out = os.path.join(workloads.DATA, name)
    if not os.path.exists(os.path.join(out, "pubs.txt")):
        os.makedirs(out, exist_ok=True)
        print(f"  generating {name} ...", flush=True)
        subprocess.run([sys.executable, workloads.GENERATOR, "--out", out, "--subs", str(nsubs),
                        "--pubs", str(npubs), *workloads._LIGHT], check=True, stdout=subprocess.DEVNULL)
    return read_workload(out)


def read_workload(d):
    filters, queues = [], []
    with open(os.path.join(d, "subs.txt")) as f:
        for line in f:
            parts = line.split()
            filters.append(parts[0])
            queues.append(parts[1] if len(parts) > 1 else None)
    with open(os.path.join(d, "pubs.txt")) as f:
        pubs = f.read().split("\n")
    if pubs and pubs[-1] == "":
        pubs.pop()
    return filters, list(range(len(filters))), queues, pubs


def to_mqtt(filters, pubs):
    tr = str.maketrans({".": "/", "*": "+", ">": "#"})
    return [f.translate(tr) for f in filters], [p.replace(".", "/") for p in pubs]


def naive_mqtt_match(filt, topic):
    """The obvious per-filter test (what a loop over filters does)."""
    f, t = filt.split("/"), topic.split("/")
    for i, level in enumerate(f):
        if level == "#":
            return not (i == 0 and topic.startswith("$"))
        if i >= len(t):
            return False
        if level == "+":
            if i == 0 and topic.startswith("$"):
                return False
            continue
        if level != t[i]:
            return False
    return len(f) == len(t)


# ------------------------------------------------------------------ runs

def run_check(quick):
    names = ["light"] if quick else SMALL
    rows = []
    for name in names:
        got = totals(name)
        rows.append({"workload": name, "pairs": got[0], "checksum": got[1], "ok": got == EXPECTED[name]})
        print(f"  totals {name}: {'OK' if rows[-1]['ok'] else 'MISMATCH'}", flush=True)
    return rows


def run_scale(sizes, npubs, repeat):
    rows = []
    for n in sizes:
        filters, ids, queues, pubs = scale_workload(n, npubs)
        sl = Sublist("nats")
        t_ins, _, _ = timed(lambda: _fresh(filters, ids, queues), 1)
        sl.insert_many(filters, ids, queues)
        arrow = pa.array(pubs)
        med, runs, b = timed(lambda: sl.match_many(arrow, queues="all"), repeat)
        sample = pubs[:50_000]
        match = sl.match

        def loop():
            for p in sample:
                match(p)
        med_m, _, _ = timed(loop, repeat)
        rows.append({"subs": n, "pubs": len(pubs), "ns_per_subject": med / len(pubs),
                     "runs_ns_per_subject": [t / len(pubs) for t in runs],
                     "match_ns_per_call": med_m / len(sample),
                     "ids_per_subject": len(b.sub_ids) / len(pubs),
                     "bytes_per_sub": sl.stats()["memory_bytes"] / n, "insert_ns_per_sub": t_ins / n})
        print(f"  {n:>10,} subs: match_many {rows[-1]['ns_per_subject']:7.1f} ns/subject, "
              f"match() {rows[-1]['match_ns_per_call']:6.0f} ns, {rows[-1]['bytes_per_sub']:.0f} B/sub",
              flush=True)
        del sl, filters, ids, queues, pubs, arrow, b
    return rows


def _fresh(filters, ids, queues):
    sl = Sublist("nats")
    sl.insert_many(filters, ids, queues)
    return sl


def run_threads(npubs, repeat):
    counts = sorted({1, 2, 4, 8, os.cpu_count() or 1})
    rows = []
    for name in ("light", "heavy"):
        filters, ids, queues, pubs = load(name)
        sl = Sublist("nats")
        sl.insert_many(filters, ids, queues)
        n = npubs if name == "light" else max(1, npubs // 4)
        arrow = pa.array(pubs[:n])
        for th in counts:
            med, runs, b = timed(lambda: sl.match_many(arrow, queues="all", threads=th), repeat)
            rows.append({"workload": name, "threads": th, "subjects": n, "ns_per_subject": med / n,
                         "ns_per_id": med / max(1, len(b.sub_ids)),
                         "runs_ns_per_subject": [t / n for t in runs]})
            print(f"  {name} threads={th}: {med / n:7.1f} ns/subject", flush=True)
    return rows


def run_compare(sizes, samples, repeat):
    from paho.mqtt.matcher import MQTTMatcher
    base_f, _, base_q, base_p = scale_workload(max(sizes), 100_000)
    rows = []
    for n in sizes:
        filters, pubs = to_mqtt(base_f[:n], base_p)
        queues = base_q[:n]
        m = MQTTMatcher()
        for j, f in enumerate(filters):
            try:
                m[f].append(j)
            except KeyError:
                m[f] = [j]
        sl = Sublist("mqtt")
        sl.insert_many(filters, list(range(n)), queues)
        paho_sample = pubs[:samples["paho"]]
        naive_n = max(20, samples["naive"] * 1000 // n)
        naive_sample = pubs[:naive_n]
        fast_sample = pubs[:samples["topicmatch"]]
        arrow = pa.array(fast_sample)
        match = sl.match

        def paho():
            for p in paho_sample:
                for _ in m.iter_match(p):
                    pass

        def naive():
            for p in naive_sample:
                for f in filters:
                    if naive_mqtt_match(f, p):
                        pass

        def one_by_one():
            for p in fast_sample:
                match(p)
        t_paho, _, _ = timed(paho, 1)
        t_naive, _, _ = timed(naive, 1)
        t_match, _, _ = timed(one_by_one, repeat)
        t_many, _, _ = timed(lambda: sl.match_many(arrow, queues="all"), repeat)
        rows.append({"subs": n, "naive_ns": t_naive / naive_n, "paho_ns": t_paho / len(paho_sample),
                     "match_ns": t_match / len(fast_sample), "match_many_ns": t_many / len(fast_sample),
                     "samples": {"naive": naive_n, "paho": len(paho_sample), "topicmatch": len(fast_sample)}})
        r = rows[-1]
        print(f"  {n:>8,} subs: naive {r['naive_ns']:12,.0f}  paho {r['paho_ns']:8,.0f}  "
              f"match() {r['match_ns']:6,.0f}  match_many {r['match_many_ns']:6,.1f} ns/subject", flush=True)
    return rows


def run_spark(events, repeat):
    """-> (rows, raw output, reason skipped or None)."""
    script = os.path.join(HERE, "bench_spark.py")
    if not os.path.exists(script):
        return None, "", "bench/bench_spark.py is not in this checkout"
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return None, "", "PySpark is not installed (pip install 'topicmatch[spark]')"
    home = os.environ.get("JAVA_HOME")
    if not (shutil.which("java") or (home and os.path.exists(os.path.join(home, "bin", "java")))):
        return None, "", "no Java runtime"
    argv = [sys.executable, script, "--events", str(events), "--repeat", str(repeat), "--skip-naive"]
    r = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    out = r.stdout + (f"\n[stderr]\n{r.stderr[-3000:]}" if r.returncode else "")
    if r.returncode:
        return None, out, f"bench_spark.py exited {r.returncode}"
    rows = []
    pat = re.compile(r"^\((?P<key>[^)]+)\)\s+(?P<name>.+?)\s+(?P<s>\d+\.\d+)\s+(?P<rate>[\d,]+)\s+"
                     r"(?P<ns>\d+)\s+(?P<runs>[\d. ]+)$")
    for line in r.stdout.splitlines():
        m = pat.match(line.strip())
        if m:
            rows.append({"key": m["key"], "pass": m["name"].strip(), "median_s": float(m["s"]),
                         "ns_per_event": int(m["ns"]), "runs_s": [float(x) for x in m["runs"].split()]})
    if not rows:
        return None, out, "could not read bench_spark.py's table (its output format changed?)"
    return rows, r.stdout, None


# ------------------------------------------------------------------ plots

def plots(res, outdir, cmd, mach):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    foot = f"{cmd}\n{mach['cpu']}, {mach['cores']} cores, {mach['python']}, topicmatch {mach['topicmatch']} @ {mach['commit']}"
    files = {}

    def save(fig, name):
        fig.text(0.01, 0.01, foot, fontsize=6.5, color="0.35", va="bottom")
        fig.tight_layout(rect=(0, 0.07, 1, 1))
        path = os.path.join(outdir, name)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files[name] = path

    if res.get("scale"):
        s = res["scale"]
        fig, ax = plt.subplots(figsize=(7, 4.2))
        x = [r["subs"] for r in s]
        ax.plot(x, [r["ns_per_subject"] for r in s], "o-", label="match_many (Arrow, 1 thread)")
        ax.plot(x, [r["match_ns_per_call"] for r in s], "s--", label="match() from Python")
        ax.set_xscale("log")
        ax.set_xlabel("subscriptions (light's shape)")
        ax.set_ylabel("ns per subject (median)")
        ax.set_ylim(bottom=0)
        ax2 = ax.twinx()
        ax2.plot(x, [r["bytes_per_sub"] for r in s], "^:", color="tab:green", label="index bytes/subscription")
        ax2.set_ylabel("index bytes per subscription", color="tab:green")
        ax2.set_ylim(bottom=0)
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, loc="lower right", fontsize=8, framealpha=0.9)
        ax.set_title("Cost per subject against the number of subscriptions")
        save(fig, "scale.png")

    if res.get("threads"):
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for name, mark in (("light", "o-"), ("heavy", "s-")):
            rs = [r for r in res["threads"] if r["workload"] == name]
            ax.plot([r["threads"] for r in rs], [r["ns_per_subject"] for r in rs], mark, label=name)
        ax.set_xlabel(f"threads= (this machine has {mach['cores']} cores)")
        ax.set_ylabel("ns per subject (median)")
        ax.set_xticks(sorted({r["threads"] for r in res["threads"]}))
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
        ax.set_title("match_many against threads")
        save(fig, "threads.png")

    if res.get("compare"):
        c = res["compare"]
        fig, ax = plt.subplots(figsize=(7, 4.2))
        x = [r["subs"] for r in c]
        for key, label, mark in (("naive_ns", "naive Python loop over the filters", "x-"),
                                 ("paho_ns", "paho-mqtt MQTTMatcher (pure-Python trie)", "d-"),
                                 ("match_ns", "topicmatch match() per subject", "s-"),
                                 ("match_many_ns", "topicmatch match_many (Arrow, 1 thread)", "o-")):
            ax.plot(x, [r[key] for r in c], mark, label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("subscriptions (light-mqtt's shape)")
        ax.set_ylabel("ns per subject (log)")
        ax.legend(fontsize=8)
        ax.set_title("topicmatch against pure-Python matchers (MQTT)")
        save(fig, "compare.png")

    if res.get("spark"):
        rows = res["spark"]
        fig, ax = plt.subplots(figsize=(7, 4.2))
        labels = [f"({r['key']}) {r['pass']}" for r in rows]
        ax.barh(labels, [r["median_s"] for r in rows], color="tab:blue")
        for i, r in enumerate(rows):
            ax.text(r["median_s"], i, f" {r['median_s']:.2f} s", va="center", fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("seconds per pass (median)")
        ax.set_title("Spark fan-out against Spark's identity pass")
        save(fig, "spark.png")
    return files


# ------------------------------------------------------------------ report

def busy_note(mach):
    """A warning when other work was running: thread scaling needs idle cores."""
    try:
        load, cores = float(mach["loadavg_at_start"]), mach["cores"] or 1
    except (TypeError, ValueError):
        return None
    if load <= 0.5 * cores:
        return None
    return (f"The machine was busy when this ran (load average {load:.1f} on {cores} cores, from other "
            "work): every figure is slower than on an idle machine, and the thread figures show "
            "contention for the cores, not topicmatch's scaling.")


def markdown(res, mach, cmd, files, seconds):
    L = []
    w = L.append
    w("# Benchmarks")
    w("")
    w(f"Written by `{cmd}` in {seconds / 60:.1f} min. Regenerate with `make bench-report` "
      "(`BENCH_REPORT_ARGS=--huge` adds 3M and 10M subscriptions). The machines are shared and "
      "noisy: compare figures within one report, as ratios; each is a median, and "
      "`results.json` beside the plots holds every run.")
    w("")
    w("**Machine:** " + f"{mach['cpu']}, {mach['cores']} cores, {mach['system']}; {mach['python']}; "
      f"topicmatch {mach['topicmatch']} at commit {mach['commit']}; {mach['date']}; load average at start "
      f"{mach['loadavg_at_start']}; calibration (empty Python loop) {res['calibration_ns']:.1f} ns/iteration.")
    w("")
    if busy_note(mach):
        w(f"> **Note:** {busy_note(mach)}")
        w("")
    w("## Exact totals")
    w("")
    w("Checked before timing (`bench/check_totals.py`, `make bench-check`):")
    w("")
    w("| workload | pairs | checksum | |")
    w("|---|---:|---:|---|")
    for r in res["check"]:
        w(f"| {r['workload']} | {r['pairs']:,} | {r['checksum']} | {'OK' if r['ok'] else '**MISMATCH**'} |")
    w("")
    if res.get("scale"):
        w("## Cost against the number of subscriptions")
        w("")
        w("![ns per subject against subscriptions](benchmarks/scale.png)")
        w("")
        w(f"light's shape (`bench/gen_workload.py --subs N`, {res['scale'][0]['pubs']:,} publishes); "
          "`match_many` over a pyarrow column, `queues=\"all\"`, one thread; `match()` over the first "
          "50,000 publishes; memory is `stats()[\"memory_bytes\"]`. Command: `" + cmd + "`.")
        w("")
        w("| subscriptions | match_many ns/subject | match() ns/call | ids/subject | index B/sub | insert_many ns/sub |")
        w("|---:|---:|---:|---:|---:|---:|")
        for r in res["scale"]:
            w(f"| {r['subs']:,} | {r['ns_per_subject']:.1f} | {r['match_ns_per_call']:.0f} | "
              f"{r['ids_per_subject']:.2f} | {r['bytes_per_sub']:.0f} | {r['insert_ns_per_sub']:.0f} |")
        s = res["scale"]
        big = [r for r in s if r["subs"] == 1_000_000]
        small = [r for r in s if r["subs"] == 100_000]
        if big and small:
            w("")
            w(f"1M subscriptions cost {big[0]['ns_per_subject'] / small[0]['ns_per_subject']:.2f}x "
              "the 100k cost per subject (target: ≤ 2.5x).")
        w("")
    if res.get("threads"):
        w("## Threads")
        w("")
        w("![ns per subject against threads](benchmarks/threads.png)")
        w("")
        w("`match_many(..., threads=N)` over a pyarrow column of the standard workloads' first "
          f"publishes (light: {res['threads'][0]['subjects']:,}; heavy: a quarter of that), "
          f"`queues=\"all\"`. This machine has {mach['cores']} cores. Command: `{cmd}`.")
        w("")
        w("| workload | threads | ns/subject | ns/returned id | speed-up vs 1 |")
        w("|---|---:|---:|---:|---:|")
        for r in res["threads"]:
            one = [x for x in res["threads"] if x["workload"] == r["workload"] and x["threads"] == 1][0]
            w(f"| {r['workload']} | {r['threads']} | {r['ns_per_subject']:.1f} | {r['ns_per_id']:.2f} | "
              f"{one['ns_per_subject'] / r['ns_per_subject']:.2f}x |")
        w("")
    # Threads on a machine with the cores (bench/scaling.sh there, then
    # bench/scaling_report.py here): its own section, kept and included.
    included("scaling.md", w)
    if res.get("compare"):
        w("## Against pure-Python matchers")
        w("")
        w("![topicmatch against paho and a naive loop](benchmarks/compare.png)")
        w("")
        w("MQTT, light-mqtt's shape, the first N subscriptions of one generated set. The naive loop "
          "tests every filter against each subject (`naive_mqtt_match` in `bench/report.py`); paho's "
          "`MQTTMatcher.iter_match` walks its pure-Python trie. Each method runs on its own sample of the "
          f"same publishes (sizes in `results.json`). Command: `{cmd}`.")
        w("")
        w("| subscriptions | naive loop ns | paho MQTTMatcher ns | match() ns | match_many ns | paho / match_many |")
        w("|---:|---:|---:|---:|---:|---:|")
        for r in res["compare"]:
            w(f"| {r['subs']:,} | {r['naive_ns']:,.0f} | {r['paho_ns']:,.0f} | {r['match_ns']:,.0f} | "
              f"{r['match_many_ns']:,.1f} | {r['paho_ns'] / r['match_many_ns']:.0f}x |")
        w("")
    w("## Spark fan-out")
    w("")
    if res.get("spark"):
        rows = {r["key"]: r for r in res["spark"]}
        w("![Spark passes](benchmarks/spark.png)")
        w("")
        w(f"`bench/bench_spark.py --events {res['spark_events']} --repeat {res['spark_repeat']} "
          "--skip-naive` (light's publishes as events against its 100k subscriptions, `local[2]`; "
          f"every pass ends in the `noop` sink), run by `{cmd}`.")
        w("")
        w("| pass | median s | ns/event |")
        w("|---|---:|---:|")
        for r in res["spark"]:
            w(f"| ({r['key']}) {r['pass']} | {r['median_s']:.2f} | {r['ns_per_event']:,} |")
        if "a" in rows and "b" in rows:
            w("")
            w(f"Fan-out / identity (b/a): **{rows['b']['median_s'] / rows['a']['median_s']:.2f}x** "
              "(target: ≤ 1.3x).")
    else:
        w(f"Not run: {res.get('spark_skipped', 'skipped')}.")
    if res.get("spark_output"):
        w("")
        w("<details><summary>bench_spark.py output</summary>")
        w("")
        w("```")
        w(res["spark_output"].strip())
        w("```")
        w("</details>")
    w("")
    # The image (docs/FORMAT.md, version 3): bench/image.py writes its own
    # section (build, save, open, match from the mapped file, private memory of
    # processes sharing it), kept beside the figures and included here.
    # The plain SQL shape-join's plans (bench/bench_spark_shard.py prints them).
    included("sql-plans.md", w)
    included("image.md", w)
    return "\n".join(L)


def included(name, w):
    """A section that its own script writes into docs/benchmarks/ (from a
    run this report does not make), copied in where it exists."""
    path = os.path.join(ROOT, "docs", "benchmarks", name)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            w(f.read().rstrip("\n"))
        w("")


README_START = "<!-- bench-summary: written by bench/report.py; edits here are overwritten -->"
README_END = "<!-- /bench-summary -->"


def readme_summary(res, mach):
    """The README's figures, taken from this report."""
    L = [README_START, "",
         f"From [docs/benchmarks.md](docs/benchmarks.md) ({mach['date']}, commit {mach['commit']}, "
         f"{mach['cpu']}, {mach['cores']} cores; medians; compare as ratios):", "",
         "| figure | measured |", "|---|---|"]
    if busy_note(mach):
        L[4:4] = [f"**Note:** {busy_note(mach)}", ""]
    by = {r["subs"]: r for r in res.get("scale") or []}
    if 100_000 in by:
        r = by[100_000]
        L.append(f"| `match_many`, 100k subscriptions (light's shape), 1 thread | "
                 f"{r['ns_per_subject']:.0f} ns/subject |")
        L.append(f"| `match()` from Python, same index | {r['match_ns_per_call']:.0f} ns/call |")
        L.append(f"| index memory | {r['bytes_per_sub']:.0f} bytes/subscription |")
        if 1_000_000 in by:
            L.append(f"| 1M subscriptions vs 100k, per subject | "
                     f"{by[1_000_000]['ns_per_subject'] / r['ns_per_subject']:.2f}x |")
    th = {(r["workload"], r["threads"]): r for r in res.get("threads") or []}
    for w in ("light", "heavy"):
        if (w, 1) in th and (w, 2) in th:
            L.append(f"| `threads=2` vs 1, {w} | "
                     f"{th[(w, 1)]['ns_per_subject'] / th[(w, 2)]['ns_per_subject']:.2f}x |")
    cmp_ = {r["subs"]: r for r in res.get("compare") or []}
    if cmp_:
        r = cmp_[max(cmp_)]
        L.append(f"| paho-mqtt `MQTTMatcher` vs `match_many`, {max(cmp_):,} MQTT subscriptions | "
                 f"paho {r['paho_ns'] / r['match_many_ns']:.0f}x slower "
                 f"(naive loop {r['naive_ns'] / r['match_many_ns']:,.0f}x) |")
    sp = {r["key"]: r for r in res.get("spark") or []}
    if "a" in sp and "b" in sp:
        L.append(f"| Spark fan-out vs identity `mapInArrow`, {res['spark_events']:,} events | "
                 f"{sp['b']['median_s'] / sp['a']['median_s']:.2f}x |")
    L += ["", README_END]
    return "\n".join(L)


def update_readme(res, mach, path=os.path.join(ROOT, "README.md")):
    """Replace the README's figures (between the markers) with this run's."""
    try:
        text = open(path, encoding="utf-8").read()
    except OSError:
        return False
    i, j = text.find(README_START), text.find(README_END)
    if i < 0 or j < i:
        return False
    text = text[:i] + readme_summary(res, mach) + text[j + len(README_END):]
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return True


def rewrite(out):
    figdir = os.path.join(out, "benchmarks")
    with open(os.path.join(figdir, "results.json")) as f:
        res = json.load(f)
    mach, cmd = res["machine"], res["command"]
    files = plots(res, figdir, cmd, mach)
    with open(os.path.join(out, "benchmarks.md"), "w") as f:
        f.write(markdown(res, mach, cmd, files, res.get("seconds", 0)))
    if os.path.abspath(out) == os.path.join(ROOT, "docs"):
        update_readme(res, mach)
    print(f"rewrote {os.path.join(out, 'benchmarks.md')} from results.json")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "docs"), help="where benchmarks.md goes")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="small samples: a smoke run of the report")
    ap.add_argument("--huge", action="store_true", help="also 3M and 10M subscriptions (minutes, ~6 GB)")
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--spark-events", type=int, default=None)
    ap.add_argument("--rewrite", action="store_true",
                    help="no measuring: rewrite the report, plots and README figures from results.json")
    a = ap.parse_args(argv)
    if a.rewrite:
        return rewrite(a.out)
    t0 = time.perf_counter()
    cmd = "python bench/report.py" + "".join(f" {x}" for x in (argv if argv is not None else sys.argv[1:]))
    mach = machine()
    figdir = os.path.join(a.out, "benchmarks")
    os.makedirs(figdir, exist_ok=True)
    quick = a.quick
    res = {"machine": mach, "command": cmd}
    print("calibration ...", flush=True)
    res["calibration_ns"] = calibration()
    print("exact totals ...", flush=True)
    res["check"] = run_check(quick)
    if not all(r["ok"] for r in res["check"]):
        print("the exact totals do not match: no report", file=sys.stderr)
        return 1
    sizes = SCALE_SUBS[:3] if quick else SCALE_SUBS + (HUGE_SUBS if a.huge else [])
    print("subscriptions scale ...", flush=True)
    res["scale"] = run_scale(sizes, 20_000 if quick else 200_000, a.repeat)
    print("threads ...", flush=True)
    res["threads"] = run_threads(20_000 if quick else 200_000, a.repeat)
    print("pure-Python comparison ...", flush=True)
    res["compare"] = run_compare([1_000, 10_000] if quick else [1_000, 10_000, 100_000],
                                 {"naive": 20 if quick else 200, "paho": 2_000 if quick else 20_000,
                                  "topicmatch": 20_000 if quick else 100_000}, a.repeat)
    if a.no_spark:
        res["spark"], res["spark_output"], res["spark_skipped"] = None, "", "--no-spark"
    else:
        events = a.spark_events or (100_000 if quick else 1_000_000)
        res["spark_events"], res["spark_repeat"] = events, 1 if quick else a.repeat
        print(f"Spark fan-out ({events:,} events) ...", flush=True)
        res["spark"], res["spark_output"], res["spark_skipped"] = run_spark(events, res["spark_repeat"])
        if res["spark_skipped"]:
            print(f"  skipped: {res['spark_skipped']}", flush=True)
    files = plots(res, figdir, cmd, mach)
    seconds = time.perf_counter() - t0
    res["seconds"] = seconds
    with open(os.path.join(figdir, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    md = markdown(res, mach, cmd, files, seconds)
    with open(os.path.join(a.out, "benchmarks.md"), "w") as f:
        f.write(md)
    print(f"wrote {os.path.join(a.out, 'benchmarks.md')} and {len(files)} plots in {seconds:.0f} s")
    if not a.quick and os.path.abspath(a.out) == os.path.join(ROOT, "docs") and update_readme(res, mach):
        print("updated the figures in README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
