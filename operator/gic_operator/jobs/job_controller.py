"""The GICJob controller: one pass per call, wired from its parts.

Each call of :meth:`JobController.reconcile` takes the job's lock, re-reads the GICJob,
validates the spec, then runs the parts in order: the observer
(:class:`~gic_operator.jobs.job_observer.JobObserver`: the driver pod and the job's
checkpoint storage into a frozen :class:`~gic_operator.jobs.job_observer.JobView`), the
reconciler (:class:`~gic_operator.jobs.job_reconciler.JobReconciler`: at most one step of
the job's lifecycle, decided from the view), the savepoint policy
(:class:`~gic_operator.jobs.job_policy.SavepointPolicy`) and the recorder
(:class:`~gic_operator.jobs.job_recorder.JobRecorder`: conditions, then the status
subresource with Kubernetes Events for every transition). It is called on every change
of the GICJob, on every event of its driver pod and on a timer, so a step that has to
wait (a pod still terminating, a savepoint in progress, a restart backoff) simply returns
and is picked up by the next call.

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

import time
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from gic_operator.control_keys import ControlKeys
from gic_operator.jobs.job_observer import JobObserver, job_storage_id
from gic_operator.jobs.job_policy import SavepointPolicy
from gic_operator.jobs.job_reconciler import JobReconciler
from gic_operator.jobs.job_recorder import DEFAULT_HEALTH_WINDOW_S, JobRecorder, failure_reason
from gic_operator.jobs.job_steps import JobContext
from gic_operator.kube.bodies import Body
from gic_operator.kube.kube_api import KubeApi
from gic_operator.launch.launch_config import validate_launch
from gic_operator.launch.launch_plan import LaunchPlan
from gic_operator.models import GICJobSpec, GICJobStatus, JobPhase
from gic_operator.operator_errors import GICOperatorError, KubeError
from gic_operator.operator_metrics import OperatorMetrics
from gic_operator.operator_settings import (
    ENV_ALLOWED_S3_ENDPOINTS,
    ENV_ALLOWED_STORAGE,
    StorageAllowlist,
)
from gic_operator.reconcile.problems import RECONCILED
from gic_operator.reconcile.status_pass import JobPass, KeyedLocks, Pass
from gic_operator.savepoints.restore_sources import restore_problem
from gic_operator.storage.job_storage import JobStorage, StorageFactory
from gic_operator.storage.storage_access import admit
from gic_operator.validation import describe_validation_error
from gic_runtime.errors import GICError

__all__ = ["DEFAULT_HEALTH_WINDOW_S", "JobController", "StorageFactory"]

PLURAL = "gicjobs"
STORAGE_NOT_ALLOWED = "StorageNotAllowed"


class JobController:
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
        control_keys: ControlKeys | None = None,
    ) -> None:
        self.kube = kube
        self.control_keys = control_keys or ControlKeys.process_default()
        self.storage_for = storage_for
        self.clock = clock
        self.metrics = metrics
        self.allowlist = StorageAllowlist.unrestricted() if allowlist is None else allowlist
        self.recorder = JobRecorder(metrics, health_window_s)
        self._lock = KeyedLocks()

    def forget(self, namespace: str, name: str) -> None:
        """Drop per-job bookkeeping of a deleted job."""
        self._lock.forget(namespace, name)
        self.recorder.forget(namespace, name)

    def reconcile_named(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Reconcile the GICJob ``namespace/name`` read fresh from the API (if it exists)."""
        with self._lock(namespace, name):
            try:
                body = self.kube.get_object(PLURAL, namespace, name)
            except KubeError as exc:
                self.recorder.unrecorded(namespace, name, exc)
                return None
            if body is None or Body(body).deleting:
                return None
            return self._reconcile(body)

    def reconcile(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """Reconcile the job whose current body is ``body``; return the status patch sent.

        The body is re-read under the job's lock, so a reconcile never acts on a status
        older than one an earlier reconcile already wrote.
        """
        b = Body(body)
        return self.reconcile_named(b.namespace, b.required_name)

    def _reconcile(self, body: Mapping[str, Any]) -> dict[str, Any]:
        p = Pass(self.kube, PLURAL, body, GICJobStatus, clock=self.clock)
        old_error = p.status.find_condition(RECONCILED)
        try:
            self._pass(p)
        except Exception as exc:
            self.recorder.failed(p, exc)
        else:
            self.recorder.succeeded(p, old_error)
        return self.recorder.commit(p)

    def _pass(self, p: JobPass) -> None:
        try:
            spec = GICJobSpec.model_validate(p.resource.spec)
        except ValidationError as exc:
            self.recorder.invalid(p, describe_validation_error(exc, "spec"))
            return
        access = _access_problem(self.allowlist, p.namespace, spec)
        if access is not None:
            self.recorder.invalid(p, access, STORAGE_NOT_ALLOWED)
            return
        problem = restore_problem(spec) or _launch_problem(p, spec)
        if problem is not None:
            self.recorder.invalid(p, problem)
            return
        if p.status.phase is JobPhase.INVALID:
            p.update(phase=JobPhase.PENDING, message=None)
            p.event("Normal", "SpecValid", "the spec is valid again")
        job_id = job_storage_id(p)
        namespace = p.namespace

        def admitted(job_spec: GICJobSpec, jid: str) -> JobStorage:
            # Every storage of the job is admitted: endpoint and each object's location.
            opened = self.storage_for(job_spec, jid)
            endpoint = job_spec.checkpointing.s3_endpoint_url
            return admit(self.allowlist, namespace, opened, endpoint)

        storage = admitted(spec, job_id)
        try:
            self.recorder.job_id(p, job_id)
            retained = spec.checkpointing.retained_checkpoints
            view = JobObserver(self.kube, storage, retained=retained).observe(p)
            self.recorder.observed(p, view)
            ctx = JobContext(
                p,
                spec,
                view,
                self.kube,
                admitted,
                self.allowlist,
                job_id,
                storage,
                control_keys=self.control_keys,
                warn=self.recorder.problems.driver_failure,
            )
            JobReconciler(ctx).reconcile()
            if not ctx.waiting_for_launch:
                SavepointPolicy(p, spec, self.kube).apply()
            self.recorder.conditions(p, ctx.not_ready_reason or failure_reason(p, view))
            p.update(observed_generation=p.generation)
        finally:
            self.recorder.checkpoint_age(p)


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
                f"ask the operator's administrator to allow it ({ENV_ALLOWED_STORAGE}, Helm "
                "value storageAllowlist.storage)"
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
