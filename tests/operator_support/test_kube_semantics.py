"""The emulator's building blocks without HTTP: patches, selectors, paths, protobuf, store."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest

from gic_operator.testing.kube_api import parse_api_path
from gic_operator.testing.kube_errors import ApiError
from gic_operator.testing.kube_patch import (
    PatchError,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)
from gic_operator.testing.kube_protobuf import MAGIC, decode_object
from gic_operator.testing.kube_resources import Registry, ResourceType
from gic_operator.testing.kube_selectors import FieldSelector, LabelSelector
from gic_operator.testing.kube_store import KubeStore, WatchEvent

# -- patches ------------------------------------------------------------------------------


def test_merge_patch_deletes_with_null_merges_dicts_and_replaces_lists() -> None:
    doc = {"a": {"b": 1, "c": 2}, "l": [1, 2], "keep": True}
    before = copy.deepcopy(doc)
    patched = merge_patch(doc, {"a": {"b": None, "d": 4}, "l": [3]})
    assert patched == {"a": {"c": 2, "d": 4}, "l": [3], "keep": True}
    assert doc == before


def test_json_patch_operations_and_pointer_escapes() -> None:
    doc = {"metadata": {"annotations": {"a/b": "1"}}, "items": [1, 2]}
    ops = [
        {"op": "test", "path": "/metadata/annotations/a~1b", "value": "1"},
        {"op": "add", "path": "/items/-", "value": 3},
        {"op": "add", "path": "/items/0", "value": 0},
        {"op": "replace", "path": "/items/1", "value": 10},
        {"op": "copy", "from": "/items/0", "path": "/first"},
        {"op": "move", "from": "/metadata/annotations/a~1b", "path": "/moved"},
        {"op": "remove", "path": "/items/3"},
    ]
    assert json_patch(doc, ops) == {
        "metadata": {"annotations": {}},
        "items": [0, 10, 2],
        "first": 0,
        "moved": "1",
    }


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "test", "path": "/a", "value": 2}],
        [{"op": "remove", "path": "/missing"}],
        [{"op": "replace", "path": "/l/5", "value": 1}],
        [{"op": "add", "path": "/l/01", "value": 1}],
        [{"op": "frobnicate", "path": "/a"}],
        {"op": "add", "path": "/a", "value": 1},
    ],
)
def test_json_patch_failures_leave_the_document_alone(ops: Any) -> None:
    doc = {"a": 1, "l": [1]}
    with pytest.raises(PatchError):
        json_patch(
            doc, [{"op": "add", "path": "/new", "value": 1}, *ops] if isinstance(ops, list) else ops
        )
    assert doc == {"a": 1, "l": [1]}


def test_strategic_merge_patch_merges_named_lists() -> None:
    pod = {"spec": {"containers": [{"name": "a", "image": "x", "args": ["1"]}, {"name": "b"}]}}
    patch = {
        "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}],
        "spec": {
            "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}],
            "containers": [
                {"name": "a", "image": "y"},
                {"name": "b", "$patch": "delete"},
                {"name": "c", "image": "z"},
            ],
        },
    }
    assert strategic_merge_patch(pod, patch) == {
        "spec": {
            "containers": [{"name": "c", "image": "z"}, {"name": "a", "image": "y", "args": ["1"]}]
        }
    }


# -- selectors and paths ------------------------------------------------------------------


def test_selectors_parse_and_match() -> None:
    obj = {
        "metadata": {"name": "n", "labels": {"a": "1", "b": "x"}},
        "status": {"phase": "Running"},
    }
    assert LabelSelector.parse("a in (1,2),b,!c,b notin (y)").matches(obj)
    assert not LabelSelector.parse("a=1,b!=x").matches(obj)
    assert FieldSelector.parse("status.phase=Running,metadata.name!=m").matches(obj)
    assert FieldSelector.parse("spec.nodeName=").matches(obj)
    with pytest.raises(ApiError) as bad:
        LabelSelector.parse("a in 1")
    assert bad.value.code == 400


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/api/v1/namespaces", ("", "v1", None, "namespaces", None, None)),
        ("/api/v1/namespaces/ns1", ("", "v1", None, "namespaces", "ns1", None)),
        ("/api/v1/namespaces/ns1/status", ("", "v1", None, "namespaces", "ns1", "status")),
        ("/api/v1/namespaces/ns1/pods", ("", "v1", "ns1", "pods", None, None)),
        ("/api/v1/namespaces/ns1/pods/p/log", ("", "v1", "ns1", "pods", "p", "log")),
        ("/apis/g.io/v1/things", ("g.io", "v1", None, "things", None, None)),
        ("/apis/g.io", ("g.io", None, None, None, None, None)),
        ("/version", (None, None, None, None, None, None)),
    ],
)
def test_api_paths(path: str, expected: tuple[str | None, ...]) -> None:
    parsed = parse_api_path(path)
    got = (parsed.group, parsed.version, parsed.namespace, parsed.plural, parsed.name)
    assert (*got, parsed.subresource) == expected


# -- protobuf -----------------------------------------------------------------------------


def _field(number: int, payload: bytes) -> bytes:
    assert number < 16 and len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def _entry(number: int, key: str, value: bytes) -> bytes:
    return _field(number, _field(1, key.encode()) + _field(2, value))


def test_protobuf_secret_from_kubectl_create_is_decoded() -> None:
    meta = _field(1, b"creds") + _field(3, b"team") + _entry(11, "app", b"gic")
    secret = _field(1, meta) + _entry(2, "pw", b"\x00\xff") + _field(3, b"Opaque")
    body = MAGIC + _field(1, _field(1, b"v1") + _field(2, b"Secret")) + _field(2, secret)
    assert decode_object(body) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds", "namespace": "team", "labels": {"app": "gic"}},
        "data": {"pw": base64.b64encode(b"\x00\xff").decode()},
        "type": "Opaque",
    }
    with pytest.raises(ValueError, match="not supported"):
        decode_object(MAGIC + _field(1, _field(1, b"v1") + _field(2, b"Pod")))


# -- store --------------------------------------------------------------------------------


class _Store:
    def __init__(self) -> None:
        self.registry = Registry()
        self.store = KubeStore(self.registry, history_size=100)
        self.events: list[WatchEvent] = []
        self.store.subscribe(self.events.append)

    def rtype(self, plural: str, group: str = "", version: str = "v1") -> ResourceType:
        rtype = self.registry.get(group, version, plural)
        assert rtype is not None
        return rtype


@pytest.fixture
def mem() -> _Store:
    return _Store()


def test_status_subresource_and_generation(mem: _Store) -> None:
    crds = mem.rtype("customresourcedefinitions", "apiextensions.k8s.io")
    crd = {
        "metadata": {"name": "things.g.io"},
        "spec": {
            "group": "g.io",
            "scope": "Cluster",
            "names": {"plural": "things", "kind": "Thing"},
            "versions": [{"name": "v1", "subresources": {"status": {}}}],
        },
    }
    mem.store.create(crds, None, crd)
    things = mem.rtype("things", "g.io")
    assert not things.namespaced and things.has_status
    thing = mem.store.create(things, None, {"metadata": {"name": "t"}, "spec": {"n": 1}})
    version = thing["metadata"]["resourceVersion"]

    same = mem.store.patch(things, None, "t", "application/merge-patch+json", {"spec": {"n": 1}})
    assert same["metadata"]["resourceVersion"] == version  # a no-op write is no write
    labelled = mem.store.patch(
        things, None, "t", "application/merge-patch+json", {"metadata": {"labels": {"a": "b"}}}
    )
    assert labelled["metadata"]["generation"] == 1
    status = {"status": {"ok": True}, "spec": {"n": 99}}
    with_status = mem.store.patch(
        things, None, "t", "application/merge-patch+json", status, subresource="status"
    )
    assert with_status["status"] == {"ok": True} and with_status["spec"] == {"n": 1}
    assert with_status["metadata"]["generation"] == 1
    bumped = mem.store.replace(things, None, "t", {**with_status, "spec": {"n": 2}, "status": {}})
    assert bumped["metadata"]["generation"] == 2 and bumped["status"] == {"ok": True}

    mem.store.delete(crds, None, "things.g.io")
    assert mem.registry.get("g.io", "v1", "things") is None
    assert [e.type for e in mem.events if e.storage_key == ("g.io", "things")][-1] == "DELETED"


def test_graceful_pod_deletion_and_orphans(mem: _Store) -> None:
    pods, cms = mem.rtype("pods"), mem.rtype("configmaps")
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    created = mem.store.create(pods, "ns", pod)
    assert created["status"]["phase"] == "Pending"
    owner_ref = {"uid": created["metadata"]["uid"], "kind": "Pod", "name": "p"}
    mem.store.create(cms, "ns", {"metadata": {"name": "kept", "ownerReferences": [owner_ref]}})
    mem.store.patch(pods, "ns", "p", "application/merge-patch+json", {"spec": {"nodeName": "n"}})

    marked = mem.store.delete(pods, "ns", "p")
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 30
    assert mem.store.contains(pods, marked)
    gone = mem.store.delete(
        pods, "ns", "p", {"gracePeriodSeconds": 0, "propagationPolicy": "Orphan"}
    )
    assert not mem.store.contains(pods, gone)
    assert "ownerReferences" not in mem.store.get(cms, "ns", "kept")["metadata"]


def test_history_replay_and_expiry(mem: _Store) -> None:
    cms = mem.rtype("configmaps")
    for index in range(200):
        mem.store.create(cms, "ns", {"metadata": {"name": f"c{index}"}})
    latest = mem.store.resource_version
    assert mem.store.events_since(1) is None
    replay = mem.store.events_since(latest - 3)
    assert replay is not None and [e.resource_version for e in replay] == [
        latest - 2,
        latest - 1,
        latest,
    ]
    with pytest.raises(ApiError) as exists:
        mem.store.create(cms, "ns", {"metadata": {"name": "c0"}})
    assert exists.value.code == 409
