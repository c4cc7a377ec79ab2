"""Files a driver writes are read with a bound.

The status record, control outcomes and manifests of a job are written by its driver,
which runs the tenant's code. The operator reads them on every reconcile; an object of
gigabytes must not be loaded into the operator's memory. Every such read asks the store
for at most the limit of its kind plus one byte, and a larger object is an error naming
the file and the limit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.operator.jobs.test_job_lifecycle import NS, World

from gic_operator.jobs.job_controller import JobController
from gic_operator.models import GICJobSpec
from gic_operator.savepoints.savepoint_controller import SavepointController
from gic_operator.storage import job_storage
from gic_operator.storage.job_storage import JobStorage
from gic_runtime.checkpoint.manifest_limits import OPERATOR_LIMITS
from gic_runtime.storage import StoreResolver
from gic_runtime.storage.local import LocalObjectStore

BIG = 3 << 20  # larger than any limit below
#: The operator's manifest limits, with 1 MiB per manifest.
LIMITS = dataclasses.replace(OPERATOR_LIMITS, max_bytes=1 << 20)


class SpyStore(LocalObjectStore):
    """A local store that records the length of every read."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads: list[tuple[str, int | None]] = []

    def get(self, key: str, *, start: int = 0, length: int | None = None) -> bytes:
        self.reads.append((key, length))
        return super().get(key, start=start, length=length)

    def largest_read(self, suffix: str) -> float:
        """The longest read of a key ending in ``suffix`` (inf: a whole-object read)."""
        lengths = [n for key, n in self.reads if key.endswith(suffix)]
        assert lengths, f"no read of *{suffix}"
        return max(float("inf") if n is None else float(n) for n in lengths)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[World, SpyStore]]:
    w = World(tmp_path / "store")
    (tmp_path / "store").mkdir()
    spy = SpyStore(tmp_path / "store")
    resolver = StoreResolver()
    resolver.register(spy)

    def storage_for(spec: GICJobSpec, job_id: str) -> JobStorage:
        return JobStorage(resolver, spec.checkpointing.storage, job_id, limits=LIMITS)

    w.jobs = JobController(w.kube, storage_for, clock=w.clock)
    w.savepoints = SavepointController(w.kube, storage_for, clock=w.clock)
    yield w, spy


def write(root: Path, relative: str, size: int) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        fh.truncate(size)  # sparse: large, yet cheap to create
    return path


def test_an_oversized_status_record_is_not_loaded(world: tuple[World, SpyStore]) -> None:
    w, spy = world
    w.apply_job()
    w.run_driver()
    write(w.root, f"jobs/{NS}.wc/status.json", BIG)
    status = w.reconcile()
    assert status["phase"] == "Running"
    assert spy.largest_read("status.json") <= 1 + getattr(job_storage, "MAX_STATUS_BYTES", 0)


def test_an_oversized_outcome_fails_the_savepoint(world: tuple[World, SpyStore]) -> None:
    w, spy = world
    w.apply_job()
    w.run_driver()
    w.kube.create_object(
        "savepoints", NS, {"metadata": {"name": "sp", "namespace": NS}, "spec": {"job": "wc"}}
    )

    def reconcile() -> dict[str, Any]:
        body = w.kube.get_object("savepoints", NS, "sp")
        assert body is not None
        w.savepoints.reconcile(body)
        fresh = w.kube.get_object("savepoints", NS, "sp")
        assert fresh is not None
        return dict(fresh["status"])

    rid = reconcile()["requestId"]
    write(w.root, f"jobs/{NS}.wc/control/outcomes/{rid}.out", BIG)
    status = reconcile()
    limit = getattr(job_storage, "MAX_CONTROL_BYTES", 0)
    assert status["state"] == "Failed"
    assert f"more than the {limit} bytes" in status["error"]
    assert spy.largest_read(f"{rid}.out") <= 1 + limit


def test_an_oversized_manifest_stops_a_recovery_before_any_deletion(
    world: tuple[World, SpyStore],
) -> None:
    w, spy = world
    w.apply_job()
    pod = w.run_driver()
    write(w.root, f"jobs/{NS}.wc/checkpoints/chk-000000000001.manifest", BIG)
    orphan = write(w.root, f"jobs/{NS}.wc/changelog/0/orphan.seg", 10)
    w.kube.set_pod_phase(NS, pod, "Failed", exit_code=1)
    w.reconcile()
    status = w.reconcile()
    assert status["phase"] == "Recovering"
    assert "more than the 1048576 bytes" in status["message"]
    assert world[0].condition("Reconciled")["reason"] == "UnreadableFile"
    assert orphan.exists()
    assert spy.largest_read(".manifest") <= 1 + (1 << 20)


def test_read_bounded_reports_the_limit(tmp_path: Path) -> None:
    resolver = StoreResolver()
    small = write(tmp_path, "small", 10)
    large = write(tmp_path, "large", 11)
    assert job_storage.read_bounded(resolver, small.as_uri(), 10, "thing") == b"\0" * 10
    assert job_storage.read_bounded(resolver, (tmp_path / "none").as_uri(), 10, "x") is None
    with pytest.raises(Exception, match="more than the 10 bytes"):
        job_storage.read_bounded(resolver, large.as_uri(), 10, "thing")
