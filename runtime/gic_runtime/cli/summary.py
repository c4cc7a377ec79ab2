"""Summaries of manifests for display: totals per bucket, referenced bytes, ownership.

"Bytes referenced" by a manifest is the sum of its snapshot sizes and changelog section
lengths: what restoring it reads, not the size of the (possibly shared) segment objects.
Ownership is classified with the same :class:`~gic_runtime.checkpoint.ownership.OwnershipPolicy`
the job uses to decide deletions, including its restore source while the lineage is not
released, so the display says exactly which files the job may delete.

Thread-safety: pure functions over immutable values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gic_runtime import codec
from gic_runtime.checkpoint.manifest import Manifest, RestoreLineage
from gic_runtime.checkpoint.ownership import Owner, OwnershipPolicy
from gic_runtime.codec import json_record

#: How each owner class is shown.
OWNER_LABELS: Mapping[Owner, str] = {
    Owner.JOB: "job timeline",
    Owner.SAVEPOINT: "savepoint",
    Owner.CLAIMED_SOURCE: "restore source (claimed)",
    Owner.NO_CLAIM_SOURCE: "restore source (no-claim)",
    Owner.FOREIGN: "other",
}


@json_record("bucket totals")
@dataclass(frozen=True, slots=True)
class BucketTotals:
    """Totals over the buckets of one manifest."""

    with_state: int
    snapshots: int
    changelog_handles: int
    seq_total: int
    max_seq: int
    snapshot_bytes: int
    changelog_bytes: int

    @property
    def bytes(self) -> int:
        return self.snapshot_bytes + self.changelog_bytes

    def to_json(self) -> dict[str, Any]:
        """The fields (not ``bytes``) as a JSON object."""
        return codec.to_json(self)


def bucket_totals(manifest: Manifest) -> BucketTotals:
    states = manifest.buckets.values()
    snapshots = [s.snapshot for s in states if s.snapshot is not None]
    handles = [h for s in states for h in s.changelog]
    return BucketTotals(
        with_state=sum(1 for s in states if s.seq > 0 or s.snapshot or s.changelog),
        snapshots=len(snapshots),
        changelog_handles=len(handles),
        seq_total=sum(s.seq for s in states),
        max_seq=max((s.seq for s in states), default=0),
        snapshot_bytes=sum(s.size for s in snapshots),
        changelog_bytes=sum(h.length for h in handles),
    )


def referenced_bytes(manifest: Manifest) -> dict[str, int]:
    """Bytes the manifest references in each object it names."""
    sizes: dict[str, int] = {}
    for state in manifest.buckets.values():
        if state.snapshot is not None:
            sizes[state.snapshot.uri] = sizes.get(state.snapshot.uri, 0) + state.snapshot.size
        for handle in state.changelog:
            sizes[handle.uri] = sizes.get(handle.uri, 0) + handle.length
    return sizes


def lineage_json(lineage: RestoreLineage | None) -> dict[str, Any] | None:
    if lineage is None:
        return None
    return {
        "source": lineage.source_uri,
        "mode": lineage.mode.value,
        "source_checkpoint_id": (
            lineage.source_checkpoint_id if lineage.source_checkpoint_id >= 0 else None
        ),
        "released": lineage.released,
    }


@json_record("owner group", computed=("label",))
@dataclass(frozen=True, slots=True)
class OwnerGroup:
    """Objects of one owner class and the bytes referenced in them."""

    owner: Owner
    objects: int
    bytes: int

    @property
    def label(self) -> str:
        return OWNER_LABELS[self.owner]

    def to_json(self) -> dict[str, Any]:
        """``owner`` (its value), ``objects``, ``bytes`` and ``label``."""
        return codec.to_json(self)


def group_by_owner(policy: OwnershipPolicy, sizes: Mapping[str, int]) -> list[OwnerGroup]:
    """``sizes`` (object URI -> bytes) grouped by owner, in the order of :class:`Owner`."""
    counts: dict[Owner, list[int]] = {}
    for uri, size in sizes.items():
        entry = counts.setdefault(policy.classify(uri), [0, 0])
        entry[0] += 1
        entry[1] += size
    return [OwnerGroup(owner, *counts[owner]) for owner in Owner if owner in counts]
