"""The progress of long Spark jobs: one line on stderr every few seconds
while they run (classic Spark: the status tracker).  topicmatch.spark.Progress;
`topicmatch fanout` and `topicmatch demo` show it."""
import sys
import threading
import time
from typing import Optional

from topicmatch.spark.session import is_connect


class Progress:
    """A thread reporting every `interval` seconds while Spark jobs run: the
    active stages, their tasks done / total, and elapsed time; with `rows`
    (the input size, when known), an estimate of rows done and the rate.  A
    no-op on Spark Connect (no status tracker on the client).

    `out` is a stream (one line printed per report: a log), or a status
    writer -- an object with `status(text)` and `clear()`, as the command
    line's stderr writer: it draws one line in place, only on a terminal,
    clears it before any other message, and the line is cleared on exit.

        with Progress(spark, out=sys.stderr, rows=n):
            df.write.parquet(...)
    """

    def __init__(self, spark, out=None, interval: float = 2.0, rows: Optional[int] = None,
                 label: str = ""):
        self.spark, self.out, self.interval = spark, out or sys.stderr, interval
        self.rows, self.label = rows, label
        self._stop = threading.Event()
        self._thread = None
        self.lines = 0

    def __enter__(self):
        if not is_connect(self.spark):
            self._t0 = time.perf_counter()
            self._thread = threading.Thread(target=self._run, name="topicmatch-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if hasattr(self.out, "status"):
            self.out.clear()
        return False

    def line(self) -> Optional[str]:
        st = self.spark.sparkContext.statusTracker()
        stages = []
        for sid in st.getActiveStageIds():
            info = st.getStageInfo(sid)
            if info is not None:
                stages.append(info)
        if not stages:
            return None
        done = sum(s.numCompletedTasks for s in stages)
        total = sum(s.numTasks for s in stages)
        running = sum(s.numActiveTasks for s in stages)
        elapsed = time.perf_counter() - self._t0
        parts = [f"stage {', '.join(str(s.stageId) for s in stages)}",
                 f"{done}/{total} tasks done, {running} running"]
        if self.rows and total:
            est = self.rows * done // total
            parts.append(f"~{est:,} of {self.rows:,} rows (~{est / elapsed:,.0f}/s)")
        label = f"{self.label}: " if self.label else ""
        return f"  [{elapsed:5.1f} s] {label}" + ", ".join(parts)

    def _run(self):
        while not self._stop.wait(self.interval):
            try:
                text = self.line()
            except Exception:  # noqa: BLE001 - the session is stopping
                return
            if not text:
                continue
            if hasattr(self.out, "status"):
                self.out.status(text.strip())
            else:
                print(text, file=self.out, flush=True)
            self.lines += 1
