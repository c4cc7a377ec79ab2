"""Rows of state: canonical savepoint -> rows (JSON and msgpack) -> canonical savepoint,
with every kind (values, maps, lists, timers, TTLs), and the refusal of rows that do
not fit, before anything is written."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gic_runtime.errors import StateError
from gic_runtime.event_time import BatchTime
from gic_runtime.savepoint.canonical import write_canonical_savepoint
from gic_runtime.savepoint.canonical_import import restore_from_canonical
from gic_runtime.savepoint.state_rows import StateRowError, canonical_rows, user_table
from gic_runtime.savepoint.state_source import bucket_rows, open_state_source
from gic_runtime.savepoint.state_write import discard, finish, prepare_target, write_buckets
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.state.ttl import TTL
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.uri import StoreResolver
from gic_runtime.testing.changelog_fakes import TestingChangelogWriter

KEYS: list[Any] = ["alice", "bob", 7, ("t", 2), b"\x01"]


def _backend(num_buckets: int) -> KeyedStateBackend:
    return KeyedStateBackend(
        range(num_buckets), num_buckets, InMemoryStore(), TestingChangelogWriter()
    )


def _filled() -> KeyedStateBackend:
    backend = _backend(4)
    backend.set_batch_time(BatchTime(0, 1_000, None))
    for i, key in enumerate(KEYS):
        backend.value_state("count").set(key, i)
        backend.map_state("seen").put(key, ("page", i), {"n": i, 1: b"x"})
        backend.list_state("events").extend(key, [i, str(i), 1.5])
        backend.value_state("recent", TTL(500)).set(key, i)
        backend.list_state("clicks", TTL(50, "event")).extend(key, [i])
        backend.timer_state().register(key, 2_000 + i)
    return backend


def _read(resolver: StoreResolver, uri: str, **types: pa.DataType) -> list[dict[str, Any]]:
    source = open_state_source(resolver, uri)
    rows: list[dict[str, Any]] = []
    for b in source.buckets:
        for table in bucket_rows(resolver, b, InMemoryStore):
            rows += user_table(table, types=types).to_pylist()
    return rows


def _write(resolver: StoreResolver, uri: str, rows: list[dict[str, Any]], n: int) -> None:
    prepare_target(resolver, uri)
    table = canonical_rows(rows, n)
    files = write_buckets(resolver, uri, n, [table.sort_by("bucket")])
    finish(resolver, uri, n, files)


def _comparable(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted(
        tuple(
            r[c]
            for c in (
                "state",
                "kind",
                "key",
                "user_key",
                "index",
                "value",
                "expires_us",
                "ttl_by",
                "ttl_us",
            )
        )
        for r in rows
    )


def test_rows_show_every_kind(resolver: StoreResolver, local_store: LocalObjectStore) -> None:
    uri = local_store.uri_for("sp")
    write_canonical_savepoint(_filled(), uri, resolver)
    rows = _read(resolver, uri)
    alice = {(r["state"], r["kind"], r["user_key"], r["index"]): r for r in rows
             if r["key"] == '"alice"'}  # fmt: skip
    assert alice["count", "value", None, None]["value"] == "0"
    seen = alice["seen", "map", '["page",0]', None]
    assert json.loads(seen["value"]) == {"$map": [["n", 0], [1, {"$bytes": "eA=="}]]}
    assert [alice["events", "list", None, i]["value"] for i in range(3)] == ["0", '"0"', "1.5"]
    recent = alice["recent", "value", None, None]
    assert (recent["expires_us"], recent["ttl_by"], recent["ttl_us"]) == (1_500, "processing", 500)
    clicks = alice["clicks", "list", None, 0]
    assert (clicks["expires_us"], clicks["ttl_by"], clicks["ttl_us"]) == (None, "event", 50)
    timer = alice["event", "timer", "2000", None]
    assert (timer["value"], timer["value_msgpack"]) == (None, None)
    assert {r["key"] for r in rows} == {'"alice"', '"bob"', "7", '["t",2]', '{"$bytes":"AQ=="}'}
    assert not any(r["kind"] not in ("value", "map", "list", "timer") for r in rows)


def test_typed_decoding_and_its_refusal(
    resolver: StoreResolver, local_store: LocalObjectStore
) -> None:
    backend = _backend(4)
    for i, key in enumerate(["a", "b"]):
        backend.value_state("count").set(key, i)
    uri = local_store.uri_for("sp")
    write_canonical_savepoint(backend, uri, resolver)
    rows = _read(resolver, uri, key=pa.string(), value=pa.int64())
    assert sorted((r["key"], r["value"]) for r in rows) == [("a", 0), ("b", 1)]
    with pytest.raises(StateError, match=r"state .count.*does not decode as double"):
        _read(resolver, uri, key=pa.float64())


@pytest.mark.parametrize("target_buckets", [4, 3])
def test_read_write_read_round_trip(
    resolver: StoreResolver, local_store: LocalObjectStore, target_buckets: int
) -> None:
    source = _filled()
    write_canonical_savepoint(source, local_store.uri_for("a"), resolver)
    rows = _read(resolver, local_store.uri_for("a"))
    _write(resolver, local_store.uri_for("b"), rows, target_buckets)
    assert _comparable(_read(resolver, local_store.uri_for("b"))) == _comparable(rows)
    target = _backend(target_buckets)
    restore_from_canonical(target, local_store.uri_for("b"), resolver)
    for key in KEYS:
        assert target.value_state("count").get(key) == source.value_state("count").get(key)
        assert target.list_state("events").get(key) == source.list_state("events").get(key)
        assert target.timer_state().list(key) == source.timer_state().list(key)


ROWS = st.lists(
    st.tuples(
        st.sampled_from(["count", "seen", "events"]),
        st.one_of(st.text(max_size=5), st.integers(-(2**63), 2**63 - 1)),
        st.one_of(
            st.integers(-(2**63), 2**63 - 1),
            st.text(max_size=4),
            st.lists(st.booleans(), max_size=2),
        ),
    ),
    max_size=12,
)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ROWS, st.integers(1, 5))
def test_written_rows_read_back_equal(
    resolver: StoreResolver, local_store: LocalObjectStore, spec: list[Any], n: int
) -> None:
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for state, key, value in spec:
        kind = {"count": "value", "seen": "map", "events": "list"}[state]
        ident = (state, json.dumps(key), 0 if kind == "list" else None)
        rows[ident] = {
            "state": state,
            "kind": kind,
            "key": json.dumps(key),
            "user_key": '"u"' if kind == "map" else None,
            "index": 0 if kind == "list" else None,
            "value": json.dumps(value),
        }
    uri = local_store.uri_for(f"p-{len(list(local_store.root.glob('p-*')))}")
    _write(resolver, uri, list(rows.values()), n)
    back = {
        (r["state"], json.loads(r["key"]), r["index"]): json.loads(r["value"])
        for r in _read(resolver, uri)
    }
    assert back == {(s, json.loads(k), i): json.loads(r["value"]) for (s, k, i), r in rows.items()}


GOOD = {"state": "count", "kind": "value", "key": '"alice"', "value": "1"}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"kind": "set"}, "unknown kind; give one of value, map, list, timer"),
        ({"kind": "map"}, "a map row needs its entry's user key"),
        ({"kind": "list"}, "a list row needs its element's position"),
        ({"key": "alice"}, "is not JSON text"),
        ({"key": '{"a": 1}'}, "cannot route a key of type dict"),
        ({"key": str(2**63)}, "does not fit in a signed 64-bit integer"),
        ({"key": None}, "key is missing"),
        ({"value": None}, "value is missing"),
        ({"ttl_by": "wall", "ttl_us": 5}, "give ttl_by 'processing' or 'event'"),
        ({"ttl_by": "event", "ttl_us": 0}, "positive number of microseconds"),
        ({"ttl_by": "processing", "ttl_us": 5}, "needs its deadline: give expires_us"),
        ({"expires_us": 5}, "expires_us without a TTL"),
        ({"kind": "timer", "state": "wall", "user_key": "5", "value": None}, "'event' or"),
        ({"kind": "timer", "state": "event", "user_key": '"x"', "value": None}, "integer micro"),
        ({"kind": "timer", "state": "event", "user_key": "5"}, "a timer has no value"),
        ({"user_key": '"u"'}, "a value row has no user key"),
    ],
)
def test_rows_that_do_not_fit_are_refused(change: dict[str, Any], says: str) -> None:
    with pytest.raises(StateRowError, match=says) as caught:
        canonical_rows([{**GOOD, **change}], 4)
    assert str(caught.value).startswith("[gic state row] state row (state ")


@pytest.mark.parametrize(
    ("rows", "says"),
    [
        ([GOOD, GOOD], "value 'count' of key \"alice\": appears twice"),
        ([{**GOOD, "kind": "list", "index": 1}] * 2, "position 1 appears twice"),
        (
            [
                {**GOOD, "kind": "list", "index": 0},
                {**GOOD, "kind": "list", "index": 1, "ttl_by": "event", "ttl_us": 9},
            ],
            "mix rows with and without a TTL",
        ),
    ],
)
def test_duplicates_fail_before_the_index_is_written(
    resolver: StoreResolver, local_store: LocalObjectStore, rows: list[Any], says: str
) -> None:
    uri = local_store.uri_for("dup")
    with pytest.raises(StateRowError, match=says):
        _write(resolver, uri, rows, 4)
    assert not (local_store.root / "dup" / "_canonical.json").exists()
    assert discard(resolver, uri, 4) == 0  # nothing of that bucket was written


def test_a_target_holding_files_is_refused(
    resolver: StoreResolver, local_store: LocalObjectStore
) -> None:
    local_store.put("full/x", b"1")
    with pytest.raises(StateError, match="already holds files"):
        prepare_target(resolver, local_store.uri_for("full"))


def test_typed_columns_are_values() -> None:
    table = canonical_rows(
        [{"state": "s", "kind": "value", "key": {"_1": "a", "_2": 1}, "value": [1, 2]}],
        4,
        typed=("key", "value"),
    )
    [row] = table.to_pylist()
    assert row["key"] == b"\x92\xa1a\x01"  # the tuple ("a", 1)
    with pytest.raises(StateRowError, match="not JSON text; name the column in typed"):
        canonical_rows([{**GOOD, "value": 5}], 4)
