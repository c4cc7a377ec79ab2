"""Reconcile one Savepoint resource: trigger it, follow it, dispose of it on deletion.

Lifecycle (``status.state`` only moves forward):

* ``TriggerPending``: waits until its GICJob is Running, then writes a savepoint control
  request into the job's storage (id ``gsp-<name>-<uid>``, deterministic, create-once, so a
  retry or a restarted operator re-finds the same request) -> ``InProgress``;
* ``InProgress``: reads the request's outcome -> ``Completed`` (path, checkpoint id, size)
  or ``Failed`` (error); ``Failed`` too when ``spec.savepoints.timeoutSeconds`` of the job
  passes; a request outlives driver restarts (the next driver serves it);
* the job deleted before completion -> ``Abandoned``.

Deletion (finalizer): with ``disposeOnDelete: true`` the files are deleted — only a
Completed savepoint the operator triggered, only under ``<storage>/savepoints/``, and
never one a job claimed (``status.claimedBy``). A disposal that keeps failing gives up
after :data:`MAX_DISPOSAL_ATTEMPTS` with a Warning event, so deletion never hangs forever.

Thread-safety: one lock per savepoint.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from gic_operator.conditions import parse_time, rfc3339
from gic_operator.kube import KubeApi
from gic_operator.models import (
    FINAL_STATES,
    GICJobSpec,
    JobPhase,
    SavepointMode,
    SavepointSpec,
    SavepointState,
)
from gic_operator.naming import job_id, request_id
from gic_operator.reconcile_context import KeyedLocks, Pass
from gic_operator.storage_view import JobStorage
from gic_operator.validation import describe_validation_error

log = logging.getLogger(__name__)

PLURAL = "savepoints"
MAX_DISPOSAL_ATTEMPTS = 5

StorageFactory = Callable[[GICJobSpec, str], JobStorage]
RootStorageFactory = Callable[[str, str, str | None], JobStorage]


class SavepointReconciler:
    """Reconciles Savepoint resources; see the module docstring."""

    def __init__(
        self,
        kube: KubeApi,
        storage_for: StorageFactory,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.storage_for = storage_for
        self.clock = clock
        self._lock = KeyedLocks()

    def reconcile(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        meta = body.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta["name"])
        with self._lock(namespace, name):
            fresh = self.kube.get_object(PLURAL, namespace, name)
            if fresh is None:
                return None
            return self._reconcile(fresh)

    def _job(self, p: Pass, spec: SavepointSpec) -> tuple[Mapping[str, Any], GICJobSpec] | None:
        job = self.kube.get_object("gicjobs", p.namespace, spec.job)
        if job is None or (job.get("metadata") or {}).get("deletionTimestamp"):
            return None
        return job, GICJobSpec.model_validate(job.get("spec") or {})

    def _reconcile(self, body: Mapping[str, Any]) -> dict[str, Any]:
        p = Pass(self.kube, PLURAL, body, clock=self.clock)
        state = str(p.status.get("state") or SavepointState.TRIGGER_PENDING.value)
        if state in {s.value for s in FINAL_STATES} or p.deleting:
            return p.commit()
        try:
            spec = SavepointSpec.model_validate(body.get("spec") or {})
        except ValidationError as exc:
            return self._fail(p, describe_validation_error(exc, "spec"), count=False)
        try:
            found = self._job(p, spec)
        except ValidationError as exc:
            p.set(state=state, error=f"GICJob {spec.job} is invalid: {exc.error_count()} errors")
            return p.commit()
        if found is None:
            message = f"GICJob {spec.job!r} does not exist (any more) in namespace {p.namespace}"
            p.set(state=SavepointState.ABANDONED.value, error=message)
            p.set(completionTime=rfc3339(p.now))
            p.event("Warning", "SavepointAbandoned", message)
            return p.commit()
        job, job_spec = found
        job_status = job.get("status") or {}
        storage = self.storage_for(
            job_spec, str(job_status.get("jobId") or job_id(p.namespace, spec.job))
        )
        if state == SavepointState.TRIGGER_PENDING.value:
            self._trigger(p, spec, job_status, storage)
        else:
            self._follow(p, spec, job_spec, storage, job)
        return p.commit()

    def _trigger(
        self, p: Pass, spec: SavepointSpec, job_status: Mapping[str, Any], storage: JobStorage
    ) -> None:
        if job_status.get("phase") != JobPhase.RUNNING.value:
            p.set(state=SavepointState.TRIGGER_PENDING.value)
            p.condition(
                "Triggered",
                False,
                "JobNotRunning",
                f"waiting for GICJob {spec.job} to be Running "
                f"(it is {job_status.get('phase', 'Pending')})",
            )
            return
        rid = request_id("gsp", p.name, p.uid[:8])
        kind = "terminal" if spec.mode is SavepointMode.STOP else "intermediate"
        target = storage.request_savepoint(
            rid,
            kind=kind,
            format=spec.format.value,
            requested_by=f"gic-operator savepoint {p.namespace}/{p.name}",
        )
        p.set(
            state=SavepointState.IN_PROGRESS.value,
            requestId=rid,
            path=target,
            triggerTime=rfc3339(p.now),
        )
        p.condition("Triggered", True, "Requested", f"request {rid} written for the driver")
        p.event("Normal", "SavepointTriggered", f"asked job {spec.job} for a savepoint ({kind})")

    def _follow(
        self,
        p: Pass,
        spec: SavepointSpec,
        job_spec: GICJobSpec,
        storage: JobStorage,
        job: Mapping[str, Any],
    ) -> None:
        rid = str(p.status.get("requestId") or "")
        outcome = storage.outcome(rid) if rid else None
        if outcome is None:
            started = parse_time(p.status.get("triggerTime")) or p.now
            timeout = job_spec.savepoints.timeout_seconds
            if p.now - started > timeout:
                error = f"no savepoint after {timeout} s (spec.savepoints.timeoutSeconds)"
                outcome = storage.abandon_request(rid, error) if rid else None
                if outcome is None or outcome.error is not None:
                    self._fail(p, error)
                    return
            else:
                return
        if outcome.error is not None:
            self._fail(p, outcome.error)
            return
        p.set(
            state=SavepointState.COMPLETED.value,
            path=outcome.path or p.status.get("path"),
            checkpointId=outcome.checkpoint_id,
            sizeBytes=outcome.size_bytes,
            completionTime=rfc3339(outcome.finished_at),
            error=None,
        )
        message = (
            f"savepoint of checkpoint {outcome.checkpoint_id} completed at {outcome.path} "
            f"({outcome.size_bytes or 0} bytes)"
        )
        p.event("Normal", "SavepointCompleted", message)
        self.kube.event(job, "Normal", "SavepointCompleted", f"Savepoint {p.name}: {message}")

    def _fail(self, p: Pass, error: str, *, count: bool = True) -> dict[str, Any]:
        failures = int(p.status.get("failures") or 0) + (1 if count else 0)
        p.set(
            state=SavepointState.FAILED.value,
            error=error,
            failures=failures,
            completionTime=rfc3339(p.now),
        )
        p.event("Warning", "SavepointFailed", error)
        return p.status

    # --- deletion ---------------------------------------------------------------------

    def dispose(self, body: Mapping[str, Any], attempt: int) -> str:
        """On deletion: delete the files when asked to (see the module docstring).

        Returns what happened (for the log). Raises on a failed disposal while attempts
        remain (the caller retries later); after :data:`MAX_DISPOSAL_ATTEMPTS` it gives up
        with a Warning event and returns, so the resource can go.
        """
        p = Pass(self.kube, PLURAL, body, clock=self.clock)
        spec = body.get("spec") or {}
        status = body.get("status") or {}
        if not spec.get("disposeOnDelete"):
            return "kept (disposeOnDelete is false)"
        if status.get("claimedBy"):
            message = f"files kept: claimed by {status['claimedBy']} (Claim restore)"
            self.kube.event(body, "Normal", "SavepointKept", message)
            return message
        path = status.get("path")
        if status.get("state") != SavepointState.COMPLETED.value or not path:
            return "nothing to dispose of"
        try:
            storage = self._storage_of(p, spec, status)
            deleted = storage.dispose_savepoint(str(path))
        except Exception as exc:
            if attempt + 1 >= MAX_DISPOSAL_ATTEMPTS:
                message = (
                    f"gave up deleting {path} after {attempt + 1} attempts ({exc}); the "
                    "resource is deleted, the files are left: delete them by hand"
                )
                self.kube.event(body, "Warning", "DisposalAbandoned", message)
                return message
            self.kube.patch_status(PLURAL, p.namespace, p.name, {"disposalError": str(exc)})
            raise
        message = f"deleted {deleted} objects under {path}"
        self.kube.event(body, "Normal", "SavepointDisposed", message)
        return message

    def _storage_of(
        self, p: Pass, spec: Mapping[str, Any], status: Mapping[str, Any]
    ) -> JobStorage:
        job = self.kube.get_object("gicjobs", p.namespace, str(spec.get("job")))
        if job is not None:
            job_spec = GICJobSpec.model_validate(job.get("spec") or {})
            jid = str((job.get("status") or {}).get("jobId") or job_id(p.namespace, spec["job"]))
            return self.storage_for(job_spec, jid)
        # The job is gone: the savepoint lives at <root>/savepoints/<request id>.
        path, rid = str(status["path"]).rstrip("/"), str(status.get("requestId") or "")
        suffix = f"/savepoints/{rid}"
        if not rid or not path.endswith(suffix):
            raise RuntimeError(f"cannot tell the storage root of {path}")
        return JobStorage.open(path[: -len(suffix)], job_id(p.namespace, str(spec.get("job"))))
