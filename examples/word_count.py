"""Keyed word count with GIC checkpoints: a running count per word.

Reads text files from ``--input`` as a stream (``--files-per-batch`` files per
micro-batch), keeps one count per word in GIC keyed state (the vectorized aggregate
path) and writes each batch's updated counts to a transactional Parquet sink. The job
id is ``word-count`` (the app name) unless ``--job-id`` / ``GIC_JOB_ID`` names another;
running the command again resumes that job's latest checkpoint.

    gic run examples/word_count.py -- --input text/ --output word-counts/
"""

from __future__ import annotations

import argparse
import sys

from pyspark.sql import functions as F

from gic_runtime.spark import GICJob, count


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True, help="directory of text files")
    parser.add_argument("--output", required=True, help="Parquet output directory")
    parser.add_argument("--files-per-batch", type=int, default=1)
    parser.add_argument(
        "--trigger",
        default="available-now",
        help="'available-now' (process what is there, then stop) or an interval like '5 seconds'",
    )
    args = parser.parse_args(argv)

    job = GICJob.create("word-count")
    lines = job.spark.readStream.option("maxFilesPerTrigger", args.files_per_batch).text(args.input)
    words = lines.select(
        F.explode(F.split(F.lower(F.col("value")), r"[^a-z0-9']+")).alias("word")
    ).where(F.col("word") != "")
    summary = (
        job.keyed(words, key="word")
        .aggregate(count=count())
        .to_parquet(args.output)
        .run(trigger=args.trigger)
    )
    print(
        f"word-count: {len(summary.batches)} batch(es), last checkpoint "
        f"{summary.last_checkpoint}, stopped: {summary.stop_reason}"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
