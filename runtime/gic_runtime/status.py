"""The job status record: what the driver reports to the operator and the CLI.

::

    <root>/jobs/<job_id>/status.json      GICT record, overwritten in place

The driver rewrites the record after every batch and on every state change (a plain
put: readers always see one whole record, never a torn one, because stores publish
objects atomically). It is a report, not a source of truth: checkpoints are what
manifests say, epochs what markers say. A reader that finds ``status.epoch`` below the
job's highest fencing epoch is looking at the report of a superseded driver.

Format: the text envelope of :mod:`gic_runtime.control.envelope` (magic ``GICT``,
version 1, CRC32C of the JSON body). Readers ignore fields they do not know, so a newer
writer may add fields within version 1; missing optional parts read as ``None``.

A launch that fails reports why in ``failure`` (:class:`FailureStatus`, added within
version 1: records without it read as ``failure=None``): a machine ``reason`` from the
closed set :class:`FailureReason` (:func:`failure_reason` maps the runtime's errors onto
it) and the error's text, one line of at most :data:`FAILURE_MESSAGE_MAX` characters.
A reader gets the reason as stored (a newer writer may know more reasons), so whoever
acts on it checks it against the set it knows. The failure belongs to the record's
``epoch``: a reader comparing it with a launch compares epochs first.

Readers read at most :data:`STATUS_MAX_BYTES` (the operator reads the record of every
job on every reconcile, and the driver writing it runs tenant code).

Values are frozen dataclasses (safe to share between threads); their JSON form is
derived from their fields by :mod:`gic_runtime.codec` (:meth:`JobStatus.to_json`,
:meth:`JobStatus.from_json`). :func:`write_status` and :func:`read_status` are stateless.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from gic_runtime import codec
from gic_runtime.checkpoint.manifest import RestoreMode
from gic_runtime.codec import Count, Finite, Flag, Text, json_record
from gic_runtime.control.envelope import decode_record, encode_record
from gic_runtime.control.model import Outcome
from gic_runtime.errors import (
    ConfigurationError,
    CorruptFileError,
    FencedError,
    FormatError,
    GICError,
    ObjectNotFoundError,
    OutputOwnedError,
    QueryMismatchError,
    RestoreError,
    StorageError,
    StoragePermissionError,
    TransientStorageError,
)
from gic_runtime.layout import job_dir
from gic_runtime.storage.base import read_bounded
from gic_runtime.storage.uri import StoreResolver, join

MAGIC = "GICT"
FORMAT_VERSION = 1
SUPPORTED_VERSIONS = frozenset({1})
STATUS_MAX_BYTES = 1024 * 1024
"""Largest status record a reader accepts and a writer writes (real ones are a few KiB:
the driver cuts the error text to 500 characters and a failure's message to
:data:`FAILURE_MESSAGE_MAX`)."""
STATUS_NAME = "status.json"


def status_uri(root: str, job_id: str) -> str:
    return join(job_dir(root, job_id), STATUS_NAME)


class JobState(StrEnum):
    """Lifecycle of one driver launch."""

    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


MAX_RANGES = 32768
"""Most bucket ranges a status record may list (the most buckets a job can have)."""


def _ordered(pair: tuple[int, int]) -> tuple[int, int]:
    if pair[0] >= pair[1]:
        raise ValueError(f"entries must be [start, stop) pairs, got {list(pair)!r}")
    return pair


BucketRange = Annotated[tuple[Count, Count], AfterValidator(_ordered)]
"""Buckets ``[start, stop)``: ``[start, stop]`` in JSON, ``0 <= start < stop``."""


@json_record(
    "checkpoint status",
    required=("bytes_uploaded", "changelog_bytes", "snapshot_bytes", "rows"),
    null_is_default=("executors", "moved_ranges"),
)
@dataclass(frozen=True, slots=True)
class CheckpointStatus:
    """The last completed checkpoint: ``id`` (the batch id), when it was created, how
    long the batch's checkpoint took (ms), bytes uploaded in total and by kind, the
    executor-local state hit ratio (``None`` when no bucket was needed), rows, and
    placement: live executors (0 in local mode) and the bucket ranges ``[start, stop)``
    whose task ran on another executor than in the batch before."""

    id: Count
    created_at: Finite
    duration_ms: Finite
    bytes_uploaded: Count = 0
    changelog_bytes: Count = 0
    snapshot_bytes: Count = 0
    local_hit_ratio: Finite | None = None
    rows: Count = 0
    executors: Count = 0
    moved_ranges: Annotated[tuple[BucketRange, ...], Field(max_length=MAX_RANGES)] = ()


@json_record("restore status", required=("released",))
@dataclass(frozen=True, slots=True)
class RestoreStatus:
    """Where the launch's state came from (a checkpoint or savepoint manifest URI), in
    which mode, and whether the source is released (no-claim: the user may delete it)."""

    source: Text
    mode: RestoreMode
    released: Flag = False
    checkpoint_id: Count | None = None


@json_record(
    "materialization status",
    required=("started", "adopted"),
    null_is_default=("failed", "bytes_uploaded"),
)
@dataclass(frozen=True, slots=True)
class MaterializationStatus:
    """Materialization counters of the launch: started, adopted by a checkpoint, failed,
    and bytes uploaded."""

    started: Count = 0
    adopted: Count = 0
    failed: Count = 0
    bytes_uploaded: Count = 0


@json_record("sweep status")
@dataclass(frozen=True, slots=True)
class SweepStatus:
    """The last orphan sweep: objects deleted, their bytes, and when."""

    deleted: Count
    deleted_bytes: Count
    at: Finite


@json_record("savepoint status")
@dataclass(frozen=True, slots=True)
class SavepointStatus:
    """The last savepoint request the driver finished, successful or not."""

    request_id: Text
    state: Text
    path: Text | None = None
    checkpoint_id: Count | None = None
    size_bytes: Count | None = None
    finished_at: Finite | None = None
    error: Text | None = None

    @classmethod
    def from_outcome(cls, outcome: Outcome) -> SavepointStatus:
        return cls(
            request_id=outcome.request_id,
            state=outcome.state.value,
            path=outcome.path,
            checkpoint_id=outcome.checkpoint_id,
            size_bytes=outcome.size_bytes,
            finished_at=outcome.finished_at,
            error=outcome.error,
        )


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


@json_record("driver info")
@dataclass(frozen=True, slots=True)
class DriverInfo:
    """The driver process: ``pid`` on ``host``."""

    pid: Count
    host: Text

    @classmethod
    def current(cls) -> DriverInfo:
        return cls(pid=os.getpid(), host=socket.gethostname())


@json_record("job status", required=("batches",), null_is_default=("extra",))
@dataclass(frozen=True, slots=True)
class JobStatus:
    """One report of a driver launch (see the module docstring). Times are seconds
    since the Unix epoch; ``batches`` counts batches this launch completed."""

    job_id: Text
    epoch: Count
    state: JobState
    updated_at: Finite
    started_at: Finite
    batches: Count = 0
    last_checkpoint: CheckpointStatus | None = None
    restored_from: RestoreStatus | None = None
    materialization: MaterializationStatus | None = None
    last_sweep: SweepStatus | None = None
    last_savepoint: SavepointStatus | None = None
    error: Text | None = None
    driver: DriverInfo | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Free-form JSON for details without a field of their own."""
    failure: FailureStatus | None = None
    """Why the launch failed (state ``failed``; ``None`` in records that predate it)."""

    def __post_init__(self) -> None:
        if self.epoch < 0 or self.batches < 0:
            raise ConfigurationError(
                f"status of job {self.job_id!r}: epoch ({self.epoch}) and batches "
                f"({self.batches}) must not be negative"
            )

    def replace(self, **changes: Any) -> JobStatus:
        """A copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """The record's JSON body (see the module docstring)."""
        return codec.to_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobStatus:
        """The status a JSON body holds; :class:`~gic_runtime.codec.RecordError` names a
        missing or invalid field."""
        return codec.from_json(cls, data)


def encode_status(status: JobStatus) -> bytes:
    return encode_record(
        MAGIC, FORMAT_VERSION, status.to_json(), what=f"status of job {status.job_id}"
    )


def decode_status(data: bytes, uri: str) -> JobStatus:
    """Parse a stored status record; errors name ``uri``."""
    _, body = decode_record(data, MAGIC, SUPPORTED_VERSIONS, what="GIC job status", uri=uri)
    return codec.from_stored_json(JobStatus, body, uri=uri)


def write_status(resolver: StoreResolver, root: str, job_id: str, status: JobStatus) -> None:
    """Publish ``status`` as the job's status record (replacing the previous one).

    Refuses (:class:`ConfigurationError`) a record over :data:`STATUS_MAX_BYTES`, which
    no reader would accept.
    """
    if status.job_id != job_id:
        raise ConfigurationError(
            f"status of job {status.job_id!r} cannot be written as the status of job "
            f"{job_id!r}; pass the job id the status belongs to"
        )
    data = encode_status(status)
    if len(data) > STATUS_MAX_BYTES:
        raise ConfigurationError(
            f"status record of job {job_id!r} would be {len(data)} bytes, more than the "
            f"{STATUS_MAX_BYTES} readers accept; keep error texts and extra fields short"
        )
    uri = status_uri(root, job_id)
    store, key = resolver.resolve(uri)
    store.put(key, data)


def read_status(resolver: StoreResolver, root: str, job_id: str) -> JobStatus | None:
    """The job's status record, or ``None`` when no driver has written one yet.

    At most :data:`STATUS_MAX_BYTES` are read: a larger file raises
    :class:`~gic_runtime.errors.ObjectTooLargeError` (a ``CorruptFileError``) before it
    is downloaded, so a reader's memory stays bounded whatever the driver wrote.
    """
    uri = status_uri(root, job_id)
    store, key = resolver.resolve(uri)
    try:
        data = read_bounded(store, key, STATUS_MAX_BYTES, what="job status record")
    except ObjectNotFoundError:
        return None
    status = decode_status(data, uri)
    if status.job_id != job_id:
        raise CorruptFileError(
            f"status record of job {job_id!r} holds the status of job {status.job_id!r}; "
            "a driver wrote to the wrong job directory: check its storage and job id settings",
            uri=uri,
        )
    return status
