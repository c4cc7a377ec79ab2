"""The per-key and vectorized styles on real Spark, with map and list state, and the
at-least-once foreach_batch sink."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession

from gic_runtime.config import GICSettings
from gic_runtime.processing import KeyState
from gic_runtime.sinks import read_file_sink
from gic_runtime.spark import GICJob
from gic_runtime.storage.uri import StoreResolver

from .words import WORDS


def write_events(directory: Path, batches: int, per_batch: int = 40) -> list[list[dict[str, Any]]]:
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for b in range(batches):
        rows = [
            {"user": WORDS[(b * 3 + i) % 5], "event": f"e{b}-{i}", "page": WORDS[i % 4]}
            for i in range(per_batch)
        ]
        path = directory / f"events-{b:04d}.json"
        path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        os.utime(path, (1_700_000_000 + b, 1_700_000_000 + b))
        out.append(rows)
    return out


def events_of(spark: SparkSession, src: Path) -> DataFrame:
    reader = spark.readStream.schema("user string, event string, page string")
    return reader.option("maxFilesPerTrigger", 1).json(str(src))


def settings(tmp_path: Path, job: str) -> GICSettings:
    return GICSettings(
        job_id=job,
        storage=(tmp_path / "store").as_uri(),
        num_buckets=8,
        local_dir=str(tmp_path / "local"),
        control_poll_s=0.1,
    )


def per_user(
    state_fn_rows: list[list[dict[str, Any]]],
) -> tuple[dict[str, list[str]], dict[str, dict[str, int]]]:
    events: dict[str, list[str]] = {}
    pages: dict[str, dict[str, int]] = {}
    for rows in state_fn_rows:
        for r in rows:
            events.setdefault(r["user"], []).append(r["event"])
            user_pages = pages.setdefault(r["user"], {})
            user_pages[r["page"]] = user_pages.get(r["page"], 0) + 1
    return events, pages


def test_per_key_function_with_list_and_map_state(spark: SparkSession, tmp_path: Path) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    batches = write_events(src, 3)

    def track(user: str, rows: pa.Table, state: KeyState) -> list[dict[str, Any]]:
        log = state.list("events")
        log.extend(rows.column("event").to_pylist())
        pages = state.map("pages")
        for page in rows.column("page").to_pylist():
            pages.put(page, pages.get(page, 0) + 1)
        top = max(pages.items(), key=lambda kv: (kv[1], kv[0]))
        n = len(log.get())
        return [{"user": user, "events": n, "top_page": top[0], "batch": state.batch_id}]

    job = GICJob(spark, settings(tmp_path, "per-key"))
    schema = "user string, events long, top_page string, batch long"
    summary = (
        job.keyed(events_of(spark, src), key="user")
        .process(track, schema)
        .to_parquet(str(out))
        .run(trigger="available-now")
    )
    assert len(summary.batches) == 3
    table = read_file_sink(out.as_uri(), StoreResolver())
    assert table is not None
    final: dict[str, dict[str, Any]] = {}
    for row in table.to_pylist():
        assert row["batch"] == row["batch_id"]
        final[row["user"]] = row
    events, pages = per_user(batches)
    assert {u: r["events"] for u, r in final.items()} == {u: len(e) for u, e in events.items()}
    expected_top = {u: max(p.items(), key=lambda kv: (kv[1], kv[0]))[0] for u, p in pages.items()}
    assert {u: r["top_page"] for u, r in final.items()} == expected_top


def test_vectorized_event_log_and_foreach_batch_sink(spark: SparkSession, tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    try:
        import event_log
    finally:
        sys.path.pop(0)
    # Executors cannot import the example module: ship its functions by value, as
    # cloudpickle does for an app run as __main__ (``gic run``).
    cloudpickle.register_pickle_by_value(event_log)
    src = tmp_path / "in"
    batches = write_events(src, 3)
    delivered: list[tuple[int, dict[str, int]]] = []

    def deliver(df: DataFrame, batch_id: int) -> None:
        delivered.append((batch_id, {r["user"]: r["events"] for r in df.collect()}))

    job = GICJob(spark, settings(tmp_path, "event-log"))
    events = events_of(spark, src).select("user", "event")
    job.keyed(events, key="user").process_batches(
        event_log.log_events, event_log.OUTPUT
    ).foreach_batch(deliver).run(trigger="available-now")
    assert [b for b, _ in delivered] == [0, 1, 2]
    events_by_user, _ = per_user(batches)
    final: dict[str, int] = {}
    for _, counts in delivered:
        final.update(counts)
    assert final == {u: len(e) for u, e in events_by_user.items()}
