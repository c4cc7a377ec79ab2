"""KubernetesApi (the operator's seam, on the ``kubernetes`` client) against the real API
server of the test control plane: pods, the driver's service, the launch's ConfigMap and
Secret, custom objects and their status (with optimistic concurrency), and Events."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gic_operator.control_keys import ENV_CONTROL_KEY, ControlKeys
from gic_operator.kube.kube_client import KubernetesApi
from gic_operator.launch import launcher
from gic_operator.launch.launch_plan import LaunchPlan
from gic_operator.launch.launcher import driver_service
from gic_operator.models import GICJobSpec
from gic_operator.operator_errors import ConflictError, TransientKubeError
from gic_runtime.control.auth import CONTROL_KEY_ENV

from .support import KubeEnv


@pytest.fixture
def api(kube_env: KubeEnv) -> Iterator[KubernetesApi]:
    from kubernetes.config import new_client_from_config

    config = str(kube_env.kubeconfig)
    client = new_client_from_config(config_file=config)  # type: ignore[no-untyped-call]
    try:
        yield KubernetesApi(client, request_timeout_s=10)
    finally:
        client.close()


def pod(name: str, **labels: str) -> dict[str, Any]:
    """A pod the process kubelet never starts (no command: it waits with
    ``CreateContainerConfigError``)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "driver", "image": "busybox"}]},
    }


def job(name: str, **labels: str) -> dict[str, Any]:
    spec = {
        "application": {"image": "gic:1", "mainFile": "/opt/job.py"},
        "checkpointing": {"storage": "s3://bucket/gic"},
    }
    return {"metadata": {"name": name, "labels": labels}, "spec": spec}


@pytest.fixture(scope="module")
def owner(kube_env: KubeEnv) -> dict[str, Any]:
    """A GICJob to own what the tests create (the garbage collector deletes objects whose
    owner does not exist)."""
    body = {"apiVersion": "gic.io/v1alpha1", "kind": "GICJob", **job("owner", team="owner")}
    path = f"/apis/gic.io/v1alpha1/namespaces/{kube_env.namespace}/gicjobs"
    created: dict[str, Any] = kube_env.raw.create(path, body)
    return created


def plan(kube_env: KubeEnv, owner: dict[str, Any], **changes: Any) -> LaunchPlan:
    spec = GICJobSpec.model_validate(job("owner")["spec"])
    values: dict[str, Any] = {
        "namespace": kube_env.namespace,
        "name": "owner",
        "uid": owner["metadata"]["uid"],
        "spec": spec,
        "job_id": f"{kube_env.namespace}.owner",
        "epoch": 1,
    }
    values.update(changes)
    return LaunchPlan(**values)


def test_pods(api: KubernetesApi, kube_env: KubeEnv) -> None:
    ns = kube_env.namespace
    assert api.get_pod(ns, "p1") is None
    api.create_pod(ns, pod("p1", job="a", role="driver"))
    api.create_pod(ns, pod("p1", job="a", role="driver"))  # exists: no error
    api.create_pod(ns, pod("p2", job="b", role="driver"))
    info = api.get_pod(ns, "p1")
    assert info is not None
    assert (info.name, info.phase, info.deleting) == ("p1", "Pending", False)
    assert info.labels == {"job": "a", "role": "driver"} and info.created
    assert [p.name for p in api.list_pods(ns, {"job": "a", "role": "driver"})] == ["p1"]
    api.delete_pod(ns, "p2", grace_seconds=0)
    assert api.get_pod(ns, "p2") is None  # grace period 0: gone at once
    api.delete_pod(ns, "p2", grace_seconds=0)  # gone: no error
    api.delete_pod(ns, "p1", grace_seconds=30)  # bound to the node: the kubelet confirms
    deleting = api.get_pod(ns, "p1")
    assert deleting is None or deleting.deleting
    kube_env.plane.wait_for("pod p1 to go", lambda: api.get_pod(ns, "p1") is None)


def test_service(api: KubernetesApi, kube_env: KubeEnv, owner: dict[str, Any]) -> None:
    ns = kube_env.namespace
    manifest = driver_service(ns, "owner", owner["metadata"]["uid"])
    api.apply_service(ns, manifest)
    api.apply_service(ns, manifest)
    svc = kube_env.raw.get(f"/api/v1/namespaces/{ns}/services/owner-driver")
    assert svc["spec"]["selector"] == {"gic.io/job": "owner", "gic.io/role": "driver"}
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["metadata"]["ownerReferences"][0]["kind"] == "GICJob"


def test_template_config_map_is_created_then_replaced(
    api: KubernetesApi, kube_env: KubeEnv, owner: dict[str, Any]
) -> None:
    ns = kube_env.namespace
    first = launcher.executor_template_config_map(plan(kube_env, owner))
    api.apply_config_map(ns, first)
    name = first["metadata"]["name"]
    stored = kube_env.raw.get(f"/api/v1/namespaces/{ns}/configmaps/{name}")
    assert stored["data"] == first["data"]
    spec = job("owner")["spec"]
    spec["application"]["env"] = [{"name": "X", "value": "1"}]
    changed = GICJobSpec.model_validate(spec)
    second = launcher.executor_template_config_map(plan(kube_env, owner, spec=changed, epoch=2))
    api.apply_config_map(ns, second)
    stored = kube_env.raw.get(f"/api/v1/namespaces/{ns}/configmaps/{name}")
    assert stored["data"] == second["data"] != first["data"]
    assert stored["metadata"]["ownerReferences"][0]["kind"] == "GICJob"


def test_auth_secret_is_created_once(
    api: KubernetesApi, kube_env: KubeEnv, owner: dict[str, Any]
) -> None:
    ns, uid = kube_env.namespace, owner["metadata"]["uid"]
    first = launcher.auth_secret(ns, "owner", uid, token=b"first")
    api.create_secret(ns, first)
    api.create_secret(ns, launcher.auth_secret(ns, "owner", uid, token=b"second"))
    stored = kube_env.raw.get(f"/api/v1/namespaces/{ns}/secrets/{first['metadata']['name']}")
    assert stored["data"] == first["data"]  # the first secret stays
    assert stored["immutable"] is True
    assert stored["metadata"]["ownerReferences"][0]["uid"] == uid


def test_control_secret_keeps_the_jobs_key_and_the_driver_refers_to_it(
    api: KubernetesApi, kube_env: KubeEnv, owner: dict[str, Any]
) -> None:
    """The job's control key: stored once in an immutable Secret the GICJob owns (the
    API server refuses a change), named by the driver's ``GIC_CONTROL_KEY`` reference."""
    ns, uid = kube_env.namespace, owner["metadata"]["uid"]
    keys = ControlKeys.from_env({ENV_CONTROL_KEY: "k" * 40})
    secret = launcher.job_control_secret(ns, "owner", uid, keys.for_job(ns, "owner", uid))
    api.create_secret(ns, secret)
    api.create_secret(ns, secret)  # the next launch: kept
    path = f"/api/v1/namespaces/{ns}/secrets/{secret['metadata']['name']}"
    stored = kube_env.raw.get(path)
    assert stored["data"] == secret["data"] and stored["immutable"] is True
    assert stored["metadata"]["ownerReferences"][0]["uid"] == uid
    with pytest.raises(Exception, match=r"(?i)immutable"):
        kube_env.raw.patch(path, {"data": {"key": "Zm9yZ2Vk"}})
    env = {
        e["name"]: e
        for e in launcher.driver_pod(plan(kube_env, owner))["spec"]["containers"][0]["env"]
    }
    ref = env[CONTROL_KEY_ENV]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": secret["metadata"]["name"], "key": "key"}


def test_custom_objects(api: KubernetesApi, kube_env: KubeEnv, owner: dict[str, Any]) -> None:
    ns = kube_env.namespace
    assert api.get_object("gicjobs", ns, "wc") is None
    assert api.create_object("gicjobs", ns, job("wc", team="a"))
    assert not api.create_object("gicjobs", ns, job("wc", team="a"))
    api.create_object("gicjobs", ns, job("other", team="b"))
    obj = api.get_object("gicjobs", ns, "wc")
    assert obj is not None
    assert (obj["kind"], obj["metadata"]["generation"]) == ("GICJob", 1)
    assert obj["spec"]["checkpointing"]["buckets"] == 128  # the schema's default
    listed = api.list_objects("gicjobs", ns, {"team": "a"})
    assert [o["metadata"]["name"] for o in listed] == ["wc"]
    assert listed[0]["kind"] == "GICJob"
    names = {o["metadata"]["name"] for o in api.list_objects("gicjobs", ns)}
    assert names == {"wc", "other", "owner"}
    everywhere = api.list_objects_everywhere("gicjobs")  # every namespace (a cluster list)
    mine = {o["metadata"]["name"] for o in everywhere if o["metadata"]["namespace"] == ns}
    assert mine == names and {o["kind"] for o in everywhere} == {"GICJob"}

    api.patch_status("gicjobs", ns, "wc", {"phase": "Running", "epoch": 1, "message": "x"})
    api.patch_status("gicjobs", ns, "wc", {"message": None, "epoch": 2})
    obj = api.get_object("gicjobs", ns, "wc")
    assert obj is not None
    assert obj["status"]["phase"] == "Running" and obj["status"]["epoch"] == 2
    assert "message" not in obj["status"]
    assert obj["metadata"]["generation"] == 1  # status writes leave the spec's generation
    api.patch_status("gicjobs", ns, "missing", {"phase": "Running"})  # no error

    api.delete_object("gicjobs", ns, "wc")
    api.delete_object("gicjobs", ns, "wc")
    api.delete_object("gicjobs", ns, "other")
    assert api.get_object("gicjobs", ns, "wc") is None


def test_a_status_patch_with_a_stale_resource_version_conflicts(
    api: KubernetesApi, kube_env: KubeEnv
) -> None:
    ns = kube_env.namespace
    api.create_object("gicjobs", ns, job("rv", team="a"))
    read = api.get_object("gicjobs", ns, "rv")
    assert read is not None
    version = read["metadata"]["resourceVersion"]
    written = api.patch_status("gicjobs", ns, "rv", {"phase": "Running"}, resource_version=version)
    after = api.get_object("gicjobs", ns, "rv")
    assert after is not None and written == after["metadata"]["resourceVersion"] != version
    with pytest.raises(ConflictError) as caught:
        api.patch_status("gicjobs", ns, "rv", {"phase": "Failed"}, resource_version=version)
    assert caught.value.status == 409 and isinstance(caught.value, TransientKubeError)
    assert "the object has been modified" in str(caught.value)
    obj = api.get_object("gicjobs", ns, "rv")
    assert obj is not None and obj["status"]["phase"] == "Running"
    api.patch_status("gicjobs", ns, "rv", {"phase": "Failed"})  # no version: no precondition
    obj = api.get_object("gicjobs", ns, "rv")
    assert obj is not None and obj["status"]["phase"] == "Failed"
    api.delete_object("gicjobs", ns, "rv")


def test_a_status_the_schema_refuses_is_a_clear_error(
    api: KubernetesApi, kube_env: KubeEnv
) -> None:
    from gic_operator.operator_errors import KubeError

    ns = kube_env.namespace
    api.create_object("gicjobs", ns, job("bad-status"))
    with pytest.raises(KubeError) as caught:
        api.patch_status("gicjobs", ns, "bad-status", {"phase": "Exploded"})
    assert caught.value.status == 422 and not isinstance(caught.value, TransientKubeError)
    assert 'status.phase: Unsupported value: "Exploded"' in str(caught.value)
    api.delete_object("gicjobs", ns, "bad-status")


def test_events_are_posted_and_aggregated(api: KubernetesApi, kube_env: KubeEnv) -> None:
    ns = kube_env.namespace
    api.create_object("gicjobs", ns, job("ev"))
    obj = api.get_object("gicjobs", ns, "ev")
    assert obj is not None
    api.event(obj, "Normal", "Launched", "driver ev-driver-1 created")
    api.event(obj, "Normal", "Launched", "driver ev-driver-1 created")
    api.event(obj, "Warning", "DriverFailed", "x" * 5000)
    events = kube_env.raw.get(f"/api/v1/namespaces/{ns}/events")["items"]
    mine = [e for e in events if e["involvedObject"]["name"] == "ev"]
    by_reason = {e["reason"]: e for e in mine}
    assert len(mine) == 2
    launched = by_reason["Launched"]
    assert launched["count"] == 2 and launched["type"] == "Normal"
    assert launched["involvedObject"]["kind"] == "GICJob"
    assert launched["involvedObject"]["uid"] == obj["metadata"]["uid"]
    assert launched["source"] == {"component": "gic-operator"}
    assert len(by_reason["DriverFailed"]["message"]) == 1024
    api.delete_object("gicjobs", ns, "ev")


class WriterBetweenReadAndPatch(KubernetesApi):
    """The operator's real seam, plus another writer: right after the reconciler reads a
    GICJob, someone else annotates it (as ``kubectl annotate`` would), so the status
    patch the reconciler sends with the version it read meets a newer one."""

    def __init__(self, client: Any, raw: Any, path: str) -> None:
        super().__init__(client, request_timeout_s=10)
        self.raw = raw
        self.path = path
        self.interleave = True
        self.touches = 0

    def get_object(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        body = super().get_object(plural, namespace, name)
        if self.interleave and plural == "gicjobs":
            self.touches += 1
            touch = {"metadata": {"annotations": {"e2e.gic.io/touch": str(self.touches)}}}
            self.raw.patch(self.path, touch)
        return body


def test_a_reconcile_that_meets_a_newer_version_writes_nothing_and_the_next_one_does(
    kube_env: KubeEnv, tmp_path: Any
) -> None:
    from kubernetes.config import new_client_from_config

    from gic_operator.jobs.job_controller import JobController
    from gic_operator.storage.job_storage import open_job_storage

    ns = kube_env.namespace
    path = f"/apis/gic.io/v1alpha1/namespaces/{ns}/gicjobs/raced"
    body = {"apiVersion": "gic.io/v1alpha1", "kind": "GICJob", **job("raced")}
    body["spec"]["checkpointing"]["storage"] = "gs://bucket/gic"  # refused: a status to write
    kube_env.raw.create(f"/apis/gic.io/v1alpha1/namespaces/{ns}/gicjobs", body)
    client = new_client_from_config(config_file=str(kube_env.kubeconfig))  # type: ignore[no-untyped-call]
    try:
        api = WriterBetweenReadAndPatch(client, kube_env.raw, path)
        jobs = JobController(api, open_job_storage)

        assert jobs.reconcile_named(ns, "raced") == {}  # the patch conflicted: nothing sent
        stored = kube_env.raw.get(path)
        assert "status" not in stored or not stored["status"]
        assert stored["metadata"]["annotations"]["e2e.gic.io/touch"] == "1"

        api.interleave = False
        sent = jobs.reconcile_named(ns, "raced")
        assert sent is not None and sent["phase"] == "Invalid"
        stored = kube_env.raw.get(path)
        assert stored["status"]["phase"] == "Invalid"
        assert "is not a storage URI" in stored["status"]["message"]
        # The warning dropped with the conflicted patch is posted by the pass that wrote.
        events = kube_env.raw.get(f"/api/v1/namespaces/{ns}/events")["items"]
        reasons = [e["reason"] for e in events if e["involvedObject"]["name"] == "raced"]
        assert reasons.count("InvalidSpec") == 1
    finally:
        client.close()
        kube_env.raw.delete(path)


def test_the_typed_status_round_trips_through_the_server(
    api: KubernetesApi, kube_env: KubeEnv
) -> None:
    """Every pending action a pass writes passes the CRD's schema and reads back as the
    same typed value; a patch from one kind to another leaves none of the first's fields
    (the nulls of :func:`status_patch`); another version's fields are kept."""
    from gic_operator.models import (
        GICJobStatus,
        RecoverAction,
        RestoredFrom,
        RestoreMode,
        SuspendAction,
        UpgradeAction,
        UpgradeMode,
    )
    from gic_operator.reconcile.status_pass import status_patch

    ns = kube_env.namespace
    api.create_object("gicjobs", ns, job("typed"))
    api.patch_status("gicjobs", ns, "typed", {"futureField": {"a": 1}})
    t = "2026-01-01T00:00:00Z"
    actions = [
        UpgradeAction(mode=UpgradeMode.SAVEPOINT, started=t, target_generation=2, request_id="r"),
        UpgradeAction(
            mode=UpgradeMode.SAVEPOINT,
            started=t,
            target_generation=2,
            request_id="r",
            requested=True,
        ),
        RecoverAction(started=t, due=t, reason="driver pod typed-1 Failed", epoch=3),
        SuspendAction(started=t, target_generation=4, request_id="s"),
    ]
    for action in actions:
        obj = api.get_object("gicjobs", ns, "typed")
        assert obj is not None
        stored = obj.get("status") or {}
        status = GICJobStatus.read(stored).model_copy(
            update={
                "pending": action,
                "restored_from": RestoredFrom(path="s3://bucket/sp", mode=RestoreMode.CLAIM),
            }
        )
        patch = status_patch(stored, status, {"pending", "restored_from"})
        api.patch_status("gicjobs", ns, "typed", patch)
        obj = api.get_object("gicjobs", ns, "typed")
        assert obj is not None
        assert GICJobStatus.read(obj["status"]) == status
        assert obj["status"]["pending"] == action.to_kube()
        assert obj["status"]["futureField"] == {"a": 1}
    api.delete_object("gicjobs", ns, "typed")
