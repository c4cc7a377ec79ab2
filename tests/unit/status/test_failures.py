"""A driver that fails records why in its status record, under its own epoch, without
Spark: at start-up before it could report (a query mismatch, a fencing epoch it cannot
claim, settings it cannot load), and at the end of a launch; a newer epoch's record is
never replaced."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from gic_runtime.config import GICSettings
from gic_runtime.errors import (
    ConfigurationError,
    FencedError,
    QueryMismatchError,
    StorageTimeoutError,
)
from gic_runtime.fencing import claim_epoch, highest_epoch
from gic_runtime.spark import GICJob
from gic_runtime.spark.startup import start_driver
from gic_runtime.spark.telemetry import Telemetry, record_failure
from gic_runtime.status import (
    CheckpointStatus,
    FailureStatus,
    JobState,
    JobStatus,
    read_status,
    status_uri,
    write_status,
)
from gic_runtime.storage.uri import StoreResolver

JOB = "job-a"


def running(epoch: int) -> JobStatus:
    return JobStatus(
        JOB,
        epoch,
        JobState.RUNNING,
        updated_at=1.0,
        started_at=1.0,
        last_checkpoint=CheckpointStatus(id=7, created_at=1.0, duration_ms=2.0),
    )


def test_a_failure_is_recorded_under_its_epoch(resolver: StoreResolver, root: str) -> None:
    write_status(resolver, root, JOB, running(2))
    error = QueryMismatchError("job job-a: its checkpoints were written by a different query")
    assert record_failure(resolver, root, JOB, 3, error)
    status = read_status(resolver, root, JOB)
    assert status is not None
    assert (status.epoch, status.state, status.error) == (3, JobState.FAILED, str(error))
    assert status.failure == FailureStatus.of(error)
    assert status.failure.reason == "QueryMismatch"
    assert status.batches == 0 and status.driver is not None
    # the job's latest checkpoint is still the job's latest checkpoint
    assert status.last_checkpoint == running(2).last_checkpoint


def test_a_newer_epochs_record_is_left_alone(resolver: StoreResolver, root: str) -> None:
    write_status(resolver, root, JOB, running(5))
    assert not record_failure(resolver, root, JOB, 4, FencedError("superseded"))
    assert read_status(resolver, root, JOB) == running(5)


def test_an_unreadable_record_is_replaced(resolver: StoreResolver, root: str) -> None:
    store, key = resolver.resolve(status_uri(root, JOB))
    store.put(key, b"GICT 1 crc32c=00000000\n{damaged")
    assert record_failure(resolver, root, JOB, 1, StorageTimeoutError("slow"))
    status = read_status(resolver, root, JOB)
    assert status is not None and status.failure is not None
    assert status.failure.reason == "StorageUnavailable"


def settings(root: str, tmp_path: Path, **values: Any) -> GICSettings:
    return GICSettings(
        job_id=JOB, storage=root, num_tasks=2, local_dir=str(tmp_path / "local"), **values
    )


def test_a_launch_reports_its_failure_unless_superseded(
    resolver: StoreResolver, root: str, tmp_path: Path
) -> None:
    telemetry = Telemetry(resolver, settings(root, tmp_path), epoch=2)
    error = RuntimeError("the user's code failed")
    telemetry.stopped(error)
    status = read_status(resolver, root, JOB)
    assert status is not None and status.state is JobState.FAILED
    assert status.failure == FailureStatus(
        "JobError", "RuntimeError: the user's code failed", "RuntimeError"
    )
    assert status.error == "the user's code failed"

    # A superseded launch that fails (fenced) leaves the newer launch's record alone.
    old = Telemetry(resolver, settings(root, tmp_path), epoch=3)
    write_status(resolver, root, JOB, running(4))
    old.stopped(FencedError("driver epoch 3 of job 'job-a' was superseded by epoch 4"))
    assert read_status(resolver, root, JOB) == running(4)


def start(resolver: StoreResolver, s: GICSettings) -> None:
    """Start a driver whose start-up fails before it touches Spark."""
    start_driver(None, s, "key", None, None, resolver=resolver)  # type: ignore[arg-type]


def test_a_refusal_before_the_claim_is_recorded_under_the_given_epoch(
    resolver: StoreResolver, root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_status(resolver, root, JOB, running(1))
    refusal = QueryMismatchError("job job-a: its checkpoints were written by a different query")

    def refuse(*args: object, **kwargs: object) -> None:
        raise refusal

    monkeypatch.setattr("gic_runtime.spark.startup.check_resume_query", refuse)
    with pytest.raises(QueryMismatchError):
        start(resolver, settings(root, tmp_path, epoch=3))
    status = read_status(resolver, root, JOB)
    assert status is not None and status.epoch == 3
    assert status.failure is not None and status.failure.reason == "QueryMismatch"
    assert highest_epoch(resolver, root, JOB) == 0, "the refusal claims nothing"

    # Without an epoch of its own (a run by hand), nothing is recorded.
    write_status(resolver, root, JOB, running(1))
    with pytest.raises(QueryMismatchError):
        start(resolver, settings(root, tmp_path))
    assert read_status(resolver, root, JOB) == running(1)


def test_an_epoch_that_cannot_be_claimed_is_recorded(
    resolver: StoreResolver, root: str, tmp_path: Path
) -> None:
    for _ in range(2):
        claim_epoch(resolver, root, JOB, claimed_by="someone else")
    with pytest.raises(FencedError, match="cannot claim epoch 1"):
        start(resolver, settings(root, tmp_path, epoch=1))
    status = read_status(resolver, root, JOB)
    assert status is not None and status.epoch == 1 and status.failure is not None
    assert status.failure.reason == "Fenced"
    assert "cannot claim epoch 1" in status.failure.message


def test_settings_that_cannot_be_loaded_are_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    for name in list(os.environ):
        if name.startswith("GIC_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("GIC_STORAGE", store.as_uri())
    monkeypatch.setenv("GIC_JOB_ID", JOB)
    monkeypatch.setenv("GIC_EPOCH", "6")
    monkeypatch.setenv("GIC_NUM_BUCKETS", "many")
    with pytest.raises(ConfigurationError, match="GIC_NUM_BUCKETS"):
        GICJob.create("ignored")
    status = read_status(StoreResolver(), store.as_uri(), JOB)
    assert status is not None and status.epoch == 6
    assert status.failure is not None and status.failure.reason == "InvalidSettings"
    assert "GIC_NUM_BUCKETS" in status.failure.message

    # Without the epoch the operator gives, there is no launch to record it for.
    other = tmp_path / "other"
    monkeypatch.setenv("GIC_STORAGE", other.as_uri())
    monkeypatch.delenv("GIC_EPOCH")
    with pytest.raises(ConfigurationError):
        GICJob.create("ignored")
    assert read_status(StoreResolver(), other.as_uri(), JOB) is None
