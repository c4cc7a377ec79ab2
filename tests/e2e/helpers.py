"""Waits and checks the e2e tests share (on top of :class:`~tests.e2e.cluster.Cluster`)."""

from __future__ import annotations

from typing import Any

from .checks import check_output
from .cluster import Cluster


def checkpoint_id(cluster: Cluster, job: str) -> int:
    """The id of the job's last checkpoint in its status (-1: none yet)."""
    return int((cluster.status("gicjob", job).get("lastCheckpoint") or {}).get("id", -1))


def wait_checkpoints(cluster: Cluster, job: str, beyond: int, timeout: float = 120) -> int:
    """Wait until the job's last checkpoint id is above ``beyond``; return it."""

    def beyond_it() -> list[int]:
        current = checkpoint_id(cluster, job)
        return [current] if current > beyond else []

    return cluster.wait_until(beyond_it, timeout, f"a checkpoint of {job} beyond {beyond}")[0]


def wait_running(cluster: Cluster, job: str, timeout: float = 180) -> dict[str, Any]:
    """Wait until the job is Running and has a checkpoint; return its status."""
    cluster.wait(f"gicjob/{job}", "jsonpath={.status.phase}=Running", timeout)
    cluster.wait(f"gicjob/{job}", "jsonpath={.status.lastCheckpoint.id}", timeout)
    return cluster.status("gicjob", job)


def assert_exact_output(cluster: Cluster, job: str, first_batch: int | None = None) -> None:
    """The job's sink output is exact, its batches have no gaps (and start at
    ``first_batch`` when given)."""
    report = check_output(cluster.storage, cluster.output_uri(job))
    assert report.problems == ()
    expected = tuple(range(report.batches[0], report.last_batch + 1))
    assert report.batches == expected, "the committed batches have gaps"
    if first_batch is not None:
        assert report.batches[0] == first_batch


def reasons_count(cluster: Cluster, job: str, reason: str) -> int:
    """How many events about ``job`` have ``reason``."""
    return cluster.event_reasons(job).count(reason)


def assert_operator_never_refused(cluster: Cluster) -> None:
    """The operator's log shows no request the API server refused for lack of a grant
    (403 Forbidden) and no Event it could not post: the RBAC it runs with was enough."""
    log = cluster.operator_log()
    assert log, "the operator logged nothing"
    assert "Forbidden" not in log
    assert "could not post event" not in log
