"""The sharded fan-out's plan decided from its statistics alone
(fastsub.spark.shard._decide, _choose_depth): no JVM, no Spark job."""
import pytest

pytest.importorskip("pyspark", reason="fastsub.spark needs PySpark (fastsub[spark])")

from fastsub.spark import shard as S  # noqa: E402


def stats(nsubs, replicated, largest):
    """{(d, N): (largest, total)} as _shard_stats returns it: per depth d the
    replicated share (N = 0) and, per candidate N, the largest shard."""
    table = {}
    for d in replicated:
        table[(d, 0)] = (0, replicated[d])
        for n in S.CANDIDATE_SHARDS:
            table[(d, n)] = (largest[d] // max(1, n // 2), nsubs - replicated[d])
    return table


def test_auto_shards_take_two_per_core_at_least():
    t = stats(1000, {1: 10, 2: 10, 3: 10}, {1: 400, 2: 300, 3: 200})
    plan = S._decide(t, S.AUTO_DEPTHS, S.CANDIDATE_SHARDS, "auto", cores=8)
    assert plan.shards == 16 and plan.nsubs == 1000 and not plan.salts


def test_auto_shards_grow_with_the_subscriptions():
    n = 40 * S.AUTO_SUBS_PER_SHARD
    t = stats(n, {1: 0, 2: 0, 3: 0}, {1: n // 8, 2: n // 8, 3: n // 8})
    plan = S._decide(t, S.AUTO_DEPTHS, S.CANDIDATE_SHARDS, "auto", cores=2)
    assert plan.shards == 64                   # the first candidate >= 40


def test_a_given_shard_count_is_kept():
    t = stats(1000, {2: 10}, {2: 100})
    plan = S._decide(t, (2,), S.CANDIDATE_SHARDS, 8, cores=2)
    assert (plan.shards, plan.depth, plan.largest) == (8, 2, 25)


def test_depth_copies_the_fewest_rows_among_those_that_fit():
    # d=1 replicates little but its largest shard is too big for a worker;
    # d=2 and d=3 both fit, d=2 replicates less.
    nsubs = 10_000
    t = stats(nsubs, {1: 10, 2: 100, 3: 500}, {1: 9_000, 2: 400, 3: 400})
    plan = S._decide(t, S.AUTO_DEPTHS, S.CANDIDATE_SHARDS, 8, cores=2)
    assert plan.depth == 2
    assert plan.replicated == 100 and plan.nsubs == nsubs


def test_when_nothing_fits_the_smallest_worker_index_wins():
    assert S._choose_depth({1: (900, 50), 2: (100, 700), 3: (300, 200)}, 1000, 4) == 3


def test_plan_groups_follow_one_rule():
    plan = S.ShardPlan(shards=3, depth=1, salts={1: 3})
    assert plan._all_groups() == [0, 3, 4, 5, 6]
    assert plan._groups_of(1) == [3, 4, 5]
