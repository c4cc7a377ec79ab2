"""The real node (:mod:`tests.e2e.real_node`): the pinned kubelet with containerd and runc,
joined to the session's test control plane, runs a pod as a container.

Skipped when this machine cannot run one (not root, or Debian's ``containerd``, ``runc`` or
``containernetworking-plugins`` missing: :func:`~tests.e2e.real_node.missing_tools`) and
against a real cluster (``GIC_E2E_KUBECONFIG``).
"""

from __future__ import annotations

import ipaddress
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..controlplane.cluster import ControlPlane
from .oci_image import host_programs, oci_archive
from .real_node import (
    ECHO_IMAGE,
    TAINT,
    RealNode,
    build_node_binaries,
    echo_pod,
    missing_tools,
    node_bin_dir,
)

_MISSING = missing_tools()
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
    if _MISSING:
        pytest.fail(
            f"a real node needs {', '.join(_MISSING)}: run as root after `apt-get install "
            "containerd runc containernetworking-plugins` (.ci/run installs them)"
        )
    if not all((node_bin_dir() / name).exists() for name in ("kubelet", "gic-pause")):
        capture = request.config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled():
            build_node_binaries()
    node = RealNode(control_plane, tmp_path_factory.mktemp("realnode"))
    with node:
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
