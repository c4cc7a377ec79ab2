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

One concept per module, each stating its invariants: :mod:`.facades` (the state
facades ``StateAccess``, ``KeyState`` and the bound states), :mod:`.processors` (the
``Processor`` contract, the per-key and batch styles, the checks on a task's input),
:mod:`.aggregates` (aggregations and their processor), :mod:`.firing` (firing due
timers after a task's rows). Every public name is importable
from here.

Invariants: a processor touches state only through the backend (so every change is
dual-written to the changelog) and only for keys of its input (which route into the
task's buckets); output tables match ``output_schema``. Keys must not be null.

Not thread-safe: a processor runs on the task thread that owns the backend.
"""

from gic_runtime.processing.aggregates import (
    AggKind,
    AggregateProcessor,
    Aggregation,
    aggregate_schema,
    count,
    max_,
    min_,
    sum_,
)
from gic_runtime.processing.facades import (
    BoundList,
    BoundMap,
    BoundTimers,
    BoundValue,
    KeyState,
    StateAccess,
)
from gic_runtime.processing.processors import (
    BatchFunction,
    BatchProcessor,
    BatchTimerFunction,
    Buckets,
    KeyFunction,
    KeyOutput,
    NamesStateKeys,
    PerKeyProcessor,
    Processor,
    TimerFunction,
    bucket_column_ok,
    drop_columns,
)
from gic_runtime.state.timers import Timer

__all__ = [
    "AggKind",
    "AggregateProcessor",
    "Aggregation",
    "BatchFunction",
    "BatchProcessor",
    "BatchTimerFunction",
    "BoundList",
    "BoundMap",
    "BoundTimers",
    "BoundValue",
    "Buckets",
    "KeyFunction",
    "KeyOutput",
    "KeyState",
    "NamesStateKeys",
    "PerKeyProcessor",
    "Processor",
    "StateAccess",
    "Timer",
    "TimerFunction",
    "aggregate_schema",
    "bucket_column_ok",
    "count",
    "drop_columns",
    "max_",
    "min_",
    "sum_",
]
