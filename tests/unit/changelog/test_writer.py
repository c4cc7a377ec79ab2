"""The batching changelog writer: batching, pre-emptive uploads, coverage, failures."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gic_runtime.changelog.api import ChangelogWriter
from gic_runtime.changelog.reader import read_changes
from gic_runtime.changelog.records import ChangeRecord, Op
from gic_runtime.changelog.retrying import RetryPolicy
from gic_runtime.changelog.uploader import HedgingUploader, UploaderSettings
from gic_runtime.changelog.writer import BatchingChangelogWriter, WriterSettings
from gic_runtime.errors import StateError, StoragePermissionError, UploadError
from gic_runtime.handles import ChangelogHandle
from gic_runtime.storage import LocalObjectStore, StoreResolver
from gic_runtime.testing import TestingClock
from gic_runtime.testing.faulty_store import FaultRule, TestingFaultyStore

WAIT = 10.0
PUT = frozenset({"put"})


@dataclass
class Env:
    inner: LocalObjectStore
    store: TestingFaultyStore
    resolver: StoreResolver
    uploader: HedgingUploader

    def writer(
        self, buckets: range = range(4), threshold: int = 1 << 20
    ) -> BatchingChangelogWriter:
        return BatchingChangelogWriter(
            buckets, self.uploader, WriterSettings(preemptive_upload_bytes=threshold)
        )

    def replay(self, handles: tuple[ChangelogHandle, ...], since: int = 0) -> list[ChangeRecord]:
        return [r for h in handles for r in read_changes(self.resolver, h, from_seq=since)]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    inner = LocalObjectStore(tmp_path)
    store = TestingFaultyStore(inner)
    resolver = StoreResolver()
    resolver.register(store)
    counter = iter(range(1_000_000))
    uploader = HedgingUploader(
        resolver,
        lambda: store.uri_for(f"changelog/{next(counter):06d}.seg"),
        UploaderSettings(hedge_after_s=60.0, retry=RetryPolicy(delay_s=0.0)),
        clock=TestingClock(),
    )
    yield Env(inner, store, resolver, uploader)
    uploader.close()


def _append(writer: ChangelogWriter, bucket: int, n: int, tag: bytes = b"v") -> list[int]:
    return [writer.append(bucket, Op.PUT, b"k%d" % i, tag * 20) for i in range(n)]


class TestBatching:
    def test_one_persist_uploads_all_buckets_in_one_object(self, env: Env) -> None:
        writer = env.writer()
        for bucket in (0, 1, 2):
            _append(writer, bucket, 3, tag=b"%d" % bucket)

        result = writer.persist({0: 0, 1: 0, 2: 0, 3: 0}).result(WAIT)

        assert env.store.calls("put") == 1
        assert result[3] == ()
        assert len({h.uri for b in (0, 1, 2) for h in result[b]}) == 1
        for bucket in (0, 1, 2):
            [handle] = result[bucket]
            assert (handle.bucket, handle.from_seq, handle.to_seq) == (bucket, 0, 3)
            records = env.replay(result[bucket])
            assert [r.value for r in records] == [b"%d" % bucket * 20] * 3
            assert [r.seq for r in records] == [0, 1, 2]

    def test_buckets_not_asked_for_are_uploaded_too(self, env: Env) -> None:
        writer = env.writer()
        _append(writer, 0, 2)
        _append(writer, 1, 2)
        writer.persist({0: 0}).result(WAIT)

        result = writer.persist({1: 0}).result(WAIT)

        assert env.store.calls("put") == 1
        assert [(h.from_seq, h.to_seq) for h in result[1]] == [(0, 2)]

    def test_sequence_numbers_are_dense_per_bucket(self, env: Env) -> None:
        writer = env.writer()
        assert _append(writer, 0, 3) == [0, 1, 2]
        assert _append(writer, 1, 2) == [0, 1]
        assert writer.next_seq(0) == 3

    def test_append_many_equals_appends_in_order(self, env: Env) -> None:
        one, bulk = env.writer(), env.writer()
        keys = [b"k%d" % i for i in range(5)]
        values = [b"v" * i for i in range(5)]
        _append(one, 0, 1)
        _append(bulk, 0, 1)
        for key, value in zip(keys, values, strict=True):
            one.append(0, Op.PUT, key, value)
        assert bulk.append_many(0, Op.PUT, keys, values) == 1
        assert bulk.append_many(0, Op.PUT, [], []) == 6
        assert bulk.next_seq(0) == one.next_seq(0) == 6

        got = env.replay(bulk.persist({0: 0}).result(WAIT)[0])
        assert got == env.replay(one.persist({0: 0}).result(WAIT)[0])
        assert [(r.seq, r.key, r.value) for r in got[1:]] == [
            (i + 1, k, v) for i, (k, v) in enumerate(zip(keys, values, strict=True))
        ]

    def test_append_many_checks_its_arguments(self, env: Env) -> None:
        writer = env.writer(range(4, 8))
        with pytest.raises(StateError, match="not owned"):
            writer.append_many(3, Op.PUT, [b"k"], [b"v"])
        with pytest.raises(StateError, match="2 values for 1 keys"):
            writer.append_many(4, Op.PUT, [b"k"], [b"v", b"w"])
        assert writer.next_seq(4) == 0


class TestPreemptiveUpload:
    def test_buffer_over_threshold_is_uploaded_before_persist(self, env: Env) -> None:
        writer = env.writer(threshold=248)  # 8 records of 31 bytes
        _append(writer, 0, 4)
        assert env.store.calls("put") == 0
        _append(writer, 1, 4)  # the 8th record reaches it

        assert env.store.wait_for_calls("put", 1)
        assert writer.buffered_bytes() == 0
        assert writer.preemptive_uploads == 1
        _append(writer, 0, 2)
        result = writer.persist({0: 0, 1: 0}).result(WAIT)

        assert env.store.calls("put") == 2
        assert [(h.from_seq, h.to_seq) for h in result[0]] == [(0, 4), (4, 6)]
        assert [(h.from_seq, h.to_seq) for h in result[1]] == [(0, 4)]
        assert [r.seq for r in env.replay(result[0])] == list(range(6))

    def test_append_many_reaching_the_threshold_uploads(self, env: Env) -> None:
        writer = env.writer(threshold=248)  # 8 records of 31 bytes
        keys = [b"k%d" % i for i in range(8)]
        assert writer.append_many(0, Op.PUT, keys, [b"v" * 20] * 8) == 0

        assert env.store.wait_for_calls("put", 1)
        assert writer.buffered_bytes() == 0
        assert writer.preemptive_uploads == 1
        result = writer.persist({0: 0}).result(WAIT)
        assert [(h.from_seq, h.to_seq) for h in result[0]] == [(0, 8)]

    def test_persist_waits_for_a_preemptive_upload_in_flight(self, env: Env) -> None:
        gate = threading.Event()
        env.store.add_rule(FaultRule(methods=PUT, gate=gate, times=1))
        writer = env.writer(threshold=100)
        _append(writer, 0, 4)
        assert env.store.wait_for_calls("put", 1)

        future = writer.persist({0: 0})
        assert not future.done()
        gate.set()

        assert [(h.from_seq, h.to_seq) for h in future.result(WAIT)[0]] == [(0, 4)]


class TestCoverage:
    def test_persist_returns_handles_covering_since_to_next(self, env: Env) -> None:
        writer = env.writer()
        _append(writer, 0, 3)
        first = writer.persist({0: 0}).result(WAIT)[0]
        _append(writer, 0, 2)

        second = writer.persist({0: 3}).result(WAIT)[0]
        overlapping = writer.persist({0: 1}).result(WAIT)[0]
        nothing_new = writer.persist({0: 5}).result(WAIT)[0]

        assert [(h.from_seq, h.to_seq) for h in second] == [(3, 5)]
        assert overlapping == first + second
        assert nothing_new == ()
        assert env.store.calls("put") == 2

    def test_truncate_forgets_handles_wholly_below(self, env: Env) -> None:
        writer = env.writer()
        _append(writer, 0, 3)
        writer.persist({0: 0}).result(WAIT)
        _append(writer, 0, 3)
        writer.persist({0: 3}).result(WAIT)

        writer.truncate(0, 4)

        assert [(h.from_seq, h.to_seq) for h in writer.handles(0)] == [(3, 6)]
        assert [(h.from_seq, h.to_seq) for h in writer.persist({0: 4}).result(WAIT)[0]] == [(3, 6)]
        with pytest.raises(StateError, match="cannot persist from seq 2"):
            writer.persist({0: 2})

    def test_reset_restarts_a_bucket_after_restore(self, env: Env) -> None:
        writer = env.writer()
        _append(writer, 0, 3)
        writer.reset(0, 100)

        assert writer.next_seq(0) == 100
        assert _append(writer, 0, 2) == [100, 101]
        result = writer.persist({0: 100}).result(WAIT)[0]
        assert [(h.from_seq, h.to_seq) for h in result] == [(100, 102)]
        with pytest.raises(StateError):
            writer.persist({0: 0})

    def test_upload_started_before_a_reset_is_not_returned_after_it(self, env: Env) -> None:
        gate = threading.Event()
        env.store.add_rule(FaultRule(methods=PUT, gate=gate, times=1))
        writer = env.writer(threshold=100)
        _append(writer, 0, 4)  # pre-emptive upload, held at the gate
        assert env.store.wait_for_calls("put", 1)
        writer.reset(0, 50)
        gate.set()
        _append(writer, 0, 1)

        result = writer.persist({0: 50}).result(WAIT)[0]

        assert [(h.from_seq, h.to_seq) for h in result] == [(50, 51)]
        assert [(h.from_seq, h.to_seq) for h in writer.handles(0)] == [(50, 51)]

    def test_foreign_bucket_is_rejected(self, env: Env) -> None:
        writer = env.writer(range(4, 8))
        with pytest.raises(StateError, match="not owned"):
            writer.append(3, Op.PUT, b"k")


class TestFailures:
    def test_failed_upload_keeps_changes_for_the_next_persist(self, env: Env) -> None:
        env.store.add_rule(
            FaultRule(methods=PUT, error=lambda: StoragePermissionError("denied"), times=1)
        )
        writer = env.writer()
        _append(writer, 0, 3)
        _append(writer, 1, 1)

        error = writer.persist({0: 0, 1: 0}).exception(WAIT)
        assert isinstance(error, UploadError)
        _append(writer, 0, 2)
        result = writer.persist({0: 0, 1: 0}).result(WAIT)

        assert [r.seq for r in env.replay(result[0])] == [0, 1, 2, 3, 4]
        assert [r.seq for r in env.replay(result[1])] == [0]
        assert len({h.uri for hs in result.values() for h in hs}) == 1

    def test_failed_preemptive_upload_is_retried_by_persist(self, env: Env) -> None:
        env.store.add_rule(
            FaultRule(methods=PUT, error=lambda: StoragePermissionError("denied"), times=1)
        )
        writer = env.writer(threshold=100)
        _append(writer, 0, 4)  # pre-emptive upload fails
        deadline = time.monotonic() + WAIT
        while writer.uploads_in_flight():
            assert time.monotonic() < deadline
            time.sleep(0.001)
        _append(writer, 0, 1)

        result = writer.persist({0: 0}).result(WAIT)

        assert env.store.calls("put") == 2
        assert [r.seq for r in env.replay(result[0])] == [0, 1, 2, 3, 4]
        assert len({h.uri for h in result[0]}) == 1

    def test_close_waits_for_uploads_in_flight(self, env: Env) -> None:
        gate = threading.Event()
        env.store.add_rule(FaultRule(methods=PUT, gate=gate, times=1))
        writer = env.writer()
        _append(writer, 0, 1)
        future = writer.persist({0: 0})
        closer = threading.Thread(target=writer.close)
        closer.start()
        assert not future.done()
        gate.set()
        closer.join(WAIT)

        assert future.done()
        with pytest.raises(StateError, match="closed"):
            writer.append(0, Op.PUT, b"k")
