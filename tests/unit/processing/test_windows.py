"""Windows on timers: tumbling, sliding and session windows with the aggregates and with
a window function, over random batches against windows computed directly from the
rows -- each window emitted once, when the watermark reaches its close, equal to the
aggregates over its rows; rows of closed windows ignored; state freed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gic_runtime.errors import ConfigurationError, StateError
from gic_runtime.event_time import BatchTime
from gic_runtime.processing import count, max_, sum_
from gic_runtime.processing.window_specs import (
    Window,
    WindowSpec,
    session_window,
    sliding,
    tumbling,
)
from gic_runtime.processing.windows import WindowProcessor, window_schema
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.keys import bucket_for
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.state.timers import from_micros
from gic_runtime.testing.changelog_fakes import TestingChangelogWriter

B = 4
S = 1_000_000  # a second in microseconds
STAMP = pa.timestamp("us", tz="UTC")
INPUT = pa.schema([("k", pa.string()), ("ts", STAMP), ("x", pa.int64())])
AGGS = {"n": count(), "total": sum_("x"), "top": max_("x")}

Event = tuple[str, int, int]  # key, seconds, x


def _table(events: list[Event]) -> pa.Table:
    return pa.table(
        {
            "k": [k for k, _, _ in events],
            "ts": pa.array([t * S for _, t, _ in events], pa.int64()).cast(STAMP),
            "x": [x for _, _, x in events],
        },
        schema=INPUT,
    )


def _run(
    proc: WindowProcessor,
    batches: list[list[Event]],
    delay: int,
    final: bool = True,
    routed: bool = False,
) -> tuple[list[dict[str, Any]], KeyedStateBackend]:
    """Run ``batches`` as the stage would (late rows dropped, watermark advancing), then
    one batch without rows at the final watermark; ``routed``: with each row's bucket
    given, as the routing side computes it."""
    backend = KeyedStateBackend(range(B), B, InMemoryStore(), TestingChangelogWriter())
    out: list[dict[str, Any]] = []
    watermark: int | None = None
    seen: int | None = None
    for i, events in enumerate([*batches, []] if final else batches):
        time = BatchTime(i, 0, None if watermark is None else watermark * S)
        backend.set_batch_time(time)
        kept = [e for e in events if watermark is None or e[1] >= watermark]
        if kept:
            buckets = pa.array([bucket_for(k, B) for k, _, _ in kept]) if routed else None
            tables = proc(_table(kept), backend, i, buckets=buckets, time=time)
            out += [r for t in tables for r in t.to_pylist()]
        out += [r for t in proc.fire_timers(backend, time) for r in t.to_pylist()]
        if events:
            top = max(t for _, t, _ in events)
            seen = top if seen is None else max(seen, top)
            watermark = seen - delay if watermark is None else max(watermark, seen - delay)
    return out, backend


def _reference(
    spec: WindowSpec, batches: list[list[Event]], delay: int, lateness: int
) -> set[tuple[Any, ...]]:
    """Windows closed by the final watermark, from the non-late rows, computed directly."""
    rows: list[Event] = []
    watermark: int | None = None
    seen: int | None = None
    for events in batches:
        rows += [e for e in events if watermark is None or e[1] >= watermark]
        if events:
            top = max(t for _, t, _ in events)
            seen = top if seen is None else max(seen, top)
            watermark = seen - delay if watermark is None else max(watermark, seen - delay)
    size, every = spec.size_us // S, spec.every_us // S
    windows: dict[tuple[str, int, int], list[int]] = {}
    if spec.kind == "session":
        for key in {k for k, _, _ in rows}:
            mine = sorted((t, x) for k, t, x in rows if k == key)
            start, last, xs = mine[0][0], mine[0][0], [mine[0][1]]
            for t, x in mine[1:]:
                if t > last + size:
                    windows[(key, start, last + size)] = xs
                    start, xs = t, []
                last = t
                xs.append(x)
            windows[(key, start, last + size)] = xs
    else:
        for k, t, x in rows:
            start = t - t % every
            while start > t - size:
                windows.setdefault((k, start, start + size), []).append(x)
                start -= every
    final = watermark if watermark is not None else -(10**9)
    # a window closes once the watermark reaches its end (a session: passes it)
    margin = 1 if spec.kind == "session" else 0
    return {
        (k, s, e, len(xs), sum(xs), max(xs))
        for (k, s, e), xs in windows.items()
        if e + lateness + margin <= final
    }


def _got(out: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return [
        (
            r["k"],
            int((r["window_start"] - epoch).total_seconds()),
            int((r["window_end"] - epoch).total_seconds()),
            r["n"],
            *[r[name] for name in ("total", "top") if name in r],
        )
        for r in out
    ]


_events = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 60), st.integers(-3, 9)),
    max_size=8,
)
_batches = st.lists(_events, max_size=6)
SPECS = {
    "tumbling": tumbling(10),
    "sliding": sliding(10, every=4),
    "session": session_window(5),
}


class TestAgainstReference:
    @pytest.mark.parametrize("aggs", ["all", "count"])  # a count alone has a path of its own
    @pytest.mark.parametrize("routed", [False, True], ids=["hashed", "routed"])
    @pytest.mark.parametrize("name", sorted(SPECS))
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(batches=_batches, delay=st.integers(0, 15), lateness=st.sampled_from([0, 3]))
    # a row exactly at a session's end, arriving when the watermark is there: it joins
    @example(batches=[[("a", 48, 0), ("a", 57, 0)], [], [("a", 53, 0)]], delay=4, lateness=0)
    def test_each_window_once_with_its_aggregates(
        self,
        name: str,
        routed: bool,
        aggs: str,
        *,
        batches: list[list[Event]],
        delay: int,
        lateness: int,
    ) -> None:
        spec = SPECS[name]
        chosen = AGGS if aggs == "all" else {"n": count()}
        schema = window_schema(INPUT.field("k"), chosen, INPUT)
        proc = WindowProcessor("k", "ts", spec, schema, chosen, lateness_us=lateness * S)
        out, backend = _run(proc, batches, delay, routed=routed)
        got = _got(out)
        assert len(got) == len(set(got)), "a window was emitted twice"
        ends = [end for _, _, end, *_ in got]
        assert ends == sorted(ends), "windows are emitted in the order they close"
        expected = _reference(spec, batches, delay, lateness)
        assert set(got) == {w if aggs == "all" else w[:4] for w in expected}
        # what is left open is exactly what the final watermark has not closed
        open_windows = sum(len(backend.map_state("win:open").items(k)) for k in "abc")
        timers = sum(len(backend.timer_state().list(k)) for k in "abc")
        assert open_windows == timers


def test_buckets_must_match_the_rows() -> None:
    schema = window_schema(INPUT.field("k"), AGGS, INPUT)
    proc = WindowProcessor("k", "ts", tumbling(10), schema, AGGS)
    backend = KeyedStateBackend(range(B), B, InMemoryStore(), TestingChangelogWriter())
    table = _table([("a", 1, 1), ("b", 2, 2)])
    with pytest.raises(StateError, match="1 buckets given for 2 rows"):
        list(proc(table, backend, 0, buckets=pa.array([0]), time=BatchTime(0, 0, None)))


class TestWindowFunction:
    def test_rows_of_each_window(self) -> None:
        calls: list[tuple[str, Window, list[int]]] = []

        def fn(key: str, window: Window, rows: pa.Table) -> list[dict[str, Any]]:
            calls.append((key, window, rows.column("x").to_pylist()))
            assert rows.schema == INPUT
            return [{"k": key, "start": window.start, "xs": len(rows)}]

        out_schema = pa.schema([("k", pa.string()), ("start", STAMP), ("xs", pa.int64())])
        proc = WindowProcessor(
            "k", "ts", sliding(10, every=5), out_schema, fn=fn, input_schema=INPUT
        )
        batches = [[("a", 1, 1), ("a", 6, 2)], [("a", 12, 3)], [("a", 40, 4)]]
        out, backend = _run(proc, batches, delay=0)
        windows = sorted((w.start_us // S, xs) for _, w, xs in calls)
        assert windows == [(-5, [1]), (0, [1, 2]), (5, [2, 3]), (10, [3])]
        assert [r["xs"] for r in out] == [len(xs) for _, _, xs in calls]
        kept = backend.map_state("win:rows").items("a")
        assert [k[0] // S for k, _ in kept] == [40]  # only the row an open window needs

    def test_session_rows(self) -> None:
        seen: list[tuple[int, int, list[int]]] = []

        def fn(key: str, window: Window, rows: pa.Table) -> None:
            seen.append((window.start_us // S, window.end_us // S, rows.column("x").to_pylist()))

        proc = WindowProcessor(
            "k", "ts", session_window(5), pa.schema([("k", pa.string())]), fn=fn, input_schema=INPUT
        )
        _run(proc, [[("a", 0, 1), ("a", 3, 2)], [("a", 20, 3)], [("a", 40, 4)]], delay=0)
        assert seen == [(0, 8, [1, 2]), (20, 25, [3])]  # 40-45 is open at watermark 40


class TestSpecs:
    def test_sliding_starts(self) -> None:
        import numpy as np

        starts, rows = sliding(10, every=5).starts(np.array([12 * S, -1 * S]))
        assert sorted(zip(rows.tolist(), (starts // S).tolist(), strict=True)) == [
            (0, 5), (0, 10), (1, -10), (1, -5),
        ]  # fmt: skip

    @pytest.mark.parametrize(
        ("make", "match"),
        [
            (lambda: tumbling(0), "longer than 0"),
            (lambda: sliding(5, every=10), "longer than the window"),
            (lambda: sliding("1 day", every="1 s"), "more than 1000 windows"),
            (lambda: session_window("soon"), "not a duration"),
        ],
    )
    def test_refused(self, make: Any, match: str) -> None:
        with pytest.raises(ConfigurationError, match=match):
            make()

    def test_processor_needs_aggregates_or_a_function(self) -> None:
        schema = window_schema(INPUT.field("k"), AGGS, INPUT)
        with pytest.raises(ConfigurationError, match="one of them"):
            WindowProcessor("k", "ts", tumbling(1), schema)
        with pytest.raises(ConfigurationError, match="window column"):
            window_schema(INPUT.field("k"), {"window_end": count()}, INPUT)

    def test_window_times(self) -> None:
        w = Window(5 * S, 10 * S)
        assert (w.start, w.end) == (from_micros(5 * S), from_micros(10 * S))
