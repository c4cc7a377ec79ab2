"""The driver's start-up (:meth:`gic_runtime.spark.driver.Driver.prepare`): the check
of the query before anything is written, the way from the start point to the first
batch, and the report of a start that failed.

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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gic_runtime.checkpoint.catalog import find_latest_checkpoint
from gic_runtime.checkpoint.manifest import Manifest
from gic_runtime.checkpoint.sweep import SweepResult
from gic_runtime.driver.savepoint_requests import read_engine_record
from gic_runtime.driver.timeline import CheckpointTimeline
from gic_runtime.layout import job_dir
from gic_runtime.query import OVERRIDE_SETTING, QueryFingerprint, check_resume, differences
from gic_runtime.spark import checkpoint_dir
from gic_runtime.spark.batch_output import BatchOutput, start_origin
from gic_runtime.spark.telemetry import Telemetry, record_failure
from gic_runtime.storage.uri import StoreResolver

__all__ = [
    "Resumed",
    "check_resume_query",
    "note_restored_query",
    "report_start_failure",
    "resume",
]

_log = logging.getLogger(__name__)


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
        republished = output.publish(manifest.checkpoint_id, dict(manifest.sink))
    output.clear_staging()
    return Resumed(manifest, resumed, republished, timeline.sweep())


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
