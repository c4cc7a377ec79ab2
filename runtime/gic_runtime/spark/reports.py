"""What the driver reports: one :class:`BatchReport` per committed batch and the
:class:`StartInfo` of an attempt.

Plain values, built by :class:`~gic_runtime.spark.driver.Driver`, consumed by its
telemetry (:mod:`~gic_runtime.spark.telemetry`), the ``on_batch`` callback and
:class:`~gic_runtime.spark.job.RunSummary`. Both are importable from
:mod:`gic_runtime.spark`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gic_runtime.checkpoint.sweep import SweepResult

__all__ = ["BatchReport", "StartInfo"]


@dataclass(frozen=True, slots=True)
class BatchReport:
    """What one committed batch did (also the source of metrics and status)."""

    batch_id: int
    rows_in: int
    rows_out: int
    tasks: int
    batch_ms: float
    commit_ms: float
    """From the slowest task's end of processing to the manifest being durable: the
    task's changelog flush (``checkpoint_s``) plus the manifest write."""
    bytes_uploaded: int
    changelog_bytes: int
    snapshot_bytes: int
    local_hits: int
    restored: int
    empty: int
    materializations_adopted: int
    materializations_started: int
    """Background snapshots the tasks started after this batch (they finish later)."""
    self_contained: bool
    manifest_uri: str
    published_rows: int
    executors: int = 0
    """Live executors before the batch (0: local mode, one executor)."""
    pinned: bool = False
    """Whether the stateful stage carried preferred locations (sticky placement)."""
    orphans_deleted: int = 0
    """Objects failed task attempts left, deleted by the live sweep after this batch."""
    orphan_bytes_deleted: int = 0
    moved_ranges: tuple[tuple[int, int], ...] = ()
    """Bucket ranges ``[start, stop)`` whose task ran on another executor than in the
    batch before (executor lost, rescale, executors joined, or the scheduler gave up
    waiting for the preferred one)."""
    watermark_us: int | None = None
    """The event-time watermark after this batch, as its checkpoint records it (the next
    batch runs with it), in microseconds since the epoch; ``None`` without event time."""
    max_event_time_us: int | None = None
    """The largest event time seen up to and including this batch."""
    late_rows: int = 0
    """Input rows of this batch older than the watermark it ran with (dropped unless the
    stream keeps them)."""
    timers_fired: int = 0
    """Timers that fired in this batch."""
    expired: int = 0
    """State entries whose time to live passed, removed in this batch."""
    restore_pending: int = 0
    """Buckets still being restored in the background when the tasks acked (restored
    buckets the batch did not touch; the restore goes on after the batch)."""
    restore_bytes: int = 0
    """Stored bytes of buckets the background restore completed during this batch."""
    selected: int = 0
    """Buckets the batch ran on from the state keys it named, read from storage without
    restoring them (also in ``restored``: restored in the background after the batch)."""
    manifest_bytes: int = 0
    """Bytes of the manifest this batch wrote (not in ``bytes_uploaded``): the job's
    metadata per checkpoint, which the growth limits keep bounded."""

    @property
    def local_hit_ratio(self) -> float:
        """Share of non-empty buckets served from the executor-local copy."""
        used = self.local_hits + self.restored
        return self.local_hits / used if used else 1.0


@dataclass
class StartInfo:
    """Where the attempt started and what recovery did before the first batch."""

    epoch: int
    resumed_after: int | None
    own: bool
    restored_from: str | None
    sweep: SweepResult | None
    republished: int
    spark_checkpoint_dir: str
    extra: dict[str, Any] = field(default_factory=dict)
