"""The job author's API: keyed state over a streaming DataFrame, with GIC checkpoints.

::

    job = GICJob.create("word-count")                  # settings from env / file
    words = job.spark.readStream.text(src).select(F.explode(F.split("value", " ")).alias("word"))
    query = job.keyed(words, key="word").aggregate(count=count()).to_parquet(out)
    summary = query.run(trigger="available-now")

A :class:`KeyedStream` offers three processing styles (see :mod:`gic_runtime.processing`):
``process`` (a function per key), ``process_batches`` (vectorized over Arrow) and
``aggregate`` (running aggregates, the fast path). A :class:`StatefulStream` then goes
to a sink: ``to_parquet`` (transactional, exactly-once), ``foreach_batch`` (any code,
at-least-once with the batch id), or ``discard``. :meth:`GICQuery.run` runs the query
until it is stopped (``max_batches``, a stop request, a trigger that ends, or an
error) and returns a :class:`RunSummary`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from gic_runtime.config import GICSettings, env_var
from gic_runtime.errors import ConfigurationError, GICError
from gic_runtime.event_time import BatchTime, EventTimeSpec, parse_duration
from gic_runtime.processing import (
    AggregateProcessor,
    Aggregation,
    BatchFunction,
    BatchProcessor,
    BatchTimerFunction,
    Buckets,
    KeyFunction,
    PerKeyProcessor,
    Processor,
    TimerFunction,
    aggregate_schema,
)
from gic_runtime.processing.window_specs import WindowSpec
from gic_runtime.processing.windows import WindowFunction, WindowProcessor, window_schema
from gic_runtime.sinks import FileSink, Sink
from gic_runtime.spark.driver import BatchReport, Driver, StartInfo
from gic_runtime.spark.fingerprint import query_fingerprint
from gic_runtime.spark.placement import key_expression
from gic_runtime.spark.schemas import arrow_schema, arrow_schema_of, event_time_spec
from gic_runtime.spark.session import REQUIRED_CONF, local_spark, submitted_spark
from gic_runtime.spark.spark_sinks import DiscardSink, ForeachBatchSink
from gic_runtime.spark.startup import start_driver
from gic_runtime.spark.telemetry import record_failure
from gic_runtime.spark.termination import (
    SIGTERM_REASON,
    TerminationSignal,
    bound_query_stop,
    control_loop,
)
from gic_runtime.storage.s3_settings import S3Settings
from gic_runtime.storage.uri import StoreResolver

_log = logging.getLogger(__name__)


def to_uri(path: str) -> str:
    """A storage URI for ``path`` (plain paths become absolute ``file://`` URIs)."""
    if "://" in path:
        return path
    return Path(path).expanduser().resolve().as_uri()


@dataclass
class RunSummary:
    """What :meth:`GICQuery.run` did."""

    job_id: str
    start: StartInfo
    batches: list[BatchReport] = field(default_factory=list)
    stop_reason: str | None = None
    duration_s: float = 0.0

    @property
    def last_checkpoint(self) -> int | None:
        return self.batches[-1].batch_id if self.batches else self.start.resumed_after


class GICJob:
    """One GIC job: a Spark session, its settings and the storage they name."""

    def __init__(self, spark: SparkSession, settings: GICSettings) -> None:
        for key, value in REQUIRED_CONF.items():
            spark.conf.set(key, value)
        self.spark = spark
        self.settings = settings
        self.resolver = StoreResolver(S3Settings.from_env())

    @classmethod
    def create(cls, app_name: str = "gic-job", *, settings: GICSettings | None = None) -> GICJob:
        """Settings from the environment / ``GIC_CONFIG_FILE`` unless given; the active
        Spark session, else the one ``spark-submit`` configured, else a local one.

        ``app_name`` is also the job id unless the settings name one (``GIC_JOB_ID``,
        the settings file, ``gic run --job-id``), so two example apps run from the same
        directory keep separate checkpoints; it must then be a valid job id."""
        defaults = {"job_id": (app_name, "the app name given to GICJob.create")}
        try:
            resolved = settings or GICSettings.load(defaults=defaults)
        except ConfigurationError as exc:
            _record_settings_failure(defaults, exc)
            raise
        spark = SparkSession.getActiveSession()
        if spark is None:
            # spark-submit hands a Python app its JVM gateway through these variables.
            submitted = "PYSPARK_GATEWAY_PORT" in os.environ
            spark = submitted_spark(app_name) if submitted else local_spark(app_name)
        return cls(spark, resolved)

    def keyed(
        self,
        df: DataFrame,
        key: str,
        *,
        event_time: str | None = None,
        watermark: str | float | None = None,
        keep_late: bool = False,
    ) -> KeyedStream:
        """Key ``df`` (a streaming DataFrame) by the string or integer column ``key``.

        ``event_time`` names a timestamp column; ``watermark`` is the lateness bound
        (``"10 seconds"``, ``"5 minutes"``, or seconds as a number; 0 when left out).
        Each batch runs with the watermark the batches before it set (the largest
        event time seen minus the bound); its rows older than that are late: dropped
        and counted in ``BatchReport.late_rows``, or kept with ``keep_late=True``. The
        watermark is part of every checkpoint and savepoint."""
        if not df.isStreaming:
            raise ConfigurationError(
                "keyed() needs a streaming DataFrame (spark.readStream...); for a batch "
                "DataFrame use plain Spark"
            )
        key_expression(df, key)
        return KeyedStream(self, df, key, event_time_spec(df, event_time, watermark, keep_late))


@dataclass(frozen=True)
class KeyedStream:
    """A streaming DataFrame keyed by one column."""

    job: GICJob
    df: DataFrame
    key: str
    event_time: EventTimeSpec | None = None

    def _input_schema(self) -> pa.Schema:
        return arrow_schema_of(self.df)

    def process(
        self,
        fn: KeyFunction,
        output_schema: str | pa.Schema,
        *,
        on_timer: TimerFunction | None = None,
    ) -> StatefulStream:
        """``fn(key, rows, state)`` per key and batch (see
        :class:`~gic_runtime.processing.KeyState`). With ``on_timer``, keys may set
        timers (``state.timers.register(at, domain)``) and ``on_timer(key, timer,
        state)`` runs once per timer in the batch whose watermark (``"event"``) or
        processing time (``"processing"``) reaches it, returning rows like ``fn``."""
        schema = arrow_schema(self.job.spark, output_schema)
        processor = PerKeyProcessor(self.key, fn, schema, on_timer)
        return StatefulStream(self.job, self.df, self.key, processor, self.event_time)

    def process_batches(
        self,
        fn: BatchFunction,
        output_schema: str | pa.Schema,
        *,
        on_timers: BatchTimerFunction | None = None,
    ) -> StatefulStream:
        """``fn(table, states)`` once per task and batch (vectorized over Arrow). With
        ``on_timers``, ``states.timers`` registers timers by key, and ``on_timers(fired,
        states)`` runs once per task and batch with the due timers as a table (``key``,
        ``domain``, ``at``)."""
        schema = arrow_schema(self.job.spark, output_schema)
        processor = BatchProcessor(self.key, fn, schema, on_timers)
        return StatefulStream(self.job, self.df, self.key, processor, self.event_time)

    def window(
        self,
        spec: WindowSpec,
        *,
        lateness: str | float | None = None,
        process: WindowFunction | None = None,
        output_schema: str | pa.Schema | None = None,
        **aggregations: Aggregation,
    ) -> StatefulStream:
        """Windows over the stream's event time (``tumbling("1 minute")``,
        ``sliding("10 minutes", every="1 minute")``, ``session_window("30 seconds")``), each
        emitted once when the watermark reaches its end plus ``lateness`` (0 when left
        out): with ``aggregations`` (``count=count()``) a row ``key, window_start,
        window_end, ...``; with ``process=fn`` whatever ``fn(key, window, rows)``
        returns (``output_schema`` then says what). State and timers of a window are
        freed when it is emitted."""
        if self.event_time is None:
            raise ConfigurationError(
                "window() needs event time: keyed(df, key=..., event_time='<column>', "
                "watermark='<bound>')"
            )
        input_schema = self._input_schema()
        late = 0 if lateness is None else parse_duration(lateness, what="lateness")
        if process is not None:
            if aggregations or output_schema is None:
                raise ConfigurationError(
                    "window(..., process=fn) takes output_schema= and no aggregations"
                )
            schema = arrow_schema(self.job.spark, output_schema)
        else:
            if output_schema is not None:
                raise ConfigurationError("output_schema= goes with process=; aggregates set it")
            schema = window_schema(input_schema.field(self.key), aggregations, input_schema)
        processor = WindowProcessor(
            self.key, self.event_time.column, spec, schema, aggregations, process, late,
            input_schema,
        )  # fmt: skip
        return StatefulStream(self.job, self.df, self.key, processor, self.event_time)

    def aggregate(self, **aggregations: Aggregation) -> StatefulStream:
        """Running aggregates per key, e.g. ``aggregate(n=count(), total=sum_("x"))``;
        outputs the key and the new values of every key updated in the batch."""
        input_schema = self._input_schema()
        schema = aggregate_schema(input_schema.field(self.key), aggregations, input_schema)
        processor = AggregateProcessor(self.key, aggregations, schema)
        return StatefulStream(self.job, self.df, self.key, processor, self.event_time)


@dataclass(frozen=True)
class _Drained:
    """A processor whose output is computed and dropped (state only)."""

    inner: Processor

    @property
    def key_column(self) -> str:
        return self.inner.key_column

    @property
    def output_schema(self) -> pa.Schema:
        return self.inner.output_schema

    @property
    def has_timers(self) -> bool:
        return self.inner.has_timers

    @property
    def sweeps_ttl(self) -> bool:
        return self.inner.sweeps_ttl

    def __call__(
        self,
        table: pa.Table,
        backend: Any,
        batch_id: int,
        *,
        buckets: Buckets = None,
        time: BatchTime | None = None,
    ) -> Iterator[pa.Table]:
        for _ in self.inner(table, backend, batch_id, buckets=buckets, time=time):
            pass
        return iter(())

    def fire_timers(
        self, backend: Any, time: BatchTime, fired: Callable[[int], None] | None = None
    ) -> Iterator[pa.Table]:
        for _ in self.inner.fire_timers(backend, time, fired):
            pass
        return iter(())


@dataclass(frozen=True)
class StatefulStream:
    """A keyed stream with its processor, waiting for a sink."""

    job: GICJob
    df: DataFrame
    key: str
    processor: Processor
    event_time: EventTimeSpec | None = None

    def to_parquet(self, path: str) -> GICQuery:
        """Transactional Parquet output (exactly-once; see :class:`~gic_runtime.sinks.FileSink`)."""
        return GICQuery(self, FileSink(to_uri(path), self.job.resolver), self.processor)

    def foreach_batch(self, fn: Callable[[DataFrame, int], None]) -> GICQuery:
        """Call ``fn(output_df, batch_id)`` after each batch's checkpoint (at-least-once:
        after a crash the same batch id may come again)."""
        s = self.job.settings
        sink = ForeachBatchSink(
            self.job.spark,
            fn,
            schema=self.processor.output_schema,
            resolver=self.job.resolver,
            root=s.storage,
            job_id=s.job_id,
        )
        return GICQuery(self, sink, self.processor)

    def discard(self) -> GICQuery:
        """Keep state only; outputs are computed and dropped."""
        return GICQuery(self, DiscardSink(), _Drained(self.processor))


class GICQuery:
    """A runnable stateful query (see the module docstring)."""

    def __init__(self, stream: StatefulStream, sink: Sink, processor: Processor) -> None:
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
        reports: list[BatchReport] = []

        def collect(report: BatchReport) -> None:
            reports.append(report)
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
            )
            self.driver = driver
            flush = fire_timers_at_end and trigger == "available-now"
            return self._run(driver, trigger, reports, term, started, flush_timers=flush)

    def _run(
        self,
        driver: Driver,
        trigger: str | None,
        reports: list[BatchReport],
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
            len(reports),
            summary.duration_s,
            summary.stop_reason,
        )
        return summary


def _record_settings_failure(defaults: Mapping[str, tuple[Any, str]], error: GICError) -> None:
    """Record settings the driver cannot load as its launch's failure, when the
    environment still names the job's storage, id and fencing epoch (a launch by the
    operator always does; the refusal is then shown on its GICJob). Best effort."""
    names = (env_var("storage"), env_var("job_id"), env_var("epoch"))
    env = {name: os.environ[name] for name in names if name in os.environ}
    if env_var("epoch") not in env:
        return
    try:
        identity = GICSettings.load(env=env, defaults=defaults)
        if identity.epoch is not None:
            resolver = StoreResolver(S3Settings.from_env())
            record_failure(resolver, identity.storage, identity.job_id, identity.epoch, error)
    except Exception as exc:  # the settings error is what the user must see
        _log.warning("could not record the settings error in the job's status: %r", exc)


def _origin(start: StartInfo) -> str:
    """Where an attempt's state came from, for the log."""
    if start.own and start.resumed_after is not None:
        return f"resuming after its checkpoint {start.resumed_after}"
    if start.restored_from is not None:
        return f"restored from {start.restored_from}"
    return "empty state"
