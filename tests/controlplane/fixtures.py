"""Pytest fixtures for the real control plane; a test directory opts in by importing
them into its ``conftest.py``::

    from tests.controlplane.fixtures import control_plane, kube_namespace  # noqa: F401

* ``control_plane`` (session): a started :class:`~.cluster.ControlPlane` under pytest's
  temporary directory. When the binaries are missing it runs ``controlplane/build.sh``
  first (with pytest's output capture off, so its progress shows). The start time, step
  by step, is printed in the terminal summary.
* ``kube_namespace`` (function): a fresh namespace whose ``default`` ServiceAccount
  exists; deleted (without waiting) after the test.

Thread-safety: pytest fixtures, used from the test thread.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from .cluster import ControlPlane, build_binaries, missing_binaries

#: Name of the plugin that reports the start time; it also holds the session's plane.
REPORT_PLUGIN = "gic-controlplane-report"


class _StartupReport:
    """A plugin the fixture registers: one line on the start time in the summary."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        terminalreporter.write_line(self.plane.startup_summary())


@pytest.fixture(scope="session")
def control_plane(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[ControlPlane]:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler and a process
    kubelet, for the whole session."""
    # pytest may import this module twice in one session, under two names (as
    # ``controlplane.fixtures`` for the conftest of this package, as
    # ``tests.controlplane.fixtures`` for other directories): one control plane serves both.
    shared = request.config.pluginmanager.get_plugin(REPORT_PLUGIN)
    if shared is not None:
        yield shared.plane
        return
    if missing_binaries():
        capture = request.config.pluginmanager.getplugin("capturemanager")
        if capture is not None:
            with capture.global_and_fixture_disabled():
                build_binaries()
        else:
            build_binaries()
    plane = ControlPlane(tmp_path_factory.mktemp("controlplane"))
    with plane:
        request.config.pluginmanager.register(_StartupReport(plane), REPORT_PLUGIN)
        yield plane


@pytest.fixture
def kube_namespace(control_plane: ControlPlane) -> Iterator[str]:
    """A new namespace (with its default ServiceAccount) for one test."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    client = control_plane.client
    client.create("/api/v1/namespaces", {"metadata": {"name": name}})
    control_plane.wait_for(
        f"ServiceAccount {name}/default",
        lambda: client.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
    )
    yield name
    client.delete(f"/api/v1/namespaces/{name}")
