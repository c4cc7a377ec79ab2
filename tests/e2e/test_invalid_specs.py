"""Invalid GICJobs: phase Invalid, Ready False with a message naming the field, no pod.

The manifests are applied with ``--validate=false``, so nothing on the client side stops
them: the operator's validation is what the user sees. (On a real API server an unknown
field is pruned by the CRD's structural schema before the operator sees it, so that case
runs against the emulator only.)
"""

from __future__ import annotations

from typing import Any

from .cluster import Cluster

CASES: dict[str, tuple[dict[str, Any], str]] = {
    "bad-storage": (
        {"checkpointing": {"storage": "gs://bucket/gic"}},
        "spec.checkpointing.storage: storage 'gs://bucket/gic' is not a storage URI",
    ),
    "unknown-field": (
        {"checkpointing": {"bucketz": 16}},
        "spec.checkpointing.bucketz: is not a known field",
    ),
    "two-restore-sources": (
        {"restore": {"savepoint": "some-savepoint", "path": "s3://bucket/savepoints/x"}},
        "spec.restore: restore needs exactly one of savepoint",
    ),
}


def test_invalid_specs_launch_nothing(cluster: Cluster) -> None:
    cases = dict(CASES)
    if cluster.mode == "real":
        del cases["unknown-field"]
    cluster.apply(
        *(cluster.job_manifest(name, extra_spec=extra) for name, (extra, _) in cases.items())
    )
    for name, (_, message) in cases.items():
        cluster.wait(f"gicjob/{name}", "jsonpath={.status.phase}=Invalid", 60)
        status = cluster.status("gicjob", name)
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "False"
        assert ready["reason"] == "InvalidSpec"
        assert message in ready["message"], ready["message"]
        assert message in status["message"]
        assert "InvalidSpec" in cluster.event_reasons(name)
        assert "driverPod" not in status and "epoch" not in status
    table = [line.split() for line in cluster.kubectl("get", "gj").splitlines()[1:]]
    rows = {row[0]: row[1] for row in table if row[0] in cases}
    assert rows == dict.fromkeys(cases, "Invalid")
    for name in cases:
        assert cluster.driver_pods(name) == []
        assert cluster.get("service", f"{name}-driver") is None
