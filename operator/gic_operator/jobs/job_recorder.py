"""Record a GICJob pass: what was observed, the conditions, errors; write status and Events.

:class:`JobRecorder` copies what the observer read into the status (the job id, the
latest checkpoint and savepoint, a restore source's release), derives the conditions
(``Ready``, ``CheckpointsHealthy``, ``RestoreSourceReleased``, ``Reconciled``) from the
status the pass ends with, reports an error a pass met or an invalid spec
(:mod:`gic_operator.reconcile.problems`), sets the checkpoint-age metric, and writes the
pass: one status merge patch, then the queued Events
(:meth:`~gic_operator.reconcile.status_pass.Pass.commit`).

Thread-safety: shared by the passes of every job (the problem reporter and the metrics
are thread-safe); each call works on one pass.
"""

from __future__ import annotations

from gic_operator.jobs.job_observer import JobView
from gic_operator.kube.conditions import parse_time
from gic_operator.models import JobPhase, RestoreMode
from gic_operator.models.base import Condition, ConditionStatus
from gic_operator.operator_errors import KubeError
from gic_operator.operator_metrics import OperatorMetrics
from gic_operator.reconcile.problems import Problem, ProblemReporter, describe
from gic_operator.reconcile.status_pass import JobPass

#: A running job without a completed checkpoint for this long is unhealthy (seconds).
DEFAULT_HEALTH_WINDOW_S = 300.0


class JobRecorder:
    """Records the passes of GICJobs (see the module doc)."""

    def __init__(
        self,
        metrics: OperatorMetrics | None = None,
        health_window_s: float = DEFAULT_HEALTH_WINDOW_S,
    ) -> None:
        self.metrics = metrics
        self.health_window_s = health_window_s
        self.problems = ProblemReporter("gicjob", metrics)

    # --- what was observed ------------------------------------------------------------

    def observed(self, p: JobPass, view: JobView) -> None:
        """Copy what the observer read into the status (the job id is recorded first,
        by :meth:`job_id`)."""
        restored = p.status.restored_from
        if view.restore_released and restored is not None:
            p.event(
                "Normal",
                "RestoreSourceReleased",
                f"no retained checkpoint references {restored.path} any more",
            )
            p.update(restored_from=restored.model_copy(update={"released": True}))
        if view.last_checkpoint is not None:
            p.update(last_checkpoint=view.last_checkpoint)
        if view.last_savepoint is not None:
            p.update(last_savepoint=view.last_savepoint)

    def job_id(self, p: JobPass, job_id: str) -> None:
        p.update(job_id=job_id)

    # --- invalid specs and errors -----------------------------------------------------

    def invalid(self, p: JobPass, message: str, reason: str = "InvalidSpec") -> None:
        """Record an invalid spec: nothing is launched; a running driver is left alone."""
        p.update(phase=JobPhase.INVALID, message=message, observed_generation=p.generation)
        p.condition("Ready", False, reason, message)
        self.problems.report(p, Problem(reason, message))

    def failed(self, p: JobPass, exc: Exception) -> None:
        """The pass met ``exc``: report it; what the steps recorded before it stays."""
        problem = describe(exc)
        self.problems.report(p, problem, exc)
        p.update(message=problem.message, phase=p.status.phase)
        if p.status.phase is not JobPhase.INVALID:
            self.conditions(p, problem.reason)

    def succeeded(self, p: JobPass, old_error: Condition | None) -> None:
        """The pass met no error: an error message it showed is over."""
        if p.status.phase is JobPhase.INVALID:
            return
        if (
            old_error is not None
            and old_error.status is ConditionStatus.FALSE
            and p.status.message == old_error.message
        ):
            p.update(message=None)  # the error is over; the phase says the rest
        self.problems.resolved(p)

    def unrecorded(self, namespace: str, name: str, exc: KubeError) -> None:
        self.problems.unrecorded(namespace, name, exc)

    # --- conditions, metrics, writing -------------------------------------------------

    def conditions(self, p: JobPass, not_ready_reason: str | None) -> None:
        phase = p.status.phase
        if phase is JobPhase.INVALID:
            return
        running = phase is JobPhase.RUNNING
        p.condition(
            "Ready",
            running,
            "Running" if running else (not_ready_reason or str(phase)),
            "the driver is running" if running else (p.status.message or f"phase {phase}"),
        )
        _checkpoint_health(p, running or phase is JobPhase.STARTING, self.health_window_s)
        restored = p.status.restored_from
        if restored is None:
            return
        if restored.mode is RestoreMode.CLAIM:
            p.condition(
                "RestoreSourceReleased",
                False,
                "Claimed",
                f"the job owns {restored.path} (Claim): it is never released",
            )
        elif restored.released:
            p.condition(
                "RestoreSourceReleased",
                True,
                "Released",
                f"no retained checkpoint references {restored.path}: it may be deleted",
            )
        else:
            p.condition(
                "RestoreSourceReleased",
                False,
                "StillReferenced",
                f"retained checkpoints still reference {restored.path}; it is released "
                "after the first checkpoint completes",
            )

    def checkpoint_age(self, p: JobPass) -> None:
        """Set the checkpoint-age metric from the status the pass ends with."""
        if self.metrics is None:
            return
        last = p.status.last_checkpoint
        when = None if last is None else parse_time(last.time)
        age = None if when is None else max(0.0, p.now - when)
        self.metrics.set_checkpoint_age(p.namespace, p.name, age)

    def forget(self, namespace: str, name: str) -> None:
        """Drop the metrics of a deleted job."""
        if self.metrics is not None:
            self.metrics.set_checkpoint_age(namespace, name, None)

    def commit(self, p: JobPass) -> dict[str, object]:
        """Write the status patch, then the Events; return the patch sent."""
        return self.problems.commit(p)


def failure_reason(p: JobPass, view: JobView) -> str | None:
    """The reason the current driver reported for its failure while the job is
    ``Failed`` or ``Recovering`` because of it (the ``Ready`` reason), else ``None``."""
    if view.failure is None or p.status.phase not in (JobPhase.FAILED, JobPhase.RECOVERING):
        return None
    return view.failure.reason


def _checkpoint_health(p: JobPass, running: bool, window_s: float) -> None:
    if not running:
        p.condition("CheckpointsHealthy", None, "NotRunning", "the driver is not running")
        return
    last = p.status.last_checkpoint
    last_time = None if last is None else parse_time(last.time)
    since = parse_time(p.status.running_since) or p.now
    if last is not None and last_time is not None and p.now - last_time <= window_s:
        # The message names the checkpoint, not its age: a status that changes every
        # second would be patched on every reconcile.
        p.condition(
            "CheckpointsHealthy",
            True,
            "Recent",
            f"checkpoint {last.id} completed at {last.time}",
        )
    elif last_time is None and p.now - since <= window_s:
        p.condition("CheckpointsHealthy", None, "Starting", "no checkpoint completed yet")
    else:
        p.condition(
            "CheckpointsHealthy",
            False,
            "Stale",
            f"no checkpoint completed in the last {window_s:.0f} s; check the driver's log "
            "and the storage",
        )
