"""GIC for Spark Structured Streaming: keyed state with incremental checkpoints.

The only part of the runtime that imports pyspark. See :mod:`gic_runtime.spark.job` for
the API, :mod:`gic_runtime.spark.driver` for the per-batch protocol and
:mod:`gic_runtime.spark.startup` for the start-up that builds a driver.
"""

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
