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

Before the first batch the driver claims the output (:meth:`BatchOutput.claim`): the
job's *state lineage* (a token that travels with the state, see
:mod:`gic_runtime.sinks.output_owners`) is the one the checkpoint or savepoint it starts
from names (:func:`origin_lineage`; ``job:<id>`` for checkpoints written before tokens
existed), or a new random one for a job that starts without state. Every manifest's
``sink`` section records it, so restores and upgrades continue it.

Thread-safety: used by the driver under its batch lock.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from gic_runtime import crashpoints
from gic_runtime.checkpoint.manifest import Manifest
from gic_runtime.coordination.barrier import StagedFile
from gic_runtime.driver.savepoint_requests import read_sink_record
from gic_runtime.layout import job_dir
from gic_runtime.sinks import OutputClaim, Sink, staged_from_manifest
from gic_runtime.storage.uri import StoreResolver, join

__all__ = ["LINEAGE_KEY", "BatchOutput", "origin_lineage", "start_origin"]

#: The key of a manifest's ``sink`` section that names the state lineage.
LINEAGE_KEY = "lineage"


def origin_lineage(sink_section: Mapping[str, Any], job_id: str) -> str:
    """The state lineage a checkpoint of job ``job_id`` with ``sink_section`` belongs
    to: the token it records, else ``job:<job_id>`` (written before tokens existed)."""
    token = sink_section.get(LINEAGE_KEY)
    return token if isinstance(token, str) and token else f"job:{job_id}"


def start_origin(
    resolver: StoreResolver, manifest: Manifest | None, canonical_uri: str | None
) -> tuple[Mapping[str, Any], str] | None:
    """The ``sink`` section and job id of what a job starts from: the start manifest
    (its own checkpoint, a restored checkpoint or native savepoint), else the sink
    record of a canonical savepoint; ``None`` for a start without state (or from a
    canonical savepoint written without a sink record)."""
    if manifest is not None:
        return dict(manifest.sink), manifest.job_id
    if canonical_uri is not None:
        record = read_sink_record(resolver, canonical_uri)
        if record is not None:
            return record, str(record.get("job_id", ""))
    return None


def new_lineage() -> str:
    """A state lineage for a job that starts without state (random, 32 hex digits)."""
    return uuid.uuid4().hex


class BatchOutput:
    """Staging and publishing of job ``job_id``'s batch output through ``sink``."""

    def __init__(self, resolver: StoreResolver, root: str, job_id: str, sink: Sink) -> None:
        self.resolver = resolver
        self.root = root
        self.job_id = job_id
        self.sink = sink
        self.lineage: str | None = None

    def claim(
        self,
        origin: tuple[Mapping[str, Any], str] | None,
        *,
        next_batch: int,
        takeover: str | None,
    ) -> str:
        """Claim the sink's output for this job before its first batch and return the
        job's state lineage. ``origin`` is the ``sink`` section and the job id of the
        checkpoint or savepoint the job starts from (``None``: it starts without state);
        ``next_batch`` the first batch it will publish; ``takeover`` the job id it takes
        the output over from on purpose. Raises
        :class:`~gic_runtime.errors.OutputOwnedError` when another job owns the output."""
        lineage = origin_lineage(origin[0], origin[1]) if origin else new_lineage()
        legacy = None
        described = self.sink.describe()
        if origin is not None and all(origin[0].get(k) == v for k, v in described.items()):
            legacy = origin[1]  # the start point wrote this very output
        self.sink.claim(
            OutputClaim(self.job_id, lineage, next_batch, takeover=takeover, legacy_owner=legacy)
        )
        self.lineage = lineage
        return lineage

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
        section = {**self.sink.describe(), "staged": [f.to_json() for f in staged]}
        if self.lineage is not None:
            section[LINEAGE_KEY] = self.lineage
        return section

    def publish(self, batch_id: int, sink_info: Mapping[str, Any]) -> int:
        """Publish what the ``sink`` section ``sink_info`` of batch ``batch_id``'s
        manifest names, unless the sink already did; returns the rows published."""
        staged = staged_from_manifest(sink_info)
        if self.sink.published(batch_id):
            return 0
        crashpoints.hit("before_publish", batch_id)
        return self.sink.publish(batch_id, staged)
