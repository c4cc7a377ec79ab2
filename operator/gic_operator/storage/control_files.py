"""Control requests the operator writes for a job's driver, and the outcomes it reads.

:class:`ControlRequests` is the control-channel part of
:class:`~gic_operator.storage.job_storage.JobStorage` (mixed into it): asking the driver for a
savepoint or a stop (``<job>/control/requests/``), reading how a request ended
(``<job>/control/outcomes/``), and abandoning a request no driver served. The records
are the runtime's (:mod:`gic_runtime.control`).

Invariants: every request carries a MAC with the job's control key
(:mod:`gic_operator.control_keys`), so the job's driver honours it; requests are
write-once and idempotent by id -- asking again with the same
id and intent returns the stored request, and a request already stored under the id
with another intent (e.g. another target) or without the job's MAC is refused, never
adopted; an outcome is
write-once, so the first one written (by a driver or by :meth:`abandon_request`)
stands; every read of a request or outcome is bounded (:data:`MAX_CONTROL_BYTES`,
:func:`~gic_operator.storage.bounded_reads.read_bounded`), and an outcome that names another
request is corrupt.

Thread-safety: as :class:`~gic_operator.storage.job_storage.JobStorage` (no state of its own).
"""

from __future__ import annotations

import dataclasses
import time

from gic_operator.storage.bounded_reads import normalize_uri, read_bounded
from gic_runtime.control.auth import ControlKey
from gic_runtime.control.channel import outcome_uri, request_uri
from gic_runtime.control.model import (
    ControlRequest,
    Outcome,
    OutcomeState,
    SavepointRequest,
    StopRequest,
    decode_outcome,
    decode_request,
    encode_outcome,
    encode_request,
    parse_savepoint_format,
    parse_savepoint_type,
)
from gic_runtime.errors import ConfigurationError, CorruptFileError, ObjectExistsError
from gic_runtime.layout import validate_id
from gic_runtime.storage.uri import StoreResolver
from gic_runtime.storage.writes import create_once

__all__ = ["MAX_CONTROL_BYTES", "ControlRequests"]

#: Largest control request or outcome the operator reads (bytes).
MAX_CONTROL_BYTES = 256 << 10


class ControlRequests:
    """The control requests of job ``job_id`` under ``root`` (see the module docstring);
    the class it is mixed into sets ``resolver``, ``root`` and ``job_id``."""

    resolver: StoreResolver
    root: str
    job_id: str

    def _request(self, request_id: str) -> ControlRequest | None:
        uri = request_uri(self.root, self.job_id, request_id)
        data = read_bounded(self.resolver, uri, MAX_CONTROL_BYTES, "control request")
        return None if data is None else decode_request(data, uri)

    def _submit(self, request: SavepointRequest | StopRequest, key: ControlKey) -> ControlRequest:
        """Write ``request`` once, authenticated with the job's control ``key``; an
        existing one with the same intent is returned, one with another intent refused
        (:class:`~gic_runtime.errors.ConfigurationError`)."""
        request = dataclasses.replace(request, mac=key.mac(self.job_id, request))
        rid = request.request_id
        existing = self._request(rid)
        if existing is None:
            store, name = self.resolver.resolve(request_uri(self.root, self.job_id, rid))
            try:
                create_once(store, name, encode_request(request))
                return request
            except ObjectExistsError:
                existing = self._request(rid)
        if (
            existing is not None
            and request.same_intent(existing)
            and key.verifies(self.job_id, existing)
        ):
            return existing
        raise ConfigurationError(
            f"request id {rid!r} of job {self.job_id!r} already names a different or "
            "unauthenticated request; it was not written by the operator for this intent and "
            "is not acted on"
        )

    def request_savepoint(
        self,
        request_id: str,
        *,
        key: ControlKey,
        kind: str,
        format: str,
        requested_by: str,
        target: str,
    ) -> str:
        """Ask the driver for a savepoint (``kind``: ``intermediate`` or ``terminal``)
        into ``target`` (a directory the caller derived), authenticated with the job's
        control ``key``; return the target. Asking again with the same id and intent
        returns the same target."""
        request = SavepointRequest(
            request_id=validate_id("request id", request_id),
            kind=parse_savepoint_type(kind),
            format=parse_savepoint_format(format),
            target=normalize_uri(target),
            requested_at=time.time(),
            requested_by=requested_by,
        )
        stored = self._submit(request, key)
        assert isinstance(stored, SavepointRequest)
        return stored.target

    def request_stop(self, request_id: str, requested_by: str, *, key: ControlKey) -> None:
        """Ask the driver to stop without a savepoint (idempotent by id), authenticated
        with the job's control ``key``."""
        stop = StopRequest(request_id, requested_at=time.time(), requested_by=requested_by)
        self._submit(stop, key)

    def abandon_request(self, request_id: str, reason: str) -> Outcome:
        """Record a failed outcome for a request no driver served, so no later driver
        serves it (a stale stop request would stop the next launch). If a driver wrote
        an outcome first, that one stands and is returned."""
        existing = self.outcome(request_id)
        if existing is not None:
            return existing
        outcome = Outcome(request_id, OutcomeState.FAILED, error=f"abandoned: {reason}")
        store, key = self.resolver.resolve(outcome_uri(self.root, self.job_id, request_id))
        try:
            create_once(store, key, encode_outcome(outcome))
        except ObjectExistsError:
            existing = self.outcome(request_id)
            if existing is None:
                raise
            return existing
        return outcome

    def outcome(self, request_id: str) -> Outcome | None:
        """How request ``request_id`` ended, ``None`` while it is pending (or unknown).
        An outcome that cannot be read (too large, corrupt, another request's) raises
        :class:`~gic_runtime.errors.FormatError`: outcomes are write-once, so it never
        becomes readable later."""
        uri = outcome_uri(self.root, self.job_id, request_id)
        data = read_bounded(self.resolver, uri, MAX_CONTROL_BYTES, "control outcome")
        if data is None:
            return None
        outcome = decode_outcome(data, uri)
        if outcome.request_id != request_id:
            raise CorruptFileError(
                f"the outcome of request {request_id!r} names request {outcome.request_id!r}",
                uri=uri,
            )
        return outcome
