"""The ``Savepoint`` custom resource (``gic.io/v1alpha1``, short name ``gsp``).

A Savepoint is one self-contained copy of a job's state, taken by the job's driver between
micro-batches. It is created by a user (``kubectl apply``), by the annotation
``gic.io/savepoint=<nonce>`` on a GICJob or by the periodic policy (label
``gic.io/created-by``: ``annotation`` or ``periodic``). Upgrade and suspend savepoints are
not resources: their paths show in the GICJob's ``status.lastSavepoint``.

Invariants:

* the files of a Savepoint are deleted only when the resource is deleted with
  ``disposeOnDelete: true`` and no job has claimed it (``status.claimedBy`` empty);
* a savepoint never enters a job's checkpoint timeline: restoring from it reads it, and
  only a Claim restore transfers ownership (recorded in ``claimedBy``);
* ``status.state`` only moves forward: TriggerPending -> InProgress -> Completed or
  Failed; Abandoned when its job went away before it completed.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from gic_operator.models.base import (
    CONDITIONS_LIST,
    Condition,
    KubeModel,
    ResourceStatus,
    StatusInt,
)
from gic_runtime.checkpoint.manifest import SavepointFormat, SavepointType


class SavepointMode(StrEnum):
    """Whether the job keeps running after the savepoint (the CRD's spelling;
    :meth:`to_runtime` gives the runtime's savepoint type)."""

    INTERMEDIATE = "intermediate"
    STOP = "stop"

    def to_runtime(self) -> SavepointType:
        """The runtime's savepoint type: ``intermediate``, or ``terminal`` for a stop."""
        if self is SavepointMode.STOP:
            return SavepointType.TERMINAL
        return SavepointType.INTERMEDIATE


class SavepointState(StrEnum):
    """Progress of a savepoint."""

    TRIGGER_PENDING = "TriggerPending"
    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"
    FAILED = "Failed"
    ABANDONED = "Abandoned"


#: States a savepoint never leaves.
FINAL_STATES = frozenset(
    {SavepointState.COMPLETED, SavepointState.FAILED, SavepointState.ABANDONED}
)


class SavepointSpec(KubeModel):
    """Desired savepoint."""

    job: str = Field(min_length=1, description="Name of the GICJob in the same namespace.")
    format: SavepointFormat = Field(
        SavepointFormat.NATIVE,
        description="native (the checkpoint's own files, fastest) or canonical (a portable "
        "per-bucket export that restores under another bucket count or version).",
    )
    mode: SavepointMode = Field(
        SavepointMode.INTERMEDIATE,
        description="intermediate (the job keeps running) or stop (the job stops after it).",
    )
    dispose_on_delete: bool = Field(
        False,
        description="Delete the savepoint's files when this resource is deleted (never while "
        "a job has claimed it). Default false: files outlive the resource.",
    )


class SavepointStatus(ResourceStatus):
    """Observed state of a savepoint, written by the operator."""

    state: SavepointState = Field(SavepointState.TRIGGER_PENDING, description="Progress.")
    request_id: str | None = Field(None, description="Control request id sent to the driver.")
    path: str | None = Field(None, description="URI of the savepoint directory.")
    checkpoint_id: StatusInt | None = Field(None, description="Checkpoint the savepoint copies.")
    trigger_time: str | None = Field(None, description="RFC 3339 time the request was made.")
    completion_time: str | None = Field(None, description="RFC 3339 time it completed/failed.")
    size_bytes: StatusInt | None = Field(None, description="Bytes in the savepoint directory.")
    error: str | None = Field(None, description="Why it failed.")
    failures: StatusInt = Field(0, description="Failed attempts so far.")
    claimed_by: str | None = Field(
        None, description="GICJob (namespace/name) that restored from it in Claim mode."
    )
    disposal_error: str | None = Field(
        None, description="Last error while deleting the files on resource deletion."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Conditions, at most one of each type.",
        json_schema_extra=CONDITIONS_LIST,
    )
