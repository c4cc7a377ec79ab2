"""Initial rows in a state task: split off the input by the struct column, applied
by column (one value state per column) or by a per-key function; null keys, keys
given twice and values that cannot be stored are refused with the fix."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest

from gic_runtime.errors import StateError
from gic_runtime.event_time import BatchTime
from gic_runtime.processing import KeyState
from gic_runtime.processing.initial_state import INITIAL_COLUMN, MARKER, InitialState
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.testing.changelog_fakes import TestingChangelogWriter

B = 4
TIME = BatchTime(0, 0, None)


def _backend() -> KeyedStateBackend:
    return KeyedStateBackend(range(B), B, InMemoryStore(), TestingChangelogWriter())


def _mixed(initial: list[dict[str, object] | None], keys: list[str]) -> pa.Table:
    struct = pa.struct([("count", pa.int64()), ("label", pa.string())])
    return pa.table(
        {
            "k": keys,
            "x": [None if i is not None else 1 for i in initial],
            INITIAL_COLUMN: pa.array(initial, struct),
        }
    )


def test_split_keeps_input_rows_as_they_were() -> None:
    spec = InitialState("k", {"count": "agg:count"})
    table = _mixed([{"count": 3, "label": "p"}, None, None], ["a", "b", "c"])
    rows, initial = spec.split(table)
    assert rows.column_names == ["k", "x"] and rows.column("k").to_pylist() == ["b", "c"]
    assert initial is not None
    assert initial.to_pylist() == [{"k": "a", "count": 3, "label": "p"}]
    assert spec.split(rows) == (rows, None)


def test_by_column_sets_value_states() -> None:
    backend = _backend()
    spec = InitialState("k", {"count": "agg:count", "label": "label"})
    rows = pa.table({"k": ["a", "b"], "count": [3, None], "label": ["p", "q"]})
    assert spec.apply(rows, backend, TIME) == 2
    assert backend.value_state("agg:count").get_many(["a", "b"]) == [3, None]
    assert backend.value_state("label").get_many(["a", "b"]) == ["p", "q"]


def test_refusals() -> None:
    spec = InitialState("k", {"v": "v"})
    with pytest.raises(StateError, match="null 'k'"):
        spec.apply(pa.table({"k": ["a", None], "v": [1, 2]}), _backend(), TIME)
    with pytest.raises(StateError, match="'a' appears more than once"):
        spec.apply(pa.table({"k": ["a", "a"], "v": [1, 2]}), _backend(), TIME)
    stamp = pa.array([datetime(2026, 1, 1, tzinfo=UTC)], pa.timestamp("us", tz="UTC"))
    with pytest.raises(StateError, match=r"initial state column 'v'.*cannot encode"):
        spec.apply(pa.table({"k": ["a"], "v": stamp}), _backend(), TIME)


def test_a_function_per_key() -> None:
    seen: list[tuple[str, list[int]]] = []

    def init(key: str, rows: pa.Table, state: KeyState) -> None:
        seen.append((key, rows.column("v").to_pylist()))
        state.map("m").put("first", rows.column("v")[0].as_py())

    backend = _backend()
    spec = InitialState("k", {}, init)
    rows = pa.table({"k": ["a", "b", "a"], "v": [1, 2, 3]})
    assert spec.apply(rows, backend, TIME) == 2
    assert sorted(seen) == [("a", [1, 3]), ("b", [2])]
    assert backend.map_state("m").items("a") == [("first", 1)]


def test_no_value_columns_with_a_function() -> None:
    spec = InitialState("k", {}, lambda key, rows, state: None)
    struct = pa.struct([(MARKER, pa.bool_())])
    table = pa.table({"k": ["a"], INITIAL_COLUMN: pa.array([{MARKER: True}], struct)})
    _, initial = spec.split(table)
    assert initial is not None and initial.column_names == ["k"]
