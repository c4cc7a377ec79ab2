"""Kubernetes API errors as the emulator reports them: ``Status`` objects with a code.

An :class:`ApiError` carries the HTTP code, the machine-readable reason (``NotFound``,
``AlreadyExists``, ``Conflict``, ``Invalid``, ``BadRequest``, ``Gone``, ...) and a message,
and renders itself as the ``kind: Status`` body a real API server sends, so clients map
it to their own exception types.

Thread-safety: instances are immutable after construction.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A failed API request, rendered as a Kubernetes ``Status``."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        kind: str = "",
        name: str = "",
        group: str = "",
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details: dict[str, Any] = {}
        if name:
            self.details["name"] = name
        if kind:
            self.details["kind"] = kind
        if group:
            self.details["group"] = group

    def status(self) -> dict[str, Any]:
        """The ``Status`` body of this error."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = dict(self.details)
        return body


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    """404: the named object does not exist."""
    return ApiError(
        404, "NotFound", f'{resource} "{name}" not found', kind=resource, name=name, group=group
    )


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    """409: an object with that name exists already."""
    message = f'{resource} "{name}" already exists'
    return ApiError(409, "AlreadyExists", message, kind=resource, name=name, group=group)


def conflict(resource: str, name: str, why: str) -> ApiError:
    """409: an optimistic-concurrency precondition failed."""
    message = f'Operation cannot be fulfilled on {resource} "{name}": {why}'
    return ApiError(409, "Conflict", message, kind=resource, name=name)


def invalid(resource: str, name: str, why: str) -> ApiError:
    """422: the object or the patch is not acceptable."""
    return ApiError(422, "Invalid", f'{resource} "{name}" is invalid: {why}', kind=resource)


def bad_request(message: str) -> ApiError:
    """400: the request itself is malformed."""
    return ApiError(400, "BadRequest", message)
