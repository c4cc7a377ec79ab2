"""The hedging uploader: hedges, retries, timeouts, fresh names, back-pressure."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gic_runtime.changelog.retrying import RetryPolicy
from gic_runtime.changelog.uploader import HedgingUploader, UploaderSettings
from gic_runtime.errors import (
    ConfigurationError,
    ObjectExistsError,
    StoragePermissionError,
    TransientStorageError,
    UploadError,
)
from gic_runtime.storage import LocalObjectStore, StoreResolver
from gic_runtime.testing import TestingClock
from gic_runtime.testing.faulty_store import FaultRule, TestingFaultyStore

WAIT = 10.0  # seconds; only a bound for a broken build, never reached when it works

PUT = frozenset({"put"})


def eventually(predicate: Callable[[], bool], timeout: float = WAIT) -> None:
    """Wait for a condition another thread establishes (fails the test on timeout)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.001)


@dataclass
class Env:
    inner: LocalObjectStore
    store: TestingFaultyStore
    resolver: StoreResolver
    clock: TestingClock
    names: list[str]
    started: list[HedgingUploader]

    def new_uri(self) -> str:
        uri = self.store.uri_for(f"changelog/{len(self.names):04d}.seg")
        self.names.append(uri)
        return uri

    def key(self, uri: str) -> str:
        return uri[len(self.store.root_uri) + 1 :]

    def objects(self) -> list[str]:
        return [self.inner.uri_for(info.key) for info in self.inner.list("changelog/")]

    def uploader(self, **overrides: object) -> HedgingUploader:
        params: dict[str, object] = {
            "hedge_after_s": 1.0,
            "retry": RetryPolicy(max_attempts=3, delay_s=0.0, timeout_s=100.0),
            "tick_s": 0.005,
        }
        params.update(overrides)
        uploader = HedgingUploader(
            self.resolver,
            self.new_uri,
            UploaderSettings(**params),  # type: ignore[arg-type]
            clock=self.clock,
        )
        self.started.append(uploader)
        return uploader


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    inner = LocalObjectStore(tmp_path)
    store = TestingFaultyStore(inner, seed=7)
    resolver = StoreResolver()
    resolver.register(store)
    e = Env(inner, store, resolver, TestingClock(), [], [])
    yield e
    for uploader in e.started:
        uploader.close()


class TestHedging:
    def test_slow_first_attempt_is_hedged_and_the_hedge_wins(self, env: Env) -> None:
        gate = threading.Event()
        env.store.add_rule(FaultRule(methods=PUT, gate=gate, times=1))
        uploader = env.uploader()

        future = uploader.submit(b"segment-bytes")
        assert env.store.wait_for_calls("put", 1)
        env.clock.advance(1.0)
        uploader.poll()
        result = future.result(WAIT)

        assert result.uri == env.names[1]
        assert (result.attempts, result.hedges) == (2, 1)
        assert env.inner.get(env.key(result.uri)) == b"segment-bytes"
        gate.set()
        uploader.close()
        assert env.objects() == [result.uri]  # the slow loser's object was deleted
        assert uploader.stats().losers_deleted == 1

    def test_no_hedge_before_the_delay(self, env: Env) -> None:
        gate = threading.Event()
        env.store.add_rule(FaultRule(methods=PUT, gate=gate, times=1))
        uploader = env.uploader()

        future = uploader.submit(b"x")
        assert env.store.wait_for_calls("put", 1)
        env.clock.advance(0.9)
        uploader.poll()
        assert env.store.calls("put") == 1
        gate.set()

        assert future.result(WAIT).uri == env.names[0]
        assert uploader.stats().hedges == 0

    def test_hedges_per_upload_are_capped(self, env: Env) -> None:
        gate = threading.Event()
        env.store.add_rule(FaultRule(methods=PUT, gate=gate, times=2))
        uploader = env.uploader(max_hedges=1)

        future = uploader.submit(b"x")
        env.clock.advance(1.0)
        uploader.poll()
        assert env.store.wait_for_calls("put", 2)
        env.clock.advance(5.0)
        uploader.poll()
        assert env.store.calls("put") == 2
        gate.set()
        future.result(WAIT)
        uploader.close()
        assert len(env.objects()) == 1

    def test_hedge_budget_bounds_extra_requests(self, env: Env) -> None:
        gate = threading.Event()
        env.store.add_rule(FaultRule(methods=PUT, gate=gate, times=1))
        uploader = env.uploader(hedge_budget_burst=0.0, hedge_budget_ratio=0.0)

        future = uploader.submit(b"x")
        env.clock.advance(2.0)
        uploader.poll()
        assert env.store.calls("put") == 1
        gate.set()
        assert future.result(WAIT).hedges == 0


class TestRetries:
    def test_transient_errors_are_retried_with_fresh_names(self, env: Env) -> None:
        env.store.add_rule(
            FaultRule(methods=PUT, error=lambda: TransientStorageError("503 SlowDown"), times=2)
        )
        uploader = env.uploader()

        result = uploader.submit(b"payload").result(WAIT)

        assert (result.attempts, result.failed_attempts) == (3, 2)
        assert result.uri == env.names[2]
        assert len(set(env.names)) == 3
        uploader.close()
        assert env.objects() == [result.uri]

    def test_transient_retry_waits_for_the_delay(self, env: Env) -> None:
        env.store.add_rule(
            FaultRule(methods=PUT, error=lambda: TransientStorageError("503"), times=1)
        )
        uploader = env.uploader(retry=RetryPolicy(delay_s=0.5, timeout_s=100.0))

        future = uploader.submit(b"x")
        eventually(lambda: uploader.stats().attempt_failures == 1)
        uploader.poll()
        assert env.store.calls("put") == 1
        env.clock.advance(0.5)
        uploader.poll()

        assert future.result(WAIT).attempts == 2

    def test_answer_lost_after_success_leaves_no_orphan(self, env: Env) -> None:
        env.store.add_rule(
            FaultRule(
                methods=PUT, error=lambda: TransientStorageError("reset"), times=1, after=True
            )
        )
        uploader = env.uploader()

        result = uploader.submit(b"x").result(WAIT)
        uploader.close()

        assert result.attempts == 2
        assert env.objects() == [result.uri]

    def test_permanent_error_fails_fast(self, env: Env) -> None:
        env.store.add_rule(
            FaultRule(methods=PUT, error=lambda: StoragePermissionError("access denied"))
        )
        uploader = env.uploader()

        error = uploader.submit(b"x").exception(WAIT)

        assert isinstance(error, UploadError)
        assert "access denied" in str(error)
        assert env.store.calls("put") == 1

    def test_exhausted_retries_fail_naming_the_last_cause(self, env: Env) -> None:
        env.store.add_rule(
            FaultRule(methods=PUT, error=lambda: TransientStorageError("503 SlowDown"))
        )
        uploader = env.uploader(retry=RetryPolicy(max_attempts=2, delay_s=0.0))

        error = uploader.submit(b"x").exception(WAIT)

        assert isinstance(error, UploadError)
        assert "503 SlowDown" in str(error)
        assert env.store.calls("put") == 2
        assert uploader.stats().in_flight_bytes == 0

    def test_timed_out_attempt_gets_a_new_attempt_at_once(self, env: Env) -> None:
        gate = threading.Event()
        env.store.add_rule(FaultRule(methods=PUT, gate=gate, times=1))
        uploader = env.uploader(max_hedges=0, retry=RetryPolicy(timeout_s=2.0, delay_s=9.0))

        future = uploader.submit(b"x")
        assert env.store.wait_for_calls("put", 1)
        env.clock.advance(2.0)
        uploader.poll()
        result = future.result(WAIT)

        assert result.uri == env.names[1]
        assert uploader.stats().timeouts == 1
        gate.set()
        uploader.close()
        assert env.objects() == [result.uri]


class TestOwnWriteReportedAsExisting:
    """A create-if-absent PUT retried inside the store client (botocore) after its
    first answer was lost gets ``412``: the name is fresh, so the object is ours."""

    @staticmethod
    def _lost_answer_then_exists() -> FaultRule:
        return FaultRule(
            methods=PUT,
            error=lambda: ObjectExistsError("412 Precondition Failed"),
            times=1,
            after=True,  # the real PUT landed; the client only saw the retry's 412
        )

    def test_own_object_is_confirmed_and_the_attempt_succeeds(self, env: Env) -> None:
        env.store.add_rule(self._lost_answer_then_exists())
        uploader = env.uploader()

        result = uploader.submit(b"segment-bytes").result(WAIT)
        uploader.close()

        assert result.uri == env.names[0]
        assert (result.attempts, result.failed_attempts) == (1, 0)
        assert env.objects() == [result.uri]
        assert env.inner.get(env.key(result.uri)) == b"segment-bytes"
        assert (env.store.calls("size"), env.store.calls("get")) == (1, 1)
        assert uploader.stats().own_writes_confirmed == 1

    def test_confirmed_hedge_loser_is_still_deleted(self, env: Env) -> None:
        gate = threading.Event()
        env.store.add_rule(FaultRule(methods=PUT, gate=gate, times=1))
        env.store.add_rule(self._lost_answer_then_exists())  # both hit the first attempt
        uploader = env.uploader()
        try:
            future = uploader.submit(b"x")
            assert env.store.wait_for_calls("put", 1)
            env.clock.advance(1.0)
            uploader.poll()  # the hedge starts and wins
            result = future.result(WAIT)
        finally:
            gate.set()  # the slow first attempt lands, then reports 412
        uploader.close()

        assert result.uri == env.names[1]
        assert env.objects() == [result.uri]
        assert uploader.stats().losers_deleted == 1

    def test_different_size_is_a_name_collision_and_the_object_is_kept(self, env: Env) -> None:
        env.inner.put("changelog/0000.seg", b"someone else's object")
        uploader = env.uploader()

        error = uploader.submit(b"ours").exception(WAIT)
        uploader.close()

        assert isinstance(error, UploadError)
        assert "collision" in str(error) and env.names[0] in str(error)
        assert env.store.calls("get") == 0  # the size already told them apart
        assert env.inner.get("changelog/0000.seg") == b"someone else's object"
        assert env.store.calls("delete_many") == 0

    def test_same_size_other_bytes_is_a_name_collision(self, env: Env) -> None:
        env.inner.put("changelog/0000.seg", b"theirs")
        uploader = env.uploader()

        error = uploader.submit(b"ours!!").exception(WAIT)
        uploader.close()

        assert isinstance(error, UploadError)
        assert "collision" in str(error)
        assert env.store.calls("put") == 1  # not retried: a fresh name collided
        assert env.inner.get("changelog/0000.seg") == b"theirs"
        assert env.store.calls("delete_many") == 0

    def test_unreadable_existing_object_is_retried_under_a_fresh_name(self, env: Env) -> None:
        env.store.add_rule(self._lost_answer_then_exists())
        env.store.add_rule(
            FaultRule(
                methods=frozenset({"size"}),
                error=lambda: TransientStorageError("503 SlowDown"),
                times=1,
            )
        )
        uploader = env.uploader()

        result = uploader.submit(b"x").result(WAIT)
        uploader.close()

        assert result.uri == env.names[1]
        assert (result.attempts, result.failed_attempts) == (2, 1)
        # Unverified, so not deleted: left for the orphan sweep rather than risk
        # deleting an object that may not be ours.
        assert env.objects() == [env.names[0], env.names[1]]


class TestBackPressure:
    def test_submit_blocks_while_in_flight_bytes_exceed_the_cap(self, env: Env) -> None:
        gate = threading.Event()
        env.store.add_rule(FaultRule(methods=PUT, gate=gate, times=1))
        uploader = env.uploader(max_in_flight_bytes=100)
        first = uploader.submit(b"a" * 150)  # admitted: nothing was in flight
        admitted = threading.Event()

        def second_submit() -> None:
            uploader.submit(b"b" * 10).result(WAIT)
            admitted.set()

        thread = threading.Thread(target=second_submit)
        thread.start()
        eventually(lambda: uploader.stats().backpressure_waits == 1)
        assert not admitted.is_set()
        assert env.store.calls("put") == 1

        gate.set()
        thread.join(WAIT)
        assert admitted.is_set()
        assert first.done()
        assert uploader.stats().in_flight_bytes == 0


class TestLifecycle:
    def test_closed_uploader_refuses_work(self, env: Env) -> None:
        uploader = env.uploader()
        uploader.close()
        with pytest.raises(ConfigurationError, match="closed"):
            uploader.submit(b"x")

    def test_many_concurrent_uploads_all_land(self, env: Env) -> None:
        uploader = env.uploader(hedge_after_s=None)
        futures = [uploader.submit(b"%d" % i) for i in range(50)]
        uris = [f.result(WAIT).uri for f in futures]
        uploader.close()
        assert sorted(uris) == env.objects()
        assert [env.inner.get(env.key(u)) for u in uris] == [b"%d" % i for i in range(50)]
