"""Why a launch failed, as its status record says: :class:`FailureStatus`, a machine
``reason`` from the closed set :class:`FailureReason` (:func:`failure_reason` maps the
runtime's errors onto it) and the error's text, one line of at most
:data:`FAILURE_MESSAGE_MAX` characters.

Invariants: every error maps to exactly one reason (the first matching class, else
``JobError``); building a failure never raises, whatever the error's ``__str__`` does.
A reader gets the reason as stored (a newer writer may know more reasons), so whoever
acts on it checks it against the set it knows. Values are frozen; functions stateless.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gic_runtime.codec import Text, json_record
from gic_runtime.errors import (
    ConfigurationError,
    FencedError,
    FormatError,
    GICError,
    OutputOwnedError,
    QueryMismatchError,
    RestoreError,
    StorageError,
    StoragePermissionError,
    TransientStorageError,
)

__all__ = [
    "ERROR_TYPE_MAX",
    "FAILURE_MESSAGE_MAX",
    "FailureReason",
    "FailureStatus",
    "error_text",
    "failure_message",
    "failure_reason",
    "one_line",
]

FAILURE_MESSAGE_MAX = 2048
"""Longest failure message a driver records (characters; longer ones are cut, ending in
``...``). Room for a query-mismatch refusal, whose way out comes last."""
ERROR_TYPE_MAX = 200
"""Longest exception class name recorded with a failure."""


class FailureReason(StrEnum):
    """Why a launch failed, for machines: the closed set a driver writes.

    ``QueryMismatch``, ``InvalidSettings`` and ``OutputOwned`` are refusals a relaunch
    of the same configuration meets again; the others may pass on a relaunch.
    """

    QUERY_MISMATCH = "QueryMismatch"
    """The job's checkpoints were written by a different query (``QueryMismatchError``)."""
    OUTPUT_OWNED = "OutputOwned"
    """The job's output path belongs to another job (``OutputOwnedError``)."""
    INVALID_SETTINGS = "InvalidSettings"
    """Settings or arguments are invalid (``ConfigurationError``), including a bucket
    count other than the restored state's (``BucketCountMismatchError``)."""
    RESTORE_FAILED = "RestoreFailed"
    """A checkpoint or savepoint cannot be restored (``RestoreError``)."""
    UNREADABLE_FILE = "UnreadableFile"
    """A stored file is damaged, too large or of an unknown version (``FormatError``)."""
    STORAGE_ACCESS_DENIED = "StorageAccessDenied"
    """Credentials are missing or refused (``StoragePermissionError``)."""
    STORAGE_UNAVAILABLE = "StorageUnavailable"
    """The storage timed out or failed transiently (``TransientStorageError``)."""
    STORAGE_ERROR = "StorageError"
    """Any other storage error, e.g. a missing bucket (``StorageError``)."""
    FENCED = "Fenced"
    """A newer launch of the job holds a higher fencing epoch (``FencedError``)."""
    JOB_ERROR = "JobError"
    """Any other error: the job's own code, Spark, or another runtime error."""


#: ``(error class, reason)``, the first match wins.
_FAILURE_REASONS: tuple[tuple[type[BaseException], FailureReason], ...] = (
    (QueryMismatchError, FailureReason.QUERY_MISMATCH),
    (OutputOwnedError, FailureReason.OUTPUT_OWNED),
    (ConfigurationError, FailureReason.INVALID_SETTINGS),
    (StoragePermissionError, FailureReason.STORAGE_ACCESS_DENIED),
    (TransientStorageError, FailureReason.STORAGE_UNAVAILABLE),
    (StorageError, FailureReason.STORAGE_ERROR),
    (FormatError, FailureReason.UNREADABLE_FILE),
    (RestoreError, FailureReason.RESTORE_FAILED),
    (FencedError, FailureReason.FENCED),
)


def failure_reason(error: BaseException) -> FailureReason:
    """The :class:`FailureReason` of ``error``."""
    for cls, reason in _FAILURE_REASONS:
        if isinstance(error, cls):
            return reason
    return FailureReason.JOB_ERROR


def one_line(text: str, limit: int) -> str:
    """``text`` with every run of whitespace made one space, cut to ``limit`` characters
    (ending in ``...`` when cut)."""
    line = " ".join(text[: limit * 4].split())
    if len(line) <= limit and len(text) <= limit * 4:
        return line
    return line[: limit - 3].rstrip() + "..."


def error_text(error: BaseException) -> str:
    """``str(error)``, stripped; ``""`` when the error cannot say (its ``__str__``
    fails): reporting a failure must not raise another."""
    try:
        return str(error).strip()
    except Exception:
        return ""


def failure_message(error: BaseException) -> str:
    """The text recorded for ``error``: a runtime error's own message (it says what to
    change), anything else prefixed with its class name; one line, bounded."""
    text = error_text(error)
    if not isinstance(error, GICError) or not text:
        name = type(error).__name__
        text = f"{name}: {text}" if text else name
    return one_line(text, FAILURE_MESSAGE_MAX)


@json_record("failure status", null_is_default=("error_type",))
@dataclass(frozen=True, slots=True)
class FailureStatus:
    """Why the launch failed: ``reason`` (a :class:`FailureReason` value when this
    runtime wrote it), ``message`` (the error's text) and ``error_type`` (the exception's
    class name)."""

    reason: Text
    message: Text
    error_type: Text = ""

    @classmethod
    def of(cls, error: BaseException) -> FailureStatus:
        """The failure ``error`` means (reason, bounded one-line message, class name)."""
        return cls(
            reason=failure_reason(error).value,
            message=failure_message(error),
            error_type=type(error).__name__[:ERROR_TYPE_MAX],
        )
