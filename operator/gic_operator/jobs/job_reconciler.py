"""Decide a GICJob's next step from what a pass observed, and take it.

:func:`decide` is pure: from the observed :class:`~gic_operator.jobs.job_observer.JobView`,
the spec, the status read and the generation it gives the one :class:`Decision` of a
pass without an action in progress (launch, begin an upgrade or a suspend, schedule a
recovery, record ``Starting``/``Running``, ``Finished``, ``Suspended``, or wait).
:class:`JobReconciler` takes it, or, with ``status.pending`` set, moves that action one
step (:class:`~gic_operator.jobs.job_actions.JobActions`); a ``status.pending`` it cannot
read is dropped. What it changes goes to the pass's working status and Events, which the
recorder (:mod:`gic_operator.jobs.job_recorder`) writes.

Thread-safety: used by one reconcile at a time (the job's lock).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum

from gic_operator.jobs.job_actions import JobActions
from gic_operator.jobs.job_observer import DriverState, JobView
from gic_operator.jobs.job_steps import JobContext, JobSteps
from gic_operator.models import GICJobSpec, GICJobStatus, JobPhase, JobState
from gic_operator.reconcile.status_pass import JobPass

log = logging.getLogger(__name__)


class Step(StrEnum):
    """What a pass without an action in progress does (:func:`decide`)."""

    WAIT = "wait"
    BEGIN_SUSPEND = "begin-suspend"
    RECORD_SUSPENDED = "record-suspended"
    #: The spec changed after the job failed: the restart count restarts, then a launch.
    RELAUNCH_FAILED = "relaunch-failed"
    LAUNCH = "launch"
    DRIVER_FAILED = "driver-failed"
    RECORD_FINISHED = "record-finished"
    RECORD_DEPLOYING = "record-deploying"
    RUNNING = "running"
    #: The driver runs an older generation: record it running, then begin an upgrade.
    RUNNING_THEN_UPGRADE = "running-then-upgrade"


@dataclass(frozen=True)
class Decision:
    """The step of a pass, with the reason a launch names."""

    step: Step
    reason: str = ""


def decide(view: JobView, spec: GICJobSpec, status: GICJobStatus, generation: int) -> Decision:
    """No action in progress: compare the desired state (``spec.state``, the generation)
    with the driver pod's state and choose at most one step."""
    pod_state = view.driver_state
    phase = status.phase
    if spec.state is JobState.SUSPENDED:
        if pod_state.alive:
            if status.suspend_failed_generation == generation:
                return Decision(Step.WAIT)
            return Decision(Step.BEGIN_SUSPEND)
        if phase is not JobPhase.SUSPENDED:
            return Decision(Step.RECORD_SUSPENDED)
        return Decision(Step.WAIT)
    if phase is JobPhase.FAILED:
        if status.deployed_generation == generation:
            return Decision(Step.WAIT)  # stays Failed until the spec changes
        return Decision(Step.RELAUNCH_FAILED, "the spec changed after the job failed")
    if pod_state is DriverState.NONE:
        finished = phase is JobPhase.FINISHED
        if finished and status.deployed_generation == generation:
            return Decision(Step.WAIT)
        return Decision(Step.LAUNCH, "resumed" if phase is JobPhase.SUSPENDED else "started")
    if pod_state in (DriverState.FAILED, DriverState.GONE):
        return Decision(Step.DRIVER_FAILED)
    if pod_state is DriverState.SUCCEEDED:
        if status.deployed_generation != generation:
            return Decision(Step.LAUNCH, "spec changed after the job finished")
        if phase is not JobPhase.FINISHED:
            return Decision(Step.RECORD_FINISHED)
        return Decision(Step.WAIT)
    if pod_state is DriverState.PENDING:
        return Decision(Step.RECORD_DEPLOYING)
    if pod_state is DriverState.RUNNING:
        upgrade_due = status.deployed_generation not in (None, generation)
        if upgrade_due and status.upgrade_failed_generation != generation:
            return Decision(Step.RUNNING_THEN_UPGRADE)
        return Decision(Step.RUNNING)
    return Decision(Step.WAIT)  # deleting, or a phase the pod should not have


class JobReconciler:
    """Takes one pass's step on a job (see the module doc)."""

    def __init__(self, ctx: JobContext) -> None:
        self.ctx = ctx
        self.steps = JobSteps(ctx)
        self.actions = JobActions(ctx, self.steps)

    def reconcile(self) -> None:
        """Advance the action in ``status.pending``, else take the step :func:`decide`
        chooses."""
        p = self.ctx.p
        pending = p.status.pending
        if pending is not None:
            self.actions.advance(pending)
        elif p.stored("pending") is not None:
            _drop_unreadable_action(p)
        else:
            self.take(decide(self.ctx.view, self.ctx.spec, p.status, p.generation))

    def take(self, decision: Decision) -> None:
        p, view = self.ctx.p, self.ctx.view
        match decision.step:
            case Step.WAIT:
                pass
            case Step.BEGIN_SUSPEND:
                self.actions.begin_suspend()
            case Step.RECORD_SUSPENDED:
                p.update(phase=JobPhase.SUSPENDED, driver_pod=None, running_since=None)
                p.update(message="suspended; set spec.state to running to resume")
                p.event("Normal", "Suspended", "the job is suspended (no driver)")
            case Step.RELAUNCH_FAILED:
                p.update(restarts=0)
                self.steps.launch(reason=decision.reason)
            case Step.LAUNCH:
                self.steps.launch(reason=decision.reason)
            case Step.DRIVER_FAILED:
                self.steps.driver_failed()
            case Step.RECORD_FINISHED:
                p.update(phase=JobPhase.FINISHED, running_since=None, message=view.pod_summary)
                p.event("Normal", "JobFinished", f"the driver exited: {view.pod_summary}")
            case Step.RECORD_DEPLOYING:
                p.update(phase=JobPhase.DEPLOYING)
            case Step.RUNNING:
                self.steps.running()
            case Step.RUNNING_THEN_UPGRADE:
                self.steps.running()
                self.actions.begin_upgrade()


def _drop_unreadable_action(p: JobPass) -> None:
    """``status.pending`` holds an action this operator cannot read (an unknown kind, a
    field missing or invalid): drop it; the next pass decides from the spec and the pod."""
    raw = p.stored("pending")
    kind = raw.get("kind") if isinstance(raw, dict) else raw
    text = repr(kind)[:40]
    log.warning("gicjob %s/%s: dropped unreadable pending action %s", p.namespace, p.name, text)
    p.update(pending=None)
    p.event("Warning", "UnknownAction", f"dropped unknown pending action {text}")
