"""Timers through the processors: the per-key ``on_timer`` and the vectorized
``on_timers`` handlers fire after a task's rows, see the key's state, emit rows and
change state; timers without a handler are refused; aggregates fire nothing."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from gic_runtime.errors import StateError
from gic_runtime.event_time import BatchTime
from gic_runtime.processing import (
    AggregateProcessor,
    BatchProcessor,
    KeyState,
    PerKeyProcessor,
    StateAccess,
    Timer,
    count,
)
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.state.timers import from_micros
from gic_runtime.testing.changelog_fakes import TestingChangelogWriter

B = 8
OUT = pa.schema([("k", pa.string()), ("what", pa.string()), ("n", pa.int64())])


def _backend() -> KeyedStateBackend:
    return KeyedStateBackend(range(B), B, InMemoryStore(), TestingChangelogWriter())


def _rows(keys: list[str], ts: list[int]) -> pa.Table:
    return pa.table({"k": keys, "ts": ts})


def _per_key(key: str, rows: pa.Table, state: KeyState) -> list[dict[str, Any]]:
    n = state.value("n")
    n.set(n.get(0) + rows.num_rows)
    for t in rows.column("ts").to_pylist():
        state.timers.register(t + 10)
    state.timers.register(state.processing_time, "processing")
    return []


def _on_timer(key: str, timer: Timer, state: KeyState) -> list[dict[str, Any]]:
    n = state.value("n")
    out = [{"k": key, "what": f"{timer.domain}@{timer.at_us}", "n": n.get(0)}]
    if timer.domain == "event":
        n.clear()
    return out


def _collect(tables: Any) -> list[dict[str, Any]]:
    return [row for t in tables for row in t.to_pylist()]


class TestPerKey:
    def test_timers_fire_after_rows_with_the_keys_state(self) -> None:
        backend = _backend()
        proc = PerKeyProcessor("k", _per_key, OUT, _on_timer)
        assert proc.has_timers
        t0 = BatchTime(0, processing_time_us=1_000, watermark_us=None)
        assert _collect(proc(_rows(["a", "b", "a"], [1, 5, 3]), backend, 0, time=t0)) == []
        fired: list[int] = []
        # processing-time timers at the batch's processing time are due in it
        out = _collect(proc.fire_timers(backend, t0, fired.append))
        assert sorted((r["k"], r["what"], r["n"]) for r in out) == [
            ("a", "processing@1000", 2),
            ("b", "processing@1000", 1),
        ]
        assert fired == [2]
        # the watermark reaches a's timers (11, 13) but not b's (15)
        t1 = BatchTime(1, processing_time_us=2_000, watermark_us=14)
        out = _collect(proc.fire_timers(backend, t1, fired.append))
        assert [(r["k"], r["what"], r["n"]) for r in out] == [
            ("a", "event@11", 2),
            ("a", "event@13", 0),  # the first firing cleared a's count
        ]
        assert fired == [2, 2]
        timers = backend.timer_state()
        assert timers.list("a") == [] and timers.list("b") == [Timer(15, "event")]

    def test_no_handler_refuses_timers(self) -> None:
        proc = PerKeyProcessor("k", _per_key, OUT)
        assert not proc.has_timers
        with pytest.raises(StateError, match="on_timer="):
            list(proc(_rows(["a"], [1]), _backend(), 0))
        assert list(proc.fire_timers(_backend(), BatchTime(0, 0, 0))) == []

    def test_batch_time_is_visible(self) -> None:
        seen: list[Any] = []

        def look(key: str, rows: pa.Table, state: KeyState) -> None:
            seen.append((state.watermark, state.processing_time))

        proc = PerKeyProcessor("k", look, OUT)
        list(proc(_rows(["a"], [1]), _backend(), 3, time=BatchTime(3, 5_000_000, 2_000_000)))
        assert seen == [(from_micros(2_000_000), from_micros(5_000_000))]


class TestVectorized:
    def test_fired_timers_come_as_one_table(self) -> None:
        def register(table: pa.Table, states: StateAccess) -> None:
            keys = table.column("k").to_pylist()
            states.timers.register_many(keys, table.column("ts").to_pylist())

        calls: list[pa.Table] = []

        def on_timers(fired: pa.Table, states: StateAccess) -> pa.Table:
            calls.append(fired)
            keys = fired.column("key").to_pylist()
            return pa.table(
                {"k": keys, "what": fired.column("domain").to_pylist(), "n": [1] * len(keys)}
            )

        backend = _backend()
        proc = BatchProcessor("k", register, OUT, on_timers)
        list(proc(_rows(["a", "b", "c"], [30, 10, 20]), backend, 0))
        out = _collect(proc.fire_timers(backend, BatchTime(1, 0, watermark_us=25)))
        assert [r["k"] for r in out] == ["b", "c"]  # time order
        assert calls[0].column("at").to_pylist() == [from_micros(10), from_micros(20)]
        assert list(proc.fire_timers(backend, BatchTime(2, 0, watermark_us=25))) == []
        assert len(calls) == 1  # nothing due: the handler is not called


def test_aggregates_fire_nothing() -> None:
    proc = AggregateProcessor(
        "k", {"n": count()}, pa.schema([("k", pa.string()), ("n", pa.int64())])
    )
    assert not proc.has_timers
    assert list(proc.fire_timers(_backend(), BatchTime(0, 0, 0))) == []
