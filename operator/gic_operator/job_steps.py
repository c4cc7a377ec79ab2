"""The steps of a GICJob's lifecycle: launch, recover, upgrade, suspend.

:class:`JobSteps` holds what one reconcile observed (driver pod, runtime status in
storage) and performs at most one step. Multi-step actions live in ``status.pending``
(kind ``recover``, ``upgrade`` or ``suspend``) and :meth:`JobSteps.advance` moves them on;
each side effect is idempotent so a repeated step (after an operator restart) is harmless:

* control requests have deterministic ids (``naming.request_id``) and are create-once;
* driver pods are named after their epoch and created if absent;
* before a launch every other driver pod of the job is deleted and must be *gone*;
* a recovery claims one epoch (recorded in ``status.pending.epoch``) however often its
  later steps fail and are retried.

Trust: the job id and every savepoint directory are derived (``naming``), never read back
from the status or from what a driver wrote; a savepoint outcome naming another directory
is refused; the restore source's release is judged from the job's manifests; the pod
named in ``status.driverPod`` counts only when it carries the job's driver labels.

Invariants: see :mod:`gic_operator.job_reconciler`.

Thread-safety: used by one reconcile at a time (the job's lock).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from gic_operator.conditions import parse_time, rfc3339
from gic_operator.errors import ConflictError, UntrustedInputError
from gic_operator.job_policy import restart_delay
from gic_operator.kube import KubeApi, PodInfo
from gic_operator.launcher import (
    LaunchPlan,
    auth_secret,
    driver_pod,
    driver_service,
    executor_template_config_map,
    on_kubernetes,
    validate_launch,
)
from gic_operator.models import GICJobSpec, JobPhase, RestoreMode, SavepointState, UpgradeMode
from gic_operator.naming import ROLE_DRIVER, job_id, job_selector, request_id, savepoint_dir
from gic_operator.reconcile_context import Pass
from gic_operator.restore_sources import savepoint_place
from gic_operator.settings import StorageAllowlist
from gic_operator.storage_view import JobStorage, normalize_uri
from gic_runtime.control.model import Outcome
from gic_runtime.errors import FormatError, GICError

log = logging.getLogger(__name__)

#: Seconds a stop-with-savepoint may take before an upgrade or suspend gives up.
STOP_SAVEPOINT_TIMEOUT_S = 600.0
#: Seconds a driver may keep running after its terminal savepoint completed.
STOP_GRACE_S = 60.0
#: Largest number copied from a status or a driver's report (larger ones read as 0).
MAX_NUMBER = 2**53


def status_int(value: Any) -> int:
    """A non-negative integer read from a status (anyone with status access may have
    written it): anything else reads as 0."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return 0
    try:
        number = int(value)
    except (ValueError, OverflowError):
        return 0
    return number if 0 <= number <= MAX_NUMBER else 0


def job_storage_id(p: Pass) -> str:
    """The job's id in storage, derived from its namespace, name and lineage (never
    ``status.jobId``)."""
    return job_id(p.namespace, p.name, status_int(p.status.get("lineage")))


def checked_outcome_path(outcome: Outcome, target: str) -> str:
    """The directory of completed ``outcome``: ``target`` (the derived directory the
    request named). An outcome naming another directory is refused."""
    if outcome.path is not None and normalize_uri(outcome.path) != target:
        raise UntrustedInputError(
            f"the driver reported savepoint {outcome.request_id} at {outcome.path}, but it "
            f"was requested at {target}; the outcome is refused (nothing at that path is "
            "used or deleted)"
        )
    return target


class JobSteps:
    """One reconcile's view of a job and the steps it may take (see the module doc)."""

    def __init__(
        self,
        p: Pass,
        spec: GICJobSpec,
        storage_for: Callable[[GICJobSpec, str], JobStorage],
        kube: KubeApi,
        allowlist: StorageAllowlist | None = None,
    ) -> None:
        self.p = p
        self.spec = spec
        self.kube = kube
        self.storage_for = storage_for
        self.allowlist = allowlist or StorageAllowlist()
        self.job_id = job_storage_id(p)
        self.storage = storage_for(spec, self.job_id)
        self.pod: PodInfo | None = None
        self.waiting_for_launch = False
        #: Reason for Ready=False when the job waits for something outside it.
        self.not_ready_reason: str | None = None

    # --- observing --------------------------------------------------------------------

    def savepoint_target(self, rid: str) -> str:
        """The derived directory of this job's savepoint for control request ``rid``."""
        return savepoint_dir(self.storage.root, self.p.namespace, self.p.name, rid)

    def observe(self) -> None:
        """Read the driver pod, the runtime's status record and the restore source's
        release into the status."""
        p = self.p
        p.set(jobId=self.job_id)
        name = p.status.get("driverPod")
        pod = self.kube.get_pod(p.namespace, str(name)) if name else None
        selector = job_selector(p.name).items()
        # A pod without the job's driver labels is not its driver, whatever the status says.
        self.pod = pod if pod is not None and selector <= pod.labels.items() else None
        self._observe_release()
        runtime = self.storage.runtime_status()
        if runtime is None:
            return
        last = runtime.last_checkpoint
        if last is not None:
            duration = last.duration_ms if math.isfinite(last.duration_ms) else 0.0
            p.set(
                lastCheckpoint={
                    "id": status_int(last.id),
                    "time": rfc3339(last.created_at),
                    "durationMs": round(min(max(duration, 0.0), float(MAX_NUMBER)), 1),
                    "bytes": status_int(last.bytes_uploaded),
                }
            )
        sp = runtime.last_savepoint
        mine = savepoint_dir(self.storage.root, p.namespace, p.name, "x")[: -len("x")]
        if sp is not None and sp.state == "completed" and sp.path:
            path = normalize_uri(sp.path) if "://" in sp.path else ""
            if not path.startswith(mine):
                return  # not one of this job's savepoint directories: not shown
            ref: dict[str, Any] = {"path": path}
            if sp.finished_at is not None:
                ref["time"] = rfc3339(sp.finished_at)
            old = p.status.get("lastSavepoint") or {}
            if old.get("path") == path and old.get("name"):
                ref["name"] = old["name"]
            p.set(lastSavepoint=ref)

    def _observe_release(self) -> None:
        """Mark a NoClaim restore source released once the job's manifests no longer
        reference it (the driver's report is not consulted)."""
        p = self.p
        restored = p.status.get("restoredFrom")
        if not isinstance(restored, dict) or restored.get("released") or not restored.get("path"):
            return
        if restored.get("mode") != RestoreMode.NO_CLAIM.value:
            return
        if self.storage.restore_released(str(restored["path"])):
            p.event(
                "Normal",
                "RestoreSourceReleased",
                f"no retained checkpoint references {restored.get('path')} any more",
            )
            p.set(restoredFrom={**restored, "released": True})

    def pod_state(self) -> str:
        """``none`` (no driver recorded), ``gone`` (recorded but missing), ``deleting``,
        or the pod's phase in lower case."""
        if not self.p.status.get("driverPod"):
            return "none"
        if self.pod is None:
            return "gone"
        if self.pod.deleting and not self.pod.finished:
            return "deleting"
        return self.pod.phase.lower()

    def pod_summary(self) -> str:
        pod = self.pod
        if pod is None:
            return f"driver pod {self.p.status.get('driverPod')} vanished"
        text = f"driver pod {pod.name} {pod.phase}"
        if pod.exit_code is not None:
            text += f", exit code {pod.exit_code}"
        if pod.reason:
            text += f" ({pod.reason})"
        if pod.message:
            text += f": {pod.message[:300]}"
        return text

    def checkpoint_age(self) -> float | None:
        last = self.p.status.get("lastCheckpoint") or {}
        when = parse_time(last.get("time"))
        return None if when is None else max(0.0, self.p.now - when)

    # --- launching --------------------------------------------------------------------

    def _clear_other_drivers(self, keep: str | None = None, grace: int = 0) -> bool:
        """Delete every driver pod of the job except ``keep``; True once none is left."""
        p = self.p
        selector = {**job_selector(p.name), "gic.io/role": ROLE_DRIVER}
        others = [pod for pod in self.kube.list_pods(p.namespace, selector) if pod.name != keep]
        if not others:
            return True
        for pod in others:
            if not pod.deleting:
                self.kube.delete_pod(p.namespace, pod.name, grace)
        left = [pod for pod in self.kube.list_pods(p.namespace, selector) if pod.name != keep]
        return not left

    def _restore_source(self) -> tuple[str, str, str | None] | None:
        """``(path, runtime mode, savepoint name)`` for a first launch, else ``None``.
        Raises :class:`_NotReadyError` when the named Savepoint cannot be used (yet).
        A Claim is recorded on the Savepoint here, before anything is launched."""
        restore = self.spec.restore
        if restore is None or self.storage.has_checkpoint():
            return None
        mode = "claim" if restore.mode is RestoreMode.CLAIM else "no-claim"
        if restore.path is not None:
            if restore.mode is RestoreMode.CLAIM:  # the spec check refuses it first
                raise UntrustedInputError("a restore path is never claimed")
            return self.storage.resolve_restore_path(restore.path), "no-claim", None
        assert restore.savepoint is not None
        body = self.kube.get_object("savepoints", self.p.namespace, restore.savepoint)
        if body is None:
            raise _NotReadyError(
                f"spec.restore.savepoint names Savepoint {restore.savepoint!r}, which does not "
                f"exist in namespace {self.p.namespace}; create it or fix the name"
            )
        status = body.get("status") or {}
        if status.get("state") != SavepointState.COMPLETED.value or not status.get("path"):
            raise _NotReadyError(
                f"Savepoint {restore.savepoint!r} is {status.get('state', 'TriggerPending')}, "
                "not Completed; the job starts once it completes"
            )
        claimed = status.get("claimedBy")
        me = f"{self.p.namespace}/{self.p.name}"
        if restore.mode is RestoreMode.CLAIM and claimed not in (None, me):
            raise _NotReadyError(
                f"Savepoint {restore.savepoint!r} is already claimed by {claimed}; restore "
                "from it with mode NoClaim, or from another savepoint"
            )
        place = savepoint_place(self.kube, self.allowlist, self.p.namespace, body)
        if restore.mode is RestoreMode.CLAIM and claimed != me:
            version = (body.get("metadata") or {}).get("resourceVersion")
            try:
                self.kube.patch_status(
                    "savepoints",
                    self.p.namespace,
                    restore.savepoint,
                    {"claimedBy": me},
                    resource_version=str(version) if version else None,
                )
            except ConflictError:
                raise _NotReadyError(
                    f"Savepoint {restore.savepoint!r} changed while this job claimed it; "
                    "trying again"
                ) from None
        return place.path, mode, restore.savepoint

    def launch(self, *, reason: str, restore_from: str | None = None) -> bool:
        """Launch a driver for the current spec (after clearing old ones); True if done."""
        p = self.p
        if not self._clear_other_drivers():
            p.set(phase=JobPhase.DEPLOYING.value, message="waiting for old driver pods to go")
            self.waiting_for_launch = True
            return False
        try:
            source = self._restore_source()
        except _NotReadyError as exc:
            p.set(phase=JobPhase.PENDING.value, message=str(exc))
            self.not_ready_reason = "RestoreSourceNotReady"
            self.waiting_for_launch = True
            return False
        # Above every claimed epoch and above the last launch's (its driver may have died
        # before claiming it): pod names never repeat and fencing always moves forward.
        epoch = max(self.storage.highest_epoch(), status_int(p.status.get("epoch"))) + 1
        plan = LaunchPlan(
            namespace=p.namespace,
            name=p.name,
            uid=p.uid,
            spec=self.spec,
            job_id=self.job_id,
            epoch=epoch,
            restore_source=source[0] if source else restore_from,
            restore_mode=source[1] if source else ("no-claim" if restore_from else None),
            generation=p.generation,
        )
        try:
            validate_launch(plan)
        except GICError as exc:
            message = f"cannot launch: {exc}"
            p.set(phase=JobPhase.INVALID.value, message=message)
            p.event("Warning", "InvalidSpec", message)
            return False
        self.kube.apply_service(p.namespace, driver_service(p.namespace, p.name, p.uid))
        if on_kubernetes(plan.spec):  # executors: their pod template and the RPC secret
            self.kube.create_secret(p.namespace, auth_secret(p.namespace, p.name, p.uid))
            self.kube.apply_config_map(p.namespace, executor_template_config_map(plan))
        self.kube.create_pod(p.namespace, driver_pod(plan))
        p.set(
            driverPod=plan.pod_name,
            epoch=epoch,
            deployedGeneration=p.generation,
            phase=JobPhase.DEPLOYING.value,
            runningSince=None,
            message=f"driver {plan.pod_name} launched ({reason})",
            pending=None,
        )
        text = f"launched driver pod {plan.pod_name} with fencing epoch {epoch} ({reason})"
        if source is not None:
            path, mode, savepoint = source
            restored: dict[str, Any] = {
                "path": path,
                "mode": "Claim" if mode == "claim" else "NoClaim",
                "released": False,
            }
            if savepoint:
                restored["savepoint"] = savepoint
            p.set(restoredFrom=restored)
            text += f", restoring from {path} ({restored['mode']})"
        p.event("Normal", "DriverLaunched", text)
        return True

    # --- running and failing ----------------------------------------------------------

    def running(self) -> None:
        p = self.p
        if p.status.get("phase") != JobPhase.RUNNING.value:
            p.event("Normal", "Running", f"driver {p.status.get('driverPod')} is running")
        since = p.status.get("runningSince") or rfc3339(p.now)
        p.set(phase=JobPhase.RUNNING.value, runningSince=since, message=None)
        started = parse_time(since) or p.now
        window = self.spec.restart_policy.reset_after_seconds
        if p.status.get("restarts") and p.now - started >= window:
            p.set(restarts=0)
            p.event("Normal", "RestartsReset", f"running for {window:.0f} s: restart count reset")

    def driver_failed(self) -> None:
        """The driver failed or vanished: schedule a recovery, or give up."""
        p = self.p
        policy = self.spec.restart_policy
        restarts = status_int(p.status.get("restarts"))
        summary = self.pod_summary()
        if restarts >= policy.max_restarts:
            message = (
                f"{summary}; the restart budget ({policy.max_restarts}) is used up. Fix the "
                "cause (see the driver's log and the events), then change the spec to retry"
            )
            p.set(phase=JobPhase.FAILED.value, message=message, runningSince=None)
            p.event("Warning", "JobFailed", message)
            return
        delay = restart_delay(policy, restarts)
        p.set(
            phase=JobPhase.RECOVERING.value,
            runningSince=None,
            nextRestartTime=rfc3339(p.now + delay),
            message=f"{summary}; recovering",
            pending={
                "kind": "recover",
                "started": rfc3339(p.now),
                "due": rfc3339(p.now + delay),
                "reason": summary,
            },
        )
        p.event(
            "Warning",
            "DriverFailed",
            f"{summary}; restart {restarts + 1} of {policy.max_restarts} in {delay:.0f} s",
        )

    # --- multi-step actions -------------------------------------------------------------

    def begin_upgrade(self) -> None:
        p = self.p
        mode = self.spec.upgrade_mode
        pending: dict[str, Any] = {
            "kind": "upgrade",
            "mode": mode.value,
            "started": rfc3339(p.now),
            "targetGeneration": p.generation,
        }
        if mode is UpgradeMode.SAVEPOINT:
            pending["requestId"] = request_id("upgrade", p.name, f"g{p.generation}", p.uid[:8])
        p.set(phase=JobPhase.UPGRADING.value, pending=pending, message=f"upgrading ({mode.value})")
        p.event("Normal", "UpgradeStarted", f"rolling out generation {p.generation} ({mode.value})")
        self.advance(pending)

    def begin_suspend(self) -> None:
        p = self.p
        rid = request_id("suspend", p.name, f"g{p.generation}", p.uid[:8])
        p.set(
            phase=JobPhase.SUSPENDING.value,
            pending={
                "kind": "suspend",
                "started": rfc3339(p.now),
                "requestId": rid,
                "targetGeneration": p.generation,
            },
            message="stopping with a savepoint",
        )
        p.event("Normal", "SuspendStarted", "stopping the job with a savepoint")
        self.advance(p.status["pending"])

    def advance(self, pending: dict[str, Any]) -> None:
        kind = pending.get("kind")
        if kind == "recover":
            self._advance_recover(pending)
        elif kind == "upgrade":
            self._advance_upgrade(pending)
        elif kind == "suspend":
            self._advance_suspend(pending)
        else:
            self.p.set(pending=None)
            self.p.event("Warning", "UnknownAction", f"dropped unknown pending action {kind!r}")

    def _advance_recover(self, pending: dict[str, Any]) -> None:
        p = self.p
        due = parse_time(pending.get("due")) or p.now
        if p.now < due:
            p.set(phase=JobPhase.RECOVERING.value)
            return
        if not self._clear_other_drivers():
            p.set(phase=JobPhase.RECOVERING.value, message="waiting for the old driver to go")
            self.waiting_for_launch = True
            return
        epoch = status_int(pending.get("epoch"))
        if not epoch or self.storage.highest_epoch() != epoch:
            # One epoch per recovery: recorded before the sweep, so a sweep or a launch
            # that fails and is retried by later passes claims no further epochs.
            epoch = self.storage.claim_epoch(f"gic-operator recovery {p.namespace}/{p.name}")
            pending = {**pending, "epoch": epoch}
            restarts = status_int(p.status.get("restarts")) + 1
            p.set(
                pending=pending,
                restarts=restarts,
                lastRestartTime=rfc3339(p.now),
                nextRestartTime=None,
            )
        if (p.status.get("lastSweep") or {}).get("epoch") != epoch:
            result = self.storage.sweep_orphans()
            p.set(
                lastSweep={
                    "time": rfc3339(p.now),
                    "files": result.deleted,
                    "bytes": result.deleted_bytes,
                    "epoch": epoch,
                }
            )
            p.event(
                "Normal",
                "OrphansSwept",
                f"fenced at epoch {epoch}, then deleted {result.deleted} orphaned objects "
                f"({result.deleted_bytes} bytes) of job {self.job_id}",
            )
        restarts = status_int(p.status.get("restarts"))
        self.launch(reason=f"recovery {restarts} after: {pending.get('reason', 'failure')}")

    def _stop_with_savepoint(self, pending: dict[str, Any], what: str) -> str | None:
        """Drive a terminal savepoint; the savepoint path once the old driver is gone,
        ``""`` when it failed (recorded), ``None`` while in progress."""
        p = self.p
        rid = self._pending_request_id(pending, what)
        target = self.savepoint_target(rid)
        if not pending.get("requested"):
            self.storage.request_savepoint(
                rid,
                kind="terminal",
                format=self.spec.savepoints.format.value,
                requested_by=f"gic-operator {what} {p.namespace}/{p.name}",
                target=target,
            )
            p.set(pending={**pending, "requested": True})
        try:
            outcome = self.storage.outcome(rid)
        except FormatError as exc:  # write-once: it never becomes readable
            return self._savepoint_failed(what, f"its outcome is unreadable: {exc}")
        started = parse_time(pending.get("started")) or p.now
        alive = self.pod_state() in ("running", "pending")
        if outcome is None:
            if not alive:
                # The driver ended without serving it: make sure no later driver does.
                outcome = self.storage.abandon_request(rid, f"the driver ended before the {what}")
                if outcome.error is not None:
                    return "-"
            elif p.now - started > STOP_SAVEPOINT_TIMEOUT_S:
                error = f"no savepoint after {STOP_SAVEPOINT_TIMEOUT_S:.0f} s"
                outcome = self.storage.abandon_request(rid, error)
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
        p.set(lastSavepoint={"path": path, "time": rfc3339(outcome.finished_at)})
        if alive:
            if p.now - outcome.finished_at > STOP_GRACE_S and self.pod is not None:
                self.kube.delete_pod(p.namespace, self.pod.name, 30)
            return None
        return path

    def _pending_request_id(self, pending: dict[str, Any], what: str) -> str:
        """The request id of an upgrade or suspend, derived again (never taken from the
        status: it names a file in the job's control channel)."""
        p = self.p
        generation = status_int(pending.get("targetGeneration")) or p.generation
        return request_id(what, p.name, f"g{generation}", p.uid[:8])

    def _savepoint_failed(self, what: str, error: str) -> str:
        p = self.p
        field = "upgradeFailedGeneration" if what == "upgrade" else "suspendFailedGeneration"
        p.set(pending=None, message=f"{what} savepoint failed: {error}", **{field: p.generation})
        p.event("Warning", f"{what.capitalize()}Failed", f"the {what} savepoint failed: {error}")
        return ""

    def _advance_upgrade(self, pending: dict[str, Any]) -> None:
        p = self.p
        mode = UpgradeMode(str(pending.get("mode") or UpgradeMode.LAST_STATE.value))
        if mode is UpgradeMode.SAVEPOINT:
            path = self._stop_with_savepoint(pending, "upgrade")
            if path is None or path == "":
                if path is None:
                    p.set(phase=JobPhase.UPGRADING.value)
                return
            reason = "upgrade from savepoint" if path != "-" else "upgrade (driver ended first)"
        else:
            if not self._clear_other_drivers(grace=30):
                p.set(phase=JobPhase.UPGRADING.value, message="waiting for the old driver to go")
                return
            reason = f"upgrade ({mode.value})"
            if mode is UpgradeMode.STATELESS:
                lineage = status_int(p.status.get("lineage")) + 1
                self.job_id = job_id(p.namespace, p.name, lineage)
                self.storage = self.storage_for(self.spec, self.job_id)
                p.set(lineage=lineage, jobId=self.job_id, restoredFrom=None, lastCheckpoint=None)
        if self.launch(reason=reason):
            p.event("Normal", "Upgraded", f"generation {p.generation} is deployed ({reason})")

    def _advance_suspend(self, pending: dict[str, Any]) -> None:
        p = self.p
        path = self._stop_with_savepoint(pending, "suspend")
        if path is None:
            p.set(phase=JobPhase.SUSPENDING.value)
            return
        if path == "":
            return
        if not self._clear_other_drivers():
            return
        p.set(
            phase=JobPhase.SUSPENDED.value,
            pending=None,
            driverPod=None,
            runningSince=None,
            message="suspended; set spec.state to running to resume",
        )
        where = f" at savepoint {path}" if path != "-" else " (the driver ended first)"
        p.event("Normal", "Suspended", f"the job is suspended{where}")


class _NotReadyError(Exception):
    """The launch must wait (message says for what)."""
