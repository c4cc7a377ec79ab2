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

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import LongType, StructField, StructType

from bench.streaming import timed_workloads

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
PANDAS, ROW = "pandas", "row"


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


class _Sessions(StatefulProcessor):
    """The state and timer handling both APIs share."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.session = handle.getValueState("session", STATE_SCHEMA)

    def _update(self, times: list[int]) -> list[list[int]]:
        current = None
        if self.session.exists():
            stored = self.session.get()
            assert stored is not None
            current = [int(v) for v in stored]
            self.handle.deleteTimer((current[1] + GAP_US) // 1000)
        closed, current = advance(current, sorted(times), GAP_US)
        self.session.update(tuple(current))
        self.handle.registerTimer((current[1] + GAP_US) // 1000)
        return closed

    def _expire(self) -> list[int] | None:
        if not self.session.exists():
            return None
        stored = self.session.get()
        self.session.clear()
        return None if stored is None else [int(v) for v in stored]

    def close(self) -> None:
        """Nothing to release."""


class RowSessions(_Sessions):
    """For ``transformWithState`` (``Row`` in, ``Row`` out)."""

    def handleInputRows(  # noqa: N802 - Spark's name
        self,
        key: Any,
        rows: Iterator[Any],
        timerValues: TimerValues,  # noqa: N803
    ) -> Iterator[Any]:
        for s in self._update([int(r.t) for r in rows]):
            yield Row(key=key[0], start_us=s[0], end_us=s[1], events=s[2])

    def handleExpiredTimer(  # noqa: N802 - Spark's name
        self,
        key: Any,
        timerValues: TimerValues,  # noqa: N803
        expiredTimerInfo: ExpiredTimerInfo,  # noqa: N803
    ) -> Iterator[Any]:
        s = self._expire()
        if s is not None:
            yield Row(key=key[0], start_us=s[0], end_us=s[1], events=s[2])


class PandasSessions(_Sessions):
    """For ``transformWithStateInPandas`` (pandas frames in and out)."""

    def handleInputRows(  # noqa: N802 - Spark's name
        self,
        key: Any,
        rows: Iterator[Any],
        timerValues: TimerValues,  # noqa: N803
    ) -> Iterator[Any]:
        times = [int(t) for frame in rows for t in frame["t"].tolist()]
        closed = self._update(times)
        if closed:
            yield _frame(key[0], closed)

    def handleExpiredTimer(  # noqa: N802 - Spark's name
        self,
        key: Any,
        timerValues: TimerValues,  # noqa: N803
        expiredTimerInfo: ExpiredTimerInfo,  # noqa: N803
    ) -> Iterator[Any]:
        s = self._expire()
        if s is not None:
            yield _frame(key[0], [s])


def _frame(key: int, sessions: list[list[int]]) -> Any:
    import pandas as pd  # type: ignore[import-untyped]

    return pd.DataFrame(
        {
            "key": [key] * len(sessions),
            "start_us": [s[0] for s in sessions],
            "end_us": [s[1] for s in sessions],
            "events": [s[2] for s in sessions],
        }
    )


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
