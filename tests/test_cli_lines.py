"""`topicmatch match`'s line reader never loses a line (issue 23): a BOM is
removed; a line that is not UTF-8, too long or invalid is a counted,
rejected line with its reason and the run goes on; filters are split from
their queue only where the dialect allows; a line of any length is read in
bounded memory; --rejects writes the rejected lines; exit status 3 says
lines were rejected.  Exact stdout and stderr, and counts that reconcile."""
import os
import re
import subprocess
import sys
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from topicmatch import _reference as R
from topicmatch import cli
from topicmatch.cli import common
from examples import examples

SUMMARY = re.compile(r"^topicmatch match: ([\d,]+) subjects? = ([\d,]+) delivered \+ ([\d,]+) unmatched \+ "
                     r"([\d,]+) rejected; ([\d,]+) deliver(?:y|ies) from ([\d,]+) subscriptions? ")


def _run(capsys, tmp_path, subs, subjects, *extra):
    fp, sp = tmp_path / "subs.txt", tmp_path / "subjects.txt"
    fp.write_bytes(subs)
    sp.write_bytes(subjects)
    rc = cli.main(["match", "--filters-file", str(fp), "--subjects", str(sp), *extra])
    out, err = capsys.readouterr()
    lines = err.splitlines()
    m = SUMMARY.match(lines[-1]) if lines else None
    counts = tuple(int(x.replace(",", "")) for x in m.groups()) if m else None
    if counts:
        n, delivered, unmatched, rejected = counts[:4]
        assert n == delivered + unmatched + rejected, lines[-1]
    return rc, out, lines[:-1] if m else lines, counts, str(sp)


def test_a_bom_is_removed_from_both_files(capsys, tmp_path):
    rc, out, err, counts, _ = _run(capsys, tmp_path, b"\xef\xbb\xbfa.b\nc.*\n", b"\xef\xbb\xbfa.b\nc.d\n")
    assert rc == 0 and err == []
    assert out == "a.b\t1\ta.b\nc.d\t2\tc.*\n"
    assert counts[:4] == (2, 2, 0, 0)


def test_a_bom_anywhere_else_is_data(capsys, tmp_path):
    rc, out, err, counts, sp = _run(capsys, tmp_path, b"a.b\n", b"a.b\n\xef\xbb\xbfa.b\n")
    assert rc == 0 and out == "a.b\t1\ta.b\n"            # U+FEFF is a literal in a NATS token
    assert counts[:4] == (2, 1, 1, 0)


def test_non_utf8_and_invalid_lines_are_rejected_with_reasons_and_written(capsys, tmp_path):
    subjects = b"a.b\ncaf\xe9.b\n\nx y\na.b\r\nz.\xff\xfe\n"
    rej = tmp_path / "rejects.txt"
    rc, out, err, counts, sp = _run(capsys, tmp_path, b"a.b\n*.b\n", subjects, "--rejects", str(rej))
    assert rc == cli.EXIT_REJECTED
    assert out == "a.b\t1\ta.b\na.b\t2\t*.b\n" * 2
    assert err == [
        f"topicmatch: {sp} line 2: rejected: not UTF-8 (byte 0xe9 at byte 4 of the line)",
        f"topicmatch: {sp} line 3: rejected: invalid subject '': empty (at byte 0)",
        f"topicmatch: {sp} line 4: rejected: invalid subject 'x y': whitespace (at byte 1)",
        f"topicmatch: {sp} line 6: rejected: not UTF-8 (byte 0xff at byte 3 of the line)",
    ]
    assert counts[:5] == (6, 2, 0, 4, 4)
    assert rej.read_bytes() == b"caf\xe9.b\n\nx y\nz.\xff\xfe\n"


def test_no_rejects_gives_an_empty_rejects_file_and_exit_0(capsys, tmp_path):
    rej = tmp_path / "rejects.txt"
    rc, out, err, counts, _ = _run(capsys, tmp_path, b"a.b\n", b"a.b\nq\n", "--rejects", str(rej))
    assert rc == 0 and rej.read_bytes() == b"" and counts[:4] == (2, 1, 1, 0)


@pytest.mark.parametrize("block", [7, 1000, 4 << 20])
def test_a_too_long_line_is_rejected_and_streamed_to_the_rejects_file(capsys, tmp_path, monkeypatch, block):
    monkeypatch.setattr(common, "MATCH_BLOCK_BYTES", block)
    long1 = b"a." * 40000                               # 80,000 bytes, its own line
    long2 = b"b" * 65536                                # one byte over, the last line, no \n
    ok = b"a." * 32767 + b"b"                           # 65,535 bytes: the longest valid
    rej = tmp_path / "rejects.txt"
    rc, out, err, counts, sp = _run(capsys, tmp_path, b"a.>\n", b"a.b\n" + long1 + b"\n" + ok + b"\nx..y\n"
                                    + long2, "--rejects", str(rej))
    assert rc == cli.EXIT_REJECTED
    assert out == "a.b\t1\ta.>\n" + ok.decode() + "\t1\ta.>\n"
    assert err == [
        f"topicmatch: {sp} line 2: rejected: line too long (80,000 bytes; at most 65,535)",
        f"topicmatch: {sp} line 4: rejected: invalid subject 'x..y': empty token (at byte 2)",
        f"topicmatch: {sp} line 5: rejected: line too long (65,536 bytes; at most 65,535)",
    ]
    assert counts[:4] == (5, 2, 0, 3)
    assert rej.read_bytes() == long1 + b"\nx..y\n" + long2 + b"\n"


def test_a_huge_line_is_read_in_bounded_memory(tmp_path, monkeypatch):
    """64 MB with no newline: held only up to the limit, in blocks."""
    path = tmp_path / "huge.txt"
    with open(path, "wb") as f:
        for _ in range(64):
            f.write(b"x" * (1 << 20))
        f.write(b"\nlast\n")
    monkeypatch.setattr(common, "MATCH_BLOCK_BYTES", 1 << 20)
    tracemalloc.start()
    try:
        got = [(first, items) for first, items, _ in common.read_lines(str(path), "subjects")]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    flat = [x for _, items in got for x in items]
    assert len(flat) == 2 and isinstance(flat[0], common.Rejected) and flat[1] == "last"
    assert flat[0].reason == "line too long (67,108,864 bytes; at most 65,535)" and flat[0].raw is None
    assert peak < 8 << 20, peak                          # a few blocks, never the line


# --- separating filter and queue ------------------------------------------------------

def test_nats_splits_on_space_or_tab_only(capsys, tmp_path):
    subs = "a\u00a0b.c\nd\x1ce.f\ng.h workers\ni.j\tworkers\n  k.l  \t w2 \n".encode()
    subjects = "a\u00a0b.c\nd\x1ce.f\ng.h\ni.j\nk.l\n".encode()
    rc, out, err, counts, _ = _run(capsys, tmp_path, subs, subjects)
    assert rc == 0 and err == []
    assert out == ("a\u00a0b.c\t1\ta\u00a0b.c\nd\x1ce.f\t2\td\x1ce.f\ng.h\t3\tg.h\tworkers\n"
                   "i.j\t4\ti.j\tworkers\nk.l\t5\tk.l\tw2\n")


@pytest.mark.parametrize("dialect", ["mqtt", "amqp"])
def test_mqtt_and_amqp_split_on_a_tab_only(capsys, tmp_path, dialect):
    sep = "/" if dialect == "mqtt" else "."
    subs = f"a b{sep}c\na b{sep}d\tg\nx\u00a0y\n".encode()
    subjects = f"a b{sep}c\na b{sep}d\nx\u00a0y\na\n".encode()
    rc, out, err, counts, _ = _run(capsys, tmp_path, subs, subjects, "--dialect", dialect)
    assert rc == 0 and err == []
    assert out == (f"a b{sep}c\t1\ta b{sep}c\na b{sep}d\t2\ta b{sep}d\tg\nx\u00a0y\t3\tx\u00a0y\n")
    assert counts[:4] == (4, 3, 1, 0)


def test_mqtt_three_fields_name_the_line(capsys, tmp_path):
    rc, out, err, counts, _ = _run(capsys, tmp_path, b"a/b\ta\tb\n", b"a/b\n", "--dialect", "mqtt")
    assert rc == 2 and out == ""
    assert err == [f"topicmatch: error: {tmp_path / 'subs.txt'} line 1: expected 'filter' or 'filter<TAB>queue'"]


def test_a_too_long_subscriptions_line_names_its_line(capsys, tmp_path):
    rc, out, err, counts, _ = _run(capsys, tmp_path, b"a.b\n" + b"x" * 200_000 + b"\n", b"a.b\n")
    assert rc == 2 and out == ""
    assert err == [f"topicmatch: error: subscriptions {tmp_path / 'subs.txt'} line 2: "
                   "line too long (200,000 bytes; at most 131,071)"]


# --- the reader against a plain model, through the real command ---------------------

LINE = st.one_of(
    st.sampled_from([b"a.b", b"a.c", b"x", b"a..b", b"", b"a b", b"caf\xc3\xa9.b", b"\xff", b"a.\xe9",
                     b"\xef\xbb\xbfa.b", b"a.b\r", b"\x00", b"a." * 40]),
    st.binary(max_size=12).filter(lambda b: b"\n" not in b),
)


def _model(data, limit):
    """What the reader must make of data: the BOM, line ends, then each line."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if not data:
        return []
    raws = data.split(b"\n")
    if raws[-1] == b"":
        raws.pop()
    got = []
    for raw in raws:
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if len(raw) > limit:
            got.append(("too long", raw))
            continue
        try:
            got.append(("ok", raw.decode("utf-8")))
        except UnicodeDecodeError:
            got.append(("not utf8", raw))
    return got


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(lines=st.lists(LINE, max_size=12), last_newline=st.booleans(), block=st.sampled_from([4, 5, 16, 4096]))
def test_reader_matches_a_model_in_a_subprocess(tmp_path, lines, last_newline, block):
    """The whole command in a subprocess: counts reconcile, every line is a
    delivery, an unmatched or a rejected line, and the rejects file holds
    exactly the rejected lines."""
    data = b"\n".join(lines) + (b"\n" if last_newline and lines else b"")
    limit = 20                                   # a small limit, so long lines are common
    sp, fp, rej = tmp_path / "s.txt", tmp_path / "f.txt", tmp_path / "r.txt"
    sp.write_bytes(data)
    fp.write_bytes(b"a.*\n>\tq\n")
    code = ("import sys; from topicmatch import cli; from topicmatch.cli import common as c; c.MATCH_BLOCK_BYTES = %d; "
            "c.MAX_LINE_BYTES = %d; c.read_lines.__defaults__ = (%d, None, None, None); "
            "sys.exit(cli.main(sys.argv[1:]))"
            % (block, limit, limit))
    r = subprocess.run([sys.executable, "-c", code, "match", "--filters-file", str(fp), "--subjects", str(sp),
                        "--rejects", str(rej)], capture_output=True, timeout=60)
    want = _model(data, limit)
    ref = R.ReferenceSublist("nats")
    ref.insert("a.*", 1)
    ref.insert(">", 2, "q")
    rejected = [raw for kind, raw in want if kind != "ok"]
    rejected += []
    good = [s for kind, s in want if kind == "ok"]
    invalid = [s for s in good if not R.is_valid_subject(s, "nats")]
    valid = [s for s in good if R.is_valid_subject(s, "nats")]
    err = r.stderr.decode("utf-8", "replace").splitlines()
    m = SUMMARY.match(err[-1])
    assert m, err
    n, delivered, unmatched, nrej = (int(x.replace(",", "")) for x in m.groups()[:4])
    assert n == len(want) == delivered + unmatched + nrej
    assert nrej == len(rejected) + len(invalid)
    assert delivered == sum(bool(R.picked_row(ref.match(s), s)) for s in valid)
    assert r.returncode == (cli.EXIT_REJECTED if nrej else 0)
    # the rejects file: the rejected lines, in order, each with its \n
    in_order = [raw if kind != "ok" else raw.encode() for kind, raw in want
                if kind != "ok" or not R.is_valid_subject(raw, "nats")]
    assert rej.read_bytes() == b"".join(x + b"\n" for x in in_order)
    os.remove(rej)
