"""Spark plumbing shared by every system: session, progress listener, N micro-batches.

:func:`spark_session` starts the session the benchmark prescribes (master, shuffle
partitions, driver heap, no UI, enough retained progress updates); in a cluster mode
(``params.executors > 0``) it also sizes the executors, passes them the environment the
Python workers need (:data:`EXECUTOR_ENV`) and waits until every executor has registered,
so no measured batch includes executor start-up. :func:`run_batches` starts nothing
itself: given a started streaming query and the :class:`ProgressCollector` registered
before it started, it waits until ``batches`` micro-batches have reported progress, stops
the query and returns the progress of the first ``batches`` of them (consecutive ids from
the first one the query ran: 0 for a new query, later after a restart) as parsed JSON, in
order. The source never runs dry, so the query has begun the next batch by then; stopping
interrupts that one, and its work is never reported (callers measuring storage must
ignore what it wrote, see :mod:`bench.streaming.checkpoint_bytes`).

Thread-safety: the collector is filled from Spark's listener thread (a py4j callback)
and read by the caller's thread; a lock guards it and an event signals the last batch.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import common
from bench.streaming.records import BenchmarkError, BenchParams
from bench.streaming.workloads import WorkloadSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
WATCHDOG_S = 2.0
"""How often the wait for the last batch checks that the query is still alive."""
EXECUTORS_TIMEOUT_S = 180.0
"""How long a cluster-mode session waits for all its executors to register."""
EXECUTOR_ENV = (
    "PYSPARK_PYTHON",
    "PYTHONPATH",
    "SPARK_LOCAL_IP",
    "GIC_S3_ENDPOINT_URL",
    "AWS_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
)
"""Variables passed to executors (``spark.executorEnv.*``) when set in this process:
the Python workers' interpreter and import path, the loopback address, and the S3
endpoint and credentials of the benchmark's own SeaweedFS."""


def cluster_conf(params: BenchParams, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Executor settings of a cluster mode (empty in local mode)."""
    if not params.cluster:
        return {}
    conf = {
        "spark.executor.memory": f"{params.executor_memory_mib}m",
        "spark.executor.cores": "1",
        "spark.cores.max": str(params.executors),
    }
    for name in EXECUTOR_ENV:
        if environ.get(name):
            conf[f"spark.executorEnv.{name}"] = environ[name]
    return conf


def wait_for_executors(spark: SparkSession, executors: int, timeout_s: float) -> None:
    """Block until ``executors`` executors have registered with the driver."""
    deadline = time.monotonic() + timeout_s
    while True:
        # the driver's block manager is in the map too
        registered = int(spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1
        if registered >= executors:
            return
        if time.monotonic() > deadline:
            raise BenchmarkError(
                f"{registered} of {executors} executors registered within {timeout_s:.0f} s "
                "(is the cluster short of memory or cores?); see the system's log"
            )
        time.sleep(0.2)


def spark_session(
    params: BenchParams,
    workload: WorkloadSpec,
    conf: Mapping[str, str],
    app_name: str,
    *,
    scratch: Path | None = None,
) -> SparkSession:
    """A session with the benchmark's fixed settings, the cluster mode's, plus ``conf``.
    With ``scratch``, Spark's local directory (``spark.local.dir``: shuffle files, the
    RocksDB store's working copies, up to gigabytes) is ``<scratch>/spark-local``, so it
    goes with the run's scratch directory instead of staying in the system's temporary
    directory when the JVM ends without removing it.

    Must be the first session of the process (the driver heap is set at JVM start).
    """
    from pyspark.sql import SparkSession

    if scratch is not None:
        (scratch / "spark-local").mkdir(parents=True, exist_ok=True)
    settings = {
        "spark.ui.enabled": "false",
        "spark.driver.memory": params.driver_memory,
        "spark.sql.shuffle.partitions": str(workload.partitions),
        "spark.sql.streaming.numRecentProgressUpdates": str(max(100, 2 * params.total_batches)),
        "spark.sql.session.timeZone": "UTC",
        **cluster_conf(params),
        **({"spark.local.dir": str(scratch / "spark-local")} if scratch is not None else {}),
        **conf,
    }
    builder = SparkSession.builder.master(params.master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if params.cluster:
        wait_for_executors(spark, params.executors, EXECUTORS_TIMEOUT_S)
    return spark


def stop_session(spark: SparkSession, params: BenchParams) -> None:
    """Stop ``spark``. In ``local-cluster`` mode Spark's in-process workers keep each
    application's executor directories (logs, fetched files) under pyspark's own ``work/``
    directory: the executors' stdout and stderr are moved to
    ``bench/scratch/logs/executors/<application id>/`` and the rest is deleted."""
    app_id = spark.sparkContext.applicationId
    spark.stop()
    if not params.master.startswith("local-cluster"):
        return
    from bench.cluster import pyspark_home

    app_dir = pyspark_home() / "work" / app_id
    logs = common.SCRATCH / "logs" / "executors" / app_id
    for stream in app_dir.glob("*/std*"):
        logs.mkdir(parents=True, exist_ok=True)
        shutil.move(stream, logs / f"executor-{stream.parent.name}-{stream.name}")
    shutil.rmtree(app_dir, ignore_errors=True)


def _collector_class() -> type[Any]:
    from pyspark.sql.streaming.listener import StreamingQueryListener

    class _Collector(StreamingQueryListener):
        def __init__(self, batches: int, on_progress: Callable[[int], None] | None) -> None:
            self.batches = batches
            self.on_progress = on_progress
            self.lock = threading.Lock()
            self.progress: dict[int, dict[str, Any]] = {}
            self.done = threading.Event()

        def onQueryStarted(self, event: Any) -> None:  # noqa: N802
            """Nothing to record."""

        def onQueryProgress(self, event: Any) -> None:  # noqa: N802
            data = json.loads(event.progress.json)
            with self.lock:
                self.progress[int(data["batchId"])] = data
                enough = len(self.progress) >= self.batches
            if self.on_progress is not None:
                self.on_progress(int(data["batchId"]))
            if enough:
                self.done.set()

        def onQueryIdle(self, event: Any) -> None:  # noqa: N802
            """Nothing to record."""

        def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
            self.done.set()

    return _Collector


class ProgressCollector:
    """Progress of every micro-batch of a query, by batch id; register before start.

    ``batches``: how many micro-batches the caller waits for (:attr:`done`).
    ``on_progress``: called with each batch id as its progress arrives, on Spark's
    listener thread (it must return quickly)."""

    def __init__(
        self,
        spark: SparkSession,
        batches: int,
        on_progress: Callable[[int], None] | None = None,
    ) -> None:
        self._spark = spark
        self._listener = _collector_class()(batches, on_progress)
        spark.streams.addListener(self._listener)

    @property
    def done(self) -> threading.Event:
        """Set when ``batches`` micro-batches reported progress, or the query terminated."""
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
    """Wait for ``batches`` micro-batches, stop ``query``, return their progress."""
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
    return consecutive(progress, batches)


def consecutive(progress: Mapping[int, dict[str, Any]], batches: int) -> list[dict[str, Any]]:
    """The progress of ``batches`` consecutive micro-batches from the lowest id present."""
    first = min(progress, default=0)
    missing = [b for b in range(first, first + batches) if b not in progress]
    if missing:
        raise BenchmarkError(
            f"no progress for micro-batches {missing[:10]} of {first}..{first + batches - 1}; "
            "the query stopped early (see the system's log) or progress updates were dropped"
        )
    return [progress[b] for b in range(first, first + batches)]


def start_ns(progress: Mapping[str, Any]) -> int:
    """Trigger start of a batch (its ``timestamp``), ns since the epoch."""
    stamp = datetime.fromisoformat(str(progress["timestamp"]).replace("Z", "+00:00"))
    return ((stamp - _EPOCH) // timedelta(microseconds=1)) * 1000


def end_ns(progress: Mapping[str, Any]) -> int:
    """End of a batch: its start plus ``durationMs.triggerExecution``."""
    return start_ns(progress) + int(progress["durationMs"]["triggerExecution"]) * 1_000_000


def parquet_writer(out: Path) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function writing each batch to ``out/batch_id=<N>`` as Parquet."""

    def write(df: DataFrame, batch_id: int) -> None:
        df.write.mode("overwrite").parquet(str(out / f"batch_id={batch_id}"))

    return write


def output_fingerprint(out: Path, batches: int) -> dict[str, Any]:
    """The fingerprint (:func:`bench.streaming.outputs.fingerprint`) of the Parquet
    batches :func:`parquet_writer` wrote under ``out`` (ids ``< batches``).

    Read with pyarrow in this process, as GIC's sink is read, not collected through
    Spark's driver: the state sweep's outputs pass ``spark.driver.maxResultSize`` (64
    batches at 100 MB of state wrote 1.1 GB)."""
    import pyarrow.dataset as ds

    from bench.streaming import outputs

    if not out.is_dir() or not any(out.glob("batch_id=*")):
        return outputs.fingerprint([], [], batches)
    table = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    return outputs.table_fingerprint(table, batches)
