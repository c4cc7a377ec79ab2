"""The materialization scheduler as the task core runs it (docs/architecture.md §7,
§13.5): due times spread over an interval with deterministic jitter, at most one
materialization per bucket, ``max_in_flight``, failures tolerated and retried, and
snapshots of a lineage that moved on never adopted.

Batches run through :class:`~gic_runtime.executor.state_task.StateTask` (the task core
Spark's executors run) with a hand-moved clock and a manual executor for the background
jobs, so every test decides exactly when time passes and when a job runs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.stores import TestingSnapshotFaults

from gic_runtime.coordination import TaskSettings
from gic_runtime.coordination.barrier import TaskAck
from gic_runtime.executor import StateTask
from gic_runtime.executor.core import TaskContext
from gic_runtime.handles import BucketState, ChangelogHandle
from gic_runtime.materialization import MaterializationSettings, Newest, due
from gic_runtime.materialization.snapshot_record import ADOPTION_MAX_AGE_S, read_record
from gic_runtime.state.background_restore import BackgroundRestoreSettings
from gic_runtime.state.keys import bucket_for
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.testing import TestingClock, TestingManualExecutor

B = 8
INTERVAL = 100.0
KEYS: dict[int, str] = {}
for _i in range(1000):
    KEYS.setdefault(bucket_for(f"k{_i}", B), f"k{_i}")


class Harness:
    """One task on local storage with a hand-moved clock and hand-run background jobs."""

    def __init__(self, tmp_path: Path, name: str = "a", **settings: Any) -> None:
        self.objects = LocalObjectStore(tmp_path / "objects")
        self.resolver = TestingSnapshotFaults(self.objects)
        self.clock = TestingClock()
        self.executor = TestingManualExecutor()
        self.local = tmp_path / "local"
        self.task = self.new_task(**settings)
        self.value = 0

    def new_task(self, **settings: Any) -> StateTask:
        """A task of the same attempt on the same executor-local directory with its own
        pool (like another worker process of the executor)."""
        return StateTask(
            root=self.objects.root_uri,
            job_id="job",
            epoch=1,
            num_buckets=B,
            store=InMemoryStore(),
            resolver=self.resolver,
            local_dir=self.local,
            clock=self.clock,
            materialization_executor=self.executor,
            settings=TaskSettings(
                materialization=MaterializationSettings(interval_s=INTERVAL, **settings),
                # restored buckets are complete before each batch, so which ones are due
                # never depends on how far a background restore got
                restore=BackgroundRestoreSettings(background=False),
            ),
        )

    def batch(
        self, buckets: range | list[int] = range(B), *, task: StateTask | None = None
    ) -> TaskAck:
        """A completed checkpoint changing one key of each of ``buckets``."""
        task = task or self.task
        self.value += 1
        value = self.value

        def apply(ctx: TaskContext) -> None:
            state = ctx.backend.value_state("v")
            for bucket in buckets:
                state.set(KEYS[bucket], value)

        ack = task.checkpoint(apply)
        task.notify_checkpoint_complete(ack.states)
        return ack

    def records(self) -> dict[int, Any]:
        directory = self.local / "job" / "materialized"
        return {b: r for b in range(B) if (r := read_record(directory, b)) is not None}


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path, max_in_flight=B)
    yield h
    h.task.close()


# --- the rules ---------------------------------------------------------------------------


def _state(bucket: int, seq: int) -> BucketState:
    handles = tuple(
        ChangelogHandle(f"file:///s/{i}", 0, 10, bucket, i, i + 1, 0) for i in range(seq)
    )
    return BucketState(bucket, seq, None, handles, handles[-1].uri if handles else "")


def _first_due(settings: MaterializationSettings, job: str, bucket: int) -> float:
    """Seconds after the anchor at which ``bucket`` first comes due (to 1/1000 interval)."""
    for step in range(1001):
        at = INTERVAL * step / 1000
        if due(settings, job, _state(bucket, 3), None, now=1000.0 + at, anchor=1000.0):
            return at
    raise AssertionError(f"bucket {bucket} never came due within one interval")


def test_first_due_times_are_spread_over_one_interval() -> None:
    settings = MaterializationSettings(interval_s=INTERVAL)
    firsts = [_first_due(settings, "job", b) for b in range(64)]
    assert all(0 < t <= INTERVAL for t in firsts)
    assert sum(t <= INTERVAL / 2 for t in firsts) in range(16, 49)  # never all at once
    assert len(set(firsts)) > 48
    assert firsts == [_first_due(settings, "job", b) for b in range(64)]  # every process agrees
    assert firsts != [_first_due(settings, "other", b) for b in range(64)]


def test_next_due_is_one_interval_with_jitter_after_the_newest_snapshot() -> None:
    settings = MaterializationSettings(interval_s=INTERVAL, jitter=0.2)
    recorded = 5000.0
    nexts = []
    for bucket in range(32):
        state = _state(bucket, 10)
        newest = Newest(seq=4, size=100, time=recorded, fits=True)
        offsets = [
            step / 10
            for step in range(700, 1300)
            if due(settings, "job", state, newest, now=recorded + step / 10, anchor=0.0)
        ]
        nexts.append(offsets[0])
        assert offsets == [o / 10 for o in range(int(offsets[0] * 10), 1300)]  # stays due
    assert all(0.8 * INTERVAL <= n <= 1.2 * INTERVAL + 0.1 for n in nexts)
    assert len(set(nexts)) > 16  # buckets drift apart
    unjittered = MaterializationSettings(interval_s=INTERVAL, jitter=0.0)
    state, newest = _state(0, 10), Newest(seq=4, size=100, time=recorded, fits=True)
    assert not due(unjittered, "job", state, newest, now=recorded + 99.9, anchor=0.0)
    assert due(unjittered, "job", state, newest, now=recorded + 100.0, anchor=0.0)


def test_a_bucket_whose_newest_snapshot_is_current_is_never_due() -> None:
    settings = MaterializationSettings(interval_s=INTERVAL, max_sections=1)
    state = _state(0, 10)
    current = Newest(seq=10, size=100, time=0.0, fits=True)
    assert due(settings, "job", state, current, now=1e9, anchor=0.0) is None
    elsewhere = Newest(seq=10, size=100, time=0.0, fits=False)  # another history
    reason = due(settings, "job", state, elsewhere, now=1.0, anchor=0.0)
    assert reason is not None and reason.by_growth  # counted from the state's own base


# --- through the task core ---------------------------------------------------------------


def test_buckets_start_only_once_due_and_unchanged_ones_never(harness: Harness) -> None:
    assert harness.batch().stats.materializations_started == 0
    harness.clock.advance(INTERVAL)
    assert harness.batch().stats.materializations_started == B
    assert harness.executor.run_all() == B
    assert set(harness.records()) == set(range(B))
    idle = harness.batch([])  # adopts every snapshot
    assert idle.stats.materializations_adopted == B
    harness.clock.advance(5 * INTERVAL)
    assert harness.batch([]).stats.materializations_started == 0  # nothing changed since
    assert harness.batch([3]).stats.materializations_started == 1


def test_a_record_older_than_the_adoption_limit_is_not_adopted(harness: Harness) -> None:
    harness.batch()
    harness.clock.advance(INTERVAL)
    harness.batch()
    harness.executor.run_all()
    harness.clock.advance(ADOPTION_MAX_AGE_S + 1)  # by the clock that wrote the records
    assert harness.batch([]).stats.materializations_adopted == 0


def test_at_most_one_materialization_per_bucket_across_processes(harness: Harness) -> None:
    harness.batch()
    harness.clock.advance(INTERVAL)
    assert harness.batch().stats.materializations_started == B  # jobs wait in the executor
    harness.clock.advance(10 * INTERVAL)
    latest = harness.batch()
    assert latest.stats.materializations_started == 0  # markers held
    other = harness.new_task(max_in_flight=B)  # another worker process, same executor
    try:
        other.notify_checkpoint_complete(latest.states)
        taken_over = harness.batch(task=other)
        assert taken_over.stats.restored == B  # its own store was empty
        assert taken_over.stats.materializations_started == 0  # markers still held
        assert harness.executor.run_all() == B
        adopted = harness.batch([0], task=other)  # the first process's snapshots fit
        assert adopted.stats.materializations_adopted == B
    finally:
        other.close()


def test_max_in_flight_bounds_time_due_jobs(tmp_path: Path) -> None:
    h = Harness(tmp_path, max_in_flight=2)
    try:
        h.batch()
        h.clock.advance(INTERVAL)
        assert h.batch().stats.materializations_started == 2
        assert h.task.materialization_stats().in_flight == 2
        assert h.batch().stats.materializations_started == 0  # both slots taken
        assert h.executor.run_all() == 2
        ack = h.batch()
        assert ack.stats.materializations_adopted == 2
        assert ack.stats.materializations_started == 2  # the next two due buckets
        assert h.task.materialization_stats().completed == 2
    finally:
        h.task.close()


def test_failures_never_fail_a_task_and_are_retried_after_the_delay(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    h = Harness(tmp_path, max_in_flight=1, retry_delay_s=30.0, max_consecutive_failures=1)
    try:
        h.batch([0])
        h.clock.advance(INTERVAL)
        h.resolver.failures = 100
        for attempt in (1, 2):
            assert h.batch([0]).stats.materializations_started == 1
            with caplog.at_level(logging.WARNING):
                h.executor.run_all()
            assert h.task.materialization_stats().failed == attempt
            assert h.batch([0]).stats.materializations_started == 0  # waits for the delay
            h.clock.advance(30.0)
        failures = [r for r in caplog.records if "failed (" in r.getMessage()]
        assert [r.levelno for r in failures] == [logging.WARNING, logging.ERROR]
        h.resolver.failures = 0
        assert h.batch([0]).stats.materializations_started == 1
        h.executor.run_all()
        assert h.batch([0]).stats.materializations_adopted == 1
        assert h.task.materialization_stats().completed == 1
    finally:
        h.task.close()


def test_a_name_collision_is_a_failure_not_an_overwrite(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = harness.objects
    objects.put("jobs/job/snapshots/fixed.snap", b"someone else's")
    monkeypatch.setattr(
        "gic_runtime.materialization.snapshot_upload.new_snapshot_uri",
        lambda root, job, bucket, *, epoch: objects.uri_for("jobs/job/snapshots/fixed.snap"),
    )
    harness.batch([0])
    harness.clock.advance(INTERVAL)
    assert harness.batch([0]).stats.materializations_started == 1
    harness.executor.run_all()
    assert harness.task.materialization_stats().failed == 1
    assert objects.get("jobs/job/snapshots/fixed.snap") == b"someone else's"
    assert harness.records() == {}


def test_a_snapshot_of_a_lineage_that_moved_on_is_never_adopted(harness: Harness) -> None:
    completed = harness.batch()
    harness.clock.advance(INTERVAL)

    def overwrite(ctx: TaskContext) -> None:
        state = ctx.backend.value_state("v")
        for key in KEYS.values():
            state.set(key, "abandoned")

    abandoned = harness.task.checkpoint(overwrite)  # never reported complete
    assert abandoned.stats.materializations_started == B
    harness.executor.run_all()
    tokens = {b: r.token for b, r in harness.records().items()}
    assert tokens == {b: s.token for b, s in abandoned.states.items()}

    ack = harness.batch([0])  # from the completed checkpoint, same attempt
    assert ack.stats.materializations_adopted == 0
    assert all(s.snapshot is None for s in ack.states.values())
    assert all(ack.states[b].seq == completed.states[b].seq + (b == 0) for b in range(B))
    state = harness.task.backend.value_state("v")
    assert all(state.get(KEYS[b]) != "abandoned" for b in range(B))


def test_jobs_cancelled_at_close_release_their_buckets(harness: Harness) -> None:
    harness.batch()
    harness.clock.advance(INTERVAL)
    latest = harness.batch()
    assert latest.stats.materializations_started == B
    harness.task.close(wait=False)  # the queued jobs are cancelled
    stats = harness.task.materialization_stats()
    assert stats.cancelled == B and stats.in_flight == 0 and stats.failed == 0
    assert list((harness.local / "job" / "materialized").glob("*.inflight")) == []
    harness.executor = TestingManualExecutor()
    harness.task = harness.new_task(max_in_flight=B)  # a new process takes over
    harness.task.notify_checkpoint_complete(latest.states)
    harness.clock.advance(INTERVAL)  # its first due times count from when it starts
    harness.batch([])
    harness.clock.advance(INTERVAL)
    assert harness.batch([]).stats.materializations_started == B


def test_a_snapshot_from_another_epoch_is_never_adopted(harness: Harness) -> None:
    harness.batch()
    harness.clock.advance(INTERVAL)
    started = harness.batch()
    assert harness.executor.run_all() == B
    successor = StateTask(  # the next attempt, on the same executor
        root=harness.objects.root_uri,
        job_id="job",
        epoch=2,
        num_buckets=B,
        store=InMemoryStore(),
        resolver=harness.resolver,
        local_dir=harness.local,
        clock=harness.clock,
    )
    try:
        successor.notify_checkpoint_complete(started.states)  # its start manifest
        ack = successor.checkpoint()
        assert ack.stats.restored == B
        assert ack.stats.materializations_adopted == 0
        assert all(s.snapshot is None for s in ack.states.values())
    finally:
        successor.close()


def test_a_record_holds_the_view_taken_at_its_checkpoint(harness: Harness) -> None:
    harness.batch()
    harness.clock.advance(INTERVAL)
    at = harness.batch()
    harness.batch()  # changes after the views were taken
    harness.executor.run_all()
    records = harness.records()
    assert set(records) == set(range(B))
    for bucket, record in records.items():
        assert record.seq == record.snapshot.seq == at.states[bucket].seq
        assert record.token == at.states[bucket].token
        key = record.snapshot.uri.removeprefix(harness.objects.root_uri + "/")
        assert harness.objects.size(key) == record.snapshot.size
