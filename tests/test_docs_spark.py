"""docs/spark.md's sample output of `topicmatch demo --events 200000` agrees
with what the demo computes (issue 48, item 9: it said 74.5 KiB for an index
of 213.1 KiB).  The sample is pasted from a real run; this test regenerates
the same sample (seed 7) and computes its figures with the engine alone --
the subscriptions, the index's image size, and every count of the
reconciliation -- so no JVM is needed, and a sample that drifts from the
code fails here."""
import csv
import os
import re

import pytest

pytest.importorskip("pyarrow", reason="the demo's sample is Parquet")

import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from topicmatch import Sublist  # noqa: E402
from topicmatch.cli.demo import generate  # noqa: E402

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "spark.md")
EVENTS = 200_000


def _num(s):
    return int(s.replace(",", ""))


def sample_figures(text):
    """The figures of the sample summary that follows "topicmatch demo
    --events N" in docs/spark.md: {name: value}."""
    m = re.search(r"`topicmatch demo --events (\d+)`.*?```\n(topicmatch fanout:.*?)```", text, re.S)
    assert m, "docs/spark.md has no sample of `topicmatch demo --events N`"
    block = m.group(2)
    idx = re.search(r"^  index +([\d,]+) subscriptions, ([\d.]+) KiB, shipped by (\w+)", block, re.M)
    ev = re.search(r"^  events in +([\d,]+) = ([\d,]+) delivered \+ ([\d,]+) unmatched \+ "
                   r"([\d,]+) rejected  \[reconciles\]", block, re.M)
    dl = re.search(r"^  deliveries +([\d,]+) rows", block, re.M)
    rj = re.search(r"^  rejected +([\d,]+) rows", block, re.M)
    assert idx and ev and dl and rj, block
    return {"events_arg": int(m.group(1)), "subscriptions": _num(idx.group(1)),
            "kib": idx.group(2), "events": _num(ev.group(1)), "delivered": _num(ev.group(2)),
            "unmatched": _num(ev.group(3)), "rejected": _num(ev.group(4)),
            "deliveries": _num(dl.group(1)), "rejected_rows": _num(rj.group(1))}


def computed_figures(tmp_path, n_events):
    """The same figures from the engine: the demo's sample, its index, and
    match_many over the events as the fan-out runs it (queues="pick", keyed
    by device)."""
    events_path, subs_path, _ = generate(str(tmp_path / "input"), n_events, seed=7)
    with open(subs_path, newline="") as f:
        rows = list(csv.DictReader(f))
    sl = Sublist("nats")
    sl.insert_many([r["filter"] for r in rows], [int(r["sub_id"]) for r in rows],
                   [r["queue"] or None for r in rows])
    events = pq.read_table(events_path, columns=["subject", "device"])
    b = sl.match_many(events["subject"], keys=events["device"], queues="pick")
    per_row = np.diff(np.asarray(b.offsets))
    invalid = np.asarray(b.invalid)
    return {"events_arg": n_events, "subscriptions": len(sl), "kib": f"{len(sl.to_bytes()) / 1024:.1f}",
            "events": len(events), "delivered": int(((per_row > 0) & ~invalid).sum()),
            "unmatched": int(((per_row == 0) & ~invalid).sum()), "rejected": int(invalid.sum()),
            "deliveries": int(per_row.sum()), "rejected_rows": int(invalid.sum())}


def test_the_sample_demo_output_agrees_with_the_demo(tmp_path):
    doc = sample_figures(open(DOC, encoding="utf-8").read())
    assert doc["events_arg"] == EVENTS
    assert computed_figures(tmp_path, EVENTS) == doc


def test_the_check_reads_a_wrong_size():
    """The sample as it was (74.5 KiB) reads as a different figure."""
    text = open(DOC, encoding="utf-8").read()
    wrong = re.sub(r"(subscriptions, )[\d.]+( KiB)", r"\g<1>74.5\2", text, count=1)
    assert sample_figures(wrong)["kib"] == "74.5"
    assert sample_figures(wrong) != sample_figures(text)
