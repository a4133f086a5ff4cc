"""The `topicmatch` command line (`topicmatch.cli:main`, `python -m topicmatch`).

    main.py        the parser and the dispatch
    common.py      what every command shares: the user error, the exit
                   statuses, counts for humans, local paths, the line reader
                   (a leaf: it imports nothing else of the command line)
    match.py       `topicmatch match`: the engine alone
    fanout.py      `topicmatch fanout`: the Spark fan-out of files
    fanout_io.py   its inputs: formats, events and subscriptions files
    fanout_schema.py  their columns read before the JVM starts, --schema,
                   the CSV id columns' inference
    demo.py        `topicmatch demo`: a generated sample through `fanout`

The imports go one way: main -> the commands -> common.
"""
from topicmatch.cli.common import EXIT_REJECTED, EXIT_USAGE, CLIError
from topicmatch.cli.main import build_parser, main

__all__ = ["main", "build_parser", "CLIError", "EXIT_USAGE", "EXIT_REJECTED"]
