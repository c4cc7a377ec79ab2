"""The multi-step actions of a GICJob: upgrade, suspend and recover.

An action lives in ``status.pending`` (:data:`~gic_operator.models.PendingAction`: a
:class:`~gic_operator.models.RecoverAction`, :class:`~gic_operator.models.UpgradeAction`
or :class:`~gic_operator.models.SuspendAction`, with when it started, the epoch a recovery
claimed, whether a stop-with-savepoint request was written...), so it survives operator
restarts; :meth:`JobActions.advance` moves it one step per reconcile, with one handler
per kind. The actions use the single steps (:class:`~gic_operator.jobs.job_steps.JobSteps`:
clearing old drivers, the launch) and act on the same
:class:`~gic_operator.jobs.job_steps.JobContext`. Each step is idempotent: control
requests have deterministic ids and are create-once, a recovery records its epoch before
claiming it and claims no other however often the claim or its later steps are
retried, and a savepoint outcome is trusted only for the directory the request named.

Thread-safety: used by one reconcile at a time (the job's lock).
"""

from __future__ import annotations

import logging
from typing import assert_never

from gic_operator.jobs.job_steps import JobContext, JobSteps
from gic_operator.kube.conditions import parse_time, rfc3339
from gic_operator.kube.naming import job_id, request_id, savepoint_dir
from gic_operator.models import (
    ActionKind,
    JobPhase,
    PendingAction,
    RecoverAction,
    SavepointRef,
    SuspendAction,
    SweepInfo,
    UpgradeAction,
    UpgradeMode,
)
from gic_operator.models.gicjob import SAVEPOINT_TIMEOUT_S
from gic_operator.operator_errors import UntrustedInputError
from gic_operator.storage.driver_reports import checked_outcome_path
from gic_runtime.checkpoint.manifest import SavepointType
from gic_runtime.errors import FormatError

log = logging.getLogger(__name__)

#: Seconds a stop-with-savepoint may take before an upgrade or suspend gives up.
STOP_SAVEPOINT_TIMEOUT_S = float(SAVEPOINT_TIMEOUT_S)
#: Seconds a driver may keep running after its terminal savepoint completed.
STOP_GRACE_S = 60.0
#: What :meth:`JobActions._stop_with_savepoint` returns when the driver ended before it
#: served the request (and no later driver will).
ENDED_FIRST = "-"

StopAction = UpgradeAction | SuspendAction


class JobActions:
    """The multi-step actions of one reconcile of a job, over its context and steps."""

    def __init__(self, ctx: JobContext, steps: JobSteps) -> None:
        self.ctx = ctx
        self.steps = steps

    # --- multi-step actions -------------------------------------------------------------

    def begin_upgrade(self) -> None:
        p = self.ctx.p
        mode = self.ctx.spec.upgrade_mode
        rid = None
        if mode is UpgradeMode.SAVEPOINT:
            rid = self._request_id(ActionKind.UPGRADE, p.generation)
        pending = UpgradeAction(
            mode=mode, started=rfc3339(p.now), target_generation=p.generation, request_id=rid
        )
        p.update(phase=JobPhase.UPGRADING, pending=pending, message=f"upgrading ({mode})")
        p.event("Normal", "UpgradeStarted", f"rolling out generation {p.generation} ({mode})")
        self.advance(pending)

    def begin_suspend(self) -> None:
        p = self.ctx.p
        pending = SuspendAction(
            started=rfc3339(p.now),
            request_id=self._request_id(ActionKind.SUSPEND, p.generation),
            target_generation=p.generation,
        )
        p.update(phase=JobPhase.SUSPENDING, pending=pending, message="stopping with a savepoint")
        p.event("Normal", "SuspendStarted", "stopping the job with a savepoint")
        self.advance(pending)

    def advance(self, pending: PendingAction) -> None:
        """Move ``pending`` (the action in ``status.pending``) one step."""
        match pending:
            case RecoverAction():
                self._advance_recover(pending)
            case UpgradeAction():
                self._advance_upgrade(pending)
            case SuspendAction():
                self._advance_suspend(pending)
            case _:
                assert_never(pending)

    def _advance_recover(self, pending: RecoverAction) -> None:
        p = self.ctx.p
        due = parse_time(pending.due) or p.now
        if p.now < due:
            p.update(phase=JobPhase.RECOVERING)
            return
        if not self.steps.clear_other_drivers():
            p.update(phase=JobPhase.RECOVERING, message="waiting for the old driver to go")
            self.ctx.waiting_for_launch = True
            return
        epoch = pending.epoch or 0
        highest = self.ctx.storage.highest_epoch()
        if not epoch or highest > epoch:
            # One epoch per recovery, chosen and recorded in status.pending before the
            # claim: a claim, sweep or launch that fails (whatever a driver wrote) is
            # retried by later passes with the same epoch, and claims no further one.
            epoch = highest + 1
            pending = pending.model_copy(update={"epoch": epoch})
            p.update(
                pending=pending,
                restarts=p.status.restarts + 1,
                last_restart_time=rfc3339(p.now),
                next_restart_time=None,
            )
            if not p.write_ahead():
                return  # not recorded (the job changed meanwhile): claim nothing
        # Idempotent: completes the claim a failed pass left (its marker is ours).
        self.ctx.storage.claim_epoch(f"gic-operator recovery {p.namespace}/{p.name}", epoch)
        sweep = p.status.last_sweep
        if sweep is None or sweep.epoch != epoch:
            restored = p.status.restored_from
            # A restore source is read only where the operator itself restored from.
            result = self.ctx.storage.sweep_orphans(restored.path if restored else None)
            p.update(
                last_sweep=SweepInfo(
                    time=rfc3339(p.now),
                    files=result.deleted,
                    bytes=result.deleted_bytes,
                    epoch=epoch,
                )
            )
            p.event(
                "Normal",
                "OrphansSwept",
                f"fenced at epoch {epoch}, then deleted {result.deleted} orphaned objects "
                f"({result.deleted_bytes} bytes) of job {self.ctx.job_id}",
            )
        self.steps.launch(reason=f"recovery {p.status.restarts} after: {pending.reason}")

    def _stop_with_savepoint(self, pending: StopAction) -> str | None:
        """Drive a terminal savepoint; the savepoint path once the old driver is gone,
        :data:`ENDED_FIRST` when it ended before serving the request, ``""`` when it
        failed (recorded), ``None`` while in progress."""
        p = self.ctx.p
        what = pending.kind
        rid = self._request_id(what, pending.target_generation or p.generation)
        target = savepoint_dir(self.ctx.storage.root, p.namespace, p.name, rid)
        if not pending.requested:
            self.ctx.storage.request_savepoint(
                rid,
                key=self.ctx.control_keys.for_job(p.namespace, p.name, p.uid),
                kind=SavepointType.TERMINAL,
                format=self.ctx.spec.savepoints.format,
                requested_by=f"gic-operator {what} {p.namespace}/{p.name}",
                target=target,
            )
            p.update(pending=pending.model_copy(update={"requested": True}))
        try:
            outcome = self.ctx.storage.outcome(rid)
        except FormatError as exc:  # write-once: it never becomes readable
            return self._savepoint_failed(what, f"its outcome is unreadable: {exc}")
        started = parse_time(pending.started) or p.now
        alive = self.ctx.view.driver_state.alive
        if outcome is None:
            if not alive:
                # The driver ended without serving it: make sure no later driver does.
                outcome = self.ctx.storage.abandon_request(
                    rid, f"the driver ended before the {what}"
                )
                if outcome.error is not None:
                    return ENDED_FIRST
            elif p.now - started > STOP_SAVEPOINT_TIMEOUT_S:
                error = f"no savepoint after {STOP_SAVEPOINT_TIMEOUT_S:.0f} s"
                outcome = self.ctx.storage.abandon_request(rid, error)
                if outcome.error is not None:
                    return self._savepoint_failed(what, error)
            else:
                return None
        if outcome.error is not None:
            return self._savepoint_failed(what, outcome.error)
        try:
            path = checked_outcome_path(outcome, target)
        except UntrustedInputError as exc:
            return self._savepoint_failed(what, str(exc))
        p.update(last_savepoint=SavepointRef(path=path, time=rfc3339(outcome.finished_at)))
        if alive:
            if p.now - outcome.finished_at > STOP_GRACE_S and self.ctx.view.pod is not None:
                self.ctx.kube.delete_pod(p.namespace, self.ctx.view.pod.name, 30)
            return None
        return path

    def _request_id(self, what: ActionKind, generation: int) -> str:
        """The request id of an upgrade or suspend of ``generation``, derived (never taken
        from the status: it names a file in the job's control channel)."""
        p = self.ctx.p
        return request_id(what.value, p.name, f"g{generation}", p.uid[:8])

    def _savepoint_failed(self, what: ActionKind, error: str) -> str:
        p = self.ctx.p
        if what is ActionKind.UPGRADE:
            p.update(upgrade_failed_generation=p.generation)
        else:
            p.update(suspend_failed_generation=p.generation)
        p.update(pending=None, message=f"{what} savepoint failed: {error}")
        p.event("Warning", f"{what.capitalize()}Failed", f"the {what} savepoint failed: {error}")
        return ""

    def _advance_upgrade(self, pending: UpgradeAction) -> None:
        p = self.ctx.p
        mode = pending.mode
        if mode is UpgradeMode.SAVEPOINT:
            path = self._stop_with_savepoint(pending)
            if path is None or path == "":
                if path is None:
                    p.update(phase=JobPhase.UPGRADING)
                return
            ended = path == ENDED_FIRST
            reason = "upgrade (driver ended first)" if ended else "upgrade from savepoint"
        else:
            if not self.steps.clear_other_drivers(grace=30):
                p.update(phase=JobPhase.UPGRADING, message="waiting for the old driver to go")
                return
            reason = f"upgrade ({mode})"
            if mode is UpgradeMode.STATELESS:
                lineage = p.status.lineage + 1
                self.ctx.job_id = job_id(p.namespace, p.name, lineage)
                self.ctx.storage = self.ctx.storage_for(self.ctx.spec, self.ctx.job_id)
                p.update(
                    lineage=lineage,
                    job_id=self.ctx.job_id,
                    restored_from=None,
                    last_checkpoint=None,
                )
        if self.steps.launch(reason=reason):
            p.event("Normal", "Upgraded", f"generation {p.generation} is deployed ({reason})")

    def _advance_suspend(self, pending: SuspendAction) -> None:
        p = self.ctx.p
        path = self._stop_with_savepoint(pending)
        if path is None:
            p.update(phase=JobPhase.SUSPENDING)
            return
        if path == "":
            return
        if not self.steps.clear_other_drivers():
            return
        p.update(
            phase=JobPhase.SUSPENDED,
            pending=None,
            driver_pod=None,
            running_since=None,
            message="suspended; set spec.state to running to resume",
        )
        where = f" at savepoint {path}" if path != ENDED_FIRST else " (the driver ended first)"
        p.event("Normal", "Suspended", f"the job is suspended{where}")
