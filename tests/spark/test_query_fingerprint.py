"""A job never resumes another query's state by accident: the examples run as a user
would (their ``main``, settings from ``GIC_*`` variables), and ``examples/event_log.py``
under word count's job id is refused before anything is written (launched with a
fencing epoch, as the operator launches drivers, only the refusal is recorded in the
job's status record); the same query resumes, and a deliberate change resumes with
``GIC_ALLOW_QUERY_CHANGE``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from gic_runtime.checkpoint.catalog import find_latest_checkpoint
from gic_runtime.errors import QueryMismatchError
from gic_runtime.fencing import highest_epoch
from gic_runtime.query import QueryFingerprint
from gic_runtime.spark import GICJob, count, max_
from gic_runtime.spark.fingerprint import _describe
from gic_runtime.status import JobState, read_status
from gic_runtime.storage.uri import StoreResolver

from .words import write_text_batches

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str) -> ModuleType:
    sys.path.insert(0, str(EXAMPLES))
    try:
        return __import__(name)
    finally:
        sys.path.pop(0)


def job_files(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def latest_query(storage: Path, job_id: str) -> QueryFingerprint | None:
    latest = find_latest_checkpoint(StoreResolver(), storage.as_uri(), job_id)
    assert latest is not None
    return QueryFingerprint.from_json(latest.stored.manifest.query)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``GIC_*`` settings of a user's shell: storage and scratch under ``tmp_path``."""
    for name in list(os.environ):
        if name.startswith("GIC_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("GIC_STORAGE", str(tmp_path / "gic-data"))
    monkeypatch.setenv("GIC_LOCAL_DIR", str(tmp_path / "local"))
    monkeypatch.setenv("GIC_NUM_BUCKETS", "16")
    monkeypatch.setenv("GIC_CONTROL_POLL_S", "0.1")
    return tmp_path / "gic-data"


@pytest.mark.slow
def test_event_log_under_word_counts_job_id_is_refused_and_changes_nothing(
    spark: SparkSession, tmp_path: Path, env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    word_count, event_log = example("word_count"), example("event_log")
    text, events = tmp_path / "text", tmp_path / "events"
    write_text_batches(text, 2)
    events.mkdir()
    rows = [{"user": f"u{i % 3}", "event": f"e{i}"} for i in range(12)]
    (events / "events-0.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    word_count.main(["--input", str(text), "--output", str(tmp_path / "word-counts")])
    job_dir = env / "jobs" / "word-count"
    before = job_files(job_dir)
    assert any(name.startswith("checkpoints/chk-") for name in before)
    recorded = latest_query(env, "word-count")
    assert recorded is not None and recorded.source is not None
    assert recorded.source.text == f"text files at {text}"

    monkeypatch.setenv("GIC_JOB_ID", "word-count")
    with pytest.raises(QueryMismatchError) as caught:
        event_log.main(["--input", str(events), "--output", str(tmp_path / "event-log")])

    message = str(caught.value)
    assert message.startswith(
        "job word-count: its checkpoints were written by a different query"
    ), message
    assert f"source (stored: text files at {text}; this query: json files at {events})" in message
    assert (
        "processing (stored: aggregate by 'word': count=count() (value states agg:count); "
        "this query: process_batches by 'user': event_log.log_events)"
    ) in message
    assert (
        "output schema (stored: word: string, count: int64; "
        "this query: user: string, events: int64, last_event: string)"
    ) in message
    assert "another job id" in message and "GIC_ALLOW_QUERY_CHANGE=1" in message
    assert f"{job_dir.as_uri()}/" in message
    assert job_files(job_dir) == before  # no epoch claimed, no status, nothing swept
    assert not (tmp_path / "event-log").exists()

    # Launched with its fencing epoch (as the operator launches drivers), the refusal
    # is recorded in the job's status record under that epoch; still nothing is claimed.
    monkeypatch.setenv("GIC_EPOCH", "2")
    with pytest.raises(QueryMismatchError):
        event_log.main(["--input", str(events), "--output", str(tmp_path / "event-log")])
    resolver = StoreResolver()
    status = read_status(resolver, env.as_uri(), "word-count")
    assert status is not None and status.state is JobState.FAILED and status.epoch == 2
    assert status.failure is not None and status.failure.reason == "QueryMismatch"
    assert status.failure.error_type == "QueryMismatchError"
    assert status.failure.message == " ".join(message.split())
    assert highest_epoch(resolver, env.as_uri(), "word-count") == 1
    after = job_files(job_dir)
    assert {k for k in after if after[k] != before.get(k)} == {"status.json"}
    monkeypatch.delenv("GIC_EPOCH")

    # The query that wrote the checkpoints resumes them.
    monkeypatch.delenv("GIC_JOB_ID")
    write_text_batches(text, 1, start=2)
    word_count.main(["--input", str(text), "--output", str(tmp_path / "word-counts")])
    assert latest_query(env, "word-count") == recorded


@pytest.mark.slow
def test_a_deliberate_change_resumes_with_the_override_and_is_recorded(
    spark: SparkSession, tmp_path: Path, env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = tmp_path / "text"
    write_text_batches(text, 1)
    example("word_count").main(["--input", str(text), "--output", str(tmp_path / "out")])
    job_dir = env / "jobs" / "word-count"
    before = job_files(job_dir)

    def upgraded() -> GICJob:
        job = GICJob.create("word-count")
        lines = job.spark.readStream.option("maxFilesPerTrigger", 1).text(str(text))
        words = lines.select(
            F.explode(F.split(F.lower(F.col("value")), r"[^a-z0-9']+")).alias("word")
        ).where(F.col("word") != "")
        sized = words.select("word", F.length("word").alias("length"))
        query = job.keyed(sized, key="word").aggregate(count=count(), longest=max_("length"))
        query.to_parquet(str(tmp_path / "out")).run(trigger="available-now")
        return job

    with pytest.raises(QueryMismatchError) as caught:
        upgraded()
    message = str(caught.value)
    assert "processing (stored:" in message and "output schema (stored:" in message
    assert "source (" not in message  # same files: the source did not change
    assert job_files(job_dir) == before

    monkeypatch.setenv("GIC_ALLOW_QUERY_CHANGE", "1")
    write_text_batches(text, 1, start=1)
    upgraded()
    recorded = latest_query(env, "word-count")
    assert recorded is not None
    assert recorded.output.text == "word: string, count: int64, longest: int32"


def test_sources_are_described_by_what_identifies_their_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # a file source: its paths (relative ones made absolute), not its tuning options
    text = _describe("text", {"path": "in/", "maxFilesPerTrigger": "1"}, [])
    assert text == f"text files at {tmp_path / 'in'}"
    assert _describe("text", {"path": str(tmp_path / "in")}, []) == text
    # other sources: topics and tables, never secrets, broker lists or tuning
    kafka = _describe(
        "kafka",
        {
            "subscribe": "events",
            "kafka.bootstrap.servers": "b1:9092,b2:9092",
            "kafka.sasl.jaas.config": "password=secret",
            "maxOffsetsPerTrigger": "1000",
        },
        [],
    )
    assert kafka == "kafka subscribe=events"
    assert _describe("rate-micro-batch", {"rowsPerBatch": "10"}, []) == "rate-micro-batch"
    # URIs lose their user information (credentials)
    assert _describe("parquet", {"path": "s3a://KEY:SECRET@bucket/in"}, []) == (
        "parquet files at s3a://bucket/in"
    )
