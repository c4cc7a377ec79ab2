"""Shared fixtures: a real S3 server (SeaweedFS), stores on it and on the local disk,
and a fault-injecting proxy in front of the server.

* ``s3_server`` (session): a started :class:`~tests.support.testing_s3server.TestingS3Server`;
  use ``s3_server.endpoint_url``, ``s3_server.settings`` (valid credentials, 3 attempts),
  ``s3_server.create_bucket()``.
* ``s3_bucket`` (function): a fresh empty bucket name, deleted after the test.
* ``s3_store`` (function): an ``S3ObjectStore`` on ``s3_bucket`` under prefix ``gic``.
* ``local_store`` (function): a ``LocalObjectStore`` in the test's ``tmp_path``.
* ``fault_proxy`` (function): a started ``TestingFaultProxy`` in front of ``s3_server``;
  point a store at it with ``replace(s3_server.settings, endpoint_url=fault_proxy.endpoint_url)``.

Every test that uses ``s3_server`` (directly or through the fixtures above) is marked
``s3`` automatically; ``pytest -m "not s3"`` skips them and the server never starts.

Spark drivers that the tests start from Python (the ``spark`` fixtures, example apps and
``gic`` commands run as subprocesses, which inherit the environment) get the JVM options
of :data:`TEST_DRIVER_SUBMIT_ARGS` through ``PYSPARK_SUBMIT_ARGS`` unless it is set
already: a test's driver lives for seconds to a minute, where the JIT's optimizing tier
and a parallel collector cost more start-up than they return (the driver pods of the
e2e tests run with the same options). A word-count run of three batches took 13.9-15.7 s
with them against 15.3-18.3 s without.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.testing_proxy import TestingFaultProxy
from tests.support.testing_s3server import TestingS3Server

from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.s3 import S3ObjectStore

_STARTUP_KEY = pytest.StashKey[float]()

TEST_DRIVER_SUBMIT_ARGS = (
    "--driver-java-options '-XX:TieredStopAtLevel=1 -XX:+UseSerialGC' pyspark-shell"
)


def pytest_configure(config: pytest.Config) -> None:
    """Short-lived test drivers start with C1 only and the serial collector (see above)."""
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", TEST_DRIVER_SUBMIT_ARGS)


@pytest.fixture(scope="session")
def s3_server(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[TestingS3Server]:
    """One SeaweedFS server for the whole session, on loopback, data under a pytest tmp dir."""
    data_dir = tmp_path_factory.mktemp("seaweedfs")
    with TestingS3Server(data_dir) as server:
        request.config.stash[_STARTUP_KEY] = server.startup_seconds
        yield server
    shutil.rmtree(Path(data_dir) / "data", ignore_errors=True)  # keep only the logs


@pytest.fixture
def s3_bucket(s3_server: TestingS3Server) -> Iterator[str]:
    """A fresh, empty bucket for one test."""
    name = s3_server.create_bucket()
    yield name
    s3_server.delete_bucket(name)


@pytest.fixture
def s3_store(s3_server: TestingS3Server, s3_bucket: str) -> S3ObjectStore:
    """An S3 store rooted at ``s3://<fresh bucket>/gic``."""
    return S3ObjectStore(s3_bucket, "gic", settings=s3_server.settings)


@pytest.fixture
def local_store(tmp_path: Path) -> LocalObjectStore:
    """A local store rooted in the test's own temporary directory."""
    return LocalObjectStore(tmp_path / "store")


@pytest.fixture
def fault_proxy(s3_server: TestingS3Server) -> Iterator[TestingFaultProxy]:
    """A fault-injecting proxy in front of the session's S3 server (no rules yet)."""
    with TestingFaultProxy(s3_server.endpoint_url, seed=1234) as proxy:
        yield proxy


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that needs the S3 server with ``s3``."""
    for item in items:
        if "s3_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.s3)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Report how long SeaweedFS took to serve S3, when it was started."""
    seconds = terminalreporter.config.stash.get(_STARTUP_KEY, None)
    if seconds is not None:
        terminalreporter.write_line(f"SeaweedFS S3 server ready in {seconds:.2f}s")
