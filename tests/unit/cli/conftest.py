"""Fixtures for the ``gic`` CLI tests: real checkpoints on local storage, written by the
runtime core (StateTask + CheckpointTimeline, no Spark), a CLI runner with a clean
environment, and a simulated running driver serving control requests."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from gic_runtime.checkpoint.manifest import StoredManifest
from gic_runtime.cli import app
from gic_runtime.control import ControlChannel
from gic_runtime.coordination import TaskSettings
from gic_runtime.driver import CheckpointTimeline, RestoreRequest
from gic_runtime.driver.savepoint_requests import serve_request
from gic_runtime.executor import StateTask
from gic_runtime.executor.core import TaskContext
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.status import FailureStatus, JobState, JobStatus, write_status
from gic_runtime.storage import LocalObjectStore, StoreResolver

BUCKETS = 4


class TestingStorage:
    """A storage root on local disk and jobs checkpointing into it."""

    __test__ = False

    def __init__(self, directory: Path) -> None:
        self.store = LocalObjectStore(directory)
        self.resolver = StoreResolver()
        self.resolver.register(self.store)
        self.root = self.store.root_uri

    def run_job(
        self,
        job_id: str,
        batch_ids: range,
        *,
        epoch: int = 1,
        restore: RestoreRequest | None = None,
        first_self_contained: bool = True,
    ) -> list[StoredManifest]:
        """Run ``job_id`` for ``batch_ids`` (each batch updates 20 keys, each batch a
        checkpoint; the first one materializes every bucket) and return the manifests."""
        timeline = CheckpointTimeline(
            self.resolver,
            self.root,
            job_id,
            epoch=epoch,
            num_buckets=BUCKETS,
            retain=3,
            restore=restore,
        )
        task = StateTask(
            root=self.root,
            job_id=job_id,
            epoch=epoch,
            num_buckets=BUCKETS,
            store=InMemoryStore(),
            resolver=self.resolver,
            settings=TaskSettings(),
        )
        stored: list[StoredManifest] = []
        try:
            task.restore(timeline.start.manifest)
            for n, batch_id in enumerate(batch_ids):

                def count(ctx: TaskContext, batch_id: int = batch_id) -> None:
                    counts = ctx.backend.value_state("count")
                    for k in range(20):
                        counts.set(f"k{k}", (counts.get(f"k{k}") or 0) + batch_id)

                full = timeline.must_be_self_contained or (first_self_contained and n == 0)
                states = task.checkpoint(count, checkpoint_id=batch_id, self_contained=full).states
                manifest, wait = timeline.commit(batch_id, states, engine={"batch": batch_id})
                wait()
                task.notify_checkpoint_complete(states)
                stored.append(manifest)
        finally:
            task.close()
            timeline.close()
        return stored

    def write_status(
        self,
        job_id: str,
        state: JobState,
        *,
        age_s: float = 0.0,
        failure: BaseException | None = None,
    ) -> None:
        now = time.time()
        write_status(
            self.resolver,
            self.root,
            job_id,
            JobStatus(
                job_id=job_id,
                epoch=1,
                state=state,
                updated_at=now - age_s,
                started_at=now - age_s - 10,
                error=None if failure is None else str(failure),
                failure=None if failure is None else FailureStatus.of(failure),
            ),
        )

    def put(self, rel: str, data: bytes) -> str:
        self.store.put(rel, data)
        return self.store.uri_for(rel)

    def exists(self, uri: str) -> bool:
        store, key = self.resolver.resolve(uri)
        return store.exists(key)

    def channel(self, job_id: str) -> ControlChannel:
        return ControlChannel(self.resolver, self.root, job_id)


class TestingDriver:
    """What a running driver does with control requests: poll the channel and serve
    savepoint requests from the latest checkpoint with ``serve_request``."""

    __test__ = False

    def __init__(self, storage: TestingStorage, job_id: str, *, epoch: int = 2) -> None:
        self.storage = storage
        self.job_id = job_id
        self.timeline = CheckpointTimeline(
            storage.resolver, storage.root, job_id, epoch=epoch, num_buckets=BUCKETS
        )
        self.channel = storage.channel(job_id)
        self.served: list[str] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="testing-driver", daemon=True)

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                for request in self.channel.pending():
                    outcome = serve_request(
                        self.storage.resolver, self.timeline, self.channel, request
                    )
                    if outcome is not None:
                        self.served.append(request.request_id)
                self._stop.wait(0.02)
        except BaseException as exc:
            self.errors.append(exc)

    def __enter__(self) -> TestingDriver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.timeline.close()
        assert not self.errors, self.errors


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GIC_* setting, Spark or credential variable leaks in from the outside."""
    import os

    for name in list(os.environ):
        if name.startswith(("GIC_", "AWS_")) or name in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("COLUMNS", "250")


@pytest.fixture
def storage(tmp_path: Path) -> TestingStorage:
    return TestingStorage(tmp_path / "store")


@pytest.fixture
def driver_factory(storage: TestingStorage) -> Iterator[Any]:
    started: list[TestingDriver] = []

    def start(job_id: str) -> TestingDriver:
        driver = TestingDriver(storage, job_id).__enter__()
        started.append(driver)
        return driver

    yield start
    for driver in started:
        driver.__exit__(None, None, None)


class GIC:
    """Runs ``gic`` commands in-process."""

    def __init__(self) -> None:
        self.runner = CliRunner()

    def __call__(self, *args: str, env: dict[str, str] | None = None) -> Result:
        return self.runner.invoke(app, list(args), env=env)

    @staticmethod
    def errors(result: Result) -> list[str]:
        """The non-empty lines the command wrote to stderr."""
        return [line for line in result.stderr.splitlines() if line.strip()]

    def json(self, *args: str) -> Any:
        result = self(*args, "--json")
        assert result.exit_code == 0, (result.stdout, result.stderr)
        return json.loads(result.stdout)


@pytest.fixture
def gic() -> GIC:
    return GIC()
