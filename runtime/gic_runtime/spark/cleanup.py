"""What the driver deletes besides checkpoints: orphans while the job runs, and the
attempt's unreferenced objects after a clean stop.

* :func:`live_sweep` -- between batches, every ``orphan_sweep_interval_s``, what failed
  task attempts left (:class:`~gic_runtime.checkpoint.live_sweep.LiveSweeper`,
  docs/architecture.md §13.9);
* :func:`run_drain` and :func:`clean_up_after_stop` -- after a clean stop, a Spark
  stage placed like the state tasks waits until the background snapshots they started
  have finished (:func:`~gic_runtime.spark.stage.make_drain`), then the attempt's own
  segments and snapshots no retained checkpoint references are deleted
  (:meth:`~gic_runtime.driver.timeline.CheckpointTimeline.sweep_after_stop`,
  §13.10).

Invariants: both run on the driver under its batch lock, never while a batch of the
attempt runs (the live sweep after manifest N, before barrier N+1; the stop sweep
after the query stopped); they delete only what no retained checkpoint references and
the job owns (the sweepers' rules). A failure of either is logged and never raised:
orphans cost storage, never correctness, and what stays is the next interval's, the
next start's or ``gic gc``'s to delete.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pyspark.sql import SparkSession

from gic_runtime.checkpoint.live_sweep import LiveSweeper
from gic_runtime.checkpoint.sweep import SweepResult
from gic_runtime.coordination.barrier import Barrier
from gic_runtime.driver.timeline import CheckpointTimeline
from gic_runtime.errors import GICError
from gic_runtime.spark.locality import StickyPlacement
from gic_runtime.spark.stage import DRAIN_SCHEMA, make_drain

__all__ = ["clean_up_after_stop", "live_sweep", "run_drain"]

_log = logging.getLogger(__name__)


def live_sweep(
    sweeper: LiveSweeper | None, timeline: CheckpointTimeline, job_id: str
) -> SweepResult | None:
    """The live sweep when it is due (``None`` otherwise, or when it failed: logged,
    retried at the next interval)."""
    if sweeper is None or not sweeper.due():
        return None
    try:
        result = sweeper.sweep(timeline.retained(), timeline.policy)
    except GICError as exc:
        _log.warning("live orphan sweep of job %s failed: %s", job_id, exc)
        return None
    if result.deleted:
        _log.info(
            "live orphan sweep of job %s deleted %d objects (%d bytes)",
            job_id,
            result.deleted,
            result.deleted_bytes,
        )
    return result


def run_drain(
    spark: SparkSession, barrier: Barrier, placement: StickyPlacement | None, timeout_s: float
) -> int:
    """Run the drain stage (partition ``i`` placed like state task ``i``); returns the
    buckets still materializing at its end."""
    n = barrier.num_tasks
    df = spark.range(0, n, 1, n)  # partition i holds one row, as state task i
    if placement is not None:
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
