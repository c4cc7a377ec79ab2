"""Periodic materialization of bucket snapshots, off the task's critical path.

Schedule: every bucket has a due time. Initial due times are spread over one interval
(a seeded shuffle of the buckets, one slot each, a random point inside the slot), so
buckets never all materialize at once; after each materialization the next is due one
interval later, +/- ``jitter``. At most one materialization per bucket is in flight, and
at most ``max_in_flight`` overall.

A materialization: on the caller's (task) thread, only take the bucket's consistent view
(:meth:`~gic_runtime.state.backend.KeyedStateBackend.materialization_view`); on the
background executor, encode the snapshot and upload it under a fresh name
(:func:`~gic_runtime.layout.new_snapshot_uri`, create-if-absent). Completions are queued
and applied to the backend (``on_materialized``) only inside :meth:`Materializer.poll`,
on the task thread that owns the backend. A completion whose bucket was restored to
another lineage meanwhile is discarded and its object deleted; so is a snapshot replaced
before any checkpoint captured it (no manifest can reference either).

Failures: a failed materialization is retried after ``retry_delay_s``; more than
``max_consecutive_failures`` failures in a row for one bucket raise
:class:`~gic_runtime.errors.MaterializationError` from ``poll``. State stays correct
without materialization (the changelog just grows), so a few failures are tolerated.

Cancellation: a job cancelled before it ran (``close(wait=False)`` on the executor this
materializer owns, or the owner of a shared executor shutting it down) closes its view
and is queued like any completion; ``poll`` then releases its bucket, counts it as
``cancelled`` (not a failure) and leaves the bucket due, so it starts again unless the
materializer is closed. A bucket is therefore never stuck in flight.

Thread-safety: every public method is for the task thread; the executor only runs the
upload jobs, which touch the view, the resolver and the completion queue.
"""

from __future__ import annotations

import logging
import queue
import random
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass

from gic_runtime.clock import Clock, SystemClock
from gic_runtime.errors import ConfigurationError, GICError, MaterializationError
from gic_runtime.handles import SnapshotHandle
from gic_runtime.layout import job_dir, new_snapshot_uri
from gic_runtime.state.backend import KeyedStateBackend, MaterializationView
from gic_runtime.state.snapshot import upload_snapshot
from gic_runtime.storage.uri import StoreResolver, join

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MaterializationSettings:
    """Tuning of :class:`Materializer`. Immutable."""

    interval_s: float = 120.0
    """Seconds between materializations of one bucket. Two minutes keeps a bucket's
    replay at restore to two minutes of changes while uploading each bucket's full state
    only 30 times an hour."""

    jitter: float = 0.2
    """Each next due time is ``interval_s * (1 +/- jitter)`` so buckets drift apart."""

    max_in_flight: int = 1
    """Materializations running at once (across buckets); one keeps the upload bandwidth
    left for changelog segments, which are on the checkpoint's critical path."""

    max_consecutive_failures: int = 3
    """Failures in a row of one bucket tolerated before ``poll`` raises."""

    retry_delay_s: float = 10.0
    """Seconds before a failed bucket is tried again."""

    compress: bool = True
    """zlib-compress snapshot bodies (msgpack state compresses well)."""

    seed: int | None = None
    """Seed of the jitter's random generator (``None``: nondeterministic)."""

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or not 0 <= self.jitter < 1 or self.max_in_flight < 1:
            raise ConfigurationError(
                "materialization needs interval_s > 0, 0 <= jitter < 1, max_in_flight >= 1; "
                f"got {self.interval_s}, {self.jitter}, {self.max_in_flight}"
            )


@dataclass(frozen=True, slots=True)
class MaterializationStats:
    """Progress counters since the materializer started."""

    materialized: int = 0
    """Snapshots applied to the backend."""
    bytes_uploaded: int = 0
    """Size of those snapshots."""
    failures: int = 0
    """Failed attempts (all buckets)."""
    skipped_unchanged: int = 0
    """Due buckets with no change since their snapshot (nothing uploaded)."""
    discarded: int = 0
    """Completed snapshots no longer useful (bucket restored or newer base)."""
    cancelled: int = 0
    """Jobs cancelled before they ran (executor shut down); their buckets were released."""
    unreferenced_deleted: int = 0
    """Snapshots deleted because no manifest can reference them (discarded, or replaced
    by a newer one before any checkpoint captured them)."""
    in_flight: int = 0


@dataclass(frozen=True, slots=True)
class _Outcome:
    bucket: int
    generation: int
    handle: SnapshotHandle | None
    error: BaseException | None
    cancelled: bool = False


class Materializer:
    """Schedules and runs materializations for one backend (see module docstring)."""

    def __init__(
        self,
        backend: KeyedStateBackend,
        resolver: StoreResolver,
        root: str,
        job_id: str,
        *,
        clock: Clock | None = None,
        settings: MaterializationSettings | None = None,
        executor: Executor | None = None,
    ) -> None:
        self._backend = backend
        self._resolver = resolver
        self._root = root
        self._job_id = job_id
        self._clock = clock or SystemClock()
        self._settings = s = settings or MaterializationSettings()
        self._owns_executor = executor is None
        self._executor = executor or ThreadPoolExecutor(1, thread_name_prefix="gic-materialize")
        self._rng = random.Random(s.seed)
        self._done: queue.SimpleQueue[_Outcome] = queue.SimpleQueue()
        self._in_flight: set[int] = set()
        self._closed = False
        self._failures: dict[int, int] = {}
        self._counts = dict.fromkeys(
            (
                "materialized",
                "bytes",
                "failures",
                "skipped",
                "discarded",
                "cancelled",
                "unreferenced_deleted",
            ),
            0,
        )
        buckets = list(backend.bucket_range)
        self._rng.shuffle(buckets)
        now = self._clock.monotonic()
        slot = s.interval_s / len(buckets)
        self._due = {b: now + slot * (k + self._rng.random()) for k, b in enumerate(buckets)}

    # --- inspection ------------------------------------------------------------------

    def due_at(self, bucket: int) -> float:
        """Monotonic time at which ``bucket`` is next due."""
        return self._due[bucket]

    def in_flight(self) -> frozenset[int]:
        """Buckets with a materialization running or awaiting ``poll``."""
        return frozenset(self._in_flight)

    @property
    def stats(self) -> MaterializationStats:
        c = self._counts
        return MaterializationStats(
            materialized=c["materialized"],
            bytes_uploaded=c["bytes"],
            failures=c["failures"],
            skipped_unchanged=c["skipped"],
            discarded=c["discarded"],
            cancelled=c["cancelled"],
            unreferenced_deleted=c["unreferenced_deleted"],
            in_flight=len(self._in_flight),
        )

    # --- driving ---------------------------------------------------------------------

    def poll(self) -> list[SnapshotHandle]:
        """Apply finished materializations to the backend, then start due ones.

        Returns the snapshots applied by this call. Raises MaterializationError when a
        bucket failed more than ``max_consecutive_failures`` times in a row.
        """
        applied = self._apply_completions()
        if not self._closed:
            self._start_due()
        return applied

    def close(self, *, wait: bool = True) -> None:
        """Start nothing new and stop the executor if this materializer created it
        (``wait`` lets running jobs finish; a later ``poll`` still applies them).

        Without ``wait``, jobs not yet started are cancelled; the next ``poll`` releases
        their buckets (see the module docstring)."""
        self._closed = True
        if self._owns_executor:
            self._executor.shutdown(wait=wait, cancel_futures=True)

    # --- internals -------------------------------------------------------------------

    def _next_due(self, now: float) -> float:
        s = self._settings
        return now + s.interval_s * (1 + self._rng.uniform(-s.jitter, s.jitter))

    def _apply_completions(self) -> list[SnapshotHandle]:
        applied: list[SnapshotHandle] = []
        failed: list[_Outcome] = []
        garbage: list[SnapshotHandle] = []
        while True:
            try:
                outcome = self._done.get_nowait()
            except queue.Empty:
                break
            bucket = outcome.bucket
            self._in_flight.discard(bucket)
            if outcome.cancelled:
                self._counts["cancelled"] += 1  # still due: starts again unless closed
                continue
            now = self._clock.monotonic()
            if outcome.error is not None or outcome.handle is None:
                self._counts["failures"] += 1
                self._failures[bucket] = self._failures.get(bucket, 0) + 1
                self._due[bucket] = now + self._settings.retry_delay_s
                if self._failures[bucket] > self._settings.max_consecutive_failures:
                    failed.append(outcome)
                continue
            self._failures[bucket] = 0
            self._due[bucket] = self._next_due(now)
            handle = outcome.handle
            if self._backend.generation(bucket) != outcome.generation or not (
                self._backend.on_materialized(bucket, handle)
            ):
                self._counts["discarded"] += 1
                garbage.append(handle)
                continue
            self._counts["materialized"] += 1
            self._counts["bytes"] += handle.size
            applied.append(handle)
        garbage.extend(self._backend.take_unreferenced_snapshots())
        if garbage:
            self._delete_unreferenced(garbage)
        if failed:
            first = failed[0]
            raise MaterializationError(
                f"materialization of bucket {first.bucket} failed "
                f"{self._failures[first.bucket]} times in a row (tolerance "
                f"{self._settings.max_consecutive_failures}); last error: {first.error}; "
                "check the snapshot storage is reachable and writable"
            ) from first.error
        return applied

    def _delete_unreferenced(self, handles: list[SnapshotHandle]) -> None:
        """Delete snapshots no manifest can reference (discarded results, or replaced
        before any checkpoint captured them), off the task thread. Only objects under
        the job's own snapshot directory; a failure leaves them to the orphan sweep."""
        prefix = join(job_dir(self._root, self._job_id), "snapshots") + "/"
        uris = [h.uri for h in handles if h.uri.startswith(prefix)]
        if not uris or self._closed:
            return
        self._counts["unreferenced_deleted"] += len(uris)

        def delete() -> None:
            for uri in uris:
                try:
                    store, key = self._resolver.resolve(uri)
                    store.delete_many([key])
                except GICError as exc:  # the sweep collects what is left
                    _log.warning("could not delete unreferenced snapshot %s: %s", uri, exc)

        self._executor.submit(delete)

    def _start_due(self) -> None:
        now = self._clock.monotonic()
        s = self._settings
        for bucket in sorted(self._due, key=self._due.__getitem__):
            if len(self._in_flight) >= s.max_in_flight or self._due[bucket] > now:
                break
            if bucket in self._in_flight:
                continue
            snapshot = self._backend.snapshot_of(bucket)
            base = snapshot.seq if snapshot is not None else 0
            if self._backend.seq(bucket) == base:
                self._counts["skipped"] += 1
                self._due[bucket] = self._next_due(now)
                continue
            view = self._backend.materialization_view(bucket)
            uri = new_snapshot_uri(self._root, self._job_id, bucket)
            self._in_flight.add(bucket)
            try:
                future = self._executor.submit(self._run, view, uri)
            except BaseException:
                view.view.close()
                self._in_flight.discard(bucket)
                raise
            future.add_done_callback(self._make_reporter(view))

    def _run(self, view: MaterializationView, uri: str) -> SnapshotHandle:
        with view.view as items:
            return upload_snapshot(
                self._resolver,
                uri,
                items,
                bucket=view.bucket,
                seq=view.seq,
                compress=self._settings.compress,
            )

    def _make_reporter(self, view: MaterializationView) -> _Reporter:
        return _Reporter(self._done, view)


class _Reporter:
    """Done-callback that queues a job's outcome for the task thread.

    Runs on whichever thread completes or cancels the future. A cancelled job never ran,
    so its view is closed here (releasing e.g. an LMDB read transaction) and a cancelled
    outcome is queued so the task thread releases the bucket.
    """

    def __init__(self, done: queue.SimpleQueue[_Outcome], view: MaterializationView) -> None:
        self._done = done
        self._view = view

    def __call__(self, future: Future[SnapshotHandle]) -> None:
        bucket, generation = self._view.bucket, self._view.generation
        if future.cancelled():
            self._view.view.close()
            self._done.put(_Outcome(bucket, generation, None, None, cancelled=True))
            return
        error = future.exception()
        handle = None if error is not None else future.result()
        self._done.put(_Outcome(bucket, generation, handle, error))
