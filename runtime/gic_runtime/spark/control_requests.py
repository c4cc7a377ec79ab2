"""Savepoint and stop requests, served by the driver between batches.

Requests arrive through the job's durable control channel
(:class:`~gic_runtime.control.ControlChannel`); :func:`serve_pending` serves what is
pending from the latest checkpoint
(:func:`~gic_runtime.driver.savepoint_requests.serve_request`) and reports each outcome
to the driver's telemetry.

Invariants: requests are served in order -- pending savepoints oldest first, then a
stop -- and a request is served only after the one before it: while there is no
checkpoint to serve from, it and every later request stay pending. Nothing after a
request that ends the job (a stop, a terminal savepoint) is served. Each served
request's outcome is recorded once, by the control channel.

Thread-safety: called under the driver's lock, between batches.
"""

from __future__ import annotations

from gic_runtime.control import ControlChannel
from gic_runtime.control.model import ControlRequest
from gic_runtime.driver.savepoint_requests import serve_request, stops_job
from gic_runtime.driver.timeline import CheckpointTimeline
from gic_runtime.spark.telemetry import Telemetry
from gic_runtime.storage.uri import StoreResolver

__all__ = ["serve_pending"]


def serve_pending(
    resolver: StoreResolver,
    timeline: CheckpointTimeline,
    control: ControlChannel,
    telemetry: Telemetry,
) -> str | None:
    """Serve the pending requests of ``control``; returns why the job stops once a
    served request ends it (``None``: keep running)."""
    state = control.poll()
    requests: list[ControlRequest] = [*state.savepoints]
    if state.stop is not None:
        requests.append(state.stop)
    for request in requests:
        outcome = serve_request(resolver, timeline, control, request)
        if outcome is None:
            break
        telemetry.savepoint(request, outcome)
        if stops_job(request):
            return f"stopped by request {request.request_id}"
    return None
