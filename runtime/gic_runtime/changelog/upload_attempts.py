"""One upload of the hedging uploader and its attempts: the bookkeeping, the decisions
read off it, and the proof that a collision is the attempt's own write.

:class:`PendingUpload` holds one submitted byte string until its future resolves: its
:class:`UploadAttempt` records (each under a fresh object name), failures, hedges and a
delayed retry's time. It answers what the
:class:`~gic_runtime.changelog.uploader.HedgingUploader` schedules by: when the upload
next needs attention
(:meth:`PendingUpload.next_deadline`) and whether another hedge may start
(:meth:`PendingUpload.may_hedge`). :func:`confirm_own_object` decides whether an object
a create-if-absent PUT found at the attempt's fresh name is that attempt's own write (the
store client retried a PUT whose first answer was lost).

Invariants: attempts are only ever added; an attempt is ``live`` from its start until
it ends or times out, and ``done`` once it ended (a timed-out attempt keeps running and
may still win); an upload is ``done`` once resolved and never again pending; it starts
at most ``max_hedges`` hedges; a delayed retry (``retry_at``) is pending only while
no attempt is live, and no hedge starts while it is. An object found at a fresh name
counts as the attempt's own only when it holds exactly the uploaded bytes.

Not thread-safe: the uploader reads and changes these records under its lock only;
:func:`confirm_own_object` reads the store on an attempt's worker thread.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future

from gic_runtime.changelog.upload_types import UploadResult
from gic_runtime.errors import ObjectExistsError, UploadError
from gic_runtime.storage.object_store import ObjectStore
from gic_runtime.storage.writes import holds_exactly

__all__ = ["PendingUpload", "UploadAttempt", "confirm_own_object"]


class UploadAttempt:
    """One attempt of an upload: its fresh object name and when it started."""

    __slots__ = ("done", "hedge", "live", "started", "uri")

    def __init__(self, uri: str, started: float, hedge: bool) -> None:
        self.uri = uri
        self.started = started
        self.hedge = hedge
        self.live = True  # running and not yet counted as failed (timeout)
        self.done = False


class PendingUpload:
    """One submitted byte string, from ``submit`` until every attempt has ended."""

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
        self.attempts: list[UploadAttempt] = []
        self.failed = 0
        self.hedges = 0
        self.hedge_denied = False
        self.retry_at: float | None = None
        self.done = False

    def live(self) -> list[UploadAttempt]:
        """The attempts still running and not timed out."""
        return [a for a in self.attempts if a.live]

    def may_hedge(self, max_hedges: int) -> bool:
        """Whether a hedge may start (budget aside): none was denied, no retry is
        pending and fewer than ``max_hedges`` started."""
        return not self.hedge_denied and self.retry_at is None and self.hedges < max_hedges

    def next_deadline(
        self, timeout_s: float, hedge_delay: Callable[[], float], max_hedges: int
    ) -> float | None:
        """The earliest time something is due -- a delayed retry, an attempt's
        timeout, the next hedge -- or ``None`` (resolved, or nothing scheduled)."""
        if self.done:
            return None
        times: list[float] = []
        if self.retry_at is not None:
            times.append(self.retry_at)
        live = self.live()
        times += (a.started + timeout_s for a in live)
        if live and self.may_hedge(max_hedges):
            times.append(max(a.started for a in live) + hedge_delay())
        return min(times) if times else None


def confirm_own_object(
    store: ObjectStore, key: str, data: bytes, uri: str, exists: ObjectExistsError
) -> None:
    """Return if the object at ``key`` holds exactly ``data``, else raise UploadError.

    Read failures propagate (a transient one retries the upload under a fresh name).
    """
    if holds_exactly(store, key, data):
        return
    raise UploadError(
        f"name collision at {uri}: a create-if-absent upload of {len(data)} bytes found a "
        "different object already there. Upload names are fresh, so another writer "
        "is using the same names (check that each job and task has its own storage prefix "
        "and that object names are generated uniquely); the existing object was left as is"
    ) from exists
