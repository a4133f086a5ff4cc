"""The instruction-count gate (bench/instructions.py, make bench-instructions)
can fail: its comparison, fed counts and a baseline, without valgrind."""
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")
pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(BENCH, "instructions.py")),
                                reason="not a source checkout: bench/ is not beside tests/")


@pytest.fixture(scope="module")
def gate():
    sys.path.insert(0, BENCH)
    try:
        import instructions
    finally:
        sys.path.remove(BENCH)
    return instructions


COUNTS = {"match_many": {"light": 1280.0, "heavy": 3500.0, "hot1k": 350.0},
          "match": {"light": 2900.0, "heavy": 20000.0, "hot1k": 1560.0},
          "insert_many": {"light": 1400.0, "heavy": 1500.0}}


def scaled(counts, by):
    return {op: {w: n * by for w, n in c.items()} for op, c in counts.items()}


def write_baseline(path, counts, tolerance):
    path.write_text(json.dumps({"commit": "fake", "date": "today", "rows": 3000, "runs": 3,
                                "tolerance": tolerance, "counts": counts}))
    return str(path)


def test_a_baseline_5_percent_lower_fails(gate, tmp_path, capsys):
    # the test: the counts of now against a baseline 5% below them
    base = write_baseline(tmp_path / "base.json", scaled(COUNTS, 0.95), {"default": 0.03})
    now = tmp_path / "now.json"
    now.write_text(json.dumps(COUNTS))
    assert gate.main(["--baseline", base, "--counts", str(now)]) == 1
    out = capsys.readouterr().out
    assert "instruction gate FAILED: 8 of 8" in out
    assert "make bench-instructions-update" in out          # says how to update on purpose
    line = next(ln for ln in out.splitlines() if ln.startswith("match_many   light"))
    assert line.split() == ["match_many", "light", "1,216.0", "1,280.0", "+5.3%", "3.0%", "FAIL"]


def test_the_same_counts_pass_and_one_grown_count_fails_alone(gate, tmp_path, capsys):
    base = write_baseline(tmp_path / "base.json", COUNTS, {"default": 0.03, "insert_many": 0.06})
    now = tmp_path / "now.json"
    now.write_text(json.dumps(COUNTS))
    assert gate.main(["--baseline", base, "--counts", str(now)]) == 0
    assert "instruction gate passed" in capsys.readouterr().out

    grown = scaled(COUNTS, 1.0)
    grown["match"]["hot1k"] *= 1.031                  # just over 3%
    grown["insert_many"]["light"] *= 1.05             # within insert_many's own 6%
    now.write_text(json.dumps(grown))
    assert gate.main(["--baseline", base, "--counts", str(now)]) == 1
    out = capsys.readouterr().out
    assert "FAILED: 1 of 8" in out
    verdicts = {tuple(ln.split()[:2]): ln.split()[-1] for ln in out.splitlines()
                if ln.split()[:1] and ln.split()[0] in COUNTS}
    assert verdicts[("match", "hot1k")] == "FAIL"
    assert verdicts[("insert_many", "light")] == "ok"
    assert list(verdicts.values()).count("FAIL") == 1


def test_compare_rules(gate):
    tol = {"default": 0.03, "insert_many": 0.06, "match/hot1k": 0.10}
    base = {"match": {"light": 100.0, "hot1k": 100.0}, "insert_many": {"light": 100.0}}
    rows, failed = gate.compare(base, {"match": {"light": 103.0, "hot1k": 109.0}, "insert_many": {"light": 105.9}}, tol)
    assert not failed and [r[6] for r in rows] == ["ok", "ok", "ok"]
    rows, failed = gate.compare(base, {"match": {"light": 90.0, "hot1k": 100.0}, "insert_many": {"light": 100.0}}, tol)
    assert not failed and rows[0][6] == "lower"        # a gain: reported, not a failure
    rows, failed = gate.compare(base, {"match": {"light": 100.0}, "insert_many": {"light": 100.0}}, tol)
    assert failed and rows[1][6] == "missing"          # a count not measured fails


def test_the_committed_baseline_covers_the_standard_operations(gate):
    path = os.path.join(BENCH, "instructions.json")
    if not os.path.exists(path):
        pytest.skip("no bench/instructions.json (an sdist carries none)")
    with open(path) as f:
        b = json.load(f)
    assert {(op, w) for op in b["counts"] for w in b["counts"][op]} == set(
        gate.combos(gate.DEFAULT_OPS, gate.DEFAULT_WORKLOADS))
    assert b["rows"] == 3000 and b["runs"] == 3 and "default" in b["tolerance"]
    assert all(0 < t < 0.2 for t in b["tolerance"].values())


def test_the_committed_baseline_5_percent_lower_fails_against_itself(gate, tmp_path, capsys):
    path = os.path.join(BENCH, "instructions.json")
    if not os.path.exists(path):
        pytest.skip("no bench/instructions.json (an sdist carries none)")
    with open(path) as f:
        b = json.load(f)
    assert gate.main(["--baseline", path, "--counts", path]) == 0
    lower = dict(b, counts=scaled(b["counts"], 0.95))
    (tmp_path / "lower.json").write_text(json.dumps(lower))
    assert gate.main(["--baseline", str(tmp_path / "lower.json"), "--counts", path]) == 1
    out = capsys.readouterr().out
    n = sum(len(c) for c in b["counts"].values())
    assert f"instruction gate FAILED: {n} of {n}" in out
