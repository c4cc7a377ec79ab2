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

Values are frozen dataclasses (safe to share between threads); nested parts have
``to_json`` / ``from_json``. :func:`write_status` and :func:`read_status` are stateless.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from gic_runtime.checkpoint.manifest import RestoreMode
from gic_runtime.control.envelope import (
    decode_record,
    encode_record,
    field_bool,
    field_float,
    field_int,
    field_object,
    field_opt_float,
    field_opt_int,
    field_opt_str,
    field_str,
    parse_body,
)
from gic_runtime.control.model import Outcome
from gic_runtime.errors import (
    ConfigurationError,
    CorruptFileError,
    FencedError,
    FormatError,
    GICError,
    ObjectNotFoundError,
    QueryMismatchError,
    RestoreError,
    StorageError,
    StoragePermissionError,
    TransientStorageError,
)
from gic_runtime.layout import job_dir
from gic_runtime.storage.base import read_bounded
from gic_runtime.storage.uri import StoreResolver, join

_T = TypeVar("_T")

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


@dataclass(frozen=True, slots=True)
class CheckpointStatus:
    """The last completed checkpoint: ``id`` (the batch id), when it was created, how
    long the batch's checkpoint took (ms), bytes uploaded in total and by kind, the
    executor-local state hit ratio (``None`` when no bucket was needed), rows, and
    placement: live executors (0 in local mode) and the bucket ranges ``[start, stop)``
    whose task ran on another executor than in the batch before."""

    id: int
    created_at: float
    duration_ms: float
    bytes_uploaded: int = 0
    changelog_bytes: int = 0
    snapshot_bytes: int = 0
    local_hit_ratio: float | None = None
    rows: int = 0
    executors: int = 0
    moved_ranges: tuple[tuple[int, int], ...] = ()

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["moved_ranges"] = [list(r) for r in self.moved_ranges]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CheckpointStatus:
        return cls(
            id=field_int(data, "id"),
            created_at=field_float(data, "created_at"),
            duration_ms=field_float(data, "duration_ms"),
            bytes_uploaded=field_int(data, "bytes_uploaded"),
            changelog_bytes=field_int(data, "changelog_bytes"),
            snapshot_bytes=field_int(data, "snapshot_bytes"),
            local_hit_ratio=field_opt_float(data, "local_hit_ratio"),
            rows=field_int(data, "rows"),
            executors=field_opt_int(data, "executors") or 0,
            moved_ranges=_ranges(data.get("moved_ranges")),
        )


MAX_RANGES = 32768
"""Most bucket ranges a status record may list (the most buckets a job can have)."""


def _ranges(value: object) -> tuple[tuple[int, int], ...]:
    """``[[start, stop], ...]`` (absent: none); anything else is a ValueError."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_RANGES:
        raise ValueError(f"moved_ranges must be a list of at most {MAX_RANGES} pairs")
    out: list[tuple[int, int]] = []
    for item in value:
        if not (
            isinstance(item, list)
            and len(item) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) for x in item)
            and 0 <= item[0] < item[1]
        ):
            raise ValueError(f"moved_ranges entries must be [start, stop) pairs, got {item!r}")
        out.append((item[0], item[1]))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class RestoreStatus:
    """Where the launch's state came from (a checkpoint or savepoint manifest URI), in
    which mode, and whether the source is released (no-claim: the user may delete it)."""

    source: str
    mode: RestoreMode
    released: bool = False
    checkpoint_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "mode": self.mode.value,
            "released": self.released,
            "checkpoint_id": self.checkpoint_id,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RestoreStatus:
        return cls(
            source=field_str(data, "source"),
            mode=RestoreMode(field_str(data, "mode")),
            released=field_bool(data, "released"),
            checkpoint_id=field_opt_int(data, "checkpoint_id"),
        )


@dataclass(frozen=True, slots=True)
class MaterializationStatus:
    """Materialization counters of the launch: started, adopted by a checkpoint, failed,
    and bytes uploaded."""

    started: int = 0
    adopted: int = 0
    failed: int = 0
    bytes_uploaded: int = 0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MaterializationStatus:
        return cls(
            started=field_int(data, "started"),
            adopted=field_int(data, "adopted"),
            failed=field_opt_int(data, "failed") or 0,
            bytes_uploaded=field_opt_int(data, "bytes_uploaded") or 0,
        )


@dataclass(frozen=True, slots=True)
class SweepStatus:
    """The last orphan sweep: objects deleted, their bytes, and when."""

    deleted: int
    deleted_bytes: int
    at: float

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SweepStatus:
        return cls(
            deleted=field_int(data, "deleted"),
            deleted_bytes=field_int(data, "deleted_bytes"),
            at=field_float(data, "at"),
        )


@dataclass(frozen=True, slots=True)
class SavepointStatus:
    """The last savepoint request the driver finished, successful or not."""

    request_id: str
    state: str
    path: str | None = None
    checkpoint_id: int | None = None
    size_bytes: int | None = None
    finished_at: float | None = None
    error: str | None = None

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

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SavepointStatus:
        return cls(
            request_id=field_str(data, "request_id"),
            state=field_str(data, "state"),
            path=field_opt_str(data, "path"),
            checkpoint_id=field_opt_int(data, "checkpoint_id"),
            size_bytes=field_opt_int(data, "size_bytes"),
            finished_at=field_opt_float(data, "finished_at"),
            error=field_opt_str(data, "error"),
        )


FAILURE_MESSAGE_MAX = 2048
"""Longest failure message a driver records (characters; longer ones are cut, ending in
``...``). Room for a query-mismatch refusal, whose way out comes last."""
ERROR_TYPE_MAX = 200
"""Longest exception class name recorded with a failure."""


class FailureReason(StrEnum):
    """Why a launch failed, for machines: the closed set a driver writes.

    ``QueryMismatch`` and ``InvalidSettings`` are refusals a relaunch of the same
    configuration meets again; the others may pass on a relaunch.
    """

    QUERY_MISMATCH = "QueryMismatch"
    """The job's checkpoints were written by a different query (``QueryMismatchError``)."""
    INVALID_SETTINGS = "InvalidSettings"
    """Settings or arguments are invalid (``ConfigurationError``)."""
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


@dataclass(frozen=True, slots=True)
class FailureStatus:
    """Why the launch failed: ``reason`` (a :class:`FailureReason` value when this
    runtime wrote it), ``message`` (the error's text) and ``error_type`` (the exception's
    class name)."""

    reason: str
    message: str
    error_type: str = ""

    @classmethod
    def of(cls, error: BaseException) -> FailureStatus:
        """The failure ``error`` means (reason, bounded one-line message, class name)."""
        return cls(
            reason=failure_reason(error).value,
            message=failure_message(error),
            error_type=type(error).__name__[:ERROR_TYPE_MAX],
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FailureStatus:
        return cls(
            reason=field_str(data, "reason"),
            message=field_str(data, "message"),
            error_type=field_opt_str(data, "error_type") or "",
        )


@dataclass(frozen=True, slots=True)
class DriverInfo:
    """The driver process: ``pid`` on ``host``."""

    pid: int
    host: str

    @classmethod
    def current(cls) -> DriverInfo:
        return cls(pid=os.getpid(), host=socket.gethostname())

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DriverInfo:
        return cls(pid=field_int(data, "pid"), host=field_str(data, "host"))


@dataclass(frozen=True, slots=True)
class JobStatus:
    """One report of a driver launch (see the module docstring). Times are seconds
    since the Unix epoch; ``batches`` counts batches this launch completed."""

    job_id: str
    epoch: int
    state: JobState
    updated_at: float
    started_at: float
    batches: int = 0
    last_checkpoint: CheckpointStatus | None = None
    restored_from: RestoreStatus | None = None
    materialization: MaterializationStatus | None = None
    last_sweep: SweepStatus | None = None
    last_savepoint: SavepointStatus | None = None
    error: str | None = None
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
        parts = ("last_checkpoint", "restored_from", "materialization", "last_sweep")
        body: dict[str, Any] = {
            "job_id": self.job_id,
            "epoch": self.epoch,
            "state": self.state.value,
            "updated_at": self.updated_at,
            "started_at": self.started_at,
            "batches": self.batches,
            "error": self.error,
            "extra": dict(self.extra),
        }
        for name in (*parts, "last_savepoint", "driver", "failure"):
            value = getattr(self, name)
            body[name] = value.to_json() if value is not None else None
        return body

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobStatus:
        def part(name: str, parse: Callable[[Mapping[str, Any]], _T]) -> _T | None:
            obj = field_object(data, name)
            return parse(obj) if obj is not None else None

        return cls(
            job_id=field_str(data, "job_id"),
            epoch=field_int(data, "epoch"),
            state=JobState(field_str(data, "state")),
            updated_at=field_float(data, "updated_at"),
            started_at=field_float(data, "started_at"),
            batches=field_int(data, "batches"),
            last_checkpoint=part("last_checkpoint", CheckpointStatus.from_json),
            restored_from=part("restored_from", RestoreStatus.from_json),
            materialization=part("materialization", MaterializationStatus.from_json),
            last_sweep=part("last_sweep", SweepStatus.from_json),
            last_savepoint=part("last_savepoint", SavepointStatus.from_json),
            error=field_opt_str(data, "error"),
            driver=part("driver", DriverInfo.from_json),
            extra=field_object(data, "extra") or {},
            failure=part("failure", FailureStatus.from_json),
        )


def encode_status(status: JobStatus) -> bytes:
    return encode_record(
        MAGIC, FORMAT_VERSION, status.to_json(), what=f"status of job {status.job_id}"
    )


def decode_status(data: bytes, uri: str) -> JobStatus:
    """Parse a stored status record; errors name ``uri``."""
    _, body = decode_record(data, MAGIC, SUPPORTED_VERSIONS, what="GIC job status", uri=uri)
    return parse_body(lambda: JobStatus.from_json(body), what="job status", uri=uri)


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
