"""Control requests and their outcomes: values and their stored formats.

A *request* asks the running driver of a job to do something: take a savepoint
(:class:`SavepointRequest`, intermediate or terminal) or stop without one
(:class:`StopRequest`). An *outcome* (:class:`Outcome`) records how a request ended.
Both are immutable values stored write-once (see :mod:`gic_runtime.control.channel`):

* request ``<job>/control/requests/<request_id>.req``: record ``GICR`` version 1;
* outcome ``<job>/control/outcomes/<request_id>.out``: record ``GICO`` version 1;

each in the text envelope of :mod:`gic_runtime.control.envelope` (header line with the
CRC32C of the JSON body). Invariants checked on construction: request ids are valid ids
(:func:`gic_runtime.layout.validate_id`); a failed outcome carries an error message and
a completed one none; sizes and counts are not negative.

Values are frozen dataclasses, safe to share between threads.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from gic_runtime.checkpoint.manifest import SavepointFormat, SavepointType
from gic_runtime.control.envelope import (
    decode_record,
    encode_record,
    field_float,
    field_opt_float,
    field_opt_int,
    field_opt_str,
    field_str,
    parse_body,
)
from gic_runtime.errors import ConfigurationError, CorruptFileError
from gic_runtime.layout import validate_id

REQUEST_MAGIC = "GICR"
OUTCOME_MAGIC = "GICO"
#: Version of both record kinds written by this runtime.
FORMAT_VERSION = 1
SUPPORTED_VERSIONS = frozenset({1})
MAX_ERROR_CHARS = 8000
""":meth:`Outcome.failed` keeps at most this many characters of an error text, so an
outcome stays far below the channel's record limit."""


class RequestType(StrEnum):
    """What a control request asks for."""

    SAVEPOINT = "savepoint"
    STOP = "stop"


class OutcomeState(StrEnum):
    """How a request ended."""

    COMPLETED = "completed"
    FAILED = "failed"


def parse_savepoint_type(value: str | SavepointType) -> SavepointType:
    """``intermediate`` or ``terminal`` (case-insensitive); ``stop`` means terminal
    (stop-with-savepoint)."""
    if isinstance(value, SavepointType):
        return value
    text = value.strip().lower()
    if text == "stop":
        return SavepointType.TERMINAL
    try:
        return SavepointType(text)
    except ValueError:
        raise ConfigurationError(
            f"unknown savepoint kind {value!r}: use 'intermediate' (the job keeps running) "
            "or 'terminal' / 'stop' (stop the job with a savepoint)"
        ) from None


def parse_savepoint_format(value: str | SavepointFormat) -> SavepointFormat:
    """``native`` or ``canonical`` (case-insensitive)."""
    if isinstance(value, SavepointFormat):
        return value
    try:
        return SavepointFormat(value.strip().lower())
    except ValueError:
        raise ConfigurationError(
            f"unknown savepoint format {value!r}: use 'native' (the checkpoint's own files, "
            "fastest) or 'canonical' (a portable per-bucket export)"
        ) from None


def new_request_id(prefix: str, now: float | None = None) -> str:
    """``<prefix>-<UTC yyyymmddhhmmss>-<6 hex>``: sortable by time, unique in practice."""
    stamp = datetime.fromtimestamp(time.time() if now is None else now, UTC)
    return f"{prefix}-{stamp.strftime('%Y%m%d%H%M%S')}-{secrets.token_hex(3)}"


@dataclass(frozen=True, slots=True)
class SavepointRequest:
    """Take a savepoint of ``format`` into directory ``target`` (a URI). ``kind``
    terminal stops the job after the savepoint completes (stop-with-savepoint)."""

    request_id: str
    kind: SavepointType
    format: SavepointFormat
    target: str
    requested_at: float
    requested_by: str

    def __post_init__(self) -> None:
        validate_id("request id", self.request_id)

    def same_intent(self, other: ControlRequest) -> bool:
        """Whether ``other`` asks for the same thing (who asked and when aside)."""
        return isinstance(other, SavepointRequest) and (
            other.request_id,
            other.kind,
            other.format,
            other.target,
        ) == (self.request_id, self.kind, self.format, self.target)

    def to_json(self) -> dict[str, Any]:
        return {
            "type": RequestType.SAVEPOINT.value,
            "request_id": self.request_id,
            "kind": self.kind.value,
            "format": self.format.value,
            "target": self.target,
            "requested_at": self.requested_at,
            "requested_by": self.requested_by,
        }


@dataclass(frozen=True, slots=True)
class StopRequest:
    """Stop the job at the next batch boundary, without a savepoint (the last completed
    checkpoint is where a relaunch resumes)."""

    request_id: str
    requested_at: float
    requested_by: str

    def __post_init__(self) -> None:
        validate_id("request id", self.request_id)

    def same_intent(self, other: ControlRequest) -> bool:
        """Whether ``other`` asks for the same thing (who asked and when aside)."""
        return isinstance(other, StopRequest) and other.request_id == self.request_id

    def to_json(self) -> dict[str, Any]:
        return {
            "type": RequestType.STOP.value,
            "request_id": self.request_id,
            "requested_at": self.requested_at,
            "requested_by": self.requested_by,
        }


ControlRequest = SavepointRequest | StopRequest


@dataclass(frozen=True, slots=True)
class Outcome:
    """How request ``request_id`` ended.

    For a savepoint: ``path`` is the savepoint directory URI, ``checkpoint_id`` the
    batch it captures, ``size_bytes`` and ``files`` what it holds. ``error`` is set
    exactly when ``state`` is failed. Times are seconds since the Unix epoch.
    """

    request_id: str
    state: OutcomeState
    path: str | None = None
    checkpoint_id: int | None = None
    size_bytes: int | None = None
    files: int | None = None
    started_at: float | None = None
    finished_at: float = field(default_factory=time.time)
    error: str | None = None

    def __post_init__(self) -> None:
        validate_id("request id", self.request_id)
        if self.state is OutcomeState.FAILED and not self.error:
            raise ConfigurationError(
                f"failed outcome of request {self.request_id} needs an error message saying why"
            )
        if self.state is OutcomeState.COMPLETED and self.error is not None:
            raise ConfigurationError(
                f"completed outcome of request {self.request_id} carries an error "
                f"({self.error!r}); record it as failed instead"
            )
        for name in ("checkpoint_id", "size_bytes", "files"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigurationError(
                    f"outcome of request {self.request_id}: {name} must not be negative, "
                    f"got {value}"
                )

    @property
    def succeeded(self) -> bool:
        return self.state is OutcomeState.COMPLETED

    @classmethod
    def completed(cls, request_id: str, **details: Any) -> Outcome:
        """A completed outcome; ``details`` are the other fields."""
        return cls(request_id=request_id, state=OutcomeState.COMPLETED, **details)

    @classmethod
    def failed(cls, request_id: str, error: str, **details: Any) -> Outcome:
        """A failed outcome with ``error`` saying why (cut to :data:`MAX_ERROR_CHARS`);
        ``details`` are the other fields."""
        if len(error) > MAX_ERROR_CHARS:
            error = error[: MAX_ERROR_CHARS - 15] + " [... cut off]"
        return cls(request_id=request_id, state=OutcomeState.FAILED, error=error, **details)

    def to_json(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "state": self.state.value,
            "path": self.path,
            "checkpoint_id": self.checkpoint_id,
            "size_bytes": self.size_bytes,
            "files": self.files,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "error": self.error,
        }


def encode_request(request: ControlRequest) -> bytes:
    return encode_record(
        REQUEST_MAGIC, FORMAT_VERSION, request.to_json(), what=f"request {request.request_id}"
    )


def decode_request(data: bytes, uri: str) -> ControlRequest:
    """Parse a stored request; errors name ``uri``."""
    _, body = decode_record(
        data, REQUEST_MAGIC, SUPPORTED_VERSIONS, what="GIC control request", uri=uri
    )

    def build() -> ControlRequest:
        kind = RequestType(field_str(body, "type"))
        if kind is RequestType.STOP:
            return StopRequest(
                request_id=field_str(body, "request_id"),
                requested_at=field_float(body, "requested_at"),
                requested_by=field_str(body, "requested_by"),
            )
        return SavepointRequest(
            request_id=field_str(body, "request_id"),
            kind=SavepointType(field_str(body, "kind")),
            format=SavepointFormat(field_str(body, "format")),
            target=field_str(body, "target"),
            requested_at=field_float(body, "requested_at"),
            requested_by=field_str(body, "requested_by"),
        )

    request = parse_body(build, what="control request", uri=uri)
    _check_named(request.request_id, uri, ".req")
    return request


def encode_outcome(outcome: Outcome) -> bytes:
    return encode_record(
        OUTCOME_MAGIC, FORMAT_VERSION, outcome.to_json(), what=f"outcome {outcome.request_id}"
    )


def decode_outcome(data: bytes, uri: str) -> Outcome:
    """Parse a stored outcome; errors name ``uri``."""
    _, body = decode_record(
        data, OUTCOME_MAGIC, SUPPORTED_VERSIONS, what="GIC control outcome", uri=uri
    )

    def build() -> Outcome:
        return Outcome(
            request_id=field_str(body, "request_id"),
            state=OutcomeState(field_str(body, "state")),
            path=field_opt_str(body, "path"),
            checkpoint_id=field_opt_int(body, "checkpoint_id"),
            size_bytes=field_opt_int(body, "size_bytes"),
            files=field_opt_int(body, "files"),
            started_at=field_opt_float(body, "started_at"),
            finished_at=field_float(body, "finished_at"),
            error=field_opt_str(body, "error"),
        )

    outcome = parse_body(build, what="control outcome", uri=uri)
    _check_named(outcome.request_id, uri, ".out")
    return outcome


def _check_named(request_id: str, uri: str, suffix: str) -> None:
    name = uri.rsplit("/", 1)[-1]
    if name != f"{request_id}{suffix}":
        raise CorruptFileError(
            f"file is named {name!r} but holds request {request_id!r}; "
            "control files are never renamed: move it away",
            uri=uri,
        )


__all__ = [
    "FORMAT_VERSION",
    "ControlRequest",
    "Outcome",
    "OutcomeState",
    "RequestType",
    "SavepointRequest",
    "StopRequest",
    "decode_outcome",
    "decode_request",
    "encode_outcome",
    "encode_request",
    "new_request_id",
    "parse_savepoint_format",
    "parse_savepoint_type",
]
