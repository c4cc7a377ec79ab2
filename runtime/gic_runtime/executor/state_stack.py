"""An executor entry and the one way its state stack is assembled.

An :class:`ExecutorEntry` is the keyed state of one bucket range for one attempt
``(root, job, epoch)``, and what the task core (:func:`~gic_runtime.executor.core.execute`)
runs it with. Its state stack, bottom up:

* a :class:`~gic_runtime.changelog.uploader.HedgingUploader` of the attempt
  (:func:`attempt_uploader`; segment names under ``changelog/<epoch>/``), possibly shared
  by several entries of the attempt;
* a :class:`CountingUploader` per entry, counting the bytes its writer submits;
* the entry's :class:`~gic_runtime.changelog.writer.BatchingChangelogWriter`;
* the :class:`~gic_runtime.state.backend.KeyedStateBackend` over a local store.

:func:`build_entry` assembles the stack from a barrier's settings; the executor's process
cache (:mod:`~gic_runtime.executor.process_cache`: shared uploader and LMDB store, process
materialization pool, system clock) and the in-process
:class:`~gic_runtime.executor.state_task.StateTask` (own uploader, store, pool and clocks)
both use it, so they cannot assemble it differently.

Invariants: an entry's writer and backend own exactly its bucket range; its key
(:func:`entry_key`) names the local job directory, the attempt and the range; an entry's
``lock`` serializes the tasks that use it. While the backend restores buckets in the
background after a task acked, the entry holds that task's bucket locks
(:meth:`ExecutorEntry.hold_locks`): the next task of the entry takes them over, the
restore's end releases them, so no other process touches the range meanwhile.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from gic_runtime.changelog.uploader import HedgingUploader, UploaderSettings, UploadResult
from gic_runtime.changelog.writer import BatchingChangelogWriter
from gic_runtime.clock import Clock, SystemClock
from gic_runtime.coordination.barrier import Barrier
from gic_runtime.coordination.task_settings import TaskSettings
from gic_runtime.executor.bucket_locks import BucketLocks
from gic_runtime.executor.environment import resolve_local_dir
from gic_runtime.layout import new_segment_uri, validate_id
from gic_runtime.materialization.pool import MaterializationPool, process_pool
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.stores import KVStore
from gic_runtime.storage.uri import StoreResolver

__all__ = [
    "CountingUploader",
    "EntryKey",
    "ExecutorEntry",
    "LocalPaths",
    "attempt_uploader",
    "build_entry",
    "entry_key",
    "local_paths",
]


class CountingUploader:
    """An :class:`~gic_runtime.changelog.uploader.Uploader` that counts the segment bytes
    one writer submits (task thread only) before handing them to a shared uploader."""

    def __init__(self, inner: HedgingUploader) -> None:
        self.inner = inner
        self.bytes_submitted = 0

    def submit(self, data: bytes) -> Future[UploadResult]:
        self.bytes_submitted += len(data)
        return self.inner.submit(data)


@dataclass(frozen=True, slots=True)
class LocalPaths:
    """An executor's local directory of one job."""

    job: Path

    @property
    def state(self) -> Path:
        return self.job / "state"

    @property
    def locks(self) -> Path:
        return self.job / "locks"

    @property
    def materialized(self) -> Path:
        return self.job / "materialized"


EntryKey = tuple[str, str, str, int, int, int]
"""(local job directory, root, job, epoch, first bucket, end bucket)."""


@dataclass(eq=False)
class ExecutorEntry:
    """The keyed state of one bucket range for one attempt, and what the task core
    (:func:`~gic_runtime.executor.core.execute`) runs it with: the local directory, the
    materialization pool and the clock of background materialization. Built by
    :func:`build_entry` only."""

    key: EntryKey
    settings: TaskSettings
    paths: LocalPaths
    resolver: StoreResolver
    uploader: CountingUploader
    writer: BatchingChangelogWriter
    backend: KeyedStateBackend
    lock: threading.Lock = field(default_factory=threading.Lock)
    clock: Clock = field(default_factory=SystemClock)
    pool: MaterializationPool = field(default_factory=process_pool)
    _held: BucketLocks | None = field(default=None, repr=False)
    _held_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.backend.on_restore_finished(self.release_held_locks)

    def take_locks(self) -> BucketLocks:
        """The range's bucket locks: those the entry holds for a background restore, or
        newly acquired (blocking until no other process holds them)."""
        with self._held_lock:
            held, self._held = self._held, None
        if held is not None:
            return held
        locks = BucketLocks(self.paths.locks, self.backend.bucket_range)
        locks.acquire()
        return locks

    def hold_locks(self, locks: BucketLocks) -> None:
        """A task is done with ``locks``: keep them while the backend still restores in
        the background (released when that restore finishes), else release them."""
        with self._held_lock:
            if self.backend.restore_pending():
                self._held = locks
                return
        locks.release()

    def release_held_locks(self) -> None:
        """Release the locks kept for a background restore (when it finished)."""
        with self._held_lock:
            held, self._held = self._held, None
        if held is not None:
            held.release()

    def abandon(self) -> None:
        """Stop the backend's background restore and release the locks kept for it (the
        entry is dropped: a failed task, a newer attempt, a shutdown)."""
        self.backend.close_restore()
        self.release_held_locks()


def local_paths(barrier: Barrier) -> LocalPaths:
    """The executor-local directory of the barrier's job."""
    return LocalPaths(resolve_local_dir(barrier.local_dir) / validate_id("job id", barrier.job_id))


def entry_key(barrier: Barrier, paths: LocalPaths, owned: range) -> EntryKey:
    """The key of the entry of ``barrier``'s attempt for buckets ``owned`` in ``paths``."""
    return (str(paths.job), barrier.root, barrier.job_id, barrier.epoch, owned.start, owned.stop)


def attempt_uploader(
    resolver: StoreResolver,
    barrier: Barrier,
    settings: UploaderSettings,
    *,
    clock: Clock | None = None,
) -> HedgingUploader:
    """A new uploader of ``barrier``'s attempt: its segment names go under
    ``changelog/<epoch>/`` of the job; ``clock`` drives hedging, timeouts and retry
    delays (the system clock by default)."""
    root, job_id, epoch = barrier.root, barrier.job_id, barrier.epoch
    return HedgingUploader(
        resolver, lambda: new_segment_uri(root, job_id, epoch), settings, clock=clock
    )


def build_entry(
    barrier: Barrier,
    owned: range,
    *,
    paths: LocalPaths,
    resolver: StoreResolver,
    uploader: HedgingUploader,
    store: KVStore,
    clock: Clock | None = None,
    pool: MaterializationPool | None = None,
) -> ExecutorEntry:
    """Assemble the entry of ``barrier``'s attempt for buckets ``owned``: a counting
    uploader over ``uploader`` (the attempt's), a changelog writer and a keyed backend
    over ``store``, tuned by ``barrier.settings``. ``clock`` and ``pool`` drive background
    materialization (default: the system clock and this process's pool)."""
    settings = barrier.settings
    counting = CountingUploader(uploader)
    writer = BatchingChangelogWriter(owned, counting, settings.writer)
    backend = KeyedStateBackend(owned, barrier.num_buckets, store, writer)
    return ExecutorEntry(
        key=entry_key(barrier, paths, owned),
        settings=settings,
        paths=paths,
        resolver=resolver,
        uploader=counting,
        writer=writer,
        backend=backend,
        clock=clock or SystemClock(),
        pool=pool or process_pool(),
    )
