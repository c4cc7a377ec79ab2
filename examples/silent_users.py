"""Alert when a user goes silent: processing-time timers in the vectorized style.

Reads JSON lines ``{"user": ...}`` from ``--input`` as a stream (one file per
micro-batch), keyed by user. Every event pushes the user's processing-time timer to
``now + silence`` (``--silence``, default 10 minutes); a user whose timer fires (the
first batch that runs after it is due) gets one alert row (user, last seen, silent
since) in a transactional Parquet sink. Timers fire only in batches that run: a
stream whose input stops entirely fires its due timers when it runs again (or in the
extra batch the end of an available-now run gets).

    gic run examples/silent_users.py -- --input events/ --output alerts/ --silence "10 minutes"
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gic_runtime.event_time import parse_duration
from gic_runtime.spark import BatchReport, GICJob, StateAccess, from_micros, to_micros

OUTPUT = "user string, last_seen timestamp, alerted_at timestamp"


def handlers(silence_us: int) -> tuple[Any, Any]:
    """The batch function and the timer handler for alerts after ``silence_us``."""

    def seen(events: pa.Table, states: StateAccess) -> None:
        users = pc.unique(events.column("user")).to_pylist()
        last_seen, timers = states.value("last_seen"), states.timers
        now = to_micros(states.processing_time)
        for user, before in zip(users, last_seen.get_many(users), strict=True):
            if before is not None:
                timers.delete(user, before + silence_us, "processing")
        timers.register_many(users, [now + silence_us] * len(users), "processing")
        last_seen.set_many((user, now) for user in users)

    def alert(fired: pa.Table, states: StateAccess) -> pa.Table:
        users = fired.column("key").to_pylist()
        last_seen = states.value("last_seen")
        seen_at = last_seen.get_many(users)
        for user in users:
            last_seen.clear(user)
        return pa.table(
            {
                "user": users,
                "last_seen": [from_micros(t) for t in seen_at],
                "alerted_at": [states.processing_time] * len(users),
            }
        )

    return seen, alert


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True, help="directory of JSON-lines files")
    parser.add_argument("--output", required=True, help="Parquet output directory")
    parser.add_argument("--silence", default="10 minutes", help="silence that raises an alert")
    args = parser.parse_args(argv)

    job = GICJob.create("silent-users")
    events = job.spark.readStream.schema("user string").option("maxFilesPerTrigger", 1)
    seen, alert = handlers(parse_duration(args.silence, what="silence"))

    def show(report: BatchReport) -> None:
        print(
            f"batch {report.batch_id}: {report.rows_in} events, "
            f"{report.timers_fired} users went silent",
            flush=True,
        )

    summary = (
        job.keyed(events.json(args.input), key="user")
        .process_batches(seen, OUTPUT, on_timers=alert)
        .to_parquet(args.output)
        .run(trigger="available-now", on_batch=show)
    )
    print(f"silent-users: {len(summary.batches)} batch(es), stopped: {summary.stop_reason}")


if __name__ == "__main__":
    main(sys.argv[1:])
