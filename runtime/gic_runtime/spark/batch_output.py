"""A batch's output on the driver: where its tasks stage it, what its manifest records
about it, and publishing it through the sink.

State tasks stage batch N's output under ``<job>/staging/<N>/`` and name the files in
their acks; the driver records them in manifest N's ``sink`` section
(:meth:`BatchOutput.sink_section`), publishes them from that section once the manifest
is durable (:meth:`BatchOutput.publish`: after the commit, again on a replay and at a
restart from the job's own checkpoint) and then clears the staging directory.

Invariants (docs/architecture.md I4): what is published is exactly what the manifest's
``sink`` section names (:func:`gic_runtime.sinks.staged_from_manifest`); a batch the
sink reports as published is never published again; ordering publish after the
manifest is the caller's duty (:class:`~gic_runtime.spark.driver.Driver`). Clearing
staging deletes only under the job's ``staging/`` directory.

Thread-safety: used by the driver under its batch lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gic_runtime import crashpoints
from gic_runtime.coordination.barrier import StagedFile
from gic_runtime.layout import job_dir
from gic_runtime.sinks import Sink, staged_from_manifest
from gic_runtime.storage.uri import StoreResolver, join

__all__ = ["BatchOutput"]


class BatchOutput:
    """Staging and publishing of job ``job_id``'s batch output through ``sink``."""

    def __init__(self, resolver: StoreResolver, root: str, job_id: str, sink: Sink) -> None:
        self.resolver = resolver
        self.root = root
        self.job_id = job_id
        self.sink = sink

    def staging_uri(self, batch_id: int | None = None) -> str:
        """The job's staging directory, or batch ``batch_id``'s directory in it."""
        uri = join(job_dir(self.root, self.job_id), "staging")
        return uri if batch_id is None else join(uri, f"{batch_id:012d}")

    def clear_staging(self, batch_id: int | None = None) -> None:
        """Delete what is staged (for batch ``batch_id`` only, when given)."""
        store, prefix = self.resolver.resolve(self.staging_uri(batch_id))
        keys = [info.key for info in store.list(prefix.rstrip("/") + "/")]
        if keys:
            store.delete_many(keys)

    def sink_section(self, staged: Iterable[StagedFile]) -> dict[str, Any]:
        """The manifest's ``sink`` section: the sink's identity and the staged files."""
        return {**self.sink.describe(), "staged": [f.to_json() for f in staged]}

    def publish(self, batch_id: int, sink_info: Mapping[str, Any]) -> int:
        """Publish what the ``sink`` section ``sink_info`` of batch ``batch_id``'s
        manifest names, unless the sink already did; returns the rows published."""
        staged = staged_from_manifest(sink_info)
        if self.sink.published(batch_id):
            return 0
        crashpoints.hit("before_publish", batch_id)
        return self.sink.publish(batch_id, staged)
