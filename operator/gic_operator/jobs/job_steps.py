"""The single steps of a GICJob's lifecycle: launch, running, driver failure.

:class:`JobSteps` performs the single steps the reconciler
(:mod:`gic_operator.jobs.job_reconciler`) chooses, over a :class:`JobContext`: what the
pass acts on (its working status, the spec, the seams) and what the observer saw
(:class:`~gic_operator.jobs.job_observer.JobView`); the multi-step actions (recover,
upgrade, suspend, in ``status.pending``) are :class:`gic_operator.jobs.job_actions.JobActions`,
which uses these steps.
Each side effect is idempotent so a repeated step (after an operator restart) is harmless:

* control requests have deterministic ids (``naming.request_id``) and are create-once;
* driver pods are named after their epoch and created if absent;
* before a launch every other driver pod of the job is deleted and must be *gone*;
* a recovery claims one epoch, recorded in ``status.pending.epoch`` before the claim,
  however often the claim or its later steps fail and are retried.

A driver that fails may have reported why in its status record
(:func:`gic_operator.jobs.job_policy.reported_failure`): the reason and message are shown in
``status.message``, the ``Ready`` reason and a gated Warning Event; a refusal that a
relaunch of the same spec meets again (a query mismatch, invalid settings) ends in phase
``Failed`` without a restart, waiting for a spec change; any other failure is restarted
with backoff, like a driver that reported nothing.

What a step acts on was read by :class:`gic_operator.jobs.job_observer.JobObserver` (and
trusted only as far as it says).

Invariants: see :mod:`gic_operator.jobs.job_controller`.

Thread-safety: used by one reconcile at a time (the job's lock).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from gic_operator.control_keys import ControlKeys
from gic_operator.jobs.job_observer import JobView
from gic_operator.jobs.job_policy import DriverFailure, restart_delay
from gic_operator.kube.bodies import Body
from gic_operator.kube.conditions import parse_time, rfc3339
from gic_operator.kube.kube_api import KubeApi, PodInfo
from gic_operator.kube.naming import ROLE_DRIVER, job_id, job_selector
from gic_operator.launch.launch_config import validate_launch
from gic_operator.launch.launch_plan import LaunchPlan, on_kubernetes
from gic_operator.launch.launcher import (
    auth_secret,
    driver_pod,
    driver_service,
    executor_template_config_map,
    job_control_secret,
)
from gic_operator.launch.network_policy import job_network_policy
from gic_operator.models import (
    GICJobSpec,
    JobPhase,
    RecoverAction,
    RestoredFrom,
    RestoreMode,
    SavepointState,
    SavepointStatus,
)
from gic_operator.operator_errors import ConflictError, UntrustedInputError
from gic_operator.operator_settings import StorageAllowlist
from gic_operator.reconcile.status_pass import JobPass
from gic_operator.savepoints.restore_sources import savepoint_place
from gic_operator.storage.job_storage import JobStorage, StorageFactory
from gic_runtime.errors import GICError

log = logging.getLogger(__name__)


@dataclass
class JobContext:
    """What one reconcile of a job acts on: its pass (the working status and the queued
    Events), the spec, the seams, and what the observer saw; plus what the steps found
    out for the recorder (whether a launch waits, why the job is not ready)."""

    p: JobPass
    spec: GICJobSpec
    view: JobView
    kube: KubeApi
    storage_for: StorageFactory
    allowlist: StorageAllowlist
    #: The job's id in storage and its storage (a stateless upgrade moves both on).
    job_id: str
    storage: JobStorage
    #: Derives the job's control key (its Secret at launch, its requests' MACs).
    control_keys: ControlKeys = field(default_factory=ControlKeys.process_default)
    #: Posts a driver's failure (pass, reason, message): the recorder's gated
    #: :meth:`~gic_operator.reconcile.problems.ProblemReporter.driver_failure`.
    warn: Callable[[JobPass, str, str], None] | None = None
    waiting_for_launch: bool = False
    #: Reason for Ready=False when the job waits for something outside it.
    not_ready_reason: str | None = None


class JobSteps:
    """The single steps one reconcile may take on a job (see the module doc)."""

    def __init__(self, ctx: JobContext) -> None:
        self.ctx = ctx

    # --- launching --------------------------------------------------------------------

    def clear_other_drivers(self, keep: str | None = None, grace: int = 0) -> bool:
        """Delete every driver pod of the job except ``keep``; True once none is left.
        Only pods this GICJob owns count: a pod that merely carries its labels is not
        deleted (nor waited for)."""
        p = self.ctx.p
        selector = {**job_selector(p.name), "gic.io/role": ROLE_DRIVER}

        def others() -> list[PodInfo]:
            pods = self.ctx.kube.list_pods(p.namespace, selector)
            return [pod for pod in pods if pod.name != keep and pod.owner_uid == p.uid]

        found = others()
        if not found:
            return True
        for pod in found:
            if not pod.deleting:
                self.ctx.kube.delete_pod(p.namespace, pod.name, grace)
        return not others()

    def _output_takeover(self) -> str | None:
        """The job whose output the launch takes over: the spec's choice, else, for a
        job relaunched with empty state (a new lineage), its previous lineage's id: the
        same GICJob's output stays its own across stateless upgrades."""
        output = self.ctx.spec.output
        if output is not None and output.take_over_from is not None:
            return output.take_over_from
        lineage = self.ctx.p.status.lineage
        return job_id(self.ctx.p.namespace, self.ctx.p.name, lineage - 1) if lineage > 0 else None

    def _restore_source(self) -> RestoredFrom | None:
        """Where a first launch restores from (path, mode, savepoint name), else ``None``.
        Raises :class:`_NotReadyError` when the named Savepoint cannot be used (yet).
        A Claim is recorded on the Savepoint here, before anything is launched."""
        restore = self.ctx.spec.restore
        if restore is None or self.ctx.storage.has_checkpoint():
            return None
        if restore.path is not None:
            if restore.mode is RestoreMode.CLAIM:  # the spec check refuses it first
                raise UntrustedInputError("a restore path is never claimed")
            path = self.ctx.storage.resolve_restore_path(restore.path)
            return RestoredFrom(path=path, mode=RestoreMode.NO_CLAIM, released=False)
        assert restore.savepoint is not None
        body = self.ctx.kube.get_object("savepoints", self.ctx.p.namespace, restore.savepoint)
        if body is None:
            raise _NotReadyError(
                f"spec.restore.savepoint names Savepoint {restore.savepoint!r}, which does not "
                f"exist in namespace {self.ctx.p.namespace}; create it or fix the name"
            )
        status = SavepointStatus.read(Body(body).status)
        if status.state is not SavepointState.COMPLETED or not status.path:
            raise _NotReadyError(
                f"Savepoint {restore.savepoint!r} is {status.state}, "
                "not Completed; the job starts once it completes"
            )
        claimed = status.claimed_by
        me = f"{self.ctx.p.namespace}/{self.ctx.p.name}"
        if restore.mode is RestoreMode.CLAIM and claimed not in (None, me):
            raise _NotReadyError(
                f"Savepoint {restore.savepoint!r} is already claimed by {claimed}; restore "
                "from it with mode NoClaim, or from another savepoint"
            )
        place = savepoint_place(self.ctx.kube, self.ctx.allowlist, self.ctx.p.namespace, body)
        if restore.mode is RestoreMode.CLAIM and claimed != me:
            version = Body(body).resource_version
            try:
                self.ctx.kube.patch_status(
                    "savepoints",
                    self.ctx.p.namespace,
                    restore.savepoint,
                    {"claimedBy": me},
                    resource_version=version,
                )
            except ConflictError:
                raise _NotReadyError(
                    f"Savepoint {restore.savepoint!r} changed while this job claimed it; "
                    "trying again"
                ) from None
        return RestoredFrom(
            path=place.path, savepoint=restore.savepoint, mode=restore.mode, released=False
        )

    def launch(self, *, reason: str) -> bool:
        """Launch a driver for the current spec (after clearing old ones); True if done."""
        p = self.ctx.p
        if not self.clear_other_drivers():
            p.update(phase=JobPhase.DEPLOYING, message="waiting for old driver pods to go")
            self.ctx.waiting_for_launch = True
            return False
        try:
            source = self._restore_source()
        except _NotReadyError as exc:
            p.update(phase=JobPhase.PENDING, message=str(exc))
            self.ctx.not_ready_reason = "RestoreSourceNotReady"
            self.ctx.waiting_for_launch = True
            return False
        # Above every claimed epoch and above the last launch's (its driver may have died
        # before claiming it): pod names never repeat and fencing always moves forward.
        epoch = max(self.ctx.storage.highest_epoch(), p.status.epoch or 0) + 1
        plan = LaunchPlan(
            namespace=p.namespace,
            name=p.name,
            uid=p.uid,
            spec=self.ctx.spec,
            job_id=self.ctx.job_id,
            epoch=epoch,
            restore_source=None if source is None else source.path,
            restore_mode=None if source is None else source.mode.to_runtime(),
            generation=p.generation,
            output_takeover=self._output_takeover(),
        )
        try:
            validate_launch(plan)
        except GICError as exc:
            message = f"cannot launch: {exc}"
            p.update(phase=JobPhase.INVALID, message=message)
            p.event("Warning", "InvalidSpec", message)
            return False
        policy = job_network_policy(p.namespace, p.name, p.uid)
        self.ctx.kube.apply_network_policy(p.namespace, policy)
        self.ctx.kube.apply_service(p.namespace, driver_service(p.namespace, p.name, p.uid))
        # the key the driver authenticates control requests with (local masters too)
        key = self.ctx.control_keys.for_job(p.namespace, p.name, p.uid)
        control = job_control_secret(p.namespace, p.name, p.uid, key)
        self.ctx.kube.create_secret(p.namespace, control)
        if on_kubernetes(plan.spec):  # executors: their pod template and the RPC secret
            self.ctx.kube.create_secret(p.namespace, auth_secret(p.namespace, p.name, p.uid))
            self.ctx.kube.apply_config_map(p.namespace, executor_template_config_map(plan))
        self.ctx.kube.create_pod(p.namespace, driver_pod(plan))
        p.update(
            driver_pod=plan.pod_name,
            epoch=epoch,
            deployed_generation=p.generation,
            phase=JobPhase.DEPLOYING,
            running_since=None,
            message=f"driver {plan.pod_name} launched ({reason})",
            pending=None,
        )
        text = f"launched driver pod {plan.pod_name} with fencing epoch {epoch} ({reason})"
        if source is not None:
            p.update(restored_from=source)
            text += f", restoring from {source.path} ({source.mode})"
        p.event("Normal", "DriverLaunched", text)
        return True

    # --- running and failing ----------------------------------------------------------

    def running(self) -> None:
        """The driver pod runs: ``Starting`` until its driver completed a checkpoint
        (:attr:`~gic_operator.jobs.job_observer.JobView.checkpointed`), then ``Running``
        (kept while the pod runs, even when a later pass cannot read the driver's report)."""
        p = self.ctx.p
        since = p.status.running_since or rfc3339(p.now)
        if p.status.phase is JobPhase.RUNNING or self.ctx.view.checkpointed:
            if p.status.phase is not JobPhase.RUNNING:
                p.event("Normal", "Running", f"driver {p.status.driver_pod} is running")
            p.update(phase=JobPhase.RUNNING, running_since=since, message=None)
        else:
            p.update(
                phase=JobPhase.STARTING,
                running_since=since,
                message=f"driver {p.status.driver_pod} is starting: no checkpoint completed yet",
            )
        started = parse_time(since) or p.now
        window = self.ctx.spec.restart_policy.reset_after_seconds
        if p.status.restarts and p.now - started >= window:
            p.update(restarts=0)
            p.event("Normal", "RestartsReset", f"running for {window:.0f} s: restart count reset")

    def _report_failure(self, failure: DriverFailure) -> None:
        text = f"the driver failed: {failure.message}"
        if not failure.restartable:  # first: an Event's message may be cut
            text = f"not restarted until the spec changes; {text}"
        if self.ctx.warn is not None:
            self.ctx.warn(self.ctx.p, failure.reason, text)
        else:
            self.ctx.p.event("Warning", failure.reason, text)

    def driver_failed(self) -> None:
        """The driver failed or vanished: schedule a recovery, or give up. A refusal the
        driver reported that a relaunch would meet again ends in ``Failed`` at once."""
        p = self.ctx.p
        policy = self.ctx.spec.restart_policy
        restarts = p.status.restarts
        summary = self.ctx.view.pod_summary
        failure = self.ctx.view.failure
        if failure is not None:
            self._report_failure(failure)
            if not failure.restartable:
                stop = " " if failure.message.endswith(".") else ". "
                message = (
                    f"{summary}; the driver reported {failure.reason}: {failure.message}{stop}"
                    "A relaunch would fail the same way, so the driver is not restarted: "
                    "fix the cause, then change the spec to retry"
                )
                p.update(
                    phase=JobPhase.FAILED,
                    message=message,
                    running_since=None,
                    next_restart_time=None,
                )
                return
        # The driver's message goes to status.message and its own event; the rest
        # (the pending reason, the restart events) names the reason only.
        detail = summary
        if failure is not None:
            detail = f"{summary}; the driver reported {failure.reason}: {failure.message}"
            summary = f"{summary} ({failure.reason})"
        if restarts >= policy.max_restarts:
            message = (
                f"{detail}; the restart budget ({policy.max_restarts}) is used up. Fix the "
                "cause (see the driver's log and the events), then change the spec to retry"
            )
            p.update(phase=JobPhase.FAILED, message=message, running_since=None)
            p.event("Warning", "JobFailed", message)
            return
        delay = restart_delay(policy, restarts)
        p.update(
            phase=JobPhase.RECOVERING,
            running_since=None,
            next_restart_time=rfc3339(p.now + delay),
            message=f"{detail}; recovering",
            pending=RecoverAction(
                started=rfc3339(p.now), due=rfc3339(p.now + delay), reason=summary
            ),
        )
        p.event(
            "Warning",
            "DriverFailed",
            f"{summary}; restart {restarts + 1} of {policy.max_restarts} in {delay:.0f} s",
        )


class _NotReadyError(Exception):
    """The launch must wait (message says for what)."""
