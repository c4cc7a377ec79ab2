"""Initial state on real Spark: a job without checkpoints starts from a DataFrame --
an aggregate continues from given counts, a per-key job from values its ``init``
function sets (with timers) -- exactly once in its first batch, and never again after
a restart; rows that do not fit are refused with the fix."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from gic_runtime.config import GICSettings
from gic_runtime.errors import ConfigurationError, GICError
from gic_runtime.processing import KeyState, Timer, count
from gic_runtime.sinks import read_file_sink
from gic_runtime.spark import GICJob, tumbling
from gic_runtime.storage.uri import StoreResolver


def write_words(directory: Path, batches: list[list[str]], start: int = 0) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for b, words in enumerate(batches, start=start):
        path = directory / f"words-{b:04d}.json"
        path.write_text("".join(json.dumps({"word": w, "n": 1}) + "\n" for w in words))
        os.utime(path, (1_700_000_000 + b, 1_700_000_000 + b))


def words_of(spark: SparkSession, src: Path) -> DataFrame:
    return (
        spark.readStream.schema("word string, n long")
        .option("maxFilesPerTrigger", 1)
        .json(str(src))
    )


def settings(tmp_path: Path, job: str) -> GICSettings:
    return GICSettings(
        job_id=job,
        storage=(tmp_path / "store").as_uri(),
        num_buckets=8,
        local_dir=str(tmp_path / "local"),
        control_poll_s=0.1,
    )


def latest(out: Path, key: str, value: str) -> dict[str, Any]:
    table = read_file_sink(out.as_uri(), StoreResolver())
    assert table is not None
    found: dict[str, tuple[int, Any]] = {}
    for r in table.to_pylist():
        if r[key] not in found or r["batch_id"] >= found[r[key]][0]:
            found[r[key]] = (r["batch_id"], r[value])
    return {k: v for k, (_, v) in found.items()}


def test_an_aggregate_continues_from_the_initial_counts(
    spark: SparkSession, tmp_path: Path
) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    write_words(src, [["a", "b", "a"], ["c"]])
    initial = spark.createDataFrame([("a", 10), ("z", 5)], "word string, count long")

    def run() -> int:
        job = GICJob(spark, settings(tmp_path, "counts"))
        query = (
            job.keyed(words_of(spark, src), key="word")
            .aggregate(count=count())
            .with_initial_state(initial)
            .to_parquet(str(out))
        )
        return len(query.run(trigger="available-now").batches)

    assert run() == 2
    assert latest(out, "word", "count") == {"a": 12, "b": 1, "c": 1}  # z: no new rows
    write_words(src, [["a", "z"]], start=2)
    assert run() == 1  # restarted from its checkpoint: the initial state is not applied again
    assert latest(out, "word", "count") == {"a": 13, "b": 1, "c": 1, "z": 6}


def test_init_sets_any_state_and_timers(spark: SparkSession, tmp_path: Path) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    write_words(src, [["a"], ["b"]])
    initial = spark.createDataFrame([("a", "x"), ("a", "y"), ("q", "w")], "word string, tag string")

    def init(word: str, rows: pa.Table, state: KeyState) -> None:
        state.list("tags").extend(rows.column("tag").to_pylist())
        state.timers.register(0, "processing")  # due in the first batch

    def track(word: str, rows: pa.Table, state: KeyState) -> list[dict[str, Any]]:
        tags = state.list("tags")
        tags.append(f"seen{state.batch_id}")
        return [{"word": word, "tags": ",".join(tags.get())}]

    def fired(word: str, timer: Timer, state: KeyState) -> list[dict[str, Any]]:
        return [{"word": word, "tags": "timer:" + ",".join(state.list("tags").get())}]

    job = GICJob(spark, settings(tmp_path, "tags"))
    (
        job.keyed(words_of(spark, src), key="word")
        .process(track, "word string, tags string", on_timer=fired)
        .with_initial_state(initial, init=init)
        .to_parquet(str(out))
        .run(trigger="available-now")
    )
    table = read_file_sink(out.as_uri(), StoreResolver())
    assert table is not None
    rows = sorted((r["batch_id"], r["word"], r["tags"]) for r in table.to_pylist())
    assert rows == [
        (0, "a", "timer:x,y,seen0"),  # the timer fires after the batch's rows
        (0, "a", "x,y,seen0"),
        (0, "q", "timer:w"),
        (1, "b", "seen1"),
    ]


def test_rows_that_do_not_fit_are_refused(spark: SparkSession, tmp_path: Path) -> None:
    src = tmp_path / "in"
    write_words(src, [["a"]])
    job = GICJob(spark, settings(tmp_path, "refused"))
    keyed = job.keyed(words_of(spark, src), key="word")
    counts = keyed.aggregate(count=count())
    with pytest.raises(ConfigurationError, match="not aggregates of the query"):
        counts.with_initial_state(spark.createDataFrame([("a", 1)], "word string, total long"))
    with pytest.raises(ConfigurationError, match=r"count\(\) needs an integer"):
        counts.with_initial_state(spark.createDataFrame([("a", "1")], "word string, count string"))
    with pytest.raises(ConfigurationError, match="no key column 'word'"):
        counts.with_initial_state(spark.createDataFrame([("a", 1)], "w string, count long"))
    with pytest.raises(ConfigurationError, match="needs event time"):
        keyed.window(tumbling("1 minute"), n=count())
    twice = spark.createDataFrame([("a", 1), ("a", 2)], "word string, count long")
    query = counts.with_initial_state(twice).to_parquet(str(tmp_path / "out"))
    with pytest.raises(GICError, match="appears more than once in the initial state"):
        query.run(trigger="available-now")
