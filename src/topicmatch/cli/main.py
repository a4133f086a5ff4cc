"""The `topicmatch` command line's entry point: parse, dispatch, and turn a
CLIError into one line and exit status 2.

    topicmatch fanout --events PATH (--subs PATH | --filters-file FILE) --out DIR [--master URL] ...
    topicmatch demo [--out DIR] [--events N]
    topicmatch match (--subs PATH | --filters-file FILE) --subjects FILE [--dialect nats|mqtt|amqp]
    topicmatch build --subs PATH -o FILE [--dialect nats|mqtt|amqp]

`fanout` and `demo` run on Spark (pip install 'topicmatch[spark]'); `match`
and `build` are the engine alone.  A mistake in the input (a missing file,
column or type, an invalid filter, no subscriptions) is one line on stderr
and exit status 2; see docs/cli.md and docs/spark.md.

The parser is parser.py; each command is a module of its own (fanout.py,
demo.py, match.py, build.py), and what they share is in common.py, which
imports nothing else of the command line.  The imports go one way: main ->
parser -> the commands -> common.
"""
import sys

from topicmatch.cli.common import EXIT_REJECTED, EXIT_USAGE, CLIError
from topicmatch.cli.parser import build_parser

# The exit statuses and the user error are the command line's contract
# (tests and scripts read them here).
__all__ = ["main", "build_parser", "CLIError", "EXIT_USAGE", "EXIT_REJECTED"]


def _err(msg):
    print(f"topicmatch: error: {msg}", file=sys.stderr)


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
