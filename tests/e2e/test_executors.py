"""A GICJob on Kubernetes: Spark's Kubernetes backend creates the executor pods through
the API server and the process kubelet runs them.

The job uses the default master (``k8s://https://kubernetes.default.svc``). Its driver
pod mounts the executor pod template and the Spark authentication Secret, reads the
service-account token where in-cluster clients look, reaches the API server through the
``kubernetes`` Service and creates an executor pod from the operator's template as the
``gic-spark`` account; the kubelet runs it as the executor JVM (the Spark image's
entrypoint for ``executor``), which connects back to the driver through the driver's
headless Service name and authenticates with the job's secret. The output stays exact,
and deleting the GICJob takes the executors with the driver (they are the driver pod's).

Control-plane mode only, as root (mount namespaces, port 443 for the Service).
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest

from .cluster import Cluster
from .controlplane_backend import ControlPlaneCluster
from .helpers import assert_exact_output, assert_operator_never_refused, wait_checkpoints

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("GIC_E2E_KUBECONFIG"))
    or os.geteuid() != 0
    or shutil.which("unshare") is None,
    reason="needs the test control plane, root and unshare(1)",
)

#: The ``cluster`` fixture gives this module a namespace where executor pods run.
KUBERNETES_EXECUTORS = True
JOB = "on-k8s"


def executor_pods(cluster: Cluster) -> list[dict[str, Any]]:
    return cluster.list_objects("pods", f"gic.io/job={JOB},gic.io/role=executor")


def executor_errors(cluster: Cluster) -> str:
    """The error lines of the first executor pod that failed ("" while none did)."""
    for pod in executor_pods(cluster):
        if pod["status"].get("phase") == "Failed":
            log = cluster.pod_log(pod["metadata"]["name"])
            errors = [line for line in log.splitlines() if "Exception" in line or "ERROR" in line]
            return f"executor pod {pod['metadata']['name']} failed:\n" + "\n".join(errors[-8:])
    return ""


def wait_or_executor_failure(cluster: Cluster, what: str, done: Any, timeout: float) -> Any:
    """Wait for ``done()``; fail at once with the executor's errors when one fails."""

    def check() -> Any:
        failed = executor_errors(cluster)
        if failed:
            raise AssertionError(failed)
        return done()

    return cluster.wait_until(check, timeout, what)


def test_executors_are_pods_the_kubelet_runs(cluster: Cluster) -> None:
    assert isinstance(cluster, ControlPlaneCluster)
    manifest = cluster.job_manifest(
        JOB, extra_spec={"application": {"executor": {"instances": 1, "memory": "512m"}}}
    )
    del manifest["spec"]["application"]["sparkConf"]["spark.master"]  # the default: k8s://
    cluster.apply(manifest)
    cluster.wait(f"gicjob/{JOB}", "jsonpath={.status.phase}=Running", 240)
    status = cluster.status("gicjob", JOB)
    driver = cluster.get("pod", status["driverPod"]) or {}
    assert "--master k8s://https://kubernetes.default.svc" in " ".join(
        driver["spec"]["containers"][0]["command"]
    )

    def running_executor() -> dict[str, Any] | None:
        pods = [p for p in executor_pods(cluster) if p["status"].get("phase") == "Running"]
        return pods[0] if pods else None

    executor = wait_or_executor_failure(cluster, "an executor pod Running", running_executor, 240)
    [owner] = executor["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Pod", status["driverPod"])
    assert executor["spec"]["containers"][0]["args"] == ["executor"]
    assert executor["spec"]["automountServiceAccountToken"] is False
    assert executor["spec"]["securityContext"]["runAsNonRoot"] is True
    # The RPC key reaches the executor from the job's Secret, never in clear in its spec.
    env = {e["name"]: e for e in executor["spec"]["containers"][0]["env"]}
    assert "value" not in env["_SPARK_AUTH_SECRET"]
    assert env["_SPARK_AUTH_SECRET"]["valueFrom"]["secretKeyRef"]["key"] == "executor-key"

    def checkpoint() -> int | None:
        value = int((cluster.status("gicjob", JOB).get("lastCheckpoint") or {}).get("id", -1))
        return value if value >= 0 else None

    first = wait_or_executor_failure(cluster, "the job's first checkpoint", checkpoint, 240)
    wait_checkpoints(cluster, JOB, first + 2, 180)
    log = cluster.pod_log(executor["metadata"]["name"])
    assert "Running task" in log, log[-2000:]  # the batches' tasks ran in the executor pod
    assert_exact_output(cluster, JOB)

    cluster.kubectl("delete", "gicjob", JOB, "--wait=false")
    cluster.wait_until(
        lambda: (
            cluster.get("gicjob", JOB) is None
            and not executor_pods(cluster)
            and not cluster.driver_pods(JOB)
        ),
        180,
        "the job, its driver and its executors to be gone",
    )
    assert_operator_never_refused(cluster)
