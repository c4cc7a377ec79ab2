"""Record a Savepoint pass: its state transitions, conditions and errors; write status
and Events.

Every transition a Savepoint makes is recorded here, with its Event:
``InProgress`` (``SavepointTriggered``), ``Completed`` (``SavepointCompleted``, also on
the job), ``Failed`` (``SavepointFailed``), ``Abandoned`` (``SavepointAbandoned``); an
error a pass met is reported as for GICJobs (:mod:`gic_operator.reconcile.problems`);
:meth:`SavepointRecorder.commit` writes one status merge patch, then the Events.

Thread-safety: shared by the passes of every savepoint (the problem reporter and the
metrics are thread-safe); each call works on one pass.
"""

from __future__ import annotations

from typing import Any

from gic_operator.kube.bodies import Body
from gic_operator.kube.conditions import rfc3339
from gic_operator.kube.kube_api import KubeApi
from gic_operator.models import JobPhase, SavepointState
from gic_operator.operator_errors import KubeError
from gic_operator.operator_metrics import OperatorMetrics
from gic_operator.reconcile.problems import Problem, ProblemReporter
from gic_operator.reconcile.status_pass import SavepointPass
from gic_runtime.checkpoint.manifest import SavepointType


class SavepointRecorder:
    """Records the passes of Savepoints (see the module doc)."""

    def __init__(self, kube: KubeApi, metrics: OperatorMetrics | None = None) -> None:
        self.kube = kube
        self.problems = ProblemReporter("savepoint", metrics)

    def failed(self, p: SavepointPass, error: str, *, count: bool = True) -> None:
        failures = p.status.failures + (1 if count else 0)
        p.update(
            state=SavepointState.FAILED,
            error=error,
            failures=failures,
            completion_time=rfc3339(p.now),
        )
        p.event("Warning", "SavepointFailed", error)

    def abandoned(self, p: SavepointPass, message: str) -> None:
        p.update(state=SavepointState.ABANDONED, error=message)
        p.update(completion_time=rfc3339(p.now))
        p.event("Warning", "SavepointAbandoned", message)

    def job_invalid(self, p: SavepointPass, state: SavepointState, message: str) -> None:
        """The job's spec cannot be read: the state stays, the error says why."""
        p.update(state=state, error=message)

    def waiting(self, p: SavepointPass, job: str, phase: JobPhase) -> None:
        p.update(state=SavepointState.TRIGGER_PENDING)
        p.condition(
            "Triggered",
            False,
            "JobNotRunning",
            f"waiting for GICJob {job} to be Running (it is {phase})",
        )

    def triggered(
        self, p: SavepointPass, job: str, rid: str, target: str, kind: SavepointType
    ) -> None:
        p.update(
            state=SavepointState.IN_PROGRESS,
            request_id=rid,
            path=target,
            trigger_time=rfc3339(p.now),
        )
        p.condition("Triggered", True, "Requested", f"request {rid} written for the driver")
        p.event("Normal", "SavepointTriggered", f"asked job {job} for a savepoint ({kind})")

    def completed(
        self,
        p: SavepointPass,
        job: Body,
        rid: str,
        path: str,
        *,
        checkpoint: int | None,
        size: int | None,
        finished_at: float,
    ) -> None:
        p.update(
            state=SavepointState.COMPLETED,
            request_id=rid,
            path=path,
            checkpoint_id=checkpoint,
            size_bytes=size,
            completion_time=rfc3339(finished_at),
            error=None,
        )
        message = f"savepoint of checkpoint {checkpoint} completed at {path} ({size or 0} bytes)"
        p.event("Normal", "SavepointCompleted", message)
        self.kube.event(job.raw, "Normal", "SavepointCompleted", f"Savepoint {p.name}: {message}")

    def error(self, p: SavepointPass, problem: Problem, exc: BaseException) -> None:
        self.problems.report(p, problem, exc)

    def succeeded(self, p: SavepointPass) -> None:
        self.problems.resolved(p)

    def unrecorded(self, namespace: str, name: str, exc: KubeError) -> None:
        self.problems.unrecorded(namespace, name, exc)

    def commit(self, p: SavepointPass) -> dict[str, Any]:
        """Write the status patch, then the Events; return the patch sent."""
        return self.problems.commit(p)
