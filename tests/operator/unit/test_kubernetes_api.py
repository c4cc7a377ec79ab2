"""KubernetesApi (the real seam, on the ``kubernetes`` client) against the in-process
API emulator, and its translation of client errors."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gic_operator.errors import ConflictError, KubeError, TransientKubeError
from gic_operator.kube import KubernetesApi, pod_info, translate_error
from gic_operator.launcher import driver_service
from gic_operator.testing.kube_client import KubeClient
from gic_operator.testing.kube_emulator import KubeEmulator

CRDS = Path(__file__).resolve().parents[3] / "crds"
NS = "prod"


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KubeEmulator, Path]]:
    with KubeEmulator() as kube:
        config = kube.write_kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig")
        client = KubeClient(config)
        for name in ("gicjobs.gic.io.yaml", "savepoints.gic.io.yaml"):
            crd = yaml.safe_load((CRDS / name).read_text())
            client.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        client.request("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
        yield kube, config
    assert kube.server_errors == []


@pytest.fixture
def api(emulator: tuple[KubeEmulator, Path]) -> Iterator[KubernetesApi]:
    from kubernetes.config import new_client_from_config

    client = new_client_from_config(config_file=str(emulator[1]))  # type: ignore[no-untyped-call]
    try:
        yield KubernetesApi(client, request_timeout_s=10)
    finally:
        client.close()


@pytest.fixture
def raw(emulator: tuple[KubeEmulator, Path]) -> KubeClient:
    return KubeClient(emulator[1])


def pod(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "driver", "image": "busybox"}]},
    }


def job(name: str, **labels: str) -> dict[str, Any]:
    spec = {
        "application": {"image": "gic:1", "mainFile": "/opt/job.py"},
        "checkpointing": {"storage": "s3://bucket/gic"},
    }
    return {"metadata": {"name": name, "labels": labels}, "spec": spec}


def test_pods(api: KubernetesApi) -> None:
    assert api.get_pod(NS, "p1") is None
    api.create_pod(NS, pod("p1", job="a", role="driver"))
    api.create_pod(NS, pod("p1", job="a", role="driver"))  # exists: no error
    api.create_pod(NS, pod("p2", job="b", role="driver"))
    info = api.get_pod(NS, "p1")
    assert info is not None
    assert (info.name, info.phase, info.deleting) == ("p1", "Pending", False)
    assert info.labels == {"job": "a", "role": "driver"} and info.created
    assert [p.name for p in api.list_pods(NS, {"job": "a", "role": "driver"})] == ["p1"]
    api.delete_pod(NS, "p2", grace_seconds=0)
    assert api.get_pod(NS, "p2") is None
    api.delete_pod(NS, "p2", grace_seconds=0)  # gone: no error
    api.delete_pod(NS, "p1", grace_seconds=30)  # never scheduled: gone at once
    assert api.get_pod(NS, "p1") is None


def test_invalid_pod_manifest_is_a_clear_error(api: KubernetesApi) -> None:
    bad = pod("p3")
    bad["spec"]["restartpolicy"] = "Never"
    with pytest.raises(KubeError, match="creating pod prod/p3 failed: the manifest is not valid"):
        api.create_pod(NS, bad)


def test_service(api: KubernetesApi, raw: KubeClient) -> None:
    manifest = driver_service(NS, "wc", "uid-1")
    api.apply_service(NS, manifest)
    api.apply_service(NS, manifest)
    svc = raw.get(f"/api/v1/namespaces/{NS}/services/wc-driver")
    assert svc["spec"]["selector"] == {"gic.io/job": "wc", "gic.io/role": "driver"}
    assert svc["metadata"]["ownerReferences"][0]["kind"] == "GICJob"


def test_custom_objects(api: KubernetesApi) -> None:
    assert api.get_object("gicjobs", NS, "wc") is None
    assert api.create_object("gicjobs", NS, job("wc", team="a"))
    assert not api.create_object("gicjobs", NS, job("wc", team="a"))
    api.create_object("gicjobs", NS, job("other", team="b"))
    obj = api.get_object("gicjobs", NS, "wc")
    assert obj is not None
    assert (obj["kind"], obj["metadata"]["generation"]) == ("GICJob", 1)
    listed = api.list_objects("gicjobs", NS, {"team": "a"})
    assert [o["metadata"]["name"] for o in listed] == ["wc"]
    assert listed[0]["kind"] == "GICJob"
    assert {o["metadata"]["name"] for o in api.list_objects("gicjobs", NS)} == {"wc", "other"}

    api.patch_status("gicjobs", NS, "wc", {"phase": "Running", "epoch": 1, "message": "x"})
    api.patch_status("gicjobs", NS, "wc", {"message": None, "epoch": 2})
    obj = api.get_object("gicjobs", NS, "wc")
    assert obj is not None
    assert obj["status"]["phase"] == "Running" and obj["status"]["epoch"] == 2
    assert "message" not in obj["status"]
    api.patch_status("gicjobs", NS, "missing", {"phase": "Running"})  # no error

    api.delete_object("gicjobs", NS, "wc")
    api.delete_object("gicjobs", NS, "wc")
    api.delete_object("gicjobs", NS, "other")
    assert api.get_object("gicjobs", NS, "wc") is None


def test_a_status_patch_with_a_stale_resource_version_conflicts(api: KubernetesApi) -> None:
    api.create_object("gicjobs", NS, job("rv", team="a"))
    read = api.get_object("gicjobs", NS, "rv")
    assert read is not None
    version = read["metadata"]["resourceVersion"]
    api.patch_status("gicjobs", NS, "rv", {"phase": "Running"}, resource_version=version)
    with pytest.raises(ConflictError) as caught:
        api.patch_status("gicjobs", NS, "rv", {"phase": "Failed"}, resource_version=version)
    assert caught.value.status == 409 and isinstance(caught.value, TransientKubeError)
    obj = api.get_object("gicjobs", NS, "rv")
    assert obj is not None and obj["status"]["phase"] == "Running"
    api.patch_status("gicjobs", NS, "rv", {"phase": "Failed"})  # no version: no precondition
    api.delete_object("gicjobs", NS, "rv")


def test_events_are_posted_and_aggregated(api: KubernetesApi, raw: KubeClient) -> None:
    api.create_object("gicjobs", NS, job("ev"))
    obj = api.get_object("gicjobs", NS, "ev")
    assert obj is not None
    api.event(obj, "Normal", "Launched", "driver ev-driver-1 created")
    api.event(obj, "Normal", "Launched", "driver ev-driver-1 created")
    api.event(obj, "Warning", "DriverFailed", "x" * 5000)
    events = raw.get(f"/api/v1/namespaces/{NS}/events")["items"]
    mine = [e for e in events if e["involvedObject"]["name"] == "ev"]
    by_reason = {e["reason"]: e for e in mine}
    assert len(mine) == 2
    launched = by_reason["Launched"]
    assert launched["count"] == 2 and launched["type"] == "Normal"
    assert launched["involvedObject"]["kind"] == "GICJob"
    assert launched["involvedObject"]["uid"] == obj["metadata"]["uid"]
    assert launched["source"] == {"component": "gic-operator"}
    assert len(by_reason["DriverFailed"]["message"]) == 1024
    api.delete_object("gicjobs", NS, "ev")


def test_unreachable_api_is_transient_and_events_are_only_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from kubernetes.client import ApiClient, Configuration

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = Configuration(host=f"http://127.0.0.1:{port}")
    config.retries = 0
    with ApiClient(config) as client:
        api = KubernetesApi(client, request_timeout_s=5)
        with pytest.raises(TransientKubeError, match="reading pod ns/p failed: cannot reach"):
            api.get_pod("ns", "p")
        obj = {"apiVersion": "gic.io/v1alpha1", "kind": "GICJob", "metadata": {"name": "x"}}
        api.event(obj, "Normal", "Launched", "message")
    assert "could not post event Launched (Normal) on GICJob None/x" in caplog.text


def status_error(code: int, reason: str, message: str) -> Exception:
    from kubernetes.client.exceptions import ApiException

    body = {"kind": "Status", "status": "Failure", "reason": reason, "message": message}
    return ApiException(status=code, reason="HTTP reason", body=json.dumps(body))


@pytest.mark.parametrize(
    ("code", "reason", "transient"),
    [
        (429, "TooManyRequests", True),
        (500, "InternalError", True),
        (503, "ServiceUnavailable", True),
        (409, "Conflict", True),
        (403, "Forbidden", False),
        (422, "Invalid", False),
    ],
)
def test_error_translation(code: int, reason: str, transient: bool) -> None:
    error = translate_error("creating pod ns/p", status_error(code, reason, "the details"))
    assert isinstance(error, TransientKubeError) is transient
    assert (error.status, error.reason) == (code, reason)
    assert str(error) == f"creating pod ns/p failed: HTTP {code} {reason}: the details"


def test_pod_info_reads_termination_and_failure_reasons() -> None:
    failed = pod_info(
        {
            "metadata": {"name": "d", "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "status": {
                "phase": "Failed",
                "startTime": "2026-01-01T00:00:00Z",
                "containerStatuses": [
                    {"name": "sidecar", "state": {"running": {}}},
                    {
                        "name": "driver",
                        "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                    },
                ],
            },
        }
    )
    assert (failed.exit_code, failed.reason, failed.deleting, failed.finished) == (
        137,
        "OOMKilled",
        True,
        True,
    )
    evicted = pod_info(
        {"metadata": {"name": "d"}, "status": {"phase": "Failed", "reason": "Evicted"}}
    )
    assert (evicted.reason, evicted.exit_code) == ("Evicted", None)
