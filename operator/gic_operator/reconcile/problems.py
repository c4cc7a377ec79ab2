"""Errors a reconcile pass meets: one way to report them, whatever the step.

Every error a step raises is turned into a :class:`Problem` (:func:`describe`: a reason
for machines, a message for people) and reported by :class:`ProblemReporter`:

* in the resource's status: condition ``Reconciled=False`` with the reason and message
  (``True`` / ``Succeeded`` again after a pass without one), plus whatever the
  reconciler adds (the GICJob's ``status.message`` and ``Ready`` condition);
* as a Warning Event with the reason, posted when the error is new or changed, or again
  after :data:`~gic_operator.kube.kube_events.ERROR_REPEAT_S` with how often it was met
  (:class:`~gic_operator.kube.kube_events.ErrorEventGate`);
* in the metric ``gic_operator_errors_total{resource,reason}``, once per pass.

A listing stopped at its bound (``TooManyObjects``: a prefix a driver fills holds more
objects than the operator lists) has its own reason, ahead of the other storage errors:
it is not a fault of the storage or of the operator's credentials, and the fix is in
the job's files.

A failure a job's driver reported (:func:`gic_operator.jobs.job_policy.reported_failure`) is
no error of the reconcile: :meth:`ProblemReporter.driver_failure` posts it as a Warning
Event with its reason through the same gate (under a key of its own, which a pass
without error does not reset), so a driver failing the same way on every restart posts
it once per :data:`~gic_operator.kube.kube_events.ERROR_REPEAT_S` with how often it was met.

Expected errors (storage, the Kubernetes API, files a driver wrote) are logged as one
line; only an unexpected exception (``InternalError``, a bug) is logged with its
traceback. The pass that met the error still commits what its steps recorded before it
(a durable intent such as the epoch a recovery claimed), so the next pass carries on
instead of repeating side effects.

Thread-safety: a :class:`ProblemReporter` may be shared between threads (the gate and
the metrics are thread-safe).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from gic_operator.kube.kube_events import ErrorEventGate
from gic_operator.operator_errors import (
    GICOperatorError,
    InvalidSpecError,
    KubeError,
    ObjectNotOwnedError,
    StorageNotAllowedError,
    TransientKubeError,
    UntrustedInputError,
)
from gic_operator.operator_metrics import OperatorMetrics
from gic_operator.reconcile.status_pass import Pass
from gic_runtime.errors import (
    ConfigurationError,
    FencedError,
    FormatError,
    GICError,
    RestoreError,
    StorageError,
    StoragePermissionError,
    TooManyObjectsError,
    TransientStorageError,
)

log = logging.getLogger(__name__)

#: The pass of any resource.
AnyPass = Pass[Any]
RECONCILED = "Reconciled"
INTERNAL_ERROR = "InternalError"

#: ``(error class, reason)``, the first match wins.
_REASONS: tuple[tuple[type[BaseException], str], ...] = (
    (UntrustedInputError, "UntrustedInput"),
    (ObjectNotOwnedError, "ObjectNotOwned"),
    (StorageNotAllowedError, "StorageNotAllowed"),
    (InvalidSpecError, "InvalidSpec"),
    (StoragePermissionError, "StorageAccessDenied"),
    (TooManyObjectsError, "TooManyObjects"),
    (TransientStorageError, "StorageUnavailable"),
    (StorageError, "StorageError"),
    (FormatError, "UnreadableFile"),
    (RestoreError, "RestoreSourceUnreadable"),
    (FencedError, "Fenced"),
    (ConfigurationError, "ConfigurationError"),
    (GICError, "RuntimeError"),
    (GICOperatorError, "OperatorError"),
)


@dataclass(frozen=True)
class Problem:
    """An error a pass met: ``reason`` (CamelCase), ``message``, and whether it is a bug."""

    reason: str
    message: str
    bug: bool = False


def _kube_reason(exc: KubeError) -> str:
    if exc.status == 403:
        return "KubeForbidden"
    if exc.status in (400, 422):
        return "KubeRejected"
    return "KubeUnavailable" if isinstance(exc, TransientKubeError) else "KubeError"


def describe(exc: BaseException) -> Problem:
    """The :class:`Problem` for ``exc`` (see the module docstring)."""
    if isinstance(exc, KubeError):
        return Problem(_kube_reason(exc), str(exc))
    for cls, reason in _REASONS:
        if isinstance(exc, cls):
            if reason.startswith("Storage"):
                return Problem(reason, f"the operator cannot use the job's storage: {exc}")
            return Problem(reason, str(exc))
    return Problem(
        INTERNAL_ERROR,
        f"unexpected {type(exc).__name__}: {exc}; this is a bug in the operator (its log "
        "has the traceback)",
        bug=True,
    )


class ProblemReporter:
    """Reports the problems of one resource kind (``gicjob``, ``savepoint``)."""

    def __init__(
        self,
        resource: str,
        metrics: OperatorMetrics | None = None,
        gate: ErrorEventGate | None = None,
    ) -> None:
        self.resource = resource
        self.metrics = metrics
        self.gate = gate or ErrorEventGate()

    def _key(self, p: AnyPass) -> tuple[str, ...]:
        return (self.resource, p.namespace, p.name, p.uid)

    def _driver_key(self, p: AnyPass) -> tuple[str, ...]:
        return (*self._key(p), "driver")

    def report(self, p: AnyPass, problem: Problem, exc: BaseException | None = None) -> None:
        """Record ``problem`` in ``p`` (condition, gated Warning event), count it, log it."""
        p.condition(RECONCILED, False, problem.reason, problem.message)
        if self.metrics is not None:
            self.metrics.count_error(self.resource, problem.reason)
        text = self.gate.admit(self._key(p), problem.reason, problem.message)
        where = f"{self.resource} {p.namespace}/{p.name}"
        if text is None:
            log.debug("%s: %s (repeat): %s", where, problem.reason, problem.message)
            return
        p.event("Warning", problem.reason, text)
        if problem.bug and exc is not None:
            log.error("%s: %s", where, problem.message, exc_info=exc)
        else:
            log.warning("%s: %s: %s", where, problem.reason, problem.message)

    def driver_failure(self, p: AnyPass, reason: str, message: str) -> None:
        """Post the failure the resource's driver reported as a Warning Event with
        ``reason``, gated like errors (see the module docstring); no condition, no
        metric: the reconcile itself met no error."""
        text = self.gate.admit(self._driver_key(p), reason, message)
        where = f"{self.resource} {p.namespace}/{p.name}"
        if text is None:
            log.debug("%s: driver failure %s (repeat): %s", where, reason, message)
            return
        p.event("Warning", reason, text)
        log.info("%s: the driver failed: %s: %s", where, reason, message)

    def commit(self, p: AnyPass) -> dict[str, Any]:
        """Write the pass's status (:meth:`Pass.commit`) and return the patch. An API error
        where no status can be written is logged and counted, and gives ``{}``; a pass
        whose patch conflicted had its events dropped, so they are posted again next time."""
        try:
            patch = p.commit()
        except KubeError as exc:
            self.unrecorded(p.namespace, p.name, exc)
            return {}
        if p.conflicted:
            self.unposted(p)
        return patch

    def unrecorded(self, namespace: str, name: str, exc: KubeError) -> None:
        """An API error where no status can be written: logged and counted."""
        reason = describe(exc).reason
        log.warning("%s %s/%s: %s: %s", self.resource, namespace, name, reason, exc)
        if self.metrics is not None:
            self.metrics.count_error(self.resource, reason)

    def unposted(self, p: AnyPass) -> None:
        """The pass's events were dropped (its status patch conflicted): the next pass
        that meets the error (or the driver's failure) posts it again."""
        self.gate.clear(self._key(p))
        self.gate.clear(self._driver_key(p))

    def resolved(self, p: AnyPass) -> None:
        """A pass without an error: ``Reconciled=True``; the next error is posted at once."""
        p.condition(RECONCILED, True, "Succeeded", "the last reconcile met no error")
        self.gate.clear(self._key(p))
