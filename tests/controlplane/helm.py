"""The Helm CLI built by ``controlplane/helm/build.sh`` (``make helm``).

Helm is built from its Go module (``helm.sh/helm/v3``'s ``cmd/helm``, pinned by
``controlplane/helm/go.mod``) into ``.cache/controlplane/helm-<version>/bin/helm``, beside
the control plane's binaries; ``GIC_HELM_BIN`` names another directory. ``make cluster``
puts that directory on the ``PATH`` it prints, and the end-to-end test of the local
cluster runs this ``helm`` as a person would.

Pure functions apart from :func:`build_helm`, which runs the build script.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from .cluster import built_bin_dir

REPO = Path(__file__).resolve().parents[2]
MODULE = REPO / "controlplane" / "helm"


def helm_version() -> str:
    """The Helm release ``controlplane/helm/go.mod`` pins (``v3.22.0``)."""
    text = (MODULE / "go.mod").read_text()
    match = re.search(r"^\s*helm\.sh/helm/v3\s+(v\S+)", text, re.MULTILINE)
    if match is None:
        raise RuntimeError("controlplane/helm/go.mod does not require helm.sh/helm/v3")
    return match.group(1)


def helm_bin_dir() -> Path:
    """Where ``helm`` is: ``GIC_HELM_BIN`` or the build script's output directory."""
    return built_bin_dir("GIC_HELM_BIN", f"helm-{helm_version()}")


def helm_path() -> Path:
    """The built ``helm``."""
    return helm_bin_dir() / "helm"


def helm_missing() -> bool:
    """Whether ``helm`` is not built (yet)."""
    return not os.access(helm_path(), os.X_OK)


def build_helm() -> None:
    """Run ``controlplane/helm/build.sh`` (a no-op when up to date); its progress goes to
    this process's stdout."""
    subprocess.run([str(MODULE / "build.sh")], check=True)
