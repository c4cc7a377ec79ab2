"""StateTask: the in-process face of the task core. A batch is all or nothing, builds
only on checkpoints reported complete, and materializes through the executor-local
records (the same path Spark's executors run)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gic_runtime.coordination import TaskSettings
from gic_runtime.errors import StateError, UploadError
from gic_runtime.executor import StateTask
from gic_runtime.executor.core import TaskContext
from gic_runtime.materialization import MaterializationSettings
from gic_runtime.materialization.snapshot_record import read_record
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.storage import LocalObjectStore, StoreResolver
from gic_runtime.testing import TestingClock, TestingManualExecutor
from gic_runtime.testing.faulty_store import FaultRule, TestingFaultyStore

BUCKETS = 4
INTERVAL = 100.0


class InjectedFailureError(RuntimeError):
    """The batch callback failed on purpose."""


def _task(store: Any, **kw: Any) -> StateTask:
    resolver = StoreResolver()
    resolver.register(store)
    return StateTask(
        root=store.root_uri,
        job_id="job",
        epoch=1,
        num_buckets=BUCKETS,
        store=InMemoryStore(),
        resolver=resolver,
        **kw,
    )


def put(values: dict[int, int], *, fail: bool = False) -> Any:
    """A batch setting ``values`` in value state ``v``; ``fail`` raises after them."""

    def apply(ctx: TaskContext) -> None:
        state = ctx.backend.value_state("v")
        for key, value in values.items():
            state.set(key, value)
        if fail:
            raise InjectedFailureError("injected")

    return apply


def read(task: StateTask, keys: range = range(20)) -> dict[int, int]:
    state = task.backend.value_state("v")
    return {k: v for k in keys if (v := state.get(k)) is not None}


@pytest.fixture
def objects(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "objects")


@pytest.fixture
def task(objects: LocalObjectStore) -> Iterator[StateTask]:
    t = _task(objects)
    yield t
    t.close()


def test_a_checkpoint_that_never_becomes_durable_fails_with_upload_error(tmp_path: Path) -> None:
    gate = threading.Event()
    store = TestingFaultyStore(LocalObjectStore(tmp_path))
    store.add_rule(FaultRule(methods=frozenset({"put"}), gate=gate))
    task = _task(store, settings=TaskSettings(checkpoint_timeout_s=0.3))
    try:
        with pytest.raises(UploadError, match=r"did not become durable within 0.3 s"):
            task.checkpoint(put({1: 1}))
    finally:
        gate.set()
        task.close()


def test_a_durable_checkpoint_references_only_existing_objects(tmp_path: Path) -> None:
    store = TestingFaultyStore(LocalObjectStore(tmp_path))
    task = _task(store)
    try:
        ack = task.checkpoint(put({n: n for n in range(100)}), self_contained=True)
        uris = set().union(*(s.uris() for s in ack.states.values()))
        assert any("/snapshots/" in u for u in uris)
        for uri in uris:
            assert store.exists(uri.removeprefix(store.root_uri + "/"))
        assert sum(s.seq for s in ack.states.values()) == 100
        assert ack.stats.changes == 100 and ack.stats.snapshot_bytes > 0
    finally:
        task.close()


def test_batches_chain_on_completed_checkpoints(task: StateTask) -> None:
    first = task.checkpoint(put({1: 1, 2: 2}))
    assert first.checkpoint_id == 1
    task.notify_checkpoint_complete(first.states)
    second = task.checkpoint(put({2: 20, 3: 3}))
    assert second.checkpoint_id == 2
    assert second.stats.local_hits + second.stats.empty == BUCKETS  # nothing read back
    assert read(task) == {1: 1, 2: 20, 3: 3}


def test_a_failed_batch_is_rolled_back_by_the_next_one(task: StateTask) -> None:
    task.notify_checkpoint_complete(task.checkpoint(put({1: 1})).states)
    with pytest.raises(InjectedFailureError):
        task.checkpoint(put({1: 99, 2: 99}, fail=True))
    ack = task.checkpoint(put({3: 3}))
    assert read(task) == {1: 1, 3: 3}
    assert ack.stats.restored >= 1  # the failed attempt's leftovers came from storage


def test_a_checkpoint_never_reported_complete_is_not_built_upon(task: StateTask) -> None:
    task.notify_checkpoint_complete(task.checkpoint(put({1: 1})).states)
    abandoned = task.checkpoint(put({1: 2, 2: 2}))  # its manifest is never written
    ack = task.checkpoint(put({3: 3}))
    assert read(task) == {1: 1, 3: 3}
    assert ack.states != abandoned.states
    assert sum(s.seq for s in ack.states.values()) == 2


def test_changes_outside_a_batch_are_refused(task: StateTask) -> None:
    task.notify_checkpoint_complete(task.checkpoint(put({1: 1})).states)
    task.backend.value_state("v").set(5, 5)
    with pytest.raises(StateError, match="outside a batch"):
        task.checkpoint(put({2: 2}))


def test_background_snapshots_go_through_the_executor_records(
    objects: LocalObjectStore, tmp_path: Path
) -> None:
    """Due buckets start after the checkpoint, write the executor-local record, and the
    next batch adopts them: the same path as Spark's executors."""
    clock, executor = TestingClock(), TestingManualExecutor()
    task = _task(
        objects,
        local_dir=tmp_path / "local",
        clock=clock,
        materialization_executor=executor,
        settings=TaskSettings(
            materialization=MaterializationSettings(interval_s=INTERVAL, max_in_flight=BUCKETS)
        ),
    )
    try:
        first = task.checkpoint(put({k: k for k in range(20)}))
        task.notify_checkpoint_complete(first.states)
        assert first.stats.materializations_started == 0  # not due yet
        clock.advance(INTERVAL)
        second = task.checkpoint(put({0: -1}))
        task.notify_checkpoint_complete(second.states)
        changed = [b for b, s in second.states.items() if s.seq > 0]
        assert second.stats.materializations_started == len(changed) > 0
        assert executor.run_all() == len(changed)
        records = [read_record(tmp_path / "local" / "job" / "materialized", b) for b in changed]
        assert all(r is not None and r.epoch == 1 for r in records)
        third = task.checkpoint()
        assert third.stats.materializations_adopted == len(changed)
        for bucket in changed:
            snapshot = third.states[bucket].snapshot
            assert snapshot is not None and snapshot.seq == second.states[bucket].seq
        assert task.materialization_stats().completed == len(changed)
    finally:
        task.close()
