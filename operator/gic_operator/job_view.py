"""What one reconcile of a GICJob observes: the driver pod, the runtime's status record
in storage, the restore source's release, the checkpoint and savepoint shown in the status.

:class:`JobView` reads (and records into the pass's status what it read);
:class:`gic_operator.job_steps.JobSteps` builds on it to act.

Trust: the job id and every savepoint directory are derived (``naming``), never read back
from the status or from what a driver wrote; numbers copied from a status or a driver's
report are bounded (:func:`status_int`); a savepoint outcome naming another directory is
refused (:func:`checked_outcome_path`); the restore source's release is judged from the
job's manifests; the pod named in ``status.driverPod`` counts only when it carries the
job's driver labels; a driver's failure counts only for the epoch the current driver was
launched with.

Thread-safety: used by one reconcile at a time (the job's lock).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from gic_operator.conditions import parse_time, rfc3339
from gic_operator.errors import UntrustedInputError
from gic_operator.job_policy import DriverFailure, reported_failure
from gic_operator.kube import KubeApi, PodInfo
from gic_operator.models import GICJobSpec, RestoreMode
from gic_operator.naming import job_id, job_selector, savepoint_dir
from gic_operator.reconcile_context import Pass
from gic_operator.settings import StorageAllowlist
from gic_operator.storage_view import JobStorage, normalize_uri
from gic_runtime.control.model import Outcome

log = logging.getLogger(__name__)

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


class JobView:
    """One reconcile's view of a job (see the module doc)."""

    def __init__(
        self,
        p: Pass,
        spec: GICJobSpec,
        storage_for: Callable[[GICJobSpec, str], JobStorage],
        kube: KubeApi,
        allowlist: StorageAllowlist | None = None,
        *,
        warn: Callable[[Pass, str, str], None] | None = None,
    ) -> None:
        self.p = p
        self.spec = spec
        self.kube = kube
        #: Posts a driver's failure (pass, reason, message): the reconciler's gated
        #: :meth:`~gic_operator.problems.ProblemReporter.driver_failure`.
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
        self.failure = reported_failure(runtime, status_int(p.status.get("epoch")))
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
