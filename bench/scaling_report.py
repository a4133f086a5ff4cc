"""The thread-scaling section of docs/benchmarks.md, from bench/scaling.sh's
JSON (bench/run_batch.py --threads), measured on whichever machine has the
cores:

    .venv/bin/python bench/scaling_report.py scaling.json \
        --machine "16-core Intel Xeon, 128 GB" --command "bench/scaling.sh ..."

writes docs/benchmarks/scaling.md (a table of every row, and the speed-ups
beside the Go sublist's from the same kind of machine) and
docs/benchmarks/scaling.png (speed-up against threads), and keeps the JSON
as docs/benchmarks/scaling.json so that the section can be rewritten
without the machine (--from-kept).  bench/report.py includes scaling.md.
"""
import argparse
import json
import os
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "docs", "benchmarks")

# The NATS server's own Go sublist on a 16-core Intel Xeon (T goroutines
# sharing one Sublist, Match under the read lock; issue 32's table): the
# speed-up of T=16 over T=1.  Workload name here -> (label, speed-up).
GO_T16 = {
    "light": ("light, 100k filters", 9.1),
    "light1m": ("light, 1M filters", 12.1),
    "light10m": ("light, 10M filters", 13.5),
    "heavy": ("heavy", 6.3),
    "hot1k": ("hot1k, cached", 0.40),
}


def _by_workload(rows):
    out = {}
    for r in rows:
        out.setdefault(r["workload"], []).append(r)
    return out


def markdown(data, machine, command):
    rows = data["rows"]
    L = ["### Threads on a many-core machine", ""]
    L.append(f"![speed-up against threads](benchmarks/scaling.png)")
    L.append("")
    L.append(f"`match_many(..., threads=T)` over a pyarrow column, `queues=\"all\"`, on {machine} "
             f"({data['cpus']} CPUs seen, {data['load']} at the start), medians of {data['repeat']}. "
             "CPU time and context switches are per batch, for every thread of the process "
             "(`getrusage` deltas). "
             f"Command: `{command}`.")
    L.append("")
    L.append("| workload | rows | T | ns/row | speed-up | user ms | sys ms | voluntary cs | involuntary cs | totals |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        L.append(f"| {r['workload']} | {r['rows']:,} | {r['threads']} | {r['ns_per_row']:.1f} | "
                 f"{r['speedup']:.2f}x | {r['user_ms']:.1f} | {r['sys_ms']:.1f} | {r['vol_cs']:.0f} | "
                 f"{r['invol_cs']:.0f} | {r['totals']} |")
    L.append("")
    top = max(r["threads"] for r in rows)
    L.append(f"Speed-up at T={top} against the Go sublist's at T=16 on the same kind of machine "
             "(its figures: issue 32's table, T goroutines sharing one `Sublist`):")
    L.append("")
    earlier = data.get("earlier")
    extra = f" | {earlier['label']} |" if earlier else " |"
    L.append(f"| workload | topicmatch T={top} / T=1{extra} Go T=16 / T=1 |")
    L.append("|---|---:|---:|" + ("---:|" if earlier else ""))
    before = {}
    if earlier:
        for name, rs in _by_workload(earlier["rows"]).items():
            before[name] = max(rs, key=lambda r: r["threads"])["speedup"]
    names = list(_by_workload(rows)) + [n for n in before if n not in _by_workload(rows)]
    for name in names:
        rs = _by_workload(rows).get(name)
        now = f"{max(rs, key=lambda r: r['threads'])['speedup']:.2f}x" if rs else "-"
        was = (f" {before[name]:.2f}x |" if name in before else " - |") if earlier else ""
        go = GO_T16.get(name)
        L.append(f"| {go[0] if go else name} | {now} |{was} {f'{go[1]:.1f}x' if go else '-'} |")
    if earlier:
        L.append("")
        L.append(earlier["note"])
    return "\n".join(L) + "\n"


def plot(data, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.2))
    counts = sorted({r["threads"] for r in data["rows"]})
    ax.plot(counts, counts, ":", color="grey", label="linear")
    for name, rs in _by_workload(data["rows"]).items():
        rs = sorted(rs, key=lambda r: r["threads"])
        line, = ax.plot([r["threads"] for r in rs], [r["speedup"] for r in rs], "o-", label=name)
        if name in GO_T16:
            ax.plot([16], [GO_T16[name][1]], "x", color=line.get_color(), markersize=9)
    ax.set_xlabel("threads (T)")
    ax.set_ylabel("speed-up over T=1")
    ax.set_title(f"match_many on {data['cpus']} CPUs (x: Go sublist at T=16)")
    ax.set_xticks(counts)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", nargs="?", help="bench/scaling.sh's scaling.json")
    ap.add_argument("--machine", default="the many-core machine")
    ap.add_argument("--command", default="bench/scaling.sh WHEEL 1,2,4,8,16 light,hot1k,heavy,light1m,light10m 3")
    ap.add_argument("--from-kept", action="store_true", help="rewrite from docs/benchmarks/scaling.json")
    ap.add_argument("--earlier", help="another run's scaling.json, its T=16 speed-ups beside these")
    ap.add_argument("--earlier-label", default="an earlier run")
    ap.add_argument("--earlier-note", default="")
    a = ap.parse_args()
    kept = os.path.join(OUT, "scaling.json")
    if a.from_kept:
        with open(kept) as f:
            data = json.load(f)
    else:
        if not a.json:
            ap.error("give scaling.json, or --from-kept")
        with open(a.json) as f:
            data = json.load(f)
        data["machine"], data["command"] = a.machine, a.command
        if a.earlier:
            with open(a.earlier) as f:
                data["earlier"] = dict(json.load(f), label=a.earlier_label, note=a.earlier_note)
        with open(kept, "w") as f:
            json.dump(data, f, indent=1)
    with open(os.path.join(OUT, "scaling.md"), "w", encoding="utf-8") as f:
        f.write(markdown(data, data.get("machine", a.machine), data.get("command", a.command)))
    plot(data, os.path.join(OUT, "scaling.png"))
    print(f"wrote {os.path.join(OUT, 'scaling.md')} and scaling.png")


if __name__ == "__main__":
    main()
