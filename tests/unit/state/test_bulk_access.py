"""Bulk value-state access: locate keys once (buckets computed here or given by the
routing side and spot-checked), read and write them per bucket run, dual-written and
restorable like single changes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gic_runtime.changelog.records import Op
from gic_runtime.errors import StateError
from gic_runtime.state.backend import BUCKET_SPOT_CHECKS, KeyedStateBackend
from gic_runtime.state.keys import KIND_VALUE, bucket_for, decode_key, encode, state_prefix
from gic_runtime.state.states import Located
from gic_runtime.state.stores import KVStore
from gic_runtime.storage.uri import StoreResolver
from gic_runtime.testing.changelog_fakes import TestingChangelogStorage, TestingChangelogWriter

B = 8
MakeStore = Callable[[], KVStore]
KEYS = [f"k{i}" for i in range(40)] + list(range(-5, 35))


def _backend(store: KVStore, writer: TestingChangelogWriter | None = None) -> KeyedStateBackend:
    return KeyedStateBackend(range(B), B, store, writer or TestingChangelogWriter())


class TestLocated:
    def test_runs_of_one_bucket(self) -> None:
        located = Located([b"a", b"b", b"c", b"d", b"e"], [3, 3, 1, 3, 3])
        assert located.runs == ((3, 0, 2), (1, 2, 3), (3, 3, 5))
        assert list(located) == [(3, b"a"), (3, b"b"), (1, b"c"), (3, b"d"), (3, b"e")]
        assert len(located) == 5
        assert Located([], []).runs == ()


class TestReadModifyWrite:
    @pytest.mark.parametrize("given_buckets", [False, True])
    def test_matches_single_key_calls(self, make_store: MakeStore, given_buckets: bool) -> None:
        bulk, single = _backend(make_store()), _backend(make_store())
        keys = sorted(KEYS, key=lambda k: (bucket_for(k, B), repr(k)))
        buckets = [bucket_for(k, B) for k in keys] if given_buckets else None
        for round_ in range(3):
            state = bulk.value_state("v")
            located = state.locate_many(keys, buckets)
            old = state.get_located(located, default=0)
            assert old == [single.value_state("v").get(k, 0) for k in keys]
            new = [o + round_ + i for i, o in enumerate(old)]
            assert state.set_located(located, new) == len(keys)
            for key, value in zip(keys, new, strict=True):
                single.value_state("v").set(key, value)
        assert bulk.value_state("v").get_many(keys) == single.value_state("v").get_many(keys)
        for b in range(B):
            prefix = state_prefix(KIND_VALUE, "v")
            assert bulk.store.scan(b, prefix) == single.store.scan(b, prefix)

    def test_unsorted_keys_work(self, make_store: MakeStore) -> None:
        backend = _backend(make_store())
        state = backend.value_state("v")
        keys = KEYS[::-1]
        located = state.locate_many(keys)
        assert len(located.runs) > B  # buckets interleave
        state.set_located(located, [str(k) for k in keys])
        assert state.get_many(keys) == [str(k) for k in keys]
        assert [skey for _, skey in located] == [
            state_prefix(KIND_VALUE, "v") + encode(k) for k in keys
        ]

    def test_value_count_must_match(self, make_store: MakeStore) -> None:
        state = _backend(make_store()).value_state("v")
        located = state.locate_many(["a", "b"])
        with pytest.raises(StateError, match="1 values for 2 located keys"):
            state.set_located(located, [1])


class TestGivenBuckets:
    def test_wrong_bucket_in_the_sample_is_an_error(self, make_store: MakeStore) -> None:
        state = _backend(make_store()).value_state("v")
        keys = KEYS[:20]
        buckets = [bucket_for(k, B) for k in keys]
        buckets[-1] = (buckets[-1] + 1) % B  # the last key is always checked
        with pytest.raises(StateError, match=r"key 'k19' \(str\) came with bucket .* hashes"):
            state.locate_many(keys, buckets)

    def test_every_sampled_position_is_checked(self, make_store: MakeStore) -> None:
        backend = _backend(make_store())
        keys = KEYS[:50]
        n = len(keys)
        sampled = {j * (n - 1) // (BUCKET_SPOT_CHECKS - 1) for j in range(BUCKET_SPOT_CHECKS)}
        for i in sorted(sampled):
            buckets = [bucket_for(k, B) for k in keys]
            buckets[i] = (buckets[i] + 1) % B
            with pytest.raises(StateError, match="routing side hashes keys differently"):
                backend.check_buckets(keys, buckets)

    def test_buckets_outside_the_range_are_an_error(self, make_store: MakeStore) -> None:
        backend = KeyedStateBackend(range(0, 4), B, make_store(), TestingChangelogWriter())
        with pytest.raises(StateError, match=r"buckets \[2, 6\], outside .*\[0, 4\)"):
            backend.check_buckets(["a", "b"], [2, 6])
        with pytest.raises(StateError, match="3 buckets given for 2 keys"):
            backend.check_buckets(["a", "b"], [0, 1, 2])
        backend.check_buckets([], [])


class TestWriteMany:
    def test_dual_write_and_restore(self, make_store: MakeStore) -> None:
        storage = TestingChangelogStorage()
        writer = TestingChangelogWriter(storage)
        backend = _backend(make_store(), writer)
        backend.value_state("v").set("a", 1)
        b = bucket_for("a", B)
        prefix = state_prefix(KIND_VALUE, "v")
        keys = [prefix + encode(k) for k in ("a", "x", "y")]
        assert backend.write_many(b, Op.PUT, keys, [encode(2), encode(3), encode(4)]) == 3
        assert backend.write_many(b, Op.DELETE, keys[1:2], [b""]) == 1
        assert backend.write_many(b, Op.PUT, [], []) == 0
        assert writer.appended == 5
        assert backend.seq(b) == 5
        states = backend.checkpoint().result()

        restored = _backend(make_store(), TestingChangelogWriter(storage))
        restored.restore(states, StoreResolver(), reader=writer.read_changes)
        assert restored.store.scan(b, prefix) == backend.store.scan(b, prefix)
        assert restored.store.get_many(b, keys) == [encode(2), None, encode(4)]

    def test_lengths_must_match(self, make_store: MakeStore) -> None:
        backend = _backend(make_store())
        with pytest.raises(StateError, match="1 values for 2 keys"):
            backend.write_many(0, Op.PUT, [b"a", b"b"], [b"1"])


class TestMapEntries:
    @pytest.mark.parametrize("given_buckets", [False, True])
    def test_match_single_entry_calls(self, make_store: MakeStore, given_buckets: bool) -> None:
        bulk, single = _backend(make_store()), _backend(make_store())
        pairs = sorted(
            ((k, u) for k in KEYS[::3] for u in (0, 7, "x")),
            key=lambda p: (bucket_for(p[0], B), repr(p)),
        )
        keys, users = [k for k, _ in pairs], [u for _, u in pairs]
        buckets = [bucket_for(k, B) for k in keys] if given_buckets else None
        for round_ in range(2):
            state = bulk.map_state("m")
            located = state.locate_entries(keys, users, buckets)
            old = state.get_located(located, default=0)
            assert old == [single.map_state("m").get(k, u, 0) for k, u in pairs]
            new = [o + round_ + i for i, o in enumerate(old)]
            state.set_located(located, new)
            for (k, u), value in zip(pairs, new, strict=True):
                single.map_state("m").put(k, u, value)
        gone = pairs[::2]
        located = bulk.map_state("m").locate_entries([k for k, _ in gone], [u for _, u in gone])
        assert bulk.map_state("m").remove_located(located) == len(gone)
        for k, u in gone:
            single.map_state("m").remove(k, u)
        for key in set(keys):
            assert bulk.map_state("m").items(key) == single.map_state("m").items(key)

    def test_lengths_must_match(self, make_store: MakeStore) -> None:
        with pytest.raises(StateError, match="1 user keys for 2 keys"):
            _backend(make_store()).map_state("m").locate_entries(["a", "b"], [1])


class TestBulkTimers:
    @pytest.mark.parametrize("given_buckets", [False, True])
    def test_register_and_pop_many_match_one_at_a_time(
        self, make_store: MakeStore, given_buckets: bool
    ) -> None:
        bulk, single = _backend(make_store()), _backend(make_store())
        keys = KEYS[::2]
        ats = [(i * 37) % 11 for i in range(len(keys))]
        buckets = [bucket_for(k, B) for k in keys] if given_buckets else None
        assert bulk.timer_state().register_many(keys, ats, buckets=buckets) == len(keys)
        for key, at in zip(keys, ats, strict=True):
            single.timer_state().register(key, at)
        for b in range(B):
            assert bulk.store.scan(b, b"") == single.store.scan(b, b"")
        due = bulk.timer_state().due(range(B), "event", 5)
        gone = next(d for d in due if d.at_us == 3)
        for backend in (bulk, single):  # deleted after the scan: must not fire
            backend.timer_state().delete(decode_key(gone.key), 3)
        popped = bulk.timer_state().pop_many(due)
        expected = [(d, single.timer_state().pop(d)) for d in due]
        assert [(d, k) for d, k in popped] == [(d, k) for d, k in expected if k is not None]
        assert gone not in [d for d, _ in popped]
        assert [d.at_us for d, _ in popped] == sorted(d.at_us for d, _ in popped)
        for b in range(B):
            assert bulk.store.scan(b, b"") == single.store.scan(b, b"")
        assert bulk.timer_state().pop_many(due) == []  # never twice

    def test_pop_due_runs_pops_what_due_and_pop_many_pop(self, make_store: MakeStore) -> None:
        """The bulk pop without lookups pops the same timers as the scan and
        ``pop_many``, leaves the same store (later timers and the other domain kept),
        and pops nothing twice."""
        bulk, single = _backend(make_store()), _backend(make_store())
        keys = KEYS[::2]
        ats = [(i * 37) % 11 for i in range(len(keys))]
        for backend in (bulk, single):
            backend.timer_state().register_many(keys, ats)
            backend.timer_state().register_many(keys[:5], [1] * 5, "processing")
        runs = bulk.timer_state().pop_due_runs(range(B), "event", 5)
        expected = single.timer_state().pop_many(single.timer_state().due(range(B), "event", 5))
        popped = sorted(
            (at, run.bucket, key) for run in runs for at, key in zip(run.ats, run.keys, strict=True)
        )
        assert popped == [(d.at_us, d.bucket, d.key) for d, _ in expected]
        assert len(popped) == sum(1 for at in ats if at <= 5) > 0
        for run in runs:
            assert run.keys == sorted(run.keys) and all(
                bucket_for(decode_key(k), B) == run.bucket for k in run.keys
            )
        for b in range(B):
            assert bulk.store.scan(b, b"") == single.store.scan(b, b"")
        assert bulk.timer_state().pop_due_runs(range(B), "event", 5) == []  # never twice
        assert bulk.timer_state().pop_due_runs(range(B), "event", None) == []
        assert len(bulk.timer_state().list(keys[0], "processing")) == 1
