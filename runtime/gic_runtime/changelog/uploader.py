"""The hedging uploader: puts segment bytes into the store, racing slow attempts.

Every attempt writes a fresh object name (never reused, create-if-absent), so attempts
never overwrite each other and the winner's name is unambiguous. An attempt still
running after the hedge delay gets one more attempt beside it (up to ``max_hedges`` per
upload and a token-bucket budget overall); the first attempt to succeed wins and every
other attempt's object is deleted once that attempt finishes, on its own worker thread.
Failed attempts follow the :class:`~gic_runtime.changelog.retrying.RetryPolicy`.

A create-if-absent PUT that reports the object as existing most likely collided with
itself: the store client retried it after the first answer was lost and that first
request had landed. The name is fresh, so the attempt reads the object back (size, then
bytes) and counts as successful when it holds exactly the uploaded bytes; anything else
is a name collision with a foreign object, which fails the upload and is never deleted.

The seam it implements, :class:`~gic_runtime.changelog.api.Uploader`, lives in
:mod:`gic_runtime.changelog.api` beside the writer's, and the value types
(:class:`UploaderSettings`, :class:`UploadResult`, :class:`UploaderStats`) in
:mod:`gic_runtime.changelog.upload_types`; all are re-exported here. The records of one
upload and its attempts, with the decisions read off them and the read-back of a
collision, are in :mod:`gic_runtime.changelog.upload_attempts`.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from gic_runtime.changelog.api import Uploader
from gic_runtime.changelog.retrying import Action, AdaptiveHedgeDelay
from gic_runtime.changelog.upload_attempts import (
    PendingUpload,
    UploadAttempt,
    confirm_own_object,
)
from gic_runtime.changelog.upload_types import UploaderSettings, UploaderStats, UploadResult
from gic_runtime.clock import Clock, SystemClock
from gic_runtime.errors import (
    ConfigurationError,
    ObjectExistsError,
    StorageTimeoutError,
    TransientStorageError,
)
from gic_runtime.storage.uri import StoreResolver

__all__ = [
    "HedgingUploader",
    "UploadResult",
    "Uploader",
    "UploaderSettings",
    "UploaderStats",
]

_log = logging.getLogger(__name__)


_Action = Callable[[], None]


class HedgingUploader:
    """Uploads byte strings as fresh objects with retries and request hedging.

    Invariants: every attempt's object name comes from ``new_uri`` and is written with
    ``if_absent``; an upload's future resolves exactly once, with the first successful
    attempt or an :class:`~gic_runtime.errors.UploadError`; every other attempt's object
    is deleted (best effort) after that attempt ends; in-flight bytes count uploads from
    ``submit`` until their future resolves. An object whose create-if-absent PUT said
    "exists" is deleted only after reading it back proved it is this upload's bytes.

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
        self._active: dict[int, PendingUpload] = {}
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
                "own_writes_confirmed",
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
            upload = PendingUpload(next(self._ids), data, self._clock.monotonic())
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
                own_writes_confirmed=c["own_writes_confirmed"],
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

    def _start_attempt(self, upload: PendingUpload, *, hedge: bool) -> _Action:
        attempt = UploadAttempt(self._new_uri(), self._clock.monotonic(), hedge)
        upload.attempts.append(attempt)
        upload.retry_at = None
        self._counts["attempts"] += 1
        if hedge:
            upload.hedges += 1
            self._counts["hedges"] += 1
        return lambda: self._submit_attempt(upload, attempt)

    def _poll_upload(self, upload: PendingUpload, now: float, actions: list[_Action]) -> None:
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
                self._on_failure(upload, attempt, error, now, actions)
                if upload.done:
                    return
        if upload.retry_at is not None and now >= upload.retry_at:
            actions.append(self._start_attempt(upload, hedge=False))
            return
        live = upload.live()
        due = live and now - max(a.started for a in live) >= self.hedge_delay()
        if due and upload.may_hedge(self._settings.max_hedges):
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                actions.append(self._start_attempt(upload, hedge=True))
            else:
                upload.hedge_denied = True

    def _on_failure(
        self,
        upload: PendingUpload,
        attempt: UploadAttempt,
        error: Exception,
        now: float,
        actions: list[_Action],
    ) -> None:
        upload.failed += 1
        self._counts["attempt_failures"] += 1
        policy = self._settings.retry
        decision = policy.decide(upload.failed, error)
        live = any(a.live for a in upload.attempts)
        if decision.action is Action.FAIL:
            if live and isinstance(error, TransientStorageError):
                return  # out of retries, but a running attempt may still succeed
            what = f"{len(upload.data)}-byte changelog segment (last attempt {attempt.uri})"
            self._resolve(upload, None, policy.failure(what, upload.failed, error), actions)
        elif live:
            return  # another attempt is already running; let it finish first
        elif decision.action is Action.RETRY_NOW:
            actions.append(self._start_attempt(upload, hedge=False))
        else:
            upload.retry_at = now + decision.delay_s

    def _resolve(
        self,
        upload: PendingUpload,
        winner: UploadAttempt | None,
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
                timeout, max_hedges = self._settings.retry.timeout_s, self._settings.max_hedges
                deadlines = [
                    d
                    for u in self._active.values()
                    if (d := u.next_deadline(timeout, self.hedge_delay, max_hedges)) is not None
                ]
                if deadlines:
                    wait = min(deadlines) - self._clock.monotonic()
                    self._cond.wait(max(0.001, min(wait, self._settings.tick_s)))
                else:
                    self._cond.wait()
            self.poll()

    # --- attempts (worker threads) ------------------------------------------------------

    def _submit_attempt(self, upload: PendingUpload, attempt: UploadAttempt) -> None:
        try:
            self._pool.submit(self._run_attempt, upload, attempt)
        except RuntimeError as exc:  # pool already shut down: cannot happen before close
            self._finish_attempt(upload, attempt, exc)

    def _run_attempt(self, upload: PendingUpload, attempt: UploadAttempt) -> None:
        error: Exception | None = None
        ours = True  # whether an object under the attempt's name may be ours to delete
        try:
            store, key = self._resolver.resolve(attempt.uri)
            try:
                store.put(key, upload.data, if_absent=True)
            except ObjectExistsError as exists:
                ours = False  # until the read-back proves otherwise
                confirm_own_object(store, key, upload.data, attempt.uri, exists)
                ours = True
                with self._cond:
                    self._counts["own_writes_confirmed"] += 1
        except Exception as exc:
            error = exc
        if self._finish_attempt(upload, attempt, error, ours=ours):
            self._delete(attempt.uri)

    def _finish_attempt(
        self,
        upload: PendingUpload,
        attempt: UploadAttempt,
        error: Exception | None,
        *,
        ours: bool = True,
    ) -> bool:
        """Record the attempt's outcome; return whether its object must be deleted.

        ``ours`` is False when an object under the attempt's name may belong to someone
        else (a create-if-absent collision that was not proven to be our own write).
        """
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
                # The object may exist after a failed PUT (the answer got lost), unless
                # the name may be taken by an object that is not ours.
                loser = ours
                if not upload.done and was_live:
                    self._on_failure(upload, attempt, error, now, actions)
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
