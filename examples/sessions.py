"""User sessions over event time, closed by event-time timers.

Reads JSON lines ``{"user": ..., "ts": "<ISO-8601 time>"}`` from ``--input`` as a
stream (one file per micro-batch), keyed by user with ``ts`` as the event time. A
user's session is a run of events with gaps of at most ``--gap`` (default 30 seconds).
Each event moves the session's end and its timer to ``end + gap``; the timer fires
once the watermark passes it, and writes the session (user, start, end, events) to a
transactional Parquet sink. An event arriving more than ``gap`` after the session's
end closes it at once and opens the next. When the input is used up, one more batch
fires the timers the final watermark has passed.

    gic run examples/sessions.py -- --input clicks/ --output sessions/
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql import functions as F

from gic_runtime.event_time import parse_duration
from gic_runtime.spark import BatchReport, GICJob, KeyState, Timer, from_micros, to_micros

OUTPUT = "user string, start timestamp, end timestamp, events long"


def session_row(user: str, session: list[int]) -> dict[str, Any]:
    start, end, events = session
    return {"user": user, "start": from_micros(start), "end": from_micros(end), "events": events}


def sessions(gap_us: int) -> tuple[Any, Any]:
    """The per-key function and the timer handler for sessions with ``gap_us``."""

    def track(user: str, rows: pa.Table, state: KeyState) -> Iterator[dict[str, Any]]:
        session, timers = state.value("session"), state.timers
        current: list[int] | None = session.get()
        if current is not None:
            timers.delete(current[1] + gap_us)  # set again below while the session lasts
        for t in sorted(to_micros(ts) for ts in rows.column("ts").to_pylist()):
            if current is not None and t > current[1] + gap_us:
                yield session_row(user, current)
                current = None
            if current is None:
                current = [t, t, 0]
            current = [min(current[0], t), max(current[1], t), current[2] + 1]
        assert current is not None  # a key comes with at least one row
        session.set(current)
        timers.register(current[1] + gap_us)

    def close(user: str, timer: Timer, state: KeyState) -> list[dict[str, Any]]:
        session = state.value("session")
        current = session.get()
        session.clear()
        return [] if current is None else [session_row(user, current)]

    return track, close


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True, help="directory of JSON-lines files")
    parser.add_argument("--output", required=True, help="Parquet output directory")
    parser.add_argument("--gap", default="30 seconds", help="inactivity that ends a session")
    parser.add_argument("--watermark", default="0 seconds", help="lateness bound")
    args = parser.parse_args(argv)

    job = GICJob.create("sessions")
    clicks = (
        job.spark.readStream.schema("user string, ts string")
        .option("maxFilesPerTrigger", 1)
        .json(args.input)
        .withColumn("ts", F.to_timestamp("ts"))
    )
    track, close = sessions(parse_duration(args.gap, what="gap"))

    def show(report: BatchReport) -> None:
        print(
            f"batch {report.batch_id}: {report.rows_in} events, {report.late_rows} late, "
            f"{report.timers_fired} timers fired, {report.published_rows} sessions written",
            flush=True,
        )

    summary = (
        job.keyed(clicks, key="user", event_time="ts", watermark=args.watermark)
        .process(track, OUTPUT, on_timer=close)
        .to_parquet(args.output)
        .run(trigger="available-now", on_batch=show)
    )
    print(f"sessions: {len(summary.batches)} batch(es), stopped: {summary.stop_reason}")


if __name__ == "__main__":
    main(sys.argv[1:])
