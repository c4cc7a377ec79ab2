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

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.streaming import outputs, spark_query, spark_stores, timed_workloads
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
    from bench.streaming.spark_sessions import PANDAS, ROW, sessions_query

    return sessions_query(stream, PANDAS if variant == "spark_tws_pandas" else ROW)


def _writer(out: Path) -> Any:
    def write(df: DataFrame, batch_id: int) -> None:
        df.write.mode("overwrite").parquet(str(out / f"batch_id={batch_id}"))

    return write


def output_fingerprint(spark: SparkSession, out: Path, batches: int) -> dict[str, Any]:
    """The fingerprint of the Parquet batches under ``out`` (ids ``< batches``)."""
    if not out.is_dir() or not any(out.glob("batch_id=*")):
        return outputs.fingerprint([], [], batches)
    table = spark.read.parquet(str(out)).toArrow()
    ids = table.column("batch_id").to_pylist()
    data = table.drop_columns(["batch_id"])
    rows = zip(*(c.to_pylist() for c in data.columns), strict=True)
    return outputs.fingerprint(rows, ids, batches)


def run_spark_timed(
    variant: str, workload: WorkloadSpec, params: BenchParams, scratch: Path
) -> RunResult:
    """Run ``variant`` on ``workload`` for warm-up + measured batches; return its records."""
    if variant not in VARIANTS or VARIANTS[variant][0] != workload.kind:
        fits = [v for v, (kind, _, _) in VARIANTS.items() if kind == workload.kind]
        raise BenchmarkError(f"no Spark system {variant!r} for {workload.kind!r}; use {fits}")
    _, provider, description = VARIANTS[variant]
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
            _query(spark, variant, workload)
            .writeStream.foreachBatch(_writer(out))
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
        fingerprint = output_fingerprint(spark, out, total)
    finally:
        spark_query.stop_session(spark, params)
    added, complete = spark_stores._added_bytes(str(checkpoint), False, progress)
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
