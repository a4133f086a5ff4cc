"""The `topicmatch` command line's parser: one function per command, and the
option groups that several commands share (the subscriptions input, the
Spark session).  It parses only; main.py dispatches."""
import argparse
import os
import sys

from topicmatch._dialects import DIALECTS
from topicmatch.cli.build import cmd_build
from topicmatch.cli.demo import cmd_demo
from topicmatch.cli.fanout import cmd_fanout
from topicmatch.cli.fanout_io import FORMATS
from topicmatch.cli.images import cmd_images
from topicmatch.cli.match import cmd_match

_QUEUES_HELP = "queue groups: one member per group (pick, default), every member, none"


def _version_line():
    import platform

    from topicmatch import __version__
    return (f"topicmatch {__version__} ({platform.python_implementation()} {platform.python_version()}, "
            f"{sys.platform} {platform.machine()})")


def _shards_arg(text):
    if text == "auto":
        return text
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'auto', not {text!r}")
    return n


def _seconds_arg(text):
    try:
        x = float(text)
    except ValueError:
        x = -1.0
    if not x >= 0 or x == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, not {text!r}")
    return x


def build_parser():
    ap = argparse.ArgumentParser(
        prog="topicmatch", description="NATS, MQTT and AMQP subscription matching: fan events out to "
        "subscription ids on Spark, match subjects from files, or build an index image.")
    ap.add_argument("--version", action="version", version=_version_line())
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")
    sub.required = True
    _add_fanout(sub)
    _add_demo(sub)
    _add_match(sub)
    _add_build(sub)
    _add_images(sub)
    return ap


def subs_options(p):
    """The subscriptions input, the same for match, fanout and build."""
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--subs", metavar="PATH",
                     help="subscriptions: a table (CSV with a header, JSON lines or Parquet; a file "
                     "or a directory) with columns sub_id, filter and queue (optional; null or "
                     "empty: a plain subscription), or an image written by `topicmatch build` "
                     "(told by its first bytes)")
    src.add_argument("--filters-file", metavar="FILE",
                     help="instead of --subs, a plain list: one `filter` or `filter queue` per line "
                     "('-' for stdin), its line number the sub_id; NATS separates the queue with a "
                     "space or a tab, MQTT and AMQP with a tab only (their filters may hold spaces)")
    p.add_argument("--subs-format", choices=FORMATS, default=None,
                   help="the format of a --subs table (default: from its extension)")
    p.add_argument("--id-col", default="sub_id", metavar="C",
                   help="the table's column of sub ids (default: sub_id)")
    p.add_argument("--filter-col", default="filter", metavar="C",
                   help="the table's column of filters (default: filter)")
    p.add_argument("--queue-col", default="queue", metavar="C",
                   help="the table's column of queue groups, if it has one (default: queue)")
    p.add_argument("--allow-empty", action="store_true",
                   help="run with no subscriptions (an empty input is an error otherwise)")
    p.add_argument("--dialect", choices=DIALECTS, default=None,
                   help="nats, mqtt, or amqp (RabbitMQ topic-exchange binding keys; one delivery "
                   "per sub_id); default: an image's own, else nats")


def _spark_options(p):
    where = p.add_mutually_exclusive_group()
    where.add_argument("--master", default="local[*]", metavar="URL",
                       help="Spark master URL (default: local[*], the embedded Spark)")
    where.add_argument("--remote", default=None, metavar="sc://HOST:PORT",
                       help="run on a Spark Connect server instead")
    p.add_argument("--progress", type=_seconds_arg, default=2.0, metavar="SECONDS",
                   help="on a terminal, a progress line on stderr redrawn every SECONDS "
                   "while Spark works (default 2; 0: none; none off a terminal)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="Spark's own warnings on stderr, failed tasks' traces included")


def _add_fanout(sub):
    f = sub.add_parser("fanout", help="deliveries of an events table against subscriptions",
                       description="Write DIR/deliveries (one row per event x sub_id, Parquet) and "
                       "DIR/rejected (events with a null or invalid subject, or a row that could not "
                       "be read, + `error`, Parquet); print counts that reconcile: events in = "
                       "delivered + unmatched + rejected.  CSV and JSON-lines events are read line "
                       "by line first: a BOM is removed, a line that is not UTF-8 or over 1 MiB is "
                       "rejected with its reason (never dropped), and so is a row Spark cannot "
                       "parse.  Exit status: 0, no event rejected; 3, the run finished with "
                       "rejected events; 2, an error stopped it (a bad subscriptions row among them).")
    f.add_argument("--events", required=True, metavar="PATH",
                   help="events: Parquet, JSON lines or CSV with a header (file or directory)")
    subs_options(f)
    f.add_argument("--out", required=True, metavar="DIR",
                   help="where DIR/deliveries and DIR/rejected (Parquet) are written")
    f.add_argument("--subject-col", default="subject", metavar="C",
                   help="the events column holding the subject (default: subject)")
    f.add_argument("--key-col", default=None, metavar="C",
                   help="column the queue-group pick hashes instead of the subject")
    f.add_argument("--queues", choices=("pick", "all", "none"), default="pick", help=_QUEUES_HELP)
    f.add_argument("--format", choices=FORMATS, default=None,
                   help="format of --events (default: from its extension)")
    f.add_argument("--schema", default=None, metavar="DDL",
                   help="the events' columns as a Spark DDL string, for CSV and JSON lines "
                        "(e.g. 'event_id BIGINT, subject STRING'; a CSV's header names the same "
                        "columns, in order); default: CSV columns are strings, but an id column "
                        "(id, *_id) is bigint when every value is a canonical integer; JSON "
                        "types are Spark's inference")
    f.add_argument("--overwrite", action="store_true", help="replace existing outputs in DIR")
    f.add_argument("--ship", choices=("auto", "broadcast", "file", "artifact", "inline"),
                   default="auto", help="how the index travels to the executors (default: "
                   "by session kind and size; see docs/spark.md)")
    f.add_argument("--shards", type=_shards_arg, default="auto", metavar="N|auto",
                   help="1: one index (an image built on an executor; with --ship named, built "
                        "on the driver); N > 1: the sharded fan-out (each shard's index built on "
                        "the executors; a table only); auto (default): one index up to "
                        "topicmatch.spark.AUTO_SHARD_MIN_SUBS subscriptions, sharded above")
    f.add_argument("--dedupe", action="store_true",
                   help="one delivery per (event, sub_id), for subscribers with overlapping filters")
    f.add_argument("--rejects", default=None, metavar="FILE",
                   help="write the events lines that could not be read as rows (not UTF-8, over "
                        "1 MiB, malformed CSV/JSON) to FILE, byte for byte; rows with a null or "
                        "invalid subject are in DIR/rejected")
    _spark_options(f)
    f.set_defaults(func=cmd_fanout)


def _add_demo(sub):
    d = sub.add_parser("demo", help="generate an IoT telemetry sample and fan it out on local Spark",
                       description="Generate an IoT telemetry sample (Parquet events, a CSV of "
                       "subscriptions: dashboards, watchlists, queue groups), run `topicmatch fanout` "
                       "on it, and tour the outputs: deliveries per subscriber role, sample "
                       "deliveries, rejected events with their reasons.  Needs "
                       "pip install 'topicmatch[spark]'.")
    d.add_argument("--out", default=os.path.join("out", "demo"), metavar="DIR",
                   help="where the sample and the outputs go (default: out/demo)")
    d.add_argument("--events", type=int, default=500_000, metavar="N",
                   help="number of events (default 500,000)")
    d.add_argument("--seed", type=int, default=7,
                   help="random seed of the generated sample (default 7; the same seed, the same sample)")
    _spark_options(d)
    d.set_defaults(func=cmd_demo)


def _add_match(sub):
    m = sub.add_parser("match", help="match subjects against subscriptions (the engine, no Spark)",
                       description="Print one line per delivery: subject, sub_id, filter[, queue]; "
                       "rejected subjects and a summary on stderr.  The subjects are read, matched "
                       "and written in blocks, so any size streams through in bounded memory (a "
                       "line longer than 65,535 bytes is scanned, not held); a progress line shows "
                       "on a terminal after 2 s.  A subject line that is not UTF-8, too long or not "
                       "a valid subject is rejected with its reason and counted, and the run goes "
                       "on; a UTF-8 byte-order mark is removed.  Exit status: 0, every line matched "
                       "or unmatched; 3, the run finished but rejected lines; 2, an error stopped "
                       "it (a bad subscription among them).")
    subs_options(m)
    m.add_argument("--subjects", required=True, metavar="FILE", help="one subject per line ('-' for stdin)")
    m.add_argument("--queues", choices=("pick", "all", "none"), default="pick", help=_QUEUES_HELP)
    m.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                   help="progress on stderr: auto (on a terminal: while the subscriptions load, "
                   "and for runs over 2 s), always, never")
    m.add_argument("--rejects", default=None, metavar="FILE",
                   help="write the rejected subject lines to FILE, byte for byte, one per line "
                        "(their reasons are on stderr)")
    m.set_defaults(func=cmd_match)


def _add_build(sub):
    b = sub.add_parser("build", help="write a subscriptions table as an index image",
                       description="Read a subscriptions table (or --filters-file) as match and "
                       "fanout do, and write its index as an image file: `match --subs IMAGE` and "
                       "`fanout --subs IMAGE` open it in about a millisecond, without parsing or "
                       "indexing, and processes that open it share its pages.  Exit status: 0, "
                       "written; 2, an error stopped it.")
    subs_options(b)
    b.add_argument("-o", "--out", required=True, metavar="FILE", help="the image file to write")
    b.add_argument("--overwrite", action="store_true", help="replace FILE if it exists")
    b.set_defaults(func=cmd_build)


def _add_images(sub):
    i = sub.add_parser("images", help="list or prune this host's image directory (the Spark fan-out's)",
                       description="The images the Spark fan-out built or fetched on this host, and "
                       "the driver's copies, kept as a cache bounded by TOPICMATCH_IMAGE_CACHE_BYTES "
                       "(default 8G): `list` shows them, least recently used first; `prune` removes "
                       "the least recently used until they fit the bound, never one that a process "
                       "has open or used in the last --min-idle seconds.  Exit status: 0; 2, an "
                       "error stopped it.")
    i.add_argument("action", choices=("list", "prune"))
    i.add_argument("--dir", default=None, metavar="DIR",
                   help="the directory (default: this host's image directory, TOPICMATCH_IMAGE_DIR or "
                   "topicmatch-images-<uid> in the temporary directory, and its driver/ copies)")
    i.add_argument("--max-bytes", default=None, metavar="SIZE",
                   help="the bound (8G, 500M, 0 for as little as possible; default "
                   "TOPICMATCH_IMAGE_CACHE_BYTES or 8G)")
    i.add_argument("--min-idle", type=_seconds_arg, default=600.0, metavar="SECONDS",
                   help="keep images used less than this long ago (default 600)")
    i.set_defaults(func=cmd_images)
