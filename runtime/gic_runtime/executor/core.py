"""The task core: run one state task of a micro-batch against its barrier.

:func:`execute` is THE way the core runs a task, whoever drives it: Spark's stateful
stage calls :func:`run_task` (which takes this process's cached
:class:`~gic_runtime.executor.state_stack.ExecutorEntry`), and the in-process
:class:`~gic_runtime.executor.state_task.StateTask` calls :func:`execute` with an entry of
its own. For task ``i`` of a :class:`~gic_runtime.coordination.barrier.Barrier`, in the
calling thread:

1. lock the range's buckets machine-wide (:mod:`~gic_runtime.executor.bucket_locks`)
   until the ack is built -- or, while buckets are still restored in the background,
   until that restore ends -- so two attempts of a task never interleave on a bucket;
2. bring every bucket to the expected lineage (:func:`restore_lineage`): import a
   canonical savepoint, or reuse the executor-local copy when its ``(seq, token)``
   matches and restore from storage otherwise, in the background by default
   (:mod:`~gic_runtime.state.background_restore`: the processing starts at once and
   waits only for the buckets it touches) -- or, when the task names every state key
   its batch reads (``select``) and no restore runs, read just those keys from storage
   and serve the batch from them (docs/architecture.md §6.3);
3. adopt background snapshots that fit the lineage
   (:mod:`~gic_runtime.materialization.background`);
4. run the callback and stage its output tables as one Parquet file
   (:mod:`~gic_runtime.executor.staging`);
5. (self-contained barriers: snapshot every non-empty bucket first) make every change
   durable, then record the new lineage in the local copy so any worker may reuse it;
   buckets served from selected keys are then restored to that lineage in the
   background (their local copies have no metadata until each is);
6. start due background materializations, unlock, and answer with a
   :class:`~gic_runtime.coordination.barrier.TaskAck`; :func:`run_task` then settles
   the worker: its object heap (:mod:`~gic_runtime.executor.heap`), its C heap
   (:mod:`~gic_runtime.executor.allocator`) and, beyond ``local_state_mapped_limit``,
   its mappings of the local copy (:func:`~gic_runtime.state.lmdb_store.bound_mapped_pages`).

Invariants: correctness never depends on placement -- the local copy is used only
when its lineage metadata equals the expected state, and any data change removes that
metadata (atomically), so a failed or concurrent attempt's leftovers are rebuilt from
storage. The ack names only objects durable before it is returned. On any exception
the pending local writes are committed without metadata, the locks are released, and
the exception propagates (:func:`run_task` also drops the cached entry).

Thread-safety: a task runs entirely on the calling thread; tasks of one bucket are
serialized by the bucket locks (across processes and threads) and tasks of one entry by
its lock.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from gic_runtime.coordination.barrier import Barrier, TaskAck, TaskStats
from gic_runtime.errors import StateError, UploadError
from gic_runtime.executor import allocator, heap
from gic_runtime.executor.environment import executor_id
from gic_runtime.executor.process_cache import close_local_executor, discard, entry_for
from gic_runtime.executor.staging import OutputStager
from gic_runtime.executor.state_stack import ExecutorEntry
from gic_runtime.handles import BucketState, SnapshotHandle
from gic_runtime.materialization.background import (
    LocalMaterializationStats,
    MaterializationScope,
    adopt_materializations,
    local_stats,
    note_attempt,
    start_due_materializations,
    wait_local_materializations,
)
from gic_runtime.materialization.scheduler import Turn
from gic_runtime.materialization.snapshot_upload import upload_view
from gic_runtime.savepoint.canonical_import import restore_from_canonical
from gic_runtime.state.backend import KeyedStateBackend, RestoreSummary, StateKeys
from gic_runtime.state.background_restore import BackgroundRestoreSettings, RestoreProgress
from gic_runtime.state.lmdb_store import bound_mapped_pages
from gic_runtime.storage.uri import StoreResolver

__all__ = [
    "LocalMaterializationStats",
    "ProcessFn",
    "TaskContext",
    "close_local_executor",
    "execute",
    "expected_states",
    "local_stats",
    "restore_ahead",
    "restore_lineage",
    "run_task",
    "wait_local_materializations",
]

_log = logging.getLogger(__name__)


@dataclass
class _Counters:
    rows_in: int = 0
    max_event_time_us: int | None = None
    late_rows: int = 0
    timers_fired: int = 0
    expired: int = 0


@dataclass(frozen=True)
class TaskContext:
    """What the processing callback of one task gets. It reads and writes state only
    through ``backend`` (``value_state`` / ``map_state`` / ``list_state``,
    ``write_raw``), for keys routing into ``bucket_range``."""

    barrier: Barrier
    task_index: int
    bucket_range: range
    backend: KeyedStateBackend
    _counters: _Counters = field(default_factory=_Counters, repr=False, compare=False)

    @property
    def checkpoint_id(self) -> int:
        """The micro-batch (checkpoint) this task belongs to."""
        return self.barrier.checkpoint_id

    def count_rows_in(self, n: int) -> None:
        """Report ``n`` more input rows (shows as ``TaskStats.rows_in``)."""
        self._counters.rows_in += n

    @property
    def rows_in(self) -> int:
        return self._counters.rows_in

    @property
    def max_event_time_us(self) -> int | None:
        return self._counters.max_event_time_us

    @property
    def late_rows(self) -> int:
        return self._counters.late_rows

    @property
    def timers_fired(self) -> int:
        return self._counters.timers_fired

    @property
    def expired(self) -> int:
        return self._counters.expired

    def count_expired(self, n: int) -> None:
        """Report ``n`` more state entries expired (shows as ``TaskStats.expired``)."""
        self._counters.expired += n

    def count_timers_fired(self, n: int) -> None:
        """Report ``n`` more timers fired (shows as ``TaskStats.timers_fired``)."""
        self._counters.timers_fired += n

    def note_event_times(self, max_us: int | None, late: int) -> None:
        """Report the largest event time of more input rows (``None``: none had one)
        and how many of them were late (shows in ``TaskStats``)."""
        c = self._counters
        if max_us is not None:
            c.max_event_time_us = (
                max_us if c.max_event_time_us is None else max(c.max_event_time_us, max_us)
            )
        c.late_rows += late


ProcessFn = Callable[[TaskContext], Iterable[pa.Table]]
"""The task's processing: reads input, updates state, yields output ``pyarrow.Table``s
(possibly none)."""


def run_task(
    barrier: Barrier,
    task_index: int,
    process: ProcessFn,
    *,
    output_schema: pa.Schema | None = None,
    touched: Sequence[int] = (),
    select: StateKeys | None = None,
) -> TaskAck:
    """Run task ``task_index`` of ``barrier`` on this process's cached entry for its
    range (:func:`execute`) and return its ack; after a failure the entry is dropped, so
    the next task builds a fresh one. ``output_schema`` (a ``pyarrow.Schema``) fixes the
    staged file's columns; ``touched`` names the buckets the task's input touches, in
    input order (a background restore restores them first); ``select`` names every
    state key ``process`` reads, when it can (buckets to rebuild are then served from
    those keys, step 2)."""
    entry = entry_for(barrier, task_index)
    try:
        ack = execute(
            entry,
            barrier,
            task_index,
            process,
            output_schema=output_schema,
            touched=touched,
            select=select,
        )
    except BaseException:
        discard(entry)
        raise
    heap.settle()  # PySpark's collection after the task then visits only new objects
    allocator.release()  # the batch's buffers are freed: hand their pages back
    # Beyond the limit the local copy's pages stay cached but are no longer mapped here.
    bound_mapped_pages(barrier.settings.local_state_mapped_limit)
    return ack


def restore_ahead(barrier: Barrier, task_index: int) -> RestoreSummary:
    """Bring task ``task_index``'s buckets on this executor to ``barrier``'s expected
    lineage ahead of the batch that needs them (the restore a start runs beside the
    query's first batch, docs/architecture.md §6.2), on this process's cached entry, as
    step 2 of :func:`execute` does, with the eager plan.

    Writes only the executor's local copy, under the range's bucket locks: the batch's
    task for the range, on this process or another, finds each bucket complete with
    the expected ``(seq, token)`` and reuses it (or, when it took the locks first, this
    finds its work done). Uploads, acks and state changes are the batch's alone. After
    a failure the entry is dropped and its locks released, as :func:`run_task` does."""
    entry = entry_for(barrier, task_index)
    owned = barrier.bucket_range(task_index)
    try:
        if entry.backend.bucket_range != owned:
            raise StateError(
                f"task {task_index} of the barrier owns buckets [{owned.start}, "
                f"{owned.stop}), the entry [{entry.backend.bucket_range.start}, "
                f"{entry.backend.bucket_range.stop})"
            )
        locks = entry.take_locks()
        try:
            with entry.lock:
                summary = restore_lineage(
                    entry.backend,
                    entry.resolver,
                    barrier.expected_for(task_index),
                    barrier.canonical_source,
                )
        except BaseException:
            try:
                entry.backend.close_restore()
            finally:
                _flush_after_failure(entry)
                locks.release()
            raise
        entry.hold_locks(locks)
    except BaseException:
        discard(entry)
        raise
    heap.settle()
    allocator.release()
    bound_mapped_pages(barrier.settings.local_state_mapped_limit)
    return summary


def execute(
    entry: ExecutorEntry,
    barrier: Barrier,
    task_index: int,
    process: ProcessFn,
    *,
    output_schema: pa.Schema | None = None,
    touched: Sequence[int] = (),
    select: StateKeys | None = None,
) -> TaskAck:
    """The task core (see the module docstring): run task ``task_index`` of ``barrier``
    on ``entry``, whose backend must own exactly the task's buckets, and return its ack.
    ``touched`` and ``select``: see :func:`run_task`."""
    began = time.perf_counter()
    owned = barrier.bucket_range(task_index)
    if entry.backend.bucket_range != owned:
        raise StateError(
            f"task {task_index} of the barrier owns buckets [{owned.start}, {owned.stop}), "
            f"the entry [{entry.backend.bucket_range.start}, {entry.backend.bucket_range.stop})"
        )
    locks = entry.take_locks()
    try:
        with entry.lock:
            ack = _run_locked(
                barrier=barrier,
                task_index=task_index,
                entry=entry,
                process=process,
                output_schema=output_schema,
                began=began,
                touched=touched,
                select=select,
            )
    except BaseException:
        try:
            entry.backend.close_restore()  # no background write once the locks are gone
        finally:
            _flush_after_failure(entry)
            locks.release()
        raise
    entry.hold_locks(locks)
    return ack


def restore_lineage(
    backend: KeyedStateBackend,
    resolver: StoreResolver,
    expected: Mapping[int, BucketState],
    canonical_source: str | None = None,
    background: BackgroundRestoreSettings | None = None,
    *,
    touched: Sequence[int] = (),
    select: StateKeys | None = None,
) -> RestoreSummary:
    """Bring every bucket of ``backend`` to the expected lineage (step 2): import the
    canonical savepoint at ``canonical_source`` into a fresh lineage, or restore to
    ``expected`` (a bucket whose local copy carries the expected ``(seq, token)`` is
    reused without reading storage; the others are rebuilt in the background when
    ``background`` says so, the ``touched`` ones first, else before this returns; or
    served from the keys ``select`` names, :meth:`KeyedStateBackend.restore`)."""
    if canonical_source is None:
        return backend.restore(
            expected, resolver, background=background, priority=touched, select=select
        )
    backend.close_restore()
    restore_from_canonical(backend, canonical_source, resolver)
    imported = tuple(b for b in backend.bucket_range if backend.seq(b) > 0)
    return RestoreSummary(
        restored=imported,
        empty=tuple(b for b in backend.bucket_range if b not in imported),
    )


def _flush_after_failure(entry: ExecutorEntry) -> None:
    """After a failure: commit pending local writes (they removed the lineage metadata,
    so the next attempt rebuilds from storage)."""
    try:
        entry.backend.store.flush()
    except Exception as exc:  # the original error matters more
        _log.warning("could not flush the local state store after a failed task: %s", exc)


def _run_locked(
    *,
    barrier: Barrier,
    task_index: int,
    entry: ExecutorEntry,
    process: ProcessFn,
    output_schema: pa.Schema | None,
    began: float,
    touched: Sequence[int] = (),
    select: StateKeys | None = None,
) -> TaskAck:
    backend, resolver, settings = entry.backend, entry.resolver, barrier.settings
    bytes_before = entry.uploader.bytes_submitted
    scope = MaterializationScope(
        entry.paths.materialized,
        barrier.root,
        barrier.job_id,
        barrier.epoch,
        resolver,
        settings.materialization,
        clock=entry.clock,
        pool=entry.pool,
    )

    note_attempt(scope)

    # 2. the expected lineage
    expected = barrier.expected_for(task_index)
    running = backend.restorer
    before = running.progress() if running is not None else None
    summary = restore_lineage(
        backend,
        resolver,
        expected,
        barrier.canonical_source,
        settings.restore,
        touched=touched,
        select=None if barrier.self_contained else select,
    )
    if summary.selected:
        _log.info(
            "checkpoint %d: buckets %s run on the state keys the batch named, read "
            "without restoring them; they are restored once its checkpoint is durable",
            barrier.checkpoint_id,
            _ranges(summary.selected),
        )
    if backend.restorer is not running:
        before = None  # a new background restore: count all of its progress
    start_seq = {b: s.seq for b, s in expected.items()}

    # 3. background snapshots that fit
    adopted: list[int] = []
    if not barrier.self_contained and barrier.canonical_source is None:
        adopted = adopt_materializations(scope, backend, expected)

    # 4. the batch
    ctx = TaskContext(barrier, task_index, backend.bucket_range, backend)
    stager = OutputStager(barrier.staging_uri, task_index, resolver, output_schema)
    processing = time.perf_counter()
    restorer = backend.restorer
    if restorer is not None:
        restorer.prioritize(touched)  # a restore carried over: this batch's buckets first
    try:
        for table in process(ctx):
            stager.add(table)
        outputs = stager.finish()
    except BaseException:
        stager.abort()
        raise
    processed = time.perf_counter()
    backend.check_restore()  # a bucket whose background restore failed fails the task

    # 5. durability
    snapshots: list[SnapshotHandle] = []
    if barrier.self_contained:
        snapshots = _materialize_all(backend, resolver, barrier, scope.directory)
    future = backend.checkpoint()
    timeout = settings.checkpoint_timeout_s
    try:
        states = future.result(timeout=timeout)
    except FutureTimeoutError as exc:
        raise UploadError(
            f"checkpoint {barrier.checkpoint_id} of job {barrier.job_id} buckets "
            f"[{backend.bucket_range.start}, {backend.bucket_range.stop}) did not become "
            f"durable within {timeout} s (TaskSettings.checkpoint_timeout_s); check the "
            "storage endpoint's health"
        ) from exc
    backend.mark_persisted(states)
    backend.restore_selected(states, resolver, settings.restore)
    backend.take_unreferenced_snapshots()  # never deleted here: see materialization.background
    durable = time.perf_counter()

    # 6. background materializations, then the ack
    ready = {b: s for b, s in states.items() if backend.restored(b)}
    turn = Turn(barrier.checkpoint_id, task_index, barrier.num_tasks)
    started = start_due_materializations(scope, backend, ready, turn)
    progress = backend.restore_progress()
    restore_bytes, replayed = _restore_delta(before, progress)
    stats = TaskStats(
        rows_in=ctx.rows_in,
        rows_out=sum(o.rows for o in outputs),
        changes=sum(s.seq - start_seq.get(b, 0) for b, s in states.items()),
        changelog_bytes=entry.uploader.bytes_submitted - bytes_before,
        snapshot_bytes=sum(h.size for h in snapshots),
        local_hits=len(summary.local_hits),
        restored=len(summary.restored) + len(summary.selected),
        empty=len(summary.empty),
        replayed=summary.replayed + replayed,
        restore_pending=len(backend.restore_outstanding()),
        selected=len(summary.selected),
        restore_bytes=restore_bytes,
        materializations_adopted=len(adopted),
        materializations_started=started,
        process_s=processed - processing,
        checkpoint_s=durable - processed,
        total_s=time.perf_counter() - began,
        pid=os.getpid(),
        executor=executor_id(),
        max_event_time_us=ctx.max_event_time_us,
        late_rows=ctx.late_rows,
        timers_fired=ctx.timers_fired,
        expired=ctx.expired,
    )
    return TaskAck(
        job_id=barrier.job_id,
        epoch=barrier.epoch,
        checkpoint_id=barrier.checkpoint_id,
        task_index=task_index,
        states=states,
        outputs=outputs,
        stats=stats,
    )


def _ranges(buckets: Sequence[int]) -> str:
    """``buckets`` (ascending) as ``[a, b)`` runs, for logs."""
    runs: list[str] = []
    start = prev = buckets[0]
    for bucket in buckets[1:]:
        if bucket != prev + 1:
            runs.append(f"[{start}, {prev + 1})")
            start = bucket
        prev = bucket
    runs.append(f"[{start}, {prev + 1})")
    return ", ".join(runs)


def _restore_delta(
    before: RestoreProgress | None, after: RestoreProgress | None
) -> tuple[int, int]:
    """Bytes restored and changes replayed in the background during one task."""
    if after is None:
        return 0, 0
    if before is None:
        return after.bytes_done, after.replayed
    return after.bytes_done - before.bytes_done, after.replayed - before.replayed


def _materialize_all(
    backend: KeyedStateBackend, resolver: StoreResolver, barrier: Barrier, spool_dir: Path
) -> list[SnapshotHandle]:
    """Snapshot every non-empty bucket now, in parallel, into the job's own directory
    (spooled in ``spool_dir``), and make each snapshot the bucket's base."""
    views = [backend.materialization_view(b) for b in backend.bucket_range if backend.seq(b) > 0]
    if not views:
        return []
    compress = barrier.settings.materialization.compress

    def upload(index: int) -> SnapshotHandle:
        return upload_view(
            resolver,
            views[index],
            root=barrier.root,
            job_id=barrier.job_id,
            epoch=barrier.epoch,
            compress=compress,
            spool_dir=spool_dir,
        )

    try:
        with ThreadPoolExecutor(min(8, len(views)), thread_name_prefix="gic-full") as pool:
            handles = list(pool.map(upload, range(len(views))))
    finally:
        for view in views:
            view.view.close()
    for handle in handles:
        backend.on_materialized(handle.bucket, handle)
    return handles


def expected_states(acks: Iterable[TaskAck]) -> Mapping[int, BucketState]:
    """The bucket states of a batch's acks: the ``expected`` lineage of the next batch."""
    out: dict[int, BucketState] = {}
    for ack in acks:
        out.update(ack.states)
    return out
