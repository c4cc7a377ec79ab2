"""One GICJob through its life: running, savepoints, crashes, operator restarts, upgrade.

The module runs one job (``rate``) and the tests act on it in file order, each leaving it
Running for the next: what a user does with ``kubectl`` and what the operator must show
for it (status, printer columns, events, Savepoints) and, after every disruption, that
the job's output is still exact (no value lost or counted twice).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from .checks import list_uris
from .cluster import Cluster
from .helpers import (
    assert_exact_output,
    assert_operator_never_refused,
    checkpoint_id,
    reasons_count,
    wait_checkpoints,
    wait_running,
)
from .timings import measure_recovery, measure_savepoint, savepoint_name

JOB = "rate"


@pytest.fixture(scope="module")
def job(cluster: Cluster) -> Iterator[str]:
    cluster.apply(cluster.job_manifest(JOB))
    wait_running(cluster, JOB)
    yield JOB


def test_job_runs_and_checkpoints(cluster: Cluster, job: str) -> None:
    status = wait_running(cluster, JOB)
    assert status["driverPod"] == f"{job}-driver-{status['epoch']}"
    first = checkpoint_id(cluster, JOB)
    assert first >= 0
    grown = wait_checkpoints(cluster, JOB, first)
    assert grown > first

    table = cluster.kubectl("get", "gj").splitlines()
    assert table[0].split() == ["NAME", "PHASE", "CHECKPOINT", "CHECKPOINT-AGE", "RESTARTS", "AGE"]
    row = table[1].split()
    assert row[:2] == [job, "Running"]
    assert int(row[2]) >= grown
    wide = cluster.kubectl("get", "gj", job, "-o", "wide").splitlines()
    assert "RESTORED-FROM" in wide[0].split()
    assert cluster.event_reasons(job)[:2] == ["DriverLaunched", "Running"]
    assert cluster.get("service", f"{job}-driver") is not None

    # kubectl logs of the driver: GIC's line per batch, Spark at WARN, no progress JSON
    log = cluster.pod_log(status["driverPod"])
    assert re.search(r"^batch \d+: \d+ rows in, checkpoint \d+ committed", log, re.MULTILINE)
    assert "made progress" not in log and '"batchId"' not in log


def test_annotation_savepoint_once_per_nonce(
    cluster: Cluster, job: str, timings: list[tuple[str, float]]
) -> None:
    wait_running(cluster, JOB)
    measured = measure_savepoint(cluster, job, "n1")
    print(f"annotate -> Savepoint Completed: {measured.seconds:.2f} s")
    timings.append(("savepoint: annotate -> Completed", measured.seconds))
    status = measured.status
    assert status["state"] == "Completed"
    assert status["path"].startswith(cluster.defaults.storage + "/savepoints/")
    assert status["checkpointId"] >= 0
    files = list_uris(cluster.storage, status["path"])
    assert files, f"no files under {status['path']}"
    assert (cluster.get("savepoint", measured.name) or {})["spec"]["job"] == job

    # The same nonce again (with another annotation changing, so the job is reconciled).
    cluster.kubectl(
        "annotate", "--overwrite", f"gicjob/{job}", "gic.io/savepoint=n1", "e2e.gic.io/touch=1"
    )
    wait_checkpoints(cluster, JOB, checkpoint_id(cluster, JOB) + 1)
    names = [sp["metadata"]["name"] for sp in cluster.list_objects("savepoints")]
    assert names == [savepoint_name(job, "n1")]
    assert cluster.status("gicjob", job)["processedSavepointNonce"] == "n1"
    triggered = [
        e
        for e in cluster.events(job)
        if e["reason"] == "SavepointTriggered" and "n1" in e["message"]
    ]
    assert len(triggered) == 1


def test_operator_restart_mid_savepoint(cluster: Cluster, job: str) -> None:
    running = wait_running(cluster, JOB)
    # The driver is frozen (where the cluster can) so that the Savepoint stays InProgress
    # until the operator is down; elsewhere the kill races the driver, hence the retries.
    for attempt in range(5):
        nonce = f"restart{attempt}"
        name = savepoint_name(job, nonce)
        with cluster.driver_paused(running["driverPod"]):
            cluster.kubectl("annotate", "--overwrite", f"gicjob/{job}", f"gic.io/savepoint={nonce}")
            cluster.wait(f"savepoint/{name}", "jsonpath={.status.state}=InProgress", 60)
            cluster.stop_operator()
        if cluster.status("savepoint", name)["state"] == "InProgress":
            break
        cluster.start_operator()
    else:
        pytest.fail("the savepoint completed before the operator could be killed, 5 times")
    request_id = cluster.status("savepoint", name)["requestId"]
    cluster.start_operator()
    cluster.wait(f"savepoint/{name}", "jsonpath={.status.state}=Completed", 120)
    status = cluster.status("savepoint", name)
    assert status["requestId"] == request_id
    assert list_uris(cluster.storage, status["path"])
    assert reasons_count(cluster, name, "SavepointCompleted") == 1
    wait_running(cluster, JOB)


def test_driver_crash_recovers_exactly(
    cluster: Cluster, job: str, timings: list[tuple[str, float]]
) -> None:
    before = wait_running(cluster, JOB)
    measured = measure_recovery(cluster, job)
    print(
        f"driver kill -> Running: {measured.running_s:.2f} s, "
        f"-> next checkpoint: {measured.checkpoint_s:.2f} s"
    )
    timings.append(("recovery: driver kill -> Running", measured.running_s))
    timings.append(("recovery: driver kill -> next checkpoint", measured.checkpoint_s))
    after = cluster.status("gicjob", job)
    assert after["epoch"] > before["epoch"]
    assert after["restarts"] == int(before.get("restarts") or 0) + 1
    assert after["driverPod"] == measured.new_pod == f"{job}-driver-{after['epoch']}"
    sweep = after["lastSweep"]
    assert sweep["files"] >= 0 and sweep["epoch"] > before["epoch"]
    reasons = cluster.event_reasons(job)
    failed_at = len(reasons) - 1 - reasons[::-1].index("DriverFailed")
    assert "OrphansSwept" in reasons[failed_at:] and "DriverLaunched" in reasons[failed_at:]
    assert [p["metadata"]["name"] for p in cluster.driver_pods(job)] == [measured.new_pod]

    wait_checkpoints(cluster, JOB, measured.last_checkpoint_before + 3)
    assert_exact_output(cluster, JOB)


def test_operator_restart_mid_recovery(cluster: Cluster, job: str) -> None:
    before = wait_running(cluster, JOB)
    launches = reasons_count(cluster, JOB, "DriverLaunched")
    cluster.stop_operator()
    cluster.kill_driver(before["driverPod"])
    cluster.start_operator()

    def recovered() -> bool:
        status = cluster.status("gicjob", job)
        return status.get("phase") == "Running" and status["driverPod"] != before["driverPod"]

    cluster.wait_until(recovered, 180, "the job to run a new driver")
    wait_checkpoints(cluster, JOB, checkpoint_id(cluster, JOB) + 2)
    after = cluster.status("gicjob", job)
    assert after["epoch"] > before["epoch"]
    assert after["restarts"] == int(before.get("restarts") or 0) + 1
    assert reasons_count(cluster, JOB, "DriverLaunched") == launches + 1
    assert [p["metadata"]["name"] for p in cluster.driver_pods(job)] == [after["driverPod"]]
    assert_exact_output(cluster, JOB)


def test_upgrade_with_savepoint(cluster: Cluster, job: str) -> None:
    before = wait_running(cluster, JOB)
    generation = int((cluster.get("gicjob", job) or {})["metadata"]["generation"])
    cluster.apply(cluster.job_manifest(JOB, rows_per_batch=300, upgrade_mode="savepoint"))
    cluster.wait_until(lambda: "Upgraded" in cluster.event_reasons(job), 240, "the Upgraded event")
    status = wait_running(cluster, JOB)
    new_generation = int((cluster.get("gicjob", job) or {})["metadata"]["generation"])
    assert new_generation == generation + 1
    assert status["deployedGeneration"] == new_generation
    assert status["observedGeneration"] == new_generation
    assert status["driverPod"] != before["driverPod"]
    savepoint = status["lastSavepoint"]["path"]
    assert list_uris(cluster.storage, savepoint)
    reasons = cluster.event_reasons(job)
    assert reasons.index("UpgradeStarted") < reasons.index("Upgraded")
    pod = cluster.get("pod", status["driverPod"]) or {}
    command = pod["spec"]["containers"][0]["command"]
    assert command[command.index("--rows-per-batch") + 1] == "300"

    wait_checkpoints(cluster, JOB, checkpoint_id(cluster, JOB) + 3)
    assert_exact_output(cluster, JOB)


def test_the_operator_was_never_refused(cluster: Cluster, job: str) -> None:
    """Everything above ran with the chart's RBAC and nothing was refused."""
    wait_running(cluster, job)
    assert_operator_never_refused(cluster)
