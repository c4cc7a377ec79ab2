"""W3's Spark baselines: the session logic as ``StatefulProcessor`` classes for Spark's two
Python APIs of arbitrary state (v2), with event-time timers on the RocksDB state store.

``transformWithStateInPandas`` gets each key's rows as pandas frames
(:class:`PandasSessions`); ``transformWithState`` gets them as ``Row`` objects
(:class:`RowSessions`). Both implement exactly GIC's logic
(:mod:`bench.streaming.gic_timed`): the key's rows, in time order, extend its session or,
after more than the gap, close it and open the next; the key's event-time timer moves
to ``end + gap`` (``deleteTimer`` / ``registerTimer``); an expired timer emits the
session and clears it. Times are integer microseconds (the input's ``t`` column), the
timer in milliseconds (every event time is a whole millisecond, so nothing is rounded).
The output is ``key, start_us, end_us, events``; :func:`sessions_query` turns the
times back into timestamps, so the rows compare one to one with GIC's.

Imported by Spark's Python workers (executors import ``bench`` through ``PYTHONPATH``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle
from pyspark.sql.types import LongType, StructField, StructType

from bench.streaming import timed_workloads
from bench.streaming.spark_processors import PANDAS, ROW, TwsProcessor

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

STATE_SCHEMA = StructType(
    [
        StructField("start", LongType()),
        StructField("end", LongType()),
        StructField("events", LongType()),
    ]
)
OUTPUT = "key long, start_us long, end_us long, events long"
GAP_US = timed_workloads.SESSION_GAP_MS * 1000


def advance(
    current: list[int] | None, times: list[int], gap_us: int
) -> tuple[list[list[int]], list[int]]:
    """The sessions ``times`` (sorted) close, and the key's open session after them."""
    closed: list[list[int]] = []
    for t in times:
        if current is not None and t > current[1] + gap_us:
            closed.append(current)
            current = None
        if current is None:
            current = [t, t, 0]
        current = [min(current[0], t), max(current[1], t), current[2] + 1]
    assert current is not None  # a key comes with at least one row
    return closed, current


class _Sessions(TwsProcessor):
    """The state and timer handling both APIs share."""

    column = "t"
    outputs = ("start_us", "end_us", "events")

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.session = handle.getValueState("session", STATE_SCHEMA)

    def on_rows(self, values: list[Any]) -> list[tuple[Any, ...]]:
        current = None
        if self.session.exists():
            stored = self.session.get()
            assert stored is not None
            current = [int(v) for v in stored]
            self.handle.deleteTimer((current[1] + GAP_US) // 1000)
        closed, current = advance(current, sorted(int(t) for t in values), GAP_US)
        self.session.update(tuple(current))
        self.handle.registerTimer((current[1] + GAP_US) // 1000)
        return [tuple(s) for s in closed]

    def on_timer(self) -> list[tuple[Any, ...]]:
        if not self.session.exists():
            return []
        stored = self.session.get()
        self.session.clear()
        return [] if stored is None else [tuple(int(v) for v in stored)]


class RowSessions(_Sessions):
    """For ``transformWithState`` (``Row`` in, ``Row`` out)."""

    api = ROW


class PandasSessions(_Sessions):
    """For ``transformWithStateInPandas`` (pandas frames in and out)."""

    api = PANDAS


def sessions_query(stream: DataFrame, api: str) -> DataFrame:
    """W3 on ``stream`` (``key``, ``ts``) with ``api`` (:data:`PANDAS` or :data:`ROW`),
    output ``key, start, end, events`` like GIC's."""
    from pyspark.sql import functions as sf

    grouped = (
        stream.withWatermark("ts", timed_workloads.SESSION_WATERMARK)
        .select("key", "ts", sf.unix_micros("ts").alias("t"))
        .groupBy("key")
    )
    if api == PANDAS:
        out = grouped.transformWithStateInPandas(PandasSessions(), OUTPUT, "Append", "EventTime")
    else:
        out = grouped.transformWithState(RowSessions(), OUTPUT, "Append", "EventTime")
    return out.select(
        "key",
        sf.timestamp_micros("start_us").alias("start"),
        sf.timestamp_micros("end_us").alias("end"),
        "events",
    )
