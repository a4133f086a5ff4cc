"""The sharded fan-out's plan decided from its statistics alone
(topicmatch.spark.shard._decide, _choose_depth): no JVM, no Spark job."""
import pytest

from topicmatch.spark import shard as S


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


def test_images_take_the_least_build_work():
    """The image path weighs the rows its builds insert: each row goes
    into one image (its shard's, or the replicated share's, an image of its
    own), so the work is all rows spread over the cores, or the largest
    image (one task) when that is longer; at least two shards per core, and
    few shards where more would not shorten the builds."""
    nsubs = 10_000_000

    def table(rep, largest_at_4):
        t = {}
        for d in rep:
            t[(d, 0)] = (rep[d], rep[d])
            for n in S.CANDIDATE_SHARDS:
                t[(d, n)] = (largest_at_4[d] * 4 // n, nsubs - rep[d])
        return t
    t = table({1: 200_000, 2: 400_000, 3: 700_000}, {1: 3_000_000, 2: 2_500_000, 3: 2_400_000})
    plan = S._decide_for_images(t, S.AUTO_DEPTHS, S.CANDIDATE_SHARDS, "auto", cores=2)
    # N=4, d=1: 10M / 2 = 5M rows a core, the largest image 3M
    assert (plan.shards, plan.depth) == (4, 1)
    assert plan.replicated == 200_000 and plan.largest == 3_000_000
    # a skewed depth (its largest shard one long task) loses to one that spreads
    t = table({1: 100_000, 2: 300_000, 3: 600_000}, {1: 7_000_000, 2: 2_600_000, 3: 2_500_000})
    plan = S._decide_for_images(t, S.AUTO_DEPTHS, S.CANDIDATE_SHARDS, "auto", cores=2)
    assert (plan.shards, plan.depth) == (4, 2)
    # and so does a depth whose replicated share is the long task
    t = table({1: 6_000_000, 2: 100_000, 3: 100_000}, {1: 1_000_000, 2: 2_600_000, 3: 2_600_000})
    plan = S._decide_for_images(t, S.AUTO_DEPTHS, S.CANDIDATE_SHARDS, "auto", cores=4)
    assert (plan.shards, plan.depth) == (8, 2)
    # every shard within AUTO_IMAGE_SHARD_MAX when some N allows it
    t = table({1: 0, 2: 0, 3: 0}, {1: 9_000_000, 2: 9_000_000, 3: 9_000_000})
    plan = S._decide_for_images(t, S.AUTO_DEPTHS, S.CANDIDATE_SHARDS, "auto", cores=2)
    assert max(plan.largest, plan.replicated) <= S.AUTO_IMAGE_SHARD_MAX and plan.shards == 16
    # at least two shards per core; a given N is kept
    plan = S._decide_for_images(t, S.AUTO_DEPTHS, S.CANDIDATE_SHARDS, "auto", cores=8)
    assert plan.shards >= 16
    plan = S._decide_for_images(table({2: 100}, {2: 1000}), (2,), (8,), 8, cores=2)
    assert (plan.shards, plan.depth) == (8, 2)


def test_the_image_plan_asks_for_other_depths_only_when_they_could_do_better():
    """plan_shards(images=True) aggregates depth 1 first, and the other
    depths only when _image_plan_is_best says depth 1's plan could be
    beaten: wherever it says so, the plan from every depth's figures is
    the same."""
    import random
    rng = random.Random(7)
    settled = 0
    for _ in range(2000):
        nsubs, cores = rng.choice([10_000, 3_000_000, 10_000_000, 40_000_000]), rng.choice([1, 2, 8, 16])
        t = {}
        for d in S.AUTO_DEPTHS:
            rep = int(nsubs * rng.choice([0, 0.02, 0.1, 0.5, 0.9]))
            t[(d, 0)] = (rep, rep)
            share = rng.choice([0.05, 0.3, 0.6, 1.0])
            for n in S.CANDIDATE_SHARDS:
                t[(d, n)] = (max(1, int((nsubs - rep) * max(share * 4 / n, 1 / n))), nsubs - rep)
        shards = rng.choice(["auto", "auto", 8])
        cands = S.CANDIDATE_SHARDS if shards == "auto" else (shards,)
        first = S._decide_for_images({k: v for k, v in t.items() if k[0] == 1}, (1,), cands, shards, cores)
        if S._image_plan_is_best(first, S._image_shard_counts(cands, shards, cores), cores):
            settled += 1
            full = S._decide_for_images(t, S.AUTO_DEPTHS, cands, shards, cores)
            assert (full.shards, full.depth) == (first.shards, first.depth)
    assert 100 < settled < 2000
