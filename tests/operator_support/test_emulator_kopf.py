"""A tiny kopf (1.45.2) operator, run in a thread, against the Kubernetes API emulator."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kopf
import pytest

from gic_operator.testing.kube_client import KubeClient
from gic_operator.testing.kubectl import Kubectl, wait_until

CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.example.test}
spec:
  group: example.test
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, shortNames: [gd]}
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {status: {}}
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"""

PEERING = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: kopfpeerings.kopf.dev}
spec:
  group: kopf.dev
  scope: Namespaced
  names: {plural: kopfpeerings, singular: kopfpeering, kind: KopfPeering}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"""

PEER = """
apiVersion: kopf.dev/v1
kind: KopfPeering
metadata: {name: e2e, namespace: default}
"""

GADGET = """
apiVersion: example.test/v1
kind: Gadget
metadata: {name: g1}
spec: {size: 7}
"""

FINALIZER = "example.test/cleanup"


class _Operator:
    """The operator under test: what its handlers saw, and its thread."""

    def __init__(self) -> None:
        self.registry = kopf.OperatorRegistry()
        self.calls: list[tuple[str, Any]] = []
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.thread: threading.Thread | None = None
        registry = self.registry

        @kopf.on.login(registry=registry)
        def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
            return kopf.login_with_kubeconfig(**kwargs)

        @kopf.on.startup(registry=registry)
        def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
            settings.watching.server_timeout = 10

        @kopf.on.create("example.test", "v1", "gadgets", id="created", registry=registry)
        def created(
            spec: kopf.Spec, patch: kopf.Patch, meta: kopf.Meta, body: kopf.Body, **_: Any
        ) -> Any:
            self.calls.append(("create", spec.get("size")))
            kopf.info(body, reason="Created", message=f"created with size {spec.get('size')}")
            patch.metadata["finalizers"] = [*meta.get("finalizers", []), FINALIZER]
            patch.status["phase"] = "Ready"
            return {"size": spec.get("size")}

        @kopf.on.delete("example.test", "v1", "gadgets", id="deleted", registry=registry)
        def deleted(patch: kopf.Patch, meta: kopf.Meta, **_: Any) -> None:
            self.calls.append(("delete", meta.get("name")))
            remaining = [f for f in meta.get("finalizers", []) if f != FINALIZER]
            patch.metadata["finalizers"] = remaining

    def start(self, peering: str | None) -> None:
        def run() -> None:
            asyncio.run(
                kopf.operator(
                    registry=self.registry,
                    standalone=peering is None,
                    peering_name=peering,
                    namespaces=["default"],
                    stop_flag=self.stop,
                    ready_flag=self.ready,
                )
            )

        self.thread = threading.Thread(target=run, name="kopf-operator")
        self.thread.start()
        assert self.ready.wait(timeout=20), "the operator did not start"

    def join(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=30)
            assert not self.thread.is_alive(), "the operator did not stop"


@pytest.fixture
def operator(kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Operator]:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    running = _Operator()
    try:
        yield running
    finally:
        running.join()


@pytest.mark.parametrize("peering", [None, "e2e"], ids=["standalone", "peering"])
def test_kopf_handlers_with_finalizers_status_and_events(
    peering: str | None, operator: _Operator, kubectl: Kubectl, client: KubeClient
) -> None:
    kubectl.apply(CRD)
    if peering is not None:
        kubectl.apply(PEERING)  # as on a real server, a CRD must exist before its objects
        kubectl.apply(PEER)
    operator.start(peering)

    kubectl.apply(GADGET)
    kubectl("wait", "--for=jsonpath={.status.phase}=Ready", "gd/g1", "--timeout=20s")
    path = "/apis/example.test/v1/namespaces/default/gadgets/g1"
    gadget = wait_until(
        lambda: (g := client.get(path)).get("status", {}).get("created") and g,
        what="the handler's result in the status",
    )
    assert FINALIZER in gadget["metadata"]["finalizers"]
    assert gadget["status"]["created"] == {"size": 7}
    assert operator.calls == [("create", 7)]

    kubectl("delete", "gd", "g1", "--timeout=20s")
    assert operator.calls == [("create", 7), ("delete", "g1")]

    def posted() -> list[str]:
        events = client.get("/api/v1/namespaces/default/events")["items"]
        return [e["message"] for e in events if e["involvedObject"].get("name") == "g1"]

    messages = wait_until(posted, what="kopf's events about the gadget")
    assert messages == ["created with size 7"]
    if peering is not None:
        peer = client.get("/apis/kopf.dev/v1/namespaces/default/kopfpeerings/e2e")
        assert peer.get("status"), "kopf did not announce itself in the peering object"
    operator.join()
    wait_until(lambda: not any(t.name == "kopf-operator" for t in threading.enumerate()))
