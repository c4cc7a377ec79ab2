"""Materialization of bucket snapshots, off the task's critical path.

Schedule (docs/architecture.md §7): a bucket is due by *time* or by *growth*.

* Time: every bucket has a due time. Initial due times are spread over one interval (a
  seeded shuffle of the buckets, one slot each, a random point inside the slot), so
  buckets never all materialize at once; after each materialization the next is due one
  interval later, +/- ``jitter``.
* Growth: whatever its due time, a bucket whose changelog since its base reached
  ``max_sections`` handles or ``changelog_ratio`` x its snapshot's size in bytes (at
  least ``changelog_floor_bytes``) is due (:mod:`~gic_runtime.materialization.growth`;
  measured on the handles of the newest persisted checkpoint, ``changelog_since_base``).

Jobs: at most one materialization per bucket is in flight. Keeping up with growth (the
rule of docs/architecture.md §7): growth-due buckets are served by a *growth job* that
takes all of them, highest growth pressure (furthest over a limit) first, and snapshots
them one after the other; one growth job runs at a time, and it does not wait for a
``max_in_flight`` slot (its own lane). Time-due buckets start one bucket per job, in
due-time order, while fewer than ``max_in_flight`` jobs (growth job included) run. So
at most ``max_in_flight`` + 1 snapshots upload at once, and when every bucket gains a
section per checkpoint, a bucket that reached the section limit is taken by the next
growth job: its count exceeds the limit by at most the checkpoints until the running
growth job ends plus those its own job takes before reaching it.

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
upload jobs, which touch their views, the resolver and the completion queue.
"""

from __future__ import annotations

import itertools
import logging
import queue
import random
from collections.abc import Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass

from gic_runtime.clock import Clock, SystemClock
from gic_runtime.errors import ConfigurationError, GICError, MaterializationError
from gic_runtime.handles import SnapshotHandle
from gic_runtime.layout import job_dir, new_snapshot_uri
from gic_runtime.materialization.growth import growth_pressure
from gic_runtime.materialization.jobs import Job, Outcome
from gic_runtime.state.backend import KeyedStateBackend, MaterializationView
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
    """Materialization jobs running at once for time-due buckets (across buckets; a job
    uploads one snapshot at a time; a growth job counts, and runs even when they are
    taken); one keeps the upload bandwidth left for changelog segments, which are on the
    checkpoint's critical path."""

    max_sections: int = 32
    """Changelog handles since its base that make a bucket due whatever its interval.
    Restore reads about one object per handle of the busiest bucket plus one snapshot per
    bucket, and every handle is a row of every manifest: 32 keeps a task's restore to a
    few dozen reads and manifests small, while a bucket whose every checkpoint adds a
    section is snapshotted about once per 32 checkpoints (~3 % of the state each)."""

    changelog_ratio: float = 1.0
    """Changelog bytes since its base, as a multiple of its snapshot's size, that make a
    bucket due: at 1.0 a restore reads at most about twice the bucket's snapshot and
    replays at most about a snapshot's worth of changes."""

    changelog_floor_bytes: int = 1024 * 1024
    """The byte limit is never below this (and is this without a snapshot), so tiny
    buckets are not snapshotted after every few changes."""

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
        if (
            self.max_sections < 1
            or not self.changelog_ratio > 0
            or self.changelog_ratio == float("inf")
            or self.changelog_floor_bytes < 1
        ):
            raise ConfigurationError(
                "materialization needs max_sections >= 1, a finite changelog_ratio > 0 and "
                f"changelog_floor_bytes >= 1; got {self.max_sections}, "
                f"{self.changelog_ratio}, {self.changelog_floor_bytes}"
            )


@dataclass(frozen=True, slots=True)
class MaterializationStats:
    """Progress counters since the materializer started."""

    materialized: int = 0
    """Snapshots applied to the backend."""
    started_by_growth: int = 0
    """Buckets started because of changelog growth (not their due time)."""
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
        self._done: queue.SimpleQueue[Outcome] = queue.SimpleQueue()
        self._in_flight: dict[int, int] = {}  # bucket -> id of the job that snapshots it
        self._job_ids = itertools.count()
        self._growth_job = -1  # id of the newest growth job
        self._retry_at: dict[int, float] = {}  # growth waits here after a failure
        self._closed = False
        self._failures: dict[int, int] = {}
        self._counts = dict.fromkeys(
            (
                "materialized",
                "growth",
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
        """Buckets with a materialization running, queued in a job or awaiting ``poll``."""
        return frozenset(self._in_flight)

    def jobs_in_flight(self) -> int:
        """Jobs with a bucket in :meth:`in_flight` (growth job included)."""
        return len(set(self._in_flight.values()))

    def growth_pressure(self, bucket: int) -> float:
        """``bucket``'s changelog growth since its base (>= 1: due by growth; see
        :func:`~gic_runtime.materialization.growth.growth_pressure`)."""
        snapshot = self._backend.snapshot_of(bucket)
        return growth_pressure(
            self._backend.changelog_since_base(bucket),
            snapshot.seq if snapshot is not None else 0,
            snapshot.size if snapshot is not None else None,
            self._settings,
        )

    @property
    def stats(self) -> MaterializationStats:
        c = self._counts
        return MaterializationStats(
            materialized=c["materialized"],
            started_by_growth=c["growth"],
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
        failed: list[Outcome] = []
        garbage: list[SnapshotHandle] = []
        while True:
            try:
                outcome = self._done.get_nowait()
            except queue.Empty:
                break
            bucket = outcome.bucket
            self._in_flight.pop(bucket, None)
            if outcome.cancelled:
                self._counts["cancelled"] += 1  # still due: starts again unless closed
                continue
            now = self._clock.monotonic()
            if outcome.error is not None or outcome.handle is None:
                self._counts["failures"] += 1
                self._failures[bucket] = self._failures.get(bucket, 0) + 1
                self._due[bucket] = self._retry_at[bucket] = now + self._settings.retry_delay_s
                if self._failures[bucket] > self._settings.max_consecutive_failures:
                    failed.append(outcome)
                continue
            self._failures[bucket] = 0
            self._retry_at.pop(bucket, None)
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
        """Start a growth job unless one runs, then time-due buckets while fewer than
        ``max_in_flight`` jobs run."""
        now = self._clock.monotonic()
        s = self._settings
        running = self.jobs_in_flight()
        if self._growth_job not in self._in_flight.values():
            urgent = self._growth_due(now)
            if urgent:
                self._counts["growth"] += len(urgent)
                self._growth_job = self._start(urgent)
                running += 1
        for bucket in sorted(self._due, key=self._due.__getitem__):
            if running >= s.max_in_flight or self._due[bucket] > now:
                break
            if bucket in self._in_flight:
                continue
            snapshot = self._backend.snapshot_of(bucket)
            base = snapshot.seq if snapshot is not None else 0
            if self._backend.seq(bucket) == base:
                self._counts["skipped"] += 1
                self._due[bucket] = self._next_due(now)
                continue
            self._start([bucket])
            running += 1

    def _growth_due(self, now: float) -> list[int]:
        """Buckets due by growth, not in flight nor waiting after a failure, with changes
        since their base; highest pressure first (ties: lower bucket first)."""
        ranked: list[tuple[float, int]] = []
        for bucket in self._backend.bucket_range:
            if bucket in self._in_flight or self._retry_at.get(bucket, now) > now:
                continue
            pressure = self.growth_pressure(bucket)
            snapshot = self._backend.snapshot_of(bucket)
            base = snapshot.seq if snapshot is not None else 0
            if pressure >= 1.0 and self._backend.seq(bucket) > base:
                ranked.append((-pressure, bucket))
        return [bucket for _, bucket in sorted(ranked)]

    def _start(self, buckets: Sequence[int]) -> int:
        """One job snapshotting ``buckets`` in order (views taken here, on the task
        thread); returns its id."""
        views: list[MaterializationView] = []
        try:
            for bucket in buckets:
                views.append(self._backend.materialization_view(bucket))
            uris = [new_snapshot_uri(self._root, self._job_id, b) for b in buckets]
            job = Job(self._done, views, self._resolver, uris, self._settings.compress)
            future = self._executor.submit(job.run)
        except BaseException:
            for view in views:
                view.view.close()
            raise
        job_id = next(self._job_ids)
        self._in_flight.update(dict.fromkeys(buckets, job_id))
        future.add_done_callback(job.finished)
        return job_id
