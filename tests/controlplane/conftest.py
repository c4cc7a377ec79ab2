"""The control plane's own tests use its fixtures; every test that uses the control
plane is marked ``controlplane`` and ``slow``."""

from __future__ import annotations

import pytest

from .fixtures import control_plane, kube_namespace

__all__ = ["control_plane", "kube_namespace"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "controlplane: needs the real Kubernetes control plane (tests/controlplane)"
    )


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "control_plane" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.controlplane)
            item.add_marker(pytest.mark.slow)
