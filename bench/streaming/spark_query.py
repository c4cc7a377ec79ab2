"""Spark plumbing shared by every system: session, progress listener, N micro-batches.

:func:`spark_session` starts the local session the benchmark prescribes (master, shuffle
partitions, driver heap, no UI, enough retained progress updates). :func:`run_batches`
starts nothing itself: given a started streaming query and the
:class:`ProgressCollector` registered before it started, it waits until batch
``batches - 1`` has reported progress, stops the query and returns the progress of
batches ``0 .. batches - 1`` as parsed JSON, in order. The source never runs dry, so the
query has begun the next batch by then; stopping interrupts that one, and its work is
never reported (callers measuring storage must ignore what it wrote, see
:mod:`bench.streaming.checkpoint_bytes`).

Thread-safety: the collector is filled from Spark's listener thread (a py4j callback)
and read by the caller's thread; a lock guards it and an event signals the last batch.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from bench.streaming.records import BenchmarkError, BenchParams
from bench.streaming.workloads import WorkloadSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
WATCHDOG_S = 2.0
"""How often the wait for the last batch checks that the query is still alive."""


def spark_session(
    params: BenchParams, workload: WorkloadSpec, conf: Mapping[str, str], app_name: str
) -> SparkSession:
    """A local session with the benchmark's fixed settings plus ``conf``.

    Must be the first session of the process (the driver heap is set at JVM start).
    """
    from pyspark.sql import SparkSession

    settings = {
        "spark.ui.enabled": "false",
        "spark.driver.memory": params.driver_memory,
        "spark.sql.shuffle.partitions": str(workload.partitions),
        "spark.sql.streaming.numRecentProgressUpdates": str(max(100, 2 * params.total_batches)),
        "spark.sql.session.timeZone": "UTC",
        **conf,
    }
    builder = SparkSession.builder.master(params.master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _collector_class() -> type[Any]:
    from pyspark.sql.streaming.listener import StreamingQueryListener

    class _Collector(StreamingQueryListener):
        def __init__(self, last_batch: int) -> None:
            self.last_batch = last_batch
            self.lock = threading.Lock()
            self.progress: dict[int, dict[str, Any]] = {}
            self.done = threading.Event()

        def onQueryStarted(self, event: Any) -> None:  # noqa: N802
            """Nothing to record."""

        def onQueryProgress(self, event: Any) -> None:  # noqa: N802
            data = json.loads(event.progress.json)
            with self.lock:
                self.progress[int(data["batchId"])] = data
            if int(data["batchId"]) >= self.last_batch:
                self.done.set()

        def onQueryIdle(self, event: Any) -> None:  # noqa: N802
            """Nothing to record."""

        def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
            self.done.set()

    return _Collector


class ProgressCollector:
    """Progress of every micro-batch of a query, by batch id; register before start."""

    def __init__(self, spark: SparkSession, last_batch: int) -> None:
        self._spark = spark
        self._listener = _collector_class()(last_batch)
        spark.streams.addListener(self._listener)

    @property
    def done(self) -> threading.Event:
        """Set when batch ``last_batch`` reported progress, or the query terminated."""
        event: threading.Event = self._listener.done
        return event

    def progress(self) -> dict[int, dict[str, Any]]:
        with self._listener.lock:
            return dict(self._listener.progress)

    def close(self) -> None:
        self._spark.streams.removeListener(self._listener)


def run_batches(
    query: StreamingQuery, collector: ProgressCollector, batches: int, timeout_s: float
) -> list[dict[str, Any]]:
    """Wait for batches ``0 .. batches - 1``, stop ``query``, return their progress."""
    deadline = time.monotonic() + timeout_s
    try:
        while not collector.done.wait(WATCHDOG_S):
            if not query.isActive:
                break
            if time.monotonic() > deadline:
                raise BenchmarkError(
                    f"the streaming query ran {len(collector.progress())} of {batches} "
                    f"micro-batches in {timeout_s:.0f} s; raise BenchParams.timeout_s or "
                    "use smaller sizes (GIC_BENCH_QUICK=1)"
                )
        failure = query.exception()
        if failure is not None:
            raise BenchmarkError(f"the streaming query failed: {failure}")
    finally:
        query.stop()
    progress = collector.progress()
    for item in query.recentProgress:  # the listener bus may lag the query
        progress.setdefault(int(item.batchId), json.loads(item.json))
    missing = [b for b in range(batches) if b not in progress]
    if missing:
        raise BenchmarkError(
            f"no progress for micro-batches {missing[:10]} of 0..{batches - 1}; the query "
            "stopped early (see the system's log) or progress updates were dropped"
        )
    return [progress[b] for b in range(batches)]


def start_ns(progress: Mapping[str, Any]) -> int:
    """Trigger start of a batch (its ``timestamp``), ns since the epoch."""
    stamp = datetime.fromisoformat(str(progress["timestamp"]).replace("Z", "+00:00"))
    return ((stamp - _EPOCH) // timedelta(microseconds=1)) * 1000


def end_ns(progress: Mapping[str, Any]) -> int:
    """End of a batch: its start plus ``durationMs.triggerExecution``."""
    return start_ns(progress) + int(progress["durationMs"]["triggerExecution"]) * 1_000_000
