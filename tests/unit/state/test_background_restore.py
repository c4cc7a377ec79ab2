"""Background restore (docs/architecture.md §6.1): whatever order background workers and
task accesses take buckets in -- whatever the buckets a task names first and when it
names them -- the store ends exactly as the eager restore
leaves it; the named buckets are restored first, in the order named;
a bucket is usable only once complete; failures surface to whoever needs the bucket,
never as empty state; closing stops the workers and leaves unfinished buckets without
lineage metadata; the backend's gated store keeps every access behind its bucket."""

from __future__ import annotations

import random
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.unit.state.test_parallel_restore import contents, write_batches

from gic_runtime.errors import RestoreError, StateError
from gic_runtime.handles import BucketState
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.background_restore import BackgroundRestore, BackgroundRestoreSettings
from gic_runtime.state.lmdb_store import LmdbStore
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.state.restore import restore_buckets
from gic_runtime.state.stores import BucketMeta
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.object_store import ObjectStore
from gic_runtime.storage.uri import StoreResolver
from gic_runtime.testing.changelog_fakes import TestingChangelogWriter

B = 8


def _resolver(store: ObjectStore) -> StoreResolver:
    resolver = StoreResolver()
    resolver.register(store)
    return resolver


class SlowStore(LocalObjectStore):
    """A local object store whose reads take ``delay`` seconds (so workers and task
    accesses overlap)."""

    delay = 0.0

    def get(self, key: str, *, start: int = 0, length: int | None = None) -> bytes:
        if self.delay:
            time.sleep(self.delay)
        return super().get(key, start=start, length=length)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    batches=st.integers(1, 4),
    snapshot_at=st.one_of(st.none(), st.integers(0, 3)),
    parallel=st.integers(1, 3),
    group=st.integers(1, 4),
    accesses=st.lists(st.integers(0, B - 1), max_size=12),
    seed=st.integers(0, 1000),
    lmdb=st.booleans(),
    priority=st.lists(st.integers(0, B - 1), max_size=B),
    later=st.lists(st.integers(0, B - 1), max_size=B),
    later_at=st.integers(0, 12),
)
def test_any_order_of_workers_and_accesses_yields_the_eager_state(
    *,
    batches: int,
    snapshot_at: int | None,
    parallel: int,
    group: int,
    accesses: list[int],
    seed: int,
    lmdb: bool,
    priority: list[int],
    later: list[int],
    later_at: int,
) -> None:
    with tempfile.TemporaryDirectory(prefix="gic-bg-") as tmp:
        objects = SlowStore(Path(tmp) / "objects")
        layout = write_batches(
            objects,
            range(B),
            batches=batches,
            snapshot_at=None if snapshot_at is None else min(snapshot_at, batches * 3),
        )
        resolver = _resolver(objects)
        order = list(range(B))
        random.Random(seed).shuffle(order)
        states = [layout.states[b] for b in order]
        eager = InMemoryStore()
        restore_buckets(eager, states, resolver)

        store = LmdbStore(Path(tmp) / "lmdb", map_size=1 << 26) if lmdb else InMemoryStore()
        objects.delay = 0.002
        restore = BackgroundRestore(
            store,
            states,
            resolver,
            BackgroundRestoreSettings(
                parallel=parallel,
                group_buckets=group,
                fetch_threads=2,
                run_fetch_threads=2,
            ),
            priority=priority,  # repeats and any order: the task's input order
        )
        for i, bucket in enumerate(accesses):  # the task thread, racing the workers
            if i == later_at:
                restore.prioritize(later)  # a restore carried over to a later batch
            restore.ensure(bucket)
            assert bucket in restore.ready
            assert store.get_meta(bucket) == BucketMeta(
                layout.states[bucket].seq, layout.states[bucket].token
            )
        assert restore.wait(30)
        restore.check()
        progress = restore.progress()
        assert progress.done == progress.total == B and progress.finished
        assert progress.bytes_done == progress.bytes_total > 0
        assert restore.ready == frozenset(range(B))
        got = {b: (store.scan(b, b""), store.get_meta(b)) for b in range(B)}
        assert got == contents(eager, range(B))
        restore.close()
        store.close()


class OrderStore(InMemoryStore):
    """Records the order buckets are completed in (their metadata is set last)."""

    def __init__(self) -> None:
        super().__init__()
        self.completed: list[int] = []
        self.by: dict[int, int] = {}  # bucket -> the thread that completed it

    def set_meta(self, bucket: int, meta: BucketMeta) -> None:
        super().set_meta(bucket, meta)
        self.completed.append(bucket)
        self.by[bucket] = threading.get_ident()


@pytest.mark.parametrize("parallel", [1, 2])
def test_the_buckets_a_task_names_are_restored_first(tmp_path: Path, parallel: int) -> None:
    objects = LocalObjectStore(tmp_path / "objects")
    layout = write_batches(objects, range(B), batches=2)
    store = OrderStore()
    named = [6, 1, 6, 4]  # input order, with a repeat
    restore = BackgroundRestore(
        store,
        [layout.states[b] for b in range(B)],
        _resolver(objects),
        BackgroundRestoreSettings(parallel=parallel, group_buckets=2),
        priority=named,
    )
    assert restore.wait(30)
    restore.check()
    # the run restores the named buckets first, in range order, then the others
    assert store.completed == [1, 4, 6, 0, 2, 3, 5, 7]


def test_a_bucket_the_task_did_not_name_is_not_left_waiting_for_the_run(
    tmp_path: Path,
) -> None:
    objects = SlowStore(tmp_path / "objects")
    layout = write_batches(objects, range(B), batches=2)
    objects.delay = 0.05
    store = OrderStore()
    restore = BackgroundRestore(
        store,
        [layout.states[b] for b in range(B)],
        _resolver(objects),
        BackgroundRestoreSettings(parallel=1, group_buckets=1),
        priority=[0, 1],
    )
    restore.ensure(B - 1)  # last in the run, not named: this thread restores it itself
    assert B - 1 in restore.ready
    assert store.by[B - 1] == threading.get_ident()
    assert restore.wait(30)
    assert restore.ready == frozenset(range(B))
    assert sorted(store.completed) == list(range(B))  # each bucket restored once


def test_naming_other_buckets_later_stops_the_run_and_restores_them_next(
    tmp_path: Path,
) -> None:
    objects = SlowStore(tmp_path / "objects")
    layout = write_batches(objects, range(B), batches=2)
    objects.delay = 0.02
    store = OrderStore()
    restore = BackgroundRestore(
        store,
        [layout.states[b] for b in range(B)],
        _resolver(objects),
        BackgroundRestoreSettings(parallel=1, group_buckets=1),
    )
    restore.prioritize([7, 6])  # a carried-over restore, a new batch's buckets
    assert restore.wait(30)
    done = store.completed
    assert sorted(done) == list(range(B))
    # at most the bucket being applied (and the one after it) come before 6 and 7
    assert done.index(6) < done.index(7) <= 3


def test_first_seen_lists_a_batchs_buckets_in_the_order_of_their_first_row() -> None:
    import pyarrow as pa

    from gic_runtime.spark.stage import first_seen

    column = pa.chunked_array([[5, 3, 5, None], [1, 3, 9]], type=pa.int32())
    assert first_seen(column) == [5, 3, 1, 9]


def test_a_bucket_nobody_started_is_restored_by_the_thread_that_needs_it(
    tmp_path: Path,
) -> None:
    objects = SlowStore(tmp_path / "objects")
    layout = write_batches(objects, range(B), batches=2)
    objects.delay = 0.05
    store = InMemoryStore()
    restore = BackgroundRestore(
        store,
        [layout.states[b] for b in range(B)],
        _resolver(objects),
        BackgroundRestoreSettings(parallel=1, group_buckets=1),
    )
    me = threading.get_ident()
    restore.ensure(B - 1)  # the worker starts at bucket 0: the last one is ours
    assert B - 1 in restore.ready
    assert restore.wait(30)
    assert restore.ready == frozenset(range(B))
    assert threading.get_ident() == me


def test_a_failed_bucket_raises_for_whoever_needs_it_and_keeps_no_metadata(
    tmp_path: Path,
) -> None:
    objects = LocalObjectStore(tmp_path / "objects")
    layout = write_batches(objects, range(4), batches=2)
    bad = layout.states[2]
    missing = tuple(replace(h, uri=h.uri + ".gone") for h in bad.changelog)
    broken = BucketState(2, bad.seq, None, missing, bad.token)
    store = InMemoryStore()
    states = [layout.states[0], layout.states[1], broken, layout.states[3]]
    restore = BackgroundRestore(
        store, states, _resolver(objects), BackgroundRestoreSettings(group_buckets=1)
    )
    assert restore.wait(30)
    with pytest.raises(RestoreError, match="bucket 2"):
        restore.ensure(2)
    with pytest.raises(RestoreError, match="bucket 2"):
        restore.check()
    assert store.get_meta(2) is None
    assert restore.progress().failed == 1
    for b in (0, 1, 3):
        restore.ensure(b)
        assert store.get_meta(b) == BucketMeta(layout.states[b].seq, layout.states[b].token)


def test_checks_on_the_handles_run_before_anything_starts(tmp_path: Path) -> None:
    objects = LocalObjectStore(tmp_path / "objects")
    layout = write_batches(objects, range(2), batches=3)
    gap = BucketState(1, layout.states[1].seq, None, layout.states[1].changelog[1:], "t")
    with pytest.raises(RestoreError, match="missing changes"):
        BackgroundRestore(
            InMemoryStore(),
            [layout.states[0], gap],
            _resolver(objects),
            BackgroundRestoreSettings(),
        )


def test_close_cancels_buckets_not_started_and_leaves_them_without_metadata(
    tmp_path: Path,
) -> None:
    objects = SlowStore(tmp_path / "objects")
    layout = write_batches(objects, range(B), batches=2)
    objects.delay = 0.05
    store = InMemoryStore()
    restore = BackgroundRestore(
        store,
        [layout.states[b] for b in range(B)],
        _resolver(objects),
        BackgroundRestoreSettings(parallel=1, group_buckets=1),
    )
    restore.close()
    left = [b for b in range(B) if b not in restore.ready]
    assert left  # the worker stopped early
    assert all(store.get_meta(b) is None for b in left)
    with pytest.raises(StateError, match="cancelled"):
        restore.ensure(left[-1])


def test_the_backend_gates_every_access_and_opens_when_done(tmp_path: Path) -> None:
    objects = SlowStore(tmp_path / "objects")
    layout = write_batches(objects, range(B), batches=3)
    objects.delay = 0.01
    resolver = _resolver(objects)
    eager = InMemoryStore()
    restore_buckets(eager, list(layout.states.values()), resolver)

    store = InMemoryStore()
    backend = KeyedStateBackend(range(B), B, store, TestingChangelogWriter())
    summary = backend.restore(
        layout.states, resolver, background=BackgroundRestoreSettings(parallel=1)
    )
    assert summary.restored == tuple(range(B))
    assert backend.store.gate is not None
    # through the gated store, a bucket's content is complete the moment it is read
    for b in reversed(range(B)):
        assert backend.store.scan(b, b"") == eager.scan(b, b"")
        assert backend.restored(b)
    restorer = backend.restorer
    assert restorer is not None and restorer.wait(30)
    assert not backend.restore_pending()
    assert backend.store.gate is None  # open again: direct calls into the store
    assert backend.store.get == store.get
    assert contents(store, range(B)) == contents(eager, range(B))
    assert all(backend.seq(b) == layout.states[b].seq for b in range(B))

    # the next batch expects the same lineage: local hits, nothing restarts
    again = backend.restore(layout.states, resolver, background=BackgroundRestoreSettings())
    assert again.local_hits == tuple(range(B))


def test_a_batch_naming_every_bucket_to_rebuild_restores_them_before_it_starts(
    tmp_path: Path,
) -> None:
    objects = LocalObjectStore(tmp_path / "objects")
    layout = write_batches(objects, range(B), batches=2)
    resolver = _resolver(objects)
    eager = InMemoryStore()
    restore_buckets(eager, list(layout.states.values()), resolver)
    store = InMemoryStore()
    backend = KeyedStateBackend(range(B), B, store, TestingChangelogWriter())
    summary = backend.restore(
        layout.states,
        resolver,
        background=BackgroundRestoreSettings(),
        priority=[5, 3, *range(B)],
    )
    assert summary.restored == tuple(range(B))
    assert backend.restorer is None and backend.store.gate is None  # nothing runs beside
    assert contents(store, range(B)) == contents(eager, range(B))

    # naming only some: the others restore in the background
    store2 = InMemoryStore()
    backend2 = KeyedStateBackend(range(B), B, store2, TestingChangelogWriter())
    backend2.restore(
        layout.states, resolver, background=BackgroundRestoreSettings(), priority=[5, 3]
    )
    restorer = backend2.restorer
    assert restorer is not None and restorer.wait(30)
    assert contents(store2, range(B)) == contents(eager, range(B))


def test_a_running_restore_carries_over_to_a_batch_expecting_the_same_lineage(
    tmp_path: Path,
) -> None:
    objects = SlowStore(tmp_path / "objects")
    layout = write_batches(objects, range(B), batches=2)
    objects.delay = 0.03
    resolver = _resolver(objects)
    backend = KeyedStateBackend(range(B), B, InMemoryStore(), TestingChangelogWriter())
    background = BackgroundRestoreSettings(parallel=1, group_buckets=1)
    backend.restore(layout.states, resolver, background=background)
    first = backend.restorer
    second = backend.restore(layout.states, resolver, background=background)
    assert backend.restorer is first  # carried over, not restarted
    assert set(second.local_hits) | set(second.restored) == set(range(B))
    # an eager restore closes it and finishes what is left before returning
    third = backend.restore(layout.states, resolver)
    assert backend.restorer is None and backend.store.gate is None
    assert set(third.local_hits) | set(third.restored) == set(range(B))
    assert all(
        backend.store.get_meta(b) == BucketMeta(layout.states[b].seq, layout.states[b].token)
        for b in range(B)
    )


def test_mark_persisted_leaves_a_restoring_bucket_to_its_restore(tmp_path: Path) -> None:
    objects = SlowStore(tmp_path / "objects")
    layout = write_batches(objects, range(B), batches=2)
    objects.delay = 0.05
    store = InMemoryStore()
    backend = KeyedStateBackend(range(B), B, store, TestingChangelogWriter())
    backend.restore(
        layout.states, _resolver(objects), background=BackgroundRestoreSettings(parallel=1)
    )
    pending = sorted(backend.restore_outstanding())
    assert pending
    backend.mark_persisted({b: layout.states[b] for b in pending})
    restorer = backend.restorer
    assert restorer is not None and restorer.wait(30)
    for b in range(B):
        assert store.get_meta(b) == BucketMeta(layout.states[b].seq, layout.states[b].token)
