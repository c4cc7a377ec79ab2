"""Materializer: spread initial due times with jitter, one in flight per bucket,
completion applied only in poll (on the task thread), bounded failures, stats."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import pytest

from gic_runtime.errors import (
    MaterializationError,
    ObjectExistsError,
    StateError,
    TransientStorageError,
)
from gic_runtime.materialization import MaterializationSettings, Materializer
from gic_runtime.state.backend import KeyedStateBackend, MaterializationView
from gic_runtime.state.keys import bucket_for
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.state.snapshot import read_snapshot
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.uri import StoreResolver
from gic_runtime.testing import TestingClock
from gic_runtime.testing_changelog import TestingChangelogWriter

B = 8
INTERVAL = 100.0
WAIT = 10.0  # seconds; only a bound for a broken build, never reached when it works


class TestingManualExecutor(Executor):
    """Runs submitted jobs only when the test says so."""

    __test__ = False

    def __init__(self) -> None:
        self.queued: list[tuple[Future[Any], Callable[[], Any]]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self.queued.append((future, lambda: fn(*args, **kwargs)))
        return future

    def run_all(self) -> int:
        jobs, self.queued = self.queued, []
        for future, job in jobs:
            try:
                future.set_result(job())
            except BaseException as exc:
                future.set_exception(exc)
        return len(jobs)


class TestingFlakyResolver(StoreResolver):
    """Fails the next ``failures`` resolves with a transient storage error."""

    __test__ = False

    def __init__(self, store: LocalObjectStore) -> None:
        super().__init__()
        self.register(store)
        self.failures = 0

    def resolve(self, uri: str) -> tuple[Any, str]:
        if self.failures:
            self.failures -= 1
            raise TransientStorageError("injected: 503 SlowDown", uri=uri)
        return super().resolve(uri)


class TestingGatedResolver(StoreResolver):
    """Holds every resolve until ``gate`` is set; ``entered`` is set on the first one."""

    __test__ = False

    def __init__(self, store: LocalObjectStore) -> None:
        super().__init__()
        self.register(store)
        self.entered = threading.Event()
        self.gate = threading.Event()

    def resolve(self, uri: str) -> tuple[Any, str]:
        self.entered.set()
        assert self.gate.wait(WAIT), "test never opened the gate"
        return super().resolve(uri)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[KeyedStateBackend, TestingFlakyResolver, LocalObjectStore]:
    objects = LocalObjectStore(tmp_path / "objects")
    backend = KeyedStateBackend(range(B), B, InMemoryStore(), TestingChangelogWriter())
    v = backend.value_state("v")
    for i in range(200):
        v.set(f"k{i}", i)
    return backend, TestingFlakyResolver(objects), objects


def _materializer(
    setup: tuple[KeyedStateBackend, TestingFlakyResolver, LocalObjectStore],
    clock: TestingClock,
    executor: Executor,
    **kw: Any,
) -> Materializer:
    backend, resolver, objects = setup
    settings = MaterializationSettings(interval_s=INTERVAL, seed=7, **kw)
    return Materializer(
        backend,
        resolver,
        objects.root_uri,
        "job",
        clock=clock,
        settings=settings,
        executor=executor,
    )


class TestSchedule:
    def test_initial_due_times_are_spread_over_the_interval(self, setup: Any) -> None:
        clock = TestingClock()
        m = _materializer(setup, clock, TestingManualExecutor())
        offsets = sorted(m.due_at(b) - clock.monotonic() for b in range(B))
        assert all(0 <= o < INTERVAL for o in offsets)
        slots = sorted(int(o // (INTERVAL / B)) for o in offsets)
        assert slots == list(range(B))  # exactly one bucket per slot: never all at once

    def test_seed_makes_schedule_reproducible_and_seeds_differ(self, setup: Any) -> None:
        clock = TestingClock()
        a = _materializer(setup, clock, TestingManualExecutor())
        b = _materializer(setup, clock, TestingManualExecutor())
        assert [a.due_at(i) for i in range(B)] == [b.due_at(i) for i in range(B)]
        backend, resolver, objects = setup
        c = Materializer(
            backend,
            resolver,
            objects.root_uri,
            "job",
            clock=clock,
            settings=MaterializationSettings(interval_s=INTERVAL, seed=8),
            executor=TestingManualExecutor(),
        )
        assert [a.due_at(i) for i in range(B)] != [c.due_at(i) for i in range(B)]

    def test_next_due_has_jitter(self, setup: Any) -> None:
        clock = TestingClock()
        ex = TestingManualExecutor()
        m = _materializer(setup, clock, ex, max_in_flight=B, jitter=0.2)
        clock.advance(INTERVAL)
        m.poll()
        assert ex.run_all() == B
        m.poll()
        nexts = [m.due_at(b) - clock.monotonic() for b in range(B)]
        assert all(0.8 * INTERVAL <= n <= 1.2 * INTERVAL for n in nexts)
        assert len(set(nexts)) == B


class TestRunning:
    def test_completion_applies_only_in_poll(self, setup: Any) -> None:
        backend, resolver, _ = setup
        clock = TestingClock()
        ex = TestingManualExecutor()
        m = _materializer(setup, clock, ex)
        first = min(range(B), key=m.due_at)
        clock.advance(m.due_at(first) - clock.monotonic())
        assert m.poll() == []
        assert m.in_flight() == {first}
        seq = backend.seq(first)
        backend.value_state("v").set(
            next(k for k in (f"k{i}" for i in range(999)) if bucket_for(k, B) == first), -1
        )
        ex.run_all()
        assert backend.snapshot_of(first) is None  # done on the executor, not applied yet
        applied = m.poll()
        assert [h.bucket for h in applied] == [first]
        assert backend.snapshot_of(first) == applied[0]
        assert applied[0].seq == seq  # the view was taken before the later write
        assert dict(read_snapshot(resolver, applied[0]))
        assert m.stats.materialized == 1 and m.stats.bytes_uploaded == applied[0].size

    def test_one_in_flight_per_bucket(self, setup: Any) -> None:
        clock = TestingClock()
        ex = TestingManualExecutor()
        m = _materializer(setup, clock, ex, max_in_flight=B)
        clock.advance(10 * INTERVAL)
        m.poll()
        m.poll()
        clock.advance(10 * INTERVAL)
        m.poll()
        assert len(ex.queued) == B
        assert m.in_flight() == frozenset(range(B))

    def test_max_in_flight_overall(self, setup: Any) -> None:
        clock = TestingClock()
        ex = TestingManualExecutor()
        m = _materializer(setup, clock, ex, max_in_flight=2)
        clock.advance(INTERVAL)
        m.poll()
        assert len(ex.queued) == 2
        ex.run_all()
        m.poll()
        assert len(ex.queued) == 2
        assert m.stats.materialized == 2

    def test_unchanged_bucket_is_skipped(self, setup: Any) -> None:
        clock = TestingClock()
        ex = TestingManualExecutor()
        m = _materializer(setup, clock, ex, max_in_flight=B)
        clock.advance(INTERVAL)
        m.poll()
        ex.run_all()
        m.poll()
        clock.advance(2 * INTERVAL)
        m.poll()
        assert ex.queued == []
        assert m.stats.skipped_unchanged == B

    def test_restore_meanwhile_discards_the_snapshot(self, setup: Any) -> None:
        backend, resolver, _ = setup
        clock = TestingClock()
        ex = TestingManualExecutor()
        m = _materializer(setup, clock, ex, max_in_flight=B)
        clock.advance(INTERVAL)
        m.poll()
        backend.restore({}, resolver)
        ex.run_all()
        assert m.poll() == []
        assert m.stats.discarded == B

    def test_runs_on_a_real_background_thread(self, setup: Any) -> None:
        backend, _, _ = setup
        clock = TestingClock()
        m = _materializer(setup, clock, None)  # type: ignore[arg-type]
        clock.advance(INTERVAL)
        m.poll()
        m.close(wait=True)
        assert len(m.poll()) == 1
        assert sum(backend.snapshot_of(b) is not None for b in range(B)) == 1


class TestClose:
    def test_cancelled_queued_job_releases_its_bucket(self, setup: Any) -> None:
        backend, _, objects = setup
        resolver = TestingGatedResolver(objects)
        clock = TestingClock()
        m = Materializer(
            backend,
            resolver,
            objects.root_uri,
            "job",
            clock=clock,
            settings=MaterializationSettings(interval_s=INTERVAL, seed=7, max_in_flight=2),
        )  # owns a one-thread executor: the second job waits in its queue
        clock.advance(INTERVAL)
        try:
            m.poll()
            running, queued = sorted(m.in_flight(), key=m.due_at)
            assert resolver.entered.wait(WAIT)
            m.close(wait=False)  # cancels the queued job
        finally:
            resolver.gate.set()

        assert m.poll() == []
        assert running in m.in_flight() and queued not in m.in_flight()
        assert m.stats.cancelled == 1 and m.stats.failures == 0
        deadline = time.monotonic() + WAIT
        applied = m.poll()
        while not applied:  # the running job finishes on its own thread
            assert time.monotonic() < deadline, "running materialization never completed"
            time.sleep(0.001)
            applied = m.poll()
        assert [h.bucket for h in applied] == [running]
        assert m.in_flight() == frozenset()
        assert backend.snapshot_of(queued) is None

    def test_cancelled_job_on_a_shared_executor_is_started_again(
        self, setup: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        backend, _, _ = setup
        views: list[MaterializationView] = []
        take_view = backend.materialization_view

        def recording_view(bucket: int) -> MaterializationView:
            views.append(take_view(bucket))
            return views[-1]

        monkeypatch.setattr(backend, "materialization_view", recording_view)
        clock = TestingClock()
        ex = TestingManualExecutor()
        m = _materializer(setup, clock, ex)
        clock.advance(INTERVAL)
        m.poll()
        (future, _), *_ = ex.queued
        (bucket,) = m.in_flight()
        ex.queued.clear()
        assert future.cancel()  # e.g. the shared executor was shut down by its owner
        with pytest.raises(StateError, match="closed"):
            list(views[0].view)  # the job never ran; its view was released anyway

        m.poll()  # releases the bucket; it is still due, so it starts again
        assert m.stats.cancelled == 1
        assert m.in_flight() == {bucket}
        assert ex.run_all() == 1
        assert [h.bucket for h in m.poll()] == [bucket]


class TestFailures:
    def test_failures_are_counted_retried_and_bounded(self, setup: Any) -> None:
        _, resolver, _ = setup
        clock = TestingClock()
        ex = TestingManualExecutor()
        m = _materializer(setup, clock, ex, max_consecutive_failures=2, retry_delay_s=5.0)
        first = min(range(B), key=m.due_at)
        clock.advance(m.due_at(first) - clock.monotonic())
        resolver.failures = 1
        m.poll()
        ex.run_all()
        m.poll()
        assert m.stats.failures == 1
        assert m.due_at(first) == clock.monotonic() + 5.0
        clock.advance(5.0)
        m.poll()
        ex.run_all()
        assert len(m.poll()) == 1  # a success resets the consecutive count
        resolver.failures = 100
        with pytest.raises(MaterializationError, match=r"failed 3 times in a row") as err:
            for _ in range(50):  # one attempt per poll (max_in_flight=1), spread over buckets
                clock.advance(INTERVAL * 2)
                m.poll()
                ex.run_all()
        assert isinstance(err.value.__cause__, TransientStorageError)
        assert m.stats.failures >= 3

    def test_name_collision_is_a_failure_not_an_overwrite(
        self, setup: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        _, _, objects = setup
        objects.put("jobs/job/snapshots/fixed.snap", b"someone else's")
        monkeypatch.setattr(
            "gic_runtime.materialization.scheduler.new_snapshot_uri",
            lambda root, job, b: objects.uri_for("jobs/job/snapshots/fixed.snap"),
        )
        clock = TestingClock()
        ex = TestingManualExecutor()
        m = _materializer(setup, clock, ex)
        clock.advance(INTERVAL)
        m.poll()
        job_future = ex.queued[0][0]
        ex.run_all()
        assert isinstance(job_future.exception(), ObjectExistsError)
        m.poll()
        assert m.stats.failures == 1
        assert objects.get("jobs/job/snapshots/fixed.snap") == b"someone else's"


class TestUnreferencedSnapshots:
    """Snapshots no manifest can reference are deleted; captured ones are left to the
    registry (DESIGN §3.1)."""

    def _materialize(self, m: Materializer, clock: TestingClock, ex: Any, bucket: int) -> Any:
        clock.advance(m.due_at(bucket) - clock.monotonic() + 0.001)
        m.poll()
        ex.run_all()
        (handle,) = [h for h in m.poll() if h.bucket == bucket]
        ex.run_all()  # deletions run on the executor too
        return handle

    def _touch(self, backend: KeyedStateBackend, bucket: int, value: int) -> None:
        key = next(k for k in (f"k{i}" for i in range(999)) if bucket_for(k, B) == bucket)
        backend.value_state("v").set(key, value)

    def test_snapshot_replaced_before_any_checkpoint_is_deleted(self, setup: Any) -> None:
        backend, _resolver, objects = setup
        clock, ex = TestingClock(), TestingManualExecutor()
        m = _materializer(setup, clock, ex, max_in_flight=B)
        bucket = min(range(B), key=m.due_at)
        first = self._materialize(m, clock, ex, bucket)
        self._touch(backend, bucket, -1)
        second = self._materialize(m, clock, ex, bucket)
        assert not objects.exists(first.uri.removeprefix(objects.root_uri + "/"))
        assert objects.exists(second.uri.removeprefix(objects.root_uri + "/"))
        assert m.stats.unreferenced_deleted == 1

    def test_snapshot_a_checkpoint_captured_is_kept(self, setup: Any) -> None:
        backend, _resolver, objects = setup
        clock, ex = TestingClock(), TestingManualExecutor()
        m = _materializer(setup, clock, ex, max_in_flight=B)
        bucket = min(range(B), key=m.due_at)
        first = self._materialize(m, clock, ex, bucket)
        states = backend.checkpoint().result(timeout=WAIT)
        assert states[bucket].snapshot == first
        self._touch(backend, bucket, -2)
        self._materialize(m, clock, ex, bucket)
        assert objects.exists(first.uri.removeprefix(objects.root_uri + "/"))
        assert m.stats.unreferenced_deleted == 0
