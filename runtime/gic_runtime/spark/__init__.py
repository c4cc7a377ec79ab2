"""GIC for Spark Structured Streaming: keyed state with incremental checkpoints.

The only part of the runtime that imports pyspark. See :mod:`gic_runtime.spark.job` for
the API, :mod:`gic_runtime.spark.driver` for the per-batch protocol and
:mod:`gic_runtime.spark.startup` for the start-up that builds a driver.

The names below are loaded on first use (PEP 562), not when the package is imported:
an executor's Python worker imports :mod:`gic_runtime.spark.stage` to run a state
task, and importing a submodule runs this file first. Loading the driver's side here
(the job API, ``pyspark.sql``, pandas through the state reader) doubled what each new
worker imports before its first task: 0.6-0.7 CPU-seconds against 0.29
(docs/architecture.md §13.3). Invariant: nothing
this file imports at module level pulls in the driver's side.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gic_runtime.processing import KeyState, StateAccess, Timer, count, max_, min_, sum_
    from gic_runtime.processing.window_specs import (
        Window,
        WindowSpec,
        session_window,
        sliding,
        tumbling,
    )
    from gic_runtime.spark.driver import Driver
    from gic_runtime.spark.job import (
        GICJob,
        GICQuery,
        KeyedStream,
        RunSummary,
        StatefulStream,
    )
    from gic_runtime.spark.reports import BatchReport, StartInfo
    from gic_runtime.spark.session import local_spark
    from gic_runtime.spark.startup import start_driver
    from gic_runtime.spark.state_read import read_state
    from gic_runtime.spark.state_write import write_state
    from gic_runtime.state.timers import from_micros, to_micros

_HOMES: dict[str, str] = {
    "BatchReport": "gic_runtime.spark.reports",
    "Driver": "gic_runtime.spark.driver",
    "GICJob": "gic_runtime.spark.job",
    "GICQuery": "gic_runtime.spark.job",
    "KeyState": "gic_runtime.processing",
    "KeyedStream": "gic_runtime.spark.job",
    "RunSummary": "gic_runtime.spark.job",
    "StartInfo": "gic_runtime.spark.reports",
    "StateAccess": "gic_runtime.processing",
    "StatefulStream": "gic_runtime.spark.job",
    "Timer": "gic_runtime.processing",
    "Window": "gic_runtime.processing.window_specs",
    "WindowSpec": "gic_runtime.processing.window_specs",
    "count": "gic_runtime.processing",
    "from_micros": "gic_runtime.state.timers",
    "local_spark": "gic_runtime.spark.session",
    "max_": "gic_runtime.processing",
    "min_": "gic_runtime.processing",
    "read_state": "gic_runtime.spark.state_read",
    "session_window": "gic_runtime.processing.window_specs",
    "sliding": "gic_runtime.processing.window_specs",
    "start_driver": "gic_runtime.spark.startup",
    "sum_": "gic_runtime.processing",
    "to_micros": "gic_runtime.state.timers",
    "tumbling": "gic_runtime.processing.window_specs",
    "write_state": "gic_runtime.spark.state_write",
}
"""Each exported name and the module that defines it."""

__all__ = [
    "BatchReport",
    "Driver",
    "GICJob",
    "GICQuery",
    "KeyState",
    "KeyedStream",
    "RunSummary",
    "StartInfo",
    "StateAccess",
    "StatefulStream",
    "Timer",
    "Window",
    "WindowSpec",
    "count",
    "from_micros",
    "local_spark",
    "max_",
    "min_",
    "read_state",
    "session_window",
    "sliding",
    "start_driver",
    "sum_",
    "to_micros",
    "tumbling",
    "write_state",
]


def __getattr__(name: str) -> Any:
    """Load an exported name from its module on first access (then it is a global)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
