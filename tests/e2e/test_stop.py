"""Kubernetes stops pods with SIGTERM: the driver stops cleanly within the pod's grace
period and records the stop (docs/operations.md §14.5.7).

Deleting a driver pod: the pod's process gets SIGTERM from the kubelet, the driver
records ``stopped`` in the job's status record, and the operator recovers the job as
after any lost driver (a new epoch, the output still exact). Deleting a GICJob: the
garbage collector deletes its driver pod the same way, and the status record shows the
stop, not a driver that looks alive (``gic jobs``, ``gic gc``).
"""

from __future__ import annotations

import time
from typing import Any

from gic_runtime.cli.common import driver_looks_alive
from gic_runtime.status import JobState, JobStatus, read_status

from .cluster import Cluster
from .helpers import assert_exact_output, checkpoint_id, wait_checkpoints, wait_running

#: What the driver records when it stopped itself (the entry process records another
#: reason when it had to kill the driver after its bound).
STOPPED_BY_SIGTERM = "stopped by SIGTERM"


def driver(cluster: Cluster, job: str) -> tuple[str, str, int]:
    """The running driver pod of ``job``: its name, the job id in storage, its epoch."""
    status = wait_running(cluster, job)
    pod = cluster.get("pod", status["driverPod"]) or {}
    job_id = pod["metadata"]["annotations"]["gic.io/job-id"]
    return status["driverPod"], job_id, int(status["epoch"])


def runtime_status(cluster: Cluster, job_id: str) -> JobStatus:
    status = read_status(cluster.storage, cluster.defaults.storage, job_id)
    assert status is not None
    return status


def assert_stopped_by_sigterm(status: JobStatus, epoch: int, context: Any) -> None:
    assert status.epoch == epoch, context
    assert status.state is JobState.STOPPED, context
    assert status.extra.get("stop_reason") == STOPPED_BY_SIGTERM, context
    assert not driver_looks_alive(status, time.time())  # gic gc accepts the job


def test_deleting_a_driver_pod_stops_it_cleanly_and_the_job_recovers(cluster: Cluster) -> None:
    job = "term-pod"
    cluster.apply(cluster.job_manifest(job))
    pod, job_id, epoch = driver(cluster, job)
    wait_checkpoints(cluster, job, checkpoint_id(cluster, job))
    grace = (cluster.get("pod", pod) or {})["spec"]["terminationGracePeriodSeconds"]
    assert grace == 40  # stop_timeout_s (20 s) + 20 s

    # The operator is held back so the stopped driver's record can be read before the
    # next launch replaces it; it then recovers the job as it would have at once.
    cluster.stop_operator()
    try:
        started = time.monotonic()
        cluster.kubectl("delete", "pod", pod, "--wait=false")
        cluster.wait_until(lambda: cluster.get("pod", pod) is None, grace + 30, "the pod to go")
        took = time.monotonic() - started
        print(f"delete driver pod -> pod gone: {took:.1f} s (grace {grace} s)")
        assert_stopped_by_sigterm(runtime_status(cluster, job_id), epoch, cluster.pod_log(pod))
    finally:
        cluster.start_operator()

    def recovered() -> bool:
        status = cluster.status("gicjob", job)
        return status.get("phase") == "Running" and int(status.get("epoch") or 0) > epoch

    cluster.wait_until(recovered, 180, "the job to run a new driver")
    wait_checkpoints(cluster, job, checkpoint_id(cluster, job) + 2)
    assert runtime_status(cluster, job_id).epoch > epoch
    assert_exact_output(cluster, job)
    cluster.delete_job(job, timeout=120)


def test_deleting_a_gicjob_records_the_stop(cluster: Cluster) -> None:
    job = "term-job"
    cluster.apply(cluster.job_manifest(job))
    pod, job_id, epoch = driver(cluster, job)
    wait_checkpoints(cluster, job, checkpoint_id(cluster, job))

    started = time.monotonic()
    cluster.delete_job(job, timeout=120)
    print(f"delete GICJob -> job and driver pod gone: {time.monotonic() - started:.1f} s")

    assert_stopped_by_sigterm(runtime_status(cluster, job_id), epoch, cluster.pod_log(pod))
    assert_exact_output(cluster, job)
