"""What the driver ships with a micro-batch's state tasks, and what each task answers.

A :class:`Barrier` is built by the driver for checkpoint (batch) ``checkpoint_id`` and
sent to every state task of that batch; each task answers with one :class:`TaskAck`.

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
:mod:`~gic_runtime.coordination.packed_states`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from gic_runtime.coordination.packed_states import PackedStates
from gic_runtime.coordination.ranges import split_buckets
from gic_runtime.coordination.settings import TaskSettings
from gic_runtime.errors import ConfigurationError, FormatError
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
    (:func:`~gic_runtime.coordination.executor_env.resolve_local_dir`)."""
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
    return Barrier(**values)


@dataclass(frozen=True, slots=True)
class StagedFile:
    """One output file a task staged for its batch (published after the checkpoint)."""

    uri: str
    rows: int
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"uri": self.uri, "rows": self.rows, "size": self.size}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StagedFile:
        return cls(str(data["uri"]), int(data["rows"]), int(data["size"]))


@dataclass(frozen=True, slots=True)
class TaskStats:
    """What one task did for its batch (counts, bytes, seconds)."""

    rows_in: int = 0
    rows_out: int = 0
    changes: int = 0
    """State changes applied (= changelog records appended)."""
    changelog_bytes: int = 0
    """Bytes of changelog segments uploaded by this task's checkpoint."""
    snapshot_bytes: int = 0
    """Bytes of snapshots uploaded for a self-contained checkpoint."""
    local_hits: int = 0
    """Buckets whose executor-local copy matched the expected lineage."""
    restored: int = 0
    """Buckets rebuilt from storage."""
    empty: int = 0
    """Buckets that started empty."""
    replayed: int = 0
    """Changelog records replayed while restoring."""
    materializations_adopted: int = 0
    """Background snapshots that became a bucket's base in this batch."""
    materializations_started: int = 0
    process_s: float = 0.0
    checkpoint_s: float = 0.0
    """Seconds from the end of processing until every change was durable."""
    total_s: float = 0.0
    pid: int = 0
    """Process that ran the task (placement diagnostics)."""
    executor: str = ""
    """Executor that ran the task (:func:`~gic_runtime.coordination.executor_env.executor_id`;
    placement diagnostics)."""

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskStats:
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True, slots=True)
class TaskAck:
    """A task's answer to a barrier (see the module docstring)."""

    job_id: str
    epoch: int
    checkpoint_id: int
    task_index: int
    states: Mapping[int, BucketState]
    outputs: tuple[StagedFile, ...] = ()
    stats: TaskStats = field(default_factory=TaskStats)

    def to_bytes(self) -> bytes:
        body = {
            "version": ACK_VERSION,
            "job_id": self.job_id,
            "epoch": self.epoch,
            "checkpoint_id": self.checkpoint_id,
            "task_index": self.task_index,
            "states": [s.to_json() for _, s in sorted(self.states.items())],
            "outputs": [o.to_json() for o in self.outputs],
            "stats": self.stats.to_json(),
        }
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> TaskAck:
        try:
            body = json.loads(data)
            if body.get("version") != ACK_VERSION:
                raise FormatError(
                    f"task ack version {body.get('version')!r} is not {ACK_VERSION}; driver "
                    "and executors must run the same gic version"
                )
            states = [BucketState.from_json(s) for s in body["states"]]
            return cls(
                job_id=str(body["job_id"]),
                epoch=int(body["epoch"]),
                checkpoint_id=int(body["checkpoint_id"]),
                task_index=int(body["task_index"]),
                states={s.bucket: s for s in states},
                outputs=tuple(StagedFile.from_json(o) for o in body["outputs"]),
                stats=TaskStats.from_json(body["stats"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"malformed task ack: {exc}") from exc
