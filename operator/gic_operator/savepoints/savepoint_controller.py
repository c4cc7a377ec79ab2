"""Reconcile one Savepoint resource: trigger it, follow it, dispose of it on deletion.

Lifecycle (``status.state`` only moves forward):

* ``TriggerPending``: waits until its GICJob is Running, then writes a savepoint control
  request into the job's storage (id ``gsp-<name>-<uid8>``, deterministic, create-once, so
  a retry or a restarted operator re-finds the same request) into the derived directory
  ``<storage>/savepoints/<namespace>.<job>/<request id>`` -> ``InProgress``;
* ``InProgress``: reads the request's outcome -> ``Completed`` (checkpoint id, size) or
  ``Failed`` (error); ``Failed`` too when ``spec.savepoints.timeoutSeconds`` of the job
  passes (whatever error keeps the operator from reading the outcome meanwhile), when
  the outcome is unreadable (outcomes are write-once: it stays so), or when it names
  another directory than the one requested; a request outlives driver restarts (the
  next driver serves it);
* the job deleted before completion -> ``Abandoned``.

Trust: the request id and the directory are derived from the Savepoint's name and uid
and its job, never read back from the status or the outcome, so a driver cannot point
a Savepoint (and its disposal) at another savepoint's or job's files.

Deletion (finalizer): with ``disposeOnDelete: true`` the files are deleted — only a
Completed savepoint, only its derived directory
(:func:`gic_operator.savepoints.restore_sources.savepoint_place`), never one a job claimed
(``status.claimedBy``, or a job restored from it in Claim mode), and not while a job
restored from it NoClaim has not released it (the deletion then waits). A disposal that
keeps failing gives up after :data:`MAX_DISPOSAL_ATTEMPTS` with a Warning event, so
deletion never hangs on a broken storage.

Errors a pass meets are reported as for GICJobs (:mod:`gic_operator.reconcile.problems`).

Thread-safety: one lock per savepoint.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gic_operator.kube.conditions import parse_time, rfc3339
from gic_operator.kube.kube_api import KubeApi
from gic_operator.kube.naming import job_id, savepoint_dir, savepoint_request_id
from gic_operator.models import (
    FINAL_STATES,
    GICJobSpec,
    GICJobStatus,
    JobPhase,
    RestoreMode,
    SavepointSpec,
    SavepointState,
    SavepointStatus,
)
from gic_operator.models.gicjob import SAVEPOINT_TIMEOUT_S
from gic_operator.operator_errors import (
    KubeError,
    SavepointHeldError,
    StorageNotAllowedError,
    UntrustedInputError,
)
from gic_operator.operator_metrics import OperatorMetrics
from gic_operator.operator_settings import StorageAllowlist
from gic_operator.reconcile.problems import ProblemReporter, describe
from gic_operator.reconcile.status_pass import KeyedLocks, Pass, SavepointPass
from gic_operator.savepoints.restore_sources import holders, savepoint_place
from gic_operator.storage.driver_reports import checked_outcome_path, status_int
from gic_operator.storage.job_storage import JobStorage
from gic_operator.validation import describe_validation_error
from gic_runtime.errors import FormatError

log = logging.getLogger(__name__)

PLURAL = "savepoints"
MAX_DISPOSAL_ATTEMPTS = 5
#: Timeout of an InProgress Savepoint whose job's spec cannot be read (seconds).
DEFAULT_TIMEOUT_S = SAVEPOINT_TIMEOUT_S

StorageFactory = Callable[[GICJobSpec, str], JobStorage]


@dataclass(frozen=True)
class _Request:
    """The control request of one Savepoint: its job's storage, its id and its derived
    directory."""

    storage: JobStorage
    rid: str
    target: str


class SavepointReconciler:
    """Reconciles Savepoint resources; see the module docstring."""

    def __init__(
        self,
        kube: KubeApi,
        storage_for: StorageFactory,
        *,
        clock: Callable[[], float] = time.time,
        metrics: OperatorMetrics | None = None,
        allowlist: StorageAllowlist | None = None,
    ) -> None:
        self.kube = kube
        self.storage_for = storage_for
        self.clock = clock
        self.metrics = metrics
        self.allowlist = allowlist or StorageAllowlist()
        self.problems = ProblemReporter("savepoint", metrics)
        self._lock = KeyedLocks()

    def reconcile(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        meta = body.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta["name"])
        with self._lock(namespace, name):
            try:
                fresh = self.kube.get_object(PLURAL, namespace, name)
            except KubeError as exc:
                self.problems.unrecorded(namespace, name, exc)
                return None
            if fresh is None:
                return None
            return self._reconcile(fresh)

    def _reconcile(self, body: Mapping[str, Any]) -> dict[str, Any]:
        p = Pass(self.kube, PLURAL, body, SavepointStatus, clock=self.clock)
        state = p.status.state
        if state in FINAL_STATES or p.deleting:
            return {}
        try:
            self._pass(p, body, state)
        except Exception as exc:
            problem = describe(exc)
            self.problems.report(p, problem, exc)
            if state is SavepointState.IN_PROGRESS:
                timeout = self._timeout_of(p, body)
                started = parse_time(p.status.trigger_time) or p.now
                if p.now - started > timeout:
                    self._fail(p, f"no savepoint after {timeout} s; meanwhile: {problem.message}")
        else:
            self.problems.resolved(p)
        return self.problems.commit(p)

    def _timeout_of(self, p: SavepointPass, body: Mapping[str, Any]) -> int:
        try:
            job = self.kube.get_object("gicjobs", p.namespace, str(body["spec"]["job"]))
            spec = GICJobSpec.model_validate((job or {}).get("spec") or {})
        except Exception:
            return DEFAULT_TIMEOUT_S
        return spec.savepoints.timeout_seconds

    def _pass(self, p: SavepointPass, body: Mapping[str, Any], state: SavepointState) -> None:
        try:
            spec = SavepointSpec.model_validate(body.get("spec") or {})
        except ValidationError as exc:
            self._fail(p, describe_validation_error(exc, "spec"), count=False)
            return
        job = self.kube.get_object("gicjobs", p.namespace, spec.job)
        if job is None or (job.get("metadata") or {}).get("deletionTimestamp"):
            message = f"GICJob {spec.job!r} does not exist (any more) in namespace {p.namespace}"
            p.update(state=SavepointState.ABANDONED, error=message)
            p.update(completion_time=rfc3339(p.now))
            p.event("Warning", "SavepointAbandoned", message)
            return
        try:
            job_spec = GICJobSpec.model_validate(job.get("spec") or {})
        except ValidationError as exc:
            p.update(state=state, error=f"GICJob {spec.job} is invalid: {exc.error_count()} errors")
            return
        storage = self._storage(p, spec.job, job, job_spec)
        rid = savepoint_request_id(p.name, p.uid)
        request = _Request(storage, rid, savepoint_dir(storage.root, p.namespace, spec.job, rid))
        job_status = GICJobStatus.read(job.get("status"))
        if state is SavepointState.TRIGGER_PENDING:
            self._trigger(p, spec, job_status, request)
        else:
            self._follow(p, job_spec, job, request)

    def _storage(
        self, p: SavepointPass, job: str, body: Mapping[str, Any], spec: GICJobSpec
    ) -> JobStorage:
        """The storage of the Savepoint's job, once the allowlist admits it."""
        cp = spec.checkpointing
        endpoint = cp.s3_endpoint_url
        if not self.allowlist.storage_allowed(p.namespace, cp.storage) or (
            endpoint and not self.allowlist.endpoint_allowed(p.namespace, endpoint)
        ):
            raise StorageNotAllowedError(
                f"GICJob {job} names storage or an S3 endpoint the operator may not use in "
                f"namespace {p.namespace} (see the GICJob's status); nothing was read or written"
            )
        lineage = GICJobStatus.read(body.get("status")).lineage
        return self.storage_for(spec, job_id(p.namespace, job, lineage))

    def _trigger(
        self, p: SavepointPass, spec: SavepointSpec, job_status: GICJobStatus, request: _Request
    ) -> None:
        rid, target = request.rid, request.target
        if job_status.phase is not JobPhase.RUNNING:
            p.update(state=SavepointState.TRIGGER_PENDING)
            p.condition(
                "Triggered",
                False,
                "JobNotRunning",
                f"waiting for GICJob {spec.job} to be Running (it is {job_status.phase})",
            )
            return
        kind = spec.mode.to_runtime()
        request.storage.request_savepoint(
            rid,
            kind=kind,
            format=spec.format,
            requested_by=f"gic-operator savepoint {p.namespace}/{p.name}",
            target=target,
        )
        p.update(
            state=SavepointState.IN_PROGRESS,
            request_id=rid,
            path=target,
            trigger_time=rfc3339(p.now),
        )
        p.condition("Triggered", True, "Requested", f"request {rid} written for the driver")
        p.event("Normal", "SavepointTriggered", f"asked job {spec.job} for a savepoint ({kind})")

    def _follow(
        self, p: SavepointPass, job_spec: GICJobSpec, job: Mapping[str, Any], request: _Request
    ) -> None:
        storage, rid, target = request.storage, request.rid, request.target
        try:
            outcome = storage.outcome(rid)
        except FormatError as exc:
            self._fail(p, f"the driver's outcome is unreadable (it stays so): {exc}")
            return
        if outcome is None:
            started = parse_time(p.status.trigger_time) or p.now
            timeout = job_spec.savepoints.timeout_seconds
            if p.now - started > timeout:
                error = f"no savepoint after {timeout} s (spec.savepoints.timeoutSeconds)"
                outcome = storage.abandon_request(rid, error)
                if outcome.error is not None:
                    self._fail(p, error)
                    return
            else:
                return
        if outcome.error is not None:
            self._fail(p, outcome.error)
            return
        try:
            path = checked_outcome_path(outcome, target)
        except UntrustedInputError as exc:
            self._fail(p, str(exc))
            return
        size = None if outcome.size_bytes is None else status_int(outcome.size_bytes)
        checkpoint = None if outcome.checkpoint_id is None else status_int(outcome.checkpoint_id)
        p.update(
            state=SavepointState.COMPLETED,
            request_id=rid,
            path=path,
            checkpoint_id=checkpoint,
            size_bytes=size,
            completion_time=rfc3339(outcome.finished_at),
            error=None,
        )
        message = f"savepoint of checkpoint {checkpoint} completed at {path} ({size or 0} bytes)"
        p.event("Normal", "SavepointCompleted", message)
        self.kube.event(job, "Normal", "SavepointCompleted", f"Savepoint {p.name}: {message}")

    def _fail(self, p: SavepointPass, error: str, *, count: bool = True) -> None:
        failures = p.status.failures + (1 if count else 0)
        p.update(
            state=SavepointState.FAILED,
            error=error,
            failures=failures,
            completion_time=rfc3339(p.now),
        )
        p.event("Warning", "SavepointFailed", error)

    # --- deletion ---------------------------------------------------------------------

    def dispose(self, body: Mapping[str, Any], attempt: int) -> str:
        """On deletion: delete the files when asked to (see the module docstring).

        Returns what happened (for the log). Raises
        :class:`~gic_operator.operator_errors.SavepointHeldError` while a job still needs the
        files (the caller retries later, however long), and any other error of a failed
        disposal while attempts remain; after :data:`MAX_DISPOSAL_ATTEMPTS` failures it
        gives up with a Warning event and returns, so the resource can go.
        """
        p = Pass(self.kube, PLURAL, body, SavepointStatus, clock=self.clock)
        spec = body.get("spec") or {}
        if not spec.get("disposeOnDelete"):
            return "kept (disposeOnDelete is false)"
        if p.status.state is not SavepointState.COMPLETED:
            return "nothing to dispose of"
        try:
            place = savepoint_place(self.kube, self.allowlist, p.namespace, body)
            held = holders(self.kube.list_objects("gicjobs", p.namespace), p.name, place.path)
        except UntrustedInputError as exc:
            message = f"files kept: {exc}"
            self.kube.event(body, "Warning", "DisposalRefused", message)
            return message
        except Exception as exc:
            return self._disposal_failed(p, body, attempt, exc)
        claimers = [name for name, mode in held if mode is RestoreMode.CLAIM]
        claimed_by = p.status.claimed_by
        if claimed_by or claimers:
            owner = claimed_by or f"{p.namespace}/{claimers[0]}"
            message = f"files kept: claimed by {owner} (Claim restore)"
            self.kube.event(body, "Normal", "SavepointKept", message)
            return message
        if held:
            names = ", ".join(name for name, _ in held)
            message = (
                f"deletion waits: GICJob {names} restored from this savepoint and has not "
                "released it yet (condition RestoreSourceReleased); its files are deleted "
                "once no job needs them"
            )
            self.kube.event(body, "Normal", "SavepointHeld", message)
            raise SavepointHeldError(message)
        try:
            storage = JobStorage.open(
                place.root,
                job_id(p.namespace, str(spec.get("job"))),
                endpoint_url=place.endpoint,
            )
            deleted = storage.dispose_savepoint(place.path)
        except Exception as exc:
            return self._disposal_failed(p, body, attempt, exc)
        message = f"deleted {deleted} objects under {place.path}"
        self.kube.event(body, "Normal", "SavepointDisposed", message)
        return message

    def _disposal_failed(
        self, p: SavepointPass, body: Mapping[str, Any], attempt: int, exc: Exception
    ) -> str:
        if attempt + 1 >= MAX_DISPOSAL_ATTEMPTS:
            message = (
                f"gave up deleting the files after {attempt + 1} attempts ({exc}); the "
                "resource is deleted, the files are left: delete them by hand"
            )
            self.kube.event(body, "Warning", "DisposalAbandoned", message)
            return message
        self.kube.patch_status(PLURAL, p.namespace, p.name, {"disposalError": str(exc)})
        raise exc
