"""The in-memory Kubernetes API keeps the contract of the real one."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gic_operator.kube.kube_api import KubeApi
from gic_operator.kube.merge_patch import merge_patch
from gic_operator.operator_errors import ConflictError, TransientKubeError
from gic_operator.testing.fake_kube import TestingKubeApi

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.fixture
def kube() -> TestingKubeApi:
    return TestingKubeApi(now=lambda: NOW)


def pod(name: str, **labels: str) -> dict[str, object]:
    return {"metadata": {"name": name, "labels": labels}, "spec": {"containers": []}}


def job(name: str, **spec: object) -> dict[str, object]:
    return {"metadata": {"name": name, "labels": {"team": "a"}}, "spec": dict(spec)}


def test_is_a_kube_api(kube: TestingKubeApi) -> None:
    api: KubeApi = kube
    assert api.get_pod("ns", "missing") is None


def test_pod_lifecycle(kube: TestingKubeApi) -> None:
    kube.create_pod("ns", pod("d-1", role="driver"))
    info = kube.get_pod("ns", "d-1")
    assert info is not None
    assert (info.phase, info.created, info.started, info.exit_code) == (
        "Pending",
        "2026-01-02T03:04:05Z",
        None,
        None,
    )
    kube.set_pod_phase("ns", "d-1", "Pending", reason="ImagePullBackOff", message="no image")
    info = kube.get_pod("ns", "d-1")
    assert info is not None and (info.reason, info.message) == ("ImagePullBackOff", "no image")
    kube.set_pod_phase("ns", "d-1", "Running")
    info = kube.get_pod("ns", "d-1")
    assert info is not None and info.started == "2026-01-02T03:04:05Z" and not info.finished
    kube.set_pod_phase("ns", "d-1", "Failed", exit_code=137, reason="OOMKilled")
    info = kube.get_pod("ns", "d-1")
    assert info is not None
    assert (info.phase, info.exit_code, info.reason, info.finished) == (
        "Failed",
        137,
        "OOMKilled",
        True,
    )
    assert info.started == "2026-01-02T03:04:05Z"


def test_create_existing_pod_leaves_it(kube: TestingKubeApi) -> None:
    kube.create_pod("ns", pod("d-1", epoch="1"))
    kube.set_pod_phase("ns", "d-1", "Running")
    kube.create_pod("ns", pod("d-1", epoch="2"))
    info = kube.get_pod("ns", "d-1")
    assert info is not None and info.phase == "Running" and info.labels == {"epoch": "1"}


def test_list_pods_by_labels_and_namespace(kube: TestingKubeApi) -> None:
    kube.create_pod("ns", pod("a", job="x", role="driver"))
    kube.create_pod("ns", pod("b", job="y", role="driver"))
    kube.create_pod("other", pod("c", job="x", role="driver"))
    assert [p.name for p in kube.list_pods("ns", {"job": "x"})] == ["a"]
    assert [p.name for p in kube.list_pods("ns", {"role": "driver"})] == ["a", "b"]
    assert kube.list_pods("ns", {"job": "z"}) == []


def test_delete_pod_now_or_after_grace(kube: TestingKubeApi) -> None:
    kube.create_pod("ns", pod("a"))
    kube.delete_pod("ns", "a", grace_seconds=30)
    assert kube.get_pod("ns", "a") is None
    kube.delete_pod("ns", "a", grace_seconds=30)  # gone already: no error
    kube.hold_deletions = True
    kube.create_pod("ns", pod("b"))
    kube.delete_pod("ns", "b", grace_seconds=30)
    info = kube.get_pod("ns", "b")
    assert info is not None and info.deleting
    kube.finish_deletion("ns", "b")
    assert kube.get_pod("ns", "b") is None
    kube.create_pod("ns", pod("c"))
    kube.delete_pod("ns", "c", grace_seconds=0)  # force delete never lingers
    assert kube.get_pod("ns", "c") is None


def test_apply_service_keeps_the_existing(kube: TestingKubeApi) -> None:
    kube.apply_service("ns", {"metadata": {"name": "s"}, "spec": {"clusterIP": "None"}})
    kube.apply_service("ns", {"metadata": {"name": "s"}, "spec": {"clusterIP": "10.0.0.1"}})
    svc = kube.service("ns", "s")
    assert svc is not None and svc["spec"]["clusterIP"] == "None"


def test_objects(kube: TestingKubeApi) -> None:
    assert kube.create_object("gicjobs", "ns", job("wc", image="a"))
    assert not kube.create_object("gicjobs", "ns", job("wc", image="b"))
    obj = kube.get_object("gicjobs", "ns", "wc")
    assert obj is not None
    assert (obj["apiVersion"], obj["kind"]) == ("gic.io/v1alpha1", "GICJob")
    assert obj["spec"] == {"image": "a"}
    assert obj["metadata"]["generation"] == 1 and obj["metadata"]["uid"]
    obj["spec"]["image"] = "mutated"  # a copy: the store is unchanged
    stored = kube.get_object("gicjobs", "ns", "wc")
    assert stored is not None and stored["spec"] == {"image": "a"}
    kube.create_object("savepoints", "ns", {"metadata": {"name": "sp", "labels": {"j": "wc"}}})
    assert [o["metadata"]["name"] for o in kube.list_objects("gicjobs", "ns")] == ["wc"]
    assert kube.list_objects("savepoints", "ns", {"j": "wc"})[0]["kind"] == "Savepoint"
    assert kube.list_objects("savepoints", "ns", {"j": "other"}) == []
    kube.delete_object("gicjobs", "ns", "wc")
    kube.delete_object("gicjobs", "ns", "wc")
    assert kube.get_object("gicjobs", "ns", "wc") is None


def test_patch_status_is_a_merge_patch(kube: TestingKubeApi) -> None:
    kube.create_object("gicjobs", "ns", job("wc"))
    kube.patch_status("gicjobs", "ns", "wc", {"phase": "Running", "pending": {"kind": "x"}})
    kube.patch_status(
        "gicjobs",
        "ns",
        "wc",
        {"pending": None, "epoch": 2, "conditions": [{"type": "Ready"}], "phase": "Running"},
    )
    kube.patch_status("gicjobs", "ns", "wc", {"conditions": [{"type": "Other"}]})
    obj = kube.get_object("gicjobs", "ns", "wc")
    assert obj is not None
    assert obj["status"] == {"phase": "Running", "epoch": 2, "conditions": [{"type": "Other"}]}
    kube.patch_status("gicjobs", "ns", "missing", {"phase": "x"})  # no error


def test_merge_patch_rfc7386() -> None:
    target = {"a": {"b": 1, "c": 2}, "d": [1, 2], "e": 1}
    assert merge_patch(target, {"a": {"b": None, "x": {"y": 1}}, "d": [3], "e": None}) == {
        "a": {"c": 2, "x": {"y": 1}},
        "d": [3],
    }
    assert target == {"a": {"b": 1, "c": 2}, "d": [1, 2], "e": 1}


def test_user_edits_bump_the_generation(kube: TestingKubeApi) -> None:
    kube.put_object("gicjobs", "ns", job("wc", image="a"))
    kube.patch_status("gicjobs", "ns", "wc", {"phase": "Running"})
    uid = kube.objects[("gicjobs", "ns", "wc")]["metadata"]["uid"]
    same = kube.put_object("gicjobs", "ns", job("wc", image="a"))
    assert same["metadata"]["generation"] == 1
    changed = kube.put_object("gicjobs", "ns", job("wc", image="b"))
    assert changed["metadata"]["generation"] == 2 and changed["metadata"]["uid"] == uid
    assert changed["status"] == {"phase": "Running"}
    annotated = kube.update_object("gicjobs", "ns", "wc", annotations={"gic.io/savepoint": "n1"})
    assert annotated["metadata"]["generation"] == 2
    respec = kube.update_object("gicjobs", "ns", "wc", spec={"image": "c"})
    assert respec["metadata"]["generation"] == 3 and respec["spec"] == {"image": "c"}


def test_events_are_recorded_and_never_raise(kube: TestingKubeApi) -> None:
    obj = kube.put_object("gicjobs", "ns", job("wc"))
    kube.event(obj, "Normal", "Launched", "driver wc-driver-1 created")
    kube.fail_next("event", TransientKubeError("API down"))
    kube.event(obj, "Warning", "Lost", "this one is dropped")
    kube.event({}, "Warning", "Odd", "an object without metadata")
    assert kube.reasons("wc") == ["Launched"]
    assert kube.events[0].kind == "GICJob" and kube.events[0].namespace == "ns"
    assert kube.reasons() == ["Launched", "Odd"]


def test_injected_failures(kube: TestingKubeApi) -> None:
    kube.fail_next("create_pod", TransientKubeError("throttled"), times=2)
    for _ in range(2):
        with pytest.raises(TransientKubeError):
            kube.create_pod("ns", pod("a"))
    kube.create_pod("ns", pod("a"))
    assert kube.get_pod("ns", "a") is not None
    assert [c for c in kube.calls if c[0] == "create_pod"] == [("create_pod", "ns", "a")] * 3


def test_patch_status_checks_the_resource_version(kube: TestingKubeApi) -> None:
    kube.create_object("gicjobs", "ns", {"metadata": {"name": "wc"}})
    read = kube.get_object("gicjobs", "ns", "wc")
    assert read is not None
    version = read["metadata"]["resourceVersion"]
    kube.patch_status("gicjobs", "ns", "wc", {"phase": "Running"}, resource_version=version)
    with pytest.raises(ConflictError):
        kube.patch_status("gicjobs", "ns", "wc", {"phase": "Failed"}, resource_version=version)
    obj = kube.get_object("gicjobs", "ns", "wc")
    assert obj is not None and obj["status"] == {"phase": "Running"}
    assert obj["metadata"]["resourceVersion"] != version
