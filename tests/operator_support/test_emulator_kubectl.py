"""The real kubectl (v1.32) against the Kubernetes API emulator."""

from __future__ import annotations

import json
import threading

from gic_operator.testing.kube_client import KubeClient, KubeClientError
from gic_operator.testing.kube_emulator import KubeEmulator
from gic_operator.testing.kubectl import Kubectl, wait_until

CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.test
spec:
  group: example.test
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd], categories: [all]}
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {status: {}}
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"""

WIDGET = """
apiVersion: example.test/v1
kind: Widget
metadata: {name: w1, labels: {tier: gold}}
spec: {size: 3}
status: {phase: Ignored}
"""

WIDGETS = "/apis/example.test/v1/namespaces/default/widgets"


def _with_crd(kubectl: Kubectl) -> None:
    kubectl.apply(CRD)
    kubectl("wait", "--for=condition=established", "crd/widgets.example.test", "--timeout=10s")


def _json(kubectl: Kubectl, *args: str) -> dict[str, object]:
    result: dict[str, object] = json.loads(kubectl("get", *args, "-o", "json").stdout)
    return result


def test_created_crd_is_served_with_short_name_and_category(kubectl: Kubectl) -> None:
    _with_crd(kubectl)
    resources = kubectl("api-resources", "--api-group=example.test", "-o", "wide").stdout
    assert "widgets" in resources and "wd" in resources and "Widget" in resources

    assert "widget.example.test/w1 created" in kubectl.apply(WIDGET)

    listing = kubectl("get", "wd").stdout.splitlines()
    assert listing[0].split() == ["NAME", "AGE"] and listing[1].split()[0] == "w1"
    assert kubectl("get", "all", "-o", "name").stdout.strip() == "widget.example.test/w1"
    widget = _json(kubectl, "widget", "w1")
    metadata = widget["metadata"]
    assert isinstance(metadata, dict)
    assert metadata["generation"] == 1 and metadata["uid"] and metadata["creationTimestamp"]
    assert "status" not in widget  # the status subresource owns it; create ignores it


def test_annotate_patch_apply_and_generation(kubectl: Kubectl, client: KubeClient) -> None:
    _with_crd(kubectl)
    kubectl.apply(WIDGET)

    kubectl("annotate", "wd", "w1", "gic.io/savepoint=n1")
    kubectl("patch", "wd", "w1", "--type=merge", "-p", '{"status": {"phase": "Lost"}}')
    after_metadata_only = client.get(f"{WIDGETS}/w1")
    assert after_metadata_only["metadata"]["annotations"]["gic.io/savepoint"] == "n1"
    assert after_metadata_only["metadata"]["generation"] == 1
    assert "status" not in after_metadata_only

    kubectl("patch", "wd", "w1", "--type=merge", "-p", '{"spec": {"size": 5}}')
    status_patch = '{"status": {"phase": "Ready"}}'
    kubectl("patch", "wd", "w1", "--subresource=status", "--type=merge", "-p", status_patch)
    patched = client.get(f"{WIDGETS}/w1")
    assert patched["spec"] == {"size": 5} and patched["status"] == {"phase": "Ready"}
    assert patched["metadata"]["generation"] == 2

    changed = WIDGET.replace("size: 3", "size: 4").replace("status: {phase: Ignored}", "")
    assert "configured" in kubectl.apply(changed)
    applied = client.get(f"{WIDGETS}/w1")
    assert applied["spec"] == {"size": 4} and applied["metadata"]["generation"] == 3
    assert "kubectl.kubernetes.io/last-applied-configuration" in applied["metadata"]["annotations"]
    assert "unchanged" in kubectl.apply(changed)
    jsonpath = "-o=jsonpath={.metadata.resourceVersion}"
    assert kubectl("get", "wd", "w1", jsonpath).stdout == applied["metadata"]["resourceVersion"]


def test_wait_for_jsonpath_and_condition_set_while_waiting(
    kube: KubeEmulator, kubectl: Kubectl, client: KubeClient
) -> None:
    _with_crd(kubectl)
    kubectl.apply(WIDGET)
    waiting = kubectl.popen(
        "wait", "--for=jsonpath={.status.phase}=Ready", "wd/w1", "--timeout=20s"
    )
    condition = kubectl.popen("wait", "--for=condition=Healthy", "wd/w1", "--timeout=20s")
    try:
        wait_until(lambda: kube.call(lambda store: store.watcher_count) >= 2, what="two watches")
        status = {"phase": "Ready", "conditions": [{"type": "Healthy", "status": "True"}]}

        patcher = threading.Thread(
            target=lambda: client.merge_patch(f"{WIDGETS}/w1/status", {"status": status})
        )
        patcher.start()
        patcher.join()
        assert waiting.wait(timeout=20) == 0, waiting.communicate()[1]
        assert condition.wait(timeout=20) == 0, condition.communicate()[1]
    finally:
        for process in (waiting, condition):
            if process.poll() is None:
                process.kill()
            process.communicate()


def test_delete_waits_for_the_finalizer_removed_by_another_thread(
    kubectl: Kubectl, client: KubeClient
) -> None:
    _with_crd(kubectl)
    kubectl.apply(WIDGET.replace("metadata: {", "metadata: {finalizers: [example.test/hold], "))

    def release() -> None:
        marked = wait_until(
            lambda: client.get(f"{WIDGETS}/w1")["metadata"].get("deletionTimestamp") and True,
            what="deletionTimestamp",
        )
        assert marked
        client.merge_patch(f"{WIDGETS}/w1", {"metadata": {"finalizers": None}})

    releaser = threading.Thread(target=release)
    releaser.start()
    try:
        deleted = kubectl("delete", "wd", "w1", "--timeout=20s")
    finally:
        releaser.join()
    assert 'widget.example.test "w1" deleted' in deleted.stdout
    assert "NotFound" in kubectl("get", "wd", "w1", check=False).stderr


def test_cascading_delete_through_owner_references(kubectl: Kubectl, client: KubeClient) -> None:
    _with_crd(kubectl)
    kubectl.apply(WIDGET)
    owner = client.get(f"{WIDGETS}/w1")
    reference = {"apiVersion": "example.test/v1", "kind": "Widget", "name": "w1"}
    reference["uid"] = owner["metadata"]["uid"]
    configmaps = "/api/v1/namespaces/default/configmaps"
    child = client.request(
        "POST", configmaps, {"metadata": {"name": "child", "ownerReferences": [reference]}}
    )
    grandchild_reference = {"apiVersion": "v1", "kind": "ConfigMap", "name": "child"}
    grandchild_reference["uid"] = child["metadata"]["uid"]
    grandchild = {"metadata": {"name": "grandchild", "ownerReferences": [grandchild_reference]}}
    client.request("POST", configmaps, grandchild)
    client.request("POST", configmaps, {"metadata": {"name": "bystander"}})

    waiter = kubectl.popen("wait", "--for=delete", "configmap/grandchild", "--timeout=20s")
    try:
        kubectl("delete", "wd", "w1")
        assert waiter.wait(timeout=20) == 0, waiter.communicate()[1]
    finally:
        if waiter.poll() is None:
            waiter.kill()
        waiter.communicate()
    names = kubectl("get", "configmaps", "-o", "name").stdout.split()
    assert names == ["configmap/bystander"]


def test_namespaces_secrets_and_errors(kubectl: Kubectl, client: KubeClient) -> None:
    kubectl("create", "namespace", "team")
    assert "namespace/team" in kubectl("get", "namespaces", "-o", "name").stdout
    kubectl("create", "secret", "generic", "creds", "--from-literal=token=s3cr3t", "-n", "team")
    secret = client.get("/api/v1/namespaces/team/secrets/creds")
    assert secret["data"] == {"token": "czNjcjN0"} and secret["type"] == "Opaque"

    again = kubectl("create", "namespace", "team", check=False)
    assert again.returncode != 0 and "AlreadyExists" in again.stderr

    kubectl("delete", "namespace", "team")
    try:
        client.get("/api/v1/namespaces/team/secrets/creds")
    except KubeClientError as exc:
        assert exc.status == 404 and exc.body["reason"] == "NotFound"
    else:
        raise AssertionError("the namespace's secret outlived it")
