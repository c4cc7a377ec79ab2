"""The executor side of a checkpointing job: state tasks run against their barrier.

* :func:`run_task` -- Spark's stateful stage runs task ``i`` of a
  :class:`~gic_runtime.coordination.barrier.Barrier` on this process's cached state
  (:mod:`~gic_runtime.executor.process_cache`); :func:`execute` is the task core
  (:mod:`~gic_runtime.executor.core`) every task runs through.
* :class:`StateTask` -- the same core driven in process, without Spark
  (:mod:`~gic_runtime.executor.state_task`).
* :class:`TaskContext` -- what a task's processing callback gets.

Both build their state stack the same way (:mod:`~gic_runtime.executor.state_stack`).
Around the core: machine-wide bucket locks (:mod:`~gic_runtime.executor.bucket_locks`),
the staged output file (:mod:`~gic_runtime.executor.staging`) and what a task learns from
its executor's environment (:mod:`~gic_runtime.executor.environment`). Background
materialization is :mod:`gic_runtime.materialization`.
"""

from gic_runtime.executor.core import (
    ProcessFn,
    TaskContext,
    close_local_executor,
    execute,
    expected_states,
    run_task,
)
from gic_runtime.executor.state_task import BatchFn, StateTask

__all__ = [
    "BatchFn",
    "ProcessFn",
    "StateTask",
    "TaskContext",
    "close_local_executor",
    "execute",
    "expected_states",
    "run_task",
]
