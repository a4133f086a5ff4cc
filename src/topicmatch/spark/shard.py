"""The sharded fan-out (docs/design.md, 'The sharded fan-out'): both sides partitioned by a route key.

    plan = plan_shards(subs, shards="auto", depth="auto")   # one aggregate (+ the check)
    print(plan.explain())                                          # d, N, shares, salting
    per_event = sharded_per_event(events, subs, plan, ...)        # a cogroup

The rule.  A filter whose first d tokens are all literal lives in shard
route_key mod N; any other filter is needed by every shard (the cogroup
copies it into each; the image path keeps it in one image of its own,
matched beside each shard's).  An event
with at least d tokens goes to the shard of its first d tokens; a shorter
one, a null and an invalid one go to a shard spread by a hash (they can
match only replicated filters, or take the rejects path).  Route keys are
computed in the JVM (route_column, filter_route_column), tested equal to
topicmatch._core.route_keys, which splits with the index's own tokenizer.

Nothing index-sized goes through the driver: it runs one aggregate over the
subscriptions in the JVM (row_stats: per depth and route-key bucket, the
rows' count and content digest, from which the shard sizes, the replicated
share and the shard images' names fold out), a check of every row in
Python (check_rows; the image path checks in its build instead) and, for
salting, one sampled count of the events per shard.  Each shard's index is
built in a Python worker from the subscriptions the cogroup hands it, and
kept in a per-process cache keyed by a digest of those rows
(SHARD_CACHE_BYTES), so the salted copies of a shard and an unchanged shard
in the next micro-batch reuse it (shard_images.py keeps images instead).

Salting (event skew).  A shard that receives more than one core's fair share
of the sampled events, share s with P cores, is split into R = min(P,
ceil(s * P)) groups: its events are spread over them by a hash of the whole
row, and its subscriptions are copied into each.

This module imports PySpark; the functions that run on executors use only
pyarrow, numpy and topicmatch.
"""
import collections
import dataclasses
import math
import os
import time
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from topicmatch import InvalidSubjectError, Sublist
from topicmatch._columns import batch_of, bool_values, int_values, numpy_as_arrow
from topicmatch._core import ROUTE_ANY, route_keys, TopicmatchRuntimeError, TopicmatchValueError
from topicmatch._dialects import check_dialect
from topicmatch.spark.base import (bad_subscription, check_depth, check_shards,  # noqa: F401
                                   check_subscriptions_schema, column)
from topicmatch.spark.images import index_rows, digest_hashes, digest_sums
from topicmatch.spark.route import filter_bucket, filter_inner, filter_route_column, route_column
from topicmatch.spark.session import parallelism
from topicmatch.spark.ship import LOAD_LOG_ENV, fork_safe_lock

#: shards="auto" above it: aim at this many subscriptions per shard (~50 MB
#: of index on light's mix), and at least 2 shards per core.
AUTO_SUBS_PER_SHARD = 500_000
#: The image path (images=True): no shard image above this many subscriptions
#: (~400 MB of image on light's mix; one task builds it in its heap).
AUTO_IMAGE_SHARD_MAX = 4_000_000
#: depth="auto": a worker's index (largest shard + replicated) should hold at
#: most this share of the subscriptions.
AUTO_WORKER_SHARE = 1 / 8
#: The depths depth="auto" chooses among.
AUTO_DEPTHS = (1, 2, 3)
#: Shard counts shards="auto" sizes (row_stats' buckets are mod the largest).
CANDIDATE_SHARDS = tuple(2 ** k for k in range(1, 13))
#: Sampled share of the events for salting; no salting below SALT_MIN_SAMPLE sampled events.
SALT_FRACTION = 0.01
SALT_MIN_SAMPLE = 1000
#: Per Python worker: shard indexes kept (by their memory_bytes), least recently
#: used out first; TOPICMATCH_SHARD_CACHE_BYTES in the executors' environment
#: overrides it.  Size it to the shards a worker serves, for streams: a cache
#: smaller than that rebuilds them in every micro-batch.
SHARD_CACHE_BYTES = int(os.environ.get("TOPICMATCH_SHARD_CACHE_BYTES", 256 << 20))

# The cogroup's frame has only names of its own: the events' columns are
# renamed by position to e0, e1, ... on the way in (DataFrame.toDF, which
# resolves no name) and back on the way out, so any name Spark allows --
# dots, backticks, spaces, one of the names below -- passes untouched and
# cannot meet an internal column.  (PySpark's applyInArrow itself refers to
# its input's columns by name string, which a dot or a backtick breaks.)
_GROUP, _KIND, _KEY, _PICK = "g", "kind", "key", "pick"
_H1, _H2 = "h1", "h2"
_SID, _FLT, _QUE = "sid", "flt", "que"


def _event_name(i: int) -> str:
    return f"e{i}"


@dataclass
class ShardPlan:
    """How a sharded fan-out splits the work (fanout(..., shards=plan) takes one too).

    shards     N, the number of shards
    depth      d: filters with d leading literal tokens are keyed by them
    salts      {shard: R} for shards whose events are spread over R groups
    nsubs      valid subscriptions
    replicated filters copied into every shard (a wildcard or fewer than d
               tokens among the first d)
    largest    subscriptions in the largest shard, replicated ones excluded
    by_depth   {d: (replicated, largest shard at N)} for the depths measured
    """
    shards: int
    depth: int
    salts: Dict[int, int] = field(default_factory=dict)
    nsubs: Optional[int] = None
    replicated: Optional[int] = None
    largest: Optional[int] = None
    by_depth: Dict[int, Tuple[int, int]] = field(default_factory=dict)
    #: the figures plan_shards measured (the shards' content digests among them)
    stats: Optional["RowStats"] = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        check_shards(self.shards, auto=False)
        check_depth(self.depth, auto=False)
        for s, r in self.salts.items():
            if not (0 <= s < self.shards and isinstance(r, int) and r >= 1):
                raise TopicmatchValueError(f"salts: shard {s!r} -> {r!r} is not a shard below "
                                 f"{self.shards} with a positive count")

    @property
    def index_id(self) -> str:
        """What the stream's counts and FanoutResult name the index by."""
        return f"sharded:N={self.shards}:d={self.depth}"

    @property
    def nsubs_per_worker(self) -> Optional[int]:
        """The most subscriptions one worker's index holds on the cogroup path:
        the largest shard plus the replicated (copied into it)."""
        if self.largest is None or self.replicated is None:
            return None
        return self.largest + self.replicated

    def explain(self) -> str:
        def pct(n):
            return "?" if n is None or not self.nsubs else f"{100.0 * n / self.nsubs:.1f}%"
        lines = [f"topicmatch sharded fan-out: N={self.shards} shards, depth d={self.depth}"]
        if self.nsubs is not None:
            lines.append(f"  subscriptions {self.nsubs:,}; needed by every shard (replicated) "
                         f"{self.replicated:,} ({pct(self.replicated)}); largest shard "
                         f"{self.largest:,} ({pct(self.largest)}); a worker's index holds "
                         f"at most {self.nsubs_per_worker:,} ({pct(self.nsubs_per_worker)})")
        for d, (rep, big) in sorted(self.by_depth.items()):
            lines.append(f"  at d={d}: replicated {pct(rep)}, largest shard {pct(big)}")
        if self.salts:
            lines.append("  salted (event skew): " + ", ".join(
                f"shard {s} x{r}" for s, r in sorted(self.salts.items())))
        else:
            lines.append("  salted: none")
        return "\n".join(lines)

    def __repr__(self):
        return f"<topicmatch ShardPlan N={self.shards} d={self.depth} salts={self.salts}>"

    # --- the groups of the grouped job: shard s, salt j -> s * width + j.
    # The rule is written here once; the two Column expressions below and
    # the list of every group all follow it.
    @property
    def _width(self) -> int:
        return max(self.salts.values(), default=1)

    def _groups_of(self, shard: int) -> List[int]:
        return [shard * self._width + j for j in range(self.salts.get(shard, 1))]

    def _all_groups(self) -> List[int]:
        return [g for s in range(self.shards) for g in self._groups_of(s)]

    def _salt_count(self, shard):
        """Column: R for a salted shard (a Column of shard numbers), else 1."""
        if not self.salts:
            return F.lit(1)
        salts = F.create_map(*[x for s, r in sorted(self.salts.items()) for x in (F.lit(s), F.lit(r))])
        return F.coalesce(F.element_at(salts, shard), F.lit(1))

    def event_group(self, shard, row_hash):
        """Column: the group of an event in `shard`: a salted shard's events
        are spread over its R groups by `row_hash`."""
        if not self.salts:
            return shard
        return shard * F.lit(self._width) + F.pmod(row_hash, self._salt_count(shard))

    def subscription_groups(self, shard, replicated):
        """Column: the groups a subscription goes to -- every group when
        `replicated` (a Column of booleans), else each group of its shard."""
        if self.salts:
            first = shard * F.lit(self._width)
            own = F.sequence(first, first + self._salt_count(shard) - 1)
        else:
            own = F.array(shard)
        return F.when(replicated, _int_array(self._all_groups())).otherwise(own)


# --------------------------------------------------------------------------
# executors: routing and statistics
# --------------------------------------------------------------------------

_CHECK = "bad_id long, bad_filter string, bad_queue string"
_CHECK_SCHEMA = pa.schema([("bad_id", pa.int64()), ("bad_filter", pa.string()),
                           ("bad_queue", pa.string())])


def _bad_queues(dialect, filters, queues):
    """Rows whose queue the index refuses: an invalid name (each distinct
    name tried once, on a filter valid in every dialect), or, in MQTT, a
    queue given beside a "$share/G/" filter."""
    bad = np.zeros(len(queues), dtype=bool)
    if queues.null_count == len(queues):
        return bad
    valid = {}
    for i, q in enumerate(queues.to_pylist()):
        if q is None:
            continue
        if q not in valid:
            try:
                Sublist(dialect).insert("x", 0, queue=q)
                valid[q] = True
            except (InvalidSubjectError, TypeError, ValueError):
                valid[q] = False
        f = filters[i].as_py()
        bad[i] = not valid[q] or (dialect == "mqtt" and f is not None and f.startswith("$share/"))
    return bad


def _check_fn(dialect: str):
    """mapInArrow over (sub_id, filter, queue): per partition, its first
    row the index would refuse (a null, an invalid filter or queue), if any."""
    def topicmatch_sub_check(batches):
        for b in batches:
            ids, filters, queues = b.column(0), b.column(1), b.column(2)
            _, kinds = route_keys(filters, dialect, 1, filters=True)
            bad = (kinds > ROUTE_ANY) | bool_values(ids.is_null())
            bad |= _bad_queues(dialect, filters, queues)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                yield batch_of({"bad_id": [ids[i].as_py()], "bad_filter": [filters[i].as_py()],
                                "bad_queue": [queues[i].as_py()]}, _CHECK_SCHEMA)
                return
    return topicmatch_sub_check


def check_rows(subscriptions: DataFrame, dialect: str) -> None:
    """One job over the subscriptions, in Python (the index's own
    tokenizer): a row the index would refuse raises here, on the driver,
    naming its sub_id and filter (base.bad_subscription's errors).  The
    image path needs none: its build task refuses the row instead, and an
    image found by its content name was built from checked rows."""
    bad = index_rows(subscriptions).mapInArrow(_check_fn(dialect), _CHECK).limit(1).collect()
    if bad:
        raise bad_subscription(dialect, bad[0]["bad_id"], bad[0]["bad_filter"], bad[0]["bad_queue"])


@dataclass(frozen=True)
class RowStats:
    """The figures of one aggregate over the subscriptions (row_stats), per
    depth d and bucket b (the route key mod `modulus`; -1 for the rows every
    shard needs): the digest_sums of those rows, (count, hi1, lo1, hi2, lo2).
    Both the plan (shard sizes) and the shard images' names (their content
    digests: sums add up) are read from it, for any shard count dividing
    `modulus`."""
    modulus: int
    sums: Dict[Tuple[int, int], Tuple[int, ...]]

    def counts(self, d: int, n: int) -> np.ndarray:
        """The keyed rows of each of n shards at depth d."""
        out = np.zeros(n, dtype=np.int64)
        for (dd, b), v in self.sums.items():
            if dd == d and b >= 0:
                out[b % n] += v[0]
        return out

    def covers(self, depths, modulus: int) -> bool:
        """Were these figures taken at exactly `depths`, buckets mod `modulus`?"""
        return self.modulus == modulus and {d for d, _ in self.sums} == set(depths)

    def total(self, d: int) -> Tuple[int, ...]:
        """The digest_sums of every row (each is in one bucket at depth d):
        the content of the whole table, as images.digest sums it."""
        out = [0] * 5
        for (dd, _), v in self.sums.items():
            if dd == d:
                out = [x + y for x, y in zip(out, v)]
        return tuple(out)

    def replicated(self, d: int) -> int:
        return int(self.sums.get((d, -1), (0,))[0])

    def shard_sums(self, d: int, n: int) -> Optional[List[Tuple[int, ...]]]:
        """The digest_sums at depth d of each of n shards' keyed rows, then
        (item n) of the replicated rows: the contents of the n + 1 images
        of the image path; None when these figures cannot give them."""
        if self.modulus % n or not any(dd == d for dd, _ in self.sums):
            return None
        out = [[0] * 5 for _ in range(n)] + [list(self.sums.get((d, -1), (0,) * 5))]
        for (dd, b), v in self.sums.items():
            if dd == d and b >= 0:
                out[b % n] = [x + y for x, y in zip(out[b % n], v)]
        return [tuple(v) for v in out]


def row_stats(subscriptions: DataFrame, dialect: str, depths, modulus: int) -> RowStats:
    """One aggregate over the subscriptions, all in the JVM (no Python
    pass): RowStats for `depths`, buckets mod `modulus`.  Each filter's
    routed form (filter_inner) is computed once whatever the number of
    depths; one depth is grouped by its bucket directly, several through
    one row per depth (an explode, which on 10M filters cost more than the
    rest of the aggregate: 3.1-4.4 s against 1.5-2.1 s for one depth)."""
    hashes = [h.alias(f"h{i}") for i, h in enumerate(digest_hashes())]
    hcols = [f"h{i}" for i in range(len(hashes))]
    sums = digest_sums([F.col(c) for c in hcols])
    shaped = index_rows(subscriptions).select(filter_inner(F.col("filter"), dialect).alias("inner"), *hashes)

    def bucket(d):
        return filter_bucket(F.col("inner"), dialect, d, modulus)
    if len(depths) == 1:
        # (the depth is put in here, not by one more select: each costs the
        # driver the JVM's analysis of it)
        got = [(depths[0], *r) for r in
               shaped.select(bucket(depths[0]).alias("b"), *hcols).groupBy("b").agg(*sums).collect()]
    else:
        buckets = F.array(*[F.struct(F.lit(d).alias("d"), bucket(d).alias("b")) for d in depths])
        got = (shaped.select(F.explode(buckets).alias("x"), *hcols)
               .groupBy(F.col("x.d").alias("d"), F.col("x.b").alias("b")).agg(*sums).collect())
    return RowStats(modulus, {(r[0], r[1]): tuple(int(x) for x in r[2:]) for r in got})


# The shard indexes of this Python worker: digest -> Sublist, least recently used first.
_shard_cache = collections.OrderedDict()
_shard_cache_bytes = [0]
_shard_cache_lock = fork_safe_lock()


def _shard_index(dialect: str, subs: pa.Table) -> Sublist:
    """The index of one shard's subscriptions (columns _SID, _FLT, _QUE, _H1,
    _H2), built once per distinct content per worker process.  The digest is
    order-independent (sums and xor of two row hashes Spark computed),
    because a shuffle delivers rows in any order."""
    h1 = int_values(subs.column(_H1)).view(np.uint64)
    h2 = int_values(subs.column(_H2)).astype(np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        digest = (dialect, subs.num_rows, int(h1.sum(dtype=np.uint64)),
                  int(np.bitwise_xor.reduce(h1)) if len(h1) else 0,
                  int((h2 * np.uint64(0x9E3779B97F4A7C15)).sum(dtype=np.uint64)))
    with _shard_cache_lock:
        sl = _shard_cache.get(digest)
        if sl is not None:
            _shard_cache.move_to_end(digest)
            return sl
    t0 = time.perf_counter()
    sl = Sublist(dialect)
    queues = subs.column(_QUE)
    sl.insert_many(subs.column(_FLT), subs.column(_SID),
                   None if queues.null_count == len(queues) else queues)
    size = sl.stats()["memory_bytes"]
    log = os.environ.get(LOAD_LOG_ENV)
    if log:
        with open(log, "a") as f:   # "shard-<digest> <pid> <subscriptions> <build seconds>"
            f.write(f"shard-{digest[2]:016x}{digest[4]:016x} {os.getpid()} {subs.num_rows} "
                    f"{time.perf_counter() - t0:.3f}\n")
    with _shard_cache_lock:
        _shard_cache[digest] = sl
        _shard_cache_bytes[0] += size
        while _shard_cache_bytes[0] > SHARD_CACHE_BYTES and len(_shard_cache) > 1:
            _, old = _shard_cache.popitem(last=False)
            _shard_cache_bytes[0] -= old.stats()["memory_bytes"]
    return sl


_SUB_COLS = (_SID, _FLT, _QUE, _H1, _H2)


def _match_fn(dialect, queues, dedupe, subject_col, event_cols, out_schema):
    """The function of one group: its rows arrive sorted by kind, so the
    shard's subscriptions (kind 0) come first and are built into its index,
    then its events (kind 1) stream through it batch by batch: a group's
    events are never all in memory at once."""
    def topicmatch_shard_match(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        subs, sl = [], None
        for b in batches:
            kinds = int_values(b.column(_KIND))
            if (kinds == 0).any():
                is_sub = numpy_as_arrow(kinds == 0, pa.bool_())
                if sl is not None:
                    raise TopicmatchRuntimeError("topicmatch: a shard's subscriptions arrived after its events "
                                       "(the group's rows must come sorted by kind)")
                subs.append(b.filter(is_sub).select(list(_SUB_COLS)))
                b = b.filter(pc.invert(is_sub))
                if b.num_rows == 0:
                    continue
            if sl is None:
                sl = _shard_index(dialect, pa.Table.from_batches(subs, _subs_schema(b)))
                subs = None
            ids = sl.match_many(b.column(subject_col), keys=pick_keys(b), queues=queues,
                                dedupe=dedupe).to_arrow()
            yield pa.RecordBatch.from_arrays([b.column(c) for c in event_cols] + [ids],
                                             schema=out_schema)
    return topicmatch_shard_match


def _subs_schema(batch: pa.RecordBatch) -> pa.Schema:
    return pa.schema([batch.schema.field(c) for c in _SUB_COLS])


# --------------------------------------------------------------------------
# driver: the plan
# --------------------------------------------------------------------------

def _subs_columns(subscriptions: DataFrame, has_queue: bool):
    cols = [column("sub_id").cast("long").alias("sub_id"), column("filter").alias("filter")]
    if has_queue:
        cols.append(column("queue").cast("string").alias("queue"))
    return cols


def plan_shards(subscriptions: DataFrame, dialect: str = "nats", shards="auto", depth="auto",
                *, events: Optional[DataFrame] = None, subject_col: str = "subject",
                salting: bool = True, check: bool = True, images: bool = False,
                stats: Optional["RowStats"] = None) -> ShardPlan:
    """plan_shards(subscriptions, dialect="nats", shards="auto", depth="auto", *,
    events=None, subject_col="subject", salting=True, check=True, images=False,
    stats=None) -> ShardPlan

    One aggregate over the subscriptions, in the JVM (row_stats): the
    replicated share and the shard sizes for depths 1-3 (or the one given)
    and the candidate shard counts (or the one given), and each bucket's
    content digest, which names the shard images.  With check=True a second
    job checks every row with the index's tokenizer: a bad one raises here,
    on the driver, naming its sub_id and filter (FanoutInputError for a
    null, InvalidSubjectError for an invalid filter or queue: the errors of
    the unsharded path, base.bad_subscription).  depth="auto": among the
    depths whose worker index (largest shard + replicated) holds at most
    AUTO_WORKER_SHARE of the subscriptions, the one copying the fewest rows
    into the shards; when none does, the one with the smallest worker index.
    shards="auto": at least two per core and about AUTO_SUBS_PER_SHARD
    subscriptions each.  images=True plans for shard images instead
    (_decide_for_images): the least build work, and the aggregate covers
    the first depth alone unless another could do better
    (_image_plan_is_best).  With `events` and
    salting=True, a 1% sample of the events is counted per shard, and each
    shard with more than one core's share is salted."""
    check_dialect(dialect)
    check_depth(depth)
    check_shards(shards)
    cores = parallelism(subscriptions.sparkSession)
    depths = AUTO_DEPTHS if depth == "auto" else (depth,)
    # shards="auto" sizes powers of two: buckets mod the largest serve them all
    candidates = CANDIDATE_SHARDS if shards == "auto" else (shards,)
    # The image plan asks for the other depths only when the first leaves
    # room to do better (_image_plan_is_best): on most sets one depth
    # suffices, and each depth is a third of the aggregate's rows.
    first = depths[:1] if images else depths
    if stats is None or not stats.covers(first, max(candidates)):
        stats = row_stats(subscriptions, dialect, first, max(candidates))
    if check:
        check_rows(subscriptions, dialect)
    decide = _decide_for_images if images else _decide
    plan = decide(_stats_table(stats, first, candidates), first, candidates, shards, cores)
    if first != depths and not _image_plan_is_best(plan, _image_shard_counts(candidates, shards, cores),
                                                  cores):
        more = row_stats(subscriptions, dialect, depths[len(first):], max(candidates))
        stats = RowStats(stats.modulus, {**stats.sums, **more.sums})
        plan = decide(_stats_table(stats, depths, candidates), depths, candidates, shards, cores)
    plan = dataclasses.replace(plan, stats=stats)
    if events is not None and salting and plan.shards > 1:
        plan.salts = _salts(events, subject_col, dialect, plan, cores)
    return plan


def _stats_table(stats: RowStats, depths, candidates):
    """{(d, N): (largest shard, total)} for each depth and candidate shard
    count, N = 0 for the replicated share: what _decide reads."""
    table = {}
    for d in depths:
        rep = stats.replicated(d)
        table[(d, 0)] = (rep, rep)
        for n in candidates:
            c = stats.counts(d, n)
            table[(d, n)] = (int(c.max()), int(c.sum()))
    return table


def _totals(table, depths, candidates):
    """({d: replicated}, all subscriptions) from the statistics table."""
    rep = {d: table.get((d, 0), (0, 0))[1] for d in depths}
    return rep, rep[depths[0]] + table.get((depths[0], candidates[0]), (0, 0))[1]


def _plan_at(table, depths, rep, nsubs, n, d) -> ShardPlan:
    """The ShardPlan of N=n, depth d, with the figures of every depth at n."""
    by_depth = {dd: (rep[dd], table.get((dd, n), (0, 0))[0]) for dd in depths}
    return ShardPlan(shards=n, depth=d, nsubs=nsubs, replicated=rep[d],
                     largest=by_depth[d][1], by_depth=by_depth)


def _decide(table, depths, candidates, shards, cores) -> ShardPlan:
    """The plan from the statistics alone, no Spark (unit tests call it):
    shards="auto" takes the first candidate with at least two shards per
    core and about AUTO_SUBS_PER_SHARD subscriptions each; the depth is
    _choose_depth's.  No salts (they need the events)."""
    rep, nsubs = _totals(table, depths, candidates)
    if shards == "auto":
        want = max(2 * cores, math.ceil(nsubs / AUTO_SUBS_PER_SHARD))
        n = next((c for c in candidates if c >= want), candidates[-1])
    else:
        n = shards
    by_depth = {d: (rep[d], table.get((d, n), (0, 0))[0]) for d in depths}
    return _plan_at(table, depths, rep, nsubs, n, _choose_depth(by_depth, nsubs, n))


def _decide_for_images(table, depths, candidates, shards, cores) -> ShardPlan:
    """The plan of the image path, from the statistics alone: the (N, d)
    whose builds take the least time, estimated in rows inserted as
    max(all rows / cores, the largest image's rows).  Each row goes into
    one image: its keyed shard's, or the replicated share's, which is an
    image of its own (matched beside each shard's: match_many(also=...)).
    The cogroup's rules (about AUTO_SUBS_PER_SHARD a shard, a worker's
    index at most AUTO_WORKER_SHARE of the whole) are for an index every
    worker builds and keeps in its own heap; an image is built once and
    mapped, its pages shared, so fewer, larger shards cost less: fewer
    builds and files.  N is at least two per core (shards="auto") and no
    image holds more than AUTO_IMAGE_SHARD_MAX rows when some (N, d)
    allows it."""
    rep, nsubs = _totals(table, depths, candidates)
    ns = _image_shard_counts(candidates, shards, cores)

    def cost(nd):
        n, d = nd
        return (*_image_build_cost(max(rep[d], table.get((d, n), (0, 0))[0]), nsubs, cores), n, d)
    n, d = min(((n, d) for n in ns for d in depths), key=cost)
    return _plan_at(table, depths, rep, nsubs, n, d)


def _image_shard_counts(candidates, shards, cores) -> List[int]:
    """The shard counts the image plan weighs: at least two per core
    (shards="auto"), or the one given."""
    if shards == "auto":
        return [c for c in candidates if c >= 2 * cores] or [candidates[-1]]
    return [shards]


def _image_build_cost(largest_image: int, nsubs: int, cores: int):
    """(over AUTO_IMAGE_SHARD_MAX, rows a core inserts at best): what the
    image plan minimises, before the fewest shards and the smallest depth;
    never below (False, nsubs / cores)."""
    return largest_image > AUTO_IMAGE_SHARD_MAX, max(nsubs / cores, largest_image)


def _image_plan_is_best(plan: ShardPlan, ns, cores) -> bool:
    """No depth can give a better image plan than `plan`: its builds are
    bound by all rows / cores (no image longer), within
    AUTO_IMAGE_SHARD_MAX, and it has the fewest shards weighed (the
    tie-break).  Then the other depths' figures need not be gathered."""
    return (plan.shards == ns[0] and _image_build_cost(max(plan.replicated, plan.largest), plan.nsubs, cores)
            == (False, plan.nsubs / cores))


def _choose_depth(by_depth, nsubs, n):
    """Among the depths whose worker index (largest shard + replicated) is
    at most AUTO_WORKER_SHARE of the subscriptions, the one that copies the
    fewest rows into the shards (n x replicated + keyed: the shuffle and the
    builds); when none is that small, the one with the smallest worker index."""
    fits = [d for d, (rep, big) in by_depth.items() if rep + big <= AUTO_WORKER_SHARE * nsubs]
    if fits:
        return min(fits, key=lambda d: (n * by_depth[d][0] + nsubs - by_depth[d][0], d))
    return min(by_depth, key=lambda d: (sum(by_depth[d]), d))


def _salts(events: DataFrame, subject_col: str, dialect: str, plan: ShardPlan, cores: int):
    """{shard: R} from a sample of the events' shards."""
    if cores < 2:
        return {}
    key = route_column(column(subject_col), dialect, plan.depth)
    rows = (events.select(column(subject_col)).sample(fraction=SALT_FRACTION, seed=4242)
            .select(F.pmod(key, F.lit(plan.shards)).alias("s"))
            .where(F.col("s").isNotNull()).groupBy("s").count().collect())
    total = sum(r["count"] for r in rows)
    if total < SALT_MIN_SAMPLE:
        return {}
    out = {}
    for r in rows:
        share = r["count"] / total
        if share * cores > 1.0:
            out[int(r["s"])] = min(cores, math.ceil(share * cores))
    return out


# --------------------------------------------------------------------------
# driver: the per-event frame
# --------------------------------------------------------------------------

def _int_array(values):
    return F.array(*[F.lit(int(v)) for v in values])


def pick_keys(batch):
    """The pick keys of a batch of event_side's rows: its _PICK column, or
    None where every row picks by its subject (all null)."""
    keys = batch.column(_PICK)
    return None if keys.null_count == len(keys) else keys


@dataclass
class EventSide:
    """The events of a sharded fan-out, ready for their groups: `frame` has
    the group (_GROUP), the events' columns renamed by position (`safe`, see
    _event_name) and the pick key (_PICK); `out_schema_spark`/`out_schema`
    are the per-event frame's (the events' columns, then sub_ids)."""
    frame: DataFrame
    event_cols: List[str]
    safe: List[str]
    subject: str
    out_schema_spark: T.StructType
    out_schema: pa.Schema


def event_side(events: DataFrame, plan: ShardPlan, *, subject_col: str, key_col: Optional[str],
               dialect: str) -> EventSide:
    """Each event's group: its shard (its route key, computed in the JVM, so
    the events cross into Python once, to be matched), spread over the
    shard's salt groups."""
    event_cols = list(events.columns)
    # By position, from here on (see _event_name); the subject and key are
    # found as schema_field finds them (the first column of that name).
    safe = [_event_name(i) for i in range(len(event_cols))]
    ev = events.toDF(*safe)
    subject = F.col(safe[event_cols.index(subject_col)])
    # Without a key column a row picks by its subject, which a null key
    # means: no copy of every subject goes to Python (or the shuffle).
    pick = F.lit(None).cast("string") if key_col is None else F.coalesce(
        F.col(safe[event_cols.index(key_col)]).cast("string"), subject)
    # Spreads the events no route key places (null) and a salted shard's
    # events: a hash of the whole row (map columns cannot be hashed).
    row_hash = F.xxhash64(*[F.col(c) for c, f in zip(safe, events.schema.fields)
                            if not isinstance(f.dataType, T.MapType)])
    shard = F.pmod(F.coalesce(route_column(subject, dialect, plan.depth), row_hash), F.lit(plan.shards))
    frame = ev.select(plan.event_group(shard, row_hash).alias(_GROUP), *[F.col(c) for c in safe],
                      pick.alias(_PICK))
    out_schema_spark = T.StructType(
        [T.StructField(c, f.dataType, f.nullable, f.metadata)
         for c, f in zip(safe, events.schema.fields)]
        + [T.StructField("sub_ids", T.ArrayType(T.LongType()), True)])
    from pyspark.sql.pandas.types import to_arrow_schema
    return EventSide(frame, event_cols, safe, safe[event_cols.index(subject_col)],
                     out_schema_spark, to_arrow_schema(out_schema_spark))


def sharded_per_event(events: DataFrame, subscriptions: DataFrame, plan: ShardPlan, *,
                      subject_col: str, key_col: Optional[str], dialect: str, queues: str,
                      dedupe: bool) -> DataFrame:
    """events' columns + `sub_ids` (null for a rejected event), as the
    unsharded fan-out's per-event frame, computed shard by shard, the
    subscriptions shuffled beside the events and each shard's index built
    in the group (or taken from the worker's cache).  The subscriptions are
    checked by plan_shards (the call's plan, plan.py) before."""
    has_queue = check_subscriptions_schema(subscriptions)
    side = event_side(events, plan, subject_col=subject_col, key_col=key_col, dialect=dialect)
    # One frame of both sides (the other side's columns null), kind 0 for a
    # subscription and 1 for an event, clustered by group and sorted by kind
    # within it: grouped applyInArrow then streams each group to one call,
    # subscriptions first.
    null = lambda t, name: F.lit(None).cast(t).alias(name)  # noqa: E731
    sub_nulls = [null("long", _SID), null("string", _FLT), null("string", _QUE),
                 null("long", _H1), null("int", _H2)]
    ev = side.frame.select(_GROUP, F.lit(1).alias(_KIND), *side.safe, _PICK, *sub_nulls)

    sub = subscriptions.select(*_subs_columns(subscriptions, has_queue)).toDF(
        *([_SID, _FLT] + ([_QUE] if has_queue else [])))
    sub = sub.withColumn(_KEY, filter_route_column(F.col(_FLT), dialect, plan.depth))
    groups = plan.subscription_groups(F.pmod(F.col(_KEY), F.lit(plan.shards)), F.col(_KEY) == -1)
    queue = F.col(_QUE) if has_queue else F.lit(None).cast("string")
    ident = [F.col(_SID), F.col(_FLT)] + ([F.col(_QUE)] if has_queue else [])
    sub = sub.select(F.explode(groups).alias(_GROUP), F.lit(0).alias(_KIND),
                     *[null(f.dataType, c) for c, f in zip(side.safe, events.schema.fields)],
                     null("string", _PICK), F.col(_SID), F.col(_FLT), queue.alias(_QUE),
                     F.xxhash64(*ident).alias(_H1), F.hash(*ident).alias(_H2))
    both = ev.unionByName(sub).repartition(F.col(_GROUP)).sortWithinPartitions(_GROUP, _KIND)
    fn = _match_fn(dialect, queues, dedupe, side.subject, side.safe, side.out_schema)
    return both.groupBy(_GROUP).applyInArrow(fn, side.out_schema_spark).toDF(*side.event_cols, "sub_ids")
