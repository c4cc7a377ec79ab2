"""The driver's side of the per-batch protocol (docs/architecture.md §13.1) for one job
attempt.

:meth:`Driver.prepare` runs once before the streaming query starts: refuse the job's
checkpoints when a different query wrote them (their query fingerprint differs from
this query's, :mod:`gic_runtime.query`; refused before the job is claimed), claim a
fencing epoch, open the checkpoint timeline (own latest checkpoint, else the restore source),
finish publishing the latest checkpoint's sink output, clear stale staging, sweep
orphans, and lay Spark's checkpoint directory down from the start manifest. A start
that fails records why in the job's status record (state ``failed`` with a structured
``failure``, :mod:`gic_runtime.spark.telemetry`) before the error propagates.

:meth:`Driver.foreach_batch` is the query's ``foreachBatch`` hook. For batch N:

1. check fencing (a superseded driver raises :class:`~gic_runtime.errors.FencedError`
   and never writes a manifest); a batch at or below the last checkpoint is a replay:
   publish its output if needed and return without touching state;
2. build the barrier (expected lineage = the previous checkpoint's bucket states);
3. route rows to tasks, pin each task to the executor that holds its local copy
   (:mod:`gic_runtime.spark.locality`; on a cluster), and collect one ack per task
   (``mapInArrow`` then ``collect``: the stateful stage runs once, nothing is
   recomputed);
4. check fencing again, write manifest N once (create-if-absent) carrying Spark's
   progress for N and the staged output files, and check fencing once more after it
   landed (the timeline does both: a driver superseded meanwhile stops here, before
   publishing or deleting anything for N, and its manifest never counts if it landed
   after the newer launch listed the checkpoints);
5. publish N's output (idempotent), delete its staging, let the registry subsume old
   checkpoints off the critical path; every ``orphan_sweep_interval_s`` delete what
   failed task attempts left (:mod:`gic_runtime.checkpoint.live_sweep`: safe here,
   between batches); report metrics and status.

Savepoint and stop requests arrive through the durable control channel and are served
between batches by :meth:`Driver.serve_control` (see
:mod:`gic_runtime.coordination.savepoints`).

After a clean stop, :meth:`Driver.close` runs :meth:`Driver.clean_up`: it waits for the
background snapshots the last batches started and deletes the attempt's own segments and
snapshots no retained checkpoint references, so a stopped job holds only what its
retained checkpoints name.

Thread-safety: ``foreach_batch`` (Spark's callback thread) and ``serve_control`` (the
query's control loop) serialize on one lock; everything else is for the owner thread.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from gic_runtime import crashpoints
from gic_runtime.checkpoint.catalog import find_latest_checkpoint
from gic_runtime.checkpoint.live_sweep import LiveSweeper
from gic_runtime.checkpoint.manifest import StoredManifest
from gic_runtime.checkpoint.sweep import SweepResult
from gic_runtime.config import GICSettings, default_local_dir
from gic_runtime.control import ControlChannel
from gic_runtime.control.model import ControlRequest
from gic_runtime.coordination.barrier import Barrier, TaskAck
from gic_runtime.coordination.ranges import split_buckets
from gic_runtime.coordination.savepoints import read_engine_record, serve_request, stops_job
from gic_runtime.coordination.timeline import CheckpointTimeline, RestoreRequest
from gic_runtime.errors import GICError, StateError
from gic_runtime.fencing import Fence, claim_epoch
from gic_runtime.handles import BucketState
from gic_runtime.layout import job_dir
from gic_runtime.processing import Processor
from gic_runtime.query import OVERRIDE_SETTING, QueryFingerprint, check_resume, differences
from gic_runtime.sinks import Sink, staged_from_manifest
from gic_runtime.spark import checkpoint_dir
from gic_runtime.spark.locality import PlacementReport, StickyPlacement, is_local_master
from gic_runtime.spark.placement import partition_keys, route
from gic_runtime.spark.reports import BatchReport, StartInfo
from gic_runtime.spark.stage import (
    ACK_SCHEMA,
    DRAIN_SCHEMA,
    executor_error,
    make_drain,
    make_stage,
)
from gic_runtime.spark.telemetry import Telemetry, record_failure
from gic_runtime.storage.uri import StoreResolver, join

__all__ = ["BatchReport", "Driver", "StartInfo"]

_log = logging.getLogger(__name__)


class Driver:
    """Per-batch protocol of one attempt of one job (see the module docstring)."""

    def __init__(
        self,
        spark: SparkSession,
        settings: GICSettings,
        key: str,
        processor: Processor,
        sink: Sink,
        *,
        resolver: StoreResolver,
        on_batch: Callable[[BatchReport], None] | None = None,
        query: QueryFingerprint | None = None,
    ) -> None:
        self.spark = spark
        self.settings = settings
        self.key = key
        self.processor = processor
        self.sink = sink
        self.resolver = resolver
        self.on_batch = on_batch
        self.query = query
        self.root = settings.storage
        self.job_id = settings.job_id
        self.num_tasks = settings.num_tasks or int(
            spark.conf.get("spark.sql.shuffle.partitions") or "4"
        )
        self._lock = threading.Lock()
        self._stop_reason: str | None = None
        self._batches = 0
        self.timeline: CheckpointTimeline | None = None
        self.fence: Fence | None = None
        self.control = ControlChannel(resolver, self.root, self.job_id)
        self.telemetry: Telemetry | None = None
        self._expected: dict[int, BucketState] = {}
        self._canonical: str | None = None
        self._last_id: int | None = None
        self._part_keys: list[int] = []
        self.placement: StickyPlacement | None = None
        self._placement_report = PlacementReport(pinned=False, executors=0)
        self._sweeper: LiveSweeper | None = None
        self.start_info: StartInfo | None = None
        self.failure: BaseException | None = None

    # --- start ----------------------------------------------------------------------

    @property
    def spark_dir(self) -> str:
        return str(
            Path(self.settings.local_dir or default_local_dir()) / self.job_id / "spark-checkpoint"
        )

    @property
    def executor_local_dir(self) -> str:
        """What the barrier tells executors: the configured directory, else
        ``<tmp>/gic-local`` in local mode, else "" (each executor's scratch directory)."""
        if self.settings.local_dir:
            return self.settings.local_dir
        return default_local_dir() if is_local_master(self.spark.sparkContext.master or "") else ""

    def prepare(self) -> StartInfo:
        """Everything before the first batch (see the module docstring).

        When it fails, the failure is recorded in the job's status record (under the
        claimed epoch, else the one the settings give; without either nothing is
        recorded) and what it opened is closed, then the error propagates."""
        try:
            return self._prepare()
        except BaseException as exc:
            self._start_failed(exc)
            raise

    def _start_failed(self, error: BaseException) -> None:
        """Report ``error`` (best effort: nothing here may replace it) and close the
        timeline."""
        try:
            if self.telemetry is not None:
                self.telemetry.stopped(error)
            else:
                epoch = self.fence.epoch if self.fence is not None else self.settings.epoch
                if epoch is not None:
                    record_failure(self.resolver, self.root, self.job_id, epoch, error)
        except Exception as exc:
            _log.warning("job %s: could not record why it failed to start: %r", self.job_id, exc)
        finally:
            if self.timeline is not None:
                try:
                    self.timeline.close()
                except Exception as exc:
                    _log.warning("job %s: closing the timeline failed: %r", self.job_id, exc)

    def _prepare(self) -> StartInfo:
        s = self.settings
        self._check_query()
        owner = f"driver {socket.gethostname()}:{os.getpid()}"
        epoch = claim_epoch(self.resolver, self.root, self.job_id, epoch=s.epoch, claimed_by=owner)
        self.fence = Fence(self.resolver, self.root, self.job_id, epoch)
        restore = RestoreRequest(s.restore_source, s.restore_mode) if s.restore_source else None
        timeline = CheckpointTimeline(
            self.resolver,
            self.root,
            self.job_id,
            epoch=epoch,
            num_buckets=s.num_buckets,
            retain=s.retained_checkpoints,
            restore=restore,
            fence=self.fence,
        )
        self.timeline = timeline
        self.telemetry = Telemetry(self.resolver, s, epoch)
        start = timeline.start
        if not start.own and start.manifest is not None:
            self._note_restored_query(start.manifest.query)
        republished = 0
        if start.own and start.manifest is not None:
            republished = self._publish(start.manifest.checkpoint_id, dict(start.manifest.sink))
        self._clear_staging()
        sweep = timeline.sweep()
        manifest = start.manifest
        engine = manifest.engine if manifest is not None else None
        if start.canonical_uri is not None:
            engine = read_engine_record(self.resolver, start.canonical_uri)
        resumed = checkpoint_dir.lay_down(self.spark_dir, engine)
        if manifest is not None:
            self._expected = dict(manifest.buckets)
            self._last_id = manifest.checkpoint_id
        elif resumed is not None:
            self._last_id = resumed
        self._canonical = start.canonical_uri
        self._part_keys = partition_keys(self.num_tasks)
        self.placement = StickyPlacement(self.spark, self.num_tasks)
        self._sweeper = LiveSweeper(
            self.resolver,
            self.root,
            self.job_id,
            interval_s=s.orphan_sweep_interval_s,
            epoch=epoch,
        )
        self._sweeper.due()  # starts its interval
        lineage = timeline.lineage
        self.start_info = StartInfo(
            epoch=epoch,
            resumed_after=resumed,
            own=start.own,
            restored_from=lineage.source_uri if lineage else None,
            sweep=sweep,
            republished=republished,
            spark_checkpoint_dir=self.spark_dir,
        )
        self.telemetry.started(self.start_info, timeline)
        return self.start_info

    def _check_query(self) -> None:
        """Refuse, before the job is claimed (nothing written yet), to resume
        checkpoints a different query wrote (:func:`gic_runtime.query.check_resume`)."""
        if self.query is None:
            return
        latest = find_latest_checkpoint(self.resolver, self.root, self.job_id)
        if latest is None:
            return
        stored = latest.stored
        changed = check_resume(
            stored.manifest.query,
            self.query,
            job_id=self.job_id,
            job_dir=job_dir(self.root, self.job_id),
            manifest_uri=stored.uri,
            allow_change=self.settings.allow_query_change,
        )
        if changed:
            _log.warning(
                "job %s resumes checkpoints written by a different query (%s is set); differs: %s",
                self.job_id,
                OVERRIDE_SETTING,
                "; ".join(d.describe() for d in changed),
            )

    def _note_restored_query(self, recorded: Mapping[str, Any] | None) -> None:
        """A restore source written by a different query is named explicitly, so it is
        restored; the log says what differs."""
        stored = QueryFingerprint.from_json(recorded)
        if self.query is None or stored is None:
            return
        changed = differences(stored, self.query)
        if changed:
            _log.warning(
                "job %s restores state written by a different query; differs: %s",
                self.job_id,
                "; ".join(d.describe() for d in changed),
            )

    def _staging_root(self) -> str:
        return join(job_dir(self.root, self.job_id), "staging")

    def _clear_staging(self, batch_id: int | None = None) -> None:
        uri = self._staging_root()
        if batch_id is not None:
            uri = join(uri, f"{batch_id:012d}")
        store, prefix = self.resolver.resolve(uri)
        keys = [info.key for info in store.list(prefix.rstrip("/") + "/")]
        if keys:
            store.delete_many(keys)

    def _publish(self, batch_id: int, sink_info: Mapping[str, Any]) -> int:
        staged = staged_from_manifest(sink_info)
        if self.sink.published(batch_id):
            return 0
        crashpoints.hit("before_publish", batch_id)
        return self.sink.publish(batch_id, staged)

    # --- per batch ------------------------------------------------------------------

    @property
    def stop_reason(self) -> str | None:
        """Why the query should stop (``None``: keep running)."""
        return self._stop_reason

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
            timeline, fence = self.timeline, self.fence
            if timeline is None or fence is None:
                raise StateError("Driver.prepare() must run before the query starts")
            fence.check()
            if self._last_id is not None and batch_id <= self._last_id:
                self._replay(batch_id)
                return
            started = time.perf_counter()
            self_contained = timeline.must_be_self_contained or self.settings.full_snapshots
            barrier = Barrier(
                job_id=self.job_id,
                root=self.root,
                epoch=fence.epoch,
                checkpoint_id=batch_id,
                num_buckets=self.settings.num_buckets,
                num_tasks=self.num_tasks,
                local_dir=self.executor_local_dir,
                expected=self._expected if self._canonical is None else {},
                self_contained=self_contained,
                canonical_source=self._canonical,
                staging_uri=join(self._staging_root(), f"{batch_id:012d}"),
                settings=self.settings.task_settings(),
            )
            acks = self._run_stage(df, barrier)
            stage_done = time.perf_counter()
            crashpoints.hit("after_acks", batch_id)
            states = self._merge(acks, barrier)
            staged = [f for a in acks for f in a.outputs]
            engine = checkpoint_dir.capture(self.spark_dir, batch_id)
            sink_info = {**self.sink.describe(), "staged": [f.to_json() for f in staged]}
            manifest_started = time.perf_counter()
            query = self.query.to_json() if self.query is not None else None
            stored, _ = timeline.commit(
                batch_id, states, engine=engine, sink=sink_info, query=query
            )
            manifest_ms = (time.perf_counter() - manifest_started) * 1000
            self._expected, self._canonical, self._last_id = dict(states), None, batch_id
            crashpoints.hit("after_manifest", batch_id)
            published = self._publish(batch_id, sink_info)
            self._clear_staging(batch_id)
            swept = self._live_sweep(timeline)
            report = self._report(
                acks,
                stored=stored,
                started=started,
                stage_done=stage_done,
                manifest_ms=manifest_ms,
                published=published,
                swept=swept,
            )
            self._batches += 1
            if self.telemetry is not None:
                self.telemetry.batch(report, timeline)
            if self.on_batch is not None:
                self.on_batch(report)
            max_batches = self.settings.max_batches
            if max_batches is not None and self._batches >= max_batches:
                self._stop_reason = f"max_batches={max_batches} reached"

    def _replay(self, batch_id: int) -> None:
        """Batch ``batch_id`` is already part of the state: never apply it again; only
        make sure its output was published (own timeline)."""
        timeline = self.timeline
        assert timeline is not None
        for stored in timeline.retained():
            if stored.checkpoint_id == batch_id:
                self._publish(batch_id, dict(stored.manifest.sink))
        _log.info("batch %d is already checkpointed; skipped (replay)", batch_id)

    def _run_stage(self, df: DataFrame, barrier: Barrier) -> list[TaskAck]:
        routed = route(df, self.key, barrier.num_buckets, self._part_keys)
        report = PlacementReport(pinned=False, executors=0)
        if self.placement is not None:
            routed, report = self.placement.pin(routed)
        try:
            rows = routed.mapInArrow(make_stage(barrier, self.processor), ACK_SCHEMA).collect()
        except Exception as exc:
            raise executor_error(exc) from exc
        acks = [TaskAck.from_bytes(bytes(r["ack"])) for r in rows]
        if self.placement is not None:
            report = self.placement.observe(report, acks)
        self._placement_report = report
        return acks

    def _merge(self, acks: list[TaskAck], barrier: Barrier) -> dict[int, BucketState]:
        by_task: dict[int, TaskAck] = {}
        for ack in acks:
            if (ack.job_id, ack.epoch, ack.checkpoint_id) != (
                barrier.job_id,
                barrier.epoch,
                barrier.checkpoint_id,
            ):
                raise StateError(
                    f"ack of task {ack.task_index} is for job {ack.job_id} epoch {ack.epoch} "
                    f"batch {ack.checkpoint_id}, not this barrier's"
                )
            if ack.task_index in by_task:
                raise StateError(f"two acks for state task {ack.task_index}")
            by_task[ack.task_index] = ack
        missing = sorted(set(range(barrier.num_tasks)) - set(by_task))
        if missing:
            raise StateError(f"no ack from state tasks {missing}; the batch is not checkpointed")
        states: dict[int, BucketState] = {}
        for index, ack in by_task.items():
            owned = barrier.bucket_range(index)
            if set(ack.states) != set(owned):
                raise StateError(
                    f"task {index} acked buckets {sorted(ack.states)[:5]}..., not its range "
                    f"[{owned.start}, {owned.stop})"
                )
            states.update(ack.states)
        return states

    def _report(
        self,
        acks: list[TaskAck],
        *,
        stored: StoredManifest,
        started: float,
        stage_done: float,
        manifest_ms: float,
        published: int,
        swept: SweepResult | None = None,
    ) -> BatchReport:
        stats = [a.stats for a in acks]
        changelog = sum(s.changelog_bytes for s in stats)
        snapshots = sum(s.snapshot_bytes for s in stats)
        slowest_flush = max((s.checkpoint_s for s in stats), default=0.0)
        return BatchReport(
            batch_id=stored.checkpoint_id,
            rows_in=sum(s.rows_in for s in stats),
            rows_out=sum(s.rows_out for s in stats),
            tasks=len(acks),
            batch_ms=(time.perf_counter() - started) * 1000,
            commit_ms=slowest_flush * 1000 + manifest_ms,
            bytes_uploaded=changelog + snapshots,
            changelog_bytes=changelog,
            snapshot_bytes=snapshots,
            local_hits=sum(s.local_hits for s in stats),
            restored=sum(s.restored for s in stats),
            empty=sum(s.empty for s in stats),
            materializations_adopted=sum(s.materializations_adopted for s in stats),
            materializations_started=sum(s.materializations_started for s in stats),
            self_contained=any(s.snapshot_bytes for s in stats),
            manifest_uri=stored.uri,
            published_rows=published,
            orphans_deleted=swept.deleted if swept is not None else 0,
            orphan_bytes_deleted=swept.deleted_bytes if swept is not None else 0,
            executors=self._placement_report.executors,
            pinned=self._placement_report.pinned,
            moved_ranges=tuple(
                (r.start, r.stop) for r in (self._range_of(t) for t in self._placement_report.moved)
            ),
        )

    def _live_sweep(self, timeline: CheckpointTimeline) -> SweepResult | None:
        """Step 5's live sweep when it is due; a failure is logged and retried at the
        next interval (orphans cost storage, never correctness)."""
        sweeper = self._sweeper
        if sweeper is None or not sweeper.due():
            return None
        try:
            result = sweeper.sweep(timeline.retained(), timeline.policy)
        except GICError as exc:
            _log.warning("live orphan sweep of job %s failed: %s", self.job_id, exc)
            return None
        if result.deleted:
            _log.info(
                "live orphan sweep of job %s deleted %d objects (%d bytes)",
                self.job_id,
                result.deleted,
                result.deleted_bytes,
            )
        return result

    def _range_of(self, task: int) -> range:
        return split_buckets(self.settings.num_buckets, self.num_tasks, task)

    # --- control --------------------------------------------------------------------

    def serve_control(self) -> str | None:
        """Serve pending savepoint/stop requests from the latest checkpoint (between
        batches); returns the stop reason once the query should stop."""
        with self._lock:
            timeline, fence = self.timeline, self.fence
            if timeline is None or fence is None or self._stop_reason is not None:
                return self._stop_reason
            fence.check()
            if self.telemetry is not None:
                self.telemetry.heartbeat()
            state = self.control.poll()
            requests: list[ControlRequest] = [*state.savepoints]
            if state.stop is not None:
                requests.append(state.stop)
            for request in requests:
                outcome = serve_request(self.resolver, timeline, self.control, request)
                if outcome is None:
                    break
                if self.telemetry is not None:
                    self.telemetry.savepoint(request, outcome)
                if stops_job(request):
                    self._stop_reason = f"stopped by request {request.request_id}"
                    break
            return self._stop_reason

    def clean_up(self) -> SweepResult | None:
        """After a clean stop: wait until the background snapshots the attempt's tasks
        started have finished on the executors (at most ``checkpoint_timeout_s``; a
        Spark stage placed like the state tasks, :func:`~gic_runtime.spark.stage.
        make_drain`), then delete the attempt's segments and snapshots no retained
        checkpoint references
        (:meth:`~gic_runtime.coordination.timeline.CheckpointTimeline.sweep_after_stop`).
        Only when the attempt committed a batch; a failure is logged, and whatever stays
        is the next start's (or ``gic gc``'s) to sweep."""
        with self._lock:
            timeline, fence = self.timeline, self.fence
            if timeline is None or fence is None or self._batches == 0:
                return None
            try:
                in_flight = self._drain(fence.epoch)
                if in_flight:
                    _log.warning(
                        "job %s: %d background snapshot(s) still uploading after %.0f s; "
                        "the next start's sweep removes them",
                        self.job_id,
                        in_flight,
                        self.settings.checkpoint_timeout_s,
                    )
                result = timeline.sweep_after_stop()
            except Exception as exc:
                _log.warning("clean-up after the stop of job %s failed: %s", self.job_id, exc)
                return None
            if result.deleted:
                _log.info(
                    "job %s stopped: deleted %d unreferenced object(s) of epoch %d (%d bytes)",
                    self.job_id,
                    result.deleted,
                    fence.epoch,
                    result.deleted_bytes,
                )
            return result

    def _drain(self, epoch: int) -> int:
        """Run the drain stage; returns the buckets still materializing at its end."""
        barrier = Barrier(
            job_id=self.job_id,
            root=self.root,
            epoch=epoch,
            checkpoint_id=self._last_id or 0,
            num_buckets=self.settings.num_buckets,
            num_tasks=self.num_tasks,
            local_dir=self.executor_local_dir,
            settings=self.settings.task_settings(),
        )
        n = self.num_tasks
        df = self.spark.range(0, n, 1, n)  # partition i holds one row, as state task i
        if self.placement is not None:
            df, _ = self.placement.pin(df)
        drain = make_drain(barrier, self.settings.checkpoint_timeout_s)
        rows = df.mapInArrow(drain, DRAIN_SCHEMA).collect()
        return sum(int(r["in_flight"]) for r in rows)

    def request_stop(self, reason: str) -> None:
        with self._lock:
            self._stop_reason = self._stop_reason or reason

    def close(self, *, error: BaseException | None = None) -> None:
        """Record the final status and stop background work; after a clean stop
        (``error`` is None, the query has stopped) first remove what the attempt would
        leave unreferenced (:meth:`clean_up`)."""
        if error is None:
            self.clean_up()
        if self.telemetry is not None:
            self.telemetry.stopped(error)
        if self.timeline is not None:
            self.timeline.close()
