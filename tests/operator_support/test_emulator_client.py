"""The ``kubernetes`` Python client (37.0.1) against the Kubernetes API emulator."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from gic_operator.testing.kube_client import KubeClient, KubeClientError
from gic_operator.testing.kube_emulator import KubeEmulator

NS = "default"


@pytest.fixture
def core(kubeconfig: Path) -> Iterator[kubernetes.client.CoreV1Api]:
    api_client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
    with api_client:
        yield kubernetes.client.CoreV1Api(api_client)


def _configmap(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "data": data}


def _status(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


def _watch(
    core: kubernetes.client.CoreV1Api, since: str, timeout: int, count: int = 0
) -> list[tuple[str, str]]:
    """Events until the server ends the watch after ``timeout`` s (or ``count`` arrived)."""
    watch = kubernetes.watch.Watch()
    stream = watch.stream(
        core.list_namespaced_config_map, NS, resource_version=since, timeout_seconds=timeout
    )
    events = []
    for event in stream:
        events.append((event["type"], event["raw_object"]["metadata"]["name"]))
        if len(events) == count:
            watch.stop()
    return events


def test_list_then_watch_resumes_without_missing_events(core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_config_map(NS, _configmap("before"))
    listing = core.list_namespaced_config_map(NS)
    assert [item.metadata.name for item in listing.items] == ["before"]
    since = listing.metadata.resource_version

    core.create_namespaced_config_map(NS, _configmap("a"))
    core.patch_namespaced_config_map("a", NS, {"data": {"k": "v"}})
    first = _watch(core, since, timeout=1)  # ends at the server-side timeout
    assert first == [("ADDED", "a"), ("MODIFIED", "a")]
    resume = core.read_namespaced_config_map("a", NS).metadata.resource_version

    # Changes while nobody watches are replayed from the last version seen.
    core.create_namespaced_config_map(NS, _configmap("b"))
    core.delete_namespaced_config_map("a", NS)
    core.patch_namespaced_config_map("b", NS, {"data": {"x": "y"}})
    assert _watch(core, resume, timeout=1) == [
        ("ADDED", "b"),
        ("DELETED", "a"),
        ("MODIFIED", "b"),
    ]
    # A watch without a version starts with the current objects.
    current = _watch(core, "", timeout=10, count=2)
    assert sorted(current) == [("ADDED", "b"), ("ADDED", "before")]


def test_stale_put_conflicts_and_fresh_put_applies(core: kubernetes.client.CoreV1Api) -> None:
    created = core.create_namespaced_config_map(NS, _configmap("cm", a="1"))
    core.patch_namespaced_config_map("cm", NS, {"data": {"a": "2"}})
    created.data = {"a": "3"}
    with pytest.raises(ApiException) as conflict:
        core.replace_namespaced_config_map("cm", NS, created)
    assert conflict.value.status == 409
    assert _status(conflict.value)["reason"] == "Conflict"

    fresh = core.read_namespaced_config_map("cm", NS)
    fresh.data = {"a": "3"}
    replaced = core.replace_namespaced_config_map("cm", NS, fresh)
    assert replaced.data == {"a": "3"}
    assert int(replaced.metadata.resource_version) > int(fresh.metadata.resource_version)
    assert replaced.metadata.uid == created.metadata.uid


def test_json_patch_with_failing_test_is_rejected_with_422(
    core: kubernetes.client.CoreV1Api,
) -> None:
    created = core.create_namespaced_config_map(NS, _configmap("cm", a="1"))
    version = created.metadata.resource_version
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": version},
        {"op": "add", "path": "/metadata/finalizers", "value": ["example.test/hold"]},
    ]
    patched = core.patch_namespaced_config_map("cm", NS, ops)
    assert patched.metadata.finalizers == ["example.test/hold"]

    stale = [{**ops[0]}, {"op": "replace", "path": "/data/a", "value": "2"}]
    with pytest.raises(ApiException) as rejected:
        core.patch_namespaced_config_map("cm", NS, stale)
    assert rejected.value.status == 422
    assert _status(rejected.value)["kind"] == "Status"
    assert core.read_namespaced_config_map("cm", NS).data == {"a": "1"}


def test_label_and_field_selectors(core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_config_map(NS, _configmap("gold", {"tier": "gold", "app": "x"}))
    core.create_namespaced_config_map(NS, _configmap("silver", {"tier": "silver"}))
    core.create_namespaced_config_map(NS, _configmap("bare"))

    def names(**query: str) -> list[str]:
        items = core.list_namespaced_config_map(NS, **query).items
        return sorted(item.metadata.name for item in items)

    assert names(label_selector="tier=gold") == ["gold"]
    assert names(label_selector="tier==silver") == ["silver"]
    assert names(label_selector="tier!=gold") == ["bare", "silver"]
    assert names(label_selector="tier in (gold, silver)") == ["gold", "silver"]
    assert names(label_selector="tier notin (gold)") == ["bare", "silver"]
    assert names(label_selector="tier") == ["gold", "silver"]
    assert names(label_selector="!tier") == ["bare"]
    assert names(label_selector="tier,app=x") == ["gold"]
    assert names(field_selector="metadata.name=silver") == ["silver"]
    assert names(field_selector="metadata.namespace=default,metadata.name!=bare") == [
        "gold",
        "silver",
    ]
    everywhere = core.list_config_map_for_all_namespaces(label_selector="tier")
    assert sorted(i.metadata.name for i in everywhere.items) == ["gold", "silver"]
    with pytest.raises(ApiException) as bad:
        core.list_namespaced_config_map(NS, label_selector="tier in gold")
    assert bad.value.status == 400


def test_create_conflicts_and_server_managed_metadata(core: kubernetes.client.CoreV1Api) -> None:
    first = core.create_namespaced_config_map(NS, {"metadata": {"generateName": "job-"}})
    second = core.create_namespaced_config_map(NS, {"metadata": {"generateName": "job-"}})
    assert first.metadata.name.startswith("job-") and first.metadata.name != second.metadata.name
    assert first.metadata.uid != second.metadata.uid
    assert int(second.metadata.resource_version) > int(first.metadata.resource_version)

    with pytest.raises(ApiException) as exists:
        core.create_namespaced_config_map(NS, {"metadata": {"name": first.metadata.name}})
    status = _status(exists.value)
    assert exists.value.status == 409
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "AlreadyExists", 409)

    with pytest.raises(ApiException) as missing:
        core.read_namespaced_config_map("nope", NS)
    assert missing.value.status == 404 and _status(missing.value)["reason"] == "NotFound"

    with pytest.raises(ApiException) as invalid:
        core.create_namespaced_service(NS, {"metadata": {"name": "1-not-a-dns-label"}})
    assert invalid.value.status == 422 and _status(invalid.value)["reason"] == "Invalid"

    page = core.list_namespaced_config_map(NS, limit=1)
    assert len(page.items) == 1 and page.metadata._continue
    rest = core.list_namespaced_config_map(NS, limit=1, _continue=page.metadata._continue)
    assert rest.items[0].metadata.name != page.items[0].metadata.name


def test_watch_from_a_version_older_than_the_history_is_gone(tmp_path: Path) -> None:
    with KubeEmulator(history_size=4) as kube:
        client = KubeClient(kube.write_kubeconfig(tmp_path / "kubeconfig"))
        path = "/api/v1/namespaces/default/configmaps"
        for index in range(10):
            client.request("POST", path, {"metadata": {"name": f"cm{index}"}})
        stream = client.watch(path, resourceVersion="1")
        events = list(stream)
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    assert events[0]["object"]["code"] == 410
    assert kube.server_errors == []


def test_kmock_reactions_override_the_emulation(kube: KubeEmulator, client: KubeClient) -> None:
    path = "/api/v1/namespaces/default/configmaps"
    client.request("POST", path, {"metadata": {"name": "cm"}})
    outage = threading.Event()
    kube.handler[outage][f"get {path}"] << 503 << {"kind": "Status", "code": 503}
    outage.set()
    with pytest.raises(KubeClientError) as unavailable:
        client.get(path)
    assert unavailable.value.status == 503
    assert client.get(f"{path}/cm")["metadata"]["name"] == "cm"  # other requests unaffected
    outage.clear()
    assert [item["metadata"]["name"] for item in client.get(path)["items"]] == ["cm"]
