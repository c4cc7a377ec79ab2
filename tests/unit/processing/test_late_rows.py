"""A task's rows split by event time: late rows dropped or kept, always counted."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest

from gic_runtime.errors import ConfigurationError
from gic_runtime.event_time import EventTimeSpec
from gic_runtime.processing.late_rows import event_times_us, split_late

T = [datetime(2026, 1, 1, 0, 0, s, tzinfo=UTC) for s in range(60)]


def us(i: int) -> int:
    return int(T[i].timestamp() * 1_000_000)


def rows() -> pa.Table:
    return pa.table(
        {
            "k": ["a", "b", "c", "d"],
            "ts": pa.array([T[5], T[20], None, T[9]], pa.timestamp("us", tz="UTC")),
        }
    )


def test_rows_older_than_the_watermark_and_without_a_time_are_late_and_dropped() -> None:
    kept, largest, late, keep = split_late(rows(), EventTimeSpec("ts"), us(10))
    assert kept.column("k").to_pylist() == ["b"]
    assert (largest, late) == (us(20), 3)  # the largest counts late rows too
    assert keep is not None and keep.to_pylist() == [False, True, False, False]


def test_kept_late_rows_are_still_counted() -> None:
    kept, largest, late, keep = split_late(rows(), EventTimeSpec("ts", keep_late=True), us(10))
    assert kept.num_rows == 4 and (largest, late, keep) == (us(20), 3, None)


def test_without_a_watermark_only_rows_without_a_time_are_late() -> None:
    kept, largest, late, _ = split_late(rows(), EventTimeSpec("ts"), None)
    assert kept.column("k").to_pylist() == ["a", "b", "d"]
    assert (largest, late) == (us(20), 1)


def test_any_timestamp_unit_and_zone_reads_as_microseconds() -> None:
    for unit in ("s", "ms", "us", "ns"):
        for tz in (None, "UTC", "Europe/Berlin"):
            table = pa.table(
                {
                    "ts": pa.array([T[3]], pa.timestamp("us", tz="UTC")).cast(
                        pa.timestamp(unit, tz=tz)
                    )
                }
            )
            assert event_times_us(table, "ts").to_pylist() == [us(3)], (unit, tz)


def test_a_missing_or_untimed_column_is_a_clear_error() -> None:
    with pytest.raises(ConfigurationError, match="not in the stream's rows"):
        split_late(rows(), EventTimeSpec("when"), None)
    with pytest.raises(ConfigurationError, match="not a timestamp"):
        split_late(rows(), EventTimeSpec("k"), None)


def test_an_empty_table_has_no_largest_time() -> None:
    empty = rows().slice(0, 0)
    assert split_late(empty, EventTimeSpec("ts"), us(1))[1:3] == (None, 0)
