"""What the ``kube_env`` fixture gives a test (see ``conftest.py`` here)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...controlplane.api import ApiClient
from ...controlplane.cluster import ControlPlane


@dataclass(frozen=True)
class KubeEnv:
    """A namespace of the control plane with the GIC CRDs, and how to reach it: the admin
    kubeconfig, an admin client for reading back, and the control plane."""

    namespace: str
    kubeconfig: Path
    raw: ApiClient
    plane: ControlPlane
