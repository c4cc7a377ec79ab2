"""Bad input never loops silently: every error a reconcile meets shows in the status, in
one Warning Event (not one per pass) and in a metric; a retried step repeats no side
effect; and a status derived from a read never overwrites a newer one.

Errors: a corrupt or unreadable savepoint outcome, a corrupt manifest during a recovery,
a restart backoff that overflows, a driver pod the API server rejects, storage the
operator may not access, a bug. Each shows as ``Reconciled=False`` with a reason, the
message in ``status.message`` (GICJob), a Warning Event with the reason, and
``gic_operator_errors_total{resource,reason}``; only a bug is logged with a traceback.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.operator.jobs.test_job_lifecycle import NS, World

from gic_operator.jobs.job_controller import JobController
from gic_operator.kube.conditions import parse_time
from gic_operator.models import GICJobSpec
from gic_operator.operator_errors import KubeError
from gic_operator.operator_metrics import OperatorMetrics
from gic_operator.savepoints.savepoint_controller import SavepointController
from gic_operator.storage.job_storage import JobStorage, open_job_storage
from gic_runtime.errors import StoragePermissionError
from gic_runtime.fencing import highest_epoch
from gic_runtime.storage import StoreResolver
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.object_store import ObjectInfo


class DeniedStore(LocalObjectStore):
    """Storage whose every operation is refused, as S3 refuses a wrong key."""

    def _deny(self, key: str) -> StoragePermissionError:
        return StoragePermissionError(
            f"S3 refused {key} (AccessDenied): check the access key id", uri=self.uri_for(key)
        )

    def get(self, key: str, *, start: int = 0, length: int | None = None) -> bytes:
        raise self._deny(key)

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        raise self._deny(key)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        raise self._deny(prefix)

    def delete_many(self, keys: Iterable[str]) -> int:
        raise self._deny("")


class Errors:
    """The test's view of ``gic_operator_errors_total``."""

    def __init__(self, metrics: OperatorMetrics) -> None:
        self.metrics = metrics

    def __call__(self, resource: str, reason: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "gic_operator_errors_total", {"resource": resource, "reason": reason}
        )
        return value or 0.0


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path / "store")


@pytest.fixture
def errors(world: World) -> Errors:
    metrics = OperatorMetrics()
    world.jobs = JobController(world.kube, open_job_storage, clock=world.clock, metrics=metrics)
    return Errors(metrics)


def reported_once(world: World, name: str, reason: str, plural: str = "gicjobs") -> None:
    """``reason`` shows as ``Reconciled=False`` and was posted as exactly one Warning."""
    body = world.kube.get_object(plural, NS, name)
    assert body is not None
    conditions = {c["type"]: c for c in body["status"].get("conditions", [])}
    reconciled = conditions["Reconciled"]
    assert (reconciled["status"], reconciled["reason"]) == ("False", reason)
    warnings = [e for e in world.kube.events if e.name == name and e.reason == reason]
    assert len(warnings) == 1 and warnings[0].type == "Warning"


def test_a_corrupt_outcome_fails_the_savepoint(world: World, errors: Errors) -> None:
    world.apply_job()
    world.run_driver()
    world.kube.create_object(
        "savepoints", NS, {"metadata": {"name": "sp", "namespace": NS}, "spec": {"job": "wc"}}
    )
    rid = world.reconcile_savepoint("sp")["requestId"]
    outcome = world.root / "jobs" / f"{NS}.wc" / "control" / "outcomes" / f"{rid}.out"
    outcome.parent.mkdir(parents=True, exist_ok=True)
    outcome.write_bytes(b"GICO 1 crc32c=00000000\n{not json")
    status = world.reconcile_savepoint("sp")
    assert status["state"] == "Failed"
    assert "unreadable" in status["error"]


def test_a_savepoint_whose_storage_fails_still_times_out(world: World, errors: Errors) -> None:
    world.apply_job()
    world.run_driver()
    world.kube.create_object(
        "savepoints", NS, {"metadata": {"name": "sp", "namespace": NS}, "spec": {"job": "wc"}}
    )
    assert world.reconcile_savepoint("sp")["state"] == "InProgress"
    denied = StoreResolver()
    denied.register(DeniedStore(world.root))

    def storage_for(spec: GICJobSpec, job_id: str) -> JobStorage:
        return JobStorage(denied, spec.checkpointing.storage, job_id)

    world.savepoints = SavepointController(
        world.kube, storage_for, clock=world.clock, metrics=errors.metrics
    )
    status = world.reconcile_savepoint("sp")
    assert status["state"] == "InProgress"
    reported_once(world, "sp", "StorageAccessDenied", "savepoints")
    world.clock.t += 601
    status = world.reconcile_savepoint("sp")
    assert status["state"] == "Failed" and "AccessDenied" in status["error"]
    assert errors("savepoint", "StorageAccessDenied") == 2


def test_a_corrupt_manifest_during_recovery_claims_one_epoch(world: World, errors: Errors) -> None:
    world.apply_job()
    pod = world.run_driver()
    manifest = world.root / "jobs" / f"{NS}.wc" / "checkpoints" / "chk-000000000001.manifest"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_bytes(b"GICM 2 crc32c=00000000\ngarbage")
    world.kube.set_pod_phase(NS, pod, "Failed", exit_code=1)
    world.reconcile()  # schedules the recovery
    storage = world.storage()
    epochs = []
    for _ in range(4):
        status = world.reconcile()
        epochs.append(highest_epoch(storage.resolver, storage.root, storage.job_id))
    assert len(set(epochs)) == 1, f"one epoch per recovery, got {epochs}"
    assert status["phase"] == "Recovering" and status["restarts"] == 1
    assert status["pending"]["epoch"] == epochs[0]
    assert "chk-000000000001.manifest" in status["message"]
    reported_once(world, "wc", "UnreadableFile")
    assert world.condition("Ready")["reason"] == "UnreadableFile"
    assert errors("gicjob", "UnreadableFile") == 4


def test_the_restart_backoff_never_overflows() -> None:
    from gic_operator.jobs.job_policy import MAX_RESTART_DELAY_S, restart_delay
    from gic_operator.models.gicjob import RestartPolicySpec

    policy = RestartPolicySpec.model_construct(
        max_restarts=5000, backoff_seconds=1e300, max_backoff_seconds=1e300
    )
    for restarts in (0, 1, 2, 60, 1100):
        delay = restart_delay(policy, restarts)
        assert math.isfinite(delay) and 0 <= delay <= MAX_RESTART_DELAY_S


def test_a_huge_backoff_in_the_spec_does_not_break_the_reconcile(
    world: World, errors: Errors
) -> None:
    world.apply_job(
        restartPolicy={"maxRestarts": 9, "backoffSeconds": 1e300, "maxBackoffSeconds": 1e300}
    )
    status = world.reconcile()
    if status["phase"] == "Invalid":  # bounded by the schema: nothing to schedule
        return
    for _ in range(3):
        pod = world.status()["driverPod"]
        world.kube.set_pod_phase(NS, pod, "Failed", exit_code=1)
        status = world.reconcile()
        world.clock.t += 86401
        status = world.reconcile()
    assert status["phase"] in ("Recovering", "Deploying")
    assert parse_time(status.get("nextRestartTime", "2000-01-01T00:00:00Z")) is not None
    assert errors("gicjob", "InternalError") == 0


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (
            KubeError(
                'creating pod team/wc-driver-1 failed: HTTP 403 Forbidden: pods "wc-driver-1" '
                "is forbidden: error looking up service account team/gic-spark",
                status=403,
                reason="Forbidden",
            ),
            "KubeForbidden",
        ),
        (
            KubeError(
                "creating pod team/wc-driver-1 failed: HTTP 422 Invalid: "
                'spec.containers[0].env[3].name: Invalid value: "A=B"',
                status=422,
                reason="Invalid",
            ),
            "KubeRejected",
        ),
    ],
)
def test_a_rejected_driver_pod_shows_in_the_status(
    world: World, errors: Errors, error: KubeError, reason: str
) -> None:
    world.apply_job()
    world.kube.fail_next("create_pod", error, times=3)
    for _ in range(3):
        status = world.reconcile()
    assert status["phase"] == "Pending"
    assert str(error) in status["message"]
    reported_once(world, "wc", reason)
    assert world.condition("Ready")["reason"] == reason
    assert errors("gicjob", reason) == 3
    status = world.reconcile()  # the API accepts the pod now
    assert status["phase"] == "Deploying"
    assert world.condition("Reconciled")["status"] == "True"


def test_storage_access_denied_shows_in_the_status(world: World, errors: Errors) -> None:
    denied = StoreResolver()
    denied.register(DeniedStore(world.root))

    def storage_for(spec: GICJobSpec, job_id: str) -> JobStorage:
        return JobStorage(denied, spec.checkpointing.storage, job_id)

    world.jobs.storage_for = storage_for
    world.apply_job()
    world.reconcile()
    status = world.reconcile()
    assert status["phase"] == "Pending"
    assert "AccessDenied" in status["message"]
    reported_once(world, "wc", "StorageAccessDenied")
    assert world.kube.pods == {}


def test_a_bug_is_reported_and_logged_once_with_its_traceback(
    world: World, errors: Errors, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(spec: GICJobSpec, job_id: str) -> JobStorage:
        raise ZeroDivisionError("a bug")

    world.jobs.storage_for = broken
    world.apply_job()
    with caplog.at_level(logging.DEBUG):
        for _ in range(3):
            world.reconcile()
    reported_once(world, "wc", "InternalError")
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and "ZeroDivisionError" in caplog.text
    assert errors("gicjob", "InternalError") == 3


def test_a_status_changed_during_a_pass_is_not_overwritten(world: World) -> None:
    world.apply_job()
    world.run_driver()
    world.driver_reports(checkpoint=7)
    real_get = world.kube.get_object
    raced = []

    def get_then_raced(plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        found = real_get(plural, namespace, name)
        if plural == "gicjobs" and not raced:  # another writer, right after this read
            raced.append(True)
            world.kube.patch_status("gicjobs", NS, "wc", {"lastCheckpoint": {"id": 99}})
        return found

    world.kube.get_object = get_then_raced  # type: ignore[method-assign]
    before = len(world.kube.events)
    with contextlib.suppress(KubeError):  # a Conflict, if it escaped
        world.jobs.reconcile(real_get("gicjobs", NS, "wc") or {})
    world.kube.get_object = real_get  # type: ignore[method-assign]
    assert world.status()["lastCheckpoint"]["id"] == 99
    assert len(world.kube.events) == before
    assert world.reconcile()["lastCheckpoint"]["id"] == 7


def test_an_unknown_failure_reason_is_a_generic_driver_failure(
    world: World, errors: Errors
) -> None:
    """A driver's record is input: a reason outside the known set is shown as a plain
    driver failure (restarted as usual), its message one bounded printable line."""
    world.apply_job(restartPolicy={"maxRestarts": 3})
    world.run_driver()
    hostile = "\x1b[31mall good\x1b[0m\r\nNormal Running\u202e\x00 " + "z" * 10_000
    world.driver_refuses("QueryMismatch; rm -rf /", hostile)
    status = world.reconcile()
    assert status["phase"] == "Recovering", "an unknown reason is no reason to stop"
    assert world.condition("Ready")["reason"] == "DriverFailed"
    assert (
        "the driver reported DriverFailed: [31mall good [0m Normal Running z" in (status["message"])
    )
    [event] = world.warnings("DriverFailed")[:1]
    assert event.startswith("the driver failed: [31mall good")
    for text in (status["message"], event):
        assert not any(ch in text for ch in "\x1b\r\n\u202e\x00")
    assert len(status["message"]) < 2048 + 200 and "z..." in status["message"]
    assert "QueryMismatch" not in world.kube.reasons("wc")
    assert errors("gicjob", "DriverFailed") == 0, "a driver's failure is no reconcile error"


def test_the_same_failure_on_every_restart_is_posted_once(world: World, errors: Errors) -> None:
    world.apply_job(restartPolicy={"maxRestarts": 5})
    world.run_driver()
    for restart in range(3):
        world.driver_refuses("StorageAccessDenied", "S3 refused s3://b/gic (AccessDenied)")
        status = world.reconcile()
        assert status["phase"] == "Recovering"
        world.clock.t += 60
        status = world.reconcile()
        assert status["phase"] == "Deploying" and status["restarts"] == restart + 1
        world.kube.set_pod_phase(NS, status["driverPod"], "Running")
        world.reconcile()
    assert world.warnings("StorageAccessDenied") == [
        "the driver failed: S3 refused s3://b/gic (AccessDenied)"
    ]
    assert len(world.warnings("DriverFailed")) == 3, "each restart is still announced"
    assert world.condition("Reconciled")["status"] == "True"
