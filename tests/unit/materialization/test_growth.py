"""Materialization triggered by changelog growth (docs/architecture.md §7): the growth
pressure, growth jobs served most-over-first beside the time slots, and the section
limit holding over a long run of batches."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gic_runtime import layout
from gic_runtime.errors import ConfigurationError, TransientStorageError
from gic_runtime.handles import ChangelogHandle
from gic_runtime.materialization import MaterializationSettings, Materializer
from gic_runtime.materialization.growth import byte_limit, growth_pressure
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.keys import bucket_for
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.uri import StoreResolver
from gic_runtime.testing import TestingClock
from gic_runtime.testing_changelog import TestingChangelogWriter

MiB = 1024 * 1024


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


def _handles(n: int, *, start: int = 0, length: int = 100) -> list[ChangelogHandle]:
    return [ChangelogHandle(f"s{i}", 0, length, 0, start + i, start + i + 1, 0) for i in range(n)]


# --- the pressure ------------------------------------------------------------------------


def test_pressure_counts_sections_and_bytes_after_the_base() -> None:
    s = MaterializationSettings(max_sections=4, changelog_ratio=1.0, changelog_floor_bytes=1000)
    assert growth_pressure([], 0, None, s) == 0.0
    assert growth_pressure(_handles(2), 0, None, s) == 0.5
    assert growth_pressure(_handles(4), 0, None, s) == 1.0
    assert growth_pressure(_handles(6), 3, None, s) == 0.75  # 3 handles end after seq 3
    big = _handles(2, length=3000)
    assert growth_pressure(big, 0, None, s) == 6.0  # 6000 bytes over the 1000-byte floor
    assert growth_pressure(big, 0, 12_000, s) == 0.5  # snapshot 12000: limit 12000 bytes
    assert byte_limit(None, s) == 1000 and byte_limit(500, s) == 1000  # the floor
    ratio = MaterializationSettings(changelog_ratio=0.5, changelog_floor_bytes=1)
    assert byte_limit(10_000, ratio) == 5000


@pytest.mark.parametrize(
    "kw",
    [
        {"max_sections": 0},
        {"changelog_ratio": 0.0},
        {"changelog_ratio": float("inf")},
        {"changelog_ratio": float("nan")},
        {"changelog_floor_bytes": 0},
    ],
)
def test_invalid_growth_limits_are_refused(kw: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match="max_sections"):
        MaterializationSettings(**kw)


# --- the in-process scheduler --------------------------------------------------------------


@dataclass
class _Task:
    """One task as StateTask drives it: write, poll, checkpoint, mark persisted."""

    backend: KeyedStateBackend
    materializer: Materializer
    executor: TestingManualExecutor
    keys: dict[int, str]

    def batch(
        self, buckets: list[int] | None = None, value: int = 0, *, poll: bool = True
    ) -> dict[int, int]:
        """One batch changing ``buckets`` (all by default); returns each bucket's handle
        count since its base in the batch's checkpoint."""
        state = self.backend.value_state("v")
        for bucket in self.backend.bucket_range if buckets is None else buckets:
            state.set(self.keys[bucket], value)
        if poll:
            self.materializer.poll()
        states = self.backend.checkpoint().result(timeout=10)
        self.backend.mark_persisted(states)
        return {b: len(s.changelog) for b, s in states.items()}


def _task(
    objects: LocalObjectStore,
    clock: TestingClock,
    buckets: range,
    num_buckets: int,
    resolver: StoreResolver | None = None,
    **kw: Any,
) -> _Task:
    backend = KeyedStateBackend(buckets, num_buckets, InMemoryStore(), TestingChangelogWriter())
    if resolver is None:
        resolver = StoreResolver()
        resolver.register(objects)
    executor = TestingManualExecutor()
    settings = MaterializationSettings(seed=7, **kw)
    m = Materializer(
        backend,
        resolver,
        objects.root_uri,
        "job",
        clock=clock,
        settings=settings,
        executor=executor,
    )
    keys: dict[int, str] = {}
    i = 0
    while len(keys) < len(buckets):
        key = f"k{i}"
        bucket = bucket_for(key, num_buckets)
        if bucket in buckets:
            keys.setdefault(bucket, key)
        i += 1
    return _Task(backend, m, executor, keys)


@pytest.fixture
def objects(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "objects")


def test_a_bucket_at_the_section_limit_starts_before_its_due_time(
    objects: LocalObjectStore,
) -> None:
    clock = TestingClock()
    task = _task(objects, clock, range(4), 4, interval_s=1e9, max_sections=3)
    assert task.batch() == dict.fromkeys(range(4), 1)
    task.batch()
    assert task.materializer.in_flight() == frozenset()  # 2 sections: not due
    task.batch()  # 3 sections now
    task.materializer.poll()
    assert task.materializer.in_flight() == frozenset(range(4))
    assert len(task.executor.queued) == 1  # one job for all of them
    assert task.materializer.stats.started_by_growth == 4
    task.executor.run_all()
    assert task.batch() == dict.fromkeys(range(4), 1)  # snapshots applied: new bases
    assert all(task.backend.snapshot_of(b) is not None for b in range(4))


def test_a_growth_job_serves_the_buckets_furthest_over_the_limit_first(
    objects: LocalObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    order: list[int] = []

    def recording(root: str, job: str, bucket: int) -> str:
        order.append(bucket)
        return layout.new_snapshot_uri(root, job, bucket)

    monkeypatch.setattr("gic_runtime.materialization.scheduler.new_snapshot_uri", recording)
    clock = TestingClock()
    task = _task(objects, clock, range(4), 4, interval_s=1e9, max_sections=2)
    for buckets in ([0, 1, 2, 3], [1, 2, 3], [3], [2, 3]):
        task.batch(buckets, poll=False)
    assert task.batch([], poll=False) == {0: 1, 1: 2, 2: 3, 3: 4}
    task.materializer.poll()
    assert order == [3, 2, 1]  # bucket 0 is under the limit
    assert len(task.executor.queued) == 1


def test_growth_runs_beside_the_time_slots_and_time_waits_for_a_free_slot(
    objects: LocalObjectStore,
) -> None:
    clock = TestingClock()
    task = _task(objects, clock, range(4), 4, interval_s=100.0, max_sections=2, max_in_flight=1)
    task.batch()
    clock.advance(100.0)  # every bucket time-due; one slot
    task.materializer.poll()
    assert len(task.executor.queued) == 1 and task.materializer.jobs_in_flight() == 1
    task.batch()  # every bucket at 2 sections: the others are growth-due
    task.materializer.poll()
    assert task.materializer.jobs_in_flight() == 2  # the growth job did not wait
    assert task.materializer.in_flight() == frozenset(range(4))
    task.executor.run_all()
    task.materializer.poll()
    assert task.materializer.stats.materialized == 4
    assert task.materializer.stats.started_by_growth == 3  # not the time-due one


def test_a_failed_growth_bucket_waits_for_the_retry_delay(objects: LocalObjectStore) -> None:
    clock = TestingClock()
    resolver = TestingFlakyResolver(objects)
    task = _task(
        objects, clock, range(2), 2, resolver, interval_s=1e9, max_sections=1, retry_delay_s=5.0
    )
    task.batch()
    resolver.failures = 1  # the first bucket's upload fails, the second one's succeeds
    task.materializer.poll()
    task.executor.run_all()
    task.materializer.poll()
    assert task.materializer.stats.failures == 1 and task.materializer.stats.materialized == 1
    task.materializer.poll()
    assert task.executor.queued == []  # still over the limit, but waiting
    clock.advance(5.0)
    task.materializer.poll()
    assert len(task.executor.queued) == 1


@pytest.mark.parametrize("complete_every", [1, 2, 4])
def test_the_section_limit_holds_over_200_batches(
    objects: LocalObjectStore, complete_every: int
) -> None:
    """W1-like: 128 buckets, 4 tasks, every bucket gains a section per batch, one
    materialization slot per task; background jobs finish every ``complete_every``
    batches. Sections since the base never exceed the limit by more than the batches a
    job takes (twice: waiting for the running growth job, then its own) plus one."""
    clock = TestingClock()
    limit = 32
    tasks = [
        _task(objects, clock, range(32 * t, 32 * t + 32), 128, max_sections=limit) for t in range(4)
    ]
    peak = 0
    for batch in range(200):
        for task in tasks:
            peak = max(peak, *task.batch(value=batch).values())
        if batch % complete_every == complete_every - 1:
            for task in tasks:
                task.executor.run_all()
        clock.advance(1.0)
    assert peak <= limit + 2 * complete_every + 1
    assert sum(t.materializer.stats.started_by_growth for t in tasks) >= 128 * 4
