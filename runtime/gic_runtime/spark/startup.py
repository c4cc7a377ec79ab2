"""The driver's start-up: :func:`start_driver` does everything before the first batch
and returns a complete :class:`~gic_runtime.spark.driver.Driver`; here also its steps,
the check of the query before anything is written, the way from the start point to the
first batch, and the report of a start that failed.

:func:`start_driver`, in this order: refuse checkpoints a different query wrote, claim
a fencing epoch, open the checkpoint timeline (own latest checkpoint, else the restore
source; with the live orphan sweep), start the telemetry (status ``starting``), take the
timeline to the first batch (:func:`resume`), report the start; a failure on the way
is reported (:func:`report_start_failure`) and propagates, and no driver exists.

:func:`check_resume_query` compares this query's fingerprint
(:mod:`gic_runtime.query`) with the one recorded in the job's latest checkpoint and
refuses the resume when they differ, unless ``allow_query_change`` is set;
:func:`note_restored_query` logs what differs from a restore source's query;
:func:`resume` takes an opened timeline to the first batch (Spark's checkpoint
directory laid down from the start point, the output claimed, the latest checkpoint's
output published, stale staging cleared, orphans swept);
:func:`report_start_failure` records why a start failed in the job's status record and
closes what the start opened.

Invariants: the query check only reads (one listing of the job's checkpoints and the
latest manifest) and runs before the driver claims a fencing epoch, so a refused start
has written nothing; a job without a fingerprint, or without a checkpoint, is never
refused. A restore source is named explicitly by whoever starts the job, so a
different query there is never refused, only logged. A failed start is recorded under
the epoch it claimed, else the one its settings give, else not at all (a newer epoch's
record is never replaced, :mod:`gic_runtime.spark.telemetry`); reporting is best
effort and never replaces the start's own error.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from gic_runtime.checkpoint.catalog import find_latest_checkpoint
from gic_runtime.checkpoint.manifest import Manifest
from gic_runtime.checkpoint.sweep import SweepResult
from gic_runtime.config import GICSettings
from gic_runtime.control.auth import ControlKey
from gic_runtime.driver.savepoint_requests import read_engine_record, read_event_time_record
from gic_runtime.driver.timeline import CheckpointTimeline, RestoreRequest
from gic_runtime.errors import ConfigurationError, ObjectNotFoundError
from gic_runtime.event_time import NO_PROGRESS, EventTimeProgress, EventTimeSpec
from gic_runtime.fencing import Fence, claim_epoch
from gic_runtime.layout import job_dir
from gic_runtime.processing import Processor
from gic_runtime.query import OVERRIDE_SETTING, QueryFingerprint, check_resume, differences
from gic_runtime.sinks import Sink
from gic_runtime.spark import checkpoint_dir
from gic_runtime.spark.batch_output import BatchOutput, start_origin
from gic_runtime.spark.driver import Driver
from gic_runtime.spark.initial_state import InitialInput
from gic_runtime.spark.locality import StickyPlacement
from gic_runtime.spark.reports import BatchReport, StartInfo
from gic_runtime.spark.telemetry import Telemetry, record_failure
from gic_runtime.storage.uri import StoreResolver

__all__ = [
    "Resumed",
    "check_resume_query",
    "note_restored_query",
    "report_start_failure",
    "resume",
    "start_driver",
]

_log = logging.getLogger(__name__)


def start_driver(
    spark: SparkSession,
    settings: GICSettings,
    key: str,
    processor: Processor,
    sink: Sink,
    *,
    resolver: StoreResolver,
    on_batch: Callable[[BatchReport], None] | None = None,
    query: QueryFingerprint | None = None,
    event_time: EventTimeSpec | None = None,
    initial: InitialInput | None = None,
) -> Driver:
    """Everything before the first batch (see the module docstring); returns the driver,
    complete, whose :attr:`~gic_runtime.spark.driver.Driver.start_info` says where the
    attempt starts.

    When it fails, the failure is recorded in the job's status record (under the
    claimed epoch, else the one the settings give; without either nothing is
    recorded) and what it opened is closed, then the error propagates."""
    s = settings
    spark_dir = str(Path(s.resolved_local_dir) / s.job_id / "spark-checkpoint")
    num_tasks = s.num_tasks or min(  # Spark's default is 200 partitions
        int(spark.conf.get("spark.sql.shuffle.partitions") or "4"), s.num_buckets
    )
    output = BatchOutput(resolver, s.storage, s.job_id, sink)
    opened = _Opened(s.epoch)
    try:
        # The key that authenticates control requests (GIC_CONTROL_KEY; none in local
        # runs): a malformed one fails the start before anything is claimed.
        control_key = ControlKey.from_env()
        # Before the job is claimed (nothing written yet): refuse checkpoints a
        # different query wrote.
        check_resume_query(resolver, s.storage, s.job_id, query, allow_change=s.allow_query_change)
        owner = f"driver {socket.gethostname()}:{os.getpid()}"
        epoch = claim_epoch(resolver, s.storage, s.job_id, epoch=s.epoch, claimed_by=owner)
        opened.epoch = epoch
        restore = RestoreRequest(s.restore_source, s.restore_mode) if s.restore_source else None
        timeline = CheckpointTimeline(
            resolver,
            s.storage,
            s.job_id,
            epoch=epoch,
            num_buckets=s.num_buckets,
            retain=s.retained_checkpoints,
            restore=restore,
            fence=Fence(resolver, s.storage, s.job_id, epoch),
            live_sweep_interval_s=s.orphan_sweep_interval_s,
        )
        opened.timeline = timeline
        telemetry = opened.telemetry = Telemetry(resolver, s, epoch)
        start = resume(
            resolver,
            timeline,
            output,
            spark_dir=spark_dir,
            query=query,
            takeover=s.output_takeover,
        )
        progress = start_progress(resolver, timeline)
        placement = StickyPlacement(spark, num_tasks)
        lineage = timeline.lineage
        start_info = StartInfo(
            epoch=epoch,
            resumed_after=start.resumed_after,
            own=timeline.start.own,
            restored_from=lineage.source_uri if lineage else None,
            sweep=start.sweep,
            republished=start.republished,
            spark_checkpoint_dir=spark_dir,
        )
        telemetry.started(start_info, timeline)
    except BaseException as exc:
        report_start_failure(
            exc,
            resolver=resolver,
            root=s.storage,
            job_id=s.job_id,
            epoch=opened.epoch,
            telemetry=opened.telemetry,
            timeline=opened.timeline,
        )
        raise
    return Driver(
        spark,
        s,
        key,
        processor,
        resolver=resolver,
        timeline=timeline,
        telemetry=telemetry,
        output=output,
        placement=placement,
        start_info=start_info,
        num_tasks=num_tasks,
        on_batch=on_batch,
        query=query,
        event_time=event_time,
        event_time_progress=progress,
        initial=initial,
        control_key=control_key,
    )


def start_progress(resolver: StoreResolver, timeline: CheckpointTimeline) -> EventTimeProgress:
    """The event-time progress the attempt starts from: its start checkpoint's or
    savepoint's (a canonical savepoint keeps it beside its index); none on fresh state."""
    manifest = timeline.start.manifest
    if manifest is not None:
        return manifest.event_time
    canonical = timeline.start.canonical_uri
    if canonical is not None:
        return read_event_time_record(resolver, canonical)
    return NO_PROGRESS


@dataclass
class _Opened:
    """What a start has opened so far: what a failed start reports through and closes
    (the epoch is the claimed one once claimed, else the one the settings give)."""

    epoch: int | None
    timeline: CheckpointTimeline | None = None
    telemetry: Telemetry | None = None


def check_resume_query(
    resolver: StoreResolver,
    root: str,
    job_id: str,
    query: QueryFingerprint | None,
    *,
    allow_change: bool,
) -> None:
    """Refuse to resume checkpoints of job ``job_id`` a different query wrote
    (:func:`gic_runtime.query.check_resume`); with ``allow_change``, log what differs."""
    if query is None:
        return
    latest = find_latest_checkpoint(resolver, root, job_id)
    if latest is None:
        return
    stored = latest.stored
    changed = check_resume(
        stored.manifest.query,
        query,
        job_id=job_id,
        job_dir=job_dir(root, job_id),
        manifest_uri=stored.uri,
        allow_change=allow_change,
    )
    if changed:
        _log.warning(
            "job %s resumes checkpoints written by a different query (%s is set); differs: %s",
            job_id,
            OVERRIDE_SETTING,
            "; ".join(d.describe() for d in changed),
        )


def note_restored_query(
    job_id: str, query: QueryFingerprint | None, recorded: Mapping[str, Any] | None
) -> None:
    """Log what differs between ``query`` and the query ``recorded`` in a restore
    source's manifest (nothing when either is unknown)."""
    stored = QueryFingerprint.from_json(recorded)
    if query is None or stored is None:
        return
    changed = differences(stored, query)
    if changed:
        _log.warning(
            "job %s restores state written by a different query; differs: %s",
            job_id,
            "; ".join(d.describe() for d in changed),
        )


@dataclass(frozen=True, slots=True)
class Resumed:
    """Where an attempt goes on from: the start manifest (``None``: a canonical
    savepoint or empty state), the batch Spark resumes after, what was republished and
    what the start's sweep removed."""

    manifest: Manifest | None
    resumed_after: int | None
    republished: int
    sweep: SweepResult


def resume(
    resolver: StoreResolver,
    timeline: CheckpointTimeline,
    output: BatchOutput,
    *,
    spark_dir: str,
    query: QueryFingerprint | None,
    takeover: str | None,
) -> Resumed:
    """Take ``timeline``'s start point to the first batch (see the module docstring).
    Raises :class:`~gic_runtime.errors.OutputOwnedError` before anything but Spark's
    local directory is written when the output belongs to another job."""
    start = timeline.start
    manifest = start.manifest
    if not start.own and manifest is not None:
        note_restored_query(timeline.job_id, query, manifest.query)
    engine = manifest.engine if manifest is not None else None
    if start.canonical_uri is not None:
        engine = read_engine_record(resolver, start.canonical_uri)
    resumed = checkpoint_dir.lay_down(spark_dir, engine)
    after = manifest.checkpoint_id if manifest is not None else resumed
    output.claim(
        start_origin(resolver, manifest, start.canonical_uri),
        next_batch=after + 1 if after is not None else 0,
        takeover=takeover,
    )
    republished = 0
    if start.own and manifest is not None:
        try:
            republished = output.publish(manifest.checkpoint_id, dict(manifest.sink))
        except ObjectNotFoundError as exc:
            moved_output(manifest, output.sink.describe(), timeline.job_id, exc)
            raise
    output.clear_staging()
    return Resumed(manifest, resumed, republished, timeline.sweep())


def moved_output(
    manifest: Manifest, described: Mapping[str, Any], job_id: str, missing: ObjectNotFoundError
) -> None:
    """Explain a republish that found its staged files gone because the job resumes from
    its own checkpoint ``manifest`` into another output than the one it recorded (its
    batch was published there and its staging cleared): a
    :class:`~gic_runtime.errors.ConfigurationError` naming both outputs, before this
    output publishes anything. Returns when the output is the recorded one."""
    recorded = {k: manifest.sink.get(k) for k in described}
    if recorded == dict(described) or not any(k in manifest.sink for k in described):
        return
    raise ConfigurationError(
        f"job {job_id} resumes from its own checkpoint {manifest.checkpoint_id}, whose "
        f"output is {manifest.sink.get('path', recorded)!s:.200}; this run writes "
        f"{described.get('path', dict(described))!s:.200}, and the checkpoint's batch can "
        "no longer be published there (its staged files were published to the recorded "
        "output and cleared). A job that resumes from its own checkpoints keeps its output, "
        "so that each batch is published exactly once: run with the recorded output again, "
        "or start the new output from a savepoint of this job"
    ) from missing


def report_start_failure(
    error: BaseException,
    *,
    resolver: StoreResolver,
    root: str,
    job_id: str,
    epoch: int | None,
    telemetry: Telemetry | None,
    timeline: CheckpointTimeline | None,
) -> None:
    """Report ``error`` (through ``telemetry`` once the start has one, else directly
    under ``epoch`` when there is one; best effort: nothing here may replace it) and
    close ``timeline``."""
    try:
        if telemetry is not None:
            telemetry.stopped(error)
        elif epoch is not None:
            record_failure(resolver, root, job_id, epoch, error)
    except Exception as exc:
        _log.warning("job %s: could not record why it failed to start: %r", job_id, exc)
    finally:
        if timeline is not None:
            try:
                timeline.close()
            except Exception as exc:
                _log.warning("job %s: closing the timeline failed: %r", job_id, exc)
