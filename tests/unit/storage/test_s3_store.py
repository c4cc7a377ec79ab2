"""S3-specific behaviour of S3ObjectStore: naming, batching, laziness, and clear errors for
bad credentials and missing buckets (against the real SeaweedFS server where it matters)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from tests.support.testing_s3server import TestingS3Server

from gic_runtime.errors import (
    ConfigurationError,
    ObjectNotFoundError,
    StorageError,
    StoragePermissionError,
)
from gic_runtime.storage.object_store import MAX_DELETE_BATCH
from gic_runtime.storage.s3 import S3ObjectStore, create_s3_client
from gic_runtime.storage.s3_settings import S3Settings

OFFLINE = S3Settings(
    endpoint_url="http://127.0.0.1:9", region="us-east-1", access_key_id="a", secret_access_key="b"
)


class TestingDeleteClient:
    """Stands in for a boto3 client: records DeleteObjects calls, reports chosen errors."""

    __test__ = False

    def __init__(self, errors: list[dict[str, str]] | None = None) -> None:
        self.batches: list[list[str]] = []
        self._errors = errors or []

    def delete_objects(self, *, Bucket: str, Delete: dict[str, Any]) -> dict[str, Any]:  # noqa: N803
        self.batches.append([o["Key"] for o in Delete["Objects"]])
        return {"Errors": self._errors} if self._errors else {}


def _count_calls(client: Any, operation: str) -> list[int]:
    calls: list[int] = []

    def hook(**_: Any) -> None:
        calls.append(1)

    client.meta.events.register(f"before-call.s3.{operation}", hook)
    return calls


class TestNaming:
    def test_root_uri_with_prefix(self) -> None:
        store = S3ObjectStore("bkt", "/jobs/a/", settings=OFFLINE)
        assert store.root_uri == "s3://bkt/jobs/a"
        assert store.uri_for("x/y") == "s3://bkt/jobs/a/x/y"

    def test_root_uri_without_prefix(self) -> None:
        store = S3ObjectStore("bkt", "", settings=OFFLINE)
        assert store.root_uri == "s3://bkt"
        assert store.uri_for("x") == "s3://bkt/x"

    def test_empty_bucket_is_a_configuration_error(self) -> None:
        with pytest.raises(ConfigurationError, match="bucket"):
            S3ObjectStore("", "p", settings=OFFLINE)

    def test_bad_addressing_style(self) -> None:
        with pytest.raises(ConfigurationError, match="addressing_style"):
            create_s3_client(replace(OFFLINE, addressing_style="sideways"))

    def test_zero_attempts(self) -> None:
        with pytest.raises(ConfigurationError, match="max_attempts"):
            create_s3_client(replace(OFFLINE, max_attempts=0))


class TestDeleteBatching:
    def test_batches_of_at_most_max(self) -> None:
        client = TestingDeleteClient()
        store = S3ObjectStore("bkt", "p", settings=OFFLINE, client=client)
        keys = [f"k{i}" for i in range(2 * MAX_DELETE_BATCH + 500)]
        assert store.delete_many(keys) == len(keys)
        assert [len(b) for b in client.batches] == [MAX_DELETE_BATCH, MAX_DELETE_BATCH, 500]
        assert client.batches[0][0] == "p/k0"

    def test_reported_errors_name_the_keys(self) -> None:
        client = TestingDeleteClient(
            errors=[
                {"Key": "p/a", "Code": "AccessDenied", "Message": "no"},
                {"Key": "p/b", "Code": "InternalError", "Message": "oops"},
            ]
        )
        store = S3ObjectStore("bkt", "p", settings=OFFLINE, client=client)
        with pytest.raises(StorageError) as info:
            store.delete_many(["a", "b", "c"])
        message = str(info.value)
        assert "2 of 3" in message
        assert "s3://bkt/p/a (AccessDenied)" in message
        assert "s3://bkt/p/b (InternalError)" in message

    def test_missing_keys_reported_by_the_server_are_ignored(self) -> None:
        client = TestingDeleteClient(errors=[{"Key": "p/a", "Code": "NoSuchKey"}])
        store = S3ObjectStore("bkt", "p", settings=OFFLINE, client=client)
        assert store.delete_many(["a"]) == 1

    @pytest.mark.s3
    def test_real_server_gets_two_requests_for_1100_keys(
        self, s3_server: TestingS3Server, s3_bucket: str
    ) -> None:
        client = create_s3_client(s3_server.settings)
        store = S3ObjectStore(s3_bucket, "gic", settings=s3_server.settings, client=client)
        calls = _count_calls(client, "DeleteObjects")
        store.put("only", b"x")
        keys = ["only"] + [f"missing/{i}" for i in range(MAX_DELETE_BATCH + 99)]
        assert store.delete_many(keys) == MAX_DELETE_BATCH + 100
        assert len(calls) == 2
        assert not store.exists("only")


@pytest.mark.s3
class TestAgainstServer:
    def test_prefixes_isolate_stores_in_one_bucket(
        self, s3_server: TestingS3Server, s3_bucket: str
    ) -> None:
        a = S3ObjectStore(s3_bucket, "job", settings=s3_server.settings)
        b = S3ObjectStore(s3_bucket, "job2", settings=s3_server.settings)
        root = S3ObjectStore(s3_bucket, "", settings=s3_server.settings)
        a.put("x", b"a")
        b.put("x", b"b")
        assert [o.key for o in a.list()] == ["x"]
        assert [o.key for o in b.list()] == ["x"]
        assert [o.key for o in root.list()] == ["job/x", "job2/x"]
        assert root.get("job2/x") == b"b"

    def test_list_is_lazy(self, s3_server: TestingS3Server, s3_bucket: str) -> None:
        client = create_s3_client(s3_server.settings)
        store = S3ObjectStore(s3_bucket, "", settings=s3_server.settings, client=client)
        for i in range(3):
            store.put(f"k{i}", b"")
        calls = _count_calls(client, "ListObjectsV2")
        listing = store.list()
        assert calls == []
        assert next(listing).key == "k0"
        assert len(calls) == 1

    def test_get_missing_object_names_the_uri(self, s3_store: S3ObjectStore) -> None:
        with pytest.raises(ObjectNotFoundError, match=r"s3://.*/gic/nope"):
            s3_store.get("nope")


def _missing_bucket_ops() -> list[tuple[str, Callable[[S3ObjectStore], object]]]:
    return [
        ("put", lambda s: s.put("k", b"x")),
        ("put_if_absent", lambda s: s.put("k", b"x", if_absent=True)),
        ("get", lambda s: s.get("k")),
        ("list", lambda s: list(s.list())),
        ("copy", lambda s: s.copy("a", "b")),
        ("delete_many", lambda s: s.delete_many(["k"])),
    ]


@pytest.mark.s3
class TestClearErrors:
    @pytest.mark.parametrize(
        "op", [fn for _, fn in _missing_bucket_ops()], ids=[n for n, _ in _missing_bucket_ops()]
    )
    def test_missing_bucket(
        self, s3_server: TestingS3Server, op: Callable[[S3ObjectStore], object]
    ) -> None:
        bucket = f"gic-missing-{uuid.uuid4().hex[:12]}"
        store = S3ObjectStore(bucket, "gic", settings=s3_server.settings)
        with pytest.raises(StorageError) as info:
            op(store)
        assert not isinstance(info.value, ObjectNotFoundError)
        message = str(info.value)
        assert f"S3 bucket {bucket!r} does not exist" in message
        assert "create the bucket" in message

    def test_missing_bucket_is_not_created_implicitly(self, s3_server: TestingS3Server) -> None:
        bucket = f"gic-missing-{uuid.uuid4().hex[:12]}"
        store = S3ObjectStore(bucket, "", settings=s3_server.settings)
        with pytest.raises(StorageError):
            store.put("k", b"x")
        assert not store.exists("k")
        with pytest.raises(StorageError, match="does not exist"):
            list(store.list())

    @pytest.mark.parametrize("field", ["secret_access_key", "access_key_id"])
    def test_wrong_credentials(
        self, s3_server: TestingS3Server, s3_bucket: str, field: str
    ) -> None:
        wrong = f"wrong-{uuid.uuid4().hex}"
        settings = replace(s3_server.settings, **{field: wrong}, max_attempts=1)
        store = S3ObjectStore(s3_bucket, "gic", settings=settings)
        for op in (lambda: store.put("k", b"x"), lambda: store.get("k")):
            with pytest.raises(StoragePermissionError) as info:
                op()
            message = str(info.value)
            assert "check the access key id and secret" in message
            # what supplies credentials where: a GICJob's Secret, the operator's own
            assert "spec.checkpointing.credentialsSecret" in message
            assert "storageCredentials.secretName" in message
            assert "S3 secret" not in message
            assert wrong not in message
            assert s3_server.settings.secret_access_key not in message
        assert not S3ObjectStore(s3_bucket, "gic", settings=s3_server.settings).exists("k")

    def test_credentials_never_in_repr(self, s3_server: TestingS3Server) -> None:
        text = repr(s3_server.settings)
        assert s3_server.settings.secret_access_key not in text
        assert s3_server.settings.access_key_id not in text
