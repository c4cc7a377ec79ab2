"""Glue of the core's parts into the two roles of a checkpointing job.

* :class:`StateTask` -- executor side: keyed state of one bucket range with its changelog
  writer, uploader and materializer.
* :class:`CheckpointTimeline` -- driver side: the job's manifests, restore lineage,
  ownership registry and orphan sweep.

Both are engine-agnostic: the Spark integration drives them per micro-batch.
"""

from gic_runtime.coordination.task import StateTask, TaskSettings
from gic_runtime.coordination.timeline import (
    CheckpointTimeline,
    RestoreRequest,
    StartPoint,
)

__all__ = ["CheckpointTimeline", "RestoreRequest", "StartPoint", "StateTask", "TaskSettings"]
