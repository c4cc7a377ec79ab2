"""The driver's reporting: Prometheus metrics and the status record in storage.

After every batch (and at start, savepoints and stop) the driver updates its
:class:`~gic_runtime.metrics.DriverMetrics` and overwrites the job's status record
(:mod:`gic_runtime.status`), which the operator and ``gic`` read without talking to
the driver. A failing status write is logged, never fails a batch: the checkpoint is
what matters, the status is a view of it.

A launch that fails -- while it runs, or at start-up before it could report anything
(a query mismatch, invalid settings, a fencing epoch it cannot claim, storage it cannot
reach) -- records state ``failed`` with a structured ``failure`` (reason and message,
:class:`~gic_runtime.status.FailureStatus`) under its epoch before the error ends the
process: :meth:`Telemetry.stopped` once the launch reports, :func:`record_failure`
before. Neither replaces the record of a newer epoch: a superseded driver's failure is
not the job's news.

Thread-safety: called under the driver's lock (or after the query stopped), except
:meth:`Telemetry.heartbeat_due`, which only reads.
"""

from __future__ import annotations

import logging
import time

from gic_runtime.config import GICSettings
from gic_runtime.control.model import ControlRequest, Outcome, SavepointRequest
from gic_runtime.driver.timeline import CheckpointTimeline
from gic_runtime.errors import GICError
from gic_runtime.metrics import DriverMetrics, MetricsServer
from gic_runtime.spark.reports import BatchReport, StartInfo
from gic_runtime.status import (
    CheckpointStatus,
    DriverInfo,
    FailureStatus,
    JobState,
    JobStatus,
    MaterializationStatus,
    RestoreStatus,
    SavepointStatus,
    SweepStatus,
    error_text,
    read_status,
    write_status,
)
from gic_runtime.storage.uri import StoreResolver

_log = logging.getLogger(__name__)

HEARTBEAT_S = 15.0
"""An idle driver rewrites its status record this often, so readers can tell a live
driver from one that died without a word (kill -9): a record older than a few
heartbeats is stale."""


class Telemetry:
    """Metrics and status of one driver attempt."""

    def __init__(self, resolver: StoreResolver, settings: GICSettings, epoch: int) -> None:
        self.resolver = resolver
        self.root = settings.storage
        self.job_id = settings.job_id
        self.metrics = DriverMetrics(settings.job_id)
        self.metrics.set_epoch(epoch)
        self.server: MetricsServer | None = None
        if settings.metrics_port is not None:
            self.server = self.metrics.serve(settings.metrics_port, settings.metrics_host)
        now = time.time()
        self.status = JobStatus(
            job_id=settings.job_id,
            epoch=epoch,
            state=JobState.STARTING,
            updated_at=now,
            started_at=now,
            driver=DriverInfo.current(),
            materialization=MaterializationStatus(),
        )
        self._write()

    def _write(self, **changes: object) -> None:
        self.status = self.status.replace(updated_at=time.time(), **changes)
        try:
            write_status(self.resolver, self.root, self.job_id, self.status)
        except GICError as exc:
            _log.warning("could not write the status record of job %s: %s", self.job_id, exc)

    def _restore(self, timeline: CheckpointTimeline) -> RestoreStatus | None:
        lineage = timeline.lineage
        if lineage is None:
            return None
        self.metrics.set_restore_source_released(lineage.released)
        return RestoreStatus(
            source=lineage.source_uri,
            mode=lineage.mode,
            released=lineage.released,
            checkpoint_id=lineage.source_checkpoint_id
            if lineage.source_checkpoint_id >= 0
            else None,
        )

    def started(self, start: StartInfo, timeline: CheckpointTimeline) -> None:
        sweep = None
        if start.sweep is not None:
            self.metrics.observe_sweep(start.sweep.deleted, start.sweep.deleted_bytes)
            sweep = SweepStatus(start.sweep.deleted, start.sweep.deleted_bytes, time.time())
        latest = timeline.latest()
        last = None
        if latest is not None:  # the status of a restarted driver starts where its job is
            last = CheckpointStatus(
                id=latest.checkpoint_id,
                created_at=latest.manifest.created_at,
                duration_ms=0.0,
            )
        self._write(
            state=JobState.RUNNING,
            restored_from=self._restore(timeline),
            last_sweep=sweep,
            last_checkpoint=last,
        )

    def batch(self, report: BatchReport, timeline: CheckpointTimeline) -> None:
        m = self.metrics
        m.observe_checkpoint(
            report.batch_id,
            report.commit_ms / 1000,
            bytes_uploaded=report.bytes_uploaded,
            changelog_bytes=report.changelog_bytes,
            snapshot_bytes=report.snapshot_bytes,
            local_hit_ratio=report.local_hit_ratio,
            manifest_bytes=report.manifest_bytes or None,
        )
        m.observe_placement(executors=report.executors, moved=len(report.moved_ranges))
        m.observe_restore(pending=report.restore_pending, restored_bytes=report.restore_bytes)
        m.observe_event_time(
            watermark_us=report.watermark_us,
            late_rows=report.late_rows,
            timers_fired=report.timers_fired,
            expired=report.expired,
        )
        sweep = self.status.last_sweep
        if report.orphans_deleted:
            m.observe_sweep(report.orphans_deleted, report.orphan_bytes_deleted)
            sweep = SweepStatus(report.orphans_deleted, report.orphan_bytes_deleted, time.time())
        m.observe_batch()
        m.observe_materializations(
            started=report.materializations_started, adopted=report.materializations_adopted
        )
        old = self.status.materialization or MaterializationStatus()
        self._write(
            batches=self.status.batches + 1,
            last_checkpoint=CheckpointStatus(
                id=report.batch_id,
                created_at=time.time(),
                duration_ms=report.commit_ms,
                bytes_uploaded=report.bytes_uploaded,
                changelog_bytes=report.changelog_bytes,
                snapshot_bytes=report.snapshot_bytes,
                local_hit_ratio=report.local_hit_ratio,
                rows=report.rows_in,
                executors=report.executors,
                moved_ranges=report.moved_ranges,
                watermark_us=report.watermark_us,
                late_rows=report.late_rows,
                timers_fired=report.timers_fired,
                expired=report.expired,
                restore_pending=report.restore_pending,
                restore_bytes=report.restore_bytes,
            ),
            materialization=MaterializationStatus(
                started=old.started + report.materializations_started,
                adopted=old.adopted + report.materializations_adopted,
                failed=old.failed,
                bytes_uploaded=old.bytes_uploaded,
            ),
            restored_from=self._restore(timeline),
            last_sweep=sweep,
        )

    def heartbeat_due(self) -> bool:
        """Whether the status record is older than :data:`HEARTBEAT_S` (a hint that may
        be read without the driver's lock: a batch only makes it younger)."""
        return time.time() - self.status.updated_at >= HEARTBEAT_S

    def heartbeat(self) -> None:
        """Refresh the status record when it is older than :data:`HEARTBEAT_S`."""
        if self.heartbeat_due():
            self._write()

    def savepoint(self, request: ControlRequest, outcome: Outcome) -> None:
        if not isinstance(request, SavepointRequest):
            return
        self.metrics.observe_savepoint(outcome.state.value)
        self._write(last_savepoint=SavepointStatus.from_outcome(outcome))

    def refused(self) -> None:
        """Count a refused control request (``gic_control_requests_refused_total``)."""
        self.metrics.observe_refused_request()

    def stopping(self) -> None:
        self._write(state=JobState.STOPPING)

    def stopped(self, error: BaseException | None, *, reason: str | None = None) -> None:
        """The final report: ``stopped`` (with ``reason``, when given, as
        ``extra.stop_reason``), or ``failed`` with the error and its failure (unless a
        newer epoch's record is there already)."""
        if error is None:
            extra = {**self.status.extra, "stop_reason": reason} if reason else self.status.extra
            self._write(state=JobState.STOPPED, extra=extra)
        elif not _superseded(self.resolver, self.root, self.job_id, self.status.epoch):
            self._write(
                state=JobState.FAILED, error=error_line(error), failure=FailureStatus.of(error)
            )
        if self.server is not None:
            self.server.close()
            self.server = None


ERROR_LINE_MAX = 500
"""Longest text of the status record's ``error`` (the first line of the error)."""


def error_line(error: BaseException) -> str:
    """The status record's ``error``: the error's first line (its class name when it has
    no text), at most :data:`ERROR_LINE_MAX` characters."""
    lines = error_text(error).splitlines()
    return (lines[0] if lines else type(error).__name__)[:ERROR_LINE_MAX]


def _current(resolver: StoreResolver, root: str, job_id: str) -> JobStatus | None:
    """The job's status record; ``None`` when there is none or it is unreadable (then it
    is replaced)."""
    try:
        return read_status(resolver, root, job_id)
    except GICError:
        return None


def _newer(current: JobStatus | None, job_id: str, epoch: int) -> bool:
    """Whether ``current`` reports a newer epoch than ``epoch`` (logged)."""
    if current is None or current.epoch <= epoch:
        return False
    _log.warning(
        "job %s: not recording the failure of epoch %d; the status record reports epoch %d",
        job_id,
        epoch,
        current.epoch,
    )
    return True


def _superseded(resolver: StoreResolver, root: str, job_id: str, epoch: int) -> bool:
    """Whether the job's status record reports a newer epoch than ``epoch``."""
    return _newer(_current(resolver, root, job_id), job_id, epoch)


def record_failure(
    resolver: StoreResolver, root: str, job_id: str, epoch: int, error: BaseException
) -> bool:
    """Record that the launch of ``job_id`` with fencing ``epoch`` failed with ``error``
    before it wrote a status record of its own (the epoch it was given, or claimed).

    Best effort, like every status write: a failing read or write is logged. A record of
    a newer epoch is left alone. The job's latest checkpoint is carried over from the
    record replaced. True when the record was written.
    """
    current = _current(resolver, root, job_id)
    if _newer(current, job_id, epoch):
        return False
    now = time.time()
    status = JobStatus(
        job_id=job_id,
        epoch=epoch,
        state=JobState.FAILED,
        updated_at=now,
        started_at=now,
        last_checkpoint=current.last_checkpoint if current is not None else None,
        error=error_line(error),
        driver=DriverInfo.current(),
        failure=FailureStatus.of(error),
    )
    try:
        write_status(resolver, root, job_id, status)
    except GICError as exc:
        _log.warning("could not write the status record of job %s: %s", job_id, exc)
        return False
    return True
