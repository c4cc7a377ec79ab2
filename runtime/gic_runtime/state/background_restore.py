"""Restore buckets in the background while tasks run (docs/architecture.md §6.1).

A restore that rebuilds every bucket before the first change is bounded by bandwidth:
with gigabytes of state the first batch waits for all of it. A
:class:`BackgroundRestore` instead rebuilds the buckets of a range on a few threads of
its own and lets the task start at once; whoever touches a bucket first waits for that
bucket only:

* a bucket is *usable* only once it is complete: snapshot loaded, changelog replayed to
  the checkpoint's seq, lineage metadata ``(seq, token)`` set and committed -- exactly
  what :func:`~gic_runtime.state.restore.restore_buckets` does for it eagerly;
* :meth:`BackgroundRestore.ensure` returns at once for a complete bucket, waits for one
  a worker is restoring, and restores a bucket nobody has started *on the calling
  thread*, with the pending buckets right after it as one group (first come, first
  served: every bucket is restored by exactly one thread, once);
* a task that knows which buckets its input touches (the stage has each row's bucket
  before processing) names them, in input order, when the restore starts (``priority``)
  or later (:meth:`BackgroundRestore.prioritize`): they move to the front of the
  pending queue, and the next free worker takes all of them as one *run*, restored in
  that order with one fetch plan that reads ahead across the whole run on
  ``run_fetch_threads`` threads -- the eager restore's plan over just those buckets --
  while the task processes each bucket as soon as it is complete;
* while a task processes (between :meth:`BackgroundRestore.processing_started` and
  :meth:`BackgroundRestore.processing_ended`) the workers keep running: every worker
  restores prioritized buckets, at most ``processing_parallel`` of them restore
  buckets the task did not ask for (restoring is mostly CPU, decoding and applying,
  which the task's own processing needs too); between batches all ``parallel`` do;
* otherwise workers take the pending buckets in queue order, a *group* of up to
  ``group_buckets`` at a time (one :func:`~gic_runtime.state.restore.restore_buckets`
  call: one fetch plan whose reads run ahead across the whole group and whose sections
  of one segment object, for several buckets, are read together); a thread that needs
  a pending bucket claims it with the buckets queued right after it (the next ones its
  input touches, once prioritized);
* a failure is kept per bucket and raised, as a :class:`~gic_runtime.errors.RestoreError`
  naming the bucket and the cause, to every caller that needs that bucket and by
  :meth:`BackgroundRestore.check`; a failed bucket is never reported complete, its
  metadata stays absent, so nothing ever reads it as (empty) state;
* :meth:`BackgroundRestore.close` cancels the buckets not started and waits for the
  groups in progress to stop (each stops after the bucket it is applying); a cancelled
  bucket is left without metadata and is rebuilt by whoever needs it next.

What is fetched and held at once is bounded by the settings, not by the state's size:
``parallel`` workers plus the task thread, each through a
:class:`~gic_runtime.state.fetch.RestoreFetcher` holding about two windows of
``window_bytes`` (one snapshot larger than a window is a window of its own: one
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
from gic_runtime.state.fetch import ChangeReader, FetchSettings, RestoreFetcher
from gic_runtime.state.restore import (
    RestoreStats,
    apply_planned,
    check_state,
    plan_restore,
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

    parallel: int = 2
    """Groups of buckets restored at once by the background workers (a task touching a
    bucket nobody started restores it itself, on top of these)."""

    group_buckets: int = 4
    """Buckets (consecutive in queue order) one thread restores with one coalesced fetch
    plan that reads ahead across them."""

    processing_parallel: int = 1
    """Workers that may restore buckets the running task did not ask for while it
    processes (0: none; those wait for the end of the batch). Buckets the task's input
    touches are restored by all ``parallel`` workers at any time."""

    fetch_threads: int = 4
    """Reads one group runs at once."""

    run_fetch_threads: int = 8
    """Reads at once of a worker's *run*: every pending bucket a task asked for
    (:meth:`BackgroundRestore.prioritize`), in the task's order, restored by one worker
    with one fetch plan that reads ahead across all of them (the eager restore's plan,
    whose eight threads it matches)."""

    window_bytes: int = 16 * _MiB
    """Fetched bytes per window of one group's plan (about two windows are held)."""

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
            or self.processing_parallel < 0
        ):
            raise ConfigurationError(
                "background restore needs parallel, group_buckets, fetch_threads, "
                "run_fetch_threads and window_bytes >= 1 and processing_parallel >= 0; got "
                f"{self.parallel}, {self.group_buckets}, {self.fetch_threads}, "
                f"{self.run_fetch_threads}, {self.window_bytes}, {self.processing_parallel}"
            )

    @property
    def fetch(self) -> FetchSettings:
        return FetchSettings(threads=self.fetch_threads, window_bytes=self.window_bytes)

    @property
    def run_fetch(self) -> FetchSettings:
        """Reads of a worker's run over the buckets a task asked for: as many threads as
        the eager restore's plan, windows of ``window_bytes``."""
        return FetchSettings(
            threads=max(self.fetch_threads, self.run_fetch_threads), window_bytes=self.window_bytes
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


@dataclass(slots=True)
class _Job:
    """A claimed group: its buckets in apply order, whether a task asked for them (a
    worker's run) and the fetcher planned for them."""

    group: list[int]
    asked: bool
    fetcher: RestoreFetcher | None


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
        self._processing = 0
        self._priority: set[int] = set()  # pending buckets a running task asked for
        self._unasked = 0  # workers restoring a group no task asked for
        self._notified = False
        self._settled = threading.Event()
        self.ready: frozenset[int] = frozenset()
        """Buckets complete so far (replaced, never mutated: cheap to read anywhere)."""
        self._reorder(priority)  # before any worker starts: the first claims take them
        workers = min(settings.parallel, -(-len(states) // settings.group_buckets))
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
                if status is _Status.PENDING:
                    group = self._claim(self._queue.index(bucket))
                    break
                self._cond.wait()
        self._restore(group)
        with self._cond:
            if self._status[bucket] is _Status.FAILED:
                raise self._error(bucket)

    def prioritize(self, buckets: Iterable[int]) -> None:
        """Move the pending ones of ``buckets`` (in the order given, repeats and buckets
        not pending ignored) to the front of the queue: workers and claims take them
        first. Called by a task with the buckets its input touches, in input order."""
        with self._cond:
            self._reorder(buckets)
            self._cond.notify_all()

    def _reorder(self, buckets: Iterable[int]) -> None:
        """:meth:`prioritize` (``_cond`` held, or no worker started yet)."""
        pending = set(self._queue)
        first: list[int] = []
        for bucket in buckets:
            if bucket in pending:
                pending.discard(bucket)
                first.append(bucket)
        if first:
            moved = set(first)
            self._queue = first + [b for b in self._queue if b not in moved]
            self._priority |= moved

    def processing_started(self) -> None:
        """A task processes until :meth:`processing_ended` (each start needs one end):
        at most ``processing_parallel`` workers start groups the task did not ask for
        (:meth:`prioritize`); groups in progress finish."""
        with self._cond:
            self._processing += 1

    def processing_ended(self) -> None:
        with self._cond:
            self._processing = max(0, self._processing - 1)
            if not self._processing:
                self._priority.clear()
            self._cond.notify_all()

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
        """Restore groups until the queue is empty or the restore closed, claiming the
        next group (and starting its reads) before applying the current one, so a
        worker's fetches run ahead across groups as the eager plan's do."""
        job = self._next_job(wait=True)
        while job is not None:
            ahead = self._next_job(wait=False)
            self._run(job)
            if ahead is not None and self._closed:
                self._drop(ahead)
                return
            job = ahead if ahead is not None else self._next_job(wait=True)

    def _next_job(self, *, wait: bool) -> _Job | None:
        """Claim the queue's first group (waiting while workers may not start one when
        ``wait``) and start its reads; ``None``: nothing to claim now."""
        with self._cond:
            while wait and not self._closed and self._queue and not self._may_start():
                self._cond.wait()
            if self._closed or not self._queue or not self._may_start():
                return None
            asked = self._queue[0] in self._priority
            group = self._claim(0, run=asked)
            if not asked:
                self._unasked += 1
        job = _Job(group, asked, None)
        try:
            job.fetcher = self._plan(group, run=asked)
            job.fetcher.prefetch()
        except BaseException as exc:  # the checks ran before: nothing is expected here
            self._finish(job, exc)
            if not isinstance(exc, Exception):
                raise
            return None
        return job

    def _plan(self, group: list[int], *, run: bool) -> RestoreFetcher:
        settings = self._settings.run_fetch if run else self._settings.fetch
        states = [self._targets[b] for b in group]
        return plan_restore(states, self._resolver, reader=self._reader, settings=settings)

    def _drop(self, job: _Job) -> None:
        """A claimed group not applied (the restore closed): cancelled."""
        self._finish(job, None)

    def _may_start(self) -> bool:
        """Whether a worker may claim the queue's first group now (``_cond`` held)."""
        if not self._processing or self._queue[0] in self._priority:
            return True
        return self._unasked < self._settings.processing_parallel

    def _claim(self, at: int, *, run: bool = False) -> list[int]:
        """Take the pending bucket at queue position ``at`` and the buckets queued right
        after it (up to ``group_buckets``, or every one a task asked for when ``run``;
        those a task asked for only with one it asked for, and the others only with one
        it did not) off the queue, as RUNNING (``_cond`` held)."""
        queue = self._queue
        group = [queue.pop(at)]
        asked = group[0] in self._priority
        limit = len(queue) + 1 if run else self._settings.group_buckets
        while at < len(queue) and len(group) < limit and (queue[at] in self._priority) == asked:
            group.append(queue.pop(at))
        for bucket in group:
            self._status[bucket] = _Status.RUNNING
            self._priority.discard(bucket)
        return group

    def _restore(self, group: list[int]) -> None:
        """Restore ``group``, claimed by a thread that needs its first bucket, on that
        thread (not a worker's: ``asked``, outside the count of unasked groups)."""
        job = _Job(group, True, None)
        try:
            job.fetcher = self._plan(group, run=False)
        except BaseException as exc:  # the checks ran before: nothing is expected here
            self._finish(job, exc)
            if not isinstance(exc, Exception):
                raise
            return
        self._run(job)

    def _run(self, job: _Job) -> None:
        """Apply ``job``'s group from its fetcher on this thread, then settle it."""
        assert job.fetcher is not None
        states = [self._targets[b] for b in job.group]
        error: BaseException | None = None
        try:
            apply_planned(self._store, states, job.fetcher, on_applied=self._applied)
        except _CancelledError:
            pass
        except BaseException as exc:
            error = exc
        self._finish(job, error)
        if error is not None and not isinstance(error, Exception):
            raise error

    def _finish(self, job: _Job, error: BaseException | None) -> None:
        """Close ``job``'s fetcher, commit this thread's writes (a failed bucket keeps no
        metadata), settle the buckets not complete (failed with ``error``, or cancelled)
        and report the end when it was the last."""
        try:
            if job.fetcher is not None:
                job.fetcher.close()
        finally:
            try:
                self._store.flush()
            except Exception as exc:  # the restore's own outcome matters more
                _log.warning("could not flush the local store after a restore: %s", exc)
            self._settle(job.group, error)
            if not job.asked:
                with self._cond:
                    self._unasked -= 1
                    self._cond.notify_all()
        self._finish_if_done()

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
