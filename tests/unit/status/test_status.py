"""The job status record: round trip, overwrite, forward compatibility, damage."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gic_runtime.checkpoint.manifest import RestoreMode
from gic_runtime.control import Outcome
from gic_runtime.control.envelope import encode_record
from gic_runtime.errors import (
    BucketCountMismatchError,
    ConfigurationError,
    CorruptFileError,
    FencedError,
    GICError,
    ObjectTooLargeError,
    QueryMismatchError,
    RestoreError,
    StorageError,
    StoragePermissionError,
    StorageTimeoutError,
    UnsupportedVersionError,
)
from gic_runtime.status import (
    FAILURE_MESSAGE_MAX,
    CheckpointStatus,
    DriverInfo,
    FailureReason,
    FailureStatus,
    JobState,
    JobStatus,
    MaterializationStatus,
    RestoreStatus,
    SavepointStatus,
    SweepStatus,
    decode_status,
    encode_status,
    failure_reason,
    read_status,
    status_uri,
    write_status,
)
from gic_runtime.storage.uri import StoreResolver

JOB = "job-a"


def full_status() -> JobStatus:
    return JobStatus(
        job_id=JOB,
        epoch=4,
        state=JobState.RUNNING,
        updated_at=1700000100.5,
        started_at=1700000000.0,
        batches=12,
        last_checkpoint=CheckpointStatus(
            id=41,
            created_at=1700000100.0,
            duration_ms=182.5,
            bytes_uploaded=5000,
            changelog_bytes=4000,
            snapshot_bytes=1000,
            local_hit_ratio=0.75,
            rows=100_000,
        ),
        restored_from=RestoreStatus("s3://b/savepoints/sp-1", RestoreMode.NO_CLAIM, True, 40),
        materialization=MaterializationStatus(started=9, adopted=8, failed=1, bytes_uploaded=77),
        last_sweep=SweepStatus(deleted=3, deleted_bytes=300, at=1700000001.0),
        last_savepoint=SavepointStatus.from_outcome(
            Outcome.completed("sp-2", path="s3://b/sp-2", checkpoint_id=40, finished_at=5.0)
        ),
        error=None,
        driver=DriverInfo(pid=123, host="driver-0"),
        extra={"spark_app_id": "local-1", "nested": {"a": [1, 2]}},
    )


def test_round_trip(resolver: StoreResolver, root: str) -> None:
    status = full_status()
    write_status(resolver, root, JOB, status)
    assert read_status(resolver, root, JOB) == status
    assert status.last_savepoint is not None and status.last_savepoint.state == "completed"


def test_minimal_status_and_overwrite(resolver: StoreResolver, root: str) -> None:
    assert read_status(resolver, root, JOB) is None
    first = JobStatus(JOB, 1, JobState.STARTING, updated_at=1.0, started_at=1.0)
    write_status(resolver, root, JOB, first)
    assert read_status(resolver, root, JOB) == first
    failed = first.replace(state=JobState.FAILED, error="boom", updated_at=2.0)
    write_status(resolver, root, JOB, failed)
    assert read_status(resolver, root, JOB) == failed


def test_current_driver_info() -> None:
    info = DriverInfo.current()
    assert info.pid > 0 and info.host


def test_the_record_is_text_with_a_checksummed_header() -> None:
    data = encode_status(full_status())
    header, _, body = data.partition(b"\n")
    assert header.startswith(b"GICT 1 crc32c=")
    assert b'"state": "running"' in body


def test_unknown_fields_are_ignored_and_missing_parts_are_none() -> None:
    body = full_status().to_json()
    body["future_field"] = {"x": 1}
    body["last_checkpoint"]["future"] = True
    for name in ("restored_from", "last_sweep", "driver", "extra"):
        del body[name]
    status = decode_status(encode_record("GICT", 1, body, what="t"), "file:///s.json")
    assert status.restored_from is None and status.driver is None and status.extra == {}
    assert status.last_checkpoint == full_status().last_checkpoint


def failed_status(epoch: int = 5) -> JobStatus:
    error = QueryMismatchError("job job-a: its checkpoints were written by a different query")
    return JobStatus(
        job_id=JOB,
        epoch=epoch,
        state=JobState.FAILED,
        updated_at=1700000200.0,
        started_at=1700000200.0,
        error=str(error),
        failure=FailureStatus.of(error),
    )


def test_a_failure_round_trips(resolver: StoreResolver, root: str) -> None:
    status = failed_status()
    write_status(resolver, root, JOB, status)
    found = read_status(resolver, root, JOB)
    assert found == status
    assert found.failure == FailureStatus(
        "QueryMismatch",
        "job job-a: its checkpoints were written by a different query",
        "QueryMismatchError",
    )
    body = encode_status(status).partition(b"\n")[2]
    assert b'"reason": "QueryMismatch"' in body and b'"error_type": "QueryMismatchError"' in body


def test_a_record_without_a_failure_reads_as_none() -> None:
    """Records written before the failure existed (no ``failure`` key) still read."""
    body = full_status().to_json()
    del body["failure"]
    status = decode_status(encode_record("GICT", 1, body, what="t"), "file:///s.json")
    assert status.failure is None and status == full_status()
    body = {**failed_status().to_json(), "failure": None}
    assert decode_status(encode_record("GICT", 1, body, what="t"), "file:///s.json").failure is None


def test_a_failure_from_a_newer_writer_keeps_its_reason_and_ignores_new_fields() -> None:
    """A newer writer may know more reasons and fields: the record still reads, with the
    reason as stored (the reader decides what it trusts)."""
    body = failed_status().to_json()
    body["failure"] = {"reason": "SomethingNew", "message": "m", "hint": {"x": 1}}
    failure = decode_status(encode_record("GICT", 1, body, what="t"), "file:///s.json").failure
    assert failure == FailureStatus("SomethingNew", "m", "")


@pytest.mark.parametrize(
    "failure",
    [{"message": "m"}, {"reason": 3, "message": "m"}, {"reason": "Fenced"}, "Fenced"],
)
def test_a_malformed_failure_is_corrupt(failure: object) -> None:
    body = {**failed_status().to_json(), "failure": failure}
    with pytest.raises(CorruptFileError, match="job status"):
        decode_status(encode_record("GICT", 1, body, what="t"), "file:///s.json")


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (QueryMismatchError("q"), FailureReason.QUERY_MISMATCH),
        (ConfigurationError("c"), FailureReason.INVALID_SETTINGS),
        (RestoreError("r"), FailureReason.RESTORE_FAILED),
        (BucketCountMismatchError("128 vs 64"), FailureReason.INVALID_SETTINGS),
        (CorruptFileError("bad", uri="file:///x"), FailureReason.UNREADABLE_FILE),
        (UnsupportedVersionError("v9", uri="file:///x"), FailureReason.UNREADABLE_FILE),
        (
            ObjectTooLargeError("big", uri="file:///x", size=9, limit=1),
            FailureReason.UNREADABLE_FILE,
        ),
        (StoragePermissionError("denied"), FailureReason.STORAGE_ACCESS_DENIED),
        (StorageTimeoutError("slow"), FailureReason.STORAGE_UNAVAILABLE),
        (StorageError("no bucket"), FailureReason.STORAGE_ERROR),
        (FencedError("superseded"), FailureReason.FENCED),
        (GICError("other"), FailureReason.JOB_ERROR),
        (ZeroDivisionError("division by zero"), FailureReason.JOB_ERROR),
        (KeyboardInterrupt(), FailureReason.JOB_ERROR),
    ],
)
def test_every_error_has_a_reason(error: BaseException, reason: FailureReason) -> None:
    assert failure_reason(error) is reason
    assert FailureStatus.of(error).reason == reason.value


def test_failure_messages_are_one_bounded_line() -> None:
    assert FailureStatus.of(ConfigurationError("bad\n  - x: y\n")).message == "bad - x: y"
    user = FailureStatus.of(ZeroDivisionError("division by zero"))
    assert (user.message, user.error_type) == (
        "ZeroDivisionError: division by zero",
        "ZeroDivisionError",
    )
    assert FailureStatus.of(KeyboardInterrupt()).message == "KeyboardInterrupt"
    long = FailureStatus.of(QueryMismatchError("word " * 5000)).message
    assert len(long) <= FAILURE_MESSAGE_MAX and long.endswith("word...")
    assert len(FailureStatus.of(GICError("x" * 10**6)).message) == FAILURE_MESSAGE_MAX
    exact = "x" * FAILURE_MESSAGE_MAX
    assert FailureStatus.of(GICError(exact)).message == exact


def test_writing_for_another_job_is_refused(resolver: StoreResolver, root: str) -> None:
    with pytest.raises(ConfigurationError, match="cannot be written as the status of job 'b'"):
        write_status(resolver, root, "b", full_status())


def test_a_record_in_the_wrong_job_directory_is_corrupt(resolver: StoreResolver, root: str) -> None:
    store, key = resolver.resolve(status_uri(root, "job-b"))
    store.put(key, encode_status(full_status()))
    with pytest.raises(CorruptFileError, match="holds the status of job 'job-a'"):
        read_status(resolver, root, "job-b")


@pytest.mark.parametrize(
    ("damage", "error", "message"),
    [
        (lambda d: d[:-1], CorruptFileError, "checksum mismatch"),
        (lambda d: b"GICX" + d[4:], CorruptFileError, "not a GIC job status"),
        (lambda d: d.replace(b"GICT 1", b"GICT 9", 1), UnsupportedVersionError, "version 9"),
        (
            lambda _: encode_record("GICT", 1, {"job_id": JOB}, what="t"),
            CorruptFileError,
            "missing field 'epoch'",
        ),
        (
            lambda _: encode_record(
                "GICT", 1, {**full_status().to_json(), "state": "dancing"}, what="t"
            ),
            CorruptFileError,
            "invalid field",
        ),
        (
            lambda _: encode_record(
                "GICT", 1, {**full_status().to_json(), "batches": -1}, what="t"
            ),
            CorruptFileError,
            "batches must be at least 0",
        ),
    ],
)
def test_damaged_records_name_the_file(
    resolver: StoreResolver,
    root: str,
    damage: object,
    error: type[Exception],
    message: str,
) -> None:
    uri = status_uri(root, JOB)
    store, key = resolver.resolve(uri)
    store.put(key, damage(encode_status(full_status())))  # type: ignore[operator]
    with pytest.raises(error, match=message) as info:
        read_status(resolver, root, JOB)
    assert uri in str(info.value)


def test_nan_cannot_be_written(resolver: StoreResolver, root: str) -> None:
    bad = full_status().replace(
        last_checkpoint=CheckpointStatus(id=1, created_at=1.0, duration_ms=float("nan"))
    )
    with pytest.raises(ConfigurationError, match="not serializable as JSON"):
        write_status(resolver, root, JOB, bad)


_finite = st.floats(min_value=0, max_value=1e12, allow_nan=False)
_count = st.integers(0, 2**53)
_text = st.text(max_size=30)


@settings(max_examples=100, deadline=None)
@given(
    st.builds(
        JobStatus,
        job_id=st.just(JOB),
        epoch=_count,
        state=st.sampled_from(list(JobState)),
        updated_at=_finite,
        started_at=_finite,
        batches=_count,
        last_checkpoint=st.none()
        | st.builds(
            CheckpointStatus,
            id=_count,
            created_at=_finite,
            duration_ms=_finite,
            bytes_uploaded=_count,
            changelog_bytes=_count,
            snapshot_bytes=_count,
            local_hit_ratio=st.none() | st.floats(0, 1),
            rows=_count,
        ),
        restored_from=st.none()
        | st.builds(
            RestoreStatus,
            source=_text,
            mode=st.sampled_from(list(RestoreMode)),
            released=st.booleans(),
            checkpoint_id=st.none() | _count,
        ),
        materialization=st.none()
        | st.builds(MaterializationStatus, _count, _count, _count, _count),
        last_sweep=st.none() | st.builds(SweepStatus, _count, _count, _finite),
        last_savepoint=st.none()
        | st.builds(
            SavepointStatus,
            request_id=_text,
            state=st.sampled_from(["completed", "failed"]),
            path=st.none() | _text,
            checkpoint_id=st.none() | _count,
            size_bytes=st.none() | _count,
            finished_at=st.none() | _finite,
            error=st.none() | _text,
        ),
        error=st.none() | _text,
        driver=st.none() | st.builds(DriverInfo, pid=_count, host=_text),
        extra=st.dictionaries(_text, st.none() | st.booleans() | _count | _text, max_size=3),
        failure=st.none()
        | st.builds(
            FailureStatus,
            reason=st.sampled_from([r.value for r in FailureReason]) | _text,
            message=_text,
            error_type=_text,
        ),
    )
)
def test_encoding_round_trips(status: JobStatus) -> None:
    assert decode_status(encode_status(status), "file:///x/status.json") == status
