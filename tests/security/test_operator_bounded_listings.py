"""A job directory flooded with objects stops the operator's listing, visibly.

The driver runs the tenant's code and can fill its job directory with any number of
objects. The operator lists parts of it while reconciling (the checkpoints on recovery,
the epochs when it claims one, the orphan sweep); each listing stops past its limit, and
the error reaches the GICJob as every step error does: ``status.message``,
``Reconciled=False`` with reason ``TooManyObjects``, one Warning Event and
``gic_operator_errors_total``. Nothing is deleted, and once the stray files are gone the
recovery carries on.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tests.operator.jobs.test_job_lifecycle import NS, World

from gic_operator.jobs.job_controller import JobController
from gic_operator.operator_metrics import OperatorMetrics
from gic_operator.storage.job_storage import open_job_storage
from gic_runtime.checkpoint import catalog, sweep

REASON = "TooManyObjects"


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path / "store")


@pytest.fixture
def metrics(world: World) -> OperatorMetrics:
    metrics = OperatorMetrics()
    world.jobs = JobController(world.kube, open_job_storage, clock=world.clock, metrics=metrics)
    return metrics


def errors(metrics: OperatorMetrics) -> float:
    value = metrics.registry.get_sample_value(
        "gic_operator_errors_total", {"resource": "gicjob", "reason": REASON}
    )
    return value or 0.0


def fill(directory: Path, count: int) -> set[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    made = {directory / f"stray-{i:06d}" for i in range(count)}
    for path in made:
        path.write_bytes(b"x")
    return made


def fail_driver(world: World) -> Path:
    """Run the driver, leave an orphan behind and fail the pod; the job's directory."""
    pod = world.run_driver()
    job = world.root / "jobs" / f"{NS}.wc"
    orphan = job / "changelog" / "1" / "orphan.seg"
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"o" * 10)
    world.kube.set_pod_phase(NS, pod, "Failed", exit_code=1)
    world.reconcile()  # schedules the recovery
    return job


def reported(world: World, metrics: OperatorMetrics, passes: int) -> str:
    """The error shows in the status, once as a Warning Event, and in the metric."""
    status = world.status()
    assert status["phase"] == "Recovering"
    reconciled = world.condition("Reconciled")
    assert (reconciled["status"], reconciled["reason"]) == ("False", REASON)
    assert reconciled["message"] == status["message"]
    warnings = [e for e in world.kube.events if e.name == "wc" and e.reason == REASON]
    assert len(warnings) == 1 and warnings[0].type == "Warning"
    assert errors(metrics) == passes
    return str(status["message"])


def test_a_flooded_checkpoints_directory_stops_the_recovery(
    world: World, metrics: OperatorMetrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catalog, "MAX_CHECKPOINT_OBJECTS", 20)
    world.apply_job()
    job = fail_driver(world)
    strays = fill(job / "checkpoints", 21)
    before = {p for p in job.rglob("*") if p.is_file()}
    for _ in range(3):
        world.reconcile()
    message = reported(world, metrics, passes=3)
    assert f"more than 20 objects under {(job / 'checkpoints').as_uri()}/" in message
    assert "a job keeps only a handful of manifests" in message
    assert {p for p in job.rglob("*") if p.is_file()} >= before  # nothing deleted
    assert world.kube.pods == {}  # the old driver is gone, no new one launched

    for path in strays:
        path.unlink()
    status = world.reconcile()
    assert status["phase"] == "Deploying"
    assert world.condition("Reconciled")["status"] == "True"
    assert not (job / "changelog" / "1" / "orphan.seg").exists()  # swept now


def test_a_flooded_changelog_is_not_swept(
    world: World, metrics: OperatorMetrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sweep, "MAX_SWEPT_OBJECTS", 30)
    world.apply_job()
    job = fail_driver(world)
    strays = fill(job / "changelog" / "7", 30)
    before = {p for p in job.rglob("*") if p.is_file()}
    world.reconcile()
    message = reported(world, metrics, passes=1)
    assert "more than 30 objects in changelog/, snapshots/, checkpoints/" in message
    assert "deleted nothing" in message
    assert {p for p in job.rglob("*") if p.is_file()} >= before

    shutil.rmtree(job / "changelog" / "7")
    assert not any(p.exists() for p in strays)
    status = world.reconcile()
    assert status["phase"] == "Deploying"
    assert not (job / "changelog" / "1" / "orphan.seg").exists()
