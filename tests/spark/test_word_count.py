"""Word count on real Spark: exact output per batch, resume, local reuse, rescale."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from gic_runtime.checkpoint.catalog import list_checkpoints, read_checkpoint
from gic_runtime.checkpoint.registry import DEFAULT_RETAINED_CHECKPOINTS
from gic_runtime.config import GICSettings
from gic_runtime.errors import StateError
from gic_runtime.sinks import read_file_sink
from gic_runtime.spark import GICJob, RunSummary, count
from gic_runtime.storage.uri import StoreResolver

from .words import reference_counts, write_text_batches


def settings(tmp_path: Path, **overrides: Any) -> GICSettings:
    base: dict[str, Any] = {
        "job_id": "wc",
        "storage": (tmp_path / "store").as_uri(),
        "num_buckets": 16,
        "local_dir": str(tmp_path / "local"),
        "control_poll_s": 0.1,
    }
    base.update(overrides)
    return GICSettings(**base)


def words_of(spark: SparkSession, src: Path) -> DataFrame:
    lines = spark.readStream.option("maxFilesPerTrigger", 1).text(str(src))
    return lines.select(F.explode(F.split("value", " ")).alias("word")).where("word != ''")


def run_wc(spark: SparkSession, s: GICSettings, src: Path, out: Path) -> RunSummary:
    job = GICJob(spark, s)
    query = job.keyed(words_of(spark, src), key="word").aggregate(count=count())
    return query.to_parquet(str(out)).run(trigger="available-now")


def sink_batches(out: Path) -> dict[int, dict[str, int]]:
    table = read_file_sink(out.as_uri(), StoreResolver())
    assert table is not None
    batches: dict[int, dict[str, int]] = {}
    for row in table.to_pylist():
        batch = batches.setdefault(row["batch_id"], {})
        assert row["word"] not in batch, "a word appears twice in one batch's output"
        batch[row["word"]] = row["count"]
    return batches


def test_counts_are_exact_per_batch_and_resume_continues(
    spark: SparkSession, tmp_path: Path
) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    write_text_batches(src, 4)
    s = settings(tmp_path)
    first = run_wc(spark, s, src, out)
    assert [b.batch_id for b in first.batches] == [0, 1, 2, 3]
    assert sink_batches(out) == dict(enumerate(reference_counts(src, 4)))
    # Executors kept bucket state across batches: later batches reuse local copies.
    assert sum(b.local_hits for b in first.batches[1:]) > 0

    write_text_batches(src, 3, start=4)
    second = run_wc(spark, s, src, out)
    assert second.start.resumed_after == 3
    assert [b.batch_id for b in second.batches] == [4, 5, 6]
    assert sink_batches(out) == dict(enumerate(reference_counts(src, 7)))
    resolver = StoreResolver()
    ids = [c.checkpoint_id for c in list_checkpoints(resolver, s.storage, "wc")]
    assert ids == [6 - n for n in reversed(range(DEFAULT_RETAINED_CHECKPOINTS))]  # retained
    latest = read_checkpoint(resolver, s.storage + "/jobs/wc/checkpoints/chk-000000000006.manifest")
    assert latest.manifest.engine["batch_id"] == 6
    assert set(latest.manifest.buckets) == set(range(16))


def test_rescale_keeps_state(spark: SparkSession, tmp_path: Path) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    write_text_batches(src, 3)
    run_wc(spark, settings(tmp_path, num_tasks=4), src, out)
    write_text_batches(src, 3, start=3)
    summary = run_wc(spark, settings(tmp_path, num_tasks=3), src, out)
    assert {b.tasks for b in summary.batches} == {3}
    assert sink_batches(out) == dict(enumerate(reference_counts(src, 6)))


def test_bucket_count_change_is_refused_with_a_clear_error(
    spark: SparkSession, tmp_path: Path
) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    write_text_batches(src, 1)
    run_wc(spark, settings(tmp_path), src, out)
    with pytest.raises(Exception, match="buckets"):
        run_wc(spark, settings(tmp_path, num_buckets=32), src, out)


def test_null_keys_fail_the_batch_with_a_clear_error(spark: SparkSession, tmp_path: Path) -> None:
    src = tmp_path / "in"
    write_text_batches(src, 1)
    job = GICJob(spark, settings(tmp_path))
    lines = spark.readStream.text(str(src))
    keyed = job.keyed(lines.select(F.lit(None).cast("string").alias("word")), key="word")
    with pytest.raises(StateError, match="null"):
        keyed.aggregate(count=count()).discard().run(trigger="available-now")


def test_more_shuffle_partitions_than_buckets_run_one_task_per_bucket(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Spark's default of 200 shuffle partitions with fewer buckets: the job runs one
    state task per bucket instead of refusing its first batch."""
    src, out = tmp_path / "in", tmp_path / "out"
    write_text_batches(src, 2)
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "200")
    try:
        job = GICJob(spark, settings(tmp_path, num_buckets=8))
        keyed = job.keyed(words_of(spark, src), key="word").aggregate(count=count())
        query = keyed.to_parquet(str(out))
        summary = query.run(trigger="available-now")
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before or "4")
    assert len(summary.batches) == 2
    assert query.driver is not None and query.driver.num_tasks == 8
    assert sink_batches(out) == dict(enumerate(reference_counts(src, 2)))
