"""Savepoint and stop requests, served by the driver between batches.

Requests arrive through the job's durable control channel
(:class:`~gic_runtime.control.ControlChannel`); :func:`serve_pending` serves what is
pending from the latest checkpoint
(:func:`~gic_runtime.driver.savepoint_requests.serve_request`) and reports each outcome
to the driver's telemetry.

Invariants: only what the driver's :class:`~gic_runtime.control.auth.RequestGuard`
accepts is served (authenticated for this job when the driver has a control key, never
served twice, a savepoint target inside the job's storage); a refused request gets a
failed outcome saying why (so its requester learns at once and it is not looked at
again), is counted (``gic_control_requests_refused_total``) and logged by id and reason,
never with its bytes, and the job keeps running. Requests are served in order --
pending savepoints oldest first, then a stop -- and a request is served only after the
one before it: while there is no checkpoint to serve from, it and every later request
stay pending. Nothing after a request that ends the job (a stop, a terminal savepoint)
is served. Each served request's outcome is recorded once, by the control channel.

Thread-safety: called under the driver's lock, between batches.
"""

from __future__ import annotations

import logging

from gic_runtime.control import ControlChannel
from gic_runtime.control.auth import RequestGuard
from gic_runtime.control.model import ControlRequest, Outcome
from gic_runtime.driver.savepoint_requests import serve_request, stops_job
from gic_runtime.driver.timeline import CheckpointTimeline
from gic_runtime.errors import GICError
from gic_runtime.spark.telemetry import Telemetry
from gic_runtime.storage.uri import StoreResolver

__all__ = ["serve_pending"]

_log = logging.getLogger(__name__)


def _refuse(
    control: ControlChannel, telemetry: Telemetry, request: ControlRequest, reason: str
) -> None:
    """Record that ``request`` is refused: counted, logged (id and reason only) and a
    failed outcome, unless one was written first (then that one stands)."""
    telemetry.refused()
    rid = request.request_id
    _log.warning("refused control request %s of job %s: %s", rid, control.job_id, reason)
    try:
        control.complete(Outcome.failed(rid, f"refused: {reason}"))
    except GICError as exc:
        _log.warning("could not record the refusal of control request %s: %s", rid, exc)


def serve_pending(
    resolver: StoreResolver,
    timeline: CheckpointTimeline,
    control: ControlChannel,
    telemetry: Telemetry,
    guard: RequestGuard,
) -> str | None:
    """Serve the pending requests of ``control`` that ``guard`` accepts (refusing the
    others); returns why the job stops once a served request ends it (``None``: keep
    running)."""
    state = control.poll()
    requests: list[ControlRequest] = [*state.savepoints]
    if state.stop is not None:
        requests.append(state.stop)
    for request in requests:
        reason = guard.refusal(request)
        if reason is not None:
            _refuse(control, telemetry, request, reason)
            continue
        outcome = serve_request(resolver, timeline, control, request)
        if outcome is None:
            break
        guard.honoured(request.request_id)
        telemetry.savepoint(request, outcome)
        if stops_job(request):
            return f"stopped by request {request.request_id}"
    return None
