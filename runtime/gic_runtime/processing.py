"""Processors: what a state task does with its rows, over Arrow tables.

A processor turns one task's input rows of one micro-batch (an Arrow table whose key
column routes every row into the task's buckets) into output tables, reading and
writing keyed state through the task's
:class:`~gic_runtime.state.backend.KeyedStateBackend`. Three styles:

* :class:`PerKeyProcessor` -- a function called once per distinct key with that key's
  rows and a :class:`KeyState` bound to the key (general, any logic);
* :class:`BatchProcessor` -- a function called once with the whole table and a
  :class:`StateAccess` (vectorized: use Arrow compute and the ``*_many`` state calls);
* :class:`AggregateProcessor` -- running aggregates per key (``count``, ``sum``,
  ``min``, ``max``), built on Arrow's ``group_by`` (the fast path for aggregations).

Invariants: a processor touches state only through the backend (so every change is
dual-written to the changelog) and only for keys of its input (which route into the
task's buckets); output tables match ``output_schema``. Keys must not be null.

Not thread-safe: a processor runs on the task thread that owns the backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from gic_runtime.errors import ConfigurationError, StateError
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.states import ListState, MapState, ValueState

# --- state facades ---------------------------------------------------------------------


class StateAccess:
    """Named states of a task, each method taking explicit keys (vectorized style)."""

    def __init__(self, backend: KeyedStateBackend, batch_id: int) -> None:
        self.backend = backend
        self.batch_id = batch_id

    def value(self, name: str) -> ValueState:
        return self.backend.value_state(name)

    def map(self, name: str) -> MapState:
        return self.backend.map_state(name)

    def list(self, name: str) -> ListState:
        return self.backend.list_state(name)


class BoundValue:
    """A value state bound to one key."""

    def __init__(self, state: ValueState, key: Any) -> None:
        self._state, self._key = state, key

    def get(self, default: Any = None) -> Any:
        return self._state.get(self._key, default)

    def set(self, value: Any) -> None:
        self._state.set(self._key, value)

    def clear(self) -> None:
        self._state.clear(self._key)


class BoundMap:
    """A map state bound to one key."""

    def __init__(self, state: MapState, key: Any) -> None:
        self._state, self._key = state, key

    def get(self, user_key: Any, default: Any = None) -> Any:
        return self._state.get(self._key, user_key, default)

    def contains(self, user_key: Any) -> bool:
        return self._state.contains(self._key, user_key)

    def put(self, user_key: Any, value: Any) -> None:
        self._state.put(self._key, user_key, value)

    def remove(self, user_key: Any) -> None:
        self._state.remove(self._key, user_key)

    def items(self) -> list[tuple[Any, Any]]:
        return self._state.items(self._key)

    def keys(self) -> list[Any]:
        return self._state.keys(self._key)

    def clear(self) -> None:
        self._state.clear(self._key)


class BoundList:
    """A list state bound to one key."""

    def __init__(self, state: ListState, key: Any) -> None:
        self._state, self._key = state, key

    def get(self) -> list[Any]:
        return self._state.get(self._key)

    def append(self, value: Any) -> None:
        self._state.append(self._key, value)

    def extend(self, values: Iterable[Any]) -> None:
        self._state.extend(self._key, values)

    def clear(self) -> None:
        self._state.clear(self._key)


class KeyState:
    """The states of one key (per-key style): ``state.value("count").get(0)``."""

    def __init__(self, access: StateAccess, key: Any) -> None:
        self._access = access
        self.key = key
        self.batch_id = access.batch_id

    def value(self, name: str) -> BoundValue:
        return BoundValue(self._access.value(name), self.key)

    def map(self, name: str) -> BoundMap:
        return BoundMap(self._access.map(name), self.key)

    def list(self, name: str) -> BoundList:
        return BoundList(self._access.list(name), self.key)


# --- processors --------------------------------------------------------------------------

KeyOutput: TypeAlias = Iterable[Mapping[str, Any]] | pa.Table | None
KeyFunction = Callable[[Any, pa.Table, KeyState], KeyOutput]
"""``fn(key, rows, state)``: rows of one key in this batch (input order kept);
returns output rows (dicts or a table) or ``None``."""

BatchFunction = Callable[[pa.Table, StateAccess], pa.Table | None]
"""``fn(table, states)``: every row of the task in this batch; returns a table or ``None``."""

Buckets: TypeAlias = pa.ChunkedArray | pa.Array | None
"""Each input row's bucket (integers, aligned with the table's rows), or ``None``."""


class Processor(Protocol):
    """What a state task runs on its rows (see the module docstring)."""

    @property
    def key_column(self) -> str: ...

    @property
    def output_schema(self) -> pa.Schema: ...

    def __call__(
        self, table: pa.Table, backend: KeyedStateBackend, batch_id: int, *, buckets: Buckets = None
    ) -> Iterator[pa.Table]:
        """Process ``table``; ``buckets`` (optional) holds each row's bucket as the
        routing side computed it (processors may use it instead of hashing keys)."""
        ...


def _check_keys(table: pa.Table, key_column: str) -> pa.ChunkedArray:
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


@dataclass(frozen=True)
class PerKeyProcessor:
    """Calls ``fn(key, rows, state)`` once per distinct key, keys in first-seen order."""

    key_column: str
    fn: KeyFunction
    output_schema: pa.Schema

    def __call__(
        self, table: pa.Table, backend: KeyedStateBackend, batch_id: int, *, buckets: Buckets = None
    ) -> Iterator[pa.Table]:
        keys = _check_keys(table, self.key_column)
        if table.num_rows == 0:
            return
        access = StateAccess(backend, batch_id)
        groups: dict[Any, list[int]] = {}
        for i, key in enumerate(keys.to_pylist()):
            groups.setdefault(key, []).append(i)
        pending: list[pa.Table] = []
        for key, rows in groups.items():
            out = _as_table(
                self.fn(key, table.take(rows), KeyState(access, key)),
                self.output_schema,
                "the per-key function",
            )
            if out is not None:
                pending.append(out)
            if len(pending) >= 1024:
                yield pa.concat_tables(pending)
                pending = []
        if pending:
            yield pa.concat_tables(pending)


@dataclass(frozen=True)
class BatchProcessor:
    """Calls ``fn(table, states)`` once with the task's rows (vectorized style)."""

    key_column: str
    fn: BatchFunction
    output_schema: pa.Schema

    def __call__(
        self, table: pa.Table, backend: KeyedStateBackend, batch_id: int, *, buckets: Buckets = None
    ) -> Iterator[pa.Table]:
        _check_keys(table, self.key_column)
        if table.num_rows == 0:
            return
        out = _as_table(
            self.fn(table, StateAccess(backend, batch_id)), self.output_schema, "the batch function"
        )
        if out is not None:
            yield out


AggKind = Literal["count", "sum", "min", "max"]


@dataclass(frozen=True)
class Aggregation:
    """A running aggregate per key: ``count()`` or ``sum/min/max`` of a column."""

    kind: AggKind
    column: str | None = None

    def arrow_spec(self, table: pa.Table) -> tuple[Any, str]:
        if self.kind == "count":
            return ([], "count_all")
        if self.column is None or self.column not in table.column_names:
            raise ConfigurationError(
                f"aggregation {self.kind}({self.column!r}) names a column that is not in the "
                f"input (columns: {table.column_names})"
            )
        return (self.column, self.kind)


def count() -> Aggregation:
    """Number of rows per key, over all batches."""
    return Aggregation("count")


def sum_(column: str) -> Aggregation:
    """Sum of ``column`` per key, over all batches (nulls ignored)."""
    return Aggregation("sum", column)


def min_(column: str) -> Aggregation:
    return Aggregation("min", column)


def max_(column: str) -> Aggregation:
    return Aggregation("max", column)


_COMBINE: dict[str, Callable[[Any, Any], Any]] = {
    "count": lambda old, new: old + new,
    "sum": lambda old, new: old + new,
    "min": min,
    "max": max,
}


@dataclass(frozen=True)
class AggregateProcessor:
    """Running aggregates per key; outputs ``key`` plus each aggregate's new value for
    every key seen in the batch. State: one value state ``agg:<output name>`` per
    aggregate."""

    key_column: str
    aggregations: Mapping[str, Aggregation]
    output_schema: pa.Schema

    def __post_init__(self) -> None:
        if not self.aggregations:
            raise ConfigurationError("aggregate() needs at least one aggregation, e.g. count()")
        for name in self.aggregations:
            if name == self.key_column:
                raise ConfigurationError(f"aggregation name {name!r} clashes with the key column")

    def __call__(
        self, table: pa.Table, backend: KeyedStateBackend, batch_id: int, *, buckets: Buckets = None
    ) -> Iterator[pa.Table]:
        """Group the batch by key, then read, combine and write each aggregate's state
        in bulk, one run of keys per bucket (keys sorted by bucket, then key). With
        ``buckets`` no key is hashed except the sample the backend verifies."""
        _check_keys(table, self.key_column)
        if table.num_rows == 0:
            return
        specs = [agg.arrow_spec(table) for agg in self.aggregations.values()]
        bucket_name = _free_name(table, "__gic_bucket")
        group_specs = list(specs)
        if buckets is not None:
            if len(buckets) != table.num_rows:
                raise StateError(f"{len(buckets)} buckets given for {table.num_rows} rows")
            table = table.append_column(bucket_name, buckets)
            group_specs.append((bucket_name, "min"))  # one bucket per key: any row's will do
        grouped = table.group_by(self.key_column, use_threads=False).aggregate(group_specs)
        if buckets is None:
            route = backend.route
            routed = pa.array([route(k) for k in grouped.column(self.key_column).to_pylist()])
        else:
            routed = grouped.column(f"{bucket_name}_min")
        grouped = grouped.append_column(bucket_name, routed).sort_by(
            [(bucket_name, "ascending"), (self.key_column, "ascending")]
        )
        keys = grouped.column(self.key_column).to_pylist()
        key_buckets: list[int] = grouped.column(bucket_name).to_pylist()
        columns: dict[str, Any] = {self.key_column: grouped.column(self.key_column)}
        for (name, agg), (column, fn) in zip(self.aggregations.items(), specs, strict=True):
            result_name = f"{column}_{fn}" if column else fn
            batch_values = grouped.column(result_name).to_pylist()
            state = backend.value_state(f"agg:{name}")
            located = state.locate_many(keys, key_buckets)
            old = state.get_located(located)
            combine = _COMBINE[agg.kind]
            new = [
                b if o is None else (o if b is None else combine(o, b))
                for o, b in zip(old, batch_values, strict=True)
            ]
            state.set_located(located, new)
            columns[name] = pa.array(new)
        out = pa.table(columns)
        try:
            yield out.select(self.output_schema.names).cast(self.output_schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError) as exc:
            raise StateError(f"aggregate output does not fit {self.output_schema}: {exc}") from exc


def _free_name(table: pa.Table, name: str) -> str:
    """``name``, with underscores appended until no column of ``table`` has it."""
    while name in table.column_names:
        name += "_"
    return name


def aggregate_schema(
    key_field: pa.Field, aggregations: Mapping[str, Aggregation], input_schema: pa.Schema
) -> pa.Schema:
    """Output schema of an :class:`AggregateProcessor`: the key, then one column per
    aggregate (``count`` is int64; ``sum`` of integers int64, of floats float64;
    ``min``/``max`` keep the column's type)."""
    fields = [key_field]
    for name, agg in aggregations.items():
        if agg.kind == "count":
            fields.append(pa.field(name, pa.int64()))
            continue
        if agg.column is None or agg.column not in input_schema.names:
            raise ConfigurationError(
                f"aggregation {name}={agg.kind}({agg.column!r}) names a column not in the "
                f"input (columns: {input_schema.names})"
            )
        typ = input_schema.field(agg.column).type
        if agg.kind == "sum":
            if pa.types.is_integer(typ):
                typ = pa.int64()
            elif pa.types.is_floating(typ) or pa.types.is_decimal(typ):
                typ = pa.float64()
            else:
                raise ConfigurationError(f"sum({agg.column!r}) needs a numeric column, not {typ}")
        fields.append(pa.field(name, typ))
    return pa.schema(fields)


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
