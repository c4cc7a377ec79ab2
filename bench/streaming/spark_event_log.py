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

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle
from pyspark.sql.types import StringType, StructField, StructType

from bench.streaming import spark_stores, workloads
from bench.streaming.records import BenchmarkError, BenchParams, RunResult
from bench.streaming.spark_processors import PANDAS, ROW, TwsProcessor
from bench.streaming.workloads import EVENT_LOG, WorkloadSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

EVENT_SCHEMA = StructType([StructField("payload", StringType())])
OUTPUT = "key long, appended long"
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


class _EventLog(TwsProcessor):
    """The list state both APIs share."""

    column = "payload"
    outputs = ("appended",)

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.events = handle.getListState("events", EVENT_SCHEMA)

    def on_rows(self, values: list[Any]) -> list[tuple[Any, ...]]:
        """Append the payloads to the key's list in one call; emit how many."""
        self.events.appendList([(p,) for p in values])
        return [(len(values),)]


class RowEventLog(_EventLog):
    """For ``transformWithState`` (``Row`` in, ``Row`` out)."""

    api = ROW


class PandasEventLog(_EventLog):
    """For ``transformWithStateInPandas`` (pandas frames in and out)."""

    api = PANDAS


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

    def query(spark: SparkSession) -> DataFrame:
        return event_log_query(workloads.source(spark, workload), api)

    return spark_stores.run_appending(
        variant, workload, params, scratch, query, system=(provider, description), strict=True
    )
