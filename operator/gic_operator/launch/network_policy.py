"""The NetworkPolicy of one job: its pods reach each other's Spark ports, no one else's.

The chart's NetworkPolicy in each Spark namespace selects every pod of every GIC job (label
``gic.io/job``) and admits only what the administrator allows: the Spark UI from
``networkPolicy.sparkUIFrom``, the drivers' metrics from ``networkPolicy.driverMetricsFrom``.
The operator adds, for each GICJob, :func:`job_network_policy` (owned by the GICJob, so
deleted with it): the pods of that job -- driver and executors, label ``gic.io/job`` with
the job's own value (:func:`gic_operator.kube.naming.label_value`, distinct for distinct
GICJob names) -- accept connections on the driver's RPC port and the block manager port
(:data:`~gic_operator.launch.launch_plan.DRIVER_PORT`,
:data:`~gic_operator.launch.launch_plan.BLOCK_MANAGER_PORT`; executors' block managers use
the same port) from pods of that same job in the namespace only. NetworkPolicies add up,
so a job's pods take RPC and block transfers from their own job and nothing else, whatever
other jobs run in the namespace.

What it does not cover: a pod anyone creates in the namespace with the job's labels is
admitted (a GICJob's ``podTemplate`` may not set ``gic.io/`` labels, but whoever may
create pods directly can); Spark's RPC authentication with the job's own secret is the
second line. Enforcement needs a network plugin that implements NetworkPolicy.

Pure functions; thread-safe.
"""

from __future__ import annotations

from typing import Any

from gic_operator.kube.naming import LABEL_JOB, MANAGED_BY, label_value, object_name
from gic_operator.launch.launch_plan import BLOCK_MANAGER_PORT, DRIVER_PORT, owner_reference

#: Ports a job's pods accept from the job's own pods: the driver's RPC, block transfers.
PEER_PORTS: tuple[int, ...] = (DRIVER_PORT, BLOCK_MANAGER_PORT)


def network_policy_name(name: str) -> str:
    """The NetworkPolicy of GICJob ``name``."""
    return object_name(name, "-spark-peers")


def job_network_policy(namespace: str, name: str, uid: str) -> dict[str, Any]:
    """The NetworkPolicy (owned by GICJob ``name`` with uid ``uid``) that admits the
    job's own pods, and only them, to its pods' Spark RPC and block manager ports."""
    job = {LABEL_JOB: label_value(name)}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": network_policy_name(name),
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/name": "gic-job",
                "app.kubernetes.io/instance": label_value(name),
                "app.kubernetes.io/managed-by": MANAGED_BY,
                **job,
            },
            "ownerReferences": [owner_reference(name, uid)],
        },
        "spec": {
            "podSelector": {"matchLabels": dict(job)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"podSelector": {"matchLabels": dict(job)}}],
                    "ports": [{"port": port, "protocol": "TCP"} for port in PEER_PORTS],
                }
            ],
        },
    }
