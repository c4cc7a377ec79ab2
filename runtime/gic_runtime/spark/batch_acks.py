"""One batch's task acks on the driver: collected from the stateful stage, merged into
the checkpoint's bucket states, summed into the batch's report.

:func:`collect_acks` runs the stateful stage (rows routed to their tasks, each task
pinned to the executor holding its local copy when there is a placement;
``mapInArrow`` then ``collect``, so the stage runs once and nothing is recomputed) and
returns one ack per task with where the tasks ran; :func:`merge_acks` checks the acks
against the batch's barrier and merges their bucket states into what manifest N
records;
:func:`batch_report` sums their statistics into the
:class:`~gic_runtime.spark.reports.BatchReport` of the committed batch (steps 3 to 5
of the per-batch protocol, :mod:`gic_runtime.spark.driver`).

Invariants: merged states exist only when there is exactly one ack per state task,
every ack is for the barrier's job, epoch and batch, and every task acked exactly the
buckets of its range; those ranges partition ``[0, num_buckets)``, so the merged
states hold every bucket exactly once. Anything else raises
:class:`~gic_runtime.errors.StateError` and the batch is not checkpointed. The report
reads nothing but its arguments and the clock (``batch_ms`` ends at the call).
"""

from __future__ import annotations

import time

from pyspark.sql import DataFrame

from gic_runtime.checkpoint.manifest import StoredManifest
from gic_runtime.checkpoint.sweep import SweepResult
from gic_runtime.coordination.barrier import Barrier, TaskAck
from gic_runtime.coordination.ranges import split_buckets
from gic_runtime.errors import StateError
from gic_runtime.event_time import EventTimeSpec
from gic_runtime.handles import BucketState
from gic_runtime.processing import Processor
from gic_runtime.processing.initial_state import InitialState
from gic_runtime.spark.locality import PlacementReport, StickyPlacement
from gic_runtime.spark.placement import route
from gic_runtime.spark.reports import BatchReport
from gic_runtime.spark.stage import ACK_SCHEMA, executor_error, make_stage

__all__ = ["batch_report", "collect_acks", "merge_acks"]


def collect_acks(
    df: DataFrame,
    barrier: Barrier,
    *,
    key: str,
    part_keys: list[int],
    processor: Processor,
    placement: StickyPlacement | None,
    event_time: EventTimeSpec | None = None,
    initial: InitialState | None = None,
) -> tuple[list[TaskAck], PlacementReport]:
    """Run the stateful stage of ``barrier``'s batch over ``df`` (keyed by column
    ``key``); returns the tasks' acks and where the tasks ran. An executor's failure
    is raised as the error it names (:func:`~gic_runtime.spark.stage.executor_error`)."""
    routed = route(df, key, barrier.num_buckets, part_keys)
    report = PlacementReport(pinned=False, executors=0)
    if placement is not None:
        routed, report = placement.pin(routed)
    try:
        stage = make_stage(barrier, processor, event_time, initial)
        rows = routed.mapInArrow(stage, ACK_SCHEMA).collect()
    except Exception as exc:
        raise executor_error(exc) from exc
    acks = [TaskAck.from_bytes(bytes(r["ack"])) for r in rows]
    if placement is not None:
        report = placement.observe(report, acks)
    return acks, report


def max_event_time(acks: list[TaskAck]) -> int | None:
    """The largest event time any task of the batch saw (``None``: none saw one)."""
    seen = [a.stats.max_event_time_us for a in acks if a.stats.max_event_time_us is not None]
    return max(seen, default=None)


def merge_acks(acks: list[TaskAck], barrier: Barrier) -> dict[int, BucketState]:
    """The bucket states of the batch, from one ack per state task of ``barrier``."""
    by_task: dict[int, TaskAck] = {}
    for ack in acks:
        if (ack.job_id, ack.epoch, ack.checkpoint_id) != (
            barrier.job_id,
            barrier.epoch,
            barrier.checkpoint_id,
        ):
            raise StateError(
                f"ack of task {ack.task_index} is for job {ack.job_id} epoch {ack.epoch} "
                f"batch {ack.checkpoint_id}, not this barrier's"
            )
        if ack.task_index in by_task:
            raise StateError(f"two acks for state task {ack.task_index}")
        by_task[ack.task_index] = ack
    missing = sorted(set(range(barrier.num_tasks)) - set(by_task))
    if missing:
        raise StateError(f"no ack from state tasks {missing}; the batch is not checkpointed")
    states: dict[int, BucketState] = {}
    for index, ack in by_task.items():
        owned = barrier.bucket_range(index)
        if set(ack.states) != set(owned):
            raise StateError(
                f"task {index} acked buckets {sorted(ack.states)[:5]}..., not its range "
                f"[{owned.start}, {owned.stop})"
            )
        states.update(ack.states)
    return states


def batch_report(
    acks: list[TaskAck],
    *,
    stored: StoredManifest,
    started: float,
    manifest_ms: float,
    published: int,
    placement: PlacementReport,
    num_buckets: int,
    num_tasks: int,
    swept: SweepResult | None = None,
) -> BatchReport:
    """The report of the batch ``stored`` committed: ``started`` is when the batch began
    (``time.perf_counter``), ``manifest_ms`` the manifest write, ``published`` the rows
    the sink published, ``placement`` where the tasks ran, ``swept`` the live sweep's
    result after the batch."""
    stats = [a.stats for a in acks]
    changelog = sum(s.changelog_bytes for s in stats)
    snapshots = sum(s.snapshot_bytes for s in stats)
    slowest_flush = max((s.checkpoint_s for s in stats), default=0.0)
    moved = (split_buckets(num_buckets, num_tasks, task) for task in placement.moved)
    return BatchReport(
        batch_id=stored.checkpoint_id,
        rows_in=sum(s.rows_in for s in stats),
        rows_out=sum(s.rows_out for s in stats),
        tasks=len(acks),
        batch_ms=(time.perf_counter() - started) * 1000,
        commit_ms=slowest_flush * 1000 + manifest_ms,
        bytes_uploaded=changelog + snapshots,
        changelog_bytes=changelog,
        snapshot_bytes=snapshots,
        local_hits=sum(s.local_hits for s in stats),
        restored=sum(s.restored for s in stats),
        empty=sum(s.empty for s in stats),
        materializations_adopted=sum(s.materializations_adopted for s in stats),
        materializations_started=sum(s.materializations_started for s in stats),
        self_contained=any(s.snapshot_bytes for s in stats),
        manifest_uri=stored.uri,
        manifest_bytes=stored.size or 0,
        published_rows=published,
        orphans_deleted=swept.deleted if swept is not None else 0,
        orphan_bytes_deleted=swept.deleted_bytes if swept is not None else 0,
        executors=placement.executors,
        pinned=placement.pinned,
        moved_ranges=tuple((r.start, r.stop) for r in moved),
        watermark_us=stored.manifest.event_time.watermark_us,
        max_event_time_us=stored.manifest.event_time.max_event_time_us,
        late_rows=sum(s.late_rows for s in stats),
        timers_fired=sum(s.timers_fired for s in stats),
        expired=sum(s.expired for s in stats),
        restore_pending=sum(s.restore_pending for s in stats),
        selected=sum(s.selected for s in stats),
        restore_bytes=sum(s.restore_bytes for s in stats),
    )
