"""The durable control channel: requests, outcomes, idempotency, corruption, waiting."""

from __future__ import annotations

import re

import pytest
from tests.support.stores import StorageRoot, lost_put_answers, storage_root

from gic_runtime.checkpoint.manifest import SavepointFormat, SavepointType
from gic_runtime.control import (
    ControlChannel,
    ControlTimeoutError,
    Outcome,
    OutcomeState,
    SavepointRequest,
    StopRequest,
    outcome_uri,
    request_uri,
)
from gic_runtime.control.envelope import encode_record
from gic_runtime.control.model import decode_request, encode_request
from gic_runtime.errors import (
    ConfigurationError,
    CorruptFileError,
    ObjectExistsError,
    TransientStorageError,
    UnsupportedVersionError,
)
from gic_runtime.layout import savepoint_dir
from gic_runtime.storage.s3 import S3ObjectStore
from gic_runtime.testing.faulty_store import TestingFaultyStore

JOB = "job-a"


class FakeTime:
    """A clock and a sleep that only move when told (sleeping moves the clock)."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def channel(storage: StorageRoot, clock: FakeTime | None = None) -> ControlChannel:
    clock = clock or FakeTime()
    return ControlChannel(storage.resolver, storage.root, JOB, clock=clock, sleep=clock.sleep)


def test_a_savepoint_request_is_pending_until_completed(storage: StorageRoot) -> None:
    ch = channel(storage)
    req = ch.request_savepoint(requested_by="cli")
    assert re.fullmatch(r"sp-\d{14}-[0-9a-f]{6}", req.request_id)
    assert req.kind is SavepointType.INTERMEDIATE and req.format is SavepointFormat.NATIVE
    assert req.target == savepoint_dir(storage.root, req.request_id)
    assert ch.pending() == [req]
    assert ch.outcome(req.request_id) is None
    done = Outcome.completed(req.request_id, path=req.target, checkpoint_id=7, size_bytes=10)
    assert ch.complete(done) == done
    assert ch.pending() == []
    assert ch.outcome(req.request_id) == done


def test_requests_and_outcomes_survive_a_restart_of_either_side(storage: StorageRoot) -> None:
    requester = channel(storage)
    req = requester.request_savepoint("stop", "canonical", request_id="sp-upgrade")
    driver = channel(storage)  # a fresh process: nothing cached
    assert driver.pending() == [req]
    assert req.kind is SavepointType.TERMINAL and req.format is SavepointFormat.CANONICAL
    driver.complete(Outcome.failed(req.request_id, "disk full", started_at=1.0))
    later = channel(storage)
    found = later.outcome("sp-upgrade")
    assert found is not None and found.state is OutcomeState.FAILED
    assert found.error == "disk full" and not found.succeeded
    assert requester.pending() == []  # the first channel lists again, no stale cache


def test_pending_is_oldest_first_and_leaves_stops_apart(storage: StorageRoot) -> None:
    ch = channel(storage)
    late = ch.request_savepoint(request_id="sp-b", requested_at=200.0)
    early = ch.request_savepoint(request_id="sp-c", requested_at=100.0)
    stop = ch.request_stop(request_id="stop-1", requested_at=150.0)
    assert ch.pending() == [early, late]
    assert ch.stop_requested()
    assert ch.pending_stop() == stop
    state = ch.poll()
    assert state.savepoints == (early, late) and state.stop == stop
    ch.complete(Outcome.completed(stop.request_id))
    assert not ch.stop_requested()
    assert ch.pending() == [early, late]


def test_default_stop_request_id(storage: StorageRoot) -> None:
    stop = channel(storage).request_stop()
    assert isinstance(stop, StopRequest)
    assert re.fullmatch(r"stop-\d{14}-[0-9a-f]{6}", stop.request_id)


def test_same_id_same_intent_is_idempotent(storage: StorageRoot) -> None:
    first = channel(storage).request_savepoint(
        request_id="sp-1", requested_by="operator-pod-1", requested_at=10.0
    )
    # The requester restarted and asks again: same intent, other time and identity.
    again = channel(storage).request_savepoint(
        request_id="sp-1", requested_by="operator-pod-2", requested_at=99.0
    )
    assert again == first
    assert channel(storage).request_stop(request_id="stop-x") == channel(storage).request_stop(
        request_id="stop-x"
    )


@pytest.mark.parametrize(
    "other",
    [
        {"kind": "terminal"},
        {"format": "canonical"},
        {"target": "s3://elsewhere/sp"},
    ],
)
def test_same_id_other_intent_is_refused(storage: StorageRoot, other: dict[str, str]) -> None:
    ch = channel(storage)
    ch.request_savepoint(request_id="sp-1")
    with pytest.raises(ConfigurationError, match="already names a different request"):
        ch.request_savepoint(request_id="sp-1", **other)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="already names a different request"):
        ch.request_stop(request_id="sp-1")


def test_lost_response_inside_the_store_client_is_success(storage: StorageRoot) -> None:
    lost = lost_put_answers(storage, lambda: ObjectExistsError("exists (retried request)"), 2)
    ch = channel(lost)
    req = ch.request_savepoint(request_id="sp-lost")
    ch.complete(Outcome.completed(req.request_id))
    assert channel(storage).request("sp-lost") == req
    assert channel(storage).outcome("sp-lost") is not None


def test_lost_response_then_requester_retry_is_success(storage: StorageRoot) -> None:
    ch = channel(lost_put_answers(storage, lambda: TransientStorageError("connection reset"), 1))
    with pytest.raises(TransientStorageError):
        ch.request_savepoint(request_id="sp-retry", requested_at=1.0)
    req = ch.request_savepoint(request_id="sp-retry", requested_at=2.0)
    assert req.requested_at == 1.0  # the request that landed first
    assert [r.request_id for r in ch.requests()] == ["sp-retry"]


def test_complete_is_write_once(storage: StorageRoot) -> None:
    ch = channel(storage)
    ch.request_savepoint(request_id="sp-1")
    done = Outcome.completed("sp-1", path="s3://b/sp", finished_at=5.0)
    ch.complete(done)
    assert channel(storage).complete(done) == done  # identical re-complete
    with pytest.raises(ConfigurationError, match="already has an outcome"):
        channel(storage).complete(Outcome.failed("sp-1", "late failure", finished_at=6.0))
    with pytest.raises(ConfigurationError, match="no control request 'sp-none'"):
        ch.complete(Outcome.completed("sp-none"))


def test_outcome_values_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="needs an error message"):
        Outcome(request_id="sp-1", state=OutcomeState.FAILED)
    with pytest.raises(ConfigurationError, match="record it as failed"):
        Outcome(request_id="sp-1", state=OutcomeState.COMPLETED, error="boom")
    with pytest.raises(ConfigurationError, match="size_bytes must not be negative"):
        Outcome.completed("sp-1", size_bytes=-1)
    with pytest.raises(ConfigurationError, match="invalid request id"):
        Outcome.completed("Bad Id")


def test_kind_and_format_parsing(storage: StorageRoot) -> None:
    ch = channel(storage)
    assert ch.request_savepoint("Intermediate", "NATIVE").kind is SavepointType.INTERMEDIATE
    assert ch.request_savepoint("STOP").kind is SavepointType.TERMINAL
    with pytest.raises(ConfigurationError, match="unknown savepoint kind 'later'"):
        ch.request_savepoint("later")
    with pytest.raises(ConfigurationError, match="unknown savepoint format 'zip'"):
        ch.request_savepoint(format="zip")
    with pytest.raises(ConfigurationError, match="invalid request id"):
        ch.request_savepoint(request_id="Has Spaces")


def test_target_paths_become_uris(storage: StorageRoot) -> None:
    req = channel(storage).request_savepoint(target="/data/savepoints/one/")
    assert req.target == "file:///data/savepoints/one"


def test_listing_for_display(storage: StorageRoot) -> None:
    ch = channel(storage)
    a = ch.request_savepoint(request_id="sp-a", requested_at=1.0)
    b = ch.request_stop(request_id="stop-b", requested_at=2.0)
    done = ch.complete(Outcome.completed("sp-a", finished_at=3.0))
    assert ch.requests() == [a, b]
    assert ch.outcomes() == [done]
    entries = ch.entries()
    assert [(e.request, e.outcome) for e in entries] == [(a, done), (b, None)]


def _corrupt(storage: StorageRoot, uri: str, data: bytes) -> None:
    store, key = storage.resolver.resolve(uri)
    store.put(key, data)


def test_corrupt_request_names_the_file(storage: StorageRoot) -> None:
    ch = channel(storage)
    req = ch.request_savepoint(request_id="sp-1")
    uri = request_uri(storage.root, JOB, "sp-1")
    data = bytearray(encode_request(req))
    data[-3] ^= 0x01
    _corrupt(storage, uri, bytes(data))
    with pytest.raises(CorruptFileError, match="checksum mismatch") as info:
        channel(storage).pending()
    assert uri in str(info.value)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "no 'GICR <version> crc32c=<hex>' header"),
        (b"GICM 1 crc32c=00000000\n{}", "not a GIC control request"),
        (encode_record("GICR", 1, {"type": "savepoint"}, what="x"), "missing field"),
        (
            encode_record("GICR", 1, {"type": "teleport", "request_id": "sp-1"}, what="x"),
            "invalid field",
        ),
        (b"GICR 1 crc32c=zz\n{}", "malformed checksum"),
        (encode_record("GICR", 1, {"a": float("1e308")}, what="x")[:-2], "checksum mismatch"),
    ],
)
def test_damaged_requests(storage: StorageRoot, data: bytes, message: str) -> None:
    uri = request_uri(storage.root, JOB, "sp-1")
    _corrupt(storage, uri, data)
    with pytest.raises(CorruptFileError, match=re.escape(message)):
        channel(storage).request("sp-1")


def test_unknown_version_is_its_own_error(storage: StorageRoot) -> None:
    uri = outcome_uri(storage.root, JOB, "sp-1")
    channel(storage).request_savepoint(request_id="sp-1")
    _corrupt(storage, uri, encode_record("GICO", 2, {"request_id": "sp-1"}, what="x"))
    with pytest.raises(UnsupportedVersionError, match="version 2 is not supported"):
        channel(storage).outcome("sp-1")


def test_a_request_under_another_name_is_corrupt(storage: StorageRoot) -> None:
    req = channel(storage).request_savepoint(request_id="sp-1")
    uri = request_uri(storage.root, JOB, "sp-2")
    _corrupt(storage, uri, encode_request(req))
    with pytest.raises(CorruptFileError, match=r"named 'sp-2\.req' but holds request 'sp-1'"):
        channel(storage).pending()


def test_request_round_trip_through_the_format() -> None:
    req = SavepointRequest(
        request_id="sp-1",
        kind=SavepointType.TERMINAL,
        format=SavepointFormat.CANONICAL,
        target="s3://b/sp/1",
        requested_at=12.5,
        requested_by="me",
    )
    data = encode_request(req)
    assert data.startswith(b"GICR 2 crc32c=")
    assert decode_request(data, "file:///x/sp-1.req") == req


def test_wait_returns_the_outcome_once_written(storage: StorageRoot) -> None:
    clock = FakeTime()
    req = channel(storage).request_savepoint(request_id="sp-1")
    driver = channel(storage)
    progress: list[float] = []

    def sleep_then_driver_acts(seconds: float) -> None:
        clock.sleep(seconds)
        if len(clock.sleeps) == 3:
            driver.complete(Outcome.completed(req.request_id, path=req.target))

    ch = ControlChannel(
        storage.resolver, storage.root, JOB, clock=clock, sleep=sleep_then_driver_acts
    )
    out = ch.wait(req.request_id, timeout_s=60, poll_s=0.5, progress=progress.append)
    assert out.succeeded and out.path == req.target
    assert progress == [0.0, 0.5, 1.0]


def test_wait_times_out_with_advice(storage: StorageRoot) -> None:
    clock = FakeTime()
    ch = channel(storage, clock)
    ch.request_savepoint(request_id="sp-1")
    with pytest.raises(ControlTimeoutError) as info:
        ch.wait("sp-1", timeout_s=2.0, poll_s=0.5)
    message = str(info.value)
    assert "'sp-1' of job 'job-a' has no outcome after 2.0 s" in message
    assert "is the job's driver running?" in message and "status.json" in message
    assert sum(clock.sleeps) == pytest.approx(2.0)


def test_wait_for_an_unknown_request_fails_at_once(storage: StorageRoot) -> None:
    clock = FakeTime()
    with pytest.raises(ConfigurationError, match="no control request 'sp-none'"):
        channel(storage, clock).wait("sp-none", timeout_s=10)
    assert clock.sleeps == []


def test_polling_reads_each_request_once(storage: StorageRoot) -> None:
    faulty = TestingFaultyStore(storage.store)
    writer = channel(storage)
    for i in range(3):
        writer.request_savepoint(request_id=f"sp-{i}", requested_at=float(i))
    ch = channel(storage_root(faulty))
    for _ in range(4):
        assert len(ch.pending()) == 3
    assert faulty.calls("get") == 3
    assert faulty.calls("list") == 8  # requests and outcomes, per poll


def test_channel_on_s3(s3_store: S3ObjectStore) -> None:
    storage = storage_root(s3_store)
    ch = channel(storage)
    req = ch.request_savepoint(request_id="sp-s3")
    assert ch.request_savepoint(request_id="sp-s3") == req
    assert channel(storage).pending() == [req]
    ch.complete(Outcome.completed("sp-s3", path=req.target, finished_at=1.0))
    assert channel(storage).pending() == []
    with pytest.raises(ConfigurationError):
        ch.complete(Outcome.failed("sp-s3", "no", finished_at=2.0))
