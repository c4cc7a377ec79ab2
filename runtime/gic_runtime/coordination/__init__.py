"""Glue of the core's parts into the two roles of a checkpointing job.

* :class:`StateTask` -- executor side, in process: keyed state of one bucket range whose
  batches run through the same task core as Spark's executors
  (:func:`~gic_runtime.coordination.executor.execute`).
* :class:`CheckpointTimeline` -- driver side: the job's manifests, restore lineage,
  ownership registry and orphan sweep.

Both are engine-agnostic: the Spark integration drives them per micro-batch.
"""

from gic_runtime.coordination.settings import TaskSettings
from gic_runtime.coordination.task import StateTask
from gic_runtime.coordination.timeline import (
    CheckpointTimeline,
    RestoreRequest,
    StartPoint,
)

__all__ = ["CheckpointTimeline", "RestoreRequest", "StartPoint", "StateTask", "TaskSettings"]
