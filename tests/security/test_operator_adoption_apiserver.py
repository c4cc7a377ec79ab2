"""Adoption by owner UID, and the per-job NetworkPolicy, on the real API server of the
test control plane: the operator's Kubernetes seam (``KubernetesApi``) refuses to adopt
a Secret, Service, pod, ConfigMap or NetworkPolicy planted under a job's name (no owner,
or another GICJob), adopts what the job owns, reads only a Secret's metadata to know, and
the API server accepts the job's NetworkPolicy as the operator writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gic_operator.kube.kube_client import KubernetesApi
from gic_operator.kube.ownership import METADATA_ONLY
from gic_operator.launch import launcher
from gic_operator.launch.launch_plan import LaunchPlan, owner_reference
from gic_operator.launch.network_policy import job_network_policy
from gic_operator.models import API_VERSION, GICJobSpec
from gic_operator.operator_errors import ObjectNotOwnedError

from ..controlplane.cluster import REPO, ControlPlane
from ..controlplane.fixtures import control_plane

__all__ = ["control_plane"]

pytestmark = pytest.mark.slow
SPEC = {
    "application": {"image": "gic:1", "mainFile": "/opt/job.py"},
    "checkpointing": {"storage": "s3://bucket/gic"},
}


@pytest.fixture(scope="module")
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    plane = control_plane
    crds = [arg for path in sorted((REPO / "crds").glob("*.yaml")) for arg in ("-f", str(path))]
    plane.kubectl("apply", *crds)
    plane.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd/gicjobs.gic.io", timeout=90
    )
    name = "adoption"
    plane.client.create("/api/v1/namespaces", {"metadata": {"name": name}})
    yield name
    plane.client.delete(f"/api/v1/namespaces/{name}")


@pytest.fixture(scope="module")
def jobs(control_plane: ControlPlane, namespace: str) -> dict[str, str]:
    """UIDs of GICJobs ``wc`` (the victim) and ``other``, and their namespace (``ns``)."""
    path = f"/apis/gic.io/v1alpha1/namespaces/{namespace}/gicjobs"
    out = {"ns": namespace}
    for name in ("wc", "other"):
        body = {"apiVersion": API_VERSION, "kind": "GICJob", "metadata": {"name": name}}
        out[name] = control_plane.client.create(path, {**body, "spec": SPEC})["metadata"]["uid"]
    return out


@pytest.fixture
def api(control_plane: ControlPlane) -> Iterator[KubernetesApi]:
    from kubernetes.config import new_client_from_config

    client = new_client_from_config(config_file=str(control_plane.kubeconfig))  # type: ignore[no-untyped-call]
    try:
        yield KubernetesApi(client, request_timeout_s=10)
    finally:
        client.close()


def _pod(namespace: str, name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "wc-driver-1",
            "namespace": namespace,
            "ownerReferences": [owner_reference(name, uid)],
        },
        "spec": {"containers": [{"name": "driver", "image": "busybox"}]},
    }


def _plan(namespace: str, uid: str) -> LaunchPlan:
    spec = GICJobSpec.model_validate(SPEC)
    return LaunchPlan(
        namespace=namespace, name="wc", uid=uid, spec=spec, job_id=f"{namespace}.wc", epoch=1
    )


#: kind: (collection path, the operator's manifest for GICJob wc with uid, its create call)
Make = Callable[[str, str], dict[str, Any]]
KINDS: dict[str, tuple[str, Make, str]] = {
    "secret": (
        "/api/v1/namespaces/{ns}/secrets",
        lambda ns, uid: launcher.auth_secret(ns, "wc", uid),
        "create_secret",
    ),
    "service": (
        "/api/v1/namespaces/{ns}/services",
        lambda ns, uid: launcher.driver_service(ns, "wc", uid),
        "apply_service",
    ),
    "configmap": (
        "/api/v1/namespaces/{ns}/configmaps",
        lambda ns, uid: launcher.executor_template_config_map(_plan(ns, uid)),
        "apply_config_map",
    ),
    "networkpolicy": (
        "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
        lambda ns, uid: job_network_policy(ns, "wc", uid),
        "apply_network_policy",
    ),
    "pod": ("/api/v1/namespaces/{ns}/pods", lambda ns, uid: _pod(ns, "wc", uid), "create_pod"),
}


def _planted(manifest: dict[str, Any], owner: dict[str, Any] | None) -> dict[str, Any]:
    """The same object as a tenant would plant it: the attacker's content, ``owner``."""
    body = {**manifest, "metadata": {"name": manifest["metadata"]["name"]}}
    if owner is not None:
        body["metadata"]["ownerReferences"] = [owner]
    if body["kind"] == "Secret":
        body["data"] = {"secret": "a25vd24=", "executor-key": "a25vd24="}
    return body


@pytest.mark.parametrize("owned_by", ["nobody", "other"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_planted_objects_are_not_adopted(
    control_plane: ControlPlane, jobs: dict[str, str], api: KubernetesApi, kind: str, owned_by: str
) -> None:
    namespace = jobs["ns"]
    collection, make, call = KINDS[kind]
    path = collection.format(ns=namespace)
    manifest = make(namespace, jobs["wc"])
    name = manifest["metadata"]["name"]
    owner = None if owned_by == "nobody" else owner_reference("other", jobs["other"])
    planted = control_plane.client.create(path, _planted(manifest, owner))
    try:
        with pytest.raises(ObjectNotOwnedError) as info:
            getattr(api, call)(namespace, manifest)
        message = str(info.value)
        assert f"{kind} {namespace}/{name} already exists and is not owned by GICJob" in message
        assert jobs["wc"] in message
        if owned_by == "other":
            assert f"GICJob other (uid {jobs['other']})" in message
        else:
            assert "nothing owns it" in message
        assert "a25vd24" not in message
        after = control_plane.client.get(f"{path}/{name}")
        assert after["metadata"]["uid"] == planted["metadata"]["uid"]
        owners = after["metadata"].get("ownerReferences")
        assert owners == planted["metadata"].get("ownerReferences")  # not taken over
        assert after.get("data") == planted.get("data")  # a Secret keeps the planted key
    finally:
        control_plane.client.delete(f"{path}/{name}", {"gracePeriodSeconds": 0})
        control_plane.wait_for(f"{kind} {name} gone", lambda: _gone(control_plane, path, name))


def _gone(plane: ControlPlane, path: str, name: str) -> bool:
    items = plane.client.get(path)["items"]
    return all(item["metadata"]["name"] != name for item in items)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_owned_objects_are_adopted_and_accepted_as_written(
    control_plane: ControlPlane, jobs: dict[str, str], api: KubernetesApi, kind: str
) -> None:
    namespace = jobs["ns"]
    collection, make, call = KINDS[kind]
    path = collection.format(ns=namespace)
    manifest = make(namespace, jobs["wc"])
    name = manifest["metadata"]["name"]
    try:
        getattr(api, call)(namespace, manifest)
        getattr(api, call)(namespace, manifest)  # exists, owned by wc: adopted
        stored = control_plane.client.get(f"{path}/{name}")
        assert stored["metadata"]["ownerReferences"][0]["uid"] == jobs["wc"]
        if kind == "networkpolicy":
            assert stored["spec"] == manifest["spec"]
    finally:
        control_plane.client.delete(f"{path}/{name}", {"gracePeriodSeconds": 0})
        control_plane.wait_for(f"{kind} {name} gone", lambda: _gone(control_plane, path, name))


def test_the_ownership_read_of_a_secret_carries_no_data(
    control_plane: ControlPlane, jobs: dict[str, str], api: KubernetesApi
) -> None:
    namespace = jobs["ns"]
    manifest = launcher.auth_secret(namespace, "wc", jobs["wc"])
    path = f"/api/v1/namespaces/{namespace}/secrets"
    control_plane.client.create(path, _planted(manifest, None))
    try:
        read = api._core.read_namespaced_secret  # the call _check_owned makes, as it makes it
        name = manifest["metadata"]["name"]
        answer = api._call("read", read, name, namespace, _headers=dict(METADATA_ONLY))
        assert answer["kind"] == "PartialObjectMetadata"
        assert "data" not in answer and "a25vd24" not in repr(answer)
    finally:
        control_plane.client.delete(f"{path}/{manifest['metadata']['name']}")
