"""The real node (:mod:`tests.e2e.real_node`): the pinned kubelet with containerd and runc,
joined to the session's test control plane, runs a pod as a container.

Fails, naming what to install, when this machine cannot run one (not root, or Debian's
``containerd``, ``runc`` or ``containernetworking-plugins`` missing:
:func:`~tests.e2e.real_node.missing_tools`); skipped against a real cluster
(``GIC_E2E_KUBECONFIG``).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.testing_s3server import TestingS3Server

from gic_runtime.storage.s3 import create_s3_client

from ..controlplane.cluster import ControlPlane
from .oci_image import ImageFile, host_programs, oci_archive
from .real_node import (
    ECHO_IMAGE,
    TAINT,
    RealNode,
    echo_pod,
    node_bin_dir,
)
from .real_node_fixture import checked_node, require_real_node

pytestmark = [
    pytest.mark.slow,
    pytest.mark.controlplane,
    pytest.mark.skipif(
        bool(os.environ.get("GIC_E2E_KUBECONFIG")), reason="test control plane only"
    ),
]
ENFORCE = "pod-security.kubernetes.io/enforce"


@pytest.fixture(scope="module")
def real_node(
    control_plane: ControlPlane,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
    timings: list[tuple[str, float]],
) -> Iterator[RealNode]:
    require_real_node(request)
    with checked_node(control_plane, tmp_path_factory.mktemp("realnode")) as node:
        timings.append(("real node: start -> Ready", node.startup_seconds))
        print(node.startup_summary())
        yield node


@pytest.fixture(scope="module")
def restricted_namespace(control_plane: ControlPlane, real_node: RealNode) -> Iterator[str]:
    name = "e2e-real-node"
    client = control_plane.client
    client.create(
        "/api/v1/namespaces", {"metadata": {"name": name, "labels": {ENFORCE: "restricted"}}}
    )
    control_plane.wait_for(
        f"ServiceAccount {name}/default",
        lambda: client.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
    )
    yield name
    client.delete(f"/api/v1/namespaces/{name}")


def test_the_kubelet_registers_its_node(control_plane: ControlPlane, real_node: RealNode) -> None:
    node = control_plane.client.get(f"/api/v1/nodes/{real_node.name}")
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == control_plane.version
    assert info["containerRuntimeVersion"].startswith("containerd://")
    conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert conditions["Ready"] == "True"
    assert TAINT in node["spec"]["taints"]
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == real_node.address
    # The release runs on this machine's cgroup v1 only because it was told to.
    log = (real_node.logs_dir / "kubelet.log").read_text()
    if not Path("/sys/fs/cgroup/cgroup.controllers").exists():
        assert "cgroup v1 detected" in log


def test_a_restricted_pod_runs_as_a_container_and_logs(
    control_plane: ControlPlane,
    real_node: RealNode,
    restricted_namespace: str,
    tmp_path: Path,
    timings: list[tuple[str, float]],
) -> None:
    archive = oci_archive(tmp_path / "echo.tar", ECHO_IMAGE, host_programs(["echo", "sh"]))
    real_node.import_image(archive)
    assert ECHO_IMAGE in real_node.images()
    client = control_plane.client
    pods = f"/api/v1/namespaces/{restricted_namespace}/pods"
    started = time.monotonic()
    client.create(pods, echo_pod("hello", ECHO_IMAGE, ["hello", "from", "a", "container"]))

    def finished() -> dict[str, object] | None:
        pod = client.get(f"{pods}/hello")
        return pod if pod["status"].get("phase") in ("Succeeded", "Failed") else None

    pod = control_plane.wait_for("pod hello to finish", finished, timeout=120)
    timings.append(("real node: pod created -> Succeeded", time.monotonic() - started))
    status = pod["status"]
    assert status["phase"] == "Succeeded", status
    terminated = status["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0
    assert status["containerStatuses"][0]["containerID"].startswith("containerd://")
    subnet = ipaddress.ip_network(f"{real_node.address}/24", strict=False)
    assert ipaddress.ip_address(status["podIP"]) in subnet
    logs = control_plane.kubectl("-n", restricted_namespace, "logs", "hello")
    assert logs.stdout == "hello from a container\n"


def test_the_namespace_refuses_a_pod_breaking_restricted(
    control_plane: ControlPlane, restricted_namespace: str
) -> None:
    """The control: without its security contexts the same pod is not admitted."""
    pod = echo_pod("careless", ECHO_IMAGE, ["hi"])
    spec = pod["spec"]
    assert isinstance(spec, dict)
    del spec["securityContext"]
    del spec["containers"][0]["securityContext"]
    result = control_plane.kubectl(
        "-n", restricted_namespace, "apply", "--dry-run=server", "-f", "-",
        input=json.dumps(pod), check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert 'violates PodSecurity "restricted:latest"' in result.stderr


# -- the cluster networking (real_node_net) -------------------------------------------------

WEB_IMAGE = "localhost/gic-http:1"
PROBE_IMAGE = "localhost/gic-probe:1"
SA = "/var/run/secrets/kubernetes.io/serviceaccount"
#: curl as the probe runs it: every error retried for a while (a Service's rules or DNS
#: records may come a moment after the pod starts).
CURL = "curl -sS --max-time 10 --retry 20 --retry-delay 1 --retry-all-errors"


def _pod(name: str, image: str, command: list[str], **extra: object) -> dict[str, object]:
    pod = echo_pod(name, image, [])
    spec = pod["spec"]
    assert isinstance(spec, dict)
    spec["containers"][0]["command"] = command
    spec["containers"][0]["name"] = name
    for key, value in extra.items():
        if key == "labels":
            pod["metadata"] = {"name": name, "labels": value}
        else:
            spec[key] = value
    return pod


def _service(name: str, port: int, target: int, *, headless: bool = False) -> dict[str, object]:
    spec: dict[str, object] = {
        "selector": {"app": "web"},
        "ports": [{"name": "http", "port": port, "targetPort": target}],
    }
    if headless:
        spec["clusterIP"] = "None"
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec}


def test_a_restricted_pod_reaches_the_api_server_services_by_name_and_s3(
    control_plane: ControlPlane,
    real_node: RealNode,
    restricted_namespace: str,
    s3_server: TestingS3Server,
    timings: list[tuple[str, float]],
) -> None:
    """kube-proxy routes the ``kubernetes`` Service and a ClusterIP Service, CoreDNS
    resolves Service names (ClusterIP and headless), SeaweedFS answers at the bridge
    address: all from a pod passing ``restricted``, with its service-account token."""
    assert real_node.network is not None
    ns = restricted_namespace
    client = control_plane.client
    pods = f"/api/v1/namespaces/{ns}/pods"
    web = oci_archive(
        real_node.workdir / "images" / "web.tar", WEB_IMAGE,
        {"/gic-http": ImageFile(node_bin_dir() / "gic-http")}, entrypoint=["/gic-http"],
    )  # fmt: skip
    probe = oci_archive(real_node.workdir / "images" / "probe.tar", PROBE_IMAGE,
                        host_programs(["sh", "curl", "getent"]))  # fmt: skip
    for archive in (web, probe):
        real_node.import_image(archive)

    client.create(pods, _pod("web", WEB_IMAGE, ["/gic-http", ":8080"], labels={"app": "web"}))
    for service in (_service("web", 80, 8080), _service("web-headless", 8080, 8080, headless=True)):
        client.create(f"/api/v1/namespaces/{ns}/services", service)
    web_pod = control_plane.wait_for(
        "pod web Running",
        lambda: (p := client.get(f"{pods}/web"))["status"].get("phase") == "Running" and p,
        timeout=60,
    )
    cluster_ip = client.get(f"/api/v1/namespaces/{ns}/services/web")["spec"]["clusterIP"]

    # An object in SeaweedFS, fetched by the pod with a URL presigned for the bridge address.
    s3_address = real_node.network.expose(int(s3_server.endpoint_url.rsplit(":", 1)[1]))
    bucket = s3_server.create_bucket()
    s3_server.client().put_object(Bucket=bucket, Key="hello.txt", Body=b"hello from S3\n")
    bridged = create_s3_client(
        dataclasses.replace(s3_server.settings, endpoint_url=f"http://{s3_address}")
    )
    url = bridged.generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": "hello.txt"}, ExpiresIn=600
    )
    auth = f'--cacert {SA}/ca.crt -H "Authorization: Bearer $token" -o /dev/null -w %{{http_code}}'
    script = "\n".join([
        f"read -r token < {SA}/token",
        f"echo api-service $({CURL} {auth} https://kubernetes.default.svc/api)",
        f"echo api-env $({CURL} {auth}"
        " https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/api)",
        # The certificate names the bridge address too (curl checks it).
        f"echo api-bridge $({CURL} {auth} https://{real_node.address}:{control_plane.port}/api)",
        f"echo web $({CURL} http://web/)",
        f"echo dns-web $(getent hosts web.{ns}.svc.cluster.local)",
        f"echo headless $({CURL} http://web-headless:8080/)",
        "echo dns-headless $(getent hosts web-headless)",
        # The form of spark.driver.host the operator sets: <service>.<namespace>.svc.
        f"echo dns-driver-form $(getent hosts web-headless.{ns}.svc)",
        f"echo s3 $({CURL} '{url}')",
    ])  # fmt: skip
    started = time.monotonic()
    client.create(pods, _pod("probe", PROBE_IMAGE, ["/bin/sh", "-c", script],
                             automountServiceAccountToken=True))  # fmt: skip

    def finished() -> dict[str, object] | None:
        pod = client.get(f"{pods}/probe")
        return pod if pod["status"].get("phase") in ("Succeeded", "Failed") else None

    pod = control_plane.wait_for("pod probe to finish", finished, timeout=180)
    timings.append(("real node: network probe pod created -> done", time.monotonic() - started))
    logs = control_plane.kubectl("-n", ns, "logs", "probe").stdout
    s3_server.delete_bucket(bucket)
    assert pod["status"]["phase"] == "Succeeded", (pod["status"], logs)
    lines = dict(line.split(" ", 1) for line in logs.splitlines() if " " in line)
    assert lines.get("api-service") == "200", logs
    assert lines.get("api-env") == "200", logs
    assert lines.get("api-bridge") == "200", logs
    assert lines.get("web") == "hello from web", logs
    assert lines.get("dns-web", "").split()[:1] == [cluster_ip], logs
    assert lines.get("headless") == "hello from web", logs
    assert lines.get("dns-headless", "").split()[:1] == [web_pod["status"]["podIP"]], logs
    assert lines.get("dns-driver-form", "").split()[:1] == [web_pod["status"]["podIP"]], logs
    assert lines.get("s3") == "hello from S3", logs
