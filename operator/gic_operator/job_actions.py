"""The multi-step actions of a GICJob: upgrade, suspend and recover.

An action lives in ``status.pending`` (kind ``recover``, ``upgrade`` or ``suspend``, with
when it started, its control request id, the epoch a recovery claimed...), so it survives
operator restarts; :meth:`JobActions.advance` moves it one step per reconcile. Each step is
idempotent: control requests have deterministic ids and are create-once, a recovery claims
one epoch however often its later steps are retried, and a savepoint outcome is trusted only
for the directory the request named.

Thread-safety: used by one reconcile at a time (the job's lock).
"""

from __future__ import annotations

import logging
from typing import Any

from gic_operator.conditions import parse_time, rfc3339
from gic_operator.errors import UntrustedInputError
from gic_operator.job_steps import JobSteps
from gic_operator.job_view import checked_outcome_path, status_int
from gic_operator.models import JobPhase, UpgradeMode
from gic_operator.naming import job_id, request_id
from gic_runtime.errors import FormatError

log = logging.getLogger(__name__)

#: Seconds a stop-with-savepoint may take before an upgrade or suspend gives up.
STOP_SAVEPOINT_TIMEOUT_S = 600.0
#: Seconds a driver may keep running after its terminal savepoint completed.
STOP_GRACE_S = 60.0


class JobActions(JobSteps):
    """:class:`~gic_operator.job_steps.JobSteps` with the multi-step actions."""

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
