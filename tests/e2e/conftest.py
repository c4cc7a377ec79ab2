"""Fixtures of the end-to-end tests: a cluster with the operator, per test module.

* ``e2e_backend`` (session): emulator mode by default (API emulator, CRDs applied with
  kubectl, SeaweedFS bucket); real-cluster mode when ``GIC_E2E_KUBECONFIG`` is set (see
  ``README.md`` here).
* ``cluster`` (module): a :class:`~tests.e2e.cluster.Cluster` bound to the module's own
  namespace, with the operator watching it (emulator mode: a local kubelet and the
  operator process, both stopped when the module ends).
* ``timings`` (session): a list the tests append ``(what, seconds)`` to; printed at the
  end of the run.

When a test fails, its report gets the operator's log, the driver pods' logs,
``kubectl get gj,gsp,pods,services -o yaml`` and the events (printed in the test's
teardown, so pytest shows them under "Captured stdout teardown").

Every test using ``cluster`` is marked ``slow``; in emulator mode also ``s3``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from .cluster import Cluster
from .emulated import EmulatedBackend
from .real import RealBackend

_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()
_TIMINGS = pytest.StashKey[list[tuple[str, float]]]()
REAL = bool(os.environ.get("GIC_E2E_KUBECONFIG"))


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        uses_cluster = "cluster" in getattr(item, "fixturenames", ())
        if here in Path(str(item.path)).parents and uses_cluster:
            item.add_marker(pytest.mark.slow)
            if not REAL:
                item.add_marker(pytest.mark.s3)


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
) -> Iterator[EmulatedBackend | RealBackend]:
    workdir = tmp_path_factory.mktemp("e2e")
    if REAL:
        with RealBackend(workdir) as real:
            yield real
        return
    with EmulatedBackend(request.getfixturevalue("s3_server"), workdir) as emulated:
        yield emulated


@pytest.fixture(scope="module")
def cluster(
    e2e_backend: EmulatedBackend | RealBackend, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    module = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    namespace = "e2e-" + re.sub(r"[^a-z0-9]+", "-", module.lower()).strip("-")[:50]
    with e2e_backend.open(namespace) as opened:
        yield opened


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
