"""`topicmatch build`: a subscriptions table (or filter list) written as an
image, the file `match --subs` and `fanout --subs` open in a millisecond
instead of parsing and indexing the table again (docs/FORMAT.md)."""
import os
import sys
import time

from topicmatch.cli.common import CLIError, Stderr, plural
from topicmatch.cli.subs_index import load
from topicmatch.cli.subs_source import subs_source


def cmd_build(args):
    t0 = time.perf_counter()
    src = subs_source(args)
    if src.kind == "image":
        raise CLIError(f"{src.path} is an image already: give a table (or --filters-file)")
    out = args.out
    if os.path.isdir(out):
        raise CLIError(f"--out {out} is a directory: give the image's file name")
    if os.path.exists(out) and not args.overwrite:
        raise CLIError(f"--out {out} already exists (use --overwrite)")
    err = Stderr(sys.stderr)
    loaded = load(src, args.dialect, err)
    try:
        loaded.sublist.save(out)
    except OSError as e:
        raise CLIError(f"cannot write --out {out}: {e.strerror or e}") from None
    size = os.path.getsize(out)
    print(f"topicmatch build: {plural(len(loaded.sublist), 'subscription')} ({loaded.dialect}) "
          f"from {src.path} -> {out} ({size:,} bytes) in {time.perf_counter() - t0:.2f} s")
    return 0
