"""`topicmatch fanout` and `topicmatch demo` end to end: CSV, JSON lines and Parquet
inputs, the reconciliation line, the rejected output, and the one-line errors.

Most runs call cli.main() in this process (it reuses the session fixture's
Spark); two run the installed command in a subprocess, as a user would."""
import csv
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from cli_errors import one_error_line
from topicmatch import cli
from spark_expect import NATS_SUBJECTS, NATS_SUBS, Expected, events_rows, random_case

pytestmark = pytest.mark.spark

RECONCILE = re.compile(r"events in\s+([\d,]+) = ([\d,]+) delivered \+ ([\d,]+) unmatched \+ "
                       r"([\d,]+) rejected\s+\[reconciles\]")
DELIVERIES = re.compile(r"deliveries\s+([\d,]+) rows?")


def _num(s):
    return int(s.replace(",", ""))


def _write(path, fmt, columns, rows):
    if fmt == "csv":
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(columns)
            w.writerows([["" if v is None else v for v in r] for r in rows])
    elif fmt == "json":
        with open(path, "w") as f:
            for r in rows:
                f.write(json.dumps(dict(zip(columns, r))) + "\n")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq
        pq.write_table(pa.Table.from_pylist([dict(zip(columns, r)) for r in rows]), path)


def _inputs(tmp_path, fmt):
    subs, subjects = random_case("nats", n_events=200, seed=5)
    subs = subs + NATS_SUBS
    if fmt == "csv":  # an empty CSV field reads as null
        subjects = [None if s == "" else s for s in subjects + NATS_SUBJECTS]
    else:
        subjects = subjects + NATS_SUBJECTS
    events = events_rows(subjects)
    ext = {"csv": "csv", "json": "jsonl", "parquet": "parquet"}[fmt]
    ev_path, sub_path = str(tmp_path / f"events.{ext}"), str(tmp_path / f"subs.{ext}")
    _write(ev_path, fmt, ["event_id", "subject", "device", "payload"], events)
    _write(sub_path, fmt, ["sub_id", "filter", "queue"], subs)
    return ev_path, sub_path, Expected("nats", subs, events)


def _read_parquet_dir(path):
    import pyarrow.parquet as pq
    return pq.read_table(path)


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_fanout_command(spark, tmp_path, capsys, fmt):
    ev_path, sub_path, exp = _inputs(tmp_path, fmt)
    out = str(tmp_path / "out")
    rc = cli.main(["fanout", "--events", ev_path, "--subs", sub_path, "--out", out,
                   "--master", "local[2]", "--queues", "all"])
    stdout = capsys.readouterr().out
    assert rc == cli.EXIT_REJECTED, stdout         # the events include null and invalid subjects
    m = RECONCILE.search(stdout)
    assert m, stdout
    c = exp.counts("all")
    assert [_num(x) for x in m.groups()] == [c["events"], c["delivered"], c["unmatched"], c["rejected"]]
    n_deliveries = sum(len(exp.ids(e, "all")) for e in exp.plain)
    assert _num(DELIVERIES.search(stdout).group(1)) == n_deliveries
    assert re.search(r"time\s+[\d.]+ s: [\d,.]+ events/s, [\d,.]+ deliveries/s", stdout)

    deliveries = _read_parquet_dir(os.path.join(out, "deliveries"))
    assert deliveries.num_rows == n_deliveries
    # (Spark orders JSON fields by name)
    assert sorted(deliveries.column_names[:-1]) == ["device", "event_id", "payload", "subject"]
    assert deliveries.column_names[-1] == "sub_id"
    got = {}
    for e, s in zip(deliveries.column("event_id").to_pylist(), deliveries.column("sub_id").to_pylist()):
        got.setdefault(int(e), []).append(s)  # (CSV columns read as strings)
    assert {e: sorted(v) for e, v in got.items()} == {e: exp.ids(e, "all") for e in exp.plain
                                                      if exp.ids(e, "all")}
    rejected = _read_parquet_dir(os.path.join(out, "rejected")).to_pylist()
    assert sorted(int(r["event_id"]) for r in rejected) == sorted(exp.rejected)
    assert all(r["error"] for r in rejected)
    assert {r["error"] for r in rejected if r["subject"] is None} == {"null subject"}
    assert {r["error"] for r in rejected if r["subject"] == "orders..x"} == {"empty token (at byte 7)"}

    # the outputs exist now: a second run refuses to overwrite them unless told to
    rc = cli.main(["fanout", "--events", ev_path, "--subs", sub_path, "--out", out])
    err = capsys.readouterr().err
    assert rc == 2 and "already exists (use --overwrite)" in err


def test_format_flag_and_key(spark, tmp_path, capsys):
    ev_path, sub_path, exp = _inputs(tmp_path, "json")
    odd = str(tmp_path / "events.data")
    shutil.copy(ev_path, odd)
    out = str(tmp_path / "out")
    assert cli.main(["fanout", "--events", odd, "--subs", sub_path, "--out", out]) == 2
    assert "use --format" in capsys.readouterr().err
    assert cli.main(["fanout", "--events", odd, "--format", "json", "--subs", sub_path,
                     "--out", out, "--key-col", "device", "--progress", "0.05"]) == cli.EXIT_REJECTED
    captured = capsys.readouterr()
    stdout = captured.out
    assert "key=device" in stdout and RECONCILE.search(stdout)
    # the breakdown and the job count; off a terminal, no progress line
    assert re.search(r"\d+ Spark jobs", stdout) and "read events + match + write deliveries" in stdout
    assert "matching: stage" not in captured.err and "\r" not in captured.err, captured.err


def test_progress_on_a_terminal_is_cleared_before_any_message(spark, tmp_path, capsys, monkeypatch):
    """Under a pseudo-terminal: the status tracker's line is drawn in place
    and cleared before the rejected lines that follow it are named."""
    pytest.importorskip("pty")
    from test_cli_terminal import _Pty, _render
    ev = tmp_path / "events.jsonl"
    ev.write_text("".join(json.dumps({"event_id": i, "subject": f"orders.o{i}"}) + "\n"
                          for i in range(2000)) + '{"event_id": 2000, "subject": \n')
    subs = tmp_path / "subs.csv"
    subs.write_text("sub_id,filter\n1,orders.*\n")
    term = _Pty()
    monkeypatch.setattr(sys, "stderr", term.stream)
    try:
        rc = cli.main(["fanout", "--events", str(ev), "--subs", str(subs), "--out",
                       str(tmp_path / "out"), "--progress", "0.01"])
    finally:
        monkeypatch.undo()
        raw = term.close()
    assert rc == cli.EXIT_REJECTED
    assert re.search(r"\r\[\s*[\d.]+ s\] matching: stage \d+, \d+/\d+ tasks done", raw), raw
    assert _render(raw) == [f"topicmatch: {ev} line 2001: rejected: malformed json row: "
                            '{"event_id": 2000, "subject":'], raw     # (trailing space not shown)


_error = one_error_line


def test_user_errors_are_one_line(spark, tmp_path, capsys):
    ev_path, sub_path, _ = _inputs(tmp_path, "csv")
    out = str(tmp_path / "out")
    base = ["fanout", "--out", out]

    msg = _error(capsys, base + ["--events", str(tmp_path / "nope.csv"), "--subs", sub_path])
    assert "nope.csv: no such file or directory" in msg

    msg = _error(capsys, base + ["--events", ev_path, "--subs", sub_path, "--subject-col", "topic"])
    assert ev_path in msg and "no column 'topic'" in msg and "event_id, subject" in msg

    typed = str(tmp_path / "typed.jsonl")
    _write(typed, "json", ["event_id", "subject"], [(1, 5), (2, 6)])
    msg = _error(capsys, base + ["--events", typed, "--subs", sub_path])
    assert "column 'subject' has type bigint, expected string" in msg

    bad_subs = str(tmp_path / "bad_subs.csv")
    _write(bad_subs, "csv", ["sub_id", "filter", "queue"], [(1, "a.*", None), (2, "a.>.b", "q")])
    msg = _error(capsys, base + ["--events", ev_path, "--subs", bad_subs])
    assert (f"{bad_subs}: subscriptions row 2 (sub_id=2, queue='q'): invalid filter 'a.>.b'" in msg), msg

    bad_ids = str(tmp_path / "bad_ids.csv")
    _write(bad_ids, "csv", ["sub_id", "filter"], [(1, "a"), ("seven", "b")])
    msg = _error(capsys, base + ["--events", ev_path, "--subs", bad_ids])
    assert "row 2: sub_id 'seven' is not an integer" in msg

    corrupt = str(tmp_path / "corrupt.parquet")
    with open(corrupt, "wb") as f:
        f.write(b"not parquet at all")
    msg = _error(capsys, base + ["--events", corrupt, "--subs", sub_path])
    assert f"cannot read events {corrupt} as parquet" in msg and "not a Parquet file" in msg


@pytest.mark.parametrize("fmt,sharded", [("csv", True), ("parquet", False)])
def test_fanout_passes_over_the_subscriptions_once(spark, tmp_path, capsys, monkeypatch, fmt,
                                                   sharded):
    """Issue 43: the command line's plan is the fan-out's, so one aggregate
    counts the subscriptions (the plan's statistics job), where the command
    line used to count them itself first, then plan (and count) again."""
    import topicmatch.spark
    from topicmatch.spark import plan as plan_module, shard as shard_module
    if sharded:
        monkeypatch.setattr(topicmatch.spark, "AUTO_SHARD_MIN_SUBS", 0)
    passes = []

    def counted(what, real):
        def f(*a, **k):
            passes.append(what)
            return real(*a, **k)
        return f
    frame = type(spark.range(1))        # (classic Spark's own class, which defines count)
    monkeypatch.setattr(frame, "count", counted("count", frame.count))
    for module in (plan_module, shard_module):
        monkeypatch.setattr(module, "row_stats", counted("statistics", module.row_stats))
    ev_path, sub_path, exp = _inputs(tmp_path, fmt)
    rc = cli.main(["fanout", "--events", ev_path, "--subs", sub_path, "--out", str(tmp_path / "out"),
                   "--queues", "all"])
    stdout = capsys.readouterr().out
    assert rc == cli.EXIT_REJECTED, stdout
    assert passes == ["statistics"], stdout
    assert ("sharded:" in stdout) == sharded, stdout
    c = exp.counts("all")
    m = RECONCILE.search(stdout)
    assert m and [_num(x) for x in m.groups()] == [c["events"], c["delivered"], c["unmatched"],
                                                   c["rejected"]], stdout


def test_a_bad_sub_id_that_spark_read_is_named(spark, tmp_path):
    """A table the command did not read before Spark (a remote one; here
    run_fanout called alone): a string sub_id that is no integer reaches the
    plan as a null, and the error names it as it was written."""
    import io
    from topicmatch.cli.common import CLIError
    from topicmatch.cli.fanout import run_fanout
    ev, subs = tmp_path / "events.csv", tmp_path / "subs.csv"
    ev.write_text("event_id,subject\n1,a\n")
    subs.write_text("sub_id,filter\n1,a\nseven,b\n")
    with pytest.raises(CLIError) as e:
        run_fanout(spark, str(ev), str(subs), str(tmp_path / "out"), out_stream=io.StringIO(),
                   progress=0)
    assert str(e.value) == f"subscriptions {subs}: sub_id 'seven' is not a signed 64-bit integer"


def _command():
    exe = os.path.join(os.path.dirname(sys.executable), "topicmatch")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "topicmatch.cli"]


def _clean_env():
    env = dict(os.environ)
    env.pop("TOPICMATCH_SPARK_LOAD_LOG", None)
    return env


def test_demo_command(tmp_path):
    """What `make demo` runs, small: a fresh process, a fresh JVM, quiet output."""
    p = subprocess.run(_command() + ["demo", "--events", "5000", "--out", str(tmp_path / "demo"),
                                     "--master", "local[2]"],
                       capture_output=True, text=True, timeout=300, env=_clean_env())
    assert p.returncode == 0, p.stdout + p.stderr
    m = RECONCILE.search(p.stdout)
    assert m and _num(m.group(1)) == 5000, p.stdout
    assert _num(m.group(4)) > 0                       # the sample has malformed events
    assert "sticky per device: at most 1 worker" in p.stdout
    # every role of the sample is in the table, the one nothing matches included
    assert re.search(r"^  alert-relay +0 deliveries \(1 subscriber: no event matched\)$", p.stdout, re.M)
    assert not re.search(r"\b1 subscribers\b", p.stdout), p.stdout
    assert "Spark's start-up and plumbing" in p.stdout and "docs/benchmarks.md" in p.stdout
    assert "Traceback" not in p.stderr and "\tat " not in p.stderr, p.stderr
    assert "WARNING: Using incubator modules" not in p.stderr     # the JVM's start-up noise
    assert "Setting default log level" not in p.stderr
    for d in ("deliveries", "rejected"):
        assert os.path.isdir(tmp_path / "demo" / d)


def test_spark_error_in_a_subprocess_is_one_line(tmp_path):
    """An error found inside a Spark job: no JVM stack trace on the terminal."""
    corrupt, subs = tmp_path / "events.parquet", tmp_path / "subs.csv"
    corrupt.write_bytes(b"PAR1 but not really")
    subs.write_text("sub_id,filter\n1,a.>\n")
    p = subprocess.run(_command() + ["fanout", "--events", str(corrupt), "--subs", str(subs),
                                     "--out", str(tmp_path / "out"), "--master", "local[1]"],
                       capture_output=True, text=True, timeout=300, env=_clean_env())
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.splitlines()          # the JVM's incubator warning left out, too
    assert lines == [lines[-1]] and lines[-1].startswith(
        f"topicmatch: error: cannot read events {corrupt} as parquet"), p.stderr


# --- the subscriptions inputs that match and build take, on Spark (issue 48 item 2) ---

SUBS_ROWS = [(11, "orders.*", None), (12, "orders.>", "workers"), (13, "orders.>", "workers"),
             (14, "audit.x", None)]


def _subs_input(tmp_path, capsys, kind):
    """-> the fanout arguments naming the subscriptions SUBS_ROWS as `kind`."""
    ren = tmp_path / "ren.csv"
    ren.write_text("id,topic,grp\n" + "".join(f"{i},{f},{q or ''}\n" for i, f, q in SUBS_ROWS))
    if kind == "renamed":
        return ["--subs", str(ren), "--id-col", "id", "--filter-col", "topic", "--queue-col", "grp"]
    img = tmp_path / "subs.img"
    assert cli.main(["build", "--subs", str(ren), "--id-col", "id", "--filter-col", "topic",
                     "--queue-col", "grp", "-o", str(img)]) == 0
    capsys.readouterr()
    return ["--subs", str(img)]


@pytest.mark.parametrize("kind", ["renamed", "image"])
def test_fanout_takes_renamed_columns_and_images(spark, tmp_path, capsys, kind):
    from topicmatch import Sublist
    ev = tmp_path / "events.csv"
    subjects = ["orders.a", "orders.a.b", "audit.x", "none.x"]
    ev.write_text("event_id,subject\n" + "".join(f"{k},{s}\n" for k, s in enumerate(subjects, 1)))
    out = str(tmp_path / "out")
    rc = cli.main(["fanout", "--events", str(ev), *_subs_input(tmp_path, capsys, kind), "--out", out,
                   "--master", "local[2]", "--queues", "all"])
    stdout = capsys.readouterr().out
    assert rc == 0, stdout
    sl = Sublist("nats")
    for i, f, q in SUBS_ROWS:
        sl.insert(f, i, queue=q)
    r = sl.match_many(subjects, queues="all")
    want = sorted((k, sid) for k in range(1, len(subjects) + 1) for sid in r[k - 1].tolist())
    d = _read_parquet_dir(os.path.join(out, "deliveries"))
    got = sorted(zip(map(int, d.column("event_id").to_pylist()), d.column("sub_id").to_pylist()))
    assert got == want and len(want) == 6
