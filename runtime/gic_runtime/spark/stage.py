"""The stateful stage of a micro-batch: the function Spark runs per partition.

``mapInArrow`` calls :func:`make_stage` 's function once per partition with the
partition's record batches. Partition ``i`` is state task ``i`` of the barrier (see
:mod:`gic_runtime.spark.placement`); the function checks that, hands the processor the
input without the routing columns plus each row's bucket (Spark computed it; processors
that use it verify a sample against the runtime's own hash), runs the processor
through :func:`gic_runtime.executor.core.run_task` (state restore or local
reuse, dual-written changes, staged output, durable changelog) and yields exactly one
row: the task's ack. Output rows never travel back through Spark; they are staged
files the driver publishes after the checkpoint.

The returned function is pickled to executors together with the barrier and the
processor; it imports nothing from the driver.

:func:`make_drain` is the stage a clean stop runs once after the query: partition ``i``
waits until the background snapshots of task ``i``'s buckets on its executor finished.
:func:`make_restore_ahead` is the stage a start runs beside the query's first batch:
partition ``i`` restores task ``i``'s buckets on its executor.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from gic_runtime import crashpoints, errors
from gic_runtime.coordination.barrier import Barrier
from gic_runtime.errors import GICError, StateError
from gic_runtime.event_time import BatchTime, EventTimeSpec
from gic_runtime.executor.core import TaskContext, restore_ahead, run_task
from gic_runtime.executor.state_stack import local_paths
from gic_runtime.materialization.background import wait_for_markers
from gic_runtime.processing import NamesStateKeys, Processor, bucket_column_ok, drop_columns
from gic_runtime.processing.initial_state import InitialState
from gic_runtime.processing.late_rows import split_late
from gic_runtime.spark.placement import BUCKET_COLUMN, INTERNAL_COLUMNS
from gic_runtime.state.backend import KeyedStateBackend, StateKeys

if TYPE_CHECKING:
    from pyspark import Accumulator

ACK_SCHEMA = "ack binary"


def make_stage(
    barrier: Barrier,
    processor: Processor,
    event_time: EventTimeSpec | None = None,
    initial: InitialState | None = None,
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of batch ``barrier.checkpoint_id``. With
    ``event_time``, rows older than ``barrier.watermark_us`` are late (dropped unless
    kept, counted) and the task reports its largest event time
    (:mod:`gic_runtime.processing.late_rows`). After its rows (also when it got none)
    the task removes the state entries whose time to live passed, then fires its due
    timers. With ``initial``, rows carrying initial state are applied first
    (:mod:`gic_runtime.processing.initial_state`)."""

    def stage(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext as SparkTaskContext

        spark_ctx = SparkTaskContext.get()
        if spark_ctx is None:  # pragma: no cover - always set inside a Spark task
            raise StateError("the stateful stage must run inside a Spark task")
        index = spark_ctx.partitionId()
        if not 0 <= index < barrier.num_tasks:
            raise StateError(
                f"partition {index} of the stateful stage has no state task (there are "
                f"{barrier.num_tasks}); the stage's partitioning was changed"
            )
        owned = barrier.bucket_range(index)
        time = BatchTime(barrier.checkpoint_id, barrier.processing_time_us, barrier.watermark_us)
        tables = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
        buckets: pa.ChunkedArray | None = None
        initial_rows: pa.Table | None = None
        touched: list[int] = []
        if tables:
            table = pa.concat_tables(tables)
            bucket_column_ok(table, BUCKET_COLUMN, owned)
            if initial is not None:
                table, initial_rows = initial.split(table)
            if BUCKET_COLUMN in table.column_names:
                buckets = table.column(BUCKET_COLUMN)
                touched = first_seen(buckets)
            table = drop_columns(table, INTERNAL_COLUMNS)
        else:
            table = None

        def process(ctx: TaskContext) -> Iterator[pa.Table]:
            ctx.backend.set_batch_time(time)
            if initial is not None and initial_rows is not None:
                initial.apply(initial_rows, ctx.backend, time)
            if table is not None:
                ctx.count_rows_in(table.num_rows)
                rows, rows_buckets = table, buckets
                if event_time is not None:
                    rows, largest, late, keep = split_late(table, event_time, barrier.watermark_us)
                    ctx.note_event_times(largest, late)
                    if rows_buckets is not None and keep is not None:
                        rows_buckets = rows_buckets.filter(keep)
                if rows.num_rows:
                    yield from processor(
                        rows, ctx.backend, barrier.checkpoint_id, buckets=rows_buckets, time=time
                    )
            if processor.sweeps_ttl:
                ctx.count_expired(ctx.backend.expire())
            if processor.has_timers:
                yield from processor.fire_timers(ctx.backend, time, ctx.count_timers_fired)
            crashpoints.hit("in_task", barrier.checkpoint_id)

        ack = run_task(
            barrier,
            index,
            process,
            output_schema=processor.output_schema,
            touched=touched,
            select=_state_keys(processor, table, buckets, initial_rows),
        )
        yield pa.RecordBatch.from_pydict(
            {"ack": [ack.to_bytes()]}, schema=pa.schema([("ack", pa.binary())])
        )

    return stage


def selects_keys(processor: Processor) -> bool:
    """Whether ``processor``'s batches can name every state key they read
    (:class:`~gic_runtime.processing.NamesStateKeys`, no timers, no time to live): a
    batch after a start then reads just those keys instead of waiting for its buckets'
    restore (docs/architecture.md §6.3; a batch that applies initial state never does)."""
    return (
        isinstance(processor, NamesStateKeys)
        and not processor.has_timers
        and not processor.sweeps_ttl
    )


def _state_keys(
    processor: Processor,
    table: pa.Table | None,
    buckets: pa.ChunkedArray | None,
    initial_rows: pa.Table | None,
) -> StateKeys | None:
    """What the task core reads instead of restoring, for a task with rows whose
    processor :func:`selects_keys` (the rows a late-row filter drops are named too:
    more keys than read is allowed)."""
    if table is None or not table.num_rows or initial_rows is not None:
        return None
    if not selects_keys(processor):
        return None
    assert isinstance(processor, NamesStateKeys)
    names = processor

    def select(backend: KeyedStateBackend) -> dict[int, list[bytes]]:
        return names.state_keys(table, backend, buckets)

    return select


def first_seen(buckets: pa.ChunkedArray) -> list[int]:
    """The distinct buckets of ``buckets`` in the order of their first row (nulls
    skipped): the order a background restore restores the task's buckets in."""
    unique = pc.unique(buckets)  # first occurrence order
    return [int(b) for b in unique.to_pylist() if b is not None]


DRAIN_SCHEMA = "task int, in_flight int"


def _partition_of(batches: Iterable[pa.RecordBatch], stage: str) -> int:
    """The partition a one-row-per-task side stage runs (its input read to the end)."""
    from pyspark import TaskContext as SparkTaskContext

    for _ in batches:
        pass
    spark_ctx = SparkTaskContext.get()
    if spark_ctx is None:  # pragma: no cover - always set inside a Spark task
        raise StateError(f"{stage} must run inside a Spark task")
    return int(spark_ctx.partitionId())


def make_drain(
    barrier: Barrier, timeout: float
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function that waits, on the executor running partition ``i``,
    until no background materialization of task ``i``'s buckets is in flight there (at
    most ``timeout`` seconds), and yields one row: ``i`` and the buckets still in
    flight. Run after the query stopped, with partition ``i`` placed like state task
    ``i``."""

    def drain(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        index = _partition_of(batches, "the drain stage")
        busy: list[int] = []
        if 0 <= index < barrier.num_tasks:
            directory = local_paths(barrier).materialized
            busy = wait_for_markers(directory, barrier.bucket_range(index), timeout)
        yield pa.RecordBatch.from_pydict(
            {"task": [index], "in_flight": [len(busy)]},
            schema=pa.schema([("task", pa.int32()), ("in_flight", pa.int32())]),
        )

    return drain


RESTORE_AHEAD_SCHEMA = "task int, local_hits int, restored int, empty int, seconds double"


def make_restore_ahead(
    barrier: Barrier, done: Accumulator[int] | None = None
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function that brings task ``i``'s buckets on the executor
    running partition ``i`` to ``barrier``'s expected lineage
    (:func:`~gic_runtime.executor.core.restore_ahead`) and yields one row: ``i``, its
    buckets reused, restored and empty, and the seconds it took. Run beside the query's
    first batch, with partition ``i`` placed like state task ``i``; it writes only the
    executor's local copy. ``done`` (a Spark accumulator) gains 1 per task that
    restored its range, which the driver sees as each task ends."""

    def restore(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        index = _partition_of(batches, "the restore-ahead stage")
        began = time.perf_counter()
        hits = restored = empty = 0
        if 0 <= index < barrier.num_tasks:
            summary = restore_ahead(barrier, index)
            hits, restored = len(summary.local_hits), len(summary.restored)
            empty = len(summary.empty)
            if done is not None:
                done.add(1)
        yield pa.RecordBatch.from_pydict(
            {
                "task": [index],
                "local_hits": [hits],
                "restored": [restored],
                "empty": [empty],
                "seconds": [time.perf_counter() - began],
            },
            schema=pa.schema(
                [
                    ("task", pa.int32()),
                    ("local_hits", pa.int32()),
                    ("restored", pa.int32()),
                    ("empty", pa.int32()),
                    ("seconds", pa.float64()),
                ]
            ),
        )

    return restore


_TASK_ERROR = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception)): (.+)$")


def executor_error(exc: BaseException) -> GICError:
    """The runtime error a state task raised, recovered from Spark's failure text (Spark
    passes only text across); a generic :class:`GICError` when there is none."""
    found: GICError | None = None
    last: str | None = None
    for line in str(exc).splitlines():
        m = _TASK_ERROR.match(line.strip())
        if m is None:
            continue
        if not m.group(1).startswith(("Py4J", "Streaming", "Spark")):
            last = f"{m.group(1)}: {m.group(2)}"
        cls = getattr(errors, m.group(1), None)
        if isinstance(cls, type) and issubclass(cls, GICError):
            try:
                found = cls(m.group(2))
            except TypeError:  # pragma: no cover - every runtime error takes a message
                found = GICError(m.group(2))
    if found is not None:
        return found
    if last is not None:
        return GICError(f"the stateful stage failed: {last}")
    first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
    return GICError(f"the stateful stage failed: {first}")
