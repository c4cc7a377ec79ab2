"""Restore buckets in the background while tasks run (docs/architecture.md §6.1).

A restore that rebuilds every bucket before the first change is bounded by bandwidth:
with gigabytes of state the first batch waits for all of it. A
:class:`BackgroundRestore` instead rebuilds the buckets of a range on a few threads of
its own and lets the task start at once; whoever touches a bucket first waits for that
bucket only:

* a bucket is *usable* only once it is complete: snapshot loaded, changelog replayed to
  the checkpoint's seq, lineage metadata ``(seq, token)`` set and committed -- exactly
  what :func:`~gic_runtime.state.restore.restore_buckets` does for it eagerly;
* a task that knows which buckets its input touches (the stage has each row's bucket
  before processing) names them when the restore starts (``priority``) or later
  (:meth:`BackgroundRestore.prioritize`): they move to the front of the pending queue,
  in range order among themselves (a plan in range order reads neighbouring buckets'
  sections of one segment object as one read);
* a worker restores a *run*: every pending bucket no other run covers, in queue order,
  through one fetch plan (:func:`~gic_runtime.state.restore.plan_restore`) reading ahead
  across all of them on ``run_fetch_threads`` threads -- the eager restore's plan, with
  the task's buckets first -- claiming each bucket only right before applying it (a bucket a
  task claimed meanwhile is skipped); a reorder stops the run after the bucket it is
  applying, and the worker plans a new one in the new order;
* :meth:`BackgroundRestore.ensure` returns at once for a complete bucket; waits for
  one a thread is restoring, or one a run will reach that a task named; and restores
  any other bucket nobody started *on the calling thread*, with the pending buckets
  queued right after it that no run covers as one group (first come, first served:
  every bucket is restored by exactly one thread, once);
* a failure is kept per bucket and raised, as a :class:`~gic_runtime.errors.RestoreError`
  naming the bucket and the cause, to every caller that needs that bucket and by
  :meth:`BackgroundRestore.check`; a failed bucket is never reported complete, its
  metadata stays absent, so nothing ever reads it as (empty) state;
* :meth:`BackgroundRestore.close` cancels the buckets not started and waits for the
  runs in progress to stop (each stops after the bucket it is applying); a cancelled
  bucket is left without metadata and is rebuilt by whoever needs it next.

What is fetched and held at once is bounded by the settings, not by the state's size:
``parallel`` runs, each through a :class:`~gic_runtime.state.fetch.RestoreFetcher`
holding about ``run_ahead + 1`` windows of ``window_bytes``, plus a task thread's group
holding about two (one snapshot larger than a window is a window of its own: one
bucket's snapshot, state / buckets; docs/operations.md states the bound).

Thread-safety: every public method may be called from any thread. A bucket's store
writes happen on the one thread restoring it, which commits its own transactions
(:meth:`KVStore.flush` commits the calling thread's writes) before the bucket is
reported complete; no other thread touches a bucket before that.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Final

from gic_runtime.errors import ConfigurationError, GICError, RestoreError, StateError
from gic_runtime.handles import BucketState
from gic_runtime.state.fetch import ChangeReader, FetchSettings
from gic_runtime.state.restore import (
    RestoreStats,
    apply_bucket,
    check_state,
    plan_restore,
    restore_buckets,
    stored_bytes,
)
from gic_runtime.state.stores import KVStore
from gic_runtime.storage.uri import StoreResolver

__all__ = [
    "BackgroundRestore",
    "BackgroundRestoreSettings",
    "RestoreProgress",
]

_log = logging.getLogger(__name__)
_MiB: Final = 1024 * 1024


@dataclass(frozen=True, slots=True)
class BackgroundRestoreSettings:
    """How a task's range is restored from storage. Immutable."""

    background: bool = True
    """Restore in the background and let each access wait for its bucket only; False:
    rebuild every bucket before the task's processing starts (the eager restore)."""

    eager_when_all_touched: bool = True
    """A task naming every bucket to rebuild is restored eagerly, before it processes
    (:meth:`~gic_runtime.state.backend.KeyedStateBackend.restore`)."""

    select_keys: bool = False
    """A task that names every state key its batch reads (GIC's aggregates), on buckets
    it would have to rebuild with no restore running, reads just those keys from
    storage and runs at once; the buckets are restored to the lineage its checkpoint
    produced, in the background, once that checkpoint is durable (docs/architecture.md
    §6.3)."""

    parallel: int = 2
    """Runs at once: a run takes every pending bucket no other run covers, so one run
    usually restores the whole range and a second starts only with buckets a first
    left (a run stops when a task reorders the queue and is planned anew)."""

    group_buckets: int = 4
    """Pending buckets (consecutive in queue order, outside any run) a task thread
    restores with the bucket it needs and nobody started."""

    fetch_threads: int = 4
    """Reads a task thread's own group runs at once."""

    run_fetch_threads: int = 16
    """Reads a run keeps going at once (the eager restore's plan has eight: a run shares
    the process with the task's processing, which delays each thread between its reads,
    so it keeps more of them going to keep the link busy)."""

    run_ahead: int = 2
    """Windows a run fetches beyond the one it applies (the eager plan: one)."""

    window_bytes: int = 16 * _MiB
    """Fetched bytes per window of a fetch plan (about two windows are held)."""

    def __post_init__(self) -> None:
        if (
            min(
                self.parallel,
                self.group_buckets,
                self.fetch_threads,
                self.run_fetch_threads,
                self.window_bytes,
            )
            < 1
            or self.run_ahead < 0
        ):
            raise ConfigurationError(
                "background restore needs parallel, group_buckets, fetch_threads, "
                "run_fetch_threads and window_bytes >= 1 and run_ahead >= 0; got "
                f"{self.parallel}, {self.group_buckets}, {self.fetch_threads}, "
                f"{self.run_fetch_threads}, {self.window_bytes}, {self.run_ahead}"
            )

    @property
    def fetch(self) -> FetchSettings:
        return FetchSettings(threads=self.fetch_threads, window_bytes=self.window_bytes)

    @property
    def run_fetch(self) -> FetchSettings:
        """Reads of a run: ``run_fetch_threads`` at once, windows of ``window_bytes``."""
        return FetchSettings(
            threads=self.run_fetch_threads, window_bytes=self.window_bytes, ahead=self.run_ahead
        )


class _Status(Enum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class RestoreProgress:
    """How far a background restore got: buckets and stored bytes complete out of the
    total, buckets failed, changes replayed and snapshot entries loaded so far."""

    total: int
    done: int
    failed: int
    bytes_total: int
    bytes_done: int
    replayed: int
    snapshot_entries: int
    seconds: float

    @property
    def finished(self) -> bool:
        return self.done + self.failed >= self.total


class _CancelledError(Exception):
    """Raised inside a worker's restore to stop it after the bucket just applied."""


class BackgroundRestore:
    """Restores ``states`` (distinct buckets, every check on their handles done here,
    before anything starts) into ``store`` in the background; see the module docstring.

    ``on_finished`` is called once, on the thread that completed the last bucket, when
    every bucket is complete or failed (not after :meth:`close`).
    """

    def __init__(
        self,
        store: KVStore,
        states: Sequence[BucketState],
        resolver: StoreResolver,
        settings: BackgroundRestoreSettings,
        *,
        reader: ChangeReader | None = None,
        on_finished: Callable[[BackgroundRestore], None] | None = None,
        name: str = "",
        priority: Iterable[int] = (),
    ) -> None:
        seen: set[int] = set()
        for state in states:
            if state.bucket in seen:
                raise RestoreError(f"bucket {state.bucket} is given twice in one restore")
            seen.add(state.bucket)
            check_state(state)
        self._store = store
        self._resolver = resolver
        self._settings = settings
        self._reader = reader
        self._on_finished = on_finished
        self._name = name
        self._targets = {s.bucket: s for s in states}
        self._queue = [s.bucket for s in states]  # pending, in order
        self._status = dict.fromkeys(self._queue, _Status.PENDING)
        self._errors: dict[int, BaseException] = {}
        self._bytes = {s.bucket: stored_bytes(s) for s in states}
        self._bytes_done = 0
        self._replayed = 0
        self._entries = 0
        self._started = time.monotonic()
        self._ended: float | None = None
        self._cond = threading.Condition()
        self._closed = False
        self._planned: set[int] = set()  # pending buckets a running run covers
        self._priority: set[int] = set()  # buckets a task named (prioritize)
        self._version = 0  # bumped whenever the queue is reordered
        self._notified = False
        self._settled = threading.Event()
        self.ready: frozenset[int] = frozenset()
        """Buckets complete so far (replaced, never mutated: cheap to read anywhere)."""
        self._reorder(priority)  # before any worker starts: the first claims take them
        workers = min(settings.parallel, len(states))
        self._threads = [
            threading.Thread(target=self._work, name=f"gic-restore-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()
        if not states:
            self._finish_if_done()

    # --- what tasks ask -----------------------------------------------------------------

    def target(self, bucket: int) -> BucketState | None:
        """The state ``bucket`` is being restored to (``None``: not part of this restore)."""
        return self._targets.get(bucket)

    def buckets(self) -> frozenset[int]:
        return frozenset(self._targets)

    def outstanding(self) -> frozenset[int]:
        """Buckets pending or in progress (neither complete, failed nor cancelled)."""
        with self._cond:
            return frozenset(
                b for b, s in self._status.items() if s in (_Status.PENDING, _Status.RUNNING)
            )

    def failed(self) -> bool:
        with self._cond:
            return bool(self._errors)

    def ensure(self, bucket: int) -> None:
        """Return once ``bucket`` is complete: at once when it is (or is not part of this
        restore), after waiting when a worker restores it, after restoring it on this
        thread when nobody started it. Raises the bucket's RestoreError when it failed,
        StateError when the restore was closed before the bucket was restored."""
        if bucket in self.ready or bucket not in self._targets:
            return
        with self._cond:
            while True:
                status = self._status[bucket]
                if status is _Status.DONE:
                    return
                if status is _Status.FAILED:
                    raise self._error(bucket)
                if status is _Status.CANCELLED:
                    raise StateError(
                        f"bucket {bucket}: its background restore was cancelled before it "
                        "finished; the task must restore its range again"
                    )
                if status is _Status.PENDING and not (
                    bucket in self._planned and bucket in self._priority
                ):  # a run reaches the buckets the task named in the task's order: wait
                    group = self._claim(self._queue.index(bucket))
                    break
                self._cond.wait()
        self._restore(group)
        with self._cond:
            if self._status[bucket] is _Status.FAILED:
                raise self._error(bucket)

    def prioritize(self, buckets: Iterable[int]) -> None:
        """Move the pending ones of ``buckets`` (repeats and buckets not pending ignored)
        to the front of the queue, in range order (see :meth:`_reorder`): the run
        restores them first. Called by a task with the buckets its input touches."""
        with self._cond:
            self._reorder(buckets)
            self._cond.notify_all()

    def _reorder(self, buckets: Iterable[int]) -> None:
        """:meth:`prioritize` (``_cond`` held, or no worker started yet).

        The named buckets go first in range order, not in the order named: a fetch plan
        in range order reads the neighbouring sections one segment object holds for
        several buckets as one read, while out of order it reads the gaps between them
        too, or one read per section (measured: a run in a task's input order over every
        bucket took 1.5x the eager restore). A task's first batch needs the buckets it
        names before it can finish whichever order they come in."""
        pending = set(self._queue)
        first = sorted({b for b in buckets if b in pending})
        if first and first != self._queue[: len(first)]:
            moved = set(first)
            self._queue = first + [b for b in self._queue if b not in moved]
            self._priority |= moved
            self._version += 1  # a run planned in the old order stops and is planned anew

    def check(self) -> None:
        """Raise the first failed bucket's RestoreError, if any bucket failed."""
        with self._cond:
            if self._errors:
                raise self._error(min(self._errors))

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every bucket is complete or failed and ``on_finished`` returned
        (or the restore was closed); False on timeout."""
        return self._settled.wait(timeout)

    def progress(self) -> RestoreProgress:
        with self._cond:
            end = self._ended if self._ended is not None else time.monotonic()
            return RestoreProgress(
                total=len(self._targets),
                done=len(self.ready),
                failed=len(self._errors),
                bytes_total=sum(self._bytes.values()),
                bytes_done=self._bytes_done,
                replayed=self._replayed,
                snapshot_entries=self._entries,
                seconds=end - self._started,
            )

    def close(self) -> None:
        """Cancel the buckets not started and wait for the workers to stop (each stops
        after the bucket it is applying). Idempotent; a bucket a task thread is
        restoring itself is finished by that thread."""
        with self._cond:
            self._closed = True
            for bucket in self._queue:
                self._status[bucket] = _Status.CANCELLED
            self._queue.clear()
            self._cond.notify_all()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join()
        self._settled.set()

    # --- workers ------------------------------------------------------------------------

    def _work(self) -> None:
        """Restore runs until the queue is empty or the restore closed: a run is every
        pending bucket no other run covers, in queue order, with one fetch plan."""
        while True:
            with self._cond:
                while not self._closed and self._queue and not self._unplanned():
                    self._cond.wait()
                if self._closed or not self._queue:
                    return
                plan = self._unplanned()
                self._planned.update(plan)
                version = self._version
            try:
                self._run(plan, version)
            finally:
                with self._cond:
                    self._planned.difference_update(plan)
                    self._cond.notify_all()

    def _unplanned(self) -> list[int]:
        """Pending buckets no run covers, in queue order (``_cond`` held)."""
        return [b for b in self._queue if b not in self._planned]

    def _run(self, plan: list[int], version: int) -> None:
        """Restore ``plan`` in order on this thread through one fetch plan that reads
        ahead across it, claiming each bucket only right before applying it: a bucket a
        task claimed meanwhile is skipped. Stops when the restore closes, or when the
        queue was reordered (:meth:`prioritize`): the caller plans a new run then."""
        states = [self._targets[b] for b in plan]
        settings = self._settings.run_fetch
        with plan_restore(states, self._resolver, reader=self._reader, settings=settings) as f:
            for state in states:
                bucket = state.bucket
                with self._cond:
                    if self._closed or self._version != version:
                        return
                    if self._status[bucket] is not _Status.PENDING:
                        continue  # a task took it
                    self._queue.remove(bucket)
                    self._status[bucket] = _Status.RUNNING
                try:
                    stats = apply_bucket(self._store, state, f)
                except BaseException as exc:
                    self._flush()
                    self._settle([bucket], exc)
                    if not isinstance(exc, Exception):
                        raise
                    self._finish_if_done()
                    continue
                try:
                    self._applied(stats)
                except _CancelledError:
                    return
                finally:
                    self._finish_if_done()

    def _claim(self, at: int) -> list[int]:
        """Take the pending bucket at queue position ``at`` and the buckets queued right
        after it that no run covers (up to ``group_buckets``; none when a run covers the
        bucket itself) off the queue, as RUNNING (``_cond`` held)."""
        queue = self._queue
        group = [queue.pop(at)]
        if group[0] not in self._planned:
            while (
                at < len(queue)
                and len(group) < self._settings.group_buckets
                and queue[at] not in self._planned
            ):
                group.append(queue.pop(at))
        for bucket in group:
            self._status[bucket] = _Status.RUNNING
        return group

    def _restore(self, group: list[int]) -> None:
        """Restore ``group`` (claimed by a thread that needs its first bucket) on that
        thread."""
        states = [self._targets[b] for b in group]
        try:
            restore_buckets(
                self._store,
                states,
                self._resolver,
                reader=self._reader,
                settings=self._settings.fetch,
                on_applied=self._applied,
            )
        except _CancelledError:
            self._settle(group, None)
        except BaseException as exc:
            self._settle(group, exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._flush()
        self._finish_if_done()

    def _flush(self) -> None:
        """Commit this thread's writes (a failed bucket keeps no metadata)."""
        try:
            self._store.flush()
        except Exception as exc:  # the restore's own outcome matters more
            _log.warning("could not flush the local store after a restore: %s", exc)

    def _applied(self, stats: RestoreStats) -> None:
        with self._cond:
            bucket = stats.bucket
            self._status[bucket] = _Status.DONE
            self.ready = self.ready | {bucket}
            self._bytes_done += self._bytes[bucket]
            self._replayed += stats.replayed
            self._entries += stats.snapshot_entries
            self._cond.notify_all()
            if self._closed:
                raise _CancelledError

    def _settle(self, group: list[int], exc: BaseException | None) -> None:
        """Buckets of ``group`` not complete: failed with ``exc``, or cancelled."""
        with self._cond:
            for bucket in group:
                if self._status[bucket] is _Status.RUNNING:
                    if exc is None:
                        self._status[bucket] = _Status.CANCELLED
                    else:
                        self._status[bucket] = _Status.FAILED
                        self._errors[bucket] = exc
            self._cond.notify_all()
        if exc is not None:
            _log.error(
                "background restore%s of buckets %s failed: %s",
                f" of {self._name}" if self._name else "",
                group,
                exc,
            )

    def _finish_if_done(self) -> None:
        with self._cond:
            if self._notified or self._closed:
                return
            if any(s in (_Status.PENDING, _Status.RUNNING) for s in self._status.values()):
                return
            self._notified = True
            self._ended = time.monotonic()
        progress = self.progress()
        _log.info(
            "background restore%s: %d/%d buckets restored (%d failed), %d of %d bytes, "
            "%d changes replayed, in %.2f s",
            f" of {self._name}" if self._name else "",
            progress.done,
            progress.total,
            progress.failed,
            progress.bytes_done,
            progress.bytes_total,
            progress.replayed,
            progress.seconds,
        )
        try:
            if self._on_finished is not None:
                self._on_finished(self)
        finally:
            self._settled.set()

    def _error(self, bucket: int) -> BaseException:
        """The error of a failed bucket: the runtime's own error (it names the bucket or
        the object already), anything else as a RestoreError naming the bucket."""
        cause = self._errors[bucket]
        if isinstance(cause, GICError):
            return cause
        err = RestoreError(
            f"bucket {bucket}: background restore to seq {self._targets[bucket].seq} failed "
            f"({type(cause).__name__}: {cause}); the task cannot use this bucket's state"
        )
        err.__cause__ = cause
        return err
