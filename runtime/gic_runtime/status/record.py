"""The job status record's values: what the driver reports to the operator and the CLI.

:class:`JobStatus` is one report of a driver launch; the driver rewrites it after every
batch and on every state change. It is a report, not a source of truth: checkpoints are
what manifests say, epochs what markers say. A reader that finds ``status.epoch`` below
the job's highest fencing epoch is looking at the report of a superseded driver.

Its JSON body (the stored file is :mod:`gic_runtime.status.record_file`): readers ignore
fields they do not know, so a newer writer may add fields within version 1; missing
optional parts read as ``None``. A launch that fails reports why in ``failure``
(:class:`~gic_runtime.status.failures.FailureStatus`, added within version 1: records
without it read as ``failure=None``); the failure belongs to the record's ``epoch``: a
reader comparing it with a launch compares epochs first.

Values are frozen dataclasses (safe to share between threads); their JSON form is
derived from their fields by :mod:`gic_runtime.codec` (:meth:`JobStatus.to_json`,
:meth:`JobStatus.from_json`).
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
from gic_runtime.codec import Count, Finite, Flag, Int, Text, json_record
from gic_runtime.control.model import Outcome
from gic_runtime.errors import ConfigurationError
from gic_runtime.status.failures import FailureStatus

__all__ = [
    "MAX_RANGES",
    "BucketRange",
    "CheckpointStatus",
    "DriverInfo",
    "JobState",
    "JobStatus",
    "MaterializationStatus",
    "RestoreStatus",
    "SavepointStatus",
    "SweepStatus",
]


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
    whose task ran on another executor than in the batch before; with event time, the
    watermark the checkpoint records (microseconds since the epoch) and the batch's late
    rows; the timers that fired in the batch and the state entries that expired; the
    background restore after a restart: buckets still restoring when the batch's tasks
    acked and stored bytes of buckets completed during the batch."""

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
    watermark_us: Int | None = None
    late_rows: Count = 0
    timers_fired: Count = 0
    expired: Count = 0
    restore_pending: Count = 0
    restore_bytes: Count = 0


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
