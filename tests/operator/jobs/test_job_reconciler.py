"""The GICJob reconciler's decision is a pure function of what a pass observed: the same
view, spec, status and generation always give the same step, and it reads nothing else
(no API, no storage). The steps themselves are exercised end to end in
``test_job_lifecycle.py``."""

from __future__ import annotations

from typing import Any

import pytest

from gic_operator.jobs.job_observer import DriverState, JobView
from gic_operator.jobs.job_reconciler import Decision, Step, decide
from gic_operator.models import GICJobSpec, GICJobStatus


def spec(**overrides: Any) -> GICJobSpec:
    return GICJobSpec.model_validate(
        {
            "application": {"image": "gic-spark:0.1.0", "mainFile": "local:///opt/app/job.py"},
            "checkpointing": {"storage": "file:///tmp/gic"},
            **overrides,
        }
    )


def view(state: DriverState) -> JobView:
    return JobView(
        pod=None, driver_pod=None if state is DriverState.NONE else "d", driver_state=state
    )


def status(**fields: Any) -> GICJobStatus:
    return GICJobStatus.model_validate(fields)


@pytest.mark.parametrize(
    ("state", "fields", "expected"),
    [
        (DriverState.NONE, {}, Decision(Step.LAUNCH, "started")),
        (DriverState.NONE, {"phase": "Suspended"}, Decision(Step.LAUNCH, "resumed")),
        (DriverState.NONE, {"phase": "Finished", "deployedGeneration": 2}, Decision(Step.WAIT)),
        (DriverState.PENDING, {"deployedGeneration": 2}, Decision(Step.RECORD_DEPLOYING)),
        (DriverState.RUNNING, {"deployedGeneration": 2}, Decision(Step.RUNNING)),
        (DriverState.RUNNING, {"deployedGeneration": 1}, Decision(Step.RUNNING_THEN_UPGRADE)),
        (
            DriverState.RUNNING,
            {"deployedGeneration": 1, "upgradeFailedGeneration": 2},
            Decision(Step.RUNNING),
        ),
        (DriverState.FAILED, {"deployedGeneration": 2}, Decision(Step.DRIVER_FAILED)),
        (DriverState.GONE, {"deployedGeneration": 2}, Decision(Step.DRIVER_FAILED)),
        (DriverState.SUCCEEDED, {"deployedGeneration": 2}, Decision(Step.RECORD_FINISHED)),
        (
            DriverState.SUCCEEDED,
            {"deployedGeneration": 1},
            Decision(Step.LAUNCH, "spec changed after the job finished"),
        ),
        (DriverState.DELETING, {"deployedGeneration": 2}, Decision(Step.WAIT)),
        (DriverState.UNKNOWN, {"deployedGeneration": 2}, Decision(Step.WAIT)),
        (DriverState.NONE, {"phase": "Failed", "deployedGeneration": 2}, Decision(Step.WAIT)),
        (
            DriverState.RUNNING,
            {"phase": "Failed", "deployedGeneration": 1},
            Decision(Step.RELAUNCH_FAILED, "the spec changed after the job failed"),
        ),
    ],
)
def test_a_running_job_decides_from_its_driver_state(
    state: DriverState, fields: dict[str, Any], expected: Decision
) -> None:
    assert decide(view(state), spec(), status(**fields), generation=2) == expected


@pytest.mark.parametrize(
    ("state", "fields", "expected"),
    [
        (DriverState.RUNNING, {}, Step.BEGIN_SUSPEND),
        (DriverState.PENDING, {"suspendFailedGeneration": 2}, Step.WAIT),
        (DriverState.NONE, {"phase": "Running"}, Step.RECORD_SUSPENDED),
        (DriverState.SUCCEEDED, {"phase": "Suspended"}, Step.WAIT),
    ],
)
def test_a_suspended_job_stops_its_driver_once(
    state: DriverState, fields: dict[str, Any], expected: Step
) -> None:
    suspended = spec(state="suspended")
    assert decide(view(state), suspended, status(**fields), generation=2).step is expected
