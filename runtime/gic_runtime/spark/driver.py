"""The driver's side of the per-batch protocol (docs/architecture.md §13.1) for one job
attempt.

:func:`gic_runtime.spark.startup.start_driver` builds a :class:`Driver` complete, once
before the streaming query starts: it refuses checkpoints a different query wrote
(:mod:`gic_runtime.query`; before the job is claimed), claims a fencing epoch, opens the
checkpoint timeline (own latest checkpoint, else the restore source) and takes it to the
first batch (Spark's checkpoint directory, the output's claim, republishing, staging,
the orphan sweep). A driver therefore always has its timeline, fence and telemetry; a
start that fails records why in the job's status record and no driver exists. Right
before the query starts, :meth:`Driver.start_restore_ahead` submits the restore of the
executors' local copies beside it (:mod:`gic_runtime.spark.restore_ahead`).

:meth:`Driver.foreach_batch` is the query's ``foreachBatch`` hook. For batch N: a batch
at or below the last checkpoint is a replay (check fencing, publish its output if
needed, touch no state); else build the barrier (expected lineage = the previous
checkpoint's bucket states); run the stateful stage once on executors pinned to their
local copies (:mod:`gic_runtime.spark.locality`) and merge one ack per task
(:mod:`gic_runtime.spark.batch_acks`); write manifest N once, fenced before and after
(the check before it runs beside the stage; a superseded driver stops before
publishing or deleting anything); publish N's output
(:mod:`gic_runtime.spark.batch_output`), subsume old checkpoints, let the timeline sweep
what failed task attempts left every ``orphan_sweep_interval_s``
(:meth:`~gic_runtime.driver.timeline.CheckpointTimeline.live_sweep`), and report metrics
and status.

Savepoint and stop requests are served between batches by :meth:`Driver.serve_control`
(:mod:`gic_runtime.spark.control_requests`). SIGTERM stops the attempt through
:meth:`Driver.stop_between_batches` (:mod:`gic_runtime.spark.termination`): between
batches, or with the running batch abandoned (replayed by the next launch) once
``stop_timeout_s`` has passed. After a clean stop :meth:`Driver.close` runs
:meth:`Driver.clean_up`, so a stopped job holds only what its retained checkpoints name.

Thread-safety: ``foreach_batch`` (Spark's callback thread) and ``serve_control`` (the
query's control loop) serialize on one lock, which ``serve_control`` takes only to act
(its reads of storage run beside a batch); everything else is for the owner thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from gic_runtime import crashpoints
from gic_runtime.checkpoint.sweep import SweepResult
from gic_runtime.config import GICSettings
from gic_runtime.control import ControlChannel
from gic_runtime.control.auth import ControlKey, RequestGuard
from gic_runtime.coordination.barrier import Barrier, TaskAck
from gic_runtime.driver.timeline import CheckpointTimeline
from gic_runtime.errors import FencedError
from gic_runtime.event_time import NO_PROGRESS, EventTimeProgress, EventTimeSpec
from gic_runtime.processing import Processor
from gic_runtime.query import QueryFingerprint
from gic_runtime.spark import checkpoint_dir
from gic_runtime.spark.batch_acks import batch_report, collect_acks, max_event_time, merge_acks
from gic_runtime.spark.batch_output import BatchOutput
from gic_runtime.spark.cleanup import clean_up_after_stop, run_drain
from gic_runtime.spark.control_requests import serve_pending
from gic_runtime.spark.initial_state import InitialInput, with_initial
from gic_runtime.spark.locality import PlacementReport, StickyPlacement, is_local_master
from gic_runtime.spark.placement import partition_keys
from gic_runtime.spark.reports import BatchReport, StartInfo
from gic_runtime.spark.restore_ahead import RestoreAhead
from gic_runtime.spark.stage import selects_keys
from gic_runtime.spark.telemetry import Telemetry
from gic_runtime.storage.uri import StoreResolver

__all__ = ["BatchReport", "Driver", "StartInfo"]

_log = logging.getLogger(__name__)
_ABANDONED_WAIT_S = 2.0
"""How long :meth:`Driver.close` waits for an abandoned batch before the final report."""


class Driver:
    """Per-batch protocol of one attempt of one job (see the module docstring)."""

    def __init__(
        self,
        spark: SparkSession,
        settings: GICSettings,
        key: str,
        processor: Processor,
        *,
        resolver: StoreResolver,
        timeline: CheckpointTimeline,
        telemetry: Telemetry,
        output: BatchOutput,
        placement: StickyPlacement,
        start_info: StartInfo,
        num_tasks: int,
        on_batch: Callable[[BatchReport], None] | None = None,
        query: QueryFingerprint | None = None,
        event_time: EventTimeSpec | None = None,
        event_time_progress: EventTimeProgress = NO_PROGRESS,
        initial: InitialInput | None = None,
        control_key: ControlKey | None = None,
    ) -> None:
        """A driver over what :func:`~gic_runtime.spark.startup.start_driver` opened:
        ``timeline`` taken to the first batch, ``telemetry`` that reported the start,
        ``output`` claimed, and the ``start_info`` that says where the attempt starts.
        With ``control_key`` (``GIC_CONTROL_KEY``) it honours only control requests
        authenticated with it (:mod:`gic_runtime.control.auth`)."""
        self.spark = spark
        self.settings = settings
        self.key = key
        self.processor = processor
        self.resolver = resolver
        self.on_batch = on_batch
        self.query = query
        self.event_time = event_time
        self.initial = initial
        self._progress = event_time_progress
        self.root = settings.storage
        self.job_id = settings.job_id
        self.spark_dir = start_info.spark_checkpoint_dir
        self.num_tasks = num_tasks
        self.timeline = timeline
        self.fence = timeline.fence
        self.control = ControlChannel(resolver, self.root, self.job_id)
        self._guard = RequestGuard(self.root, self.job_id, control_key, wall=time.time)
        self.telemetry = telemetry
        self.placement = placement
        self.start_info = start_info
        self.failure: BaseException | None = None
        self._output = output
        self._part_keys = partition_keys(num_tasks)
        self._lock = threading.Lock()
        self._stop_reason: str | None = None
        self._stop_deadline: float | None = None  # monotonic; a SIGTERM's bound
        self._abandoned: str | None = None  # why the running batch was abandoned
        self._batches = 0
        self._last_report: BatchReport | None = None
        self._placement_report = PlacementReport(pinned=False, executors=0)
        # The lineage the first batch builds on: the start manifest's bucket states, or
        # a canonical savepoint to import (then no expected states), or empty state.
        manifest = timeline.start.manifest
        self._expected = dict(manifest.buckets) if manifest is not None else {}
        self._canonical = timeline.start.canonical_uri
        self._last_id = manifest.checkpoint_id if manifest is not None else start_info.resumed_after
        self.restore_ahead: RestoreAhead | None = None

    # --- start ----------------------------------------------------------------------

    @property
    def executor_local_dir(self) -> str:
        """What the barrier tells executors: the configured directory, else in local mode
        :func:`~gic_runtime.config.default_local_dir` of the storage (beside a ``file://``
        root), else "" (each executor's scratch directory)."""
        if self.settings.local_dir or is_local_master(self.spark.sparkContext.master or ""):
            return self.settings.resolved_local_dir
        return ""

    def start_restore_ahead(self) -> RestoreAhead | None:
        """With ``restore_at_start`` and a lineage to restore (the start manifest's
        bucket states), submit the restore of the executors' local copies as a Spark job
        of its own (:mod:`gic_runtime.spark.restore_ahead`), before the query starts;
        ``None`` when there is nothing to restore or the setting is off, or when the
        first batch reads the state keys it needs instead (``restore_select_keys`` with
        a processor that names them: :func:`~gic_runtime.spark.stage.selects_keys`;
        docs/architecture.md §6.3): a restore ahead would take the buckets' locks and make
        that batch wait for all of them."""
        if not self.settings.restore_at_start or not self._expected or self._canonical:
            return None
        if self.first_batch_selects:
            _log.info(
                "job %s: the first batch reads the state keys it needs; its buckets are "
                "restored once its checkpoint is durable",
                self.job_id,
            )
            return None
        with self._lock:
            barrier = self._barrier(self.fence.epoch, self._last_id or 0, expected=self._expected)
            ahead = RestoreAhead(self.spark, barrier, self.job_id)
            try:
                ahead.start(self.placement)
            except Exception as exc:  # the first batch restores what it needs itself
                _log.warning(
                    "job %s: could not restore ahead of the first batch: %s", self.job_id, exc
                )
                return None
            self.restore_ahead = ahead
        return ahead

    @property
    def first_batch_selects(self) -> bool:
        """Whether a batch that finds buckets to rebuild reads just the keys it needs
        (``restore_select_keys``, the background restore, a processor that names its
        keys)."""
        s = self.settings
        return s.restore_select_keys and s.restore_background and selects_keys(self.processor)

    # --- per batch ------------------------------------------------------------------

    @property
    def stop_reason(self) -> str | None:
        """Why the query should stop (``None``: keep running)."""
        return self._stop_reason or self._abandoned

    def foreach_batch(self, df: DataFrame, batch_id: int) -> None:
        """Spark's ``foreachBatch`` callback (see the module docstring). A failure is
        kept in :attr:`failure` (Spark only passes its text on) and re-raised."""
        try:
            self._batch(df, batch_id)
        except BaseException as exc:
            self.failure = self.failure or exc
            raise

    def _batch(self, df: DataFrame, batch_id: int) -> None:
        with self._lock:
            if self._stop_reason is not None:
                return
            timeline = self.timeline
            if self._last_id is not None and batch_id <= self._last_id:
                self.fence.check()
                self._replay(batch_id)
                return
            started = time.perf_counter()
            # Beside the stage; it stands for the check before the manifest write.
            fence_checked = self.fence.check_in_background()
            self_contained = timeline.must_be_self_contained or self.settings.full_snapshots
            barrier = self._barrier(
                self.fence.epoch,
                batch_id,
                expected=self._expected if self._canonical is None else {},
                self_contained=self_contained,
                canonical_source=self._canonical,
                staging_uri=self._output.staging_uri(batch_id),
                watermark_us=self._progress.watermark_us,
            )
            fresh = self._last_id is None and not self._expected and self._canonical is None
            if fresh and self.initial is not None:
                df = with_initial(df, self.initial)  # a job without state: its first batch
            try:
                acks = self._run_stage(df, barrier)
            except Exception as exc:
                fenced = fence_checked.exception()
                if isinstance(fenced, FencedError):  # superseded: that is the news
                    raise fenced from exc
                raise
            crashpoints.hit("after_acks", batch_id)
            states = merge_acks(acks, barrier)
            engine = checkpoint_dir.capture(self.spark_dir, batch_id)
            sink_info = self._output.sink_section(f for a in acks for f in a.outputs)
            manifest_started = time.perf_counter()
            query = self.query.to_json() if self.query is not None else None
            progress = self._progress
            if self.event_time is not None:
                progress = progress.advance(max_event_time(acks), self.event_time.delay_us)
            stored, _ = timeline.commit(
                batch_id,
                states,
                engine=engine,
                sink=sink_info,
                query=query,
                event_time=progress,
                fence_checked=fence_checked,
            )
            self._progress = progress
            manifest_ms = (time.perf_counter() - manifest_started) * 1000
            self._expected, self._canonical, self._last_id = dict(states), None, batch_id
            crashpoints.hit("after_manifest", batch_id)
            published = self._output.publish(batch_id, sink_info)
            self._output.clear_staging(batch_id)
            swept = timeline.live_sweep()
            report = batch_report(
                acks,
                stored=stored,
                started=started,
                manifest_ms=manifest_ms,
                published=published,
                placement=self._placement_report,
                num_buckets=self.settings.num_buckets,
                num_tasks=self.num_tasks,
                swept=swept,
            )
            self._batches += 1
            self._last_report = report
            self.telemetry.batch(report, timeline)
            if self.on_batch is not None:
                self.on_batch(report)
            max_batches = self.settings.max_batches
            if max_batches is not None and self._batches >= max_batches:
                self._stop_reason = f"max_batches={max_batches} reached"

    def fire_timers_at_end(self, schema: StructType) -> BatchReport | None:
        """After the input ended (an available-now query finished), run one batch without
        rows so that the timers due at the watermark the last batch established, and at
        the processing time now, fire. It is a checkpoint like any other (Spark's
        directory records it as a batch that read nothing new). ``None`` (nothing run)
        when the processor has no timers, no batch was ever checkpointed, the attempt is
        stopping, or Spark planned another batch already; ``schema`` is the input's."""
        if not self.processor.has_timers or self._last_id is None or self.stop_reason:
            return None
        batch_id = self._last_id + 1
        if not checkpoint_dir.add_idle_batch(self.spark_dir, self._last_id):
            _log.warning("Spark's checkpoint directory has no room for a timer batch")
            return None
        before = self._batches
        self.foreach_batch(self.spark.createDataFrame([], schema), batch_id)
        return self._last_report if self._batches > before else None

    def _replay(self, batch_id: int) -> None:
        """Batch ``batch_id`` is already part of the state: never apply it again; only
        make sure its output was published (own timeline)."""
        for stored in self.timeline.retained():
            if stored.checkpoint_id == batch_id:
                self._output.publish(batch_id, dict(stored.manifest.sink))
        _log.info("batch %d is already checkpointed; skipped (replay)", batch_id)

    def _run_stage(self, df: DataFrame, barrier: Barrier) -> list[TaskAck]:
        acks, self._placement_report = collect_acks(
            df, barrier, key=self.key, part_keys=self._part_keys, processor=self.processor,
            placement=self.placement, event_time=self.event_time,
            initial=self.initial.state if self.initial is not None else None,
        )  # fmt: skip
        return acks

    # --- control --------------------------------------------------------------------

    def serve_control(self) -> str | None:
        """Serve pending savepoint/stop requests from the latest checkpoint (between
        batches); returns the stop reason once the query should stop. Raises
        :class:`~gic_runtime.errors.FencedError` once a newer launch claimed the job.

        The fence check and the look for pending requests only read storage, so they
        run without the lock: a batch never waits for their requests. The lock is taken
        only when a request is pending or an idle driver's status record is due for its
        heartbeat; while a batch runs it waits for it ``control_poll_s`` at most, then
        returns ``None``."""
        if self._stop_reason is not None:
            return self._stop_reason
        self.fence.check()
        if self.control.poll().empty and not self.telemetry.heartbeat_due():
            return None
        if not self._lock.acquire(timeout=self.settings.control_poll_s):
            return None
        try:
            if self._stop_reason is not None:
                return self._stop_reason
            self.telemetry.heartbeat()
            self._stop_reason = serve_pending(
                self.resolver, self.timeline, self.control, self.telemetry, self._guard
            )
            return self._stop_reason
        finally:
            self._lock.release()

    def clean_up(self) -> SweepResult | None:
        """After a clean stop: wait until the background snapshots the attempt's tasks
        started have finished on the executors (at most ``checkpoint_timeout_s``), then
        delete the attempt's segments and snapshots no retained checkpoint references
        (:mod:`gic_runtime.spark.cleanup`). Only when the attempt committed a batch; a
        failure is logged, and whatever stays is the next start's (or ``gic gc``'s) to
        sweep."""
        with self._lock:
            timeout = self.settings.checkpoint_timeout_s
            if self._stop_deadline is not None:  # what is left of a SIGTERM's budget
                timeout = min(timeout, self._stop_deadline - time.monotonic())
            if self._batches == 0 or timeout <= 0:
                return None
            epoch = self.fence.epoch
            return clean_up_after_stop(
                self.timeline,
                job_id=self.job_id,
                epoch=epoch,
                drain=lambda: run_drain(
                    self.spark, self._barrier(epoch, self._last_id or 0), self.placement, timeout
                ),
                timeout_s=timeout,
            )

    def _barrier(self, epoch: int, checkpoint_id: int, **options: Any) -> Barrier:
        """The barrier of ``checkpoint_id`` for this attempt's tasks (``options``: the
        batch's expected lineage, snapshot and staging options)."""
        return Barrier.build(
            job_id=self.job_id,
            root=self.root,
            epoch=epoch,
            checkpoint_id=checkpoint_id,
            num_buckets=self.settings.num_buckets,
            num_tasks=self.num_tasks,
            local_dir=self.executor_local_dir,
            settings=self.settings.task_settings(),
            **options,
        )

    def stop_between_batches(self, reason: str, deadline: float) -> bool:
        """Stop for ``reason`` once no batch runs, waiting until ``deadline``
        (monotonic) at most; the clean-up then gets what is left until ``deadline``.
        ``False``: a batch still runs, and is marked abandoned (:meth:`close` skips the
        clean-up; the next launch replays the batch)."""
        if not self._lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            self._stop_deadline, self._abandoned = deadline, reason
            return False
        try:
            self._stop_reason = self._stop_reason or reason
            self._stop_deadline = deadline
        finally:
            self._lock.release()
        return True

    def close(self, *, error: BaseException | None = None) -> None:
        """Record the final status and stop background work; after a clean stop
        (``error`` is None, the query has stopped, no batch was abandoned) first remove
        what the attempt would leave unreferenced (:meth:`clean_up`)."""
        if self.restore_ahead is not None:
            self.restore_ahead.cancel()
        if error is None and self._abandoned is None:
            self.clean_up()
        # An abandoned batch may still be finishing (its query's stop timed out): wait
        # for it briefly, so that its status write cannot interleave with the final one.
        held = self._abandoned is not None and self._lock.acquire(timeout=_ABANDONED_WAIT_S)
        try:
            self.telemetry.stopped(error, reason=self.stop_reason)
        finally:
            if held:
                self._lock.release()
        self.timeline.close()
