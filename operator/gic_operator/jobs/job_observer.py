"""What one reconcile of a GICJob observes: the driver pod, the runtime's status record
in storage, the restore source's release.

:class:`JobObserver` reads; :class:`JobView` is what it read, frozen, with no decision in
it: the reconciler (:mod:`gic_operator.jobs.job_reconciler`) decides from it and the
recorder (:mod:`gic_operator.jobs.job_recorder`) copies the observed checkpoint, savepoint
and release into the status.

Trust: the job id and every savepoint directory are derived (``naming``), never read back
from the status or from what a driver wrote; numbers copied from a status or a driver's
report are bounded (:func:`gic_operator.storage.driver_reports.status_int`); the restore
source's release is judged from the job's manifests; the pod named in
``status.driverPod`` counts only when it carries the job's driver labels; a driver's
failure counts only for the epoch the current driver was launched with; a savepoint the
driver reported counts only in one of the job's own savepoint directories.

Thread-safety: used by one reconcile at a time (the job's lock).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from gic_operator.jobs.job_policy import DriverFailure, reported_failure
from gic_operator.kube.conditions import rfc3339
from gic_operator.kube.kube_api import KubeApi, PodInfo
from gic_operator.kube.naming import LABEL_EPOCH, job_id, job_selector, savepoint_dir
from gic_operator.models import CheckpointInfo, RestoreMode, SavepointRef
from gic_operator.models.base import MAX_STATUS_NUMBER
from gic_operator.reconcile.status_pass import JobPass
from gic_operator.storage.driver_reports import status_int
from gic_operator.storage.job_storage import JobStorage, normalize_uri
from gic_runtime.control.model import OutcomeState
from gic_runtime.status import JobStatus

#: Largest number copied from a driver's report (larger ones read as 0).
MAX_NUMBER = MAX_STATUS_NUMBER


class DriverState(StrEnum):
    """The state of a job's driver pod, as a pass sees it (:attr:`JobView.driver_state`)."""

    NONE = "none"  # no driver recorded
    GONE = "gone"  # recorded, but the pod is missing (or is not the job's driver)
    DELETING = "deleting"
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNKNOWN = "unknown"

    @property
    def alive(self) -> bool:
        """Whether the driver may still run (or start)."""
        return self in (DriverState.RUNNING, DriverState.PENDING)


def job_storage_id(p: JobPass) -> str:
    """The job's id in storage, derived from its namespace, name and lineage (never
    ``status.jobId``)."""
    return job_id(p.namespace, p.name, p.status.lineage)


@dataclass(frozen=True)
class JobView:
    """What one pass observed of a job (see the module doc)."""

    #: The pod named in ``status.driverPod`` when it carries the job's driver labels.
    pod: PodInfo | None
    #: ``status.driverPod`` when observed (the pod's name even when it is gone).
    driver_pod: str | None
    driver_state: DriverState
    #: The failure the current driver reported, if any.
    failure: DriverFailure | None = None
    #: Whether the current driver (its launch's epoch) reported a completed batch.
    checkpointed: bool = False
    #: The latest checkpoint the driver reported (``None``: none reported).
    last_checkpoint: CheckpointInfo | None = None
    #: The latest savepoint the driver reported in the job's own savepoint directories.
    last_savepoint: SavepointRef | None = None
    #: Whether a NoClaim restore source not yet marked released is no longer referenced.
    restore_released: bool = False

    @property
    def pod_summary(self) -> str:
        """The driver pod in a line (phase, exit code, reason, message)."""
        pod = self.pod
        if pod is None:
            return f"driver pod {self.driver_pod} vanished"
        text = f"driver pod {pod.name} {pod.phase}"
        if pod.exit_code is not None:
            text += f", exit code {pod.exit_code}"
        if pod.reason:
            text += f" ({pod.reason})"
        if pod.message:
            text += f": {pod.message[:300]}"
        return text


class JobObserver:
    """Reads the cluster and the job's storage into a :class:`JobView`."""

    def __init__(self, kube: KubeApi, storage: JobStorage, *, retained: int) -> None:
        self.kube = kube
        self.storage = storage
        #: The job's ``spec.checkpointing.retainedCheckpoints`` (bounds what a release
        #: judgment lists).
        self.retained = retained

    def observe(self, p: JobPass) -> JobView:
        """The driver pod, the restore source's release and the runtime's status record."""
        name = p.status.driver_pod
        pod = self.kube.get_pod(p.namespace, name) if name else None
        selector = job_selector(p.name).items()
        # A pod without the job's driver labels, or that this GICJob does not own, is not
        # its driver, whatever the status says.
        pod = pod if pod is not None and selector <= pod.labels.items() else None
        pod = pod if pod is not None and pod.owner_uid == p.uid else None
        state = _driver_state(name, pod)
        runtime = self.storage.runtime_status()
        released = self._released(p, runtime)
        failure = reported_failure(runtime, p.status.epoch or 0)
        if runtime is None:
            return JobView(pod, name, state, failure, restore_released=released)
        checkpoint = savepoint = None
        last = runtime.last_checkpoint
        if last is not None:
            duration = last.duration_ms if math.isfinite(last.duration_ms) else 0.0
            checkpoint = CheckpointInfo(
                id=status_int(last.id),
                time=rfc3339(last.created_at),
                duration_ms=round(min(max(duration, 0.0), float(MAX_NUMBER)), 1),
                bytes=status_int(last.bytes_uploaded),
            )
        sp = runtime.last_savepoint
        mine = savepoint_dir(self.storage.root, p.namespace, p.name, "x")[: -len("x")]
        if sp is not None and sp.state == OutcomeState.COMPLETED.value and sp.path:
            path = normalize_uri(sp.path) if "://" in sp.path else ""
            if path.startswith(mine):  # else not one of this job's savepoint directories
                when = None if sp.finished_at is None else rfc3339(sp.finished_at)
                savepoint = SavepointRef(path=path, time=when)
        return JobView(
            pod,
            name,
            state,
            failure,
            checkpointed=runtime.epoch == _driver_epoch(p, pod) and runtime.batches > 0,
            last_checkpoint=checkpoint,
            last_savepoint=savepoint,
            restore_released=released,
        )

    def _released(self, p: JobPass, runtime: JobStatus | None) -> bool:
        """Whether a NoClaim restore source not yet marked released is no longer
        referenced by the job's manifests (the driver's report is not consulted for
        that). The manifests are looked at again only when the launch's epoch or the
        driver's last report (its epoch, its last checkpoint) changed
        (:mod:`gic_operator.storage.release_checks`), so a steady pass lists nothing."""
        restored = p.status.restored_from
        if restored is None or restored.released or not restored.path:
            return False
        if restored.mode is not RestoreMode.NO_CLAIM:
            return False
        progress = _progress(p, runtime)
        return self.storage.restore_released(restored.path, progress, retained=self.retained)


def _progress(p: JobPass, runtime: JobStatus | None) -> tuple[int, ...]:
    """When a release is judged again: the launch's epoch as recorded, and the epoch and
    last checkpoint id the driver reported (bounded numbers; 0 when absent)."""
    if runtime is None:
        return (p.status.epoch or 0,)
    last = runtime.last_checkpoint
    reported = status_int(last.id) if last is not None else 0
    return (p.status.epoch or 0, status_int(runtime.epoch), reported)


def _driver_epoch(p: JobPass, pod: PodInfo | None) -> int | None:
    """The fencing epoch of the current driver: its pod's epoch label (the pod has the
    job's driver labels), else ``status.epoch``."""
    label = pod.labels.get(LABEL_EPOCH, "") if pod is not None else ""
    return int(label) if label.isdigit() else p.status.epoch


def _driver_state(name: str | None, pod: PodInfo | None) -> DriverState:
    """:attr:`~DriverState.NONE` (no driver recorded), :attr:`~DriverState.GONE`
    (recorded but missing), :attr:`~DriverState.DELETING`, or the pod's phase."""
    if not name:
        return DriverState.NONE
    if pod is None:
        return DriverState.GONE
    if pod.deleting and not pod.finished:
        return DriverState.DELETING
    try:
        return DriverState(pod.phase.lower())
    except ValueError:
        return DriverState.UNKNOWN
