"""Initial state: what a job without checkpoints starts from, given as rows of a
DataFrame (the executor side; :mod:`gic_runtime.spark.initial_state` prepares them).

In the first batch of a job that has no state yet (no checkpoint of its own, no
restore), the driver routes the initial rows with the input rows: each initial row
carries its key in the key column and its values in the struct column
:data:`INITIAL_COLUMN`, which input rows hold null. Each state task splits them off
(:meth:`InitialState.split`) and applies them to its buckets before it processes any
input row (:meth:`InitialState.apply`):

* by default every value column ``c`` sets the value state ``states[c]`` of the row's
  key (``c`` itself, or ``agg:c`` for an aggregate ``c``); a key given twice is refused;
* with a function, ``init(key, rows, state)`` runs once per key with the key's initial
  rows (its columns: the key and the value columns), as a per-key ``process`` function
  does, and may set any state and register timers; what it returns is ignored.

Invariants: initial rows touch state only through the backend (dual-written like any
change, so they are part of the first checkpoint, and a retried first batch applies
them again from scratch); they are applied before any input row; a key that is null
or a value that cannot be stored fails the batch with a StateError naming the column
and the fix, and nothing of the batch is committed.

Not thread-safe: runs on the task thread that owns the backend.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gic_runtime.errors import StateError
from gic_runtime.event_time import BatchTime
from gic_runtime.processing.facades import KeyState, StateAccess
from gic_runtime.processing.processors import KeyFunction
from gic_runtime.state.backend import KeyedStateBackend

__all__ = ["INITIAL_COLUMN", "MARKER", "InitialState"]

INITIAL_COLUMN = "__gic_initial"
"""The struct column that carries an initial row's values (null on input rows)."""
MARKER = "__gic_marker"
"""The struct's only field when the initial rows have no value columns (not shown)."""


@dataclass(frozen=True)
class InitialState:
    """How a task applies initial rows (see the module docstring)."""

    key_column: str
    states: Mapping[str, str] = field(default_factory=dict)
    """Value column -> value state it sets (the default mapping)."""
    init: KeyFunction | None = None
    timers: bool = False
    """Whether ``init`` may register timers (the processor fires them)."""

    def split(self, table: pa.Table) -> tuple[pa.Table, pa.Table | None]:
        """``(input rows, initial rows)`` of a task's table; the initial rows as the key
        column plus the value columns (``None`` when there are none)."""
        if INITIAL_COLUMN not in table.column_names:
            return table, None
        values = table.column(INITIAL_COLUMN)
        initial = pc.is_valid(values)
        rows = table.filter(pc.invert(initial)).drop_columns([INITIAL_COLUMN])
        picked = table.filter(initial)
        if picked.num_rows == 0:
            return rows, None
        struct = picked.column(INITIAL_COLUMN).combine_chunks()
        columns = {self.key_column: picked.column(self.key_column)}
        for i, f in enumerate(struct.type):
            if f.name != MARKER:
                columns[f.name] = struct.field(i)
        return rows, pa.table(columns)

    def apply(self, rows: pa.Table, backend: KeyedStateBackend, time: BatchTime) -> int:
        """Apply the task's initial ``rows``; returns how many keys got state."""
        keys = rows.column(self.key_column)
        if keys.null_count:
            raise StateError(
                f"the initial state has {keys.null_count} row(s) with a null "
                f"{self.key_column!r}; drop or fill them"
            )
        if self.init is not None:
            return self._apply_function(rows, backend, time)
        key_list = keys.to_pylist()
        twice = [k for k, n in Counter(map(_hashable, key_list)).items() if n > 1]
        if twice:
            raise StateError(
                f"key {twice[0]!r:.60} appears more than once in the initial state; give one "
                "row per key (or pass init= to combine rows yourself)"
            )
        for column, state_name in self.states.items():
            state = backend.value_state(state_name)
            values = rows.column(column).to_pylist()
            try:
                state.set_many(
                    (k, v) for k, v in zip(key_list, values, strict=True) if v is not None
                )
            except StateError as exc:
                raise StateError(f"initial state column {column!r}: {exc}") from exc
        return len(key_list)

    def _apply_function(self, rows: pa.Table, backend: KeyedStateBackend, time: BatchTime) -> int:
        assert self.init is not None
        access = StateAccess(backend, time.batch_id, time, timers=self.timers)
        groups: dict[Any, list[int]] = {}
        for i, key in enumerate(rows.column(self.key_column).to_pylist()):
            groups.setdefault(key, []).append(i)
        for key, indices in groups.items():
            out = self.init(key, rows.take(indices), KeyState(access, key))
            if out is not None and not isinstance(out, pa.Table):
                list(out)  # run a generator to the end; its rows are not output
        return len(groups)


def _hashable(key: Any) -> Any:
    return tuple(key) if isinstance(key, list) else key
