"""The operator's exception tree.

Every error the operator raises on purpose derives from :class:`GICOperatorError`.
Errors of the Kubernetes client are translated at the API seam (:mod:`gic_operator.kube.kube_api`,
``raise ... from exc``) into :class:`KubeError`, and those worth retrying soon (HTTP 429,
5xx, connection failures, timeouts) into :class:`TransientKubeError` (a stale
``resourceVersion`` into :class:`ConflictError`), so reconcilers
never import a client exception. Errors of the runtime (checkpoint storage) stay
:class:`gic_runtime.errors.GICError`.
"""

from __future__ import annotations


class GICOperatorError(Exception):
    """Base class of every error the operator raises on purpose."""


class KubeError(GICOperatorError):
    """A Kubernetes API call failed. ``status`` is the HTTP status (``None`` when no
    response arrived) and ``reason`` the API's machine-readable reason, when known."""

    def __init__(self, message: str, *, status: int | None = None, reason: str | None = None):
        super().__init__(message)
        self.status = status
        self.reason = reason


class TransientKubeError(KubeError):
    """A Kubernetes API call failed in a way that may succeed when retried (throttled,
    server error, connection lost, timed out)."""


class ConflictError(TransientKubeError):
    """A write carried a ``resourceVersion`` the object no longer has (HTTP 409
    ``Conflict``): someone changed it after it was read. Read it again and decide again."""


class UntrustedInputError(GICOperatorError):
    """Something a driver or a tenant wrote (a savepoint outcome, a Savepoint's status)
    disagrees with what the operator derived itself; it is refused, never acted on."""


class InvalidSpecError(GICOperatorError):
    """A resource's spec cannot be acted on; the message says what to change."""


class StorageNotAllowedError(InvalidSpecError):
    """A spec names storage or an S3 endpoint the operator's allowlist refuses."""


class SavepointHeldError(GICOperatorError):
    """A Savepoint's files are still needed by a job that restored from it and has not
    released them; its deletion waits."""


class ObjectNotOwnedError(GICOperatorError):
    """An object the operator would create for a job (its driver pod, service, Secret or
    ConfigMap) already exists and is not owned by that job's GICJob (another owner, or
    none): the operator never adopts it; the job waits until it is gone."""
