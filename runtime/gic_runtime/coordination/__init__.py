"""What the driver and the executors share, and the driver's side of a checkpointing job.

* :class:`~gic_runtime.coordination.barrier.Barrier` and
  :class:`~gic_runtime.coordination.barrier.TaskAck` -- what the driver ships with a
  batch's state tasks and what each answers; :mod:`~gic_runtime.coordination.ranges`
  (which task owns which buckets) and :class:`TaskSettings` (the executor-side tuning a
  barrier carries).
* :class:`CheckpointTimeline` -- driver side: the job's manifests, restore lineage,
  ownership registry and orphan sweep.

The executor side (the task core, its per-process cache and the in-process
:class:`~gic_runtime.executor.state_task.StateTask`) is :mod:`gic_runtime.executor`.
Both are engine-agnostic: the Spark integration drives them per micro-batch.
"""

from gic_runtime.coordination.settings import TaskSettings
from gic_runtime.coordination.timeline import (
    CheckpointTimeline,
    RestoreRequest,
    StartPoint,
)

__all__ = ["CheckpointTimeline", "RestoreRequest", "StartPoint", "TaskSettings"]
