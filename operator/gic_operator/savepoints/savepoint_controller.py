"""The Savepoint controller: one pass per call, wired from its parts; disposal on deletion.

Each call of :meth:`SavepointController.reconcile` takes the savepoint's lock, re-reads it
and runs the observer (:class:`~gic_operator.savepoints.savepoint_observer.SavepointObserver`:
its job, the job's storage, the request's outcome), the reconciler
(:class:`~gic_operator.savepoints.savepoint_reconciler.SavepointReconciler`: the next
state, the control request) and the recorder
(:class:`~gic_operator.savepoints.savepoint_recorder.SavepointRecorder`: status and
Events); :meth:`SavepointController.dispose` is
:func:`gic_operator.savepoints.savepoint_disposal.dispose`.

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
keeps failing gives up after
:data:`~gic_operator.savepoints.savepoint_disposal.MAX_DISPOSAL_ATTEMPTS` with a Warning event, so
deletion never hangs on a broken storage.

Errors a pass meets are reported as for GICJobs (:mod:`gic_operator.reconcile.problems`).

Thread-safety: one lock per savepoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from gic_operator.control_keys import ControlKeys
from gic_operator.kube.bodies import Body
from gic_operator.kube.conditions import parse_time
from gic_operator.kube.kube_api import KubeApi
from gic_operator.models import FINAL_STATES, GICJobSpec, SavepointState, SavepointStatus
from gic_operator.models.gicjob import SAVEPOINT_TIMEOUT_S
from gic_operator.operator_errors import KubeError
from gic_operator.operator_metrics import OperatorMetrics
from gic_operator.operator_settings import StorageAllowlist
from gic_operator.reconcile.problems import describe
from gic_operator.reconcile.status_pass import KeyedLocks, Pass, SavepointPass
from gic_operator.savepoints.savepoint_disposal import MAX_DISPOSAL_ATTEMPTS, dispose
from gic_operator.savepoints.savepoint_observer import SavepointObserver
from gic_operator.savepoints.savepoint_reconciler import SavepointReconciler
from gic_operator.savepoints.savepoint_recorder import SavepointRecorder
from gic_operator.storage.job_storage import StorageFactory

__all__ = ["DEFAULT_TIMEOUT_S", "MAX_DISPOSAL_ATTEMPTS", "SavepointController"]

PLURAL = "savepoints"
JOBS = "gicjobs"
#: Timeout of an InProgress Savepoint whose job's spec cannot be read (seconds).
DEFAULT_TIMEOUT_S = SAVEPOINT_TIMEOUT_S


class SavepointController:
    """Reconciles Savepoint resources; see the module docstring."""

    def __init__(
        self,
        kube: KubeApi,
        storage_for: StorageFactory,
        *,
        clock: Callable[[], float] = time.time,
        metrics: OperatorMetrics | None = None,
        allowlist: StorageAllowlist | None = None,
        control_keys: ControlKeys | None = None,
    ) -> None:
        self.kube = kube
        self.storage_for = storage_for
        self.clock = clock
        self.metrics = metrics
        self.allowlist = StorageAllowlist.unrestricted() if allowlist is None else allowlist
        self.recorder = SavepointRecorder(kube, metrics)
        self.observer = SavepointObserver(kube, storage_for, self.allowlist)
        keys = control_keys or ControlKeys.process_default()
        self.reconciler = SavepointReconciler(self.recorder, keys)
        self._lock = KeyedLocks()

    def reconcile(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        b = Body(body)
        namespace, name = b.namespace, b.required_name
        with self._lock(namespace, name):
            try:
                fresh = self.kube.get_object(PLURAL, namespace, name)
            except KubeError as exc:
                self.recorder.unrecorded(namespace, name, exc)
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
            view = self.observer.observe(p, state)
            self.reconciler.reconcile(p, view, state)
        except Exception as exc:
            problem = describe(exc)
            self.recorder.error(p, problem, exc)
            if state is SavepointState.IN_PROGRESS:
                timeout = self._timeout_of(p)
                started = parse_time(p.status.trigger_time) or p.now
                if p.now - started > timeout:
                    message = f"no savepoint after {timeout} s; meanwhile: {problem.message}"
                    self.recorder.failed(p, message)
        else:
            self.recorder.succeeded(p)
        return self.recorder.commit(p)

    def _timeout_of(self, p: SavepointPass) -> int:
        try:
            job = self.kube.get_object(JOBS, p.namespace, str(p.resource.spec["job"]))
            spec = GICJobSpec.model_validate(Body(job or {}).spec)
        except Exception:
            return DEFAULT_TIMEOUT_S
        return spec.savepoints.timeout_seconds

    def dispose(self, body: Mapping[str, Any], attempt: int) -> str:
        """On deletion: :func:`~gic_operator.savepoints.savepoint_disposal.dispose`."""
        p = Pass(self.kube, PLURAL, body, SavepointStatus, clock=self.clock)
        return dispose(self.kube, self.allowlist, p, attempt)
