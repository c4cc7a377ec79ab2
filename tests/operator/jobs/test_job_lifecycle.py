"""GICJob and Savepoint reconcilers against the in-memory Kubernetes API (the seam fake
TestingKubeApi) and real checkpoint storage on the local disk.

Each test drives the reconcilers step by step, playing the kubelet (pod phases) and the
driver (runtime status record, control outcomes) by hand, and checks the status, the
pods, the storage and the events a user would see.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gic_operator.jobs.job_controller import JobController
from gic_operator.kube.naming import ANNOTATION_SAVEPOINT, savepoint_dir, savepoint_request_id
from gic_operator.models import API_VERSION
from gic_operator.operator_errors import ConflictError, TransientKubeError
from gic_operator.savepoints.savepoint_controller import MAX_DISPOSAL_ATTEMPTS, SavepointController
from gic_operator.storage.job_storage import JobStorage, open_job_storage
from gic_operator.testing.fake_kube import TestingKubeApi
from gic_runtime.control import ControlChannel, Outcome
from gic_runtime.control.model import OutcomeState
from gic_runtime.coordination import TaskSettings
from gic_runtime.driver import CheckpointTimeline
from gic_runtime.executor import StateTask
from gic_runtime.fencing import highest_epoch
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.status import (
    CheckpointStatus,
    FailureStatus,
    JobState,
    JobStatus,
    read_status,
    write_status,
)

NS = "team"


class Clock:
    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


class World:
    """The fake API, the reconcilers and the job's storage, with driver-side helpers."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.storage_uri = f"file://{root}"
        self.kube = TestingKubeApi()
        self.clock = Clock()
        self.jobs = JobController(self.kube, open_job_storage, clock=self.clock)
        self.savepoints = SavepointController(self.kube, open_job_storage, clock=self.clock)

    def spec(self, **overrides: Any) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "application": {"image": "gic-spark:0.1.0", "mainFile": "local:///opt/app/job.py"},
            "checkpointing": {"storage": self.storage_uri, "buckets": 8},
        }
        spec.update(overrides)
        return spec

    def apply_job(self, name: str = "wc", **overrides: Any) -> dict[str, Any]:
        body = {
            "apiVersion": API_VERSION,
            "kind": "GICJob",
            "metadata": {"name": name, "namespace": NS},
            "spec": self.spec(**overrides),
        }
        return self.kube.put_object("gicjobs", NS, body)

    def job(self, name: str = "wc") -> dict[str, Any]:
        body = self.kube.get_object("gicjobs", NS, name)
        assert body is not None
        return body

    def set_arguments(self, arguments: list[str], name: str = "wc") -> None:
        """Submit job ``name`` again with ``spec.application.arguments`` changed."""
        body = self.job(name)
        body["spec"]["application"]["arguments"] = arguments
        self.kube.put_object("gicjobs", NS, body)

    def set_state(self, state: str, name: str = "wc") -> None:
        """Submit job ``name`` again with ``spec.state`` changed."""
        body = self.job(name)
        body["spec"]["state"] = state
        self.kube.put_object("gicjobs", NS, body)

    def status(self, name: str = "wc") -> dict[str, Any]:
        return dict(self.job(name).get("status") or {})

    def reconcile(self, name: str = "wc") -> dict[str, Any]:
        self.jobs.reconcile(self.job(name))
        return self.status(name)

    def storage(self, name: str = "wc") -> JobStorage:
        return JobStorage.open(self.storage_uri, f"{NS}.{name}")

    def condition(self, type_: str, name: str = "wc") -> dict[str, Any]:
        for c in self.status(name).get("conditions", []):
            if c["type"] == type_:
                return dict(c)
        raise AssertionError(f"no condition {type_}")

    def driver_reports(self, name: str = "wc", *, checkpoint: int = 3, **extra: Any) -> None:
        """The current driver's status record after it completed checkpoint
        ``checkpoint`` (its first batch unless ``extra`` says how many)."""
        storage = self.storage(name)
        status = JobStatus(
            job_id=f"{NS}.{name}",
            epoch=int(self.status(name).get("epoch") or 1),
            state=JobState.RUNNING,
            updated_at=self.clock.t,
            started_at=self.clock.t - 10,
            last_checkpoint=CheckpointStatus(
                id=checkpoint, created_at=self.clock.t - 1, duration_ms=12.5, bytes_uploaded=900
            ),
            **{"batches": 1, **extra},
        )
        write_status(storage.resolver, storage.root, storage.job_id, status)

    def driver_refuses(
        self,
        reason: str,
        message: str,
        name: str = "wc",
        *,
        epoch: int | None = None,
        exit_code: int = 1,
    ) -> str:
        """The current driver records ``reason``/``message`` as its failure (under
        ``epoch``, default its own) and its pod fails; return the pod's name."""
        storage = self.storage(name)
        status = JobStatus(
            job_id=f"{NS}.{name}",
            epoch=epoch if epoch is not None else int(self.status(name)["epoch"]),
            state=JobState.FAILED,
            updated_at=self.clock.t,
            started_at=self.clock.t,
            error=message[:500],
            failure=FailureStatus(reason, message, "Error"),
        )
        write_status(storage.resolver, storage.root, storage.job_id, status)
        pod = str(self.status(name)["driverPod"])
        self.kube.set_pod_phase(NS, pod, "Failed", exit_code=exit_code)
        return pod

    def warnings(self, reason: str, name: str = "wc") -> list[str]:
        """Messages of the Warning Events with ``reason`` posted on job ``name``."""
        return [
            e.message
            for e in self.kube.events
            if e.name == name and e.reason == reason and e.type == "Warning"
        ]

    def complete(self, request_id: str, name: str = "wc", error: str | None = None) -> str:
        storage = self.storage(name)
        channel = ControlChannel(storage.resolver, storage.root, storage.job_id)
        request = channel.request(request_id)
        assert request is not None, f"no request {request_id}"
        target = getattr(request, "target", None)
        if error is None:
            outcome = Outcome(
                request_id,
                OutcomeState.COMPLETED,
                path=target,
                checkpoint_id=3,
                size_bytes=1234,
                files=2,
                finished_at=self.clock.t,
            )
            Path(str(target).removeprefix("file://")).mkdir(parents=True, exist_ok=True)
            (Path(str(target).removeprefix("file://")) / "_manifest").write_text("x")
        else:
            outcome = Outcome(
                request_id, OutcomeState.FAILED, error=error, finished_at=self.clock.t
            )
        channel.complete(outcome)
        return str(target)

    def run_driver(self, name: str = "wc") -> str:
        """Launch (if needed), report the driver pod Running (the job is Starting) and its
        first checkpoint (the job is Running); return the pod's name."""
        status = self.reconcile(name)
        pod = status["driverPod"]
        self.kube.set_pod_phase(NS, pod, "Running")
        status = self.reconcile(name)
        if status["phase"] == "Starting":
            self.driver_reports(name)
            status = self.reconcile(name)
        assert status["phase"] == "Running", status
        return str(pod)

    def create_savepoint(
        self,
        name: str,
        job: str = "wc",
        *,
        dispose: bool = True,
        labels: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Create Savepoint ``name`` of ``job`` (``disposeOnDelete: dispose``, with
        ``labels`` when given); return it as the API stores it."""
        metadata: dict[str, Any] = {"name": name, "namespace": NS}
        if labels is not None:
            metadata["labels"] = labels
        self.kube.create_object(
            "savepoints",
            NS,
            {"metadata": metadata, "spec": {"job": job, "disposeOnDelete": dispose}},
        )
        body = self.kube.get_object("savepoints", NS, name)
        assert body is not None
        return body

    def completed_savepoint(
        self,
        name: str,
        job: str = "wc",
        *,
        labels: dict[str, str] | None = None,
        manifest: bytes = b"m",
    ) -> str:
        """A Completed Savepoint ``name`` of ``job`` with one file, ``_savepoint.manifest``
        (holding ``manifest``), in its derived directory; returns that directory's URI."""
        sp = self.create_savepoint(name, job, labels=labels)
        rid = savepoint_request_id(name, sp["metadata"]["uid"])
        path = savepoint_dir(self.storage_uri, NS, job, rid)
        local = Path(path.removeprefix("file://"))
        local.mkdir(parents=True, exist_ok=True)
        (local / "_savepoint.manifest").write_bytes(manifest)
        self.kube.patch_status(
            "savepoints", NS, name, {"state": "Completed", "path": path, "requestId": rid}
        )
        return path

    def reconcile_savepoint(self, name: str) -> dict[str, Any]:
        """Reconcile Savepoint ``name`` once; return its status afterwards."""
        body = self.kube.get_object("savepoints", NS, name)
        assert body is not None
        self.savepoints.reconcile(body)
        fresh = self.kube.get_object("savepoints", NS, name)
        assert fresh is not None
        return dict(fresh.get("status") or {})

    def write_checkpoint(self, name: str = "wc", checkpoint: int = 1) -> None:
        """A real checkpoint of job ``name`` (written by the runtime's core, no restore,
        so it references nothing of any restore source)."""
        storage = self.storage(name)
        timeline = CheckpointTimeline(
            storage.resolver, storage.root, storage.job_id, epoch=1, num_buckets=2
        )
        task = StateTask(
            root=storage.root,
            job_id=storage.job_id,
            epoch=1,
            num_buckets=2,
            store=InMemoryStore(),
            resolver=storage.resolver,
            settings=TaskSettings(),
        )
        try:
            task.restore(timeline.start.manifest)
            states = task.checkpoint(
                lambda ctx: ctx.backend.value_state("n").set("k", checkpoint),
                checkpoint_id=checkpoint,
                self_contained=True,
            ).states
            _, wait = timeline.commit(checkpoint, states)
            wait()
        finally:
            task.close()
            timeline.close()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    yield World(tmp_path / "store")


def test_invalid_spec_gets_a_condition_and_launches_nothing(world: World) -> None:
    world.apply_job(checkpointing={"storage": "/not/a/uri", "buckets": 0})
    status = world.reconcile()
    assert status["phase"] == "Invalid"
    ready = world.condition("Ready")
    assert ready["status"] == "False" and ready["reason"] == "InvalidSpec"
    assert "spec.checkpointing.storage" in ready["message"]
    assert "spec.checkpointing.buckets" in ready["message"]
    assert world.kube.pods == {}
    assert "InvalidSpec" in world.kube.reasons("wc")


def test_unknown_field_is_named(world: World) -> None:
    world.apply_job(upgradeMod="savepoint")
    status = world.reconcile()
    assert status["phase"] == "Invalid"
    assert "spec.upgradeMod: is not a known field" in status["message"]


def test_launch_then_running_reports_checkpoints(world: World) -> None:
    world.apply_job()
    status = world.reconcile()
    assert status["phase"] == "Deploying"
    pod = world.kube.pod_manifest(NS, status["driverPod"])
    assert pod is not None and status["epoch"] == 1
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["GIC_JOB_ID"] == f"{NS}.wc" and env["GIC_EPOCH"] == "1"
    assert world.kube.service(NS, "wc-driver") is not None
    world.kube.set_pod_phase(NS, status["driverPod"], "Running")
    world.driver_reports(checkpoint=7)
    status = world.reconcile()
    assert status["phase"] == "Running"
    assert status["lastCheckpoint"]["id"] == 7
    assert world.condition("Ready")["status"] == "True"
    assert world.condition("CheckpointsHealthy")["status"] == "True"
    assert status["observedGeneration"] == 1
    assert {"DriverLaunched", "Running"} <= set(world.kube.reasons("wc"))


def test_a_job_is_starting_until_its_driver_checkpoints(world: World) -> None:
    world.apply_job()
    status = world.reconcile()
    world.kube.set_pod_phase(NS, status["driverPod"], "Running")
    status = world.reconcile()
    assert status["phase"] == "Starting" and status["runningSince"]
    assert "no checkpoint completed yet" in status["message"]
    ready = world.condition("Ready")
    assert (ready["status"], ready["reason"]) == ("False", "Starting")
    assert world.condition("CheckpointsHealthy")["reason"] == "Starting"
    assert "Running" not in world.kube.reasons("wc")

    # A driver that resumed reports its job's latest checkpoint at start: not its own.
    world.driver_reports(checkpoint=5, batches=0)
    status = world.reconcile()
    assert status["phase"] == "Starting" and status["lastCheckpoint"]["id"] == 5

    world.driver_reports(checkpoint=6)  # its first batch
    status = world.reconcile()
    assert status["phase"] == "Running" and "message" not in status
    assert world.condition("Ready")["status"] == "True"
    assert world.kube.reasons("wc").count("Running") == 1


def test_a_reconcile_without_news_writes_nothing(world: World) -> None:
    world.apply_job()
    world.run_driver()
    before = len(world.kube.calls)
    world.reconcile()
    patches = [c for c in world.kube.calls[before:] if c[0] == "patch_status"]
    assert patches == []


def _crashed(world: World) -> tuple[JobStorage, int]:
    """A running job whose driver was killed, seen once (recovery pending); returns
    its storage and the highest claimed epoch."""
    world.apply_job()
    pod = world.run_driver()
    storage = world.storage()
    world.kube.set_pod_phase(NS, pod, "Failed", exit_code=137, reason="Error")
    status = world.reconcile()
    assert status["phase"] == "Recovering" and "epoch" not in status["pending"]
    return storage, highest_epoch(storage.resolver, storage.root, storage.job_id)


def test_a_recovery_epoch_is_recorded_before_it_is_claimed(world: World) -> None:
    """The job changes between the pass's read and its write (409 on the write that
    records the epoch): nothing is claimed; the next pass records, then claims."""
    storage, before = _crashed(world)
    world.kube.fail_next(
        "patch_status", ConflictError("HTTP 409 Conflict", status=409, reason="Conflict")
    )
    status = world.reconcile()
    assert "epoch" not in status["pending"], "nothing recorded"
    assert highest_epoch(storage.resolver, storage.root, storage.job_id) == before
    status = world.reconcile()
    assert status["lastSweep"]["epoch"] == before + 1 and "pending" not in status
    assert highest_epoch(storage.resolver, storage.root, storage.job_id) == before + 1


def test_a_conflict_after_the_claim_keeps_the_recorded_epoch(world: World) -> None:
    """The epoch is stored before the claim; when the pass's last write then conflicts,
    the next pass finds it and claims no further epoch."""
    storage, before = _crashed(world)
    writes = world.kube.patch_status
    seen: list[dict[str, Any]] = []

    def then_someone_edits(plural: str, namespace: str, name: str, status: Any, **kw: Any) -> Any:
        version = writes(plural, namespace, name, status, **kw)
        if not seen:  # the write-ahead: then a user annotates the job
            seen.append(dict(status))
            body = world.job()
            body["metadata"].setdefault("annotations", {})["note"] = "edited"
            world.kube.put_object("gicjobs", NS, body)
        return version

    world.kube.patch_status = then_someone_edits  # type: ignore[method-assign]
    status = world.reconcile()
    world.kube.patch_status = writes  # type: ignore[method-assign]
    assert seen and seen[0]["pending"]["epoch"] == before + 1
    assert status["pending"]["epoch"] == before + 1, "recorded although the pass conflicted"
    assert "lastSweep" not in status, "the pass's last write was dropped"
    assert highest_epoch(storage.resolver, storage.root, storage.job_id) == before + 1
    status = world.reconcile()
    assert status["lastSweep"]["epoch"] == before + 1 and "pending" not in status
    assert status["epoch"] == before + 2 and status["restarts"] == 1  # as a clean recovery
    assert highest_epoch(storage.resolver, storage.root, storage.job_id) == before + 1


def test_crash_recovery_fences_sweeps_and_relaunches(world: World) -> None:
    world.apply_job()
    pod = world.run_driver()
    storage = world.storage()
    orphan = Path(str(storage.root).removeprefix("file://")) / "jobs" / f"{NS}.wc" / "changelog"
    orphan.mkdir(parents=True, exist_ok=True)
    (orphan / "seg-orphan").write_bytes(b"x" * 100)
    world.kube.set_pod_phase(NS, pod, "Failed", exit_code=137, reason="Error")
    status = world.reconcile()
    assert status["phase"] == "Recovering" and status["pending"]["kind"] == "recover"
    status = world.reconcile()  # first restart is immediate
    assert world.kube.get_pod(NS, pod) is None, "the old driver must be gone"
    assert status["lastSweep"]["files"] == 1 and status["lastSweep"]["bytes"] == 100
    assert not (orphan / "seg-orphan").exists()
    claimed = status["lastSweep"]["epoch"]
    assert status["epoch"] == claimed + 1 and status["restarts"] == 1
    assert status["driverPod"] != pod and "pending" not in status
    assert highest_epoch(storage.resolver, storage.root, storage.job_id) == claimed
    assert {"DriverFailed", "OrphansSwept", "DriverLaunched"} <= set(world.kube.reasons("wc"))


def test_restart_budget_then_failed_and_backoff(world: World) -> None:
    world.apply_job(restartPolicy={"maxRestarts": 2, "backoffSeconds": 10})
    for attempt in range(2):
        pod = world.run_driver() if attempt == 0 else world.status()["driverPod"]
        if attempt:
            world.kube.set_pod_phase(NS, pod, "Running")
            world.reconcile()
        world.kube.set_pod_phase(NS, pod, "Failed", exit_code=1)
        status = world.reconcile()
        if attempt == 1:  # second restart waits 10 s
            assert status["phase"] == "Recovering"
            assert world.reconcile()["driverPod"] == pod
            world.clock.t += 11
        world.reconcile()
    pod = world.status()["driverPod"]
    world.kube.set_pod_phase(NS, pod, "Failed", exit_code=1)
    status = world.reconcile()
    assert status["phase"] == "Failed"
    assert "restart budget (2) is used up" in status["message"]
    assert world.reconcile()["driverPod"] == pod, "a failed job is not relaunched"


def test_annotation_creates_one_savepoint_per_nonce(world: World) -> None:
    world.apply_job()
    world.run_driver()
    world.kube.update_object("gicjobs", NS, "wc", annotations={ANNOTATION_SAVEPOINT: "n1"})
    world.reconcile()
    world.reconcile()
    names = [o["metadata"]["name"] for o in world.kube.list_objects("savepoints", NS)]
    assert names == ["wc-sp-n1"]
    assert world.status()["processedSavepointNonce"] == "n1"


def test_savepoint_waits_for_running_job_then_completes(world: World) -> None:
    world.apply_job()
    world.kube.create_object(
        "savepoints",
        NS,
        {"metadata": {"name": "sp1", "namespace": NS}, "spec": {"job": "wc"}},
    )
    sp = world.kube.get_object("savepoints", NS, "sp1")
    assert sp is not None
    world.savepoints.reconcile(sp)
    sp = world.kube.get_object("savepoints", NS, "sp1")
    assert sp is not None and sp["status"]["state"] == "TriggerPending"
    world.run_driver()
    world.savepoints.reconcile(sp)
    sp = world.kube.get_object("savepoints", NS, "sp1")
    assert sp is not None and sp["status"]["state"] == "InProgress"
    rid = sp["status"]["requestId"]
    world.savepoints.reconcile(sp)  # nothing yet
    path = world.complete(rid)
    world.savepoints.reconcile(sp)
    sp = world.kube.get_object("savepoints", NS, "sp1")
    assert sp is not None
    assert sp["status"]["state"] == "Completed" and sp["status"]["path"] == path
    assert sp["status"]["checkpointId"] == 3 and sp["status"]["sizeBytes"] == 1234
    assert "SavepointCompleted" in world.kube.reasons("sp1")


def test_savepoint_of_a_missing_job_is_abandoned(world: World) -> None:
    world.kube.create_object(
        "savepoints", NS, {"metadata": {"name": "sp1", "namespace": NS}, "spec": {"job": "nope"}}
    )
    sp = world.kube.get_object("savepoints", NS, "sp1")
    assert sp is not None
    world.savepoints.reconcile(sp)
    sp = world.kube.get_object("savepoints", NS, "sp1")
    assert sp is not None and sp["status"]["state"] == "Abandoned"
    assert "does not exist" in sp["status"]["error"]


def test_upgrade_through_savepoint(world: World) -> None:
    world.apply_job()
    old_pod = world.run_driver()
    world.set_arguments(["--v2"])
    status = world.reconcile()
    assert status["phase"] == "Upgrading"
    rid = status["pending"]["requestId"]
    # An operator restarted here finds the same intent and re-requests idempotently.
    world.jobs = JobController(world.kube, open_job_storage, clock=world.clock)
    world.reconcile()
    path = world.complete(rid)
    status = world.reconcile()
    assert status["phase"] == "Upgrading" and status["lastSavepoint"]["path"] == path
    world.kube.set_pod_phase(NS, old_pod, "Succeeded", exit_code=0)
    status = world.reconcile()
    assert status["driverPod"] != old_pod and status["deployedGeneration"] == 2
    pod = world.kube.pod_manifest(NS, status["driverPod"])
    assert pod is not None and pod["spec"]["containers"][0]["command"][-1] == "--v2"
    assert "Upgraded" in world.kube.reasons("wc")


def test_failed_upgrade_savepoint_keeps_the_old_driver(world: World) -> None:
    world.apply_job()
    old_pod = world.run_driver()
    world.set_arguments(["--v2"])
    rid = world.reconcile()["pending"]["requestId"]
    world.complete(rid, error="disk full")
    status = world.reconcile()
    assert "pending" not in status and status["upgradeFailedGeneration"] == 2
    assert status["driverPod"] == old_pod
    assert world.reconcile()["driverPod"] == old_pod, "not retried for the same generation"


def test_last_state_upgrade_replaces_the_driver(world: World) -> None:
    world.apply_job(upgradeMode="last-state")
    old_pod = world.run_driver()
    world.set_arguments(["--v2"])
    world.reconcile()
    status = world.reconcile()
    assert world.kube.get_pod(NS, old_pod) is None
    assert status["driverPod"] != old_pod and status["deployedGeneration"] == 2


def test_suspend_and_resume(world: World) -> None:
    world.apply_job()
    pod = world.run_driver()
    world.set_state("suspended")
    status = world.reconcile()
    assert status["phase"] == "Suspending"
    path = world.complete(status["pending"]["requestId"])
    world.reconcile()
    world.kube.set_pod_phase(NS, pod, "Succeeded", exit_code=0)
    status = world.reconcile()
    assert status["phase"] == "Suspended" and "driverPod" not in status
    assert status["lastSavepoint"]["path"] == path
    assert world.kube.pods == {}
    world.set_state("running")
    status = world.reconcile()
    assert status["phase"] == "Deploying" and status["epoch"] == 2


def test_restore_claim_marks_the_savepoint_and_noclaim_reports_release(world: World) -> None:
    path = world.completed_savepoint("sp-a")
    world.apply_job("claimer", restore={"savepoint": "sp-a", "mode": "Claim"})
    status = world.reconcile("claimer")
    assert status["restoredFrom"] == {
        "path": path,
        "mode": "Claim",
        "released": False,
        "savepoint": "sp-a",
    }
    sp = world.kube.get_object("savepoints", NS, "sp-a")
    assert sp is not None and sp["status"]["claimedBy"] == f"{NS}/claimer"
    world.apply_job("copier", restore={"savepoint": "sp-a"})
    status = world.reconcile("copier")
    env = {
        e["name"]: e.get("value")
        for e in world.kube.pods[(NS, status["driverPod"])]["spec"]["containers"][0]["env"]
    }
    assert env["GIC_RESTORE_SOURCE"] == path and env["GIC_RESTORE_MODE"] == "no-claim"
    world.kube.set_pod_phase(NS, status["driverPod"], "Running")
    world.reconcile("copier")
    assert world.condition("RestoreSourceReleased", "copier")["status"] == "False"
    world.write_checkpoint("copier")  # references nothing of the source
    world.reconcile("copier")  # not reported yet: the manifests are not looked at again
    assert world.condition("RestoreSourceReleased", "copier")["status"] == "False"
    world.driver_reports("copier", checkpoint=1)
    world.reconcile("copier")
    assert world.condition("RestoreSourceReleased", "copier")["status"] == "True"
    assert "RestoreSourceReleased" in world.kube.reasons("copier")


def test_restore_from_missing_savepoint_waits_with_a_message(world: World) -> None:
    world.apply_job(restore={"savepoint": "ghost"})
    status = world.reconcile()
    assert world.kube.pods == {}
    assert "Savepoint 'ghost'" in status["message"]
    assert world.condition("Ready")["reason"] in ("RestoreSourceNotReady", "Pending")


def test_disposal_deletes_files_unless_claimed(world: World) -> None:
    world.apply_job()
    target = world.completed_savepoint("sp-x")
    local = Path(target.removeprefix("file://"))
    (local / "a").write_bytes(b"1")
    sp = world.kube.get_object("savepoints", NS, "sp-x")
    assert sp is not None
    sp["status"]["claimedBy"] = f"{NS}/other"
    assert "claimed" in world.savepoints.dispose(sp, 0)
    assert (local / "a").exists()
    del sp["status"]["claimedBy"]
    assert "deleted 2 objects" in world.savepoints.dispose(sp, 0)
    assert not (local / "a").exists()


def test_stuck_disposal_gives_up(world: World) -> None:
    world.apply_job()
    local = Path(world.completed_savepoint("sp-y").removeprefix("file://"))
    sp = world.kube.get_object("savepoints", NS, "sp-y")
    assert sp is not None
    world.kube.fail_next("list_objects", TransientKubeError("API down"), times=2)
    with pytest.raises(TransientKubeError, match="API down"):
        world.savepoints.dispose(sp, 0)
    message = world.savepoints.dispose(sp, MAX_DISPOSAL_ATTEMPTS - 1)
    assert "gave up" in message and (local / "_savepoint.manifest").exists()
    assert "DisposalAbandoned" in world.kube.reasons("sp-y")


def test_disposal_outside_the_derived_directory_is_refused(world: World, tmp_path: Path) -> None:
    world.apply_job()
    outside = tmp_path / "elsewhere" / "savepoints" / "gsp-y"
    outside.mkdir(parents=True)
    (outside / "a").write_bytes(b"1")
    world.completed_savepoint("sp-y")
    world.kube.patch_status("savepoints", NS, "sp-y", {"path": outside.as_uri()})
    sp = world.kube.get_object("savepoints", NS, "sp-y")
    assert sp is not None
    assert "files kept" in world.savepoints.dispose(sp, 0)
    assert (outside / "a").exists()
    assert "DisposalRefused" in world.kube.reasons("sp-y")


def test_a_failed_job_relaunches_when_its_spec_changes(world: World) -> None:
    world.apply_job(restartPolicy={"maxRestarts": 0})
    pod = world.run_driver()
    world.kube.set_pod_phase(NS, pod, "Failed", exit_code=1)
    assert world.reconcile()["phase"] == "Failed"
    assert world.reconcile()["phase"] == "Failed", "no relaunch without a spec change"
    world.set_arguments(["--fixed"])
    status = world.reconcile()
    assert status["phase"] == "Deploying" and status["driverPod"] != pod
    assert status["restarts"] == 0 and world.kube.get_pod(NS, pod) is None


def test_an_unserved_stop_request_is_closed_before_the_relaunch(world: World) -> None:
    world.apply_job()
    pod = world.run_driver()
    world.set_arguments(["--v2"])
    rid = world.reconcile()["pending"]["requestId"]
    world.kube.set_pod_phase(NS, pod, "Succeeded", exit_code=0)  # ended before serving it
    status = world.reconcile()
    assert status["deployedGeneration"] == 2 and status["driverPod"] != pod
    outcome = world.storage().outcome(rid)
    assert outcome is not None and outcome.error is not None and "abandoned" in outcome.error
    storage = world.storage()
    assert ControlChannel(storage.resolver, storage.root, storage.job_id).pending() == []


def test_relative_restore_path_is_invalid(world: World) -> None:
    world.apply_job(restore={"path": "savepoints/x"})
    status = world.reconcile()
    assert status["phase"] == "Invalid" and "spec.restore.path" in status["message"]
    assert world.kube.pods == {}


def test_waiting_for_a_savepoint_says_why_in_ready(world: World) -> None:
    world.kube.create_object(
        "savepoints", NS, {"metadata": {"name": "later", "namespace": NS}, "spec": {"job": "x"}}
    )
    world.apply_job(restore={"savepoint": "later"})
    world.reconcile()
    ready = world.condition("Ready")
    assert ready["reason"] == "RestoreSourceNotReady" and "not Completed" in ready["message"]


MISMATCH = (
    "job team.wc: its checkpoints were written by a different query, so this query does "
    "not resume them (latest checkpoint: file:///x/chk-000000000003.manifest). Differs: "
    "output schema (stored: word: string, count: int64; this query: user: string). "
    "Nothing was claimed and the job's checkpoints are unchanged. ... set "
    "GIC_ALLOW_QUERY_CHANGE=1 (setting allow_query_change) for the run that resumes it"
)


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("QueryMismatch", MISMATCH),
        (
            "InvalidSettings",
            "invalid GIC settings (1 problem): - environment variable GIC_NUM_TASKS = 'x': "
            "input should be a valid integer; accepted: a positive integer",
        ),
        (
            "OutputOwned",
            "output s3://out/wc: it belongs to job team-a.wc (since 2026-11-28 09:00:00 UTC), "
            "and job team-b.wc does not continue that job's state; ... take the output over "
            "on purpose with the setting output_takeover=team-a.wc",
        ),
    ],
)
def test_a_refusal_a_restart_cannot_fix_shows_and_waits_for_a_spec_change(
    world: World, reason: str, message: str
) -> None:
    world.apply_job(restartPolicy={"maxRestarts": 5})
    world.run_driver()
    storage = world.storage()
    epochs = highest_epoch(storage.resolver, storage.root, storage.job_id)
    pod = world.driver_refuses(reason, message)
    status = world.reconcile()
    assert status["phase"] == "Failed", status
    assert message in status["message"] and f"reported {reason}" in status["message"]
    assert "not restarted" in status["message"] and "change the spec" in status["message"]
    ready = world.condition("Ready")
    assert (ready["status"], ready["reason"]) == ("False", reason)
    assert world.condition("Reconciled")["status"] == "True", "no error of the reconcile"
    assert world.warnings(reason) == [
        f"not restarted until the spec changes; the driver failed: {message}"
    ]
    assert "DriverFailed" not in world.kube.reasons("wc")

    # No restart loop: the job stays as it is, whatever the backoff or the time.
    for _ in range(3):
        world.clock.t += 3600
        status = world.reconcile()
    assert status["phase"] == "Failed" and status["driverPod"] == pod
    assert status.get("restarts", 0) == 0 and "pending" not in status
    assert [p for p in world.kube.pods if p[1] != pod] == []
    assert highest_epoch(storage.resolver, storage.root, storage.job_id) == epochs
    assert world.condition("Ready")["reason"] == reason, "the reason stays while it holds"
    assert len(world.warnings(reason)) == 1

    # A spec change (the fix) relaunches, under a new epoch.
    body = world.job()
    body["spec"]["application"]["env"] = [{"name": "GIC_ALLOW_QUERY_CHANGE", "value": "1"}]
    world.kube.put_object("gicjobs", NS, body)
    status = world.reconcile()
    assert status["phase"] == "Deploying" and status["driverPod"] != pod
    assert status["epoch"] > 1 and world.kube.get_pod(NS, pod) is None
    assert reason not in status["message"]
    assert world.condition("Ready")["reason"] == "Deploying"
    world.kube.set_pod_phase(NS, status["driverPod"], "Running")
    assert world.reconcile()["phase"] == "Starting", "until the new driver's first checkpoint"
    world.driver_reports()
    assert world.reconcile()["phase"] == "Running"


def test_a_reported_failure_a_restart_may_fix_is_restarted_with_its_reason(
    world: World,
) -> None:
    world.apply_job(restartPolicy={"maxRestarts": 3, "backoffSeconds": 10})
    world.run_driver()
    message = "S3 request timed out after 30 s (s3://b/gic/jobs/team.wc/epochs/)"
    world.driver_refuses("StorageUnavailable", message)
    status = world.reconcile()
    assert status["phase"] == "Recovering" and status["pending"]["kind"] == "recover"
    assert f"the driver reported StorageUnavailable: {message}" in status["message"]
    assert status["pending"]["reason"].endswith("(StorageUnavailable)")
    assert world.condition("Ready")["reason"] == "StorageUnavailable"
    assert world.warnings("StorageUnavailable") == [f"the driver failed: {message}"]
    [restart] = world.warnings("DriverFailed")
    assert "(StorageUnavailable); restart 1 of 3 in 0 s" in restart
    status = world.reconcile()  # the first restart is immediate
    assert status["phase"] == "Deploying" and status["restarts"] == 1
    assert world.condition("Ready")["reason"] == "Deploying"
    world.kube.set_pod_phase(NS, status["driverPod"], "Running")
    assert world.reconcile()["phase"] == "Starting"
    world.driver_reports()
    assert world.reconcile()["phase"] == "Running"


@pytest.mark.parametrize("written_by", ["older", "newer"])
def test_a_failure_of_another_epoch_is_not_this_drivers(world: World, written_by: str) -> None:
    world.apply_job()
    first = world.run_driver()
    world.kube.set_pod_phase(NS, first, "Failed", exit_code=137)
    world.reconcile()
    status = world.reconcile()  # recovery: a fence epoch, then the relaunch above it
    current = status["epoch"]
    assert current > 1
    world.kube.set_pod_phase(NS, status["driverPod"], "Running")
    world.reconcile()
    # The record holds a query mismatch of another launch (the first driver, late; or a
    # run by hand with a higher epoch); this driver dies without a word (OOM).
    epoch = 1 if written_by == "older" else current + 5
    world.driver_refuses("QueryMismatch", MISMATCH, epoch=epoch, exit_code=137)
    status = world.reconcile()
    assert status["phase"] == "Recovering", "an ordinary crash: restarted"
    assert "QueryMismatch" not in status["message"] and MISMATCH not in status["message"]
    assert world.warnings("QueryMismatch") == []
    assert world.condition("Ready")["reason"] == "Recovering"
    storage = world.storage()
    record = read_status(storage.resolver, storage.root, storage.job_id)
    assert record is not None and record.epoch == epoch
