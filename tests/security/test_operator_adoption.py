"""The operator adopts a job's pod, service, Secret, ConfigMap or NetworkPolicy only when
that GICJob owns it (controller owner reference with the GICJob's UID).

Creating an object that exists used to count as success, so a Secret planted under
``<job>-spark-rpc`` before the job's first launch chose the job's RPC key, a planted
Service chose where its executors connect, and a planted pod passed for its driver.
Here (on the in-memory API; ``test_operator_adoption_apiserver.py`` does the same on a
real API server) a planted object stops the launch with condition ``ObjectNotOwned``
naming the object and its owner, stays as it was, and the job launches once it is gone.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.operator.jobs.test_job_lifecycle import NS, World

from gic_operator.kube.naming import driver_labels
from gic_operator.testing.fake_kube import TestingKubeApi


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path / "store")


def _meta(name: str, owner_uid: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if owner_uid is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "gic.io/v1alpha1", "kind": "GICJob", "name": "other",
             "uid": owner_uid, "controller": True},
        ]  # fmt: skip
    return meta


def plant_secret(kube: TestingKubeApi, owner: str | None) -> None:
    secret = {"metadata": _meta("wc-spark-rpc", owner), "data": {"secret": "a25vd24="}}
    kube.create_secret(NS, secret)


def plant_service(kube: TestingKubeApi, owner: str | None) -> None:
    kube.apply_service(NS, {"metadata": _meta("wc-driver", owner), "spec": {}})


def plant_pod(kube: TestingKubeApi, owner: str | None) -> None:
    meta = {**_meta("wc-driver-1", owner), "labels": driver_labels("wc", 1)}
    kube.create_pod(NS, {"metadata": meta, "spec": {}})


def plant_config_map(kube: TestingKubeApi, owner: str | None) -> None:
    kube.apply_config_map(NS, {"metadata": _meta("wc-executor-template", owner), "data": {}})


def plant_policy(kube: TestingKubeApi, owner: str | None) -> None:
    kube.apply_network_policy(NS, {"metadata": _meta("wc-spark-peers", owner), "spec": {}})


PLANTS: dict[str, tuple[Callable[[TestingKubeApi, str | None], None], str, str]] = {
    "secret": (plant_secret, "secrets", "secret team/wc-spark-rpc"),
    "service": (plant_service, "services", "service team/wc-driver"),
    "pod": (plant_pod, "pods", "pod team/wc-driver-1"),
    "configmap": (plant_config_map, "config_maps", "configmap team/wc-executor-template"),
    "networkpolicy": (plant_policy, "network_policies", "networkpolicy team/wc-spark-peers"),
}


@pytest.mark.parametrize("owner", [None, "uid-of-another-gicjob"])
@pytest.mark.parametrize("kind", sorted(PLANTS))
def test_a_planted_object_is_not_adopted(world: World, kind: str, owner: str | None) -> None:
    plant, store, named = PLANTS[kind]
    plant(world.kube, owner)
    planted = getattr(world.kube, store)[(NS, named.split("/")[1])]
    before = repr(planted)

    world.apply_job("wc")
    status = world.reconcile("wc")

    ready, reconciled = world.condition("Ready"), world.condition("Reconciled")
    assert reconciled["status"] == "False" and reconciled["reason"] == "ObjectNotOwned"
    assert ready["status"] == "False" and ready["reason"] == "ObjectNotOwned"
    message = reconciled["message"]
    assert f"{named} already exists and is not owned by GICJob team/wc" in message
    assert world.job("wc")["metadata"]["uid"] in message
    assert ("GICJob other (uid uid-of-another-gicjob)" if owner else "nothing owns it") in message
    assert "delete it, or rename the GICJob" in message
    assert status["message"] == message
    assert "ObjectNotOwned" in world.kube.reasons("wc")
    assert repr(planted) == before  # neither changed nor taken over
    assert world.kube.get_pod(NS, "wc-driver-1") is None or kind == "pod"
    assert status.get("driverPod") is None

    del getattr(world.kube, store)[(NS, named.split("/")[1])]
    status = world.reconcile("wc")
    assert status["driverPod"] == "wc-driver-1"
    assert world.condition("Reconciled")["status"] == "True"


def test_objects_the_job_owns_are_adopted(world: World) -> None:
    world.apply_job("wc")
    first = world.reconcile("wc")["driverPod"]
    world.kube.set_pod_phase(NS, first, "Failed", exit_code=1)
    world.reconcile("wc")
    status = world.reconcile("wc")  # relaunch: its service, Secret, policy exist and are its own
    assert status["driverPod"] != first
    assert world.condition("Reconciled")["status"] == "True"


def test_a_pod_with_the_jobs_labels_that_it_does_not_own_is_neither_driver_nor_deleted(
    world: World,
) -> None:
    world.apply_job("wc")
    driver = world.reconcile("wc")["driverPod"]
    meta = {**_meta("impostor"), "labels": driver_labels("wc", 1)}
    world.kube.create_pod(NS, {"metadata": meta, "spec": {}})
    world.kube.set_pod_phase(NS, "impostor", "Running")
    world.kube.patch_status("gicjobs", NS, "wc", {"driverPod": "impostor"})
    world.kube.set_pod_phase(NS, driver, "Failed", exit_code=1)
    world.reconcile("wc")
    status = world.reconcile("wc")
    assert status["driverPod"] not in ("impostor", driver)
    assert world.kube.get_pod(NS, "impostor") is not None
