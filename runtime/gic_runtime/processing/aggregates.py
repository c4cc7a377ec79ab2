"""Aggregates: running ``count``/``sum``/``min``/``max`` per key, the fast path for
aggregations.

:class:`Aggregation` names one aggregate (built with :func:`count`, :func:`sum_`,
:func:`min_`, :func:`max_`); :class:`AggregateProcessor` runs a set of them as a
:class:`~gic_runtime.processing.processors.Processor`, on Arrow's ``group_by``, reading
and writing each aggregate's state in bulk; :func:`aggregate_schema` is its output
schema, derived from the input's.

Invariants: each aggregate's running value of a key lives in one value state,
``agg:<output name>``, and after a batch equals the aggregate over every row of that
key in all batches so far (nulls ignored: a key whose values were all null keeps
``None``); only values that changed are written, so a running maximum or minimum that
held, or a sum that gained zero, costs neither a store write nor a changelog record
(:meth:`~gic_runtime.state.states.ValueState.set_changed`); the output holds one row per
key of the batch with the new values; keys are never null. Aggregate names never clash
with the key column. :meth:`AggregateProcessor.state_keys` names every state key a batch
reads before it runs (a batch after a start then reads just those from storage).

Not thread-safe: a processor runs on the task thread that owns the backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from gic_runtime.errors import ConfigurationError, StateError
from gic_runtime.event_time import BatchTime
from gic_runtime.processing.processors import Buckets, FiredCounter, check_keys
from gic_runtime.state.backend import KeyedStateBackend

__all__ = [
    "AggKind",
    "AggregateProcessor",
    "Aggregation",
    "aggregate_schema",
    "combine",
    "count",
    "max_",
    "min_",
    "sum_",
]

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


def combine(kind: AggKind | str, old: Any, new: Any) -> Any:
    """An aggregate of ``kind`` over two parts (``None``: a part without values)."""
    if old is None:
        return new
    if new is None:
        return old
    return _COMBINE[kind](old, new)


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

    has_timers = False
    """Aggregates keep no timers."""
    sweeps_ttl = False
    """Nor states with a time to live."""

    def fire_timers(
        self, backend: KeyedStateBackend, time: BatchTime, fired: FiredCounter = None
    ) -> Iterator[pa.Table]:
        """Nothing to fire."""
        return iter(())

    def state_keys(
        self, table: pa.Table, backend: KeyedStateBackend, buckets: Buckets = None
    ) -> dict[int, list[bytes]]:
        """Per bucket, the store key of every aggregate's state of every key of
        ``table``: all that :meth:`__call__` reads on it
        (:class:`~gic_runtime.processing.processors.NamesStateKeys`)."""
        check_keys(table, self.key_column)
        if table.num_rows == 0:
            return {}
        if buckets is None:
            keys = pc.unique(table.column(self.key_column)).to_pylist()
            key_buckets: list[int] | None = None
        else:
            if len(buckets) != table.num_rows:
                raise StateError(f"{len(buckets)} buckets given for {table.num_rows} rows")
            bucket_name = _free_name(table, "__gic_bucket")
            grouped = (
                table.select([self.key_column])
                .append_column(bucket_name, buckets)
                .group_by(self.key_column, use_threads=False)
                .aggregate([(bucket_name, "min")])
            )
            keys = grouped.column(self.key_column).to_pylist()
            key_buckets = grouped.column(f"{bucket_name}_min").to_pylist()
        out: dict[int, list[bytes]] = {}
        for name in self.aggregations:
            located = backend.value_state(f"agg:{name}").locate_many(keys, key_buckets)
            for bucket, start, stop in located.runs:
                out.setdefault(bucket, []).extend(located.store_keys[start:stop])
        return out

    def __call__(
        self,
        table: pa.Table,
        backend: KeyedStateBackend,
        batch_id: int,
        *,
        buckets: Buckets = None,
        time: BatchTime | None = None,
    ) -> Iterator[pa.Table]:
        """Group the batch by key, then read, combine and write each aggregate's state
        in bulk, one run of keys per bucket (keys sorted by bucket, then key). With
        ``buckets`` no key is hashed except the sample the backend verifies."""
        check_keys(table, self.key_column)
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
            new = [combine(agg.kind, o, b) for o, b in zip(old, batch_values, strict=True)]
            state.set_changed(located, old, new)
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
