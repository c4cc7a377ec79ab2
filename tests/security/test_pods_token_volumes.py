"""Pod templates mount no service account token; what Pod Security admission decides
about smuggled settings on the real API server, and what the operator refuses itself
because admission does not.

A ``projected`` volume of a pod template may combine Secrets, ConfigMaps, the downward API
and trust bundles, never a ``serviceAccountToken`` or a ``podCertificate`` (nor a source
Kubernetes adds later); the refusal names the field.

In a namespace that enforces the restricted standard, the API server refuses the
executor pod a smuggled ``-Dspark.kubernetes.executor.volumes.hostPath...`` option would
make Spark build; but it admits an executor pod with a ``projected``
``serviceAccountToken`` volume (a type the standard allows), which mounts a token although
the pod says ``automountServiceAccountToken: false``. So the operator refuses a pod
template with such a volume, and the JVM options that would carry the hostPath setting,
before any pod exists.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.fixtures import control_plane, kube_namespace

from gic_operator.launch import launcher
from gic_operator.launch.launch_plan import LaunchPlan
from gic_operator.models import GICJobSpec
from gic_operator.validation import describe_validation_error

__all__ = ["control_plane", "kube_namespace"]

TOKEN_VOLUME = {
    "name": "token",
    "projected": {"sources": [{"serviceAccountToken": {"path": "token", "audience": "vault"}}]},
}
TOKEN_MOUNT = {"name": "token", "mountPath": "/var/run/token"}
HOST_PATH = "spark.kubernetes.executor.volumes.hostPath.host.mount.path"


def application(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "application": {"image": "registry.example/gic:1", "mainFile": "/opt/app/job.py"},
        "checkpointing": {"storage": "s3://bucket/gic"},
    }
    body["application"].update(changes)
    return body


def executor_pod(namespace: str) -> dict[str, Any]:
    """An executor pod as Spark builds it from the operator's template (Spark adds the
    name, image and command)."""
    plan = LaunchPlan(
        namespace=namespace,
        name="wordcount",
        uid="uid-1",
        spec=GICJobSpec.model_validate(application()),
        job_id=f"{namespace}.wordcount",
        epoch=1,
    )
    pod = launcher.executor_pod_template(plan)
    pod["metadata"] = {"name": "wordcount-exec-1", "namespace": namespace}
    pod["spec"]["containers"][0]["image"] = "registry.example/gic:1"
    pod["spec"]["containers"][0]["args"] = ["executor"]
    return pod


def dry_run(plane: ControlPlane, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
    path = f"/api/v1/namespaces/{namespace}/pods"
    created: dict[str, Any] = plane.client.request("POST", path, pod, params={"dryRun": "All"})
    return created


def refusal(body: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        GICJobSpec.model_validate(body)
    return describe_validation_error(caught.value, "spec")


@pytest.mark.parametrize("side", ["driver", "executor"])
@pytest.mark.parametrize(
    ("source", "why"),
    [
        ({"serviceAccountToken": {"path": "token"}}, "mounts a service account token"),
        ({"podCertificate": {"signerName": "x/y", "keyType": "ED25519"}}, "certificate"),
        ({"somethingNew": {}}, "a projected volume may combine"),
    ],
)
def test_pod_templates_cannot_project_credentials(
    side: str, source: dict[str, Any], why: str
) -> None:
    volume = {"name": "creds", "projected": {"sources": [{"secret": {"name": "s"}}, source]}}
    template = {"volumes": [volume], "volumeMounts": [{"name": "creds", "mountPath": "/c"}]}
    text = refusal(application(**{side: {"podTemplate": template}}))
    assert f"spec.application.{side}.podTemplate.volumes[0]" in text
    assert f"projected.sources[1].{next(iter(source))} is not allowed" in text
    assert why in text


def test_pod_templates_may_project_files() -> None:
    sources = [
        {"secret": {"name": "tls"}},
        {"configMap": {"name": "settings"}},
        {
            "downwardAPI": {
                "items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]
            }
        },
        {"clusterTrustBundle": {"signerName": "example.com/ca", "path": "ca.pem"}},
    ]
    volume = {"name": "files", "projected": {"sources": sources}}
    template = {"volumes": [volume], "volumeMounts": [{"name": "files", "mountPath": "/f"}]}
    plan = LaunchPlan(
        namespace="prod",
        name="wc",
        uid="u",
        spec=GICJobSpec.model_validate(application(executor={"podTemplate": template})),
        job_id="prod.wc",
        epoch=1,
    )
    pod = launcher.executor_pod_template(plan)
    assert pod["spec"]["automountServiceAccountToken"] is False
    [files] = [v for v in pod["spec"]["volumes"] if v["name"] == "files"]
    assert files["projected"]["sources"] == sources


@pytest.mark.slow
def test_admission_stops_host_paths_but_not_token_volumes(
    control_plane: ControlPlane, kube_namespace: str
) -> None:
    plane, ns = control_plane, kube_namespace
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    plane.client.patch(f"/api/v1/namespaces/{ns}", {"metadata": {"labels": labels}})
    pod = executor_pod(ns)
    assert dry_run(plane, ns, pod)["metadata"]["name"] == "wordcount-exec-1"

    host_path = copy.deepcopy(pod)
    host_path["spec"]["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    # The plane (and its client's ApiError) may come from this package's module under
    # another import name (see tests.controlplane.fixtures): match the error by name.
    with pytest.raises(Exception) as refused:
        dry_run(plane, ns, host_path)
    assert type(refused.value).__name__ == "ApiError"
    assert getattr(refused.value, "status", None) == 403
    assert 'violates PodSecurity "restricted:latest"' in str(refused.value)
    assert "hostPath" in str(refused.value)
    smuggled = {"spark.executor.extraJavaOptions": f'-D"{HOST_PATH}=/"'}
    assert f"sets the Spark setting {HOST_PATH}" in refusal(application(sparkConf=smuggled))

    token = copy.deepcopy(pod)
    token["spec"]["volumes"].append(TOKEN_VOLUME)
    token["spec"]["containers"][0]["volumeMounts"].append(TOKEN_MOUNT)
    admitted = dry_run(plane, ns, token)
    assert admitted["spec"]["automountServiceAccountToken"] is False
    [volume] = [v for v in admitted["spec"]["volumes"] if v["name"] == "token"]
    assert "serviceAccountToken" in volume["projected"]["sources"][0]
    template = {"volumes": [TOKEN_VOLUME], "volumeMounts": [TOKEN_MOUNT]}
    text = refusal(application(executor={"podTemplate": template}))
    assert "spec.application.executor.podTemplate.volumes[0]" in text
    assert "projected.sources[0].serviceAccountToken is not allowed" in text
