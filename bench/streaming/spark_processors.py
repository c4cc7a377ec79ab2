"""One ``StatefulProcessor`` for both of Spark's Python APIs of arbitrary state (v2).

``transformWithState`` hands a processor each key's rows as ``Row`` objects and takes
``Row`` objects back; ``transformWithStateInPandas`` hands it pandas frames and takes
frames back. A :class:`TwsProcessor` subclass implements its logic once, on the values
of one input column (:meth:`TwsProcessor.on_rows`, :meth:`TwsProcessor.on_timer`,
returning output rows without the key), and its ``api`` (:data:`ROW` or :data:`PANDAS`)
picks the conversion: one ``Row`` per output row, or one frame holding them all (none
when there are no rows). The W2 and W3 baselines (:mod:`bench.streaming.spark_event_log`,
:mod:`bench.streaming.spark_sessions`) are built on it.

Imported by Spark's Python workers (executors import ``bench`` through ``PYTHONPATH``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    TimerValues,
)

ROW, PANDAS = "row", "pandas"


class TwsProcessor(StatefulProcessor):
    """Logic over ``column``'s values, emitting ``key`` then ``outputs`` per row."""

    api: ClassVar[str] = ROW
    column: ClassVar[str]
    """The input column whose values :meth:`on_rows` gets (the key's, in arrival order)."""
    outputs: ClassVar[tuple[str, ...]]
    """The output columns after ``key``."""

    def on_rows(self, values: list[Any]) -> list[tuple[Any, ...]]:
        """The output rows (without the key) for the key's ``values`` of the batch."""
        raise NotImplementedError

    def on_timer(self) -> list[tuple[Any, ...]]:
        """The output rows (without the key) when the key's timer expired."""
        return []

    def handleInputRows(  # noqa: N802 - Spark's name
        self,
        key: Any,
        rows: Iterator[Any],
        timerValues: TimerValues,  # noqa: N803
    ) -> Iterator[Any]:
        if self.api == PANDAS:
            values = [v for frame in rows for v in frame[self.column].tolist()]
        else:
            values = [getattr(r, self.column) for r in rows]
        return self._emit(key[0], self.on_rows(values))

    def handleExpiredTimer(  # noqa: N802 - Spark's name
        self,
        key: Any,
        timerValues: TimerValues,  # noqa: N803
        expiredTimerInfo: ExpiredTimerInfo,  # noqa: N803
    ) -> Iterator[Any]:
        return self._emit(key[0], self.on_timer())

    def close(self) -> None:
        """Nothing to release."""

    def _emit(self, key: Any, rows: list[tuple[Any, ...]]) -> Iterator[Any]:
        if self.api == PANDAS:
            if rows:
                import pandas as pd  # type: ignore[import-untyped]

                columns = list(zip(*rows, strict=True))
                yield pd.DataFrame(
                    {"key": [key] * len(rows)}
                    | {
                        name: list(values)
                        for name, values in zip(self.outputs, columns, strict=True)
                    }
                )
            return
        names = ("key", *self.outputs)
        for row in rows:
            yield Row(**dict(zip(names, (key, *row), strict=True)))
