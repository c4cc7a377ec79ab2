"""Custom resource models (pydantic): the single source of the CRDs in ``crds/``."""

from gic_operator.models.base import (
    API_VERSION,
    GROUP,
    VERSION,
    Condition,
    ConditionStatus,
    ResourceStatus,
)
from gic_operator.models.gicjob import (
    GICJobSpec,
    JobState,
    RestoreMode,
    UpgradeMode,
)
from gic_operator.models.gicjob_status import (
    ActionKind,
    CheckpointInfo,
    GICJobStatus,
    JobPhase,
    PendingAction,
    RecoverAction,
    RestoredFrom,
    SavepointRef,
    SuspendAction,
    SweepInfo,
    UpgradeAction,
)
from gic_operator.models.pod_template import PodTemplate
from gic_operator.models.savepoint import (
    FINAL_STATES,
    SavepointMode,
    SavepointSpec,
    SavepointState,
    SavepointStatus,
)
from gic_runtime.checkpoint.manifest import SavepointFormat  # the CRD spells it the same

__all__ = [
    "API_VERSION",
    "FINAL_STATES",
    "GROUP",
    "VERSION",
    "ActionKind",
    "CheckpointInfo",
    "Condition",
    "ConditionStatus",
    "GICJobSpec",
    "GICJobStatus",
    "JobPhase",
    "JobState",
    "PendingAction",
    "PodTemplate",
    "RecoverAction",
    "ResourceStatus",
    "RestoreMode",
    "RestoredFrom",
    "SavepointFormat",
    "SavepointMode",
    "SavepointRef",
    "SavepointSpec",
    "SavepointState",
    "SavepointStatus",
    "SuspendAction",
    "SweepInfo",
    "UpgradeAction",
    "UpgradeMode",
]
