"""What one reconcile of a GICJob observes: the driver pod, the runtime's status record
in storage, the restore source's release, the checkpoint and savepoint shown in the status.

:class:`JobView` reads (and records into the pass's status what it read);
:class:`gic_operator.jobs.job_steps.JobSteps` builds on it to act.

Trust: the job id and every savepoint directory are derived (``naming``), never read back
from the status or from what a driver wrote; numbers copied from a status or a driver's
report are bounded (:func:`gic_operator.storage.driver_reports.status_int`); the restore
source's release is judged from the job's manifests; the pod named in
``status.driverPod`` counts only when it carries the job's driver labels; a driver's
failure counts only for the epoch the current driver was launched with.

Thread-safety: used by one reconcile at a time (the job's lock).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from enum import StrEnum

from gic_operator.jobs.job_policy import DriverFailure, reported_failure
from gic_operator.kube.conditions import parse_time, rfc3339
from gic_operator.kube.kube_api import KubeApi, PodInfo
from gic_operator.kube.naming import LABEL_EPOCH, job_id, job_selector, savepoint_dir
from gic_operator.models import CheckpointInfo, GICJobSpec, RestoreMode, SavepointRef
from gic_operator.models.base import MAX_STATUS_NUMBER
from gic_operator.operator_settings import StorageAllowlist
from gic_operator.reconcile.status_pass import JobPass
from gic_operator.storage.driver_reports import status_int
from gic_operator.storage.job_storage import JobStorage, normalize_uri
from gic_runtime.control.model import OutcomeState

log = logging.getLogger(__name__)

#: Largest number copied from a driver's report (larger ones read as 0).
MAX_NUMBER = MAX_STATUS_NUMBER


class DriverState(StrEnum):
    """The state of a job's driver pod, as a pass sees it (:meth:`JobView.pod_state`)."""

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


class JobView:
    """One reconcile's view of a job (see the module doc)."""

    def __init__(
        self,
        p: JobPass,
        spec: GICJobSpec,
        storage_for: Callable[[GICJobSpec, str], JobStorage],
        kube: KubeApi,
        allowlist: StorageAllowlist | None = None,
        *,
        warn: Callable[[JobPass, str, str], None] | None = None,
    ) -> None:
        self.p = p
        self.spec = spec
        self.kube = kube
        #: Posts a driver's failure (pass, reason, message): the reconciler's gated
        #: :meth:`~gic_operator.reconcile.problems.ProblemReporter.driver_failure`.
        self.warn = warn
        self.storage_for = storage_for
        self.allowlist = allowlist or StorageAllowlist()
        self.job_id = job_storage_id(p)
        self.storage = storage_for(spec, self.job_id)
        self.pod: PodInfo | None = None
        self.waiting_for_launch = False
        #: Reason for Ready=False when the job waits for something outside it.
        self.not_ready_reason: str | None = None
        #: The failure the current driver reported, if any (read by :meth:`observe`).
        self.failure: DriverFailure | None = None
        #: Whether the current driver (its launch's epoch) reported a completed batch.
        self.checkpointed = False

    # --- observing --------------------------------------------------------------------

    def savepoint_target(self, rid: str) -> str:
        """The derived directory of this job's savepoint for control request ``rid``."""
        return savepoint_dir(self.storage.root, self.p.namespace, self.p.name, rid)

    def observe(self) -> None:
        """Read the driver pod, the runtime's status record and the restore source's
        release into the status."""
        p = self.p
        p.update(job_id=self.job_id)
        name = p.status.driver_pod
        pod = self.kube.get_pod(p.namespace, name) if name else None
        selector = job_selector(p.name).items()
        # A pod without the job's driver labels is not its driver, whatever the status says.
        self.pod = pod if pod is not None and selector <= pod.labels.items() else None
        self._observe_release()
        runtime = self.storage.runtime_status()
        self.failure = reported_failure(runtime, p.status.epoch or 0)
        if runtime is None:
            return
        self.checkpointed = runtime.epoch == self._driver_epoch() and runtime.batches > 0
        last = runtime.last_checkpoint
        if last is not None:
            duration = last.duration_ms if math.isfinite(last.duration_ms) else 0.0
            checkpoint = CheckpointInfo(
                id=status_int(last.id),
                time=rfc3339(last.created_at),
                duration_ms=round(min(max(duration, 0.0), float(MAX_NUMBER)), 1),
                bytes=status_int(last.bytes_uploaded),
            )
            p.update(last_checkpoint=checkpoint)
        sp = runtime.last_savepoint
        mine = savepoint_dir(self.storage.root, p.namespace, p.name, "x")[: -len("x")]
        if sp is not None and sp.state == OutcomeState.COMPLETED.value and sp.path:
            path = normalize_uri(sp.path) if "://" in sp.path else ""
            if not path.startswith(mine):
                return  # not one of this job's savepoint directories: not shown
            when = None if sp.finished_at is None else rfc3339(sp.finished_at)
            p.update(last_savepoint=SavepointRef(path=path, time=when))

    def _driver_epoch(self) -> int | None:
        """The fencing epoch of the current driver: its pod's epoch label (the pod has
        the job's driver labels), else ``status.epoch``."""
        label = self.pod.labels.get(LABEL_EPOCH, "") if self.pod is not None else ""
        return int(label) if label.isdigit() else self.p.status.epoch

    def _observe_release(self) -> None:
        """Mark a NoClaim restore source released once the job's manifests no longer
        reference it (the driver's report is not consulted)."""
        p = self.p
        restored = p.status.restored_from
        if restored is None or restored.released or not restored.path:
            return
        if restored.mode is not RestoreMode.NO_CLAIM:
            return
        if self.storage.restore_released(restored.path):
            p.event(
                "Normal",
                "RestoreSourceReleased",
                f"no retained checkpoint references {restored.path} any more",
            )
            p.update(restored_from=restored.model_copy(update={"released": True}))

    def pod_state(self) -> DriverState:
        """:attr:`~DriverState.NONE` (no driver recorded), :attr:`~DriverState.GONE`
        (recorded but missing), :attr:`~DriverState.DELETING`, or the pod's phase."""
        if not self.p.status.driver_pod:
            return DriverState.NONE
        if self.pod is None:
            return DriverState.GONE
        if self.pod.deleting and not self.pod.finished:
            return DriverState.DELETING
        try:
            return DriverState(self.pod.phase.lower())
        except ValueError:
            return DriverState.UNKNOWN

    def pod_summary(self) -> str:
        pod = self.pod
        if pod is None:
            return f"driver pod {self.p.status.driver_pod} vanished"
        text = f"driver pod {pod.name} {pod.phase}"
        if pod.exit_code is not None:
            text += f", exit code {pod.exit_code}"
        if pod.reason:
            text += f" ({pod.reason})"
        if pod.message:
            text += f": {pod.message[:300]}"
        return text

    def checkpoint_age(self) -> float | None:
        last = self.p.status.last_checkpoint
        when = None if last is None else parse_time(last.time)
        return None if when is None else max(0.0, self.p.now - when)
