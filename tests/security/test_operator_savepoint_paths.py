"""The operator derives every savepoint directory itself; what a driver reports is only
compared with it.

A driver runs the tenant's code and writes the savepoint outcome. An outcome naming
another directory (another job's savepoint on the same storage root, the job's own
checkpoint directory) must never become a Savepoint's ``status.path`` nor what disposal
deletes: the Savepoint fails with a clear message and nothing at that path is touched.
Upgrade and suspend savepoints are held to the same rule.

Drives the reconcilers against the in-memory API and real local storage, playing the
driver by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.operator.jobs.test_job_lifecycle import NS, World

from gic_runtime.control import ControlChannel, Outcome
from gic_runtime.control.model import OutcomeState
from gic_runtime.status import SavepointStatus


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path / "store")


def derived_dir(world: World, name: str, job: str = "wc") -> str:
    """Where the operator must put Savepoint ``name`` of ``job``."""
    sp = world.kube.get_object("savepoints", NS, name)
    assert sp is not None
    uid8 = sp["metadata"]["uid"][:8]
    return f"{world.storage_uri}/savepoints/{NS}.{job}/gsp-{name}-{uid8}"


def driver_completes(world: World, request_id: str, path: str, job: str = "wc") -> None:
    """The job's driver writes a completed outcome naming ``path``."""
    storage = world.storage(job)
    channel = ControlChannel(storage.resolver, storage.root, storage.job_id)
    channel.complete(
        Outcome(
            request_id,
            OutcomeState.COMPLETED,
            path=path,
            checkpoint_id=3,
            size_bytes=10,
            files=1,
            finished_at=world.clock.t,
        )
    )


def files_at(uri: str) -> Path:
    local = Path(uri.removeprefix("file://"))
    local.mkdir(parents=True, exist_ok=True)
    (local / "_savepoint.manifest").write_bytes(b"precious")
    return local / "_savepoint.manifest"


def test_the_request_targets_the_derived_directory(world: World) -> None:
    world.apply_job()
    world.run_driver()
    world.create_savepoint("sp")
    status = world.reconcile_savepoint("sp")
    assert status["state"] == "InProgress"
    assert status["path"] == derived_dir(world, "sp")
    storage = world.storage()
    request = ControlChannel(storage.resolver, storage.root, storage.job_id).request(
        status["requestId"]
    )
    assert request is not None and getattr(request, "target", None) == derived_dir(world, "sp")


def test_forged_outcome_cannot_point_disposal_at_another_tenants_savepoint(world: World) -> None:
    # Two jobs share the storage root; the victim has a completed savepoint.
    world.apply_job("victim")
    world.run_driver("victim")
    world.create_savepoint("victim-sp", "victim")
    victim_status = world.reconcile_savepoint("victim-sp")
    victim_dir = derived_dir(world, "victim-sp", "victim")
    precious = files_at(victim_dir)
    driver_completes(world, victim_status["requestId"], victim_dir, "victim")
    assert world.reconcile_savepoint("victim-sp")["state"] == "Completed"

    # The attacker's driver answers its own savepoint with the victim's directory.
    world.apply_job("wc")
    world.run_driver("wc")
    world.create_savepoint("sp", "wc")
    rid = world.reconcile_savepoint("sp")["requestId"]
    driver_completes(world, rid, victim_dir, "wc")
    status = world.reconcile_savepoint("sp")

    assert status["state"] == "Failed"
    assert "refused" in status["error"] and victim_dir in status["error"]
    assert status.get("path") != victim_dir
    assert "SavepointFailed" in world.kube.reasons("sp")

    # Deleting the attacker's Savepoint deletes nothing of the victim's.
    body = world.kube.get_object("savepoints", NS, "sp")
    assert body is not None
    world.savepoints.dispose(body, 0)
    assert precious.read_bytes() == b"precious"


def test_forged_status_path_is_not_what_disposal_deletes(world: World) -> None:
    world.apply_job("victim")
    victim = files_at(f"{world.storage_uri}/savepoints/{NS}.victim/gsp-x-12345678")
    world.apply_job("wc")
    world.run_driver("wc")
    world.create_savepoint("sp", "wc")
    rid = world.reconcile_savepoint("sp")["requestId"]
    own = files_at(derived_dir(world, "sp"))
    driver_completes(world, rid, derived_dir(world, "sp"))
    assert world.reconcile_savepoint("sp")["state"] == "Completed"
    # Someone with write access to the status points it at the victim's directory.
    world.kube.patch_status("savepoints", NS, "sp", {"path": str(victim.parent.as_uri())})
    body = world.kube.get_object("savepoints", NS, "sp")
    assert body is not None
    world.savepoints.dispose(body, 0)
    assert victim.read_bytes() == b"precious"
    assert own.exists(), "the recorded path disagrees with the derived one: nothing is deleted"


def test_savepoint_outcome_inside_the_job_directory_is_refused(world: World) -> None:
    world.apply_job()
    world.run_driver()
    world.create_savepoint("sp")
    rid = world.reconcile_savepoint("sp")["requestId"]
    inside = f"{world.storage_uri}/jobs/{NS}.wc/checkpoints"
    driver_completes(world, rid, inside)
    status = world.reconcile_savepoint("sp")
    assert status["state"] == "Failed" and inside in status["error"]
    assert status.get("path") != inside


def test_upgrade_savepoint_outcome_naming_another_directory_fails_the_upgrade(
    world: World,
) -> None:
    world.apply_job()
    old_pod = world.run_driver()
    world.set_arguments(["--v2"])
    rid = world.reconcile()["pending"]["requestId"]
    elsewhere = f"{world.storage_uri}/savepoints/{NS}.victim/gsp-x-12345678"
    driver_completes(world, rid, elsewhere)
    status = world.reconcile()
    assert status.get("lastSavepoint", {}).get("path") != elsewhere
    assert status["upgradeFailedGeneration"] == 2 and status["driverPod"] == old_pod
    assert "UpgradeFailed" in world.kube.reasons("wc")


def test_reported_last_savepoint_outside_the_jobs_directory_is_not_shown(world: World) -> None:
    world.apply_job()
    world.run_driver()
    elsewhere = f"{world.storage_uri}/savepoints/{NS}.victim/gsp-x-12345678"
    world.driver_reports(
        last_savepoint=SavepointStatus(
            request_id="x", state="completed", path=elsewhere, finished_at=world.clock.t
        )
    )
    assert "lastSavepoint" not in world.reconcile()
