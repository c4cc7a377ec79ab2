"""GIC's systems in the streaming benchmarks: the runtime's Spark API on each workload.

``gic``
    Incremental checkpoints: every batch uploads one changelog segment per task; buckets
    are materialized in the background (``materialization_interval_s`` =
    :data:`MATERIALIZATION_INTERVAL_S`), checkpoints on local disk under the run's scratch
    directory.
``gic_no_changelog``
    The same with ``full_snapshots=True``: every checkpoint uploads a full snapshot of every
    non-empty bucket (the changelog is still appended in memory, but nothing of it is
    uploaded or referenced).
``gic_s3``
    ``gic`` with checkpoint storage on SeaweedFS (:class:`TestingS3Server`, started and
    stopped by this process; the executors find it through the S3 environment variables,
    set before the JVM starts).

Workloads: ``keyed_count`` runs ``.aggregate(count=count())`` on the ``key`` column;
``event_log`` runs :func:`append_events` (a list state per key, one append of the
batch's events per key: what the Spark baseline's ``collect_list`` keeps). Both read only
the columns they need and ``.discard()`` their output, as the baselines use the ``noop``
sink. 128 buckets, one state task per shuffle partition.

What is recorded per batch (see the ``*_DEFINITION`` constants, copied into the notes):
``batch_ms`` is Spark's ``triggerExecution`` of the GIC query (the same definition as the
baselines; the driver's own span is ``parts.gic_batch_ms``), ``commit_ms`` the runtime's
``BatchReport.commit_ms``, ``bytes`` what checkpoint ``N`` wrote: its changelog segments,
the snapshots it references first, and its manifest. Task-level timings come from the
acks of each batch's stateful stage (:func:`_capture_task_stats`, a process-local
wrapper of ``Driver._run_stage``).

Runs inside the system's own process (see :mod:`bench.streaming.runner`); not
thread-safe, one run per process.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from bench.streaming import spark_query, workloads
from bench.streaming.records import BatchRecord, BenchmarkError, BenchParams, RunResult
from bench.streaming.workloads import WorkloadSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from gic_runtime.checkpoint.manifest import StoredManifest
    from gic_runtime.config import GICSettings
    from gic_runtime.coordination.barrier import TaskStats
    from gic_runtime.processing import StateAccess
    from gic_runtime.spark import BatchReport, GICJob, GICQuery, StatefulStream

NUM_BUCKETS = 128
MATERIALIZATION_INTERVAL_S = 30.0
"""About two background snapshots per bucket in a one-minute run (jitter 0.2)."""
PROGRESS_WAIT_S = 30.0
"""How long to wait, after the query stopped, for Spark's last progress events."""
EVENT_LOG_OUTPUT = "key long, appended long"
SPARK_DURATIONS = {
    "addBatch": "add_batch_ms",
    "walCommit": "wal_commit_ms",
    "commitOffsets": "commit_offsets_ms",
    "queryPlanning": "query_planning_ms",
    "getBatch": "get_batch_ms",
    "latestOffset": "latest_offset_ms",
}
"""Spark's progress durations recorded in ``parts`` (Spark name -> part name)."""
REPORTED_SETTINGS = {
    "num_buckets",
    "num_tasks",
    "full_snapshots",
    "materialization_interval_s",
    "materialization_jitter",
    "materialization_max_in_flight",
    "retained_checkpoints",
    "changelog_codec",
    "max_hedges",
    "control_poll_s",
    "max_batches",
}


@dataclass(frozen=True)
class Variant:
    s3: bool
    full_snapshots: bool
    caveat: str | None = None


VARIANTS: dict[str, Variant] = {
    "gic": Variant(s3=False, full_snapshots=False),
    "gic_no_changelog": Variant(
        s3=False,
        full_snapshots=True,
        caveat=(
            "full_snapshots=True still appends every change to the in-memory changelog and "
            "uploads the segments (referenced by no manifest; parts.changelog_bytes), so "
            "gic vs gic_no_changelog does not isolate the cost of the dual write"
        ),
    ),
    "gic_s3": Variant(s3=True, full_snapshots=False),
}

BATCH_MS_DEFINITION = (
    "durationMs.triggerExecution of the GIC streaming query (the whole micro-batch, wall "
    "time, as for the Spark baselines): Spark's offset log, planning, the foreachBatch hook "
    "(stateful stage, manifest, publish, status record) and Spark's commit log. "
    "parts.gic_batch_ms is the runtime's BatchReport.batch_ms (the foreachBatch hook only)"
)
COMMIT_MS_DEFINITION = (
    "BatchReport.commit_ms, the runtime's definition: the slowest state task's changelog "
    "flush (end of processing until every change is durable; with full_snapshots this "
    "includes uploading every bucket's snapshot) + the manifest write. Spark's own offset "
    "and commit log writes (parts.wal_commit_ms, parts.commit_offsets_ms) are not included: "
    "the manifest is the checkpoint's source of truth"
)
BYTES_DEFINITION = (
    "bytes written to checkpoint storage for checkpoint N: the changelog segments its tasks "
    "uploaded (BatchReport.changelog_bytes, referenced by the manifest or not: with "
    "full_snapshots they are uploaded but not referenced), the snapshots manifest N "
    "references that manifest N-1 did not (synchronous full snapshots and adopted background "
    "materializations), and manifest N itself. Not counted: the status record rewritten "
    "every batch, Spark's offsets and commits logs (local disk), background snapshots no "
    "manifest of the run adopted"
)


# --- the workloads' processors ----------------------------------------------------------


def append_events(table: pa.Table, states: StateAccess) -> pa.Table:
    """Append each key's events of this batch to its list state (one append per key)."""
    grouped = table.group_by("key", use_threads=False).aggregate([("payload", "list")])
    keys = grouped.column("key").to_pylist()
    batches = grouped.column("payload_list").to_pylist()
    log = states.list("events")
    for key, events in zip(keys, batches, strict=True):
        log.extend(key, events)
    return pa.table(
        {"key": grouped.column("key"), "appended": pa.array([len(e) for e in batches], pa.int64())}
    )


def _stateful(job: GICJob, spark: SparkSession, workload: WorkloadSpec) -> StatefulStream:
    from gic_runtime.spark import count

    source = workloads.source(spark, workload)
    if workload.kind == workloads.KEYED_COUNT:
        return job.keyed(source.select("key"), key="key").aggregate(count=count())
    keyed = job.keyed(source.select("key", "payload"), key="key")
    return keyed.process_batches(append_events, EVENT_LOG_OUTPUT)


# --- storage ----------------------------------------------------------------------------

_S3_ENV = ("GIC_S3_ENDPOINT_URL", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


@contextlib.contextmanager
def _storage(variant: Variant, scratch: Path) -> Iterator[tuple[str, str]]:
    """Checkpoint storage root URI and its description; S3 lives as long as the block."""
    if not variant.s3:
        yield (scratch / "storage").as_uri(), "local disk (bench/scratch)"
        return
    from gic_runtime.testing_s3server import TestingS3Server

    saved = {name: os.environ.get(name) for name in _S3_ENV}
    with TestingS3Server(scratch / "seaweedfs") as server:
        bucket = server.create_bucket()
        s = server.settings
        values = (server.endpoint_url, s.region, s.access_key_id, s.secret_access_key)
        os.environ.update({name: value or "" for name, value in zip(_S3_ENV, values, strict=True)})
        try:
            yield (
                f"s3://{bucket}/bench",
                f"SeaweedFS S3 on loopback (weed mini, started in {server.startup_seconds:.1f} s)",
            )
        finally:
            for name, old in saved.items():
                if old is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = old


# --- diagnostics ------------------------------------------------------------------------


@dataclass
class _StageTimes:
    stage_ms: float
    stats: list[TaskStats]


@contextlib.contextmanager
def _capture_task_stats() -> Iterator[dict[int, _StageTimes]]:
    """Per batch id: the stateful stage's wall time and every task's stats, taken from
    the acks the driver collects. Wraps ``Driver._run_stage`` in this process only; when
    the runtime has no such method the mapping simply stays empty."""
    from gic_runtime.spark.driver import Driver

    seen: dict[int, _StageTimes] = {}
    original: Callable[..., Any] | None = getattr(Driver, "_run_stage", None)
    if original is None:
        yield seen
        return
    wrapped_original = original

    def wrapped(self: Any, df: Any, barrier: Any) -> Any:
        began = time.perf_counter()
        acks = wrapped_original(self, df, barrier)
        elapsed = (time.perf_counter() - began) * 1000
        seen[int(barrier.checkpoint_id)] = _StageTimes(elapsed, [a.stats for a in acks])
        return acks

    setattr(Driver, "_run_stage", wrapped)  # noqa: B010 - a method, assigned on purpose
    try:
        yield seen
    finally:
        setattr(Driver, "_run_stage", wrapped_original)  # noqa: B010


# --- records ----------------------------------------------------------------------------


def _snapshots(stored: StoredManifest | None) -> dict[str, int]:
    """Snapshot URIs a manifest references, with their sizes."""
    if stored is None:
        return {}
    states = stored.manifest.buckets.values()
    return {st.snapshot.uri: st.snapshot.size for st in states if st.snapshot is not None}


def _task_parts(stage: _StageTimes, commit_ms: float) -> dict[str, float]:
    """The stage's wall time and the slowest task's phases (ms), plus task counters."""
    stats = stage.stats
    slowest_flush = max(s.checkpoint_s for s in stats) * 1000
    return {
        "stage_ms": stage.stage_ms,
        "manifest_ms": max(0.0, commit_ms - slowest_flush),
        "task_process_ms_max": max(s.process_s for s in stats) * 1000,
        "task_checkpoint_ms_max": slowest_flush,
        "task_total_ms_max": max(s.total_s for s in stats) * 1000,
        "task_other_ms_max": max(s.total_s - s.process_s - s.checkpoint_s for s in stats) * 1000,
        "changes": float(sum(s.changes for s in stats)),
        "materializations_started": float(sum(s.materializations_started for s in stats)),
        "worker_pids": float(len({s.pid for s in stats})),
    }


def _record(
    report: BatchReport,
    stored: StoredManifest,
    previous: StoredManifest | None,
    progress: Mapping[str, Any],
    stage: _StageTimes | None,
) -> BatchRecord:
    from gic_runtime.checkpoint.codec import encode_manifest

    known = _snapshots(previous)
    new_snapshots = sum(n for uri, n in _snapshots(stored).items() if uri not in known)
    manifest_bytes = len(encode_manifest(stored.manifest, stored.uri))
    durations = progress["durationMs"]
    parts: dict[str, float] = {
        "gic_batch_ms": report.batch_ms,
        **{part: float(durations.get(name, 0)) for name, part in SPARK_DURATIONS.items()},
        "changelog_bytes": float(report.changelog_bytes),
        "snapshot_bytes": float(report.snapshot_bytes),
        "adopted_snapshot_bytes": float(max(0, new_snapshots - report.snapshot_bytes)),
        "manifest_bytes": float(manifest_bytes),
        "local_hits": float(report.local_hits),
        "restored": float(report.restored),
        "empty": float(report.empty),
        "materializations_adopted": float(report.materializations_adopted),
    }
    if stage is not None and stage.stats:
        parts.update(_task_parts(stage, report.commit_ms))
    return BatchRecord(
        batch_id=report.batch_id,
        rows=report.rows_in,
        batch_ms=float(durations["triggerExecution"]),
        commit_ms=report.commit_ms,
        bytes=report.changelog_bytes + new_snapshots + manifest_bytes,
        parts=parts,
    )


def _records(
    total: int,
    batches: Sequence[tuple[BatchReport, StoredManifest]],
    progress: Mapping[int, Mapping[str, Any]],
    stages: Mapping[int, _StageTimes],
    stop_reason: str | None,
) -> list[BatchRecord]:
    by_id = {report.batch_id: (report, stored) for report, stored in batches}
    missing = [b for b in range(total) if b not in by_id or b not in progress]
    if missing:
        raise BenchmarkError(
            f"GIC reported no checkpoint or Spark no progress for micro-batches {missing[:10]} "
            f"of 0..{total - 1}; the query stopped early ({stop_reason or 'no stop reason'}; "
            "see the system's log)"
        )
    out: list[BatchRecord] = []
    previous: StoredManifest | None = None
    for b in range(total):
        report, stored = by_id[b]
        out.append(_record(report, stored, previous, progress[b], stages.get(b)))
        previous = stored
    return out


# --- the run ----------------------------------------------------------------------------


def _settings(
    variant: Variant, workload: WorkloadSpec, storage: str, scratch: Path, batches: int
) -> GICSettings:
    from gic_runtime.config import GICSettings

    return GICSettings(
        job_id=workload.name.replace("_", "-"),
        storage=storage,
        num_buckets=NUM_BUCKETS,
        num_tasks=workload.partitions,
        local_dir=str(scratch / "local"),
        full_snapshots=variant.full_snapshots,
        max_batches=batches,
        materialization_interval_s=MATERIALIZATION_INTERVAL_S,
    )


def run_gic(variant: str, workload: WorkloadSpec, params: BenchParams, scratch: Path) -> RunResult:
    """Run GIC as ``variant`` on ``workload`` for warm-up + measured batches."""
    if variant not in VARIANTS:
        raise BenchmarkError(f"unknown GIC system {variant!r}; choose from {sorted(VARIANTS)}")
    spec = VARIANTS[variant]
    total = params.total_batches
    from gic_runtime.spark import GICJob
    from gic_runtime.spark.job import REQUIRED_CONF

    with _storage(spec, scratch) as (storage, storage_note):
        # One batch beyond the measured ones: the driver stops the query once max_batches
        # are checkpointed, which could interrupt Spark before it reports the progress of
        # the last one; the extra batch is not recorded.
        settings = _settings(spec, workload, storage, scratch, total + 1)
        spark = spark_query.spark_session(
            params, workload, REQUIRED_CONF, f"bench-{workload.name}-{variant}"
        )
        try:
            collector = spark_query.ProgressCollector(spark, last_batch=total - 1)
            job = GICJob(spark, settings)
            query: GICQuery = _stateful(job, spark, workload).discard()
            batches: list[tuple[BatchReport, StoredManifest]] = []

            def on_batch(report: BatchReport) -> None:
                driver = query.driver
                stored = driver.timeline.latest() if driver and driver.timeline else None
                if stored is None or stored.checkpoint_id != report.batch_id:
                    raise BenchmarkError(f"no manifest in memory for batch {report.batch_id}")
                batches.append((report, stored))

            timer = threading.Timer(params.timeout_s, _stop_on_timeout, (query, params.timeout_s))
            timer.daemon = True
            timer.start()
            try:
                with _capture_task_stats() as stages:
                    summary = query.run(on_batch=on_batch)
            finally:
                timer.cancel()
            collector.done.wait(PROGRESS_WAIT_S)
            progress = collector.progress()
            collector.close()
            version = spark.version
            slots = spark.sparkContext.defaultParallelism
        finally:
            spark.stop()
    records = _records(total, batches, progress, stages, summary.stop_reason)
    return RunResult(
        system=variant,
        warmup=tuple(records[: params.warmup]),
        measured=tuple(records[params.warmup :]),
        notes=_notes(
            spec,
            settings,
            storage_note=storage_note,
            stop=summary.stop_reason,
            version=version,
            slots=slots,
        ),
    )


def _stop_on_timeout(query: GICQuery, timeout_s: float) -> None:
    if query.driver is not None:
        query.driver.request_stop(f"benchmark timeout of {timeout_s:.0f} s")


def _notes(
    spec: Variant,
    settings: GICSettings,
    *,
    storage_note: str,
    stop: str | None,
    version: str,
    slots: int,
) -> dict[str, Any]:
    return {
        "kind": "gic",
        "spark_version": version,
        "task_slots": slots,
        "sink": "discard (output computed and dropped; the baselines use the noop sink)",
        "checkpoint": storage_note,
        "gic_settings": settings.model_dump(mode="json", include=REPORTED_SETTINGS),
        "s3": spec.s3,
        "stop_reason": stop,
        **({"caveat": spec.caveat} if spec.caveat else {}),
        "batch_ms_definition": BATCH_MS_DEFINITION,
        "commit_ms_definition": COMMIT_MS_DEFINITION,
        "bytes_definition": BYTES_DEFINITION,
        "materialization": (
            f"background, each bucket about every {settings.materialization_interval_s:.0f} s "
            "(a realistic setting for a run of about a minute; the product default is "
            "120 s); a snapshot's bytes count in the batch whose manifest first references it"
        ),
        "extra_batch": (
            "max_batches is warm-up + measured + 1 so that Spark reports the last measured "
            "batch before the driver stops the query; the extra batch is not recorded"
        ),
    }
