"""How a fan-out reaches its index, decided once per call: plan_fanout
makes a FanoutPlan from the subscriptions alone (the count, the content
names, the shard decision and the path, with each job it ran and why),
explain() says it in words, and fanout(events, plan) uses it with no job at
call time.  Every entry point goes through here: fanout,
fanout_with_rejects, fanout_stream's micro-batches, share_index of a
DataFrame and the command line.

The paths (FanoutPlan.route):

    image         one index, an image built by an executor task and mapped
                  by every Python worker (images.py); across hosts with no
                  image_dir it travels through the driver: served by it to
                  the hosts that lack it, or on Spark Connect returned to
                  the client as rows and added to its session
    shard-images  one image per shard and one for the replicated share,
                  built by executor tasks, every event matched in place
                  against its shard's and the replicated share's
                  (shard_images.py)
    shipped       one index on the driver, shipped (shared_index.py): a
                  Sublist or SharedIndex passed in, ship= named, or a
                  Spark Connect client that cannot add an image to its
                  session (before 3.5), without image_dir
    cogroup       the events and the subscriptions grouped by shard, each
                  group's index built in its task on every call (shard.py):
                  a sharded fan-out where images cannot be used

The shard rule (shard_rule) and the per-DataFrame memory of plans live here
and nowhere else.
"""
import dataclasses
import logging
import weakref
from typing import Any, Optional, Tuple, Union

from pyspark.sql import DataFrame

from topicmatch import Sublist
from topicmatch._core import TopicmatchTypeError, TopicmatchValueError
from topicmatch._dialects import check_dialect
from topicmatch.spark.base import QUEUE_MODES, type_name
from topicmatch.spark.image_hosts import (check_dir_and_ship, connect_host, connect_master,
                                          spark_files, use_images, warn_once)
from topicmatch.spark.images import image_index, index_rows, name_of, vanished
from topicmatch.spark.limits import limit
from topicmatch.spark.session import check_executors, executors_checked, is_connect, session_key
from topicmatch.spark.shard import (AUTO_DEPTHS, CANDIDATE_SHARDS, RowStats, ShardPlan, check_depth,
                                   check_rows, check_shards, plan_shards, row_stats)
from topicmatch.spark.shard_images import shard_images
from topicmatch.spark.shared_index import build_index, check_ship, ship_sublist
from topicmatch.spark.ship import SharedIndex, fork_safe_lock

_log = logging.getLogger("topicmatch.spark")

ROUTES = ("image", "shard-images", "shipped", "cogroup")


@dataclasses.dataclass(frozen=True)
class FanoutOptions:
    """The keywords fanout, fanout_with_rejects, fanout_stream and
    plan_fanout share, as one object (each of them still takes them as
    keywords too).  The first six decide the plan (where the index is and
    how it is built); the rest say how events are matched against it."""
    dialect: str = "nats"
    shards: Any = "auto"
    depth: Any = "auto"
    ship: str = "auto"
    image_dir: Optional[str] = None
    reuse_index: bool = True
    subject_col: str = "subject"
    key_col: Optional[str] = None
    queues: str = "pick"
    explode: bool = True
    dedupe: bool = False

    #: the fields a plan decides with; a plan passed in fixes them
    PLAN_FIELDS = ("dialect", "shards", "depth", "ship", "image_dir", "reuse_index")

    def check(self) -> "FanoutOptions":
        """Each value checked, with an error naming it; -> self."""
        check_dialect(self.dialect)
        if not isinstance(self.shards, ShardPlan):
            check_shards(self.shards)
        check_depth(self.depth)
        check_ship(self.ship)
        if self.queues not in QUEUE_MODES:
            raise TopicmatchValueError(f"queues must be 'pick', 'all' or 'none', not {self.queues!r}")
        if self.image_dir is not None:
            check_dir_and_ship(self.image_dir, self.ship)
        return self

    def replace(self, **changes) -> "FanoutOptions":
        return dataclasses.replace(self, **changes)

    def plan_key(self) -> tuple:
        """What a remembered plan of one DataFrame object is kept under."""
        shards = self.shards
        if isinstance(shards, ShardPlan):
            shards = ("given", shards.shards, shards.depth, tuple(sorted(shards.salts.items())))
        return (self.dialect, shards, self.depth, self.ship, self.image_dir)


def options_of(options: Optional[FanoutOptions], **given) -> FanoutOptions:
    """An entry point's options: `options` (or the defaults) with the
    keywords the caller set.  A keyword left at its default does not
    override a value in `options`."""
    base = FanoutOptions() if options is None else options
    if not isinstance(base, FanoutOptions):
        raise TopicmatchTypeError(f"options must be a topicmatch.spark.FanoutOptions, not "
                                  f"{type_name(base)}")
    defaults = FanoutOptions()
    known = {f.name for f in dataclasses.fields(FanoutOptions)}
    for k in given:
        if k not in known:
            raise TopicmatchTypeError(f"unknown fan-out option {k!r}: the options are "
                                      + ", ".join(sorted(known)))
    changed = {k: v for k, v in given.items() if _differs(v, getattr(defaults, k))}
    return base.replace(**changed) if changed else base


def _differs(a, b) -> bool:
    return type(a) is not type(b) or a != b


def shard_rule(shards, nsubs: Optional[int]) -> Tuple[bool, str]:
    """The shard rule, written once: (sharded?, why in words).  nsubs is
    needed only for shards="auto"."""
    if isinstance(shards, ShardPlan):
        return True, f"a ShardPlan was given (N={shards.shards}, d={shards.depth})"
    if shards == 1:
        return False, "shards=1: one index"
    if shards != "auto":
        return True, f"shards={shards}"
    top = limit("AUTO_SHARD_MIN_SUBS")
    if nsubs <= top:
        return False, f'shards="auto": {nsubs:,} subscriptions <= AUTO_SHARD_MIN_SUBS ({top:,}): one index'
    return True, f'shards="auto": {nsubs:,} subscriptions > AUTO_SHARD_MIN_SUBS ({top:,}): sharded'


class FanoutPlan:
    """How a fan-out reaches its index (plan_fanout makes one; fanout(events,
    plan) uses it and runs no job at call time).

    route        "image", "shard-images", "shipped" or "cogroup" (plan.py's
                 docstring says what each is)
    index        the SharedIndex of an unsharded route, or the ShardPlan
                 of a sharded one (what FanoutResult.index reports)
    options      the FanoutOptions it was made with
    nsubs        the subscriptions counted, where a job counted them
    why          the reasons for the route, in order
    steps        the jobs and tasks run to make it, in order (empty when an
                 earlier plan of the same DataFrame object was reused)
    explain()    all of it in words
    """

    def __init__(self, route, options, session, *, index=None, shard_plan=None, shard_paths=None,
                 subscriptions=None, nsubs=None, why=(), steps=()):
        assert route in ROUTES, route
        self.route, self.options, self.session = route, options, session
        self.shard_plan, self.shard_paths = shard_plan, shard_paths
        self._index, self._subscriptions = index, subscriptions
        self.nsubs = nsubs
        self.why, self.steps = list(why), list(steps)

    @property
    def sharded(self) -> bool:
        return self.route in ("shard-images", "cogroup")

    @property
    def index(self) -> Union[SharedIndex, ShardPlan]:
        return self.shard_plan if self.sharded else self._index

    @property
    def shared_index(self) -> Optional[SharedIndex]:
        return self._index

    @property
    def subscriptions(self) -> Optional[DataFrame]:
        """The subscriptions DataFrame a cogroup plan groups on every call."""
        return self._subscriptions

    @property
    def index_id(self) -> str:
        return self.index.index_id

    def is_stale(self) -> bool:
        """Has an image this plan names gone from a directory the driver sees
        (a /tmp cleaner)?  Then it is made again, never trusted."""
        if self.route == "image":
            return vanished(self._index.image_path)
        if self.route == "shard-images":
            return any(vanished(p) for p in self.shard_paths)
        return False

    def again(self, options, subscriptions, steps=()) -> "FanoutPlan":
        """This plan for another call: `options` (the same plan keywords),
        `subscriptions` (the DataFrame of this call, for the cogroup), and
        the jobs run for it (none, when remembered)."""
        return FanoutPlan(self.route, options, self.session, index=self._index,
                          shard_plan=self.shard_plan, shard_paths=self.shard_paths,
                          subscriptions=subscriptions, nsubs=self.nsubs, why=self.why,
                          steps=steps)

    def at_call_time(self) -> str:
        """What fanout(events, plan) runs before the first action: nothing,
        except the cogroup's salting sample."""
        if self.route == "cogroup" and not isinstance(self.options.shards, ShardPlan):
            return ("one job: a 1% sample of the events, counted per shard, to salt the "
                    "shards that would hold more than one core's share (cogroup)")
        return "no job: the match runs with the first action on the result"

    def explain(self) -> str:
        o = self.options
        head = {"image": "one image, built on an executor and mapped by every Python worker",
                "shard-images": "shard images, built on the executors, every event matched "
                                "where it is",
                "shipped": "one index on the driver, shipped to the executors",
                "cogroup": "sharded by cogroup: the events and subscriptions grouped by shard, "
                           "each shard's index built in its task on every call"}[self.route]
        lines = [f"topicmatch fan-out plan: {head} (route {self.route!r})",
                 f"  options: dialect={o.dialect!r} shards={o.shards!r} depth={o.depth!r} "
                 f"ship={o.ship!r} image_dir={o.image_dir!r} reuse_index={o.reuse_index}"]
        if self.nsubs is not None:
            lines.append(f"  subscriptions: {self.nsubs:,}")
        lines += ["  why:"] + [f"    - {w}" for w in self.why]
        idx = self._index
        if idx is not None:
            where = idx.image_path if idx.shipped_by == "image" else idx.shipped_by
            lines.append(f"  index: {idx.nsubs:,} subscriptions, {idx.nbytes:,} bytes, "
                         f"{idx.shipped_by} ({where})")
        if self.shard_plan is not None:
            lines += ["  " + ln for ln in self.shard_plan.explain().splitlines()]
        if self.shard_paths:
            lines.append(f"  images: {len(self.shard_paths)} (the shards', then the replicated "
                         f"share's), first {self.shard_paths[0]}")
        lines.append("  jobs run to make this plan:")
        lines += [f"    - {s}" for s in self.steps] or ["    - none (remembered from an earlier "
                                                       "call on this DataFrame object)"]
        lines.append(f"  at call time: {self.at_call_time()}")
        return "\n".join(lines)

    def __repr__(self):
        return f"<topicmatch FanoutPlan route={self.route!r} index={self.index!r}>"


# --------------------------------------------------------------------------
# plans remembered per DataFrame object
# --------------------------------------------------------------------------

# id(df) -> (weakref(df), {key: value}): what calls learnt about one
# subscriptions DataFrame object (its plans, its count), for later calls on
# the same object.  A new DataFrame over changed rows is a new object: it
# is planned afresh, so it always gives the new answers.
_BUILT = {}
_BUILT_LOCK = fork_safe_lock()


def _forget(key, built=_BUILT, lock=_BUILT_LOCK):
    # (bound at definition: a DataFrame collected while the interpreter
    # shuts down calls this after the module's globals are gone)
    with lock:
        built.pop(key, None)


def remembered(subscriptions, key):
    """What an earlier call kept for this DataFrame object under key, or None."""
    with _BUILT_LOCK:
        entry = _BUILT.get(id(subscriptions))
        if entry is not None and entry[0]() is subscriptions:
            return entry[1].get(key)
    return None


def remember(subscriptions, key, value):
    with _BUILT_LOCK:
        entry = _BUILT.get(id(subscriptions))
        if entry is None or entry[0]() is not subscriptions:
            try:
                ref = weakref.ref(subscriptions,
                                  lambda _r, k=id(subscriptions), forget=_forget: forget(k))
            except TypeError:  # pragma: no cover - a DataFrame class without weakrefs
                return
            entry = _BUILT[id(subscriptions)] = (ref, {})
        entry[1][key] = value


def count_of(subscriptions: DataFrame, reuse: bool, steps: list) -> int:
    """The rows of `subscriptions`: remembered (from a count or a digest of
    the same object), else one count job."""
    key = (session_key(subscriptions.sparkSession), "count")
    n = remembered(subscriptions, key) if reuse else None
    if n is None:
        n = subscriptions.count()
        steps.append('count job: shards="auto" needs the number of subscriptions')
        if reuse:
            remember(subscriptions, key, n)
    return n


def is_sharded(subscriptions: DataFrame, shards, reuse: bool = True) -> bool:
    """Does a fan-out of this DataFrame shard (shard_rule, counting where
    "auto" needs it)?  fanout_stream asks before it starts."""
    n = count_of(subscriptions, reuse, []) if shards == "auto" else None
    return shard_rule(shards, n)[0]


def auto_statistics(rows: DataFrame, dialect: str, depth) -> Tuple[int, RowStats]:
    """The one aggregate a shards="auto" plan of images starts from: row_stats
    of index_rows' frame `rows` at the first depth (depth "auto": the first of
    AUTO_DEPTHS), buckets mod the largest candidate count, which serve every
    count "auto" weighs.  -> (that depth, the statistics)."""
    d = AUTO_DEPTHS[0] if depth == "auto" else depth
    return d, row_stats(rows, dialect, (d,), max(CANDIDATE_SHARDS))


def checked_plan(subscriptions: DataFrame, dialect: str, shards, depth, reuse: bool, *,
                 rows: DataFrame, images: bool = False, steps: Optional[list] = None,
                 stats: Optional[RowStats] = None) -> ShardPlan:
    """plan_shards(subscriptions, dialect, shards, depth): the aggregate that
    measures the shards and names their images, and (not for images, whose
    build checks the rows) the job that checks every row, kept for later
    calls on the same DataFrame object (with reuse).  rows: the plan's
    index_rows frame of subscriptions, which the jobs read (what is kept
    stays keyed to subscriptions itself)."""
    steps = [] if steps is None else steps
    check = not images
    key = (session_key(subscriptions.sparkSession), dialect, "plan", shards, depth, images)
    checked_key = key + ("checked",)
    plan = remembered(subscriptions, key) if reuse else None
    if plan is None:
        plan = plan_shards(rows, dialect, shards, depth, check=check, images=images,
                           stats=stats)
        if plan.stats is not stats:
            steps.append("statistics job: one aggregate measures the shards and names each "
                         "shard's image by its rows' content")
        if check:
            steps.append("check job: every row through the tokenizer")
        if reuse:
            remember(subscriptions, key, plan)
    elif check and not remembered(subscriptions, checked_key):
        check_rows(rows, dialect)
        steps.append("check job: every row through the tokenizer")
    if check and reuse:
        remember(subscriptions, checked_key, True)
    return plan


# --------------------------------------------------------------------------
# the plan
# --------------------------------------------------------------------------

def plan_fanout(subscriptions, options: Optional[FanoutOptions] = None, *, spark=None,
                _remember: bool = True, _while_building=None, **keywords) -> FanoutPlan:
    """plan_fanout(subscriptions, options=None, *, spark=None, **keywords) -> FanoutPlan

    Decide now how a fan-out against `subscriptions` (a DataFrame, a
    Sublist or a SharedIndex) reaches its index, and run the jobs that
    needs: count or digest, probe, build.  Pass the plan to fanout /
    fanout_with_rejects in place of the subscriptions, and the call runs
    no job of its own (plan.at_call_time() says the one exception).
    keywords: FanoutOptions' fields (dialect, shards, depth, ship,
    image_dir, reuse_index); spark: the session, for a Sublist (a
    DataFrame brings its own).  plan.explain() says what was decided and why.

    With reuse_index (the default) a plan of the same DataFrame object is
    remembered: planning it again runs no job, unless an image it names has
    gone (then it is made again).

    (_while_building, fanout_with_rejects': called as f(shard_plan, paths)
    just before the shard images' build job, with the ShardPlan
    and the image paths the plan will carry, where those are known before
    the jobs; it must return at once: the caller makes its match frame on a
    thread of its own meanwhile.)"""
    opts = options_of(options, **keywords).check()
    if isinstance(opts.shards, ShardPlan) and not isinstance(subscriptions, DataFrame):
        raise TopicmatchValueError("a ShardPlan shards a subscriptions DataFrame, not a "
                                   f"{type_name(subscriptions)}")
    if isinstance(subscriptions, DataFrame):
        spark = subscriptions.sparkSession
    elif spark is None:
        from pyspark.sql import SparkSession
        spark = SparkSession.getActiveSession()
        if spark is None:
            raise TopicmatchValueError("plan_fanout of a Sublist or SharedIndex needs spark= "
                                       "(no active session)")
    if isinstance(subscriptions, (SharedIndex, Sublist)):
        return _plan_given(spark, subscriptions, opts)
    if not isinstance(subscriptions, DataFrame):
        raise TopicmatchTypeError("subscriptions must be a pyspark.sql.DataFrame, a topicmatch.Sublist "
                                  f"or a SharedIndex, not {type_name(subscriptions)}")
    key = (session_key(spark), "fanout-plan") + opts.plan_key()
    memo = opts.reuse_index and _remember
    if memo:
        plan = remembered(subscriptions, key)
        if plan is not None and not plan.is_stale():
            return plan.again(opts, subscriptions)
    # the one-row task that checks the executors can run topicmatch (once
    # per session): here, so that a plan made ahead leaves no job to the
    # call; beside the plan's first job, which runs no Python
    with executors_checked(spark):
        plan = _plan_frame(spark, subscriptions, opts, memo, _while_building)
    _log.info("%s", plan.explain())
    if memo:
        # (kept without the DataFrame: a strong reference from here would
        # keep it, and so this entry, alive for ever)
        remember(subscriptions, key, plan.again(opts, None))
    return plan


def _plan_given(spark, index, opts: FanoutOptions) -> FanoutPlan:
    """A Sublist or SharedIndex: one index already, shipped as it is."""
    what = "SharedIndex" if isinstance(index, SharedIndex) else "Sublist"
    if index.dialect != opts.dialect:
        raise TopicmatchValueError(f"the {'shared index' if what == 'SharedIndex' else what} is "
                                   f"{index.dialect!r}, the fan-out asks for "
                                   f"dialect={opts.dialect!r}")
    if opts.shards not in (1, "auto"):
        raise TopicmatchValueError(
            f"shards={opts.shards} needs the subscriptions as a DataFrame: a "
            f"{type_name(index)} is one index already built on the driver, "
            "so it is shipped whole (shards=1 or 'auto')")
    check_executors(spark)
    why = [f"a {what} was passed in: one index, already built on the driver"]
    if what == "SharedIndex":
        idx = index
        why.append(f"used as it is ({index.shipped_by})")
    else:
        idx = ship_sublist(spark, index, ship=opts.ship, image_dir=opts.image_dir)
        why.append(f"shipped by {idx.shipped_by}"
                   + (" (saved into image_dir, named by its content)"
                      if opts.image_dir is not None else ""))
    route = "image" if idx.shipped_by == "image" else "shipped"
    return FanoutPlan(route, opts, session_key(spark), index=idx, nsubs=idx.nsubs, why=why)


def _images_why(spark, opts: FanoutOptions) -> Tuple[bool, str, bool]:
    """Can this DataFrame's index go through images, and why (or why not);
    and do they travel through Spark (spark_files)?  That last is asked of
    the cluster (the JVM's list of executors) once here, and the plan
    hands the answer to its builds: asked again, it could only cost the
    driver another round trip, or, were an executor to register meanwhile,
    give the same plan two answers."""
    if opts.image_dir is not None:
        return True, f"image_dir={opts.image_dir!r}: images are built there by executor tasks", False
    if opts.ship != "auto":
        why = (f"ship={opts.ship!r} was given with a subscriptions DataFrame: its index is built "
               "on the driver and shipped, not as images (leave ship='auto' for images)")
        warn_once(spark, "topicmatch: " + why)
        return False, why, False
    if not use_images(spark, None, "auto"):
        return False, ("Spark Connect without image_dir, the server's executors may run on "
                       "several hosts (its master is not local), and this client cannot add an "
                       "image to its session (its PySpark's addArtifacts takes no file=: Spark "
                       "Connect 3.5+), so the index is built on the driver and shipped (pass "
                       "image_dir= storage the executors share)"), False
    through = spark_files(spark, None)
    if through and is_connect(spark):
        return True, ("Spark Connect, no image_dir, and the server's master is "
                      f"{connect_master(spark) or 'not said'!r}, not local: its executors may "
                      "run on several hosts, so images are built by executor tasks and "
                      "returned to this client as rows of the tasks' results (each checked "
                      "as it arrives), and the client adds them to its session as "
                      "artifacts, so each host fetches each once through Spark"), True
    if through:
        return True, ("no image_dir, executors on several hosts (or dynamic allocation): "
                      "images are built by executor tasks and sent to the driver, which "
                      "serves them: each host fetches once only the images it lacks"), True
    if is_connect(spark):
        return True, ("Spark Connect, no image_dir: the server's master is local and a probe "
                      f"task's executors reported one host ({connect_host(spark)}): images "
                      "are built by executor tasks into that host's image directory"), False
    return True, ("no image_dir, every executor on one host: images are built by executor "
                  "tasks into that host's image directory"), False


def _plan_frame(spark, subscriptions: DataFrame, opts: FanoutOptions, memo: bool,
                while_building=None) -> FanoutPlan:
    images, images_why, through_spark = _images_why(spark, opts)
    why, steps = [images_why], []
    nsubs = name = stats = None
    # The columns an index is built from, made once for every job of this
    # plan that reads the rows (the statistics, the check, the build):
    # making it costs the driver the JVM's analysis of a select.  A plan's
    # own, never kept past it.
    rows = index_rows(subscriptions) if images else None
    if opts.shards == "auto":
        if images:
            # One pass decides "auto" and names every image either way: the
            # shards' statistics at the first depth count the rows, sum to
            # the whole table's digest (the one image's name), and are the
            # sharded plan's own first aggregate.
            depth, stats = auto_statistics(rows, opts.dialect, opts.depth)
            total = stats.total(depth)
            nsubs, name = int(total[0]), name_of(opts.dialect, total)
            steps.append('statistics job: one aggregate counts the rows (for shards="auto"), '
                         "names their image by its content and measures the shards at "
                         f"depth {depth}")
            if memo:
                remember(subscriptions, (session_key(spark), "count"), nsubs)
        else:
            nsubs = count_of(subscriptions, memo, steps)
    sharded, shard_why = shard_rule(opts.shards, nsubs)
    why.append(shard_why)
    rebuild = not opts.reuse_index
    session = session_key(spark)
    if sharded:
        given = opts.shards if isinstance(opts.shards, ShardPlan) else None
        shards, depth = (given.shards, given.depth) if given else (opts.shards, opts.depth)
        rows = index_rows(subscriptions) if rows is None else rows
        sp = checked_plan(subscriptions, opts.dialect, shards, depth, memo,
                          images=images, steps=steps, stats=stats, rows=rows)
        measured = sp
        if given is not None:
            # the caller's plan runs as given (its salting included); the
            # log shows it with the figures the job measured
            _log.info("%s", dataclasses.replace(sp, salts=dict(given.salts)).explain())
            sp = given
        nsubs = sp.nsubs if sp.nsubs is not None else nsubs
        if not images:
            return FanoutPlan("cogroup", opts, session, shard_plan=sp, subscriptions=subscriptions,
                              nsubs=nsubs, why=why, steps=steps)
        # (the images are named from the figures just measured, for the
        # same shards and depth: a given plan carries none of its own)
        named = sp if sp.stats is not None else dataclasses.replace(sp, stats=measured.stats)
        ahead = None if while_building is None else (lambda paths: while_building(sp, paths))
        paths = shard_images(rows, opts.dialect, named, opts.image_dir, rebuild=rebuild,
                             steps=steps, while_building=ahead,
                             through_spark=through_spark)["paths"]
        why.append("every host holds every image it needs, so the events are matched where "
                   "they are: no shuffle, no salting sample")
        return FanoutPlan("shard-images", opts, session, shard_plan=sp, shard_paths=paths,
                          subscriptions=subscriptions, nsubs=nsubs, why=why, steps=steps)
    if images:
        idx = image_index(rows, opts.dialect, opts.image_dir, rebuild=rebuild,
                          name=name, steps=steps, through_spark=through_spark)
        return FanoutPlan("image", opts, session, index=idx, nsubs=idx.nsubs, why=why,
                          steps=steps)
    table_index = build_index(subscriptions, opts.dialect)
    steps.append(f"collect job: the rows to the driver, {len(table_index):,} inserted there")
    idx = ship_sublist(spark, table_index, ship=opts.ship)
    why.append(f"shipped by {idx.shipped_by}")
    return FanoutPlan("shipped", opts, session, index=idx, nsubs=idx.nsubs, why=why, steps=steps)


def plan_in(spark, plan: FanoutPlan, given: FanoutOptions) -> FanoutPlan:
    """A plan passed to a fan-out in place of the subscriptions: it must be
    of this session, and the call's own plan keywords, where set, must
    agree with it."""
    if not isinstance(plan, FanoutPlan):
        return plan
    if plan.session != session_key(spark):
        raise TopicmatchValueError("the FanoutPlan was made on another Spark session: plan again "
                                   "on the events' session")
    if plan.is_stale():
        raise TopicmatchValueError("an image the FanoutPlan names has gone since it was made (a "
                                   "cleaner of the temporary directory?): plan again "
                                   "(plan_fanout), which builds it again")
    defaults = FanoutOptions()
    for field in FanoutOptions.PLAN_FIELDS:
        v = getattr(given, field)
        if _differs(v, getattr(defaults, field)) and _differs(v, getattr(plan.options, field)):
            raise TopicmatchValueError(
                f"{field}={v!r} was given with a FanoutPlan made with "
                f"{field}={getattr(plan.options, field)!r}: plan again with it, or leave it out")
    return plan


def event_options(plan: FanoutPlan, given: FanoutOptions) -> FanoutOptions:
    """The options a fan-out with `plan` runs under: the plan's, with the
    call's own event-side keywords (subject_col, key_col, queues, explode,
    dedupe)."""
    return plan.options.replace(**{f: getattr(given, f) for f in
                                   ("subject_col", "key_col", "queues", "explode", "dedupe")})


__all__ = ["FanoutOptions", "FanoutPlan", "plan_fanout", "shard_rule", "ROUTES"]
