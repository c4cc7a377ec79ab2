"""Background materialization shared by the worker processes of one executor.

Any Python worker of an executor may run a bucket's next task, so a snapshot uploaded
in the background by one process must be usable by another. The hand-over is the
per-bucket :mod:`~gic_runtime.materialization.snapshot_record` file next to the
executor-local state copy. This is the only materialization scheduler of the core: the
in-process :class:`~gic_runtime.executor.state_task.StateTask` runs the same task core
(:func:`~gic_runtime.executor.core.execute`) and so the same code.

After a task's checkpoint (:func:`start_due_materializations`), on the task thread:

* a bucket is *due* (:func:`_due`, the rules of
  :func:`~gic_runtime.materialization.scheduler.due`) when it changed beyond its base
  and beyond its newest record, and either
  - by *growth*: its changelog since its effective base (the newest record that fits the
    lineage, else the state's snapshot) reached ``max_sections`` handles or
    ``changelog_ratio`` x that snapshot's size in bytes (at least
    ``changelog_floor_bytes``), whatever the time (:mod:`~gic_runtime.materialization.growth`);
  - by *time*: ``now - record.time >= interval_s * (1 +/- jitter)`` (the jitter is
    derived from the bucket and the record's time, so every process computes the same
    due time); without a record of this attempt the first due time is spread over one
    interval by a deterministic offset of the bucket, counted from when the pool first
    saw the attempt;
* at most one materialization per bucket runs across processes: a marker file
  ``bucket-NNNNN.inflight``, locked by its holder
  (:mod:`~gic_runtime.materialization.markers`; a dead process's marker is stale at
  once);
* keeping up with growth (docs/architecture.md §13.5): the growth-due buckets of the
  task go into *one growth job* that snapshots them one after the other, highest growth
  pressure first. Each task range has its own growth lane per pool: a growth job
  starts whenever none of this range runs in the pool, whatever ``max_in_flight``
  says. Time-due buckets start one per job while fewer than ``max_in_flight`` jobs
  (growth jobs included) run in the pool. A job uploads one snapshot at a time, so
  a pool uploads at most ``max_in_flight`` + (ranges it serves) snapshots at once;
  and one start serves the range's whole growth backlog, so with every bucket gaining a
  section per batch, a bucket's count exceeds ``max_sections`` by at most the batches
  until the range's running growth job ends plus those its own job takes before it;
* turns: at the checkpoints where it is the range's turn
  (:class:`~gic_runtime.materialization.scheduler.Turn`: the checkpoint id modulo the
  job's ranges), buckets that would reach a growth limit before
  the range's next turn are growth-due too, so ranges growing in step start their
  growth jobs in different checkpoints (``growth_turns``);
* companions: a growth job also takes the range's buckets whose growth pressure reached
  ``companion_pressure`` (after the growth-due ones). A changelog segment holds a
  section of every bucket of its range and stays in storage until each has a newer
  snapshot, so a range snapshotted together frees its segments together;
* the views (LMDB read transactions, consistent with the lineage metadata just set)
  are taken on the task thread and the uploads run on the pool
  (:class:`~gic_runtime.materialization.pool.MaterializationPool`: one per executor
  process, one per in-process ``StateTask``); each success writes its record, and every
  marker is removed when its bucket is done.

Before the next task processes (:func:`adopt_materializations`), a record whose
snapshot fits the expected lineage (:func:`~gic_runtime.materialization.snapshot_record.usable_for`)
and still exists becomes the bucket's base.

Time is a seam: due times, retry deadlines, record times and adoption ages use the
scope's :class:`~gic_runtime.clock.Clock` (``wall()``; the system clock by default), so
tests move time by hand.

Failures are logged and counted, never raised into a later task; a failed bucket waits
``retry_delay_s`` (in its pool) before it is tried again, and beyond
``max_consecutive_failures`` in a row each failure is logged as an error. A process that
dies mid-upload leaves a stale marker and maybe an orphan snapshot (the job's orphan
sweep deletes it). Snapshots never adopted are not deleted here: another process may
still adopt them, and a manifest may already reference them. After a clean stop the
driver waits for the markers (:func:`wait_for_markers`) and then deletes the attempt's
snapshots no retained manifest references
(:meth:`~gic_runtime.driver.timeline.CheckpointTimeline.sweep_after_stop`).

Thread-safety: every public function may be called from any thread; a pool's state is
guarded by its condition variable. A process created by ``fork`` starts with an empty
process pool (inherited background threads do not exist in the child).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gic_runtime.errors import FormatError, GICError
from gic_runtime.handles import BucketState, SnapshotHandle
from gic_runtime.materialization.markers import in_flight, take_marker
from gic_runtime.materialization.pool import (
    JobItem,
    LocalMaterializationStats,
    MaterializationPool,
    MaterializationScope,
    local_stats,
    process_pool,
    shutdown_local_materializations,
    submit_job,
    wait_local_materializations,
)
from gic_runtime.materialization.scheduler import Due, Newest, Turn, due, growth_since_base
from gic_runtime.materialization.snapshot_record import (
    ADOPTION_MAX_AGE_S,
    MaterializationRecord,
    read_record,
    usable_for,
)
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.storage.uri import StoreResolver

__all__ = [
    "Due",
    "LocalMaterializationStats",
    "MaterializationPool",
    "MaterializationScope",
    "adopt_materializations",
    "local_stats",
    "note_attempt",
    "process_pool",
    "shutdown_local_materializations",
    "start_due_materializations",
    "wait_for_markers",
    "wait_local_materializations",
]

_log = logging.getLogger(__name__)

EXISTS_THREADS = 16
"""Existence checks of adoption candidates in flight at once (a task range holds 32
buckets in the common layout of 128 buckets and 4 tasks: two rounds of requests)."""

# --- public API --------------------------------------------------------------------------


def note_attempt(scope: MaterializationScope) -> None:
    """Remember when the scope's pool first saw the attempt (first due times count from
    there); call at the start of every task."""
    pool = scope.pool
    with pool.cond:
        pool.anchors.setdefault((str(scope.directory), scope.epoch), scope.clock.wall())


def adopt_materializations(
    scope: MaterializationScope, backend: KeyedStateBackend, expected: Mapping[int, BucketState]
) -> list[int]:
    """Make every usable record's snapshot the base of its bucket (call on the task
    thread right after the backend was restored to ``expected``). A record older than
    :data:`~gic_runtime.materialization.snapshot_record.ADOPTION_MAX_AGE_S` (by the scope's clock,
    the one that wrote it) is never adopted: the driver's live sweep may have deleted its
    snapshot. Each candidate's object is checked to still exist with its size; the checks
    run concurrently (:data:`EXISTS_THREADS`), as a range adopts up to all of its buckets
    in one task and each check is a request (tens of milliseconds on S3). Adoption itself
    happens on the calling thread, in bucket order. Returns the buckets."""
    candidates: list[tuple[int, SnapshotHandle]] = []
    for bucket in backend.bucket_range:
        state = expected.get(bucket) or BucketState(bucket, 0)
        record = _read(scope, bucket)
        if record is None or not usable_for(
            record, state, root=scope.root, job_id=scope.job_id, epoch=scope.epoch
        ):
            continue
        if scope.clock.wall() - record.time > ADOPTION_MAX_AGE_S:
            continue  # the live sweep may delete it by now (record.ADOPTION_MAX_AGE_S)
        candidates.append((bucket, record.snapshot))
    present = _all_exist(scope.resolver, [handle for _, handle in candidates])
    adopted: list[int] = []
    for (bucket, handle), there in zip(candidates, present, strict=True):
        if there and backend.on_materialized(bucket, handle):
            adopted.append(bucket)
    return adopted


def start_due_materializations(
    scope: MaterializationScope,
    backend: KeyedStateBackend,
    states: Mapping[int, BucketState],
    turn: Turn | None = None,
) -> int:
    """Start background materializations of the due buckets among ``states`` (the states
    the task just checkpointed and marked persisted): one growth job with every
    growth-due bucket (highest pressure first), then the range's companions (pressure at
    least ``companion_pressure``), unless this range's growth lane is busy,
    then one job per time-due bucket (in bucket order) while the pool runs fewer than
    ``max_in_flight`` jobs. ``turn`` places the range in the job's rotation at this
    checkpoint: on its turn, a bucket that would reach a growth limit within ``count -
    1`` more handles is growth-due as well (``None``: no rotation). Returns how many
    buckets started."""
    pool = scope.pool
    s = scope.settings
    now = scope.clock.wall()
    directory = str(scope.directory)
    lane = (directory, backend.bucket_range.start, backend.bucket_range.stop)
    with pool.cond:
        anchor = pool.anchors.setdefault((directory, scope.epoch), now)
        lane_free = lane not in pool.growth_lanes
        if not lane_free and pool.in_flight >= s.max_in_flight:
            return 0
        waiting = {b for (d, b), t in pool.retry_at.items() if d == directory and t > now}
    ahead = turn.count - 1 if s.growth_turns and turn is not None and turn.ours else 0
    growth: list[tuple[float, int]] = []
    companions: list[tuple[float, int]] = []
    timed: list[int] = []
    for bucket in sorted(states):
        state = states[bucket]
        if state.seq <= state.base or backend.seq(bucket) != state.seq or bucket in waiting:
            continue
        newest = _newest(scope, bucket, state)
        reason = due(s, scope.job_id, state, newest, now=now, anchor=anchor)  # as _due
        if reason is not None and reason.by_growth:
            growth.append((-reason.pressure, bucket))
            continue
        since = growth_since_base(s, state, newest)
        if ahead and since is not None and since.projected(ahead) >= 1.0:
            growth.append((-since.pressure, bucket))  # its turn comes before the limit
            continue
        if reason is not None:
            timed.append(bucket)
        if since is not None and since.pressure >= s.companion_pressure:
            companions.append((-since.pressure, bucket))
    started = 0
    if growth and lane_free:
        joining = [b for _, b in sorted(companions)]
        timed = [b for b in timed if b not in joining]
        order = [b for _, b in sorted(growth)] + joining
        taken = _take(scope, backend, order, states)
        if taken and submit_job(scope, taken, lane):
            started += len(taken)
    for bucket in timed:
        with pool.cond:
            if pool.in_flight >= s.max_in_flight:
                break
        taken = _take(scope, backend, [bucket], states)
        if taken and submit_job(scope, taken):
            started += len(taken)
    return started


def wait_for_markers(
    directory: Path, buckets: range, timeout: float, *, poll_s: float = 0.05
) -> list[int]:
    """Wait until no bucket of ``buckets`` has an in-flight marker in ``directory`` (a
    materialization directory, shared by every process of an executor), at most
    ``timeout`` seconds; returns the buckets still in flight (empty when all finished).
    Stale markers (a dead process's) do not count. Every marker of a task's
    materializations exists before the task returns, so after a job's last task this
    waits for every snapshot those tasks started in this directory, whichever process
    uploads it."""
    deadline = time.monotonic() + timeout
    while True:
        busy = [b for b in buckets if in_flight(_marker_path(directory, b))]
        if not busy or time.monotonic() >= deadline:
            return busy
        time.sleep(poll_s)


def _take(
    scope: MaterializationScope,
    backend: KeyedStateBackend,
    buckets: list[int],
    states: Mapping[int, BucketState],
) -> list[JobItem]:
    """Marker and view of each of ``buckets`` that can start (others are skipped: another
    process holds the marker, or taking it or the view failed)."""
    taken: list[JobItem] = []
    for bucket in buckets:
        try:
            marker = take_marker(_marker_path(scope.directory, bucket))
            if marker is None:
                continue
        except OSError as exc:
            scope.pool.note_failure(scope, bucket, exc)
            continue
        try:
            view = backend.materialization_view(bucket)
        except (GICError, OSError) as exc:
            marker.release()
            scope.pool.note_failure(scope, bucket, exc)
            continue
        taken.append(JobItem(view, states[bucket].token, marker))
    return taken


# --- scheduling --------------------------------------------------------------------------


def _read(scope: MaterializationScope, bucket: int) -> MaterializationRecord | None:
    try:
        return read_record(scope.directory, bucket)
    except (FormatError, OSError) as exc:
        _log.warning("ignoring unreadable materialization record of bucket %d: %s", bucket, exc)
        return None


def _due(
    scope: MaterializationScope, bucket: int, state: BucketState, now: float, anchor: float
) -> Due | None:
    """Whether ``bucket`` at ``state`` is due (:func:`~gic_runtime.materialization.scheduler.due`
    with the bucket's newest record of this attempt); ``None`` when not due."""
    newest = _newest(scope, bucket, state)
    return due(scope.settings, scope.job_id, state, newest, now=now, anchor=anchor)


def _newest(scope: MaterializationScope, bucket: int, state: BucketState) -> Newest | None:
    """The bucket's newest record of this attempt as the scheduler sees it
    (:func:`~gic_runtime.materialization.scheduler.due`); ``None`` without one."""
    record = _read(scope, bucket)
    if record is None or (record.root, record.job_id, record.epoch) != (
        scope.root,
        scope.job_id,
        scope.epoch,
    ):  # another attempt's record does not count: schedule afresh
        return None
    fits = usable_for(record, state, root=scope.root, job_id=scope.job_id, epoch=scope.epoch)
    return Newest(record.seq, record.snapshot.size, record.time, fits)


def _all_exist(resolver: StoreResolver, handles: list[SnapshotHandle]) -> list[bool]:
    """:func:`_exists` of each of ``handles``, in order; up to :data:`EXISTS_THREADS`
    requests at once."""
    if len(handles) <= 1:
        return [_exists(resolver, handle) for handle in handles]
    workers = min(EXISTS_THREADS, len(handles))
    with ThreadPoolExecutor(workers, thread_name_prefix="gic-adopt") as pool:
        return list(pool.map(lambda handle: _exists(resolver, handle), handles))


def _exists(resolver: StoreResolver, handle: SnapshotHandle) -> bool:
    """Whether the snapshot is still there with its size (defence in depth: a record
    never points a checkpoint at a missing file)."""
    try:
        store, key = resolver.resolve(handle.uri)
        return store.size(key) == handle.size
    except GICError as exc:
        _log.warning("not adopting snapshot %s: %s", handle.uri, exc)
        return False


def _marker_path(directory: Path, bucket: int) -> Path:
    return directory / f"bucket-{bucket:05d}.inflight"
