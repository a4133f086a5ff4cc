"""`topicmatch match` at scale: input read and output written in blocks, a
progress line (terminal only, after a while), an honest summary, and input
errors that name the file and line."""
import io
import re
import subprocess
import sys

import pytest

from topicmatch import _reference as R
from topicmatch import cli
from topicmatch.cli import common, match as cmd_match

FILTERS = ["orders.*.created", "orders.>", "orders.> workers", "billing.*", "x.y.z"]


def _subjects(n):
    pool = ["orders.eu.created", "orders.us.paid", "billing.x", "nothing.here", "a..b", "x.y.z"]
    return [pool[i % len(pool)] if i % 7 else f"orders.r{i}.created" for i in range(n)]


def _expected(subjects, queues="all"):
    ref = R.ReferenceSublist("nats")
    for lineno, line in enumerate(FILTERS, 1):
        f, *q = line.split()
        ref.insert(f, lineno, q[0] if q else None)
    lines = []
    for s in subjects:
        if R.is_valid_subject(s, "nats"):
            m = ref.match(s)
            lines += [(s, i) for i in m.subs + [i for _, _, members in m.groups for i in members]]
    return sorted(lines)


def _files(tmp_path, subjects, data=None):
    fp, sp = tmp_path / "filters.txt", tmp_path / "subjects.txt"
    fp.write_text("".join(f + "\n" for f in FILTERS))
    if data is None:
        sp.write_text("".join(s + "\n" for s in subjects))
    else:
        sp.write_bytes(data)
    return str(fp), str(sp)


def _pairs(out):
    return sorted((ln.split("\t")[0], int(ln.split("\t")[1])) for ln in out.splitlines())


def test_small_blocks_give_the_same_output_and_line_numbers(capsys, tmp_path, monkeypatch):
    subjects = _subjects(5000)
    fp, sp = _files(tmp_path, subjects)
    # exit 3: the run finished, and rejected lines ("a..b")
    assert cli.main(["match", "--filters-file", fp, "--subjects", sp, "--queues", "all"]) == cli.EXIT_REJECTED
    whole = capsys.readouterr()
    monkeypatch.setattr(common, "MATCH_BLOCK_BYTES", 100)    # ~6 subjects per block
    assert cli.main(["match", "--filters-file", fp, "--subjects", sp, "--queues", "all"]) == cli.EXIT_REJECTED
    blocks = capsys.readouterr()
    assert _pairs(blocks.out) == _pairs(whole.out) == _expected(subjects)
    # rejected subjects are named by their line in the file, across blocks
    bad = [f"line {i + 1}: rejected" for i, s in enumerate(subjects) if s == "a..b"][:100]
    assert [ln.split("topicmatch: " + sp + " ")[1][:len(bad[0])] for ln in blocks.err.splitlines()
            if "rejected:" in ln][:3] == [b[:len(bad[0])] for b in bad[:3]]
    assert blocks.err.count(": rejected: ") == len(bad)
    n_bad = sum(s == "a..b" for s in subjects)
    assert f"{n_bad - 100:,} more rejected subjects not shown" in blocks.err
    assert f"+ {n_bad:,} rejected;" in blocks.err.splitlines()[-1]


class _TrackedInput(io.RawIOBase):
    """stdin whose reads are counted, to see when output was written."""

    def __init__(self, data):
        self.data, self.pos = data, 0

    def readable(self):
        return True

    def readinto(self, b):
        n = min(len(b), len(self.data) - self.pos)
        b[:n] = self.data[self.pos:self.pos + n]
        self.pos += n
        return n


def test_output_is_written_while_the_input_is_still_being_read(tmp_path, monkeypatch, capsys):
    subjects = _subjects(3000)
    data = "".join(s + "\n" for s in subjects).encode()
    fp, _ = _files(tmp_path, subjects)
    raw = _TrackedInput(data)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(raw, 64)))
    read_at_write = []

    class Out(io.StringIO):
        def write(self, s):
            read_at_write.append(raw.pos)
            return super().write(s)

    out = Out()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(common, "MATCH_BLOCK_BYTES", 1024)
    assert cli.main(["match", "--filters-file", fp, "--subjects", "-", "--queues", "all"]) == cli.EXIT_REJECTED
    assert _pairs(out.getvalue()) == _expected(subjects)
    assert len(read_at_write) > 10
    assert read_at_write[0] < len(data) // 10       # the first block's lines left early


def test_last_line_without_newline_and_crlf(capsys, tmp_path):
    fp, sp = _files(tmp_path, None, b"x.y.z\r\norders.eu.created\r\nbilling.q")
    assert cli.main(["match", "--filters-file", fp, "--subjects", sp, "--queues", "all"]) == 0
    assert _pairs(capsys.readouterr().out) == _expected(["x.y.z", "orders.eu.created", "billing.q"])


def test_binary_subjects_are_rejected_lines_and_the_run_goes_on(capsys, tmp_path):
    fp, sp = _files(tmp_path, ["a.b"])
    with open(sp, "wb") as f:
        f.write(b"x.y.z\nc.d\nPAR1\x15\x04\x00\x00binary")
    assert cli.main(["match", "--filters-file", fp, "--subjects", sp]) == cli.EXIT_REJECTED
    out, err = capsys.readouterr()
    assert out == "x.y.z\t5\tx.y.z\n"
    assert err.splitlines()[0] == (f"topicmatch: {sp} line 3: rejected: invalid subject "
                                   "'PAR1\\x15\\x04\\x00\\x00binary': NUL byte (at byte 6)")
    assert "3 subjects = 1 delivered + 1 unmatched + 1 rejected" in err


def test_a_binary_subscriptions_file_names_its_line(capsys, tmp_path):
    fp, sp = _files(tmp_path, ["a.b"])
    with open(fp, "wb") as f:
        f.write(b"a.b\nc.d\nPAR1\x15\x04\x00\x00binary")
    assert cli.main(["match", "--filters-file", fp, "--subjects", sp]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"topicmatch: error: subscriptions {fp} line 3: ")


def test_undecodable_subject_lines_are_rejected_and_the_run_goes_on(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(common, "MATCH_BLOCK_BYTES", 8)        # the bad byte is in a later block
    fp, sp = _files(tmp_path, None, b"a.b\nc.d\nx.y.z\ncaf\xe9.x\nx.y.z\n")
    assert cli.main(["match", "--filters-file", fp, "--subjects", sp]) == cli.EXIT_REJECTED
    out, err = capsys.readouterr()
    assert out == "x.y.z\t5\tx.y.z\n" * 2
    assert err.splitlines()[0] == f"topicmatch: {sp} line 4: rejected: not UTF-8 (byte 0xe9 at byte 4 of the line)"
    assert "5 subjects = 2 delivered + 2 unmatched + 1 rejected" in err


def test_undecodable_subscriptions_line_names_its_line(capsys, tmp_path):
    fp, sp = _files(tmp_path, ["a.b"])
    with open(fp, "wb") as f:
        f.write(b"a.b\ncaf\xe9.x\n")
    assert cli.main(["match", "--filters-file", fp, "--subjects", sp]) == 2
    assert capsys.readouterr().err == (f"topicmatch: error: subscriptions {fp} line 2: not UTF-8 "
                                       "(byte 0xe9 at byte 4 of the line)\n")


def test_summary_gives_wall_time_and_the_matching_share(capsys, tmp_path):
    fp, sp = _files(tmp_path, _subjects(2000))
    assert cli.main(["match", "--filters-file", fp, "--subjects", sp]) == cli.EXIT_REJECTED
    summary = capsys.readouterr().err.strip().splitlines()[-1]
    m = re.search(r"in (\d+\.\d\d) s wall: matching (\d+\.\d\d) s \((\d+)%\), index (\d+\.\d\d) s, "
                  r"reading and writing (\d+\.\d\d) s$", summary)
    assert m, summary
    wall, match, share, index, rest = (float(x) for x in m.groups())
    assert match <= wall and index <= wall
    assert abs(wall - (match + index + rest)) <= 0.02


class _Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


class _Stream(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


def test_progress_waits_two_seconds_then_shows_rows_rate_and_eta():
    clock, stream = _Clock(), _Stream(tty=True)
    p = cmd_match.MatchProgress(1000, stream, "auto", clock)
    clock.t += 1.0
    p.update(10_000, 100)
    assert stream.getvalue() == ""                          # a short run stays quiet
    clock.t += 1.5
    p.update(25_000, 250)                                   # 2.5 s: a quarter done
    line = stream.getvalue()
    assert line == "\rtopicmatch match: 25,000 subjects, 10,000/s, 25%, ETA 0:00:08"
    clock.t += 0.1
    p.update(26_000, 260)
    assert stream.getvalue() == line                        # not redrawn more than 4 times a second
    clock.t += 0.4
    p.update(30_000, 300)
    assert stream.getvalue().endswith("\rtopicmatch match: 30,000 subjects, 10,000/s, 30%, ETA 0:00:07")
    p.finish()
    assert stream.getvalue().endswith("\r" + " " * (len(line) - 1) + "\r")


def test_progress_is_quiet_when_stderr_is_not_a_terminal():
    clock, stream = _Clock(), _Stream(tty=False)
    p = cmd_match.MatchProgress(None, stream, "auto", clock)
    clock.t += 60
    p.update(1, 1)
    p.finish()
    assert stream.getvalue() == ""
    forced = cmd_match.MatchProgress(None, stream, "always", clock)
    clock.t += 60
    forced.update(600, 1)
    assert stream.getvalue() == "\rtopicmatch match: 600 subjects, 10/s"     # no size: no ETA


def test_progress_end_to_end(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(cmd_match, "PROGRESS_AFTER", 0.0)
    monkeypatch.setattr(cmd_match, "PROGRESS_EVERY", 0.0)
    monkeypatch.setattr(common, "MATCH_BLOCK_BYTES", 4096)
    fp, sp = _files(tmp_path, _subjects(3000))
    assert cli.main(["match", "--filters-file", fp, "--subjects", sp, "--progress", "always"]) == cli.EXIT_REJECTED
    err = capsys.readouterr().err
    assert "\rtopicmatch match: 3,000 subjects, " in err and ", 100%, ETA 0:00:00" in err
    assert cli.main(["match", "--filters-file", fp, "--subjects", sp]) == cli.EXIT_REJECTED   # auto, not a terminal
    assert "\r" not in capsys.readouterr().err


def test_python_m_topicmatch_match(tmp_path):
    fp, sp = _files(tmp_path, ["x.y.z", "billing.q"])
    r = subprocess.run([sys.executable, "-m", "topicmatch", "match", "--filters-file", fp, "--subjects", sp],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "x.y.z\t5\tx.y.z\nbilling.q\t4\tbilling.*\n"
    assert r.stderr.startswith("topicmatch match: 2 subjects = 2 delivered + 0 unmatched + 0 rejected")


def test_match_amqp_dialect(capsys, tmp_path):
    """--dialect amqp: '#' anywhere, empty words, the empty routing key (an
    empty line), one delivery per sub_id, and the 255-byte limit."""
    fp, sp = tmp_path / "bindings.txt", tmp_path / "keys.txt"
    bindings = ["a.#.b", "#\tworkers", "*.a", "x.#.#.y", "a.#", "\t", "\tempties"]
    keys = ["a.b", "a.x.y.b", ".a", "", "x.y", "z" * 256, "q"]
    fp.write_text("".join(b + "\n" for b in bindings))
    sp.write_text("".join(k + "\n" for k in keys))
    assert cli.main(["match", "--dialect", "amqp", "--filters-file", str(fp), "--subjects", str(sp),
                     "--queues", "all"]) == cli.EXIT_REJECTED
    out, err = capsys.readouterr()
    ref = R.ReferenceSublist("amqp")
    for lineno, line in enumerate(bindings, 1):
        f, *q = line.split("\t")
        ref.insert(f, lineno, q[0] if q and q[0] else None)
    want = sorted((k, i) for k in keys if R.is_valid_subject(k, "amqp")
                  for m in [ref.match(k)] for i in m.subs + [i for _, _, ms in m.groups for i in ms])
    assert _pairs(out) == want
    assert ("a.b", 5) in want and ("a.b", 1) in want and ("", 2) in want
    # a lone tab binds the empty key (line 6), a tab and a queue too (line 7)
    assert ("", 6) in want and ("", 7) in want and ("a.b", 6) not in want
    assert "line 6: rejected:" in err and "longer than 255 bytes" in err
    assert "7 subjects = 6 delivered + 0 unmatched + 1 rejected" in err   # "#" takes "q"
