"""Per-key event log with GIC list state: every event of a key, in arrival order.

Reads JSON lines ``{"user": ..., "event": ...}`` from ``--input``; for every user keeps
the list of all its events (list state: an append per batch, never a rewrite) and
outputs, per batch, each touched user with its event count and latest event. Uses the
vectorized path: Arrow ``group_by`` per task, then one list append per user. The job id
is ``event-log`` (the app name) unless ``--job-id`` / ``GIC_JOB_ID`` names another.

    gic run examples/event_log.py -- --input events/ --output event-log/
"""

from __future__ import annotations

import argparse
import sys

import pyarrow as pa

from gic_runtime.processing import StateAccess
from gic_runtime.spark import GICJob

OUTPUT = "user string, events long, last_event string"


def log_events(table: pa.Table, states: StateAccess) -> pa.Table:
    """Append each user's events of this batch to its list; report the new lengths."""
    grouped = table.group_by("user", use_threads=False).aggregate([("event", "list")])
    users = grouped.column("user").to_pylist()
    batches = grouped.column("event_list").to_pylist()
    log = states.list("events")
    sizes = states.value("size")
    before = sizes.get_many(users, 0)
    after = []
    for user, events, n in zip(users, batches, before, strict=True):
        log.extend(user, events)
        after.append(n + len(events))
    sizes.set_many(zip(users, after, strict=True))
    last = [e[-1] for e in batches]
    return pa.table({"user": users, "events": after, "last_event": last})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True, help="directory of JSON-lines files")
    parser.add_argument("--output", required=True, help="Parquet output directory")
    parser.add_argument("--files-per-batch", type=int, default=1)
    parser.add_argument("--trigger", default="available-now")
    args = parser.parse_args(argv)

    job = GICJob.create("event-log")
    events = (
        job.spark.readStream.schema("user string, event string")
        .option("maxFilesPerTrigger", args.files_per_batch)
        .json(args.input)
        .where("user is not null")
    )
    summary = (
        job.keyed(events, key="user")
        .process_batches(log_events, OUTPUT)
        .to_parquet(args.output)
        .run(trigger=args.trigger)
    )
    print(f"event-log: {len(summary.batches)} batch(es), last checkpoint {summary.last_checkpoint}")


if __name__ == "__main__":
    main(sys.argv[1:])
