"""W2's Spark baselines: each key's events appended to a list state through Spark's two
Python APIs of arbitrary state (v2), emitting what GIC's W2 emits.

GIC's W2 (:func:`bench.streaming.gic_runner.append_events`) appends each key's events of
the batch to the key's list state and emits ``key, appended`` (how many it appended).
:class:`RowEventLog` (``transformWithState``, ``Row`` objects) and
:class:`PandasEventLog` (``transformWithStateInPandas``, pandas frames) do the same with
``ListState.appendList``: one append of the key's events per batch, the list never read,
no timers. Spark's TWS needs the RocksDB state store.

Systems (option ``variant`` of :func:`run_spark_event_log`):

``spark_tws_row`` / ``spark_tws_pandas``
    RocksDB with Spark's default checkpointing (a commit uploads the new SST files).
``spark_tws_row_changelog`` / ``spark_tws_pandas_changelog``
    RocksDB with changelog checkpointing (a commit uploads the batch's changes;
    snapshots in the maintenance thread).

Every one writes its output through ``foreachBatch`` to Parquet and fingerprints it, as
GIC writes its output to a Parquet sink (:mod:`bench.streaming.outputs`); records,
commit (state commit plus offset and commit log writes) and bytes are the state-store
baselines' (:mod:`bench.streaming.spark_stores`).

Imported by Spark's Python workers (executors import ``bench`` through ``PYTHONPATH``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import StringType, StructField, StructType

from bench.streaming import spark_query, spark_stores, workloads
from bench.streaming.records import BenchmarkError, BenchParams, RunResult
from bench.streaming.workloads import EVENT_LOG, WorkloadSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

EVENT_SCHEMA = StructType([StructField("payload", StringType())])
OUTPUT = "key long, appended long"
ROW, PANDAS = "row", "pandas"
_ROCKSDB = spark_stores.PROVIDERS["spark_rocksdb"]
_ROCKSDB_CHANGELOG = spark_stores.PROVIDERS["spark_rocksdb_changelog"]
VARIANTS: dict[str, tuple[str, dict[str, str], str]] = {
    "spark_tws_row": (ROW, _ROCKSDB, "transformWithState (Row API), list state, RocksDB"),
    "spark_tws_pandas": (
        PANDAS,
        _ROCKSDB,
        "transformWithStateInPandas, list state, RocksDB",
    ),
    "spark_tws_row_changelog": (
        ROW,
        _ROCKSDB_CHANGELOG,
        "transformWithState (Row API), list state, RocksDB with changelog checkpointing",
    ),
    "spark_tws_pandas_changelog": (
        PANDAS,
        _ROCKSDB_CHANGELOG,
        "transformWithStateInPandas, list state, RocksDB with changelog checkpointing",
    ),
}
"""Variant -> (API, state store settings, description)."""


class _EventLog(StatefulProcessor):
    """The list state both APIs share."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.events = handle.getListState("events", EVENT_SCHEMA)

    def append(self, payloads: list[str]) -> int:
        """Append ``payloads`` to the key's list in one call; how many."""
        self.events.appendList([(p,) for p in payloads])
        return len(payloads)

    def close(self) -> None:
        """Nothing to release."""


class RowEventLog(_EventLog):
    """For ``transformWithState`` (``Row`` in, ``Row`` out)."""

    def handleInputRows(  # noqa: N802 - Spark's name
        self,
        key: Any,
        rows: Iterator[Any],
        timerValues: TimerValues,  # noqa: N803
    ) -> Iterator[Any]:
        yield Row(key=key[0], appended=self.append([r.payload for r in rows]))


class PandasEventLog(_EventLog):
    """For ``transformWithStateInPandas`` (pandas frames in and out)."""

    def handleInputRows(  # noqa: N802 - Spark's name
        self,
        key: Any,
        rows: Iterator[Any],
        timerValues: TimerValues,  # noqa: N803
    ) -> Iterator[Any]:
        import pandas as pd  # type: ignore[import-untyped]

        payloads = [p for frame in rows for p in frame["payload"].tolist()]
        yield pd.DataFrame({"key": [key[0]], "appended": [self.append(payloads)]})


def event_log_query(stream: DataFrame, api: str) -> DataFrame:
    """W2 on ``stream`` (``key``, ``payload``) with ``api`` (:data:`ROW` or :data:`PANDAS`):
    ``key, appended`` per key of the batch, like GIC's."""
    grouped = stream.select("key", "payload").groupBy("key")
    if api == PANDAS:
        return grouped.transformWithStateInPandas(PandasEventLog(), OUTPUT, "Append", "None")
    return grouped.transformWithState(RowEventLog(), OUTPUT, "Append", "None")


def run_spark_event_log(
    variant: str, workload: WorkloadSpec, params: BenchParams, scratch: Path
) -> RunResult:
    """Run ``variant`` on the event log for warm-up + measured batches; return its records."""
    if variant not in VARIANTS or workload.kind != EVENT_LOG:
        raise BenchmarkError(
            f"no Spark system {variant!r} for {workload.kind!r}; use {sorted(VARIANTS)} on "
            "the event log"
        )
    api, provider, description = VARIANTS[variant]
    total = params.total_batches
    conf = {**provider, spark_stores.RETAIN: str(max(100, total + 10))}
    checkpoint, out = scratch / "checkpoint", scratch / "output"
    began = time.perf_counter()
    spark = spark_query.spark_session(params, workload, conf, f"bench-{workload.name}-{variant}")
    session_ms = (time.perf_counter() - began) * 1000
    try:
        collector = spark_query.ProgressCollector(spark, batches=total)
        started_ns = time.time_ns()
        query = (
            event_log_query(workloads.source(spark, workload), api)
            .writeStream.foreachBatch(spark_query.parquet_writer(out))
            .outputMode("append")
            .queryName(f"{workload.name}_{variant}")
            .option("checkpointLocation", str(checkpoint))
            .start()
        )
        progress = spark_query.run_batches(query, collector, total, params.timeout_s)
        collector.close()
        effective = {key: spark_stores._conf(spark, key) for key in spark_stores.REPORTED_CONF}
        slots = spark.sparkContext.defaultParallelism
        version = spark.version
        fingerprint = spark_query.output_fingerprint(spark, out, total)
    finally:
        spark_query.stop_session(spark, params)
    added, complete = spark_stores._added_bytes(str(checkpoint), False, progress)
    if not complete:
        raise BenchmarkError(
            f"Spark deleted checkpoint files during the run of {variant}; raise "
            f"{spark_stores.RETAIN}"
        )
    records = [spark_stores._record(p, b, slots) for p, b in zip(progress, added, strict=True)]
    return RunResult(
        system=variant,
        warmup=tuple(records[: params.warmup]),
        measured=tuple(records[params.warmup :]),
        notes={
            "kind": "spark_baseline",
            "system": description,
            "spark_version": version,
            "task_slots": slots,
            "mode": params.mode,
            "sink": "foreachBatch writing Parquet under the scratch directory, append mode",
            "spark_conf": effective,
            "batch_ms_definition": spark_stores.BATCH_MS_DEFINITION,
            "commit_ms_definition": spark_stores.COMMIT_MS_DEFINITION,
            "bytes_definition": spark_stores.BYTES_DEFINITION,
            "nothing_deleted_during_run": complete,
            "session_start_ms": round(session_ms, 1),
            "to_first_batch_ms": round((spark_query.end_ns(progress[0]) - started_ns) / 1e6, 1),
            "output": fingerprint,
        },
    )
