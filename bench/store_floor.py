"""What the storage under image_dir costs for a first call's images, with no
index work: their bytes put once and read back once, one object at a time,
through the image store's own transfers (topicmatch.spark.image_store's
upload and copy_down, over pyarrow.fs), nothing built, checked or mapped.

    .venv/bin/python bench/store_floor.py s3://bench/floor --mb 305.6 --objects 5 [--reps 3]

A first call with image_dir=s3://... puts each image once (its build task)
and reads each once on every other host that needs it: on two hosts with
nothing built twice, every image's bytes go up once and come down once.
These are those two transfers against the same store, one after the other
(a first call's build tasks and fetches on several hosts may overlap them),
to read beside the benchmark's first call (bench/bench_spark_shard.py --image-dir
s3://...).  The S3 endpoint and keys come from the usual AWS variables
(AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...), as the library's own client
reads them.  The objects are removed at the end.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("uri", help="a folder in the store (s3://bucket/prefix, or any image_dir URI)")
    ap.add_argument("--mb", type=float, default=305.6,
                    help="the images' bytes in all, in MB (default: the 3M first call's five)")
    ap.add_argument("--objects", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)

    from topicmatch.spark.image_store import _filesystem, copy_down, upload

    size = int(args.mb * 1e6 / args.objects)
    work = tempfile.mkdtemp(prefix="topicmatch-store-floor-")
    local = os.path.join(work, "object")
    with open(local, "wb") as f:
        f.write(os.urandom(size))
    uris = [f"{args.uri.rstrip('/')}/floor-{i}" for i in range(args.objects)]
    puts, gets = [], []
    try:
        for _ in range(args.reps):
            t0 = time.perf_counter()
            for uri in uris:
                upload(local, uri)
            puts.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for uri in uris:
                with open(os.path.join(work, "back"), "wb") as out:
                    copy_down(uri, out)
            gets.append(time.perf_counter() - t0)
    finally:
        for uri in uris:
            filesystem, path = _filesystem(uri)
            try:
                filesystem.delete_file(path)
            except OSError:
                pass
        for name in os.listdir(work):
            os.remove(os.path.join(work, name))
        os.rmdir(work)
    mb = size * args.objects / 1e6
    put, get = statistics.median(puts), statistics.median(gets)
    print(f"{args.objects} objects, {mb:.1f} MB in all, medians of {args.reps}: "
          f"put {put:.2f} s ({mb / put:.0f} MB/s), get {get:.2f} s ({mb / get:.0f} MB/s), "
          f"both {put + get:.2f} s")
    print(f"  puts {' '.join(f'{x:.2f}' for x in puts)}; gets {' '.join(f'{x:.2f}' for x in gets)}")


if __name__ == "__main__":
    sys.exit(main())
