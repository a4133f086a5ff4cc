"""The `topicmatch` command line.

    topicmatch fanout --events PATH --subs PATH --out DIR [--master URL] ...
    topicmatch demo [--out DIR] [--events N]
    topicmatch match --subs FILE --subjects FILE [--dialect nats|mqtt|amqp]

`fanout` and `demo` run on Spark (pip install 'topicmatch[spark]'); `match` is
the engine alone.  A mistake in the input (a missing file, column or type,
an invalid filter) is one line on stderr and exit status 2; see docs/spark.md.

This module holds the parser and the dispatch; each command is a module of
its own (fanout.py, demo.py, match.py), and what they share is in
common.py, which imports nothing else of the command line.  The imports go
one way: main -> the commands -> common.
"""
import argparse
import os
import sys

from topicmatch._dialects import DIALECTS
from topicmatch.cli.common import EXIT_REJECTED, EXIT_USAGE, CLIError
from topicmatch.cli.demo import cmd_demo
from topicmatch.cli.fanout import cmd_fanout
from topicmatch.cli.fanout_io import FORMATS
from topicmatch.cli.match import cmd_match

# The exit statuses and the user error are the command line's contract
# (tests and scripts read them here).
__all__ = ["main", "build_parser", "CLIError", "EXIT_USAGE", "EXIT_REJECTED"]


def _err(msg):
    print(f"topicmatch: error: {msg}", file=sys.stderr)


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
        "subscription ids on Spark, or match subjects from files.")
    ap.add_argument("--version", action="version", version=_version_line())
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")
    sub.required = True

    def spark_opts(p):
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

    f = sub.add_parser("fanout", help="deliveries of an events table against a subscriptions table",
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
    f.add_argument("--subs", required=True, metavar="PATH",
                   help="subscriptions: columns sub_id, filter, queue (optional)")
    f.add_argument("--out", required=True, metavar="DIR",
                   help="where DIR/deliveries and DIR/rejected (Parquet) are written")
    f.add_argument("--dialect", choices=DIALECTS, default="nats",
                   help="nats, mqtt, or amqp (RabbitMQ topic-exchange binding keys; "
                        "one delivery per sub_id)")
    f.add_argument("--subject-col", default="subject", metavar="C",
                   help="the events column holding the subject (default: subject)")
    f.add_argument("--key-col", default=None, metavar="C",
                   help="column the queue-group pick hashes instead of the subject")
    f.add_argument("--queues", choices=("pick", "all", "none"), default="pick",
                   help="queue groups: one member per group (pick, default), every member, none")
    f.add_argument("--format", choices=FORMATS, default=None,
                   help="format of --events (default: from its extension)")
    f.add_argument("--schema", default=None, metavar="DDL",
                   help="the events' columns as a Spark DDL string, for CSV and JSON lines "
                        "(e.g. 'event_id BIGINT, subject STRING'; a CSV's header names the same "
                        "columns, in order); default: CSV columns are strings, but an id column "
                        "(id, *_id) is bigint when every value is a canonical integer; JSON "
                        "types are Spark's inference")
    f.add_argument("--subs-format", choices=FORMATS, default=None,
                   help="format of --subs (default: from its extension)")
    f.add_argument("--overwrite", action="store_true", help="replace existing outputs in DIR")
    f.add_argument("--ship", choices=("auto", "broadcast", "file", "artifact", "inline"),
                   default="auto", help="how the index travels to the executors (default: "
                   "by session kind and size; see docs/spark.md)")
    f.add_argument("--shards", type=_shards_arg, default="auto", metavar="N|auto",
                   help="1: one index, built on the driver; N > 1: the sharded fan-out (each "
                        "shard's index built on the executors); auto (default): one index up to "
                        "topicmatch.spark.AUTO_SHARD_MIN_SUBS subscriptions, sharded above")
    f.add_argument("--dedupe", action="store_true",
                   help="one delivery per (event, sub_id), for subscribers with overlapping filters")
    f.add_argument("--rejects", default=None, metavar="FILE",
                   help="write the events lines that could not be read as rows (not UTF-8, over "
                        "1 MiB, malformed CSV/JSON) to FILE, byte for byte; rows with a null or "
                        "invalid subject are in DIR/rejected")
    spark_opts(f)
    f.set_defaults(func=cmd_fanout)

    d = sub.add_parser("demo", help="generate an IoT telemetry sample and fan it out on local Spark")
    d.add_argument("--out", default=os.path.join("out", "demo"), metavar="DIR",
                   help="where the sample and the outputs go (default: out/demo)")
    d.add_argument("--events", type=int, default=500_000, metavar="N",
                   help="number of events (default 500,000)")
    d.add_argument("--seed", type=int, default=7,
                   help="random seed of the generated sample (default 7; the same seed, the same sample)")
    spark_opts(d)
    d.set_defaults(func=cmd_demo)

    m = sub.add_parser("match", help="match subjects against filters (the engine, no Spark)",
                       description="Print one line per delivery: subject, sub_id (the filter's line "
                       "number), filter[, queue]; rejected subjects and a summary on stderr.  The "
                       "subjects are read, matched and written in blocks, so any size streams "
                       "through in bounded memory (a line longer than 65,535 bytes is scanned, not "
                       "held); a progress line shows on a terminal after 2 s.  A subject line that "
                       "is not UTF-8, too long or not a valid subject is rejected with its reason "
                       "and counted, and the run goes on; a UTF-8 byte-order mark is removed.  "
                       "Exit status: 0, every line matched or unmatched; 3, the run finished but "
                       "rejected lines; 2, an error stopped it (a bad subscriptions line among them).")
    m.add_argument("--subs", required=True, metavar="FILE",
                   help="one `filter` or `filter queue` per line ('-' for stdin): NATS "
                        "separates them with a space or a tab, MQTT and AMQP with a tab only "
                        "(their filters may hold spaces); a lone tab is the empty filter (AMQP)")
    m.add_argument("--subjects", required=True, metavar="FILE", help="one subject per line ('-' for stdin)")
    m.add_argument("--dialect", choices=DIALECTS, default="nats",
                   help="nats, mqtt, or amqp (RabbitMQ topic-exchange binding keys; "
                        "one delivery per sub_id)")
    m.add_argument("--queues", choices=("pick", "all", "none"), default="pick",
                   help="queue groups: one member per group (pick, default), every member, none")
    m.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                   help="progress line on stderr: auto (on a terminal, for runs over 2 s), always, never")
    m.add_argument("--rejects", default=None, metavar="FILE",
                   help="write the rejected subject lines to FILE, byte for byte, one per line "
                        "(their reasons are on stderr)")
    m.set_defaults(func=cmd_match)
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CLIError as e:
        _err(e)
        return EXIT_USAGE
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
