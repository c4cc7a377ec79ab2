"""Restore sources are claimed only from Savepoint resources, and protected until the
claiming job's manifests release them.

* ``mode: Claim`` hands a source's files to the claiming job, which then deletes them
  when unreferenced. Through ``spec.restore.path`` it could name anything, e.g. another
  tenant's live checkpoint in another namespace: refused (``Invalid``), a Claim needs a
  Savepoint resource, whose ``status.claimedBy`` is set before the launch and guarded
  by its resourceVersion.
* A Savepoint's directory is derived; a ``status.path`` pointing elsewhere is no source.
* A NoClaim source is held (disposal waits, retention skips it) until the job's
  manifests no longer reference it; the driver's own report (``status.json``) does not
  release it.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from tests.operator.jobs.test_job_lifecycle import NS, World

from gic_operator.operator_errors import KubeError
from gic_runtime.checkpoint.manifest import RestoreMode as RuntimeRestoreMode
from gic_runtime.fencing import highest_epoch
from gic_runtime.status import RestoreStatus


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path / "store")


def completed_savepoint(world: World, name: str, job: str = "wc", **labels: str) -> Path:
    """A Completed Savepoint of ``job`` with files in its derived directory; returns one
    of its files."""
    path = world.completed_savepoint(name, job, labels=labels, manifest=b"source")
    return Path(path.removeprefix("file://")) / "_savepoint.manifest"


def dispose(world: World, name: str) -> str:
    body = world.kube.get_object("savepoints", NS, name)
    assert body is not None
    try:
        return world.savepoints.dispose(body, 0)
    except Exception as exc:  # a held savepoint's deletion waits
        return f"waits: {exc}"


def test_claim_through_a_path_is_invalid(world: World) -> None:
    source = completed_savepoint(world, "sp")
    world.apply_job("claimer", restore={"path": str(source.parent.as_uri()), "mode": "Claim"})
    status = world.reconcile("claimer")
    assert status["phase"] == "Invalid"
    assert "spec.restore.mode" in status["message"]
    assert world.condition("Ready", "claimer")["reason"] == "InvalidSpec"
    assert world.kube.pods == {}


def test_claim_of_another_jobs_live_checkpoint_is_refused(world: World) -> None:
    world.apply_job("source")
    world.run_driver("source")
    storage = world.storage("source")
    epoch = highest_epoch(storage.resolver, storage.root, storage.job_id)
    manifest = f"{storage.root}/jobs/{NS}.source/checkpoints/chk-000000000005.manifest"
    world.apply_job("claimer", restore={"path": manifest, "mode": "Claim"})
    status = world.reconcile("claimer")
    assert status["phase"] == "Invalid" and "spec.restore.mode" in status["message"]
    assert [pod for (_, pod) in world.kube.pods if pod.startswith("claimer")] == []
    assert highest_epoch(storage.resolver, storage.root, storage.job_id) == epoch
    assert world.status("source")["phase"] == "Running"


def test_a_savepoint_whose_path_points_elsewhere_is_no_restore_source(world: World) -> None:
    world.apply_job("victim")
    victim_dir = f"{world.storage_uri}/jobs/{NS}.victim"
    completed_savepoint(world, "sp")
    world.kube.patch_status("savepoints", NS, "sp", {"path": victim_dir})
    world.apply_job("claimer", restore={"savepoint": "sp", "mode": "Claim"})
    status = world.reconcile("claimer")
    assert world.kube.pods == {}
    assert "restoredFrom" not in status
    assert victim_dir in status["message"]
    assert world.condition("Reconciled", "claimer")["reason"] == "UntrustedInput"


def test_a_claim_is_recorded_before_the_launch(world: World) -> None:
    completed_savepoint(world, "sp")
    world.apply_job("claimer", restore={"savepoint": "sp", "mode": "Claim"})
    world.kube.fail_next("create_pod", KubeError("pods is forbidden", status=403))
    world.reconcile("claimer")
    sp = world.kube.get_object("savepoints", NS, "sp")
    assert sp is not None and sp["status"]["claimedBy"] == f"{NS}/claimer"
    assert world.kube.pods == {}


def test_two_claims_never_both_win(world: World) -> None:
    completed_savepoint(world, "sp")
    world.apply_job("claimer", restore={"savepoint": "sp", "mode": "Claim"})
    real_get = world.kube.get_object

    def get_then_raced(plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        found = real_get(plural, namespace, name)
        if plural == "savepoints":  # another job claims it right after this read
            world.kube.patch_status("savepoints", NS, "sp", {"claimedBy": f"{NS}/other"})
        return found

    world.kube.get_object = get_then_raced  # type: ignore[method-assign]
    with contextlib.suppress(KubeError):  # a Conflict, if it escaped
        world.reconcile("claimer")
    world.kube.get_object = real_get  # type: ignore[method-assign]
    sp = world.kube.get_object("savepoints", NS, "sp")
    assert sp is not None and sp["status"]["claimedBy"] == f"{NS}/other"
    assert world.kube.pods == {}
    status = world.reconcile("claimer")
    assert "already claimed" in status["message"] and world.kube.pods == {}


def test_a_noclaim_source_is_held_until_the_manifests_release_it(world: World) -> None:
    source = completed_savepoint(world, "sp")
    world.apply_job("copier", restore={"savepoint": "sp"})
    pod = world.reconcile("copier")["driverPod"]
    world.kube.set_pod_phase(NS, pod, "Running")
    # The driver claims the source is released before any checkpoint exists.
    world.driver_reports(
        "copier",
        restored_from=RestoreStatus(
            source=source.parent.as_uri(), mode=RuntimeRestoreMode.NO_CLAIM, released=True
        ),
    )
    status = world.reconcile("copier")
    assert status["restoredFrom"]["released"] is False
    assert world.condition("RestoreSourceReleased", "copier")["status"] == "False"
    assert dispose(world, "sp").startswith("waits")
    assert source.exists()
    assert "SavepointHeld" in world.kube.reasons("sp")

    world.write_checkpoint("copier")  # references nothing of the source
    world.driver_reports("copier", checkpoint=1)  # looked at again once reported
    status = world.reconcile("copier")
    assert status["restoredFrom"]["released"] is True
    assert "deleted" in dispose(world, "sp") and not source.exists()


def test_retention_skips_a_savepoint_an_unreleased_restore_holds(world: World) -> None:
    world.apply_job(savepoints={"retention": {"maxCount": 1}})
    world.run_driver()
    labels = {"gic.io/job": "wc", "gic.io/created-by": "periodic"}
    old = completed_savepoint(world, "wc-sp-old", **labels)
    world.kube.objects[("savepoints", NS, "wc-sp-old")]["metadata"]["creationTimestamp"] = (
        "2020-01-01T00:00:00Z"
    )
    completed_savepoint(world, "wc-sp-new", **labels)
    world.apply_job("copier", restore={"savepoint": "wc-sp-old"})
    world.reconcile("copier")
    world.reconcile("wc")
    assert world.kube.get_object("savepoints", NS, "wc-sp-old") is not None
    assert old.exists()


@pytest.mark.parametrize("named", ["manifest", "directory/"])
def test_a_source_named_by_its_manifest_file_is_held_too(world: World, named: str) -> None:
    """``spec.restore.path`` may name a native savepoint by its directory (with or
    without a trailing slash) or by its ``_savepoint.manifest``, as the runtime accepts
    both; protection compares the location the runtime opens, so either name holds the
    Savepoint against disposal and retention."""
    source = completed_savepoint(world, "sp")
    path = source.as_uri() if named == "manifest" else source.parent.as_uri() + "/"
    world.apply_job("copier", restore={"path": path})
    pod = world.reconcile("copier")["driverPod"]
    world.kube.set_pod_phase(NS, pod, "Running")
    world.driver_reports(
        "copier",
        restored_from=RestoreStatus(source=path, mode=RuntimeRestoreMode.NO_CLAIM, released=False),
    )
    status = world.reconcile("copier")
    assert status["restoredFrom"]["released"] is False
    assert dispose(world, "sp").startswith("waits")
    assert source.exists()
