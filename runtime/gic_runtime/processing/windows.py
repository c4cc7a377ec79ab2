"""Windowed processing over event time, built on timers: aggregates per key and window
(tumbling, sliding, session; :mod:`gic_runtime.processing.window_specs`), or a
function called once per closed window with its rows.

:class:`WindowProcessor` keeps, per key, one map entry per open window in the state
``win:open`` (user key: the window's start; value: ``[last event time, *aggregates]``,
the last event time being what a session's end follows) and one event-time timer at
the window's close: its end plus the allowed lateness (a session's end is its last row
plus the gap). A row adds to every window it belongs to; a session row merges the
sessions it touches. When the timer fires (the watermark reached it) the window is
emitted once -- ``key, window_start, window_end`` and the aggregates, or what the
window function returns for its rows -- and its state and rows are deleted.

With a window function the rows themselves are kept in ``win:rows`` (user key:
``[event time, batch, row]``), temporal columns as integers; a row is deleted once no
open window can still need it.

Invariants: every open window has exactly one timer, at its close; a window is emitted
at most once (its timer fires once: :mod:`gic_runtime.processing.firing`); rows whose
event time is null, or whose windows all closed already, are ignored (the stage has
dropped rows older than the watermark unless the stream keeps them); a window's
aggregates equal the aggregates over the rows of all batches that fell into it.

Not thread-safe: a processor runs on the task thread that owns the backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gic_runtime.errors import ConfigurationError, StateError
from gic_runtime.event_time import BatchTime
from gic_runtime.processing.aggregates import Aggregation, aggregate_schema, combine
from gic_runtime.processing.firing import due_now
from gic_runtime.processing.processors import Buckets, FiredCounter, check_keys
from gic_runtime.processing.window_rows import fit_output, plain_rows, rows_table
from gic_runtime.processing.window_specs import Window, WindowSpec
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.keys import decode_key
from gic_runtime.state.states import Located

__all__ = ["WindowFunction", "WindowProcessor", "window_schema"]

WindowFunction = Callable[[Any, Window, pa.Table], Any]
"""``fn(key, window, rows)``: a closed window's rows (input order within a batch);
returns output rows (dicts or a table) or ``None``."""

_OPEN, _ROWS = "win:open", "win:rows"
_KEY, _START, _BUCKET = "_key", "_start", "_bucket"


def _combined(kinds: list[str], old: list[Any], new: list[Any]) -> list[Any]:
    """Each aggregate of ``kinds`` over the parts ``old`` and ``new``."""
    return [combine(k, a, b) for k, a, b in zip(kinds, old, new, strict=True)]


def window_schema(
    key_field: pa.Field, aggregations: Mapping[str, Aggregation], input_schema: pa.Schema
) -> pa.Schema:
    """Output of windowed aggregates: the key, ``window_start`` and ``window_end``
    (timestamp[us, UTC]), then each aggregate as :func:`aggregate_schema` types it."""
    base = aggregate_schema(key_field, aggregations, input_schema)
    for name in ("window_start", "window_end"):
        if name in aggregations or name == key_field.name:
            raise ConfigurationError(f"{name!r} is a window column; name the aggregate otherwise")
    stamp = pa.timestamp("us", tz="UTC")
    bounds = [pa.field("window_start", stamp), pa.field("window_end", stamp)]
    return pa.schema([base.field(0), *bounds, *list(base)[1:]])


def _micros(column: pa.ChunkedArray) -> pa.ChunkedArray:
    if not pa.types.is_timestamp(column.type):
        raise ConfigurationError(f"the event-time column is {column.type}, not a timestamp")
    return pc.cast(pc.cast(column, pa.timestamp("us", tz=column.type.tz)), pa.int64())


@dataclass(frozen=True)
class WindowProcessor:
    """Windowed aggregates (``aggregations``) or a window function (``fn``) per key
    over the event time in ``time_column`` (see the module docstring)."""

    key_column: str
    time_column: str
    spec: WindowSpec
    output_schema: pa.Schema
    aggregations: Mapping[str, Aggregation] = field(default_factory=dict)
    fn: WindowFunction | None = None
    lateness_us: int = 0
    input_schema: pa.Schema | None = None

    def __post_init__(self) -> None:
        if (self.fn is None) == (not self.aggregations):
            raise ConfigurationError("window() takes aggregations or process=, one of them")
        if self.lateness_us < 0:
            raise ConfigurationError("allowed lateness must be >= 0")

    has_timers = True
    sweeps_ttl = False

    @property
    def _kinds(self) -> list[str]:
        return [a.kind for a in self.aggregations.values()] or ["count"]

    # --- rows ----------------------------------------------------------------------------

    def __call__(
        self,
        table: pa.Table,
        backend: KeyedStateBackend,
        batch_id: int,
        *,
        buckets: Buckets = None,
        time: BatchTime | None = None,
    ) -> Iterator[pa.Table]:
        check_keys(table, self.key_column)
        if self.time_column not in table.column_names:
            raise ConfigurationError(f"event-time column {self.time_column!r} is not in the input")
        times = _micros(table.column(self.time_column))
        # rows without a time, or whose windows all closed already, are ignored
        watermark = None if time is None else time.watermark_us
        alive = pc.is_valid(times)
        if watermark is not None:
            reach = self._close_at(self.spec.size_us)  # a row's latest window close
            alive = pc.and_(alive, pc.greater(pc.add(times, reach), watermark))
        alive = pc.fill_null(alive, False)
        if buckets is not None:
            if len(buckets) != table.num_rows:
                raise StateError(f"{len(buckets)} buckets given for {table.num_rows} rows")
            buckets = buckets.filter(alive)
        table, times = table.filter(alive), times.filter(alive)
        if table.num_rows == 0:
            return iter(())
        ts = times.to_numpy()
        if self.spec.kind == "session":
            self._sessions(table, ts, self._contributions(table), backend)
        else:
            self._fixed(table, ts, backend, watermark, buckets)
        if self.fn is not None:
            self._keep_rows(table, ts, backend, batch_id)
        return iter(())

    def _contributions(self, table: pa.Table) -> list[list[Any]]:
        """Per aggregate, each row's value (1 for counts)."""
        if not self.aggregations:
            return [[1] * table.num_rows]
        out: list[list[Any]] = []
        for agg in self.aggregations.values():
            if agg.kind == "count":
                out.append([1] * table.num_rows)
            else:
                agg.arrow_spec(table)  # names an input column
                column = table.column(agg.column)
                if pa.types.is_timestamp(column.type):  # kept in state as integers
                    column = pc.cast(column, pa.int64())
                out.append(column.to_pylist())
        return out

    def _close_at(self, end: int) -> int:
        """When the window ending at ``end`` closes: once the watermark reaches its end
        plus the lateness; a session once the watermark is past it (a row at exactly a
        session's end is not late, and still joins it)."""
        return end + self.lateness_us + (1 if self.spec.kind == "session" else 0)

    def _end_of(self, close_at: int) -> int:
        """The end of the window whose timer is at ``close_at`` (:meth:`_close_at`)."""
        return close_at - self.lateness_us - (1 if self.spec.kind == "session" else 0)

    def _fixed(
        self,
        table: pa.Table,
        ts: Any,
        backend: KeyedStateBackend,
        watermark: int | None,
        buckets: Buckets,
    ) -> None:
        """Add the rows to their tumbling or sliding windows, in bulk: one read and one
        write per (key, window) of the batch, and one new timer per new window."""
        starts, rows = self.spec.starts(ts)
        if watermark is not None:  # a sliding row's earlier windows may have closed
            still = starts + self.spec.size_us + self.lateness_us > watermark
            starts, rows = starts[still], rows[still]
        keys, window_starts, key_buckets, values = self._per_window(
            table, starts, rows, buckets, backend
        )
        if not keys:
            return
        open_, size, kinds = backend.map_state(_OPEN), self.spec.size_us, self._kinds
        located = open_.locate_entries(keys, window_starts, key_buckets)
        olds = open_.get_located(located)
        fresh = [i for i, old in enumerate(olds) if old is None]
        merged: list[list[Any]]
        if kinds == ["count"]:  # the common case, without a call per window
            merged = [
                [start + size, n] if old is None else [old[0], old[1] + n]
                for old, start, n in zip(olds, window_starts, values[0], strict=True)
            ]
        else:
            merged = []
            for i, old in enumerate(olds):
                new = [v[i] for v in values]
                if old is None:
                    merged.append([window_starts[i] + size, *new])
                else:
                    merged.append([old[0], *_combined(kinds, old[1:], new)])
        open_.set_located(located, merged)
        if fresh:
            backend.timer_state().register_many(
                [keys[i] for i in fresh],
                [self._close_at(window_starts[i] + size) for i in fresh],
                buckets=[key_buckets[i] for i in fresh],
            )

    def _per_window(
        self, table: pa.Table, starts: Any, rows: Any, buckets: Buckets, backend: KeyedStateBackend
    ) -> tuple[list[Any], list[int], list[int], list[list[Any]]]:
        """The batch's rows aggregated per (key, window) with Arrow's ``group_by`` (rows
        repeated for each window they are in): keys, window starts, the keys' buckets
        and, per aggregate, the values -- ordered by bucket, key and window start."""
        taken = pa.array(rows, pa.int64())
        columns: dict[str, Any] = {
            _KEY: table.column(self.key_column).take(taken),
            _START: pa.array(starts, pa.int64()),
        }
        specs: list[tuple[Any, str]] = []
        names: list[str] = []
        for i, agg in enumerate(self.aggregations.values() or [Aggregation("count")]):
            if agg.kind == "count":
                specs.append(([], "count_all"))
                names.append("count_all")
                continue
            agg.arrow_spec(table)  # names an input column
            column = table.column(agg.column)
            if pa.types.is_timestamp(column.type):  # kept in state as integers
                column = pc.cast(column, pa.int64())
            columns[f"_v{i}"] = column.take(taken)
            specs.append((f"_v{i}", agg.kind))
            names.append(f"_v{i}_{agg.kind}")
        if buckets is not None:
            columns[_BUCKET] = buckets.take(taken)
            specs.append((_BUCKET, "min"))  # one bucket per key: any row's will do
        grouped = pa.table(columns).group_by([_KEY, _START], use_threads=False).aggregate(specs)
        if buckets is None:
            route = backend.route
            routed = {k: route(k) for k in grouped.column(_KEY).unique().to_pylist()}
            in_order = [routed[k] for k in grouped.column(_KEY).to_pylist()]
            grouped = grouped.append_column(_BUCKET, pa.array(in_order, pa.int64()))
        else:
            grouped = grouped.rename_columns(
                [_BUCKET if n == f"{_BUCKET}_min" else n for n in grouped.column_names]
            )
        grouped = grouped.sort_by(
            [(_BUCKET, "ascending"), (_KEY, "ascending"), (_START, "ascending")]
        )
        return (
            grouped.column(_KEY).to_pylist(),
            grouped.column(_START).to_pylist(),
            grouped.column(_BUCKET).to_pylist(),
            [grouped.column(n).to_pylist() for n in names],
        )

    def _sessions(
        self, table: pa.Table, ts: Any, contributions: list[list[Any]], backend: KeyedStateBackend
    ) -> None:
        keys = table.column(self.key_column).to_pylist()
        gap, kinds = self.spec.size_us, self._kinds
        open_, timers = backend.map_state(_OPEN), backend.timer_state()
        by_key: dict[Any, list[int]] = {}
        for row in np.argsort(ts, kind="stable").tolist():
            by_key.setdefault(keys[row], []).append(row)
        for key, rows in by_key.items():
            before = {start: v for start, v in open_.items(key)}
            sessions = {start: list(v) for start, v in before.items()}
            for row in rows:
                t = int(ts[row])
                start, last, values = t, t, [c[row] for c in contributions]
                for s in [s for s, v in sessions.items() if s - gap <= t <= v[0] + gap]:
                    v = sessions.pop(s)
                    start, last = min(start, s), max(last, v[0])
                    values = _combined(kinds, v[1:], values)
                sessions[start] = [last, *values]
            for s, v in before.items():
                if sessions.get(s) != v:
                    timers.delete(key, self._close_at(v[0] + gap))
                    if s not in sessions:
                        open_.remove(key, s)
            for s, v in sessions.items():
                if before.get(s) != v:
                    open_.put(key, s, v)
                    timers.register(key, self._close_at(v[0] + gap))

    def _keep_rows(self, table: pa.Table, ts: Any, backend: KeyedStateBackend, batch: int) -> None:
        rows = backend.map_state(_ROWS)
        plain = plain_rows(table)
        keys = table.column(self.key_column).to_pylist()
        for i, (key, values) in enumerate(zip(keys, plain, strict=True)):
            rows.put(key, [int(ts[i]), batch, i], values)

    # --- closing windows -----------------------------------------------------------------

    def fire_timers(
        self, backend: KeyedStateBackend, time: BatchTime, fired: FiredCounter = None
    ) -> Iterator[pa.Table]:
        if self.fn is None and self.spec.kind != "session":
            closed = self._close_fixed(backend, time, fired)
            if closed.num_rows:
                yield closed
            return
        open_ = backend.map_state(_OPEN)
        out: list[pa.Table] = []
        rows: list[dict[str, Any]] = []
        n = 0
        for key, timer in due_now(backend, time):
            n += 1
            window, values = self._closing(open_, key, self._end_of(timer.at_us))
            if window is None:
                continue
            open_.remove(key, window.start_us)
            if self.fn is None:
                rows.append(self._aggregate_row(key, window, values))
            else:
                table = self._window_rows(backend, key, window)
                result = self.fn(key, window, table)
                if result is not None:
                    out.append(fit_output(result, self.output_schema))
        if fired is not None:
            fired(n)
        if rows:
            out.append(fit_output(rows, self.output_schema))
        yield from (t for t in out if t.num_rows)

    def _close_fixed(
        self, backend: KeyedStateBackend, time: BatchTime, fired: FiredCounter
    ) -> pa.Table:
        """Close every tumbling or sliding window whose timer is due, in bulk, one bucket
        at a time: pop the bucket's due timers, read and delete their windows, and
        return the aggregates, one row per window in firing order (time, bucket, key).
        The windows' timers are all event-time timers."""
        timers, open_ = backend.timer_state(), backend.map_state(_OPEN)
        size = self.spec.size_us
        runs = timers.pop_due_runs(backend.bucket_range, "event", time.watermark_us)
        if fired is not None:
            fired(sum(len(run) for run in runs))
        closed: list[tuple[int, int, bytes, list[Any]]] = []
        for run in runs:
            starts = [self._end_of(at) - size for at in run.ats]
            located = open_.locate_encoded(run.bucket, run.keys, starts)
            values = open_.get_located(located)
            present = [j for j, v in enumerate(values) if v is not None]
            skeys = located.store_keys
            open_.remove_located(Located([skeys[j] for j in present], [run.bucket] * len(present)))
            closed += [(run.ats[j], run.bucket, run.keys[j], values[j]) for j in present]
        closed.sort()  # firing order: (time, bucket, key) is unique per window
        ends = [self._end_of(at) for at, _, _, _ in closed]
        columns: dict[str, list[Any]] = {
            self.key_column: [decode_key(k) for _, _, k, _ in closed],
            "window_start": [e - size for e in ends],
            "window_end": ends,
        }
        for n, name in enumerate(self.aggregations, start=1):
            columns[name] = [v[n] for _, _, _, v in closed]
        try:
            return pa.Table.from_pydict(columns, schema=self.output_schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise StateError(f"window aggregates do not fit {self.output_schema}: {exc}") from exc

    def _closing(self, open_: Any, key: Any, end: int) -> tuple[Window | None, list[Any]]:
        """The window of ``key`` ending at ``end`` and its aggregates."""
        if self.spec.kind != "session":
            start = end - self.spec.size_us
            values = open_.get(key, start)
            return (None, []) if values is None else (Window(start, end), values[1:])
        for start, v in open_.items(key):
            if v[0] + self.spec.size_us == end:
                return Window(start, end), v[1:]
        return None, []

    def _aggregate_row(self, key: Any, window: Window, values: list[Any]) -> dict[str, Any]:
        row: dict[str, Any] = {self.key_column: key}
        row["window_start"], row["window_end"] = window.start, window.end
        row.update(zip(self.aggregations, values, strict=True))
        return row

    def _window_rows(self, backend: KeyedStateBackend, key: Any, window: Window) -> pa.Table:
        """The kept rows of ``window`` (deleting those no open window needs)."""
        rows = backend.map_state(_ROWS)
        last = window.end_us - self.spec.size_us if self.spec.kind == "session" else None
        keep_from = window.start_us + self.spec.every_us if self.spec.kind == "sliding" else None
        found: list[list[Any]] = []
        for user_key, values in rows.items(key):
            t = user_key[0]
            inside = window.start_us <= t <= last if last is not None else (
                window.start_us <= t < window.end_us
            )  # fmt: skip
            if inside:
                found.append(values)
            if inside and (keep_from is None or t < keep_from):
                rows.remove(key, user_key)
        assert self.input_schema is not None
        return rows_table(found, self.input_schema)
