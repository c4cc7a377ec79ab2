"""AggregateProcessor over a backend: running aggregates against a reference, with each
row's bucket given by the routing side (spot-checked) or computed by the runtime."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gic_runtime.changelog.records import Op
from gic_runtime.errors import StateError
from gic_runtime.processing import (
    AggregateProcessor,
    BatchProcessor,
    PerKeyProcessor,
    aggregate_schema,
    count,
    max_,
    min_,
    sum_,
)
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.keys import bucket_for
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.state.stores import KVStore
from gic_runtime.testing.changelog_fakes import TestingChangelogWriter

B = 16
MakeStore = Callable[[], KVStore]
AGGS = {"n": count(), "total": sum_("x"), "lo": min_("x"), "hi": max_("x")}


def _processor(key_type: pa.DataType) -> AggregateProcessor:
    schema = aggregate_schema(
        pa.field("key", key_type), AGGS, pa.schema([("key", key_type), ("x", pa.int64())])
    )
    return AggregateProcessor("key", AGGS, schema)


def _batch(keys: list[Any], xs: list[int | None], key_type: pa.DataType) -> pa.Table:
    return pa.table({"key": pa.array(keys, key_type), "x": pa.array(xs, pa.int64())})


def _run(
    processor: AggregateProcessor, backend: KeyedStateBackend, table: pa.Table, with_buckets: bool
) -> dict[Any, dict[str, Any]]:
    buckets = None
    if with_buckets:
        buckets = pa.array([bucket_for(k, B) for k in table.column("key").to_pylist()], pa.int32())
    [out] = list(processor(table, backend, 1, buckets=buckets))
    assert out.schema == processor.output_schema
    return {row.pop("key"): row for row in out.to_pylist()}


def _reference(batches: list[tuple[list[Any], list[int | None]]]) -> list[dict[Any, Any]]:
    state: dict[Any, dict[str, Any]] = {}
    outputs = []
    for keys, xs in batches:
        for key, x in zip(keys, xs, strict=True):
            s = state.setdefault(key, {"n": 0, "total": None, "lo": None, "hi": None})
            s["n"] += 1
            if x is not None:
                s["total"] = x if s["total"] is None else s["total"] + x
                s["lo"] = x if s["lo"] is None else min(s["lo"], x)
                s["hi"] = x if s["hi"] is None else max(s["hi"], x)
        outputs.append({k: dict(state[k]) for k in keys})
    return outputs


BATCHES = [
    ([i % 37 for i in range(200)], [(i * 7919) % 101 - 50 for i in range(200)]),
    ([i % 53 for i in range(0, 300, 2)], [None if i % 5 == 0 else i for i in range(150)]),
    ([-1, -1, 2**40], [3, 4, 5]),
]


class TestAggregates:
    @pytest.mark.parametrize("with_buckets", [True, False])
    def test_integer_keys_match_the_reference(
        self, make_store: MakeStore, with_buckets: bool
    ) -> None:
        backend = KeyedStateBackend(range(B), B, make_store(), TestingChangelogWriter())
        processor = _processor(pa.int64())
        got = [
            _run(processor, backend, _batch(keys, xs, pa.int64()), with_buckets)
            for keys, xs in BATCHES
        ]
        assert got == _reference(BATCHES)

    def test_string_keys_and_a_user_column_named_like_the_internal_one(
        self, make_store: MakeStore
    ) -> None:
        backend = KeyedStateBackend(range(B), B, make_store(), TestingChangelogWriter())
        processor = _processor(pa.string())
        batches = [([f"w{k}" for k in keys], xs) for keys, xs in BATCHES]
        for (keys, xs), want in zip(batches, _reference(batches), strict=True):
            table = _batch(keys, xs, pa.string()).append_column("__gic_bucket", pa.array(xs))
            assert _run(processor, backend, table, with_buckets=True) == want

    def test_only_owned_buckets_are_touched(self, make_store: MakeStore) -> None:
        owned = range(4, 8)
        backend = KeyedStateBackend(owned, B, make_store(), TestingChangelogWriter())
        keys = [k for k in range(500) if bucket_for(k, B) in owned]
        _run(_processor(pa.int64()), backend, _batch(keys, [1] * len(keys), pa.int64()), True)
        assert backend.value_state("agg:n").get_many(keys) == [1] * len(keys)
        assert all(backend.seq(b) > 0 for b in owned)


def _stored(store: KVStore) -> dict[tuple[int, bytes], bytes]:
    return {(b, k): v for b in range(B) for k, v in store.scan(b, b"")}


def _replayed(writer: TestingChangelogWriter) -> dict[tuple[int, bytes], bytes]:
    """What the writer's changelog rebuilds on an empty store (only PUTs are logged)."""
    handles = writer.persist({b: 0 for b in range(B)}).result()
    out: dict[tuple[int, bytes], bytes] = {}
    for bucket, hs in handles.items():
        for handle in hs:
            for record in writer.storage.load(handle.uri):
                assert record.op == Op.PUT
                out[(bucket, record.key)] = record.value
    return out


_BATCHES = st.lists(
    st.lists(
        st.tuples(st.integers(0, 12), st.one_of(st.none(), st.integers(-3, 3))),
        min_size=1,
        max_size=30,
    ),
    min_size=1,
    max_size=6,
)


class TestOnlyChangesAreWritten:
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(batches=_BATCHES)
    def test_outputs_store_and_changelog_agree_and_only_changes_are_logged(
        self, batches: list[list[tuple[int, int | None]]]
    ) -> None:
        store = InMemoryStore()
        writer = TestingChangelogWriter()
        backend = KeyedStateBackend(range(B), B, store, writer)
        processor = _processor(pa.int64())
        plain = [([k for k, _ in rows], [x for _, x in rows]) for rows in batches]
        want = _reference(plain)
        before: dict[Any, dict[str, Any]] = {}
        for (keys, xs), expected in zip(plain, want, strict=True):
            logged = writer.appended
            assert _run(processor, backend, _batch(keys, xs, pa.int64()), True) == expected
            # one change per aggregate whose value is new or differs from the stored one
            changed = sum(
                1
                for key, values in expected.items()
                for name, value in values.items()
                if key not in before or before[key][name] is None or before[key][name] != value
            )
            assert writer.appended - logged == changed
            before.update(expected)
        # the changelog alone rebuilds what the store holds (nothing a replay needs is lost)
        assert _replayed(writer) == _stored(store)

    def test_a_maximum_that_holds_is_not_written_again(self, make_store: MakeStore) -> None:
        writer = TestingChangelogWriter()
        backend = KeyedStateBackend(range(B), B, make_store(), writer)
        processor = _processor(pa.int64())
        _run(processor, backend, _batch([1, 2], [5, 5], pa.int64()), True)
        logged = writer.appended
        out = _run(processor, backend, _batch([1, 2], [5, 9], pa.int64()), True)
        assert out == {
            1: {"n": 2, "total": 10, "lo": 5, "hi": 5},
            2: {"n": 2, "total": 14, "lo": 5, "hi": 9},
        }
        # key 1: n and total change, lo and hi hold; key 2: n, total and hi change
        assert writer.appended - logged == 5


_TEXT_ROWS = st.lists(
    st.lists(
        st.tuples(st.integers(0, 9), st.one_of(st.none(), st.text("ab\u00e9\x00", max_size=4))),
        min_size=1,
        max_size=25,
    ),
    min_size=1,
    max_size=5,
)
TEXT_AGGS = {"n": count(), "lo": min_("s"), "hi": max_("s")}


class TestVariableWidthExtremes:
    """``min``/``max`` of strings and binary (the state sweep's payloads) over batches
    that mix keys with one row and keys with several, in input tables of two chunks:
    what aggregating every row gives, nulls ignored, in byte order."""

    @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        batches=_TEXT_ROWS, binary=st.booleans(), with_buckets=st.booleans(), cut=st.integers(0, 25)
    )
    def test_they_match_the_reference_over_batches(
        self,
        batches: list[list[tuple[int, str | None]]],
        binary: bool,
        with_buckets: bool,
        cut: int,
    ) -> None:
        typ = pa.binary() if binary else pa.large_string()
        schema = aggregate_schema(
            pa.field("key", pa.int64()), TEXT_AGGS, pa.schema([("key", pa.int64()), ("s", typ)])
        )
        processor = AggregateProcessor("key", TEXT_AGGS, schema)
        backend = KeyedStateBackend(range(B), B, InMemoryStore(), TestingChangelogWriter())
        state: dict[int, dict[str, Any]] = {}
        for rows in batches:
            values = [None if v is None else (v.encode() if binary else v) for _, v in rows]
            keys = [k for k, _ in rows]
            whole = pa.table({"key": pa.array(keys, pa.int64()), "s": pa.array(values, typ)})
            at = min(cut, whole.num_rows)
            # input batches arrive in chunks: the row indices span them
            table = pa.Table.from_batches(
                [b for part in (whole.slice(0, at), whole.slice(at)) for b in part.to_batches()],
                schema=whole.schema,
            )
            for key, value in zip(keys, values, strict=True):
                s = state.setdefault(key, {"n": 0, "lo": None, "hi": None})
                s["n"] += 1
                if value is not None:
                    s["lo"] = value if s["lo"] is None else min(s["lo"], value)
                    s["hi"] = value if s["hi"] is None else max(s["hi"], value)
            assert _run(processor, backend, table, with_buckets) == {k: state[k] for k in keys}


class TestGivenBuckets:
    def test_buckets_that_disagree_with_the_runtime_fail(self, make_store: MakeStore) -> None:
        backend = KeyedStateBackend(range(B), B, make_store(), TestingChangelogWriter())
        table = _batch(list(range(50)), [1] * 50, pa.int64())
        wrong = pa.array([(bucket_for(k, B) + 1) % B for k in range(50)], pa.int32())
        with pytest.raises(StateError, match="hashes keys differently"):
            list(_processor(pa.int64())(table, backend, 1, buckets=wrong))

    def test_bucket_count_must_match_rows(self, make_store: MakeStore) -> None:
        backend = KeyedStateBackend(range(B), B, make_store(), TestingChangelogWriter())
        table = _batch([1, 2], [1, 1], pa.int64())
        with pytest.raises(StateError, match="1 buckets given for 2 rows"):
            list(_processor(pa.int64())(table, backend, 1, buckets=pa.array([0], pa.int32())))

    def test_other_processors_accept_and_ignore_them(self, make_store: MakeStore) -> None:
        backend = KeyedStateBackend(range(B), B, make_store(), TestingChangelogWriter())
        schema = pa.schema([("key", pa.int64())])
        table = _batch([1, 2], [1, 1], pa.int64())
        buckets = pa.array([0, 0], pa.int32())  # ignored: these processors route by key

        def per_key(key: Any, rows: pa.Table, state: Any) -> list[dict[str, Any]]:
            state.value("seen").set(True)
            return [{"key": key}]

        def batch(t: pa.Table, states: Any) -> pa.Table:
            return t.select(["key"])

        for processor in (
            PerKeyProcessor("key", per_key, schema),
            BatchProcessor("key", batch, schema),
        ):
            [out] = list(processor(table, backend, 1, buckets=buckets))
            assert out.column("key").to_pylist() == [1, 2]
        assert backend.value_state("seen").get_many([1, 2]) == [True, True]
