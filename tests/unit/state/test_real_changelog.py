"""The backend persisting through the real BatchingChangelogWriter over a
LocalObjectStore, restored through changelog.reader.read_changes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gic_runtime import layout
from gic_runtime.changelog.uploader import HedgingUploader
from gic_runtime.changelog.writer import BatchingChangelogWriter, WriterSettings
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.lmdb_store import LmdbStore
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.state.snapshot import upload_snapshot
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.uri import StoreResolver

B = 4


@pytest.fixture
def uploader(resolver: StoreResolver, object_store: LocalObjectStore) -> Iterator[HedgingUploader]:
    up = HedgingUploader(resolver, lambda: layout.new_segment_uri(object_store.root_uri, "job", 1))
    yield up
    up.close()


def test_persist_materialize_restore(
    resolver: StoreResolver, object_store: LocalObjectStore, uploader: HedgingUploader, tmp_path
) -> None:
    writer = BatchingChangelogWriter(
        range(B), uploader, WriterSettings(preemptive_upload_bytes=2048)
    )
    backend = KeyedStateBackend(range(B), B, InMemoryStore(), writer)
    counts = backend.value_state("count")
    seen = backend.map_state("seen")
    for i in range(600):
        key = f"k{i % 50}"
        counts.set(key, counts.get(key, 0) + 1)
        seen.put(key, i % 7, i)
    first = backend.checkpoint().result(timeout=60)
    backend.notify_checkpoint_complete(first)
    assert writer.preemptive_uploads > 0
    for b in range(B):
        mv = backend.materialization_view(b)
        with mv.view as items:
            handle = upload_snapshot(
                resolver,
                layout.new_snapshot_uri(object_store.root_uri, "job", b, epoch=1),
                items,
                bucket=b,
                seq=mv.seq,
                compress=True,
            )
        backend.on_materialized(b, handle)
    for i in range(200):
        key = f"k{i % 60}"
        counts.set(key, counts.get(key, 0) + 1)
        if i % 5 == 0:
            seen.clear(key)
    second = backend.checkpoint().result(timeout=60)
    backend.notify_checkpoint_complete(second)
    expected = {f"k{i}": (counts.get(f"k{i}"), seen.items(f"k{i}")) for i in range(60)}
    writer.close()

    restored_writer = BatchingChangelogWriter(range(B), uploader)
    store = LmdbStore(tmp_path / "restored", map_size=1 << 26)
    restored = KeyedStateBackend(range(B), B, store, restored_writer)
    summary = restored.restore(second, resolver)
    assert sorted(summary.restored) == [b for b in range(B) if second[b].seq]
    assert summary.replayed == sum(s.seq - s.base for s in second.values())
    got = {
        f"k{i}": (
            restored.value_state("count").get(f"k{i}"),
            restored.map_state("seen").items(f"k{i}"),
        )
        for i in range(60)
    }
    assert got == expected
    # the restored lineage continues: new changes checkpoint on top of the inherited handles
    restored.value_state("count").set("k1", -1)
    third = restored.checkpoint().result(timeout=60)
    b1 = restored.route("k1")
    assert third[b1].seq == second[b1].seq + 1
    again = KeyedStateBackend(
        range(B), B, InMemoryStore(), BatchingChangelogWriter(range(B), uploader)
    )
    again.restore(third, resolver)
    assert again.value_state("count").get("k1") == -1
    restored_writer.close()
    store.close()
