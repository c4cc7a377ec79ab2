"""Spark's systems for the event-time workloads, writing their output for comparison.

``spark_tws_pandas`` / ``spark_tws_row`` (W3)
    the sessions as a ``StatefulProcessor`` (:mod:`bench.streaming.spark_sessions`) through
    ``transformWithStateInPandas`` / ``transformWithState``, event-time timers, on the
    RocksDB state store (Spark's default for its changelog checkpointing setting; the
    effective value is in the notes).
``spark_hdfs`` / ``spark_rocksdb`` (W4)
    Spark's native ``withWatermark`` + ``groupBy(window(ts, "1 minute"), key).count()``
    in append mode, on the HDFS-backed store and on RocksDB.

Every one writes its output through ``foreachBatch`` to Parquet under the scratch
directory (one directory per batch id), as GIC writes its output to a Parquet sink, and
fingerprints the rows of batches ``0..N-1`` (:func:`bench.streaming.outputs.fingerprint`).
Records, commit and bytes definitions are the state-store baselines'
(:mod:`bench.streaming.spark_stores`): commit is the state operators' commit time plus
the offset and commit log writes.

Runs inside the system's own process (see :mod:`bench.streaming.runner`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from bench.streaming import spark_stores, timed_workloads
from bench.streaming.records import BenchmarkError, BenchParams, RunResult
from bench.streaming.workloads import SESSIONS, WINDOWED_COUNT, WorkloadSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_ROCKSDB = {spark_stores.PROVIDER: spark_stores.PROVIDERS["spark_rocksdb"][spark_stores.PROVIDER]}
VARIANTS: dict[str, tuple[str, dict[str, str], str]] = {
    "spark_tws_pandas": (SESSIONS, _ROCKSDB, "transformWithStateInPandas, RocksDB"),
    "spark_tws_row": (SESSIONS, _ROCKSDB, "transformWithState (Row API), RocksDB"),
    "spark_hdfs": (
        WINDOWED_COUNT,
        spark_stores.PROVIDERS["spark_hdfs"],
        "native windowed count, HDFS-backed store",
    ),
    "spark_rocksdb": (
        WINDOWED_COUNT,
        spark_stores.PROVIDERS["spark_rocksdb"],
        "native windowed count, RocksDB",
    ),
}
"""Variant -> (workload kind, state store settings, description)."""


def _query(spark: SparkSession, variant: str, workload: WorkloadSpec) -> DataFrame:
    stream = timed_workloads.source(spark, workload).select("key", "ts")
    if workload.kind == WINDOWED_COUNT:
        return timed_workloads.spark_windowed_count(stream)
    from bench.streaming.spark_processors import PANDAS, ROW
    from bench.streaming.spark_sessions import sessions_query

    return sessions_query(stream, PANDAS if variant == "spark_tws_pandas" else ROW)


def run_spark_timed(
    variant: str, workload: WorkloadSpec, params: BenchParams, scratch: Path
) -> RunResult:
    """Run ``variant`` on ``workload`` for warm-up + measured batches; return its records."""
    if variant not in VARIANTS or VARIANTS[variant][0] != workload.kind:
        fits = [v for v, (kind, _, _) in VARIANTS.items() if kind == workload.kind]
        raise BenchmarkError(f"no Spark system {variant!r} for {workload.kind!r}; use {fits}")
    _, provider, description = VARIANTS[variant]

    def query(spark: SparkSession) -> DataFrame:
        return _query(spark, variant, workload)

    return spark_stores.run_appending(
        variant, workload, params, scratch, query, system=(provider, description), strict=False
    )
