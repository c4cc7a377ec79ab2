"""The baselines: Spark's own streaming aggregation with each built-in state store.

``spark_hdfs``
    ``HDFSBackedStateStoreProvider`` (the default): in-memory maps, a delta file per
    partition per batch, snapshots by the maintenance thread.
``spark_rocksdb``
    ``RocksDBStateStoreProvider``: each commit flushes RocksDB and uploads its new SST
    files plus a metadata zip.
``spark_rocksdb_changelog``
    The same with ``changelogCheckpointing.enabled=true``: each commit uploads a
    changelog file; snapshots are uploaded by the maintenance thread.

``spark_no_state``
    Not a state store: the workload's aggregation over each micro-batch alone
    (``foreachBatch`` into the ``noop`` sink), with the same source, shuffle and offset and
    commit logs as the stateful runs and no state. What any system running the query pays
    before it keeps state: the floor under every system's batch time (:data:`NO_STATE`).

``<name>_s3a``
    Any of them checkpointing to S3 through Hadoop's S3A (:mod:`bench.streaming.s3a`),
    into the bucket of the benchmark's shared SeaweedFS.

Each runs the workload's :func:`~bench.streaming.workloads.spark_baseline` aggregation
into the ``noop`` sink in update mode (no ``foreachBatch``; with the option ``output``,
``foreachBatch`` writing Parquet under the scratch directory and fingerprinted, as
:mod:`bench.streaming.spark_timed` does), checkpointing to local disk
under the run's scratch directory (or to S3), for exactly ``warmup + measured``
micro-batches; a checkpoint left there by an earlier run of the same scratch directory
is resumed (a restart). Numbers come from Spark's own progress reports (see
:data:`COMMIT_MS_DEFINITION`) and the checkpoint directory
(:mod:`bench.streaming.checkpoint_bytes`). ``minBatchesToRetain`` is set above the number
of batches so no maintenance deletes anything during the run (the result notes confirm
it), unless the option ``spark_retention`` keeps Spark's default (then no bytes are
measured).

Runs inside the system's own process (see :mod:`bench.streaming.runner`); not
thread-safe, one run per process.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.streaming import checkpoint_bytes, s3a, spark_query, workloads
from bench.streaming.records import BatchRecord, BenchmarkError, BenchParams, RunResult
from bench.streaming.workloads import WorkloadSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_STATE = "org.apache.spark.sql.execution.streaming.state"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
RETAIN = "spark.sql.streaming.minBatchesToRetain"

PROVIDERS: dict[str, dict[str, str]] = {
    "spark_hdfs": {PROVIDER: f"{_STATE}.HDFSBackedStateStoreProvider"},
    "spark_rocksdb": {PROVIDER: f"{_STATE}.RocksDBStateStoreProvider", CHANGELOG: "false"},
    "spark_rocksdb_changelog": {
        PROVIDER: f"{_STATE}.RocksDBStateStoreProvider",
        CHANGELOG: "true",
    },
}

NO_STATE = "spark_no_state"
"""The variant that keeps no state (see the module docstring); it writes no output to
compare, since its rows are each batch's own aggregates, not the running ones."""

REPORTED_CONF = (
    PROVIDER,
    CHANGELOG,
    RETAIN,
    "spark.sql.streaming.stateStore.minDeltasForSnapshot",
    "spark.sql.streaming.stateStore.maintenanceInterval",
    "spark.sql.streaming.stateStore.compression.codec",
    "spark.sql.streaming.stateStore.checkpointFormatVersion",
    "spark.sql.shuffle.partitions",
    "spark.driver.memory",
)

COMMIT_MS_DEFINITION = (
    "sum over state operators of stateOperators[].commitTimeMs (Spark's metric, itself a "
    "SUM over the state store partitions' tasks, which run on parallel task slots) + "
    "durationMs.commitOffsets (commit log write) + durationMs.walCommit (offset log "
    "write). Caveats: with the HDFS provider the delta file is written while updating, "
    "so most of its checkpoint I/O is in the update time, not in commitTimeMs; "
    "commit_ms_wall_estimate divides the state part by the task slots instead"
)
BYTES_DEFINITION = (
    "bytes the checkpoint directory gained per batch, attributed after the run: offsets/N "
    "and commits/N by name, every other file by modification time to the batch whose "
    "[start, end] window holds it (background maintenance included); Hadoop .crc checksum "
    "sidecars excluded (parts.crc_bytes); nothing deleted during the run "
    "(minBatchesToRetain above the batch count)"
)
BATCH_MS_DEFINITION = "durationMs.triggerExecution (the whole micro-batch, wall time)"

_CUSTOM = (
    "rocksdbBytesCopied",
    "rocksdbFilesCopied",
    "rocksdbCommitFileSyncLatencyMs",
    "rocksdbCommitFlushLatency",
    "rocksdbCommitCheckpointLatency",
    "rocksdbCommitCompactLatency",
    "rocksdbChangeLogWriterCommitLatencyMs",
    "rocksdbLoadLatencyMs",
    "rocksdbNumLoadedFromDfs",
    "rocksdbNumReplayChangelogFiles",
    "loadedMapCacheHitCount",
    "loadedMapCacheMissCount",
    "stateOnCurrentVersionSizeBytes",
)


def _conf(spark: SparkSession, key: str) -> str | None:
    """Effective value (defaults included) of a SQL or Spark setting; None if unset."""
    from pyspark.errors import PySparkException

    try:
        return spark.conf.get(key)
    except PySparkException:
        value: str | None = spark.sparkContext.getConf().get(key)
        return value


def _record(
    progress: Mapping[str, Any], added: checkpoint_bytes.BatchBytes, slots: int
) -> BatchRecord:
    durations = progress["durationMs"]
    operators: Sequence[Mapping[str, Any]] = progress.get("stateOperators", [])
    state_commit = float(sum(op["commitTimeMs"] for op in operators))
    offsets = float(durations.get("commitOffsets", 0))
    wal = float(durations.get("walCommit", 0))
    instances = max((int(op.get("numStateStoreInstances", 1)) for op in operators), default=1)
    parts: dict[str, float] = {
        "state_commit_ms_sum_over_tasks": state_commit,
        "commit_offsets_ms": offsets,
        "wal_commit_ms": wal,
        "commit_ms_wall_estimate": state_commit / max(1, min(slots, instances)) + offsets + wal,
        "add_batch_ms": float(durations.get("addBatch", 0)),
        "query_planning_ms": float(durations.get("queryPlanning", 0)),
        "state_update_ms_sum_over_tasks": float(sum(op["allUpdatesTimeMs"] for op in operators)),
        "state_rows_total": float(sum(op["numRowsTotal"] for op in operators)),
        "state_rows_updated": float(sum(op["numRowsUpdated"] for op in operators)),
        "state_memory_bytes": float(sum(op["memoryUsedBytes"] for op in operators)),
        "files": float(added.files),
        "crc_bytes": float(added.crc_bytes),
    }
    for name in _CUSTOM:
        values = [op.get("customMetrics", {}).get(name) for op in operators]
        if any(v is not None for v in values):
            parts[name] = float(sum(v for v in values if v is not None))
    return BatchRecord(
        batch_id=int(progress["batchId"]),
        rows=int(progress["numInputRows"]),
        batch_ms=float(durations["triggerExecution"]),
        commit_ms=state_commit + offsets + wal,
        bytes=added.bytes,
        parts=parts,
    )


def _provider(variant: str) -> tuple[dict[str, str], bool]:
    """The provider settings of ``variant`` (none for :data:`NO_STATE`) and whether it
    checkpoints to S3."""
    on_s3 = variant.endswith(s3a.SUFFIX)
    base = variant.removesuffix(s3a.SUFFIX) if on_s3 else variant
    if base == NO_STATE:
        return {}, on_s3
    if base not in PROVIDERS:
        names = [*PROVIDERS, NO_STATE]
        known = sorted([*names, *(f"{name}{s3a.SUFFIX}" for name in names)])
        raise BenchmarkError(f"unknown Spark state store system {variant!r}; choose from {known}")
    return PROVIDERS[base], on_s3


def stateless(variant: str) -> bool:
    """Whether ``variant`` is :data:`NO_STATE` (on local disk or S3)."""
    return variant.removesuffix(s3a.SUFFIX) == NO_STATE


def each_batch_alone(spec: WorkloadSpec) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function running the workload's aggregation over the batch
    alone into the ``noop`` sink (:data:`NO_STATE`)."""

    def write(df: DataFrame, batch_id: int) -> None:
        workloads.spark_baseline(df, spec).write.format("noop").mode("overwrite").save()

    return write


def _added_bytes(
    checkpoint: str, on_s3: bool, progress: Sequence[Mapping[str, Any]], variant: str
) -> tuple[list[checkpoint_bytes.BatchBytes], str | None]:
    """Bytes each batch added to the checkpoint, and why they cannot be trusted (None:
    every batch's offsets and commits log entries were found, so nothing was deleted;
    on S3 also that the listing the bytes come from was complete)."""
    ids = [int(p["batchId"]) for p in progress]
    windows = [
        checkpoint_bytes.BatchWindow(b, spark_query.end_ns(p))
        for b, p in zip(ids, progress, strict=True)
    ]
    problem: str | None = None
    if on_s3:
        bucket, _, prefix = checkpoint.removeprefix("s3a://").partition("/")

        def list_prefix(sub: str) -> list[checkpoint_bytes.Entry]:
            found = s3a.entries(bucket, f"{prefix.rstrip('/')}/{sub}" if sub else prefix)
            return [dataclasses.replace(e, path=f"{sub}/{e.path}") if sub else e for e in found]

        check = checkpoint_bytes.s3_log_check(list_prefix, ids)
        added = checkpoint_bytes.attribute_entries(check.listing, windows)
        if not check.complete:
            problem = check.problem(variant, RETAIN)
    else:
        listing = list(checkpoint_bytes.local_entries(Path(checkpoint)))
        added = checkpoint_bytes.attribute_entries(listing, windows)
        missing = checkpoint_bytes.missing_log_entries((e.path for e in listing), ids)
        if missing:
            problem = checkpoint_bytes.deleted_message(variant, missing, RETAIN)
    return [added[b] for b in ids], problem


def with_stored(record: BatchRecord, sample: checkpoint_bytes.StoredSample | None) -> BatchRecord:
    """``record`` with a storage sample in its parts (unchanged without one)."""
    if sample is None:
        return record
    parts = {
        **record.parts,
        "stored_bytes": float(sample.bytes),
        "stored_files": float(sample.files),
    }
    parts.update({f"stored_{kind}_bytes": float(n) for kind, n in sample.kinds.items()})
    return dataclasses.replace(record, parts=parts)


def run_spark_store(
    variant: str,
    workload: WorkloadSpec,
    params: BenchParams,
    scratch: Path,
    *,
    spark_retention: bool = False,
    output: bool = False,
    stored_bytes_every: int = 0,
) -> RunResult:
    """Run Spark's aggregation with the ``variant`` state store; return its records.

    ``spark_retention``: keep Spark's default ``minBatchesToRetain`` and measure no bytes
    (for restarts, which need realistic retention, not byte accounting). ``output``:
    write the output to Parquet and fingerprint it. ``stored_bytes_every``: sample the
    checkpoint directory's bytes after every N-th batch (0: never)."""
    provider, on_s3 = _provider(variant)
    no_state = stateless(variant)
    if no_state and output:
        raise BenchmarkError(f"{variant} writes no output to compare; run it without output")
    total = params.total_batches
    conf = dict(provider)
    if not spark_retention:
        conf[RETAIN] = str(max(100, total + 10))
    if on_s3:
        conf.update(s3a.spark_conf())
        checkpoint = f"s3a://{s3a.bucket()}/spark/{workload.name}/{variant}/{scratch.name}"
    else:
        checkpoint = str(scratch / "checkpoint")
    sampler = None
    if stored_bytes_every > 0 and not on_s3:
        sampler = checkpoint_bytes.StoredBytesSampler(
            Path(checkpoint), stored_bytes_every, kind=checkpoint_bytes.top_directory
        )
    out = scratch / "output"
    fingerprint = None
    began = time.perf_counter()
    spark = spark_query.spark_session(
        params, workload, conf, f"bench-{workload.name}-{variant}", scratch=scratch
    )
    session_ms = (time.perf_counter() - began) * 1000
    try:
        collector = spark_query.ProgressCollector(
            spark, batches=total, on_progress=None if sampler is None else sampler.batch_done
        )
        started_ns = time.time_ns()
        source = workloads.source(spark, workload)
        if no_state:
            writer = source.writeStream.foreachBatch(each_batch_alone(workload))
        else:
            stream = workloads.spark_baseline(source, workload)
            writer = (
                stream.writeStream.foreachBatch(spark_query.parquet_writer(out))
                if output
                else stream.writeStream.format("noop")
            )
        query = (
            writer.outputMode("append" if no_state else "update")
            .queryName(f"{workload.name}_{variant}")
            .option("checkpointLocation", checkpoint)
            .start()
        )
        progress = spark_query.run_batches(query, collector, total, params.timeout_s)
        collector.close()
        effective = {key: _conf(spark, key) for key in REPORTED_CONF}
        if on_s3:
            effective.update({key: _conf(spark, key) for key in s3a.REPORTED})
        slots = spark.sparkContext.defaultParallelism
        version = spark.version
        if output:
            fingerprint = spark_query.output_fingerprint(out, total)
    finally:
        spark_query.stop_session(spark, params)
        samples = sampler.close() if sampler is not None else {}
    if spark_retention:
        added, complete = [checkpoint_bytes.BatchBytes() for _ in progress], False
    else:
        added, problem = _added_bytes(checkpoint, on_s3, progress, variant)
        if problem is not None:
            raise BenchmarkError(problem)
        complete = True
    records = [
        with_stored(_record(p, b, slots), samples.get(int(p["batchId"])))
        for p, b in zip(progress, added, strict=True)
    ]
    return RunResult.of_batches(
        variant,
        records,
        params,
        {
            "kind": "spark_baseline",
            "spark_version": version,
            "task_slots": slots,
            "mode": params.mode,
            "sink": (
                "foreachBatch: the aggregation over the batch alone into noop, no state"
                if no_state
                else "foreachBatch writing Parquet under the scratch directory, update output mode"
                if output
                else "noop, update output mode"
            ),
            **({"output": fingerprint} if output else {}),
            "checkpoint": (
                f"S3A on the benchmark's SeaweedFS ({checkpoint})"
                if on_s3
                else "local disk (bench/scratch)"
            ),
            "spark_conf": effective,
            "batch_ms_definition": BATCH_MS_DEFINITION,
            "commit_ms_definition": COMMIT_MS_DEFINITION,
            "bytes_definition": (
                "not measured (spark_retention: Spark's default retention)"
                if spark_retention
                else BYTES_DEFINITION
                + (
                    "; on S3 by object LastModified (whole seconds: a file may count one "
                    "batch early)"
                    if on_s3
                    else ""
                )
            ),
            "nothing_deleted_during_run": complete,
            "session_start_ms": round(session_ms, 1),
            "to_first_batch_ms": round((spark_query.end_ns(progress[0]) - started_ns) / 1e6, 1),
            "before_first_batch_ms": round(
                (spark_query.start_ns(progress[0]) - started_ns) / 1e6, 1
            ),
            "maintenance": (
                "Spark's defaults: the maintenance thread runs every "
                f"{effective['spark.sql.streaming.stateStore.maintenanceInterval']} and writes "
                "the HDFS snapshots and the RocksDB-changelog snapshot uploads, so a run of "
                "about a minute contains few of them; their bytes count only when they fall "
                "inside a measured batch"
            ),
        },
    )


def run_appending(
    variant: str,
    workload: WorkloadSpec,
    params: BenchParams,
    scratch: Path,
    query: Callable[[SparkSession], DataFrame],
    *,
    system: tuple[Mapping[str, str], str],
    strict: bool,
) -> RunResult:
    """Run the streaming ``query`` (built on the session) in append mode on the state
    store settings of ``system`` (settings, description), its output written through
    ``foreachBatch`` to Parquet under ``scratch`` and fingerprinted, checkpointing to local
    disk; return its records, with bytes and notes as :func:`run_spark_store` measures
    them. ``strict``: raise when Spark deleted checkpoint files during the run (else the
    notes say so)."""
    provider, description = system
    total = params.total_batches
    conf = {**provider, RETAIN: str(max(100, total + 10))}
    checkpoint, out = scratch / "checkpoint", scratch / "output"
    began = time.perf_counter()
    spark = spark_query.spark_session(
        params, workload, conf, f"bench-{workload.name}-{variant}", scratch=scratch
    )
    session_ms = (time.perf_counter() - began) * 1000
    try:
        collector = spark_query.ProgressCollector(spark, batches=total)
        started_ns = time.time_ns()
        running = (
            query(spark)
            .writeStream.foreachBatch(spark_query.parquet_writer(out))
            .outputMode("append")
            .queryName(f"{workload.name}_{variant}")
            .option("checkpointLocation", str(checkpoint))
            .start()
        )
        progress = spark_query.run_batches(running, collector, total, params.timeout_s)
        collector.close()
        effective = {key: _conf(spark, key) for key in REPORTED_CONF}
        slots = spark.sparkContext.defaultParallelism
        version = spark.version
        fingerprint = spark_query.output_fingerprint(out, total)
    finally:
        spark_query.stop_session(spark, params)
    added, problem = _added_bytes(str(checkpoint), False, progress, variant)
    if strict and problem is not None:
        raise BenchmarkError(problem)
    complete = problem is None
    records = [_record(p, b, slots) for p, b in zip(progress, added, strict=True)]
    return RunResult.of_batches(
        variant,
        records,
        params,
        {
            "kind": "spark_baseline",
            "system": description,
            "spark_version": version,
            "task_slots": slots,
            "mode": params.mode,
            "sink": "foreachBatch writing Parquet under the scratch directory, append mode",
            "spark_conf": effective,
            "batch_ms_definition": BATCH_MS_DEFINITION,
            "commit_ms_definition": COMMIT_MS_DEFINITION,
            "bytes_definition": BYTES_DEFINITION,
            "nothing_deleted_during_run": complete,
            "session_start_ms": round(session_ms, 1),
            "to_first_batch_ms": round((spark_query.end_ns(progress[0]) - started_ns) / 1e6, 1),
            "output": fingerprint,
        },
    )
