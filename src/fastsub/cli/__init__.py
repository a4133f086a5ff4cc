"""The `fastsub` command line (`fastsub.cli:main`, `python -m fastsub`).

    main.py        the parser and the dispatch
    common.py      what every command shares: the user error, the exit
                   statuses, counts for humans, local paths, the line reader
                   (a leaf: it imports nothing else of the command line)
    match.py       `fastsub match`: the engine alone
    fanout.py      `fastsub fanout`: the Spark fan-out of files
    fanout_io.py   its inputs: formats, events and subscriptions files
    fanout_schema.py  their columns read before the JVM starts, --schema,
                   the CSV id columns' inference
    demo.py        `fastsub demo`: a generated sample through `fanout`

The imports go one way: main -> the commands -> common.
"""
from fastsub.cli.common import EXIT_REJECTED, EXIT_USAGE, CLIError
from fastsub.cli.main import build_parser, main

__all__ = ["main", "build_parser", "CLIError", "EXIT_USAGE", "EXIT_REJECTED"]
