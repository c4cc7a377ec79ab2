"""Savepoints outlive their job, and new jobs start from them (NoClaim and Claim).

A source job runs, takes a savepoint through the annotation and is deleted: the garbage
collector removes its driver pod and service (they name the GICJob as their owner), the
Savepoint (which has no owner) and its files stay. Two new
jobs then start from that Savepoint: NoClaim (the source is released after the first
checkpoint and never deleted) and Claim (the Savepoint records which job owns it). Both
continue the source's counts exactly from the batch after the savepoint's checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from .checks import exists, list_uris
from .cluster import Cluster
from .helpers import (
    assert_exact_output,
    assert_operator_never_refused,
    wait_checkpoints,
    wait_running,
)
from .timings import measure_savepoint

SOURCE = "source"


@dataclass(frozen=True)
class SourceSavepoint:
    """The Completed Savepoint of the source job and the files it had then."""

    name: str
    path: str
    checkpoint_id: int
    files: tuple[str, ...]


@pytest.fixture(scope="module")
def source_savepoint(cluster: Cluster) -> SourceSavepoint:
    cluster.apply(cluster.job_manifest(SOURCE))
    wait_running(cluster, SOURCE)
    wait_checkpoints(cluster, SOURCE, 1)
    measured = measure_savepoint(cluster, SOURCE, "base")
    status = measured.status
    files = tuple(list_uris(cluster.storage, status["path"]))
    assert files
    return SourceSavepoint(measured.name, status["path"], int(status["checkpointId"]), files)


def test_deleting_a_job_keeps_its_savepoints(
    cluster: Cluster, source_savepoint: SourceSavepoint
) -> None:
    assert cluster.driver_pods(SOURCE)
    assert cluster.get("service", f"{SOURCE}-driver") is not None
    cluster.kubectl("delete", "gicjob", SOURCE, "--wait=false")
    cluster.wait_until(
        lambda: (
            cluster.get("gicjob", SOURCE) is None
            and not cluster.driver_pods(SOURCE)
            and cluster.get("service", f"{SOURCE}-driver") is None
        ),
        90,
        "the job, its driver pod and its service to be gone",
    )
    savepoint = cluster.get("savepoint", source_savepoint.name)
    assert savepoint is not None
    assert savepoint["status"]["state"] == "Completed"
    assert savepoint["status"]["path"] == source_savepoint.path
    assert all(exists(cluster.storage, uri) for uri in source_savepoint.files)


def test_restore_no_claim_releases_the_source(
    cluster: Cluster, source_savepoint: SourceSavepoint
) -> None:
    job = "noclaim"
    restore = {"savepoint": source_savepoint.name, "mode": "NoClaim"}
    cluster.apply(cluster.job_manifest(job, restore=restore))
    status = wait_running(cluster, job)
    assert status["restoredFrom"]["path"] == source_savepoint.path
    assert status["restoredFrom"]["mode"] == "NoClaim"
    assert status["restoredFrom"]["savepoint"] == source_savepoint.name
    cluster.wait(f"gicjob/{job}", "condition=RestoreSourceReleased", 120)
    assert cluster.status("gicjob", job)["restoredFrom"]["released"] is True
    assert "RestoreSourceReleased" in cluster.event_reasons(job)
    assert all(exists(cluster.storage, uri) for uri in source_savepoint.files)
    assert "claimedBy" not in cluster.status("savepoint", source_savepoint.name)
    assert_exact_output(cluster, job, first_batch=source_savepoint.checkpoint_id + 1)
    cluster.delete_job(job)


def test_restore_claim_records_the_owner(
    cluster: Cluster, source_savepoint: SourceSavepoint
) -> None:
    job = "claim"
    restore = {"savepoint": source_savepoint.name, "mode": "Claim"}
    cluster.apply(cluster.job_manifest(job, restore=restore))
    owner = f"{cluster.namespace}/{job}"
    cluster.wait(
        f"savepoint/{source_savepoint.name}", f"jsonpath={{.status.claimedBy}}={owner}", 60
    )
    status = wait_running(cluster, job)
    assert status["restoredFrom"]["mode"] == "Claim"
    released = next(c for c in status["conditions"] if c["type"] == "RestoreSourceReleased")
    assert (released["status"], released["reason"]) == ("False", "Claimed")
    wait_checkpoints(cluster, job, status["lastCheckpoint"]["id"])
    assert_exact_output(cluster, job, first_batch=source_savepoint.checkpoint_id + 1)
    cluster.delete_job(job)
    assert cluster.status("savepoint", source_savepoint.name)["claimedBy"] == owner


def test_the_operator_was_never_refused(cluster: Cluster) -> None:
    """Deleting jobs, restoring, claiming and releasing ran with the chart's RBAC and
    nothing was refused."""
    assert_operator_never_refused(cluster)
