"""Restore the executors' local copies beside the query's start (docs/architecture.md
§6.2).

A job that starts from a checkpoint on executors without its state (a restart, a
recovery, an upgrade) used to rebuild each task's buckets inside the first batch's
stateful stage: after the driver's start, Spark's planning of the query and the
batch's first stage, and after Python workers had started. :class:`RestoreAhead` runs
that restore as a Spark job of its own as soon as the driver knows the lineage, beside
all of that: partition ``i``, placed like state task ``i``
(:class:`~gic_runtime.spark.locality.StickyPlacement`), rebuilds task ``i``'s buckets on
its executor (:func:`~gic_runtime.spark.stage.make_restore_ahead`).

Invariants:

* it writes nothing but executors' local copies: no upload, no manifest, no output;
  the first batch's tasks reuse a bucket only when its lineage metadata equals the
  expected ``(seq, token)``, as for any local copy, so a restore that failed, was
  cancelled or ran on another executor than the batch's task costs time, never
  correctness;
* a bucket is never restored by two processes at once: both take the range's bucket
  locks, and whoever comes second finds the work done;
* the job is submitted before :meth:`RestoreAhead.start` returns, so with Spark's FIFO
  scheduler its tasks come before any task of the query's first batch;
* a failure is logged, never raised: the batch then restores what it needs itself
  and reports any error that matters;
* while it runs, the driver logs its progress every :data:`PROGRESS_S` seconds: the
  tasks that restored their range, counted by a Spark accumulator each task adds to
  as it ends, of the job's tasks; so a restore of gigabytes is not a silent minute.

Thread-safety: :meth:`RestoreAhead.start` runs on the driver's thread (it pins the
stage through the driver's placement, which only that thread uses); the job runs on a
thread of its own; :meth:`result`, :meth:`wait` and :meth:`cancel` may be called from
any thread.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Final

from pyspark import Accumulator
from pyspark.sql import DataFrame, SparkSession

from gic_runtime.coordination.barrier import Barrier
from gic_runtime.spark.locality import StickyPlacement
from gic_runtime.spark.stage import RESTORE_AHEAD_SCHEMA, make_restore_ahead

__all__ = ["RestoreAhead", "RestoreAheadResult"]

_log = logging.getLogger(__name__)
_SUBMIT_WAIT_S: Final = 10.0
"""How long :meth:`RestoreAhead.start` waits for Spark to accept the job."""
_SUBMIT_POLL_S: Final = 0.02
PROGRESS_S = 10.0
"""Seconds between the driver's progress lines while the restore runs (read when a
restore starts)."""


@dataclass(frozen=True)
class RestoreAheadResult:
    """What the restore beside the start did: tasks that ran, their buckets reused,
    restored and empty, and the seconds from submitting the job to its end; ``error``:
    why it did not finish (``None``: it did)."""

    tasks: int = 0
    local_hits: int = 0
    restored: int = 0
    empty: int = 0
    seconds: float = 0.0
    error: str | None = None


class RestoreAhead:
    """One restore beside a start (see the module docstring)."""

    def __init__(self, spark: SparkSession, barrier: Barrier, job_id: str) -> None:
        self._spark = spark
        self._barrier = barrier
        self._job_id = job_id
        self._group = f"gic-restore-ahead-{job_id}-{barrier.epoch}"
        self._done = threading.Event()
        self._result: RestoreAheadResult | None = None
        self._thread: threading.Thread | None = None
        self._tasks_done: Accumulator[int] | None = None

    def start(self, placement: StickyPlacement) -> None:
        """Pin the stage like the state tasks, submit it on a thread of its own, and
        return once Spark has the job (or after :data:`_SUBMIT_WAIT_S`)."""
        n = self._barrier.num_tasks
        df = self._spark.range(0, n, 1, n)  # partition i holds one row, as state task i
        df, _ = placement.pin(df)
        self._tasks_done = self._spark.sparkContext.accumulator(0)
        stage = df.mapInArrow(
            make_restore_ahead(self._barrier, self._tasks_done), RESTORE_AHEAD_SCHEMA
        )
        self._thread = threading.Thread(
            target=self._run, args=(stage,), name=f"gic-restore-ahead-{self._job_id}", daemon=True
        )
        self._thread.start()
        tracker = self._spark.sparkContext.statusTracker()
        deadline = time.monotonic() + _SUBMIT_WAIT_S
        while not self._done.is_set() and time.monotonic() < deadline:
            if tracker.getJobIdsForGroup(self._group):
                return
            time.sleep(_SUBMIT_POLL_S)

    def _run(self, stage: DataFrame) -> None:
        began = time.perf_counter()
        watcher = threading.Thread(
            target=self._report_progress,
            args=(began, PROGRESS_S),
            name=f"gic-restore-ahead-progress-{self._job_id}",
            daemon=True,
        )
        watcher.start()
        try:
            sc = self._spark.sparkContext
            sc.setJobGroup(
                self._group,
                f"GIC: restore the local state of job {self._job_id} ahead of its first batch",
            )
            rows = stage.collect()
        except Exception as exc:  # the batch restores what it needs itself
            self._result = RestoreAheadResult(
                seconds=time.perf_counter() - began, error=f"{type(exc).__name__}: {exc}"
            )
            _log.info(
                "job %s: the restore ahead of the first batch did not finish (%s); "
                "its tasks restore what they need themselves",
                self._job_id,
                str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
            )
        else:
            result = RestoreAheadResult(
                tasks=len(rows),
                local_hits=sum(int(r["local_hits"]) for r in rows),
                restored=sum(int(r["restored"]) for r in rows),
                empty=sum(int(r["empty"]) for r in rows),
                seconds=time.perf_counter() - began,
            )
            self._result = result
            _log.info(
                "job %s: restored %d bucket(s) ahead of the first batch in %.1f s "
                "(%d already local, %d empty)",
                self._job_id,
                result.restored,
                result.seconds,
                result.local_hits,
                result.empty,
            )
        finally:
            self._done.set()

    def _report_progress(self, began: float, every_s: float) -> None:
        """Log the tasks done every ``every_s`` seconds until the job ends."""
        total = self._barrier.num_tasks
        while not self._done.wait(every_s):
            done = self._tasks_done.value if self._tasks_done is not None else 0
            _log.info(
                "job %s: restoring the local state ahead of the first batch: "
                "%d of %d task(s) done after %.0f s",
                self._job_id,
                min(done, total),
                total,
                time.perf_counter() - began,
            )

    def result(self) -> RestoreAheadResult | None:
        """The outcome once the job ended, else ``None``."""
        return self._result if self._done.is_set() else None

    def wait(self, timeout: float | None = None) -> RestoreAheadResult | None:
        """Wait up to ``timeout`` seconds for the job to end; its outcome, or ``None``."""
        self._done.wait(timeout)
        return self.result()

    def cancel(self) -> None:
        """Cancel the job if it still runs (the driver stops): a task cancelled halfway
        leaves buckets without lineage metadata, which the next task rebuilds."""
        if self._thread is None or self._done.is_set():
            return
        try:
            self._spark.sparkContext.cancelJobGroup(self._group)
        except Exception as exc:  # a stopped context has nothing left to cancel
            _log.debug("could not cancel the restore ahead of job %s: %s", self._job_id, exc)
