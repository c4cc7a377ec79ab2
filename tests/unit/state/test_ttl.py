"""States with a time to live: expired entries are invisible at once and removed by
the batch-end sweep through the changelog (so never restored), by processing time and
by event time (pending until the first watermark); declarations are checked; and --
against a plain model -- random timelines of writes, time steps, sweeps, checkpoints
and restores."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gic_runtime.errors import ConfigurationError, StateError
from gic_runtime.event_time import BatchTime
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.keys import KIND_EXPIRY
from gic_runtime.state.lmdb_store import LmdbStore
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.state.stores import KVStore
from gic_runtime.state.ttl import TTL
from gic_runtime.storage.uri import StoreResolver
from gic_runtime.testing.changelog_fakes import TestingChangelogStorage, TestingChangelogWriter

MakeStore = Callable[[], KVStore]
B = 4
KEYS = ["a", "b", 7, ("t", 1)]
TEN = TTL(10)
TEN_EVENT = TTL(10, "event")


def _backend(store: KVStore, writer: TestingChangelogWriter | None = None) -> KeyedStateBackend:
    return KeyedStateBackend(range(B), B, store, writer or TestingChangelogWriter())


def _at(backend: KeyedStateBackend, now: int, watermark: int | None = None) -> None:
    backend.set_batch_time(BatchTime(0, now, watermark))


def _entries(backend: KeyedStateBackend) -> list[bytes]:
    keys: list[bytes] = []
    for bucket in range(B):
        with backend.store.snapshot_items(bucket) as view:
            keys += [k for k, _ in view]
    return keys


class TestDeclaration:
    def test_parse(self) -> None:
        assert TTL.parse("30 days") == TTL(30 * 86400 * 10**6, "processing")
        assert TTL.parse(2, "event") == TTL(2_000_000, "event")
        with pytest.raises(ConfigurationError, match="longer than 0"):
            TTL.parse(0)
        with pytest.raises(ConfigurationError, match="neither 'processing' nor 'event'"):
            TTL.parse("1 s", "wall")
        with pytest.raises(ConfigurationError, match="not a duration"):
            TTL.parse("soon")

    def test_a_name_keeps_its_declaration(self, make_store: MakeStore) -> None:
        backend = _backend(make_store())
        backend.value_state("seen", TEN)
        with pytest.raises(StateError, match=r"value \(ttl 10 us of processing time\)"):
            backend.value_state("seen")
        with pytest.raises(StateError, match="declare it the same way"):
            backend.value_state("seen", TTL(11))
        backend.value_state("plain")
        with pytest.raises(StateError, match="use another name"):
            backend.value_state("plain", TEN)


class TestProcessingTime:
    def test_values_expire_and_are_swept(self, make_store: MakeStore) -> None:
        backend = _backend(make_store())
        seen = backend.value_state("seen", TEN)
        _at(backend, 100)
        seen.set("a", "x")
        seen.set("b", "y")
        _at(backend, 105)
        seen.set("b", "z")  # refreshed: lives until 115
        _at(backend, 109)
        assert seen.get_many(["a", "b"]) == ["x", "z"]
        _at(backend, 110)
        assert seen.get("a", "gone") == "gone"  # invisible at once
        assert backend.expire() == 1  # a only; b's old index entry removes nothing
        assert seen.get("b") == "z"
        _at(backend, 115)
        assert backend.expire() == 1
        assert _entries(backend) == []  # values and index entries are gone

    def test_map_entries_and_list_elements_expire_one_by_one(self, make_store: MakeStore) -> None:
        backend = _backend(make_store())
        pages, events = backend.map_state("pages", TEN), backend.list_state("events", TEN)
        _at(backend, 0)
        pages.put("a", "p1", 1)
        events.extend("a", [1, 2])
        _at(backend, 5)
        pages.put("a", "p2", 2)
        events.append("a", 3)
        _at(backend, 10)
        assert pages.items("a") == [("p2", 2)] and not pages.contains("a", "p1")
        assert events.get("a") == [3]
        assert backend.expire() == 3  # one map entry, two list elements
        assert pages.keys("a") == ["p2"] and events.get("a") == [3]
        _at(backend, 15)
        assert backend.expire() == 2
        assert _entries(backend) == []


class TestEventTime:
    def test_pending_until_the_first_watermark(self, make_store: MakeStore) -> None:
        backend = _backend(make_store())
        seen = backend.value_state("seen", TEN_EVENT)
        _at(backend, 10**9, watermark=None)
        seen.set("a", 1)  # no watermark yet: no deadline
        assert backend.expire() == 0
        _at(backend, 10**9, watermark=50)
        assert seen.get("a") == 1
        assert backend.expire() == 0  # now due at 60
        _at(backend, 10**9, watermark=59)
        assert backend.expire() == 0 and seen.get("a") == 1
        _at(backend, 10**9, watermark=60)
        assert seen.get("a") is None
        assert backend.expire() == 1
        assert [k for k in _entries(backend) if k[:1] != KIND_EXPIRY] == []

    def test_processing_time_does_not_expire_event_time_state(self, make_store: MakeStore) -> None:
        backend = _backend(make_store())
        seen = backend.value_state("seen", TEN_EVENT)
        _at(backend, 0, watermark=0)
        seen.set("a", 1)
        _at(backend, 10**12, watermark=9)
        assert backend.expire() == 0 and seen.get("a") == 1


# --- random timelines against a model ---------------------------------------------------

_key = st.sampled_from(KEYS)
OPS = st.one_of(
    st.tuples(st.just("set"), _key, st.integers(0, 9)),
    st.tuples(st.just("put"), _key, st.sampled_from(["x", "y"]), st.integers(0, 9)),
    st.tuples(st.just("append"), _key, st.integers(0, 9)),
    st.tuples(st.just("clear"), _key),
    st.tuples(st.just("tick"), st.integers(0, 12)),
    st.tuples(st.just("sweep")),
    st.tuples(st.just("restore")),
)


def _timeline(ops: list[tuple[Any, ...]], kind: str) -> None:
    with tempfile.TemporaryDirectory(prefix="gic-ttl-") as tmp:
        stores: list[KVStore] = []

        def store() -> KVStore:
            made: KVStore = (
                InMemoryStore()
                if kind == "memory"
                else LmdbStore(f"{tmp}/lmdb-{len(stores)}", map_size=1 << 24)
            )
            stores.append(made)
            return made

        storage = TestingChangelogStorage()
        writer = TestingChangelogWriter(storage)
        backend = _backend(store(), writer)
        now = 0
        values: dict[Any, tuple[int, int]] = {}  # key -> (value, deadline)
        maps: dict[tuple[Any, str], tuple[int, int]] = {}
        lists: dict[Any, list[tuple[int, int]]] = {}
        try:
            for op in ops:
                _at(backend, now)
                v = backend.value_state("v", TEN)
                m = backend.map_state("m", TEN)
                lst = backend.list_state("l", TEN)
                name = op[0]
                if name == "set":
                    v.set(op[1], op[2])
                    values[op[1]] = (op[2], now + 10)
                elif name == "put":
                    m.put(op[1], op[2], op[3])
                    maps[(op[1], op[2])] = (op[3], now + 10)
                elif name == "append":
                    lst.append(op[1], op[2])
                    lists.setdefault(op[1], []).append((op[2], now + 10))
                elif name == "clear":
                    v.clear(op[1])
                    values.pop(op[1], None)
                elif name == "tick":
                    now += op[1]
                elif name == "sweep":
                    due = sum(1 for _, d in values.values() if d <= now)
                    due += sum(1 for _, d in maps.values() if d <= now)
                    due += sum(1 for els in lists.values() for _, d in els if d <= now)
                    assert backend.expire() == due
                    values = {k: e for k, e in values.items() if e[1] > now}
                    maps = {k: e for k, e in maps.items() if e[1] > now}
                    lists = {k: [e for e in els if e[1] > now] for k, els in lists.items()}
                    # nothing expired is left in the store
                    stored = len([k for k in _entries(backend) if k[:1] in (b"V", b"M")])
                    assert stored == len(values) + len(maps)
                elif name == "restore":
                    states = backend.checkpoint().result()
                    backend = _backend(store(), TestingChangelogWriter(storage))
                    backend.restore(states, StoreResolver(), reader=writer.read_changes)
                _at(backend, now)
                v = backend.value_state("v", TEN)
                m = backend.map_state("m", TEN)
                lst = backend.list_state("l", TEN)
                for key in KEYS:
                    live = values.get(key)
                    assert v.get(key) == (live[0] if live and live[1] > now else None)
                    want = sorted((u, x) for (k, u), (x, d) in maps.items() if k == key and d > now)
                    assert sorted(m.items(key)) == want
                    assert lst.get(key) == [x for x, d in lists.get(key, []) if d > now]
        finally:
            for made in stores:
                made.close()


class TestTimelinesAgainstModel:
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(OPS, max_size=40))
    def test_memory_store(self, ops: list[tuple[Any, ...]]) -> None:
        _timeline(ops, "memory")

    @settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(OPS, max_size=40))
    def test_lmdb_store(self, ops: list[tuple[Any, ...]]) -> None:
        _timeline(ops, "lmdb")
