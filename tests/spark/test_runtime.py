"""How the fan-out runs: deterministic rows (also across a task retry) and
one index load per Python worker process, not per task."""
import os

import pytest

from spark_expect import EVENT_SCHEMA, NATS_SUBS, SUBS_SCHEMA, events_rows, random_case

pytestmark = pytest.mark.spark


def _events(spark, n=2000, partitions=4, seed=3):
    _, subjects = random_case("nats", n_events=n, seed=seed)
    subjects = [s if s is None or i % 3 else f"orders.eu.{s}" for i, s in enumerate(subjects)]
    return spark.createDataFrame(spark.sparkContext.parallelize(events_rows(subjects), partitions),
                                 EVENT_SCHEMA)


def _subs(spark):
    subs, _ = random_case("nats", n_events=0, seed=3)
    return spark.createDataFrame(subs + NATS_SUBS, SUBS_SCHEMA)


def test_same_rows_twice(spark):
    from topicmatch.spark import fanout
    ev, sb = _events(spark), _subs(spark)
    a = fanout(ev, sb).collect()
    b = fanout(ev, sb).collect()            # a new index (new id), same rows, same order
    assert len(a) > 1000 and a == b
    c = fanout(ev, sb, explode=False).collect()
    assert c == fanout(ev, sb, explode=False).collect()


def test_task_retry_writes_the_same_rows(spark, tmp_path):
    """Task 1 fails on its first attempt after it has produced some of its
    deliveries; Spark retries it (local[2,3]) and the result equals a run
    without a failure."""
    from topicmatch.spark import fanout
    ev, sb = _events(spark), _subs(spark)
    deliveries = fanout(ev, sb)
    clean = deliveries.collect()
    marker = str(tmp_path / "failed-once")

    def fail_first_attempt(batches):
        from pyspark import TaskContext
        ctx = TaskContext.get()
        for n, batch in enumerate(batches):
            yield batch
            if ctx.partitionId() == 1 and ctx.attemptNumber() == 0 and n == 1:
                open(marker, "w").close()
                raise RuntimeError("injected failure on the first attempt")

    retried = deliveries.mapInArrow(fail_first_attempt, deliveries.schema).collect()
    assert os.path.exists(marker), "the injected failure did not happen"
    assert retried == clean


def test_index_loaded_once_per_worker_process(spark, load_log):
    """16 tasks (each of several Arrow batches) on 2 cores: each Python worker
    process loads the index once, and there are far fewer of them than tasks
    (Spark keeps a small pool of reusable workers), never one per task or batch."""
    from topicmatch.spark import fanout_with_rejects
    ev = _events(spark, n=4000, partitions=16)
    for ship in ("broadcast", "file"):
        res = fanout_with_rejects(ev, _subs(spark), ship=ship)
        assert res.deliveries.rdd.getNumPartitions() == 16
        n = res.deliveries.count()
        assert n > 0
        loads = _loads(load_log, res.index.index_id)
        assert 1 <= len(loads) <= 6, (ship, loads)          # not one per task (16)
        assert len(set(loads)) == len(loads), (ship, loads)  # one load per process
        # the same index again: a worker that has it loaded does not load it again
        res.deliveries.count()
        again = _loads(load_log, res.index.index_id)
        assert len(set(again)) == len(again) <= 6, (ship, again)


def _loads(log, index_id):
    """The pids of the worker processes that loaded index_id."""
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return [line.split()[1] for line in f if line.split()[0] == index_id]


# -- the executors' check beside the plan's first job ----------------------------

class _Session:
    """A stand-in for a classic session not checked yet (weakref-able)."""


def _slow_check(seen, error=None):
    import threading
    import time

    def check(spark, *, force=False):
        seen.append(threading.current_thread().name)
        time.sleep(0.3)
        if error is not None:
            raise error
    return check


def test_the_check_runs_beside_the_body_and_is_waited_for(monkeypatch):
    import threading
    import time

    from topicmatch.spark import session
    seen = []
    monkeypatch.setattr(session, "check_executors", _slow_check(seen))
    t0 = time.perf_counter()
    with session.executors_checked(_Session()):
        body = threading.current_thread().name
        time.sleep(0.3)
    # beside the body, not before it: about 0.3 s in all, not 0.6
    assert time.perf_counter() - t0 < 0.55
    assert seen == ["topicmatch-executors-check"] and body != seen[0]


def test_the_checks_error_replaces_the_bodys(monkeypatch):
    """A job of the body that ran Python where topicmatch is missing fails
    with a worker's stack: the check's error, which names the fix, is the
    one raised; where the body succeeds, the check's error is raised too."""
    from topicmatch.spark import ExecutorEnvironmentError, session
    bad = ExecutorEnvironmentError("the executors cannot run topicmatch (No module named x)")
    monkeypatch.setattr(session, "check_executors", _slow_check([], bad))
    with pytest.raises(ExecutorEnvironmentError, match="No module named x"):
        with session.executors_checked(_Session()):
            raise RuntimeError("a worker's stack")
    with pytest.raises(ExecutorEnvironmentError, match="No module named x"):
        with session.executors_checked(_Session()):
            pass
    # the check passing, the body's own error is the one raised
    monkeypatch.setattr(session, "check_executors", _slow_check([]))
    with pytest.raises(RuntimeError, match="a worker's stack"):
        with session.executors_checked(_Session()):
            raise RuntimeError("a worker's stack")


def test_a_checked_session_checks_in_line(spark, monkeypatch):
    """A session checked already (every fan-out of this one was): no thread."""
    import threading

    from topicmatch.spark import check_executors, session
    check_executors(spark)
    seen = []
    real = session.check_executors

    def counted(s, *, force=False):
        seen.append(threading.current_thread().name)
        real(s, force=force)
    monkeypatch.setattr(session, "check_executors", counted)
    with session.executors_checked(spark):
        pass
    assert seen == [threading.current_thread().name]
