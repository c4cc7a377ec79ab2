"""Custom resource models (pydantic): the single source of the CRDs in ``crds/``."""

from gic_operator.models.base import API_VERSION, GROUP, VERSION, Condition, ConditionStatus
from gic_operator.models.gicjob import (
    GICJobSpec,
    GICJobStatus,
    JobPhase,
    JobState,
    RestoreMode,
    SavepointFormat,
    UpgradeMode,
)
from gic_operator.models.pod_template import PodTemplate
from gic_operator.models.savepoint import (
    FINAL_STATES,
    SavepointMode,
    SavepointSpec,
    SavepointState,
    SavepointStatus,
)

__all__ = [
    "API_VERSION",
    "FINAL_STATES",
    "GROUP",
    "VERSION",
    "Condition",
    "ConditionStatus",
    "GICJobSpec",
    "GICJobStatus",
    "JobPhase",
    "JobState",
    "PodTemplate",
    "RestoreMode",
    "SavepointFormat",
    "SavepointMode",
    "SavepointSpec",
    "SavepointState",
    "SavepointStatus",
    "UpgradeMode",
]
