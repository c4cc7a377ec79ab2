"""Keyed count over Spark's deterministic ``rate-micro-batch`` source, with a check.

Batch ``b`` holds the values ``b*R .. (b+1)*R-1`` (R = ``--rows-per-batch``); each value
``v`` counts for key ``v % K`` (K = ``--keys``). The job keeps, per key, the number of
values seen (``n``) and the largest (``hi``) in GIC keyed state and writes each batch's
updated rows to a transactional Parquet sink. Because the input is a pure function of the
batch id, the output can be checked exactly after any number of crashes and restarts:
for every key ``k``, ``n == (hi - k) // K + 1`` (no value lost, none counted twice); see
:func:`check_counts`. This is the job the operator's end-to-end tests run. The job id
is ``rate-count`` (the app name) unless ``--job-id`` / ``GIC_JOB_ID`` names another; the
query runs until stopped (``--max-batches``, ``GIC_MAX_BATCHES``, a stop request).

    gic run examples/rate_count.py --max-batches 5 -- --output rate-counts/
    spark-submit --master local[2] --conf spark.sql.shuffle.partitions=4 \
        examples/rate_count.py --output s3://bucket/out

``spark-submit`` runs the driver and Spark's Python workers with ``python3`` from
``PATH`` (or ``PYSPARK_PYTHON``), which must have ``gic`` installed. Each shuffle
partition is a state task, so ``spark.sql.shuffle.partitions`` (Spark's default: 200)
must not exceed the job's buckets (``GIC_NUM_BUCKETS``, default 128).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any


def main(argv: list[str] | None = None) -> None:
    from pyspark.sql import functions as F

    from gic_runtime.spark import GICJob, count, max_

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True, help="Parquet sink (path or URI)")
    parser.add_argument("--rows-per-batch", type=int, default=1000)
    parser.add_argument("--keys", type=int, default=97)
    parser.add_argument("--trigger", default="1 second", help="processing-time interval")
    args = parser.parse_args(argv)

    job = GICJob.create("rate-count")
    rate = (
        job.spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", args.rows_per_batch)
        .option("numPartitions", 2)
        .load()
    )
    keyed = rate.select((F.col("value") % args.keys).alias("key"), F.col("value"))
    summary = (
        job.keyed(keyed, key="key")
        .aggregate(n=count(), hi=max_("value"))
        .to_parquet(args.output)
        .run(trigger=args.trigger)
    )
    print(
        f"rate-count: {len(summary.batches)} batch(es), last checkpoint "
        f"{summary.last_checkpoint}, stopped: {summary.stop_reason}"
    )


def check_counts(latest: Mapping[int, Mapping[str, Any]], keys: int) -> list[str]:
    """Problems in the latest output row per key (``{key: {"n": .., "hi": ..}}``); empty
    when every key's count matches the values up to its largest one exactly."""
    problems = []
    for key, row in sorted(latest.items()):
        expected = (int(row["hi"]) - key) // keys + 1
        if int(row["n"]) != expected:
            problems.append(f"key {key}: n={row['n']} but values up to {row['hi']} give {expected}")
    return problems


if __name__ == "__main__":
    main(sys.argv[1:])
