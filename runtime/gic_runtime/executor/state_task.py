"""The in-process face of the task core: one state task driven without Spark.

A :class:`StateTask` holds the keyed state of one task's buckets for one attempt
(``epoch``) of a job and runs every batch through the same core as Spark's executors
(:func:`~gic_runtime.executor.core.execute`): each :meth:`StateTask.checkpoint`
builds the :class:`~gic_runtime.coordination.barrier.Barrier` of one batch from the
task's own state (job, root, epoch, checkpoint id, bucket range, local directory, the
expected lineage) and lets the core restore (or reuse) that lineage, adopt fitting
background snapshots, apply the caller's changes, make them durable and start due
background materializations, through the same executor-local records, markers and
adoption rules (:mod:`~gic_runtime.materialization.background`). The task owns its state
stack, assembled as the executor's is (:func:`~gic_runtime.executor.state_stack.build_entry`):
its changelog writer and uploader (segment names under ``changelog/<epoch>/``), a
:class:`~gic_runtime.materialization.pool.MaterializationPool` and a local directory
for records, markers and bucket locks (a temporary one unless given).

Invariants:

* A batch is all or nothing: :meth:`~StateTask.checkpoint` either returns an ack whose
  bucket states reference only objects durable when it returns, or raises; then the
  batch's changes are rolled back when the next batch starts (the core restores the
  expected lineage, as a Spark task retry does).
* The expected lineage of a batch is that of the last checkpoint the caller reported
  complete (:meth:`~StateTask.notify_checkpoint_complete`, or the restore): a checkpoint
  never reported (its manifest never written) is not built upon.
* State changes happen only inside a batch's callback; a change outside one would be
  rolled back by the next batch, so the next batch refuses to start
  (:class:`~gic_runtime.errors.StateError`).
* With ``self_contained=True`` every non-empty bucket is first materialized afresh into
  the job's own directory, so the ack references nothing outside it.

Thread-safety: one thread calls every method; background materialization runs on the
task's pool.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import replace
from pathlib import Path

import pyarrow as pa

from gic_runtime.checkpoint.manifest import Manifest
from gic_runtime.clock import Clock, SystemClock
from gic_runtime.coordination.barrier import Barrier, TaskAck
from gic_runtime.coordination.task_settings import TaskSettings
from gic_runtime.errors import StateError
from gic_runtime.executor.core import TaskContext, execute, restore_lineage
from gic_runtime.executor.state_stack import attempt_uploader, build_entry, local_paths
from gic_runtime.handles import BucketState
from gic_runtime.layout import validate_id
from gic_runtime.materialization.pool import LocalMaterializationStats, MaterializationPool
from gic_runtime.state.backend import KeyedStateBackend, RestoreSummary
from gic_runtime.state.stores import KVStore
from gic_runtime.storage.uri import StoreResolver

__all__ = ["BatchFn", "StateTask"]

BatchFn = Callable[[TaskContext], None]
"""A batch's changes: called once inside :meth:`StateTask.checkpoint`, after the lineage
is restored; reads and writes state through ``ctx.backend``."""


class StateTask:
    """Task ``task_index`` of ``num_tasks`` (buckets ``split_buckets(num_buckets,
    num_tasks, task_index)``) of attempt ``epoch`` of job ``job_id``, keeping its state in
    ``store`` (see the module docstring).

    ``clock`` drives background materialization (due times, record times, retries);
    ``upload_clock`` drives upload hedging, timeouts and retry delays (the real clock by
    default, so a test may move materialization by hand while uploads keep real
    deadlines). ``materialization_executor`` runs the background snapshot jobs (default:
    a thread pool of the task; a test may pass one that runs jobs when told).
    ``local_dir`` holds the materialization records, markers and bucket locks (default:
    a temporary directory removed by :meth:`close`).
    """

    def __init__(
        self,
        *,
        root: str,
        job_id: str,
        epoch: int,
        num_buckets: int,
        store: KVStore,
        resolver: StoreResolver,
        task_index: int = 0,
        num_tasks: int = 1,
        local_dir: str | Path | None = None,
        clock: Clock | None = None,
        upload_clock: Clock | None = None,
        settings: TaskSettings | None = None,
        materialization_executor: Executor | None = None,
    ) -> None:
        validate_id("job id", job_id)
        self.settings = s = settings or TaskSettings()
        template = Barrier.build(
            job_id=job_id,
            root=root,
            epoch=epoch,
            checkpoint_id=0,
            num_buckets=num_buckets,
            num_tasks=num_tasks,
            local_dir="",
            settings=s,
        )
        owned = template.bucket_range(task_index)  # checks the arguments first
        self.task_index = task_index
        self._own_dir = local_dir is None
        directory = Path(tempfile.mkdtemp(prefix="gic-task-") if local_dir is None else local_dir)
        self.local_dir = directory.absolute()
        self._template = replace(template, local_dir=str(self.local_dir))
        self.uploader = attempt_uploader(
            resolver, template, s.uploader, clock=upload_clock or SystemClock()
        )
        self._entry = build_entry(
            self._template,
            owned,
            paths=local_paths(self._template),
            resolver=resolver,
            uploader=self.uploader,
            store=store,
            clock=clock or SystemClock(),
            pool=MaterializationPool(materialization_executor),
        )
        self._expected: dict[int, BucketState] = {}
        self._canonical: str | None = None
        self._next_checkpoint_id = 1
        self._at_rest: dict[int, int] = {}
        self._settle()

    @property
    def backend(self) -> KeyedStateBackend:
        """The keyed state; write to it only inside a batch's callback."""
        return self._entry.backend

    @property
    def bucket_range(self) -> range:
        return self._entry.backend.bucket_range

    # --- lineage ---------------------------------------------------------------------

    def restore(self, manifest: Manifest | None) -> RestoreSummary:
        """Bring the buckets to the state ``manifest`` records (empty when ``None``) now,
        and make it the expected lineage of the next batch."""
        states: dict[int, BucketState] = {}
        if manifest is not None:
            states = {b: s for b, s in manifest.buckets.items() if b in self.bucket_range}
        summary = self._restore(states, None)
        self._expected, self._canonical = states, None
        return summary

    def restore_canonical(self, uri: str) -> RestoreSummary:
        """Import the canonical savepoint at ``uri`` now (a fresh lineage); the next batch
        imports it again inside the core, as Spark's first batch after a canonical
        restore does, until a checkpoint is reported complete."""
        summary = self._restore({}, uri)
        self._expected, self._canonical = {}, uri
        return summary

    def notify_checkpoint_complete(self, states: Mapping[int, BucketState]) -> None:
        """The checkpoint holding ``states`` completed (its manifest is written): the next
        batch starts from these states (those of this task's buckets; an absent bucket
        starts empty)."""
        self._expected = {b: s for b, s in states.items() if b in self.bucket_range}
        self._canonical = None

    # --- batches ---------------------------------------------------------------------

    def checkpoint(
        self,
        process: BatchFn | None = None,
        *,
        checkpoint_id: int | None = None,
        self_contained: bool = False,
        touched: Sequence[int] = (),
    ) -> TaskAck:
        """Run one batch through the task core: restore the expected lineage, adopt
        fitting background snapshots, apply ``process`` (no changes when ``None``), make
        every change durable and start due materializations. ``checkpoint_id`` defaults to
        one more than the previous batch's; ``touched`` names the buckets ``process``
        uses, in the order it uses them (a background restore restores them first).
        Returns the ack (bucket states and stats)."""
        stray = [b for b in self.bucket_range if self.backend.seq(b) != self._at_rest[b]]
        if stray:
            raise StateError(
                f"buckets {stray} changed outside a batch; make changes inside the callback "
                "of StateTask.checkpoint (the next batch starts from the last completed "
                "checkpoint and would drop them)"
            )
        cid = self._next_checkpoint_id if checkpoint_id is None else checkpoint_id
        barrier = replace(
            self._template,
            checkpoint_id=cid,
            expected=dict(self._expected),
            self_contained=self_contained,
            canonical_source=self._canonical,
        )

        def run(ctx: TaskContext) -> Iterable[pa.Table]:
            if process is not None:
                process(ctx)
            return ()

        self._next_checkpoint_id = cid + 1
        try:
            return execute(self._entry, barrier, self.task_index, run, touched=touched)
        finally:
            self._settle()

    # --- background materialization --------------------------------------------------

    def materialization_stats(self) -> LocalMaterializationStats:
        """Counters of this task's background materializations."""
        return self._entry.pool.stats()

    def wait_materializations(self, timeout: float | None = None) -> bool:
        """Wait until no background materialization of this task runs; False on timeout."""
        return self._entry.pool.wait(timeout)

    def close(self, *, wait: bool = True) -> None:
        """Stop background work (jobs not started are cancelled) and release the task;
        ``wait=False`` abandons uploads in flight (what a crash looks like)."""
        self._entry.abandon()
        self._entry.pool.shutdown(wait=wait)
        if wait:
            self._entry.writer.close()
        self.uploader.close()
        if self._own_dir:
            shutil.rmtree(self.local_dir, ignore_errors=True)

    # --- internals -------------------------------------------------------------------

    def _settle(self) -> None:
        """Remember each bucket's seq as control returns to the caller (what a change
        outside a batch would move)."""
        self._at_rest = {b: self.backend.seq(b) for b in self.bucket_range}

    def _restore(self, states: Mapping[int, BucketState], canonical: str | None) -> RestoreSummary:
        entry = self._entry
        try:
            locks = entry.take_locks()
            try:
                with entry.lock:
                    return restore_lineage(entry.backend, entry.resolver, states, canonical)
            finally:
                locks.release()  # an eager restore: nothing left running in the background
        finally:
            self._settle()
