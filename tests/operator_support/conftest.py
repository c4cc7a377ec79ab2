"""Fixtures for the Kubernetes API emulator and the local kubelet.

* ``kube`` (function): a started :class:`KubeEmulator`; the test fails if the emulator
  itself raised while serving.
* ``kubeconfig`` (function): a kubeconfig file pointing at ``kube``.
* ``kubectl`` (function): the real ``kubectl`` against ``kube``, with its own cache dir.
* ``client`` (function): a :class:`KubeClient` (plain JSON over HTTP) for ``kube``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gic_operator.testing.kube_client import KubeClient
from gic_operator.testing.kube_emulator import KubeEmulator
from gic_operator.testing.kubectl import Kubectl


@pytest.fixture
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator() as emulator:
        yield emulator
    assert emulator.server_errors == []


@pytest.fixture
def kubeconfig(kube: KubeEmulator, tmp_path: Path) -> Path:
    return kube.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def kubectl(kubeconfig: Path, tmp_path: Path) -> Kubectl:
    return Kubectl(kubeconfig, tmp_path / "kubectl-cache")


@pytest.fixture
def client(kubeconfig: Path) -> KubeClient:
    return KubeClient(kubeconfig)
