"""KeyedStateBackend: state semantics against a dict reference, dual write, routing,
checkpoint / materialize / restore lineage, truncation rule."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gic_runtime.changelog.records import Op
from gic_runtime.errors import RestoreError, StateError, UploadError
from gic_runtime.handles import BucketState
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.keys import bucket_for
from gic_runtime.state.lmdb_store import LmdbStore
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.state.snapshot import upload_snapshot
from gic_runtime.state.stores import BucketMeta, KVStore
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.uri import StoreResolver
from gic_runtime.testing.changelog_fakes import TestingChangelogStorage, TestingChangelogWriter

B = 4
KEYS = ["a", "b", 7, -3, b"raw", ("t", 1)]
UKEYS = ["x", "y", 2]
VALUES = st.one_of(st.integers(-5, 5), st.text(max_size=3), st.lists(st.integers(0, 3), max_size=3))

MakeStore = Callable[[], KVStore]


class Reference:
    """The same operations on plain dicts."""

    def __init__(self) -> None:
        self.values: dict[Any, Any] = {}
        self.maps: dict[Any, dict[Any, Any]] = {}
        self.lists: dict[Any, list[Any]] = {}

    def apply(self, backend: KeyedStateBackend | None, op: tuple[Any, ...]) -> None:
        kind, name, *args = op
        if backend is not None:
            if kind == "set":
                backend.value_state("v").set(args[0], args[1])
            elif kind == "vclear":
                backend.value_state("v").clear(args[0])
            elif kind == "put":
                backend.map_state("m").put(args[0], args[1], args[2])
            elif kind == "remove":
                backend.map_state("m").remove(args[0], args[1])
            elif kind == "mclear":
                backend.map_state("m").clear(args[0])
            elif kind == "append":
                backend.list_state("l").append(args[0], args[1])
            elif kind == "extend":
                backend.list_state("l").extend(args[0], args[1])
            elif kind == "lclear":
                backend.list_state("l").clear(args[0])
        if kind == "set":
            self.values[args[0]] = args[1]
        elif kind == "vclear":
            self.values.pop(args[0], None)
        elif kind == "put":
            self.maps.setdefault(args[0], {})[args[1]] = args[2]
        elif kind == "remove":
            self.maps.get(args[0], {}).pop(args[1], None)
        elif kind == "mclear":
            self.maps.pop(args[0], None)
        elif kind == "append":
            self.lists.setdefault(args[0], []).append(args[1])
        elif kind == "extend":
            self.lists.setdefault(args[0], []).extend(args[1])
        elif kind == "lclear":
            self.lists.pop(args[0], None)
        del name

    def check(self, backend: KeyedStateBackend) -> None:
        v, m, lst = backend.value_state("v"), backend.map_state("m"), backend.list_state("l")
        for key in KEYS:
            assert v.get(key) == self.values.get(key)
            assert dict(m.items(key)) == self.maps.get(key, {})
            assert sorted(map(repr, m.keys(key))) == sorted(map(repr, self.maps.get(key, {})))
            assert lst.get(key) == self.lists.get(key, [])
        assert v.get_many(KEYS) == [self.values.get(k) for k in KEYS]


_key = st.sampled_from(KEYS)
_ukey = st.sampled_from(UKEYS)
OPS = st.one_of(
    st.tuples(st.just("set"), st.just("v"), _key, VALUES),
    st.tuples(st.just("vclear"), st.just("v"), _key),
    st.tuples(st.just("put"), st.just("m"), _key, _ukey, VALUES),
    st.tuples(st.just("remove"), st.just("m"), _key, _ukey),
    st.tuples(st.just("mclear"), st.just("m"), _key),
    st.tuples(st.just("append"), st.just("l"), _key, VALUES),
    st.tuples(st.just("extend"), st.just("l"), _key, st.lists(VALUES, max_size=3)),
    st.tuples(st.just("lclear"), st.just("l"), _key),
)


def _backend(store: KVStore, writer: TestingChangelogWriter | None = None) -> KeyedStateBackend:
    return KeyedStateBackend(range(B), B, store, writer or TestingChangelogWriter())


def _materialize(
    backend: KeyedStateBackend, bucket: int, resolver: StoreResolver, root: str
) -> None:
    mv = backend.materialization_view(bucket)
    with mv.view as items:
        handle = upload_snapshot(
            resolver, f"{root}/snap-{bucket}-{uuid.uuid4().hex}", items, bucket=bucket, seq=mv.seq
        )
    assert backend.on_materialized(bucket, handle)


def _roundtrip(ops: list[tuple[Any, ...]], split: int, store_kind: str) -> None:
    with tempfile.TemporaryDirectory(prefix="gic-state-") as tmp:
        objects = LocalObjectStore(f"{tmp}/objects")
        resolver = StoreResolver()
        resolver.register(objects)

        def make() -> KVStore:
            if store_kind == "memory":
                return InMemoryStore()
            return LmdbStore(f"{tmp}/lmdb-{len(made)}", map_size=1 << 24)

        made: list[KVStore] = []
        made.append(make())
        storage = TestingChangelogStorage()
        writer = TestingChangelogWriter(storage)
        backend = _backend(made[0], writer)
        ref = Reference()
        cut = split % (len(ops) + 1)
        for op in ops[:cut]:
            ref.apply(backend, op)
        backend.checkpoint().result()
        for b in range(B):
            _materialize(backend, b, resolver, objects.root_uri)
        for op in ops[cut:]:
            ref.apply(backend, op)
        ref.check(backend)
        states = backend.checkpoint().result()
        made.append(make())
        restored = _backend(made[1], TestingChangelogWriter(storage))
        summary = restored.restore(states, resolver, reader=writer.read_changes)
        ref.check(restored)
        assert summary.replayed == sum(s.seq - s.base for s in states.values())
        for store in made:
            store.close()


class TestSemanticsAgainstReference:
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(OPS, max_size=40), st.integers(0, 1000))
    def test_memory_store(self, ops: list[tuple[Any, ...]], split: int) -> None:
        _roundtrip(ops, split, "memory")

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(OPS, max_size=40), st.integers(0, 1000))
    def test_lmdb_store(self, ops: list[tuple[Any, ...]], split: int) -> None:
        _roundtrip(ops, split, "lmdb")

    def test_set_many(self, make_store: MakeStore) -> None:
        backend = _backend(make_store())
        v = backend.value_state("v")
        assert v.set_many([("a", 1), ("b", 2), ("a", 3)]) == 3
        assert v.get_many(["a", "b", "c"], default=0) == [3, 2, 0]
        m = backend.map_state("m")
        m.put("a", "u", 1)
        assert m.contains("a", "u") and not m.contains("a", "w")
        assert m.get("a", "w", default="none") == "none"


class TestDualWrite:
    def test_every_change_is_one_changelog_record(self, make_store: MakeStore) -> None:
        writer = TestingChangelogWriter()
        backend = _backend(make_store(), writer)
        backend.value_state("v").set("a", 1)
        backend.map_state("m").put("a", "u", 1)
        backend.map_state("m").clear("a")
        backend.list_state("l").extend("a", [1, 2, 3])
        backend.list_state("l").extend("a", [])
        backend.list_state("l").clear("a")
        assert writer.appended == 5
        states = backend.checkpoint().result()
        b = bucket_for("a", B)
        ops = [r.op for h in states[b].changelog for r in writer.read_changes(None, h)]  # type: ignore[arg-type]
        assert ops == [Op.PUT, Op.PUT, Op.DELETE_PREFIX, Op.APPEND, Op.DELETE]
        assert states[b].seq == 5

    def test_keys_outside_range_are_rejected(self, make_store: MakeStore) -> None:
        backend = KeyedStateBackend(range(0, 2), B, make_store(), TestingChangelogWriter())
        outside = next(k for k in (f"k{i}" for i in range(100)) if bucket_for(k, B) >= 2)
        with pytest.raises(StateError, match=r"outside this backend's buckets \[0, 2\)"):
            backend.value_state("v").set(outside, 1)

    def test_state_kind_conflict(self, make_store: MakeStore) -> None:
        backend = _backend(make_store())
        backend.value_state("s")
        with pytest.raises(StateError, match="is a value state, not a map state"):
            backend.map_state("s")
        assert backend.value_state("s") is backend.value_state("s")

    @pytest.mark.parametrize("bad", [range(0), range(0, 4, 2), range(2, 9)])
    def test_bad_ranges(self, bad: range) -> None:
        with pytest.raises(StateError):
            KeyedStateBackend(
                bad, 8 if bad.stop < 9 else 4, InMemoryStore(), TestingChangelogWriter()
            )


class TestCheckpointLineage:
    def test_tokens_and_seq(
        self, make_store: MakeStore, resolver: StoreResolver, object_store: LocalObjectStore
    ) -> None:
        backend = _backend(make_store())
        b = bucket_for("a", B)
        states = backend.checkpoint().result()
        assert states[b] == BucketState(b, 0, None, (), "")
        backend.value_state("v").set("a", 1)
        states = backend.checkpoint().result()
        assert states[b].seq == 1
        assert states[b].token == states[b].changelog[-1].uri
        _materialize(backend, b, resolver, object_store.root_uri)
        states = backend.checkpoint().result()
        assert states[b].changelog == ()
        assert states[b].token == states[b].snapshot.uri  # type: ignore[union-attr]

    def test_persist_failure_propagates(self, make_store: MakeStore) -> None:
        writer = TestingChangelogWriter()
        backend = _backend(make_store(), writer)
        writer.fail_persist = True
        with pytest.raises(UploadError):
            backend.checkpoint().result()

    def test_truncation_waits_for_a_completed_checkpoint(
        self, make_store: MakeStore, resolver: StoreResolver, object_store: LocalObjectStore
    ) -> None:
        writer = TestingChangelogWriter()
        backend = _backend(make_store(), writer)
        b = bucket_for("a", B)
        backend.value_state("v").set("a", 1)
        before = backend.checkpoint().result()
        backend.notify_checkpoint_complete(before)
        assert writer.truncations == []
        _materialize(backend, b, resolver, object_store.root_uri)
        backend.value_state("v").set("a", 2)
        assert writer.truncations == []  # materialized, but no checkpoint references it yet
        after = backend.checkpoint().result()
        assert after[b].snapshot is not None and after[b].base == 1
        backend.notify_checkpoint_complete(before)  # an older completion changes nothing
        assert writer.truncations == []
        backend.notify_checkpoint_complete(after)
        assert writer.truncations == [(b, 1)]
        assert all(h.to_seq > 1 for h in writer.handles(b))
        backend.notify_checkpoint_complete(after)
        assert writer.truncations == [(b, 1)]

    def test_stale_snapshot_is_ignored(
        self, make_store: MakeStore, resolver: StoreResolver, object_store: LocalObjectStore
    ) -> None:
        backend = _backend(make_store())
        b = bucket_for("a", B)
        backend.value_state("v").set("a", 1)
        old = backend.materialization_view(b)
        old.view.close()
        backend.value_state("v").set("a", 2)
        _materialize(backend, b, resolver, object_store.root_uri)
        with backend.store.snapshot_items(b) as items:
            stale = upload_snapshot(
                resolver, f"{object_store.root_uri}/stale", items, bucket=b, seq=old.seq
            )
        assert not backend.on_materialized(b, stale)
        assert backend.snapshot_of(b).seq == 2  # type: ignore[union-attr]
        with pytest.raises(StateError, match="beyond"):
            backend.on_materialized(b, stale.__class__(stale.uri, b, 99, stale.size, stale.crc))


class TestRestore:
    def test_local_copy_is_reused_when_lineage_matches(self, tmp_path: Any) -> None:
        storage = TestingChangelogStorage()
        writer = TestingChangelogWriter(storage)
        store = LmdbStore(tmp_path / "local", map_size=1 << 24)
        backend = _backend(store, writer)
        backend.value_state("v").set_many((k, str(k)) for k in KEYS)
        states = backend.checkpoint().result()
        backend.mark_persisted(states)
        store.close()

        other_worker = LmdbStore(tmp_path / "local", map_size=1 << 24)
        restored = _backend(other_worker, TestingChangelogWriter(storage))
        summary = restored.restore(states, StoreResolver(), reader=writer.read_changes)
        nonempty = sorted(b for b, s in states.items() if s.seq)
        assert list(summary.local_hits) == nonempty
        assert summary.replayed == 0
        assert restored.value_state("v").get_many(KEYS) == [str(k) for k in KEYS]
        other_worker.close()

    def test_changed_local_copy_is_rebuilt(self, make_store: MakeStore) -> None:
        storage = TestingChangelogStorage()
        writer = TestingChangelogWriter(storage)
        store = make_store()
        backend = _backend(store, writer)
        backend.value_state("v").set("a", 1)
        states = backend.checkpoint().result()
        backend.mark_persisted(states)
        backend.value_state("v").set("a", 2)  # not checkpointed: invalidates the local meta
        b = bucket_for("a", B)
        assert store.get_meta(b) is None
        summary = backend.restore(states, StoreResolver(), reader=writer.read_changes)
        assert summary.restored == (b,)
        assert backend.value_state("v").get("a") == 1
        assert store.get_meta(b) == BucketMeta(1, states[b].token)
        assert backend.seq(b) == 1

    def test_restored_lineage_continues(self, make_store: MakeStore) -> None:
        storage = TestingChangelogStorage()
        first = TestingChangelogWriter(storage)
        backend = _backend(make_store(), first)
        backend.list_state("l").append("a", 1)
        states = backend.checkpoint().result()
        second = TestingChangelogWriter(storage)
        restored = _backend(make_store(), second)
        restored.restore(states, StoreResolver(), reader=first.read_changes)
        restored.list_state("l").append("a", 2)
        again = restored.checkpoint().result()
        b = bucket_for("a", B)
        assert again[b].seq == 2
        assert again[b].changelog[0] == states[b].changelog[0]  # inherited handle kept
        third = _backend(make_store(), TestingChangelogWriter(storage))
        third.restore(again, StoreResolver(), reader=first.read_changes)
        assert third.list_state("l").get("a") == [1, 2]

    def test_states_outside_range_are_rejected(self, make_store: MakeStore) -> None:
        backend = KeyedStateBackend(range(0, 2), B, make_store(), TestingChangelogWriter())
        with pytest.raises(StateError, match=r"\[3\] are outside"):
            backend.restore({3: BucketState(3, 0)}, StoreResolver())

    def test_gap_fails_restore(self, make_store: MakeStore) -> None:
        storage = TestingChangelogStorage()
        writer = TestingChangelogWriter(storage)
        backend = _backend(make_store(), writer)
        backend.value_state("v").set("a", 1)
        states = backend.checkpoint().result()
        b = bucket_for("a", B)
        broken = {b: BucketState(b, 3, None, states[b].changelog, "t")}
        with pytest.raises(
            RestoreError, match=rf"bucket {b}: changelog is missing changes \[1, 3\)"
        ):
            _backend(make_store()).restore(broken, StoreResolver(), reader=writer.read_changes)
