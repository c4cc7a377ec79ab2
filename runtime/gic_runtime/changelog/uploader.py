"""The hedging uploader: puts segment bytes into the store, racing slow attempts.

Every attempt writes a fresh object name (never reused, create-if-absent), so attempts
never overwrite each other and the winner's name is unambiguous. An attempt still
running after the hedge delay gets one more attempt beside it (up to ``max_hedges`` per
upload and a token-bucket budget overall); the first attempt to succeed wins and every
other attempt's object is deleted once that attempt finishes, on its own worker thread.
Failed attempts follow the :class:`~gic_runtime.changelog.retrying.RetryPolicy`.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from gic_runtime.changelog.retrying import Action, AdaptiveHedgeDelay, RetryPolicy
from gic_runtime.clock import Clock, SystemClock
from gic_runtime.errors import (
    ConfigurationError,
    ObjectExistsError,
    StorageTimeoutError,
    TransientStorageError,
)
from gic_runtime.storage.uri import StoreResolver

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class UploaderSettings:
    """Tuning of :class:`HedgingUploader`. Immutable."""

    max_workers: int = 8
    """Threads running attempts. Each upload needs one, plus one per hedge or stuck
    attempt; eight keeps a task's few uploads and their hedges from queueing."""

    max_in_flight_bytes: int = 64 * 1024 * 1024
    """Soft cap on bytes of unfinished uploads: ``submit`` blocks while the total is at or
    above it (one upload may overshoot). 64 MiB bounds an executor's buffered changelog
    memory yet holds many pre-emptive segments (4 MiB each by default)."""

    max_hedges: int = 1
    """Extra attempts per upload started because earlier ones were slow (0 disables
    hedging). One already removes nearly all of a rare-straggler tail; more multiplies
    load exactly when the store is struggling."""

    hedge_after_s: float | None = None
    """Fixed hedge delay in seconds, or ``None`` for the adaptive delay below."""

    hedge_quantile: float = 0.97
    """Adaptive delay: this quantile of recent successful attempt latencies. Hedging at
    the q-th percentile costs about ``1 - q`` (here 3%) extra requests on a steady
    store, below the 5% budget."""

    hedge_floor_s: float = 0.05
    """Adaptive delay never goes below this (seconds). A PUT to S3 takes tens of
    milliseconds; hedging faster than that doubles requests for nothing."""

    hedge_ceiling_s: float = 1.0
    """Adaptive delay never goes above this (seconds), so hedging stays useful when the
    slow tail grows so large that the quantile itself falls into it; also the delay used
    until ``hedge_min_samples`` latencies are known."""

    hedge_window: int = 512
    """Number of recent latencies the adaptive delay looks at: enough for a stable 97th
    percentile, short enough to follow a store that changes speed within minutes."""

    hedge_min_samples: int = 32
    """Latencies needed before the quantile is trusted (about one tail sample at q=0.97)."""

    hedge_budget_ratio: float = 0.05
    """Hedges may be at most this fraction of uploads (token bucket): a hard bound on
    the extra load hedging adds, whatever the latencies do."""

    hedge_budget_burst: float = 10.0
    """Token bucket size: hedges allowed back to back after a quiet period."""

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """What to do when an attempt fails or times out."""

    tick_s: float = 0.05
    """Longest real time (seconds) the scheduler sleeps between looks at its clock, so a
    fake clock moved by a test is noticed promptly; real deadlines are met exactly."""

    def __post_init__(self) -> None:
        if self.max_workers < 1 or self.max_in_flight_bytes < 1 or self.max_hedges < 0:
            raise ConfigurationError(
                f"invalid uploader settings {self}: max_workers and max_in_flight_bytes must "
                "be positive and max_hedges not negative"
            )
        if self.hedge_after_s is not None and self.hedge_after_s <= 0:
            raise ConfigurationError(f"hedge_after_s must be positive, got {self.hedge_after_s}")


@dataclass(frozen=True, slots=True)
class UploadResult:
    """A finished upload: the winning object ``uri`` and how it got there."""

    uri: str
    size: int
    attempts: int
    """Attempts started, hedges included."""
    hedges: int
    failed_attempts: int
    duration_s: float


@dataclass(frozen=True, slots=True)
class UploaderStats:
    """Counters since the uploader was created (a consistent snapshot)."""

    submitted: int
    succeeded: int
    failed: int
    attempts: int
    attempt_failures: int
    """Attempts that failed or timed out (timeouts included)."""
    hedges: int
    timeouts: int
    losers_deleted: int
    backpressure_waits: int
    """How many ``submit`` calls had to wait for in-flight bytes to drop."""
    backpressure_wait_s: float
    in_flight_bytes: int


class Uploader(Protocol):
    """The seam between changelog writers and the store: durable, fresh-named uploads."""

    def submit(self, data: bytes) -> Future[UploadResult]:
        """Upload ``data`` as a new object; the future names it (or fails with
        :class:`~gic_runtime.errors.UploadError`). May block for back-pressure."""
        ...


class _Attempt:
    __slots__ = ("done", "hedge", "live", "started", "uri")

    def __init__(self, uri: str, started: float, hedge: bool) -> None:
        self.uri = uri
        self.started = started
        self.hedge = hedge
        self.live = True  # running and not yet counted as failed (timeout)
        self.done = False


class _Upload:
    __slots__ = (
        "attempts",
        "data",
        "done",
        "failed",
        "future",
        "hedge_denied",
        "hedges",
        "id",
        "retry_at",
        "started",
    )

    def __init__(self, upload_id: int, data: bytes, started: float) -> None:
        self.id = upload_id
        self.data = data
        self.started = started
        self.future: Future[UploadResult] = Future()
        self.attempts: list[_Attempt] = []
        self.failed = 0
        self.hedges = 0
        self.hedge_denied = False
        self.retry_at: float | None = None
        self.done = False


_Action = Callable[[], None]


class HedgingUploader:
    """Uploads byte strings as fresh objects with retries and request hedging.

    Invariants: every attempt's object name comes from ``new_uri`` and is written with
    ``if_absent``; an upload's future resolves exactly once, with the first successful
    attempt or an :class:`~gic_runtime.errors.UploadError`; every other attempt's object
    is deleted (best effort) after that attempt ends; in-flight bytes count uploads from
    ``submit`` until their future resolves.

    Thread-safety: every public method may be called from any thread. Attempts run on
    an internal thread pool and a scheduler thread drives hedges, timeouts and delayed
    retries by ``clock`` (tests may drive it with :meth:`poll` and a fake clock).
    Futures complete on those threads; their callbacks must not block.
    """

    def __init__(
        self,
        resolver: StoreResolver,
        new_uri: Callable[[], str],
        settings: UploaderSettings | None = None,
        *,
        clock: Clock | None = None,
    ) -> None:
        self._resolver = resolver
        self._new_uri = new_uri
        self._settings = s = settings or UploaderSettings()
        self._clock = clock or SystemClock()
        self._delay = AdaptiveHedgeDelay(
            quantile=s.hedge_quantile,
            floor_s=s.hedge_floor_s,
            ceiling_s=s.hedge_ceiling_s,
            window=s.hedge_window,
            min_samples=s.hedge_min_samples,
        )
        self._cond = threading.Condition()
        self._active: dict[int, _Upload] = {}
        self._ids = itertools.count()
        self._tokens = s.hedge_budget_burst
        self._in_flight = 0
        self._closed = False
        self._counts = dict.fromkeys(
            (
                "submitted",
                "succeeded",
                "failed",
                "attempts",
                "attempt_failures",
                "hedges",
                "timeouts",
                "losers_deleted",
                "backpressure_waits",
            ),
            0,
        )
        self._backpressure_s = 0.0
        self._pool = ThreadPoolExecutor(s.max_workers, thread_name_prefix="gic-upload")
        self._scheduler = threading.Thread(
            target=self._schedule_loop, name="gic-upload-scheduler", daemon=True
        )
        self._scheduler.start()

    # --- public API -----------------------------------------------------------------

    def submit(self, data: bytes) -> Future[UploadResult]:
        """Start uploading ``data``; blocks while in-flight bytes are at the cap."""
        actions: list[_Action] = []
        with self._cond:
            if self._in_flight >= self._settings.max_in_flight_bytes and not self._closed:
                self._counts["backpressure_waits"] += 1
                began = time.perf_counter()
                self._cond.wait_for(
                    lambda: self._closed or self._in_flight < self._settings.max_in_flight_bytes
                )
                self._backpressure_s += time.perf_counter() - began
            if self._closed:
                raise ConfigurationError("uploader is closed; create a new one to upload")
            upload = _Upload(next(self._ids), data, self._clock.monotonic())
            self._active[upload.id] = upload
            self._in_flight += len(data)
            self._counts["submitted"] += 1
            burst = self._settings.hedge_budget_burst
            self._tokens = min(burst, self._tokens + self._settings.hedge_budget_ratio)
            actions.append(self._start_attempt(upload, hedge=False))
            self._cond.notify_all()
        _run(actions)
        return upload.future

    def hedge_delay(self) -> float:
        """Seconds an attempt may run before a hedge starts (current value)."""
        fixed = self._settings.hedge_after_s
        return fixed if fixed is not None else self._delay.current()

    def stats(self) -> UploaderStats:
        with self._cond:
            c = self._counts
            return UploaderStats(
                submitted=c["submitted"],
                succeeded=c["succeeded"],
                failed=c["failed"],
                attempts=c["attempts"],
                attempt_failures=c["attempt_failures"],
                hedges=c["hedges"],
                timeouts=c["timeouts"],
                losers_deleted=c["losers_deleted"],
                backpressure_waits=c["backpressure_waits"],
                backpressure_wait_s=self._backpressure_s,
                in_flight_bytes=self._in_flight,
            )

    def poll(self) -> None:
        """Start due hedges and retries and time out overdue attempts, by the clock now.

        The scheduler thread calls this on its own; tests with a fake clock call it right
        after advancing the clock to make the effect immediate.
        """
        actions: list[_Action] = []
        with self._cond:
            now = self._clock.monotonic()
            for upload in list(self._active.values()):
                self._poll_upload(upload, now, actions)
        _run(actions)

    def close(self) -> None:
        """Wait until every upload has resolved and every attempt ended, then stop.

        Stuck attempts are waited for: the store's own timeouts bound them.
        """
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            self._cond.wait_for(lambda: not self._active)
        self._scheduler.join()
        self._pool.shutdown(wait=True)

    def __enter__(self) -> HedgingUploader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- scheduling (all called with the lock held) -------------------------------------

    def _start_attempt(self, upload: _Upload, *, hedge: bool) -> _Action:
        attempt = _Attempt(self._new_uri(), self._clock.monotonic(), hedge)
        upload.attempts.append(attempt)
        upload.retry_at = None
        self._counts["attempts"] += 1
        if hedge:
            upload.hedges += 1
            self._counts["hedges"] += 1
        return lambda: self._submit_attempt(upload, attempt)

    def _next_deadline(self, upload: _Upload) -> float | None:
        if upload.done:
            return None
        times: list[float] = []
        if upload.retry_at is not None:
            times.append(upload.retry_at)
        live = [a for a in upload.attempts if a.live]
        times += (a.started + self._settings.retry.timeout_s for a in live)
        if live and self._may_hedge(upload):
            times.append(max(a.started for a in live) + self.hedge_delay())
        return min(times) if times else None

    def _may_hedge(self, upload: _Upload) -> bool:
        return (
            not upload.hedge_denied
            and upload.retry_at is None
            and upload.hedges < self._settings.max_hedges
        )

    def _poll_upload(self, upload: _Upload, now: float, actions: list[_Action]) -> None:
        if upload.done:
            return
        timeout = self._settings.retry.timeout_s
        for attempt in upload.attempts:
            if attempt.live and now - attempt.started >= timeout:
                attempt.live = False
                self._counts["timeouts"] += 1
                error = StorageTimeoutError(
                    f"upload attempt did not finish within {timeout} s", uri=attempt.uri
                )
                self._on_failure(upload, error, now, actions)
                if upload.done:
                    return
        if upload.retry_at is not None and now >= upload.retry_at:
            actions.append(self._start_attempt(upload, hedge=False))
            return
        live = [a for a in upload.attempts if a.live]
        due = live and now - max(a.started for a in live) >= self.hedge_delay()
        if due and self._may_hedge(upload):
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                actions.append(self._start_attempt(upload, hedge=True))
            else:
                upload.hedge_denied = True

    def _on_failure(
        self, upload: _Upload, error: Exception, now: float, actions: list[_Action]
    ) -> None:
        upload.failed += 1
        self._counts["attempt_failures"] += 1
        policy = self._settings.retry
        decision = policy.decide(upload.failed, error)
        live = any(a.live for a in upload.attempts)
        if decision.action is Action.FAIL:
            if live and isinstance(error, TransientStorageError):
                return  # out of retries, but a running attempt may still succeed
            what = f"{len(upload.data)}-byte changelog segment (last attempt {_uri_of(error)})"
            self._resolve(upload, None, policy.failure(what, upload.failed, error), actions)
        elif live:
            return  # another attempt is already running; let it finish first
        elif decision.action is Action.RETRY_NOW:
            actions.append(self._start_attempt(upload, hedge=False))
        else:
            upload.retry_at = now + decision.delay_s

    def _resolve(
        self,
        upload: _Upload,
        winner: _Attempt | None,
        error: Exception | None,
        actions: list[_Action],
    ) -> None:
        upload.done = True
        upload.retry_at = None
        for attempt in upload.attempts:
            attempt.live = False  # the rest are losers now: no more timeouts or retries
        self._in_flight -= len(upload.data)
        if all(a.done for a in upload.attempts):
            self._active.pop(upload.id, None)
        self._cond.notify_all()
        future = upload.future
        if winner is not None:
            self._counts["succeeded"] += 1
            result = UploadResult(
                uri=winner.uri,
                size=len(upload.data),
                attempts=len(upload.attempts),
                hedges=upload.hedges,
                failed_attempts=upload.failed,
                duration_s=self._clock.monotonic() - upload.started,
            )
            actions.append(lambda: future.set_result(result))
        else:
            self._counts["failed"] += 1
            assert error is not None
            actions.append(lambda: future.set_exception(error))

    def _schedule_loop(self) -> None:
        while True:
            with self._cond:
                if self._closed and not self._active:
                    return
                deadlines = [
                    d for u in self._active.values() if (d := self._next_deadline(u)) is not None
                ]
                if deadlines:
                    wait = min(deadlines) - self._clock.monotonic()
                    self._cond.wait(max(0.001, min(wait, self._settings.tick_s)))
                else:
                    self._cond.wait()
            self.poll()

    # --- attempts (worker threads) ------------------------------------------------------

    def _submit_attempt(self, upload: _Upload, attempt: _Attempt) -> None:
        try:
            self._pool.submit(self._run_attempt, upload, attempt)
        except RuntimeError as exc:  # pool already shut down: cannot happen before close
            self._finish_attempt(upload, attempt, exc)

    def _run_attempt(self, upload: _Upload, attempt: _Attempt) -> None:
        error: Exception | None = None
        try:
            store, key = self._resolver.resolve(attempt.uri)
            store.put(key, upload.data, if_absent=True)
        except Exception as exc:
            error = exc
        if self._finish_attempt(upload, attempt, error):
            self._delete(attempt.uri)

    def _finish_attempt(self, upload: _Upload, attempt: _Attempt, error: Exception | None) -> bool:
        """Record the attempt's outcome; return whether its object must be deleted."""
        actions: list[_Action] = []
        with self._cond:
            now = self._clock.monotonic()
            was_live = attempt.live
            attempt.live = False
            attempt.done = True
            if error is None:
                self._delay.record(now - attempt.started)
                loser = upload.done
                if not upload.done:
                    self._resolve(upload, attempt, None, actions)
            else:
                # The object may exist after a failed PUT (the answer got lost), unless the
                # failure says the name was taken: that object is not ours.
                loser = not isinstance(error, ObjectExistsError)
                if not upload.done and was_live:
                    self._on_failure(upload, error, now, actions)
            if upload.done and all(a.done for a in upload.attempts):
                self._active.pop(upload.id, None)
            if loser and error is None:
                self._counts["losers_deleted"] += 1
            self._cond.notify_all()
        _run(actions)
        return loser

    def _delete(self, uri: str) -> None:
        try:
            store, key = self._resolver.resolve(uri)
            store.delete_many([key])
        except Exception as exc:  # best effort: the orphan sweep catches what is left
            _log.warning("could not delete losing upload attempt %s: %s", uri, exc)


def _run(actions: list[_Action]) -> None:
    for action in actions:
        action()


def _uri_of(error: BaseException) -> str:
    uri = getattr(error, "uri", None)
    return str(uri) if uri else "unknown"
