"""Savepoints a GICJob asks for through its metadata and spec.

* annotation ``gic.io/savepoint=<nonce>``: each new nonce creates one Savepoint resource
  (name derived from the nonce, so a retried create finds the existing one); the last
  nonce handled is kept in ``status.processedSavepointNonce``;
* ``spec.savepoints.intervalSeconds``: a periodic Savepoint (``disposeOnDelete: true``)
  each interval while the job runs;
* ``spec.savepoints.retention``: deletes periodic Savepoints beyond ``maxCount`` (newest
  kept) or older than ``maxAgeSeconds`` — only ones the policy created, never one still
  in progress, never one a job still needs (claimed, or an unreleased restore source:
  :func:`gic_operator.restore_sources.holders`).

:func:`restart_delay` is the restart backoff, clamped so that no spec value (``1e300``)
can overflow it.

Thread-safety: used by one reconcile at a time (the job's lock).
"""

from __future__ import annotations

import math
from typing import Any

from gic_operator.conditions import parse_time, rfc3339
from gic_operator.kube import KubeApi
from gic_operator.models import API_VERSION, FINAL_STATES, GICJobSpec, JobPhase
from gic_operator.models.gicjob import RestartPolicySpec
from gic_operator.naming import (
    ANNOTATION_SAVEPOINT,
    LABEL_CREATED_BY,
    LABEL_JOB,
    label_value,
    savepoint_dir,
    savepoint_request_id,
    savepoint_resource_name,
)
from gic_operator.reconcile_context import Pass
from gic_operator.restore_sources import holders
from gic_operator.storage_view import normalize_uri

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


class SavepointPolicy:
    """Applies the job's savepoint annotation, period and retention (module doc)."""

    def __init__(self, p: Pass, spec: GICJobSpec, kube: KubeApi) -> None:
        self.p = p
        self.spec = spec
        self.kube = kube

    def apply(self) -> None:
        if self.p.status.get("phase") == JobPhase.INVALID.value:
            return
        self._annotation()
        if self.p.status.get("phase") == JobPhase.RUNNING.value:
            self._periodic()
        self._retention()

    def _savepoint(self, name: str, created_by: str, dispose: bool) -> dict[str, Any]:
        p = self.p
        return {
            "apiVersion": API_VERSION,
            "kind": "Savepoint",
            "metadata": {
                "name": name,
                "namespace": p.namespace,
                "labels": {LABEL_JOB: label_value(p.name), LABEL_CREATED_BY: created_by},
            },
            "spec": {
                "job": p.name,
                "format": self.spec.savepoints.format.value,
                "mode": "intermediate",
                "disposeOnDelete": dispose,
            },
        }

    def _annotation(self) -> None:
        p = self.p
        nonce = p.annotations.get(ANNOTATION_SAVEPOINT)
        if not nonce or nonce == p.status.get("processedSavepointNonce"):
            return
        name = savepoint_resource_name(p.name, nonce)
        created = self.kube.create_object(
            "savepoints", p.namespace, self._savepoint(name, CREATED_BY_ANNOTATION, False)
        )
        p.set(processedSavepointNonce=nonce)
        if created:
            p.event("Normal", "SavepointTriggered", f"created Savepoint {name} for nonce {nonce}")

    def _periodic(self) -> None:
        p = self.p
        interval = self.spec.savepoints.interval_seconds
        if not interval:
            return
        last = parse_time(p.status.get("lastPeriodicSavepoint"))
        last = last or parse_time(p.status.get("runningSince")) or p.now
        if p.now - last < interval:
            return
        stamp = rfc3339(p.now).replace(":", "").replace("-", "").lower()
        name = savepoint_resource_name(p.name, f"periodic-{stamp}")
        if self.kube.create_object(
            "savepoints", p.namespace, self._savepoint(name, CREATED_BY_PERIODIC, True)
        ):
            p.event("Normal", "SavepointTriggered", f"created periodic Savepoint {name}")
        p.set(lastPeriodicSavepoint=rfc3339(p.now))

    def _retention(self) -> None:
        p = self.p
        retention = self.spec.savepoints.retention
        if retention.max_count is None and retention.max_age_seconds is None:
            return
        labels = {LABEL_JOB: label_value(p.name), LABEL_CREATED_BY: CREATED_BY_PERIODIC}
        owned = [
            sp
            for sp in self.kube.list_objects("savepoints", p.namespace, labels)
            if (sp.get("spec") or {}).get("job") == p.name
            and not (sp.get("metadata") or {}).get("deletionTimestamp")
        ]
        owned.sort(key=lambda sp: str((sp.get("metadata") or {}).get("creationTimestamp", "")))
        owned.reverse()  # newest first
        jobs = self.kube.list_objects("gicjobs", p.namespace) if owned else []
        root = normalize_uri(self.spec.checkpointing.storage)
        for index, sp in enumerate(owned):
            status = sp.get("status") or {}
            if status.get("claimedBy") or status.get("state") not in {
                s.value for s in FINAL_STATES
            }:
                continue
            meta = sp.get("metadata") or {}
            rid = savepoint_request_id(str(meta.get("name")), str(meta.get("uid") or ""))
            path = savepoint_dir(root, p.namespace, p.name, rid)
            if holders(jobs, str(meta.get("name")), path):
                continue
            created = parse_time((sp.get("metadata") or {}).get("creationTimestamp")) or p.now
            too_many = retention.max_count is not None and index >= retention.max_count
            too_old = (
                retention.max_age_seconds is not None
                and p.now - created > retention.max_age_seconds
            )
            if too_many or too_old:
                name = str(sp["metadata"]["name"])
                self.kube.delete_object("savepoints", p.namespace, name)
                why = "beyond maxCount" if too_many else "older than maxAgeSeconds"
                p.event("Normal", "SavepointRetired", f"deleted periodic Savepoint {name} ({why})")
