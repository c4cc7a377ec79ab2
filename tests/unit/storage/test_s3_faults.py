"""S3ObjectStore under injected faults (TestingFaultProxy in front of SeaweedFS): each fault
surfaces as the right error class, and botocore's retries absorb a single transient one."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
from tests.support.testing_proxy import FaultRule, TestingFaultProxy
from tests.support.testing_s3server import TestingS3Server

from gic_runtime.errors import (
    ObjectExistsError,
    StorageError,
    StorageTimeoutError,
    TransientStorageError,
)
from gic_runtime.storage.s3 import S3ObjectStore

pytestmark = pytest.mark.s3


def _store(
    server: TestingS3Server,
    proxy: TestingFaultProxy,
    bucket: str,
    *,
    attempts: int,
    read_timeout_s: float = 5.0,
) -> S3ObjectStore:
    settings = replace(
        server.settings,
        endpoint_url=proxy.endpoint_url,
        max_attempts=attempts,
        read_timeout_s=read_timeout_s,
    )
    return S3ObjectStore(bucket, "gic", settings=settings)


def _direct(server: TestingS3Server, bucket: str) -> S3ObjectStore:
    return S3ObjectStore(bucket, "gic", settings=server.settings)


class TestPassThrough:
    def test_all_operations_work_and_are_counted(
        self, s3_server: TestingS3Server, fault_proxy: TestingFaultProxy, s3_bucket: str
    ) -> None:
        store = _store(s3_server, fault_proxy, s3_bucket, attempts=1)
        store.put("a", b"hello", if_absent=True)
        assert store.get("a", start=1, length=3) == b"ell"
        assert store.size("a") == 5
        store.copy("a", "b")
        assert [o.key for o in store.list()] == ["a", "b"]
        assert store.delete_many(["a", "b"]) == 2
        assert not store.exists("a")
        seen = fault_proxy.requests_by_method()
        assert seen["PUT"] == 2  # put + copy
        assert seen["GET"] == 2  # ranged get + list
        assert seen["POST"] == 1  # DeleteObjects
        assert fault_proxy.requests_seen == sum(seen.values())
        assert fault_proxy.faults_injected() == {}

    def test_large_body_roundtrip(
        self, s3_server: TestingS3Server, fault_proxy: TestingFaultProxy, s3_bucket: str
    ) -> None:
        data = bytes(range(256)) * 8192  # 2 MiB
        store = _store(s3_server, fault_proxy, s3_bucket, attempts=1)
        store.put("big", data)
        assert store.get("big") == data


class TestSingleAttempt:
    def test_slowdown_is_transient(
        self, s3_server: TestingS3Server, fault_proxy: TestingFaultProxy, s3_bucket: str
    ) -> None:
        fault_proxy.slowdown(method="PUT", count=1)
        store = _store(s3_server, fault_proxy, s3_bucket, attempts=1)
        with pytest.raises(TransientStorageError, match="SlowDown") as info:
            store.put("k", b"x")
        assert not isinstance(info.value, StorageTimeoutError)
        assert info.value.uri == store.uri_for("k")
        assert not _direct(s3_server, s3_bucket).exists("k")
        store.put("k", b"x")  # the rule fired once
        assert fault_proxy.faults_injected() == {"slowdown": 1}

    def test_delay_beyond_read_timeout_is_a_timeout(
        self, s3_server: TestingS3Server, fault_proxy: TestingFaultProxy, s3_bucket: str
    ) -> None:
        _direct(s3_server, s3_bucket).put("k", b"x")
        fault_proxy.delay(3.0, method="GET", count=1)
        store = _store(s3_server, fault_proxy, s3_bucket, attempts=1, read_timeout_s=0.3)
        with pytest.raises(StorageTimeoutError, match="timed out"):
            store.get("k")

    def test_drop_before_upstream_is_transient(
        self, s3_server: TestingS3Server, fault_proxy: TestingFaultProxy, s3_bucket: str
    ) -> None:
        fault_proxy.drop(method="PUT", count=1)
        store = _store(s3_server, fault_proxy, s3_bucket, attempts=1)
        with pytest.raises(TransientStorageError, match="connection") as info:
            store.put("k", b"x")
        assert not isinstance(info.value, StorageTimeoutError)
        assert not _direct(s3_server, s3_bucket).exists("k")

    def test_dropped_read_is_transient(
        self, s3_server: TestingS3Server, fault_proxy: TestingFaultProxy, s3_bucket: str
    ) -> None:
        _direct(s3_server, s3_bucket).put("k", b"x")
        fault_proxy.drop(method="GET", count=1)
        store = _store(s3_server, fault_proxy, s3_bucket, attempts=1)
        with pytest.raises(TransientStorageError):
            store.get("k")
        assert store.get("k") == b"x"

    def test_rules_filter_by_method(
        self, s3_server: TestingS3Server, fault_proxy: TestingFaultProxy, s3_bucket: str
    ) -> None:
        fault_proxy.slowdown(method="get")
        store = _store(s3_server, fault_proxy, s3_bucket, attempts=1)
        store.put("k", b"x")
        with pytest.raises(TransientStorageError):
            store.get("k")
        fault_proxy.clear()
        assert store.get("k") == b"x"

    def test_rules_filter_by_path(
        self, s3_server: TestingS3Server, fault_proxy: TestingFaultProxy, s3_bucket: str
    ) -> None:
        fault_proxy.add_rule(FaultRule("slowdown", path_contains="/gic/bad"))
        store = _store(s3_server, fault_proxy, s3_bucket, attempts=1)
        store.put("good", b"x")
        with pytest.raises(TransientStorageError):
            store.put("bad", b"x")

    def test_probability_hits_some_requests(
        self, s3_server: TestingS3Server, fault_proxy: TestingFaultProxy, s3_bucket: str
    ) -> None:
        fault_proxy.slowdown(method="PUT", probability=0.5)
        store = _store(s3_server, fault_proxy, s3_bucket, attempts=1)
        failed = 0
        for i in range(40):
            try:
                store.put(f"k{i}", b"x")
            except TransientStorageError:
                failed += 1
        assert 0 < failed < 40
        assert fault_proxy.faults_injected() == {"slowdown": failed}
        assert len(list(_direct(s3_server, s3_bucket).list())) == 40 - failed


class TestRetries:
    def test_single_slowdown_is_retried(
        self, s3_server: TestingS3Server, fault_proxy: TestingFaultProxy, s3_bucket: str
    ) -> None:
        fault_proxy.slowdown(method="PUT", count=1)
        store = _store(s3_server, fault_proxy, s3_bucket, attempts=3)
        data = b"checkpoint bytes" * 100
        store.put("k", data, if_absent=True)
        assert _direct(s3_server, s3_bucket).get("k") == data
        assert fault_proxy.requests_by_method()["PUT"] == 2
        assert fault_proxy.faults_injected() == {"slowdown": 1}

    def test_single_dropped_connection_is_retried(
        self, s3_server: TestingS3Server, fault_proxy: TestingFaultProxy, s3_bucket: str
    ) -> None:
        fault_proxy.drop(method="PUT", count=1)
        store = _store(s3_server, fault_proxy, s3_bucket, attempts=3)
        store.put("k", b"data")
        assert _direct(s3_server, s3_bucket).get("k") == b"data"

    def test_persistent_slowdown_exhausts_attempts(
        self, s3_server: TestingS3Server, fault_proxy: TestingFaultProxy, s3_bucket: str
    ) -> None:
        fault_proxy.slowdown(method="PUT")
        store = _store(s3_server, fault_proxy, s3_bucket, attempts=2)
        with pytest.raises(TransientStorageError):
            store.put("k", b"x")
        assert fault_proxy.requests_by_method()["PUT"] == 2

    def test_lost_response_to_create_if_absent_reads_as_exists(
        self, s3_server: TestingS3Server, fault_proxy: TestingFaultProxy, s3_bucket: str
    ) -> None:
        # The write lands, its answer is lost, botocore's retry finds the object there:
        # the caller sees ObjectExistsError although its own bytes are stored.
        fault_proxy.drop(method="PUT", count=1, after_upstream=True)
        store = _store(s3_server, fault_proxy, s3_bucket, attempts=3)
        with pytest.raises(ObjectExistsError):
            store.put("manifest", b"mine", if_absent=True)
        assert _direct(s3_server, s3_bucket).get("manifest") == b"mine"


class TestProxyLifecycle:
    def test_stop_cuts_delayed_requests(self, s3_server: TestingS3Server, s3_bucket: str) -> None:
        proxy = TestingFaultProxy(s3_server.endpoint_url).start()
        proxy.delay(60.0)
        store = _store(s3_server, proxy, s3_bucket, attempts=1, read_timeout_s=60.0)
        errors: list[BaseException] = []

        def call() -> None:
            try:
                store.put("k", b"x")
            except StorageError as exc:
                errors.append(exc)

        worker = threading.Thread(target=call)
        worker.start()
        assert proxy.wait_for_requests(1, timeout=10.0)
        proxy.stop()
        worker.join(timeout=10.0)
        assert not worker.is_alive()
        assert len(errors) == 1
        assert isinstance(errors[0], TransientStorageError)

    def test_endpoint_requires_start(self, s3_server: TestingS3Server) -> None:
        proxy = TestingFaultProxy(s3_server.endpoint_url)
        with pytest.raises(RuntimeError, match="start"):
            _ = proxy.endpoint_url

    def test_rejects_non_http_upstream(self) -> None:
        with pytest.raises(ValueError, match="http://"):
            TestingFaultProxy("https://example.invalid")

    def test_rejects_bad_probability(self, s3_server: TestingS3Server) -> None:
        with TestingFaultProxy(s3_server.endpoint_url) as proxy, pytest.raises(ValueError):
            proxy.slowdown(probability=1.5)
