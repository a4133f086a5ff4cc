"""A fan-out's Python workers never import pandas.

pyarrow imports pandas, where it is installed, the first time a process
converts Python values (pa.array, RecordBatch.from_pydict, a Python number
handed to a compute function) or calls Array.to_numpy(): about a second of
each fresh Python worker on this machine, at the first call of every
application.  The worker code makes its batches from buffers instead
(topicmatch._columns: batch_of, python_array, int_values)."""
import os
import subprocess
import sys
import textwrap

import pytest

from isolated import pandas_stand_in

pytestmark = pytest.mark.spark


def test_fanout_workers_do_not_import_pandas(tmp_path):
    # The workers (not the driver) find a stand-in "pandas" first on their
    # path, which notes each import and then is not there, as pyarrow
    # allows: the check holds whether or not pandas is installed.  The rows
    # are made by Spark SQL, so no Python value is converted on the way in.
    fake, marker = pandas_stand_in(tmp_path)
    driver = textwrap.dedent(f"""
        import os, sys
        os.environ["PYTHONPATH"] = os.pathsep.join([{fake!r}] + sys.path)
        os.environ["TOPICMATCH_IMAGE_DIR"] = {str(tmp_path / "images")!r}
        from pyspark.sql import functions as F
        from topicmatch.spark import fanout, fanout_with_rejects, local_session
        spark = local_session("local[2]", conf={{"spark.sql.execution.arrow.maxRecordsPerBatch": 64}})
        def tokens(end):
            return F.concat(F.lit("a"), (F.col("id") % 50).cast("string"), F.lit("."),
                            (F.col("id") % 7).cast("string"), F.lit(end))
        subs = spark.range(3000, numPartitions=3).select(F.col("id").alias("sub_id"), tokens(".*").alias("filter"))
        events = spark.range(500, numPartitions=2).select(tokens(".x").alias("subject"))
        counts = [fanout(events, subs).count(), fanout(events, subs, shards=2).count(),
                  fanout(events, subs, shards=2, queues="all").count()]
        bad = events.union(spark.range(1).select(F.lit("a..b").alias("subject")))
        good, rejects = fanout_with_rejects(bad, subs, shards=2)
        counts += [good.count(), rejects.count()]
        print("counts", *counts)
        print("before", os.path.exists({marker!r}))
        def control(batches):
            import pyarrow as pa
            for b in batches:
                yield pa.RecordBatch.from_pydict({{"x": [1] * b.num_rows}})
        spark.range(2, numPartitions=1).mapInArrow(control, "x long").collect()
        print("after", os.path.exists({marker!r}))
    """)
    out = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr[-4000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    n = lines["counts"].split()
    assert n[0] == n[1] == n[2] == n[3] != "0" and n[4] == "1", lines["counts"]
    assert lines["before"] == "False", "a worker imported pandas:\n" + open(marker).read()
    # the stand-in is on the workers' path: a worker converting Python values is caught
    assert lines["after"] == "True", out.stdout
