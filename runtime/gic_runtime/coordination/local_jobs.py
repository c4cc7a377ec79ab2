"""The background side of executor-local materialization: one pool per process.

:mod:`~gic_runtime.coordination.local_materialization` decides what to materialize and
takes each bucket's marker and view on the task thread; :func:`submit_job` runs a *job*
(one or more buckets, snapshotted one after the other) on this process's pool. Each
bucket of a job is uploaded, recorded (:mod:`~gic_runtime.coordination.materialization_record`),
counted and released (view closed, marker removed) as soon as it is done; the buckets a
job never got to (pool shut down, unexpected error) are released by the job's
done-callback. Invariant: every bucket of a submitted job is released exactly once and
counted once as completed, failed or cancelled; ``in_flight`` counts submitted jobs not
yet finished.

Thread-safety: every function may be called from any thread; the process-wide state is
guarded by one condition variable. A process created by ``fork`` starts with empty state
(inherited background threads do not exist in the child).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from gic_runtime.coordination.materialization_record import MaterializationRecord, write_record
from gic_runtime.handles import SnapshotHandle
from gic_runtime.layout import new_snapshot_uri
from gic_runtime.materialization.scheduler import MaterializationSettings
from gic_runtime.state.backend import MaterializationView
from gic_runtime.state.snapshot import upload_snapshot
from gic_runtime.storage.uri import StoreResolver

_log = logging.getLogger(__name__)

_POOL_THREADS: Final = 8
"""Upper bound of the pool's threads; ``max_in_flight`` and the growth lanes limit what
actually runs."""

GrowthLane = tuple[str, int, int]
"""A task range's growth lane: (materialization directory, first bucket, end bucket)."""


@dataclass(frozen=True, slots=True)
class MaterializationScope:
    """Where and for which attempt materializations of one task run."""

    directory: Path
    """``<local_dir>/<job_id>/materialized``: records and in-flight markers."""
    root: str
    job_id: str
    epoch: int
    resolver: StoreResolver
    settings: MaterializationSettings


@dataclass(frozen=True, slots=True)
class LocalMaterializationStats:
    """Counters of this process's background materializations since it started (bucket
    materializations, except ``in_flight``)."""

    started: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    """Buckets of jobs dropped before they snapshotted them (shutdown)."""
    bytes_uploaded: int = 0
    in_flight: int = 0
    """Jobs running or queued (what ``max_in_flight`` bounds)."""


class ProcessState:
    """This process's pool, counters and schedule bookkeeping (guarded by ``cond``):
    ``in_flight`` counts jobs (growth jobs included); the counters count buckets;
    ``retry_at`` and ``anchors`` are keyed by ``(materialization directory, bucket or
    epoch)``."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.cond = threading.Condition()
        self.pool: ThreadPoolExecutor | None = None
        self.in_flight = 0
        self.growth_lanes: set[GrowthLane] = set()
        """Task ranges with a growth job running in this process."""
        self.started = self.completed = self.failed = self.cancelled = self.bytes = 0
        self.retry_at: dict[tuple[str, int], float] = {}
        self.anchors: dict[tuple[str, int], float] = {}


_PROCESS = [ProcessState()]
_PROCESS_LOCK = threading.Lock()


def process_state() -> ProcessState:
    with _PROCESS_LOCK:
        if _PROCESS[0].pid != os.getpid():  # forked: the parent's threads are not here
            _PROCESS[0] = ProcessState()
        return _PROCESS[0]


# --- counters and the pool ----------------------------------------------------------------


def local_stats() -> LocalMaterializationStats:
    """This process's counters (a consistent snapshot)."""
    p = process_state()
    with p.cond:
        return LocalMaterializationStats(
            p.started, p.completed, p.failed, p.cancelled, p.bytes, p.in_flight
        )


def wait_local_materializations(timeout: float | None = None) -> bool:
    """Wait until no background materialization of this process runs; False on timeout."""
    p = process_state()
    with p.cond:
        return p.cond.wait_for(lambda: p.in_flight == 0, timeout)


def shutdown_local_materializations(*, wait: bool = True) -> None:
    """Stop this process's pool: ``wait`` lets running uploads finish; jobs not started
    are cancelled (their markers removed). A later start creates a new pool."""
    p = process_state()
    with p.cond:
        pool, p.pool = p.pool, None
    if pool is not None:
        pool.shutdown(wait=wait, cancel_futures=True)


# --- background jobs ---------------------------------------------------------------------


@dataclass(slots=True)
class JobItem:
    """One bucket of a job: its view, the token of the lineage it is at, its marker."""

    view: MaterializationView
    token: str
    marker: Path
    done: bool = False


def submit_job(
    p: ProcessState,
    scope: MaterializationScope,
    items: list[JobItem],
    lane: GrowthLane | None = None,
) -> bool:
    """Run a job snapshotting ``items`` in order on this process's pool; ``lane``: the
    growth lane it occupies until it ends. False (everything released) when the pool is
    shutting down."""
    with p.cond:
        if p.pool is None:
            p.pool = ThreadPoolExecutor(_POOL_THREADS, thread_name_prefix="gic-local-materialize")
        try:
            future = p.pool.submit(_run, p, scope, items)
        except RuntimeError:  # pool shutting down
            for item in items:
                item.view.view.close()
                item.marker.unlink(missing_ok=True)
            return False
        p.in_flight += 1
        p.started += len(items)
        if lane is not None:
            p.growth_lanes.add(lane)
    future.add_done_callback(lambda f: _finished(p, items, lane, f))
    return True


def _run(p: ProcessState, scope: MaterializationScope, items: list[JobItem]) -> None:
    """Snapshot the job's buckets one after the other (pool thread); each is counted,
    recorded and released as soon as it is done."""
    for item in items:
        view = item.view
        key = (str(scope.directory), view.bucket)
        try:
            _touch(item.marker)  # the marker's age counts from this bucket's start
            handle = _materialize(scope, view, item.token)
        except Exception as exc:
            with p.cond:
                p.failed += 1
                p.retry_at[key] = time.time() + scope.settings.retry_delay_s
            _log.warning(
                "background materialization of bucket %d (job %s) failed: %s",
                view.bucket,
                scope.job_id,
                exc,
            )
        else:
            with p.cond:
                p.completed += 1
                p.bytes += handle.size
                p.retry_at.pop(key, None)
        finally:
            _release(item)


def _touch(marker: Path) -> None:
    # gone or unwritable: at worst another process takes the bucket over
    with contextlib.suppress(OSError):
        os.utime(marker)


def _release(item: JobItem) -> None:
    """Close the view and remove the marker of a bucket that is done (idempotent)."""
    item.done = True
    item.view.view.close()
    try:
        item.marker.unlink(missing_ok=True)
    except OSError as exc:  # pragma: no cover - the marker goes stale instead
        _log.warning("could not remove materialization marker %s: %s", item.marker, exc)


def _materialize(
    scope: MaterializationScope, view: MaterializationView, token: str
) -> SnapshotHandle:
    uri = new_snapshot_uri(scope.root, scope.job_id, view.bucket)
    with view.view as items:
        handle = upload_snapshot(
            scope.resolver,
            uri,
            items,
            bucket=view.bucket,
            seq=view.seq,
            compress=scope.settings.compress,
        )
    record = MaterializationRecord(
        job_id=scope.job_id,
        root=scope.root,
        epoch=scope.epoch,
        bucket=view.bucket,
        seq=view.seq,
        token=token,
        snapshot=handle,
        time=time.time(),
    )
    write_record(scope.directory, record)
    return handle


def _finished(
    p: ProcessState, items: list[JobItem], lane: GrowthLane | None, future: Future[None]
) -> None:
    """Done-callback (pool thread after the job, or the thread that cancelled it): the
    buckets the job never got to are released and counted as cancelled (or failed)."""
    left = [item for item in items if not item.done]
    for item in left:
        _release(item)
    with p.cond:
        p.in_flight -= 1
        if lane is not None:
            p.growth_lanes.discard(lane)
        if future.cancelled():
            p.cancelled += len(left)
        else:
            p.failed += len(left)
            if (error := future.exception()) is not None:
                _log.warning("background materialization job failed: %s", error)
        p.cond.notify_all()
