"""`topicmatch match`: the engine alone, no Spark (runs in `make test-engine` too)."""
import subprocess
import sys

from topicmatch import _reference as R
from topicmatch import cli


def _run(capsys, tmp_path, filters, subjects, *extra):
    fp, sp = tmp_path / "filters.txt", tmp_path / "subjects.txt"
    fp.write_text("".join(f + "\n" for f in filters))
    sp.write_text("".join(s + "\n" for s in subjects))
    rc = cli.main(["match", "--filters-file", str(fp), "--subjects", str(sp), *extra])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_match_prints_deliveries_and_a_summary(capsys, tmp_path):
    filters = ["orders.*.created", "orders.>", "orders.> workers", "orders.eu.* workers", "", "billing.*"]
    subjects = ["orders.eu.created", "orders", "billing.x", "a..b", "orders.us.created"]
    rc, out, err = _run(capsys, tmp_path, filters, subjects, "--queues", "all")
    assert rc == cli.EXIT_REJECTED          # "a..b" was rejected
    ref = R.ReferenceSublist("nats")
    for lineno, line in enumerate(filters, 1):
        if line:
            f, *q = line.split()
            ref.insert(f, lineno, q[0] if q else None)
    expected = []
    for s in subjects:
        if R.is_valid_subject(s, "nats"):
            m = ref.match(s)
            ids = m.subs + [i for _, _, members in m.groups for i in members]
            expected += [(s, i) for i in ids]
    got = [tuple(line.split("\t")[:2]) for line in out.splitlines()]
    assert sorted((s, int(i)) for s, i in got) == sorted(expected)
    assert "orders.eu.created\t4\torders.eu.*\tworkers" in out.splitlines()
    assert "line 4: rejected: invalid subject 'a..b': empty token" in err
    summary = err.strip().splitlines()[-1]
    assert summary.startswith("topicmatch match: 5 subjects = 3 delivered + 1 unmatched + 1 rejected; "
                              f"{len(expected)} deliveries from 5 subscriptions (nats, queues=all)")


def test_match_mqtt_tab_separated(capsys, tmp_path):
    filters = ["sport/#", "my topic/+\tg1", "$share/g2/sport/+"]
    rc, out, err = _run(capsys, tmp_path, filters, ["sport", "my topic/x", "sport/a"],
                        "--dialect", "mqtt", "--queues", "pick")
    assert rc == 0, err
    lines = sorted(out.splitlines())
    assert lines == ["my topic/x\t2\tmy topic/+\tg1", "sport\t1\tsport/#",
                     "sport/a\t1\tsport/#", "sport/a\t3\t$share/g2/sport/+"]


def test_match_invalid_filter_names_the_line(capsys, tmp_path):
    rc, out, err = _run(capsys, tmp_path, ["a.*", "a.>.b"], ["a.b"])
    assert rc == 2 and out == ""
    assert err.strip() == f"topicmatch: error: subscriptions {tmp_path / 'filters.txt'} line 2: invalid filter 'a.>.b': " \
        + err.strip().split("invalid filter 'a.>.b': ")[1]
    rc, out, err = _run(capsys, tmp_path, ["a b c"], ["a"])
    assert rc == 2 and "line 1: expected 'filter' or 'filter queue'" in err


def test_match_missing_file(capsys, tmp_path):
    rc = cli.main(["match", "--filters-file", str(tmp_path / "nope"), "--subjects", "-"])
    assert rc == 2
    assert capsys.readouterr().err.strip().endswith("nope: no such file or directory")


def test_import_topicmatch_does_not_import_pyspark():
    code = ("import sys, topicmatch, topicmatch.cli; "
            "assert 'pyspark' not in sys.modules and 'py4j' not in sys.modules, 'pyspark imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
