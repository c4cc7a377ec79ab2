"""Running a stateful query: :class:`GICQuery` builds the driver and runs Spark's
streaming query with it until it stops, and returns a :class:`RunSummary`.

:meth:`GICQuery.run` runs the query until it is stopped (``max_batches``, a stop
request, a trigger that ends, SIGTERM, or an error); with timers and an available-now
trigger it adds the batch that fires what the input made due.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from gic_runtime.config import GICSettings
from gic_runtime.errors import GICError
from gic_runtime.event_time import EventTimeSpec
from gic_runtime.processing import Processor
from gic_runtime.sinks import Sink
from gic_runtime.spark.driver import BatchReport, Driver, StartInfo
from gic_runtime.spark.fingerprint import query_fingerprint
from gic_runtime.spark.initial_state import InitialInput
from gic_runtime.spark.startup import start_driver
from gic_runtime.spark.termination import (
    SIGTERM_REASON,
    TerminationSignal,
    bound_query_stop,
    control_loop,
)
from gic_runtime.storage.uri import StoreResolver


class QuerySource(Protocol):
    """What a query runs (:class:`~gic_runtime.spark.streams.StatefulStream`): its
    job, the input, the key, the processing, event time and initial state."""

    @property
    def job(self) -> JobContext: ...

    @property
    def df(self) -> DataFrame: ...

    @property
    def key(self) -> str: ...

    @property
    def processor(self) -> Processor: ...

    @property
    def event_time(self) -> EventTimeSpec | None: ...

    @property
    def initial(self) -> InitialInput | None: ...


class JobContext(Protocol):
    """What a query needs of its job."""

    @property
    def spark(self) -> SparkSession: ...

    @property
    def settings(self) -> GICSettings: ...

    @property
    def resolver(self) -> StoreResolver: ...


__all__ = ["GICQuery", "JobContext", "QuerySource", "RunSummary"]

_log = logging.getLogger(__name__)


REPORTS_KEPT = 1000
"""Batch reports a run keeps (:class:`RecentReports`): its latest ones only."""


class RecentReports:
    """The reports of a run's latest :data:`REPORTS_KEPT` batches and how many batches
    the run committed.

    Invariant: memory bounded whatever the run's length (a streaming driver runs for
    weeks; metrics and the status record carry the history)."""

    def __init__(self, keep: int = REPORTS_KEPT) -> None:
        self.recent: deque[BatchReport] = deque(maxlen=keep)
        self.count = 0

    def add(self, report: BatchReport) -> None:
        self.recent.append(report)
        self.count += 1


@dataclass
class RunSummary:
    """What :meth:`GICQuery.run` did."""

    job_id: str
    start: StartInfo
    reports: RecentReports = field(default_factory=RecentReports)
    stop_reason: str | None = None
    duration_s: float = 0.0

    @property
    def batches(self) -> tuple[BatchReport, ...]:
        """The reports of the run's latest batches, oldest first (at most
        :data:`REPORTS_KEPT`; :attr:`batches_run` counts them all)."""
        return tuple(self.reports.recent)

    @property
    def batches_run(self) -> int:
        """Batches the run committed."""
        return self.reports.count

    @property
    def last_checkpoint(self) -> int | None:
        recent = self.reports.recent
        return recent[-1].batch_id if recent else self.start.resumed_after


class GICQuery:
    """A runnable stateful query (see the module docstring)."""

    def __init__(self, stream: QuerySource, sink: Sink, processor: Processor) -> None:
        self.stream = stream
        self.sink = sink
        self.processor = processor
        self.driver: Driver | None = None

    def run(
        self,
        *,
        trigger: str | None = None,
        on_batch: Callable[[BatchReport], None] | None = None,
        fire_timers_at_end: bool = True,
    ) -> RunSummary:
        """Run until stopped. ``trigger``: ``None`` (next batch as soon as possible),
        ``"available-now"`` (everything available, then stop), or a processing-time
        interval such as ``"5 seconds"``. With timers and ``"available-now"``, once the
        input ended one more batch without rows fires the timers due at the watermark
        the input established (and at the processing time then), unless
        ``fire_timers_at_end=False``.

        Every checkpoint records this query's fingerprint (sources, processing, output
        schema; :mod:`gic_runtime.spark.fingerprint`). When the job's latest checkpoint
        was written by a different query, the run raises
        :class:`~gic_runtime.errors.QueryMismatchError` before anything is written,
        unless the settings allow it (``allow_query_change``)."""
        job = self.stream.job
        settings = job.settings
        reports = RecentReports()

        def collect(report: BatchReport) -> None:
            reports.add(report)
            _log.info(
                "batch %d: %d rows in, checkpoint %d committed in %.0f ms, %d bytes "
                "uploaded, local hits %.0f%%",
                report.batch_id,
                report.rows_in,
                report.batch_id,
                report.commit_ms,
                report.bytes_uploaded,
                report.local_hit_ratio * 100,
            )
            if on_batch is not None:
                on_batch(report)

        fingerprint = query_fingerprint(self.stream.df, self.stream.processor)
        with TerminationSignal() as term:
            started = time.perf_counter()
            driver = start_driver(
                job.spark,
                settings,
                self.stream.key,
                self.processor,
                self.sink,
                resolver=job.resolver,
                on_batch=collect,
                query=fingerprint,
                event_time=self.stream.event_time,
                initial=self.stream.initial,
            )
            self.driver = driver
            flush = fire_timers_at_end and trigger == "available-now"
            return self._run(driver, trigger, reports, term, started, flush_timers=flush)

    def _run(
        self,
        driver: Driver,
        trigger: str | None,
        reports: RecentReports,
        term: TerminationSignal,
        started: float,
        *,
        flush_timers: bool = False,
    ) -> RunSummary:
        settings = self.stream.job.settings
        start = driver.start_info
        _log.info("job %s started (epoch %d): %s", settings.job_id, start.epoch, _origin(start))
        summary = RunSummary(settings.job_id, start, reports)
        writer = (
            self.stream.df.writeStream.foreachBatch(driver.foreach_batch)
            .option("checkpointLocation", driver.spark_dir)
            .queryName(f"gic-{settings.job_id}")
        )
        if trigger == "available-now":
            writer = writer.trigger(availableNow=True)
        elif trigger:
            writer = writer.trigger(processingTime=trigger)
        error: BaseException | None = None
        if term.received_at is not None:  # SIGTERM while starting: stop before a batch
            driver.stop_between_batches(SIGTERM_REASON, time.monotonic())
            driver.close()
            summary.stop_reason = SIGTERM_REASON
            return summary
        try:
            driver.start_restore_ahead()  # beside the query's start, not before it
            bound_query_stop(self.stream.job.spark)
            query = writer.start()
        except BaseException as exc:
            driver.close(error=exc)
            raise
        try:
            summary.stop_reason = control_loop(driver, query, term)
            if flush_timers and driver.stop_reason is None and term.received_at is None:
                driver.fire_timers_at_end(self.stream.df.schema)
        except StreamingQueryException as exc:
            error = driver.failure or exc
            if isinstance(driver.failure, GICError):
                raise driver.failure from exc
            if driver.failure is not None:
                # Spark's own text starts with its wrapper, not with what went wrong.
                reason = f"{type(driver.failure).__name__}: {driver.failure}"
            else:
                cause = (getattr(exc, "desc", None) or str(exc)).strip().splitlines()
                reason = cause[0] if cause else type(exc).__name__
            failed = GICError(f"job {settings.job_id} failed: {reason}")
            if driver.failure is None:
                error = failed  # reported as raised, not as Spark's wrapper with its trace
            raise failed from exc
        except BaseException as exc:
            error = exc
            if query.isActive:
                query.stop()
            raise
        finally:
            driver.close(error=error)
            summary.duration_s = time.perf_counter() - started
        _log.info(
            "job %s stopped after %d batch(es) in %.1f s: %s",
            settings.job_id,
            reports.count,
            summary.duration_s,
            summary.stop_reason,
        )
        return summary


def _origin(start: StartInfo) -> str:
    """Where an attempt's state came from, for the log."""
    if start.own and start.resumed_after is not None:
        return f"resuming after its checkpoint {start.resumed_after}"
    if start.restored_from is not None:
        return f"restored from {start.restored_from}"
    return "empty state"
