"""Growth-triggered background materialization across processes (docs/architecture.md
§13.5): ``_due`` with growth and time, growth lanes per task range, and the section
limit holding over 200 batches of four tasks sharing one process."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.support.materialization import local_scope

from gic_runtime.handles import BucketState, ChangelogHandle, SnapshotHandle
from gic_runtime.materialization import background as lm
from gic_runtime.materialization.background import (
    MaterializationScope,
    adopt_materializations,
    local_stats,
    start_due_materializations,
    wait_local_materializations,
)
from gic_runtime.materialization.snapshot_record import MaterializationRecord, write_record
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.keys import bucket_for
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.uri import StoreResolver
from gic_runtime.testing.changelog_fakes import TestingChangelogWriter

WAIT = 30.0  # seconds; a bound for a broken build only


def _state(
    sections: int, *, length: int = 100, snapshot_size: int | None = None, base: int = 0
) -> BucketState:
    handles = tuple(
        ChangelogHandle(f"file:///seg/{i}", 0, length, 3, i, i + 1, 0)
        for i in range(base, base + sections)
    )
    snapshot = None
    if snapshot_size is not None:
        snapshot = SnapshotHandle("file:///snap/3", 3, base, snapshot_size, 0)
    token = handles[-1].uri if handles else "t"
    return BucketState(3, base + sections, snapshot, handles, token)


# --- _due -------------------------------------------------------------------------------------


def test_due_by_sections_whatever_the_interval(tmp_path: Path) -> None:
    scope = local_scope(tmp_path, interval_s=1e9, max_sections=8)
    now = time.time()
    assert lm._due(scope, 3, _state(7), now, anchor=now) is None
    due = lm._due(scope, 3, _state(8), now, anchor=now)
    assert due is not None and due.by_growth and due.pressure == 1.0
    far = lm._due(scope, 3, _state(20), now, anchor=now)
    assert far is not None and far.pressure == 2.5


def test_due_by_bytes_against_the_snapshot_size_with_a_floor(tmp_path: Path) -> None:
    scope = local_scope(tmp_path, interval_s=1e9, changelog_ratio=1.0, changelog_floor_bytes=1000)
    now = time.time()
    small = _state(3, length=300, base=5)  # 900 bytes, no snapshot: under the floor
    assert lm._due(scope, 3, small, now, now) is None
    assert lm._due(scope, 3, _state(4, length=300, base=5), now, now) is not None  # 1200
    big = _state(4, length=300, snapshot_size=5000, base=5)  # 1200 of 5000
    assert lm._due(scope, 3, big, now, now) is None
    over = _state(4, length=1300, snapshot_size=5000, base=5)  # 5200 of 5000
    due = lm._due(scope, 3, over, now, now)
    assert due is not None and due.by_growth


def test_growth_counts_from_a_newer_record_that_fits(tmp_path: Path) -> None:
    scope = local_scope(tmp_path, interval_s=1e9, max_sections=4)
    now = time.time()
    state = _state(10)
    snap = SnapshotHandle(f"{scope.root}/jobs/job/snapshots/3/x.snap", 3, 8, 100, 0)
    fits = MaterializationRecord("job", scope.root, 1, 3, 8, state.changelog[7].uri, snap, now)
    write_record(scope.directory, fits)
    assert lm._due(scope, 3, state, now, now) is None  # 2 sections after the record's seq 8
    other_epoch = MaterializationRecord("job", scope.root, 0, 3, 8, fits.token, snap, now)
    write_record(scope.directory, other_epoch)
    due = lm._due(scope, 3, state, now, now)  # another attempt's record does not count
    assert due is not None and due.by_growth


def test_due_by_time_is_unchanged_below_the_limits(tmp_path: Path) -> None:
    scope = local_scope(tmp_path, interval_s=100.0, jitter=0.0, max_sections=50)
    now = time.time()
    assert lm._due(scope, 3, _state(5), now, anchor=now - 100.0) is not None
    snap = SnapshotHandle(f"{scope.root}/jobs/job/snapshots/3/x.snap", 3, 2, 100, 0)
    state = _state(5)
    write_record(
        scope.directory,
        MaterializationRecord("job", scope.root, 1, 3, 2, state.changelog[1].uri, snap, now - 50),
    )
    assert lm._due(scope, 3, state, now, anchor=now - 1000) is None  # 50 s after the record
    due = lm._due(scope, 3, state, now + 50.0, anchor=now - 1000)
    assert due is not None and not due.by_growth


def test_time_waits_for_a_quarter_of_the_snapshot_in_changes(tmp_path: Path) -> None:
    """A large snapshot with little change since: the interval alone does not snapshot
    it again until its changelog reached time_min_change x the snapshot's size."""
    scope = local_scope(tmp_path, interval_s=100.0, jitter=0.0, max_sections=50)
    now = time.time()
    late = now + 10_000.0  # far past every due time
    small = _state(4, length=1000, snapshot_size=20_000, base=5)  # 4,000 of 20,000
    assert lm._due(scope, 3, small, late, anchor=now) is None
    enough = _state(5, length=1000, snapshot_size=20_000, base=5)  # 5,000: a quarter
    due = lm._due(scope, 3, enough, late, anchor=now)
    assert due is not None and not due.by_growth and due.pressure == 0.25
    no_snapshot = _state(2, length=10)  # nothing to download instead: any change
    assert lm._due(scope, 3, no_snapshot, late, anchor=now) is not None
    any_change = local_scope(
        tmp_path / "any", interval_s=100.0, jitter=0.0, max_sections=50, time_min_change=0.0
    )
    assert lm._due(any_change, 3, small, late, anchor=now) is not None


# --- tasks in one process ---------------------------------------------------------------------


class _Task:
    """One task of a range as the executor runs it (adopt, batch, checkpoint, start)."""

    def __init__(self, scope: MaterializationScope, buckets: range, num_buckets: int) -> None:
        self.scope = scope
        self.backend = KeyedStateBackend(
            buckets, num_buckets, InMemoryStore(), TestingChangelogWriter()
        )
        self.expected: Mapping[int, BucketState] = {}
        self.keys: dict[int, str] = {}
        i = 0
        while len(self.keys) < len(buckets):
            bucket = bucket_for(f"k{i}", num_buckets)
            if bucket in buckets:
                self.keys.setdefault(bucket, f"k{i}")
            i += 1

    def batch(self, value: int) -> tuple[int, int]:
        """Returns (most handles since the base of any bucket, buckets started)."""
        adopt_materializations(self.scope, self.backend, self.expected)
        state = self.backend.value_state("v")
        for key in self.keys.values():
            state.set(key, value)
        states = self.backend.checkpoint().result(timeout=WAIT)
        self.backend.mark_persisted(states)
        self.expected = states
        started = start_due_materializations(self.scope, self.backend, states)
        return max(len(s.changelog) for s in states.values()), started


def test_the_section_limit_holds_over_200_batches(tmp_path: Path) -> None:
    """W1-like: 128 buckets, 4 tasks in one process with one time slot, every bucket
    gains a section per batch; background jobs finish between batches."""
    scope = local_scope(tmp_path, max_sections=32)
    tasks = [_Task(scope, range(32 * t, 32 * t + 32), 128) for t in range(4)]
    before = local_stats()
    peak = 0
    for batch in range(200):
        for task in tasks:
            most, _ = task.batch(batch)
            peak = max(peak, most)
        assert wait_local_materializations(WAIT)
    after = local_stats()
    assert peak <= 32 + 1  # measured: 32 (due at 32, adopted by the next batch)
    assert after.completed - before.completed >= 128 * 5  # every bucket about every 32
    assert after.failed == before.failed


class TestingGatedResolver(StoreResolver):
    """Holds every resolve until ``gate`` is set."""

    __test__ = False

    def __init__(self, store: LocalObjectStore) -> None:
        super().__init__()
        self.register(store)
        self.gate = threading.Event()

    def resolve(self, uri: str) -> tuple[Any, str]:
        assert self.gate.wait(WAIT), "test never opened the gate"
        return super().resolve(uri)


def test_each_range_has_its_own_growth_lane(tmp_path: Path) -> None:
    resolver = TestingGatedResolver(LocalObjectStore(tmp_path / "objects"))
    scope = local_scope(tmp_path, resolver, interval_s=1e9, max_sections=2, max_in_flight=1)
    a, b = _Task(scope, range(0, 4), 8), _Task(scope, range(4, 8), 8)
    try:
        assert a.batch(0)[1] == 0 and b.batch(0)[1] == 0  # one section: under the limit
        assert a.batch(1)[1] == 4  # range a's growth job, blocked in its first upload
        assert b.batch(1)[1] == 4  # range b's lane is free: it starts although a runs
        assert local_stats().in_flight == 2
        assert a.batch(2)[1] == 0  # a's lane is busy and the one time slot is taken
    finally:
        resolver.gate.set()
    assert wait_local_materializations(WAIT)
    most, _ = a.batch(3)  # batch 1's snapshots adopted: batches 2 and 3 remain
    assert most == 2
    assert wait_local_materializations(WAIT)


class TestingMeetingStore(LocalObjectStore):
    """A local store whose first two ``size`` calls must meet (a ``Barrier`` of two):
    adoption's existence checks pass only when two of them are in flight at once."""

    __test__ = False

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.meeting = threading.Barrier(2, timeout=WAIT)
        self.calls = 0
        self._lock = threading.Lock()

    def size(self, key: str) -> int:
        with self._lock:
            self.calls += 1
            first_two = self.calls <= 2
        if first_two:
            self.meeting.wait()  # raises BrokenBarrierError when the checks run one by one
        return super().size(key)


def test_adoption_checks_existence_concurrently_and_skips_missing_snapshots(
    tmp_path: Path,
) -> None:
    store = TestingMeetingStore(tmp_path / "objects")
    resolver = StoreResolver()
    resolver.register(store)
    scope = local_scope(tmp_path, resolver, interval_s=1e9, max_sections=1)
    task = _Task(scope, range(0, 8), 8)
    assert task.batch(0)[1] == 8  # one section each: every bucket due by growth
    assert wait_local_materializations(WAIT)
    records = {b: lm._read(scope, b) for b in range(8)}
    assert all(r is not None for r in records.values())
    gone = records[2]
    shrunk = records[5]
    assert gone is not None and shrunk is not None
    (tmp_path / "objects" / resolver.resolve(gone.snapshot.uri)[1]).unlink()
    (tmp_path / "objects" / resolver.resolve(shrunk.snapshot.uri)[1]).write_bytes(b"short")
    adopted = adopt_materializations(scope, task.backend, task.expected)
    assert adopted == [0, 1, 3, 4, 6, 7]
    assert store.calls == 8 and not store.meeting.broken
    for bucket in adopted:
        record = records[bucket]
        assert record is not None
        assert task.backend.snapshot_of(bucket) == record.snapshot
