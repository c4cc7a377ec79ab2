"""Fixtures of the end-to-end tests: a cluster with the operator, per test module.

* ``e2e_backend`` (session): control-plane mode by default (the session's real
  Kubernetes control plane from :mod:`tests.controlplane`, CRDs applied with kubectl,
  SeaweedFS bucket); real-cluster mode when ``GIC_E2E_KUBECONFIG`` is set (see
  ``README.md`` here).
* ``cluster`` (module): a :class:`~tests.e2e.cluster.Cluster` bound to the module's own
  namespace, with the operator watching it (control-plane mode: a namespace with the
  chart's RBAC and the operator process, stopped and deleted when the module ends).
* ``timings`` (session): a list the tests append ``(what, seconds)`` to; printed at the
  end of the run.

When a test fails, its report gets the operator's log, the driver pods' logs,
``kubectl get gj,gsp,pods,services -o yaml`` and the events (printed in the test's
teardown, so pytest shows them under "Captured stdout teardown").

Every test using ``cluster`` is marked ``slow``; in control-plane mode also ``s3`` and
``controlplane``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from ..controlplane.fixtures import control_plane
from .cluster import Cluster
from .controlplane_backend import ControlPlaneBackend
from .real import RealBackend

__all__ = ["control_plane"]

_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()
_TIMINGS = pytest.StashKey[list[tuple[str, float]]]()
REAL = bool(os.environ.get("GIC_E2E_KUBECONFIG"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "controlplane: needs the real Kubernetes control plane (tests/controlplane)"
    )


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        names = getattr(item, "fixturenames", ())
        uses_cluster = "cluster" in names or "e2e_backend" in names
        if here in Path(str(item.path)).parents and uses_cluster:
            item.add_marker(pytest.mark.slow)
            if not REAL:
                item.add_marker(pytest.mark.s3)
                item.add_marker(pytest.mark.controlplane)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report: pytest.TestReport = yield
    item.stash.setdefault(_REPORTS, {})[report.when] = report
    return report


@pytest.fixture(scope="session")
def e2e_backend(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[ControlPlaneBackend | RealBackend]:
    workdir = tmp_path_factory.mktemp("e2e")
    if REAL:
        with RealBackend(workdir) as real:
            yield real
        return
    plane = request.getfixturevalue("control_plane")
    s3 = request.getfixturevalue("s3_server")
    with ControlPlaneBackend(plane, s3, workdir) as backend:
        yield backend


@pytest.fixture(scope="module")
def cluster(
    e2e_backend: ControlPlaneBackend | RealBackend, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    module = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    namespace = "e2e-" + re.sub(r"[^a-z0-9]+", "-", module.lower()).strip("-")[:50]
    if isinstance(e2e_backend, ControlPlaneBackend):
        with e2e_backend.open(namespace) as opened:
            yield opened
        return
    with e2e_backend.open(namespace) as real:
        yield real


@pytest.fixture(autouse=True)
def _diagnose_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    """Print what the cluster looked like when a test using it failed."""
    yield
    reports = request.node.stash.get(_REPORTS, {})
    failed = any(r.failed for r in reports.values())
    if failed and "cluster" in request.fixturenames:
        found: Cluster = request.getfixturevalue("cluster")
        text = found.diagnostics()
        (found.workdir / f"failure-{request.node.name}.txt").write_text(text)
        print(text)


@pytest.fixture(scope="session")
def timings(request: pytest.FixtureRequest) -> list[tuple[str, float]]:
    return request.config.stash.setdefault(_TIMINGS, [])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    measured = terminalreporter.config.stash.get(_TIMINGS, [])
    if measured:
        terminalreporter.write_sep("-", "operator timings (e2e)")
        for what, seconds in measured:
            terminalreporter.write_line(f"{what}: {seconds:.2f} s")
