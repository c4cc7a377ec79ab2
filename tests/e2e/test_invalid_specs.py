"""Invalid GICJobs: what the API server refuses, and what the operator refuses.

A field the CRD's structural schema does not know never reaches the operator: ``kubectl
apply`` asks for strict server-side field validation (its default), so the API server
refuses the whole object and nothing is created. Specs the schema accepts but the
operator cannot run (a storage URI it does not support, two restore sources) are
admitted; the operator then sets phase ``Invalid`` and ``Ready=False`` with a message
naming the field, and launches no pod.
"""

from __future__ import annotations

from typing import Any

from .cluster import Cluster

CASES: dict[str, tuple[dict[str, Any], str]] = {
    "bad-storage": (
        {"checkpointing": {"storage": "gs://bucket/gic"}},
        "spec.checkpointing.storage: storage 'gs://bucket/gic' is not a storage URI",
    ),
    "two-restore-sources": (
        {"restore": {"savepoint": "some-savepoint", "path": "s3://bucket/savepoints/x"}},
        "spec.restore: restore needs exactly one of savepoint",
    ),
}


def test_unknown_fields_are_refused_by_the_api_server(cluster: Cluster) -> None:
    manifest = cluster.job_manifest("unknown-field", extra_spec={"checkpointing": {"bucketz": 16}})
    refused = cluster.run_kubectl("apply", "-f", str(cluster.manifest_file(manifest)))
    assert refused.returncode == 1
    assert "strict decoding error" in refused.stderr
    assert 'unknown field "spec.checkpointing.bucketz"' in refused.stderr
    assert cluster.get("gicjob", "unknown-field") is None
    assert cluster.driver_pods("unknown-field") == []


def test_invalid_specs_launch_nothing(cluster: Cluster) -> None:
    cluster.apply(
        *(cluster.job_manifest(name, extra_spec=extra) for name, (extra, _) in CASES.items())
    )
    for name, (_, message) in CASES.items():
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
    rows = {row[0]: row[1] for row in table if row[0] in CASES}
    assert rows == dict.fromkeys(CASES, "Invalid")
    for name in CASES:
        assert cluster.driver_pods(name) == []
        assert cluster.get("service", f"{name}-driver") is None
