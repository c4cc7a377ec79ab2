"""Initial state from a DataFrame, the driver's side: checking it against the query
when the query is built, and adding it to the first batch of a job without state
(:mod:`gic_runtime.processing.initial_state` applies it in the state tasks).

The DataFrame has the stream's key column and value columns. Checked when the query is
built (a :class:`~gic_runtime.errors.ConfigurationError` naming the fix): the key
column exists and casts to the stream's key type; without a function there is at
least one value column; for ``aggregate(...)`` every value column is one of the
aggregates and fits it (``count`` integral, ``sum`` numeric, ``min``/``max`` the input
column's type); windows start empty and take none. Checked per row in the tasks: no
null keys, one row per key (without a function), values that can be stored.

Invariant: the initial rows reach the stateful stage only in the first batch of a job
with no checkpoint and no restore source (:func:`with_initial`), routed with the
input rows, so each lands in the task that owns its key.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegralType, NumericType

from gic_runtime.errors import ConfigurationError
from gic_runtime.processing import AggregateProcessor, KeyFunction, Processor
from gic_runtime.processing.initial_state import INITIAL_COLUMN, MARKER, InitialState
from gic_runtime.processing.windows import WindowProcessor

__all__ = ["InitialInput", "prepare_initial", "with_initial"]


@dataclass(frozen=True)
class InitialInput:
    """The initial rows as the stage takes them (the key column and the
    :data:`INITIAL_COLUMN` struct) and how the tasks apply them."""

    df: DataFrame
    state: InitialState


def prepare_initial(
    stream_df: DataFrame,
    key: str,
    processor: Processor,
    initial: DataFrame,
    init: KeyFunction | None = None,
) -> InitialInput:
    """Check ``initial`` against the query (see the module docstring) and prepare it."""
    if initial.isStreaming:
        raise ConfigurationError("the initial state must be a batch DataFrame, not a stream")
    if key not in initial.columns:
        raise ConfigurationError(
            f"the initial state has no key column {key!r} (columns: {initial.columns}); "
            "name the key column as the stream does"
        )
    if isinstance(processor, WindowProcessor):
        raise ConfigurationError(
            "windows start empty; an initial state is for process or aggregate"
        )
    values = [c for c in initial.columns if c != key]
    if init is None and not values:
        raise ConfigurationError(
            "the initial state has no value columns: give columns named after the value "
            "states to set, or pass init= to set state yourself"
        )
    states = {c: c for c in values}
    if isinstance(processor, AggregateProcessor):
        if init is not None:
            raise ConfigurationError("aggregate() takes its initial state by column; drop init=")
        states = _aggregate_states(stream_df, initial, processor, values)
    key_type = stream_df.schema[key].dataType
    if initial.schema[key].dataType != key_type:
        try:
            initial = initial.withColumn(key, F.col(key).cast(key_type))
        except Exception as exc:
            raise ConfigurationError(
                f"the initial state's key column {key!r} is {initial.schema[key].dataType}, "
                f"the stream's {key_type}, and does not cast: {exc}"
            ) from exc
    struct = (
        F.struct(*[F.col(c) for c in values]) if values else F.struct(F.lit(True).alias(MARKER))
    )
    prepared = initial.select(F.col(key), struct.alias(INITIAL_COLUMN))
    spec = InitialState(key, {} if init is not None else states, init, processor.has_timers)
    return InitialInput(prepared, spec)


def _aggregate_states(
    stream_df: DataFrame, initial: DataFrame, processor: AggregateProcessor, values: list[str]
) -> dict[str, str]:
    unknown = [c for c in values if c not in processor.aggregations]
    if unknown:
        raise ConfigurationError(
            f"initial state columns {unknown} are not aggregates of the query "
            f"({sorted(processor.aggregations)}); name columns after the aggregates"
        )
    for column in values:
        agg = processor.aggregations[column]
        got = initial.schema[column].dataType
        ok = (
            isinstance(got, IntegralType)
            if agg.kind == "count"
            else isinstance(got, NumericType)
            if agg.kind == "sum"
            else agg.column is not None and got == stream_df.schema[agg.column].dataType
        )
        if not ok:
            want = {"count": "an integer", "sum": "a number"}.get(agg.kind, "the input column's")
            raise ConfigurationError(
                f"initial state column {column!r} is {got}; {agg.kind}() needs {want} type"
            )
    return {c: f"agg:{c}" for c in values}


def with_initial(batch: DataFrame, initial: InitialInput) -> DataFrame:
    """``batch`` (a micro-batch's input) with the initial rows added."""
    return batch.unionByName(initial.df, allowMissingColumns=True)
