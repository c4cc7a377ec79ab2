"""Background materialization shared by the worker processes of one executor.

Any Python worker of an executor may run a bucket's next task, so a snapshot uploaded
in the background by one process must be usable by another. The hand-over is the
per-bucket :mod:`~gic_runtime.coordination.materialization_record` file next to the
executor-local state copy.

After a task's checkpoint (:func:`start_due_materializations`), on the task thread:

* a bucket is *due* (:func:`_due`) when it changed beyond its base and beyond its newest
  record, and either
  - by *growth*: its changelog since its effective base (the newest record that fits the
    lineage, else the state's snapshot) reached ``max_sections`` handles or
    ``changelog_ratio`` x that snapshot's size in bytes (at least
    ``changelog_floor_bytes``), whatever the time (:mod:`~gic_runtime.materialization.growth`);
  - by *time*: ``now - record.time >= interval_s * (1 +/- jitter)`` (the jitter is
    derived from the bucket and the record's time, so every process computes the same
    due time); without a record of this attempt the first due time is spread over one
    interval by a deterministic offset of the bucket, counted from when this process
    first saw the attempt;
* at most one materialization per bucket runs across processes: an ``O_EXCL`` marker
  file ``bucket-NNNNN.inflight`` (a marker older than 10 minutes is stale: its process
  died; a job refreshes a bucket's marker when it starts that bucket);
* keeping up with growth (docs/architecture.md §13.5): the growth-due buckets of the
  task go into *one growth job* that snapshots them one after the other, highest growth
  pressure first. Each task range has its own growth lane per process: a growth job
  starts whenever none of this range runs in this process, whatever ``max_in_flight``
  says. Time-due buckets start one per job while fewer than ``max_in_flight`` jobs
  (growth jobs included) run in this process. A job uploads one snapshot at a time, so
  a process uploads at most ``max_in_flight`` + (ranges it serves) snapshots at once;
  and one start serves the range's whole growth backlog, so with every bucket gaining a
  section per batch, a bucket's count exceeds ``max_sections`` by at most the batches
  until the range's running growth job ends plus those its own job takes before it;
* the views (LMDB read transactions, consistent with the lineage metadata just set)
  are taken on the task thread and the uploads run on this process's background pool;
  each success writes its record, and every marker is removed when its bucket is done.

Before the next task processes (:func:`adopt_materializations`), a record whose
snapshot fits the expected lineage (``materialization_record.usable_for``) and still
exists becomes the bucket's base.

Failures are logged and counted, never raised into a later task; a failed bucket waits
``retry_delay_s`` (in this process) before it is tried again. A process that dies
mid-upload leaves a stale marker and maybe an orphan snapshot (the job's orphan sweep
deletes it). Snapshots never adopted are not deleted here: another process may still
adopt them, and a manifest may already reference them.

Thread-safety: every public function may be called from any thread; the process-wide
state is guarded by one condition variable. A process created by ``fork`` starts with
empty state (inherited background threads do not exist in the child).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from gic_runtime.checkpoint.live_sweep import ADOPTION_MAX_AGE_S
from gic_runtime.coordination.local_jobs import (
    JobItem,
    LocalMaterializationStats,
    MaterializationScope,
    ProcessState,
    local_stats,
    process_state,
    shutdown_local_materializations,
    submit_job,
    wait_local_materializations,
)
from gic_runtime.coordination.materialization_record import (
    MaterializationRecord,
    read_record,
    usable_for,
)
from gic_runtime.errors import FormatError, GICError
from gic_runtime.handles import BucketState, SnapshotHandle
from gic_runtime.materialization.growth import growth_pressure
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.storage.uri import StoreResolver

__all__ = [
    "MARKER_STALE_S",
    "Due",
    "LocalMaterializationStats",
    "MaterializationScope",
    "adopt_materializations",
    "local_stats",
    "note_attempt",
    "shutdown_local_materializations",
    "start_due_materializations",
    "wait_local_materializations",
]

_log = logging.getLogger(__name__)

MARKER_STALE_S: Final = 600.0
"""A marker this old (seconds) belongs to a process that died mid-upload."""


@dataclass(frozen=True, slots=True)
class Due:
    """Why a bucket is due: ``pressure`` is its changelog growth pressure
    (:func:`~gic_runtime.materialization.growth.growth_pressure`); at least 1.0 means
    due by growth, below that the bucket is due by time."""

    pressure: float

    @property
    def by_growth(self) -> bool:
        return self.pressure >= 1.0


# --- public API --------------------------------------------------------------------------


def note_attempt(scope: MaterializationScope) -> None:
    """Remember when this process first saw the attempt (first due times count from
    there); call at the start of every task."""
    p = process_state()
    with p.cond:
        p.anchors.setdefault((str(scope.directory), scope.epoch), time.time())


def adopt_materializations(
    scope: MaterializationScope, backend: KeyedStateBackend, expected: Mapping[int, BucketState]
) -> list[int]:
    """Make every usable record's snapshot the base of its bucket (call on the task
    thread right after the backend was restored to ``expected``). A record older than
    :data:`~gic_runtime.checkpoint.live_sweep.ADOPTION_MAX_AGE_S` (by this executor's
    clock, which wrote it) is never adopted: the driver's live sweep may have deleted its
    snapshot. Returns the buckets."""
    adopted: list[int] = []
    for bucket in backend.bucket_range:
        state = expected.get(bucket) or BucketState(bucket, 0)
        record = _read(scope, bucket)
        if record is None or not usable_for(
            record, state, root=scope.root, job_id=scope.job_id, epoch=scope.epoch
        ):
            continue
        if time.time() - record.time > ADOPTION_MAX_AGE_S:
            continue  # the live sweep may delete it by now (checkpoint.live_sweep)
        if not _exists(scope.resolver, record.snapshot):
            continue
        if backend.on_materialized(bucket, record.snapshot):
            adopted.append(bucket)
    return adopted


def start_due_materializations(
    scope: MaterializationScope,
    backend: KeyedStateBackend,
    states: Mapping[int, BucketState],
) -> int:
    """Start background materializations of the due buckets among ``states`` (the states
    the task just checkpointed and marked persisted): one growth job with every
    growth-due bucket (highest pressure first) unless this range's growth lane is busy,
    then one job per time-due bucket (in bucket order) while this process runs fewer
    than ``max_in_flight`` jobs. Returns how many buckets started."""
    p = process_state()
    s = scope.settings
    now = time.time()
    directory = str(scope.directory)
    lane = (directory, backend.bucket_range.start, backend.bucket_range.stop)
    with p.cond:
        anchor = p.anchors.setdefault((directory, scope.epoch), now)
        lane_free = lane not in p.growth_lanes
        if not lane_free and p.in_flight >= s.max_in_flight:
            return 0
        waiting = {b for (d, b), t in p.retry_at.items() if d == directory and t > now}
    growth: list[tuple[float, int]] = []
    timed: list[int] = []
    for bucket in sorted(states):
        state = states[bucket]
        if state.seq <= state.base or backend.seq(bucket) != state.seq or bucket in waiting:
            continue
        due = _due(scope, bucket, state, now, anchor)
        if due is not None and due.by_growth:
            growth.append((-due.pressure, bucket))
        elif due is not None:
            timed.append(bucket)
    started = 0
    if growth and lane_free:
        taken = _take(p, scope, backend, [b for _, b in sorted(growth)], states)
        if taken and submit_job(p, scope, taken, lane):
            started += len(taken)
    for bucket in timed:
        with p.cond:
            if p.in_flight >= s.max_in_flight:
                break
        taken = _take(p, scope, backend, [bucket], states)
        if taken and submit_job(p, scope, taken):
            started += len(taken)
    return started


def _take(
    p: ProcessState,
    scope: MaterializationScope,
    backend: KeyedStateBackend,
    buckets: list[int],
    states: Mapping[int, BucketState],
) -> list[JobItem]:
    """Marker and view of each of ``buckets`` that can start (others are skipped: another
    process holds the marker, or taking it or the view failed)."""
    taken: list[JobItem] = []
    for bucket in buckets:
        marker = _marker_path(scope.directory, bucket)
        try:
            if not _take_marker(marker):
                continue
        except OSError as exc:
            _failed_to_start(p, scope, bucket, exc)
            continue
        try:
            view = backend.materialization_view(bucket)
        except (GICError, OSError) as exc:
            marker.unlink(missing_ok=True)
            _failed_to_start(p, scope, bucket, exc)
            continue
        taken.append(JobItem(view, states[bucket].token, marker))
    return taken


def _failed_to_start(
    p: ProcessState, scope: MaterializationScope, bucket: int, exc: Exception
) -> None:
    """Count and log a materialization that could not start; the task goes on (its
    checkpoint is durable, and state stays correct without materialization)."""
    _log.warning("could not start materializing bucket %d of job %s: %s", bucket, scope.job_id, exc)
    with p.cond:
        p.failed += 1
        p.retry_at[(str(scope.directory), bucket)] = time.time() + scope.settings.retry_delay_s


# --- scheduling --------------------------------------------------------------------------


def _unit(*parts: object) -> float:
    """A deterministic number in ``[0, 1)`` from ``parts`` (the same in every process)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def _read(scope: MaterializationScope, bucket: int) -> MaterializationRecord | None:
    try:
        return read_record(scope.directory, bucket)
    except (FormatError, OSError) as exc:
        _log.warning("ignoring unreadable materialization record of bucket %d: %s", bucket, exc)
        return None


def _due(
    scope: MaterializationScope, bucket: int, state: BucketState, now: float, anchor: float
) -> Due | None:
    """Whether ``bucket`` at ``state`` is due (see the module docstring), and how urgent
    its growth is; ``None`` when not due."""
    s = scope.settings
    record = _read(scope, bucket)
    if record is not None and (record.root, record.job_id, record.epoch) != (
        scope.root,
        scope.job_id,
        scope.epoch,
    ):
        record = None  # another attempt's record: schedule afresh
    fits = record is not None and usable_for(
        record, state, root=scope.root, job_id=scope.job_id, epoch=scope.epoch
    )
    if record is not None and fits:
        if record.seq >= state.seq:
            return None  # nothing changed since the newest snapshot
        base = record.seq  # the bucket's next task adopts this snapshot
        size: int | None = record.snapshot.size
    else:
        base = state.base
        size = state.snapshot.size if state.snapshot is not None else None
    due = Due(growth_pressure(state.changelog, base, size, s))
    if due.by_growth:
        return due
    if record is None:
        timed = now - anchor >= s.interval_s * _unit(scope.job_id, bucket, "first")
    else:
        factor = 1.0 + s.jitter * (2.0 * _unit(scope.job_id, bucket, record.time) - 1.0)
        timed = now - record.time >= s.interval_s * factor
    return due if timed else None


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


def _take_marker(marker: Path) -> bool:
    """Create ``marker`` exclusively; a stale one (dead process) is replaced once."""
    marker.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            try:
                age = time.time() - marker.stat().st_mtime
            except FileNotFoundError:
                continue  # released meanwhile: try again
            if age < MARKER_STALE_S:
                return False
            marker.unlink(missing_ok=True)
            continue
        try:
            os.write(fd, f"{os.getpid()} {time.time()}\n".encode())
        finally:
            os.close(fd)
        return True
    return False
