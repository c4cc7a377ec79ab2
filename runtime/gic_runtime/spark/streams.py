"""Keyed and stateful streams: how a query is built, between ``GICJob.keyed`` and a
sink (:mod:`gic_runtime.spark.job` for the job, :mod:`gic_runtime.spark.query_run` for
running the query).

A :class:`KeyedStream` offers the processing styles (see :mod:`gic_runtime.processing`):
``process`` (a function per key, with timers), ``process_batches`` (vectorized over
Arrow), ``window`` (windows over event time) and ``aggregate`` (running aggregates, the
fast path). A :class:`StatefulStream` may take an initial state, then goes to a sink:
``to_parquet`` (transactional, exactly-once), ``foreach_batch`` (any code,
at-least-once with the batch id), or ``discard``.

Everything here is an immutable description; nothing runs until ``GICQuery.run``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame

from gic_runtime.errors import ConfigurationError
from gic_runtime.event_time import BatchTime, EventTimeSpec, parse_duration
from gic_runtime.processing import (
    AggregateProcessor,
    Aggregation,
    BatchFunction,
    BatchProcessor,
    BatchTimerFunction,
    Buckets,
    KeyFunction,
    NamesStateKeys,
    PerKeyProcessor,
    Processor,
    TimerFunction,
    aggregate_schema,
)
from gic_runtime.processing.window_specs import WindowSpec
from gic_runtime.processing.windows import WindowFunction, WindowProcessor, window_schema
from gic_runtime.sinks import FileSink
from gic_runtime.spark.initial_state import InitialInput, prepare_initial
from gic_runtime.spark.query_run import GICQuery, JobContext
from gic_runtime.spark.schemas import arrow_schema, arrow_schema_of
from gic_runtime.spark.spark_sinks import DiscardSink, ForeachBatchSink
from gic_runtime.state.backend import KeyedStateBackend

__all__ = ["JobContext", "KeyedStream", "StatefulStream", "to_uri"]


def to_uri(path: str) -> str:
    """A storage URI for ``path`` (plain paths become absolute ``file://`` URIs)."""
    if "://" in path:
        return path
    return Path(path).expanduser().resolve().as_uri()


@dataclass(frozen=True)
class KeyedStream:
    """A streaming DataFrame keyed by one column."""

    job: JobContext
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
class _DrainedNaming(_Drained):
    """A drained processor that names its state keys as its inner one does."""

    def state_keys(
        self, table: pa.Table, backend: KeyedStateBackend, buckets: Buckets = None
    ) -> dict[int, list[bytes]]:
        assert isinstance(self.inner, NamesStateKeys)
        return self.inner.state_keys(table, backend, buckets)


@dataclass(frozen=True)
class StatefulStream:
    """A keyed stream with its processor, waiting for a sink."""

    job: JobContext
    df: DataFrame
    key: str
    processor: Processor
    event_time: EventTimeSpec | None = None
    initial: InitialInput | None = None

    def with_initial_state(self, df: DataFrame, init: KeyFunction | None = None) -> StatefulStream:
        """Start a job that has no state yet (no checkpoint, no restore) from ``df``: the
        key column and value columns, each setting the value state it is named after
        (for ``aggregate``: the aggregate); or, with ``init``, ``init(key, rows,
        state)`` once per key to set any state. Checked against the query now; ignored
        once the job has a checkpoint."""
        prepared = prepare_initial(self.df, self.key, self.processor, df, init)
        return replace(self, initial=prepared)

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
        inner = self.processor
        drained = _DrainedNaming(inner) if isinstance(inner, NamesStateKeys) else _Drained(inner)
        return GICQuery(self, DiscardSink(), drained)
