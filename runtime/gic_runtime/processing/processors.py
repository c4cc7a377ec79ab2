"""Processors: the contract of what a state task runs on its rows, and the per-key and
batch styles.

A :class:`Processor` turns one task's input rows of one micro-batch (an Arrow table
whose key column routes every row into the task's buckets) into output tables, reading
and writing keyed state through the task's
:class:`~gic_runtime.state.backend.KeyedStateBackend`. Here the two styles that run the
user's function (the aggregates are in :mod:`gic_runtime.processing.aggregates`):

* :class:`PerKeyProcessor` -- ``fn(key, rows, state)`` once per distinct key, with a
  :class:`~gic_runtime.processing.facades.KeyState` bound to the key;
* :class:`BatchProcessor` -- ``fn(table, states)`` once with the whole table and a
  :class:`~gic_runtime.processing.facades.StateAccess`.

Both may carry a timer handler (``on_timer(key, timer, state)`` per key,
``on_timers(fired, states)`` vectorized) that :meth:`Processor.fire_timers` calls for
the task's due timers after its rows (:mod:`gic_runtime.processing.firing`); without
one, timers are refused.

And the checks on a task's input: :func:`check_keys` (every processor: the key column
exists and holds no null); :func:`bucket_column_ok` and :func:`drop_columns` (the
stateful stage, before a processor sees the rows: every row's bucket is the task's own,
the internal routing columns are removed).

Invariants: a processor touches state only through the backend (so every change is
dual-written to the changelog) and only for keys of its input (which route into the
task's buckets); keys are never null; output tables match ``output_schema`` (a
function's output that does not fit is a :class:`~gic_runtime.errors.StateError`);
empty outputs are not yielded.

Not thread-safe: a processor runs on the task thread that owns the backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias, runtime_checkable

import pyarrow as pa
import pyarrow.compute as pc

from gic_runtime.errors import ConfigurationError, StateError
from gic_runtime.event_time import BatchTime
from gic_runtime.processing.facades import KeyState, StateAccess
from gic_runtime.processing.firing import due_now, fired_table, pop_due
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.timers import Timer

__all__ = [
    "BatchFunction",
    "BatchProcessor",
    "BatchTimerFunction",
    "Buckets",
    "KeyFunction",
    "KeyOutput",
    "NamesStateKeys",
    "PerKeyProcessor",
    "Processor",
    "TimerFunction",
    "bucket_column_ok",
    "check_keys",
    "drop_columns",
]

KeyOutput: TypeAlias = Iterable[Mapping[str, Any]] | pa.Table | None
KeyFunction = Callable[[Any, pa.Table, KeyState], KeyOutput]
"""``fn(key, rows, state)``: rows of one key in this batch (input order kept);
returns output rows (dicts or a table) or ``None``."""

BatchFunction = Callable[[pa.Table, StateAccess], pa.Table | None]
"""``fn(table, states)``: every row of the task in this batch; returns a table or ``None``."""

TimerFunction = Callable[[Any, Timer, KeyState], KeyOutput]
"""``on_timer(key, timer, state)``: one due timer of ``key``; returns output rows or ``None``."""

BatchTimerFunction = Callable[[pa.Table, StateAccess], pa.Table | None]
"""``on_timers(fired, states)``: the task's due timers of this batch as a table (``key``,
``domain``, ``at``: :func:`~gic_runtime.processing.firing.fired_table`); returns a
table or ``None``."""

Buckets: TypeAlias = pa.ChunkedArray | pa.Array | None
"""Each input row's bucket (integers, aligned with the table's rows), or ``None``."""

FiredCounter: TypeAlias = Callable[[int], None] | None
"""Told how many timers fired (once, after firing)."""


class Processor(Protocol):
    """What a state task runs on its rows (see the module docstring)."""

    @property
    def key_column(self) -> str: ...

    @property
    def output_schema(self) -> pa.Schema: ...

    @property
    def has_timers(self) -> bool:
        """Whether the processor fires timers (then every task calls :meth:`fire_timers`
        after its rows, also in batches without rows)."""
        ...

    @property
    def sweeps_ttl(self) -> bool:
        """Whether its states may have a time to live (then every task removes what
        expired after its rows: :meth:`KeyedStateBackend.expire`)."""
        ...

    def __call__(
        self,
        table: pa.Table,
        backend: KeyedStateBackend,
        batch_id: int,
        *,
        buckets: Buckets = None,
        time: BatchTime | None = None,
    ) -> Iterator[pa.Table]:
        """Process ``table``; ``buckets`` (optional) holds each row's bucket as the
        routing side computed it (processors may use it instead of hashing keys);
        ``time`` where the batch stands in time (default: now, no watermark)."""
        ...

    def fire_timers(
        self, backend: KeyedStateBackend, time: BatchTime, fired: FiredCounter = None
    ) -> Iterator[pa.Table]:
        """Fire the task's due timers at ``time`` and yield the handler's output."""
        ...


@runtime_checkable
class NamesStateKeys(Protocol):
    """A processor that can name, before it runs on a table, every state key it will
    read there (then a batch after a start need not wait for its buckets' restore:
    docs/architecture.md §6.3). Only a processor without timers and without a time to
    live may claim it: firing timers and expiring entries scan state."""

    def state_keys(
        self, table: pa.Table, backend: KeyedStateBackend, buckets: Buckets = None
    ) -> dict[int, list[bytes]]:
        """Per bucket, the store keys :meth:`Processor.__call__` reads on ``table``
        (more is allowed, fewer is a bug that fails the batch)."""
        ...


def check_keys(table: pa.Table, key_column: str) -> pa.ChunkedArray:
    """The key column of ``table``; refuses a missing column and null keys."""
    if key_column not in table.column_names:
        raise ConfigurationError(
            f"key column {key_column!r} is not in the input (columns: {table.column_names})"
        )
    keys = table.column(key_column)
    if keys.null_count:
        raise StateError(
            f"key column {key_column!r} has {keys.null_count} null value(s) in this batch; "
            "filter or fill null keys before the keyed stage"
        )
    return keys


def _as_table(out: KeyOutput | pa.Table, schema: pa.Schema, where: str) -> pa.Table | None:
    if out is None:
        return None
    if isinstance(out, pa.Table):
        table = out
    else:
        rows = list(out)
        if not rows:
            return None
        try:
            return pa.Table.from_pylist(rows, schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError) as exc:
            raise StateError(f"{where} returned rows that do not fit {schema}: {exc}") from exc
    if table.num_rows == 0:
        return None
    try:
        return table.select(schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError) as exc:
        raise StateError(f"{where} returned a table that does not fit {schema}: {exc}") from exc


def _batched(tables: Iterator[pa.Table | None]) -> Iterator[pa.Table]:
    """Non-empty ``tables`` concatenated 1024 at a time."""
    pending: list[pa.Table] = []
    for out in tables:
        if out is not None:
            pending.append(out)
        if len(pending) >= 1024:
            yield pa.concat_tables(pending)
            pending = []
    if pending:
        yield pa.concat_tables(pending)


@dataclass(frozen=True)
class PerKeyProcessor:
    """Calls ``fn(key, rows, state)`` once per distinct key, keys in first-seen order,
    and ``on_timer(key, timer, state)`` per due timer (when given)."""

    key_column: str
    fn: KeyFunction
    output_schema: pa.Schema
    on_timer: TimerFunction | None = None

    @property
    def has_timers(self) -> bool:
        return self.on_timer is not None

    sweeps_ttl = True

    def __call__(
        self,
        table: pa.Table,
        backend: KeyedStateBackend,
        batch_id: int,
        *,
        buckets: Buckets = None,
        time: BatchTime | None = None,
    ) -> Iterator[pa.Table]:
        keys = check_keys(table, self.key_column)
        if table.num_rows == 0:
            return
        access = StateAccess(backend, batch_id, time, timers=self.has_timers)
        groups: dict[Any, list[int]] = {}
        for i, key in enumerate(keys.to_pylist()):
            groups.setdefault(key, []).append(i)
        schema, fn, where = self.output_schema, self.fn, "the per-key function"
        yield from _batched(
            _as_table(fn(key, table.take(rows), KeyState(access, key)), schema, where)
            for key, rows in groups.items()
        )

    def fire_timers(
        self, backend: KeyedStateBackend, time: BatchTime, fired: FiredCounter = None
    ) -> Iterator[pa.Table]:
        handler = self.on_timer
        if handler is None:
            return
        access = StateAccess(backend, time.batch_id, time, timers=True)
        schema = self.output_schema
        n = 0

        def outputs() -> Iterator[pa.Table | None]:
            nonlocal n
            for key, timer in due_now(backend, time):
                n += 1
                yield _as_table(handler(key, timer, KeyState(access, key)), schema, "on_timer")

        yield from _batched(outputs())
        if fired is not None:
            fired(n)


@dataclass(frozen=True)
class BatchProcessor:
    """Calls ``fn(table, states)`` once with the task's rows (vectorized style), and
    ``on_timers(fired, states)`` once with the task's due timers (when given)."""

    key_column: str
    fn: BatchFunction
    output_schema: pa.Schema
    on_timers: BatchTimerFunction | None = None

    @property
    def has_timers(self) -> bool:
        return self.on_timers is not None

    sweeps_ttl = True

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
        if table.num_rows == 0:
            return
        access = StateAccess(backend, batch_id, time, timers=self.has_timers)
        out = _as_table(self.fn(table, access), self.output_schema, "the batch function")
        if out is not None:
            yield out

    def fire_timers(
        self, backend: KeyedStateBackend, time: BatchTime, fired: FiredCounter = None
    ) -> Iterator[pa.Table]:
        handler = self.on_timers
        if handler is None:
            return
        due = [(key, item.timer) for item, key in pop_due(backend, time)]
        if fired is not None:
            fired(len(due))
        if not due:
            return
        access = StateAccess(backend, time.batch_id, time, timers=True)
        out = _as_table(handler(fired_table(due), access), self.output_schema, "on_timers")
        if out is not None:
            yield out


def drop_columns(table: pa.Table, names: Iterable[str]) -> pa.Table:
    """``table`` without the columns ``names`` that it has (internal routing columns)."""
    present = [n for n in names if n in table.column_names]
    return table.drop_columns(present) if present else table


def bucket_column_ok(table: pa.Table, column: str, owned: range) -> None:
    """Raise StateError when a row of ``table`` carries a bucket outside ``owned``
    (rows reached the wrong task: placement is broken)."""
    if table.num_rows == 0 or column not in table.column_names:
        return
    stats = pc.min_max(table.column(column))
    lo, hi = stats["min"].as_py(), stats["max"].as_py()
    if lo < owned.start or hi >= owned.stop:
        raise StateError(
            f"rows for buckets [{lo}, {hi}] reached the task owning [{owned.start}, "
            f"{owned.stop}); the stage's partitioning was changed (is adaptive query "
            "execution coalescing the shuffle? set spark.sql.adaptive.enabled=false)"
        )
