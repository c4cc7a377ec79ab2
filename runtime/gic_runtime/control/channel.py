"""The durable control channel: requests to a job's driver and their outcomes, in storage.

::

    <root>/jobs/<job_id>/control/
        requests/<request_id>.req      write-once, GICR records (control.model)
        outcomes/<request_id>.out      write-once, GICO records

Whoever wants something from a running driver (the ``gic`` CLI, the operator) writes a
request, authenticated with the job's control key when the channel has one
(:mod:`gic_runtime.control.auth`); the driver polls, honours what its
:class:`~gic_runtime.control.auth.RequestGuard` accepts at a batch boundary and writes
the outcome. Because
both live in storage, a request survives a restart of the driver and of the requester,
and an outcome can be found afterwards by anyone.

Invariants:

* A request or outcome, once written, never changes (create-if-absent through
  :func:`gic_runtime.storage.writes.create_once`). Re-submitting a request with the same
  id and the same intent (kind, format, target; who asked and when aside) returns the
  stored request: a requester retrying after a lost response, or after its own restart,
  never creates a duplicate. The same id with another intent is refused.
* A request is *pending* exactly while it has no outcome. The first outcome written
  stands; writing the identical outcome again is a no-op, a different one is refused.
* An outcome is only written for a request that exists.

Cost of one :meth:`ControlChannel.poll`: two LISTs plus one GET per pending request not
seen before (requests and outcomes are immutable, so decoded ones are cached). A GET
transfers at most :data:`CONTROL_RECORD_MAX_BYTES` + 1 bytes: a larger request or
outcome raises :class:`~gic_runtime.errors.ObjectTooLargeError` unread (both ends of
the channel may run code the other does not trust; the operator reads outcomes written
by drivers).

Thread-safety: a :class:`ControlChannel` may be shared between threads (the cache is
guarded by a lock; storage writes are atomic).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from gic_runtime.checkpoint.catalog import resolve_prefix
from gic_runtime.checkpoint.manifest import SavepointFormat, SavepointType
from gic_runtime.clock import Clock, SystemClock
from gic_runtime.control.auth import ControlKey
from gic_runtime.control.model import (
    ControlRequest,
    Outcome,
    SavepointRequest,
    StopRequest,
    decode_outcome,
    decode_request,
    encode_outcome,
    encode_request,
    new_request_id,
    parse_savepoint_format,
    parse_savepoint_type,
)
from gic_runtime.errors import ConfigurationError, GICError, ObjectExistsError, ObjectNotFoundError
from gic_runtime.layout import job_dir, savepoint_dir, validate_id
from gic_runtime.storage.object_store import read_bounded
from gic_runtime.storage.uri import StorageURI, StoreResolver, join
from gic_runtime.storage.writes import create_once

_R = TypeVar("_R", SavepointRequest, StopRequest)

REQUEST_SUFFIX = ".req"
OUTCOME_SUFFIX = ".out"
CONTROL_RECORD_MAX_BYTES = 64 * 1024
"""Largest control request or outcome a reader accepts and a writer writes (real ones
are under 1 KiB; a failed outcome's error text is cut to
:data:`~gic_runtime.control.model.MAX_ERROR_CHARS`)."""


class ControlTimeoutError(GICError):
    """No outcome for a control request arrived within the wait's time limit."""


def control_dir(root: str, job_id: str) -> str:
    return join(job_dir(root, job_id), "control")


def request_uri(root: str, job_id: str, request_id: str) -> str:
    name = validate_id("request id", request_id) + REQUEST_SUFFIX
    return join(control_dir(root, job_id), "requests", name)


def outcome_uri(root: str, job_id: str, request_id: str) -> str:
    name = validate_id("request id", request_id) + OUTCOME_SUFFIX
    return join(control_dir(root, job_id), "outcomes", name)


@dataclass(frozen=True, slots=True)
class ControlState:
    """What a driver must act on: pending savepoint requests (oldest first) and the
    oldest pending plain stop request, if any."""

    savepoints: tuple[SavepointRequest, ...]
    stop: StopRequest | None

    @property
    def empty(self) -> bool:
        """Nothing is pending."""
        return not self.savepoints and self.stop is None


@dataclass(frozen=True, slots=True)
class ControlEntry:
    """A request and its outcome (``None`` while pending), for display."""

    request: ControlRequest
    outcome: Outcome | None


def _bounded(data: bytes, what: str, uri: str) -> bytes:
    """``data``, refused when no reader would accept it."""
    if len(data) > CONTROL_RECORD_MAX_BYTES:
        raise ConfigurationError(
            f"control {what} {uri} would be {len(data)} bytes, more than the "
            f"{CONTROL_RECORD_MAX_BYTES} readers accept; shorten its texts"
        )
    return data


def _oldest_first(request: ControlRequest) -> tuple[float, str]:
    return (request.requested_at, request.request_id)


class ControlChannel:
    """Requests and outcomes of job ``job_id`` under storage ``root`` (see the module
    docstring). Requests it writes carry a MAC with ``key`` when one is given.
    ``clock`` and ``sleep`` drive :meth:`wait` (a test passes fakes)."""

    def __init__(
        self,
        resolver: StoreResolver,
        root: str,
        job_id: str,
        *,
        clock: Clock | None = None,
        sleep: Callable[[float], None] = time.sleep,
        key: ControlKey | None = None,
    ) -> None:
        self._resolver = resolver
        self._key = key
        self.root = root
        self.job_id = validate_id("job id", job_id)
        self._clock = clock or SystemClock()
        self._sleep = sleep
        self._lock = threading.Lock()
        self._requests: dict[str, ControlRequest] = {}
        self._outcomes: dict[str, Outcome] = {}

    # --- requesting --------------------------------------------------------------

    def request_savepoint(
        self,
        kind: SavepointType | str = SavepointType.INTERMEDIATE,
        format: SavepointFormat | str = SavepointFormat.NATIVE,
        *,
        target: str | None = None,
        request_id: str | None = None,
        requested_by: str = "gic",
        requested_at: float | None = None,
    ) -> SavepointRequest:
        """Ask the driver for a savepoint; return the stored request.

        ``kind``: ``intermediate`` (default) or ``terminal``/``stop``. ``target``: the
        savepoint directory (URI or local path), by default ``<root>/savepoints/<id>``.
        ``request_id`` defaults to ``sp-<UTC time>-<6 hex>``. See the module docstring
        for what happens when the id exists.
        """
        now = self._clock.wall() if requested_at is None else requested_at
        rid = validate_id("request id", request_id or new_request_id("sp", now))
        request = SavepointRequest(
            request_id=rid,
            kind=parse_savepoint_type(kind),
            format=parse_savepoint_format(format),
            target=_normalize_target(target) if target else savepoint_dir(self.root, rid),
            requested_at=now,
            requested_by=requested_by,
        )
        return self._submit(request)

    def request_stop(
        self,
        *,
        request_id: str | None = None,
        requested_by: str = "gic",
        requested_at: float | None = None,
    ) -> StopRequest:
        """Ask the driver to stop without a savepoint; return the stored request."""
        now = self._clock.wall() if requested_at is None else requested_at
        rid = validate_id("request id", request_id or new_request_id("stop", now))
        return self._submit(StopRequest(rid, requested_at=now, requested_by=requested_by))

    def _submit(self, request: _R) -> _R:
        if self._key is not None:
            request = dataclasses.replace(request, mac=self._key.mac(self.job_id, request))
        uri = request_uri(self.root, self.job_id, request.request_id)
        store, key = self._resolver.resolve(uri)
        try:
            create_once(store, key, _bounded(encode_request(request), "request", uri))
        except ObjectExistsError:
            existing = self.request(request.request_id)
            if isinstance(existing, type(request)) and request.same_intent(existing):
                return existing
            raise ConfigurationError(
                f"request id {request.request_id!r} of job {self.job_id!r} already names "
                f"a different request ({existing!r}); request ids are never reused: "
                "choose another id or leave it out to get a fresh one"
            ) from None
            return existing
        with self._lock:
            self._requests[request.request_id] = request
        return request

    # --- reading -------------------------------------------------------------------

    def request(self, request_id: str) -> ControlRequest | None:
        """The stored request ``request_id``, or ``None`` if there is none."""
        with self._lock:
            cached = self._requests.get(request_id)
        if cached is not None:
            return cached
        uri = request_uri(self.root, self.job_id, request_id)
        store, key = self._resolver.resolve(uri)
        try:
            data = read_bounded(store, key, CONTROL_RECORD_MAX_BYTES, what="control request")
        except ObjectNotFoundError:
            return None
        request = decode_request(data, uri)
        with self._lock:
            self._requests[request_id] = request
        return request

    def outcome(self, request_id: str) -> Outcome | None:
        """The outcome of ``request_id``, or ``None`` while it is pending (or unknown)."""
        with self._lock:
            cached = self._outcomes.get(request_id)
        if cached is not None:
            return cached
        uri = outcome_uri(self.root, self.job_id, request_id)
        store, key = self._resolver.resolve(uri)
        try:
            data = read_bounded(store, key, CONTROL_RECORD_MAX_BYTES, what="control outcome")
        except ObjectNotFoundError:
            return None
        outcome = decode_outcome(data, uri)
        with self._lock:
            self._outcomes[request_id] = outcome
        return outcome

    def _ids(self, kind: str, suffix: str) -> set[str]:
        store, prefix = resolve_prefix(
            self._resolver, join(control_dir(self.root, self.job_id), kind)
        )
        ids = set()
        for info in store.list(prefix):
            name = info.key[len(prefix) :]
            if "/" not in name and name.endswith(suffix) and len(name) > len(suffix):
                ids.add(name[: -len(suffix)])
        return ids

    def requests(self) -> list[ControlRequest]:
        """Every request of the job, oldest first."""
        found = [self.request(rid) for rid in self._ids("requests", REQUEST_SUFFIX)]
        return sorted((r for r in found if r is not None), key=_oldest_first)

    def outcomes(self) -> list[Outcome]:
        """Every outcome of the job, oldest (finished first) first."""
        found = [self.outcome(rid) for rid in self._ids("outcomes", OUTCOME_SUFFIX)]
        return sorted(
            (o for o in found if o is not None), key=lambda o: (o.finished_at, o.request_id)
        )

    def entries(self) -> list[ControlEntry]:
        """Every request with its outcome (``None`` while pending), oldest first."""
        done = self._ids("outcomes", OUTCOME_SUFFIX)
        return [
            ControlEntry(r, self.outcome(r.request_id) if r.request_id in done else None)
            for r in self.requests()
        ]

    # --- the driver's side ----------------------------------------------------------

    def poll(self) -> ControlState:
        """What is pending now (one look at storage; see the module docstring)."""
        pending_ids = self._ids("requests", REQUEST_SUFFIX) - self._ids("outcomes", OUTCOME_SUFFIX)
        pending = sorted(
            (r for r in map(self.request, pending_ids) if r is not None), key=_oldest_first
        )
        stops = [r for r in pending if isinstance(r, StopRequest)]
        return ControlState(
            savepoints=tuple(r for r in pending if isinstance(r, SavepointRequest)),
            stop=stops[0] if stops else None,
        )

    def pending(self) -> list[SavepointRequest]:
        """Savepoint requests without an outcome, oldest first."""
        return list(self.poll().savepoints)

    def pending_stop(self) -> StopRequest | None:
        """The oldest plain stop request without an outcome, if any."""
        return self.poll().stop

    def stop_requested(self) -> bool:
        """Whether a plain stop request is pending (the driver completes it when it
        stops; a terminal savepoint request is reported by :meth:`pending` instead)."""
        return self.pending_stop() is not None

    def complete(self, outcome: Outcome) -> Outcome:
        """Record how a request ended (write-once); return ``outcome``.

        Writing the identical outcome again is a no-op. Raises
        :class:`ConfigurationError` when the request does not exist or already has a
        different outcome (the first one stands).
        """
        rid = outcome.request_id
        if self.request(rid) is None:
            raise ConfigurationError(
                f"job {self.job_id!r} has no control request {rid!r}; only an existing "
                "request can be completed (list them with the gic CLI)"
            )
        uri = outcome_uri(self.root, self.job_id, rid)
        store, key = self._resolver.resolve(uri)
        try:
            create_once(store, key, _bounded(encode_outcome(outcome), "outcome", uri))
        except ObjectExistsError:
            existing = self.outcome(rid)
            if existing != outcome:
                raise ConfigurationError(
                    f"request {rid!r} of job {self.job_id!r} already has an outcome "
                    f"({existing!r}); outcomes are write-once and the first one stands"
                ) from None
        with self._lock:
            self._outcomes[rid] = outcome
        return outcome

    def wait(
        self,
        request_id: str,
        timeout_s: float,
        poll_s: float = 0.5,
        progress: Callable[[float], None] | None = None,
    ) -> Outcome:
        """Wait until ``request_id`` has an outcome and return it (completed or failed).

        ``progress`` is called with the seconds waited so far after every look that
        found none. Raises :class:`ControlTimeoutError` after ``timeout_s`` seconds and
        :class:`ConfigurationError` when there is no such request.
        """
        if poll_s <= 0 or timeout_s < 0:
            raise ConfigurationError(
                f"wait needs poll_s > 0 and timeout_s >= 0, got {poll_s} and {timeout_s}"
            )
        start = self._clock.monotonic()
        if self.outcome(request_id) is None and self.request(request_id) is None:
            raise ConfigurationError(
                f"job {self.job_id!r} has no control request {request_id!r}; "
                "check the id (the gic CLI lists a job's requests)"
            )
        while True:
            found = self.outcome(request_id)
            if found is not None:
                return found
            elapsed = self._clock.monotonic() - start
            if elapsed >= timeout_s:
                raise ControlTimeoutError(
                    f"request {request_id!r} of job {self.job_id!r} has no outcome after "
                    f"{elapsed:.1f} s: is the job's driver running? Check the job's status "
                    f"record ({job_dir(self.root, self.job_id)}/status.json) and the driver's "
                    "logs. The request stays pending; a running driver serves it at its "
                    "next batch"
                )
            if progress is not None:
                progress(elapsed)
            self._sleep(min(poll_s, timeout_s - elapsed))


def _normalize_target(target: str) -> str:
    """A savepoint target as a full URI (a plain path becomes ``file://``)."""
    return str(StorageURI.parse(target.strip())).rstrip("/")
