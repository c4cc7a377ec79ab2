"""The local kubelet: pods of the emulator run as real local processes."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gic_operator.testing.kube_client import KubeClient, KubeClientError
from gic_operator.testing.kube_emulator import KubeEmulator
from gic_operator.testing.kubectl import Kubectl, wait_until
from gic_operator.testing.kubelet import NODE_NAME, LocalKubelet, default_rewrite

PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture
def kubelet(kube: KubeEmulator, kubeconfig: Path, tmp_path: Path) -> Iterator[LocalKubelet]:
    with LocalKubelet(
        kubeconfig, "default", workdir=tmp_path / "pods", extra_env={"GIC_TEST": "1"}
    ) as running:
        kube.set_log_source(running.log_source)
        yield running


def _pod(name: str, code: str, **container: Any) -> dict[str, Any]:
    spec = {"name": "main", "image": "local", "command": ["python", "-c", code], **container}
    return {"metadata": {"name": name}, "spec": {"containers": [spec]}}


def _finished(client: KubeClient, name: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        pod: dict[str, Any] = client.get(f"{PODS}/{name}")
        return pod if pod["status"].get("phase") in ("Succeeded", "Failed") else None

    return wait_until(done, timeout=20, what=f"pod {name} to finish")


def _terminated(pod: dict[str, Any]) -> dict[str, Any]:
    state: dict[str, Any] = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    return state


def _gone(client: KubeClient, name: str) -> bool:
    try:
        client.get(f"{PODS}/{name}")
    except KubeClientError as exc:
        return exc.status == 404
    return False


def test_default_rewrite_maps_python_and_gic_to_this_environment() -> None:
    assert default_rewrite(["python3", "-V"]) == [sys.executable, "-V"]
    assert default_rewrite(["gic", "run"])[0] == str(Path(sys.executable).with_name("gic"))
    assert default_rewrite(["java", "-version"]) == ["java", "-version"]


def test_pod_succeeds_writes_its_file_and_reports_status(
    kubelet: LocalKubelet, client: KubeClient, kubectl: Kubectl, tmp_path: Path
) -> None:
    out = tmp_path / "written.txt"
    code = f"import os; open({str(out)!r}, 'w').write(os.getcwd()); print('done')"
    client.request("POST", PODS, _pod("writer", code, workingDir=str(tmp_path)))

    pod = _finished(client, "writer")
    assert pod["status"]["phase"] == "Succeeded"
    assert pod["spec"]["nodeName"] == NODE_NAME and pod["status"]["podIP"] == "127.0.0.1"
    terminated = _terminated(pod)
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
    assert out.read_text() == str(tmp_path)
    assert kubelet.log("writer") == "done\n"
    assert kubectl("logs", "writer").stdout == "done\n"
    assert kubelet.processes() == {}


def test_pod_exit_code_is_reported_as_failed(kubelet: LocalKubelet, client: KubeClient) -> None:
    client.request("POST", PODS, _pod("three", "import sys; sys.exit(3)"))
    pod = _finished(client, "three")
    assert pod["status"]["phase"] == "Failed"
    assert (_terminated(pod)["exitCode"], _terminated(pod)["reason"]) == (3, "Error")


def test_killed_pod_fails_with_137(kubelet: LocalKubelet, client: KubeClient) -> None:
    client.request("POST", PODS, _pod("sleeper", "import time; time.sleep(60)"))
    wait_until(
        lambda: client.get(f"{PODS}/sleeper")["status"].get("phase") == "Running",
        what="the sleeper running",
    )
    pid = kubelet.processes()["sleeper"]
    kubelet.kill("sleeper")
    pod = _finished(client, "sleeper")
    assert pod["status"]["phase"] == "Failed" and _terminated(pod)["exitCode"] == 137
    assert "sleeper" not in kubelet.processes()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_deleted_pod_is_terminated_then_gone(
    kubelet: LocalKubelet, client: KubeClient, tmp_path: Path
) -> None:
    marker = tmp_path / "terminated"
    code = (
        "import signal, sys, time\n"
        "def stop(*_):\n"
        f"    open({str(marker)!r}, 'w').write('bye')\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    client.request("POST", PODS, _pod("graceful", code))
    wait_until(lambda: kubelet.log("graceful") == "ready\n", what="the pod's SIGTERM handler")
    pid = kubelet.processes()["graceful"]

    deleting = client.delete(f"{PODS}/graceful")
    assert deleting["metadata"]["deletionTimestamp"]  # kept until the kubelet is done
    wait_until(lambda: _gone(client, "graceful"), what="the pod to be gone")
    assert marker.read_text() == "bye"
    assert kubelet.processes() == {}
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_pod_with_finalizer_stays_after_its_process_ends(
    kubelet: LocalKubelet, client: KubeClient
) -> None:
    pod = _pod("held", "import time; time.sleep(60)")
    pod["metadata"]["finalizers"] = ["example.test/hold"]
    client.request("POST", PODS, pod)
    wait_until(lambda: "held" in kubelet.processes(), what="the pod running")
    client.delete(f"{PODS}/held")
    wait_until(lambda: "held" not in kubelet.processes(), what="the process to end")
    held = wait_until(
        lambda: (
            (p := client.get(f"{PODS}/held"))["metadata"].get("deletionGracePeriodSeconds") == 0
            and p
        ),
        what="the kubelet's final deletion",
    )
    assert held["metadata"]["finalizers"] == ["example.test/hold"]
    client.merge_patch(f"{PODS}/held", {"metadata": {"finalizers": None}})
    assert _gone(client, "held")


def test_env_from_secret_configmap_and_fields_reaches_the_process(
    kubelet: LocalKubelet, client: KubeClient
) -> None:
    secrets = "/api/v1/namespaces/default/secrets"
    client.request("POST", secrets, {"metadata": {"name": "creds"}, "stringData": {"pw": "s3"}})
    configmaps = "/api/v1/namespaces/default/configmaps"
    client.request("POST", configmaps, {"metadata": {"name": "cfg"}, "data": {"MODE": "fast"}})
    env = [
        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "pw"}}},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "GREETING", "value": "hi-$(POD)"},
    ]
    code = (
        "import os\n"
        "keys = ['PASSWORD', 'POD', 'GREETING', 'CFG_MODE', 'GIC_TEST']\n"
        "print(' '.join(os.environ[k] for k in keys))\n"
    )
    env_from = [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}]
    client.request("POST", PODS, _pod("envy", code, env=env, envFrom=env_from))
    assert _finished(client, "envy")["status"]["phase"] == "Succeeded"
    assert kubelet.log("envy") == "s3 envy hi-envy fast 1\n"


def test_missing_secret_keeps_the_pod_waiting_until_a_resync_finds_it(
    kube: KubeEmulator, kubeconfig: Path, client: KubeClient, tmp_path: Path
) -> None:
    env = [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "late", "key": "k"}}}]
    client.request("POST", PODS, _pod("blocked", "import os; print(os.environ['X'])", env=env))
    with LocalKubelet(kubeconfig, "default", workdir=tmp_path / "pods", resync_s=1) as kubelet:

        def waiting() -> dict[str, Any] | None:
            statuses = client.get(f"{PODS}/blocked")["status"].get("containerStatuses") or []
            return statuses[0]["state"].get("waiting") if statuses else None

        state = wait_until(waiting, what="the waiting container status")
        assert state["reason"] == "CreateContainerConfigError"
        assert client.get(f"{PODS}/blocked")["status"]["phase"] == "Pending"
        assert kubelet.processes() == {}

        secret = {"metadata": {"name": "late"}, "stringData": {"k": "finally"}}
        client.request("POST", "/api/v1/namespaces/default/secrets", secret)
        assert _finished(client, "blocked")["status"]["phase"] == "Succeeded"
        assert kubelet.log("blocked") == "finally\n"


def test_exit_kills_every_process_and_reports_them_failed(
    kube: KubeEmulator, kubeconfig: Path, tmp_path: Path
) -> None:
    client = KubeClient(kubeconfig)
    with LocalKubelet(kubeconfig, "default", workdir=tmp_path / "pods") as kubelet:
        client.request("POST", PODS, _pod("long", "import time; time.sleep(60)"))
        wait_until(lambda: "long" in kubelet.processes(), what="the pod running")
        pid = kubelet.processes()["long"]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    pod = client.get(f"{PODS}/long")
    assert pod["status"]["phase"] == "Failed" and _terminated(pod)["exitCode"] == 137
    client.delete(f"{PODS}/long")  # a finished pod goes at once
    assert _gone(client, "long")
