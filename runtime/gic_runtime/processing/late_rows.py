"""A task's input split by event time: the rows a processor sees, the largest event time,
and how many rows were late.

A row is *late* when its event time is older than the batch's watermark, or when it has
no event time at all (a null cannot be placed in time). Late rows are dropped unless the
stream keeps them (:class:`~gic_runtime.event_time.EventTimeSpec`); they are counted
either way. The largest event time counts every row, late ones included, as Spark's own
watermark does.

Pure and thread-safe: Arrow tables in, Arrow tables out.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from gic_runtime.errors import ConfigurationError
from gic_runtime.event_time import EventTimeSpec

__all__ = ["event_times_us", "split_late"]


def event_times_us(table: pa.Table, column: str) -> pa.ChunkedArray:
    """The event times of ``table``'s rows in microseconds since the epoch (int64, nulls
    kept). Raises :class:`ConfigurationError` when the column is missing or is not a
    timestamp."""
    if column not in table.column_names:
        raise ConfigurationError(
            f"event-time column {column!r} is not in the stream's rows (columns: "
            f"{', '.join(table.column_names)}); name a timestamp column in keyed()"
        )
    values = table.column(column)
    if not pa.types.is_timestamp(values.type):
        raise ConfigurationError(
            f"event-time column {column!r} has type {values.type}, not a timestamp; cast "
            "it first (e.g. F.col(...).cast('timestamp'))"
        )
    micros = values.cast(pa.timestamp("us", tz=values.type.tz))
    return micros.cast(pa.int64())


def split_late(
    table: pa.Table, spec: EventTimeSpec, watermark_us: int | None
) -> tuple[pa.Table, int | None, int, pa.ChunkedArray | None]:
    """``(rows to process, largest event time or None, late rows, keep mask)`` of
    ``table`` for a batch running with ``watermark_us`` (``None``: nothing is late but
    rows without an event time). The mask (``None`` when every row is kept) selects the
    kept rows, so per-row columns kept elsewhere can be filtered alike."""
    times = event_times_us(table, spec.column)
    largest = pc.max(times).as_py() if table.num_rows else None
    if watermark_us is None:
        late_mask = pc.is_null(times)
    else:
        late_mask = pc.fill_null(pc.less(times, pa.scalar(watermark_us, pa.int64())), True)
    late = int(pc.sum(late_mask).as_py() or 0)
    if late == 0 or spec.keep_late:
        return table, largest, late, None
    keep = pc.invert(late_mask)
    return table.filter(keep), largest, late, keep
