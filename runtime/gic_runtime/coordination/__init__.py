"""What the driver and the executors share.

* :class:`~gic_runtime.coordination.barrier.Barrier` and
  :class:`~gic_runtime.coordination.barrier.TaskAck` -- what the driver ships with a
  batch's state tasks and what each answers; :mod:`~gic_runtime.coordination.ranges`
  (which task owns which buckets) and :class:`TaskSettings` (the executor-side tuning a
  barrier carries).

The executor side (the task core, its per-process cache and the in-process
:class:`~gic_runtime.executor.state_task.StateTask`) is :mod:`gic_runtime.executor`; the
driver's side (the checkpoint timeline, serving savepoint requests) is
:mod:`gic_runtime.driver`. Both are engine-agnostic: the Spark integration drives them
per micro-batch.
"""

from gic_runtime.coordination.task_settings import TaskSettings

__all__ = ["TaskSettings"]
