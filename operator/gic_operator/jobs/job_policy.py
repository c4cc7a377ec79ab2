"""Savepoints a GICJob asks for through its metadata and spec.

* annotation ``gic.io/savepoint=<nonce>``: each new nonce creates one Savepoint resource
  (name derived from the nonce, so a retried create finds the existing one); the last
  nonce handled is kept in ``status.processedSavepointNonce``;
* ``spec.savepoints.intervalSeconds``: a periodic Savepoint (``disposeOnDelete: true``)
  each interval while the job runs;
* ``spec.savepoints.retention``: deletes periodic Savepoints beyond ``maxCount`` (newest
  kept) or older than ``maxAgeSeconds`` — only ones the policy created, never one still
  in progress, never one a job still needs (claimed, or an unreleased restore source:
  :func:`gic_operator.savepoints.restore_sources.holders`).

:func:`restart_delay` is the restart backoff, clamped so that no spec value (``1e300``)
can overflow it.

:func:`reported_failure` is what a failed driver reported about its failure, as far as
the operator believes it. A driver that fails records a ``failure`` in the job's status
record (:class:`gic_runtime.status.FailureStatus`: a machine ``reason`` and the error's
``message``) under its fencing epoch before it exits; the operator shows it on the
GICJob and decides from the reason whether a relaunch can help
(:attr:`DriverFailure.restartable`). The driver runs the tenant's code, so the record is
input, not truth:

* only a failure of the epoch the operator launched the current driver with
  (``status.epoch``) counts, and only in a record in state ``failed``: a record of an
  older launch (a superseded driver, the previous attempt) or of a launch the operator
  did not make is not this driver's failure;
* the reason must be one of :class:`~gic_runtime.status.FailureReason`; any other text
  reads as :data:`GENERIC_FAILURE` (a plain driver failure, restarted as usual);
* the message is cut to :data:`FAILURE_MESSAGE_MAX` characters, with control and format
  characters (newlines, escapes, bidirectional overrides) replaced by spaces.

A driver can at worst misname its own failure: claiming a reason that is not restarted
stops only its own job until its spec changes.

Thread-safety: used by one reconcile at a time (the job's lock).
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass
from typing import Any

from gic_operator.kube.bodies import Body
from gic_operator.kube.conditions import parse_time, rfc3339
from gic_operator.kube.kube_api import KubeApi
from gic_operator.kube.naming import (
    ANNOTATION_SAVEPOINT,
    LABEL_CREATED_BY,
    LABEL_JOB,
    label_value,
    savepoint_dir,
    savepoint_request_id,
    savepoint_resource_name,
)
from gic_operator.models import (
    API_VERSION,
    FINAL_STATES,
    GICJobSpec,
    JobPhase,
    SavepointMode,
    SavepointSpec,
    SavepointStatus,
)
from gic_operator.models.gicjob import RestartPolicySpec
from gic_operator.reconcile.status_pass import JobPass
from gic_operator.savepoints.restore_sources import holders
from gic_operator.storage.job_storage import normalize_uri
from gic_runtime.status import FailureReason, JobState, JobStatus

CREATED_BY_ANNOTATION = "annotation"
CREATED_BY_PERIODIC = "periodic"
#: Longest restart delay whatever the spec says (seconds).
MAX_RESTART_DELAY_S = 86400.0


def restart_delay(policy: RestartPolicySpec, restarts: int) -> float:
    """Seconds before restart number ``restarts + 1``: 0 for the first, then
    ``backoffSeconds * 2^(restarts-1)``, capped at ``maxBackoffSeconds`` and at
    :data:`MAX_RESTART_DELAY_S`; finite for any input."""
    if restarts <= 0:
        return 0.0
    delay = policy.backoff_seconds * 2.0 ** min(restarts - 1, 64)
    delay = min(delay, policy.max_backoff_seconds, MAX_RESTART_DELAY_S)
    return delay if math.isfinite(delay) and delay >= 0 else MAX_RESTART_DELAY_S


#: The reason of a failure whose reported reason is not one the operator knows.
GENERIC_FAILURE = "DriverFailed"
#: Longest driver message shown (characters).
FAILURE_MESSAGE_MAX = 2048
#: Failures a relaunch of the same spec meets again: the job waits for a spec change.
NOT_RESTARTED: frozenset[str] = frozenset(
    {
        FailureReason.QUERY_MISMATCH.value,
        FailureReason.INVALID_SETTINGS.value,
        FailureReason.OUTPUT_OWNED.value,
    }
)
_KNOWN_FAILURES: frozenset[str] = frozenset(reason.value for reason in FailureReason)


@dataclass(frozen=True)
class DriverFailure:
    """A failure the current driver reported: ``reason`` (a known reason or
    :data:`GENERIC_FAILURE`) and ``message`` (bounded, printable)."""

    reason: str
    message: str

    @property
    def restartable(self) -> bool:
        """Whether a relaunch of the same spec may get past it."""
        return self.reason not in NOT_RESTARTED


def clean_text(text: str, limit: int = FAILURE_MESSAGE_MAX) -> str:
    """``text`` as one printable line of at most ``limit`` characters: control, format
    and other non-printing characters become spaces, runs of whitespace one space, and a
    cut text ends in ``...``."""
    head = text[: limit * 4]
    printable = "".join(" " if unicodedata.category(ch)[0] in "CZ" else ch for ch in head)
    line = " ".join(printable.split())
    if len(line) <= limit and len(head) == len(text):
        return line
    return line[: limit - 3].rstrip() + "..."


def reported_failure(runtime: JobStatus | None, epoch: int) -> DriverFailure | None:
    """The failure the driver of fencing ``epoch`` reported in ``runtime`` (the job's
    status record), or ``None`` when it reported none (see the module docstring)."""
    if runtime is None or runtime.failure is None or not epoch:
        return None
    if runtime.epoch != epoch or runtime.state is not JobState.FAILED:
        return None
    reported = runtime.failure
    reason = reported.reason if reported.reason in _KNOWN_FAILURES else GENERIC_FAILURE
    message = clean_text(reported.message) or "the driver gave no message"
    return DriverFailure(reason, message)


class SavepointPolicy:
    """Applies the job's savepoint annotation, period and retention (module doc)."""

    def __init__(self, p: JobPass, spec: GICJobSpec, kube: KubeApi) -> None:
        self.p = p
        self.spec = spec
        self.kube = kube

    def apply(self) -> None:
        if self.p.status.phase is JobPhase.INVALID:
            return
        self._annotation()
        if self.p.status.phase is JobPhase.RUNNING:
            self._periodic()
        self._retention()

    def _savepoint(self, name: str, created_by: str, dispose: bool) -> dict[str, Any]:
        p = self.p
        spec = SavepointSpec(
            job=p.name,
            format=self.spec.savepoints.format,
            mode=SavepointMode.INTERMEDIATE,
            dispose_on_delete=dispose,
        )
        return {
            "apiVersion": API_VERSION,
            "kind": "Savepoint",
            "metadata": {
                "name": name,
                "namespace": p.namespace,
                "labels": {LABEL_JOB: label_value(p.name), LABEL_CREATED_BY: created_by},
            },
            "spec": spec.to_kube(),
        }

    def _annotation(self) -> None:
        p = self.p
        nonce = p.annotations.get(ANNOTATION_SAVEPOINT)
        if not nonce or nonce == p.status.processed_savepoint_nonce:
            return
        name = savepoint_resource_name(p.name, nonce)
        created = self.kube.create_object(
            "savepoints", p.namespace, self._savepoint(name, CREATED_BY_ANNOTATION, False)
        )
        p.update(processed_savepoint_nonce=nonce)
        if created:
            p.event("Normal", "SavepointTriggered", f"created Savepoint {name} for nonce {nonce}")

    def _periodic(self) -> None:
        p = self.p
        interval = self.spec.savepoints.interval_seconds
        if not interval:
            return
        last = parse_time(p.status.last_periodic_savepoint)
        last = last or parse_time(p.status.running_since) or p.now
        if p.now - last < interval:
            return
        stamp = rfc3339(p.now).replace(":", "").replace("-", "").lower()
        name = savepoint_resource_name(p.name, f"periodic-{stamp}")
        if self.kube.create_object(
            "savepoints", p.namespace, self._savepoint(name, CREATED_BY_PERIODIC, True)
        ):
            p.event("Normal", "SavepointTriggered", f"created periodic Savepoint {name}")
        p.update(last_periodic_savepoint=rfc3339(p.now))

    def _retention(self) -> None:
        p = self.p
        retention = self.spec.savepoints.retention
        if retention.max_count is None and retention.max_age_seconds is None:
            return
        labels = {LABEL_JOB: label_value(p.name), LABEL_CREATED_BY: CREATED_BY_PERIODIC}
        owned = [
            sp
            for sp in map(Body, self.kube.list_objects("savepoints", p.namespace, labels))
            if sp.spec.get("job") == p.name and not sp.deleting
        ]
        owned.sort(key=lambda sp: sp.creation_timestamp)
        owned.reverse()  # newest first
        jobs = self.kube.list_objects("gicjobs", p.namespace) if owned else []
        root = normalize_uri(self.spec.checkpointing.storage)
        for index, sp in enumerate(owned):
            status = SavepointStatus.read(sp.status)
            if status.claimed_by or status.state not in FINAL_STATES:
                continue
            rid = savepoint_request_id(sp.name, sp.uid)
            path = savepoint_dir(root, p.namespace, p.name, rid)
            if holders(jobs, sp.name, path):
                continue
            created = parse_time(sp.creation_timestamp) or p.now
            too_many = retention.max_count is not None and index >= retention.max_count
            too_old = (
                retention.max_age_seconds is not None
                and p.now - created > retention.max_age_seconds
            )
            if too_many or too_old:
                name = sp.required_name
                self.kube.delete_object("savepoints", p.namespace, name)
                why = "beyond maxCount" if too_many else "older than maxAgeSeconds"
                p.event("Normal", "SavepointRetired", f"deleted periodic Savepoint {name} ({why})")
