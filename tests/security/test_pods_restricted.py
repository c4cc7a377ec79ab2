"""Every pod of a GIC job meets the Kubernetes "restricted" Pod Security Standard.

:func:`restricted_violations` is the standard's checks (baseline and restricted, as the
API server's Pod Security Admission applies them) over a pod's JSON form; it runs here on
the manifests the operator makes (the driver pod, and the executor pod template Spark
builds every executor from) and can run unchanged on pods read back from a real API
server. Around it: the executor template reaches executors (Spark is pointed at it and
the driver mounts it), executors get no API token, and nothing a GICJob may set adds a
volume, a service account or a security setting.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from gic_operator.launch import launch_config, launch_plan, launcher
from gic_operator.launch.launch_plan import LaunchPlan
from gic_operator.models import GICJobSpec

#: Volume types the restricted profile allows.
RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
#: Sysctls the baseline profile allows.
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)


def _containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(field) or []:
            yield f"{field}[{container.get('name')}]", container


def restricted_violations(pod: Mapping[str, Any]) -> list[str]:
    """What in ``pod`` (a Pod's JSON form) the restricted Pod Security Standard forbids."""
    spec = pod.get("spec") or {}
    psc = spec.get("securityContext") or {}
    out: list[str] = []
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field) is True:
            out.append(f"spec.{field} is true")
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"volume {volume.get('name')} is of type {sorted(kinds)}")
    for sysctl in psc.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            out.append(f"sysctl {sysctl.get('name')}")
    if psc.get("windowsOptions", {}).get("hostProcess"):
        out.append("pod is a Windows host process")
    pod_non_root = psc.get("runAsNonRoot") is True
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if psc.get("runAsUser") == 0:
        out.append("pod runs as user 0")
    if pod_seccomp not in (None, "RuntimeDefault", "Localhost"):
        out.append(f"pod seccomp profile {pod_seccomp}")
    out.extend(_selinux_apparmor(psc, "pod"))
    for where, container in _containers(spec):
        sc = container.get("securityContext") or {}
        if sc.get("privileged") is True:
            out.append(f"{where} is privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{where} does not set allowPrivilegeEscalation: false")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{where} does not drop ALL capabilities")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f"{where} adds capabilities {caps.get('add')}")
        if not (sc.get("runAsNonRoot") is True or (pod_non_root and "runAsNonRoot" not in sc)):
            out.append(f"{where} may run as root (runAsNonRoot is not true)")
        if sc.get("runAsUser") == 0:
            out.append(f"{where} runs as user 0")
        seccomp = (sc.get("seccompProfile") or {}).get("type") or pod_seccomp
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{where} has seccomp profile {seccomp}")
        if sc.get("procMount") not in (None, "Default"):
            out.append(f"{where} procMount {sc.get('procMount')}")
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"{where} is a Windows host process")
        out.extend(_selinux_apparmor(sc, where))
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                out.append(f"{where} uses host port {port['hostPort']}")
    return out


def _selinux_apparmor(sc: Mapping[str, Any], where: str) -> list[str]:
    out = []
    selinux = sc.get("seLinuxOptions") or {}
    if selinux.get("type") not in (None, "", "container_t", "container_init_t", "container_kvm_t"):
        out.append(f"{where} SELinux type {selinux.get('type')}")
    if selinux.get("user") or selinux.get("role"):
        out.append(f"{where} sets an SELinux user or role")
    apparmor = (sc.get("appArmorProfile") or {}).get("type")
    if apparmor not in (None, "RuntimeDefault", "Localhost"):
        out.append(f"{where} AppArmor profile {apparmor}")
    return out


def make_plan(**spec_changes: Any) -> LaunchPlan:
    body: dict[str, Any] = {
        "application": {"image": "registry.example/gic:1", "mainFile": "/opt/app/job.py"},
        "checkpointing": {"storage": "s3://bucket/gic", "credentialsSecret": "s3-creds"},
    }
    body["application"].update(spec_changes)
    return LaunchPlan(
        namespace="prod",
        name="wordcount",
        uid="uid-1",
        spec=GICJobSpec.model_validate(body),
        job_id="prod.wordcount",
        epoch=3,
    )


KUBERNETES = make_plan()
LOCAL = make_plan(sparkConf={"spark.master": "local[2]"})


def test_the_checker_catches_what_the_standard_forbids() -> None:
    bad = {
        "spec": {
            "hostNetwork": True,
            "volumes": [{"name": "h", "hostPath": {"path": "/"}}],
            "securityContext": {"seccompProfile": {"type": "Unconfined"}},
            "containers": [
                {
                    "name": "c",
                    "securityContext": {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}},
                    "ports": [{"containerPort": 1, "hostPort": 1}],
                }
            ],
        }
    }
    text = "\n".join(restricted_violations(bad))
    for expected in (
        "hostNetwork",
        "hostPath",
        "Unconfined",
        "privileged",
        "allowPrivilegeEscalation",
        "ALL capabilities",
        "SYS_ADMIN",
        "runAsNonRoot",
        "host port",
    ):
        assert expected in text, expected
    assert restricted_violations({"spec": {"containers": [{"name": "c"}]}})


@pytest.mark.parametrize("plan", [KUBERNETES, LOCAL], ids=["k8s-master", "local-master"])
def test_driver_pod_is_restricted(plan: LaunchPlan) -> None:
    pod = launcher.driver_pod(plan)
    assert restricted_violations(pod) == []
    assert pod["spec"]["securityContext"]["runAsUser"] == launch_plan.SPARK_UID != 0


def test_local_driver_has_no_token_and_no_volumes() -> None:
    pod = launcher.driver_pod(LOCAL)
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert "volumes" not in pod["spec"]


def test_executor_template_is_restricted_and_tokenless() -> None:
    template = launcher.executor_pod_template(KUBERNETES)
    assert restricted_violations(template) == []
    assert template["spec"]["automountServiceAccountToken"] is False
    assert template["spec"]["enableServiceLinks"] is False
    [container] = template["spec"]["containers"]
    assert container["name"] == launch_plan.EXECUTOR_CONTAINER


def test_spark_builds_executors_from_the_template_the_driver_mounts() -> None:
    pod = launcher.driver_pod(KUBERNETES)
    conf = launch_config.spark_conf(KUBERNETES)
    path = conf["spark.kubernetes.executor.podTemplateFile"]
    assert (
        conf["spark.kubernetes.executor.podTemplateContainerName"] == launch_plan.EXECUTOR_CONTAINER
    )
    [mount] = [
        m
        for m in pod["spec"]["containers"][0]["volumeMounts"]
        if path.startswith(m["mountPath"] + "/")
    ]
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
    config_map = launcher.executor_template_config_map(KUBERNETES)
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    key = path.removeprefix(mount["mountPath"] + "/")
    assert json.loads(config_map["data"][key]) == launcher.executor_pod_template(KUBERNETES)
    assert config_map["metadata"]["ownerReferences"][0]["kind"] == "GICJob"


def test_executors_inherit_no_more_than_the_template() -> None:
    """Spark adds image, resources, ports and its own variables to the template; what
    decides pod security (volumes, security contexts, service account) stays the
    operator's: sparkConf cannot reach those settings at all."""
    for key in (
        "spark.kubernetes.executor.volumes.hostPath.data.mount.path",
        "spark.kubernetes.executor.podTemplateFile",
        "spark.kubernetes.authenticate.executor.serviceAccountName",
        "spark.kubernetes.executor.securityContext.allowPrivilegeEscalation",
        "spark.kubernetes.executor.secrets.other",
    ):
        with pytest.raises(ValueError, match="not allowed"):
            make_plan(sparkConf={key: "x"})


def test_pods_shaped_by_templates_stay_restricted() -> None:
    """A GICJob's pod templates add labels, scheduling, volumes and resources; whatever
    they hold, the pods still meet the standard (the example uses every field)."""
    example = Path(__file__).resolve().parents[2] / "examples" / "k8s" / "gicjob-pod-template.yaml"
    [job] = [d for d in yaml.safe_load_all(example.read_text()) if d and d["kind"] == "GICJob"]
    application = job["spec"]["application"]
    plan = make_plan(driver=application["driver"], executor=application["executor"])
    assert plan.spec.application.driver.pod_template is not None
    assert plan.spec.application.executor.pod_template is not None
    driver = launcher.driver_pod(plan)
    executor = launcher.executor_pod_template(plan)
    assert restricted_violations(driver) == []
    assert restricted_violations(executor) == []
    assert len(driver["spec"]["volumes"]) > len(launcher.driver_pod(KUBERNETES)["spec"]["volumes"])
    assert executor["spec"]["automountServiceAccountToken"] is False
