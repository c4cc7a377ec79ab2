"""What the driver deletes after a clean stop: the attempt's unreferenced objects.

:func:`run_drain` and :func:`clean_up_after_stop`: a Spark stage placed like the state
tasks waits until the background snapshots they started have finished
(:func:`~gic_runtime.spark.stage.make_drain`), then the attempt's own segments and
snapshots no retained checkpoint references are deleted
(:meth:`~gic_runtime.driver.timeline.CheckpointTimeline.sweep_after_stop`,
docs/architecture.md §13.10). The live sweep while the job runs is the timeline's
(:meth:`~gic_runtime.driver.timeline.CheckpointTimeline.live_sweep`, §13.9).

Invariants: it runs on the driver under its batch lock, after the query stopped (no
batch of the attempt runs); it deletes only what no retained checkpoint references and
the attempt uploaded. A failure is logged and never raised: orphans cost storage, never
correctness, and what stays is the next start's or ``gic gc``'s to delete.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pyspark.sql import SparkSession

from gic_runtime.checkpoint.sweep import SweepResult
from gic_runtime.coordination.barrier import Barrier
from gic_runtime.driver.timeline import CheckpointTimeline
from gic_runtime.spark.locality import StickyPlacement
from gic_runtime.spark.stage import DRAIN_SCHEMA, make_drain

__all__ = ["clean_up_after_stop", "run_drain"]

_log = logging.getLogger(__name__)


def run_drain(
    spark: SparkSession, barrier: Barrier, placement: StickyPlacement, timeout_s: float
) -> int:
    """Run the drain stage (partition ``i`` placed like state task ``i``); returns the
    buckets still materializing at its end."""
    n = barrier.num_tasks
    df = spark.range(0, n, 1, n)  # partition i holds one row, as state task i
    df, _ = placement.pin(df)
    drain = make_drain(barrier, timeout_s)
    rows = df.mapInArrow(drain, DRAIN_SCHEMA).collect()
    return sum(int(r["in_flight"]) for r in rows)


def clean_up_after_stop(
    timeline: CheckpointTimeline,
    *,
    job_id: str,
    epoch: int,
    drain: Callable[[], int],
    timeout_s: float,
) -> SweepResult | None:
    """Wait for the attempt's background snapshots (``drain``: at most ``timeout_s``),
    then delete the attempt's objects no retained checkpoint references; ``None`` when
    that failed (logged)."""
    try:
        in_flight = drain()
        if in_flight:
            _log.warning(
                "job %s: %d background snapshot(s) still uploading after %.0f s; "
                "the next start's sweep removes them",
                job_id,
                in_flight,
                timeout_s,
            )
        result = timeline.sweep_after_stop()
    except Exception as exc:
        _log.warning("clean-up after the stop of job %s failed: %s", job_id, exc)
        return None
    if result.deleted:
        _log.info(
            "job %s stopped: deleted %d unreferenced object(s) of epoch %d (%d bytes)",
            job_id,
            result.deleted,
            epoch,
            result.deleted_bytes,
        )
    return result
