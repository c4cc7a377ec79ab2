"""The operator's exception tree.

Every error the operator raises on purpose derives from :class:`GICOperatorError`.
Errors of the Kubernetes client are translated at the API seam (:mod:`gic_operator.kube`,
``raise ... from exc``) into :class:`KubeError`, and those worth retrying soon (HTTP 429,
5xx, connection failures, timeouts) into :class:`TransientKubeError`, so reconcilers
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


class InvalidSpecError(GICOperatorError):
    """A resource's spec cannot be acted on; the message says what to change."""
