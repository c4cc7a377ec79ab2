"""Reconcile one GICJob: observe, validate, take one step, record status.

Each call of :meth:`JobReconciler.reconcile` observes the driver pod and the job's
checkpoint storage, validates the spec, advances at most one step of the job's lifecycle
and records the result in the status subresource (with Kubernetes Events for every
transition). It is called on every change of the GICJob, on every event of its driver
pod and on a timer, so a step that has to wait (a pod still terminating, a savepoint in
progress, a restart backoff) simply returns and is picked up by the next call.

Durable intents: a multi-step action (upgrade, suspend, recovery) is recorded in
``status.pending`` *before* its first side effect, and every side effect is idempotent
(deterministic control request ids, pod names carrying the epoch, create-if-absent), so
an operator restarted at any point carries on where the previous one stopped. A
``status.pending`` the operator cannot read (an unknown kind, a missing field) is
dropped with a log line and an ``UnknownAction`` Warning Event; the next pass decides
afresh from the spec and the driver pod.

Trust: the spec is trusted only as far as its schema and the administrator's storage
allowlist (:class:`~gic_operator.operator_settings.StorageAllowlist`) go: storage, restore path or
S3 endpoint outside it make the job ``Invalid`` (``Ready=False`` / ``StorageNotAllowed``
naming the field) before any storage is opened. The job id is derived from the namespace
and name (and lineage), never read back from ``status.jobId``.

Errors: an error a step meets does not escape the pass: it is reported
(:mod:`gic_operator.reconcile.problems`: ``Reconciled=False`` and ``status.message``, a gated
Warning Event, ``gic_operator_errors_total``) and what the steps recorded before it is
committed, so the next pass carries on. A failure the job's driver reported in its status
record is no error of the pass: the steps show it (``status.message``, the ``Ready``
reason, a gated Warning Event) and decide from it whether to relaunch
(:meth:`gic_operator.jobs.job_steps.JobSteps.driver_failed`).

Invariants:

* an invalid spec launches nothing (phase ``Invalid``, ``Ready=False`` with the message);
* at most one driver pod of a job exists when a new one is created: every other driver
  pod of the job is deleted and *gone* first, and each launch runs under a fencing epoch
  higher than every earlier one (the runtime refuses stale epochs);
* a recovery claims an epoch before it sweeps, so no earlier driver can still write while
  orphans are deleted; the sweep never leaves the job's own ``jobs/<job id>/`` prefix.

Thread-safety: one lock per job serializes reconciles of the same job; different jobs
reconcile in parallel.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from gic_operator.jobs.job_actions import JobActions
from gic_operator.jobs.job_observer import DriverState, job_storage_id
from gic_operator.jobs.job_policy import SavepointPolicy
from gic_operator.kube.conditions import parse_time
from gic_operator.kube.kube_api import KubeApi
from gic_operator.launch.launch_config import validate_launch
from gic_operator.launch.launch_plan import LaunchPlan
from gic_operator.models import GICJobSpec, GICJobStatus, JobPhase, JobState, RestoreMode
from gic_operator.models.base import ConditionStatus
from gic_operator.operator_errors import GICOperatorError, KubeError
from gic_operator.operator_metrics import OperatorMetrics
from gic_operator.operator_settings import (
    ENV_ALLOWED_S3_ENDPOINTS,
    ENV_ALLOWED_STORAGE,
    StorageAllowlist,
)
from gic_operator.reconcile.problems import RECONCILED, Problem, ProblemReporter, describe
from gic_operator.reconcile.status_pass import JobPass, KeyedLocks, Pass
from gic_operator.savepoints.restore_sources import restore_problem
from gic_operator.storage.job_storage import JobStorage
from gic_operator.validation import describe_validation_error
from gic_runtime.errors import GICError

log = logging.getLogger(__name__)

PLURAL = "gicjobs"
#: A running job without a completed checkpoint for this long is unhealthy (seconds).
DEFAULT_HEALTH_WINDOW_S = 300.0
STORAGE_NOT_ALLOWED = "StorageNotAllowed"

StorageFactory = Callable[[GICJobSpec, str], JobStorage]


class JobReconciler:
    """Reconciles GICJobs; see the module docstring. Safe to call from many threads."""

    def __init__(
        self,
        kube: KubeApi,
        storage_for: StorageFactory,
        *,
        clock: Callable[[], float] = time.time,
        metrics: OperatorMetrics | None = None,
        health_window_s: float = DEFAULT_HEALTH_WINDOW_S,
        allowlist: StorageAllowlist | None = None,
    ) -> None:
        self.kube = kube
        self.storage_for = storage_for
        self.clock = clock
        self.metrics = metrics
        self.health_window_s = health_window_s
        self.allowlist = allowlist or StorageAllowlist()
        self.problems = ProblemReporter(PLURAL[:-1], metrics)
        self._lock = KeyedLocks()

    def forget(self, namespace: str, name: str) -> None:
        """Drop per-job bookkeeping of a deleted job."""
        self._lock.forget(namespace, name)
        if self.metrics is not None:
            self.metrics.set_checkpoint_age(namespace, name, None)

    def reconcile_named(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Reconcile the GICJob ``namespace/name`` read fresh from the API (if it exists)."""
        with self._lock(namespace, name):
            try:
                body = self.kube.get_object(PLURAL, namespace, name)
            except KubeError as exc:
                self.problems.unrecorded(namespace, name, exc)
                return None
            if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
                return None
            return self._reconcile(body)

    def reconcile(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """Reconcile the job whose current body is ``body``; return the status patch sent.

        The body is re-read under the job's lock, so a reconcile never acts on a status
        older than one an earlier reconcile already wrote.
        """
        meta = body.get("metadata") or {}
        return self.reconcile_named(str(meta.get("namespace") or "default"), str(meta["name"]))

    def _reconcile(self, body: Mapping[str, Any]) -> dict[str, Any]:
        p = Pass(self.kube, PLURAL, body, GICJobStatus, clock=self.clock)
        old_error = p.status.find_condition(RECONCILED)
        try:
            self._pass(p, body)
        except Exception as exc:
            problem = describe(exc)
            self.problems.report(p, problem, exc)
            p.update(message=problem.message, phase=p.status.phase)
            if p.status.phase is not JobPhase.INVALID:
                _conditions(p, problem.reason, self.health_window_s)
        else:
            if p.status.phase is not JobPhase.INVALID:
                if (
                    old_error is not None
                    and old_error.status is ConditionStatus.FALSE
                    and p.status.message == old_error.message
                ):
                    p.update(message=None)  # the error is over; the phase says the rest
                self.problems.resolved(p)
        return self.problems.commit(p)

    def _pass(self, p: JobPass, body: Mapping[str, Any]) -> None:
        try:
            spec = GICJobSpec.model_validate(body.get("spec") or {})
        except ValidationError as exc:
            self._invalid(p, describe_validation_error(exc, "spec"))
            return
        access = _access_problem(self.allowlist, p.namespace, spec)
        if access is not None:
            self._invalid(p, access, STORAGE_NOT_ALLOWED)
            return
        problem = restore_problem(spec) or _launch_problem(p, spec)
        if problem is not None:
            self._invalid(p, problem)
            return
        if p.status.phase is JobPhase.INVALID:
            p.update(phase=JobPhase.PENDING, message=None)
            p.event("Normal", "SpecValid", "the spec is valid again")
        steps = JobActions(
            p, spec, self.storage_for, self.kube, self.allowlist, warn=self.problems.driver_failure
        )
        try:
            steps.observe()
            pending = p.status.pending
            if pending is not None:
                steps.advance(pending)
            elif p.stored("pending") is not None:
                _drop_unreadable_action(p)
            else:
                _steady(p, spec, steps)
            if not steps.waiting_for_launch:
                SavepointPolicy(p, spec, self.kube).apply()
            ready_reason = steps.not_ready_reason or steps.failure_reason()
            _conditions(p, ready_reason, self.health_window_s)
            p.update(observed_generation=p.generation)
        finally:
            if self.metrics is not None:
                self.metrics.set_checkpoint_age(p.namespace, p.name, steps.checkpoint_age())

    def _invalid(self, p: JobPass, message: str, reason: str = "InvalidSpec") -> None:
        """Record an invalid spec: nothing is launched; a running driver is left alone."""
        p.update(phase=JobPhase.INVALID, message=message, observed_generation=p.generation)
        p.condition("Ready", False, reason, message)
        self.problems.report(p, Problem(reason, message))


def _access_problem(allowlist: StorageAllowlist, namespace: str, spec: GICJobSpec) -> str | None:
    """The first field of ``spec`` naming storage or an endpoint the allowlist refuses in
    ``namespace`` (with what is allowed there), or ``None``."""
    cp = spec.checkpointing
    uses = [("spec.checkpointing.storage", cp.storage)]
    if spec.restore is not None and spec.restore.path is not None:
        uses.append(("spec.restore.path", spec.restore.path))
    for field, uri in uses:
        if not allowlist.storage_allowed(namespace, uri):
            allowed = ", ".join(allowlist.storage_choices(namespace) or []) or "none"
            return (
                f"invalid spec: {field}: {uri} is not storage the operator may use in "
                f"namespace {namespace} (allowed: {allowed}); use an allowed location, or "
                f"ask the operator's administrator to allow it ({ENV_ALLOWED_STORAGE})"
            )
    endpoint = cp.s3_endpoint_url
    if endpoint and not allowlist.endpoint_allowed(namespace, endpoint):
        allowed = ", ".join(allowlist.endpoint_choices(namespace) or []) or "none"
        return (
            f"invalid spec: spec.checkpointing.s3EndpointUrl: {endpoint} is not an S3 endpoint "
            f"the operator may use in namespace {namespace} (allowed: {allowed}); remove it "
            f"to use the operator's own endpoint, or ask the operator's administrator to "
            f"allow it ({ENV_ALLOWED_S3_ENDPOINTS})"
        )
    return None


def _drop_unreadable_action(p: JobPass) -> None:
    """``status.pending`` holds an action this operator cannot read (an unknown kind, a
    field missing or invalid): drop it; the next pass decides from the spec and the pod."""
    raw = p.stored("pending")
    kind = raw.get("kind") if isinstance(raw, dict) else raw
    text = repr(kind)[:40]
    log.warning("gicjob %s/%s: dropped unreadable pending action %s", p.namespace, p.name, text)
    p.update(pending=None)
    p.event("Warning", "UnknownAction", f"dropped unknown pending action {text}")


def _launch_problem(p: JobPass, spec: GICJobSpec) -> str | None:
    """What the runtime would refuse in a driver launched from ``spec`` (checked before
    anything is launched), or ``None``."""
    restore = spec.restore
    if restore is not None and restore.path is not None:
        path = restore.path.strip()
        if "://" not in path and not path.startswith("/"):
            return (
                f"invalid spec: spec.restore.path {restore.path!r} is relative; use a URI "
                "(s3://bucket/prefix/..., file:///absolute/path) or an absolute path"
            )
    try:
        plan = LaunchPlan(
            namespace=p.namespace,
            name=p.name,
            uid=p.uid,
            spec=spec,
            job_id=job_storage_id(p),
            epoch=1,
            generation=p.generation,
        )
        validate_launch(plan)
    except (GICError, GICOperatorError) as exc:
        return f"invalid spec: {exc}"
    return None


def _steady(p: JobPass, spec: GICJobSpec, steps: JobActions) -> None:
    """No action in progress: compare the desired state with the driver pod."""
    pod_state = steps.pod_state()
    status = p.status
    phase = status.phase
    if spec.state is JobState.SUSPENDED:
        if pod_state.alive:
            if status.suspend_failed_generation == p.generation:
                return
            steps.begin_suspend()
        elif phase is not JobPhase.SUSPENDED:
            p.update(phase=JobPhase.SUSPENDED, driver_pod=None, running_since=None)
            p.update(message="suspended; set spec.state to running to resume")
            p.event("Normal", "Suspended", "the job is suspended (no driver)")
        return
    if phase is JobPhase.FAILED:
        if status.deployed_generation == p.generation:
            return  # stays Failed until the spec changes
        p.update(restarts=0)
        steps.launch(reason="the spec changed after the job failed")
        return
    if pod_state is DriverState.NONE:
        finished = phase is JobPhase.FINISHED
        if finished and status.deployed_generation == p.generation:
            return
        steps.launch(reason="resumed" if phase is JobPhase.SUSPENDED else "started")
    elif pod_state in (DriverState.FAILED, DriverState.GONE):
        steps.driver_failed()
    elif pod_state is DriverState.SUCCEEDED:
        if status.deployed_generation != p.generation:
            steps.launch(reason="spec changed after the job finished")
        elif phase is not JobPhase.FINISHED:
            p.update(phase=JobPhase.FINISHED, running_since=None, message=steps.pod_summary())
            p.event("Normal", "JobFinished", f"the driver exited: {steps.pod_summary()}")
    elif pod_state is DriverState.PENDING:
        p.update(phase=JobPhase.DEPLOYING)
    elif pod_state is DriverState.RUNNING:
        steps.running()
        upgrade_due = status.deployed_generation not in (None, p.generation)
        if upgrade_due and status.upgrade_failed_generation != p.generation:
            steps.begin_upgrade()


def _conditions(p: JobPass, not_ready_reason: str | None, window_s: float) -> None:
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
    _checkpoint_health(p, running or phase is JobPhase.STARTING, window_s)
    restored = p.status.restored_from
    if restored is not None:
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
