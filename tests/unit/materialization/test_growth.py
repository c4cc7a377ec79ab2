"""Materialization triggered by changelog growth (docs/architecture.md §7, §13.5): the
growth pressure, growth jobs served most-over-first beside the time slots, the section
limit holding over a long run of batches, and task ranges taking turns, on the scheduler
the task core runs (with a hand-moved clock and hand-run background jobs)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from tests.support.materialization import local_scope
from tests.support.stores import TestingSnapshotFaults

from gic_runtime.coordination import TaskSettings
from gic_runtime.coordination.barrier import TaskAck
from gic_runtime.errors import ConfigurationError
from gic_runtime.executor import StateTask
from gic_runtime.executor.core import TaskContext
from gic_runtime.handles import BucketState, ChangelogHandle
from gic_runtime.materialization import MaterializationSettings
from gic_runtime.materialization.background import (
    MaterializationPool,
    MaterializationScope,
    adopt_materializations,
    start_due_materializations,
)
from gic_runtime.materialization.growth import byte_limit, growth, growth_pressure
from gic_runtime.materialization.scheduler import Turn
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.keys import bucket_for
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.testing import TestingClock, TestingManualExecutor
from gic_runtime.testing.changelog_fakes import TestingChangelogWriter

MiB = 1024 * 1024


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


def test_the_projection_extends_the_average_growth_of_a_handle() -> None:
    s = MaterializationSettings(max_sections=8, changelog_floor_bytes=1000)
    since = growth(_handles(2, length=150), 0, None, s)  # 2 of 8 sections, 300 of 1000 B
    assert (since.handles, since.pressure) == (2, 0.3)
    assert since.projected(0) == 0.3
    assert since.projected(3) == pytest.approx(0.75)  # 150 more bytes a handle
    assert growth([], 0, None, s).projected(5) == 0.0  # nothing to extend


def test_ranges_take_turns_by_checkpoint() -> None:
    assert [Turn(c, 1, 4).ours for c in range(9)] == [c % 4 == 1 for c in range(9)]
    assert Turn(7, 0, 1).ours  # a single range has every turn
    for index, count, checkpoint in ((4, 4, 0), (-1, 4, 0), (0, 0, 0), (0, 4, -1)):
        with pytest.raises(ConfigurationError, match="turn"):
            Turn(checkpoint, index, count)


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


# --- through the task core ----------------------------------------------------------------


def _keys(buckets: range, num_buckets: int) -> dict[int, str]:
    keys: dict[int, str] = {}
    i = 0
    while len(keys) < len(buckets):
        bucket = bucket_for(f"k{i}", num_buckets)
        if bucket in buckets:
            keys.setdefault(bucket, f"k{i}")
        i += 1
    return keys


class Harness:
    """One task of ``buckets`` buckets on local storage, clock and jobs moved by hand."""

    def __init__(self, tmp_path: Path, buckets: int = 4, **settings: Any) -> None:
        self.objects = LocalObjectStore(tmp_path / "objects")
        self.resolver = TestingSnapshotFaults(self.objects)
        self.clock = TestingClock()
        self.executor = TestingManualExecutor()
        self.keys = _keys(range(buckets), buckets)
        self.task = StateTask(
            root=self.objects.root_uri,
            job_id="job",
            epoch=1,
            num_buckets=buckets,
            store=InMemoryStore(),
            resolver=self.resolver,
            local_dir=tmp_path / "local",
            clock=self.clock,
            materialization_executor=self.executor,
            settings=TaskSettings(materialization=MaterializationSettings(**settings)),
        )

    def batch(self, values: Mapping[int, Any] | None = None) -> TaskAck:
        """A completed checkpoint setting each bucket's key (all buckets by default)."""
        if values is None:
            values = dict.fromkeys(self.keys, 0)

        def apply(ctx: TaskContext) -> None:
            state = ctx.backend.value_state("v")
            for bucket, value in values.items():
                state.set(self.keys[bucket], value)

        ack = self.task.checkpoint(apply)
        self.task.notify_checkpoint_complete(ack.states)
        return ack


def sections(ack: TaskAck) -> dict[int, int]:
    """Changelog handles since its base of every bucket of ``ack``."""
    return {b: len(s.changelog) for b, s in ack.states.items()}


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Any]:
    made: list[Harness] = []

    def build(**kw: Any) -> Harness:
        made.append(Harness(tmp_path, **kw))
        return made[-1]

    yield build
    for h in made:
        h.task.close()


def test_a_bucket_at_the_section_limit_starts_before_its_due_time(make: Any) -> None:
    h = make(interval_s=1e9, max_sections=3)
    assert sections(h.batch()) == dict.fromkeys(range(4), 1)
    assert h.batch().stats.materializations_started == 0  # 2 sections: not due
    third = h.batch()  # 3 sections now
    assert third.stats.materializations_started == 4
    assert h.executor.pending == 1  # one job for all of them
    h.executor.run_all()
    after = h.batch()
    assert after.stats.materializations_adopted == 4
    assert sections(after) == dict.fromkeys(range(4), 1)  # new bases
    assert all(s.snapshot is not None for s in after.states.values())


@pytest.mark.parametrize(("companion", "started"), [(0.5, 2), (1.0, 1)])
def test_buckets_halfway_to_a_limit_join_their_range_growth_job(
    make: Any, companion: float, started: int
) -> None:
    """A growth job also takes the range's buckets at ``companion_pressure`` or more, so
    the range's segments are freed together; 1.0 turns companions off."""
    h = make(interval_s=1e9, max_sections=4, companion_pressure=companion)
    h.batch()  # every bucket 1 section
    h.batch({0: 1, 1: 1})
    h.batch({0: 2, 1: 2})  # buckets 0 and 1: 3 sections (0.75); 2 and 3: 1 (0.25)
    ack = h.batch({0: 3})  # bucket 0 reaches 4 sections: due by growth
    assert ack.stats.materializations_started == started
    h.executor.run_all()
    after = h.batch({})
    snapshotted = {b for b, st in after.states.items() if st.snapshot is not None}
    assert snapshotted == ({0, 1} if started == 2 else {0})


def test_a_companion_pressure_outside_0_to_1_is_refused() -> None:
    for bad in (0.0, 1.5):
        with pytest.raises(ConfigurationError, match="companion_pressure"):
            MaterializationSettings(companion_pressure=bad)


def test_a_growth_job_serves_the_buckets_furthest_over_the_limit_first(
    make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gic_runtime import layout

    order: list[int] = []

    def recording(root: str, job: str, bucket: int, *, epoch: int) -> str:
        order.append(bucket)
        return layout.new_snapshot_uri(root, job, bucket, epoch=epoch)

    monkeypatch.setattr("gic_runtime.materialization.snapshot_upload.new_snapshot_uri", recording)
    h = make(interval_s=1e9, changelog_floor_bytes=1000)
    sizes = {0: 100, 1: 1500, 2: 2000, 3: 3000}  # bytes of incompressible values
    ack = h.batch({b: os.urandom(n) for b, n in sizes.items()})
    assert ack.stats.materializations_started == 3  # bucket 0 is under the limit
    assert h.executor.pending == 1
    h.executor.run_all()
    assert order == [3, 2, 1]


def test_growth_runs_beside_the_time_slot_and_time_waits_for_a_free_slot(make: Any) -> None:
    h = make(interval_s=100.0, max_sections=3, max_in_flight=1)
    h.batch()
    h.clock.advance(100.0)  # every bucket time-due; one slot
    assert h.batch().stats.materializations_started == 1
    assert h.task.materialization_stats().in_flight == 1
    third = h.batch()  # 3 sections: the others are growth-due
    assert third.stats.materializations_started == 3  # the growth job did not wait
    assert h.task.materialization_stats().in_flight == 2
    assert h.executor.run_all() == 2
    assert h.task.materialization_stats().completed == 4


def test_a_failed_growth_bucket_waits_for_the_retry_delay(make: Any) -> None:
    h = make(buckets=2, interval_s=1e9, max_sections=1, retry_delay_s=5.0)
    h.resolver.failures = 1  # bucket 0's upload fails, bucket 1's succeeds
    assert h.batch().stats.materializations_started == 2
    h.executor.run_all()
    stats = h.task.materialization_stats()
    assert stats.failed == 1 and stats.completed == 1
    assert h.batch({0: 1}).stats.materializations_started == 0  # over the limit, waiting
    h.clock.advance(5.0)
    assert h.batch({0: 2}).stats.materializations_started == 1


class _Range:
    """One task range driven as the task core drives it (adopt, batch, checkpoint,
    start), on a backend whose changelog stays in memory."""

    def __init__(self, scope: MaterializationScope, buckets: range, num_buckets: int) -> None:
        self.scope = scope
        self.backend = KeyedStateBackend(
            buckets, num_buckets, InMemoryStore(), TestingChangelogWriter()
        )
        self.expected: Mapping[int, BucketState] = {}
        self.keys = _keys(buckets, num_buckets)

        self.started = 0
        """Buckets the latest :meth:`batch` started."""

    def batch(self, value: int, turn: Turn | None = None) -> int:
        """Returns the most handles since its base of any bucket."""
        adopt_materializations(self.scope, self.backend, self.expected)
        state = self.backend.value_state("v")
        for key in self.keys.values():
            state.set(key, value)
        states = self.backend.checkpoint().result(timeout=30)
        self.backend.mark_persisted(states)
        self.expected = states
        self.started = start_due_materializations(self.scope, self.backend, states, turn)
        return max(len(s.changelog) for s in states.values())


@pytest.mark.parametrize("complete_every", [1, 2, 4])
def test_the_section_limit_holds_over_200_batches(tmp_path: Path, complete_every: int) -> None:
    """W1-like: 128 buckets, 4 task ranges served by one process (one pool, one time
    slot), every bucket gains a section per batch; background jobs finish every
    ``complete_every`` batches. Sections since the base never exceed the limit by more
    than the batches a job takes (twice: waiting for the range's running growth job,
    then its own) plus one."""
    executor, clock = TestingManualExecutor(), TestingClock()
    pool = MaterializationPool(executor)
    scope = local_scope(tmp_path, clock=clock, pool=pool, max_sections=32)
    ranges = [_Range(scope, range(32 * t, 32 * t + 32), 128) for t in range(4)]
    peak = 0
    for batch in range(200):
        for task in ranges:
            peak = max(peak, task.batch(batch))
        if batch % complete_every == complete_every - 1:
            executor.run_all()
        clock.advance(1.0)
    assert peak <= 32 + 2 * complete_every + 1
    stats = scope.pool.stats()
    assert stats.completed >= 128 * 5 and stats.failed == 0


@pytest.mark.parametrize("turns", [True, False])
def test_ranges_growing_in_step_snapshot_in_different_checkpoints(
    tmp_path: Path, turns: bool
) -> None:
    """W1-like: 4 ranges of 32 buckets gain a section per bucket per checkpoint, so they
    reach the limit together. Taking turns, no two ranges start a growth job in the same
    checkpoint once the rotation has settled, each still starts one at least every 32
    checkpoints, and no bucket goes past the limit; without turns all four start
    together, every time."""
    executor = TestingManualExecutor()
    pool = MaterializationPool(executor)
    scope = local_scope(tmp_path, pool=pool, interval_s=1e9, max_sections=32, growth_turns=turns)
    ranges = [_Range(scope, range(32 * t, 32 * t + 32), 128) for t in range(4)]
    starting: list[list[int]] = []
    peak = 0
    for checkpoint in range(240):
        for index, task in enumerate(ranges):
            peak = max(peak, task.batch(checkpoint, Turn(checkpoint, index, 4)))
        starting.append([i for i, task in enumerate(ranges) if task.started])
        executor.run_all()
    settled = starting[64:]
    together = max(len(s) for s in settled)
    if turns:
        assert together == 1
        for index in range(4):
            at = [c for c, s in enumerate(settled) if index in s]
            assert len(at) >= len(settled) // 32
            assert max(b - a for a, b in itertools.pairwise(at)) <= 32
        assert peak <= 32
    else:
        assert together == 4
        assert all(len(s) in (0, 4) for s in settled)
