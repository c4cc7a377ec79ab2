"""Glue of the core's parts into the executor's role in a checkpointing job.

* :class:`StateTask` -- executor side, in process: keyed state of one bucket range whose
  batches run through the same task core as Spark's executors
  (:func:`~gic_runtime.coordination.executor.execute`).

The driver's side (the checkpoint timeline, serving savepoint requests) is
:mod:`gic_runtime.driver`. Both are engine-agnostic: the Spark integration drives them
per micro-batch.
"""

from gic_runtime.coordination.settings import TaskSettings
from gic_runtime.coordination.task import StateTask

__all__ = ["StateTask", "TaskSettings"]
