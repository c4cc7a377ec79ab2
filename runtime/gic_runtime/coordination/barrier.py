"""What the driver ships with a micro-batch's state tasks, and what each task answers.

A :class:`Barrier` is built (:meth:`Barrier.build`) by the driver for checkpoint (batch)
``checkpoint_id`` and sent to every state task of that batch; each task answers with one
:class:`TaskAck`.

Invariants:

* Task ``i`` of ``num_tasks`` owns the contiguous buckets :meth:`Barrier.bucket_range`
  ``(i)`` (:mod:`~gic_runtime.coordination.ranges`); the ranges of all tasks partition
  ``[0, num_buckets)``. Whatever Spark does with placement, a task only ever touches its
  own buckets.
* ``expected`` is the lineage every bucket must start the batch from: the bucket states
  of the previous checkpoint (buckets absent from it start empty), or of the restore
  source on the first batch of a restored job. A task whose local copy does not carry
  exactly that lineage restores the bucket from storage.
* An ack names only objects that were durable when it was sent (docs/architecture.md
  I2), and holds
  one :class:`~gic_runtime.handles.BucketState` for every bucket of its range.

Both are immutable values; they travel as JSON (acks) or pickled closures (barriers,
whose ``expected`` states are packed per task on the way:
:mod:`~gic_runtime.coordination.packed_states`). An ack's JSON form is its fields
(:mod:`gic_runtime.codec`) plus ``version`` (:data:`ACK_VERSION`), its ``states`` a list
in ascending bucket order; every stats counter may be absent (0).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Annotated, Any

from gic_runtime import codec
from gic_runtime.codec import Finite, Int, KeyedList, RecordError, Text, json_record
from gic_runtime.coordination.packed_states import PackedStates
from gic_runtime.coordination.ranges import split_buckets
from gic_runtime.coordination.task_settings import TaskSettings
from gic_runtime.errors import ConfigurationError, FormatError
from gic_runtime.formats import load_json
from gic_runtime.handles import BucketState

__all__ = [
    "ACK_VERSION",
    "Barrier",
    "StagedFile",
    "TaskAck",
    "TaskStats",
    "split_buckets",
]

ACK_VERSION = 1
"""Version of the JSON form of :class:`TaskAck`."""


@dataclass(frozen=True, slots=True)
class Barrier:
    """Checkpoint barrier of one micro-batch (see the module docstring)."""

    job_id: str
    root: str
    """Storage root URI (``file:///...`` or ``s3://bucket/prefix``)."""
    epoch: int
    """Fencing epoch of the driver attempt; new changelog objects go under it."""
    checkpoint_id: int
    num_buckets: int
    num_tasks: int
    local_dir: str
    """Executor-local directory for the shared state copy (LMDB) and its bookkeeping;
    "" is each executor's own scratch directory
    (:func:`~gic_runtime.executor.environment.resolve_local_dir`)."""
    expected: Mapping[int, BucketState] = field(default_factory=dict)
    self_contained: bool = False
    """Materialize every non-empty bucket into the job's own directory before acking, so
    the checkpoint references nothing outside it (first checkpoint of a no-claim restore;
    also the full-snapshot mode)."""
    canonical_source: str | None = None
    """First batch after a restore from a canonical savepoint: import the buckets from
    this directory instead of ``expected`` (which must then be empty)."""
    staging_uri: str | None = None
    """Directory where tasks stage this batch's output files (``None``: no output)."""
    settings: TaskSettings = field(default_factory=TaskSettings)
    watermark_us: int | None = None
    """The event-time watermark this batch runs with (microseconds since the epoch;
    ``None``: none yet, or no event time): rows older than it are late
    (:mod:`gic_runtime.event_time`)."""
    processing_time_us: int = 0
    """The batch's processing time (the driver's clock when it built the barrier;
    microseconds since the epoch): processing-time timers at or before it fire."""

    @classmethod
    def build(
        cls,
        *,
        job_id: str,
        root: str,
        epoch: int,
        checkpoint_id: int,
        num_buckets: int,
        num_tasks: int,
        local_dir: str,
        settings: TaskSettings,
        expected: Mapping[int, BucketState] | None = None,
        self_contained: bool = False,
        canonical_source: str | None = None,
        staging_uri: str | None = None,
        watermark_us: int | None = None,
        processing_time_us: int | None = None,
    ) -> Barrier:
        """THE way the runtime makes a barrier: the driver's for each batch, an in-process
        task's template, and a barrier unpickled in a task. Every input is named and the
        task settings are explicit (never the defaults by omission); the checks of the
        inputs run on every barrier, built here or derived with ``dataclasses.replace``.
        ``processing_time_us`` defaults to now."""
        return cls(
            job_id=job_id,
            root=root,
            epoch=epoch,
            checkpoint_id=checkpoint_id,
            num_buckets=num_buckets,
            num_tasks=num_tasks,
            local_dir=local_dir,
            expected={} if expected is None else expected,
            self_contained=self_contained,
            canonical_source=canonical_source,
            staging_uri=staging_uri,
            settings=settings,
            watermark_us=watermark_us,
            processing_time_us=(
                time.time_ns() // 1000 if processing_time_us is None else processing_time_us
            ),
        )

    def __post_init__(self) -> None:
        if self.canonical_source is not None and self.expected:
            raise ConfigurationError(
                "a barrier restores either from a canonical savepoint or from bucket "
                "states, not both"
            )
        split_buckets(self.num_buckets, self.num_tasks, 0)

    def bucket_range(self, index: int) -> range:
        """Buckets owned by task ``index``."""
        return split_buckets(self.num_buckets, self.num_tasks, index)

    def expected_for(self, index: int) -> dict[int, BucketState]:
        """The ``expected`` states of task ``index``'s buckets."""
        expected = self.expected
        return {b: expected[b] for b in self.bucket_range(index) if b in expected}

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle with ``expected`` packed per task (see
        :mod:`~gic_runtime.coordination.packed_states`): the barrier goes to every task."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        expected = self.expected
        if (
            expected
            and not isinstance(expected, PackedStates)
            and all(0 <= b < self.num_buckets for b in expected)
        ):
            values["expected"] = PackedStates.pack(expected, self.num_buckets, self.num_tasks)
        return (_rebuild_barrier, (values,))


def _rebuild_barrier(values: dict[str, Any]) -> Barrier:
    return Barrier.build(**values)


@json_record("staged file")
@dataclass(frozen=True, slots=True)
class StagedFile:
    """One output file a task staged for its batch (published after the checkpoint)."""

    uri: Text
    rows: Int
    size: Int

    def to_json(self) -> dict[str, Any]:
        return codec.to_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StagedFile:
        return codec.from_json(cls, data)


@json_record("task stats")
@dataclass(frozen=True, slots=True)
class TaskStats:
    """What one task did for its batch (counts, bytes, seconds)."""

    rows_in: Int = 0
    rows_out: Int = 0
    changes: Int = 0
    """State changes applied (= changelog records appended)."""
    changelog_bytes: Int = 0
    """Bytes of changelog segments uploaded by this task's checkpoint."""
    snapshot_bytes: Int = 0
    """Bytes of snapshots uploaded for a self-contained checkpoint."""
    local_hits: Int = 0
    """Buckets whose executor-local copy matched the expected lineage."""
    restored: Int = 0
    """Buckets rebuilt from storage."""
    empty: Int = 0
    """Buckets that started empty."""
    replayed: Int = 0
    """Changelog records replayed while restoring (in the background: those replayed
    while the task ran)."""
    restore_pending: Int = 0
    """Buckets still being restored in the background when the task acked (their
    restore goes on after the task; the next task of the range waits for those it
    touches)."""
    selected: Int = 0
    """Buckets the task ran on from the state keys its batch named, read from storage
    without restoring them (counted in ``restored`` too: they are restored right after
    the task, in the background)."""
    restore_bytes: Int = 0
    """Stored bytes (snapshots, changelog sections) of buckets the background restore
    completed while the task ran."""
    materializations_adopted: Int = 0
    """Background snapshots that became a bucket's base in this batch."""
    materializations_started: Int = 0
    process_s: Finite = 0.0
    checkpoint_s: Finite = 0.0
    """Seconds from the end of processing until every change was durable."""
    total_s: Finite = 0.0
    pid: Int = 0
    """Process that ran the task (placement diagnostics)."""
    executor: Text = ""
    """Executor that ran the task (:func:`~gic_runtime.executor.environment.executor_id`;
    placement diagnostics)."""
    max_event_time_us: Int | None = None
    """The largest event time among the task's input rows, late ones included
    (``None``: no row had one, or the stream has no event time)."""
    late_rows: Int = 0
    """Input rows older than the batch's watermark (dropped unless the stream keeps
    them)."""
    timers_fired: Int = 0
    """Timers that fired in this task (:mod:`gic_runtime.processing.firing`)."""
    expired: Int = 0
    """State entries (values, map entries, list elements) whose time to live passed,
    removed by this task (:mod:`gic_runtime.state.ttl`)."""


@json_record("task ack", required=("outputs", "stats"), computed=("version",))
@dataclass(frozen=True, slots=True)
class TaskAck:
    """A task's answer to a barrier (see the module docstring)."""

    job_id: Text
    epoch: Int
    checkpoint_id: Int
    task_index: Int
    states: Annotated[Mapping[int, BucketState], KeyedList("bucket")]
    outputs: tuple[StagedFile, ...] = ()
    stats: TaskStats = field(default_factory=TaskStats)

    @property
    def version(self) -> int:
        """Version of the JSON form (:data:`ACK_VERSION`)."""
        return ACK_VERSION

    def to_bytes(self) -> bytes:
        return codec.to_json_bytes(self)

    @classmethod
    def from_bytes(cls, data: bytes) -> TaskAck:
        """The ack ``data`` holds; :class:`FormatError` names what is wrong with it."""
        try:
            body = load_json(data, what="task ack", uri=None)
        except FormatError as exc:
            raise FormatError(f"malformed task ack: {exc}") from exc
        if not isinstance(body, dict):
            raise FormatError(f"malformed task ack: a JSON {type(body).__name__}, not an object")
        version = body.get("version")
        if version != ACK_VERSION:
            raise FormatError(
                f"task ack version {version!r:.20} is not {ACK_VERSION}; driver and executors "
                "must run the same gic version"
            )
        try:
            return codec.from_json(cls, body)
        except RecordError as exc:
            raise FormatError(str(exc)) from exc
