"""fanout_stream on a file-source stream with a checkpoint: stopped by a
failure in the middle of a micro-batch and restarted, every event is
delivered exactly once; the counts reconcile per micro-batch; a subscription
added between micro-batches is matched from the next one on."""
import json
import os

import pytest

from spark_expect import EVENT_SCHEMA, SUBS_SCHEMA, Expected, events_rows, random_case

pytestmark = pytest.mark.spark

NEW_SUB = (999, "a.>", None)       # added after micro-batch 0


def _write_json(path, rows, columns):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        for r in rows:
            f.write(json.dumps(dict(zip(columns, r))) + "\n")
    os.replace(tmp, path)


def test_stream_exactly_once_across_a_restart(spark, tmp_path):
    from pyspark.errors import StreamingQueryException

    from topicmatch.spark import fanout_stream
    subs, subjects = random_case("nats", n_subs=40, n_events=200, seed=41)
    events = events_rows(subjects)
    files = [events[i * 50:(i + 1) * 50] for i in range(4)]
    inp, out, ckpt = tmp_path / "in", str(tmp_path / "out"), str(tmp_path / "checkpoint")
    inp.mkdir()
    subs_file = str(tmp_path / "subs.jsonl")
    _write_json(subs_file, subs, ["sub_id", "filter", "queue"])
    cols = ["event_id", "subject", "device", "payload"]

    def add_file(k):
        path = str(inp / f"events-{k}.json")
        _write_json(path, files[k], cols)
        os.utime(path, (1_700_000_000 + k, 1_700_000_000 + k))  # the source's order

    for k in (0, 1):
        add_file(k)

    calls = []

    def current_subs():
        calls.append(1)
        return spark.read.schema(SUBS_SCHEMA).json(subs_file)

    seen = []

    def on_batch(batch_id, counts, index):
        seen.append((batch_id, counts, index.index_id))
        if batch_id == 0:       # a subscription arrives between micro-batches 0 and 1
            _write_json(subs_file, subs + [NEW_SUB], ["sub_id", "filter", "queue"])
        if batch_id == 1 and len([s for s in seen if s[0] == 1]) == 1:
            raise RuntimeError("injected: the driver dies after batch 1 wrote its outputs")

    def start():
        stream = spark.readStream.schema(EVENT_SCHEMA).option("maxFilesPerTrigger", 1).json(str(inp))
        return fanout_stream(stream, current_subs, out, ckpt, queues="all",
                             trigger={"availableNow": True}, on_batch=on_batch)

    q = start()
    with pytest.raises(StreamingQueryException, match="injected"):
        q.awaitTermination(300)
    assert [s[0] for s in seen] == [0, 1]
    first_attempt_index = seen[1][2]

    for k in (2, 3):                        # more events while it is down
        add_file(k)
    q = start()
    q.awaitTermination(300)
    assert q.exception() is None
    assert [s[0] for s in seen] == [0, 1, 1, 2, 3]   # batch 1 replayed once, then 2 and 3

    import pyarrow.parquet as pq
    deliveries = pq.read_table(os.path.join(out, "deliveries")).to_pylist()
    rejected = pq.read_table(os.path.join(out, "rejected")).to_pylist()
    counts = {r["batch_id"]: r for r in pq.read_table(os.path.join(out, "counts")).to_pylist()}

    # exactly once: the (event, sub_id) multiset is the reference's, batch 0
    # without the new subscription, batches 1-3 with it
    before = Expected("nats", subs, files[0])
    after = Expected("nats", subs + [NEW_SUB], [e for f in files[1:] for e in f])
    want = sorted((e, s) for exp in (before, after) for e in exp.plain for s in exp.ids(e, "all"))
    got = sorted((r["event_id"], r["sub_id"]) for r in deliveries)
    assert got == want
    assert any(s == 999 for _, s in got) and not any(
        s == 999 and e <= 50 for e, s in got)
    assert sorted(r["event_id"] for r in rejected) == sorted({**before.rejected, **after.rejected})

    # per micro-batch: the counts reconcile and match the rows written
    assert sorted(counts) == [0, 1, 2, 3]
    for b, c in counts.items():
        assert c["events"] == 50 == c["delivered"] + c["unmatched"] + c["rejected"]
        assert c["deliveries"] == sum(1 for r in deliveries if r["batch_id"] == b)
        assert c["rejected"] == sum(1 for r in rejected if r["batch_id"] == b)
    # the index changed between 0 and 1 only; the replay of 1 rebuilt the index
    # its first attempt recorded (a new process would), 2 and 3 reused it
    assert counts[1]["index_rebuilt"] and not counts[2]["index_rebuilt"] and not counts[3]["index_rebuilt"]
    assert counts[2]["index_id"] == counts[3]["index_id"] == counts[1]["index_id"] != first_attempt_index
    assert len(calls) >= 4              # the subscriptions were looked at per micro-batch


def test_stream_needs_a_streaming_frame(spark, tmp_path):
    from topicmatch.spark import fanout_stream
    ev = spark.createDataFrame(events_rows(["a"]), EVENT_SCHEMA)
    with pytest.raises(ValueError, match="needs a streaming DataFrame"):
        fanout_stream(ev, spark.createDataFrame([], SUBS_SCHEMA), str(tmp_path / "o"), str(tmp_path / "c"))


def test_fanout_of_a_streaming_frame_is_a_streaming_frame(spark, tmp_path):
    """Plain fanout() on a stream: a streaming DataFrame of deliveries,
    written by any sink (here Parquet with a checkpoint); the rows are the
    reference's (the index is the one built when fanout() was called)."""
    from topicmatch.spark import fanout
    subs, subjects = random_case("nats", n_subs=30, n_events=120, seed=7)
    events = events_rows(subjects)
    inp = tmp_path / "in"
    inp.mkdir()
    cols = ["event_id", "subject", "device", "payload"]
    for k in range(3):
        _write_json(str(inp / f"events-{k}.json"), events[k * 40:(k + 1) * 40], cols)
    stream = spark.readStream.schema(EVENT_SCHEMA).option("maxFilesPerTrigger", 1).json(str(inp))
    out = fanout(stream, spark.createDataFrame(subs, SUBS_SCHEMA), queues="all")
    assert out.isStreaming
    q = (out.select("event_id", "sub_id").writeStream.format("parquet")
         .option("path", str(tmp_path / "out")).option("checkpointLocation", str(tmp_path / "ckpt"))
         .trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None
    import pyarrow.parquet as pq
    got = sorted((r["event_id"], r["sub_id"]) for r in pq.read_table(str(tmp_path / "out")).to_pylist())
    exp = Expected("nats", subs, events)
    assert got == sorted((e, s) for e in exp.plain for s in exp.ids(e, "all"))
