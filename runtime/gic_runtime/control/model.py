"""Control requests and their outcomes: values and their stored formats.

A *request* asks the running driver of a job to do something: take a savepoint
(:class:`SavepointRequest`, intermediate or terminal) or stop without one
(:class:`StopRequest`). An *outcome* (:class:`Outcome`) records how a request ended.
Both are immutable values stored write-once (see :mod:`gic_runtime.control.channel`):

* request ``<job>/control/requests/<request_id>.req``: record ``GICR`` version 2 (a
  request may carry ``mac``, its authentication for the job, :mod:`gic_runtime.control.auth`;
  version 1, written before requests were authenticated, is still read and has none);
* outcome ``<job>/control/outcomes/<request_id>.out``: record ``GICO`` version 1;

each in the text envelope of :mod:`gic_runtime.control.envelope` (header line with the
CRC32C of the JSON body). The body is the value's fields (:mod:`gic_runtime.codec`); a
request's also names its ``type`` (:class:`RequestType`), which says which kind a reader
builds. Invariants checked on construction: request ids are valid ids
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

from gic_runtime import codec
from gic_runtime.checkpoint.manifest import SavepointFormat, SavepointType
from gic_runtime.codec import Count, Finite, Text, json_record
from gic_runtime.control.envelope import decode_record, encode_record
from gic_runtime.errors import ConfigurationError, CorruptFileError
from gic_runtime.layout import validate_id

REQUEST_MAGIC = "GICR"
OUTCOME_MAGIC = "GICO"
#: Version of the requests written by this runtime (2: with ``mac``).
REQUEST_VERSION = 2
REQUEST_VERSIONS = frozenset({1, 2})
#: Version of the outcomes written by this runtime.
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


@json_record("control request", computed=("type",))
@dataclass(frozen=True, slots=True)
class SavepointRequest:
    """Take a savepoint of ``format`` into directory ``target`` (a URI). ``kind``
    terminal stops the job after the savepoint completes (stop-with-savepoint). ``mac``
    authenticates it for the job (:mod:`gic_runtime.control.auth`)."""

    request_id: Text
    kind: SavepointType
    format: SavepointFormat
    target: Text
    requested_at: Finite
    requested_by: Text
    mac: Text | None = None

    @property
    def type(self) -> RequestType:
        return RequestType.SAVEPOINT

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


@json_record("control request", computed=("type",))
@dataclass(frozen=True, slots=True)
class StopRequest:
    """Stop the job at the next batch boundary, without a savepoint (the last completed
    checkpoint is where a relaunch resumes). ``mac`` as for :class:`SavepointRequest`."""

    request_id: Text
    requested_at: Finite
    requested_by: Text
    mac: Text | None = None

    @property
    def type(self) -> RequestType:
        return RequestType.STOP

    def __post_init__(self) -> None:
        validate_id("request id", self.request_id)

    def same_intent(self, other: ControlRequest) -> bool:
        """Whether ``other`` asks for the same thing (who asked and when aside)."""
        return isinstance(other, StopRequest) and other.request_id == self.request_id


ControlRequest = SavepointRequest | StopRequest
_REQUEST_CLASSES: dict[str, type[ControlRequest]] = {
    RequestType.SAVEPOINT.value: SavepointRequest,
    RequestType.STOP.value: StopRequest,
}


@json_record("control outcome", required=("finished_at",))
@dataclass(frozen=True, slots=True)
class Outcome:
    """How request ``request_id`` ended.

    For a savepoint: ``path`` is the savepoint directory URI, ``checkpoint_id`` the
    batch it captures, ``size_bytes`` and ``files`` what it holds. ``error`` is set
    exactly when ``state`` is failed. Times are seconds since the Unix epoch.
    """

    request_id: Text
    state: OutcomeState
    path: Text | None = None
    checkpoint_id: Count | None = None
    size_bytes: Count | None = None
    files: Count | None = None
    started_at: Finite | None = None
    finished_at: Finite = field(default_factory=time.time)
    error: Text | None = None

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


def encode_request(request: ControlRequest) -> bytes:
    return encode_record(
        REQUEST_MAGIC,
        REQUEST_VERSION,
        codec.to_json(request),
        what=f"request {request.request_id}",
    )


def decode_request(data: bytes, uri: str) -> ControlRequest:
    """Parse a stored request; errors name ``uri``."""
    _, body = decode_record(
        data, REQUEST_MAGIC, REQUEST_VERSIONS, what="GIC control request", uri=uri
    )

    kind = body.get("type")
    cls = _REQUEST_CLASSES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        problem = (
            "is missing field 'type'"
            if "type" not in body
            else f"has an invalid field: type must be one of {sorted(_REQUEST_CLASSES)}, "
            f"got {kind!r:.40}"
        )
        raise CorruptFileError(f"control request {problem}", uri=uri)
    request = codec.from_stored_json(cls, body, uri=uri)
    _check_named(request.request_id, uri, ".req")
    return request


def encode_outcome(outcome: Outcome) -> bytes:
    return encode_record(
        OUTCOME_MAGIC, FORMAT_VERSION, codec.to_json(outcome), what=f"outcome {outcome.request_id}"
    )


def decode_outcome(data: bytes, uri: str) -> Outcome:
    """Parse a stored outcome; errors name ``uri``."""
    _, body = decode_record(
        data, OUTCOME_MAGIC, SUPPORTED_VERSIONS, what="GIC control outcome", uri=uri
    )

    outcome = codec.from_stored_json(Outcome, body, uri=uri)
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
