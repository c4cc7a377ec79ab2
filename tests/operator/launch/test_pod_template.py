"""``podTemplate`` of the driver and the executors: a template reaches the pods, the
operator's fields win over it, and fields that would weaken pod security are refused
with a message naming them."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from pydantic import ValidationError

from gic_operator.launch import launch_plan, launcher
from gic_operator.launch.launch_plan import LaunchPlan
from gic_operator.models import GICJobSpec
from gic_operator.validation import describe_validation_error

BASE: dict[str, Any] = {
    "application": {"image": "gic:1", "mainFile": "/opt/app/job.py"},
    "checkpointing": {"storage": "s3://bucket/gic"},
}

TEMPLATE: dict[str, Any] = {
    "labels": {"team": "analytics", "app.kubernetes.io/name": "mine"},
    "annotations": {"example.com/owner": "oncall"},
    "nodeSelector": {"node-pool": "streaming"},
    "tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "streaming", "effect": "NoSchedule"}
    ],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    },
    "imagePullSecrets": [{"name": "registry-credentials"}],
    "priorityClassName": "streaming-high",
    "volumes": [
        {"name": "job-config", "configMap": {"name": "rate-count-config"}},
        {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}},
    ],
    "volumeMounts": [
        {"name": "job-config", "mountPath": "/etc/job", "readOnly": True},
        {"name": "scratch", "mountPath": "/scratch"},
    ],
    "resources": {
        "requests": {"ephemeral-storage": "1Gi", "cpu": "7", "memory": "99Gi"},
        "limits": {"nvidia.com/gpu": 1, "memory": "99Gi", "cpu": "4"},
    },
}


def spec(
    driver: dict[str, Any] | None = None, executor: dict[str, Any] | None = None
) -> GICJobSpec:
    body = copy.deepcopy(BASE)
    if driver is not None:
        body["application"]["driver"] = {"podTemplate": driver}
    if executor is not None:
        body["application"]["executor"] = {"podTemplate": executor}
    return GICJobSpec.model_validate(body)


def plan(job: GICJobSpec) -> LaunchPlan:
    return LaunchPlan(
        namespace="prod",
        name="wordcount",
        uid="uid-1",
        spec=job,
        job_id="prod.wordcount",
        epoch=3,
        generation=1,
    )


def refusal(template: dict[str, Any], role: str = "driver") -> str:
    body = copy.deepcopy(BASE)
    body["application"][role] = {"podTemplate": template}
    with pytest.raises(ValidationError) as caught:
        GICJobSpec.model_validate(body)
    return describe_validation_error(caught.value, "spec")


def executor_template(job: GICJobSpec) -> dict[str, Any]:
    config_map = launcher.executor_template_config_map(plan(job))
    template: dict[str, Any] = json.loads(config_map["data"][launch_plan.TEMPLATE_KEY])
    return template


# --- the template reaches the pods ---------------------------------------------------------


def test_driver_template_reaches_the_driver_pod() -> None:
    pod = launcher.driver_pod(plan(spec(driver=TEMPLATE)))
    meta, pod_spec = pod["metadata"], pod["spec"]
    [container] = pod_spec["containers"]
    assert meta["labels"]["team"] == "analytics"
    assert meta["annotations"]["example.com/owner"] == "oncall"
    assert pod_spec["nodeSelector"] == {"node-pool": "streaming"}
    assert pod_spec["tolerations"] == TEMPLATE["tolerations"]
    assert pod_spec["affinity"] == TEMPLATE["affinity"]
    assert pod_spec["imagePullSecrets"] == [{"name": "registry-credentials"}]
    assert pod_spec["priorityClassName"] == "streaming-high"
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    assert volumes["job-config"] == {
        "name": "job-config",
        "configMap": {"name": "rate-count-config"},
    }
    assert volumes["scratch"] == {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/etc/job"] == {"name": "job-config", "mountPath": "/etc/job", "readOnly": True}
    assert mounts["/scratch"]["name"] == "scratch"
    assert container["resources"]["requests"]["ephemeral-storage"] == "1Gi"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["resources"]["limits"]["cpu"] == "4"


def test_executor_template_reaches_the_executor_pod_template() -> None:
    template = executor_template(spec(executor=TEMPLATE))
    pod_spec = template["spec"]
    [container] = pod_spec["containers"]
    assert template["metadata"]["labels"] == {
        "team": "analytics",
        "app.kubernetes.io/name": "mine",
        **launch_plan.executor_labels("wordcount"),
    }
    assert template["metadata"]["annotations"] == {"example.com/owner": "oncall"}
    assert pod_spec["nodeSelector"] == {"node-pool": "streaming"}
    assert pod_spec["tolerations"] == TEMPLATE["tolerations"]
    assert pod_spec["affinity"] == TEMPLATE["affinity"]
    assert pod_spec["priorityClassName"] == "streaming-high"
    assert [v["name"] for v in pod_spec["volumes"]] == ["spark-auth", "job-config", "scratch"]
    assert [m["name"] for m in container["volumeMounts"]] == [
        "spark-auth",
        "job-config",
        "scratch",
    ]
    # Spark sets the executors' CPU and memory: the template keeps only the rest
    assert container["resources"] == {
        "requests": {"ephemeral-storage": "1Gi"},
        "limits": {"nvidia.com/gpu": 1, "cpu": "4"},
    }
    # the driver's template is the driver's only
    assert "nodeSelector" not in launcher.driver_pod(plan(spec(executor=TEMPLATE)))["spec"]


def test_a_template_used_for_a_spark_local_dir_volume() -> None:
    local = {
        "volumes": [
            {
                "name": "spark-local-dir-1",
                "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "fast"}}},
            }
        ],
        "volumeMounts": [{"name": "spark-local-dir-1", "mountPath": "/var/data/local-1"}],
    }
    pod_spec = executor_template(spec(executor=local))["spec"]
    assert pod_spec["volumes"][1]["ephemeral"]["volumeClaimTemplate"]["spec"] == {
        "storageClassName": "fast"
    }


# --- the operator's fields win -------------------------------------------------------------


def test_operator_fields_win_over_the_template() -> None:
    bare = launcher.driver_pod(plan(spec()))
    shaped = launcher.driver_pod(plan(spec(driver=TEMPLATE)))
    # every label and annotation the operator sets keeps its value
    for key, value in bare["metadata"]["labels"].items():
        assert shaped["metadata"]["labels"][key] == value
    assert shaped["metadata"]["labels"]["app.kubernetes.io/name"] == "gic-job"
    assert (
        shaped["metadata"]["annotations"] | bare["metadata"]["annotations"]
        == (shaped["metadata"]["annotations"])
    )
    [own], [container] = bare["spec"]["containers"], shaped["spec"]["containers"]
    # CPU and memory come from the spec, not from the template
    assert container["resources"]["requests"]["cpu"] == own["resources"]["requests"]["cpu"]
    assert container["resources"]["requests"]["memory"] == own["resources"]["requests"]["memory"]
    assert container["resources"]["limits"]["memory"] == own["resources"]["limits"]["memory"]
    # the operator's volumes and mounts come first and are unchanged
    n = len(bare["spec"]["volumes"])
    assert shaped["spec"]["volumes"][:n] == bare["spec"]["volumes"]
    assert container["volumeMounts"][:n] == own["volumeMounts"]
    # security, identity, command and environment are the operator's alone
    for key in (
        "securityContext",
        "serviceAccountName",
        "automountServiceAccountToken",
        "enableServiceLinks",
        "restartPolicy",
        "hostname",
        "subdomain",
    ):
        assert shaped["spec"][key] == bare["spec"][key], key
    for key in ("securityContext", "command", "env", "image", "ports", "name"):
        assert container[key] == own[key], key
    executor = executor_template(spec(executor=TEMPLATE))
    plain = executor_template(spec())
    for key in ("securityContext", "automountServiceAccountToken", "enableServiceLinks"):
        assert executor["spec"][key] == plain["spec"][key], key
    [exec_container], [plain_container] = (
        executor["spec"]["containers"],
        plain["spec"]["containers"],
    )
    assert exec_container["securityContext"] == plain_container["securityContext"]
    assert exec_container["env"] == plain_container["env"]


def test_an_empty_template_changes_nothing() -> None:
    assert launcher.driver_pod(plan(spec(driver={}))) == launcher.driver_pod(plan(spec()))
    assert executor_template(spec(executor={})) == executor_template(spec())


# --- refused fields ------------------------------------------------------------------------

DRIVER = "spec.application.driver.podTemplate"


@pytest.mark.parametrize(
    ("template", "field", "reason"),
    [
        ({"securityContext": {"runAsUser": 0}}, "securityContext", "restricted Pod Security"),
        ({"hostNetwork": True}, "hostNetwork", "never share the node's namespaces"),
        ({"hostPID": True}, "hostPID", "never share the node's namespaces"),
        ({"hostIPC": False}, "hostIPC", "never share the node's namespaces"),
        ({"privileged": True}, "privileged", "privileged"),
        (
            {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]},
            "volumes[0].hostPath",
            "hostPath volume reaches the node's file system",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_fields_that_weaken_pod_security_are_refused_by_name(
    template: dict[str, Any], field: str, reason: str
) -> None:
    for role in ("driver", "executor"):
        text = refusal(template, role)
        where = f"spec.application.{role}.podTemplate.{field}: is not allowed"
        assert where in text, text
        assert reason in text, text


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (
            {"volumes": [{"name": "share", "nfs": {"server": "s", "path": "/"}}]},
            f"{DRIVER}.volumes[0]: volume 'share': nfs is not allowed",
        ),
        (
            {"volumes": [{"name": "two", "emptyDir": {}, "secret": {"secretName": "s"}}]},
            "needs exactly one volume source",
        ),
        (
            {"volumes": [{"name": "spark-auth", "emptyDir": {}}]},
            "volume name 'spark-auth' is the operator's own",
        ),
        (
            {
                "volumes": [{"name": "x", "emptyDir": {}}],
                "volumeMounts": [{"name": "x", "mountPath": "/opt/gic/spark-auth/key"}],
            },
            "overlaps /opt/gic/spark-auth",
        ),
        (
            {
                "volumes": [{"name": "x", "emptyDir": {}}],
                "volumeMounts": [{"name": "y", "mountPath": "/data"}],
            },
            "volumeMounts name y, which is not a volume of this template",
        ),
        (
            {
                "volumes": [{"name": "x", "emptyDir": {}}],
                "volumeMounts": [
                    {"name": "x", "mountPath": "/data", "mountPropagation": "Bidirectional"}
                ],
            },
            f"{DRIVER}.volumeMounts[0].mountPropagation: is not a known field",
        ),
        ({"labels": {"gic.io/job": "other"}}, "label 'gic.io/job' is the operator's"),
        (
            {"labels": {"app.kubernetes.io/managed-by": "me"}},
            "label 'app.kubernetes.io/managed-by' is the operator's",
        ),
        (
            {"annotations": {"container.apparmor.security.beta.kubernetes.io/driver": "x"}},
            "annotations under kubernetes.io and k8s.io change how Kubernetes runs the pod",
        ),
        ({"resources": {"limits": {"memory": "lots"}}}, "is not a quantity"),
        ({"containers": []}, f"{DRIVER}.containers: is not a known field"),
    ],
)
def test_template_problems_are_named(template: dict[str, Any], expected: str) -> None:
    text = refusal(template)
    assert expected in text, text
    assert text.startswith("invalid spec: ") and text.endswith("apply it again.")
