"""One command line for tables and images (issue 48, item 2): `match`,
`build` and `fanout` take the same subscriptions -- a CSV, JSON-lines or
Parquet table (columns renamed by --id-col, --filter-col, --queue-col), an
image told by its first bytes, or a plain list behind --filters-file -- and
every mistake is one error line and exit status 2, asserted whole.
`fanout` is checked here up to the point where it would start Spark; its
runs are in tests/spark/test_cli*.py."""
import json

import pytest

from topicmatch import Sublist, cli
from topicmatch.cli import fanout as cmd_fanout
from topicmatch.cli.dialect_hint import looks_like
from cli_errors import PREFIX, one_error_line

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

#: fanout's CSV (the shape `topicmatch demo` writes): ids of the user's
#: own, a queue group, an empty queue field, and a column fanout ignores.
FANOUT_CSV = ("sub_id,filter,queue,role\n"
              "101,telemetry.*.temperature,,dashboard\n"
              "102,telemetry.>,archive,archive\n"
              "103,telemetry.>,archive,archive\n"
              "104,telemetry.site1.humidity,,dashboard\n"
              "105,alerts.>,,relay\n")
SUBJECTS = "telemetry.site1.temperature\ntelemetry.site1.humidity\nheartbeat.x\n"


def _expected(rows, subjects, dialect="nats", queues="pick"):
    """The delivery lines from the engine itself, fed the rows directly."""
    sl = Sublist(dialect)
    for sid, f, q in rows:
        sl.insert(f, sid, queue=q)
    label = {sid: f"{sid}\t{f}" + (f"\t{q}" if q else "") for sid, f, q in rows}
    r = sl.match_many(subjects, queues=queues)
    return "".join(f"{s}\t{label[sid]}\n" for i, s in enumerate(subjects) for sid in r[i].tolist())


def _match(capsys, *argv):
    rc = cli.main(["match", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err.splitlines()


@pytest.fixture
def subjects(tmp_path):
    p = tmp_path / "subjects.txt"
    p.write_text(SUBJECTS)
    return p


FANOUT_ROWS = [(101, "telemetry.*.temperature", None), (102, "telemetry.>", "archive"),
               (103, "telemetry.>", "archive"), (104, "telemetry.site1.humidity", None),
               (105, "alerts.>", None)]


# --- each input kind gives the deliveries -----------------------------------------------

@pytest.mark.parametrize("queues", ["pick", "all", "none"])
def test_match_given_fanouts_csv_gives_the_right_deliveries(capsys, tmp_path, subjects, queues):
    csv = tmp_path / "subs.csv"
    csv.write_text(FANOUT_CSV)
    rc, out, err = _match(capsys, "--subs", csv, "--subjects", subjects, "--queues", queues)
    assert rc == 0 and len(err) == 1, err
    assert out == _expected(FANOUT_ROWS, SUBJECTS.split(), queues=queues)
    # the user's ids, not line numbers; the header is not a filter
    assert out.startswith("telemetry.site1.temperature\t101\ttelemetry.*.temperature\n")
    assert "sub_id" not in out
    delivered = {"pick": 4, "all": 6, "none": 2}[queues]
    assert err[0].startswith(f"topicmatch match: 3 subjects = 2 delivered + 1 unmatched + 0 rejected; "
                             f"{delivered} deliveries from 5 subscriptions (nats, queues={queues}) ")


def _write_table(tmp_path, kind, rows, names=("sub_id", "filter", "queue")):
    ids, filters, queues = zip(*rows)
    if kind == "jsonl":
        p = tmp_path / "subs.jsonl"
        p.write_text("".join(json.dumps({names[0]: i, names[1]: f, names[2]: q}) + "\n"
                             for i, f, q in rows))
    elif kind == "parquet":
        p = tmp_path / "subs.parquet"
        pq.write_table(pa.table({names[0]: pa.array(ids, pa.int64()), names[1]: list(filters),
                                 names[2]: pa.array(queues, pa.string())}), str(p))
    elif kind == "parquet-dir":                 # Spark's output: part files in a directory
        p = tmp_path / "subs.parquet"
        p.mkdir()
        half = len(rows) // 2
        for k, part in enumerate((rows[:half], rows[half:])):
            pi, pf, pq_ = zip(*part)
            pq.write_table(pa.table({names[0]: pa.array(pi, pa.int64()), names[1]: list(pf),
                                     names[2]: pa.array(pq_, pa.string())}), str(p / f"part-{k}.parquet"))
        (p / "_SUCCESS").write_text("")
    else:
        p = tmp_path / "subs.csv"
        p.write_text(",".join(names) + "\n" + "".join(f"{i},{f},{q or ''}\n" for i, f, q in rows))
    return p


@pytest.mark.parametrize("kind", ["csv", "jsonl", "parquet", "parquet-dir"])
def test_each_table_kind_gives_the_same_deliveries(capsys, tmp_path, subjects, kind):
    p = _write_table(tmp_path, kind, FANOUT_ROWS)
    rc, out, err = _match(capsys, "--subs", p, "--subjects", subjects)
    assert rc == 0, err
    assert out == _expected(FANOUT_ROWS, SUBJECTS.split())


@pytest.mark.parametrize("kind", ["csv", "jsonl", "parquet"])
def test_renamed_columns(capsys, tmp_path, subjects, kind):
    p = _write_table(tmp_path, kind, FANOUT_ROWS, names=("id", "topic", "group"))
    rc, out, err = _match(capsys, "--subs", p, "--subjects", subjects, "--id-col", "id",
                          "--filter-col", "topic", "--queue-col", "group")
    assert rc == 0, err
    assert out == _expected(FANOUT_ROWS, SUBJECTS.split())
    # not renamed: one line naming the column and listing the table's
    msg = one_error_line(capsys, ["match", "--subs", str(p), "--subjects", str(subjects)])
    assert msg == f"{PREFIX}{p}: the subscriptions table has no column 'sub_id' (columns: id, topic, group)"


def test_a_renamed_column_that_is_missing_says_which_option(capsys, tmp_path, subjects):
    p = _write_table(tmp_path, "csv", FANOUT_ROWS)
    msg = one_error_line(capsys, ["match", "--subs", str(p), "--subjects", str(subjects),
                                  "--filter-col", "topic"])
    assert msg == (f"{PREFIX}{p}: the subscriptions table has no column 'topic' (--id-col / "
                   "--filter-col) (columns: sub_id, filter, queue)")
    msg = one_error_line(capsys, ["match", "--subs", str(p), "--subjects", str(subjects),
                                  "--id-col", "filter"])
    assert msg == (f"{PREFIX}--id-col, --filter-col and --queue-col name the same column twice "
                   "(filter, filter, queue)")


def test_a_table_without_a_queue_column_is_plain_subscriptions(capsys, tmp_path, subjects):
    p = tmp_path / "subs.csv"
    p.write_text("filter,sub_id\ntelemetry.>,7\n")
    rc, out, _ = _match(capsys, "--subs", p, "--subjects", subjects)
    assert rc == 0
    assert out == "telemetry.site1.temperature\t7\ttelemetry.>\ntelemetry.site1.humidity\t7\ttelemetry.>\n"


def test_one_sub_id_with_several_filters_is_labelled_by_the_filter_that_matched(capsys, tmp_path):
    p = tmp_path / "subs.csv"
    p.write_text("sub_id,filter\n1,a.*\n1,a.b\n2,x.y\n1,z\n")
    s = tmp_path / "s.txt"
    s.write_text("a.b\na.c\nx.y\n")
    rc, out, _ = _match(capsys, "--subs", p, "--subjects", s)
    assert rc == 0
    assert out == "a.b\t1\ta.*\na.b\t1\ta.b\na.c\t1\ta.*\nx.y\t2\tx.y\n"


# --- images ----------------------------------------------------------------------------

def _build(capsys, *argv):
    rc = cli.main(["build", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_build_then_match_an_image_gives_the_tables_deliveries(capsys, tmp_path, subjects):
    csv = tmp_path / "subs.csv"
    csv.write_text(FANOUT_CSV)
    img = tmp_path / "subs.img"
    rc, out, err = _build(capsys, "--subs", csv, "-o", img)
    assert rc == 0 and err == ""
    assert out.startswith(f"topicmatch build: 5 subscriptions (nats) from {csv} -> {img} (")
    assert img.read_bytes()[:8] == b"\x89FSB\r\n\x1a\n"
    assert len(Sublist.open(str(img))) == 5
    for queues in ("all", "pick"):
        rc, from_img, _ = _match(capsys, "--subs", img, "--subjects", subjects, "--queues", queues)
        rc2, from_csv, _ = _match(capsys, "--subs", csv, "--subjects", subjects, "--queues", queues)
        assert rc == rc2 == 0 and from_img == from_csv != ""
    # told by its bytes, not its name
    renamed = tmp_path / "subs.csv.bak"
    renamed.write_bytes(img.read_bytes())
    assert _match(capsys, "--subs", renamed, "--subjects", subjects)[1] == from_img   # (pick)


def test_an_image_keeps_its_dialect(capsys, tmp_path):
    p = tmp_path / "subs.csv"
    p.write_text("sub_id,filter,queue\n1,sensors/+/temp,\n2,$SYS/#,\n3,#,q\n")
    img = tmp_path / "m.img"
    assert _build(capsys, "--subs", p, "--dialect", "mqtt", "-o", img)[0] == 0
    s = tmp_path / "s.txt"
    s.write_text("sensors/a/temp\n$SYS/load\n")
    rc, out, err = _match(capsys, "--subs", img, "--subjects", s)     # no --dialect: the image's
    assert rc == 0, err
    # `$SYS/#` is not listed by the catch-all `#` (the MQTT `$` rule): looked up when it matches
    assert out == "sensors/a/temp\t1\tsensors/+/temp\nsensors/a/temp\t3\t#\tq\n$SYS/load\t2\t$SYS/#\n"
    assert "(mqtt, queues=pick)" in err[-1]
    msg = one_error_line(capsys, ["match", "--subs", str(img), "--subjects", str(s), "--dialect", "nats"])
    assert msg == (f"{PREFIX}subscriptions {img} is an image of mqtt subscriptions, not nats: "
                   "drop --dialect, or build it again with --dialect nats")


def test_image_mistakes(capsys, tmp_path, subjects):
    csv = tmp_path / "subs.csv"
    csv.write_text(FANOUT_CSV)
    img = tmp_path / "subs.img"
    assert _build(capsys, "--subs", csv, "-o", img)[0] == 0
    msg = one_error_line(capsys, ["match", "--subs", str(img), "--subjects", str(subjects),
                                  "--id-col", "id"])
    assert msg == f"{PREFIX}--id-col is for a subscriptions table; {img} is an image"
    msg = one_error_line(capsys, ["build", "--subs", str(img), "-o", str(tmp_path / "x.img")])
    assert msg == f"{PREFIX}{img} is an image already: give a table (or --filters-file)"
    msg = one_error_line(capsys, ["build", "--subs", str(csv), "-o", str(img)])
    assert msg == f"{PREFIX}--out {img} already exists (use --overwrite)"
    assert _build(capsys, "--subs", csv, "-o", img, "--overwrite")[0] == 0
    damaged = tmp_path / "damaged.img"
    damaged.write_bytes(img.read_bytes()[:40])
    msg = one_error_line(capsys, ["match", "--subs", str(damaged), "--subjects", str(subjects)])
    assert msg.startswith(f"{PREFIX}subscriptions {damaged}: cannot open the image: ")


# --- the plain list ----------------------------------------------------------------------

def test_the_plain_list_is_behind_filters_file(capsys, tmp_path, subjects):
    f = tmp_path / "filters.txt"
    f.write_text("telemetry.*.temperature\n\ntelemetry.> archive\n")
    rc, out, _ = _match(capsys, "--filters-file", f, "--subjects", subjects)
    assert rc == 0
    assert out == ("telemetry.site1.temperature\t1\ttelemetry.*.temperature\n"
                   "telemetry.site1.temperature\t3\ttelemetry.>\tarchive\n"
                   "telemetry.site1.humidity\t3\ttelemetry.>\tarchive\n")
    msg = one_error_line(capsys, ["match", "--subs", str(f), "--subjects", str(subjects)])
    assert msg == (f"{PREFIX}cannot tell the format of subscriptions {f} from its name; use "
                   "--subs-format parquet|json|csv; or --filters-file for a plain filter list "
                   "(one per line)")
    with pytest.raises(SystemExit) as e:            # argparse: exactly one of the two
        cli.main(["match", "--subs", str(f), "--filters-file", str(f), "--subjects", str(subjects)])
    assert e.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


# --- empty inputs ------------------------------------------------------------------------

@pytest.mark.parametrize("name, text, why", [
    ("subs.csv", "", "an empty table, or a header only"),
    ("subs.csv", "sub_id,filter,queue\n", "an empty table, or a header only"),
    ("subs.jsonl", "", "an empty table, or a header only"),
    ("filters.txt", "\n\n", "no line holds a filter"),
])
def test_an_empty_input_is_an_error_unless_allowed(capsys, tmp_path, subjects, name, text, why):
    p = tmp_path / name
    p.write_text(text)
    flag = "--filters-file" if name.endswith(".txt") else "--subs"
    argv = ["match", flag, str(p), "--subjects", str(subjects)]
    msg = one_error_line(capsys, argv)
    assert msg == (f"{PREFIX}subscriptions {p} has no subscriptions ({why}): nothing could match; "
                   "give --allow-empty to run with none")
    assert one_error_line(capsys, ["build", flag, str(p), "-o", str(tmp_path / "e.img")]) == msg
    rc, out, err = _match(capsys, *argv[1:], "--allow-empty")
    assert rc == 0 and out == ""
    assert err[-1].startswith("topicmatch match: 3 subjects = 0 delivered + 3 unmatched + 0 rejected; "
                              "0 deliveries from 0 subscriptions ")


def test_an_empty_image_is_an_error_unless_allowed(capsys, tmp_path, subjects):
    p = tmp_path / "subs.csv"
    p.write_text("sub_id,filter\n")
    img = tmp_path / "e.img"
    assert _build(capsys, "--subs", p, "-o", img, "--allow-empty")[0] == 0
    msg = one_error_line(capsys, ["match", "--subs", str(img), "--subjects", str(subjects)])
    assert msg == (f"{PREFIX}subscriptions {img} has no subscriptions (an image of none): nothing "
                   "could match; give --allow-empty to run with none")
    assert _match(capsys, "--subs", img, "--subjects", subjects, "--allow-empty")[0] == 0


# --- bad rows --------------------------------------------------------------------------

@pytest.mark.parametrize("text, msg", [
    ("sub_id,filter\n1,a.b\nx,c\n", "subscriptions {p} row 2: sub_id 'x' is not an integer"),
    ("sub_id,filter\n1,a.b\n,c\n", "subscriptions {p} row 2: no sub_id (an empty or null value)"),
    ("sub_id,filter\n1,a.b\n99999999999999999999,c\n",
     "subscriptions {p} row 2: sub_id '99999999999999999999' is outside signed 64-bit"),
    ("sub_id,filter\n1,a.b\n2,\n", "subscriptions {p} row 2: no filter (an empty or null 'filter')"),
    ("sub_id,filter\n1,a.b\n2,a..b\n",
     "subscriptions {p} row 2 (sub_id 2): invalid filter 'a..b': empty token (at byte 2)"),
    ("sub_id,filter,queue\n1,a.b,\n2,a.c,bad queue\n",
     "subscriptions {p} row 2 (sub_id 2): invalid queue 'bad queue': "),
])
def test_a_bad_row_is_named(capsys, tmp_path, subjects, text, msg):
    p = tmp_path / "subs.csv"
    p.write_text(text)
    got = one_error_line(capsys, ["match", "--subs", str(p), "--subjects", str(subjects)])
    assert got.startswith(PREFIX + msg.format(p=p)), got


def test_a_filter_of_another_type_is_named(capsys, tmp_path, subjects):
    p = tmp_path / "subs.jsonl"
    p.write_text('{"sub_id": 1, "filter": 5}\n')
    assert one_error_line(capsys, ["match", "--subs", str(p), "--subjects", str(subjects)]) == (
        f"{PREFIX}{p}: subscriptions column 'filter' has type int64, expected string")


# --- another dialect's filters: one warning ----------------------------------------------

def test_filters_of_another_dialect_get_one_warning_with_the_count(capsys, tmp_path, subjects):
    p = tmp_path / "subs.csv"
    p.write_text("sub_id,filter\n1,sensors/+/temp\n2,a.#\n3,telemetry.>\n4,c++.lang\n5,x/y\n")
    rc, out, err = _match(capsys, "--subs", p, "--subjects", subjects)
    assert rc == 0
    warnings = [ln for ln in err if "warning" in ln]
    assert warnings == [(f"topicmatch: warning: 3 of 5 filters in {p} look like MQTT or AMQP filters "
                         "('sensors/+/temp', 'a.#', ...); under --dialect nats they match only "
                         "themselves, literally (--dialect mqtt or amqp?)")]
    rc, _, err = _match(capsys, "--subs", p, "--subjects", subjects, "--dialect", "amqp")
    assert rc == 0
    assert [ln for ln in err if "warning" in ln] == [(
        f"topicmatch: warning: 3 of 5 filters in {p} look like NATS or MQTT filters "
        "('sensors/+/temp', 'telemetry.>', ...); under --dialect amqp they match only themselves, "
        "literally (--dialect nats or mqtt?)")]
    clean = tmp_path / "clean.csv"
    clean.write_text(FANOUT_CSV)
    assert not [ln for ln in _match(capsys, "--subs", clean, "--subjects", subjects)[2] if "warning" in ln]


@pytest.mark.parametrize("dialect, filter_, others", [
    ("nats", "a/b", ("mqtt",)), ("nats", "a.#", ("mqtt", "amqp")), ("nats", "#", ("mqtt", "amqp")),
    ("nats", "a.+", ("mqtt",)), ("nats", "c++.lang", ()), ("nats", "a/b.c", ()), ("nats", "a.*.>", ()),
    ("mqtt", "a.*", ("nats", "amqp")), ("mqtt", "a/>", ("nats",)), ("mqtt", "v1.0/status", ()),
    ("mqtt", "a/+/#", ()), ("amqp", "a.>", ("nats",)), ("amqp", "a/+", ("mqtt",)),
    ("amqp", "a.*.#", ()), ("amqp", "", ()),
])
def test_looks_like(dialect, filter_, others):
    assert looks_like(filter_, dialect) == others


# --- fanout takes the same inputs (checked before the JVM) ----------------------------

@pytest.fixture
def no_jvm(monkeypatch):
    def session(args):
        raise AssertionError("the JVM was started")
    monkeypatch.setattr(cmd_fanout, "session", session)


def _events(tmp_path):
    ev = tmp_path / "events.csv"
    ev.write_text("event_id,subject\n1,a.b\n")
    return ["fanout", "--events", str(ev), "--out", str(tmp_path / "out")]


def test_fanout_subscriptions_mistakes_come_before_the_jvm(capsys, tmp_path, no_jvm):
    base = _events(tmp_path)
    empty = tmp_path / "empty.csv"
    empty.write_text("sub_id,filter,queue\n")
    assert one_error_line(capsys, base + ["--subs", str(empty)]) == (
        f"{PREFIX}subscriptions {empty} has no subscriptions (an empty table, or a header only): "
        "nothing could match; give --allow-empty to run with none")
    ren = tmp_path / "ren.csv"
    ren.write_text("id,topic,queue\n1,a.*,\n")
    assert one_error_line(capsys, base + ["--subs", str(ren), "--id-col", "id"]) == (
        f"{PREFIX}{ren}: the subscriptions table has no column 'filter' (columns: id, topic, queue)")
    img = tmp_path / "subs.img"
    assert _build(capsys, "--subs", ren, "--id-col", "id", "--filter-col", "topic", "-o", img)[0] == 0
    assert one_error_line(capsys, base + ["--subs", str(img), "--shards", "4"]) == (
        f"{PREFIX}--shards 4 splits a subscriptions table; {img} is one index already (give the "
        "table, or --shards 1)")


@pytest.mark.parametrize("kind", ["renamed", "image", "filters", "mqtt-looking"])
def test_fanout_accepts_every_input_kind_as_far_as_spark(capsys, tmp_path, no_jvm, kind):
    base = _events(tmp_path)
    ren = tmp_path / "ren.csv"
    ren.write_text("id,topic,queue\n1,a.*,\n")
    argv = {"renamed": ["--subs", str(ren), "--id-col", "id", "--filter-col", "topic"],
            "filters": ["--filters-file", str(tmp_path / "f.txt")],
            "image": ["--subs", str(tmp_path / "subs.img")],
            "mqtt-looking": ["--subs", str(tmp_path / "m.csv")]}[kind]
    (tmp_path / "f.txt").write_text("a.*\n")
    (tmp_path / "m.csv").write_text("sub_id,filter\n1,a/+\n")
    assert _build(capsys, "--filters-file", tmp_path / "f.txt", "-o", tmp_path / "subs.img")[0] == 0
    with pytest.raises(AssertionError, match="the JVM was started"):
        cli.main(base + argv)
    err = capsys.readouterr().err
    if kind == "mqtt-looking":
        assert err.startswith(f"topicmatch: warning: 1 of 1 filters in {tmp_path / 'm.csv'} look like "
                              "MQTT filters ('a/+')")
    else:
        assert err == ""
