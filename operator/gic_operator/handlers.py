"""kopf handlers: thin adapters from Kubernetes events to the controllers.

Every handler finds the resource to reconcile and calls its kind's controller,
:class:`~gic_operator.jobs.job_controller.JobController` or
:class:`~gic_operator.savepoints.savepoint_controller.SavepointController` (observer,
reconciler, recorder); all decisions live there. Triggers:

* a GICJob changes (spec, annotations, status) or its timer fires -> reconcile the job;
* a driver pod (label ``gic.io/role=driver``) changes -> reconcile its job at once, which
  is what makes crash recovery start within a second of the pod failing;
* a Savepoint changes or its timer fires (until it reaches a final state) -> reconcile it;
* with ``warn_unwatched``, GICJobs outside the watched namespaces get a Warning Event
  (:mod:`gic_operator.jobs.unwatched`, on a thread started and stopped with kopf);
* a Savepoint is deleted -> dispose of its files when asked (kopf's finalizer holds the
  deletion until :meth:`SavepointController.dispose` returns; while a job that restored
  from it has not released it, every :data:`HELD_RETRY_DELAY_S`).

Timers tick every second but a resource is reconciled by the timer at most once per
``reconcile_interval_s`` (event-driven reconciles are not rate limited).

Handlers are registered by :func:`configure` (once per process, before ``kopf.run``).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import kopf

from gic_operator.jobs.job_controller import JobController
from gic_operator.jobs.unwatched import UnwatchedJobsReporter
from gic_operator.kube.bodies import Body
from gic_operator.kube.kube_client import KubernetesApi
from gic_operator.kube.naming import LABEL_JOB, LABEL_ROLE, ROLE_DRIVER
from gic_operator.models import FINAL_STATES, GROUP, VERSION, GICJobStatus, SavepointStatus
from gic_operator.operator_errors import SavepointHeldError
from gic_operator.operator_metrics import OperatorMetrics, default_metrics
from gic_operator.operator_settings import OperatorSettings
from gic_operator.savepoints.savepoint_controller import SavepointController
from gic_operator.storage.job_storage import open_job_storage

log = logging.getLogger(__name__)

#: Savepoint disposal retry delay (seconds).
DISPOSAL_RETRY_DELAY_S = 5.0
#: How often a held Savepoint's deletion looks again whether it was released (seconds).
HELD_RETRY_DELAY_S = 30.0


class _Runtime:
    """The reconcilers and timer bookkeeping of this process (built lazily: the
    Kubernetes client configuration is read when kopf starts, not at import)."""

    def __init__(self, settings: OperatorSettings, metrics: OperatorMetrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self._jobs: JobController | None = None
        self._savepoints: SavepointController | None = None
        self._last: dict[tuple[str, str, str], float] = {}
        self._states: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def build(self) -> None:
        kube = KubernetesApi()
        allowlist, keys = self.settings.allowlist, self.settings.control_keys
        storage_for = functools.partial(open_job_storage, limits=self.settings.manifest_limits)
        self._jobs = JobController(
            kube, storage_for, metrics=self.metrics, allowlist=allowlist, control_keys=keys
        )
        self._savepoints = SavepointController(
            kube, storage_for, metrics=self.metrics, allowlist=allowlist, control_keys=keys
        )

    @property
    def jobs(self) -> JobController:
        if self._jobs is None:
            self.build()
        assert self._jobs is not None
        return self._jobs

    @property
    def savepoints(self) -> SavepointController:
        if self._savepoints is None:
            self.build()
        assert self._savepoints is not None
        return self._savepoints

    def timer_due(self, kind: str, namespace: str, name: str) -> bool:
        key = (kind, namespace, name)
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(key, -1e9) < self.settings.reconcile_interval_s:
                return False
            self._last[key] = now
            return True

    def count_savepoint(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        """Track each Savepoint's state for the ``gic_operator_savepoints`` gauge."""
        sp = Body(body)
        key = (sp.namespace, sp.name)
        with self._lock:
            if deleted:
                self._states.pop(key, None)
            else:
                self._states[key] = SavepointStatus.read(sp.status).state.value
            counts: dict[str, int] = {}
            for state in self._states.values():
                counts[state] = counts.get(state, 0) + 1
        self.metrics.set_savepoint_counts(counts)

    def forget(self, kind: str, namespace: str, name: str) -> None:
        with self._lock:
            self._last.pop((kind, namespace, name), None)

    def run(self, resource: str, fn: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        error = False
        try:
            return fn()
        except Exception:
            error = True
            raise
        finally:
            self.metrics.observe_reconcile(resource, time.perf_counter() - started, error)


def configure(settings: OperatorSettings, metrics: OperatorMetrics | None = None) -> None:
    """Register every handler with kopf's default registry for a process with ``settings``."""
    rt = _Runtime(settings, metrics or default_metrics())

    @kopf.on.startup(id="gic-reconcilers")
    def startup(**_: Any) -> None:
        rt.build()

    if settings.warn_unwatched and not settings.all_namespaces:
        reporter = UnwatchedJobsReporter(settings.namespaces)

        @kopf.on.startup(id="gic-unwatched-jobs")
        def start_reporter(**_: Any) -> None:
            reporter.start(KubernetesApi())

        @kopf.on.cleanup(id="gic-unwatched-jobs-stop")
        def stop_reporter(**_: Any) -> None:
            reporter.stop()

    @kopf.on.event(GROUP, VERSION, "gicjobs", id="gicjob-event")
    def job_event(event: Mapping[str, Any], body: Mapping[str, Any], **_: Any) -> None:
        job = Body(body)
        namespace, name = job.namespace, job.name
        if event.get("type") == "DELETED":
            rt.jobs.forget(namespace, name)
            rt.forget("gicjob", namespace, name)
            rt.metrics.set_job_phase(namespace, name, None)
            return
        rt.run("gicjob", lambda: rt.jobs.reconcile_named(namespace, name))
        status = job.status
        phase = GICJobStatus.read(status).phase.value if status else None
        rt.metrics.set_job_phase(namespace, name, phase)

    @kopf.timer(GROUP, VERSION, "gicjobs", interval=1.0, id="gicjob-timer")
    def job_timer(namespace: str | None, name: str, **_: Any) -> None:
        namespace = namespace or "default"
        if rt.timer_due("gicjob", namespace, name):
            rt.run("gicjob", lambda: rt.jobs.reconcile_named(namespace, name))

    @kopf.on.event("", "v1", "pods", labels={LABEL_ROLE: ROLE_DRIVER}, id="driver-pod-event")
    def pod_event(body: Mapping[str, Any], **_: Any) -> None:
        pod = Body(body)
        owners = [
            ref
            for ref in pod.owner_references
            if ref.get("kind") == "GICJob" and ref.get("controller")
        ]
        name = owners[0].get("name") if owners else pod.labels.get(LABEL_JOB)
        if name:
            namespace = pod.namespace
            rt.run("gicjob", lambda: rt.jobs.reconcile_named(namespace, str(name)))

    @kopf.on.event(GROUP, VERSION, "savepoints", id="savepoint-event")
    def savepoint_event(event: Mapping[str, Any], body: Mapping[str, Any], **_: Any) -> None:
        if event.get("type") == "DELETED":
            sp = Body(body)
            rt.forget("savepoint", sp.namespace, sp.name)
            rt.count_savepoint(body, deleted=True)
            return
        rt.count_savepoint(body)
        if SavepointStatus.read(Body(body).status).state in FINAL_STATES:
            return
        rt.run("savepoint", lambda: rt.savepoints.reconcile(body))

    def _savepoint_active(status: Mapping[str, Any], **_: Any) -> bool:
        return SavepointStatus.read(status).state not in FINAL_STATES

    @kopf.timer(
        GROUP, VERSION, "savepoints", interval=1.0, when=_savepoint_active, id="savepoint-timer"
    )
    def savepoint_timer(
        body: Mapping[str, Any], namespace: str | None, name: str, **_: Any
    ) -> None:
        namespace = namespace or "default"
        if rt.timer_due("savepoint", namespace, name):
            rt.run("savepoint", lambda: rt.savepoints.reconcile(body))

    @kopf.on.delete(GROUP, VERSION, "savepoints", id="savepoint-dispose")
    def savepoint_delete(body: Mapping[str, Any], retry: int, **_: Any) -> str:
        try:
            return str(rt.savepoints.dispose(body, retry))
        except SavepointHeldError as exc:
            raise kopf.TemporaryError(str(exc), delay=HELD_RETRY_DELAY_S) from exc
        except Exception as exc:
            raise kopf.TemporaryError(
                f"disposal failed ({exc}); retrying", delay=DISPOSAL_RETRY_DELAY_S
            ) from exc
