"""Files that drivers (tenant code) write are read with a bound: at most ``limit + 1``
bytes travel, whatever the object's size, and a larger object is a typed error naming
the object, its size and the limit.

Checked for :func:`gic_runtime.storage.object_store.read_bounded` on the local disk and on
SeaweedFS (where the GET must be a ranged one: the bytes that crossed the wire are
counted at the boto3 client), and for the runtime's readers of what the operator reads
on every reconcile: the status record, control requests and outcomes, manifests,
fencing records.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from tests.support.testing_s3server import TestingS3Server

from gic_runtime.checkpoint import catalog
from gic_runtime.checkpoint.catalog import MANIFEST_MAX_BYTES, read_manifest
from gic_runtime.checkpoint.claims import CLAIM_RECORD_MAX_BYTES, read_start
from gic_runtime.control import ControlChannel
from gic_runtime.control.channel import CONTROL_RECORD_MAX_BYTES, outcome_uri
from gic_runtime.control.model import MAX_ERROR_CHARS, Outcome
from gic_runtime.errors import (
    ConfigurationError,
    CorruptFileError,
    ObjectNotFoundError,
    ObjectTooLargeError,
)
from gic_runtime.fencing import claim_epoch, read_marker
from gic_runtime.layout import epoch_marker_uri, epoch_start_uri, manifest_uri
from gic_runtime.status import STATUS_MAX_BYTES, JobState, JobStatus, read_status, write_status
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.object_store import ObjectStore, read_bounded
from gic_runtime.storage.s3 import S3ObjectStore, create_s3_client
from gic_runtime.storage.uri import StoreResolver

MiB = 1024 * 1024
JOB = "bounded"


def test_the_limits() -> None:
    limits = (STATUS_MAX_BYTES, CONTROL_RECORD_MAX_BYTES, MANIFEST_MAX_BYTES)
    assert limits == (MiB, 64 * 1024, 64 * MiB)
    assert CLAIM_RECORD_MAX_BYTES == 64 * 1024


# --- the storage API -----------------------------------------------------------------------


def _check_bounded(store: ObjectStore) -> None:
    big = os.urandom(5 * MiB)
    store.put("jobs/x/big", big)
    with pytest.raises(ObjectTooLargeError) as info:
        read_bounded(store, "jobs/x/big", MiB, what="job status record")
    err = info.value
    assert isinstance(err, CorruptFileError)  # handled wherever unreadable files are
    assert (err.size, err.limit, err.uri) == (5 * MiB, MiB, store.uri_for("jobs/x/big"))
    message = str(err)
    assert "job status record is 5242880 bytes, more than the 1048576 bytes" in message
    assert store.uri_for("jobs/x/big") in message
    assert "delete or replace it" in message
    # At the limit and below: the whole object.
    store.put("jobs/x/exact", big[:MiB])
    assert read_bounded(store, "jobs/x/exact", MiB) == big[:MiB]
    store.put("jobs/x/empty", b"")
    assert read_bounded(store, "jobs/x/empty", MiB) == b""
    assert read_bounded(store, "jobs/x/empty", 0) == b""
    with pytest.raises(ObjectTooLargeError):
        read_bounded(store, "jobs/x/exact", 0)
    with pytest.raises(ObjectNotFoundError):
        read_bounded(store, "jobs/x/none", MiB)


class CountingFile:
    """Counts the bytes read through one object of a GET response."""

    def __init__(self, inner: Any, counter: list[int]) -> None:
        self._inner = inner
        self._counter = counter

    def read(self, *args: Any) -> bytes:
        data: bytes = self._inner.read(*args)
        self._counter[0] += len(data)
        return data


class CountingClient:
    """A boto3 S3 client that records every ``get_object`` and the bytes it returned."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.gets: list[dict[str, Any]] = []
        self.received = [0]

    def get_object(self, **kwargs: Any) -> Any:
        self.gets.append(kwargs)
        resp = self._inner.get_object(**kwargs)
        resp["Body"] = CountingFile(resp["Body"], self.received)
        return resp

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_read_bounded_on_local_storage(tmp_path: Path) -> None:
    _check_bounded(LocalObjectStore(tmp_path / "store"))


def test_read_bounded_on_local_storage_reads_at_most_the_limit(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "store")
    path = tmp_path / "store" / "sparse"
    with path.open("wb") as fh:
        fh.truncate(8 << 30)  # 8 GiB, sparse: reading it whole would exhaust memory
    with pytest.raises(ObjectTooLargeError, match="8589934592 bytes"):
        read_bounded(store, "sparse", MiB)


def test_read_bounded_on_seaweedfs_is_a_ranged_get(
    s3_server: TestingS3Server, s3_bucket: str
) -> None:
    client = CountingClient(create_s3_client(s3_server.settings))
    store = S3ObjectStore(s3_bucket, "gic", settings=s3_server.settings, client=client)
    _check_bounded(store)
    big = [g for g in client.gets if g["Key"].endswith("/big")]
    assert big and all(g.get("Range") == f"bytes=0-{MiB}" for g in big)
    # Of the 5 MiB object, at most limit + 1 bytes crossed the wire per read; in all:
    # 2 reads of the big object, 2 of the exact one (1 MiB + 0 bytes), the empty ones.
    assert client.received[0] <= 2 * (MiB + 1) + MiB + 1


# --- the runtime's readers ----------------------------------------------------------------


@pytest.fixture
def local(tmp_path: Path) -> tuple[LocalObjectStore, StoreResolver]:
    store = LocalObjectStore(tmp_path / "store")
    resolver = StoreResolver()
    resolver.register(store)
    return store, resolver


def _sparse(store: LocalObjectStore, key: str, size: int) -> None:
    path = store.root / key
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        fh.truncate(size)


def test_an_oversized_status_record_is_refused_unread(
    local: tuple[LocalObjectStore, StoreResolver],
) -> None:
    store, resolver = local
    _sparse(store, f"jobs/{JOB}/status.json", 300 * MiB)
    with pytest.raises(ObjectTooLargeError, match="job status record is 314572800 bytes"):
        read_status(resolver, store.root_uri, JOB)


def test_a_status_record_over_the_limit_is_never_written(
    local: tuple[LocalObjectStore, StoreResolver],
) -> None:
    store, resolver = local
    status = JobStatus(job_id=JOB, epoch=1, state=JobState.RUNNING, updated_at=1.0, started_at=1.0)
    write_status(resolver, store.root_uri, JOB, status)
    assert read_status(resolver, store.root_uri, JOB) == status
    huge = status.replace(extra={"blob": "x" * STATUS_MAX_BYTES})
    with pytest.raises(ConfigurationError, match="readers accept"):
        write_status(resolver, store.root_uri, JOB, huge)
    assert read_status(resolver, store.root_uri, JOB) == status


def test_oversized_control_records_are_refused_unread(
    local: tuple[LocalObjectStore, StoreResolver],
) -> None:
    store, resolver = local
    channel = ControlChannel(resolver, store.root_uri, JOB)
    request = channel.request_savepoint(request_id="sp-1")
    uri = outcome_uri(store.root_uri, JOB, "sp-1")
    _sparse(store, uri[len(store.root_uri) + 1 :], 10 * MiB)
    with pytest.raises(ObjectTooLargeError, match="control outcome is 10485760 bytes"):
        channel.outcome(request.request_id)


def test_outcomes_stay_under_the_limit(local: tuple[LocalObjectStore, StoreResolver]) -> None:
    store, resolver = local
    channel = ControlChannel(resolver, store.root_uri, JOB)
    channel.request_savepoint(request_id="sp-2")
    failed = Outcome.failed("sp-2", "boom " * 100_000)
    assert failed.error is not None and len(failed.error) <= MAX_ERROR_CHARS
    channel.complete(failed)
    assert ControlChannel(resolver, store.root_uri, JOB).outcome("sp-2") == failed
    channel.request_savepoint(request_id="sp-3")
    with pytest.raises(ConfigurationError, match="readers accept"):
        channel.complete(Outcome("sp-3", failed.state, error="x" * CONTROL_RECORD_MAX_BYTES))


def test_an_oversized_manifest_is_refused_unread(
    local: tuple[LocalObjectStore, StoreResolver],
) -> None:
    store, resolver = local
    uri = manifest_uri(store.root_uri, JOB, 7)
    _sparse(store, uri[len(store.root_uri) + 1 :], MANIFEST_MAX_BYTES + 1)
    with pytest.raises(ObjectTooLargeError, match=f"more than the {MANIFEST_MAX_BYTES} bytes"):
        read_manifest(resolver, uri)
    with pytest.raises(ObjectTooLargeError):  # restore, registry and sweep never load it
        catalog.load_retained(resolver, store.root_uri, JOB)


def test_oversized_fencing_records_are_refused_unread(
    local: tuple[LocalObjectStore, StoreResolver],
) -> None:
    store, resolver = local
    claim_epoch(resolver, store.root_uri, JOB, claimed_by="d1")
    for uri in (epoch_marker_uri(store.root_uri, JOB, 1), epoch_start_uri(store.root_uri, JOB, 1)):
        key = uri[len(store.root_uri) + 1 :]
        store.delete_many([key])
        _sparse(store, key, 2 * MiB)
    with pytest.raises(ObjectTooLargeError):
        read_marker(resolver, store.root_uri, JOB, 1)
    with pytest.raises(ObjectTooLargeError):
        read_start(resolver, store.root_uri, JOB, 1)
