"""The test control plane is a real Kubernetes: authentication, RBAC, the Node authorizer,
admission (PodSecurity), controllers, the scheduler, and a Node whose pods really run."""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from .api import ApiClient, ApiError
from .cluster import REPO, ControlPlane
from .kubelet import NODE_NAME
from .pod_ips import POD_NETWORK, LoopbackPool


def _pod(name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "process", "command": command}],
            **spec,
        },
    }


def _pod_path(namespace: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{namespace}/pods"
    return f"{base}/{name}" if name else base


def _phase(plane: ControlPlane, namespace: str, name: str, *phases: str) -> dict[str, Any]:
    """Wait until the pod is in one of ``phases``; the pod."""

    def reached() -> dict[str, Any] | None:
        pod: dict[str, Any] = plane.client.get(_pod_path(namespace, name))
        return pod if (pod.get("status") or {}).get("phase") in phases else None

    result: dict[str, Any] = plane.wait_for(f"pod {name} {'/'.join(phases)}", reached, 60)
    return result


def _gone(plane: ControlPlane, path: str) -> bool:
    try:
        plane.client.get(path)
    except ApiError as exc:
        return exc.status == 404
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _token(plane: ControlPlane, namespace: str, account: str) -> str:
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"
    return str(plane.client.create(path, request)["status"]["token"])


def test_api_server_is_ready_and_versions_match(control_plane: ControlPlane) -> None:
    assert control_plane.client.text("/readyz").strip() == "ok"
    verbose = control_plane.client.text("/readyz", verbose="true")
    assert "[+]etcd ok" in verbose
    assert "[+]poststarthook/rbac/bootstrap-roles ok" in verbose
    versions = json.loads(control_plane.kubectl("version", "-o", "json").stdout)
    assert versions["clientVersion"]["gitVersion"] == control_plane.version
    assert versions["serverVersion"]["gitVersion"] == control_plane.version
    nodes = control_plane.kubectl("get", "nodes", "-o", "json").stdout
    (node,) = json.loads(nodes)["items"]
    assert node["metadata"]["name"] == NODE_NAME
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
    assert ready == "True"


def test_anonymous_and_unknown_clients_are_refused(control_plane: ControlPlane) -> None:
    anonymous = ApiClient(control_plane.server, ca_file=control_plane.ca_file)
    with pytest.raises(ApiError) as refused:
        anonymous.get("/api/v1/namespaces")
    assert refused.value.status in (401, 403)
    forged = anonymous.with_token("not-a-token", control_plane.ca_file)
    with pytest.raises(ApiError) as unauthorized:
        forged.get("/api/v1/namespaces")
    assert unauthorized.value.status == 401


def test_rbac_decides_what_a_service_account_may_do(
    control_plane: ControlPlane, kube_namespace: str
) -> None:
    client, ns = control_plane.client, kube_namespace
    client.create(f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "reader"}})
    reader = client.with_token(_token(control_plane, ns, "reader"), control_plane.ca_file)
    with pytest.raises(ApiError) as denied:
        reader.get(_pod_path(ns))
    assert denied.value.status == 403
    assert f"system:serviceaccount:{ns}:reader" in str(denied.value)

    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}"
    role = {
        "metadata": {"name": "pod-reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
    }
    client.create(f"{rbac}/roles", role)
    binding = {
        "metadata": {"name": "reader-reads-pods"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}],
    }
    client.create(f"{rbac}/rolebindings", binding)
    listing = control_plane.wait_for("the RoleBinding to apply", lambda: reader.get(_pod_path(ns)))
    assert listing["kind"] == "PodList"
    with pytest.raises(ApiError) as elsewhere:  # the Role is namespaced
        reader.get(_pod_path("default"))
    assert elsewhere.value.status == 403
    with pytest.raises(ApiError) as writing:  # and read-only
        reader.create(_pod_path(ns), _pod("nope", ["true"]))
    assert writing.value.status == 403


def test_owner_deletion_and_namespace_deletion_are_carried_out(
    control_plane: ControlPlane,
) -> None:
    client = control_plane.client
    ns = f"t-{uuid.uuid4().hex[:10]}"
    client.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    configmaps = f"/api/v1/namespaces/{ns}/configmaps"
    owner = client.create(configmaps, {"metadata": {"name": "owner"}, "data": {"a": "1"}})
    reference = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
    }
    client.create(configmaps, {"metadata": {"name": "owned", "ownerReferences": [reference]}})
    client.create(configmaps, {"metadata": {"name": "bystander"}})
    client.delete(f"{configmaps}/owner")
    control_plane.wait_for(
        "the garbage collector to delete the owned ConfigMap",
        lambda: _gone(control_plane, f"{configmaps}/owned"),
    )
    assert client.get(f"{configmaps}/bystander")["metadata"]["name"] == "bystander"

    client.delete(f"/api/v1/namespaces/{ns}")
    control_plane.wait_for(
        "the namespace controller to empty and remove the namespace",
        lambda: _gone(control_plane, f"/api/v1/namespaces/{ns}"),
        timeout=60,
    )


def test_a_pod_is_scheduled_runs_and_succeeds(
    control_plane: ControlPlane, kube_namespace: str
) -> None:
    ns = kube_namespace
    control_plane.client.create(_pod_path(ns), _pod("answer", ["python", "-c", "print(42)"]))
    pod = _phase(control_plane, ns, "answer", "Succeeded", "Failed")
    assert pod["spec"]["nodeName"] == NODE_NAME
    assert pod["status"]["phase"] == "Succeeded"
    assert ipaddress.ip_address(pod["status"]["podIP"]) in POD_NETWORK
    assert pod["status"]["hostIP"] == "127.0.0.1"
    (container,) = pod["status"]["containerStatuses"]
    assert container["state"]["terminated"]["exitCode"] == 0
    assert container["state"]["terminated"]["reason"] == "Completed"
    conditions = {c["type"] for c in pod["status"]["conditions"]}
    assert {"PodScheduled", "Initialized", "ContainersReady", "Ready"} <= conditions
    log = control_plane.client.text(_pod_path(ns, "answer") + "/log")
    assert log == "42\n"
    assert control_plane.kubectl("-n", ns, "logs", "answer").stdout == "42\n"
    path = control_plane.kubelet.log_path(ns, "answer")
    assert path is not None
    assert path.read_text() == "42\n"


#: A pod that serves one port on its pod IP (from the downward API) until it is deleted.
_SERVE_ON_POD_IP = """
import http.server, os
server = http.server.HTTPServer((os.environ["POD_IP"], int(os.environ["PORT"])),
                                http.server.SimpleHTTPRequestHandler)
print(os.environ["POD_IP"], os.environ["PATH"].split(os.pathsep)[0], flush=True)
server.serve_forever()
"""


def test_pods_serve_the_same_port_on_their_own_pod_ips(
    control_plane: ControlPlane, kube_namespace: str
) -> None:
    """Each pod has a loopback address of its own as its IP, given by the downward API,
    so two pods bind the same port (as two replicas of a Deployment do); and pods find
    the commands of the kubelet's virtualenv on their PATH."""
    ns = kube_namespace
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "PORT", "value": str(port)},
    ]
    for name in ("web-1", "web-2"):
        pod = _pod(name, ["python", "-c", _SERVE_ON_POD_IP])
        pod["spec"]["containers"][0]["env"] = env
        control_plane.client.create(_pod_path(ns), pod)
    pods = [_phase(control_plane, ns, name, "Running") for name in ("web-1", "web-2")]
    ips = [pod["status"]["podIP"] for pod in pods]
    assert len(set(ips)) == 2 and all(ipaddress.ip_address(ip) in POD_NETWORK for ip in ips)
    venv_bin = str(Path(sys.executable).parent)
    for name, ip in zip(("web-1", "web-2"), ips, strict=True):
        control_plane.wait_for(
            f"pod {name} to log its address",
            lambda name=name: control_plane.kubectl("-n", ns, "logs", name).stdout.strip(),
            30,
        )
        assert control_plane.kubectl("-n", ns, "logs", name).stdout.split() == [ip, venv_bin]
        with socket.create_connection((ip, port), timeout=10) as connection:
            assert connection.getpeername() == (ip, port)
    for name in ("web-1", "web-2"):
        control_plane.client.delete(_pod_path(ns, name))
    for name in ("web-1", "web-2"):
        control_plane.wait_for(
            f"pod {name} gone", lambda name=name: _gone(control_plane, _pod_path(ns, name)), 60
        )


def test_the_loopback_pool_never_hands_out_an_address_twice() -> None:
    pool = LoopbackPool()
    first = [pool.allocate() for _ in range(200)]
    assert len(set(first)) == 200
    assert all(ipaddress.ip_address(ip) in POD_NETWORK for ip in first)
    assert all(ip.rsplit(".", 1)[1] not in ("0", "255") for ip in first)
    pool.release(first[0])
    assert pool.held() == frozenset(first[1:])


def test_a_failing_pod_reports_its_exit_code(
    control_plane: ControlPlane, kube_namespace: str
) -> None:
    ns = kube_namespace
    command = ["python", "-c", "import sys; print('bye'); sys.exit(3)"]
    control_plane.client.create(_pod_path(ns), _pod("failing", command))
    pod = _phase(control_plane, ns, "failing", "Succeeded", "Failed")
    assert pod["status"]["phase"] == "Failed"
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (3, "Error")


def test_deleting_a_running_pod_terminates_its_process(
    control_plane: ControlPlane, kube_namespace: str
) -> None:
    ns = kube_namespace
    control_plane.client.create(_pod_path(ns), _pod("sleeper", ["sleep", "600"]))
    _phase(control_plane, ns, "sleeper", "Running")
    pid = control_plane.kubelet.processes()[f"{ns}/sleeper"]
    assert _alive(pid)
    started = time.monotonic()
    control_plane.client.delete(_pod_path(ns, "sleeper"))  # grace period 30 s
    control_plane.wait_for("the pod to go", lambda: _gone(control_plane, _pod_path(ns, "sleeper")))
    assert not _alive(pid)
    assert time.monotonic() - started < 20  # SIGTERM ended it; no wait for the grace period


def test_a_process_ignoring_sigterm_is_killed_after_the_grace_period(
    control_plane: ControlPlane, kube_namespace: str
) -> None:
    ns = kube_namespace
    script = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ignoring SIGTERM', flush=True)\n"
        "time.sleep(600)\n"
    )
    pod = _pod("stubborn", ["python", "-c", script], terminationGracePeriodSeconds=2)
    control_plane.client.create(_pod_path(ns), pod)
    _phase(control_plane, ns, "stubborn", "Running")
    control_plane.wait_for(
        "the handler to be installed",
        lambda: "ignoring" in control_plane.client.text(_pod_path(ns, "stubborn") + "/log"),
    )
    pid = control_plane.kubelet.processes()[f"{ns}/stubborn"]
    started = time.monotonic()
    control_plane.client.delete(_pod_path(ns, "stubborn"))
    time.sleep(1.0)
    assert _alive(pid)  # SIGTERM is ignored; the grace period is not over
    control_plane.wait_for("the pod to go", lambda: _gone(control_plane, _pod_path(ns, "stubborn")))
    assert not _alive(pid)
    assert 1.5 < time.monotonic() - started < 20


def test_sigterm_reaches_the_first_process_only_and_the_rest_dies_with_it(
    control_plane: ControlPlane, kube_namespace: str
) -> None:
    """Like a container runtime, which signals a container's PID 1: a process the first
    one started hears of the deletion only through it, and is killed when it ends."""
    ns = kube_namespace
    child = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: (print('child: SIGTERM', flush=True), "
        "sys.exit(0)))\n"
        "print('child ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    leader = (
        "import signal, subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', {child!r}])\n"
        "print(f'child pid {child.pid}', flush=True)\n"
        "signal.signal(signal.SIGTERM, lambda *_: (print('leader: SIGTERM', flush=True), "
        "sys.exit(0)))\n"
        "time.sleep(600)\n"
    )
    control_plane.client.create(_pod_path(ns), _pod("family", ["python", "-c", leader]))
    _phase(control_plane, ns, "family", "Running")
    log_path = _pod_path(ns, "family") + "/log"
    control_plane.wait_for(
        "the child to start", lambda: "child ready" in control_plane.client.text(log_path)
    )
    log = control_plane.kubelet.log_path(ns, "family")
    assert log is not None
    pid = int(log.read_text().split("child pid ")[1].split()[0])
    control_plane.client.delete(_pod_path(ns, "family"))
    control_plane.wait_for("the pod to go", lambda: _gone(control_plane, _pod_path(ns, "family")))
    control_plane.wait_for("the child to die", lambda: not _alive(pid))
    text = log.read_text()
    assert "leader: SIGTERM" in text
    assert "child: SIGTERM" not in text  # it got SIGKILL when the leader ended


def test_the_node_reads_only_secrets_of_its_pods(
    control_plane: ControlPlane, kube_namespace: str
) -> None:
    ns, client = kube_namespace, control_plane.client
    secrets = f"/api/v1/namespaces/{ns}/secrets"
    client.create(secrets, {"metadata": {"name": "unused"}, "stringData": {"v": "hidden"}})
    client.create(secrets, {"metadata": {"name": "mine"}, "stringData": {"v": "s3cr3t"}})
    node = ApiClient.from_kubeconfig(control_plane.workdir / "kubelet.kubeconfig")
    with pytest.raises(ApiError) as unrelated:
        node.get(f"{secrets}/mine")  # no pod on the node refers to it yet
    assert unrelated.value.status == 403
    assert "no relationship found" in str(unrelated.value)

    env = [{"name": "V", "valueFrom": {"secretKeyRef": {"name": "mine", "key": "v"}}}]
    pod = _pod("reader", ["python", "-c", "import os; print(os.environ['V'])"])
    pod["spec"]["containers"][0]["env"] = env
    client.create(_pod_path(ns), pod)
    _phase(control_plane, ns, "reader", "Succeeded")
    assert client.text(_pod_path(ns, "reader") + "/log") == "s3cr3t\n"
    with pytest.raises(ApiError) as still_hidden:
        node.get(f"{secrets}/unused")
    assert still_hidden.value.status == 403

    with pytest.raises(ApiError) as all_pods:  # only its own pods, by field selector
        node.get("/api/v1/pods")
    assert all_pods.value.status == 403
    other = {"metadata": {"name": "another-node"}}
    with pytest.raises(ApiError) as other_node:  # NodeRestriction
        node.create("/api/v1/nodes", other)
    assert other_node.value.status == 403


def test_a_pod_gets_a_service_account_token_and_kubeconfig(
    control_plane: ControlPlane, kube_namespace: str
) -> None:
    ns = kube_namespace
    kubectl = str(control_plane.kubectl_path)
    query = ["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]
    command = [kubectl, "--cache-dir=kubectl-cache", *query]
    control_plane.client.create(_pod_path(ns), _pod("whoami", command))
    pod = _phase(control_plane, ns, "whoami", "Succeeded", "Failed")
    log = control_plane.client.text(_pod_path(ns, "whoami") + "/log")
    assert pod["status"]["phase"] == "Succeeded", log
    assert log == f"system:serviceaccount:{ns}:default"


def test_pod_security_admission_refuses_a_privileged_pod(
    control_plane: ControlPlane, kube_namespace: str
) -> None:
    ns, client = kube_namespace, control_plane.client
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    client.patch(f"/api/v1/namespaces/{ns}", {"metadata": {"labels": labels}})
    privileged = _pod("privileged", ["true"])
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    with pytest.raises(ApiError) as refused:
        client.create(_pod_path(ns), privileged)
    assert refused.value.status == 403
    assert refused.value.reason == "Forbidden"
    assert 'violates PodSecurity "restricted:latest"' in str(refused.value)

    compliant = _pod("compliant", ["true"])
    compliant["spec"]["securityContext"] = {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    compliant["spec"]["containers"][0]["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    accepted = client.request("POST", _pod_path(ns), compliant, params={"dryRun": "All"})
    assert accepted["metadata"]["name"] == "compliant"


def test_the_crds_apply_with_validation_and_explain(control_plane: ControlPlane) -> None:
    crds = sorted(str(p) for p in (REPO / "crds").glob("*.yaml"))
    args = [arg for path in crds for arg in ("-f", path)]
    applied = control_plane.kubectl("apply", "--validate=strict", *args)
    assert "customresourcedefinition.apiextensions.k8s.io/gicjobs.gic.io" in applied.stdout
    control_plane.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s",
        "crd/gicjobs.gic.io", "crd/savepoints.gic.io",
    )  # fmt: skip

    def explained() -> str | None:
        result = control_plane.kubectl("explain", "gicjob.spec", check=False)
        return result.stdout if result.returncode == 0 else None

    text: str = control_plane.wait_for("kubectl explain gicjob.spec", explained, 60)
    assert "KIND:       GICJob" in text
    assert "FIELDS:" in text
    assert "checkpointing" in text


def test_the_kubeconfig_files_work_for_kubectl(control_plane: ControlPlane) -> None:
    who = control_plane.kubectl("auth", "whoami", "-o", "json").stdout
    info = json.loads(who)["status"]["userInfo"]
    assert info["username"] == "gic-admin"
    assert "system:masters" in info["groups"]
    node_config: Path = control_plane.workdir / "kubelet.kubeconfig"
    node = control_plane.kubectl("auth", "whoami", "-o", "json", kubeconfig=node_config).stdout
    assert json.loads(node)["status"]["userInfo"]["username"] == f"system:node:{NODE_NAME}"
