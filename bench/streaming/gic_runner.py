"""GIC's systems in the streaming benchmarks: the runtime's Spark API on each workload.

``gic``
    Incremental checkpoints: every batch uploads one changelog segment per task; buckets
    are materialized in the background (``materialization_interval_s`` =
    :data:`MATERIALIZATION_INTERVAL_S`, or the runtime's default with the option
    ``default_materialization``), checkpoints on local disk under the run's scratch
    directory.
``gic_no_changelog``
    The same with ``full_snapshots=True``: every checkpoint uploads a full snapshot of every
    non-empty bucket (the changelog is still appended in memory, but nothing of it is
    uploaded or referenced).
``gic_s3``
    ``gic`` with checkpoint storage on SeaweedFS: the server named by ``GIC_BENCH_S3_BUCKET``
    and the S3 environment variables when they are set (one server shared by every system
    of a benchmark, each run under its own prefix), else a :class:`TestingS3Server`
    started and stopped by this process.
    Executors find it through the S3 environment variables (``spark.executorEnv.*``).

Workloads: ``keyed_count`` runs ``.aggregate(count=count())`` on the ``key`` column
(``keyed_payload``: ``.aggregate(count=count(), payload=max_("payload"))``);
``event_log`` runs :func:`append_events` (a list state per key, one append of the
batch's events per key: what the Spark baseline's ``collect_list`` keeps); both
``.discard()`` their output, as the baselines use the ``noop`` sink. The event-time ones
run the option ``processor`` of :mod:`bench.streaming.gic_timed` (option ``output``: into
a Parquet sink, fingerprinted). 128 buckets, one state task per shuffle partition.

Executor-local state: in local mode under ``<scratch>/<local_dir option>`` (default
``local``; a restart given a new name starts with an empty local directory, as a replaced
pod does); in cluster modes ``local_dir`` is not set, so each executor uses the runtime's
default executor-private directory.

What is recorded per batch: see :mod:`bench.streaming.gic_records`. The notes add the
time from starting the query to the end of its first batch (``to_first_batch_ms``; with
``before_first_batch_ms``, the part before that batch began: recovery, planning), the
state's snapshot size at the end (``state_snapshot_bytes``: the snapshots the last
manifest references) and, with the option ``stored_bytes_every=N``, the bytes under the
storage root sampled after every N-th batch (``parts.stored_bytes``, local storage only).

Runs inside the system's own process (see :mod:`bench.streaming.runner`); not
thread-safe, one run per process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from bench.streaming import checkpoint_bytes, gic_records, gic_timed, spark_query, workloads
from bench.streaming.checkpoint_bytes import StoredSample
from bench.streaming.records import BatchRecord, BenchmarkError, BenchParams, RunResult
from bench.streaming.workloads import WorkloadSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from gic_runtime.config import GICSettings
    from gic_runtime.processing import StateAccess
    from gic_runtime.spark import BatchReport, GICJob, GICQuery, StatefulStream

NUM_BUCKETS = 128
MATERIALIZATION_INTERVAL_S = 30.0
"""About two background snapshots per bucket in a one-minute run (jitter 0.2)."""
PROGRESS_WAIT_S = 30.0
"""How long to wait, after the query stopped, for Spark's last progress events."""
EVENT_LOG_OUTPUT = "key long, appended long"
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
    "local_state_mapped_limit",
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


def _stateful(
    job: GICJob, spark: SparkSession, workload: WorkloadSpec, processor: str
) -> StatefulStream:
    from gic_runtime.spark import count, max_

    if processor:
        return gic_timed.stateful(job, spark, workload, processor)
    source = workloads.source(spark, workload)
    if workload.kind == workloads.KEYED_COUNT:
        return job.keyed(source.select("key"), key="key").aggregate(count=count())
    if workload.kind == workloads.KEYED_PAYLOAD:
        keyed_payload = job.keyed(source.select("key", "payload"), key="key")
        return keyed_payload.aggregate(count=count(), payload=max_("payload"))
    keyed = job.keyed(source.select("key", "payload"), key="key")
    return keyed.process_batches(append_events, EVENT_LOG_OUTPUT)


# --- storage ----------------------------------------------------------------------------

_S3_ENV = ("GIC_S3_ENDPOINT_URL", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
SHARED_S3_BUCKET_ENV = "GIC_BENCH_S3_BUCKET"
"""Names the bucket of a SeaweedFS server shared by the systems of one benchmark."""


@contextlib.contextmanager
def _storage(variant: Variant, scratch: Path, name: str) -> Iterator[tuple[str, str]]:
    """Checkpoint storage root URI and its description; S3 lives as long as the block."""
    if not variant.s3:
        yield (scratch / "storage").as_uri(), "local disk (bench/scratch)"
        return
    shared = os.environ.get(SHARED_S3_BUCKET_ENV)
    if shared:
        endpoint = os.environ.get("GIC_S3_ENDPOINT_URL", "")
        # one prefix per run directory: rounds and sections run gic_s3 again and again,
        # each from scratch (a restart reuses its run directory, so its prefix too)
        yield (
            f"s3://{shared}/gic/{name}/{scratch.name}",
            f"S3 at {endpoint}, shared by the benchmark's systems",
        )
        return
    from tests.support.testing_s3server import TestingS3Server

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
            for key, old in saved.items():
                if old is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = old


# --- the run ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    """Keyword options of :func:`run_gic` (JSON values, passed by the runner)."""

    default_materialization: bool = False
    """Leave every materialization setting at the runtime's default."""
    local_dir: str = "local"
    """Executor-local directory under the scratch directory (local mode only)."""
    stored_bytes_every: int = 0
    """Sample the bytes under the storage root after every N-th batch (0: never)."""
    processor: str = ""
    """An event-time workload's processor (:data:`bench.streaming.gic_timed.PROCESSORS`)."""
    output: bool = False
    """Write the output to a Parquet sink (not ``discard``) and fingerprint it."""
    restore_every: int = 0
    """Time a restore of the whole state after every N-th batch (0: never)."""


def _settings(
    variant: Variant,
    workload: WorkloadSpec,
    storage: str,
    local_dir: Path | None,
    *,
    batches: int,
    options: Options,
) -> GICSettings:
    from gic_runtime.config import GICSettings

    values: dict[str, Any] = {
        "job_id": workload.name.replace("_", "-"),
        "storage": storage,
        "num_buckets": NUM_BUCKETS,
        "num_tasks": workload.partitions,
        "full_snapshots": variant.full_snapshots,
        "max_batches": batches,
    }
    if local_dir is not None:
        values["local_dir"] = str(local_dir)
    if not options.default_materialization:
        values["materialization_interval_s"] = MATERIALIZATION_INTERVAL_S
    # GIC_<SETTING> variables set what the benchmark leaves at the runtime's defaults
    # (an experiment's override, reported with the run's settings); its own values win
    return GICSettings.load(**values)


@dataclass
class _Collected:
    """What the run's callbacks gathered, batch by batch (of the manifests, only what
    the records need: :class:`~bench.streaming.gic_records.ManifestTracker`)."""

    reports: list[BatchReport]
    manifests: gic_records.ManifestTracker


def run_gic(
    variant: str, workload: WorkloadSpec, params: BenchParams, scratch: Path, **options: Any
) -> RunResult:
    """Run GIC as ``variant`` on ``workload`` for warm-up + measured batches (after those
    already checkpointed in ``scratch``'s storage, if any: a restart)."""
    if variant not in VARIANTS:
        raise BenchmarkError(f"unknown GIC system {variant!r}; choose from {sorted(VARIANTS)}")
    spec = VARIANTS[variant]
    opts = Options(**options)
    total = params.total_batches
    from gic_runtime.spark import GICJob
    from gic_runtime.spark.session import REQUIRED_CONF

    local_dir = None if params.cluster else scratch / opts.local_dir
    began = time.perf_counter()
    with _storage(spec, scratch, workload.name) as (storage, storage_note):
        # One batch beyond the measured ones: the driver stops the query once max_batches
        # are checkpointed, which could interrupt Spark before it reports the progress of
        # the last one; the extra batch is not recorded.
        settings = _settings(spec, workload, storage, local_dir, batches=total + 1, options=opts)
        spark = spark_query.spark_session(
            params, workload, REQUIRED_CONF, f"bench-{workload.name}-{variant}", scratch=scratch
        )
        session_ms = (time.perf_counter() - began) * 1000
        sampler = None
        if opts.stored_bytes_every > 0 and storage.startswith("file:"):
            sampler = checkpoint_bytes.StoredBytesSampler(
                scratch / "storage", opts.stored_bytes_every
            )
        try:
            collector = spark_query.ProgressCollector(spark, batches=total)
            job = GICJob(spark, settings)
            stream = _stateful(job, spark, workload, opts.processor)
            output = scratch / "output"
            query: GICQuery = stream.to_parquet(str(output)) if opts.output else stream.discard()
            restores = gic_timed.RestoreSampler(storage, opts.restore_every)
            got = _Collected([], gic_records.ManifestTracker())

            def on_batch(report: BatchReport) -> None:
                driver = query.driver
                stored = driver.timeline.latest() if driver is not None else None
                if stored is None or stored.checkpoint_id != report.batch_id:
                    raise BenchmarkError(f"no manifest in memory for batch {report.batch_id}")
                if got.manifests.latest is None and driver is not None:
                    # a restart: count new snapshots against the checkpoint it resumed
                    before = report.batch_id
                    resumed = [m for m in driver.timeline.retained() if m.checkpoint_id < before]
                    if resumed:
                        got.manifests.resume_from(resumed[-1])
                got.reports.append(report)
                got.manifests.add(report, stored)
                if sampler is not None:
                    sampler.batch_done(report.batch_id)
                restores.batch_done(report.batch_id, stored)

            timer = threading.Timer(params.timeout_s, _stop_on_timeout, (query, params.timeout_s))
            timer.daemon = True
            timer.start()
            started_ns = time.time_ns()
            try:
                with gic_records.capture_task_stats() as stages:
                    summary = query.run(on_batch=on_batch)
            finally:
                timer.cancel()
            collector.done.wait(PROGRESS_WAIT_S)
            progress = collector.progress()
            collector.close()
            version = spark.version
            slots = spark.sparkContext.defaultParallelism
        finally:
            spark_query.stop_session(spark, params)
            samples = sampler.close() if sampler is not None else {}
    records = gic_records.records(
        total, got.reports, got.manifests, progress, stages=stages, stop_reason=summary.stop_reason
    )
    records = [
        _with_sample(r, samples.get(r.batch_id), restores.samples.get(r.batch_id, {}))
        for r in records
    ]
    first = progress[records[0].batch_id]
    notes = _notes(
        spec,
        settings,
        storage_note=storage_note,
        stop=summary.stop_reason,
        version=version,
        slots=slots,
    )
    latest = got.manifests.latest
    notes.update(
        mode=params.mode,
        local_dir=str(local_dir) if local_dir else "runtime default (executor-private)",
        session_start_ms=round(session_ms, 1),
        to_first_batch_ms=round((spark_query.end_ns(first) - started_ns) / 1e6, 1),
        before_first_batch_ms=round((spark_query.start_ns(first) - started_ns) / 1e6, 1),
        state_snapshot_bytes=sum(gic_records.snapshots(latest).values()),
        buckets_with_snapshot=len(gic_records.snapshots(latest)),
        buckets_with_state=gic_records.buckets_with_state(latest),
    )
    if opts.processor:
        notes["processor"] = opts.processor
    if opts.output:
        notes["output"] = gic_timed.output_fingerprint(output, total)
        notes["sink"] = "to_parquet in the scratch directory (published after each checkpoint)"
    return RunResult.of_batches(variant, records, params, notes)


def _with_sample(
    record: BatchRecord, sample: StoredSample | None, restore: dict[str, float]
) -> BatchRecord:
    parts = {**record.parts, **restore}
    if sample is not None:
        parts.update(stored_bytes=float(sample.bytes), stored_files=float(sample.files))
        parts.update({f"stored_{kind}_bytes": float(n) for kind, n in sample.kinds.items()})
    return dataclasses.replace(record, parts=parts)


def _stop_on_timeout(query: GICQuery, timeout_s: float) -> None:
    if query.driver is not None:
        deadline = time.monotonic() + 600.0  # the running batch ends, then the clean-up
        query.driver.stop_between_batches(f"benchmark timeout of {timeout_s:.0f} s", deadline)


def _notes(
    spec: Variant,
    settings: GICSettings,
    *,
    storage_note: str,
    stop: str | None,
    version: str,
    slots: int,
) -> dict[str, Any]:
    interval = settings.materialization_interval_s
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
        "batch_ms_definition": gic_records.BATCH_MS_DEFINITION,
        "commit_ms_definition": gic_records.COMMIT_MS_DEFINITION,
        "bytes_definition": gic_records.BYTES_DEFINITION,
        "local_hit_definition": gic_records.LOCAL_HIT_DEFINITION,
        "materialization": (
            f"background, each bucket about every {interval:.0f} s"
            + (
                " (a realistic setting for a run of about a minute; the product default is 120 s)"
                if interval == MATERIALIZATION_INTERVAL_S
                else " (the runtime's default)"
            )
            + "; a snapshot's bytes count in the batch whose manifest first references it"
        ),
        "extra_batch": (
            "max_batches is warm-up + measured + 1 so that Spark reports the last measured "
            "batch before the driver stops the query; the extra batch is not recorded"
        ),
    }
