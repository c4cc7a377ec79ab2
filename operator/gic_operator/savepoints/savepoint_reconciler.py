"""Decide a Savepoint's next state from what a pass observed, and act on the job's
storage.

* ``TriggerPending``: waits until its GICJob is Running, then writes the savepoint
  control request (id and directory derived, create-once) -> ``InProgress``;
* ``InProgress``: the request's outcome -> ``Completed`` (checkpoint id, size) or
  ``Failed`` (its error; an unreadable outcome; an outcome naming another directory than
  the one requested); no outcome after ``spec.savepoints.timeoutSeconds`` of the job:
  the request is abandoned (so no later driver serves it) -> ``Failed``.

The view (:class:`~gic_operator.savepoints.savepoint_observer.SavepointView`) is read by
the observer; the transitions are written by the recorder
(:class:`~gic_operator.savepoints.savepoint_recorder.SavepointRecorder`).

Thread-safety: used by one reconcile at a time (the savepoint's lock).
"""

from __future__ import annotations

from gic_operator.control_keys import ControlKeys
from gic_operator.kube.conditions import parse_time
from gic_operator.models import JobPhase, SavepointState
from gic_operator.operator_errors import UntrustedInputError
from gic_operator.reconcile.status_pass import SavepointPass
from gic_operator.savepoints.savepoint_observer import SavepointView
from gic_operator.savepoints.savepoint_recorder import SavepointRecorder
from gic_operator.storage.driver_reports import checked_outcome_path, status_int


class SavepointReconciler:
    """Takes one pass's step on a Savepoint (see the module doc)."""

    def __init__(self, recorder: SavepointRecorder, control_keys: ControlKeys) -> None:
        self.recorder = recorder
        self.control_keys = control_keys

    def reconcile(self, p: SavepointPass, view: SavepointView, state: SavepointState) -> None:
        rec = self.recorder
        if view.spec_error is not None or view.spec is None:
            rec.failed(p, view.spec_error or "invalid spec", count=False)
            return
        job = view.spec.job
        if view.job_missing:
            rec.abandoned(p, f"GICJob {job!r} does not exist (any more) in namespace {p.namespace}")
            return
        if view.job_invalid is not None:
            rec.job_invalid(p, state, f"GICJob {job} is invalid: {view.job_invalid} errors")
            return
        if state is SavepointState.TRIGGER_PENDING:
            self._trigger(p, view)
        else:
            self._follow(p, view)

    def _trigger(self, p: SavepointPass, view: SavepointView) -> None:
        assert view.spec is not None and view.request is not None
        assert view.job_status is not None
        spec, request = view.spec, view.request
        if view.job_status.phase is not JobPhase.RUNNING:
            self.recorder.waiting(p, spec.job, view.job_status.phase)
            return
        kind = spec.mode.to_runtime()
        assert view.job is not None
        request.storage.request_savepoint(
            request.rid,
            key=self.control_keys.for_job(p.namespace, spec.job, view.job.uid),
            kind=kind,
            format=spec.format,
            requested_by=f"gic-operator savepoint {p.namespace}/{p.name}",
            target=request.target,
        )
        self.recorder.triggered(p, spec.job, request.rid, request.target, kind)

    def _follow(self, p: SavepointPass, view: SavepointView) -> None:
        assert view.request is not None and view.job_spec is not None and view.job is not None
        storage, rid, target = view.request.storage, view.request.rid, view.request.target
        rec = self.recorder
        if view.outcome_unreadable is not None:
            rec.failed(
                p, f"the driver's outcome is unreadable (it stays so): {view.outcome_unreadable}"
            )
            return
        outcome = view.outcome
        if outcome is None:
            started = parse_time(p.status.trigger_time) or p.now
            timeout = view.job_spec.savepoints.timeout_seconds
            if p.now - started > timeout:
                error = f"no savepoint after {timeout} s (spec.savepoints.timeoutSeconds)"
                outcome = storage.abandon_request(rid, error)
                if outcome.error is not None:
                    rec.failed(p, error)
                    return
            else:
                return
        if outcome.error is not None:
            rec.failed(p, outcome.error)
            return
        try:
            path = checked_outcome_path(outcome, target)
        except UntrustedInputError as exc:
            rec.failed(p, str(exc))
            return
        rec.completed(
            p,
            view.job,
            rid,
            path,
            checkpoint=None if outcome.checkpoint_id is None else status_int(outcome.checkpoint_id),
            size=None if outcome.size_bytes is None else status_int(outcome.size_bytes),
            finished_at=outcome.finished_at,
        )
