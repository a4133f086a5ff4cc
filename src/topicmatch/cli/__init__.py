"""The `topicmatch` command line (`topicmatch.cli:main`, `python -m topicmatch`).

    main.py        the dispatch
    parser.py      the parser: one function per command, the shared options
    common.py      what every command shares: the user error, the exit
                   statuses, counts for humans, local paths, the line reader
                   (a leaf: it imports nothing else of the command line)
    subs_source.py what a subscriptions input is (table, image, filter list)
    subs_table.py  a local table read (pyarrow) as sub_id, filter, queue
    filters_file.py  the plain filter list (--filters-file)
    subs_index.py  an input checked, warned about and indexed (or opened)
    dialect_hint.py  filters that look written for another dialect
    match.py       `topicmatch match`: the engine alone
    match_labels.py  what a delivery line says after the subject
    build.py       `topicmatch build`: a table written as an image
    fanout.py      `topicmatch fanout`: the Spark fan-out of files
    fanout_io.py   its inputs: formats, events and subscriptions files
    fanout_schema.py  their columns read before the JVM starts, --schema,
                   the CSV id columns' inference
    demo.py        `topicmatch demo`: a generated sample through `fanout`

The imports go one way: main -> parser -> the commands -> common.
"""
from topicmatch.cli.common import EXIT_REJECTED, EXIT_USAGE, CLIError
from topicmatch.cli.main import build_parser, main

__all__ = ["main", "build_parser", "CLIError", "EXIT_USAGE", "EXIT_REJECTED"]
