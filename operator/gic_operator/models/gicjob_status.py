"""The ``GICJob`` status: what the operator observed and did, and the action in progress.

The status is written only by the operator, one merge patch per reconcile pass
(:class:`gic_operator.reconcile.status_pass.Pass`), and read back with
:meth:`~gic_operator.models.base.ResourceStatus.read`, which never fails: whoever may
patch the status subresource may have written anything, and what does not validate reads
as absent.

``pending`` is a discriminated union on ``kind``: a recovery (:class:`RecoverAction`), an
upgrade (:class:`UpgradeAction`) or a suspend (:class:`SuspendAction`), each with exactly
the fields its steps use. The CRD shows it as one object with every member's fields (a
structural schema has no unions) and ``kind`` one of the three.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from gic_operator.models.base import (
    CONDITIONS_LIST,
    Condition,
    ResourceStatus,
    StatusInt,
    StatusPart,
)
from gic_operator.models.gicjob import RestoreMode, UpgradeMode


class JobPhase(StrEnum):
    """Lifecycle phase shown in ``kubectl get gj``. ``Starting``: the driver pod runs but
    its driver has not completed a checkpoint yet; ``Running``: it has (and stays
    ``Running`` while its pod runs)."""

    PENDING = "Pending"
    DEPLOYING = "Deploying"
    STARTING = "Starting"
    RUNNING = "Running"
    UPGRADING = "Upgrading"
    RECOVERING = "Recovering"
    SUSPENDING = "Suspending"
    SUSPENDED = "Suspended"
    FINISHED = "Finished"
    FAILED = "Failed"
    INVALID = "Invalid"


class CheckpointInfo(StatusPart):
    """The job's latest completed checkpoint."""

    id: StatusInt = Field(description="Checkpoint (micro-batch) id.")
    time: str | None = Field(default=None, description="RFC 3339 completion time.")
    duration_ms: float | None = Field(default=None, description="Critical-path duration.")
    bytes: StatusInt | None = Field(default=None, description="Bytes uploaded for it.")


class SavepointRef(StatusPart):
    """The job's latest completed savepoint."""

    path: str = Field(description="Savepoint directory URI.")
    time: str | None = Field(default=None, description="RFC 3339 completion time.")


class RestoredFrom(StatusPart):
    """Where the current lineage started."""

    path: str = Field(description="Source URI.")
    savepoint: str | None = Field(default=None, description="Savepoint resource, if one was named.")
    mode: RestoreMode = Field(description="Claim or NoClaim.")
    released: bool = Field(
        default=False, description="NoClaim: no retained checkpoint references the source any more."
    )


class SweepInfo(StatusPart):
    """The last orphan sweep of the job's storage."""

    time: str = Field(description="RFC 3339 time of the sweep.")
    files: StatusInt = Field(description="Orphaned objects deleted.")
    bytes: StatusInt = Field(description="Bytes deleted.")
    epoch: StatusInt | None = Field(
        default=None, description="Fencing epoch claimed before the sweep."
    )


class ActionKind(StrEnum):
    """The kind of a multi-step action in ``status.pending``."""

    RECOVER = "recover"
    UPGRADE = "upgrade"
    SUSPEND = "suspend"


_KIND = "upgrade, suspend or recover."


class _Action(StatusPart):
    """A durable intent of the operator (survives operator restarts)."""

    kind: ActionKind = Field(description=_KIND)
    started: str = Field(description="RFC 3339 time the action began.")


class RecoverAction(_Action):
    """Relaunch a failed driver after its backoff: claim an epoch, sweep, launch."""

    kind: Literal[ActionKind.RECOVER] = Field(default=ActionKind.RECOVER, description=_KIND)
    due: str = Field(description="RFC 3339 time the next step may run (backoff).")
    reason: str = Field(description="Why the action began.")
    epoch: StatusInt | None = Field(
        default=None, description="Fencing epoch a recovery claimed (one per recovery)."
    )


class _StopAction(_Action):
    """An action that may stop the driver with a savepoint first."""

    request_id: str | None = Field(
        default=None, description="Control request id sent to the driver."
    )
    target_generation: StatusInt = Field(description="Spec generation it rolls out.")
    requested: bool | None = Field(
        default=None, description="The stop-with-savepoint request was written to storage."
    )


class UpgradeAction(_StopAction):
    """Roll a new spec generation out to a running job."""

    kind: Literal[ActionKind.UPGRADE] = Field(default=ActionKind.UPGRADE, description=_KIND)
    mode: UpgradeMode = Field(description="Upgrade mode the upgrade runs with.")


class SuspendAction(_StopAction):
    """Stop the job with a savepoint."""

    kind: Literal[ActionKind.SUSPEND] = Field(default=ActionKind.SUSPEND, description=_KIND)


#: The action in ``status.pending``, told apart by ``kind``.
PendingAction = RecoverAction | UpgradeAction | SuspendAction


class GICJobStatus(ResourceStatus):
    """Observed state, written by the operator."""

    phase: JobPhase = Field(default=JobPhase.PENDING, description="Lifecycle phase.")
    observed_generation: int | None = Field(
        default=None, description="metadata.generation the operator last acted on."
    )
    job_id: str | None = Field(default=None, description="Job id in storage (<namespace>.<name>).")
    epoch: StatusInt | None = Field(
        default=None, description="Fencing epoch of the current driver."
    )
    driver_pod: str | None = Field(default=None, description="Name of the current driver pod.")
    deployed_generation: int | None = Field(
        default=None, description="Spec generation the current driver runs."
    )
    lineage: StatusInt = Field(
        default=0, description="State lineage; a stateless upgrade starts a new one (new job id)."
    )
    restarts: StatusInt = Field(default=0, description="Restarts since the count was last reset.")
    last_restart_time: str | None = Field(
        default=None, description="RFC 3339 time of the last restart."
    )
    next_restart_time: str | None = Field(
        default=None, description="RFC 3339 time the pending restart is due (backoff)."
    )
    running_since: str | None = Field(
        default=None, description="RFC 3339 time the driver pod was Running."
    )
    last_checkpoint: CheckpointInfo | None = Field(default=None, description="Latest checkpoint.")
    last_savepoint: SavepointRef | None = Field(
        default=None, description="Latest completed savepoint."
    )
    restored_from: RestoredFrom | None = Field(
        default=None, description="Restore source of the lineage."
    )
    last_sweep: SweepInfo | None = Field(default=None, description="Last orphan sweep.")
    pending: PendingAction | None = Field(
        default=None, discriminator="kind", description="Operator action in progress."
    )
    processed_savepoint_nonce: str | None = Field(
        default=None, description="Last gic.io/savepoint annotation value turned into a Savepoint."
    )
    last_periodic_savepoint: str | None = Field(
        default=None, description="RFC 3339 time of the last periodic savepoint trigger."
    )
    upgrade_failed_generation: int | None = Field(
        default=None,
        description="Generation whose upgrade failed; not retried until the spec changes.",
    )
    suspend_failed_generation: int | None = Field(
        default=None,
        description="Generation whose suspend savepoint failed; not retried until then.",
    )
    message: str | None = Field(default=None, description="Human-readable summary of the phase.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Conditions, at most one of each type.",
        json_schema_extra=CONDITIONS_LIST,
    )
