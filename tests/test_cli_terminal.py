"""The command line's stderr, its options and its early errors (issue 34),
without a JVM: the progress line under a pseudo-terminal and off one, help
on every option, `fanout`'s input errors found before Spark starts, the
--schema parser and the CSV id columns' inference, and no placeholder left
in docs/."""
import argparse
import io
import json
import os
import re
import sys
import threading

import pytest

from cli_errors import PREFIX, one_error_line
from topicmatch import cli
from topicmatch.cli import common, fanout as cmd_fanout, fanout_schema, match as cmd_match

ROOT = os.path.join(os.path.dirname(__file__), "..")


# -- a terminal -------------------------------------------------------------

def _render(raw):
    """What a terminal shows for `raw`: each line with its carriage returns
    applied (a \\r moves back to the line's start; later text overwrites)."""
    shown = []
    for line in raw.replace("\r\n", "\n").split("\n"):
        cells, col = [], 0
        for ch in line:
            if ch == "\r":
                col = 0
                continue
            if col < len(cells):
                cells[col] = ch
            else:
                cells.append(ch)
            col += 1
        shown.append("".join(cells).rstrip())
    return [s for s in shown if s]


class _Pty:
    """A pseudo-terminal: `stream` (its slave side, a tty) for the code under
    test, everything written to it collected from the master side."""

    def __init__(self):
        import pty
        self.master, slave = pty.openpty()
        self.stream = os.fdopen(slave, "w", buffering=1)
        self.chunks = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            self.chunks.append(data)

    def close(self):
        self.stream.close()             # the master then reads EOF (or EIO)
        self.reader.join(10)
        os.close(self.master)
        return b"".join(self.chunks).decode("utf-8")


def _match_files(tmp_path, n=3000):
    fp, sp = tmp_path / "filters.txt", tmp_path / "subjects.txt"
    fp.write_text("orders.*\nbilling.>\n")
    sp.write_text("".join(("a..b" if i % 50 == 7 else f"orders.o{i}") + "\n" for i in range(n)))
    return str(fp), str(sp)


def test_match_progress_and_rejects_on_a_terminal_never_share_a_line(tmp_path, monkeypatch, capsys):
    pytest.importorskip("pty")
    monkeypatch.setattr(cmd_match, "PROGRESS_AFTER", 0.0)
    monkeypatch.setattr(cmd_match, "PROGRESS_EVERY", 0.0)
    monkeypatch.setattr(common, "MATCH_BLOCK_BYTES", 512)      # a progress line between rejects
    fp, sp = _match_files(tmp_path)
    term = _Pty()
    assert term.stream.isatty()
    monkeypatch.setattr(sys, "stderr", term.stream)
    try:
        rc = cli.main(["match", "--filters-file", fp, "--subjects", sp])
    finally:
        monkeypatch.undo()
        raw = term.close()
    assert rc == cli.EXIT_REJECTED
    assert "\rtopicmatch match: " in raw and "ETA" in raw            # drawn on the terminal
    shown = _render(raw)
    rejects = [ln for ln in shown if " rejected: " in ln]
    assert len(rejects) == 60
    assert all(re.fullmatch(rf"topicmatch: {re.escape(sp)} line \d+: rejected: .*empty token.*",
                            ln) for ln in rejects), rejects[:3]
    # every line shown is a message: no progress text left before or after one
    assert all(ln.startswith("topicmatch: ") or ln.startswith("topicmatch match: 3,000 subjects = ")
               for ln in shown), [ln for ln in shown if "ETA" in ln][:3]
    assert shown[-1].startswith("topicmatch match: 3,000 subjects = ")


def test_match_off_a_terminal_has_no_progress_only_capped_rejects_and_the_summary(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cmd_match, "PROGRESS_AFTER", 0.0)
    monkeypatch.setattr(cmd_match, "PROGRESS_EVERY", 0.0)
    monkeypatch.setattr(common, "MAX_REJECT_LINES", 100)
    fp, sp = _match_files(tmp_path, n=10_000)                  # 200 rejected
    assert cli.main(["match", "--filters-file", fp, "--subjects", sp]) == cli.EXIT_REJECTED
    err = capsys.readouterr().err
    assert "\r" not in err and "ETA" not in err
    lines = err.splitlines()
    assert len(lines) == 102
    assert all(" rejected: " in ln for ln in lines[:100])
    assert lines[100] == f"topicmatch: {sp}: 100 more rejected subjects not shown"
    assert lines[101].startswith("topicmatch match: 10,000 subjects = ")


def test_the_writer_clears_the_progress_line_before_a_message():
    class Tty(io.StringIO):
        def isatty(self):
            return True
    out = Tty()
    err = common.Stderr(out)
    err.status("working 10%")
    err.line("topicmatch: x line 3: rejected: why")
    err.status("working 20%")
    print("topicmatch: error: boom", file=err)                    # print() through it too
    assert _render(out.getvalue()) == ["topicmatch: x line 3: rejected: why", "topicmatch: error: boom"]
    off = common.Stderr(io.StringIO())
    off.status("working")
    off.line("message")
    assert off.stream.getvalue() == "message\n"


def test_spark_progress_draws_through_the_writer(monkeypatch):
    """topicmatch.spark.Progress given the command line's writer: one line
    redrawn in place (a terminal), cleared on exit; none off a terminal."""
    pytest.importorskip("pyspark")
    from topicmatch.spark import progress as sp

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sp, "is_connect", lambda spark: False)
    for stream, drawn in ((Tty(), True), (io.StringIO(), False)):
        err = common.Stderr(stream)
        p = sp.Progress(object(), out=err, interval=0.001, label="matching")
        texts = iter(["  [  0.1 s] matching: stage 1, 1/4 tasks done, 2 running",
                      "  [  0.2 s] matching: stage 1, 3/4 tasks done, 1 running"])
        monkeypatch.setattr(p, "line", lambda: next(texts, None))
        with p:
            while p.lines < 2:
                pass
            err.line("topicmatch: a message")
        raw = stream.getvalue()
        assert ("\r[  0.1 s] matching: stage 1" in raw) is drawn
        assert _render(raw) == ["topicmatch: a message"]
        assert err.width == 0


# -- the parser -------------------------------------------------------------

def _actions(parser):
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from ((f"{name} {x}", y) for x, y in _actions(sub))
        elif a.option_strings:
            yield "/".join(a.option_strings), a


def test_every_option_has_help():
    missing = [name for name, a in _actions(cli.build_parser())
               if not a.help or a.help == argparse.SUPPRESS]
    assert not missing, missing


@pytest.mark.parametrize("value", ["-1", "nan", "x"])
def test_a_bad_progress_interval_is_a_usage_error(value, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["fanout", "--events", "e.csv", "--subs", "s.csv", "--out", "o", "--progress", value])
    assert e.value.code == 2 and "expected a number of seconds" in capsys.readouterr().err


# -- fanout: input errors before the JVM --------------------------------------

@pytest.fixture
def no_jvm(monkeypatch):
    """A fan-out that gets as far as starting Spark fails the test."""
    def session(args):
        raise AssertionError("the JVM was started")
    monkeypatch.setattr(cmd_fanout, "session", session)


def _error(capsys, argv):
    return one_error_line(capsys, argv)[len(PREFIX):]


def _inputs(tmp_path):
    ev = tmp_path / "events.csv"
    ev.write_text("\ufeffevent_id,subject,device\n1,a.b,d1\n2,a.c,d2\n")
    subs = tmp_path / "subs.csv"
    subs.write_text("sub_id,filter,queue\n1,a.*,\n")
    return str(ev), str(subs)


def test_fanout_input_errors_come_before_the_jvm(tmp_path, capsys, no_jvm):
    ev, subs = _inputs(tmp_path)
    base = ["fanout", "--out", str(tmp_path / "out"), "--subs", subs]

    msg = _error(capsys, base + ["--events", ev, "--subject-col", "topic"])
    assert msg == f"{ev}: the events table has no column 'topic' (columns: event_id, subject, device)"
    msg = _error(capsys, base + ["--events", ev, "--key-col", "site"])
    assert "no column 'site'" in msg
    msg = _error(capsys, base + ["--events", ev, "--schema", "event_id BIGINT, subject STRNG, device STRING"])
    assert msg == "--schema 'event_id BIGINT, subject STRNG, device STRING': unknown type 'STRNG'"
    msg = _error(capsys, base + ["--events", ev, "--schema", "event_id BIGINT, subject STRING"])
    assert "the header of" in msg and "event_id, subject, device" in msg
    msg = _error(capsys, base + ["--events", ev, "--schema", "event_id BIGINT, subject INT, device STRING"])
    assert msg == f"{ev}: events column 'subject' has type int, expected string"
    msg = _error(capsys, base + ["--events", ev, "--master", "nope://x"])
    assert msg.startswith("--master 'nope://x': expected local")

    js = tmp_path / "events.jsonl"
    js.write_text(json.dumps({"event_id": 1, "subject": 5}) + "\n")
    msg = _error(capsys, base + ["--events", str(js)])
    assert msg == f"{js}: events column 'subject' has type bigint, expected string"
    msg = _error(capsys, base + ["--events", str(js), "--subject-col", "topic"])
    assert msg == (f"{js}: the events table has no column 'topic' in its first 1 line "
                   "(columns: event_id, subject)")

    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    pqf = tmp_path / "events.parquet"
    pq.write_table(pa.table({"event_id": [1], "subject": pa.array(["a"]).dictionary_encode(),
                             "tags": [["x"]]}), str(pqf))
    msg = _error(capsys, base + ["--events", str(pqf), "--schema", "subject STRING"])
    assert msg.startswith("--schema is for CSV and JSON events")
    msg = _error(capsys, base + ["--events", str(pqf), "--subject-col", "event_id"])
    assert msg == f"{pqf}: events column 'event_id' has type bigint, expected string"
    msg = _error(capsys, base + ["--events", str(pqf), "--key-col", "tags"])
    assert "column 'tags' has type array<string>, expected a string, number" in msg

    bad_subs = tmp_path / "bad_subs.csv"
    bad_subs.write_text("sub_id,topic\n1,a.*\n")
    msg = _error(capsys, ["fanout", "--out", str(tmp_path / "out"), "--events", ev,
                          "--subs", str(bad_subs)])
    assert msg == f"{bad_subs}: the subscriptions table has no column 'filter' (columns: sub_id, topic)"


def test_a_valid_run_gets_as_far_as_starting_spark(tmp_path, capsys, no_jvm):
    ev, subs = _inputs(tmp_path)
    with pytest.raises(AssertionError, match="the JVM was started"):
        cli.main(["fanout", "--out", str(tmp_path / "out"), "--subs", subs, "--events", ev,
                  "--schema", "event_id BIGINT, subject STRING, device STRING", "--key-col", "device"])


# -- --schema and the CSV id columns ------------------------------------------

def test_parse_ddl():
    p = fanout_schema.parse_ddl
    assert p("event_id BIGINT, subject STRING") == [("event_id", "bigint"), ("subject", "string")]
    assert p("a long not null comment 'x, y', `b c` decimal(10, 2), d: array<map<string,int>>,"
             " e struct<x:int,y:varchar(3)>") == [
        ("a", "bigint"), ("b c", "decimal(10,2)"), ("d", "array<map<string,int>>"),
        ("e", "struct<x:int,y:string>")]
    assert p("struct<a:int>") == [("a", "int")]
    for bad, why in [("", "empty schema"), ("a", "expected a type, found the end"),
                     ("a int,", "expected a column name, found the end"),
                     ("a int, a string", "column 'a' appears twice"),
                     ("a array<int", "expected '>', found the end"), ("a int;", "unexpected ';'")]:
        with pytest.raises(ValueError, match=re.escape(why)):
            p(bad)


def _nested(kind, depth):
    """A column whose type nests `depth` levels of `kind` around an int."""
    open_, close = {"array": ("array<", ">"), "map": ("map<string,", ">"),
                    "struct": ("struct<x:", ">")}[kind]
    return "a " + open_ * depth + "int" + close * depth


@pytest.mark.parametrize("kind", ["array", "map", "struct"])
def test_parse_ddl_limits_the_depth(kind):
    """Issue 47 D7: the parser descends a frame per level; 5,000 levels
    escaped as a RecursionError.  Now MAX_SCHEMA_DEPTH levels parse, one
    more is a ValueError naming the limit and where it was passed."""
    limit = fanout_schema.MAX_SCHEMA_DEPTH
    assert fanout_schema.parse_ddl(_nested(kind, limit))[0][0] == "a"
    for depth in (limit + 1, 5000, 100_000):
        with pytest.raises(ValueError, match=rf"^types nested more than {limit} deep \(at character \d+\)$"):
            fanout_schema.parse_ddl(_nested(kind, depth))
    # The limit is the types' depth, not the schema's length: many shallow
    # columns are fine, and a top-level struct<...> counts as none.
    wide = ", ".join(f"c{i} {_nested(kind, limit)[2:]}" for i in range(50))
    assert len(fanout_schema.parse_ddl(wide)) == 50
    assert len(fanout_schema.parse_ddl(f"struct<{wide.replace(' ', ':', 1)}>")) >= 1


def test_deep_schema_is_one_error_line(tmp_path, capsys, no_jvm):
    """The command line: exit 2 and one line, the schema quoted by its start."""
    ev, subs = _inputs(tmp_path)
    deep = _nested("array", 5000)
    msg = _error(capsys, ["fanout", "--out", str(tmp_path / "out"), "--subs", subs, "--events", ev,
                          "--schema", deep])
    limit = fanout_schema.MAX_SCHEMA_DEPTH
    assert msg == (f"--schema {deep[:fanout_schema.SCHEMA_QUOTE_CHARS]!r}... ({len(deep):,} characters): "
                   f"types nested more than {limit} deep (at character {3 + limit * len('array<')})")


def _csv(tmp_path, text, name="ev.csv"):
    f = tmp_path / name
    f.write_text(text)
    return str(f)


def test_an_id_column_is_int64_only_when_every_value_is_a_canonical_integer(tmp_path):
    pytest.importorskip("pyarrow")
    ids = fanout_schema.integer_id_columns
    hdr = ["event_id", "subject", "device_id", "id", "count"]
    path = _csv(tmp_path, "event_id,subject,device_id,id,count\n"
                          "1,12,007,-5,3\n,34,8,0,4\n9223372036854775807,56,9,1,5\n")
    # device_id has "007" (not canonical); count is not an id column; subject never
    assert ids(path, hdr, exclude=("subject",)) == ["event_id", "id"]
    for bad in ["1.0", "+1", " 1", "-0", "9223372036854775808", "1e3", "x"]:
        p = _csv(tmp_path, f"event_id,subject\n1,a\n{bad},b\n", "bad.csv")
        assert ids(p, ["event_id", "subject"]) == [], bad
    empty = _csv(tmp_path, "event_id,subject\n,a\n", "empty.csv")
    assert ids(empty, ["event_id", "subject"]) == []            # no value at all: a string
    import gzip
    gz = tmp_path / "ev.csv.gz"
    gz.write_bytes(gzip.compress(b"event_id,subject\n1,a\n2,b\n"))
    assert ids(str(gz), ["event_id", "subject"]) == ["event_id"]


# -- docs ---------------------------------------------------------------------

def test_no_placeholder_is_left_in_the_docs():
    left = []
    for d, _, files in os.walk(os.path.join(ROOT, "docs")):
        for f in files:
            if f.endswith(".md"):
                text = open(os.path.join(d, f), encoding="utf-8").read()
                left += [f"{f}: {m}" for m in re.findall(r"@@[A-Z0-9_]+@@", text)]
    for f in ("README.md", "CHANGELOG.md"):
        left += [f"{f}: {m}" for m in re.findall(r"@@[A-Z0-9_]+@@",
                                                   open(os.path.join(ROOT, f), encoding="utf-8").read())]
    assert not left, left


# -- the JVM's stderr -----------------------------------------------------------

def test_the_jvm_incubator_warning_is_dropped_and_the_rest_passes():
    pytest.importorskip("pyspark")
    from topicmatch.spark.session import forward_jvm_stderr
    r_in, w_in = os.pipe()
    r_out, w_out = os.pipe()
    t = threading.Thread(target=forward_jvm_stderr, args=(r_in, w_out))
    t.start()
    os.write(w_in, b"WARNING: Using incubator modules: jdk.incubator.vector\nan err")
    os.write(w_in, b"or line\nNOTE: Picked up JDK_JAVA_OPTIONS: -XX:+UseSerialGC\n")
    os.write(w_in, b"Picked up JAVA_TOOL_OPTIONS: -Xss4m\nWARNING: something else\nlast, no newline")
    os.close(w_in)
    t.join(10)
    os.close(w_out)
    with os.fdopen(r_out, "rb") as f:
        got = f.read()
    assert got == b"an error line\nWARNING: something else\nlast, no newline"
