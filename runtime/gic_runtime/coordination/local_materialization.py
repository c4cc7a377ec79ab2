"""Background materialization shared by the worker processes of one executor.

Any Python worker of an executor may run a bucket's next task, so a snapshot uploaded
in the background by one process must be usable by another. The hand-over is the
per-bucket :mod:`~gic_runtime.coordination.materialization_record` file next to the
executor-local state copy.

After a task's checkpoint (:func:`start_due_materializations`), on the task thread:

* a bucket is *due* when it changed beyond its base and beyond its newest record, and
  ``now - record.time >= interval_s * (1 +/- jitter)`` (the jitter is derived from the
  bucket and the record's time, so every process computes the same due time); without
  a record of this attempt the first due time is spread over one interval by a
  deterministic offset of the bucket, counted from when this process first saw the
  attempt;
* at most ``max_in_flight`` run per process, and at most one per bucket across
  processes: an ``O_EXCL`` marker file ``bucket-NNNNN.inflight`` (a marker older than
  10 minutes is stale: its process died);
* the view (an LMDB read transaction, consistent with the lineage metadata just set)
  is taken on the task thread and the upload runs on this process's background pool;
  success writes the record, and the marker is always removed.

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
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from gic_runtime.coordination.materialization_record import (
    MaterializationRecord,
    read_record,
    usable_for,
    write_record,
)
from gic_runtime.errors import FormatError, GICError
from gic_runtime.handles import BucketState, SnapshotHandle
from gic_runtime.layout import new_snapshot_uri
from gic_runtime.materialization.scheduler import MaterializationSettings
from gic_runtime.state.backend import KeyedStateBackend, MaterializationView
from gic_runtime.state.snapshot import upload_snapshot
from gic_runtime.storage.uri import StoreResolver

_log = logging.getLogger(__name__)

MARKER_STALE_S: Final = 600.0
"""A marker this old (seconds) belongs to a process that died mid-upload."""
_POOL_THREADS: Final = 8
"""Upper bound of the pool's threads; ``max_in_flight`` limits what actually runs."""


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
    """Counters of this process's background materializations since it started."""

    started: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    """Jobs dropped before they ran (shutdown)."""
    bytes_uploaded: int = 0
    in_flight: int = 0


class _Process:
    """This process's pool, counters and schedule bookkeeping (guarded by ``cond``)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.cond = threading.Condition()
        self.pool: ThreadPoolExecutor | None = None
        self.in_flight = 0
        self.started = self.completed = self.failed = self.cancelled = self.bytes = 0
        self.retry_at: dict[tuple[str, int], float] = {}
        self.anchors: dict[tuple[str, int], float] = {}


_PROCESS = [_Process()]
_PROCESS_LOCK = threading.Lock()


def _process() -> _Process:
    with _PROCESS_LOCK:
        if _PROCESS[0].pid != os.getpid():  # forked: the parent's threads are not here
            _PROCESS[0] = _Process()
        return _PROCESS[0]


# --- public API --------------------------------------------------------------------------


def local_stats() -> LocalMaterializationStats:
    """This process's counters (a consistent snapshot)."""
    p = _process()
    with p.cond:
        return LocalMaterializationStats(
            p.started, p.completed, p.failed, p.cancelled, p.bytes, p.in_flight
        )


def wait_local_materializations(timeout: float | None = None) -> bool:
    """Wait until no background materialization of this process runs; False on timeout."""
    p = _process()
    with p.cond:
        return p.cond.wait_for(lambda: p.in_flight == 0, timeout)


def shutdown_local_materializations(*, wait: bool = True) -> None:
    """Stop this process's pool: ``wait`` lets running uploads finish; jobs not started
    are cancelled (their markers removed). A later start creates a new pool."""
    p = _process()
    with p.cond:
        pool, p.pool = p.pool, None
    if pool is not None:
        pool.shutdown(wait=wait, cancel_futures=True)


def note_attempt(scope: MaterializationScope) -> None:
    """Remember when this process first saw the attempt (first due times count from
    there); call at the start of every task."""
    p = _process()
    with p.cond:
        p.anchors.setdefault((str(scope.directory), scope.epoch), time.time())


def adopt_materializations(
    scope: MaterializationScope, backend: KeyedStateBackend, expected: Mapping[int, BucketState]
) -> list[int]:
    """Make every usable record's snapshot the base of its bucket (call on the task
    thread right after the backend was restored to ``expected``). Returns the buckets."""
    adopted: list[int] = []
    for bucket in backend.bucket_range:
        state = expected.get(bucket) or BucketState(bucket, 0)
        record = _read(scope, bucket)
        if record is None or not usable_for(
            record, state, root=scope.root, job_id=scope.job_id, epoch=scope.epoch
        ):
            continue
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
    the task just checkpointed and marked persisted). Returns how many started."""
    p = _process()
    s = scope.settings
    now = time.time()
    with p.cond:
        anchor = p.anchors.setdefault((str(scope.directory), scope.epoch), now)
    started = 0
    for bucket in sorted(states):
        state = states[bucket]
        if state.seq <= state.base or backend.seq(bucket) != state.seq:
            continue
        with p.cond:
            if p.in_flight >= s.max_in_flight:
                break
            if p.retry_at.get((str(scope.directory), bucket), 0.0) > now:
                continue
        if not _due(scope, bucket, state, now, anchor):
            continue
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
        if _submit(p, scope, view, state.token, marker):
            started += 1
    return started


def _failed_to_start(p: _Process, scope: MaterializationScope, bucket: int, exc: Exception) -> None:
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
) -> bool:
    s = scope.settings
    record = _read(scope, bucket)
    if record is not None and (record.root, record.job_id, record.epoch) != (
        scope.root,
        scope.job_id,
        scope.epoch,
    ):
        record = None  # another attempt's record: schedule afresh
    if record is None:
        return now - anchor >= s.interval_s * _unit(scope.job_id, bucket, "first")
    fits = usable_for(record, state, root=scope.root, job_id=scope.job_id, epoch=scope.epoch)
    if fits and record.seq >= state.seq:
        return False  # nothing changed since the newest snapshot
    factor = 1.0 + s.jitter * (2.0 * _unit(scope.job_id, bucket, record.time) - 1.0)
    return now - record.time >= s.interval_s * factor


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


# --- background jobs ---------------------------------------------------------------------


def _submit(
    p: _Process, scope: MaterializationScope, view: MaterializationView, token: str, marker: Path
) -> bool:
    with p.cond:
        if p.pool is None:
            p.pool = ThreadPoolExecutor(_POOL_THREADS, thread_name_prefix="gic-local-materialize")
        try:
            future = p.pool.submit(_materialize, scope, view, token)
        except RuntimeError:  # pool shutting down
            view.view.close()
            marker.unlink(missing_ok=True)
            return False
        p.in_flight += 1
        p.started += 1
    future.add_done_callback(lambda f: _finished(p, scope, view, marker, f))
    return True


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
    p: _Process,
    scope: MaterializationScope,
    view: MaterializationView,
    marker: Path,
    future: Future[SnapshotHandle],
) -> None:
    """Done-callback (pool thread, or the thread that cancelled the job)."""
    view.view.close()  # idempotent; a job that failed early or never ran left it open
    try:
        marker.unlink(missing_ok=True)
    except OSError as exc:  # pragma: no cover - the marker goes stale instead
        _log.warning("could not remove materialization marker %s: %s", marker, exc)
    key = (str(scope.directory), view.bucket)
    with p.cond:
        p.in_flight -= 1
        if future.cancelled():
            p.cancelled += 1
        elif (error := future.exception()) is not None:
            p.failed += 1
            p.retry_at[key] = time.time() + scope.settings.retry_delay_s
            _log.warning(
                "background materialization of bucket %d (job %s) failed: %s",
                view.bucket,
                scope.job_id,
                error,
            )
        else:
            p.completed += 1
            p.bytes += future.result().size
            p.retry_at.pop(key, None)
        p.cond.notify_all()
