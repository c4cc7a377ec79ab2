"""The background side of executor-local materialization: a pool of snapshot jobs.

:mod:`~gic_runtime.materialization.background` decides what to materialize and
takes each bucket's marker and view on the task thread; :func:`submit_job` runs a *job*
(one or more buckets, snapshotted one after the other) on a :class:`MaterializationPool`.
Each bucket of a job is uploaded, recorded
(:mod:`~gic_runtime.materialization.snapshot_record`), counted and released (view
closed, marker removed) as soon as it is done; the buckets a job never got to (pool shut
down, unexpected error) are released by the job's done-callback.

An executor process uses one pool (:func:`process_pool`), shared by every task it runs,
so ``max_in_flight`` bounds the process; an in-process
:class:`~gic_runtime.executor.state_task.StateTask` owns one, so closing it touches only
its own jobs. A pool may be given the executor that runs its jobs (a test seam: a
manual executor decides when jobs run); otherwise it starts a thread pool on first use.
Times (retry deadlines, record times) come from the scope's
:class:`~gic_runtime.clock.Clock`.

Invariants: every bucket of a submitted job is released exactly once and counted once as
completed, failed or cancelled; ``in_flight`` counts submitted jobs not yet finished; a
bucket's count of failures in a row is reset by its next success.

Thread-safety: every function and method may be called from any thread; a pool's state
is guarded by its condition variable. A process created by ``fork`` starts with an empty
process pool (inherited background threads do not exist in the child).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from gic_runtime.clock import Clock, SystemClock
from gic_runtime.handles import SnapshotHandle
from gic_runtime.materialization.markers import HeldMarker
from gic_runtime.materialization.scheduler import MaterializationSettings
from gic_runtime.materialization.snapshot_record import MaterializationRecord, write_record
from gic_runtime.materialization.snapshot_upload import upload_view
from gic_runtime.state.backend import MaterializationView
from gic_runtime.storage.uri import StoreResolver

_log = logging.getLogger(__name__)

_POOL_THREADS: Final = 8
"""Upper bound of a pool's threads; ``max_in_flight`` and the growth lanes limit what
actually runs."""

GrowthLane = tuple[str, int, int]
"""A task range's growth lane: (materialization directory, first bucket, end bucket)."""


@dataclass(frozen=True, slots=True)
class LocalMaterializationStats:
    """Counters of a pool's background materializations since it started (bucket
    materializations, except ``in_flight``)."""

    started: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    """Buckets of jobs dropped before they snapshotted them (shutdown)."""
    bytes_uploaded: int = 0
    in_flight: int = 0
    """Jobs running or queued (what ``max_in_flight`` bounds)."""


class MaterializationPool:
    """Background jobs and their schedule bookkeeping, guarded by ``cond``:
    ``in_flight`` counts jobs (growth jobs included); the counters count buckets;
    ``retry_at``, ``failures_in_a_row`` and ``anchors`` are keyed by ``(materialization
    directory, bucket or epoch)``. ``executor`` runs the jobs (default: a thread pool
    started on first use and again after :meth:`shutdown`; a given executor is used
    until shutdown, after which jobs are refused)."""

    def __init__(self, executor: Executor | None = None) -> None:
        self.pid = os.getpid()
        self.cond = threading.Condition()
        self._own_executor = executor is None
        self.executor: Executor | None = executor
        self.in_flight = 0
        self.growth_lanes: set[GrowthLane] = set()
        """Task ranges with a growth job running in this pool."""
        self.started = self.completed = self.failed = self.cancelled = self.bytes = 0
        self.retry_at: dict[tuple[str, int], float] = {}
        self.failures_in_a_row: dict[tuple[str, int], int] = {}
        self.anchors: dict[tuple[str, int], float] = {}

    def stats(self) -> LocalMaterializationStats:
        """The counters (a consistent snapshot)."""
        with self.cond:
            return LocalMaterializationStats(
                self.started,
                self.completed,
                self.failed,
                self.cancelled,
                self.bytes,
                self.in_flight,
            )

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until no job of this pool runs or waits; False on timeout."""
        with self.cond:
            return self.cond.wait_for(lambda: self.in_flight == 0, timeout)

    def shutdown(self, *, wait: bool = True) -> None:
        """Stop the executor: ``wait`` lets running jobs finish; jobs not started are
        cancelled (their buckets released)."""
        with self.cond:
            executor, self.executor = self.executor, None
        if executor is not None:
            executor.shutdown(wait=wait, cancel_futures=True)

    def note_failure(self, scope: MaterializationScope, bucket: int, error: BaseException) -> None:
        """Count and log a failed bucket; it waits ``retry_delay_s`` before it is tried
        again. Beyond ``max_consecutive_failures`` in a row the log is an error."""
        key = (str(scope.directory), bucket)
        with self.cond:
            self.failed += 1
            self.retry_at[key] = scope.clock.wall() + scope.settings.retry_delay_s
            in_a_row = self.failures_in_a_row[key] = self.failures_in_a_row.get(key, 0) + 1
        level = logging.WARNING
        if in_a_row > scope.settings.max_consecutive_failures:
            level = logging.ERROR
        _log.log(
            level,
            "materialization of bucket %d (job %s) failed (%d in a row; its changelog grows "
            "until one succeeds): %s",
            bucket,
            scope.job_id,
            in_a_row,
            error,
        )

    def submit(self, job: _Job) -> bool:
        """Start ``job`` and count it in flight; False (its buckets released) when this
        pool takes no more jobs (shut down)."""
        with self.cond:
            if self.executor is None and self._own_executor:
                self.executor = ThreadPoolExecutor(
                    _POOL_THREADS, thread_name_prefix="gic-local-materialize"
                )
            future: Future[None] | None = None
            if self.executor is not None:
                with contextlib.suppress(RuntimeError):  # executor shutting down
                    future = self.executor.submit(job.run)
            if future is None:
                for item in job.items:
                    _release(item)
                return False
            self.in_flight += 1
            self.started += len(job.items)
            if job.lane is not None:
                self.growth_lanes.add(job.lane)
        future.add_done_callback(job.finished)
        return True


_PROCESS = [MaterializationPool()]
_PROCESS_LOCK = threading.Lock()


def process_pool() -> MaterializationPool:
    """This process's pool (the executor's: shared by every task the process runs)."""
    with _PROCESS_LOCK:
        if _PROCESS[0].pid != os.getpid():  # forked: the parent's threads are not here
            _PROCESS[0] = MaterializationPool()
        return _PROCESS[0]


@dataclass(frozen=True, slots=True)
class MaterializationScope:
    """Where, for which attempt, by which clock and on which pool materializations of one
    task run."""

    directory: Path
    """``<local_dir>/<job_id>/materialized``: records and in-flight markers."""
    root: str
    job_id: str
    epoch: int
    resolver: StoreResolver
    settings: MaterializationSettings
    clock: Clock = field(default_factory=SystemClock)
    """Due times, retry deadlines, record times and adoption ages (``wall()``)."""
    pool: MaterializationPool = field(default_factory=process_pool)


# --- the process pool ---------------------------------------------------------------------


def local_stats() -> LocalMaterializationStats:
    """This process's counters (a consistent snapshot)."""
    return process_pool().stats()


def wait_local_materializations(timeout: float | None = None) -> bool:
    """Wait until no background materialization of this process runs; False on timeout."""
    return process_pool().wait(timeout)


def shutdown_local_materializations(*, wait: bool = True) -> None:
    """Stop this process's pool: ``wait`` lets running uploads finish; jobs not started
    are cancelled (their markers removed). A later start creates a new thread pool."""
    process_pool().shutdown(wait=wait)


# --- background jobs ---------------------------------------------------------------------


@dataclass(slots=True)
class JobItem:
    """One bucket of a job: its view, the token of the lineage it is at, its marker."""

    view: MaterializationView
    token: str
    marker: HeldMarker
    done: bool = False


@dataclass(slots=True)
class _Job:
    scope: MaterializationScope
    items: list[JobItem]
    lane: GrowthLane | None

    def run(self) -> None:
        """Snapshot the buckets one after the other (executor thread); each is counted,
        recorded and released as soon as it is done."""
        pool = self.scope.pool
        for item in self.items:
            key = (str(self.scope.directory), item.view.bucket)
            try:
                handle = _materialize(self.scope, item.view, item.token)
            except Exception as exc:
                pool.note_failure(self.scope, item.view.bucket, exc)
            else:
                with pool.cond:
                    pool.completed += 1
                    pool.bytes += handle.size
                    pool.retry_at.pop(key, None)
                    pool.failures_in_a_row.pop(key, None)
            finally:
                _release(item)

    def finished(self, future: Future[None]) -> None:
        """Done-callback (executor thread after the job, or the thread that cancelled
        it): the buckets the job never got to are released and counted as cancelled (or
        failed)."""
        pool = self.scope.pool
        left = [item for item in self.items if not item.done]
        for item in left:
            _release(item)
        with pool.cond:
            pool.in_flight -= 1
            if self.lane is not None:
                pool.growth_lanes.discard(self.lane)
            if future.cancelled():
                pool.cancelled += len(left)
            else:
                pool.failed += len(left)
                if (error := future.exception()) is not None:
                    _log.warning("background materialization job failed: %s", error)
            pool.cond.notify_all()


def submit_job(
    scope: MaterializationScope, items: list[JobItem], lane: GrowthLane | None = None
) -> bool:
    """Run a job snapshotting ``items`` in order on the scope's pool; ``lane``: the
    growth lane it occupies until it ends. False (everything released) when the pool
    takes no more jobs (shut down)."""
    return scope.pool.submit(_Job(scope, items, lane))


def _release(item: JobItem) -> None:
    """Close the view and remove the marker of a bucket that is done (idempotent)."""
    item.done = True
    item.view.view.close()
    item.marker.release()


def _materialize(
    scope: MaterializationScope, view: MaterializationView, token: str
) -> SnapshotHandle:
    handle = upload_view(
        scope.resolver,
        view,
        root=scope.root,
        job_id=scope.job_id,
        epoch=scope.epoch,
        compress=scope.settings.compress,
        spool_dir=scope.directory,
    )
    record = MaterializationRecord(
        job_id=scope.job_id,
        root=scope.root,
        epoch=scope.epoch,
        bucket=view.bucket,
        seq=view.seq,
        token=token,
        snapshot=handle,
        time=scope.clock.wall(),
    )
    write_record(scope.directory, record)
    return handle
