"""`topicmatch images list` and `topicmatch images prune`: this host's image
directory (the Spark fan-out's builds, fetched copies and the driver's
copies), as the bounded cache topicmatch.spark.image_cache keeps it."""
import datetime
import os

from topicmatch.cli.common import CLIError, human_bytes, plural


def _directories(args):
    """The directories the command looks at: --dir, or this host's image
    directory and the driver's copies inside it."""
    try:
        from topicmatch.spark.image_store import image_home
    except ImportError as e:
        raise CLIError(f"topicmatch images needs the Spark extra: {e}") from None
    if args.dir is not None:
        if not os.path.isdir(args.dir):
            raise CLIError(f"--dir {args.dir} is not a directory")
        return [args.dir]
    home = image_home()
    return [home, os.path.join(home, "driver")]


def cmd_images(args):
    from topicmatch.spark.image_cache import cache_bytes, list_images, parse_bytes, prune
    dirs = [d for d in _directories(args) if os.path.isdir(d)]
    try:
        bound = cache_bytes() if args.max_bytes is None else parse_bytes(args.max_bytes, "--max-bytes")
    except ValueError as e:
        raise CLIError(str(e)) from None
    if args.action == "list":
        for d in dirs:
            images = list_images(d)
            total = sum(i.nbytes for i in images)
            print(f"{d}: {plural(len(images), 'image')}, {human_bytes(total)} (bound {human_bytes(bound)})")
            for i in images:
                used = datetime.datetime.fromtimestamp(i.last_used).strftime("%Y-%m-%d %H:%M:%S")
                print(f"  {i.name}  {human_bytes(i.nbytes):>11}  last used {used}{'  in use' if i.in_use else ''}")
        return 0
    for d in dirs:
        got = prune(d, bound, min_idle=args.min_idle)
        print(f"{d}: removed {plural(len(got.removed), 'image')}, freed {human_bytes(got.freed)}; "
              f"{human_bytes(got.kept_bytes)} kept (bound {human_bytes(bound)})"
              + (f"; {plural(len(got.busy), 'image')} over the bound kept: in use or used in the last "
                 f"{args.min_idle:g} s" if got.busy else ""))
    return 0
