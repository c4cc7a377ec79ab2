"""The operator's Kubernetes seam against the real API server of the test control plane.

* ``control_plane`` (session): from :mod:`tests.controlplane.fixtures`;
* ``kube_env`` (module): a fresh namespace on it with the CRDs of ``crds/`` applied and
  established, the admin kubeconfig, and an admin :class:`~tests.controlplane.api.ApiClient`
  for reading back what the seam wrote.

Every test here is marked ``controlplane`` and ``slow``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ...controlplane.cluster import REPO, ControlPlane
from ...controlplane.fixtures import control_plane
from .support import KubeEnv

__all__ = ["control_plane"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "controlplane: needs the real Kubernetes control plane (tests/controlplane)"
    )


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.path)).parents and "kube_env" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.controlplane)
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="module")
def kube_env(control_plane: ControlPlane) -> Iterator[KubeEnv]:
    plane = control_plane
    crds = [arg for path in sorted((REPO / "crds").glob("*.yaml")) for arg in ("-f", str(path))]
    plane.kubectl("apply", *crds)
    plane.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s",
        "crd/gicjobs.gic.io", "crd/savepoints.gic.io",
        timeout=90,
    )  # fmt: skip
    namespace = f"seam-{uuid.uuid4().hex[:8]}"
    plane.client.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    plane.wait_for(
        f"ServiceAccount {namespace}/default",
        lambda: plane.client.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/default"),
    )
    yield KubeEnv(namespace, plane.kubeconfig, plane.client, plane)
    plane.client.delete(f"/api/v1/namespaces/{namespace}")
