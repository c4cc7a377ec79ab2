"""The JSON records keep their wire form: golden bodies of every record kind.

Each ``GOLDEN_*`` string is the JSON body a record of that kind had when the format was
fixed; a writer must still produce exactly it (same keys, same JSON types: ``1`` is not
``1.0``) and a reader must still read it (and the variants older and newer writers
produce: keys missing, extra keys, nulls) back into the same value. Damaged bodies raise
the error each reader always raised, naming the record kind and the field.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from gic_runtime import codec
from gic_runtime.checkpoint import (
    Manifest,
    ManifestKind,
    RestoreLineage,
    RestoreMode,
    SavepointFormat,
    SavepointInfo,
    SavepointType,
    decode_manifest,
    encode_manifest,
)
from gic_runtime.checkpoint.ownership import Owner
from gic_runtime.cli.cmd_jobs import _Job
from gic_runtime.cli.inventory import JobFiles
from gic_runtime.cli.summary import BucketTotals, OwnerGroup
from gic_runtime.control.envelope import encode_record
from gic_runtime.control.model import (
    Outcome,
    SavepointRequest,
    StopRequest,
    decode_outcome,
    decode_request,
    encode_outcome,
    encode_request,
)
from gic_runtime.coordination.barrier import StagedFile, TaskAck, TaskStats
from gic_runtime.errors import CorruptFileError, FormatError
from gic_runtime.formats import encode_text_record
from gic_runtime.handles import BucketState, ChangelogHandle, SnapshotHandle
from gic_runtime.materialization.snapshot_record import MaterializationRecord
from gic_runtime.materialization.snapshot_record import decode_record as decode_mat
from gic_runtime.materialization.snapshot_record import encode_record as encode_mat
from gic_runtime.query import QueryFingerprint
from gic_runtime.status import (
    CheckpointStatus,
    DriverInfo,
    FailureStatus,
    JobState,
    JobStatus,
    MaterializationStatus,
    RestoreStatus,
    SavepointStatus,
    SweepStatus,
    decode_status,
    encode_status,
)

STATUS_URI = "file:///r/jobs/job-a/status.json"


def typed(value: Any) -> Any:
    """``value`` (parsed JSON) with every scalar tagged by its type: ``1``, ``1.0`` and
    ``true`` compare different."""
    if isinstance(value, dict):
        return {key: typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [typed(item) for item in value]
    return (type(value).__name__, value)


def assert_same_json(actual: Any, golden: str) -> None:
    assert typed(actual) == typed(json.loads(golden))


def body_of(record: bytes) -> Any:
    return json.loads(record.partition(b"\n")[2])


def golden(text: str) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(text)
    return parsed


# --- the job status record (GICT) --------------------------------------------------------

GOLDEN_STATUS = """{"batches": 12, "driver": {"host": "driver-0", "pid": 123}, "epoch": 4,
"error": "boom", "extra": {"nested": {"a": [1, 2.5, null, true]}, "spark_app_id": "local-1"},
"failure": {"error_type": "QueryMismatchError", "message": "job job-a: different query",
"reason": "QueryMismatch"}, "job_id": "job-a", "last_checkpoint": {"bytes_uploaded": 5000,
"changelog_bytes": 4000, "created_at": 1700000100.0, "duration_ms": 182.5, "executors": 3,
"expired": 9,
"id": 41, "late_rows": 2, "local_hit_ratio": 0.75, "moved_ranges": [[0, 4], [8, 12]],
"restore_bytes": 65000, "restore_pending": 5,
"rows": 100000, "snapshot_bytes": 1000, "timers_fired": 6,
"watermark_us": 1700000090000000},
"last_savepoint": {"checkpoint_id": 40, "error": null, "finished_at": 1700000050.0,
"path": "s3://b/sp-2", "request_id": "sp-2", "size_bytes": 1234,
"state": "completed"}, "last_sweep": {"at": 1700000001.0, "deleted": 3, "deleted_bytes": 300},
"materialization": {"adopted": 8, "bytes_uploaded": 77, "failed": 1, "started": 9},
"restored_from": {"checkpoint_id": 40, "mode": "no-claim", "released": true,
"source": "s3://b/savepoints/sp-1/_savepoint.manifest"}, "started_at": 1700000000.0,
"state": "running", "updated_at": 1700000100.5}"""

GOLDEN_STATUS_MINIMAL = """{"batches": 0, "driver": null, "epoch": 1, "error": null,
"extra": {}, "failure": null, "job_id": "job-a", "last_checkpoint": null,
"last_savepoint": null, "last_sweep": null, "materialization": null, "restored_from": null,
"started_at": 1.0, "state": "starting", "updated_at": 1.0}"""


def full_status() -> JobStatus:
    return JobStatus(
        job_id="job-a",
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
            rows=100000,
            executors=3,
            moved_ranges=((0, 4), (8, 12)),
            watermark_us=1700000090000000,
            late_rows=2,
            timers_fired=6,
            expired=9,
            restore_pending=5,
            restore_bytes=65000,
        ),
        restored_from=RestoreStatus(
            "s3://b/savepoints/sp-1/_savepoint.manifest", RestoreMode.NO_CLAIM, True, 40
        ),
        materialization=MaterializationStatus(started=9, adopted=8, failed=1, bytes_uploaded=77),
        last_sweep=SweepStatus(deleted=3, deleted_bytes=300, at=1700000001.0),
        last_savepoint=SavepointStatus(
            "sp-2", "completed", "s3://b/sp-2", 40, 1234, 1700000050.0, None
        ),
        error="boom",
        driver=DriverInfo(pid=123, host="driver-0"),
        extra={"spark_app_id": "local-1", "nested": {"a": [1, 2.5, None, True]}},
        failure=FailureStatus("QueryMismatch", "job job-a: different query", "QueryMismatchError"),
    )


def minimal_status() -> JobStatus:
    return JobStatus("job-a", 1, JobState.STARTING, updated_at=1.0, started_at=1.0)


def read_status_body(body: dict[str, Any]) -> JobStatus:
    return decode_status(encode_record("GICT", 1, body, what="t"), STATUS_URI)


@pytest.mark.parametrize(
    ("status", "text"),
    [(full_status(), GOLDEN_STATUS), (minimal_status(), GOLDEN_STATUS_MINIMAL)],
    ids=["full", "minimal"],
)
def test_status_records_are_written_and_read_as_before(status: JobStatus, text: str) -> None:
    data = encode_status(status)
    assert data == encode_record("GICT", 1, golden(text), what="t")  # byte for byte
    assert data.startswith(b"GICT 1 crc32c=")
    assert_same_json(body_of(data), text)
    assert status.to_json() == golden(text)
    assert JobStatus.from_json(golden(text)) == status
    assert decode_status(data, STATUS_URI) == status


def test_status_optional_keys_may_be_missing() -> None:
    body = golden(GOLDEN_STATUS)
    optional = ("executors", "moved_ranges", "local_hit_ratio", "watermark_us", "late_rows")
    for name in (*optional, "timers_fired", "expired", "restore_pending", "restore_bytes"):
        del body["last_checkpoint"][name]
    del body["materialization"]["failed"], body["materialization"]["bytes_uploaded"]
    del body["failure"]["error_type"], body["restored_from"]["checkpoint_id"]
    for name in ("path", "checkpoint_id", "size_bytes", "finished_at", "error"):
        del body["last_savepoint"][name]
    for name in ("driver", "last_sweep", "error", "extra", "failure"):
        del body[name]
    status = read_status_body(body)
    expected = full_status()
    assert status.last_checkpoint is not None and expected.last_checkpoint is not None
    assert (status.last_checkpoint.executors, status.last_checkpoint.moved_ranges) == (0, ())
    assert status.last_checkpoint.local_hit_ratio is None
    assert (status.last_checkpoint.watermark_us, status.last_checkpoint.late_rows) == (None, 0)
    assert status.last_checkpoint.timers_fired == status.last_checkpoint.expired == 0
    assert status.last_checkpoint.restore_pending == status.last_checkpoint.restore_bytes == 0
    assert status.materialization == MaterializationStatus(9, 8, 0, 0)
    assert status.restored_from == RestoreStatus(
        "s3://b/savepoints/sp-1/_savepoint.manifest", RestoreMode.NO_CLAIM, True, None
    )
    assert status.last_savepoint == SavepointStatus("sp-2", "completed")
    assert (status.driver, status.last_sweep, status.error, status.failure) == (None,) * 4
    assert status.extra == {}
    assert (
        status.replace(
            last_checkpoint=expected.last_checkpoint,
            materialization=expected.materialization,
            restored_from=expected.restored_from,
            last_savepoint=expected.last_savepoint,
            driver=expected.driver,
            last_sweep=expected.last_sweep,
            error=expected.error,
            extra=expected.extra,
            failure=expected.failure,
        )
        == expected
    )
    assert read_status_body(golden(GOLDEN_STATUS_MINIMAL) | {"batches": 0}) == minimal_status()


def test_status_nulls_read_as_the_defaults() -> None:
    body = golden(GOLDEN_STATUS)
    body["last_checkpoint"].update(executors=None, moved_ranges=None, local_hit_ratio=None)
    body["materialization"].update(failed=None, bytes_uploaded=None)
    body["failure"]["error_type"] = None
    body["restored_from"]["checkpoint_id"] = None
    body["extra"] = None
    status = read_status_body(body)
    assert status.last_checkpoint is not None
    assert status.last_checkpoint.executors == 0
    assert status.last_checkpoint.moved_ranges == ()
    assert status.last_checkpoint.local_hit_ratio is None
    assert status.materialization == MaterializationStatus(9, 8, 0, 0)
    assert status.failure == FailureStatus("QueryMismatch", "job job-a: different query", "")
    assert status.restored_from is not None and status.restored_from.checkpoint_id is None
    assert status.extra == {}


def test_status_unknown_keys_are_ignored() -> None:
    body = golden(GOLDEN_STATUS)
    body["future"] = {"x": [1]}
    for part in ("last_checkpoint", "restored_from", "materialization", "last_sweep"):
        body[part]["future"] = 1
    for part in ("last_savepoint", "driver", "failure"):
        body[part]["future"] = None
    assert read_status_body(body) == full_status()


def test_status_failure_reason_is_read_as_stored() -> None:
    body = golden(GOLDEN_STATUS)
    body["failure"]["reason"] = "SomethingNewer"
    status = read_status_body(body)
    assert status.failure is not None and status.failure.reason == "SomethingNewer"


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(body: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = body
        for step in parents:
            target = target[step]
        target[last] = value

    return mutate


def _drop(path: str) -> Callable[[dict[str, Any]], None]:
    def mutate(body: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = body
        for step in parents:
            target = target[step]
        del target[last]

    return mutate


BAD_STATUS = [
    (_drop("epoch"), "missing field 'epoch'"),
    (_drop("batches"), "missing field 'batches'"),
    (_drop("last_checkpoint.rows"), "'last_checkpoint.rows'"),
    (_drop("last_checkpoint.bytes_uploaded"), "'last_checkpoint.bytes_uploaded'"),
    (_drop("restored_from.released"), "'restored_from.released'"),
    (_drop("materialization.started"), "'materialization.started'"),
    (_drop("failure.reason"), "'failure.reason'"),
    (_set("batches", -1), "batches must be at least 0"),
    (_set("epoch", True), "epoch must be an integer"),
    (_set("epoch", 1.0), "epoch must be an integer"),
    (_set("job_id", 7), "job_id must be a string"),
    (_set("state", "dancing"), "state"),
    (_set("updated_at", "now"), "updated_at must be a finite number"),
    (_set("last_checkpoint.id", "41"), "last_checkpoint.id must be an integer"),
    (_set("last_checkpoint.rows", -5), "last_checkpoint.rows must be at least 0"),
    (_set("last_checkpoint.local_hit_ratio", True), "last_checkpoint.local_hit_ratio"),
    (_set("last_checkpoint.moved_ranges", [[4, 2]]), "last_checkpoint.moved_ranges"),
    (_set("last_checkpoint.moved_ranges", [[1, 2, 3]]), "last_checkpoint.moved_ranges"),
    (_set("last_checkpoint.moved_ranges", [[-1, 2]]), "last_checkpoint.moved_ranges"),
    (_set("last_checkpoint.moved_ranges", {"a": 1}), "last_checkpoint.moved_ranges"),
    (_set("last_checkpoint.moved_ranges", [[0, 1]] * 32769), "last_checkpoint.moved_ranges"),
    (_set("restored_from.released", "yes"), "restored_from.released must be a boolean"),
    (_set("restored_from.mode", "borrow"), "restored_from.mode"),
    (_set("materialization.failed", -1), "materialization.failed must be at least 0"),
    (_set("last_sweep.at", None), "last_sweep.at"),
    (_set("last_savepoint.size_bytes", -1), "last_savepoint.size_bytes must be at least 0"),
    (_set("failure", "Fenced"), "failure must be a JSON object"),
    (_set("failure.reason", 3), "failure.reason must be a string"),
    (_set("driver.pid", "1"), "driver.pid must be an integer"),
    (_set("extra", []), "extra must be a JSON object"),
    (_set("last_checkpoint", [1]), "last_checkpoint must be a JSON object"),
]


@pytest.mark.parametrize(("mutate", "message"), BAD_STATUS)
def test_bad_status_records_are_corrupt_naming_kind_and_field(
    mutate: Callable[[dict[str, Any]], None], message: str
) -> None:
    body = golden(GOLDEN_STATUS)
    mutate(body)
    with pytest.raises(CorruptFileError, match="job status") as info:
        read_status_body(body)
    assert message in str(info.value)
    assert info.value.uri == STATUS_URI


def test_a_non_finite_time_is_corrupt() -> None:
    payload = json.dumps({**golden(GOLDEN_STATUS), "updated_at": float("nan")}).encode()
    with pytest.raises(CorruptFileError, match="updated_at must be a finite number"):
        decode_status(encode_text_record("GICT", 1, payload), STATUS_URI)


def test_a_negative_epoch_is_corrupt() -> None:
    with pytest.raises(CorruptFileError, match=r"job status .*epoch"):
        read_status_body({**golden(GOLDEN_STATUS), "epoch": -1})


# --- control requests (GICR) and outcomes (GICO) ----------------------------------------

GOLDEN_SAVEPOINT_REQUEST = """{"format": "canonical", "kind": "terminal", "request_id": "sp-1",
"requested_at": 1700000000.25, "requested_by": "cli:alice", "target": "s3://b/sp",
"type": "savepoint"}"""
GOLDEN_STOP_REQUEST = """{"request_id": "stop-1", "requested_at": 1700000000.0,
"requested_by": "operator", "type": "stop"}"""
GOLDEN_OUTCOME_COMPLETED = """{"checkpoint_id": 7, "error": null, "files": 3,
"finished_at": 1700000002.5, "path": "s3://b/sp", "request_id": "sp-1", "size_bytes": 1024,
"started_at": 1700000000.0, "state": "completed"}"""
GOLDEN_OUTCOME_FAILED = """{"checkpoint_id": null, "error": "disk full", "files": null,
"finished_at": 1700000003.0, "path": null, "request_id": "sp-2", "size_bytes": null,
"started_at": null, "state": "failed"}"""

SAVEPOINT_REQUEST = SavepointRequest(
    "sp-1",
    SavepointType.TERMINAL,
    SavepointFormat.CANONICAL,
    "s3://b/sp",
    1700000000.25,
    "cli:alice",
)
STOP_REQUEST = StopRequest("stop-1", 1700000000.0, "operator")
OUTCOME_COMPLETED = Outcome.completed(
    "sp-1",
    path="s3://b/sp",
    checkpoint_id=7,
    size_bytes=1024,
    files=3,
    started_at=1700000000.0,
    finished_at=1700000002.5,
)
OUTCOME_FAILED = Outcome.failed("sp-2", "disk full", finished_at=1700000003.0)


def _uri(request_id: str, suffix: str) -> str:
    return f"file:///r/jobs/job-a/control/x/{request_id}{suffix}"


@pytest.mark.parametrize(
    ("request_", "text"),
    [(SAVEPOINT_REQUEST, GOLDEN_SAVEPOINT_REQUEST), (STOP_REQUEST, GOLDEN_STOP_REQUEST)],
    ids=["savepoint", "stop"],
)
def test_requests_are_written_and_read_as_before(
    request_: SavepointRequest | StopRequest, text: str
) -> None:
    """Version 2 adds ``mac`` (``null`` when unauthenticated); version 1 is still read."""
    data = encode_request(request_)
    v2 = {**golden(text), "mac": None}
    assert data == encode_record("GICR", 2, v2, what="t")
    assert body_of(data) == v2
    uri = _uri(request_.request_id, ".req")
    assert decode_request(encode_record("GICR", 2, v2, what="t"), uri) == request_
    assert decode_request(encode_record("GICR", 1, golden(text), what="t"), uri) == request_
    extra = {**golden(text), "priority": "high", "note": None}
    assert decode_request(encode_record("GICR", 1, extra, what="t"), uri) == request_


@pytest.mark.parametrize(
    ("outcome", "text"),
    [(OUTCOME_COMPLETED, GOLDEN_OUTCOME_COMPLETED), (OUTCOME_FAILED, GOLDEN_OUTCOME_FAILED)],
    ids=["completed", "failed"],
)
def test_outcomes_are_written_and_read_as_before(outcome: Outcome, text: str) -> None:
    data = encode_outcome(outcome)
    assert data == encode_record("GICO", 1, golden(text), what="t")
    assert_same_json(body_of(data), text)
    uri = _uri(outcome.request_id, ".out")
    assert decode_outcome(encode_record("GICO", 1, golden(text), what="t"), uri) == outcome
    extra = {**golden(text), "retries": 2}
    assert decode_outcome(encode_record("GICO", 1, extra, what="t"), uri) == outcome


def test_outcome_optional_keys_may_be_missing() -> None:
    body = {
        key: value
        for key, value in golden(GOLDEN_OUTCOME_FAILED).items()
        if key in ("request_id", "state", "finished_at", "error")
    }
    data = encode_record("GICO", 1, body, what="t")
    assert decode_outcome(data, _uri("sp-2", ".out")) == OUTCOME_FAILED


def _without(body: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != key}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"type": "savepoint"}, "missing field 'request_id'"),
        (_without(golden(GOLDEN_STOP_REQUEST), "type"), "missing field 'type'"),
        ({**golden(GOLDEN_SAVEPOINT_REQUEST), "type": "teleport"}, "invalid field"),
        ({**golden(GOLDEN_SAVEPOINT_REQUEST), "type": "teleport"}, "teleport"),
        ({**golden(GOLDEN_SAVEPOINT_REQUEST), "kind": "later"}, "kind"),
        ({**golden(GOLDEN_SAVEPOINT_REQUEST), "format": "zip"}, "format"),
        ({**golden(GOLDEN_SAVEPOINT_REQUEST), "target": None}, "target"),
        ({**golden(GOLDEN_STOP_REQUEST), "requested_at": "now"}, "requested_at"),
        ({**golden(GOLDEN_STOP_REQUEST), "request_id": "Stop 1"}, "invalid request id"),
    ],
)
def test_bad_requests_are_corrupt_naming_the_field(body: dict[str, Any], message: str) -> None:
    uri = _uri(str(body.get("request_id", "sp-1")), ".req")
    with pytest.raises(CorruptFileError, match="control request") as info:
        decode_request(encode_record("GICR", 1, body, what="t"), uri)
    assert message in str(info.value)
    assert info.value.uri == uri


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"state": "lost"}, "state"),
        ({"size_bytes": -1}, "size_bytes"),
        ({"files": "3"}, "files must be an integer"),
        ({"finished_at": None}, "finished_at"),
        ({"error": "oops"}, "record it as failed"),
        ({"path": 5}, "path must be a string"),
    ],
)
def test_bad_outcomes_are_corrupt_naming_the_field(change: dict[str, Any], message: str) -> None:
    body = {**golden(GOLDEN_OUTCOME_COMPLETED), **change}
    uri = _uri("sp-1", ".out")
    with pytest.raises(CorruptFileError, match="control outcome") as info:
        decode_outcome(encode_record("GICO", 1, body, what="t"), uri)
    assert message in str(info.value)
    assert info.value.uri == uri


# --- handles: bucket states in task acks and v1 manifests --------------------------------

GOLDEN_BUCKET_STATE = """{"bucket": 3, "changelog": [{"bucket": 3, "crc": 17, "from_seq": 90,
"length": 70, "offset": 0, "to_seq": 110, "uri": "file:///r/jobs/a/changelog/1/s1.seg"},
{"bucket": 3, "crc": 0, "from_seq": 110, "length": 30, "offset": 128, "to_seq": 120,
"uri": "file:///r/jobs/a/changelog/2/s2.seg"}], "seq": 120, "snapshot": {"bucket": 3,
"crc": 4294967295, "seq": 100, "size": 5000, "uri": "file:///r/jobs/a/snapshots/1/b3.snap"},
"token": "file:///r/jobs/a/changelog/2/s2.seg"}"""
GOLDEN_BUCKET_STATE_EMPTY = """{"bucket": 0, "changelog": [], "seq": 0, "snapshot": null,
"token": ""}"""

SNAPSHOT = SnapshotHandle("file:///r/jobs/a/snapshots/1/b3.snap", 3, 100, 5000, 4294967295)
STATE = BucketState(
    3,
    120,
    SNAPSHOT,
    (
        ChangelogHandle("file:///r/jobs/a/changelog/1/s1.seg", 0, 70, 3, 90, 110, 17),
        ChangelogHandle("file:///r/jobs/a/changelog/2/s2.seg", 128, 30, 3, 110, 120, 0),
    ),
    "file:///r/jobs/a/changelog/2/s2.seg",
)


@pytest.mark.parametrize(
    ("state", "text"),
    [(STATE, GOLDEN_BUCKET_STATE), (BucketState(0, 0), GOLDEN_BUCKET_STATE_EMPTY)],
    ids=["full", "empty"],
)
def test_bucket_states_are_written_and_read_as_before(state: BucketState, text: str) -> None:
    assert_same_json(state.to_json(), text)
    assert BucketState.from_json(golden(text)) == state
    assert json.loads(json.dumps(state.to_json())) == state.to_json()


def test_bucket_state_optional_keys_and_extra_keys() -> None:
    assert BucketState.from_json({"bucket": 0, "seq": 0}) == BucketState(0, 0)
    body = golden(GOLDEN_BUCKET_STATE)
    body["future"] = 1
    body["snapshot"]["future"] = [1]
    body["changelog"][0]["future"] = {}
    assert BucketState.from_json(body) == STATE
    assert BucketState.from_json({**body, "snapshot": None}).snapshot is None


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (_drop("seq"), "seq"),
        (_drop("snapshot.crc"), "crc"),
        (_set("snapshot.size", "big"), "size"),
        (_set("bucket", None), "bucket"),
        (_set("changelog", None), "changelog"),
        (_set("changelog", {"a": 1}), "changelog"),
        (_set("snapshot", [0, 100, 5000, 1]), "snapshot"),
    ],
)
def test_bad_bucket_states_raise_value_errors_naming_the_field(
    mutate: Callable[[dict[str, Any]], None], field: str
) -> None:
    body = golden(GOLDEN_BUCKET_STATE)
    mutate(body)
    with pytest.raises((KeyError, TypeError, ValueError)) as info:
        BucketState.from_json(body)
    assert field in str(info.value)


def test_a_bad_handle_in_a_v1_manifest_is_corrupt_naming_the_file() -> None:
    uri = "file:///r/jobs/job-a/checkpoints/chk-000000000007.manifest"
    entry = golden(GOLDEN_BUCKET_STATE)
    entry["changelog"][1]["offset"] = "x"
    body = {
        "job_id": "job-a",
        "checkpoint_id": 7,
        "epoch": 1,
        "created_at": 1.0,
        "num_buckets": 4,
        "kind": "checkpoint",
        "savepoint": None,
        "restored_from": None,
        "base": "..",
        "engine": {},
        "sink": {},
        "buckets": [entry],
    }
    payload = json.dumps(body).encode()
    with pytest.raises(CorruptFileError, match="offset") as info:
        decode_manifest(encode_text_record("GICM", 1, payload), uri)
    assert info.value.uri == uri
    body["buckets"] = [golden(GOLDEN_BUCKET_STATE)]
    manifest = decode_manifest(encode_text_record("GICM", 1, json.dumps(body).encode()), uri)
    assert manifest.buckets == {3: STATE}


# --- task acks (coordination/barrier.py) ------------------------------------------------

GOLDEN_TASK_ACK = """{"checkpoint_id": 7, "epoch": 2, "job_id": "job-a", "outputs": [{"rows": 10,
"size": 2048, "uri": "file:///r/out/p-1.parquet"}], "states": [{"bucket": 1, "changelog": [],
"seq": 0, "snapshot": null, "token": ""}, STATE], "stats": {"changelog_bytes": 100,
"changes": 3, "checkpoint_s": 0.25, "empty": 0, "executor": "exec-1", "expired": 8,
"late_rows": 3,
"local_hits": 1, "materializations_adopted": 1, "materializations_started": 2,
"max_event_time_us": 1700000000000000, "pid": 42, "process_s": 0.5,
"replayed": 2, "restore_bytes": 0, "restore_pending": 0, "restored": 1, "rows_in": 5,
"rows_out": 4, "selected": 0, "snapshot_bytes": 0,
"timers_fired": 7,
"total_s": 1.0}, "task_index": 1, "version": 1}""".replace("STATE", GOLDEN_BUCKET_STATE)

STATS = TaskStats(
    rows_in=5,
    rows_out=4,
    changes=3,
    changelog_bytes=100,
    snapshot_bytes=0,
    local_hits=1,
    restored=1,
    empty=0,
    replayed=2,
    materializations_adopted=1,
    materializations_started=2,
    process_s=0.5,
    checkpoint_s=0.25,
    total_s=1.0,
    pid=42,
    executor="exec-1",
    max_event_time_us=1700000000000000,
    late_rows=3,
    timers_fired=7,
    expired=8,
)
ACK = TaskAck(
    "job-a",
    2,
    7,
    1,
    {3: STATE, 1: BucketState(1, 0)},
    (StagedFile("file:///r/out/p-1.parquet", 10, 2048),),
    STATS,
)


def test_task_acks_are_written_and_read_as_before() -> None:
    data = ACK.to_bytes()
    assert_same_json(json.loads(data), GOLDEN_TASK_ACK)
    assert [s["bucket"] for s in json.loads(data)["states"]] == [1, 3]  # ascending
    assert TaskAck.from_bytes(GOLDEN_TASK_ACK.encode()) == ACK
    assert TaskAck.from_bytes(data) == ACK


def test_task_ack_stats_keys_may_be_missing_and_unknown_keys_are_ignored() -> None:
    body = golden(GOLDEN_TASK_ACK)
    body["stats"] = {"rows_in": 5, "future_counter": 9}
    body["future"] = True
    body["outputs"][0]["future"] = "x"
    ack = TaskAck.from_bytes(json.dumps(body).encode())
    assert ack.stats == TaskStats(rows_in=5)
    assert ack.outputs == ACK.outputs
    body["stats"] = {}
    assert TaskAck.from_bytes(json.dumps(body).encode()).stats == TaskStats()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_set("version", 2), "version"),
        (_drop("version"), "version"),
        (_drop("task_index"), "task_index"),
        (_set("epoch", "2"), "epoch"),
        (_set("outputs", [{"uri": "u", "rows": 1}]), "size"),
        (_set("states", [{"bucket": 1}]), "seq"),
        (_set("stats", {"rows_in": "many"}), "rows_in"),
        (_set("stats", {"executor": 5}), "executor"),
    ],
)
def test_bad_task_acks_are_format_errors_naming_the_field(
    mutate: Callable[[dict[str, Any]], None], message: str
) -> None:
    body = golden(GOLDEN_TASK_ACK)
    mutate(body)
    with pytest.raises(FormatError, match="task ack") as info:
        TaskAck.from_bytes(json.dumps(body).encode())
    assert message in str(info.value)


def test_a_task_ack_that_is_not_json_is_a_format_error() -> None:
    with pytest.raises(FormatError, match="task ack"):
        TaskAck.from_bytes(b"{not json")
    with pytest.raises(FormatError, match="task ack"):
        TaskAck.from_bytes(b"[1, 2]")


def test_staged_files_are_written_and_read_as_before() -> None:
    text = '{"uri": "file:///r/out/p-1.parquet", "rows": 10, "size": 2048}'
    staged = StagedFile("file:///r/out/p-1.parquet", 10, 2048)
    assert_same_json(staged.to_json(), text)
    assert StagedFile.from_json(golden(text)) == staged
    assert StagedFile.from_json({**golden(text), "future": 1}) == staged


# --- materialization records (a snapshot handle inside) ---------------------------------

GOLDEN_MATERIALIZATION = """{"bucket": 3, "epoch": 2, "job_id": "job-a", "root": "file:///r",
"seq": 100, "snapshot": {"bucket": 3, "crc": 4294967295, "seq": 100, "size": 5000,
"uri": "file:///r/jobs/a/snapshots/1/b3.snap"}, "time": 1700000000.0, "token": "tok"}"""


def test_materialization_records_are_written_and_read_as_before() -> None:
    record = MaterializationRecord("job-a", "file:///r", 2, 3, 100, "tok", SNAPSHOT, 1700000000.0)
    data = encode_mat(record)
    assert_same_json(body_of(data), GOLDEN_MATERIALIZATION)
    assert decode_mat(data, where="/x/bucket-00003.json") == record
    body = golden(GOLDEN_MATERIALIZATION)
    del body["snapshot"]["crc"]
    payload = json.dumps(body).encode()
    with pytest.raises(CorruptFileError, match="crc"):
        decode_mat(encode_text_record("GICR", 1, payload), where="/x/bucket-00003.json")


# --- manifest parts (GICM) --------------------------------------------------------------

GOLDEN_SAVEPOINT_INFO = '{"format": "native", "type": "intermediate"}'
GOLDEN_LINEAGE = """{"mode": "claim", "released": true, "source_checkpoint_id": 9,
"source_uri": "file:///r/savepoints/sp-1/_savepoint.manifest"}"""
GOLDEN_MANIFEST = """{"base": ".", "buckets": [{"bucket": 3, "changelog": [1, 0, 70, -10, 20,
2, 128, 30, 0, 10], "crc": "0000001100000000", "seq": 120, "snapshot": [0, 100, 5000,
4294967295], "token": 0}], "checkpoint_id": 7, "created_at": 1700000000.5,
"engine": {"offsets": {"0": 1}}, "epoch": 2, "job_id": "job-a", "kind": "savepoint",
"num_buckets": 8, "objects": ["file:///r/jobs/a/snapshots/1/b3.snap",
"file:///r/jobs/a/changelog/1/s1.seg", "file:///r/jobs/a/changelog/2/s2.seg"],
"query": {"version": 1}, "restored_from": {"mode": "no-claim", "released": false,
"source_checkpoint_id": 5, "source_uri": "file:///r/savepoints/sp-0/_savepoint.manifest"},
"savepoint": {"format": "native", "type": "terminal"}, "sink": {"staged": []},
"tokens": ["file:///r/jobs/a/changelog/2/s2.seg"]}"""
SP_URI = "file:///r/savepoints/sp-9/_savepoint.manifest"
LINEAGE = RestoreLineage(
    "file:///r/savepoints/sp-1/_savepoint.manifest", RestoreMode.CLAIM, 9, True
)
MANIFEST = Manifest(
    "job-a",
    7,
    2,
    1700000000.5,
    8,
    {3: STATE},
    kind=ManifestKind.SAVEPOINT,
    savepoint=SavepointInfo(SavepointType.TERMINAL, SavepointFormat.NATIVE),
    restored_from=RestoreLineage(
        "file:///r/savepoints/sp-0/_savepoint.manifest", RestoreMode.NO_CLAIM, 5, False
    ),
    engine={"offsets": {"0": 1}},
    sink={"staged": []},
    query={"version": 1},
)


def test_manifest_parts_are_written_and_read_as_before() -> None:
    info = SavepointInfo(SavepointType.INTERMEDIATE)
    assert_same_json(info.to_json(), GOLDEN_SAVEPOINT_INFO)
    assert SavepointInfo.from_json(golden(GOLDEN_SAVEPOINT_INFO)) == info
    assert_same_json(LINEAGE.to_json(), GOLDEN_LINEAGE)
    assert RestoreLineage.from_json(golden(GOLDEN_LINEAGE)) == LINEAGE
    assert RestoreLineage.from_json({**golden(GOLDEN_LINEAGE), "future": 1}) == LINEAGE
    unknown = {**golden(GOLDEN_LINEAGE), "source_checkpoint_id": -1}
    assert RestoreLineage.from_json(unknown).source_checkpoint_id == -1


def test_manifests_are_written_and_read_as_before() -> None:
    data = encode_manifest(MANIFEST, SP_URI)
    assert data.startswith(b"GICM 2 crc32c=")
    assert_same_json(body_of(data), GOLDEN_MANIFEST)
    payload = json.dumps(golden(GOLDEN_MANIFEST)).encode()
    assert decode_manifest(encode_text_record("GICM", 2, payload), SP_URI) == MANIFEST


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (_set("restored_from.released", "yes"), "released"),
        (_drop("restored_from.released"), "released"),
        (_set("restored_from.mode", "borrow"), "mode"),
        (_set("restored_from.source_checkpoint_id", "5"), "source_checkpoint_id"),
        (_drop("restored_from.source_uri"), "source_uri"),
        (_set("savepoint.type", "forever"), "type"),
        (_drop("savepoint.format"), "format"),
        (_set("savepoint", "terminal"), "savepoint"),
    ],
)
def test_bad_manifest_parts_are_corrupt_naming_the_field(
    mutate: Callable[[dict[str, Any]], None], field: str
) -> None:
    body = golden(GOLDEN_MANIFEST)
    mutate(body)
    payload = json.dumps(body).encode()
    with pytest.raises(CorruptFileError, match="manifest") as info:
        decode_manifest(encode_text_record("GICM", 2, payload), SP_URI)
    assert field in str(info.value)
    assert info.value.uri == SP_URI


# --- the query fingerprint (a manifest's ``query``) -------------------------------------

GOLDEN_FINGERPRINT = """{"output": {"digest": "44755991a8a98fc2", "text": "k: string"},
"processing": {"digest": "63ae305c517d95b5", "text": "process by 'k': m.f"},
"source": {"digest": "a424436d1ab435a0", "text": "parquet: file:///in"}, "version": 1}"""
GOLDEN_FINGERPRINT_NO_SOURCE = """{"output": {"digest": "65c74c15a686187b", "text": "o"},
"processing": {"digest": "148de9c5a7a44d19", "text": "p"}, "source": null, "version": 1}"""


def test_fingerprints_are_written_and_read_as_before() -> None:
    fp = QueryFingerprint.of(
        source="parquet: file:///in", processing="process by 'k': m.f", output="k: string"
    )
    assert_same_json(fp.to_json(), GOLDEN_FINGERPRINT)
    assert QueryFingerprint.from_json(golden(GOLDEN_FINGERPRINT)) == fp
    bare = QueryFingerprint.of(source=None, processing="p", output="o")
    assert_same_json(bare.to_json(), GOLDEN_FINGERPRINT_NO_SOURCE)
    assert QueryFingerprint.from_json(golden(GOLDEN_FINGERPRINT_NO_SOURCE)) == bare


def test_fingerprints_read_tolerantly() -> None:
    body = golden(GOLDEN_FINGERPRINT)
    fp = QueryFingerprint.from_json(body)
    assert fp is not None
    newer = {**body, "future": 1, "output": {**body["output"], "future": 2}}
    assert QueryFingerprint.from_json(newer) == fp
    no_source = {k: v for k, v in body.items() if k != "source"}
    assert QueryFingerprint.from_json(no_source) == QueryFingerprint(None, fp.processing, fp.output)
    for bad_source in ("text", {"text": "t"}, {"text": "t", "digest": ""}, {"digest": 5}):
        found = QueryFingerprint.from_json({**body, "source": bad_source})
        assert found == QueryFingerprint(None, fp.processing, fp.output)
    for bad in (
        {**body, "version": 2},
        {k: v for k, v in body.items() if k != "version"},
        {**body, "processing": None},
        {**body, "output": {"text": 1, "digest": "d"}},
        {**body, "processing": {"text": "t", "digest": ""}},
    ):
        assert QueryFingerprint.from_json(bad) is None


# --- CLI documents ----------------------------------------------------------------------

GOLDEN_BUCKET_TOTALS = """{"changelog_bytes": 700, "changelog_handles": 9, "max_seq": 120,
"seq_total": 300, "snapshot_bytes": 5000, "snapshots": 2, "with_state": 4}"""
GOLDEN_OWNER_GROUP = """{"bytes": 999, "label": "restore source (no-claim)", "objects": 3,
"owner": "no-claim-source"}"""
GOLDEN_JOB_ENTRY = """{"bytes": 4096, "checkpoints": [2, 3, 4], "job_id": "job-a",
"latest_checkpoint": 4, "objects": 7, "status": {"epoch": 4, "error": "boom",
"failure": {"error_type": "QueryMismatchError", "message": "job job-a: different query",
"reason": "QueryMismatch"}, "last_checkpoint": 41, "restore_pending": 5, "state": "running",
"updated_at": "2023-11-14T22:15:00.500Z"}, "status_error": null}"""
GOLDEN_JOB_ENTRY_UNREADABLE = """{"bytes": 10, "checkpoints": [], "job_id": "job-b",
"latest_checkpoint": null, "objects": 1, "status": null, "status_error": "bad record"}"""


def test_cli_documents_are_written_as_before() -> None:
    assert_same_json(BucketTotals(4, 2, 9, 300, 120, 5000, 700).to_json(), GOLDEN_BUCKET_TOTALS)
    assert_same_json(OwnerGroup(Owner.NO_CLAIM_SOURCE, 3, 999).to_json(), GOLDEN_OWNER_GROUP)
    job = _Job.of(JobFiles("job-a", 7, 4096, [2, 3, 4]), full_status(), None)
    assert_same_json(codec.to_json(job), GOLDEN_JOB_ENTRY)
    unreadable = _Job.of(JobFiles("job-b", 1, 10, []), None, "bad record")
    assert_same_json(codec.to_json(unreadable), GOLDEN_JOB_ENTRY_UNREADABLE)
