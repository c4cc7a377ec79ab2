"""Fixtures of the image tests: the images ``make images`` builds, and the session's
control plane for the operator image.

* ``images`` (session): checks that ``localhost/gic-spark:<version>`` and
  ``localhost/gic-operator:<version>`` are in podman's storage. Without them (no podman,
  or ``make images`` not run) the tests are skipped, except under CI (``CI`` set), where
  ``make test`` builds them first and their absence is a failure.

Every test here is marked ``images`` and ``slow``.
"""

from __future__ import annotations

import os

import pytest

from ..controlplane.fixtures import control_plane
from .podman import missing_images

__all__ = ["control_plane", "images"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "images: runs the GIC container images (make images)")
    config.addinivalue_line(
        "markers", "controlplane: needs the real Kubernetes control plane (tests/controlplane)"
    )


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.path).startswith(here + os.sep):
            item.add_marker(pytest.mark.images)
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def images() -> None:
    """The GIC images are built (see the module docstring)."""
    missing = missing_images()
    if not missing:
        return
    message = f"images not built: {', '.join(missing)} (make images builds them with podman)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)
