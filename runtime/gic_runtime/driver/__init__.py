"""The driver's side of a checkpointing job, engine-agnostic: the job's checkpoint
timeline (:mod:`gic_runtime.driver.timeline`: where an attempt starts, manifests
committed under the fence, restore lineage, retention and the orphan sweeps) and the
savepoint and stop requests served from it between batches
(:mod:`gic_runtime.driver.savepoint_requests`).

The executor's side is :mod:`gic_runtime.coordination`; the two never import each other.
The Spark integration (:mod:`gic_runtime.spark.driver`) drives both per micro-batch.
Imports neither pyspark nor kopf.
"""

from gic_runtime.driver.savepoint_requests import serve_request, stops_job
from gic_runtime.driver.timeline import CheckpointTimeline, RestoreRequest, StartPoint

__all__ = ["CheckpointTimeline", "RestoreRequest", "StartPoint", "serve_request", "stops_job"]
