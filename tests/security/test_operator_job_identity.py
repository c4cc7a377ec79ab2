"""The job id is derived from the GICJob's namespace and name, never read from its status.

``status.jobId`` is written by the operator but may be written by anyone with access to
the status subresource. Were it trusted, a job whose status names another job's id would
make the operator fence that job (stopping its driver), sweep its files and launch with
its id. The same holds for the driver pod the status names: only a pod carrying the
job's driver labels counts as its driver.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.operator.jobs.test_job_lifecycle import NS, World

from gic_operator.storage.job_storage import JobStorage
from gic_runtime.fencing import highest_epoch


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path / "store")


def env_of(world: World, pod: str) -> dict[str, str]:
    manifest = world.kube.pod_manifest(NS, pod)
    assert manifest is not None
    return {e["name"]: e.get("value") for e in manifest["spec"]["containers"][0]["env"]}


def test_a_forged_job_id_is_ignored_and_overwritten(world: World) -> None:
    world.apply_job("victim")
    world.run_driver("victim")
    victim = world.storage("victim")
    victim_epoch = highest_epoch(victim.resolver, victim.root, victim.job_id)
    unreferenced = Path(victim.root.removeprefix("file://")) / "jobs" / f"{NS}.victim"
    (unreferenced / "changelog").mkdir(parents=True, exist_ok=True)
    (unreferenced / "changelog" / "in-flight.seg").write_bytes(b"victim's upload")

    world.apply_job("wc")
    pod = world.run_driver("wc")
    world.kube.patch_status("gicjobs", NS, "wc", {"jobId": f"{NS}.victim"})
    world.kube.set_pod_phase(NS, pod, "Failed", exit_code=1)
    world.reconcile("wc")  # schedules the recovery
    status = world.reconcile("wc")  # fences, sweeps, relaunches

    assert status["jobId"] == f"{NS}.wc"
    assert highest_epoch(victim.resolver, victim.root, victim.job_id) == victim_epoch
    assert (unreferenced / "changelog" / "in-flight.seg").exists()
    assert env_of(world, status["driverPod"])["GIC_JOB_ID"] == f"{NS}.wc"
    own: JobStorage = world.storage("wc")
    assert highest_epoch(own.resolver, own.root, own.job_id) == status["lastSweep"]["epoch"]


def test_a_forged_job_id_is_not_used_for_savepoints(world: World) -> None:
    world.apply_job("wc")
    world.run_driver("wc")
    world.kube.patch_status("gicjobs", NS, "wc", {"jobId": f"{NS}.victim"})
    world.kube.create_object(
        "savepoints", NS, {"metadata": {"name": "sp", "namespace": NS}, "spec": {"job": "wc"}}
    )
    body = world.kube.get_object("savepoints", NS, "sp")
    assert body is not None
    world.savepoints.reconcile(body)
    control = Path(world.storage_uri.removeprefix("file://")) / "jobs"
    assert not (control / f"{NS}.victim" / "control").exists()
    assert (control / f"{NS}.wc" / "control" / "requests").is_dir()


def test_a_pod_named_in_the_status_without_the_drivers_labels_is_not_the_driver(
    world: World,
) -> None:
    world.apply_job("wc")
    world.run_driver("wc")
    world.kube.create_pod(NS, {"metadata": {"name": "database-0", "labels": {"app": "db"}}})
    world.kube.set_pod_phase(NS, "database-0", "Running")
    world.set_state("suspended")
    rid = world.reconcile("wc")["pending"]["requestId"]
    world.complete(rid, "wc")
    world.kube.patch_status("gicjobs", NS, "wc", {"driverPod": "database-0"})
    world.clock.t += 120  # past the grace a driver has after its terminal savepoint
    world.reconcile("wc")
    world.reconcile("wc")
    assert world.kube.get_pod(NS, "database-0") is not None
