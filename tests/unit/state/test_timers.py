"""Timers as keyed state: register / delete / list / clear, due scans in time order,
popping, and -- against a plain in-memory model -- random timelines of registers,
deletes, firings, checkpoints, materializations and restores."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gic_runtime.errors import StateError
from gic_runtime.event_time import BatchTime
from gic_runtime.processing.firing import due_now, fired_table
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.keys import KIND_DUE, KIND_TIMER, parse_store_key
from gic_runtime.state.lmdb_store import LmdbStore
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.state.snapshot import upload_snapshot
from gic_runtime.state.stores import KVStore
from gic_runtime.state.timers import Timer, from_micros, to_micros
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.uri import StoreResolver
from gic_runtime.testing.changelog_fakes import TestingChangelogStorage, TestingChangelogWriter

MakeStore = Callable[[], KVStore]
B = 4
KEYS = ["a", "b", 7, -3, b"raw", ("t", 1)]


def _backend(store: KVStore, writer: TestingChangelogWriter | None = None) -> KeyedStateBackend:
    return KeyedStateBackend(range(B), B, store, writer or TestingChangelogWriter())


class TestTimeValues:
    def test_datetimes_and_micros(self) -> None:
        at = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
        micros = to_micros(at)
        assert from_micros(micros) == at
        assert to_micros(at.replace(tzinfo=None)) == micros  # naive means UTC
        assert to_micros(at.astimezone(timezone(timedelta(hours=5)))) == micros
        assert to_micros(micros) == micros
        assert to_micros(-5) == -5

    @pytest.mark.parametrize("bad", [1.5, "2026-01-01", True, None, 1 << 62])
    def test_refused(self, bad: Any) -> None:
        with pytest.raises(StateError, match="timer time"):
            to_micros(bad)


class TestTimerState:
    def test_register_list_delete(self, make_store: MakeStore) -> None:
        timers = _backend(make_store()).timer_state()
        timers.register("a", 300)
        timers.register("a", 100, "processing")
        timers.register("a", -20)
        timers.register("a", 300)  # a set: registered once
        timers.register("b", 5)
        assert timers.list("a") == [
            Timer(-20, "event"),
            Timer(100, "processing"),
            Timer(300, "event"),
        ]
        assert timers.list("a", "processing") == [Timer(100, "processing")]
        timers.delete("a", 300)
        timers.delete("a", 999)  # absent: no-op
        assert timers.list("a") == [Timer(-20, "event"), Timer(100, "processing")]
        assert timers.clear("a", "event") == 1
        assert timers.list("a") == [Timer(100, "processing")]
        assert timers.list("b") == [Timer(5, "event")]

    def test_bad_domain(self, make_store: MakeStore) -> None:
        timers = _backend(make_store()).timer_state()
        with pytest.raises(StateError, match="neither 'event' nor 'processing'"):
            timers.register("a", 1, "wall")

    def test_due_in_time_order_and_pop(self, make_store: MakeStore) -> None:
        backend = _backend(make_store())
        timers = backend.timer_state()
        for i, key in enumerate(KEYS):
            timers.register(key, 1000 - i * 100)
            timers.register(key, 10_000 + i, "processing")
        due = timers.due(range(B), "event", 800)
        assert [d.at_us for d in due] == [500, 600, 700, 800]
        assert timers.due(range(B), "event", None) == []
        popped = timers.pop(due[0])
        assert popped == KEYS[5]
        assert timers.pop(due[0]) is None  # gone: never fires twice
        assert timers.list(KEYS[5], "event") == []
        assert [d.at_us for d in timers.due(range(B), "event", 800)] == [600, 700, 800]

    def test_entries_come_in_pairs_and_only_timers_are_a_state(self, make_store: MakeStore) -> None:
        backend = _backend(make_store())
        backend.timer_state().register(("t", 1), 42, "processing")
        bucket = backend.route(("t", 1))
        with backend.store.snapshot_items(bucket) as view:
            entries = [k for k, _ in view]
        assert sorted(k[:1] for k in entries) == [KIND_DUE, KIND_TIMER]
        timer_entry = next(k for k in entries if k[:1] == KIND_TIMER)
        parsed = parse_store_key(timer_entry)
        assert (parsed.name, parsed.user_key) == ("processing", b"\x2a")
        with pytest.raises(StateError, match="unknown state kind"):
            parse_store_key(next(k for k in entries if k[:1] == KIND_DUE))

    def test_extreme_times_order(self, make_store: MakeStore) -> None:
        timers = _backend(make_store()).timer_state()
        times = [-(1 << 61), -1, 0, 1, 1 << 61]
        for t in reversed(times):
            timers.register("a", t)
        assert [d.at_us for d in timers.due(range(B), "event", 1 << 61)] == times
        assert [d.at_us for d in timers.due(range(B), "event", 0)] == times[:3]


class TestFiring:
    def test_both_domains_fire_in_time_order(self, make_store: MakeStore) -> None:
        backend = _backend(make_store())
        timers = backend.timer_state()
        timers.register("a", 50)
        timers.register("b", 20, "processing")
        timers.register("a", 70, "processing")
        timers.register("b", 90)  # past the watermark: stays
        fired = list(due_now(backend, BatchTime(3, processing_time_us=80, watermark_us=60)))
        assert fired == [("b", Timer(20, "processing")), ("a", Timer(50, "event")),
                         ("a", Timer(70, "processing"))]  # fmt: skip
        assert timers.list("b") == [Timer(90, "event")]
        table = fired_table(fired)
        assert table.column_names == ["key", "domain", "at"]
        assert table.column("at")[0].as_py() == from_micros(20)

    def test_no_watermark_fires_no_event_timer(self, make_store: MakeStore) -> None:
        backend = _backend(make_store())
        backend.timer_state().register("a", -(10**12))
        assert list(due_now(backend, BatchTime(0, processing_time_us=10, watermark_us=None))) == []

    def test_a_handler_deleting_a_later_due_timer_stops_it(self, make_store: MakeStore) -> None:
        backend = _backend(make_store())
        timers = backend.timer_state()
        timers.register("a", 1)
        timers.register("a", 2)
        seen = []
        for key, timer in due_now(backend, BatchTime(0, 0, watermark_us=5)):
            seen.append(timer.at_us)
            timers.delete(key, 2)
            timers.register(key, 3)  # due already, but waits for the next batch
        assert seen == [1]
        assert timers.list("a") == [Timer(3, "event")]


# --- random timelines against a model ---------------------------------------------------

_key = st.sampled_from(KEYS)
_time = st.integers(-50, 50)
_domain = st.sampled_from(["event", "processing"])
OPS = st.one_of(
    st.tuples(st.just("register"), _key, _time, _domain),
    st.tuples(st.just("delete"), _key, _time, _domain),
    st.tuples(st.just("clear"), _key, st.sampled_from([None, "event", "processing"])),
    st.tuples(st.just("fire"), _time, _time),
    st.tuples(st.just("checkpoint")),
    st.tuples(st.just("materialize")),
    st.tuples(st.just("restore")),
    st.tuples(st.just("crash")),
)


class _Harness:
    """A backend with real snapshots on local storage, the changelog in memory, and the
    model: ``{(key, domain, at)}`` as of now and as of the last checkpoint."""

    def __init__(self, tmp: str, kind: str) -> None:
        self.tmp, self.kind = tmp, kind
        objects = LocalObjectStore(f"{tmp}/objects")
        self.root = objects.root_uri
        self.resolver = StoreResolver()
        self.resolver.register(objects)
        self.storage = TestingChangelogStorage()
        self.stores: list[KVStore] = []
        writer = TestingChangelogWriter(self.storage)
        self.reader = writer.read_changes
        self.backend = _backend(self._store(), writer)
        self.states = self.backend.checkpoint().result()
        self.model: set[tuple[Any, str, int]] = set()
        self.committed: set[tuple[Any, str, int]] = set()
        self.fired_total: list[tuple[Any, str, int]] = []

    def _store(self) -> KVStore:
        store: KVStore = (
            InMemoryStore()
            if self.kind == "memory"
            else LmdbStore(f"{self.tmp}/lmdb-{len(self.stores)}", map_size=1 << 24)
        )
        self.stores.append(store)
        return store

    def apply(self, op: tuple[Any, ...]) -> None:
        timers = self.backend.timer_state()
        name = op[0]
        if name == "register":
            _, key, at, domain = op
            timers.register(key, at, domain)
            self.model.add((key, domain, at))
        elif name == "delete":
            _, key, at, domain = op
            timers.delete(key, at, domain)
            self.model.discard((key, domain, at))
        elif name == "clear":
            _, key, domain = op
            gone = {t for t in self.model if t[0] == key and domain in (None, t[1])}
            assert timers.clear(key, domain) == len(gone)
            self.model -= gone
        elif name == "fire":
            _, watermark, now = op
            expected = sorted(
                (t for t in self.model if t[2] <= (watermark if t[1] == "event" else now)),
                key=lambda t: (t[2], t[1]),
            )
            fired = [
                (key, t.domain, t.at_us)
                for key, t in due_now(self.backend, BatchTime(0, now, watermark))
            ]
            assert sorted(fired, key=repr) == sorted(expected, key=repr)
            assert [(t[2], t[1]) for t in fired] == [(t[2], t[1]) for t in expected]
            self.model -= set(fired)
        elif name == "checkpoint":
            self.states = self.backend.checkpoint().result()
            self.committed = set(self.model)
        elif name == "materialize":
            for bucket in range(B):
                mv = self.backend.materialization_view(bucket)
                with mv.view as items:
                    handle = upload_snapshot(
                        self.resolver,
                        f"{self.root}/snap-{bucket}-{uuid.uuid4().hex}",
                        items,
                        bucket=bucket,
                        seq=mv.seq,
                    )
                self.backend.on_materialized(bucket, handle)
        elif name in ("restore", "crash"):
            # "restore": a fresh process from the last checkpoint; "crash": the same,
            # after uncommitted changes were made (they must vanish).
            self.states = self.backend.checkpoint().result() if name == "restore" else self.states
            if name == "restore":
                self.committed = set(self.model)
            self.backend = _backend(self._store(), TestingChangelogWriter(self.storage))
            self.backend.restore(self.states, self.resolver, reader=self.reader)
            self.model = set(self.committed)
        self.check()

    def check(self) -> None:
        timers = self.backend.timer_state()
        for key in KEYS:
            want = sorted((at, d) for k, d, at in self.model if k == key)
            assert [(t.at_us, t.domain) for t in timers.list(key)] == want
        everything = timers.due(range(B), "event", 1 << 61) + timers.due(
            range(B), "processing", 1 << 61
        )
        assert len(everything) == len(self.model)  # due entries exactly mirror timers

    def close(self) -> None:
        for store in self.stores:
            store.close()


def _timeline(ops: list[tuple[Any, ...]], kind: str) -> None:
    with tempfile.TemporaryDirectory(prefix="gic-timers-") as tmp:
        harness = _Harness(tmp, kind)
        try:
            for op in ops:
                harness.apply(op)
        finally:
            harness.close()


class TestTimelinesAgainstModel:
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(OPS, max_size=40))
    def test_memory_store(self, ops: list[tuple[Any, ...]]) -> None:
        _timeline(ops, "memory")

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(OPS, max_size=40))
    def test_lmdb_store(self, ops: list[tuple[Any, ...]]) -> None:
        _timeline(ops, "lmdb")
