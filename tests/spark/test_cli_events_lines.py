"""`topicmatch fanout`'s events input never loses a row (issue 23): CSV and JSON
lines are scanned line by line first -- a BOM is removed, a line that is not
UTF-8 or too long is rejected with its reason -- and a row Spark cannot
parse is rejected too (PERMISSIVE, not FAILFAST or DROPMALFORMED).  Every
rejected line is counted (events in = delivered + unmatched + rejected), is
a row of DIR/rejected with its reason, and with --rejects is written to a
file; the exit status says lines were rejected.  --shards and --dedupe pass
through to topicmatch.spark.fanout_with_rejects."""
import os
import re

import pytest

from topicmatch import cli
from topicmatch.cli import fanout_io

pytestmark = pytest.mark.spark

RECONCILE = re.compile(r"events in\s+([\d,]+) = ([\d,]+) delivered \+ ([\d,]+) unmatched \+ "
                       r"([\d,]+) rejected\s+\[reconciles\]")


def _num(s):
    return int(s.replace(",", ""))


def _rows(path):
    import pyarrow.parquet as pq
    return pq.read_table(path).to_pylist()


SUBS_CSV = b"sub_id,filter,queue\n1,orders.*,\n2,orders.>,w\n3,orders.>,w\n4,x.y,\n"


def _run(capsys, tmp_path, events_name, events_bytes, *extra):
    ev, subs, out, rej = (tmp_path / events_name, tmp_path / "subs.csv", tmp_path / "out",
                          tmp_path / "rejects.bin")
    ev.write_bytes(events_bytes)
    subs.write_bytes(SUBS_CSV)
    rc = cli.main(["fanout", "--events", str(ev), "--subs", str(subs), "--out", str(out),
                   "--master", "local[2]", "--progress", "0", "--queues", "all",
                   "--rejects", str(rej), *extra])
    captured = capsys.readouterr()
    m = RECONCILE.search(captured.out)
    assert m, captured
    counts = [_num(x) for x in m.groups()]
    assert counts[0] == sum(counts[1:])
    return rc, counts, captured, str(ev), out, rej.read_bytes()


def test_csv_events_bom_bad_bytes_long_and_malformed_rows(spark, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(fanout_io, "MAX_EVENT_LINE_BYTES", 200)
    long_row = b"9,orders.eu," + b"x" * 300
    data = (b"\xef\xbb\xbfevent_id,subject,payload\n"     # a BOM before the header
            b"1,orders.eu,a\n"
            b"2,caf\xe9.x,b\n"                            # not UTF-8
            + long_row + b"\n"                             # over the (test's) limit
            b"4,orders..x,c\n"                            # an invalid subject
            b"5,,d\n"                                     # a null subject
            b"6,x.y,e\n"
            b"7,nothing,f\n"
            b"8,x.y,g,extra,fields\n")                  # malformed: too many fields
    rc, counts, captured, ev, out, rejects = _run(capsys, tmp_path, "events.csv", data)
    assert rc == cli.EXIT_REJECTED, captured
    # 8 rows: 1 and 6 delivered, 7 unmatched, 2 and the long one rejected by
    # the reader, 4 (invalid) and 5 (null) by the fan-out, 8 by Spark's parser
    assert counts == [8, 2, 1, 5]
    # every line that never became a row is named on stderr, the malformed one too
    assert captured.err.splitlines() == [
        f"topicmatch: {ev} line 3: rejected: not UTF-8 (byte 0xe9 at byte 6 of the line)",
        f"topicmatch: {ev} line 4: rejected: line too long (312 bytes; at most 200)",
        f"topicmatch: {ev} line 9: rejected: malformed csv row: 8,x.y,g,extra,fields",
    ]
    assert rejects == b"2,caf\xe9.x,b\n" + long_row + b"\n" + b"8,x.y,g,extra,fields\n"
    delivered = sorted((int(r["event_id"]), r["sub_id"]) for r in _rows(os.path.join(out, "deliveries")))
    assert delivered == [(1, 1), (1, 2), (1, 3), (6, 4)]
    errors = sorted(r["error"] for r in _rows(os.path.join(out, "rejected")))
    assert errors == sorted([f"{ev} line 3: not UTF-8 (byte 0xe9 at byte 6 of the line)",
                             f"{ev} line 4: line too long (312 bytes; at most 200)",
                             "empty token (at byte 7)", "null subject",
                             "malformed csv row: 8,x.y,g,extra,fields"])


def test_json_lines_malformed_rows_are_rejected_with_their_text(spark, capsys, tmp_path):
    data = (b'\xef\xbb\xbf{"event_id": 1, "subject": "orders.eu"}\n'
            b'{"event_id": 2, "subject": "x.y"\n'              # not JSON: a malformed row
            b'{"event_id": 3, "subject": "x.y"}\n'
            b'\xff\xfe\n')                                     # not UTF-8
    rc, counts, captured, ev, out, rejects = _run(capsys, tmp_path, "events.jsonl", data)
    assert rc == cli.EXIT_REJECTED, captured
    assert counts == [4, 2, 0, 2]
    assert rejects == b'\xff\xfe\n{"event_id": 2, "subject": "x.y"\n'
    assert captured.err.splitlines() == [
        f"topicmatch: {ev} line 4: rejected: not UTF-8 (byte 0xff at byte 1 of the line)",
        f'topicmatch: {ev} line 2: rejected: malformed json row: {{"event_id": 2, "subject": "x.y"',
    ]
    errors = sorted(r["error"] for r in _rows(os.path.join(out, "rejected")))
    assert errors == [f"{ev} line 4: not UTF-8 (byte 0xff at byte 1 of the line)",
                      'malformed json row: {"event_id": 2, "subject": "x.y"']


def test_clean_input_exits_0_and_shards_and_dedupe_pass_through(spark, capsys, tmp_path):
    data = b"event_id,subject\n1,orders.eu\n2,x.y\n3,orders.us.z\n"
    rc, counts, captured, _, out, rejects = _run(capsys, tmp_path, "events.csv", data)
    assert rc == 0 and counts == [3, 3, 0, 0] and rejects == b""
    want = sorted((int(r["event_id"]), r["sub_id"]) for r in _rows(os.path.join(out, "deliveries")))
    for extra in (["--shards", "2"], ["--shards", "1", "--dedupe"], ["--shards", "2", "--dedupe"]):
        rc, counts, captured, _, out2, _ = _run(capsys, tmp_path, "events.csv", data, "--overwrite", *extra)
        assert rc == 0, captured
        got = sorted((int(r["event_id"]), r["sub_id"]) for r in _rows(os.path.join(out2, "deliveries")))
        assert got == want, extra          # no overlapping filters here: dedupe changes nothing
        if extra[1] == "2":
            assert "sharded: 2 shards" in captured.out
    with pytest.raises(SystemExit) as e:                 # argparse: usage, exit status 2
        cli.main(["fanout", "--events", "e.csv", "--subs", "s.csv", "--out", "o", "--shards", "0"])
    assert e.value.code == 2
    assert "argument --shards: expected a positive integer or 'auto', not '0'" in capsys.readouterr().err


def test_a_directory_of_part_files_gzip_included(spark, capsys, tmp_path):
    """Each part file is scanned (gzip through its opener); the cleaned copy
    keeps every part, each with its own CSV header."""
    import gzip
    d = tmp_path / "events"
    d.mkdir()
    (d / "part-0.csv").write_bytes(b"event_id,subject\n1,orders.eu\n2,x.y\n")
    with gzip.open(d / "part-1.csv.gz", "wb") as f:
        f.write(b"\xef\xbb\xbfevent_id,subject\n3,orders.us\n4,caf\xe9\n5,nothing\n")
    (d / "_SUCCESS").write_bytes(b"")
    subs, out, rej = tmp_path / "subs.csv", tmp_path / "out", tmp_path / "rejects.bin"
    subs.write_bytes(SUBS_CSV)
    rc = cli.main(["fanout", "--events", str(d), "--subs", str(subs), "--out", str(out),
                   "--master", "local[2]", "--progress", "0", "--rejects", str(rej)])
    captured = capsys.readouterr()
    assert rc == cli.EXIT_REJECTED, captured
    assert [_num(x) for x in RECONCILE.search(captured.out).groups()] == [5, 3, 1, 1]
    assert captured.err.splitlines()[0] == (f"topicmatch: {d / 'part-1.csv.gz'} line 3: rejected: "
                                            "not UTF-8 (byte 0xe9 at byte 6 of the line)")
    assert rej.read_bytes() == b"4,caf\xe9\n"
    delivered = sorted(int(r["event_id"]) for r in _rows(os.path.join(out, "deliveries")))
    assert delivered == [1, 1, 2, 3, 3]          # orders.* and one of group w; x.y


def test_csv_ids_are_int64_when_canonical_and_schema_gives_the_types(spark, capsys, tmp_path):
    """Without --schema a CSV id column whose every value is a canonical
    integer is bigint (event_id), one with "007" stays a string (device_id);
    --schema gives every column's type, for CSV and for JSON lines."""
    import pyarrow as pa
    data = b"event_id,subject,device_id\n1,orders.eu,007\n2,x.y,8\n3,orders.us,9\n"
    rc, counts, captured, _, out, _ = _run(capsys, tmp_path, "events.csv", data)
    assert rc == 0 and counts == [3, 3, 0, 0], captured
    schema = __import__("pyarrow.parquet").parquet.read_table(os.path.join(out, "deliveries")).schema
    assert schema.field("event_id").type == pa.int64()
    assert schema.field("device_id").type == pa.string()

    rc, counts, captured, _, out, _ = _run(capsys, tmp_path, "events.csv", data, "--overwrite",
                                           "--schema", "event_id STRING, subject STRING, device_id INT")
    assert rc == 0 and counts == [3, 3, 0, 0], captured
    rows = sorted(_rows(os.path.join(out, "deliveries")), key=lambda r: (r["event_id"], r["sub_id"]))
    assert [(r["event_id"], r["device_id"]) for r in rows][:2] == [("1", 7), ("1", 7)]

    js = (b'{"event_id": 1, "subject": "orders.eu", "n": 1}\n'
          b'{"event_id": 2, "subject": "x.y", "n": "two"}\n')
    rc, counts, captured, ev, out, _ = _run(capsys, tmp_path, "events.jsonl", js, "--overwrite",
                                            "--schema", "event_id BIGINT, subject STRING, n INT")
    # "two" is not an int: that row is malformed, rejected with its text and named
    assert rc == cli.EXIT_REJECTED and counts == [2, 1, 0, 1], captured
    assert [(r["event_id"], r["n"]) for r in _rows(os.path.join(out, "deliveries"))] == [(1, 1)] * 3
    assert f"{ev} line 2: rejected: malformed json row: " in captured.err
