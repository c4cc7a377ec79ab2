"""Deduplication over event time, with state that forgets: a value per id with a TTL.

Reads JSON lines ``{"id": ..., "ts": "<ISO-8601 time>"}`` from ``--input`` as a stream
(one file per micro-batch), keyed by id with ``ts`` as the event time. The first event
of an id is written to a transactional Parquet sink; repeats are dropped while the id
is remembered. Each id is remembered for ``--ttl`` (default 10 minutes) of event time,
counted from the watermark when it was last seen: after that its state is invisible at
once and removed from storage at the end of the batch, so the state holds only the
recent ids however many pass through. Prints per batch how many ids were new and how
many were forgotten.

    gic run examples/dedup.py -- --input orders/ --output unique-orders/ --ttl "10 minutes"
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import pyarrow as pa
from pyspark.sql import functions as F

from gic_runtime.spark import BatchReport, GICJob, KeyState


def first_events(ttl: str) -> Any:
    """The per-key function: the id's first event, unless the id is remembered."""

    def first(order_id: str, rows: pa.Table, state: KeyState) -> list[dict[str, Any]]:
        seen = state.value("seen", ttl=ttl, ttl_by="event")
        first_ts = seen.get()
        if first_ts is not None:
            seen.set(first_ts)  # seen again: remembered for another ttl
            return []
        ts = min(rows.column("ts").to_pylist())
        seen.set(ts.isoformat())
        return [{"id": order_id, "ts": ts}]

    return first


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True, help="directory of JSON-lines files")
    parser.add_argument("--output", required=True, help="Parquet output directory")
    parser.add_argument("--ttl", default="10 minutes", help="how long an id is remembered")
    parser.add_argument("--watermark", default="0 seconds", help="lateness bound")
    args = parser.parse_args(argv)

    job = GICJob.create("dedup")
    orders = (
        job.spark.readStream.schema("id string, ts string")
        .option("maxFilesPerTrigger", 1)
        .json(args.input)
        .withColumn("ts", F.to_timestamp("ts"))
    )

    def show(report: BatchReport) -> None:
        print(
            f"batch {report.batch_id}: {report.rows_in} events, {report.late_rows} late, "
            f"{report.published_rows} new, {report.expired} forgotten",
            flush=True,
        )

    summary = (
        job.keyed(orders, key="id", event_time="ts", watermark=args.watermark)
        .process(first_events(args.ttl), "id string, ts timestamp")
        .to_parquet(args.output)
        .run(trigger="available-now", on_batch=show)
    )
    print(f"dedup: {len(summary.batches)} batch(es), stopped: {summary.stop_reason}")


if __name__ == "__main__":
    main(sys.argv[1:])
