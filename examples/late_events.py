"""Spend per user over event time: a running sum that ignores events arriving too late.

Reads JSON lines ``{"user": ..., "ts": "<ISO-8601 time>", "amount": ...}`` from
``--input`` as a stream (one file per micro-batch), keyed by user with ``ts`` as the
event time and a lateness bound (``--watermark``, default 10 seconds). Each batch runs
with the watermark the batches before it set; its events older than that are late:
dropped and counted. Writes each batch's updated sums to a transactional Parquet sink
and prints every batch's watermark and late events. The watermark is part of every
checkpoint, so running the command again continues from it.

    gic run examples/late_events.py -- --input spend-events/ --output spend/
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from pyspark.sql import functions as F

from gic_runtime.spark import BatchReport, GICJob, count, sum_


def when(micros: int | None) -> str:
    """``micros`` since the epoch as UTC ISO-8601 ("-" for none)."""
    if micros is None:
        return "-"
    return datetime.fromtimestamp(micros / 1e6, UTC).isoformat(timespec="seconds")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True, help="directory of JSON-lines files")
    parser.add_argument("--output", required=True, help="Parquet output directory")
    parser.add_argument("--watermark", default="10 seconds", help="lateness bound")
    args = parser.parse_args(argv)

    job = GICJob.create("late-events")
    events = (
        job.spark.readStream.schema("user string, ts string, amount long")
        .option("maxFilesPerTrigger", 1)
        .json(args.input)
        .withColumn("ts", F.to_timestamp("ts"))
    )

    def show(report: BatchReport) -> None:
        print(
            f"batch {report.batch_id}: {report.rows_in} events, {report.late_rows} late, "
            f"watermark {when(report.watermark_us)}",
            flush=True,
        )

    summary = (
        job.keyed(events, key="user", event_time="ts", watermark=args.watermark)
        .aggregate(events=count(), spent=sum_("amount"))
        .to_parquet(args.output)
        .run(trigger="available-now", on_batch=show)
    )
    print(f"late-events: {len(summary.batches)} batch(es), stopped: {summary.stop_reason}")


if __name__ == "__main__":
    main(sys.argv[1:])
