"""A status is input: whoever may patch the status subresource may write anything there.

The reconcilers read the status with the status models' tolerant read: a value that does
not validate reads as absent (its default), an action in ``status.pending`` the operator
cannot read is dropped (a log line and an ``UnknownAction`` Warning Event), and no
status makes a pass raise. Fields of another operator version are kept as they are.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from tests.operator.jobs.test_job_lifecycle import NS, World

from gic_operator.models.base import MAX_STATUS_NUMBER

GARBAGE: dict[str, Any] = {
    "phase": {"not": "a phase"},
    "epoch": -3,
    "lineage": "many",
    "restarts": MAX_STATUS_NUMBER * 4,
    "deployedGeneration": [1],
    "runningSince": 12,
    "lastCheckpoint": {"id": "seven", "time": []},
    "lastSavepoint": "elsewhere",
    "restoredFrom": {"path": 1, "mode": "Everything"},
    "lastSweep": {"epoch": "x"},
    "processedSavepointNonce": {"n": 1},
    "conditions": ["Ready", {"type": "Ready", "status": 3}, None],
}


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path / "store")


def reconciled(world: World) -> dict[str, Any]:
    return world.condition("Reconciled")


def test_a_garbled_status_never_makes_a_pass_raise(world: World) -> None:
    world.apply_job()
    pod = world.run_driver()
    world.kube.patch_status("gicjobs", NS, "wc", GARBAGE)
    status = world.reconcile()
    assert reconciled(world)["status"] == "True", "no error met"
    assert status["driverPod"] == pod and status["phase"] == "Running"
    assert status["restarts"] == MAX_STATUS_NUMBER * 4, "a field no step rewrote stays"
    assert status["jobId"] == f"{NS}.wc", "lineage 'many' reads as 0"
    assert [c["type"] for c in status["conditions"]] == [
        "CheckpointsHealthy",
        "Ready",
        "Reconciled",
    ]
    assert world.kube.get_pod(NS, pod) is not None, "the running driver is left alone"


def test_a_garbled_status_of_a_failed_driver_still_recovers(world: World) -> None:
    world.apply_job()
    pod = world.run_driver()
    world.kube.patch_status("gicjobs", NS, "wc", GARBAGE)
    world.kube.set_pod_phase(NS, pod, "Failed", exit_code=1)
    status = world.reconcile()
    assert status["phase"] == "Recovering" and status["pending"]["kind"] == "recover"
    assert status["restarts"] == MAX_STATUS_NUMBER * 4
    status = world.reconcile()
    assert status["restarts"] == 1, "the invalid count read as 0"
    assert status["driverPod"] != pod and "pending" not in status
    assert reconciled(world)["status"] == "True"


@pytest.mark.parametrize(
    "pending",
    [
        {"kind": "rescale", "started": "2026-01-01T00:00:00Z"},
        {"kind": "upgrade", "started": "2026-01-01T00:00:00Z"},
        "recover",
        17,
    ],
    ids=["unknown-kind", "missing-fields", "a-string", "a-number"],
)
def test_an_unreadable_pending_action_is_dropped(
    world: World, pending: Any, caplog: pytest.LogCaptureFixture
) -> None:
    world.apply_job()
    pod = world.run_driver()
    world.kube.patch_status("gicjobs", NS, "wc", {"pending": pending})
    with caplog.at_level(logging.INFO):
        status = world.reconcile()
    assert "pending" not in status
    assert "UnknownAction" in world.kube.reasons("wc")
    assert "dropped unreadable pending action" in caplog.text
    assert reconciled(world)["status"] == "True"
    assert status["driverPod"] == pod and status["phase"] == "Running"
    before = len(world.kube.calls)
    world.reconcile()
    assert [c for c in world.kube.calls[before:] if c[0] == "patch_status"] == []


def test_fields_of_another_version_are_kept_and_cause_no_writes(world: World) -> None:
    world.apply_job()
    world.run_driver()
    world.driver_reports(checkpoint=4)
    world.reconcile()
    world.kube.patch_status(
        "gicjobs",
        NS,
        "wc",
        {"futureField": {"a": 1}, "lastCheckpoint": {"futureCounter": 5}},
    )
    status = world.reconcile()
    assert status["futureField"] == {"a": 1}
    assert status["lastCheckpoint"]["futureCounter"] == 5
    assert status["lastCheckpoint"]["id"] == 4
    before = len(world.kube.calls)
    world.reconcile()
    assert [c for c in world.kube.calls[before:] if c[0] == "patch_status"] == []


def test_a_garbled_savepoint_status_never_makes_a_pass_raise(world: World) -> None:
    world.apply_job()
    world.run_driver()
    world.kube.create_object(
        "savepoints", NS, {"metadata": {"name": "sp", "namespace": NS}, "spec": {"job": "wc"}}
    )
    world.kube.patch_status(
        "savepoints",
        NS,
        "sp",
        {"state": ["Completed"], "failures": "x", "triggerTime": 5, "claimedBy": {"a": 1}},
    )
    sp = world.kube.get_object("savepoints", NS, "sp")
    assert sp is not None
    world.savepoints.reconcile(sp)
    sp = world.kube.get_object("savepoints", NS, "sp")
    assert sp is not None
    status = sp["status"]
    assert status["state"] == "InProgress", "an invalid state reads as TriggerPending"
    reconciled = [c for c in status["conditions"] if c["type"] == "Reconciled"]
    assert reconciled[0]["status"] == "True"
