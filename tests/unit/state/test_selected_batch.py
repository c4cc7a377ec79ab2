"""A batch run on the state keys it named, read without restoring its buckets, then the
buckets restored to the lineage its checkpoint produced (KeyedStateBackend.restore with
``select``, restore_selected; docs/architecture.md §6.3): the same output, the same
checkpoint and the same local copy as a batch run after an eager restore."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gic_runtime import layout
from gic_runtime.changelog.records import Op
from gic_runtime.changelog.uploader import HedgingUploader
from gic_runtime.changelog.writer import BatchingChangelogWriter
from gic_runtime.errors import StateError
from gic_runtime.handles import BucketState
from gic_runtime.processing import AggregateProcessor, aggregate_schema, count, max_, sum_
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.background_restore import BackgroundRestoreSettings
from gic_runtime.state.gated_store import GatedStore
from gic_runtime.state.keys import bucket_for
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.state.selected_store import SelectedBuckets
from gic_runtime.state.snapshot import upload_snapshot
from gic_runtime.state.stores import BucketMeta, KVStore
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.uri import StoreResolver

B = 4
AGGS = {"n": count(), "total": sum_("x"), "hi": max_("x")}
SCHEMA = pa.schema([("key", pa.string()), ("x", pa.int64())])
PROCESSOR = AggregateProcessor("key", AGGS, aggregate_schema(SCHEMA.field("key"), AGGS, SCHEMA))
BACKGROUND = BackgroundRestoreSettings(select_keys=True)

Rows = list[tuple[str, int]]


class _Job:
    """Backends of one job over one object store (each with its own changelog writer)."""

    def __init__(self, root: Path) -> None:
        self.objects = LocalObjectStore(root)
        self.resolver = StoreResolver()
        self.resolver.register(self.objects)
        self.uploader = HedgingUploader(
            self.resolver, lambda: layout.new_segment_uri(self.objects.root_uri, "job", 1)
        )
        self._writers: list[BatchingChangelogWriter] = []

    def backend(self, store: KVStore | None = None) -> KeyedStateBackend:
        writer = BatchingChangelogWriter(range(B), self.uploader)
        self._writers.append(writer)
        return KeyedStateBackend(range(B), B, store or InMemoryStore(), writer)

    def close(self) -> None:
        for writer in self._writers:
            writer.close()
        self.uploader.close()


@contextmanager
def _job() -> Iterator[_Job]:
    with tempfile.TemporaryDirectory() as tmp:
        job = _Job(Path(tmp) / "objects")
        try:
            yield job
        finally:
            job.close()


def _table(rows: Rows) -> pa.Table:
    return pa.table({"key": [k for k, _ in rows], "x": [x for _, x in rows]}, schema=SCHEMA)


def _buckets(rows: Rows) -> pa.Array:
    return pa.array([bucket_for(k, B) for k, _ in rows], pa.int32())


def _run(backend: KeyedStateBackend, rows: Rows) -> list[dict[str, Any]]:
    if not rows:
        return []
    out = list(PROCESSOR(_table(rows), backend, 1, buckets=_buckets(rows)))
    return sorted(out[0].to_pylist(), key=lambda r: r["key"])


def _checkpoint(backend: KeyedStateBackend) -> dict[int, BucketState]:
    states = backend.checkpoint().result(timeout=60)
    backend.mark_persisted(states)
    return states


def _history(job: _Job, batches: list[Rows], snapshot_after: int) -> dict[int, BucketState]:
    """Run ``batches`` on one backend, snapshotting every bucket after batch
    ``snapshot_after``; the last checkpoint's states."""
    backend = job.backend()
    states: dict[int, BucketState] = {b: BucketState(b, 0) for b in range(B)}
    for i, rows in enumerate(batches):
        _run(backend, rows)
        states = _checkpoint(backend)
        if i == snapshot_after:
            for b in range(B):
                view = backend.materialization_view(b)
                with view.view as items:
                    handle = upload_snapshot(
                        job.resolver,
                        layout.new_snapshot_uri(job.objects.root_uri, "job", b, epoch=1),
                        items,
                        bucket=b,
                        seq=view.seq,
                        compress=True,
                    )
                backend.on_materialized(b, handle)
    return states


def _contents(store: KVStore) -> dict[int, list[tuple[bytes, bytes]]]:
    return {b: store.scan(b, b"") for b in range(B)}


_ROWS = st.lists(
    st.tuples(st.sampled_from([f"k{i}" for i in range(12)]), st.integers(-5, 5)), max_size=14
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=st.lists(_ROWS, min_size=1, max_size=4),
    snapshot_after=st.integers(-1, 3),
    batch=_ROWS.filter(bool),
)
def test_a_batch_on_selected_keys_is_the_batch_after_a_restore(
    history: list[Rows], snapshot_after: int, batch: Rows
) -> None:
    """Whatever the history (snapshots or not) and the batch: same output, same changes
    checkpointed, and once restored the local copy holds what the eager path holds,
    with the new lineage's metadata."""
    with _job() as job:
        start = _history(job, history, snapshot_after)

        eager = job.backend()
        rebuilt = sorted(eager.restore(start, job.resolver).restored)
        want_out = _run(eager, batch)
        want_states = _checkpoint(eager)

        store = InMemoryStore()
        selecting = job.backend(store)
        asked: list[KeyedStateBackend] = []

        def names(backend: KeyedStateBackend) -> Mapping[int, list[bytes]]:
            asked.append(backend)
            return PROCESSOR.state_keys(_table(batch), backend, _buckets(batch))

        summary = selecting.restore(start, job.resolver, background=BACKGROUND, select=names)
        assert asked == ([selecting] if rebuilt else [])
        assert list(summary.selected) == rebuilt
        assert all(not selecting.restored(b) for b in rebuilt)
        assert _run(selecting, batch) == want_out
        states = _checkpoint(selecting)
        assert {b: s.seq for b, s in states.items()} == {b: s.seq for b, s in want_states.items()}
        for b in rebuilt:
            assert store.get_meta(b) is None  # never written, never reusable as is
        assert selecting.restore_selected(states, job.resolver, BACKGROUND) == tuple(rebuilt)
        restorer = selecting.restorer
        if rebuilt:
            assert restorer is not None and restorer.wait(60)
            restorer.check()
        assert _contents(store) == _contents(eager.store.inner)
        for b in rebuilt:
            assert store.get_meta(b) == BucketMeta(states[b].seq, states[b].token)
            assert selecting.restored(b)
        # and the batch after it reads the restored buckets
        assert _run(selecting, batch) == _run(eager, batch)


def test_a_key_the_batch_did_not_name_fails_and_the_bucket_is_rebuilt_after(
    tmp_path: Path,
) -> None:
    with _job() as job:
        start = _history(job, [[("a", 1), ("b", 2), ("c", 3)]], snapshot_after=0)
        store = InMemoryStore()
        backend = job.backend(store)
        only_a = [("a", 1)]
        summary = backend.restore(
            start,
            job.resolver,
            background=BACKGROUND,
            select=lambda be: PROCESSOR.state_keys(_table(only_a), be, _buckets(only_a)),
        )
        assert summary.selected
        with pytest.raises(StateError, match="reads a state key it did not name"):
            _run(backend, [("a", 1), ("b", 1)])
        # the task fails: the selection is dropped, the next restore rebuilds the buckets
        backend.close_restore()
        again = backend.restore(start, job.resolver)
        assert again.selected == () and sorted(again.restored) == list(summary.selected)
        assert backend.value_state("agg:n").get("b") == 1


def test_without_the_background_restore_or_with_a_restore_running_nothing_is_selected(
    tmp_path: Path,
) -> None:
    with _job() as job:
        start = _history(job, [[("a", 1), ("b", 2)]], snapshot_after=-1)
        rows = [("a", 1)]

        def names(be: KeyedStateBackend) -> Mapping[int, list[bytes]]:
            return PROCESSOR.state_keys(_table(rows), be, _buckets(rows))

        for background in (None, BackgroundRestoreSettings()):  # eager; selection off
            backend = job.backend()
            summary = backend.restore(start, job.resolver, background=background, select=names)
            assert summary.selected == () and summary.restored
            backend.close_restore()
        # a restore carried over from an earlier batch keeps going: no selection beside it
        backend = job.backend()
        backend.restore(start, job.resolver, background=BACKGROUND)
        summary = backend.restore(start, job.resolver, background=BACKGROUND, select=names)
        assert summary.selected == ()
        backend.close_restore()


def test_selected_buckets_answer_what_was_named_and_refuse_the_rest() -> None:
    inner = InMemoryStore()
    inner.put(0, b"k", b"inner")
    inner.put(1, b"k", b"inner-1")
    selection = SelectedBuckets({1: [b"k", b"gone"], 2: []}, {1: {b"k": b"old"}})
    store = GatedStore(inner)
    store.set_overlay(selection)
    assert store.get(0, b"k") == b"inner"  # other buckets: the local copy
    assert store.get_many(1, [b"k", b"gone"]) == [b"old", None]
    store.put_many(1, [(b"new", b"1")])
    store.apply(1, [(Op.DELETE, b"k", b""), (Op.PUT, b"k2", b"2")])
    assert store.get_many(1, [b"k", b"new", b"k2"]) == [None, b"1", b"2"]
    with pytest.raises(StateError, match="bucket 1: the batch reads a state key it did not"):
        store.get(1, b"other")
    with pytest.raises(StateError, match="bucket 2: the batch reads"):
        store.get_many(2, [b"k"])
    for op, args in (
        ("scan", (b"",)),
        ("scan_range", (b"", b"z")),
        ("append", (b"k", b"v")),
        ("delete_prefix", (b"k",)),
        ("snapshot_items", ()),
        ("clear_bucket", ()),
        ("get_meta", ()),
    ):
        with pytest.raises(StateError, match=f"bucket 1: {op} needs the bucket's whole state"):
            getattr(store, op)(1, *args)
    with pytest.raises(StateError, match="append needs"):
        store.apply(1, [(Op.APPEND, b"k", b"v")])
    assert inner.get(1, b"k") == b"inner-1"  # the local copy was never touched
    store.set_overlay(None)
    assert store.get(1, b"k") == b"inner-1"
